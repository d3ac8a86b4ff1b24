# NNI config corpus: every file of fixtures/nni_corpus/ through the experiment
# file reader, each with the outcome the test's table writes down.
th_add_gtest(nni_corpus_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/nni_corpus_test.cc
             LIBS tunehost_host)
target_compile_definitions(nni_corpus_test PRIVATE
  TH_NNI_CORPUS_DIR="${CMAKE_CURRENT_LIST_DIR}/fixtures/nni_corpus")
