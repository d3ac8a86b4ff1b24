// Tests of plugins/cmaes/cmaes_tuner.{h,cc}: CMA-ES with Optuna's
// CmaEsSampler defaults (population, step size, centre, one random start-up
// trial), generations told only by their own trials, choices drawn at random,
// convergence on a shifted sphere and a rotated ill-conditioned ellipsoid
// (better than random search with the same budget), class_args and import.
#include "cmaes/cmaes_tuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins/plugin_testing.h"
#include "plugins/tuner_testing.h"
#include "random/random_tuner.h"

namespace tunehost::plugins::testing {
namespace {

constexpr const char* kSquare = R"({
  "x": {"_type": "uniform", "_value": [0, 1]},
  "y": {"_type": "uniform", "_value": [0, 1]}})";

double ShiftedSphere(const Json& p) {
  const double x = p.at("x").get<double>() - 0.3, y = p.at("y").get<double>() - 0.7;
  return x * x + y * y;
}

TEST(CmaEsTunerTest, DefaultsAreOptunasAndTheStartUpTrialIsNotTold) {
  RecordingHost host;
  auto tuner = MakeTuner<CmaEsTuner>(host, kSquare, R"({"seed": 1, "optimize_mode": "minimize"})");
  EXPECT_EQ(tuner->dimensions(), 2u);
  EXPECT_EQ(tuner->popsize(), 6u);  // 4 + floor(3 ln 2)
  EXPECT_DOUBLE_EQ(tuner->sigma(), 1.0 / 6);
  EXPECT_DOUBLE_EQ(tuner->mean()[0], 0.5);
  // Trial 0 is the random start-up trial: its result is not one of the six.
  std::vector<std::string> params = GenerateN(*tuner, 7);
  for (int64_t id = 0; id < 6; ++id) ReportResult(*tuner, id, params[id], 1.0 + id);
  EXPECT_EQ(tuner->generation(), 0u);
  ReportResult(*tuner, 6, params[6], 7.0);
  EXPECT_EQ(tuner->generation(), 1u);

  auto five = MakeTunerOf<CmaEsTuner>(
      host, Json::parse(R"({"a": {"_type": "uniform", "_value": [0, 1]},
                             "b": {"_type": "loguniform", "_value": [0.001, 1]},
                             "c": {"_type": "quniform", "_value": [0, 10, 2]},
                             "d": {"_type": "normal", "_value": [0, 1]},
                             "e": {"_type": "randint", "_value": [0, 3]},
                             "f": {"_type": "choice", "_value": ["p", "q"]}})"),
      Json{{"seed", 2}});
  EXPECT_EQ(five->dimensions(), 5u);  // choice is not a dimension
  EXPECT_EQ(five->popsize(), 8u);     // 4 + floor(3 ln 5)
}

TEST(CmaEsTunerTest, ResultsOfAnOlderGenerationOrWithoutAResultAreNotUsed) {
  RecordingHost host;
  auto tuner = MakeTuner<CmaEsTuner>(host, kSquare,
                                     R"({"seed": 3, "popsize": 4, "n_startup_trials": 0})");
  std::vector<std::string> params = GenerateN(*tuner, 6);
  tuner->TrialEnd(0, false);  // ended without a result
  for (int64_t id = 1; id < 4; ++id) ReportResult(*tuner, id, params[id], 1.0);
  EXPECT_EQ(tuner->generation(), 0u) << "three results of four";
  ReportResult(*tuner, 4, params[4], 1.0);
  EXPECT_EQ(tuner->generation(), 1u);
  ReportResult(*tuner, 5, params[5], 1.0);  // drawn in generation 0: not told
  std::vector<std::string> next = GenerateN(*tuner, 4, 6);
  for (int64_t i = 0; i < 3; ++i) ReportResult(*tuner, 6 + i, next[i], 1.0);
  EXPECT_EQ(tuner->generation(), 1u) << "the stale result counted";
  ReportResult(*tuner, 9, next[3], 1.0);
  EXPECT_EQ(tuner->generation(), 2u);
}

TEST(CmaEsTunerTest, ConvergesOnAShiftedSphereInBothOptimizeModes) {
  RecordingHost host;
  for (const char* mode : {"minimize", "maximize"}) {
    SCOPED_TRACE(mode);
    Json args{{"seed", 4}, {"optimize_mode", mode}};
    auto tuner = MakeTunerOf<CmaEsTuner>(host, Json::parse(kSquare), args);
    const double best = Minimize(*tuner, ShiftedSphere, 300, 6, std::string(mode) == "maximize");
    EXPECT_LT(best, 1e-6);
    EXPECT_NEAR(tuner->mean()[0], 0.3, 0.01);
    EXPECT_NEAR(tuner->mean()[1], 0.7, 0.01);
    EXPECT_LT(tuner->sigma(), 0.01);
  }
}

// A rotated ellipsoid of condition 10^4 in 6 dimensions: CMA-ES learns the
// rotated covariance; random search with the same budget gets nowhere near.
TEST(CmaEsTunerTest, LearnsARotatedIllConditionedEllipsoidBetterThanRandomSearch) {
  Json space = Json::object();
  const int n = 6;
  for (int i = 0; i < n; ++i) {
    space["x" + std::to_string(i)] = Json{{"_type", "uniform"}, {"_value", {-5, 5}}};
  }
  auto f = [&](const Json& p) {
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      // Rotation: z_i = x_i + x_{i+1} - 1 mixes neighbours (optimum near 0.5 each).
      const double xi = p.at("x" + std::to_string(i)).get<double>();
      const double xj = p.at("x" + std::to_string((i + 1) % n)).get<double>();
      const double z = xi + 0.5 * xj - 0.75;
      sum += std::pow(1e4, static_cast<double>(i) / (n - 1)) * z * z;
    }
    return sum;
  };
  RecordingHost host;
  auto cma = MakeTunerOf<CmaEsTuner>(host, space, Json{{"seed", 5}, {"optimize_mode", "minimize"}});
  auto random = MakeTunerOf<RandomTuner>(host, space, Json{{"seed", 5}});
  const double cma_best = Minimize(*cma, f, 2000, 10);
  const double random_best = Minimize(*random, f, 2000, 10);
  EXPECT_LT(cma_best, 1e-4);
  EXPECT_LT(cma_best * 1000, random_best);
}

TEST(CmaEsTunerTest, ChoicesAreDrawnAtRandomAndEveryValueStaysInItsSpace) {
  RecordingHost host;
  auto tuner = MakeTuner<CmaEsTuner>(host, R"({
    "act": {"_type": "choice", "_value": ["relu", "tanh", "sigmoid"]},
    "layers": {"_type": "randint", "_value": [1, 4]},
    "lr": {"_type": "qloguniform", "_value": [0.001, 0.1, 0.001]}})",
                                     R"({"seed": 6, "n_startup_trials": 0})");
  EXPECT_EQ(tuner->dimensions(), 2u);
  std::set<std::string> acts;
  std::set<int64_t> layers;
  std::vector<std::string> params = GenerateN(*tuner, 200);
  for (size_t i = 0; i < params.size(); ++i) {
    Json p = ToJson(params[i]);
    acts.insert(p.at("act").get<std::string>());
    layers.insert(p.at("layers").get<int64_t>());
    EXPECT_GE(p.at("lr").get<double>(), 0.001);
    EXPECT_LE(p.at("lr").get<double>(), 0.1);
    ReportResult(*tuner, static_cast<int64_t>(i), params[i], p.at("layers").get<double>());
  }
  EXPECT_EQ(acts, (std::set<std::string>{"relu", "tanh", "sigmoid"}));
  EXPECT_TRUE(layers.count(3) == 1 && *layers.begin() >= 1 && *layers.rbegin() <= 3);
}

TEST(CmaEsTunerTest, ClassArgsAreCheckedAndImportedResultsJoinTheGeneration) {
  RecordingHost host;
  for (const char* args : {R"({"popsize": 1})", R"({"sigma0": 0})", R"({"sigma0": 1.5})",
                           R"({"n_startup_trials": -1})", R"({"x0": {}})"}) {
    SCOPED_TRACE(args);
    EXPECT_THROW(MakeTuner<CmaEsTuner>(host, kSquare, args), sdk::Error);
  }
  auto tuner = MakeTuner<CmaEsTuner>(host, kSquare, R"({"seed": 7, "popsize": 4})");
  Json records = Json::array();
  for (int i = 0; i < 4; ++i) {
    records.push_back({{"parameters", {{"x", 0.1 * i}, {"y", 0.2}}}, {"value", i}});
  }
  Import(*tuner, records);
  EXPECT_EQ(tuner->generation(), 1u);
}

// A saved state that would make the tuner emit NaN or lose its distribution
// is refused with what is wrong, and the tuner keeps its own.
TEST(CmaEsTunerTest, ABadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto tuner = MakeTuner<CmaEsTuner>(host, kSquare,
                                     R"({"seed": 8, "popsize": 4, "n_startup_trials": 0})");
  std::vector<std::string> params = GenerateN(*tuner, 4);
  for (int64_t id = 0; id < 4; ++id) ReportResult(*tuner, id, params[id], static_cast<double>(id));
  const std::string good = tuner->SaveState();
  const Json state = Json::from_msgpack(good);
  auto refused = [&](const Json& bad, const std::string& part) {
    SCOPED_TRACE(part);
    auto other = MakeTuner<CmaEsTuner>(host, kSquare, R"({"seed": 9, "popsize": 4})");
    const std::vector<uint8_t> bytes = Json::to_msgpack(bad);
    ExpectError([&] { other->LoadState(std::string(bytes.begin(), bytes.end())); },
                TH_INVALID_ARGUMENT, {part});
    EXPECT_EQ(other->generation(), 0u);
    EXPECT_DOUBLE_EQ(other->mean()[0], 0.5);
  };
  Json nan_mean = state;
  nan_mean["mean"][0] = std::numeric_limits<double>::quiet_NaN();
  refused(nan_mean, "mean holds a value that is not finite");
  Json not_positive = state;
  not_positive["C"] = Json::array({1.0, 2.0, 2.0, 1.0});
  refused(not_positive, "positive definite");
  Json wider = state;
  wider["dimensions"] = 3;
  refused(wider, "dimensions");
  Json no_sigma = state;
  no_sigma["sigma"] = -1.0;
  refused(no_sigma, "sigma");
  auto other = MakeTuner<CmaEsTuner>(host, kSquare, R"({"seed": 9, "popsize": 4})");
  other->LoadState(good);
  EXPECT_EQ(other->generation(), 1u);
  EXPECT_EQ(other->mean(), tuner->mean());
}

}  // namespace
}  // namespace tunehost::plugins::testing
