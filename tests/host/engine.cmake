th_add_gtest(engine_test
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_test.cc
                     ${CMAKE_CURRENT_LIST_DIR}/engine_tuner_test.cc
                     ${CMAKE_CURRENT_LIST_DIR}/engine_offers_test.cc
                     ${CMAKE_CURRENT_LIST_DIR}/engine_control_test.cc
                     ${CMAKE_CURRENT_LIST_DIR}/engine_prefetch_test.cc
             LIBS tunehost_host)
