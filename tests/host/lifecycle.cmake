# The store, resume, trial events and middleware (wire-format.md §5.3).
th_add_gtest(lifecycle_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/lifecycle_test.cc
                                    ${CMAKE_CURRENT_LIST_DIR}/resume_test.cc
             LIBS tunehost_host SQLite::SQLite3)
# The store's offer journal, a part of the store with no public header.
th_add_gtest(offer_journal_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/offer_journal_test.cc
             LIBS tunehost_host SQLite::SQLite3)
target_include_directories(offer_journal_test PRIVATE ${PROJECT_SOURCE_DIR}/host/src)
