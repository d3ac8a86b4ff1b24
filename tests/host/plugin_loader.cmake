# Plugin loader tests, against the fixture plugins of tests/plugins/fixtures
# (configured after this folder, hence the spelled-out path).
th_add_gtest(plugin_loader_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/plugin_loader_test.cc
             LIBS tunehost_host GTest::gmock)
target_compile_definitions(plugin_loader_test PRIVATE
  TH_TEST_PLUGIN_DIR="${CMAKE_BINARY_DIR}/test-plugins")
add_dependencies(plugin_loader_test th_test_plugins)
