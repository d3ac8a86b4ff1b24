// Tests of host/src/pareto_front.cc: objectives read from a tuner's class
// arguments, scores read from final results as the wire carries them, and
// the incremental front against the first front of a batch non-dominated sort
// over the same results.
#include "tunehost/host/pareto_front.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "host/engine_fixture.h"
#include "tunehost/host/control_queries.h"
#include "tunehost/host/engine.h"
#include "tunehost/protocol/limits.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host {
namespace {

using Json = nlohmann::json;

protocol::Packed Pack(const Json& j) {
  const std::vector<uint8_t> bytes = Json::to_msgpack(j);
  return protocol::Packed(bytes.begin(), bytes.end());
}

protocol::Metric MetricOf(const Json& value) {
  protocol::Metric m;
  m.raw = Pack(value);
  m.scalar = value.is_number() ? value.get<double>() : value.value("default", 0.0);
  return m;
}

TEST(ParetoFrontTest, ObjectivesComeFromTheTunersClassArgs) {
  Objectives o = ObjectivesOf(Pack(Json::parse(
      R"({"seed": 1, "objectives": {"acc": "maximize", "latency": "minimize"}, "constraints": ["mem"]})")));
  ASSERT_EQ(o.objectives.size(), 2u);
  EXPECT_EQ(o.objectives[0], (std::pair<std::string, bool>{"acc", true}));
  EXPECT_EQ(o.objectives[1], (std::pair<std::string, bool>{"latency", false}));
  EXPECT_EQ(o.constraints, std::vector<std::string>{"mem"});
  // None named, or unreadable: one metric.
  EXPECT_TRUE(ObjectivesOf(Pack(Json::parse(R"({"optimize_mode": "maximize"})"))).empty());
  // Constraints alone: the metric in optimize_mode is the one objective, so
  // that the front is the best feasible trial(s).
  o = ObjectivesOf(Pack(Json::parse(R"({"constraints": ["mem"]})")));
  EXPECT_EQ(o.objectives, (std::vector<std::pair<std::string, bool>>{{"default", true}}));
  EXPECT_EQ(o.constraints, std::vector<std::string>{"mem"});
  o = ObjectivesOf(Pack(Json::parse(R"({"constraints": ["mem"], "optimize_mode": "minimize"})")));
  EXPECT_EQ(o.objectives, (std::vector<std::pair<std::string, bool>>{{"default", false}}));
  EXPECT_TRUE(ObjectivesOf(protocol::Packed{'\xc1'}).empty());
  EXPECT_TRUE(ObjectivesOf(Pack(Json::array())).empty());
}

TEST(ParetoFrontTest, ScoresAreFeasibleResultsWithEveryObjective) {
  Objectives o;
  o.objectives = {{"default", true}, {"latency", false}};
  o.constraints = {"mem"};
  auto score = FeasibleScore(o, MetricOf({{"default", 0.9}, {"latency", 12}, {"mem", -0.5}}));
  ASSERT_TRUE(score.has_value());
  EXPECT_EQ(score->values, (std::vector<double>{-0.9, 12}));
  EXPECT_FALSE(FeasibleScore(o, MetricOf({{"default", 0.9}, {"latency", 12}, {"mem", 0.1}})))
      << "a constraint over 0: infeasible";
  EXPECT_FALSE(FeasibleScore(o, MetricOf({{"default", 0.9}, {"latency", 12}}))) << "no mem";
  EXPECT_FALSE(FeasibleScore(o, MetricOf({{"default", 0.9}, {"latency", "fast"}, {"mem", 0}})));
  EXPECT_FALSE(FeasibleScore(o, MetricOf(0.9))) << "a bare number has no latency";
  protocol::Metric garbage;
  garbage.raw = protocol::Packed{'\xc1'};
  EXPECT_FALSE(FeasibleScore(o, garbage));
}

TEST(ParetoFrontTest, IncrementalFrontIsTheBatchFirstFront) {
  // 600 random results of three objectives (on a coarse grid, so that ties
  // and duplicates happen) and a constraint, offered one by one.
  Objectives o;
  o.objectives = {{"a", false}, {"b", true}, {"c", false}};
  o.constraints = {"k"};
  ParetoFront front;
  front.SetObjectives(o);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> grid(0, 9);
  std::deque<Trial> trials;  // stable addresses
  std::vector<sdk::Candidate> feasible;
  std::vector<const Trial*> feasible_trials;
  for (int i = 0; i < 600; ++i) {
    Json v = {{"default", 0}, {"a", grid(rng)}, {"b", grid(rng)}, {"c", grid(rng)},
              {"k", grid(rng) - 7}};
    Trial& t = trials.emplace_back();
    t.id = "T" + std::to_string(i);
    protocol::Metric m = MetricOf(v);
    front.Offer(&t, m);
    if (auto s = FeasibleScore(o, m)) {
      feasible.push_back(*s);
      feasible_trials.push_back(&t);
    }
    if (i % 100 != 99) continue;
    std::vector<std::string> expected, got;
    const auto fronts = sdk::NondominatedFronts(feasible);
    for (size_t k : fronts.at(0)) expected.push_back(feasible_trials[k]->id);
    for (const Trial* m2 : front.members()) got.push_back(m2->id);
    std::sort(expected.begin(), expected.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, expected) << "after " << i + 1 << " results";
    EXPECT_FALSE(got.empty());
  }
  front.SetObjectives(o);
  EXPECT_TRUE(front.members().empty());
}

// The status (wire-format.md §4.2, ST) lists at most kMaxFrontInStatus
// members, the earliest to join, and counts them all: a front of every
// trial (anti-correlated objectives) keeps the reply bounded.
TEST(ParetoFrontTest, TheStatusListsTheFirstThousandMembersAndCountsAll) {
  engine_testing::RecordingSink sink;
  EngineOptions o;
  o.experiment_id = "exp";
  o.max_trials = 2000;
  o.objectives.objectives = {{"f1", false}, {"f2", false}};
  Engine engine(o, &sink);
  const Clock::time_point now = Clock::now();
  const size_t n = protocol::kMaxFrontInStatus + 100;
  for (size_t i = 0; i < n; ++i) {
    Trial t;
    t.id = "T" + std::to_string(i);
    t.sequence_id = i;
    t.parameter_id = static_cast<int64_t>(i);
    t.parameters = Pack({{"x", i}});
    t.state = TrialState::kEnded;
    t.status = protocol::TrialStatus::kSucceeded;
    const double x = static_cast<double>(i);
    t.final_metric = MetricOf({{"default", x}, {"f1", x}, {"f2", -x}});
    engine.Restore(t, now, std::chrono::milliseconds(0));
  }
  ASSERT_EQ(engine.pareto_front().members().size(), n);
  protocol::ExperimentSpec spec;
  spec.id = "exp";
  Endpoints endpoints;
  const ControlContext ctx{spec, endpoints, ControlClock::Now()};
  const protocol::Packed packed = StatusInfo(engine, ctx);
  const Json st = Json::from_msgpack(packed.begin(), packed.end());
  ASSERT_TRUE(st["pareto_front"].is_array());
  EXPECT_EQ(st["pareto_front"].size(), protocol::kMaxFrontInStatus);
  EXPECT_EQ(st["pareto_front"][0]["trial_id"], "T0");
  EXPECT_EQ(st["pareto_front_size"], n);
  EXPECT_EQ(st["objectives"], Json::parse(R"({"f1": "minimize", "f2": "minimize"})"));
  EXPECT_EQ(st["constraints"], Json::array());
}

}  // namespace
}  // namespace tunehost::host
