// Tests of plugins/tpe: NNI's TPE tuner (defaults and class_args, warm-up,
// concentration near the optimum for every kind of parameter, maximize,
// nested spaces, the constant liar, deduplication, seeded reproducibility,
// checkpoint/restore, import, search-space updates) and the multivariate
// option.
#include "tpe/tpe_tuner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins/plugin_testing.h"
#include "plugins/tuner_testing.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins::testing {
namespace {

// The parameter map generated for `id`, or nullopt when there are no more
// trials.
std::optional<Json> Generate(TpeTuner& tuner, int64_t id) {
  Packed p = PackParameters(tuner, id);
  if (!p.generated) return std::nullopt;
  return ToJson(p.bytes);
}

// Trial `id` ran `params`, gave `value` and ended.
void Report(TpeTuner& tuner, int64_t id, const Json& params, double value) {
  ReportResult(tuner, id, Pack(params), value);
  tuner.TrialEnd(id, true);
}

// Runs `n` sequential trials of `f`; returns every parameter map in order.
std::vector<Json> RunTrials(TpeTuner& tuner, int n, const std::function<double(const Json&)>& f,
                      int64_t first_id = 0) {
  std::vector<Json> out;
  for (int64_t id = first_id; id < first_id + n; ++id) {
    std::optional<Json> p = Generate(tuner, id);
    EXPECT_TRUE(p.has_value()) << "no trial for id " << id;
    if (!p) break;
    Report(tuner, id, *p, f(*p));
    out.push_back(*p);
  }
  return out;
}

const Json kQuadSpace = {{"x", {{"_type", "uniform"}, {"_value", {-10, 10}}}}};
double Quad(const Json& p) { return std::pow(p["x"].get<double>() - 3.0, 2); }

double MeanDistance(const std::vector<Json>& ps, size_t from, double target) {
  double s = 0;
  for (size_t i = from; i < ps.size(); ++i) s += std::fabs(ps[i]["x"].get<double>() - target);
  return s / static_cast<double>(ps.size() - from);
}

// NNI's defaults, except that the always-active parameters are modelled
// jointly unless `multivariate: false` (tpe_tuner.h says why).
TEST(TpeTest, DefaultsAreNnisPlusTheJointModel) {
  RecordingHost host;
  auto t = MakeTunerOf<TpeTuner>(host, kQuadSpace, Json::object());
  EXPECT_FALSE(t->maximize());
  EXPECT_EQ(t->liar(), TpeTuner::Liar::kBest);
  EXPECT_EQ(t->options().n_startup_jobs, 20);
  EXPECT_EQ(t->options().n_ei_candidates, 24);
  EXPECT_EQ(t->options().linear_forgetting, 25);
  EXPECT_DOUBLE_EQ(t->options().prior_weight, 1.0);
  EXPECT_DOUBLE_EQ(t->options().gamma, 0.25);
  EXPECT_TRUE(t->options().multivariate);
  EXPECT_TRUE(t->options().ordered_randint);
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "tpe: seed ")) << "a random seed must be logged";
  auto nni = MakeTunerOf<TpeTuner>(host, kQuadSpace, {{"tpe_args", {{"multivariate", false}}}});
  EXPECT_FALSE(nni->options().multivariate);
  EXPECT_FALSE(nni->options().ordered_randint) << "NNI's model: randint is a category";
}

TEST(TpeTest, TpeArgsAreRead) {
  RecordingHost host;
  auto t = MakeTunerOf<TpeTuner>(host, kQuadSpace,
                                 {{"optimize_mode", "maximize"},
                                  {"seed", 5},
                                  {"tpe_args",
                                   {{"constant_liar_type", "mean"},
                                    {"n_startup_jobs", 10},
                                    {"n_ei_candidates", 20},
                                    {"linear_forgetting", 100},
                                    {"prior_weight", 0},
                                    {"gamma", 0.5},
                                    {"multivariate", true}}}});
  EXPECT_TRUE(t->maximize());
  EXPECT_EQ(t->seed(), 5u);
  EXPECT_EQ(t->liar(), TpeTuner::Liar::kMean);
  EXPECT_EQ(t->options().n_startup_jobs, 10);
  EXPECT_EQ(t->options().n_ei_candidates, 20);
  EXPECT_EQ(t->options().linear_forgetting, 100);
  EXPECT_DOUBLE_EQ(t->options().prior_weight, 0.0);
  EXPECT_DOUBLE_EQ(t->options().gamma, 0.5);
  EXPECT_TRUE(t->options().multivariate);
  // NNI switches the liar off with null; "none" is accepted too.
  EXPECT_EQ(
      MakeTunerOf<TpeTuner>(host, kQuadSpace, {{"tpe_args", {{"constant_liar_type", nullptr}}}})
          ->liar(),
      TpeTuner::Liar::kNone);
  EXPECT_EQ(
      MakeTunerOf<TpeTuner>(host, kQuadSpace, {{"tpe_args", {{"constant_liar_type", "none"}}}})
          ->liar(),
      TpeTuner::Liar::kNone);
}

TEST(TpeTest, BadClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  struct Case {
    Json args;
    std::string needle;
  } cases[] = {
      {{{"optimize_mode", "up"}}, "\"optimize_mode\""},
      {{{"seed", -1}}, "\"seed\""},
      {{{"sed", 1}}, "unknown class_args \"sed\""},
      {{{"tpe_args", {{"gamma", 2}}}}, "\"tpe_args/gamma\""},
      {{{"tpe_args", {{"gamma", 0}}}}, "\"tpe_args/gamma\""},
      {{{"tpe_args", {{"n_ei_candidates", 0}}}}, "\"tpe_args/n_ei_candidates\""},
      {{{"tpe_args", {{"n_startup_jobs", 2.5}}}}, "\"tpe_args/n_startup_jobs\""},
      {{{"tpe_args", {{"constant_liar_type", "min"}}}}, "\"tpe_args/constant_liar_type\""},
      {{{"tpe_args", {{"multivariate", "yes"}}}}, "\"tpe_args/multivariate\""},
      {{{"tpe_args", {{"group", 1}}}}, "\"tpe_args/group\""},
      {{{"tpe_args", {{"multivariate", false}, {"group", true}}}}, "\"tpe_args/group\" needs"},
      {{{"tpe_args", {{"gama", 0.3}}}}, "unknown class_args \"tpe_args/gama\""},
      {{{"tpe_args", 3}}, "\"tpe_args\""},
  };
  for (const Case& c : cases) {
    msgpack::object_handle args = MsgpackOf(c.args);
    try {
      TpeTuner t(host.ref(), args.get());
      ADD_FAILURE() << "accepted " << c.args.dump();
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.status(), TH_INVALID_ARGUMENT);
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos)
          << e.what() << " should name " << c.needle;
      EXPECT_EQ(std::string(e.what()).rfind("tpe: ", 0), 0u) << e.what();
    }
  }
}

TEST(TpeTest, BadSearchSpaceIsRefusedNamingTheKey) {
  RecordingHost host;
  msgpack::object_handle args = MsgpackOf(Json::object());
  TpeTuner t(host.ref(), args.get());
  msgpack::object_handle s = MsgpackOf({{"lr", {{"_type", "loguniform"}, {"_value", {0, 1}}}}});
  try {
    t.UpdateSearchSpace(s.get());
    ADD_FAILURE() << "accepted loguniform with low 0";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"lr\""), std::string::npos) << e.what();
  }
}

// During warm-up TPE samples each parameter from its prior, in declaration
// order: exactly SearchSpace::Sample with the same engine.
TEST(TpeTest, WarmUpIsRandomSamplingInOrder) {
  const Json space = {{"a", {{"_type", "uniform"}, {"_value", {0, 1}}}},
                      {"b", {{"_type", "choice"}, {"_value", {"x", "y", "z"}}}},
                      {"c", {{"_type", "normal"}, {"_value", {0, 1}}}}};
  RecordingHost host;
  auto t = MakeTunerOf<TpeTuner>(host, space, {{"seed", 7}});
  msgpack::object_handle s = MsgpackOf(space);
  sdk::SearchSpace ref = sdk::SearchSpace::Parse(s.get());
  std::mt19937_64 rng(7);
  for (int64_t id = 0; id < 20; ++id) {
    msgpack::sbuffer expected;
    msgpack::packer<msgpack::sbuffer> pk(expected);
    ref.Pack(ref.Sample(rng), pk);
    std::optional<Json> got = Generate(*t, id);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, Json::from_msgpack(std::string(expected.data(), expected.size()))) << id;
    Report(*t, id, *got, 1.0);
  }
}

// The learning tests run both models: NNI's per-parameter one and the joint
// one (the default).
TEST(TpeTest, ConcentratesNearTheMinimumOfAQuadratic) {
  for (bool mv : {false, true}) {
    for (uint64_t seed = 0; seed < 5; ++seed) {
      RecordingHost host;
      auto t = MakeTunerOf<TpeTuner>(host, kQuadSpace,
                                     {{"seed", seed}, {"tpe_args", {{"multivariate", mv}}}});
      std::vector<Json> ps = RunTrials(*t, 100, Quad);
      ASSERT_EQ(ps.size(), 100u);
      // Uniform draws on [-10, 10] are on average 5.45 away from 3.
      EXPECT_LT(MeanDistance(ps, 70, 3.0), 2.5) << "seed " << seed << " multivariate " << mv;
      EXPECT_GT(MeanDistance(ps, 0, 3.0), MeanDistance(ps, 70, 3.0));
    }
  }
}

TEST(TpeTest, MaximizeConcentratesNearTheMaximum) {
  for (bool mv : {false, true}) {
    RecordingHost host;
    const Json args = {
        {"seed", 3}, {"optimize_mode", "maximize"}, {"tpe_args", {{"multivariate", mv}}}};
    auto t = MakeTunerOf<TpeTuner>(host, kQuadSpace, args);
    std::vector<Json> ps = RunTrials(*t, 100, [](const Json& p) { return -Quad(p); });
    EXPECT_LT(MeanDistance(ps, 70, 3.0), 2.5) << "multivariate " << mv;
  }
}

// Over ten seeds, 120 trials each. Random search's best is on average 0.97
// here; it picks adam and units 5 in 20% and 12.5% of draws, and its mean
// |log10 lr + 3| is 1.3.
TEST(TpeTest, LearnsTheBestChoiceAndTheBestLogAndIntegerValues) {
  const Json space = {
      {"opt", {{"_type", "choice"}, {"_value", {"sgd", "adam", "rms", "ada", "nag"}}}},
      {"lr", {{"_type", "loguniform"}, {"_value", {1e-5, 1}}}},
      {"units", {{"_type", "randint"}, {"_value", {0, 8}}}},
      {"q", {{"_type", "quniform"}, {"_value", {0, 100, 5}}}}};
  auto f = [](const Json& p) {
    double loss = p["opt"] == "adam" ? 0.0 : 1.0;
    loss += std::fabs(std::log10(p["lr"].get<double>()) + 3.0);  // best lr 1e-3
    loss += p["units"].get<int>() == 5 ? 0.0 : 1.0;
    loss += std::fabs(p["q"].get<double>() - 40.0) / 50.0;
    return loss;
  };
  for (bool mv : {false, true}) {
    constexpr int kSeeds = 10;
    double best = 0, adam = 0, units5 = 0, lr_err = 0;  // sums over the seeds
    for (int seed = 1; seed <= kSeeds; ++seed) {
      RecordingHost host;
      auto t = MakeTunerOf<TpeTuner>(host, space,
                                     {{"seed", seed}, {"tpe_args", {{"multivariate", mv}}}});
      std::vector<Json> ps = RunTrials(*t, 120, f);
      double b = std::numeric_limits<double>::infinity();
      for (const Json& p : ps) b = std::min(b, f(p));
      best += b;
      for (size_t i = 80; i < ps.size(); ++i) {  // the last 40
        adam += ps[i]["opt"] == "adam";
        units5 += ps[i]["units"].get<int>() == 5;
        lr_err += std::fabs(std::log10(ps[i]["lr"].get<double>()) + 3.0);
      }
    }
    // The joint model's mean best was 0.42 with its earlier categorical
    // kernel (prior_weight / k per observation) and is 0.31 now.
    EXPECT_LT(best / kSeeds, mv ? 0.38 : 0.3) << "multivariate " << mv;
    if (!mv) {
      // NNI's per-parameter model concentrates on this separable function.
      // The joint model less so (12 of 40 adam): once the good region is
      // full of "bad" observations, draws from the prior score as well.
      EXPECT_GE(adam / kSeeds, 24) << "of 40";
      EXPECT_GE(units5 / kSeeds, 16) << "of 40";
      EXPECT_LT(lr_err / kSeeds / 40.0, 0.8);
    }
  }
}

// randint is an ordered integer by default: a value between two good ones
// is likely good, so the tuner closes in on an optimum it has not seen.
// NNI's model treats it as a category, which on a wide range only
// re-proposes observed values or draws uniformly.
TEST(TpeTest, RandintIsOrderedByDefaultAndACategoryInNnisModel) {
  const Json space = {{"n", {{"_type", "randint"}, {"_value", {0, 100000}}}},
                      {"x", {{"_type", "uniform"}, {"_value", {0, 1}}}}};
  auto f = [](const Json& p) {
    return std::fabs(p["n"].get<int>() - 70000) / 10000.0 + std::fabs(p["x"].get<double>() - 0.5);
  };
  for (const Json& tpe_args : {Json::object(), Json{{"multivariate", false}},
                               Json{{"multivariate", false}, {"ordered_randint", true}},
                               Json{{"ordered_randint", false}}}) {
    const bool ordered = tpe_args.value("ordered_randint", tpe_args.value("multivariate", true));
    double closest = 0;  // mean over seeds of the smallest |n - 70000|
    for (uint64_t seed = 0; seed < 5; ++seed) {
      RecordingHost host;
      auto t = MakeTunerOf<TpeTuner>(host, space, {{"seed", seed}, {"tpe_args", tpe_args}});
      std::vector<Json> ps = RunTrials(*t, 80, f);
      ASSERT_EQ(ps.size(), 80u);
      double best = 1e9;
      for (const Json& p : ps) {
        const int n = p["n"].get<int>();
        ASSERT_GE(n, 0);
        ASSERT_LT(n, 100000);
        best = std::min(best, std::fabs(n - 70000.0));
      }
      closest += best / 5;
    }
    // The best of 80 uniform draws is about 600 away.
    if (ordered) {
      EXPECT_LT(closest, 300) << tpe_args.dump();
    } else {
      EXPECT_GT(closest, 300) << tpe_args.dump();
    }
  }
}

// Values have the type and range the search space promises, after warm-up
// too (the model proposes them): q-multiples, clipping, log bounds, integers.
TEST(TpeTest, ValuesHaveTheRightTypeAndRange) {
  const Json space = {{"u", {{"_type", "uniform"}, {"_value", {-1, 1}}}},
                      {"qu", {{"_type", "quniform"}, {"_value", {2, 10, 5}}}},
                      {"lu", {{"_type", "loguniform"}, {"_value", {0.001, 10}}}},
                      {"qlu", {{"_type", "qloguniform"}, {"_value", {1, 100, 10}}}},
                      {"n", {{"_type", "normal"}, {"_value", {0, 2}}}},
                      {"qn", {{"_type", "qnormal"}, {"_value", {0, 2, 0.5}}}},
                      {"ln", {{"_type", "lognormal"}, {"_value", {0, 1}}}},
                      {"qln", {{"_type", "qlognormal"}, {"_value", {1, 1, 2}}}},
                      {"ri", {{"_type", "randint"}, {"_value", {-3, 4}}}},
                      {"c", {{"_type", "choice"}, {"_value", {1, "two", 3.5}}}}};
  RecordingHost host;
  auto t = MakeTunerOf<TpeTuner>(host, space, {{"seed", 2}});
  std::vector<Json> ps = RunTrials(*t, 80, [](const Json& p) {
    return std::fabs(p["u"].get<double>()) + std::fabs(p["n"].get<double>());
  });
  ASSERT_EQ(ps.size(), 80u);
  auto is_multiple = [](double v, double q) {
    return std::fabs(v / q - std::nearbyint(v / q)) < 1e-9;
  };
  for (const Json& p : ps) {
    EXPECT_TRUE(p["u"].is_number_float());
    EXPECT_GE(p["u"].get<double>(), -1);
    EXPECT_LE(p["u"].get<double>(), 1);
    const double qu = p["qu"].get<double>();
    EXPECT_TRUE(qu == 2 || qu == 5 || qu == 10) << qu;  // NNI: [2,10,5] -> {2, 5, 10}
    EXPECT_GE(p["lu"].get<double>(), 0.001);
    EXPECT_LE(p["lu"].get<double>(), 10);
    const double qlu = p["qlu"].get<double>();
    EXPECT_TRUE(qlu >= 1 && qlu <= 100 && (qlu == 1 || is_multiple(qlu, 10))) << qlu;
    EXPECT_TRUE(is_multiple(p["qn"].get<double>(), 0.5));
    EXPECT_GT(p["ln"].get<double>(), 0);
    EXPECT_TRUE(is_multiple(p["qln"].get<double>(), 2));
    EXPECT_TRUE(p["ri"].is_number_integer());
    EXPECT_GE(p["ri"].get<int>(), -3);
    EXPECT_LT(p["ri"].get<int>(), 4);  // upper bound is exclusive
    EXPECT_TRUE(p["c"] == 1 || p["c"] == "two" || p["c"] == 3.5) << p["c"];
  }
}

TEST(TpeTest, NestedChoicesAreLearnedWithTheirSubSpaces) {
  const Json space = {
      {"model",
       {{"_type", "choice"},
        {"_value",
         {{{"_name", "linear"}, {"c", {{"_type", "uniform"}, {"_value", {0, 1}}}}},
          {{"_name", "tree"},
           {"depth", {{"_type", "quniform"}, {"_value", {1, 10, 1}}}},
           {"eta", {{"_type", "uniform"}, {"_value", {0, 1}}}}}}}}}};
  auto f = [](const Json& p) {
    const Json& m = p["model"];
    if (m["_name"] == "linear") return 1.0 + m["c"].get<double>();
    return std::fabs(m["depth"].get<double>() - 7) / 10 + std::fabs(m["eta"].get<double>() - 0.2);
  };
  RecordingHost host;
  auto t = MakeTunerOf<TpeTuner>(host, space, {{"seed", 4}});
  std::vector<Json> ps = RunTrials(*t, 100, f);
  int tree = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    const Json& m = ps[i]["model"];
    if (m["_name"] == "linear") {
      EXPECT_EQ(m.size(), 2u) << m.dump();
      EXPECT_TRUE(m.contains("c"));
    } else {
      EXPECT_EQ(m.size(), 3u) << m.dump();
      EXPECT_TRUE(m.contains("depth") && m.contains("eta"));
      tree += i >= 60;
    }
  }
  EXPECT_GE(tree, 30) << "the better option should dominate once the model is used";
}

TEST(TpeTest, FiniteSpaceIsExhaustedWithoutRepeats) {
  RecordingHost host;
  const Json space = {{"a", {{"_type", "choice"}, {"_value", {1, 2, 3}}}},
                      {"b", {{"_type", "randint"}, {"_value", {0, 2}}}}};
  auto t = MakeTunerOf<TpeTuner>(host, space, {{"seed", 1}, {"tpe_args", {{"n_startup_jobs", 2}}}});
  std::set<std::string> seen;
  for (int64_t id = 0; id < 6; ++id) {
    std::optional<Json> p = Generate(*t, id);
    ASSERT_TRUE(p) << id;
    EXPECT_TRUE(seen.insert(p->dump()).second) << "repeated " << p->dump();
    Report(*t, id, *p, static_cast<double>(id));
  }
  EXPECT_FALSE(Generate(*t, 6));
  EXPECT_FALSE(Generate(*t, 7)) << "an exhausted tuner stays exhausted";
}

// Running trials enter the history with the liar's loss, so parallel
// suggestions spread out; without a liar two suggestions from the same
// history and engine state are equal.
TEST(TpeTest, ConstantLiarSpreadsConcurrentSuggestions) {
  auto first_two_after = [](const Json& args) {
    RecordingHost host;
    auto t = MakeTunerOf<TpeTuner>(host, kQuadSpace, args);
    RunTrials(*t, 30, Quad);
    std::optional<Json> a = Generate(*t, 100);
    EXPECT_EQ(t->running(), 1u);
    return a;
  };
  // Same seed: the liar changes nothing until a trial is running.
  EXPECT_EQ(first_two_after({{"seed", 9}}),
            first_two_after({{"seed", 9}, {"tpe_args", {{"constant_liar_type", nullptr}}}}));

  RecordingHost host;
  auto t = MakeTunerOf<TpeTuner>(host, kQuadSpace, {{"seed", 9}});
  RunTrials(*t, 30, Quad);
  for (int64_t id = 100; id < 110; ++id) ASSERT_TRUE(Generate(*t, id));
  EXPECT_EQ(t->running(), 10u);
  t->TrialEnd(100, false);
  EXPECT_EQ(t->running(), 9u);
  EXPECT_EQ(t->observations(), 30u) << "a failed trial adds nothing";
}

std::vector<std::string> Drive(TpeTuner& t, int64_t from, int64_t to) {
  // Concurrency 3: three in flight, the oldest reports when a new one starts.
  std::vector<std::string> out;
  std::map<int64_t, Json> inflight;
  for (int64_t id = from; id < to; ++id) {
    std::optional<Json> p = Generate(t, id);
    if (!p) break;
    out.push_back(p->dump());
    inflight[id] = *p;
    if (inflight.size() == 3) {
      auto it = inflight.begin();
      if (it->first % 7 == 0) {
        t.TrialEnd(it->first, false);
      } else {
        Report(t, it->first, it->second, Quad(it->second));
      }
      inflight.erase(it);
    }
  }
  return out;
}

TEST(TpeTest, SameSeedSameEventsGiveTheSameSuggestions) {
  for (bool mv : {false, true}) {
    RecordingHost host;
    const Json args = {{"seed", 42}, {"tpe_args", {{"multivariate", mv}}}};
    auto a = MakeTunerOf<TpeTuner>(host, kQuadSpace, args);
    auto b = MakeTunerOf<TpeTuner>(host, kQuadSpace, args);
    EXPECT_EQ(Drive(*a, 0, 60), Drive(*b, 0, 60));
  }
}

TEST(TpeTest, SavedStateContinuesExactly) {
  for (bool mv : {false, true}) {
    RecordingHost host;
    const Json args = {{"seed", 8}, {"tpe_args", {{"multivariate", mv}}}};
    // A nested choice too: the joint model's groups must come back from the
    // state as well.
    const Json space = {
        {"x", {{"_type", "uniform"}, {"_value", {-10, 10}}}},
        {"k", {{"_type", "choice"}, {"_value", {1, 2, 3}}}},
        {"m",
         {{"_type", "choice"},
          {"_value",
           {{{"_name", "a"},
             {"p", {{"_type", "uniform"}, {"_value", {0, 1}}}},
             {"r", {{"_type", "loguniform"}, {"_value", {1e-3, 1}}}}},
            {{"_name", "b"}, {"q", {{"_type", "randint"}, {"_value", {0, 5}}}}}}}}}};
    auto a = MakeTunerOf<TpeTuner>(host, space, args);
    Drive(*a, 0, 40);  // leaves trials in flight
    ASSERT_GT(a->running(), 0u);
    const std::string state = a->SaveState();
    // Options come from class_args (the same config on resume); the seed
    // and everything learned come from the state.
    auto b =
        MakeTunerOf<TpeTuner>(host, space, {{"seed", 999}, {"tpe_args", {{"multivariate", mv}}}});
    b->LoadState(state);
    EXPECT_EQ(b->observations(), a->observations());
    EXPECT_EQ(b->running(), a->running());
    EXPECT_EQ(b->SaveState(), state);
    EXPECT_EQ(Drive(*a, 40, 70), Drive(*b, 40, 70));
  }
}

TEST(TpeTest, CorruptStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto a = MakeTunerOf<TpeTuner>(host, kQuadSpace, {{"seed", 1}});
  RunTrials(*a, 5, Quad);
  const std::string before = a->SaveState();
  for (const std::string& bad : {std::string("nonsense"), std::string("\x81\xa6" "format\xa3xyz")}) {
    EXPECT_THROW(a->LoadState(bad), sdk::Error);
  }
  EXPECT_EQ(a->SaveState(), before);
}

Json ImportRecords(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Json records = Json::array();
  for (int i = 0; i < n; ++i) {
    const double x = -10 + 20 * sdk::Uniform01(rng);
    records.push_back({{"parameter", {{"x", x}}}, {"value", std::pow(x - 3, 2)}});
  }
  return records;
}

// A tuner that imports N results is past its warm-up and uses them: its
// very next suggestions concentrate near the optimum.
TEST(TpeTest, ImportedResultsAreUsedAsHistory) {
  double imported_dist = 0, fresh_dist = 0;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    RecordingHost host;
    auto imported = MakeTunerOf<TpeTuner>(host, kQuadSpace, {{"seed", seed}});
    Import(*imported, ImportRecords(60, seed + 100));
    EXPECT_EQ(imported->observations(), 60u);
    auto fresh = MakeTunerOf<TpeTuner>(host, kQuadSpace, {{"seed", seed}});
    imported_dist += MeanDistance(RunTrials(*imported, 10, Quad), 0, 3.0);
    fresh_dist += MeanDistance(RunTrials(*fresh, 10, Quad), 0, 3.0);
  }
  EXPECT_LT(imported_dist / 5, 1.5);
  EXPECT_GT(fresh_dist / 5, 2.5) << "a fresh tuner is still warming up (random)";
}

TEST(TpeTest, ImportedConfigurationsAreNotSuggestedAgainAndBadRecordsAreSkipped) {
  RecordingHost host;
  auto t = MakeTunerOf<TpeTuner>(host, {{"a", {{"_type", "choice"}, {"_value", {1, 2, 3}}}}},
                                 {{"seed", 1}, {"tpe_args", {{"n_startup_jobs", 0}}}});
  Import(*t, Json::array({{{"parameters", {{"a", 1}}}, {"value", 0.5}},
                          {{"parameter", {{"a", 2}}}, {"value", {{"default", 0.1}}}},
                          {{"parameters", {{"a", 3}}}}}));
  EXPECT_EQ(t->observations(), 2u);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "skipped 1"));
  std::optional<Json> p = Generate(*t, 0);
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)["a"], 3);
  EXPECT_FALSE(Generate(*t, 1));
}

TEST(TpeTest, SearchSpaceUpdateKeepsTheResultsThatStillFit) {
  RecordingHost host;
  auto t = MakeTunerOf<TpeTuner>(host, kQuadSpace, {{"seed", 1}});
  RunTrials(*t, 30, Quad);
  msgpack::object_handle same = MsgpackOf(kQuadSpace);
  t->UpdateSearchSpace(same.get());
  EXPECT_EQ(t->observations(), 30u);
  msgpack::object_handle other = MsgpackOf({{"y", {{"_type", "uniform"}, {"_value", {0, 1}}}}});
  t->UpdateSearchSpace(other.get());
  EXPECT_EQ(t->observations(), 0u);
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "30 earlier results do not fit"));
}

TEST(TpeTest, CustomizedTrialResultsCount) {
  RecordingHost host;
  auto t = MakeTunerOf<TpeTuner>(host, kQuadSpace, {{"seed", 1}});
  msgpack::object_handle p = MsgpackOf({{"x", 2.5}});
  msgpack::object_handle v = MsgpackOf(Json(0.25));
  t->ReceiveTrialResult(77, p.get(), v.get(), 0.25, true);
  EXPECT_EQ(t->observations(), 1u);
}

// Multivariate: a narrow diagonal valley (x = y) that a per-parameter model
// cannot describe; the joint model finds it.
TEST(TpeTest, MultivariateConcentratesOnAJointOptimum) {
  const Json space = {{"x", {{"_type", "uniform"}, {"_value", {-5, 5}}}},
                      {"y", {{"_type", "uniform"}, {"_value", {-5, 5}}}},
                      {"c", {{"_type", "choice"}, {"_value", {"a", "b"}}}}};
  auto f = [](const Json& p) {
    const double x = p["x"].get<double>(), y = p["y"].get<double>();
    return (x - y) * (x - y) * 10 + (x + y - 2) * (x + y - 2) * 0.1 + (p["c"] == "b" ? 0 : 1);
  };
  double mv_regret = 0;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    RecordingHost host;
    auto t = MakeTunerOf<TpeTuner>(host, space,
                                   {{"seed", seed}, {"tpe_args", {{"multivariate", true}}}});
    std::vector<Json> ps = RunTrials(*t, 100, f);
    ASSERT_EQ(ps.size(), 100u);
    double best = 1e9;
    for (const Json& p : ps) best = std::min(best, f(p));
    mv_regret += best;
    int b = 0;
    for (size_t i = 60; i < ps.size(); ++i) b += ps[i]["c"] == "b";
    EXPECT_GE(b, 25) << "seed " << seed;
  }
  // Random search on this valley: best of 100 is about 0.5 on average.
  EXPECT_LT(mv_regret / 5, 0.3);
}

// The default (joint) model on Hartmann6, the benchmark's 6-D function:
// after 100 trials its median regret is far below random search's (about
// 1.1 over 100 trials) and below NNI's per-parameter model. Regret < 0.15
// needs the narrow joint bandwidth: with Optuna's factor 0.2 it is about 0.22.
TEST(TpeTest, DefaultModelFindsTheHartmann6Optimum) {
  static const double kA[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                  {0.05, 10, 17, 0.1, 8, 14},
                                  {3, 3.5, 1.7, 10, 17, 8},
                                  {17, 8, 0.05, 10, 0.1, 14}};
  static const double kP[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                  {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                  {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                  {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
  static const double kAlpha[4] = {1.0, 1.2, 3.0, 3.2};
  Json space = Json::object();
  for (int d = 0; d < 6; ++d) {
    space["x" + std::to_string(d)] = {{"_type", "uniform"}, {"_value", {0, 1}}};
  }
  auto hartmann6 = [](const Json& p) {
    double y = 0;
    for (int i = 0; i < 4; ++i) {
      double e = 0;
      for (int d = 0; d < 6; ++d) {
        const double diff = p["x" + std::to_string(d)].get<double>() - kP[i][d];
        e += kA[i][d] * diff * diff;
      }
      y -= kAlpha[i] * std::exp(-e);
    }
    return y;
  };
  auto median_regret = [&](bool mv) {
    std::vector<double> regrets;
    for (uint64_t seed = 0; seed < 7; ++seed) {
      RecordingHost host;
      auto t = MakeTunerOf<TpeTuner>(host, space,
                                     {{"seed", seed}, {"tpe_args", {{"multivariate", mv}}}});
      double best = 0;
      for (const Json& p : RunTrials(*t, 100, hartmann6)) best = std::min(best, hartmann6(p));
      regrets.push_back(best + 3.32237);
    }
    std::sort(regrets.begin(), regrets.end());
    return regrets[regrets.size() / 2];
  };
  const double joint = median_regret(true);
  const double nni = median_regret(false);
  EXPECT_LT(joint, 0.15);
  EXPECT_LT(joint, nni);
}

// Options::group (on with the joint model): the parameters directly under
// a nested option are modelled jointly from the trials that took it. Here
// the better option hides a diagonal valley (x = y, as in
// MultivariateConcentratesOnAJointOptimum), which the per-parameter model
// cannot describe, and one level deeper a kernel choice with a parameter of
// its own. Mean best of 150 trials over eight seeds.
TEST(TpeTest, ParametersUnderANestedOptionAreModelledJointly) {
  const Json space = {
      {"lr", {{"_type", "loguniform"}, {"_value", {1e-4, 1}}}},
      {"model",
       {{"_type", "choice"},
        {"_value",
         {{{"_name", "valley"},
           {"x", {{"_type", "uniform"}, {"_value", {-5, 5}}}},
           {"y", {{"_type", "uniform"}, {"_value", {-5, 5}}}},
           {"kernel",
            {{"_type", "choice"},
             {"_value",
              {{{"_name", "rbf"}, {"g", {{"_type", "uniform"}, {"_value", {0, 1}}}}},
               {{"_name", "linear"}}}}}}},
          {{"_name", "flat"}, {"z", {{"_type", "uniform"}, {"_value", {0, 1}}}}}}}}}};
  auto f = [](const Json& p) {
    const Json& m = p["model"];
    double loss = std::fabs(std::log10(p["lr"].get<double>()) + 2) * 0.01;
    if (m["_name"] == "flat") return loss + 1.0 + m["z"].get<double>();
    const double x = m["x"].get<double>(), y = m["y"].get<double>();
    loss += (x - y) * (x - y) * 2 + (x + y - 2) * (x + y - 2) * 0.05;
    const Json& k = m["kernel"];
    return loss + (k["_name"] == "rbf" ? std::fabs(k["g"].get<double>() - 0.3) : 0.5) * 0.1;
  };
  RecordingHost quiet;
  EXPECT_TRUE(MakeTunerOf<TpeTuner>(quiet, space, Json::object())->options().group);
  EXPECT_FALSE(
      MakeTunerOf<TpeTuner>(quiet, space, {{"tpe_args", {{"multivariate", false}}}})->options().group)
      << "NNI's model has no groups";
  auto mean_best = [&](bool group) {
    constexpr int kSeeds = 8;
    double sum = 0;
    for (uint64_t seed = 0; seed < kSeeds; ++seed) {
      RecordingHost host;
      auto t = MakeTunerOf<TpeTuner>(host, space,
                                     {{"seed", seed}, {"tpe_args", {{"group", group}}}});
      std::vector<Json> ps = RunTrials(*t, 150, f);
      EXPECT_EQ(ps.size(), 150u);
      double best = std::numeric_limits<double>::infinity();
      for (const Json& p : ps) best = std::min(best, f(p));
      sum += best;
      // Concurrent suggestions with lies inside the branches stay valid.
      for (int64_t id = 1000; id < 1010; ++id) {
        std::optional<Json> p = Generate(*t, id);
        EXPECT_TRUE(p.has_value());
        if (!p) break;
        const Json& m = (*p)["model"];
        EXPECT_TRUE(m["_name"] == "flat" ? m.size() == 2 : m.size() == 4) << m.dump();
      }
    }
    return sum / kSeeds;
  };
  const double grouped = mean_best(true);
  const double per_parameter = mean_best(false);
  // Measured over these seeds: 0.040 grouped, 0.37 per-parameter (which
  // settles on the flat option in three of eight).
  EXPECT_LT(grouped, 0.1);
  EXPECT_LT(grouped, 0.5 * per_parameter);
}

TEST(TpeTest, MultivariateHandlesNestedSpaces) {
  const Json space = {
      {"lr", {{"_type", "loguniform"}, {"_value", {1e-4, 1}}}},
      {"model",
       {{"_type", "choice"},
        {"_value",
         {{{"_name", "a"}, {"p", {{"_type", "uniform"}, {"_value", {0, 1}}}}},
          {{"_name", "b"}, {"q", {{"_type", "randint"}, {"_value", {0, 5}}}}}}}}}};
  RecordingHost host;
  auto t =
      MakeTunerOf<TpeTuner>(host, space, {{"seed", 3}, {"tpe_args", {{"multivariate", true}}}});
  std::vector<Json> ps = RunTrials(*t, 60, [](const Json& p) {
    const Json& m = p["model"];
    double l = std::fabs(std::log10(p["lr"].get<double>()) + 2);
    return l + (m["_name"] == "a" ? m["p"].get<double>() : 1.0);
  });
  ASSERT_EQ(ps.size(), 60u);
  for (const Json& p : ps) {
    const Json& m = p["model"];
    EXPECT_EQ(m.size(), 2u) << m.dump();
    EXPECT_TRUE(m["_name"] == "a" ? m.contains("p") : m.contains("q")) << m.dump();
  }
}

}  // namespace
}  // namespace tunehost::plugins::testing
