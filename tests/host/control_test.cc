// The control API (wire-format.md §4.2: ST LT GT JS MT EX UX KT)
// against a real Server on loopback: the test plays a worker with real
// ZeroMQ sockets and a control client with a DEALER, and checks reply data
// field by field and every error code.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "test_util.h"
#include "tunehost/host/control_queries.h"
#include "tunehost/host/plugin.h"
#include "tunehost/host/server.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host {
namespace {

namespace p = tunehost::protocol;
using Json = nlohmann::ordered_json;
using std::chrono::milliseconds;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<std::string> Keys(const Json& map) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : map.items()) keys.push_back(k);
  return keys;
}

struct Reply {
  bool ok = false;
  Json data;              // ok
  std::string code;       // error
  std::string message;    // error
};

class ControlTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (server_) server_->Stop();
    if (loop_.joinable()) loop_.join();
  }

  // A server; with `configure`, an experiment of the recording tuner (which
  // emits {"id": <parameter id>}) that runs until stopped.
  void StartServer(bool configure, uint32_t concurrency = 2, uint64_t max_trials = 0,
                   const std::string& optimize_mode = "") {
    ASSERT_EQ(registry_.LoadDirectory(TH_RECORDING_PLUGIN_DIR), 1u);
    ServerOptions o;
    o.endpoints = {"tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                   "tcp://127.0.0.1:*"};
    o.heartbeat_interval = milliseconds(2000);  // the test sends no heartbeats
    o.ack_timeout = milliseconds(5000);
    o.exit_when_finished = false;  // queries keep working after DONE
    server_ = std::make_unique<Server>(o, &registry_);
    ASSERT_OK(server_->Bind());
    if (configure) {
      p::ExperimentSpec spec;
      spec.id = "ctl";
      spec.tuner.name = "recording";
      std::string args = optimize_mode.empty()
                             ? "{}"
                             : "{\"optimize_mode\": \"" + optimize_mode + "\"}";
      ASSERT_OK(p::JsonToPacked(args, &spec.tuner.args));
      spec.concurrency = concurrency;
      spec.max_trials = max_trials;
      spec.max_duration_s = 3600;
      ASSERT_OK(server_->Configure(spec, p::EmptyMap()));
    }
    const Endpoints& ep = server_->bound();
    jobs_.set(zmq::sockopt::rcvhwm, 1);
    jobs_.connect(ep.jobs);
    results_.set(zmq::sockopt::linger, 0);
    results_.connect(ep.results);
    events_.set(zmq::sockopt::subscribe, "worker.w1.");
    events_.connect(ep.events);
    control_.set(zmq::sockopt::linger, 0);
    control_.connect(ep.control);
    loop_ = std::thread([this] { run_status_ = server_->Run(); });
  }

  // One control request; its reply (matched by id).
  Reply Request(p::Body body) {
    const uint64_t id = ++next_id_;
    std::string bytes = p::Encode(id, std::move(body));
    control_.send(zmq::buffer(bytes), zmq::send_flags::none);
    return Await(id);
  }

  // Raw request bytes (for bodies the C++ encoder cannot produce).
  Reply RequestRaw(const Json& envelope) {
    p::Packed bytes;
    EXPECT_OK(p::JsonToPacked(envelope.dump(), &bytes));
    control_.send(zmq::buffer(bytes), zmq::send_flags::none);
    return Await(envelope.at("id").get<uint64_t>());
  }

  Reply Await(uint64_t id) {
    Reply r;
    for (;;) {
      zmq::pollitem_t item{control_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, milliseconds(10000)) == 0) {
        ADD_FAILURE() << "no reply to request " << id;
        return r;
      }
      zmq::message_t msg;
      if (!control_.recv(msg)) continue;
      p::Message m;
      EXPECT_OK(p::Decode(msg.to_string_view(), &m));
      if (m.id != id) continue;
      if (auto* ok = std::get_if<p::OkReply>(&m.body)) {
        r.ok = true;
        r.data = Json::parse(p::PackedToJson(ok->data));
      } else if (auto* err = std::get_if<p::ErrorReply>(&m.body)) {
        r.code = err->code;
        r.message = err->message;
      }
      return r;
    }
  }

  Json Ok(p::Body body) {
    Reply r = Request(std::move(body));
    EXPECT_TRUE(r.ok) << r.code << ": " << r.message;
    return r.data;
  }

  void ExpectError(p::Body body, const std::string& code, const std::string& text = "") {
    std::string type(p::TypeCode(body));
    Reply r = Request(std::move(body));
    EXPECT_FALSE(r.ok) << type << " answered ok: " << r.data.dump();
    EXPECT_EQ(r.code, code) << type << ": " << r.message;
    if (!text.empty()) {
      EXPECT_NE(r.message.find(text), std::string::npos) << r.message;
    }
  }

  void Send(p::Body body) {
    std::string bytes = p::Encode(++next_id_, std::move(body));
    results_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }

  void Hello(uint32_t slots) {
    p::WorkerHello h;
    h.worker_id = "w1";
    h.slots = slots;
    h.language = "c++";
    h.resources.extra = p::EmptyMap();
    Send(h);
  }

  std::optional<p::NewTrialJob> NextJob(milliseconds timeout = milliseconds(10000)) {
    zmq::pollitem_t item{jobs_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
    zmq::message_t msg;
    if (!jobs_.recv(msg)) return std::nullopt;
    p::Message m;
    EXPECT_OK(p::Decode(msg.to_string_view(), &m));
    return std::get<p::NewTrialJob>(m.body);
  }

  template <class T>
  std::optional<T> NextSignal(milliseconds timeout = milliseconds(10000)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t item{events_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, milliseconds(50)) == 0) continue;
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(events_, std::back_inserter(frames))) continue;
      p::Message m;
      EXPECT_OK(p::Decode(frames.at(1).to_string_view(), &m));
      if (auto* v = std::get_if<T>(&m.body)) return *v;
    }
    return std::nullopt;
  }

  // A metric as the worker sends it; `json` is the value's JSON text.
  void Metric(const p::NewTrialJob& job, p::MetricType type, uint64_t seq,
              const std::string& json) {
    p::ReportMetricData m;
    m.trial_id = job.trial_id;
    m.attempt = job.attempt;
    m.parameter_id = job.parameter_id;
    m.type = type;
    m.sequence = seq;
    p::Packed raw;
    EXPECT_OK(p::JsonToPacked(json, &raw));
    EXPECT_OK(p::ParseMetric(raw, &m.value));
    m.worker_id = "w1";
    Send(m);
  }

  void Started(const p::NewTrialJob& job) {
    Send(p::TrialStarted{"w1", job.trial_id, job.attempt});
  }
  void Ended(const p::NewTrialJob& job, p::TrialStatus status, const std::string& error = "") {
    Send(p::TrialEnd{job.trial_id, job.attempt, status, error, "w1"});
  }

  // Waits until the host has handled everything sent on the results socket
  // so far (results and control are not ordered with each other, §7): a
  // metric for an unknown trial is still acknowledged, after the messages
  // before it. Resent like a worker resends, in case the subscription was
  // not in place yet.
  void Sync() {
    const std::string marker = "sync-" + std::to_string(++syncs_);
    for (int attempt = 0; attempt < 50; ++attempt) {
      p::ReportMetricData m;
      m.trial_id = marker;
      m.type = p::MetricType::kPeriodical;
      m.value.raw = p::PackDouble(0);
      m.worker_id = "w1";
      Send(m);
      auto deadline = std::chrono::steady_clock::now() + milliseconds(200);
      while (std::chrono::steady_clock::now() < deadline) {
        auto ack = NextSignal<p::MetricAck>(milliseconds(200));
        if (ack && ack->trial_id == marker) return;
      }
    }
    FAIL() << "the host never acknowledged " << marker;
  }

  // The experiment status once it is `want`, or the last one seen after
  // 10 s: DONE waits for the tuner strand's barrier, which runs on its own.
  std::string StatusEventually(const std::string& want) {
    std::string status;
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(10000);
    do {
      status = Ok(p::GetStatus{})["status"];
      if (status == want) break;
      std::this_thread::sleep_for(milliseconds(20));
    } while (std::chrono::steady_clock::now() < deadline);
    return status;
  }

  // The trial as GT reports it once everything the worker sent is handled.
  Json TrialAfterSync(const std::string& trial_id) {
    Sync();
    return Ok(p::GetTrial{trial_id});
  }

  PluginRegistry registry_;
  std::unique_ptr<Server> server_;
  std::thread loop_;
  Status run_status_;
  zmq::context_t ctx_{1};
  zmq::socket_t jobs_{ctx_, zmq::socket_type::pull};
  zmq::socket_t results_{ctx_, zmq::socket_type::push};
  zmq::socket_t events_{ctx_, zmq::socket_type::sub};
  zmq::socket_t control_{ctx_, zmq::socket_type::dealer};
  uint64_t next_id_ = 0;
  int syncs_ = 0;
};

TEST_F(ControlTest, BeforeAnExperimentEveryControlRequestIsBadState) {
  StartServer(/*configure=*/false);
  const std::vector<p::Body> requests = {
      p::GetStatus{}, p::ListTrials{}, p::GetTrial{"T00000"}, p::GetStatistics{},
      p::GetMetrics{}, p::ExportData{}, p::UpdateLimits{2, std::nullopt, std::nullopt},
      p::KillTrial{"T00000"}};
  for (const p::Body& body : requests) ExpectError(body, "bad_state", "no experiment");
}

TEST_F(ControlTest, StatusReportsEveryFieldInOrder) {
  const double wall_before = WallNow();
  StartServer(/*configure=*/true, /*concurrency=*/2, /*max_trials=*/3, "minimize");
  Hello(2);
  auto a = NextJob();
  auto b = NextJob();
  ASSERT_TRUE(a && b);
  Started(*a);
  Started(*b);
  Metric(*a, p::MetricType::kFinal, 0, "0.7");
  Metric(*b, p::MetricType::kFinal, 0, "{\"default\": 0.3, \"loss\": 1}");
  Ended(*a, p::TrialStatus::kSucceeded);
  Ended(*b, p::TrialStatus::kSucceeded);
  auto c = NextJob();  // the third and last trial: offered, not started
  ASSERT_TRUE(c);
  ASSERT_EQ(TrialAfterSync(b->trial_id)["status"], "SUCCEEDED");

  Json st = Ok(p::GetStatus{});
  const double wall_after = WallNow();
  const std::vector<std::string> keys = {
      "experiment_id", "status",    "error",  "start_time",    "elapsed_s",
      "concurrency",   "max_trials", "max_duration_s", "counts", "best",
      "optimize_mode", "pareto_front", "pareto_front_size", "objectives", "constraints",
      "endpoints"};
  EXPECT_EQ(Keys(st), keys);
  EXPECT_EQ(st["experiment_id"], "ctl");
  EXPECT_EQ(st["status"], "NO_MORE_TRIAL") << "3 of 3 trials created, one still open";
  EXPECT_EQ(st["error"], "");
  ASSERT_TRUE(st["start_time"].is_number_float());
  EXPECT_GE(st["start_time"].get<double>(), wall_before - 0.01);
  EXPECT_LE(st["start_time"].get<double>(), wall_after + 0.01);
  ASSERT_TRUE(st["elapsed_s"].is_number_float());
  EXPECT_GE(st["elapsed_s"].get<double>(), 0.0);
  EXPECT_LE(st["elapsed_s"].get<double>(), wall_after - wall_before + 0.01);
  EXPECT_EQ(st["concurrency"], 2);
  EXPECT_EQ(st["max_trials"], 3);
  ASSERT_TRUE(st["max_duration_s"].is_number_float());
  EXPECT_EQ(st["max_duration_s"].get<double>(), 3600.0);
  EXPECT_EQ(st["counts"], Json::parse(R"({"WAITING": 1, "SUCCEEDED": 2})"));
  EXPECT_EQ(Keys(st["counts"]), (std::vector<std::string>{"WAITING", "SUCCEEDED"}));
  // minimize: 0.3 (a map metric's default) beats 0.7.
  ASSERT_TRUE(st["best"].is_object()) << st.dump();
  EXPECT_EQ(Keys(st["best"]), (std::vector<std::string>{"trial_id", "sequence_id", "metric"}));
  EXPECT_EQ(st["best"]["trial_id"], b->trial_id);
  EXPECT_EQ(st["best"]["sequence_id"], b->sequence_id);
  EXPECT_EQ(st["best"]["metric"].get<double>(), 0.3);
  EXPECT_EQ(st["optimize_mode"], "minimize");
  EXPECT_TRUE(st["pareto_front"].is_null()) << "the tuner names no objectives";
  EXPECT_TRUE(st["pareto_front_size"].is_null());
  EXPECT_TRUE(st["objectives"].is_null());
  EXPECT_TRUE(st["constraints"].is_null());
  const Endpoints& ep = server_->bound();
  EXPECT_EQ(st["endpoints"], Json({{"control", ep.control},
                                   {"jobs", ep.jobs},
                                   {"results", ep.results},
                                   {"events", ep.events}}));
  EXPECT_EQ(Keys(st["endpoints"]),
            (std::vector<std::string>{"control", "jobs", "results", "events"}));
}

TEST_F(ControlTest, StatusWithoutSucceededTrialsHasNoBestAndMaximizesByDefault) {
  StartServer(/*configure=*/true, /*concurrency=*/1);
  Json st = Ok(p::GetStatus{});
  EXPECT_TRUE(st["best"].is_null());
  EXPECT_EQ(st["optimize_mode"], "maximize");
  EXPECT_EQ(st["status"], "RUNNING");
  EXPECT_EQ(st["counts"], Json::object());
  EXPECT_EQ(st["max_trials"], 0);
}

TEST_F(ControlTest, GetTrialReportsEveryFieldAndUnknownIsNotFound) {
  const double wall_before = WallNow();
  StartServer(/*configure=*/true, /*concurrency=*/1);
  Hello(1);
  auto a = NextJob();
  ASSERT_TRUE(a);
  Started(*a);
  Metric(*a, p::MetricType::kPeriodical, 0, "0.25");
  Metric(*a, p::MetricType::kPeriodical, 1, "0.5");
  Metric(*a, p::MetricType::kFinal, 2, "{\"default\": 0.75, \"loss\": 0.1}");
  Ended(*a, p::TrialStatus::kSucceeded);
  Json t = TrialAfterSync(a->trial_id);
  const double wall_after = WallNow();
  const std::vector<std::string> keys = {
      "trial_id", "sequence_id", "parameter_id", "source", "status", "attempt",
      "worker_id", "parameters", "final", "intermediate_count", "start_time", "end_time",
      "error"};
  EXPECT_EQ(Keys(t), keys);
  EXPECT_EQ(t["trial_id"], a->trial_id);
  EXPECT_EQ(t["sequence_id"], a->sequence_id);
  EXPECT_EQ(t["parameter_id"], std::get<int64_t>(a->parameter_id));
  EXPECT_EQ(t["source"], "algorithm");
  EXPECT_EQ(t["status"], "SUCCEEDED");
  EXPECT_EQ(t["attempt"], 0);
  EXPECT_EQ(t["worker_id"], "w1");
  EXPECT_EQ(t["parameters"], Json::parse(p::PackedToJson(a->parameters)));
  EXPECT_EQ(t["final"], Json::parse(R"({"default": 0.75, "loss": 0.1})"));
  EXPECT_EQ(t["intermediate_count"], 2);
  ASSERT_TRUE(t["start_time"].is_number_float());
  ASSERT_TRUE(t["end_time"].is_number_float());
  EXPECT_GE(t["start_time"].get<double>(), wall_before - 0.01);
  EXPECT_LE(t["start_time"].get<double>(), t["end_time"].get<double>());
  EXPECT_LE(t["end_time"].get<double>(), wall_after + 0.01);
  EXPECT_EQ(t["error"], "");

  // A queued customized trial: no start, no end, no final.
  Json added = Ok(p::AddCustomizedTrialJob{p::EmptyMap()});
  const std::string queued = added["trial_id"];
  Json w = Ok(p::GetTrial{queued});
  EXPECT_EQ(w["status"], "WAITING");
  EXPECT_EQ(w["source"], "customized");
  EXPECT_EQ(w["parameters"], Json::object());
  EXPECT_TRUE(w["final"].is_null());
  EXPECT_TRUE(w["start_time"].is_null());
  EXPECT_TRUE(w["end_time"].is_null());
  EXPECT_EQ(w["intermediate_count"], 0);

  ExpectError(p::GetTrial{"T99999"}, "not_found", "T99999");
  Reply r = RequestRaw({{"v", 1}, {"type", "GT"}, {"id", 900}, {"body", Json::object()}});
  EXPECT_EQ(r.code, "missing_field");
  EXPECT_NE(r.message.find("body.trial_id"), std::string::npos) << r.message;
}

TEST_F(ControlTest, ListTrialsFiltersPagesAndCountsBeforePaging) {
  StartServer(/*configure=*/true, /*concurrency=*/1);
  Hello(1);
  std::vector<std::string> succeeded;
  for (int i = 0; i < 3; ++i) {
    auto job = NextJob();
    ASSERT_TRUE(job);
    Started(*job);
    Metric(*job, p::MetricType::kFinal, 0, std::to_string(i));
    Ended(*job, i == 1 ? p::TrialStatus::kFailed : p::TrialStatus::kSucceeded);
    if (i != 1) succeeded.push_back(job->trial_id);
  }
  auto fourth = NextJob();  // offered: WAITING
  ASSERT_TRUE(fourth);
  Sync();

  Json all = Ok(p::ListTrials{});
  EXPECT_EQ(Keys(all), (std::vector<std::string>{"total", "trials"}));
  EXPECT_EQ(all["total"], 4);
  ASSERT_EQ(all["trials"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(all["trials"][i]["sequence_id"], i);
  EXPECT_EQ(all["trials"][1]["status"], "FAILED");
  EXPECT_EQ(all["trials"][3]["status"], "WAITING");

  Json ok = Ok(p::ListTrials{std::string("SUCCEEDED"), 0, 0});
  EXPECT_EQ(ok["total"], 2);
  ASSERT_EQ(ok["trials"].size(), 2u);
  EXPECT_EQ(ok["trials"][0]["trial_id"], succeeded[0]);
  EXPECT_EQ(ok["trials"][1]["trial_id"], succeeded[1]);

  Json page = Ok(p::ListTrials{std::nullopt, 1, 2});
  EXPECT_EQ(page["total"], 4) << "total counts matches before paging";
  ASSERT_EQ(page["trials"].size(), 2u);
  EXPECT_EQ(page["trials"][0]["sequence_id"], 1);
  EXPECT_EQ(page["trials"][1]["sequence_id"], 2);

  Json past = Ok(p::ListTrials{std::string("SUCCEEDED"), 5, 1});
  EXPECT_EQ(past["total"], 2);
  EXPECT_TRUE(past["trials"].empty());

  Json none = Ok(p::ListTrials{std::string("EARLY_STOPPED"), 0, 0});
  EXPECT_EQ(none["total"], 0);

  Reply r = RequestRaw({{"v", 1}, {"type", "LT"}, {"id", 901},
                        {"body", {{"status", "DONE"}, {"offset", 0}, {"limit", 0}}}});
  EXPECT_EQ(r.code, "bad_field");
  EXPECT_NE(r.message.find("body.status"), std::string::npos) << r.message;
  r = RequestRaw({{"v", 1}, {"type", "LT"}, {"id", 902},
                  {"body", {{"status", nullptr}, {"offset", -1}, {"limit", 0}}}});
  EXPECT_EQ(r.code, "bad_field");
  EXPECT_NE(r.message.find("body.offset"), std::string::npos) << r.message;
}

TEST_F(ControlTest, StatisticsCountEveryNonZeroStatus) {
  StartServer(/*configure=*/true, /*concurrency=*/2);
  Hello(2);
  auto a = NextJob();
  auto b = NextJob();
  ASSERT_TRUE(a && b);
  Started(*a);
  Started(*b);
  Ended(*b, p::TrialStatus::kFailed, "exit code 1");
  auto c = NextJob();  // b's slot goes to the tuner's next trial: offered
  ASSERT_TRUE(c);
  Ok(p::AddCustomizedTrialJob{p::EmptyMap()});  // no slot left: queued
  Json js = Ok(p::GetStatistics{});
  EXPECT_EQ(Keys(js), std::vector<std::string>{"counts"});
  Json counts = js["counts"];
  EXPECT_EQ(counts["RUNNING"], 1);
  EXPECT_EQ(counts["FAILED"], 1);
  EXPECT_EQ(counts["WAITING"], 2);
  EXPECT_EQ(Keys(counts), (std::vector<std::string>{"WAITING", "RUNNING", "FAILED"}));
  EXPECT_EQ(Ok(p::GetStatus{})["counts"], counts);
  EXPECT_EQ(Ok(p::GetTrial{b->trial_id})["error"], "exit code 1");
}

TEST_F(ControlTest, MetricsAreOrderedByTrialThenSequence) {
  StartServer(/*configure=*/true, /*concurrency=*/1);
  Hello(1);
  auto a = NextJob();
  ASSERT_TRUE(a);
  Started(*a);
  Metric(*a, p::MetricType::kPeriodical, 1, "0.2");  // out of order on purpose
  Metric(*a, p::MetricType::kPeriodical, 0, "0.1");
  Metric(*a, p::MetricType::kFinal, 2, "{\"default\": 0.3, \"acc\": 1}");
  Ended(*a, p::TrialStatus::kSucceeded);
  auto b = NextJob();
  ASSERT_TRUE(b);
  Started(*b);
  Metric(*b, p::MetricType::kPeriodical, 0, "5");
  Ended(*b, p::TrialStatus::kSucceeded);  // no FINAL: its last PERIODICAL is final
  Sync();

  Json one = Ok(p::GetMetrics{a->trial_id});
  EXPECT_EQ(Keys(one), std::vector<std::string>{"metrics"});
  Json want = Json::parse(R"([
    {"trial_id": "A", "type": "PERIODICAL", "sequence": 0, "value": 0.1},
    {"trial_id": "A", "type": "PERIODICAL", "sequence": 1, "value": 0.2},
    {"trial_id": "A", "type": "FINAL", "sequence": 2, "value": {"default": 0.3, "acc": 1}}])");
  for (auto& m : want) m["trial_id"] = a->trial_id;
  EXPECT_EQ(one["metrics"], want);
  EXPECT_EQ(Keys(one["metrics"][0]),
            (std::vector<std::string>{"trial_id", "type", "sequence", "value"}));

  Json all = Ok(p::GetMetrics{std::nullopt});
  Json want_all = want;
  want_all.push_back({{"trial_id", b->trial_id}, {"type", "PERIODICAL"}, {"sequence", 0},
                      {"value", 5}});
  EXPECT_EQ(all["metrics"], want_all) << "b's synthesized final is no record of its own";
  EXPECT_EQ(Ok(p::GetTrial{b->trial_id})["final"], 5);

  ExpectError(p::GetMetrics{std::string("nope")}, "not_found", "nope");
  Reply r = RequestRaw({{"v", 1}, {"type", "MT"}, {"id", 903}, {"body", {{"trial_id", 7}}}});
  EXPECT_EQ(r.code, "bad_field");
  EXPECT_NE(r.message.find("body.trial_id"), std::string::npos) << r.message;
}

TEST_F(ControlTest, ExportHasSucceededTrialsWithFinalResultsOnly) {
  StartServer(/*configure=*/true, /*concurrency=*/1);
  Hello(1);
  auto a = NextJob();
  ASSERT_TRUE(a);
  Started(*a);
  Metric(*a, p::MetricType::kFinal, 0, "{\"default\": 1.5, \"loss\": 2}");
  Ended(*a, p::TrialStatus::kSucceeded);
  auto b = NextJob();
  ASSERT_TRUE(b);
  Started(*b);
  Metric(*b, p::MetricType::kFinal, 0, "9");
  Ended(*b, p::TrialStatus::kFailed);
  auto c = NextJob();
  ASSERT_TRUE(c);
  Started(*c);
  Ended(*c, p::TrialStatus::kSucceeded);  // no result at all
  Sync();

  Json ex = Ok(p::ExportData{});
  EXPECT_EQ(Keys(ex), std::vector<std::string>{"records"});
  ASSERT_EQ(ex["records"].size(), 1u) << ex.dump();
  const Json& r = ex["records"][0];
  EXPECT_EQ(Keys(r), (std::vector<std::string>{"trial_id", "parameters", "value"}));
  EXPECT_EQ(r["trial_id"], a->trial_id);
  EXPECT_EQ(r["parameters"], Json::parse(p::PackedToJson(a->parameters)));
  EXPECT_EQ(r["value"], Json::parse(R"({"default": 1.5, "loss": 2})"));
}

TEST_F(ControlTest, UpdateLimitsAppliesAtOnceAndAnswersTheNewStatus) {
  StartServer(/*configure=*/true, /*concurrency=*/1);
  Hello(3);
  auto a = NextJob();
  ASSERT_TRUE(a);
  Json st = Ok(p::UpdateLimits{3, 10, 120.5});
  EXPECT_EQ(st["concurrency"], 3);
  EXPECT_EQ(st["max_trials"], 10);
  EXPECT_EQ(st["max_duration_s"].get<double>(), 120.5);
  EXPECT_EQ(st["experiment_id"], "ctl");
  // A raised concurrency offers two more trials at once.
  auto b = NextJob();
  auto c = NextJob();
  ASSERT_TRUE(b && c);
  EXPECT_NE(b->trial_id, c->trial_id);
  // nil keeps a value; 0 makes a budget unlimited.
  st = Ok(p::UpdateLimits{std::nullopt, 0, std::nullopt});
  EXPECT_EQ(st["concurrency"], 3);
  EXPECT_EQ(st["max_trials"], 0);
  EXPECT_EQ(st["max_duration_s"].get<double>(), 120.5);
  EXPECT_EQ(Ok(p::GetStatus{})["max_trials"], 0);

  Reply r = RequestRaw(
      {{"v", 1}, {"type", "UX"}, {"id", 904},
       {"body", {{"concurrency", 0}, {"max_trials", nullptr}, {"max_duration_s", nullptr}}}});
  EXPECT_EQ(r.code, "bad_field");
  EXPECT_NE(r.message.find("body.concurrency"), std::string::npos) << r.message;
  r = RequestRaw(
      {{"v", 1}, {"type", "UX"}, {"id", 905},
       {"body", {{"concurrency", nullptr}, {"max_trials", nullptr}, {"max_duration_s", -1.0}}}});
  EXPECT_EQ(r.code, "bad_field");
  EXPECT_NE(r.message.find("body.max_duration_s"), std::string::npos) << r.message;
  EXPECT_EQ(Ok(p::GetStatus{})["concurrency"], 3) << "a refused update changes nothing";
}

TEST_F(ControlTest, UpdateLimitsLoweringTheBudgetEndsTheExperimentAndDoneIsFinal) {
  StartServer(/*configure=*/true, /*concurrency=*/1);
  Hello(1);
  auto a = NextJob();
  ASSERT_TRUE(a);
  Started(*a);
  ASSERT_EQ(TrialAfterSync(a->trial_id)["status"], "RUNNING");
  Json st = Ok(p::UpdateLimits{std::nullopt, 1, std::nullopt});
  EXPECT_EQ(st["status"], "NO_MORE_TRIAL");
  Ended(*a, p::TrialStatus::kSucceeded);
  ASSERT_EQ(TrialAfterSync(a->trial_id)["status"], "SUCCEEDED");
  EXPECT_EQ(StatusEventually("DONE"), "DONE");
  ExpectError(p::UpdateLimits{std::nullopt, 5, std::nullopt}, "bad_state", "DONE");
  EXPECT_EQ(Ok(p::GetStatus{})["max_trials"], 1);
}

TEST_F(ControlTest, KillTrialStopsRunningAndWaitingTrials) {
  StartServer(/*configure=*/true, /*concurrency=*/1);
  Hello(1);
  auto a = NextJob();
  ASSERT_TRUE(a);
  Started(*a);
  ASSERT_EQ(TrialAfterSync(a->trial_id)["status"], "RUNNING");

  // Running: KI to its worker; it ends when the worker answers.
  Json data = Ok(p::KillTrial{a->trial_id});
  EXPECT_EQ(data, Json::object());
  auto ki = NextSignal<p::KillTrialJob>();
  ASSERT_TRUE(ki) << "no KI on the worker's topic";
  EXPECT_EQ(ki->trial_id, a->trial_id);
  EXPECT_EQ(ki->attempt, a->attempt);
  EXPECT_EQ(ki->reason, "user");
  Ended(*a, p::TrialStatus::kUserCanceled, "killed by signal 15");
  Json t = TrialAfterSync(a->trial_id);
  EXPECT_EQ(t["status"], "USER_CANCELED");
  EXPECT_EQ(t["error"], "killed by signal 15");
  ExpectError(p::KillTrial{a->trial_id}, "bad_state", "already ended");

  // Waiting: a queued customized trial ends at once.
  auto b = NextJob();  // the tuner's next trial takes the slot
  ASSERT_TRUE(b);
  const std::string queued = Ok(p::AddCustomizedTrialJob{p::EmptyMap()})["trial_id"];
  ASSERT_EQ(Ok(p::GetTrial{queued})["status"], "WAITING");
  Ok(p::KillTrial{queued});
  t = Ok(p::GetTrial{queued});
  EXPECT_EQ(t["status"], "USER_CANCELED");
  EXPECT_TRUE(t["end_time"].is_number_float());
  EXPECT_TRUE(t["start_time"].is_null());

  ExpectError(p::KillTrial{"T99999"}, "not_found", "T99999");
  Reply r = RequestRaw({{"v", 1}, {"type", "KT"}, {"id", 906}, {"body", {{"trial_id", 3}}}});
  EXPECT_EQ(r.code, "bad_field");
  EXPECT_NE(r.message.find("body.trial_id"), std::string::npos) << r.message;
}

TEST(ControlRequestsTest, MutatingRequestsAreTheOnesAViewedExperimentRefuses) {
  EXPECT_TRUE(IsMutatingRequest(p::UpdateLimits{}));
  EXPECT_TRUE(IsMutatingRequest(p::KillTrial{}));
  EXPECT_TRUE(IsMutatingRequest(p::AddCustomizedTrialJob{}));
  EXPECT_TRUE(IsMutatingRequest(p::UpdateSearchSpace{}));
  EXPECT_TRUE(IsMutatingRequest(p::ImportData{}));
  EXPECT_TRUE(IsMutatingRequest(p::RequestTrialJobs{}));
  EXPECT_TRUE(IsMutatingRequest(p::ReportMetricData{}));
  EXPECT_TRUE(IsMutatingRequest(p::TrialEnd{}));
  for (const p::Body& query : std::vector<p::Body>{
           p::GetStatus{}, p::ListTrials{}, p::GetTrial{}, p::GetStatistics{}, p::GetMetrics{},
           p::ExportData{}, p::Ping{}, p::Terminate{}, p::Initialize{}}) {
    EXPECT_FALSE(IsMutatingRequest(query)) << p::TypeCode(query);
  }
}

TEST(ControlRequestsTest, OptimizeModeComesFromTheTunersClassArguments) {
  auto mode = [](const std::string& json) {
    p::Packed args;
    EXPECT_OK(p::JsonToPacked(json, &args));
    return OptimizeModeOf(args);
  };
  EXPECT_EQ(mode(R"({"optimize_mode": "minimize", "seed": 1})"), "minimize");
  EXPECT_EQ(mode(R"({"optimize_mode": "maximize"})"), "maximize");
  EXPECT_EQ(mode(R"({})"), "maximize");
  EXPECT_EQ(mode(R"({"optimize_mode": "sideways"})"), "maximize");
  EXPECT_EQ(mode(R"({"optimize_mode": 3})"), "maximize");
  EXPECT_EQ(OptimizeModeOf(p::Packed()), "maximize");
}

}  // namespace
}  // namespace tunehost::host
