th_add_gtest(engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_test.cc LIBS tunehost_host)
