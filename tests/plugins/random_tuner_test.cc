// Tests of plugins/random/random_tuner.{h,cc}: NNI's Random tuner (seeded
// reproducibility, ranges of every type, deduplication and exhaustion of
// finite spaces, import, class_args and search space validation, state).
#include "random/random_tuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugin_testing.h"
#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/host.h"
#include "tuner_testing.h"

namespace tunehost::plugins::testing {
namespace {

const char* kInfiniteSpace = R"({
  "c": {"_type": "choice", "_value": ["relu", 3, 0.5]},
  "ri": {"_type": "randint", "_value": [-2, 3]},
  "u": {"_type": "uniform", "_value": [-1.5, 2.5]},
  "qu": {"_type": "quniform", "_value": [1, 9, 2]},
  "lu": {"_type": "loguniform", "_value": [0.001, 10]},
  "n": {"_type": "normal", "_value": [5, 2]},
  "opt": {"_type": "choice", "_value": [
    {"_name": "sgd", "lr": {"_type": "uniform", "_value": [0.01, 0.1]}},
    {"_name": "adam", "beta": {"_type": "choice", "_value": [0.9, 0.99]}},
    {"_name": "none"}
  ]}
})";

// 3 * 2 = 6 configurations.
const char* kSixConfigurations = R"({
  "a": {"_type": "choice", "_value": [1, 2, 3]},
  "b": {"_type": "randint", "_value": [0, 2]}
})";

TEST(RandomTunerTest, SameSeedGivesTheSameSequence) {
  RecordingHost host;
  auto a = MakeTuner<RandomTuner>(host, kInfiniteSpace, R"({"seed": 42})");
  auto b = MakeTuner<RandomTuner>(host, kInfiniteSpace, R"({"seed": 42})");
  EXPECT_EQ(a->seed(), 42u);
  std::vector<std::string> seq_a = GenerateN(*a, 50);
  std::vector<std::string> seq_b = GenerateN(*b, 50);
  ASSERT_EQ(seq_a.size(), 50u);
  EXPECT_EQ(seq_a, seq_b);
}

TEST(RandomTunerTest, DifferentSeedsGiveDifferentSequences) {
  RecordingHost host;
  auto a = MakeTuner<RandomTuner>(host, kInfiniteSpace, R"({"seed": 1})");
  auto b = MakeTuner<RandomTuner>(host, kInfiniteSpace, R"({"seed": 2})");
  std::vector<std::string> seq_a = GenerateN(*a, 20);
  std::vector<std::string> seq_b = GenerateN(*b, 20);
  ASSERT_EQ(seq_a.size(), 20u);
  EXPECT_NE(seq_a, seq_b);
  // Each draw differs too, not just one of them ("u" alone is continuous).
  for (size_t i = 0; i < seq_a.size(); ++i) EXPECT_NE(seq_a[i], seq_b[i]) << "draw " << i;
}

TEST(RandomTunerTest, OmittedSeedIsLoggedAndReproducesTheSequence) {
  RecordingHost host;
  auto a = MakeTuner<RandomTuner>(host, kInfiniteSpace);
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "random: seed " + std::to_string(a->seed())));
  auto b = MakeTuner<RandomTuner>(host, kInfiniteSpace,
                                  R"({"seed": )" + std::to_string(a->seed()) + "}");
  EXPECT_EQ(GenerateN(*a, 10), GenerateN(*b, 10));
  // nil also means "pick one".
  auto c = MakeTuner<RandomTuner>(host, kInfiniteSpace,
                                  R"({"seed": null, "optimize_mode": "minimize"})");
  ASSERT_TRUE(Generate(*c, 0).has_value());
}

TEST(RandomTunerTest, EveryValueHasItsTypesTypeAndRange) {
  RecordingHost host;
  auto tuner =
      MakeTuner<RandomTuner>(host, kInfiniteSpace, R"({"seed": 7, "optimize_mode": "maximize"})");
  std::set<Json> choices;
  std::set<int64_t> randints;
  std::set<std::string> options;
  std::set<double> betas;
  for (const std::string& bytes : GenerateN(*tuner, 600)) {
    Json p = ToJson(bytes);
    ASSERT_TRUE(p.is_object()) << p;
    // Keys come in the search space's order.
    std::vector<std::string> keys;
    for (const auto& item : p.items()) keys.push_back(item.key());
    ASSERT_EQ(keys, (std::vector<std::string>{"c", "ri", "u", "qu", "lu", "n", "opt"})) << p;

    EXPECT_TRUE(p["c"] == "relu" || p["c"] == 3 || p["c"] == 0.5) << p["c"];
    choices.insert(p["c"]);

    ASSERT_TRUE(p["ri"].is_number_integer()) << p["ri"];
    int64_t ri = p["ri"].get<int64_t>();
    EXPECT_GE(ri, -2);
    EXPECT_LT(ri, 3);  // upper bound exclusive, as in NNI
    randints.insert(ri);

    ASSERT_TRUE(p["u"].is_number_float()) << p["u"];
    EXPECT_GE(p["u"].get<double>(), -1.5);
    EXPECT_LE(p["u"].get<double>(), 2.5);

    // clip(round(x / 2) * 2, 1, 9): 1, 2, 4, 6, 8 or 9.
    ASSERT_TRUE(p["qu"].is_number_float()) << p["qu"];
    double qu = p["qu"].get<double>();
    EXPECT_TRUE(qu == 1 || qu == 2 || qu == 4 || qu == 6 || qu == 8 || qu == 9) << qu;

    ASSERT_TRUE(p["lu"].is_number_float()) << p["lu"];
    EXPECT_GE(p["lu"].get<double>(), 0.001);
    EXPECT_LE(p["lu"].get<double>(), 10.0);

    ASSERT_TRUE(p["n"].is_number_float()) << p["n"];
    EXPECT_TRUE(std::isfinite(p["n"].get<double>()));

    const Json& opt = p["opt"];
    ASSERT_TRUE(opt.is_object()) << opt;
    ASSERT_TRUE(opt.contains("_name")) << opt;
    const std::string name = opt["_name"].get<std::string>();
    options.insert(name);
    if (name == "sgd") {
      ASSERT_EQ(opt.size(), 2u) << opt;
      ASSERT_TRUE(opt["lr"].is_number_float()) << opt;
      EXPECT_GE(opt["lr"].get<double>(), 0.01);
      EXPECT_LE(opt["lr"].get<double>(), 0.1);
    } else if (name == "adam") {
      ASSERT_EQ(opt.size(), 2u) << opt;
      ASSERT_TRUE(opt["beta"] == 0.9 || opt["beta"] == 0.99) << opt;
      betas.insert(opt["beta"].get<double>());
    } else {
      EXPECT_EQ(name, "none");
      EXPECT_EQ(opt.size(), 1u) << opt;  // only the chosen option's sub-space
    }
  }
  // 600 independent draws reach every discrete value.
  EXPECT_EQ(choices.size(), 3u);
  EXPECT_EQ(randints, (std::set<int64_t>{-2, -1, 0, 1, 2}));
  EXPECT_EQ(options, (std::set<std::string>{"sgd", "adam", "none"}));
  EXPECT_EQ(betas.size(), 2u);
}

TEST(RandomTunerTest, FiniteSpaceIsCoveredWithoutRepeatsThenNoMoreTrials) {
  RecordingHost host;
  auto tuner = MakeTuner<RandomTuner>(host, kSixConfigurations, R"({"seed": 3})");
  std::set<Json> seen;
  for (const std::string& bytes : GenerateN(*tuner, 6)) seen.insert(Json(ToJson(bytes)));
  std::set<Json> all;
  for (int a : {1, 2, 3}) {
    for (int b : {0, 1}) all.insert(Json{{"a", a}, {"b", b}});
  }
  EXPECT_EQ(seen, all);
  EXPECT_EQ(tuner->seen_count(), 6u);
  EXPECT_FALSE(Generate(*tuner, 6).has_value());
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "all 6 configurations"));
  EXPECT_FALSE(Generate(*tuner, 7).has_value());  // stays exhausted
}

TEST(RandomTunerTest, FiniteQuantizedAndNestedSpacesAreEnumerated) {
  RecordingHost host;
  // NNI's example: quniform [0, 10, 2.5] takes 0, 2.5, 5, 7.5, 10.
  auto q = MakeTuner<RandomTuner>(host, R"({"q": {"_type": "quniform", "_value": [0, 10, 2.5]}})",
                                  R"({"seed": 11})");
  std::set<double> values;
  for (const std::string& bytes : GenerateN(*q, 5)) {
    Json p = ToJson(bytes);
    // An integral value stays a float, as the space's type says.
    ASSERT_TRUE(p["q"].is_number_float()) << p;
    values.insert(p["q"].get<double>());
  }
  EXPECT_EQ(values, (std::set<double>{0, 2.5, 5, 7.5, 10}));
  EXPECT_FALSE(Generate(*q, 5).has_value());

  // Nested: option "a" has 2 sub-configurations, "b" one: 3 in all.
  auto n = MakeTuner<RandomTuner>(host, R"({"opt": {"_type": "choice", "_value": [
      {"_name": "a", "x": {"_type": "choice", "_value": [1, 2]}}, {"_name": "b"}]}})",
                                  R"({"seed": 11})");
  std::set<Json> seen;
  for (const std::string& bytes : GenerateN(*n, 3)) seen.insert(Json(ToJson(bytes)));
  EXPECT_EQ(seen, (std::set<Json>{Json::parse(R"({"opt": {"_name": "a", "x": 1}})"),
                                  Json::parse(R"({"opt": {"_name": "a", "x": 2}})"),
                                  Json::parse(R"({"opt": {"_name": "b"}})")}));
  EXPECT_FALSE(Generate(*n, 3).has_value());
}

TEST(RandomTunerTest, ExhaustionReachesTheHostAsNoMoreTrials) {
  RecordingHost host;
  auto t = AbiTuner::Of<RandomTuner>(host, R"({"seed": 5})");
  ASSERT_EQ(t->UpdateSearchSpace(kSixConfigurations), TH_OK) << t->message();

  EXPECT_EQ(t->Generate({10, 11, 12, 13, 14, 15, 16, 17}), TH_NO_MORE_TRIALS);
  EXPECT_EQ(t->emitted_ids(), (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
}

TEST(RandomTunerTest, ImportedConfigurationsAreNotGeneratedAgain) {
  RecordingHost host;
  auto tuner = MakeTuner<RandomTuner>(host, R"({"a": {"_type": "choice", "_value": ["x", "y", "z"]},
                                               "b": {"_type": "choice", "_value": [1, 2]}})",
                                      R"({"seed": 9})");
  // tunehost's "parameters" and NNI's "parameter" both count; 1.0 equals 1;
  // key order does not matter; a record without parameters is skipped.
  msgpack::object_handle records = Msgpack(R"([
    {"parameters": {"a": "x", "b": 1}, "value": 0.5},
    {"parameter": {"b": 2, "a": "x"}, "value": 0.7},
    {"parameters": {"a": "y", "b": 1.0}, "value": 0.1},
    {"value": 3}
  ])");
  tuner->ImportData(records.get());
  EXPECT_EQ(tuner->seen_count(), 3u);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "skipped 1"));

  std::set<Json> rest;
  for (const std::string& bytes : GenerateN(*tuner, 3)) rest.insert(Json(ToJson(bytes)));
  EXPECT_EQ(rest, (std::set<Json>{Json::parse(R"({"a": "y", "b": 2})"),
                                  Json::parse(R"({"a": "z", "b": 1})"),
                                  Json::parse(R"({"a": "z", "b": 2})")}));
  EXPECT_FALSE(Generate(*tuner, 3).has_value());

  ExpectNonArrayImportRefused(*tuner);
}

TEST(RandomTunerTest, NewSearchSpaceEndsExhaustion) {
  RecordingHost host;
  auto tuner = MakeTuner<RandomTuner>(host, R"({"a": {"_type": "choice", "_value": [1, 2]}})",
                                      R"({"seed": 4})");
  ASSERT_EQ(GenerateN(*tuner, 2).size(), 2u);
  ASSERT_FALSE(Generate(*tuner, 2).has_value());
  Update(*tuner, R"({"a": {"_type": "choice", "_value": [1, 2, 3]}})");
  std::optional<std::string> p = Generate(*tuner, 3);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(ToJson(*p), Json::parse(R"({"a": 3})"));  // 1 and 2 were already tried
  EXPECT_FALSE(Generate(*tuner, 4).has_value());
}

TEST(RandomTunerTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) { return Constructing<RandomTuner>(host, args); };
  ExpectError(construct(R"({"sed": 1})"), TH_INVALID_ARGUMENT, {"\"sed\""});
  ExpectError(construct(R"({"seed": "42"})"), TH_INVALID_ARGUMENT, {"\"seed\""});
  ExpectError(construct(R"({"seed": -1})"), TH_INVALID_ARGUMENT, {"\"seed\""});
  ExpectError(construct(R"({"seed": 1.5})"), TH_INVALID_ARGUMENT, {"\"seed\""});
  ExpectError(construct(R"({"optimize_mode": "sideways"})"), TH_INVALID_ARGUMENT,
              {"\"optimize_mode\""});
  ExpectError(construct(R"({"optimize_mode": 1})"), TH_INVALID_ARGUMENT, {"\"optimize_mode\""});
  ExpectError(construct(R"([1])"), TH_INVALID_ARGUMENT, {"class_args must be a map"});
  // The largest seed is accepted as is.
  msgpack::object_handle big = Msgpack(R"({"seed": 18446744073709551615})");
  EXPECT_EQ(RandomTuner(host.ref(), big.get()).seed(), UINT64_MAX);
}

TEST(RandomTunerTest, BadSearchSpaceIsRefusedNamingTheKey) {
  RecordingHost host;
  auto tuner = MakeTuner<RandomTuner>(host, R"({"a": {"_type": "choice", "_value": [1]}})",
                                      R"({"seed": 1})");
  auto update = [&](const std::string& space) { return Updating(*tuner, space); };
  ExpectError(update(R"({"lr": {"_type": "loguniform", "_value": [0, 1]}})"),
              TH_INVALID_ARGUMENT, {"\"lr\""});
  ExpectError(update(R"({"ok": {"_type": "uniform", "_value": [0, 1]},
                         "depth": {"_type": "randint", "_value": [1.5, 4]}})"),
              TH_INVALID_ARGUMENT, {"\"depth\""});
  ExpectError(update(R"({"opt": {"_type": "choice", "_value": [
                 {"_name": "adam", "lr": {"_type": "uniform", "_value": [1]}}]}})"),
              TH_INVALID_ARGUMENT, {"\"opt/lr\"", "adam"});
  ExpectError(update(R"({"x": {"_type": "gaussian", "_value": [0, 1]}})"), TH_INVALID_ARGUMENT,
              {"\"x\"", "gaussian"});
  // A refused update leaves the previous space in use.
  std::optional<std::string> p = Generate(*tuner, 0);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(ToJson(*p), Json::parse(R"({"a": 1})"));
}

TEST(RandomTunerTest, GenerateBeforeASearchSpaceIsABadState) {
  RecordingHost host;
  auto tuner = MakeTuner<RandomTuner>(host, "");
  ExpectError([&] { Generate(*tuner, 0); }, TH_BAD_STATE, {"no search space"});
}

TEST(RandomTunerTest, SavedStateContinuesTheSameSequence) {
  RecordingHost host;
  auto a = MakeTuner<RandomTuner>(host, kInfiniteSpace, R"({"seed": 21})");
  GenerateN(*a, 5);
  const std::string state = a->SaveState();
  std::vector<std::string> next = GenerateN(*a, 10, 5);

  auto b = MakeTuner<RandomTuner>(host, kInfiniteSpace, R"({"seed": 99})");
  b->LoadState(state);
  EXPECT_EQ(b->seed(), 21u);
  EXPECT_EQ(GenerateN(*b, 10, 5), next);
}

TEST(RandomTunerTest, SavedStateKeepsTheTriedConfigurations) {
  RecordingHost host;
  auto a = MakeTuner<RandomTuner>(host, kSixConfigurations, R"({"seed": 8})");
  std::vector<std::string> first = GenerateN(*a, 3);
  const std::string state = a->SaveState();

  auto b = MakeTuner<RandomTuner>(host, kSixConfigurations, R"({"seed": 1})");
  b->LoadState(state);
  EXPECT_EQ(b->seen_count(), 3u);
  std::set<Json> all;
  for (const std::string& bytes : first) all.insert(Json(ToJson(bytes)));
  for (const std::string& bytes : GenerateN(*b, 3)) {
    EXPECT_TRUE(all.insert(Json(ToJson(bytes))).second) << "repeated " << ToJson(bytes);
  }
  EXPECT_EQ(all.size(), 6u);
  EXPECT_FALSE(Generate(*b, 6).has_value());
}

TEST(RandomTunerTest, BadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto tuner = MakeTuner<RandomTuner>(host, kInfiniteSpace, R"({"seed": 13})");
  auto reference = MakeTuner<RandomTuner>(host, kInfiniteSpace, R"({"seed": 13})");
  ExpectError([&] { tuner->LoadState("\xc1"); }, TH_INVALID_ARGUMENT, {"saved state"});
  const std::string other = PackText(R"({"format": "org.tunehost.medianstop", "version": 1})");
  ExpectError([&] { tuner->LoadState(other); }, TH_INVALID_ARGUMENT,
              {"saved state", "not a state of format org.tunehost.random"});
  const std::string no_rng = PackText(
      R"({"format": "org.tunehost.random", "version": 1, "seed": 1, "rng": "x", "seen": []})");
  ExpectError([&] { tuner->LoadState(no_rng); }, TH_INVALID_ARGUMENT, {"saved state", "rng"});
  const std::string future = PackText(R"({"format": "org.tunehost.random", "version": 2})");
  ExpectError([&] { tuner->LoadState(future); }, TH_INVALID_ARGUMENT, {"saved state", "version"});
  EXPECT_EQ(tuner->seed(), 13u);
  EXPECT_EQ(GenerateN(*tuner, 5), GenerateN(*reference, 5));
}

// The SDK's saved-state helpers every built-in plugin uses (class_args.h):
// seed and engine round-trip; a missing or malformed entry and a state saved
// with the other optimize_mode are refused, naming the plugin and why.
TEST(SavedStateTest, SeedRngAndOptimizeModeRoundTripOrAreRefused) {
  std::mt19937_64 rng(42);
  rng.discard(7);
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(3);
  sdk::PackSavedRandom(pk, 42, rng);
  pk.pack(std::string("maximize"));
  pk.pack(true);
  msgpack::object_handle h = msgpack::unpack(buf.data(), buf.size());
  const sdk::SavedRandom back = sdk::ReadSavedRandom(h.get(), "demo");
  EXPECT_EQ(back.seed, 42u);
  EXPECT_EQ(back.rng, rng);
  sdk::CheckSavedMaximize(h.get(), true, "demo");
  ExpectError([&] { sdk::CheckSavedMaximize(h.get(), false, "demo"); }, TH_INVALID_ARGUMENT,
              {"demo: saved state", "optimize_mode maximize", "minimize"});
  for (const char* bad : {R"({"rng": "1 2 3"})", R"({"seed": -1, "rng": "x"})",
                          R"({"seed": 1, "rng": 5})", R"({"seed": 1, "rng": "not an engine"})"}) {
    msgpack::object_handle o = Msgpack(bad);
    ExpectError([&] { (void)sdk::ReadSavedRandom(o.get(), "demo"); }, TH_INVALID_ARGUMENT,
                {"demo: saved state"});
  }
  msgpack::object_handle none = Msgpack("{}");
  ExpectError([&] { sdk::CheckSavedMaximize(none.get(), true, "demo"); }, TH_INVALID_ARGUMENT,
              {"no maximize"});
}

}  // namespace
}  // namespace tunehost::plugins::testing
