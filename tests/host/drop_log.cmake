# Rate-limited drop warnings.
th_add_gtest(drop_log_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/drop_log_test.cc LIBS tunehost_host)
