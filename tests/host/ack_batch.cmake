# Acknowledgement spans: one loop turn's MAs (wire-format.md §5.2).
th_add_gtest(ack_batch_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ack_batch_test.cc LIBS tunehost_host)
