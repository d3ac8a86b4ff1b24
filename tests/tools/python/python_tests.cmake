# Python worker, function API and trial helper (tools/python/tunehost). Included
# by tests/tools/CMakeLists.txt. The tests play the host with real ZeroMQ sockets.
add_test(NAME tunehost_python_worker
         COMMAND ${Python3_EXECUTABLE} -m unittest discover -s ${CMAKE_CURRENT_LIST_DIR} -p "test_*.py")
set_tests_properties(tunehost_python_worker PROPERTIES
  ENVIRONMENT PYTHONPATH=${PROJECT_SOURCE_DIR}/tools/python
  TIMEOUT 120)

# tunehost.experiment against a real `tunehost run`, and the NNI-style example
# (examples/nni-style) run unchanged. They need tunehost, tunehost-worker and
# the random, tpe and medianstop plugins built; without TUNEHOST_BIN_DIR (the
# discover run above) these classes skip, here a missing binary fails.
set(_th_py_host_env
  "PYTHONPATH=${PROJECT_SOURCE_DIR}/tools/python"
  "TUNEHOST_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY}"
  "TUNEHOST_PLUGIN_DIR=${TH_PLUGIN_OUTPUT_DIR}"
  "TUNEHOST_TEST_REQUIRE_BINARIES=1")
add_test(NAME tunehost_python_experiment
         COMMAND ${Python3_EXECUTABLE} -m unittest -v test_experiment.ExperimentTest
         WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR})
add_test(NAME tunehost_python_nni_example
         COMMAND ${Python3_EXECUTABLE} -m unittest -v test_nni.NniStyleExampleTest
         WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR})
add_test(NAME tunehost_python_nni_quickstart
         COMMAND ${Python3_EXECUTABLE} -m unittest -v test_nni_quickstart
         WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR})
set_tests_properties(tunehost_python_experiment tunehost_python_nni_example
                     tunehost_python_nni_quickstart PROPERTIES
  ENVIRONMENT "${_th_py_host_env}"
  TIMEOUT 300)
