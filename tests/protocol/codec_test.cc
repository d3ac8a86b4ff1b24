// The C++ codec on its own: round trips of every message type, every §3.1
// error code (naming the field), defaults for missing optional keys, floats
// staying float64, and robustness against truncated and corrupted input.
#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"
#include "protocol_testing.h"

namespace tunehost::protocol {
namespace {

using testing::DefaultBody;
using testing::FromHex;
using testing::LoadVectorFile;

Packed Pack(std::string_view json_text) {
  Packed p;
  EXPECT_OK(JsonToPacked(json_text, &p));
  return p;
}

// A body of every type with every field set away from its default.
std::vector<Body> SampleBodies() {
  ExperimentSpec spec;
  spec.id = "exp-1";
  spec.tuner = {"random", Pack(R"({"seed": 7})"), PluginIsolation::kProcess, 256};
  spec.assessor = PluginSpec{"medianstop", EmptyMap(), std::nullopt, std::nullopt};
  spec.plugin_timeout_s = 30.5;
  spec.concurrency = 3;
  spec.max_trials = 10;
  spec.max_duration_s = 90.5;
  NewTrialJob job{"exp-1", "trial-1", 4, 2, ParameterId{int64_t{-5}},
                  ParameterSource::kCustomized, 0, Pack(R"({"x": 1.0, "y": [1, "a"]})")};
  Metric metric;
  EXPECT_OK(ParseMetric(Pack(R"({"default": 0.5, "loss": 2})"), &metric));
  Metric number;
  EXPECT_OK(ParseMetric(PackDouble(-1.25), &number));
  std::vector<RunningTrial> running = {{"a", 1, -1}, {"b", 0, 12}};
  return {
      Initialize{Pack(R"({"x": {"_type": "choice", "_value": [1, 2]}})"), spec},
      RequestTrialJobs{9},
      UpdateSearchSpace{Pack(R"({"y": {}})")},
      ImportData{{{Pack(R"({"x": 1})"), number, std::nullopt},
                  {Pack(R"({"x": 2})"), metric, std::string("t-9")}}},
      AddCustomizedTrialJob{Pack(R"({"lr": 0.1})")},
      Terminate{},
      Ping{},
      ReportMetricData{"trial-1", 2, ParameterId{std::string("hb-1")}, MetricType::kFinal, 5,
                       metric, "w-1"},
      TrialEnd{"trial-1", 2, TrialStatus::kEarlyStopped, "stopped", "w-1"},
      WorkerHello{"w-1", 4, {2, Pack(R"({"host": "n1"})")}, "c++", "0.1.0", running,
                  std::string("addressed")},
      Heartbeat{"w-1", 1, running},
      TrialStarted{"w-1", "trial-1", 3},
      TrialRejected{"w-1", "trial-1", 3, "busy"},
      WorkerBye{"w-1"},
      job,
      SendTrialJobParameter{job},
      KillTrialJob{"trial-1", 3, "assessor"},
      MetricAck{"trial-1", 3, uint64_t{1} << 40},
      HelloRequest{},
      Initialized{"exp-1"},
      NoMoreTrialJobs{5, 2},
      ErrorEvent{"plugin_error", "boom", "tuner:random"},
      OkReply{Pack(R"({"trials": [], "no_more": true})")},
      ErrorReply{"bad_state", "not now"},
      GetStatus{},
      ListTrials{std::string("RUNNING"), 20, 10},
      GetTrial{"T00001"},
      GetStatistics{},
      GetMetrics{std::string("T00001")},
      ExportData{},
      UpdateLimits{4, 100, 3600.5},
      KillTrial{"T00002"},
      ListWorkers{},
  };
}

TEST(CodecTest, RoundTripsEveryMessageType) {
  std::set<size_t> covered;
  uint64_t id = 1;
  for (const Body& body : SampleBodies()) {
    SCOPED_TRACE(std::string(TypeCode(body)));
    covered.insert(body.index());
    const std::string bytes = Encode(id, body);
    Message m;
    ASSERT_OK(Decode(bytes, &m));
    EXPECT_EQ(m.version, kProtocolVersion);
    EXPECT_EQ(m.type, TypeCode(body));
    EXPECT_EQ(m.id, id);
    EXPECT_EQ(m.body.index(), body.index());
    // Every field is written, so equal bytes mean equal field values.
    EXPECT_EQ(Encode(m), bytes);
    ++id;
  }
  EXPECT_EQ(covered.size(), std::variant_size_v<Body>);
}

TEST(CodecTest, RoundTripKeepsFieldValues) {
  const std::vector<Body> bodies = SampleBodies();
  Message m;
  ASSERT_OK(Decode(Encode(1, bodies[0]), &m));
  const auto& in = std::get<Initialize>(m.body);
  ASSERT_TRUE(in.experiment.has_value());
  EXPECT_EQ(in.experiment->tuner.name, "random");
  EXPECT_EQ(PackedToJson(in.experiment->tuner.args), R"({"seed":7})");
  ASSERT_TRUE(in.experiment->assessor.has_value());
  EXPECT_EQ(in.experiment->concurrency, 3u);
  EXPECT_EQ(in.experiment->max_duration_s, 90.5);

  ASSERT_OK(Decode(Encode(2, bodies[7]), &m));
  const auto& me = std::get<ReportMetricData>(m.body);
  EXPECT_EQ(std::get<std::string>(me.parameter_id), "hb-1");
  EXPECT_EQ(me.type, MetricType::kFinal);
  EXPECT_EQ(me.value.scalar, 0.5);
  EXPECT_EQ(PackedToJson(me.value.raw), R"({"default":0.5,"loss":2})");

  ASSERT_OK(Decode(Encode(3, bodies[9]), &m));
  const auto& wh = std::get<WorkerHello>(m.body);
  ASSERT_EQ(wh.running.size(), 2u);
  EXPECT_EQ(wh.running[0].last_sequence, -1);
  EXPECT_EQ(wh.running[1].last_sequence, 12);
  EXPECT_EQ(wh.resources.gpus, 2u);

  ASSERT_OK(Decode(Encode(4, bodies[14]), &m));
  const auto& tr = std::get<NewTrialJob>(m.body);
  EXPECT_EQ(std::get<int64_t>(tr.parameter_id), -5);
  EXPECT_EQ(tr.parameter_source, ParameterSource::kCustomized);
  EXPECT_EQ(PackedToJson(tr.parameters), R"({"x":1.0,"y":[1,"a"]})");
}

template <typename T, typename = void>
struct HasMetricValue : std::false_type {};
template <typename T>
struct HasMetricValue<T, std::void_t<decltype(std::declval<T&>().value)>>
    : std::is_same<decltype(std::declval<T&>().value), Metric> {};

TEST(CodecTest, DefaultBodiesEncodeAndDecode) {
  for (size_t i = 0; i < std::variant_size_v<Body>; ++i) {
    Body body = DefaultBody(i);
    // A metric value is required on the wire; every other default is valid.
    std::visit(
        [](auto& b) {
          if constexpr (HasMetricValue<std::decay_t<decltype(b)>>::value) b.value.raw = PackDouble(0.0);
        },
        body);
    SCOPED_TRACE(std::string(TypeCode(body)));
    const std::string bytes = Encode(0, body);
    Message m;
    const Status st = Decode(bytes, &m);
    // Empty Packed maps are written as {}.
    ASSERT_OK(st);
    EXPECT_EQ(Encode(m), bytes);
  }
}

// Floats stay float64 on the wire, even with integral values (msgpack-c's
// pack_double would write 3600.0 as the integer 3600).
TEST(CodecTest, FloatsAreAlwaysFloat64) {
  EXPECT_EQ(PackDouble(2.0), std::string("\xcb\x40\x00\x00\x00\x00\x00\x00\x00", 9));
  Packed p;
  ASSERT_OK(JsonToPacked("[1.0, -2.0, 1]", &p));
  EXPECT_EQ(p, std::string("\x93\xcb\x3f\xf0\0\0\0\0\0\0\xcb\xc0\0\0\0\0\0\0\0\x01", 20));

  ExperimentSpec spec;
  spec.tuner.name = "random";
  spec.max_duration_s = 3600.0;
  const std::string bytes = Encode(1, Initialize{EmptyMap(), spec});
  const std::string float_3600("\xcb\x40\xac\x20\0\0\0\0\0", 9);
  EXPECT_NE(bytes.find(float_3600), std::string::npos);

  // Decoding re-packs values; their integral floats must stay floats too.
  Message m;
  Packed params;
  ASSERT_OK(JsonToPacked(R"({"x": 1.0, "n": 1})", &params));
  ASSERT_OK(Decode(Encode(1, AddCustomizedTrialJob{params}), &m));
  EXPECT_EQ(std::get<AddCustomizedTrialJob>(m.body).parameters, params);
  EXPECT_NE(params.find(std::string("\xcb\x3f\xf0\0\0\0\0\0\0", 9)), std::string::npos);
}

Status DecodeJson(std::string_view json_text, Message* m, size_t limit = kDefaultMaxMessageBytes) {
  DecodeOptions options;
  options.max_message_bytes = limit;
  return Decode(Pack(json_text), m, options);
}

void ExpectError(std::string_view json_text, Status::Code code, const std::string& field,
                 uint64_t id = 5) {
  SCOPED_TRACE(std::string(json_text));
  Message m;
  const Status st = DecodeJson(json_text, &m);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find(field), std::string::npos) << st.ToString();
  EXPECT_EQ(m.id, id);
}

TEST(CodecTest, ReportsEveryErrorCodeNamingTheProblem) {
  Message m;
  m.id = 9;
  Status st = Decode(std::string("\xc1", 1), &m);
  EXPECT_EQ(st.code(), Status::Code::kBadFrame);
  EXPECT_EQ(m.id, 0u);
  st = Decode(Pack(R"([1, "PI", 5, {}])"), &m);
  EXPECT_EQ(st.code(), Status::Code::kBadFrame);

  ExpectError(R"({"v": 2, "type": "PI", "id": 5, "body": {}})",
              Status::Code::kUnsupportedVersion, "v2");
  ExpectError(R"({"v": 2, "type": "PI", "id": 5, "body": {}})",
              Status::Code::kUnsupportedVersion, "v1");
  ExpectError(R"({"type": "PI", "id": 5, "body": {}})", Status::Code::kUnsupportedVersion,
              "\"v\"");
  ExpectError(R"({"v": 1, "type": "QQ", "id": 5, "body": {}})", Status::Code::kUnknownType,
              "QQ");
  ExpectError(R"({"v": 1, "id": 5, "body": {}})", Status::Code::kMissingField, "envelope.type");
  ExpectError(R"({"v": 1, "type": "GE", "id": 5, "body": {}})", Status::Code::kMissingField,
              "body.count");
  ExpectError(R"({"v": 1, "type": "GE", "id": 5, "body": {"count": 1.5}})",
              Status::Code::kBadField, "body.count");
  ExpectError(R"({"v": 1, "type": "PI", "id": 5, "body": 3})", Status::Code::kBadField,
              "envelope.body");
  ExpectError(R"({"v": 1, "type": "WH", "id": 5, "body": {"worker_id": "w", "slots": 1,
                  "running": [{"trial_id": "t", "attempt": -1}]}})",
              Status::Code::kBadField, "body.running[0].attempt");
  ExpectError(R"({"v": 1, "type": "ME", "id": 5, "body": {"trial_id": "t", "type": "FINAL",
                  "sequence": 0, "value": [0.5]}})",
              Status::Code::kBadField, "body.value");
  ExpectError(R"({"v": 1, "type": "IN", "id": 5, "body": {"search_space": {},
                  "experiment": {"tuner": {"name": 3}}}})",
              Status::Code::kBadField, "body.experiment.tuner.name");

  const Packed ping = Encode(5, Ping{});
  DecodeOptions options;
  options.max_message_bytes = ping.size() - 1;
  st = Decode(ping, &m, options);
  EXPECT_EQ(st.code(), Status::Code::kTooLarge);
  EXPECT_NE(st.message().find(std::to_string(ping.size())), std::string::npos);
  EXPECT_NE(st.message().find(std::to_string(ping.size() - 1)), std::string::npos);
  options.max_message_bytes = ping.size();
  EXPECT_OK(Decode(ping, &m, options));
}

TEST(CodecTest, MissingOptionalKeysGetDefaultsAndUnknownKeysAreIgnored) {
  Message m;
  ASSERT_OK(DecodeJson(R"({"v": 1, "type": "ME", "id": 3, "extra": 1, "body": {
      "trial_id": "t", "type": "PERIODICAL", "sequence": 4, "value": 7, "new_key": [1]}})",
                       &m));
  const auto& me = std::get<ReportMetricData>(m.body);
  EXPECT_EQ(me.attempt, 0u);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(me.parameter_id));
  EXPECT_EQ(me.worker_id, "");
  EXPECT_EQ(me.value.scalar, 7.0);

  ASSERT_OK(DecodeJson(R"({"v": 1, "type": "HB", "id": 3, "body": {"worker_id": "w",
      "running": null}})", &m));
  EXPECT_TRUE(std::get<Heartbeat>(m.body).running.empty());

  ASSERT_OK(DecodeJson(R"({"v": 1, "type": "ok", "id": 3, "body": {}})", &m));
  EXPECT_EQ(std::get<OkReply>(m.body).data, EmptyMap());

  ASSERT_OK(DecodeJson(R"({"v": 1, "type": "IN", "id": 3, "body": {"search_space": {},
      "experiment": {"tuner": {"name": "random"}}}})", &m));
  const auto& in = std::get<Initialize>(m.body);
  ASSERT_TRUE(in.experiment.has_value());
  EXPECT_EQ(in.experiment->concurrency, 1u);
  EXPECT_EQ(in.experiment->tuner.args, EmptyMap());
  EXPECT_FALSE(in.experiment->assessor.has_value());
}

std::string Nested(int levels) {
  std::string json = "1";
  for (int i = 0; i < levels; ++i) json = R"({"a": )" + json + "}";
  return R"({"v": 1, "type": "AD", "id": 5, "body": {"parameters": )" + json + "}}";
}

TEST(CodecTest, NestingIsLimitedToMaxDepth) {
  static_assert(kMaxDepth == 32);
  Message m;
  // Envelope and body are two levels; parameters adds the rest.
  EXPECT_OK(DecodeJson(Nested(30), &m));
  const Status st = DecodeJson(Nested(31), &m);
  EXPECT_EQ(st.code(), Status::Code::kBadFrame) << st.ToString();
}

TEST(CodecTest, EnvelopeNeedsAnIdAndABodyMap) {
  // wire-format.md §3: exactly four keys; id is a uint and body a map.
  ExpectError(R"({"v": 1, "type": "PI", "body": {}})", Status::Code::kMissingField,
              "envelope.id", /*id=*/0);
  ExpectError(R"({"v": 1, "type": "PI", "id": null, "body": {}})", Status::Code::kBadField,
              "envelope.id", /*id=*/0);
  ExpectError(R"({"v": 1, "type": "PI", "id": 5})", Status::Code::kMissingField,
              "envelope.body");
  ExpectError(R"({"v": 1, "type": "PI", "id": 5, "body": null})", Status::Code::kBadField,
              "envelope.body");
  Message m;
  EXPECT_FALSE(DecodeJson(R"({"v": 1, "type": "PI", "id": 6, "body": null})", &m).ok());
  EXPECT_EQ(m.id, 6u);  // still echoed
}

std::string Repeat(char c, size_t n) { return std::string(n, c); }

TEST(CodecTest, EveryCountLengthAndSizeIsBoundedNamingTheLimit) {
  // wire-format.md §3.2.
  ExpectError(R"({"v": 1, "type": "GE", "id": 5, "body": {"count": 4294967295}})",
              Status::Code::kBadField, "over the limit of 1024");
  ExpectError(R"({"v": 1, "type": "GE", "id": 5, "body": {"count": 1025}})",
              Status::Code::kBadField, "body.count");
  Message m;
  ASSERT_OK(DecodeJson(R"({"v": 1, "type": "GE", "id": 5, "body": {"count": 1024}})", &m));

  const std::string long_id = Repeat('t', kMaxIdBytes + 1);
  ExpectError(R"({"v": 1, "type": "KT", "id": 5, "body": {"trial_id": ")" + long_id + R"("}})",
              Status::Code::kBadField, "body.trial_id: 257 bytes is over the limit of 256");
  ASSERT_OK(DecodeJson(R"({"v": 1, "type": "KT", "id": 5, "body": {"trial_id": ")" +
                           Repeat('t', kMaxIdBytes) + R"("}})",
                       &m));
  ExpectError(R"({"v": 1, "type": ")" + long_id + R"(", "id": 5, "body": {}})",
              Status::Code::kBadField, "envelope.type");
  ExpectError(R"({"v": 1, "type": "ME", "id": 5, "body": {"trial_id": "t", "type": "FINAL",
                  "sequence": 0, "value": 1, "parameter_id": ")" + long_id + R"("}})",
              Status::Code::kBadField, "body.parameter_id");

  // Free text may be long, but not unbounded.
  ASSERT_OK(DecodeJson(R"({"v": 1, "type": "EN", "id": 5, "body": {"trial_id": "t",
                  "status": "FAILED", "error": ")" + Repeat('e', kMaxTextBytes) + R"("}})",
                       &m));
  ExpectError(R"({"v": 1, "type": "EN", "id": 5, "body": {"trial_id": "t", "status": "FAILED",
                  "error": ")" + Repeat('e', kMaxTextBytes + 1) + R"("}})",
              Status::Code::kBadField, "body.error");

  ExpectError(R"({"v": 1, "type": "WH", "id": 5, "body": {"worker_id": "w", "slots": 1025}})",
              Status::Code::kBadField, "body.slots");
  ExpectError(R"({"v": 1, "type": "HB", "id": 5, "body": {"worker_id": "w",
                  "free_slots": 4294967295}})",
              Status::Code::kBadField, "body.free_slots");
  std::string running = "[";
  for (size_t i = 0; i <= kMaxRunning; ++i) running += std::string(i ? "," : "") + "null";
  running += "]";
  ExpectError(R"({"v": 1, "type": "HB", "id": 5, "body": {"worker_id": "w", "running": )" +
                  running + "}}",
              Status::Code::kBadField, "body.running: 1025 items is over the limit of 1024");
  ExpectError(R"({"v": 1, "type": "UX", "id": 5, "body": {"concurrency": 100001}})",
              Status::Code::kBadField, "body.concurrency");
  ExpectError(R"({"v": 1, "type": "IN", "id": 5, "body": {"search_space": {},
                  "experiment": {"tuner": {"name": "random"}, "concurrency": 4294967295}}})",
              Status::Code::kBadField, "body.experiment.concurrency");

  std::string params = "{";
  for (size_t i = 0; i <= kMaxParameters; ++i) {
    params += std::string(i ? "," : "") + "\"k" + std::to_string(i) + "\": 1";
  }
  params += "}";
  ExpectError(R"({"v": 1, "type": "AD", "id": 5, "body": {"parameters": )" + params + "}}",
              Status::Code::kBadField, "body.parameters: 1025 keys is over the limit of 1024");
  ExpectError(R"({"v": 1, "type": "FD", "id": 5, "body": {"data": [{"parameters": )" + params +
                  R"(, "value": 1}]}})",
              Status::Code::kBadField, "body.data[0].parameters");
}

std::vector<std::string> AllVectorBytes() {
  std::vector<std::string> out;
  for (const char* file : {"vectors.json", "invalid.json"}) {
    for (const auto& v : LoadVectorFile(file)) out.push_back(FromHex(v.at("hex")));
  }
  return out;
}

// Decoding anything never crashes; what decodes re-encodes to a stable form.
void CheckRobust(const std::string& bytes) {
  Message m;
  const Status st = Decode(bytes, &m);
  if (!st.ok()) return;
  const std::string once = Encode(m);
  Message again;
  ASSERT_OK(Decode(once, &again));
  EXPECT_EQ(Encode(again), once);
}

TEST(CodecTest, TheLargestResultsSocketMessagesFitItsDefaultLimit) {
  // wire-format.md §1.1: an EN with the longest error text and ids, and a
  // WH of a worker running kMaxSlots trials (ids as the host makes them, 32
  // bytes allowed each), fit the results socket's default limit.
  const std::string id(kMaxIdBytes, 'i');
  TrialEnd end{id, UINT32_MAX, TrialStatus::kFailed, std::string(kMaxTextBytes, 'e'), id};
  EXPECT_LE(Encode(UINT64_MAX, end).size(), kDefaultMaxResultBytes);
  WorkerHello hello;
  hello.worker_id = id;
  hello.slots = kMaxSlots;
  hello.language = std::string(kMaxIdBytes, 'l');
  hello.version = std::string(kMaxIdBytes, 'v');
  for (uint32_t i = 0; i < kMaxSlots; ++i) {
    hello.running.push_back(RunningTrial{std::string(32, 't'), UINT32_MAX, INT64_MAX});
  }
  Message decoded;
  const std::string bytes = Encode(UINT64_MAX, hello);
  EXPECT_LE(bytes.size(), kDefaultMaxResultBytes);
  DecodeOptions options;
  options.max_message_bytes = kDefaultMaxResultBytes;
  EXPECT_OK(Decode(bytes, &decoded, options));
}

TEST(CodecTest, EveryTruncationOfEveryVectorFailsCleanly) {
  // Only the valid vectors: a prefix of an invalid one (trailing bytes) may be valid.
  std::vector<std::string> all;
  for (const auto& v : LoadVectorFile("vectors.json")) all.push_back(FromHex(v.at("hex")));
  ASSERT_GT(all.size(), 0u);
  for (const std::string& bytes : all) {
    for (size_t n = 0; n < bytes.size(); ++n) {
      Message m;
      // A strict prefix of one MessagePack value is never a whole value.
      const Status st = Decode(bytes.substr(0, n), &m);
      ASSERT_EQ(st.code(), Status::Code::kBadFrame) << n << " of " << bytes.size();
    }
  }
}

TEST(CodecTest, RandomByteFlipsOfEveryVectorNeverCrash) {
  std::mt19937 rng(20261123);
  size_t decoded = 0;
  size_t rejected = 0;
  for (const std::string& original : AllVectorBytes()) {
    if (original.empty()) continue;
    for (int round = 0; round < 300; ++round) {
      std::string bytes = original;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) {
        bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
      }
      CheckRobust(bytes);
      Message m;
      (Decode(bytes, &m).ok() ? decoded : rejected) += 1;
    }
  }
  // Both outcomes occur, so the mutations exercise decoding and rejection.
  EXPECT_GT(decoded, 0u);
  EXPECT_GT(rejected, 0u);
}

// The decoder reads strings in place and reuses one parse zone per thread:
// a decoded message must own everything it holds (the input may be freed at
// once), and a large message or a failed parse must not spoil the next one.
TEST(CodecTest, DecodedMessagesOwnTheirBytesAndTheDecoderRecoversFromAnything) {
  std::string big_params = "{";
  for (int i = 0; i < 1000; ++i) {
    big_params += (i ? ", " : "") + std::string("\"p") + std::to_string(i) + "\": \"" +
                  std::string(80, static_cast<char>('a' + i % 26)) + "\"";
  }
  big_params += "}";
  const std::string big = Encode(3, AddCustomizedTrialJob{Pack(big_params)});
  ASSERT_GT(big.size(), 64u * 1024);  // past the parse zone's first chunk
  std::vector<std::string> expected;
  std::vector<Message> decoded;
  uint64_t id = 0;
  for (const Body& body : SampleBodies()) {
    const std::string canonical = Encode(++id, body);
    // A large message and a truncated one between every two messages.
    Message scratch;
    ASSERT_OK(Decode(big, &scratch));
    EXPECT_FALSE(Decode(std::string_view(big).substr(0, big.size() / 2), &scratch).ok());
    auto input = std::make_unique<std::string>(canonical);
    Message m;
    SCOPED_TRACE(std::string(TypeCode(body)));
    ASSERT_OK(Decode(*input, &m));
    std::fill(input->begin(), input->end(), '\xc1');  // never valid MessagePack
    input.reset();
    expected.push_back(canonical);
    decoded.push_back(std::move(m));
  }
  for (size_t i = 0; i < decoded.size(); ++i) {
    EXPECT_EQ(Encode(decoded[i]), expected[i]) << decoded[i].type;
  }
  Message again;
  ASSERT_OK(Decode(big, &again));
  EXPECT_EQ(Encode(again), big);
}

TEST(CodecTest, EchoesTheIdWhenReadable) {
  Message m;
  EXPECT_FALSE(DecodeJson(R"({"v": 1, "type": "GE", "id": 77, "body": {"count": "x"}})", &m)
                   .ok());
  EXPECT_EQ(m.id, 77u);
  EXPECT_FALSE(DecodeJson(R"({"v": 3, "type": "GE", "id": 78, "body": {}})", &m).ok());
  EXPECT_EQ(m.id, 78u);
  EXPECT_FALSE(DecodeJson(R"({"v": 1, "type": "GE", "id": "79"})", &m).ok());
  EXPECT_EQ(m.id, 0u);
}

}  // namespace
}  // namespace tunehost::protocol
