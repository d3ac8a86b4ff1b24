# Experiment file reader and local-worker supervisor tests.
th_add_gtest(experiment_config_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/experiment_config_test.cc
             LIBS tunehost_host)
th_add_gtest(local_workers_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/local_workers_test.cc
             LIBS tunehost_host)
