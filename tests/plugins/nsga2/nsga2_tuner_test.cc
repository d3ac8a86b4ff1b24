// Tests of plugins/nsga2/nsga2_tuner.{h,cc} and the SDK's Pareto helpers
// (tunehost/sdk/cpp/pareto.h): constrained domination, non-dominated fronts,
// crowding distance and the elite cut; Optuna's defaults and class_args;
// named objectives and constraints read from result maps; generations; the
// search on a two-objective problem against random sampling; a constrained
// optimum; saved state.
#include "nsga2/nsga2_tuner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "plugins/plugin_testing.h"
#include "plugins/pareto_testing.h"
#include "plugins/tuner_testing.h"
#include "tunehost/sdk/cpp/pareto.h"

namespace tunehost::plugins::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

sdk::Candidate C(std::vector<double> values, double violation = 0) {
  return sdk::Candidate{std::move(values), violation};
}

// --- the Pareto helpers ---

TEST(ParetoTest, ConstrainedDominationIsDebs) {
  EXPECT_TRUE(sdk::Dominates({1, 2}, {1, 3}));
  EXPECT_FALSE(sdk::Dominates({1, 2}, {1, 2})) << "equal points do not dominate";
  EXPECT_FALSE(sdk::Dominates({1, 3}, {2, 2}));
  // Feasible beats infeasible whatever the values; of two infeasible the
  // smaller violation wins; of two feasible, Pareto.
  EXPECT_TRUE(sdk::ConstrainedDominates(C({9, 9}), C({0, 0}, 0.1)));
  EXPECT_FALSE(sdk::ConstrainedDominates(C({0, 0}, 0.1), C({9, 9})));
  EXPECT_TRUE(sdk::ConstrainedDominates(C({9, 9}, 0.1), C({0, 0}, 0.2)));
  EXPECT_FALSE(sdk::ConstrainedDominates(C({0, 0}, 0.2), C({9, 9}, 0.1)));
  EXPECT_TRUE(sdk::ConstrainedDominates(C({0, 1}), C({1, 1})));
  EXPECT_FALSE(sdk::ConstrainedDominates(C({0, 2}), C({1, 1})));
}

TEST(ParetoTest, FrontsPeelInOrder) {
  // Front 0: (0,3) (1,1) (3,0); front 1: (2,2) (1,3); front 2: (3,3); an
  // infeasible point comes after every feasible one.
  const std::vector<sdk::Candidate> c = {C({2, 2}), C({0, 3}), C({3, 3}), C({1, 1}),
                                         C({0, 0}, 1), C({3, 0}), C({1, 3})};
  auto fronts = sdk::NondominatedFronts(c);
  ASSERT_EQ(fronts.size(), 4u);
  auto sorted = [](std::vector<size_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(fronts[0]), (std::vector<size_t>{1, 3, 5}));
  EXPECT_EQ(sorted(fronts[1]), (std::vector<size_t>{0, 6}));
  EXPECT_EQ(sorted(fronts[2]), (std::vector<size_t>{2}));
  EXPECT_EQ(sorted(fronts[3]), (std::vector<size_t>{4}));
}

TEST(ParetoTest, CrowdingDistanceAndTheEliteCut) {
  // One front of five points on a line: the ends are infinitely far, the
  // others by their neighbours' gaps over the range, summed over both values.
  const std::vector<sdk::Candidate> c = {C({0, 4}), C({1, 3}), C({3, 1}), C({4, 0}),
                                         C({2, 2})};
  const std::vector<double> d = sdk::CrowdingDistances(c, {0, 1, 2, 3, 4});
  EXPECT_EQ(d[0], kInf);
  EXPECT_EQ(d[3], kInf);
  EXPECT_DOUBLE_EQ(d[1], 2 * (2.0 / 4));  // neighbours 0 and 2 in both values
  EXPECT_DOUBLE_EQ(d[4], 2 * (2.0 / 4));
  EXPECT_DOUBLE_EQ(d[2], 2 * (2.0 / 4));
  // Three of a front of five plus a dominated point: the ends first, then
  // the most isolated.
  std::vector<sdk::Candidate> e = {C({0, 4}), C({0.5, 3.5}), C({2, 2}), C({4, 0}),
                                   C({3.9, 0.1}), C({5, 5})};
  std::vector<size_t> elite = sdk::SelectElite(e, 3);
  std::sort(elite.begin(), elite.end());
  EXPECT_EQ(elite, (std::vector<size_t>{0, 2, 3}));
  elite = sdk::SelectElite(e, 6);
  EXPECT_EQ(elite.size(), 6u);
  EXPECT_EQ(elite.back(), 5u) << "the dominated point comes last";
  EXPECT_EQ(sdk::SelectElite(e, 10).size(), 6u);
}

// --- the tuner ---

const Json kTwoObjectives = {{"objectives", {{"f1", "minimize"}, {"f2", "minimize"}}}};

std::unique_ptr<Nsga2Tuner> Make(const RecordingHost& host, Json args, const Json& space = Unit5()) {
  if (!args.contains("seed")) args["seed"] = 3;
  return MakeTunerOf<Nsga2Tuner>(host, space, args);
}

TEST(Nsga2Test, DefaultsAreOptunas) {
  RecordingHost host;
  auto t = Make(host, Json::object());
  EXPECT_EQ(t->population_size(), 50);
  EXPECT_DOUBLE_EQ(t->crossover_prob(), 0.9);
  EXPECT_DOUBLE_EQ(t->swapping_prob(), 0.5);
  EXPECT_FALSE(t->mutation_prob().has_value()) << "1 / the number of parameters";
  ASSERT_EQ(t->objectives().size(), 1u);
  EXPECT_EQ(t->objectives()[0].name, "default");
  EXPECT_TRUE(t->objectives()[0].maximize) << "NNI's optimize_mode default";
  auto m = Make(host, {{"optimize_mode", "minimize"}, {"constraints", {"mem"}}});
  EXPECT_FALSE(m->objectives()[0].maximize);
  EXPECT_EQ(m->constraints(), std::vector<std::string>{"mem"});
}

TEST(Nsga2Test, ClassArgsAreCheckedAndNamed) {
  RecordingHost host;
  ExpectError(Constructing<Nsga2Tuner>(host, R"({"objectives": {"f": "smallest"}})"),
              TH_INVALID_ARGUMENT, {"objectives", "\"f\"", "minimize"});
  ExpectError(Constructing<Nsga2Tuner>(host, R"({"objectives": {}})"), TH_INVALID_ARGUMENT,
              {"objectives", "1 to 32"});
  ExpectError(Constructing<Nsga2Tuner>(host, R"({"objectives": ["f"]})"), TH_INVALID_ARGUMENT,
              {"objectives", "map"});
  ExpectError(Constructing<Nsga2Tuner>(
                  host, R"({"objectives": {"f": "minimize"}, "optimize_mode": "maximize"})"),
              TH_INVALID_ARGUMENT, {"optimize_mode", "objectives"});
  ExpectError(Constructing<Nsga2Tuner>(
                  host, R"({"objectives": {"f": "minimize"}, "constraints": ["f"]})"),
              TH_INVALID_ARGUMENT, {"constraints", "\"f\" twice"});
  ExpectError(Constructing<Nsga2Tuner>(host, R"({"constraints": "mem"})"), TH_INVALID_ARGUMENT,
              {"constraints", "list"});
  ExpectError(Constructing<Nsga2Tuner>(host, R"({"constraints": [""]})"), TH_INVALID_ARGUMENT,
              {"constraints", "non-empty string"});
  ExpectError(Constructing<Nsga2Tuner>(host, R"({"population_size": 1})"), TH_INVALID_ARGUMENT,
              {"population_size"});
  ExpectError(Constructing<Nsga2Tuner>(host, R"({"mutation_prob": 1.5})"), TH_INVALID_ARGUMENT,
              {"mutation_prob"});
  ExpectError(Constructing<Nsga2Tuner>(host, R"({"population": 10})"), TH_INVALID_ARGUMENT,
              {"population"});
}

TEST(Nsga2Test, ScoresReadNamedObjectivesAndConstraints) {
  RecordingHost host;
  auto t = Make(host, {{"objectives", {{"default", "maximize"}, {"latency", "minimize"}}},
                       {"constraints", {"mem", "power"}}});
  msgpack::object_handle v =
      MsgpackOf({{"default", 0.9}, {"latency", 12.5}, {"mem", -1}, {"power", 0.25}});
  std::optional<sdk::Candidate> c = t->Score(v.get(), 0.9);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->values, (std::vector<double>{-0.9, 12.5})) << "maximized objectives negated";
  EXPECT_DOUBLE_EQ(c->violation, 0.25) << "the positive constraint values summed";
  // A NaN objective ranks worst; a missing constraint is an infinite violation.
  v = MsgpackOf({{"default", 0.9}, {"latency", std::nan("")}, {"mem", 0}});
  c = t->Score(v.get(), 0.9);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->values[1], kInf);
  EXPECT_EQ(c->violation, kInf);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "\"power\""));
  // A missing objective: the result is not used, and the warning names it.
  v = MsgpackOf(0.5);
  EXPECT_FALSE(t->Score(v.get(), 0.5).has_value());
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "\"latency\""));
}

TEST(Nsga2Test, GenerationsCloseAfterPopulationSizeResults) {
  RecordingHost host;
  auto t = Make(host, {{"population_size", 4}, {"objectives", {{"f1", "minimize"}, {"f2", "minimize"}}}});
  std::vector<std::string> params = GenerateN(*t, 6, 0);
  // Four results close generation 0: every result joins the parents (no
  // parents before), the fifth and sixth results start generation 1.
  for (int i = 0; i < 3; ++i) Report(*t, i, params[static_cast<size_t>(i)], Zdt1(ToJson(params[static_cast<size_t>(i)])));
  EXPECT_EQ(t->generation(), 0);
  EXPECT_EQ(t->current().size(), 3u);
  // A result without the objectives is not counted.
  Report(*t, 3, params[3], Json(1.0));
  EXPECT_EQ(t->generation(), 0);
  Report(*t, 4, params[4], Zdt1(ToJson(params[4])));
  EXPECT_EQ(t->generation(), 1);
  EXPECT_EQ(t->parents().size(), 4u);
  EXPECT_TRUE(t->current().empty());
  // A straggler of generation 0 joins generation 1.
  Report(*t, 5, params[5], Zdt1(ToJson(params[5])));
  EXPECT_EQ(t->current().size(), 1u);
  // Failed trials and unknown ids change nothing.
  t->TrialEnd(3, false);
  t->TrialEnd(99, true);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "not running here"));
}

TEST(Nsga2Test, BeatsRandomSamplingOnZdt1) {
  // 600 trials in batches of 8: NSGA-II's results cover more of ZDT1's
  // front than random sampling's in every seed (hypervolume to (1, 10); the
  // true front's is 9.67).
  for (uint64_t seed : {1, 2, 3}) {
    RecordingHost host;
    Json args = kTwoObjectives;
    args["seed"] = seed;
    args["population_size"] = 20;
    auto nsga = Make(host, args);
    Json random_args = args;
    random_args["crossover_prob"] = 0;
    random_args["mutation_prob"] = 1;  // every child re-sampled: random search
    auto random = Make(host, random_args);
    const double hv = RunZdt1(*nsga, 600, 8), hv_random = RunZdt1(*random, 600, 8);
    std::printf("seed %llu: hypervolume nsga2 %.3f, random %.3f\n", static_cast<unsigned long long>(seed), hv, hv_random);
    EXPECT_GT(hv, 9.0) << "seed " << seed;
    EXPECT_GT(hv, hv_random + 0.5) << "seed " << seed << ": random " << hv_random;
  }
}

TEST(Nsga2Test, ConstraintsKeepTheSearchFeasible) {
  // Minimize x0 subject to 0.3 - x0 <= 0: the optimum is x0 = 0.3, and the
  // last parents are all feasible and near it.
  RecordingHost host;
  auto t = Make(host, {{"objectives", {{"f", "minimize"}}}, {"constraints", {"c"}},
                       {"population_size", 10}});
  for (int64_t id = 0; id < 400; ++id) {
    std::string p = *Generate(*t, id);
    const double x0 = ToJson(p)["x0"].get<double>();
    Report(*t, id, p, {{"default", 0}, {"f", x0}, {"c", 0.3 - x0}});
    t->TrialEnd(id, true);
  }
  ASSERT_EQ(t->parents().size(), 10u);
  for (const auto& m : t->parents()) {
    EXPECT_EQ(m.score.violation, 0);
    EXPECT_LT(m.score.values[0], 0.32);
  }
}

TEST(Nsga2Test, NestedSpacesGiveConfigurationsThatFit) {
  RecordingHost host;
  const Json space = Json::parse(R"({
    "model": {"_type": "choice", "_value": [
      {"_name": "svm", "C": {"_type": "loguniform", "_value": [0.01, 100]}},
      {"_name": "tree", "depth": {"_type": "randint", "_value": [1, 10]}}]},
    "lr": {"_type": "uniform", "_value": [0, 1]}
  })");
  auto t = Make(host, {{"optimize_mode", "minimize"}, {"population_size", 6}}, space);
  for (int64_t id = 0; id < 200; ++id) {
    std::string p = *Generate(*t, id);
    Json j = ToJson(p);
    const std::string model = j["model"]["_name"].get<std::string>();
    ASSERT_TRUE(model == "svm" ? j["model"].contains("C") && !j["model"].contains("depth")
                               : j["model"].contains("depth") && !j["model"].contains("C"))
        << j.dump();
    Report(*t, id, p, Json(j["lr"].get<double>() + (model == "svm" ? 0 : 1)));
    t->TrialEnd(id, true);
  }
  // The better option (svm, smaller lr) takes over the parents.
  for (const auto& m : t->parents()) EXPECT_LT(m.score.values[0], 0.5);
}

TEST(Nsga2Test, SavedStateRepeatsTheRun) {
  RecordingHost host;
  Json args = kTwoObjectives;
  args["population_size"] = 5;
  auto a = Make(host, args);
  RunZdt1(*a, 12, 4);
  std::vector<std::string> running = GenerateN(*a, 2, 100);
  const std::string state = a->SaveState();
  auto b = Make(host, args);
  b->LoadState(state);
  EXPECT_EQ(b->generation(), a->generation());
  EXPECT_EQ(b->parents().size(), a->parents().size());
  // The running trials' results count in both, and what follows is the same.
  for (auto* t : {a.get(), b.get()}) {
    for (int i = 0; i < 2; ++i) Report(*t, 100 + i, running[static_cast<size_t>(i)], Zdt1(ToJson(running[static_cast<size_t>(i)])));
  }
  EXPECT_EQ(GenerateN(*a, 10, 200), GenerateN(*b, 10, 200));
  // Other objectives: refused, naming why.
  auto other = Make(host, {{"objectives", {{"f1", "minimize"}, {"f2", "maximize"}}}});
  ExpectError([&] { other->LoadState(state); }, TH_INVALID_ARGUMENT, {"objectives"});
  ExpectError([&] { b->LoadState("junk"); }, TH_INVALID_ARGUMENT, {"nsga2"});
}

}  // namespace
}  // namespace tunehost::plugins::testing
