# Python worker, function API and trial helper (tools/python/tunehost). Included
# by tests/tools/CMakeLists.txt. The tests play the host with real ZeroMQ sockets.
add_test(NAME tunehost_python_worker
         COMMAND ${Python3_EXECUTABLE} -m unittest discover -s ${CMAKE_CURRENT_LIST_DIR} -p "test_*.py")
set_tests_properties(tunehost_python_worker PROPERTIES
  ENVIRONMENT PYTHONPATH=${PROJECT_SOURCE_DIR}/tools/python
  TIMEOUT 120)
