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
#include "tunehost/sdk/host.h"

namespace tunehost::plugins {
namespace {

using testing::Json;
using testing::MsgpackOf;
using testing::RecordingHost;

msgpack::object_handle Msgpack(const std::string& text) { return MsgpackOf(Json::parse(text)); }

std::unique_ptr<BatchTuner> Make(const RecordingHost& host, const std::string& space,
                                 const std::string& class_args = "{}") {
  msgpack::object_handle args = Msgpack(class_args);
  auto tuner = std::make_unique<BatchTuner>(host.ref(), args.get());
  if (!space.empty()) {
    msgpack::object_handle s = Msgpack(space);
    tuner->UpdateSearchSpace(s.get());
  }
  return tuner;
}

void Update(BatchTuner& tuner, const std::string& space) {
  msgpack::object_handle s = Msgpack(space);
  tuner.UpdateSearchSpace(s.get());
}

std::optional<std::string> Generate(BatchTuner& tuner, int64_t id = 0) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  if (!tuner.GenerateParameters(id, pk)) {
    EXPECT_EQ(buffer.size(), 0u) << "nothing may be packed when no trial is generated";
    return std::nullopt;
  }
  return std::string(buffer.data(), buffer.size());
}

// Packed configurations until "no more trials" (at most `limit`).
std::vector<std::string> GenerateBytes(BatchTuner& tuner, size_t limit = 1000) {
  std::vector<std::string> out;
  while (out.size() < limit) {
    std::optional<std::string> p = Generate(tuner, static_cast<int64_t>(out.size()));
    if (!p) break;
    out.push_back(*p);
  }
  return out;
}

std::vector<Json> GenerateAll(BatchTuner& tuner, size_t limit = 1000) {
  std::vector<Json> out;
  for (const std::string& bytes : GenerateBytes(tuner, limit)) {
    out.push_back(Json::from_msgpack(bytes));
  }
  return out;
}

void ExpectError(const std::function<void()>& fn, th_status status,
                 const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning " << parts.front();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message \"" << e.what() << "\" lacks " << part;
    }
  }
}

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
  auto tuner = Make(host, kCombined);
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
  auto tuner = Make(host, R"({"p": {"_type": "choice", "_value": [{"lr": 1.0, "n": 1}]}})");
  std::optional<std::string> p = Generate(*tuner);
  ASSERT_TRUE(p.has_value());
  Json j = Json::from_msgpack(*p);
  EXPECT_TRUE(j["lr"].is_number_float()) << j;  // 1.0 is not sent as 1
  EXPECT_TRUE(j["n"].is_number_integer()) << j;
}

TEST(BatchTunerTest, AnOptionThatIsNotAMapIsSentUnderTheKey) {
  RecordingHost host;
  auto tuner =
      Make(host, R"({"k": {"_type": "choice", "_value": [1, "a", 2.0, [1, 2], {"x": 1}]}})");
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
  msgpack::object_handle args = Msgpack("{}");
  const th_tuner_t* t =
      sdk::detail::TunerHandle::Create(std::make_unique<BatchTuner>(host.ref(), args.get()));
  std::vector<uint8_t> space = Json::to_msgpack(Json::parse(kCombined));
  char message[256] = {};
  th_error_t err{message, sizeof(message)};
  ASSERT_EQ(t->update_search_space(t, th_bytes_t{space.data(), space.size()}, &err), TH_OK)
      << message;
  std::vector<int64_t> emitted;
  th_param_sink_t sink{&emitted, [](const th_param_sink_t* self, int64_t id, const uint8_t*,
                                    size_t) -> th_status {
                         static_cast<std::vector<int64_t>*>(self->sink_data)->push_back(id);
                         return TH_OK;
                       }};
  const int64_t ids[] = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(t->generate(t, ids, 7, &sink, &err), TH_NO_MORE_TRIALS);
  EXPECT_EQ(emitted, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  t->destroy(t);
}

TEST(BatchTunerTest, SearchSpaceOtherThanOneChoiceIsRefusedNamingTheKeyAndType) {
  RecordingHost host;
  auto tuner = Make(host, R"({"k": {"_type": "choice", "_value": [1, 2]}})");
  auto update = [&](const std::string& space) {
    return [&tuner, space] { Update(*tuner, space); };
  };
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
  auto construct = [&](const std::string& args) {
    return [&host, args] {
      msgpack::object_handle h = Msgpack(args);
      BatchTuner t(host.ref(), h.get());
    };
  };
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
  auto tuner = Make(host, "");
  ExpectError([&] { Generate(*tuner); }, TH_BAD_STATE, {"no search space"});
}

TEST(BatchTunerTest, ImportedConfigurationsAreSkipped) {
  RecordingHost host;
  auto tuner = Make(host, kCombined);
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
  auto k = Make(host, R"({"k": {"_type": "choice", "_value": [1, 2, 3]}})");
  msgpack::object_handle two = Msgpack(R"([{"parameters": {"k": 2.0}, "value": 1}])");
  k->ImportData(two.get());
  EXPECT_EQ(GenerateAll(*k), (std::vector<Json>{Json{{"k", 1}}, Json{{"k", 3}}}));

  msgpack::object_handle not_array = Msgpack(R"({"parameters": {}})");
  ExpectError([&] { tuner->ImportData(not_array.get()); }, TH_INVALID_ARGUMENT,
              {"import data must be an array"});
}

TEST(BatchTunerTest, ImportBeforeTheSearchSpaceCounts) {
  RecordingHost host;
  auto tuner = Make(host, "");
  msgpack::object_handle records = Msgpack(R"([{"parameters": {"k": 1}, "value": 1}])");
  tuner->ImportData(records.get());
  Update(*tuner, R"({"k": {"_type": "choice", "_value": [1, 2]}})");
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>{Json{{"k", 2}}}));
}

TEST(BatchTunerTest, AnOptionListedTwiceRunsOnce) {
  RecordingHost host;
  auto tuner = Make(host, R"({"p": {"_type": "choice", "_value": [
      {"a": 1}, {"a": 2}, {"a": 1.0}, {"a": 1}]}})");
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>{Json{{"a", 1}}, Json{{"a", 2}}}));
}

TEST(BatchTunerTest, NewSearchSpaceStartsAtItsFirstUntriedOptionSameSpaceChangesNothing) {
  RecordingHost host;
  const char* space = R"({"k": {"_type": "choice", "_value": [1, 2, 3]}})";
  auto tuner = Make(host, space);
  EXPECT_EQ(Json::from_msgpack(*Generate(*tuner)), (Json{{"k", 1}}));
  Update(*tuner, space);
  EXPECT_EQ(tuner->next(), 1u);
  EXPECT_EQ(Json::from_msgpack(*Generate(*tuner)), (Json{{"k", 2}}));
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
  auto a = Make(host, kCombined, R"({"optimize_mode": "maximize"})");
  auto b = Make(host, kCombined);
  msgpack::object_handle records = Msgpack(
      R"([{"parameters": {"optimizer": "SGD", "learning_rate": 0.01}, "value": 1}])");
  std::vector<std::string> first_a = GenerateBytes(*a, 2);
  std::vector<std::string> first_b = GenerateBytes(*b, 2);
  a->ImportData(records.get());
  b->ImportData(records.get());
  std::vector<std::string> rest_a = GenerateBytes(*a);
  std::vector<std::string> rest_b = GenerateBytes(*b);
  ASSERT_EQ(first_a.size(), 2u);
  ASSERT_EQ(rest_a.size(), 2u);
  EXPECT_EQ(first_a, first_b);
  EXPECT_EQ(rest_a, rest_b);
}

TEST(BatchTunerTest, SavedStateContinuesExactly) {
  RecordingHost host;
  auto a = Make(host, kCombined);
  GenerateBytes(*a, 2);
  msgpack::object_handle records = Msgpack(
      R"([{"parameters": {"optimizer": "SGD", "learning_rate": 0.01}, "value": 1}])");
  a->ImportData(records.get());
  const std::string state = a->SaveState();
  std::vector<std::string> rest = GenerateBytes(*a);
  ASSERT_EQ(rest.size(), 2u);  // options 2 and 4

  auto b = Make(host, kCombined);
  b->LoadState(state);
  EXPECT_EQ(b->next(), 2u);
  EXPECT_EQ(GenerateBytes(*b), rest);

  auto c = Make(host, "");
  c->LoadState(state);
  EXPECT_EQ(c->SaveState(), state);  // still pending: saved as loaded
  Update(*c, kCombined);
  EXPECT_EQ(GenerateBytes(*c), rest);

  auto d = Make(host, kCombined);
  d->LoadState(a->SaveState());  // exhausted
  EXPECT_FALSE(Generate(*d).has_value());
}

TEST(BatchTunerTest, StateOfAnotherSearchSpaceKeepsOnlyTheTriedConfigurations) {
  RecordingHost host;
  auto a = Make(host, R"({"k": {"_type": "choice", "_value": [1, 2]}})");
  GenerateBytes(*a, 1);  // {"k": 1}
  auto b = Make(host, R"({"k": {"_type": "choice", "_value": [3, 2, 1]}})");
  GenerateBytes(*b, 2);
  b->LoadState(a->SaveState());
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "another search space"));
  EXPECT_EQ(GenerateAll(*b), (std::vector<Json>{Json{{"k", 3}}, Json{{"k", 2}}}));
}

TEST(BatchTunerTest, BadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto tuner = Make(host, kCombined);
  GenerateBytes(*tuner, 1);
  const std::string good = tuner->SaveState();
  auto state = [](const Json& j) {
    std::vector<uint8_t> bytes = Json::to_msgpack(j);
    return std::string(bytes.begin(), bytes.end());
  };
  ExpectError([&] { tuner->LoadState("\xc1"); }, TH_INVALID_ARGUMENT, {"saved state"});
  const Json other = Json::parse(R"({"format": "org.tunehost.grid", "version": 1})");
  ExpectError([&] { tuner->LoadState(state(other)); }, TH_INVALID_ARGUMENT,
              {"saved state", "not a state of format org.tunehost.batch"});
  const Json future = Json::parse(R"({"format": "org.tunehost.batch", "version": 9})");
  ExpectError([&] { tuner->LoadState(state(future)); }, TH_INVALID_ARGUMENT,
              {"saved state", "version"});
  Json j = Json::from_msgpack(good);
  Json beyond = j;
  beyond["next"] = 6;
  ExpectError([&] { tuner->LoadState(state(beyond)); }, TH_INVALID_ARGUMENT,
              {"saved state", "beyond"});
  Json negative = j;
  negative["next"] = -1;
  ExpectError([&] { tuner->LoadState(state(negative)); }, TH_INVALID_ARGUMENT,
              {"saved state", "next"});
  Json bad_seen = j;
  bad_seen["seen"] = Json::array({"x"});
  ExpectError([&] { tuner->LoadState(state(bad_seen)); }, TH_INVALID_ARGUMENT,
              {"saved state", "seen"});
  EXPECT_EQ(tuner->SaveState(), good);
  std::vector<Json> options = CombinedOptions();
  EXPECT_EQ(GenerateAll(*tuner), (std::vector<Json>(options.begin() + 1, options.end())));
}

}  // namespace
}  // namespace tunehost::plugins
