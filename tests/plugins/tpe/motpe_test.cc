// Tests of MOTPE (plugins/tpe with class_args objectives / constraints) and
// of the SDK's hypervolume, greedy hypervolume subset selection and split
// order (tunehost/sdk/cpp/pareto.h) on hand-computed values; the search on
// ZDT1 against random sampling and against the single-objective model; a
// constrained optimum; saved state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "plugins/pareto_testing.h"
#include "plugins/plugin_testing.h"
#include "plugins/tuner_testing.h"
#include "tpe/tpe_tuner.h"
#include "tunehost/sdk/cpp/pareto.h"

namespace tunehost::plugins::testing {
namespace {

sdk::Candidate C(std::vector<double> values, double violation = 0) {
  return sdk::Candidate{std::move(values), violation};
}

TEST(HypervolumeTest, BoxesAndTheirOverlapInTwoAndThreeValues) {
  EXPECT_DOUBLE_EQ(sdk::Hypervolume({{1, 2}, {2, 1}}, {3, 3}), 3.0);  // 2 + 2 - 1
  EXPECT_DOUBLE_EQ(sdk::Hypervolume({{1, 2}, {2, 1}, {2, 2}}, {3, 3}), 3.0)
      << "a dominated point adds nothing";
  EXPECT_DOUBLE_EQ(sdk::Hypervolume({{0, 0, 0}}, {1, 2, 3}), 6.0);
  EXPECT_DOUBLE_EQ(sdk::Hypervolume({{0, 0, 1}, {1, 1, 0}}, {2, 2, 2}), 5.0);  // 4 + 2 - 1
  EXPECT_DOUBLE_EQ(sdk::Hypervolume({{0, 5}}, {3, 3}), 0.0) << "beyond the reference";
  EXPECT_DOUBLE_EQ(sdk::Hypervolume({}, {3, 3}), 0.0);
}

TEST(HypervolumeTest, GreedySubsetTakesTheKneeThenTheEarlierExtreme) {
  // Reference max(1.1 w, 0.9 w) of the worst (4, 4): (4.4, 4.4). Alone,
  // (1, 1) covers 11.56 and the ends 1.76; next to it each end adds 0.4.
  const std::vector<sdk::Candidate> c = {C({0, 4}), C({1, 1}), C({4, 0})};
  EXPECT_EQ(sdk::GreedyHypervolumeSubset(c, {0, 1, 2}, 1), (std::vector<size_t>{1}));
  EXPECT_EQ(sdk::GreedyHypervolumeSubset(c, {0, 1, 2}, 2), (std::vector<size_t>{1, 0}));
  EXPECT_EQ(sdk::GreedyHypervolumeSubset(c, {0, 1, 2}, 5).size(), 3u);
  // Values near the largest double: the reference point overflows and every
  // gain is NaN; the subset is still k distinct members.
  const std::vector<sdk::Candidate> huge = {C({1.7e308, -1.7e308}), C({-1.7e308, 1.7e308}),
                                            C({0, 0})};
  std::vector<size_t> picked = sdk::GreedyHypervolumeSubset(huge, {0, 1, 2}, 2);
  ASSERT_EQ(picked.size(), 2u);
  EXPECT_NE(picked[0], picked[1]);
}

TEST(HypervolumeTest, SplitOrderIsFrontsThenTheBoundaryFrontByHypervolume) {
  // Front 0: 0, 1, 2; front 1: 3; the infeasible 4 comes last.
  const std::vector<sdk::Candidate> c = {C({0, 4}), C({1, 1}), C({4, 0}), C({2, 2}),
                                         C({0, 0}, 1)};
  std::vector<size_t> order = sdk::SplitOrder(c, 1);
  EXPECT_EQ(order.front(), 1u) << "the knee of front 0";
  EXPECT_EQ(order.size(), 5u);
  order = sdk::SplitOrder(c, 4);
  std::vector<size_t> head(order.begin(), order.begin() + 3);
  std::sort(head.begin(), head.end());
  EXPECT_EQ(head, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(order[3], 3u);
  EXPECT_EQ(order[4], 4u);
  // A front with an infinite value (a NaN objective) is cut by crowding
  // distance: the two ends of the first value (infinite distance) first.
  const double inf = std::numeric_limits<double>::infinity();
  order = sdk::SplitOrder({C({0, 4}), C({1, 1}), C({4, 0}), C({-1, inf})}, 2);
  EXPECT_EQ(order, (std::vector<size_t>{2, 3, 0, 1}));
}

// --- the tuner ---

const Json kZdt1Objectives = {{"objectives", {{"f1", "minimize"}, {"f2", "minimize"}}}};

std::unique_ptr<TpeTuner> Make(const RecordingHost& host, Json args,
                               const Json& space = Unit5()) {
  if (!args.contains("seed")) args["seed"] = 5;
  return MakeTunerOf<TpeTuner>(host, space, args);
}

TEST(MotpeTest, ObjectivesAndConstraintsAreCheckedAndNamed) {
  RecordingHost host;
  EXPECT_EQ(Make(host, Json::object())->objective_set(), nullptr);
  auto t = Make(host, kZdt1Objectives);
  ASSERT_NE(t->objective_set(), nullptr);
  EXPECT_EQ(t->objective_set()->objectives().size(), 2u);
  auto c = Make(host, {{"constraints", {"mem"}}, {"optimize_mode", "maximize"}});
  ASSERT_NE(c->objective_set(), nullptr);
  EXPECT_TRUE(c->objective_set()->objectives()[0].maximize);
  EXPECT_EQ(c->objective_set()->constraints(), std::vector<std::string>{"mem"});
  ExpectError(Constructing<TpeTuner>(
                  host, R"({"objectives": {"f": "minimize"}, "optimize_mode": "maximize"})"),
              TH_INVALID_ARGUMENT, {"tpe", "optimize_mode"});
  ExpectError(Constructing<TpeTuner>(host, R"({"objectives": {"f": "down"}})"),
              TH_INVALID_ARGUMENT, {"tpe", "objectives", "\"f\""});
  ExpectError(Constructing<TpeTuner>(host, R"({"objectives": []})"), TH_INVALID_ARGUMENT,
              {"objectives"});
  ExpectError(Constructing<TpeTuner>(
                  host, R"({"objectives": {"f": "minimize"}, "constraints": ["f"]})"),
              TH_INVALID_ARGUMENT, {"constraints", "twice"});
}

TEST(MotpeTest, AResultWithoutAnObjectiveIsNotUsedAndSaysWhy) {
  RecordingHost host;
  auto t = Make(host, kZdt1Objectives);
  const std::string p = *Generate(*t, 0);
  Report(*t, 0, p, {{"default", 1}, {"f1", 0.5}});
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "\"f2\""));
  const std::string state = t->SaveState();
  EXPECT_EQ(ToJson(state)["results"].size(), 0u) << "nothing kept of it";
}

TEST(MotpeTest, BeatsRandomSamplingAndTheScalarModelOnZdt1) {
  // 200 trials in batches of 4: MOTPE's results cover more of ZDT1's front
  // (hypervolume to (1, 10); the true front's is 9.67) than random search
  // (every trial a start-up trial) and than the same model on f1 alone.
  for (uint64_t seed : {1, 2, 3}) {
    RecordingHost host;
    Json args = kZdt1Objectives;
    args["seed"] = seed;
    auto motpe = Make(host, args);
    Json random_args = args;
    random_args["tpe_args"] = {{"n_startup_jobs", 1000}};
    auto random = Make(host, random_args);
    auto scalar = Make(host, {{"objectives", {{"f1", "minimize"}}}, {"seed", seed}});
    const double hv = RunZdt1(*motpe, 200, 4), hv_random = RunZdt1(*random, 200, 4),
                 hv_scalar = RunZdt1(*scalar, 200, 4);
    std::printf("seed %llu: hypervolume motpe %.3f, random %.3f, f1 alone %.3f\n",
                static_cast<unsigned long long>(seed), hv, hv_random, hv_scalar);
    EXPECT_GT(hv, hv_random + 0.3) << "seed " << seed;
    EXPECT_GT(hv, hv_scalar + 0.3) << "seed " << seed;
  }
}

TEST(MotpeTest, ConstraintsKeepTheSearchFeasible) {
  // Minimize x0 subject to 0.3 - x0 <= 0: the best feasible result gets near
  // x0 = 0.3, and far more of the last 50 suggestions are feasible and near
  // it (x0 in [0.3, 0.45]) than without the constraint (which drives x0 to 0).
  struct Outcome {
    int late_feasible = 0;
    double best = 1;
  };
  auto run = [](const Json& args) {
    RecordingHost host;
    auto t = Make(host, args);
    Outcome o;
    for (int64_t id = 0; id < 150; ++id) {
      std::string p = *Generate(*t, id);
      const double x0 = ToJson(p)["x0"].get<double>();
      Report(*t, id, p, {{"default", x0}, {"c", 0.3 - x0}});
      t->TrialEnd(id, true);
      if (id >= 100 && x0 >= 0.3 && x0 <= 0.45) ++o.late_feasible;
      if (x0 >= 0.3) o.best = std::min(o.best, x0);
    }
    return o;
  };
  for (uint64_t seed : {1, 2, 3}) {
    const Outcome with = run({{"constraints", {"c"}}, {"seed", seed}});
    const Outcome without = run({{"seed", seed}});
    std::printf("seed %llu: feasible and near 0.3 of the last 50: %d with the constraint, %d without\n",
                static_cast<unsigned long long>(seed), with.late_feasible,
                without.late_feasible);
    EXPECT_GE(with.late_feasible, 10) << "seed " << seed;
    EXPECT_GE(with.late_feasible, without.late_feasible + 8) << "seed " << seed;
    EXPECT_LT(with.best, 0.31) << "seed " << seed;
  }
}

TEST(MotpeTest, SavedStateRepeatsTheRunAndKnowsItsObjectives) {
  RecordingHost host;
  auto a = Make(host, kZdt1Objectives);
  RunZdt1(*a, 30, 3);
  std::vector<std::string> running = GenerateN(*a, 2, 100);
  const std::string state = a->SaveState();
  auto b = Make(host, kZdt1Objectives);
  b->LoadState(state);
  for (auto* t : {a.get(), b.get()}) {
    for (size_t i = 0; i < 2; ++i) Report(*t, 100 + static_cast<int64_t>(i), running[i], Zdt1(ToJson(running[i])));
  }
  EXPECT_EQ(GenerateN(*a, 10, 200), GenerateN(*b, 10, 200));
  auto other = Make(host, {{"objectives", {{"f1", "minimize"}, {"f2", "maximize"}}}});
  ExpectError([&] { other->LoadState(state); }, TH_INVALID_ARGUMENT, {"objectives"});
  auto single = Make(host, Json::object());
  ExpectError([&] { single->LoadState(state); }, TH_INVALID_ARGUMENT, {"objectives"});
  ExpectError([&] { a->LoadState(single->SaveState()); }, TH_INVALID_ARGUMENT, {"objectives"});
}

}  // namespace
}  // namespace tunehost::plugins::testing
