# Server tests: a real Server on loopback, driven by a worker played by the test.
th_add_plugin(recording_plugin SOURCES ${CMAKE_CURRENT_LIST_DIR}/fixtures/recording_plugin.cc
              OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/test-plugins/recording)
target_link_libraries(recording_plugin PRIVATE th_warnings)
th_add_gtest(server_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_test.cc LIBS tunehost_host)
target_compile_definitions(server_test PRIVATE
  TH_RECORDING_PLUGIN_DIR="${CMAKE_BINARY_DIR}/test-plugins/recording")
add_dependencies(server_test recording_plugin)
