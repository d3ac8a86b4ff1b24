# Keys and roles (wire-format.md §9).
th_add_gtest(key_ring_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/key_ring_test.cc LIBS tunehost_host)
