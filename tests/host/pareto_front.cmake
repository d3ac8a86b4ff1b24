# The Pareto front the host keeps for multi-objective experiments.
th_add_gtest(pareto_front_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/pareto_front_test.cc
             LIBS tunehost_host nlohmann_json::nlohmann_json)
