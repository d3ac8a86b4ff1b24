# The store, resume, trial events and middleware (wire-format.md §5.3).
th_add_gtest(lifecycle_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/lifecycle_test.cc
                                    ${CMAKE_CURRENT_LIST_DIR}/resume_test.cc
             LIBS tunehost_host SQLite::SQLite3)
