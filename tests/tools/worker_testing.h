// The fixture of tunehost-worker's tests (worker_test.cc,
// worker_results_test.cc): the worker as a real process, the host played with
// real sockets on ephemeral ports: PUSH jobs, PULL results, XPUB events (a
// PUB that also shows the worker's subscriptions, so a test knows when
// signals can reach it).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <thread>
#include <fstream>
#include <map>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "test_util.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::protocol::worker_testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout{15000};

inline void PauseBriefly() {
  const timespec pause{0, 10 * 1000 * 1000};
  ::nanosleep(&pause, nullptr);
}

class FakeHost {
 public:
  FakeHost()
      : context_(1),
        jobs_(context_, zmq::socket_type::push),
        results_(context_, zmq::socket_type::pull),
        events_(context_, zmq::socket_type::xpub) {
    for (zmq::socket_t* s : {&jobs_, &results_, &events_}) {
      s->set(zmq::sockopt::linger, 0);
      s->bind("tcp://127.0.0.1:*");
    }
    // A dead worker must fail the test, not hang it.
    jobs_.set(zmq::sockopt::sndtimeo, 10000);
  }

  std::string jobs_endpoint() const { return jobs_.get(zmq::sockopt::last_endpoint); }
  std::string results_endpoint() const { return results_.get(zmq::sockopt::last_endpoint); }
  std::string events_endpoint() const { return events_.get(zmq::sockopt::last_endpoint); }

  // The next message on the results socket, decoded, or nothing by the deadline.
  std::optional<Message> Next(milliseconds timeout) {
    std::vector<zmq::pollitem_t> items = {{results_.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, timeout);
    if ((items[0].revents & ZMQ_POLLIN) == 0) return std::nullopt;
    zmq::message_t frame;
    if (!results_.recv(frame, zmq::recv_flags::dontwait)) return std::nullopt;
    Message m;
    const Status s = Decode(frame.to_string_view(), &m);
    EXPECT_TRUE(s.ok()) << "the worker sent an undecodable message: " << s.ToString();
    if (!s.ok()) return std::nullopt;
    log_.push_back(m);
    taken_.push_back(false);
    return m;
  }

  // The first T matching `pred` that no earlier Await returned and Forget()
  // did not drop, reading more results until the deadline if needed.
  template <class T, class Pred>
  std::optional<T> Await(Pred pred, milliseconds timeout = kTimeout) {
    const auto deadline = Clock::now() + timeout;
    for (size_t i = 0;; ++i) {
      while (i == log_.size()) {
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
        if (left <= milliseconds{0}) return std::nullopt;
        Next(left);
      }
      if (taken_[i]) continue;
      if (const T* body = std::get_if<T>(&log_[i].body); body != nullptr && pred(*body)) {
        taken_[i] = true;
        return *body;
      }
    }
  }
  template <class T>
  std::optional<T> Await(milliseconds timeout = kTimeout) {
    return Await<T>([](const T&) { return true; }, timeout);
  }

  // Waits until the worker's SUB has subscribed to every topic in `topics`.
  bool AwaitSubscriptions(std::set<std::string> topics, milliseconds timeout = kTimeout) {
    const auto deadline = Clock::now() + timeout;
    while (!topics.empty() && Clock::now() < deadline) {
      std::vector<zmq::pollitem_t> items = {{events_.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, milliseconds{50});
      zmq::message_t frame;
      while (events_.recv(frame, zmq::recv_flags::dontwait)) {
        if (frame.size() > 0 && frame.data<char>()[0] == 1)
          topics.erase(frame.to_string().substr(1));
      }
    }
    return topics.empty();
  }

  void Offer(const NewTrialJob& job) { SendRawJob(Encode(next_id_++, job)); }
  void SendRawJob(const std::string& bytes) {
    EXPECT_TRUE(jobs_.send(zmq::buffer(bytes)).has_value()) << "no worker took the offer";
  }

  void Publish(const std::string& topic, Body body) {
    PublishRaw(topic, Encode(next_id_++, std::move(body)));
  }
  void PublishRaw(const std::string& topic, const std::string& bytes) {
    events_.send(zmq::buffer(topic), zmq::send_flags::sndmore);
    events_.send(zmq::buffer(bytes));
  }

  // Makes Await ignore everything received so far.
  void Forget() { taken_.assign(log_.size(), true); }

  // Every message received so far, in order.
  const std::vector<Message>& log() const { return log_; }

 private:
  zmq::context_t context_;
  zmq::socket_t jobs_;
  zmq::socket_t results_;
  zmq::socket_t events_;
  uint64_t next_id_ = 1;
  std::vector<Message> log_;
  std::vector<bool> taken_;
};

inline Packed PackParameters() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> p(buffer);
  p.pack_map(4);
  p.pack(std::string("lr"));
  p.pack(0.25);
  p.pack(std::string("layers"));
  p.pack(3);
  p.pack(std::string("name"));
  p.pack(std::string("x y"));
  p.pack(std::string("TRIAL_BUDGET"));
  p.pack(7);
  return Packed(buffer.data(), buffer.size());
}

inline NewTrialJob MakeJob(const std::string& trial_id, uint32_t attempt = 0) {
  NewTrialJob job;
  job.experiment_id = "exp1";
  job.trial_id = trial_id;
  job.sequence_id = 4;
  job.attempt = attempt;
  job.parameter_id = int64_t{5};
  job.parameter_source = ParameterSource::kAlgorithm;
  job.parameters = PackParameters();
  return job;
}

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tunehost-worker-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    workdir_ = dir_ / "work";
  }

  void TearDown() override {
    if (pid_ > 0) {
      // Politely first, so the worker stops its trials' process groups.
      ::kill(pid_, SIGTERM);
      int status = 0;
      if (WaitExit(milliseconds{5000}, &status)) {
        // Also catches sanitizer reports, which change the exit status.
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
      } else {
        ADD_FAILURE() << "the worker did not exit on SIGTERM";
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string WriteScript(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  // A worker whose trial `trial_id` runs `sleep 60`: the trial's pid, or 0.
  pid_t StartTrialThatSleeps(const std::string& trial_id) {
    const fs::path pid_file = dir_ / (trial_id + ".pid");
    StartWorker("echo $$ > " + pid_file.string() + "; exec sleep 60");
    host_.Offer(MakeJob(trial_id));
    if (!AwaitStarted(trial_id)) return 0;
    pid_t trial = 0;
    for (int i = 0; i < 500 && trial == 0; ++i) {
      std::ifstream in(pid_file);
      if (!(in >> trial)) std::this_thread::sleep_for(milliseconds(10));
    }
    return trial;
  }

  void StartWorker(const std::string& command, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {TH_WORKER_BINARY,
                                     "--command",
                                     command,
                                     "--jobs",
                                     host_.jobs_endpoint(),
                                     "--results",
                                     host_.results_endpoint(),
                                     "--events",
                                     host_.events_endpoint(),
                                     "--id",
                                     id_,
                                     "--workdir",
                                     workdir_.string(),
                                     "--cwd",
                                     dir_.string(),
                                     "--heartbeat-ms",
                                     "200",
                                     "--ack-timeout-ms",
                                     "200",
                                     "--kill-grace-ms",
                                     "2000",
                                     "--log-level",
                                     "debug"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    ASSERT_TRUE(host_.AwaitSubscriptions({"worker." + id_ + ".", "worker.*"}));
    hello_ = host_.Await<WorkerHello>();
    ASSERT_TRUE(hello_.has_value());
  }

  bool WaitExit(milliseconds timeout, int* status) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (::waitpid(pid_, status, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      PauseBriefly();
    }
    return false;
  }

  void Ack(const ReportMetricData& me) {
    host_.Publish("worker." + id_ + ".", MetricAck{me.trial_id, me.attempt, me.sequence});
  }

  std::optional<TrialEnd> AwaitEnd(const std::string& trial_id) {
    return host_.Await<TrialEnd>([&](const TrialEnd& e) { return e.trial_id == trial_id; });
  }

  std::optional<TrialStarted> AwaitStarted(const std::string& trial_id) {
    return host_.Await<TrialStarted>([&](const TrialStarted& t) { return t.trial_id == trial_id; });
  }

  std::string TrialDir(const std::string& trial_id, uint32_t attempt) const {
    return (workdir_ / "exp1" / "trials" / (trial_id + "-" + std::to_string(attempt))).string();
  }

  FakeHost host_;
  fs::path dir_;
  fs::path workdir_;
  std::string id_ = "test-worker";
  pid_t pid_ = -1;
  std::optional<WorkerHello> hello_;
};

inline bool HasTrial(const std::vector<RunningTrial>& running, const std::string& trial_id) {
  for (const auto& r : running) {
    if (r.trial_id == trial_id) return true;
  }
  return false;
}

}  // namespace tunehost::protocol::worker_testing
