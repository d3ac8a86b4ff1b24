// Tests of plugins/batch/batch_tuner.{h,cc}: NNI's BatchTuner (the options of
// one choice, in order, then no more trials; search space and class_args
// validation, import, reproducibility, state).
#include "batch/batch_tuner.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins/plugin_testing.h"
#include "plugins/tuner_testing.h"
#include "tunehost/sdk/host.h"

namespace tunehost::plugins::testing {
namespace {

// NNI's documentation example.
const char* kCombined = R"({"combine_params": {"_type": "choice", "_value": [
  {"optimizer": "Adam", "learning_rate": 0.001},
  {"optimizer": "Adam", "learning_rate": 0.0001},
  {"optimizer": "Adam", "learning_rate": 0.00001},
  {"optimizer": "SGD", "learning_rate": 0.01},
  {"optimizer": "SGD", "learning_rate": 0.005}]}})";

std::vector<Json> CombinedOptions() {
  return Json::parse(kCombined)["combine_params"]["_value"].get<std::vector<Json>>();
}

TEST(BatchTunerTest, EmitsEachOptionInOrderThenNoMoreTrialsForGood) {
  RecordingHost host;
  auto tuner = MakeTuner<BatchTuner>(host, kCombined);
  EXPECT_EQ(tuner->option_count(), 5u);
  // A map option is the trial's whole parameter set, as in NNI.
  EXPECT_EQ(GenerateAll(*tuner), CombinedOptions());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Generate(*tuner).has_value());
  int logged = 0;
  for (const auto& [level, message] : host.logs()) {
    logged += message.find("all 5 options") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(logged, 1);
}

TEST(BatchTunerTest, ValuesKeepTheirTypes) {
  RecordingHost host;
  auto tuner =
      MakeTuner<BatchTuner>(host, R"({"p": {"_type": "choice", "_value": [{"lr": 1.0, "n": 1}]}})");
  std::optional<std::string> p = Generate(*tuner);
  ASSERT_TRUE(p.has_value());
  Json j = ToJson(*p);
  EXPECT_TRUE(j["lr"].is_number_float()) << j;  // 1.0 is not sent as 1
  EXPECT_TRUE(j["n"].is_number_integer()) << j;
}

TEST(BatchTunerTest, AnOptionThatIsNotAMapIsSentUnderTheKey) {
  RecordingHost host;
  auto tuner = MakeTuner<BatchTuner>(
      host, R"({"k": {"_type": "choice", "_value": [1, "a", 2.0, [1, 2], {"x": 1}]}})");
  std::vector<Json> got = GenerateAll(*tuner);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0], Json::parse(R"({"k": 1})"));
  EXPECT_EQ(got[1], Json::parse(R"({"k": "a"})"));
  EXPECT_TRUE(got[2]["k"].is_number_float()) << got[2];
  EXPECT_EQ(got[2], Json::parse(R"({"k": 2.0})"));
  EXPECT_EQ(got[3], Json::parse(R"({"k": [1, 2]})"));
  EXPECT_EQ(got[4], Json::parse(R"({"x": 1})"));
}

TEST(BatchTunerTest, ExhaustionReachesTheHostAsNoMoreTrials) {
  RecordingHost host;
  auto t = AbiTuner::Of<BatchTuner>(host, "{}");
  ASSERT_EQ(t->UpdateSearchSpace(kCombined), TH_OK) << t->message();
  EXPECT_EQ(t->Generate({1, 2, 3, 4, 5, 6, 7}), TH_NO_MORE_TRIALS);
  EXPECT_EQ(t->emitted_ids(), (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST(BatchTunerTest, SearchSpaceOtherThanOneChoiceIsRefusedNamingTheKeyAndType) {
  RecordingHost host;
  auto tuner = MakeTuner<BatchTuner>(host, R"({"k": {"_type": "choice", "_value": [1, 2]}})");
  auto update = [&](const std::string& space) { return Updating(*tuner, space); };
  ExpectError(update(R"({"a": {"_type": "choice", "_value": [1]},
                         "b": {"_type": "choice", "_value": [2]}})"),
              TH_INVALID_ARGUMENT, {"batch", "exactly one key", "2 keys", "\"a\"", "\"b\""});
  ExpectError(update("{}"), TH_INVALID_ARGUMENT, {"batch", "exactly one key", "0 keys"});
  ExpectError(update(R"({"lr": {"_type": "uniform", "_value": [0, 1]}})"), TH_INVALID_ARGUMENT,
              {"batch", "\"lr\"", "\"uniform\"", "not supported"});
  ExpectError(update(R"({"n": {"_type": "randint", "_value": [0, 3]}})"), TH_INVALID_ARGUMENT,
              {"\"n\"", "\"randint\""});
  ExpectError(update(R"({"k": {"_value": [1]}})"), TH_INVALID_ARGUMENT, {"\"k\"", "_type"});
  ExpectError(update(R"({"k": {"_type": "choice", "_value": 3}})"), TH_INVALID_ARGUMENT,
              {"\"k\"", "_value must be a list"});
  ExpectError(update(R"({"k": {"_type": "choice", "_value": []}})"), TH_INVALID_ARGUMENT,
              {"\"k\"", "at least one option"});
  ExpectError(update("[1]"), TH_INVALID_ARGUMENT, {"batch", "exactly one key", "array"});
  // A refused update leaves the previous list in use.
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>{Json{{"k", 1}}, Json{{"k", 2}}}));
}

TEST(BatchTunerTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) { return Constructing<BatchTuner>(host, args); };
  ExpectError(construct(R"({"seed": 1})"), TH_INVALID_ARGUMENT,
              {"batch", "\"seed\"", "accepted: optimize_mode"});
  ExpectError(construct(R"({"optimize_mode": "up"})"), TH_INVALID_ARGUMENT,
              {"\"optimize_mode\""});
  for (const char* ok : {"{}", R"({"optimize_mode": "minimize"})"}) {
    msgpack::object_handle h = Msgpack(ok);
    EXPECT_NO_THROW(BatchTuner(host.ref(), h.get())) << ok;
  }
}

TEST(BatchTunerTest, GenerateBeforeASearchSpaceIsABadState) {
  RecordingHost host;
  auto tuner = MakeTuner<BatchTuner>(host, "");
  ExpectError([&] { Generate(*tuner); }, TH_BAD_STATE, {"no search space"});
}

TEST(BatchTunerTest, ImportedConfigurationsAreSkipped) {
  RecordingHost host;
  auto tuner = MakeTuner<BatchTuner>(host, kCombined);
  std::vector<Json> options = CombinedOptions();
  // Key order does not matter; a metric of 0 counts (NNI skips falsy values);
  // a record without a value is skipped.
  msgpack::object_handle records = Msgpack(R"([
    {"parameters": {"learning_rate": 0.0001, "optimizer": "Adam"}, "value": 0},
    {"parameter": {"optimizer": "SGD", "learning_rate": 0.01}, "value": {"default": 0.3}},
    {"parameters": {"optimizer": "SGD", "learning_rate": 0.005}}
  ])");
  tuner->ImportData(records.get());
  EXPECT_EQ(tuner->seen_count(), 2u);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "batch: skipped 1"));
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>{options[0], options[2], options[4]}));

  // Wrapped options are matched as the trial received them.
  auto k = MakeTuner<BatchTuner>(host, R"({"k": {"_type": "choice", "_value": [1, 2, 3]}})");
  msgpack::object_handle two = Msgpack(R"([{"parameters": {"k": 2.0}, "value": 1}])");
  k->ImportData(two.get());
  EXPECT_EQ(GenerateAll(*k), (std::vector<Json>{Json{{"k", 1}}, Json{{"k", 3}}}));

  ExpectNonArrayImportRefused(*tuner);
}

TEST(BatchTunerTest, ImportBeforeTheSearchSpaceCounts) {
  RecordingHost host;
  auto tuner = MakeTuner<BatchTuner>(host, "");
  msgpack::object_handle records = Msgpack(R"([{"parameters": {"k": 1}, "value": 1}])");
  tuner->ImportData(records.get());
  Update(*tuner, R"({"k": {"_type": "choice", "_value": [1, 2]}})");
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>{Json{{"k", 2}}}));
}

TEST(BatchTunerTest, AnOptionListedTwiceRunsOnce) {
  RecordingHost host;
  auto tuner = MakeTuner<BatchTuner>(host, R"({"p": {"_type": "choice", "_value": [
      {"a": 1}, {"a": 2}, {"a": 1.0}, {"a": 1}]}})");
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>{Json{{"a", 1}}, Json{{"a", 2}}}));
}

TEST(BatchTunerTest, NewSearchSpaceStartsAtItsFirstUntriedOptionSameSpaceChangesNothing) {
  RecordingHost host;
  const char* space = R"({"k": {"_type": "choice", "_value": [1, 2, 3]}})";
  auto tuner = MakeTuner<BatchTuner>(host, space);
  EXPECT_EQ(ToJson(*Generate(*tuner)), (Json{{"k", 1}}));
  Update(*tuner, space);
  EXPECT_EQ(tuner->next(), 1u);
  EXPECT_EQ(ToJson(*Generate(*tuner)), (Json{{"k", 2}}));
  Update(*tuner, R"({"k": {"_type": "choice", "_value": [2, 4, 1, 3]}})");
  EXPECT_EQ(tuner->next(), 0u);
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>{Json{{"k", 4}}, Json{{"k", 3}}}));
  EXPECT_FALSE(Generate(*tuner).has_value());
  // Exhaustion ends with a list that has something new.
  Update(*tuner, R"({"k": {"_type": "choice", "_value": [5]}})");
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>{Json{{"k", 5}}}));
}

TEST(BatchTunerTest, SameEventsGiveTheSameBytes) {
  RecordingHost host;
  auto a = MakeTuner<BatchTuner>(host, kCombined, R"({"optimize_mode": "maximize"})");
  auto b = MakeTuner<BatchTuner>(host, kCombined);
  msgpack::object_handle records = Msgpack(
      R"([{"parameters": {"optimizer": "SGD", "learning_rate": 0.01}, "value": 1}])");
  std::vector<std::string> first_a = GenerateAllBytes(*a, 2);
  std::vector<std::string> first_b = GenerateAllBytes(*b, 2);
  a->ImportData(records.get());
  b->ImportData(records.get());
  std::vector<std::string> rest_a = GenerateAllBytes(*a);
  std::vector<std::string> rest_b = GenerateAllBytes(*b);
  ASSERT_EQ(first_a.size(), 2u);
  ASSERT_EQ(rest_a.size(), 2u);
  EXPECT_EQ(first_a, first_b);
  EXPECT_EQ(rest_a, rest_b);
}

TEST(BatchTunerTest, SavedStateContinuesExactly) {
  RecordingHost host;
  auto a = MakeTuner<BatchTuner>(host, kCombined);
  GenerateAllBytes(*a, 2);
  msgpack::object_handle records = Msgpack(
      R"([{"parameters": {"optimizer": "SGD", "learning_rate": 0.01}, "value": 1}])");
  a->ImportData(records.get());
  const std::string state = a->SaveState();
  std::vector<std::string> rest = GenerateAllBytes(*a);
  ASSERT_EQ(rest.size(), 2u);  // options 2 and 4

  auto b = MakeTuner<BatchTuner>(host, kCombined);
  b->LoadState(state);
  EXPECT_EQ(b->next(), 2u);
  EXPECT_EQ(GenerateAllBytes(*b), rest);

  auto c = MakeTuner<BatchTuner>(host, "");
  c->LoadState(state);
  EXPECT_EQ(c->SaveState(), state);  // still pending: saved as loaded
  Update(*c, kCombined);
  EXPECT_EQ(GenerateAllBytes(*c), rest);

  auto d = MakeTuner<BatchTuner>(host, kCombined);
  d->LoadState(a->SaveState());  // exhausted
  EXPECT_FALSE(Generate(*d).has_value());
}

TEST(BatchTunerTest, StateOfAnotherSearchSpaceKeepsOnlyTheTriedConfigurations) {
  RecordingHost host;
  auto a = MakeTuner<BatchTuner>(host, R"({"k": {"_type": "choice", "_value": [1, 2]}})");
  GenerateAllBytes(*a, 1);  // {"k": 1}
  auto b = MakeTuner<BatchTuner>(host, R"({"k": {"_type": "choice", "_value": [3, 2, 1]}})");
  GenerateAllBytes(*b, 2);
  b->LoadState(a->SaveState());
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "another search space"));
  EXPECT_EQ(GenerateAll(*b), (std::vector<Json>{Json{{"k", 3}}, Json{{"k", 2}}}));
}

TEST(BatchTunerTest, BadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto tuner = MakeTuner<BatchTuner>(host, kCombined);
  GenerateAllBytes(*tuner, 1);
  const std::string good = tuner->SaveState();
  ExpectError([&] { tuner->LoadState("\xc1"); }, TH_INVALID_ARGUMENT, {"saved state"});
  const Json other = Json::parse(R"({"format": "org.tunehost.grid", "version": 1})");
  ExpectError([&] { tuner->LoadState(Pack(other)); }, TH_INVALID_ARGUMENT,
              {"saved state", "not a state of format org.tunehost.batch"});
  const Json future = Json::parse(R"({"format": "org.tunehost.batch", "version": 9})");
  ExpectError([&] { tuner->LoadState(Pack(future)); }, TH_INVALID_ARGUMENT,
              {"saved state", "version"});
  Json j = ToJson(good);
  Json beyond = j;
  beyond["next"] = 6;
  ExpectError([&] { tuner->LoadState(Pack(beyond)); }, TH_INVALID_ARGUMENT,
              {"saved state", "beyond"});
  Json negative = j;
  negative["next"] = -1;
  ExpectError([&] { tuner->LoadState(Pack(negative)); }, TH_INVALID_ARGUMENT,
              {"saved state", "next"});
  Json bad_seen = j;
  bad_seen["seen"] = Json::array({"x"});
  ExpectError([&] { tuner->LoadState(Pack(bad_seen)); }, TH_INVALID_ARGUMENT,
              {"saved state", "seen"});
  EXPECT_EQ(tuner->SaveState(), good);
  std::vector<Json> options = CombinedOptions();
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>(options.begin() + 1, options.end())));
}

}  // namespace
}  // namespace tunehost::plugins::testing
