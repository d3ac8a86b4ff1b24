// The checked-in vectors (protocol/vectors/) against the C++ codec: every valid
// vector decodes to exactly its "expect" (rendered field by field from the
// decoded structs), re-encodes byte-identically, and every invalid one fails
// with its error code.
#include <set>
#include <string>
#include <type_traits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tunehost/protocol/codec.h"
#include "protocol_testing.h"

namespace tunehost::protocol {
namespace {

using nlohmann::json;
using testing::DefaultBody;
using testing::FromHex;
using testing::LoadVectorFile;
using testing::ToHex;

json Value(const Packed& p) { return json::parse(PackedToJson(p)); }

json Id(const ParameterId& id) {
  if (const auto* i = std::get_if<int64_t>(&id)) return *i;
  if (const auto* s = std::get_if<std::string>(&id)) return *s;
  return nullptr;
}

json Plugin(const PluginSpec& p) {
  return json{{"name", p.name},
              {"args", Value(p.args)},
              {"isolation", p.isolation ? json(std::string(ToString(*p.isolation))) : json(nullptr)},
              {"memory_limit_mb", p.memory_limit_mb ? json(*p.memory_limit_mb) : json(nullptr)}};
}

json Running(const std::vector<RunningTrial>& running) {
  json out = json::array();
  for (const auto& r : running) {
    out.push_back({{"trial_id", r.trial_id}, {"attempt", r.attempt},
                   {"last_sequence", r.last_sequence}});
  }
  return out;
}

json Job(const NewTrialJob& b) {
  return {{"experiment_id", b.experiment_id},
          {"trial_id", b.trial_id},
          {"sequence_id", b.sequence_id},
          {"attempt", b.attempt},
          {"parameter_id", Id(b.parameter_id)},
          {"parameter_source", ToString(b.parameter_source)},
          {"parameter_index", b.parameter_index},
          {"parameters", Value(b.parameters)},
          {"lease", b.lease ? json(*b.lease) : json(nullptr)}};
}

// The decoded body as JSON, written from the struct fields (not from the bytes).
struct Renderer {
  json operator()(const Initialize& b) const {
    json e = nullptr;
    if (b.experiment) {
      const ExperimentSpec& x = *b.experiment;
      e = {{"id", x.id},
           {"tuner", Plugin(x.tuner)},
           {"assessor", x.assessor ? Plugin(*x.assessor) : json(nullptr)},
           {"concurrency", x.concurrency},
           {"max_trials", x.max_trials},
           {"max_duration_s", x.max_duration_s},
           {"plugin_timeout_s", x.plugin_timeout_s ? json(*x.plugin_timeout_s) : json(nullptr)}};
    }
    return {{"search_space", Value(b.search_space)}, {"experiment", e}};
  }
  json operator()(const RequestTrialJobs& b) const { return {{"count", b.count}}; }
  json operator()(const UpdateSearchSpace& b) const {
    return {{"search_space", Value(b.search_space)}};
  }
  json operator()(const ImportData& b) const {
    json data = json::array();
    for (const auto& r : b.data) {
      data.push_back({{"parameters", Value(r.parameters)},
                      {"value", Value(r.value.raw)},
                      {"trial_id", r.trial_id ? json(*r.trial_id) : json(nullptr)}});
    }
    return {{"data", data}};
  }
  json operator()(const AddCustomizedTrialJob& b) const {
    return {{"parameters", Value(b.parameters)}};
  }
  json operator()(const Terminate&) const { return json::object(); }
  json operator()(const Ping&) const { return json::object(); }
  json operator()(const ReportMetricData& b) const {
    return {{"trial_id", b.trial_id}, {"attempt", b.attempt},
            {"parameter_id", Id(b.parameter_id)}, {"type", ToString(b.type)},
            {"sequence", b.sequence}, {"value", Value(b.value.raw)},
            {"worker_id", b.worker_id}};
  }
  json operator()(const TrialEnd& b) const {
    return {{"trial_id", b.trial_id}, {"attempt", b.attempt}, {"status", ToString(b.status)},
            {"error", b.error}, {"worker_id", b.worker_id}};
  }
  json operator()(const WorkerHello& b) const {
    return {{"worker_id", b.worker_id},
            {"slots", b.slots},
            {"resources", {{"gpus", b.resources.gpus}, {"extra", Value(b.resources.extra)}}},
            {"language", b.language},
            {"version", b.version},
            {"running", Running(b.running)},
            {"offers", b.offers ? json(*b.offers) : json(nullptr)}};
  }
  json operator()(const Heartbeat& b) const {
    return {{"worker_id", b.worker_id}, {"free_slots", b.free_slots},
            {"running", Running(b.running)}};
  }
  json operator()(const TrialStarted& b) const {
    return {{"worker_id", b.worker_id}, {"trial_id", b.trial_id}, {"attempt", b.attempt},
            {"lease", b.lease ? json(*b.lease) : json(nullptr)}};
  }
  json operator()(const TrialRejected& b) const {
    return {{"worker_id", b.worker_id}, {"trial_id", b.trial_id}, {"attempt", b.attempt},
            {"reason", b.reason}, {"lease", b.lease ? json(*b.lease) : json(nullptr)}};
  }
  json operator()(const WorkerBye& b) const { return {{"worker_id", b.worker_id}}; }
  json operator()(const NewTrialJob& b) const { return Job(b); }
  json operator()(const SendTrialJobParameter& b) const { return Job(b.job); }
  json operator()(const KillTrialJob& b) const {
    return {{"trial_id", b.trial_id}, {"attempt", b.attempt}, {"reason", b.reason}};
  }
  json operator()(const MetricAck& b) const {
    return {{"trial_id", b.trial_id}, {"attempt", b.attempt}, {"sequence", b.sequence}};
  }
  json operator()(const HelloRequest&) const { return json::object(); }
  json operator()(const Initialized& b) const { return {{"experiment_id", b.experiment_id}}; }
  json operator()(const NoMoreTrialJobs& b) const {
    return {{"requested", b.requested}, {"generated", b.generated}};
  }
  json operator()(const ErrorEvent& b) const {
    return {{"code", b.code}, {"message", b.message}, {"source", b.source}};
  }
  json operator()(const OkReply& b) const { return {{"data", Value(b.data)}}; }
  json operator()(const ErrorReply& b) const {
    return {{"code", b.code}, {"message", b.message}};
  }
  json operator()(const GetStatus&) const { return json::object(); }
  json operator()(const ListTrials& b) const {
    return {{"status", b.status ? json(*b.status) : json(nullptr)},
            {"offset", b.offset},
            {"limit", b.limit}};
  }
  json operator()(const GetTrial& b) const { return {{"trial_id", b.trial_id}}; }
  json operator()(const GetStatistics&) const { return json::object(); }
  json operator()(const GetMetrics& b) const {
    return {{"trial_id", b.trial_id ? json(*b.trial_id) : json(nullptr)}};
  }
  json operator()(const ExportData&) const { return json::object(); }
  json operator()(const UpdateLimits& b) const {
    return {{"concurrency", b.concurrency ? json(*b.concurrency) : json(nullptr)},
            {"max_trials", b.max_trials ? json(*b.max_trials) : json(nullptr)},
            {"max_duration_s", b.max_duration_s ? json(*b.max_duration_s) : json(nullptr)}};
  }
  json operator()(const KillTrial& b) const { return {{"trial_id", b.trial_id}}; }
  json operator()(const ListWorkers&) const { return json::object(); }
};

// The number the algorithms see for an expected metric value.
double ExpectedScalar(const json& value) {
  return value.is_object() ? value.at("default").get<double>() : value.get<double>();
}

// Metric::scalar must match the metric's value (not only its raw bytes).
void CheckScalars(const Body& body, const json& expect) {
  if (const auto* me = std::get_if<ReportMetricData>(&body)) {
    EXPECT_EQ(me->value.scalar, ExpectedScalar(expect.at("value")));
  }
  if (const auto* fd = std::get_if<ImportData>(&body)) {
    ASSERT_EQ(fd->data.size(), expect.at("data").size());
    for (size_t i = 0; i < fd->data.size(); ++i) {
      EXPECT_EQ(fd->data[i].value.scalar, ExpectedScalar(expect.at("data")[i].at("value")));
    }
  }
}

TEST(VectorsTest, EveryValidVectorDecodesToItsExpectationAndReencodesIdentically) {
  const json vectors = LoadVectorFile("vectors.json");
  ASSERT_GT(vectors.size(), 0u);
  for (const auto& v : vectors) {
    const std::string name = v.at("name");
    SCOPED_TRACE(name);
    const json& expect = v.at("expect");
    Message m;
    ASSERT_OK(Decode(FromHex(v.at("hex")), &m));
    EXPECT_EQ(m.version, expect.at("v").get<uint32_t>());
    EXPECT_EQ(m.type, expect.at("type").get<std::string>());
    EXPECT_EQ(TypeCode(m.body), m.type);
    EXPECT_EQ(m.id, expect.at("id").get<uint64_t>());
    const json rendered = std::visit(Renderer{}, m.body);
    EXPECT_EQ(rendered, expect.at("body")) << "rendered: " << rendered.dump();
    CheckScalars(m.body, expect.at("body"));
    const std::string canonical = v.contains("canonical_hex") ? v.at("canonical_hex") : v.at("hex");
    EXPECT_EQ(ToHex(Encode(m)), canonical);
  }
}

TEST(VectorsTest, CoverEveryMessageType) {
  const json vectors = LoadVectorFile("vectors.json");
  std::set<std::string> seen;
  for (const auto& v : vectors) seen.insert(v.at("expect").at("type").get<std::string>());
  for (size_t i = 0; i < std::variant_size_v<Body>; ++i) {
    const Body body = DefaultBody(i);
    EXPECT_TRUE(seen.count(std::string(TypeCode(body)))) << "no vector for " << TypeCode(body);
  }
}

TEST(VectorsTest, EveryInvalidVectorFailsWithItsCode) {
  const json invalid = LoadVectorFile("invalid.json");
  ASSERT_GT(invalid.size(), 0u);
  for (const auto& v : invalid) {
    const std::string name = v.at("name");
    SCOPED_TRACE(name);
    DecodeOptions options;
    if (v.contains("max_message_bytes")) options.max_message_bytes = v.at("max_message_bytes");
    Message m;
    m.id = 777;  // must be reset when the id cannot be read
    const Status st = Decode(FromHex(v.at("hex")), &m, options);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.CodeName(), v.at("error").get<std::string>()) << st.ToString();
    if (v.contains("field")) {
      EXPECT_NE(st.message().find(v.at("field").get<std::string>()), std::string::npos)
          << st.ToString();
    }
    EXPECT_EQ(m.id, v.at("id").get<uint64_t>());
  }
}

}  // namespace
}  // namespace tunehost::protocol
