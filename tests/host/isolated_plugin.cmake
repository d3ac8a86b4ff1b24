# Isolated plugins: real runner processes, the fault fixture of
# tests/plugins/fixtures (configured after this folder, hence the spelled-out
# path) and the built-in evolution tuner (NNI's credit pattern).
th_add_gtest(isolated_plugin_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/isolated_plugin_test.cc
             LIBS tunehost_host)
target_compile_definitions(isolated_plugin_test PRIVATE
  TH_TEST_PLUGIN_DIR="${CMAKE_BINARY_DIR}/test-plugins"
  TH_PLUGIN_DIR="${TH_PLUGIN_OUTPUT_DIR}")
add_dependencies(isolated_plugin_test th_test_plugins evolution tunehost-plugin-runner)
