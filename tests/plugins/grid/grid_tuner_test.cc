// Tests of plugins/grid/grid_tuner.{h,cc}: NNI's GridSearch tuner (epochs of
// quantile grids, full enumeration of categorical and nested parameters,
// q-rounding, exhaustion, import, class_args and search space validation,
// reproducibility, state). Expected grids are written out by hand here.
#include "grid/grid_tuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins/plugin_testing.h"
#include "plugins/tuner_testing.h"
#include "tunehost/sdk/cpp/search_space.h"
#include "tunehost/sdk/host.h"

namespace tunehost::plugins::testing {
namespace {

// The values of one key, which must be floats.
std::vector<double> Floats(const std::vector<Json>& configurations, const std::string& key) {
  std::vector<double> out;
  for (const Json& p : configurations) {
    EXPECT_TRUE(p[key].is_number_float()) << p;
    out.push_back(p[key].get<double>());
  }
  return out;
}

void ExpectNearAll(const std::vector<double>& got, const std::vector<double>& want,
                   double tolerance = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tolerance * std::max(1.0, std::fabs(want[i]))) << "value " << i;
  }
}

uint64_t CountConfigurations(const std::string& space) {
  msgpack::object_handle h = Msgpack(space);
  std::optional<uint64_t> n = sdk::SearchSpace::Parse(h.get()).CountConfigurations();
  EXPECT_TRUE(n.has_value());
  return n.value_or(0);
}

// Phi^-1(k/8), from Python's statistics.NormalDist().inv_cdf (Wichura's AS241).
const double kPhiInv1_8 = -1.1503493803760079;
const double kPhiInv1_4 = -0.6744897501960817;
const double kPhiInv3_8 = -0.31863936396437514;

// --- The quantile function ---

TEST(InverseNormalCdfTest, MatchesReferenceValues) {
  // Python's statistics.NormalDist().inv_cdf, accurate to about 1e-16.
  const std::pair<double, double> kReference[] = {
      {0.25, -0.6744897501960817},   {0.125, -1.1503493803760079},
      {0.375, -0.31863936396437514}, {0.02425, -1.9729610513118845},
      {0.02, -2.0537489106318225},   {0.1, -1.2815515655446008},
      {0.4, -0.2533471031357998},    {1e-05, -4.2648907939228256},
      {1e-10, -6.361340902404056},   {1e-20, -9.262340089798405},
      {1e-100, -21.27345356096532},  {1e-300, -37.0470962993612},
      {0.9, 1.2815515655446008},     {0.999, 3.090232306167813},
  };
  for (auto [p, x] : kReference) {
    EXPECT_NEAR(InverseNormalCdf(p), x, 1e-14 * std::fabs(x)) << "p = " << p;
  }
}

TEST(InverseNormalCdfTest, EndsMiddleAndSymmetry) {
  EXPECT_EQ(InverseNormalCdf(0.5), 0.0);
  EXPECT_EQ(InverseNormalCdf(0.0), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(InverseNormalCdf(1.0), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(InverseNormalCdf(-0.1)));
  EXPECT_TRUE(std::isnan(InverseNormalCdf(1.5)));
  EXPECT_TRUE(std::isnan(InverseNormalCdf(std::nan(""))));
  // Exactly for quantiles whose 1 - p is exact both ways, as those of the grid.
  for (double p : {0.25, 0.125, 0.375, 0.0625, 0x1p-20, 0.4990234375}) {
    EXPECT_EQ(InverseNormalCdf(1.0 - p), -InverseNormalCdf(p)) << p;
  }
  // Finite and increasing down to the smallest double.
  double previous = 0;
  for (double p = 0.25; p > 0; p /= 16) {
    double x = InverseNormalCdf(p);
    ASSERT_TRUE(std::isfinite(x)) << p;
    EXPECT_LT(x, previous) << p;
    previous = x;
  }
}

// --- Epochs on quantiles ---

TEST(GridTunerTest, UniformIsRefinedByEpochs) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, R"({"u": {"_type": "uniform", "_value": [0, 8]}})");
  EXPECT_EQ(tuner->refinements(), 0);
  // Epoch 1: the midpoint; 2: the quartiles; 3: the odd eighths, each epoch
  // only what is new, in increasing quantile order.
  EXPECT_EQ(Floats(GenerateNJson(*tuner, 1), "u"), (std::vector<double>{4}));
  EXPECT_EQ(Floats(GenerateNJson(*tuner, 2), "u"), (std::vector<double>{2, 6}));
  EXPECT_EQ(tuner->refinements(), 1);
  EXPECT_EQ(Floats(GenerateNJson(*tuner, 4), "u"), (std::vector<double>{1, 3, 5, 7}));
  EXPECT_EQ(Floats(GenerateNJson(*tuner, 8), "u"),
            (std::vector<double>{0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5}));
  EXPECT_EQ(tuner->refinements(), 3);
  EXPECT_TRUE(
      host.Logged(TH_LOG_INFO, "grid: refined grid, 3 refinements, points per parameter: 15"));
}

TEST(GridTunerTest, NewValuesAreCombinedWithEveryValueOfTheOtherParameters) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, R"({"c": {"_type": "choice", "_value": ["x", "y"]},
                              "u": {"_type": "uniform", "_value": [0, 8]}})");
  std::vector<Json> got = GenerateNJson(*tuner, 14);
  std::vector<Json> want;
  auto add = [&](const char* c, double u) { want.push_back(Json{{"c", c}, {"u", u}}); };
  // The last parameter varies fastest, as in NNI.
  for (const char* c : {"x", "y"}) add(c, 4);
  for (const char* c : {"x", "y"}) {
    for (double u : {2, 6}) add(c, u);
  }
  for (const char* c : {"x", "y"}) {
    for (double u : {1, 3, 5, 7}) add(c, u);
  }
  EXPECT_EQ(got, want);
}

TEST(GridTunerTest, TwoNumericParametersGetEveryNewCombination) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, R"({"a": {"_type": "uniform", "_value": [0, 4]},
                              "b": {"_type": "uniform", "_value": [0, 40]}})");
  std::vector<Json> got = GenerateNJson(*tuner, 9);
  std::vector<Json> want;
  // Epoch 2's grid is {2, 1, 3} x {20, 10, 30}; (2, 20) was epoch 1's.
  for (double a : {2, 1, 3}) {
    for (double b : {20, 10, 30}) want.push_back(Json{{"a", a}, {"b", b}});
  }
  EXPECT_EQ(got, want);
}

TEST(GridTunerTest, NormalTypesGoThroughTheInverseCdf) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, R"({"n": {"_type": "normal", "_value": [1, 2]}})");
  std::vector<double> n = Floats(GenerateNJson(*tuner, 7), "n");
  ASSERT_EQ(n.size(), 7u);
  EXPECT_EQ(n[0], 1.0);  // the median is mu exactly
  ExpectNearAll(n, {1, 1 + 2 * kPhiInv1_4, 1 - 2 * kPhiInv1_4, 1 + 2 * kPhiInv1_8,
                    1 + 2 * kPhiInv3_8, 1 - 2 * kPhiInv3_8, 1 - 2 * kPhiInv1_8});

  auto log = MakeTuner<GridTuner>(host, R"({"l": {"_type": "lognormal", "_value": [0.5, 1]}})");
  ExpectNearAll(Floats(GenerateNJson(*log, 3), "l"),
                {std::exp(0.5), std::exp(0.5 + kPhiInv1_4), std::exp(0.5 - kPhiInv1_4)});
}

TEST(GridTunerTest, LogTypesAreRefinedInLogSpace) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, R"({"lr": {"_type": "loguniform", "_value": [1, 100]}})");
  ExpectNearAll(Floats(GenerateNJson(*tuner, 3), "lr"),
                {10, 3.1622776601683795, 31.622776601683793});
}

// --- q-rounding ---

TEST(GridTunerTest, QuniformTakesEachOfItsValuesOnceThenNoMoreTrials) {
  RecordingHost host;
  const char* space = R"({"q": {"_type": "quniform", "_value": [0, 10, 2.5]}})";
  auto tuner = MakeTuner<GridTuner>(host, space);
  std::vector<Json> all = GenerateAll(*tuner);
  // Quantile 1/2 -> 5; 1/4, 3/4 -> 2.5, 7.5; 1/8 -> 1.25 rounds to 0 and
  // 7/8 -> 8.75 to 10, while 3/8 and 5/8 round to 5 again and are dropped.
  EXPECT_EQ(Floats(all, "q"), (std::vector<double>{5, 2.5, 7.5, 0, 10}));
  EXPECT_EQ(all.size(), CountConfigurations(space));
  EXPECT_TRUE(tuner->exhausted());
  EXPECT_FALSE(Generate(*tuner).has_value());
}

TEST(GridTunerTest, QuantilesThatRoundToAKnownValueAreDropped) {
  RecordingHost host;
  // clip(round(x / 4) * 4, 0, 10) takes 0, 4, 8. Quantile 1/2 gives 5 -> 4,
  // 1/4 gives 2.5 -> 4 again (dropped), 3/4 gives 7.5 -> 8, 1/8 gives 1.25 -> 0.
  auto tuner = MakeTuner<GridTuner>(host, R"({"q": {"_type": "quniform", "_value": [0, 10, 4]}})");
  EXPECT_EQ(Floats(GenerateAll(*tuner), "q"), (std::vector<double>{4, 8, 0}));

  // NNI's worked example, z: quniform(2, 3, 1): 2.5 rounds to 2 (half to
  // even), 2.75 to 3. (NNI's code itself stops after 2: see grid_tuner.h.)
  auto z = MakeTuner<GridTuner>(host, R"({"z": {"_type": "quniform", "_value": [2, 3, 1]}})");
  EXPECT_EQ(Floats(GenerateAll(*z), "z"), (std::vector<double>{2, 3}));

  // An epoch that adds nothing does not end the grid: [2, 10, 5] takes
  // 5 (1/2), 10 (3/4), then 2 only at 1/16 (2.5 -> round(0.5) = 0 -> clip 2).
  auto late = MakeTuner<GridTuner>(host, R"({"q": {"_type": "quniform", "_value": [2, 10, 5]}})");
  EXPECT_EQ(Floats(GenerateAll(*late), "q"), (std::vector<double>{5, 10, 2}));
  EXPECT_EQ(late->refinements(), 3);
}

TEST(GridTunerTest, EqualChoiceOptionsAreEmittedOnce) {
  RecordingHost host;
  // 1 and 1.0 are the same configuration (sdk::CanonicalKey).
  auto tuner =
      MakeTuner<GridTuner>(host, R"({"c": {"_type": "choice", "_value": [1, 1.0, 2, 1]}})");
  std::vector<Json> all = GenerateAll(*tuner);
  EXPECT_EQ(all, (std::vector<Json>{Json{{"c", 1}}, Json{{"c", 2}}}));
}

TEST(GridTunerTest, ChoiceTimesQuniformCombinations) {
  RecordingHost host;
  const char* space = R"({"c": {"_type": "choice", "_value": ["a", "b"]},
                          "q": {"_type": "quniform", "_value": [0, 10, 2.5]}})";
  auto tuner = MakeTuner<GridTuner>(host, space);
  std::vector<Json> want;
  for (const std::vector<double>& epoch :
       std::vector<std::vector<double>>{{5}, {2.5, 7.5}, {0, 10}}) {
    for (const char* c : {"a", "b"}) {
      for (double q : epoch) want.push_back(Json{{"c", c}, {"q", q}});
    }
  }
  EXPECT_EQ(GenerateAll(*tuner), want);
  EXPECT_EQ(want.size(), CountConfigurations(space));
}

// --- Nested choices ---

TEST(GridTunerTest, NestedChoicesEnumerateOnlyTheChosenOptionsParameters) {
  RecordingHost host;
  const char* space = R"({
    "opt": {"_type": "choice", "_value": [
      {"_name": "sgd", "lr": {"_type": "choice", "_value": [0.1, 0.01]}},
      {"_name": "adam", "beta": {"_type": "randint", "_value": [1, 3]}},
      {"_name": "none"}]},
    "bs": {"_type": "choice", "_value": [16, 32]}})";
  auto tuner = MakeTuner<GridTuner>(host, space);
  std::vector<Json> want;
  for (const char* opt : {R"({"_name": "sgd", "lr": 0.1})", R"({"_name": "sgd", "lr": 0.01})",
                          R"({"_name": "adam", "beta": 1})", R"({"_name": "adam", "beta": 2})",
                          R"({"_name": "none"})"}) {
    for (int bs : {16, 32}) want.push_back(Json{{"opt", Json::parse(opt)}, {"bs", bs}});
  }
  std::vector<Json> got = GenerateAll(*tuner);
  EXPECT_EQ(got, want);
  EXPECT_EQ(got.size(), CountConfigurations(space));
  EXPECT_FALSE(Generate(*tuner).has_value());
}

TEST(GridTunerTest, NumericParameterOfANestedOptionIsRefinedUnderItsOption) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, R"({"opt": {"_type": "choice", "_value": [
      {"_name": "a", "x": {"_type": "uniform", "_value": [0, 4]}},
      {"_name": "b"}]}})");
  std::vector<Json> want;
  auto a = [&](double x) { want.push_back(Json{{"opt", Json{{"_name", "a"}, {"x", x}}}}); };
  a(2);
  want.push_back(Json{{"opt", Json{{"_name", "b"}}}});
  // Option b has nothing new in later epochs.
  for (double x : {1.0, 3.0, 0.5, 1.5, 2.5, 3.5}) a(x);
  EXPECT_EQ(GenerateNJson(*tuner, 8), want);
}

// --- Exhaustion ---

TEST(GridTunerTest, FiniteSpaceGivesCountConfigurationsThenNoMoreTrialsForGood) {
  RecordingHost host;
  const char* space = R"({
    "c": {"_type": "choice", "_value": ["relu", 3, 0.5]},
    "ri": {"_type": "randint", "_value": [-2, 3]},
    "qu": {"_type": "quniform", "_value": [1, 9, 2]},
    "ql": {"_type": "qloguniform", "_value": [1, 50, 10]},
    "opt": {"_type": "choice", "_value": [
      {"_name": "sgd", "m": {"_type": "quniform", "_value": [0, 1, 0.25]}},
      {"_name": "none"}]}})";
  auto tuner = MakeTuner<GridTuner>(host, space);
  std::vector<Json> all = GenerateAll(*tuner);
  // 3 * 5 * 5 (1, 2, 4, 6, 8) * 6 (1, 10, ..., 50) * (5 + 1).
  EXPECT_EQ(CountConfigurations(space), 2700u);
  EXPECT_EQ(all.size(), 2700u);
  std::set<Json> distinct(all.begin(), all.end());
  EXPECT_EQ(distinct.size(), all.size());
  EXPECT_TRUE(tuner->exhausted());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Generate(*tuner).has_value());
  int logged = 0;
  for (const auto& [level, message] : host.logs()) {
    logged += message.find("fully explored") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(logged, 1);
}

TEST(GridTunerTest, ExhaustionReachesTheHostAsNoMoreTrials) {
  RecordingHost host;
  auto t = AbiTuner::Of<GridTuner>(host, "{}");
  ASSERT_EQ(t->UpdateSearchSpace(R"({"a": {"_type": "choice", "_value": [1, 2, 3]},
                                     "b": {"_type": "randint", "_value": [0, 2]}})"),
            TH_OK)
      << t->message();
  EXPECT_EQ(t->Generate({10, 11, 12, 13, 14, 15, 16, 17}), TH_NO_MORE_TRIALS);
  EXPECT_EQ(t->emitted_ids(), (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(t->Generate({10}), TH_NO_MORE_TRIALS);
  EXPECT_EQ(t->emitted_ids().size(), 6u);
}

TEST(GridTunerTest, SpaceWithAContinuousParameterNeverExhausts) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, R"({"c": {"_type": "choice", "_value": ["a", "b"]},
                              "q": {"_type": "quniform", "_value": [0, 1, 0.5]},
                              "u": {"_type": "uniform", "_value": [-1, 1]}})");
  // q is done after epoch 2; u doubles its values each epoch.
  std::vector<Json> got = GenerateNJson(*tuner, 2000);
  ASSERT_EQ(got.size(), 2000u);
  std::set<Json> distinct(got.begin(), got.end());
  EXPECT_EQ(distinct.size(), got.size());
  EXPECT_FALSE(tuner->exhausted());
  std::set<double> q;
  for (const Json& p : got) q.insert(p["q"].get<double>());
  EXPECT_EQ(q, (std::set<double>{0, 0.5, 1}));
}

// --- Imports ---

TEST(GridTunerTest, ImportedConfigurationsAreSkipped) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, R"({"c": {"_type": "choice", "_value": ["x", "y"]},
                              "q": {"_type": "quniform", "_value": [0, 10, 2.5]}})");
  // Key order, 5 vs 5.0, NNI's "parameter" spelling do not matter; a record
  // without a value is skipped.
  msgpack::object_handle records = Msgpack(R"([
    {"parameters": {"c": "x", "q": 5}, "value": 0.5},
    {"parameter": {"q": 2.5, "c": "y"}, "value": {"default": 0.7}},
    {"parameters": {"c": "y", "q": 10.0}}
  ])");
  tuner->ImportData(records.get());
  EXPECT_EQ(tuner->seen_count(), 2u);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "grid: skipped 1"));
  std::vector<Json> want;
  const std::vector<std::pair<const char*, double>> rest = {
      {"y", 5}, {"x", 2.5}, {"x", 7.5}, {"y", 7.5}, {"x", 0}, {"x", 10}, {"y", 0}, {"y", 10}};
  for (auto [c, q] : rest) {
    want.push_back(Json{{"c", c}, {"q", q}});
  }
  EXPECT_EQ(GenerateAll(*tuner), want);

  ExpectNonArrayImportRefused(*tuner);
}

TEST(GridTunerTest, ImportBeforeTheSearchSpaceCounts) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, "");
  msgpack::object_handle records =
      Msgpack(R"([{"parameters": {"u": 4.0}, "value": 1}, {"parameters": {"u": 6}, "value": 2}])");
  tuner->ImportData(records.get());
  Update(*tuner, R"({"u": {"_type": "uniform", "_value": [0, 8]}})");
  EXPECT_EQ(Floats(GenerateNJson(*tuner, 3), "u"), (std::vector<double>{2, 1, 3}));
}

// --- Reproducibility ---

TEST(GridTunerTest, SameEventsGiveTheSameBytes) {
  RecordingHost host;
  const char* space = R"({
    "c": {"_type": "choice", "_value": ["relu", 3, 0.5]},
    "n": {"_type": "qnormal", "_value": [0, 3, 0.5]},
    "lu": {"_type": "loguniform", "_value": [0.001, 10]},
    "opt": {"_type": "choice", "_value": [
      {"_name": "sgd", "lr": {"_type": "uniform", "_value": [0.01, 0.1]}},
      {"_name": "none"}]}})";
  auto a = MakeTuner<GridTuner>(host, space, R"({"optimize_mode": "minimize"})");
  auto b = MakeTuner<GridTuner>(host, space);
  msgpack::object_handle records = Msgpack(
      R"([{"parameters": {"c": 3, "n": 0.0, "lu": 0.1, "opt": {"_name": "none"}}, "value": 1}])");
  std::vector<std::string> seq_a = GenerateN(*a, 40);
  std::vector<std::string> seq_b = GenerateN(*b, 40);
  a->ImportData(records.get());
  b->ImportData(records.get());
  std::vector<std::string> more_a = GenerateN(*a, 300);
  std::vector<std::string> more_b = GenerateN(*b, 300);
  ASSERT_EQ(seq_a.size(), 40u);
  ASSERT_EQ(more_a.size(), 300u);
  EXPECT_EQ(seq_a, seq_b);
  EXPECT_EQ(more_a, more_b);
}

// --- Search space updates ---

TEST(GridTunerTest, SameSearchSpaceAgainKeepsThePositionAnotherRestartsSkippingTried) {
  RecordingHost host;
  const char* space = R"({"u": {"_type": "uniform", "_value": [0, 8]}})";
  auto tuner = MakeTuner<GridTuner>(host, space);
  GenerateN(*tuner, 2);  // 4, 2
  Update(*tuner, space);
  EXPECT_EQ(Floats(GenerateNJson(*tuner, 2), "u"), (std::vector<double>{6, 1}));

  // Another space: its enumeration from the start, without what was tried.
  Update(*tuner, R"({"u": {"_type": "uniform", "_value": [0, 8]},
                     "c": {"_type": "choice", "_value": [1]}})");
  EXPECT_EQ(tuner->refinements(), 0);
  std::vector<Json> got = GenerateNJson(*tuner, 4);
  EXPECT_EQ(got, (std::vector<Json>{Json{{"u", 4}, {"c", 1}}, Json{{"u", 2}, {"c", 1}},
                                    Json{{"u", 6}, {"c", 1}}, Json{{"u", 1}, {"c", 1}}}));
  // The first space's configurations have no "c": none of them counts as tried.
}

TEST(GridTunerTest, ExhaustionEndsWithANewSearchSpace) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, R"({"a": {"_type": "choice", "_value": [1, 2]}})");
  ASSERT_EQ(GenerateAll(*tuner).size(), 2u);
  ASSERT_TRUE(tuner->exhausted());
  Update(*tuner, R"({"a": {"_type": "choice", "_value": [1, 2, 3]}})");
  EXPECT_FALSE(tuner->exhausted());
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>{Json{{"a", 3}}}));
}

// --- Validation ---

TEST(GridTunerTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) { return Constructing<GridTuner>(host, args); };
  ExpectError(construct(R"({"seed": 1})"), TH_INVALID_ARGUMENT,
              {"grid", "\"seed\"", "accepted: optimize_mode"});
  ExpectError(construct(R"({"optimize_mode": "sideways"})"), TH_INVALID_ARGUMENT,
              {"\"optimize_mode\""});
  ExpectError(construct(R"({"optimize_mode": 1})"), TH_INVALID_ARGUMENT, {"\"optimize_mode\""});
  ExpectError(construct(R"([1])"), TH_INVALID_ARGUMENT, {"class_args must be a map"});
  for (const char* ok : {"{}", R"({"optimize_mode": "maximize"})", R"({"optimize_mode": null})"}) {
    msgpack::object_handle h = Msgpack(ok);
    EXPECT_NO_THROW(GridTuner(host.ref(), h.get())) << ok;
  }
}

TEST(GridTunerTest, BadSearchSpaceIsRefusedNamingTheKey) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, R"({"a": {"_type": "choice", "_value": [1, 2]}})");
  auto update = [&](const std::string& space) { return Updating(*tuner, space); };
  ExpectError(update(R"({"lr": {"_type": "loguniform", "_value": [0, 1]}})"),
              TH_INVALID_ARGUMENT, {"\"lr\""});
  ExpectError(update(R"({"x": {"_type": "gaussian", "_value": [0, 1]}})"), TH_INVALID_ARGUMENT,
              {"\"x\"", "gaussian"});
  ExpectError(update(R"({"opt": {"_type": "choice", "_value": [
                 {"_name": "adam", "lr": {"_type": "uniform", "_value": [1]}}]}})"),
              TH_INVALID_ARGUMENT, {"\"opt/lr\"", "adam"});
  ExpectError(update("{}"), TH_INVALID_ARGUMENT, {"grid", "empty"});
  // A refused update leaves the previous space and position in use.
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>{Json{{"a", 1}}, Json{{"a", 2}}}));
}

TEST(GridTunerTest, GenerateBeforeASearchSpaceIsABadState) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, "");
  ExpectError([&] { Generate(*tuner); }, TH_BAD_STATE, {"no search space"});
}

// --- Saved state ---

const char* kMixedSpace = R"({
  "c": {"_type": "choice", "_value": ["x", "y"]},
  "q": {"_type": "quniform", "_value": [0, 10, 2.5]},
  "opt": {"_type": "choice", "_value": [
    {"_name": "a", "u": {"_type": "uniform", "_value": [0, 1]}},
    {"_name": "b"}]}})";

TEST(GridTunerTest, SavedStateContinuesExactly) {
  RecordingHost host;
  auto a = MakeTuner<GridTuner>(host, kMixedSpace);
  GenerateN(*a, 9);  // into epoch 2
  msgpack::object_handle records = Msgpack(
      R"([{"parameters": {"c": "y", "q": 7.5, "opt": {"_name": "b"}}, "value": 1}])");
  a->ImportData(records.get());
  GenerateN(*a, 2);
  const std::string state = a->SaveState();
  const int64_t refinements = a->refinements();
  std::vector<std::string> next = GenerateN(*a, 60);

  // Loaded after the search space...
  auto b = MakeTuner<GridTuner>(host, kMixedSpace);
  b->LoadState(state);
  EXPECT_EQ(b->refinements(), refinements);
  EXPECT_EQ(GenerateN(*b, 60), next);

  // ... or before it (a host that restores state first).
  auto c = MakeTuner<GridTuner>(host, "");
  c->LoadState(state);
  EXPECT_EQ(c->SaveState(), state);  // still pending: saved as loaded
  Update(*c, kMixedSpace);
  EXPECT_EQ(GenerateN(*c, 60), next);
}

TEST(GridTunerTest, SavedExhaustedStateStaysExhausted) {
  RecordingHost host;
  const char* space = R"({"q": {"_type": "quniform", "_value": [2, 10, 5]}})";
  auto a = MakeTuner<GridTuner>(host, space);
  ASSERT_EQ(GenerateAll(*a).size(), 3u);
  auto b = MakeTuner<GridTuner>(host, space);
  b->LoadState(a->SaveState());
  EXPECT_TRUE(b->exhausted());
  EXPECT_FALSE(Generate(*b).has_value());
}

TEST(GridTunerTest, StateOfAnotherSearchSpaceKeepsOnlyTheTriedConfigurations) {
  RecordingHost host;
  auto a = MakeTuner<GridTuner>(host, R"({"a": {"_type": "choice", "_value": [1, 2]}})");
  GenerateN(*a, 1);  // {"a": 1}
  auto b = MakeTuner<GridTuner>(host, R"({"a": {"_type": "choice", "_value": [1, 2, 3]}})");
  GenerateN(*b, 2);
  b->LoadState(a->SaveState());
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "another search space"));
  EXPECT_EQ(GenerateAll(*b), (std::vector<Json>{Json{{"a", 2}}, Json{{"a", 3}}}));
}

TEST(GridTunerTest, BadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto tuner = MakeTuner<GridTuner>(host, kMixedSpace);
  auto reference = MakeTuner<GridTuner>(host, kMixedSpace);
  GenerateN(*tuner, 5);
  GenerateN(*reference, 5);
  const std::string good = tuner->SaveState();
  ExpectError([&] { tuner->LoadState("\xc1"); }, TH_INVALID_ARGUMENT, {"saved state"});
  const std::string other = PackText(R"({"format": "org.tunehost.random", "version": 1})");
  ExpectError([&] { tuner->LoadState(other); }, TH_INVALID_ARGUMENT,
              {"saved state", "not a state of format org.tunehost.grid"});
  const std::string future = PackText(R"({"format": "org.tunehost.grid", "version": 2})");
  ExpectError([&] { tuner->LoadState(future); }, TH_INVALID_ARGUMENT, {"saved state", "version"});
  ExpectError(
      [&] {
        tuner->LoadState(PackText(R"({"format": "org.tunehost.grid", "version": 1, "space": 1,
                                   "refinements": 0, "vector": null, "done": false, "seen": []})"));
      },
      TH_INVALID_ARGUMENT, {"saved state", "space"});

  // A state of this space whose vector or refinements do not fit it.
  Json j = ToJson(good);
  auto with = [&](const char* key, const Json& value) {
    Json copy = j;
    copy[key] = value;
    return Pack(copy);
  };
  ExpectError([&] { tuner->LoadState(with("vector", Json::array({0, 0}))); },
              TH_INVALID_ARGUMENT, {"saved state", "vector"});
  ExpectError([&] { tuner->LoadState(with("vector", Json::array({5, 0, 0, 0}))); },
              TH_INVALID_ARGUMENT, {"saved state", "vector"});
  ExpectError([&] { tuner->LoadState(with("refinements", 1000000)); }, TH_INVALID_ARGUMENT,
              {"saved state"});
  ExpectError([&] { tuner->LoadState(with("seen", Json::array({1}))); }, TH_INVALID_ARGUMENT,
              {"saved state", "seen"});
  EXPECT_EQ(tuner->SaveState(), good);
  EXPECT_EQ(GenerateN(*tuner, 20), GenerateN(*reference, 20));
}

}  // namespace
}  // namespace tunehost::plugins::testing
