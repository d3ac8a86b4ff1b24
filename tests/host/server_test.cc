// Server tests: a real Server (sockets, strands, plugins loaded through the
// SDK) on loopback; the test plays a worker with real ZeroMQ sockets.
#include "tunehost/host/server.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "test_util.h"
#include "tunehost/host/plugin.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host {
namespace {

namespace p = tunehost::protocol;
namespace fs = std::filesystem;
using std::chrono::milliseconds;

std::vector<std::string> ReadLines(const fs::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(registry_.LoadDirectory(TH_RECORDING_PLUGIN_DIR), 1u);
    dir_ = fs::temp_directory_path() / ("tunehost-server-test-" + std::to_string(getpid()) +
                                        "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    log_ = dir_ / "calls.log";
  }

  void TearDown() override {
    if (server_) server_->Stop();
    if (loop_.joinable()) loop_.join();
    fs::remove_all(dir_);
  }

  // Starts a server whose tuner (and optionally assessor) record their calls.
  void StartServer(uint32_t concurrency, uint64_t max_trials, bool assessor,
                   int generate_sleep_ms = 0) {
    ServerOptions o;
    o.endpoints = {"tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                   "tcp://127.0.0.1:*"};
    o.heartbeat_interval = heartbeat_interval_;
    o.ack_timeout = milliseconds(2000);
    o.exit_when_finished = true;
    server_ = std::make_unique<Server>(o, &registry_);
    ASSERT_OK(server_->Bind());
    p::ExperimentSpec spec;
    spec.id = "srv";
    spec.tuner.name = "recording";
    std::string args = "{\"log\": \"" + log_.string() + "\", \"generate_sleep_ms\": " +
                       std::to_string(generate_sleep_ms) + "}";
    ASSERT_OK(p::JsonToPacked(args, &spec.tuner.args));
    if (assessor) {
      spec.assessor = p::PluginSpec{"recording-assessor", spec.tuner.args, std::nullopt, std::nullopt};
    }
    spec.concurrency = concurrency;
    spec.max_trials = max_trials;
    ASSERT_OK(server_->Configure(spec, p::EmptyMap()));
    ConnectWorker();
    loop_ = std::thread([this] { run_status_ = server_->Run(); });
  }

  void ConnectWorker() {
    const Endpoints& ep = server_->bound();
    jobs_.set(zmq::sockopt::rcvhwm, 1);
    jobs_.connect(ep.jobs);
    results_.set(zmq::sockopt::linger, 0);
    results_.connect(ep.results);
    events_.set(zmq::sockopt::subscribe, "worker.w1.");
    events_.connect(ep.events);
  }

  void Send(p::Body body) {
    std::string bytes = p::Encode(++next_id_, std::move(body));
    results_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }

  void Hello(uint32_t slots, std::optional<std::string> acks = std::nullopt) {
    p::WorkerHello h;
    h.worker_id = "w1";
    h.slots = slots;
    h.language = "c++";
    h.resources.extra = p::EmptyMap();
    h.acks = std::move(acks);
    Send(h);
  }

  // Sends `n` PERIODICAL results of a running trial in one burst and reads
  // MAs until every sequence is acknowledged; how many times each was.
  std::vector<int> BurstAcks(const p::NewTrialJob& job, uint64_t n, size_t* acks,
                             bool* spans_seen) {
    for (uint64_t seq = 0; seq < n; ++seq) {
      Metric(job, p::MetricType::kPeriodical, seq, 0.5);
    }
    std::vector<int> times(n, 0);
    uint64_t covered = 0;
    *acks = 0;
    *spans_seen = false;
    while (covered < n) {
      auto ack = NextSignal<p::MetricAck>();
      if (!ack) break;
      ++*acks;
      EXPECT_EQ(ack->trial_id, job.trial_id);
      if (ack->span) *spans_seen = true;
      for (uint64_t seq = ack->sequence; seq < n && ack->Covers(seq); ++seq) {
        if (times[seq]++ == 0) ++covered;
      }
    }
    return times;
  }

  std::optional<p::NewTrialJob> NextJob(milliseconds timeout = milliseconds(5000)) {
    zmq::pollitem_t item{jobs_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
    zmq::message_t msg;
    if (!jobs_.recv(msg)) return std::nullopt;
    p::Message m;
    EXPECT_OK(p::Decode(msg.to_string_view(), &m));
    return std::get<p::NewTrialJob>(m.body);
  }

  // Next addressed signal of the given type (others are skipped).
  template <class T>
  std::optional<T> NextSignal(milliseconds timeout = milliseconds(5000)) {
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

  void Metric(const p::NewTrialJob& job, p::MetricType type, uint64_t seq, double v) {
    p::ReportMetricData m;
    m.trial_id = job.trial_id;
    m.attempt = job.attempt;
    m.parameter_id = job.parameter_id;
    m.type = type;
    m.sequence = seq;
    m.value.raw = p::PackDouble(v);
    m.value.scalar = v;
    m.worker_id = "w1";
    Send(m);
  }

  PluginRegistry registry_;
  std::unique_ptr<Server> server_;
  milliseconds heartbeat_interval_{100};
  std::thread loop_;
  Status run_status_;
  fs::path dir_, log_;
  zmq::context_t ctx_{1};
  zmq::socket_t jobs_{ctx_, zmq::socket_type::pull};
  zmq::socket_t results_{ctx_, zmq::socket_type::push};
  zmq::socket_t events_{ctx_, zmq::socket_type::sub};
  uint64_t next_id_ = 0;
};

TEST_F(ServerTest, TunerSeesEachFinalBeforeItsTrialEndExactlyOnce) {
  StartServer(/*concurrency=*/2, /*max_trials=*/6, /*assessor=*/false);
  Hello(2);
  int done = 0;
  while (done < 6) {
    auto job = NextJob();
    ASSERT_TRUE(job) << "no job after " << done << " trials";
    Send(p::TrialStarted{"w1", job->trial_id, job->attempt});
    Metric(*job, p::MetricType::kFinal, 0, 0.5 + done);
    Send(p::TrialEnd{job->trial_id, job->attempt, p::TrialStatus::kSucceeded, "", "w1"});
    ++done;
  }
  loop_.join();
  ASSERT_OK(run_status_);
  ExperimentSummary s = server_->Summary();
  EXPECT_EQ(s.status, ExperimentStatus::kDone);
  EXPECT_EQ(s.trials.size(), 6u);

  std::map<std::string, int> result_at, end_at, ends;
  auto lines = ReadLines(log_);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::istringstream in(lines[i]);
    std::string what, id;
    in >> what >> id;
    if (what == "result") result_at[id] = static_cast<int>(i);
    if (what == "end") {
      end_at[id] = static_cast<int>(i);
      ++ends[id];
    }
  }
  ASSERT_EQ(ends.size(), 6u);
  for (const auto& [id, n] : ends) {
    EXPECT_EQ(n, 1) << "trial_end for parameter id " << id;
    ASSERT_TRUE(result_at.count(id)) << "no result for parameter id " << id;
    EXPECT_LT(result_at[id], end_at[id]) << "parameter id " << id;
  }
}

TEST_F(ServerTest, SlowTunerNeverDelaysAssessment) {
  // This test's worker sends no heartbeats while the tuner sleeps 3 s, so its
  // liveness (3 intervals) must outlast the sleep.
  heartbeat_interval_ = milliseconds(2000);
  StartServer(/*concurrency=*/2, /*max_trials=*/3, /*assessor=*/true,
              /*generate_sleep_ms=*/3000);
  Hello(2);
  auto a = NextJob();
  auto b = NextJob();
  ASSERT_TRUE(a && b);
  Send(p::TrialStarted{"w1", a->trial_id, a->attempt});
  Send(p::TrialStarted{"w1", b->trial_id, b->attempt});
  // Ending b makes the host ask the tuner again, and the tuner sleeps.
  Send(p::TrialEnd{b->trial_id, b->attempt, p::TrialStatus::kSucceeded, "", "w1"});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto has = [&](const std::string& text) {
    for (const auto& l : ReadLines(log_)) {
      if (l == text) return true;
    }
    return false;
  };
  while (!has("generate_sleep") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));  // polling a file written by the plugin
  }
  ASSERT_TRUE(has("generate_sleep"));
  Metric(*a, p::MetricType::kPeriodical, 0, -1.0);  // the assessor says Bad
  auto kill = NextSignal<p::KillTrialJob>();
  ASSERT_TRUE(kill) << "no KillTrialJob while the tuner was busy";
  EXPECT_EQ(kill->trial_id, a->trial_id);
  EXPECT_EQ(kill->reason, "assessor");
  // The tuner was still inside its slow generate when the kill came.
  EXPECT_FALSE(has("generate 2"));
  Send(p::TrialEnd{a->trial_id, a->attempt, p::TrialStatus::kUserCanceled, "", "w1"});
  auto c = NextJob(milliseconds(10000));
  ASSERT_TRUE(c);
  Send(p::TrialStarted{"w1", c->trial_id, c->attempt});
  Send(p::TrialEnd{c->trial_id, c->attempt, p::TrialStatus::kSucceeded, "", "w1"});
  loop_.join();
  ExperimentSummary s = server_->Summary();
  ASSERT_EQ(s.trials.size(), 3u);
  std::map<std::string, p::TrialStatus> status;
  for (const auto& t : s.trials) status[t.trial_id] = t.status;
  EXPECT_EQ(status[a->trial_id], p::TrialStatus::kEarlyStopped);
}

// Acknowledgement spans (wire-format.md §5.2): a worker whose WH says
// acks "spans" gets consecutive results acknowledged together, each exactly
// once; a worker that does not say so gets one MA per result.
TEST_F(ServerTest, AckSpansCoverEveryResultOnceForWorkersThatTakeThem) {
  // The worker sends no heartbeats during its burst: liveness (3 intervals)
  // must outlast it on a loaded machine.
  heartbeat_interval_ = milliseconds(2000);
  StartServer(/*concurrency=*/1, /*max_trials=*/1, /*assessor=*/false);
  Hello(1, p::WorkerHello::kAckSpans);
  auto job = NextJob();
  ASSERT_TRUE(job);
  Send(p::TrialStarted{"w1", job->trial_id, job->attempt, job->lease});
  constexpr uint64_t kResults = 800;  // under the events queues even unmerged
  size_t acks = 0;
  bool spans = false;
  std::vector<int> times = BurstAcks(*job, kResults, &acks, &spans);
  for (uint64_t seq = 0; seq < kResults; ++seq) EXPECT_EQ(times[seq], 1) << "sequence " << seq;
  // The host reads a burst many results per loop turn.
  EXPECT_TRUE(spans);
  EXPECT_LT(acks, kResults);
}

TEST_F(ServerTest, WorkersWithoutAckSpansGetOneAckPerResult) {
  // The worker sends no heartbeats during its burst: liveness (3 intervals)
  // must outlast it on a loaded machine.
  heartbeat_interval_ = milliseconds(2000);
  StartServer(/*concurrency=*/1, /*max_trials=*/1, /*assessor=*/false);
  Hello(1, "something else");
  auto job = NextJob();
  ASSERT_TRUE(job);
  Send(p::TrialStarted{"w1", job->trial_id, job->attempt, job->lease});
  constexpr uint64_t kResults = 500;
  size_t acks = 0;
  bool spans = false;
  std::vector<int> times = BurstAcks(*job, kResults, &acks, &spans);
  for (uint64_t seq = 0; seq < kResults; ++seq) EXPECT_EQ(times[seq], 1) << "sequence " << seq;
  EXPECT_FALSE(spans);
  EXPECT_EQ(acks, kResults);
}

// A metric's event is built only while some subscribed topic takes
// "event.ME" (wire-format.md §6); the host counts such topics as the XPUB
// reports them. One subscriber leaving must not silence another.
TEST_F(ServerTest, MetricEventsReachEverySubscriberWhoseTopicTakesThem) {
  StartServer(/*concurrency=*/1, /*max_trials=*/1, /*assessor=*/false);
  Hello(1);
  auto job = NextJob();
  ASSERT_TRUE(job);
  Send(p::TrialStarted{"w1", job->trial_id, job->attempt, job->lease});
  zmq::socket_t exact(ctx_, zmq::socket_type::sub), prefix(ctx_, zmq::socket_type::sub);
  exact.set(zmq::sockopt::subscribe, "event.ME");
  prefix.set(zmq::sockopt::subscribe, "event.M");
  exact.connect(server_->bound().events);
  prefix.connect(server_->bound().events);
  uint64_t seq = 0;
  // Sends results until `sub` gets one's event (subscriptions reach the
  // host a moment after the connect).
  auto hears = [&](zmq::socket_t& sub) {
    for (int i = 0; i < 100; ++i) {
      Metric(*job, p::MetricType::kPeriodical, seq++, 0.5);
      zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, milliseconds(50)) == 0) continue;
      std::vector<zmq::message_t> frames;
      while (zmq::recv_multipart(sub, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
        if (frames.at(0).to_string() == "event.ME") return true;
        frames.clear();
      }
    }
    return false;
  };
  // Waits until the host is idle (no more acknowledgements come), then
  // empties `sub`: what it hears next was published after.
  auto settle = [&](zmq::socket_t& sub) {
    while (NextSignal<p::MetricAck>(milliseconds(200))) {
    }
    zmq::message_t msg;
    while (sub.recv(msg, zmq::recv_flags::dontwait)) {
    }
  };
  EXPECT_TRUE(hears(exact));
  EXPECT_TRUE(hears(prefix));
  exact.set(zmq::sockopt::unsubscribe, "event.ME");
  settle(prefix);
  EXPECT_TRUE(hears(prefix));
  prefix.set(zmq::sockopt::unsubscribe, "event.M");
  prefix.set(zmq::sockopt::subscribe, "event.");
  settle(prefix);
  EXPECT_TRUE(hears(prefix));
}

TEST_F(ServerTest, GarbageOnResultsSocketIsDroppedAndWorkGoesOn) {
  StartServer(/*concurrency=*/1, /*max_trials=*/1, /*assessor=*/false);
  results_.send(zmq::str_buffer("\xc1 not msgpack"), zmq::send_flags::none);
  // Over the results socket's limit, within twice it: read and dropped
  // (beyond twice it libzmq drops the connection, test_hostile).
  std::string huge(p::kDefaultMaxResultBytes * 3 / 2, 'x');
  results_.send(zmq::buffer(huge), zmq::send_flags::none);
  results_.send(zmq::str_buffer("\x84\xa1v\x02\xa4type\xa2HB\xa2id\x01\xa4""body\x80"),
                zmq::send_flags::none);
  Hello(1);
  auto job = NextJob();
  ASSERT_TRUE(job);
  Send(p::TrialStarted{"w1", job->trial_id, job->attempt});
  Metric(*job, p::MetricType::kFinal, 0, 2.0);
  auto ack = NextSignal<p::MetricAck>();
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->trial_id, job->trial_id);
  Send(p::TrialEnd{job->trial_id, job->attempt, p::TrialStatus::kSucceeded, "", "w1"});
  loop_.join();
  ExperimentSummary s = server_->Summary();
  ASSERT_EQ(s.trials.size(), 1u);
  ASSERT_TRUE(s.trials[0].final_metric);
  EXPECT_DOUBLE_EQ(*s.trials[0].final_metric, 2.0);
}

}  // namespace
}  // namespace tunehost::host
