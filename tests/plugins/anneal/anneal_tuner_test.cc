// Tests of plugins/anneal/anneal_tuner.{h,cc}: NNI's Anneal tuner
// (hyperopt's anneal.suggest): prior draws without history, windows that
// shrink with the number of results, geometric choice of the reference by
// loss rank, one reference trial per configuration, categorical keep
// probability, nested spaces, the constant liar rule, deduplication, import,
// class_args, search space validation, seeded reproducibility and state.
#include "anneal/anneal_tuner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plugins/plugin_testing.h"
#include "plugins/tuner_testing.h"
#include "tunehost/sdk/host.h"

namespace tunehost::plugins::testing {
namespace {

// `n` configurations (ids first_id...) as JSON; none of them gets a result.
std::vector<Json> Draw(AnnealTuner& tuner, int n, int64_t first_id = 1000) {
  return GenerateNJson(tuner, n, first_id);
}

// Imports `n` records of the same parameters and metric.
void ImportSame(AnnealTuner& tuner, const Json& params, double metric, int n) {
  Json records = Json::array();
  for (int i = 0; i < n; ++i) records.push_back(Json{{"parameters", params}, {"value", metric}});
  Import(tuner, records);
}

// A packed parameter map as JSON, for ExpectSameSequence.
std::string Readable(const std::string& bytes) {
  return bytes == "<none>" ? bytes : ToJson(bytes).dump();
}

double Shrinking(int t) { return 1.0 / (1.0 + t * AnnealTuner::kShrinkCoef); }

const char* kX = R"({"x": {"_type": "uniform", "_value": [0, 10]}})";

const char* kEveryType = R"({
  "c": {"_type": "choice", "_value": ["relu", 3, 0.5]},
  "ri": {"_type": "randint", "_value": [-2, 3]},
  "u": {"_type": "uniform", "_value": [-1.5, 2.5]},
  "qu": {"_type": "quniform", "_value": [1, 9, 2]},
  "lu": {"_type": "loguniform", "_value": [0.001, 10]},
  "qlu": {"_type": "qloguniform", "_value": [1, 100, 5]},
  "n": {"_type": "normal", "_value": [5, 2]},
  "qn": {"_type": "qnormal", "_value": [0, 3, 0.5]},
  "ln": {"_type": "lognormal", "_value": [0, 1]},
  "qln": {"_type": "qlognormal", "_value": [1, 1, 2]},
  "opt": {"_type": "choice", "_value": [
    {"_name": "sgd", "lr": {"_type": "uniform", "_value": [0.01, 0.1]}},
    {"_name": "adam", "beta": {"_type": "choice", "_value": [0.9, 0.99]}},
    {"_name": "none"}
  ]}
})";

// Drives a tuner like a host with a few trials in flight: one generate per
// step; the oldest running trial then reports (or fails every 5th step).
struct Driver {
  std::deque<std::pair<int64_t, std::string>> running;
  int64_t next_id = 0;
  int step = 0;

  std::vector<std::string> Run(AnnealTuner& tuner, int steps, size_t in_flight = 3) {
    std::vector<std::string> emitted;
    for (int i = 0; i < steps; ++i, ++step) {
      const int64_t id = next_id++;
      std::optional<std::string> p = Generate(tuner, id);
      if (!p) {
        emitted.push_back("<none>");
        continue;
      }
      emitted.push_back(*p);
      running.emplace_back(id, *p);
      if (running.size() > in_flight) {
        auto [done, params] = running.front();
        running.pop_front();
        const bool fail = step % 5 == 4;
        if (!fail) ReportResult(tuner, done, params, MetricOf(ToJson(params)));
        tuner.TrialEnd(done, !fail);
      }
    }
    return emitted;
  }
};

// --- Annealing semantics ---

TEST(AnnealTunerTest, WithoutResultsDrawsFromThePrior) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 1})");
  double lo = 10;
  double hi = 0;
  for (const Json& p : Draw(*tuner, 200)) {
    lo = std::min(lo, p["x"].get<double>());
    hi = std::max(hi, p["x"].get<double>());
  }
  EXPECT_LT(lo, 0.5);
  EXPECT_GT(hi, 9.5);
  EXPECT_TRUE(tuner->observations().empty());
}

TEST(AnnealTunerTest, LongHistoryAtOneValueConcentratesSuggestionsThere) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 2})");
  ImportSame(*tuner, Json{{"x", 3.0}}, 1.0, 50);
  // T = 50: width 10 / (1 + 5), centred on 3.
  const double half = 0.5 * 10 * Shrinking(50);
  double lo = 10;
  double hi = 0;
  for (const Json& p : Draw(*tuner, 300)) {
    const double x = p["x"].get<double>();
    EXPECT_LE(std::fabs(x - 3.0), half + 1e-12) << x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  // The whole window is used, not a point.
  EXPECT_GT(hi - lo, 1.6 * half);
}

TEST(AnnealTunerTest, WindowShrinksAsResultsAccumulate) {
  RecordingHost host;
  auto few = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 3})");
  ImportSame(*few, Json{{"x", 5.0}}, 1.0, 10);
  auto many = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 3})");
  ImportSame(*many, Json{{"x", 5.0}}, 1.0, 90);

  double spread_few = 0;
  for (const Json& p : Draw(*few, 300)) {
    const double d = std::fabs(p["x"].get<double>() - 5.0);
    EXPECT_LE(d, 0.5 * 10 * Shrinking(10) + 1e-12);  // 2.5
    spread_few = std::max(spread_few, d);
  }
  double spread_many = 0;
  for (const Json& p : Draw(*many, 300)) {
    const double d = std::fabs(p["x"].get<double>() - 5.0);
    EXPECT_LE(d, 0.5 * 10 * Shrinking(90) + 1e-12);  // 0.5
    spread_many = std::max(spread_many, d);
  }
  EXPECT_GT(spread_few, 2.0);
  EXPECT_GT(spread_many, 0.4);
  EXPECT_LT(spread_many, spread_few / 4);
}

TEST(AnnealTunerTest, WindowIsShiftedToStayInsideTheBounds) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 4})");
  ImportSame(*tuner, Json{{"x", 9.9}}, 1.0, 10);
  // Width 5 around 9.9 would reach 12.4: hyperopt moves it to [5, 10].
  double lo = 10;
  for (const Json& p : Draw(*tuner, 300)) {
    const double x = p["x"].get<double>();
    EXPECT_GE(x, 5.0);
    EXPECT_LE(x, 10.0);
    lo = std::min(lo, x);
  }
  EXPECT_LT(lo, 5.5);  // well below 9.9 - 2.5
}

TEST(AnnealTunerTest, LogTypesAnnealInLogSpace) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(
      host, R"({"lr": {"_type": "loguniform", "_value": [0.0001, 1]}})", R"({"seed": 5})");
  ImportSame(*tuner, Json{{"lr", 0.01}}, 1.0, 10);
  // Half of log(10^4) around log(0.01): [0.001, 0.1].
  double lo = 1;
  double hi = 0;
  for (const Json& p : Draw(*tuner, 300)) {
    const double lr = p["lr"].get<double>();
    EXPECT_GE(lr, 0.001 * (1 - 1e-9));
    EXPECT_LE(lr, 0.1 * (1 + 1e-9));
    lo = std::min(lo, lr);
    hi = std::max(hi, lr);
  }
  // Spread evenly in log space: a linear window would never reach 0.0015.
  EXPECT_LT(lo, 0.0015);
  EXPECT_GT(hi, 0.07);
}

TEST(AnnealTunerTest, NormalTypesDrawAroundTheReferenceWithShrunkSigma) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, R"({"n": {"_type": "normal", "_value": [0, 1]},
                                               "ln": {"_type": "lognormal", "_value": [0, 1]}})",
                                      R"({"seed": 6})");
  ImportSame(*tuner, Json{{"n", 5.0}, {"ln", std::exp(2.0)}}, 1.0, 10);
  // sigma 1 * shrinking(10) = 0.5, around 5 and around log value 2.
  const int kDraws = 2000;
  double sum = 0;
  double sum_sq = 0;
  double log_sum = 0;
  for (const Json& p : Draw(*tuner, kDraws)) {
    const double n = p["n"].get<double>();
    sum += n;
    sum_sq += n * n;
    log_sum += std::log(p["ln"].get<double>());
  }
  const double mean = sum / kDraws;
  const double sd = std::sqrt(sum_sq / kDraws - mean * mean);
  EXPECT_NEAR(mean, 5.0, 0.05);
  EXPECT_NEAR(sd, 0.5, 0.04);
  EXPECT_NEAR(log_sum / kDraws, 2.0, 0.05);
}

TEST(AnnealTunerTest, ReferenceIsChosenByGeometricLossRank) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 7})");
  // Loss ranks: x=1 first, x=5 second, thirty at x=9 after them.
  Json records = Json::array();
  records.push_back(Json{{"parameters", {{"x", 1.0}}}, {"value", 0.0}});
  records.push_back(Json{{"parameters", {{"x", 5.0}}}, {"value", 1.0}});
  for (int i = 0; i < 30; ++i)
    records.push_back(Json{{"parameters", {{"x", 9.0}}}, {"value", 10.0}});
  Import(*tuner, records);
  // T = 32: windows [0, 2.38], [3.81, 6.19], [7.62, 10] do not overlap.
  // Geometric(1/2) - 1 picks rank 0 half the time, rank 1 a quarter.
  const int kDraws = 4000;
  int near1 = 0;
  int near5 = 0;
  int near9 = 0;
  for (const Json& p : Draw(*tuner, kDraws)) {
    const double x = p["x"].get<double>();
    if (x <= 2.4) {
      ++near1;
    } else if (x >= 3.8 && x <= 6.2) {
      ++near5;
    } else if (x >= 7.6) {
      ++near9;
    } else {
      ADD_FAILURE() << "outside every window: " << x;
    }
  }
  EXPECT_NEAR(near1 / double(kDraws), 0.5, 0.03);
  EXPECT_NEAR(near5 / double(kDraws), 0.25, 0.03);
  EXPECT_NEAR(near9 / double(kDraws), 0.25, 0.03);
}

TEST(AnnealTunerTest, OptimizeModeDecidesWhichResultsAreBest) {
  RecordingHost host;
  Json records = Json::array();
  for (int i = 0; i < 20; ++i) {
    records.push_back(Json{{"parameters", {{"x", 2.0}}}, {"value", 10.0}});
    records.push_back(Json{{"parameters", {{"x", 8.0}}}, {"value", 0.0}});
  }
  // T = 40: half width 1; 20 results tie for best, so the reference is
  // almost surely one of them.
  auto maximize = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 8, "optimize_mode": "maximize"})");
  Import(*maximize, records);
  for (const Json& p : Draw(*maximize, 200)) EXPECT_NEAR(p["x"].get<double>(), 2.0, 1.0 + 1e-12);
  auto minimize = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 8})");  // the default, as NNI's
  EXPECT_FALSE(minimize->maximize());
  Import(*minimize, records);
  for (const Json& p : Draw(*minimize, 200)) EXPECT_NEAR(p["x"].get<double>(), 8.0, 1.0 + 1e-12);
}

TEST(AnnealTunerTest, ParametersOfOneConfigurationComeFromOneReferenceTrial) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, R"({"x": {"_type": "uniform", "_value": [0, 10]},
                                               "y": {"_type": "uniform", "_value": [0, 10]}})",
                                      R"({"seed": 9})");
  // Two kinds of trials, interleaved in loss order.
  Json records = Json::array();
  for (int i = 0; i < 40; ++i) {
    const bool first = i % 2 == 0;
    records.push_back(Json{{"parameters", {{"x", first ? 1.0 : 9.0}, {"y", first ? 9.0 : 1.0}}},
                           {"value", double(i)}});
  }
  Import(*tuner, records);
  int low_x = 0;
  const int kDraws = 500;
  for (const Json& p : Draw(*tuner, kDraws)) {
    const double x = p["x"].get<double>();
    const double y = p["y"].get<double>();
    // hyperopt's best_tids: y comes from the trial x came from.
    EXPECT_EQ(x<5, y> 5) << p;
    low_x += x < 5 ? 1 : 0;
  }
  EXPECT_GT(low_x, kDraws / 5);
  EXPECT_LT(low_x, kDraws * 4 / 5);
}

TEST(AnnealTunerTest, CategoricalKeepsTheReferenceOptionWithHighProbability) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, R"({
      "c": {"_type": "choice", "_value": ["a", "b", "c", "d"]},
      "r": {"_type": "randint", "_value": [10, 14]},
      "x": {"_type": "uniform", "_value": [0, 1]}})",
                                      R"({"seed": 10})");
  Json records = Json::array();
  for (int i = 0; i < 30; ++i) {
    records.push_back(
        Json{{"parameters", {{"c", "b"}, {"r", 12}, {"x", i / 30.0}}}, {"value", 1.0}});
  }
  Import(*tuner, records);
  // T = 30, shrinking 0.25: P(keep) = 0.75 + 0.25 / 4 = 0.8125, others 0.0625.
  const int kDraws = 4000;
  std::map<std::string, int> c;
  std::map<int64_t, int> r;
  for (const Json& p : Draw(*tuner, kDraws)) {
    ++c[p["c"].get<std::string>()];
    ++r[p["r"].get<int64_t>()];
  }
  EXPECT_NEAR(c["b"] / double(kDraws), 0.8125, 0.025);
  EXPECT_NEAR(r[12] / double(kDraws), 0.8125, 0.025);
  for (const char* other : {"a", "c", "d"}) EXPECT_NEAR(c[other] / double(kDraws), 0.0625, 0.02);
  for (int64_t other : {10, 11, 13}) EXPECT_NEAR(r[other] / double(kDraws), 0.0625, 0.02);
  EXPECT_EQ(r.size(), 4u);  // randint's upper bound stays exclusive
}

TEST(AnnealTunerTest, NestedParametersLearnOnlyFromTrialsWhereTheyWereActive) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, R"({"opt": {"_type": "choice", "_value": [
      {"_name": "a", "lr": {"_type": "uniform", "_value": [0, 1]}},
      {"_name": "b", "m": {"_type": "uniform", "_value": [0, 1]}}]}})",
                                      R"({"seed": 11})");
  Json records = Json::array();
  for (int i = 0; i < 20; ++i) {
    records.push_back(
        Json{{"parameters", {{"opt", {{"_name", "a"}, {"lr", 0.2}}}}}, {"value", 0.0}});
    records.push_back(
        Json{{"parameters", {{"opt", {{"_name", "b"}, {"m", 0.7}}}}}, {"value", 5.0}});
  }
  Import(*tuner, records);
  // lr and m each have T = 20 (not 40): half width 1 / 3 / 2.
  const double half = 0.5 * Shrinking(20);
  int a = 0;
  int b = 0;
  double lr_spread = 0;
  double m_spread = 0;
  for (const Json& p : Draw(*tuner, 1500)) {
    const Json& opt = p["opt"];
    ASSERT_EQ(opt.size(), 2u) << p;
    if (opt["_name"] == "a") {
      ++a;
      const double d = std::fabs(opt["lr"].get<double>() - 0.2);
      EXPECT_LE(d, half + 1e-12) << p;
      lr_spread = std::max(lr_spread, d);
    } else {
      ++b;
      ASSERT_EQ(opt["_name"], "b");
      // The reference for "opt" is mostly an "a" trial, which has no m: m
      // takes its own reference among the "b" trials.
      const double d = std::fabs(opt["m"].get<double>() - 0.7);
      EXPECT_LE(d, half + 1e-12) << p;
      m_spread = std::max(m_spread, d);
    }
  }
  // opt (T = 40, shrinking 0.2): "a" ranks first, kept with ~0.9.
  EXPECT_NEAR(a / 1500.0, 0.9, 0.05);
  EXPECT_GT(b, 60);
  EXPECT_GT(lr_spread, 0.12);  // wider than T = 40 would allow (0.1)
  EXPECT_GT(m_spread, 0.12);
}

TEST(AnnealTunerTest, EveryValueStaysInItsTypesRangeWhileAnnealing) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, kEveryType, R"({"seed": 12})");
  Driver driver;
  std::set<std::string> options;
  for (const std::string& bytes : driver.Run(*tuner, 400)) {
    ASSERT_NE(bytes, "<none>");
    Json p = ToJson(bytes);
    EXPECT_TRUE(p["c"] == "relu" || p["c"] == 3 || p["c"] == 0.5) << p;
    ASSERT_TRUE(p["ri"].is_number_integer()) << p;
    EXPECT_GE(p["ri"].get<int64_t>(), -2);
    EXPECT_LT(p["ri"].get<int64_t>(), 3);
    EXPECT_GE(p["u"].get<double>(), -1.5);
    EXPECT_LE(p["u"].get<double>(), 2.5);
    const double qu = p["qu"].get<double>();
    EXPECT_TRUE(qu == 1 || qu == 2 || qu == 4 || qu == 6 || qu == 8 || qu == 9) << qu;
    EXPECT_GE(p["lu"].get<double>(), 0.001);
    EXPECT_LE(p["lu"].get<double>(), 10.0);
    const double qlu = p["qlu"].get<double>();
    EXPECT_TRUE(qlu == 1 || qlu == 100 || (std::fmod(qlu, 5) == 0 && qlu >= 5 && qlu < 100)) << qlu;
    EXPECT_TRUE(std::isfinite(p["n"].get<double>()));
    EXPECT_EQ(std::fmod(p["qn"].get<double>(), 0.5), 0.0) << p["qn"];
    EXPECT_GT(p["ln"].get<double>(), 0.0);
    EXPECT_EQ(std::fmod(p["qln"].get<double>(), 2.0), 0.0) << p["qln"];
    EXPECT_GE(p["qln"].get<double>(), 0.0);
    const std::string name = p["opt"]["_name"].get<std::string>();
    options.insert(name);
    EXPECT_EQ(p["opt"].size(), name == "none" ? 1u : 2u) << p;
    if (name == "sgd") {
      EXPECT_GE(p["opt"]["lr"].get<double>(), 0.01);
      EXPECT_LE(p["opt"]["lr"].get<double>(), 0.1);
    }
  }
  EXPECT_EQ(options.size(), 3u);
  EXPECT_GT(tuner->observations().size(), 250u);
}

TEST(AnnealTunerTest, DuplicatesAreRedrawnAndAFiniteSpaceEnds) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, R"({"a": {"_type": "choice", "_value": [1, 2, 3]},
                                                "b": {"_type": "randint", "_value": [0, 2]}})",
                                      R"({"seed": 13})");
  // Every result says the first configuration is best: annealing keeps
  // proposing it, the tuner never repeats it.
  std::set<Json> seen;
  for (int64_t id = 0; id < 6; ++id) {
    std::optional<std::string> p = Generate(*tuner, id);
    ASSERT_TRUE(p.has_value()) << id;
    EXPECT_TRUE(seen.insert(ToJson(*p)).second) << "repeated " << ToJson(*p);
    ReportResult(*tuner, id, *p, id == 0 ? 0.0 : 10.0);
    tuner->TrialEnd(id, true);
  }
  EXPECT_FALSE(Generate(*tuner, 6).has_value());
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "all 6 configurations"));
  EXPECT_FALSE(Generate(*tuner, 7).has_value());
}

// --- Constant liar ---

TEST(AnnealTunerTest, LiarNeedsParallelMoreThan20ConfigurationsRunningTrialsAndAResult) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 14, "parallel_optimize": true})");
  auto serial = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 14})");
  std::vector<std::string> params;
  for (int64_t id = 0; id < 20; ++id) {
    params.push_back(*Generate(*tuner, id));
    Generate(*serial, id);
  }
  // 20 configurations, trials running, then a result: still only 20.
  ReportResult(*tuner, 0, params[0], 1.0);
  ReportResult(*serial, 0, params[0], 1.0);
  EXPECT_FALSE(tuner->LiarActive());
  EXPECT_EQ(tuner->ModelHistory().size(), 1u);
  // The 21st configuration: more than 20, running trials, a result.
  params.push_back(*Generate(*tuner, 20));
  Generate(*serial, 20);
  EXPECT_TRUE(tuner->LiarActive());
  EXPECT_EQ(tuner->ModelHistory().size(), 1u + 20u);  // one lie per running trial
  EXPECT_FALSE(serial->LiarActive());                 // parallel_optimize is off
  EXPECT_EQ(serial->ModelHistory().size(), 1u);
  // No running trial left: no lie.
  for (int64_t id = 0; id <= 20; ++id) tuner->TrialEnd(id, id != 3);
  EXPECT_EQ(tuner->running_count(), 0u);
  EXPECT_FALSE(tuner->LiarActive());
  ASSERT_TRUE(Generate(*tuner, 21).has_value());
  EXPECT_TRUE(tuner->LiarActive());

  // Without any result there is nothing to lie with.
  auto fresh = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 14, "parallel_optimize": true})");
  for (int64_t id = 0; id < 25; ++id) Generate(*fresh, id);
  EXPECT_EQ(fresh->running_count(), 25u);
  EXPECT_FALSE(fresh->LiarActive());
}

TEST(AnnealTunerTest, LiarValueFollowsConstantLiarTypeAndOptimizeMode) {
  struct Case {
    const char* args;
    double loss;
  };
  // Metrics 1..21: min 1, max 21, mean 11; negated when maximizing.
  const Case cases[] = {
      {R"({"parallel_optimize": true})", 1.0},
      {R"({"parallel_optimize": true, "constant_liar_type": "min"})", 1.0},
      {R"({"parallel_optimize": true, "constant_liar_type": "max"})", 21.0},
      {R"({"parallel_optimize": true, "constant_liar_type": "mean"})", 11.0},
      {R"({"parallel_optimize": true, "constant_liar_type": "min", "optimize_mode": "maximize"})",
       -1.0},
      {R"({"parallel_optimize": true, "constant_liar_type": "max", "optimize_mode": "maximize"})",
       -21.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    RecordingHost host;
    Json args = Json::parse(c.args);
    args["seed"] = 15;
    auto tuner = MakeTuner<AnnealTuner>(host, kX, args.dump());
    Json records = Json::array();
    for (int i = 1; i <= 21; ++i) {
      records.push_back(Json{{"parameters", {{"x", i / 3.0}}}, {"value", double(i)}});
    }
    Import(*tuner, records);  // 21 configurations and 21 metrics
    std::vector<Json> running = Draw(*tuner, 2, 100);
    ASSERT_TRUE(tuner->LiarActive());
    std::vector<AnnealTuner::Observation> history = tuner->ModelHistory();
    ASSERT_EQ(history.size(), 23u);
    for (size_t i = 0; i < 2; ++i) {
      const AnnealTuner::Observation& lie = history[21 + i];
      EXPECT_EQ(lie.loss, c.loss);
      ASSERT_TRUE(lie.values[0].has_value());
      EXPECT_EQ(*lie.values[0], running[i]["x"].get<double>());  // in id order
    }
  }
}

// --- Import, results ---

TEST(AnnealTunerTest, ImportedResultsActLikeReceivedResults) {
  RecordingHost host;
  auto a = MakeTuner<AnnealTuner>(host, kEveryType, R"({"seed": 16})");
  Json records = Json::array();
  for (int64_t id = 0; id < 15; ++id) {
    std::string p = *Generate(*a, id);
    const double metric = MetricOf(ToJson(p));
    ReportResult(*a, id, p, metric);
    a->TrialEnd(id, true);
    // NNI's spelling of the key; a metric map with "default".
    records.push_back(Json{{"parameter", ToJson(p)}, {"value", {{"default", metric}}}});
  }
  auto b = MakeTuner<AnnealTuner>(host, kEveryType, R"({"seed": 99})");
  Import(*b, records);
  ASSERT_EQ(b->observations().size(), 15u);  // qlognormal values of 0 included
  EXPECT_TRUE(b->observations() == a->observations());
  // Same history and same random state: the same next configurations.
  const std::string state = a->SaveState();
  auto c = MakeTuner<AnnealTuner>(host, kEveryType, R"({"seed": 1})");
  c->LoadState(state);
  EXPECT_EQ(Draw(*c, 20), Draw(*a, 20));
}

TEST(AnnealTunerTest, ImportedConfigurationsAreNotGeneratedAgain) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, R"({"a": {"_type": "choice", "_value": ["x", "y", "z"]},
                                                "b": {"_type": "choice", "_value": [1, 2]}})",
                                      R"({"seed": 17})");
  Import(*tuner, Json::parse(R"([
    {"parameters": {"a": "x", "b": 1}, "value": 0.0},
    {"parameters": {"b": 2, "a": "x"}, "value": 0.7},
    {"parameters": {"a": "y", "b": 1.0}, "value": 0.1},
    {"parameters": {"a": "w", "b": 1}, "value": 0.1},
    {"value": 3}
  ])"));
  EXPECT_EQ(tuner->observations().size(), 3u);  // a value of 0 counts (NNI skips it)
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "skipped 2"));
  std::set<Json> rest;
  for (const Json& p : Draw(*tuner, 3)) rest.insert(p);
  EXPECT_EQ(rest, (std::set<Json>{Json::parse(R"({"a": "y", "b": 2})"),
                                  Json::parse(R"({"a": "z", "b": 1})"),
                                  Json::parse(R"({"a": "z", "b": 2})")}));
  EXPECT_FALSE(Generate(*tuner, 3).has_value());

  ExpectNonArrayImportRefused(*tuner);
}

TEST(AnnealTunerTest, ResultsOfUnknownIdsAreIgnoredUnlessCustomized) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 18})");
  msgpack::object_handle params = Msgpack(R"({"x": 4.0})");
  msgpack::object_handle value = Msgpack("2.0");
  tuner->ReceiveTrialResult(77, params.get(), value.get(), 2.0, false);
  EXPECT_TRUE(tuner->observations().empty());
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "parameter id 77"));
  tuner->ReceiveTrialResult(78, params.get(), value.get(), 2.0, true);
  ASSERT_EQ(tuner->observations().size(), 1u);
  EXPECT_EQ(tuner->observations()[0].values[0], 4.0);
  EXPECT_EQ(tuner->observations()[0].loss, 2.0);
  // A result arrives once per generated trial; a second one is ignored.
  std::string p = *Generate(*tuner, 1);
  ReportResult(*tuner, 1, p, 1.0);
  ReportResult(*tuner, 1, p, 1.0);
  EXPECT_EQ(tuner->observations().size(), 2u);
}

TEST(AnnealTunerTest, NewSearchSpaceKeepsTheResultsThatStillFit) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, R"({"x": {"_type": "uniform", "_value": [0, 10]},
                                                "c": {"_type": "choice", "_value": ["p", "q"]}})",
                                      R"({"seed": 19})");
  Import(*tuner, Json::parse(R"([{"parameters": {"x": 3.0, "c": "p"}, "value": 1},
                                 {"parameters": {"x": 4.0, "c": "q"}, "value": 2}])"));
  Update(*tuner, R"({"x": {"_type": "uniform", "_value": [0, 20]},
                     "c": {"_type": "choice", "_value": ["p", "r"]}})");
  ASSERT_EQ(tuner->observations().size(), 1u);  // "q" is no option any more
  EXPECT_EQ(tuner->observations()[0].values[0], 3.0);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "1 past configurations do not fit"));
}

// --- class_args, search space, errors ---

TEST(AnnealTunerTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) { return Constructing<AnnealTuner>(host, args); };
  ExpectError(construct(R"({"tpe_args": {}})"), TH_INVALID_ARGUMENT, {"\"tpe_args\"", "anneal"});
  ExpectError(construct(R"({"optimize_mode": "best"})"), TH_INVALID_ARGUMENT,
              {"\"optimize_mode\""});
  ExpectError(construct(R"({"seed": -3})"), TH_INVALID_ARGUMENT, {"\"seed\""});
  ExpectError(construct(R"({"parallel_optimize": "yes"})"), TH_INVALID_ARGUMENT,
              {"\"parallel_optimize\""});
  ExpectError(construct(R"({"constant_liar_type": "best"})"), TH_INVALID_ARGUMENT,
              {"\"constant_liar_type\"", "\"min\", \"max\", \"mean\""});
  ExpectError(construct(R"({"constant_liar_type": "none"})"), TH_INVALID_ARGUMENT,
              {"\"constant_liar_type\""});
  // Every argument NNI knows, plus the seed.
  msgpack::object_handle ok = Msgpack(R"({"optimize_mode": "maximize", "seed": 3,
      "parallel_optimize": false, "constant_liar_type": "mean"})");
  AnnealTuner t(host.ref(), ok.get());
  EXPECT_TRUE(t.maximize());
  EXPECT_EQ(t.seed(), 3u);
}

TEST(AnnealTunerTest, BadSearchSpaceIsRefusedNamingTheKey) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 20})");
  auto update = [&](const std::string& space) { return Updating(*tuner, space); };
  ExpectError(update(R"({"lr": {"_type": "loguniform", "_value": [0, 1]}})"), TH_INVALID_ARGUMENT,
              {"\"lr\""});
  ExpectError(update(R"({"opt": {"_type": "choice", "_value": [
                 {"_name": "adam", "lr": {"_type": "uniform", "_value": [1]}}]}})"),
              TH_INVALID_ARGUMENT, {"\"opt/lr\"", "adam"});
  ExpectError(update(R"({"x": {"_type": "gaussian", "_value": [0, 1]}})"), TH_INVALID_ARGUMENT,
              {"\"x\"", "gaussian"});
  // A refused update leaves the previous space in use.
  std::optional<std::string> p = Generate(*tuner, 0);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(ToJson(*p).contains("x"));
}

TEST(AnnealTunerTest, CallsBeforeASearchSpaceAreABadState) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, "");
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "anneal: seed "));
  ExpectCallsBeforeASearchSpaceRefused(*tuner);
}

// --- Reproducibility and state ---

TEST(AnnealTunerTest, SameSeedAndEventsGiveTheSameParameters) {
  RecordingHost host;
  const char* args = R"({"seed": 21, "parallel_optimize": true, "constant_liar_type": "mean"})";
  auto a = MakeTuner<AnnealTuner>(host, kEveryType, args);
  auto b = MakeTuner<AnnealTuner>(host, kEveryType, args);
  Driver da;
  Driver db;
  std::vector<std::string> seq_a = da.Run(*a, 120);
  std::vector<std::string> seq_b = db.Run(*b, 120);
  ExpectSameSequence(seq_a, seq_b, Readable);
  auto c = MakeTuner<AnnealTuner>(
      host, kEveryType, R"({"seed": 22, "parallel_optimize": true, "constant_liar_type": "mean"})");
  Driver dc;
  EXPECT_TRUE(dc.Run(*c, 120) != seq_a);
}

TEST(AnnealTunerTest, SavedStateContinuesExactlyLikeTheOriginal) {
  RecordingHost host;
  const char* args = R"({"seed": 23, "parallel_optimize": true})";
  auto a = MakeTuner<AnnealTuner>(host, kEveryType, args);
  Driver driver;
  driver.Run(*a, 60);
  ASSERT_GT(a->running_count(), 0u);
  ASSERT_TRUE(a->LiarActive() || a->running_count() > 0);
  const std::string state = a->SaveState();
  Driver copy = driver;
  std::vector<std::string> next = driver.Run(*a, 60);

  // The same class_args but the seed, which the state restores.
  auto b = MakeTuner<AnnealTuner>(host, kEveryType, R"({"seed": 5, "parallel_optimize": true})");
  b->LoadState(state);
  EXPECT_EQ(b->seed(), 23u);
  std::vector<std::string> resumed = copy.Run(*b, 60);
  ExpectSameSequence(resumed, next, Readable);
  EXPECT_TRUE(b->observations() == a->observations());
  EXPECT_TRUE(b->SaveState() == a->SaveState());
}

TEST(AnnealTunerTest, SavedStateKeepsTheTriedConfigurations) {
  RecordingHost host;
  const char* space = R"({"a": {"_type": "choice", "_value": [1, 2, 3]},
                         "b": {"_type": "randint", "_value": [0, 2]}})";
  auto a = MakeTuner<AnnealTuner>(host, space, R"({"seed": 24})");
  std::set<Json> all;
  for (const Json& p : Draw(*a, 3)) all.insert(p);
  auto b = MakeTuner<AnnealTuner>(host, space, R"({"seed": 24})");
  b->LoadState(a->SaveState());
  for (const Json& p : Draw(*b, 3)) EXPECT_TRUE(all.insert(p).second) << "repeated " << p;
  EXPECT_EQ(all.size(), 6u);
  EXPECT_FALSE(Generate(*b, 7).has_value());
}

TEST(AnnealTunerTest, BadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto tuner = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 25})");
  auto reference = MakeTuner<AnnealTuner>(host, kX, R"({"seed": 25})");
  ExpectError([&] { tuner->LoadState("\xc1"); }, TH_INVALID_ARGUMENT, {"saved state"});
  const std::string other = PackText(R"({"format": "org.tunehost.random", "version": 1})");
  ExpectError([&] { tuner->LoadState(other); }, TH_INVALID_ARGUMENT,
              {"saved state", "org.tunehost.anneal"});
  // A state of another search space (two parameters) does not fit.
  auto two = MakeTuner<AnnealTuner>(host, R"({"x": {"_type": "uniform", "_value": [0, 10]},
                                              "y": {"_type": "uniform", "_value": [0, 1]}})",
                                    R"({"seed": 25})");
  ImportSame(*two, Json{{"x", 1.0}, {"y", 0.5}}, 1.0, 2);
  ExpectError([&] { tuner->LoadState(two->SaveState()); }, TH_INVALID_ARGUMENT,
              {"saved state", "does not fit the search space"});
  // Losses are signed by optimize_mode: a state of the other mode is refused.
  auto maximizing =
      MakeTuner<AnnealTuner>(host, kX, R"({"seed": 25, "optimize_mode": "maximize"})");
  ExpectError([&] { tuner->LoadState(maximizing->SaveState()); }, TH_INVALID_ARGUMENT,
              {"saved state", "optimize_mode maximize"});
  EXPECT_EQ(tuner->seed(), 25u);
  EXPECT_EQ(Draw(*tuner, 5), Draw(*reference, 5));
}

TEST(AnnealTunerTest, GenerateThroughTheCAbiEmitsEveryRequestedId) {
  RecordingHost host;
  auto t = AbiTuner::Of<AnnealTuner>(host, R"({"seed": 26})");
  ASSERT_EQ(t->UpdateSearchSpace(kEveryType), TH_OK) << t->message();
  EXPECT_EQ(t->Generate({3, 4, 5}), TH_OK) << t->message();
  EXPECT_EQ(t->emitted_ids(), (std::vector<int64_t>{3, 4, 5}));
}

}  // namespace
}  // namespace tunehost::plugins::testing
