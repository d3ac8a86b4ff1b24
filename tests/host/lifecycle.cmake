# Issue #5: the store, resume, trial events and middleware.
th_add_gtest(lifecycle_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/lifecycle_test.cc
             LIBS tunehost_host SQLite::SQLite3)
