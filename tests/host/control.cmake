# Control API tests (wire-format.md §4.2): a real Server on loopback queried over its
# control socket; the recording plugin comes from server.cmake.
th_add_gtest(control_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/control_test.cc
             LIBS tunehost_host nlohmann_json::nlohmann_json)
target_compile_definitions(control_test PRIVATE
  TH_RECORDING_PLUGIN_DIR="${CMAKE_BINARY_DIR}/test-plugins/recording")
add_dependencies(control_test recording_plugin)
