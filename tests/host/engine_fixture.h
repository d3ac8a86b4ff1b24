// The fixture of the trial engine's unit tests (engine_test.cc and the
// engine_*_test.cc beside it): a recording sink stands in for the sockets and
// plugin strands, and the tests drive time explicitly.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "host/engine_testing.h"
#include "test_util.h"
#include "tunehost/host/engine.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host::engine_testing {

namespace p = tunehost::protocol;
using std::chrono::milliseconds;

class RecordingSink : public EngineSink {
 public:
  bool accept_jobs = true;
  std::vector<p::NewTrialJob> jobs;
  std::vector<std::pair<std::string, p::Body>> to_worker;
  std::vector<p::Body> published;
  std::vector<std::vector<int64_t>> requests;
  std::vector<std::string> plugin_calls;  // "result:<pid>", "end:<pid>:<ok>", "assess:<trial>:<n>", ...
  std::vector<std::string> finished;

  bool SendJob(const p::NewTrialJob& job) override {
    if (!accept_jobs) return false;
    jobs.push_back(job);
    addressed_to.emplace_back();
    return true;
  }
  // Addressed offers land in `jobs` too; addressed_to[i] names the worker
  // jobs[i] went to ("" for the jobs socket).
  std::vector<std::string> addressed_to;
  bool SendJobTo(const std::string& worker, const p::NewTrialJob& job) override {
    if (!accept_jobs) return false;
    jobs.push_back(job);
    addressed_to.push_back(worker);
    return true;
  }
  void SendToWorker(const std::string& w, p::Body b) override { to_worker.emplace_back(w, b); }
  void Publish(p::Body b) override { published.push_back(b); }
  std::set<std::string, std::less<>> unwanted_events;  // type codes WantsEvent refuses
  bool WantsEvent(std::string_view type) const override {
    return unwanted_events.find(type) == unwanted_events.end();
  }
  void RequestParameters(std::vector<int64_t> ids) override { requests.push_back(ids); }
  void TunerResult(const Trial& t, const p::Metric& m) override {
    plugin_calls.push_back("result:" + std::to_string(t.parameter_id) + ":" +
                           std::to_string(m.scalar));
  }
  void TunerTrialEnd(const Trial& t, bool ok) override {
    plugin_calls.push_back("end:" + std::to_string(t.parameter_id) + ":" + (ok ? "1" : "0"));
  }
  void AssessorAssess(const Trial& t, p::Packed history) override {
    plugin_calls.push_back("assess:" + t.id + ":" + p::PackedToJson(history));
  }
  void AssessorTrialEnd(const Trial& t, bool ok) override {
    plugin_calls.push_back("assessor_end:" + t.id + ":" + (ok ? "1" : "0"));
  }
  void TrialFinished(const Trial& t) override { finished.push_back(t.id); }
  int barriers = 0;
  void TunerBarrier() override { ++barriers; }

  template <class T>
  std::vector<T> Sent(const std::string& worker) const {
    std::vector<T> out;
    for (const auto& [w, b] : to_worker) {
      if (w == worker && std::holds_alternative<T>(b)) out.push_back(std::get<T>(b));
    }
    return out;
  }
};

class EngineTest : public ::testing::Test {
 protected:
  template <class Fn>
  void Make(Fn set) {
    EngineOptions o;
    set(o);
    o.experiment_id = "exp1";
    engine_ = std::make_unique<Engine>(o, &sink_);
    engine_->Start(now_);
  }
  void Hello(const std::string& w, uint32_t slots) {
    p::WorkerHello h;
    h.worker_id = w;
    h.slots = slots;
    engine_->OnHello(h, now_);
  }
  // A worker that takes addressed offers (wire-format.md §5.2), its topic
  // subscribed on the events socket unless `subscribed` is false.
  void HelloAddressed(const std::string& w, uint32_t slots, bool subscribed = true) {
    if (subscribed) engine_->OnSubscription(w, true, now_);
    p::WorkerHello h;
    h.worker_id = w;
    h.slots = slots;
    h.offers = p::WorkerHello::kAddressedOffers;
    engine_->OnHello(h, now_);
  }
  void Heartbeat(const std::string& w, std::vector<p::RunningTrial> running) {
    p::Heartbeat hb;
    hb.worker_id = w;
    hb.running = std::move(running);
    engine_->OnHeartbeat(hb, now_);
  }
  // Answers every parameter request not answered yet, one parameter set per id.
  void AnswerRequest() {
    ASSERT_GT(sink_.requests.size(), answered_);
    while (answered_ < sink_.requests.size()) {
      auto ids = sink_.requests[answered_++];
      std::vector<std::pair<int64_t, p::Packed>> params;
      for (int64_t id : ids) params.emplace_back(id, Params(static_cast<int>(id)));
      engine_->OnParameters(ids, std::move(params), false, Status::Ok(), now_);
    }
  }
  void Start(const std::string& w, const p::NewTrialJob& job) {
    engine_->OnStarted(p::TrialStarted{w, job.trial_id, job.attempt}, now_);
  }
  // One worker `w` with one slot, running the first trial.
  p::NewTrialJob RunOne(const std::string& w) {
    Hello(w, 1);
    AnswerRequest();
    p::NewTrialJob job = sink_.jobs.at(0);
    Start(w, job);
    return job;
  }
  Status TryMetric(const std::string& w, const p::NewTrialJob& job, p::MetricType type,
                   uint64_t seq, double v) {
    p::ReportMetricData m;
    m.trial_id = job.trial_id;
    m.attempt = job.attempt;
    m.parameter_id = job.parameter_id;
    m.type = type;
    m.sequence = seq;
    m.value = MetricOf(v);
    m.worker_id = w;
    return engine_->OnMetric(m, now_);
  }
  void Metric(const std::string& w, const p::NewTrialJob& job, p::MetricType type, uint64_t seq,
              double v) {
    ASSERT_OK(TryMetric(w, job, type, seq, v));
  }
  void End(const std::string& w, const p::NewTrialJob& job, p::TrialStatus s) {
    ASSERT_OK(engine_->OnTrialEnd(p::TrialEnd{job.trial_id, job.attempt, s, "", w}, now_));
  }
  // Answers every barrier the engine asked for, as the tuner strand does once
  // the calls posted before it have returned.
  void Settle() {
    while (barriers_answered_ < sink_.barriers) {
      ++barriers_answered_;
      engine_->OnTunerBarrier(now_);
    }
  }
  void Advance(milliseconds d) {
    now_ += d;
    engine_->Tick(now_);
  }

  RecordingSink sink_;
  size_t answered_ = 0;
  int barriers_answered_ = 0;
  // Every test also checks the engine's incremental views against its trials.
  void TearDown() override {
    if (engine_) engine_testing::ExpectIncrementalViewsMatchTrials(*engine_);
  }
  std::unique_ptr<Engine> engine_;
  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
};

}  // namespace tunehost::host::engine_testing
