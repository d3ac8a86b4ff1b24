// Tests of plugins/hyperband: the `bohb` tuner (NNI's BOHB advisor):
// brackets, its model, random fraction, import, seeds, state and class_args.
// Fixture in hyperband_fixture.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hyperband/bohb_tuner.h"
#include "hyperband/hyperband_tuner.h"
#include "hyperband_fixture.h"
#include "plugin_testing.h"
#include "tunehost/sdk/host.h"
#include "tunehost/sdk/tuner.h"
#include "tuner_testing.h"

namespace tunehost::plugins::hyperband {
namespace {

using testing::Constructing;
using testing::ExpectError;
using testing::Import;
using testing::Json;
using testing::MakeTuner;
using testing::Msgpack;
using testing::RecordingHost;
using testing::Update;

using hyperband_testing::Bytes;
using hyperband_testing::Driver;
using hyperband_testing::kOneX;
using hyperband_testing::Simulation;
using hyperband_testing::Table;
using hyperband_testing::TableOf;
using hyperband_testing::Trial;

// --- BOHB ---

const char* kQuadSpace = R"({"x": {"_type": "uniform", "_value": [-5, 5]}})";

// Minimize (x - 2)^2.
std::optional<double> Bowl(const Json& p) {
  const double x = p["x"].get<double>();
  return (x - 2) * (x - 2);
}

TEST(BohbTest, DefaultsGiveNnisBohbBrackets) {
  RecordingHost host;
  auto tuner = MakeTuner<BohbTuner>(host, kQuadSpace, R"({"seed": 1})");
  EXPECT_TRUE(tuner->serial());
  EXPECT_TRUE(tuner->maximize());
  EXPECT_EQ(tuner->geometry().s_max(), 1);
  EXPECT_EQ(TableOf(tuner->geometry()), (Table{{{2, 3}}, {{3, 1}, {1, 3}}}));
  EXPECT_EQ(tuner->min_points_in_model(), 2);  // one parameter + 1
  Simulation sim(10, Bowl);
  std::vector<Trial> log = sim.Run(*tuner, host, 13);
  std::vector<std::pair<int, int64_t>> seen;  // (s, budget)
  for (const Trial& t : log) seen.emplace_back(t.where.s, t.params["TRIAL_BUDGET"].get<int64_t>());
  EXPECT_EQ(seen, (std::vector<std::pair<int, int64_t>>{
                      {1, 1}, {1, 1}, {1, 1}, {1, 3}, {0, 3}, {0, 3},
                      {1, 1}, {1, 1}, {1, 1}, {1, 3}, {0, 3}, {0, 3}, {1, 1}}));

  // min_budget 2, max_budget 18: s_max = 2, r_i = floor(18/3^(s-i)).
  auto wide =
      MakeTuner<BohbTuner>(host, kQuadSpace, R"({"min_budget": 2, "max_budget": 18, "seed": 1})");
  EXPECT_EQ(TableOf(wide->geometry()),
            (Table{{{3, 18}}, {{5, 6}, {1, 18}}, {{9, 2}, {3, 6}, {1, 18}}}));
}

// Mean |x - 2| of first-round configurations after `skip` trials.
double MeanDistance(const std::string& args, uint64_t seed, size_t skip, size_t total) {
  RecordingHost host;
  auto tuner = MakeTuner<BohbTuner>(
      host, kQuadSpace,
      args.substr(0, args.size() - 1) + ", \"seed\": " + std::to_string(seed) + "}");
  Simulation sim(3, Bowl);
  std::vector<Trial> log = sim.Run(*tuner, host, total);
  EXPECT_EQ(log.size(), total);
  double sum = 0;
  size_t n = 0;
  for (size_t k = skip; k < log.size(); ++k) {
    if (log[k].where.round != 0) continue;
    sum += std::fabs(log[k].params["x"].get<double>() - 2);
    ++n;
  }
  EXPECT_GT(n, 0u);
  return sum / static_cast<double>(n);
}

TEST(BohbTest, NewConfigurationsConcentrateNearTheOptimum) {
  double model = 0;
  double random = 0;
  for (uint64_t seed : {1, 2, 3, 4}) {
    const double m = MeanDistance(R"({"optimize_mode": "minimize"})", seed, 60, 300);
    const double r =
        MeanDistance(R"({"optimize_mode": "minimize", "random_fraction": 1})", seed, 60, 300);
    EXPECT_LT(m, r) << "seed " << seed;
    model += m;
    random += r;
  }
  // Uniform on [-5, 5]: E|x - 2| = 2.9.
  EXPECT_NEAR(random / 4, 2.9, 0.5);
  EXPECT_LT(model / 4, 0.6 * (random / 4)) << "model " << model / 4 << " random " << random / 4;
}

TEST(BohbTest, RandomFractionIsHonoured) {
  auto picks = [](const std::string& fraction) {
    RecordingHost host;
    auto tuner = MakeTuner<BohbTuner>(
        host, kQuadSpace,
        R"({"optimize_mode": "minimize", "seed": 17, "random_fraction": )" + fraction + "}");
    Simulation sim(3, Bowl);
    sim.Run(*tuner, host, 1200);  // 200 brackets, 1000 first-round configurations
    return std::make_pair(tuner->random_picks(), tuner->model_picks());
  };
  // The first bracket (3 configurations) has no model yet.
  const auto none = picks("1");
  EXPECT_EQ(none.second, 0);
  EXPECT_EQ(none.first, 1000);
  const auto all = picks("0");
  EXPECT_EQ(all.first, 3);
  EXPECT_EQ(all.second, 997);
  const auto third = picks("0.3333333333333333");
  EXPECT_EQ(third.first + third.second, 1000);
  const double fraction = static_cast<double>(third.first - 3) / 997.0;
  EXPECT_NEAR(fraction, 1.0 / 3.0, 0.05) << third.first << " random picks";
}

TEST(BohbTest, TheModelOfTheLargestBudgetWithEnoughResultsIsUsed) {
  RecordingHost host;
  auto tuner =
      MakeTuner<BohbTuner>(host, kQuadSpace, R"({"optimize_mode": "minimize", "seed": 2})");
  EXPECT_FALSE(tuner->model_budget().has_value());
  Driver d;
  std::vector<Trial> round0 = d.Ask(*tuner, 3);  // s=1: 3 at budget 1
  ASSERT_EQ(round0.size(), 3u);
  d.Finish(*tuner, round0[0].id, 1.0);
  EXPECT_FALSE(tuner->model_budget().has_value());  // 1 < min_points_in_model = 2
  d.Finish(*tuner, round0[1].id, 2.0);
  EXPECT_EQ(tuner->model_budget(), std::optional<double>(1.0));
  d.Fail(*tuner, round0[2].id);
  std::vector<Trial> round1 = d.Ask(*tuner, 1);
  ASSERT_EQ(round1.size(), 1u);
  EXPECT_EQ(round1[0].params["TRIAL_BUDGET"], 3);
  d.Finish(*tuner, round1[0].id, 0.5);
  EXPECT_EQ(tuner->model_budget(), std::optional<double>(1.0));  // 1 result at budget 3
  std::vector<Trial> s0 = d.Ask(*tuner, 2);  // s=0: 2 at budget 3
  ASSERT_EQ(s0.size(), 2u);
  d.Finish(*tuner, s0[0].id, 0.7);
  EXPECT_EQ(tuner->model_budget(), std::optional<double>(3.0));
  EXPECT_EQ(tuner->observations(), 4u);  // the failed trial is not one

  // min_points_in_model below dim + 1 is raised with a warning, as NNI.
  auto low = MakeTuner<BohbTuner>(host, kQuadSpace, R"({"min_points_in_model": 1, "seed": 2})");
  EXPECT_EQ(low->min_points_in_model(), 2);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "min_points_in_model 1"));
  auto high = MakeTuner<BohbTuner>(host, kQuadSpace, R"({"min_points_in_model": 5, "seed": 2})");
  EXPECT_EQ(high->min_points_in_model(), 5);
}

TEST(BohbTest, ImportedResultsFeedTheModel) {
  RecordingHost host;
  const std::string args = R"({"optimize_mode": "minimize", "random_fraction": 0, "seed": 3})";
  auto a = MakeTuner<BohbTuner>(host, kQuadSpace, args);
  // Good results near x = 2 at budget 3 (no TRIAL_BUDGET: max_budget) and at
  // budget 1; one record with a bad budget, one of another space.
  Json records = Json::array();
  for (int k = 0; k < 10; ++k) {
    const double x = -5 + k;  // -5..4
    records.push_back({{"parameters", {{"x", x}}}, {"value", (x - 2) * (x - 2)}});
    records.push_back({{"parameters", {{"x", x}, {"TRIAL_BUDGET", 1}}}, {"value", (x - 2) * (x - 2)}});
  }
  records.push_back({{"parameters", {{"x", 1.0}, {"TRIAL_BUDGET", "big"}}}, {"value", 1}});
  records.push_back({{"parameters", {{"y", 1.0}}}, {"value", 1}});
  Import(*a, records);
  EXPECT_EQ(a->observations(), 20u);
  EXPECT_EQ(a->model_budget(), std::optional<double>(3.0));
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "imported 20 results"));
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "skipped 2 imported records"));

  // The first bracket is model-based already and close to x = 2; without the
  // import it is random.
  Driver d;
  std::vector<Trial> first = d.Ask(*a, 3);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(a->model_picks(), 3);
  EXPECT_EQ(a->random_picks(), 0);
  for (const Trial& t : first) EXPECT_LT(std::fabs(t.params["x"].get<double>() - 2), 1.5) << t.params;
  auto b = MakeTuner<BohbTuner>(host, kQuadSpace, args);
  Driver db;
  ASSERT_EQ(db.Ask(*b, 3).size(), 3u);
  EXPECT_EQ(b->model_picks(), 0);
  EXPECT_EQ(b->random_picks(), 3);
}

TEST(BohbTest, ModelSuggestionsStayInsideAMixedSpace) {
  RecordingHost host;
  const char* space = R"({
    "lr":      {"_type": "loguniform",  "_value": [0.0001, 0.1]},
    "units":   {"_type": "quniform",    "_value": [16, 128, 16]},
    "act":     {"_type": "choice",      "_value": ["relu", "tanh", "sigmoid"]},
    "layers":  {"_type": "randint",     "_value": [1, 5]},
    "dropout": {"_type": "uniform",     "_value": [0, 0.5]},
    "w":       {"_type": "normal",      "_value": [0, 1]}})";
  auto tuner = MakeTuner<BohbTuner>(host, space, R"({"max_budget": 9, "seed": 31})");
  Simulation sim(3, [](const Json& p) -> std::optional<double> {
    if (p["layers"] == 4) return std::nullopt;
    return -std::fabs(std::log10(p["lr"].get<double>()) + 2) - p["dropout"].get<double>() +
           (p["act"] == "tanh" ? 1.0 : 0.0) + p["units"].get<double>() / 128.0;
  });
  std::vector<Trial> log = sim.Run(*tuner, host, 400);
  ASSERT_EQ(log.size(), 400u);
  EXPECT_GT(tuner->model_picks(), 50);
  std::set<std::string> acts;
  for (const Trial& t : log) {
    const Json& p = t.params;
    std::vector<std::string> keys;
    for (const auto& item : p.items()) keys.push_back(item.key());
    ASSERT_EQ(keys, (std::vector<std::string>{"lr", "units", "act", "layers", "dropout", "w",
                                              "TRIAL_BUDGET"}))
        << p;
    EXPECT_GE(p["lr"].get<double>(), 0.0001) << p;
    EXPECT_LE(p["lr"].get<double>(), 0.1) << p;
    const double units = p["units"].get<double>();
    EXPECT_TRUE(units >= 16 && units <= 128 && std::fmod(units, 16) == 0) << p;
    acts.insert(p["act"].get<std::string>());
    ASSERT_TRUE(p["layers"].is_number_integer()) << p;
    EXPECT_GE(p["layers"].get<int64_t>(), 1);
    EXPECT_LT(p["layers"].get<int64_t>(), 5);
    EXPECT_GE(p["dropout"].get<double>(), 0.0) << p;
    EXPECT_LE(p["dropout"].get<double>(), 0.5) << p;
    EXPECT_TRUE(std::isfinite(p["w"].get<double>())) << p;
    const int64_t budget = p["TRIAL_BUDGET"].get<int64_t>();
    EXPECT_TRUE(budget == 1 || budget == 3 || budget == 9) << p;
  }
  EXPECT_EQ(acts, (std::set<std::string>{"relu", "tanh", "sigmoid"}));
}

TEST(BohbTest, SameSeedGivesTheSameTrials) {
  RecordingHost host;
  const std::string args = R"({"max_budget": 9, "optimize_mode": "minimize", "seed": 8})";
  auto a = MakeTuner<BohbTuner>(host, kQuadSpace, args);
  auto b = MakeTuner<BohbTuner>(host, kQuadSpace, args);
  Simulation sa(2, Bowl);
  Simulation sb(2, Bowl);
  std::vector<Trial> ta = sa.Run(*a, host, 120);
  ASSERT_EQ(ta.size(), 120u);
  EXPECT_EQ(Bytes(ta), Bytes(sb.Run(*b, host, 120)));
  EXPECT_GT(a->model_picks(), 0);
}

TEST(BohbTest, SavedStateContinuesIdentically) {
  RecordingHost host;
  const std::string space = R"({"x": {"_type": "uniform", "_value": [-5, 5]},
                                "c": {"_type": "choice", "_value": ["a", "b", "c"]}})";
  auto objective = [](const Json& p) -> std::optional<double> {
    const double x = p["x"].get<double>();
    if (x > 4.5) return std::nullopt;
    return (x - 2) * (x - 2) + (p["c"] == "b" ? 0.0 : 1.0);
  };
  auto a = MakeTuner<BohbTuner>(host, space,
                                R"({"max_budget": 9, "optimize_mode": "minimize", "seed": 4})");
  Simulation sim(3, objective);
  sim.Run(*a, host, 77);
  ASSERT_GT(a->model_picks(), 0);
  const std::string state = a->SaveState();
  Simulation sim_b = sim;
  std::vector<Trial> next_a = sim.Run(*a, host, 100);

  RecordingHost host_b;
  auto b = MakeTuner<BohbTuner>(host_b, space,
                                R"({"max_budget": 9, "optimize_mode": "minimize", "seed": 1})");
  b->LoadState(state);
  EXPECT_EQ(Bytes(next_a), Bytes(sim_b.Run(*b, host_b, 100)));
  EXPECT_EQ(a->SaveState(), b->SaveState());
  EXPECT_EQ(a->model_picks(), b->model_picks());

  // Loading before the search space works too: the models are built then.
  RecordingHost host_c;
  auto c = MakeTuner<BohbTuner>(host_c, "",
                                R"({"max_budget": 9, "optimize_mode": "minimize", "seed": 1})");
  c->LoadState(state);
  Update(*c, space);
  EXPECT_EQ(c->SaveState(), state);
  // A BOHB state is not a Hyperband state.
  auto hb = MakeTuner<HyperbandTuner>(host_c, kOneX, R"({"R": 9})");
  ExpectError([&] { hb->LoadState(state); }, TH_INVALID_ARGUMENT,
              {"not a state of format org.tunehost.hyperband"});
}

TEST(BohbTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) { return Constructing<BohbTuner>(host, args); };
  ExpectError(construct(R"({"min_budget": 0})"), TH_INVALID_ARGUMENT, {"bohb", "\"min_budget\""});
  ExpectError(construct(R"({"min_budget": 5, "max_budget": 3})"), TH_INVALID_ARGUMENT,
              {"\"max_budget\"", ">= min_budget"});
  ExpectError(construct(R"({"max_budget": 2.5})"), TH_INVALID_ARGUMENT, {"\"max_budget\""});
  ExpectError(construct(R"({"eta": 1})"), TH_INVALID_ARGUMENT, {"\"eta\""});
  ExpectError(construct(R"({"top_n_percent": 0})"), TH_INVALID_ARGUMENT, {"\"top_n_percent\""});
  ExpectError(construct(R"({"top_n_percent": 100})"), TH_INVALID_ARGUMENT, {"\"top_n_percent\""});
  ExpectError(construct(R"({"num_samples": 0})"), TH_INVALID_ARGUMENT, {"\"num_samples\""});
  ExpectError(construct(R"({"random_fraction": 1.5})"), TH_INVALID_ARGUMENT,
              {"\"random_fraction\""});
  ExpectError(construct(R"({"min_points_in_model": -1})"), TH_INVALID_ARGUMENT,
              {"\"min_points_in_model\""});
  ExpectError(construct(R"({"bandwidth_factor": -1})"), TH_INVALID_ARGUMENT,
              {"\"bandwidth_factor\""});
  ExpectError(construct(R"({"min_bandwidth": "small"})"), TH_INVALID_ARGUMENT,
              {"\"min_bandwidth\""});
  ExpectError(construct(R"({"optimize_mode": "up"})"), TH_INVALID_ARGUMENT, {"\"optimize_mode\""});
  ExpectError(construct(R"({"R": 60})"), TH_INVALID_ARGUMENT, {"\"R\""});
  ExpectError(construct(R"({"exec_mode": "serial"})"), TH_INVALID_ARGUMENT, {"\"exec_mode\""});
  // Accepted, unused, and said so.
  msgpack::object_handle ok = Msgpack(R"({"bandwidth_factor": 2, "min_bandwidth": 0.01})");
  BohbTuner t(host.ref(), ok.get());
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "bandwidth_factor and min_bandwidth are not used"));
}

}  // namespace
}  // namespace tunehost::plugins::hyperband
