// Unit tests of the trial engine alone: a recording sink stands in for the
// sockets and plugin strands, and the tests drive time explicitly.
#include "tunehost/host/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "host/engine_testing.h"
#include "test_util.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {
namespace {

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

using engine_testing::MetricOf;
using engine_testing::Params;

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

TEST_F(EngineTest, AsksTunerOnlyForSlotsWorkersAnnounced) {
  Make([](EngineOptions& o) { o.concurrency = 4; });
  EXPECT_TRUE(sink_.requests.empty()) << "no worker, no request";
  Hello("w1", 2);
  ASSERT_EQ(sink_.requests.size(), 1u);
  EXPECT_EQ(sink_.requests[0].size(), 2u);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 2u);
  EXPECT_EQ(sink_.jobs[0].trial_id, "T00000");
  EXPECT_EQ(sink_.jobs[0].experiment_id, "exp1");
  EXPECT_EQ(sink_.jobs[1].sequence_id, 1u);
  EXPECT_EQ(sink_.jobs[0].attempt, 0u);
  EXPECT_EQ(engine_->stats().offers, 2u);
}

TEST_F(EngineTest, TunerSeesFinalBeforeTrialEndAndEachTrialEndsOnce) {
  Make([](EngineOptions& o) { o.concurrency = 1; o.max_trials = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  Metric("w1", job, p::MetricType::kPeriodical, 0, 0.5);
  Metric("w1", job, p::MetricType::kFinal, 1, 0.9);
  End("w1", job, p::TrialStatus::kSucceeded);
  End("w1", job, p::TrialStatus::kSucceeded);  // duplicate
  std::vector<std::string> want = {"result:0:0.900000", "end:0:1"};
  EXPECT_EQ(sink_.plugin_calls, want);
  EXPECT_EQ(sink_.finished, std::vector<std::string>{"T00000"});
  EXPECT_EQ(sink_.Sent<p::MetricAck>("w1").size(), 2u);
  Settle();  // the tuner strand answers the barrier DONE waits for
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
  EXPECT_TRUE(engine_->finished());
}

TEST_F(EngineTest, UnansweredOfferIsReofferedWithNextAttemptAndLateStartIsKilled) {
  Make([](EngineOptions& o) { o.concurrency = 1; o.ack_timeout = milliseconds(100); });
  Hello("w1", 1);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 1u);
  Advance(milliseconds(150));
  ASSERT_EQ(sink_.jobs.size(), 2u);
  EXPECT_EQ(sink_.jobs[1].trial_id, sink_.jobs[0].trial_id);
  EXPECT_EQ(sink_.jobs[1].attempt, 1u);
  Start("w1", sink_.jobs[0]);  // late answer for attempt 0
  auto kills = sink_.Sent<p::KillTrialJob>("w1");
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].attempt, 0u);
  EXPECT_EQ(kills[0].reason, "superseded");
  Start("w1", sink_.jobs[1]);
  EXPECT_EQ(engine_->Find(sink_.jobs[1].trial_id)->state, TrialState::kRunning);
  EXPECT_EQ(engine_->stats().reoffers, 1u);
}

TEST_F(EngineTest, DeadWorkersTrialGoesToAnotherWorkerAndEndsOnce) {
  Make([](EngineOptions& o) { o.concurrency = 1; o.max_trials = 1; o.heartbeat_interval = milliseconds(100); o.liveness = 3; });
  Hello("w1", 1);
  AnswerRequest();
  Start("w1", sink_.jobs.at(0));
  Hello("w2", 1);
  now_ += milliseconds(200);
  Heartbeat("w2", {});
  Advance(milliseconds(150));  // w1 silent for 350 ms > 300 ms
  ASSERT_EQ(sink_.jobs.size(), 2u);
  auto second = sink_.jobs[1];
  EXPECT_EQ(second.attempt, 1u);
  Start("w2", second);
  // The dead worker's late end for attempt 0 changes nothing.
  End("w1", sink_.jobs[0], p::TrialStatus::kFailed);
  EXPECT_TRUE(sink_.finished.empty());
  Metric("w2", second, p::MetricType::kFinal, 0, 1.0);
  End("w2", second, p::TrialStatus::kSucceeded);
  EXPECT_EQ(sink_.finished.size(), 1u);
  EXPECT_EQ(*engine_->Find(second.trial_id)->status, p::TrialStatus::kSucceeded);
  Settle();  // the tuner strand answers the barrier DONE waits for
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
}

TEST_F(EngineTest, AReofferedTrialsMetricsAreOnlyItsCurrentAttempts) {
  // wire-format.md §5.3: the new attempt's sequence numbers start at 0 again
  // and must not be taken for duplicates of the dead attempt's.
  Make([](EngineOptions& o) {
    o.concurrency = 1;
    o.max_trials = 1;
    o.has_assessor = true;
    o.heartbeat_interval = milliseconds(100);
  });
  Hello("w1", 1);
  AnswerRequest();
  auto first = sink_.jobs.at(0);
  Start("w1", first);
  Metric("w1", first, p::MetricType::kPeriodical, 0, 0.1);
  Metric("w1", first, p::MetricType::kPeriodical, 1, 0.2);
  Hello("w2", 1);
  now_ += milliseconds(200);
  Heartbeat("w2", {});
  Advance(milliseconds(150));  // w1 is dead
  ASSERT_EQ(sink_.jobs.size(), 2u);
  auto second = sink_.jobs[1];
  ASSERT_EQ(second.attempt, 1u);
  const Trial* t = engine_->Find(second.trial_id);
  EXPECT_TRUE(t->periodical.empty()) << "the dead attempt's results no longer count";
  Start("w2", second);
  sink_.plugin_calls.clear();
  Metric("w2", second, p::MetricType::kPeriodical, 0, 0.7);
  Metric("w1", first, p::MetricType::kPeriodical, 2, 0.3);  // late: the dead attempt
  ASSERT_EQ(t->periodical.size(), 1u);
  EXPECT_DOUBLE_EQ(t->periodical.at(0).scalar, 0.7);
  // The assessor sees only the new attempt's curve.
  EXPECT_EQ(sink_.plugin_calls, std::vector<std::string>{"assess:" + second.trial_id + ":[0.7]"});
  Metric("w2", second, p::MetricType::kFinal, 1, 0.8);
  End("w2", second, p::TrialStatus::kSucceeded);
  EXPECT_EQ(t->status, p::TrialStatus::kSucceeded);
  EXPECT_DOUBLE_EQ(t->final_metric->scalar, 0.8);
}

TEST_F(EngineTest, OnlyTheWorkerThatRunsAnAttemptReportsForIt) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  p::ReportMetricData forged;
  forged.trial_id = job.trial_id;
  forged.attempt = job.attempt;
  forged.type = p::MetricType::kFinal;
  forged.sequence = 0;
  forged.value = MetricOf(1e9);
  forged.worker_id = "intruder";
  EXPECT_EQ(engine_->OnMetric(forged, now_).code(), Status::Code::kBadState);
  EXPECT_FALSE(engine_->Find(job.trial_id)->final_metric.has_value());
  ASSERT_OK(engine_->OnTrialEnd(
      p::TrialEnd{job.trial_id, job.attempt, p::TrialStatus::kFailed, "", "intruder"}, now_));
  EXPECT_EQ(engine_->Find(job.trial_id)->state, TrialState::kRunning) << "an intruder's end";
  Metric("w1", job, p::MetricType::kFinal, 0, 0.5);
  EXPECT_DOUBLE_EQ(engine_->Find(job.trial_id)->final_metric->scalar, 0.5);
}

TEST_F(EngineTest, AnEndedTrialTakesLateResultsOnlyFromTheWorkerThatRanIt) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  auto job = RunOne("w1");
  Metric("w1", job, p::MetricType::kPeriodical, 0, 0.5);
  End("w1", job, p::TrialStatus::kSucceeded);
  Status st = TryMetric("intruder", job, p::MetricType::kPeriodical, 1, 1e9);
  EXPECT_EQ(st.code(), Status::Code::kBadState) << st.ToString();
  EXPECT_EQ(engine_->Find(job.trial_id)->periodical.size(), 1u);
  // Its own worker's late result (resent after a restart) is still kept.
  Metric("w1", job, p::MetricType::kPeriodical, 1, 0.6);
  EXPECT_EQ(engine_->Find(job.trial_id)->periodical.size(), 2u);
}

TEST_F(EngineTest, IntermediateResultsBeyondTheLimitAreAcknowledgedAndDropped) {
  Make([](EngineOptions& o) { o.concurrency = 1; o.has_assessor = true; });
  auto job = RunOne("w1");
  for (uint64_t seq : {p::kMaxPeriodicalResults, ~uint64_t{0}}) {
    Status st = TryMetric("w1", job, p::MetricType::kPeriodical, seq, 0.5);
    EXPECT_EQ(st.code(), Status::Code::kBadField) << st.ToString();
    EXPECT_NE(st.message().find(std::to_string(p::kMaxPeriodicalResults)), std::string::npos);
  }
  EXPECT_TRUE(engine_->Find(job.trial_id)->periodical.empty());
  EXPECT_EQ(sink_.Sent<p::MetricAck>("w1").size(), 2u) << "the worker must stop resending";
  EXPECT_TRUE(sink_.plugin_calls.empty());
  Metric("w1", job, p::MetricType::kFinal, 0, 0.7);  // a FINAL is not an intermediate result
  EXPECT_DOUBLE_EQ(engine_->Find(job.trial_id)->final_metric->scalar, 0.7);
}

TEST_F(EngineTest, AddedTrialsAreBoundedAndRefusedOnceTheExperimentTakesNoMore) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  for (size_t i = 0; i < p::kMaxQueuedCustomTrials; ++i) {
    ASSERT_OK(engine_->AddCustomized(Params(1), now_));
  }
  Status st = engine_->AddCustomized(Params(1), now_);
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find(std::to_string(p::kMaxQueuedCustomTrials)), std::string::npos)
      << st.message();
  // One ends: one more may be added.
  ASSERT_OK(engine_->KillTrial(engine_->TrialsInOrder().front()->id, now_));
  ASSERT_OK(engine_->AddCustomized(Params(2), now_));
  engine_->Stop("stopped");
  st = engine_->AddCustomized(Params(3), now_);
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find("takes no new trials"), std::string::npos) << st.message();
}

TEST_F(EngineTest, AddedTrialsCountAgainstTheBudget) {
  Make([](EngineOptions& o) { o.concurrency = 1; o.max_trials = 1; });
  ASSERT_OK(engine_->AddCustomized(Params(1), now_));
  Status st = engine_->AddCustomized(Params(2), now_);
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find("max_trials 1"), std::string::npos) << st.message();
}

TEST_F(EngineTest, WorkersBeyondTheLimitAreRefusedAndKnownOnesStillHeard) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  for (size_t i = 0; i < p::kMaxWorkers; ++i) Hello("w" + std::to_string(i), 1);
  p::WorkerHello extra;
  extra.worker_id = "one-too-many";
  extra.slots = 1;
  Status st = engine_->OnHello(extra, now_);
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find(std::to_string(p::kMaxWorkers)), std::string::npos);
  AnswerRequest();  // T00000 is offered
  st = engine_->OnStarted(p::TrialStarted{"another", "T00000", 0}, now_);
  EXPECT_EQ(st.code(), Status::Code::kBadState) << "a TS must not add a worker past the limit";
  EXPECT_EQ(engine_->workers().size(), p::kMaxWorkers);
  // Nor may a refused TS (a trial that does not exist) add one below it.
  engine_->OnBye(p::WorkerBye{"w1"}, now_);
  EXPECT_FALSE(engine_->OnStarted(p::TrialStarted{"made-up", "T99999", 0}, now_).ok());
  EXPECT_EQ(engine_->workers().count("made-up"), 0u);
  p::WorkerHello again;
  again.worker_id = "w0";
  again.slots = 2;
  EXPECT_OK(engine_->OnHello(again, now_));  // a known worker says hello again
}

TEST_F(EngineTest, NoMoreThanTheInflightLimitOfOffersIsOut) {
  const size_t n = p::kMaxInflightOffers + 100;
  Make([n](EngineOptions& o) { o.concurrency = static_cast<uint32_t>(n); });
  for (size_t i = 0; i < 5; ++i) Hello("w" + std::to_string(i), p::kMaxSlots);  // 5120 slots
  size_t asked = 0;
  for (const auto& ids : sink_.requests) {
    asked += ids.size();
    EXPECT_LE(ids.size(), p::kMaxGenerateBatch);
  }
  ASSERT_GE(asked, n) << "the tuner is asked for every free slot, in batches";
  AnswerRequest();
  EXPECT_EQ(sink_.jobs.size(), p::kMaxInflightOffers);
  // Answers free the way for the rest.
  for (size_t i = 0; i < 100; ++i) Start("w" + std::to_string(i % 5), sink_.jobs[i]);
  EXPECT_EQ(sink_.jobs.size(), p::kMaxInflightOffers + 100);
}

TEST_F(EngineTest, AWorkerThatDiesAfterItsFinalWasAcceptedEndsTheTrialSucceeded) {
  // DESIGN.md trust model: a trial whose FINAL is stored is never run again.
  Make([](EngineOptions& o) {
    o.concurrency = 1;
    o.max_trials = 1;
    o.heartbeat_interval = milliseconds(100);
  });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  Metric("w1", job, p::MetricType::kPeriodical, 0, 0.5);
  Metric("w1", job, p::MetricType::kFinal, 1, 0.9);
  Hello("w2", 1);
  now_ += milliseconds(200);
  Heartbeat("w2", {});
  Advance(milliseconds(150));  // w1 dies before its EN
  EXPECT_EQ(sink_.jobs.size(), 1u) << "no re-run";
  const Trial* t = engine_->Find(job.trial_id);
  EXPECT_EQ(t->status, p::TrialStatus::kSucceeded);
  EXPECT_EQ(t->attempt, 0u);
  EXPECT_EQ(sink_.plugin_calls, (std::vector<std::string>{"result:0:0.900000", "end:0:1"}));
  Settle();
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
}

TEST_F(EngineTest, ATrialItsWorkerStopsListingAfterItsFinalEndsSucceeded) {
  Make([](EngineOptions& o) { o.concurrency = 1; o.max_trials = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  Metric("w1", job, p::MetricType::kFinal, 0, 0.9);
  Heartbeat("w1", {});  // its EN was lost: the worker no longer lists it
  Heartbeat("w1", {});
  EXPECT_EQ(sink_.jobs.size(), 1u);
  EXPECT_EQ(engine_->Find(job.trial_id)->status, p::TrialStatus::kSucceeded);
  EXPECT_TRUE(sink_.Sent<p::KillTrialJob>("w1").empty());
}

TEST_F(EngineTest, ClientTrialsCountAgainstTheBudgetAndKeepTheExperimentFromDone) {
  // GE trials (source external) are trials of the experiment (wire-format.md §4.2).
  Make([](EngineOptions& o) { o.concurrency = 1; o.max_trials = 3; });
  std::vector<int64_t> ids;
  ASSERT_OK(engine_->ReserveExternal(5, now_, &ids));
  ASSERT_EQ(ids.size(), 3u) << "clipped to the trial budget";
  std::vector<std::pair<int64_t, p::Packed>> params;
  for (int64_t id : {ids[0], ids[1]}) params.emplace_back(id, Params(static_cast<int>(id)));
  auto created = engine_->OnExternalParameters(ids, std::move(params), now_);
  ASSERT_EQ(created.size(), 2u);
  EXPECT_FALSE(engine_->ids().IsOpen(ids[2])) << "an id the tuner did not answer is released";
  std::vector<int64_t> more;
  ASSERT_OK(engine_->ReserveExternal(5, now_, &more));
  ASSERT_EQ(more.size(), 1u);
  auto last = engine_->OnExternalParameters(more, {{more[0], Params(9)}}, now_);
  ASSERT_EQ(last.size(), 1u);
  ASSERT_OK(engine_->ReserveExternal(5, now_, &more));
  EXPECT_TRUE(more.empty()) << "the budget is used up";
  Settle();
  EXPECT_EQ(engine_->status(), ExperimentStatus::kNoMoreTrial) << "three client trials run";
  for (const Trial* t : {created[0], created[1]}) {
    ASSERT_OK(engine_->OnTrialEnd(p::TrialEnd{t->id, 0, p::TrialStatus::kSucceeded, "", ""}, now_));
  }
  Settle();
  EXPECT_EQ(engine_->status(), ExperimentStatus::kNoMoreTrial);
  ASSERT_OK(engine_->OnTrialEnd(p::TrialEnd{last[0]->id, 0, p::TrialStatus::kFailed, "", ""}, now_));
  Settle();
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
  EXPECT_EQ(engine_->ReserveExternal(1, now_, &more).code(), Status::Code::kBadState);
}

TEST_F(EngineTest, StopEndsAClientTrialAndARunningTrialWithItsFinalSucceeds) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  std::vector<int64_t> ids;
  ASSERT_OK(engine_->ReserveExternal(1, now_, &ids));
  auto created = engine_->OnExternalParameters(ids, {{ids[0], Params(1)}}, now_);
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  Metric("w1", job, p::MetricType::kFinal, 0, 0.9);
  engine_->Stop("stopped");
  EXPECT_EQ(created[0]->status, p::TrialStatus::kUserCanceled);
  EXPECT_EQ(engine_->Find(job.trial_id)->status, p::TrialStatus::kSucceeded);
}

TEST_F(EngineTest, RejectedOfferIsRequeuedWithSameAttempt) {
  Make([](EngineOptions& o) { o.concurrency = 2; });
  Hello("w1", 1);
  Hello("w2", 1);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 2u);
  auto job = sink_.jobs[0];
  engine_->OnRejected(p::TrialRejected{"w1", job.trial_id, job.attempt, "no free slot"}, now_);
  EXPECT_EQ(engine_->stats().rejects, 1u);
  // w1 is blocked until its next heartbeat; w2's slot is taken by the other offer.
  EXPECT_EQ(sink_.jobs.size(), 2u);
  Heartbeat("w1", {});
  ASSERT_EQ(sink_.jobs.size(), 3u);
  EXPECT_EQ(sink_.jobs[2].trial_id, job.trial_id);
  EXPECT_EQ(sink_.jobs[2].attempt, job.attempt);
}

TEST_F(EngineTest, MaxTrialsBudgetCreatesExactlyThatMany) {
  Make([](EngineOptions& o) { o.concurrency = 2; o.max_trials = 3; });
  Hello("w1", 2);
  for (int round = 0; round < 5 && !engine_->finished(); ++round) {
    if (sink_.requests.size() > answered_) AnswerRequest();
    auto jobs = sink_.jobs;
    sink_.jobs.clear();
    for (const auto& j : jobs) Start("w1", j);
    for (const auto& j : jobs) {
      Metric("w1", j, p::MetricType::kFinal, 0, 1.0);
      End("w1", j, p::TrialStatus::kSucceeded);
    }
  }
  EXPECT_EQ(engine_->stats().created, 3u);
  EXPECT_EQ(sink_.finished.size(), 3u);
  Settle();  // the tuner strand answers the barrier DONE waits for
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
}

TEST_F(EngineTest, ExhaustedTunerFinishesExperimentInsteadOfHanging) {
  Make([](EngineOptions& o) { o.concurrency = 2; });
  Hello("w1", 2);
  auto ids = sink_.requests.at(0);
  std::vector<std::pair<int64_t, p::Packed>> one = {{ids[0], Params(1)}};
  engine_->OnParameters(ids, one, /*no_more=*/true, Status::Ok(), now_);
  EXPECT_EQ(engine_->status(), ExperimentStatus::kTunerNoMoreTrial);
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  End("w1", job, p::TrialStatus::kSucceeded);
  // After a trial end the tuner is asked again (NNI), and says no more again.
  ASSERT_EQ(sink_.requests.size(), 2u);
  engine_->OnParameters(sink_.requests[1], {}, true, Status::Ok(), now_);
  // It may still send trials for the ids it kept: once every tuner call has
  // returned (the barrier) with nothing running, the experiment is done.
  EXPECT_EQ(sink_.barriers, 1);
  EXPECT_NE(engine_->status(), ExperimentStatus::kDone);
  engine_->OnTunerBarrier(now_);
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
  // The ids it kept are revoked: a late send_trial for them is refused.
  EXPECT_FALSE(engine_->ids().Claim(ids[1]));
}

// A credit the tuner claimed just before the barrier is not lost: the
// experiment waits for its trial.
TEST_F(EngineTest, CreditClaimedBeforeTheBarrierStillBecomesATrial) {
  Make([](EngineOptions& o) { o.concurrency = 2; });
  Hello("w1", 2);
  auto ids = sink_.requests.at(0);
  engine_->OnParameters(ids, {{ids[0], Params(1)}}, true, Status::Ok(), now_);
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  End("w1", job, p::TrialStatus::kSucceeded);
  engine_->OnParameters(sink_.requests.at(1), {}, true, Status::Ok(), now_);
  ASSERT_EQ(sink_.barriers, 1);
  ASSERT_TRUE(engine_->ids().Claim(ids[1]));  // the tuner's send_trial, racing
  engine_->OnTunerBarrier(now_);
  EXPECT_NE(engine_->status(), ExperimentStatus::kDone);
  engine_->OnSentTrial(ids[1], Params(2), now_);
  EXPECT_EQ(engine_->stats().created, 2u);
  ASSERT_EQ(sink_.jobs.size(), 2u);
}

// A tuner that once answered short but then answers in full is producing on
// demand: its old credits stop holding a slot.
TEST_F(EngineTest, FullAnswerReleasesEarlierCredits) {
  Make([](EngineOptions& o) { o.concurrency = 2; });
  Hello("w1", 2);
  auto ids = sink_.requests.at(0);
  engine_->OnParameters(ids, {{ids[0], Params(1)}}, true, Status::Ok(), now_);
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  End("w1", job, p::TrialStatus::kSucceeded);
  auto again = sink_.requests.at(1);
  ASSERT_EQ(again.size(), 1u) << "one slot is held by the credit";
  engine_->OnParameters(again, {{again[0], Params(2)}}, false, Status::Ok(), now_);
  EXPECT_FALSE(engine_->ids().Claim(ids[1])) << "the old credit is revoked";
  ASSERT_EQ(sink_.requests.size(), 3u) << "the freed slot is asked for";
  EXPECT_EQ(sink_.requests[2].size(), 1u);
}

// NNI's credit pattern: ids the tuner did not answer count against the
// budget and the concurrency until it sends them, so a tuner that answers
// later never gets more trials or more parallelism than configured.
TEST_F(EngineTest, CreditedIdsCountUntilTheTunerSendsThem) {
  Make([](EngineOptions& o) { o.concurrency = 3; o.max_trials = 4; });
  Hello("w1", 3);
  auto ids = sink_.requests.at(0);
  ASSERT_EQ(ids.size(), 3u);
  std::vector<std::pair<int64_t, p::Packed>> two = {{ids[0], Params(1)}, {ids[1], Params(2)}};
  engine_->OnParameters(ids, two, /*no_more=*/true, Status::Ok(), now_);
  ASSERT_EQ(sink_.jobs.size(), 2u);
  auto first = sink_.jobs[0];
  Start("w1", first);
  End("w1", first, p::TrialStatus::kSucceeded);
  // One slot freed, but ids[2] is still owed: the host asks for one id only
  // (budget 4 = 2 created + 1 credit + 1), not two.
  ASSERT_EQ(sink_.requests.size(), 2u);
  EXPECT_EQ(sink_.requests[1].size(), 1u);
  engine_->OnParameters(sink_.requests[1], {}, true, Status::Ok(), now_);
  // The tuner serves its credits later (send_trial claims the id, as the
  // server does, then the engine creates the trial): both become trials.
  ASSERT_TRUE(engine_->ids().Claim(ids[2]));
  engine_->OnSentTrial(ids[2], Params(3), now_);
  ASSERT_TRUE(engine_->ids().Claim(sink_.requests[1][0]));
  engine_->OnSentTrial(sink_.requests[1][0], Params(4), now_);
  EXPECT_EQ(engine_->stats().created, 4u);
  // An id used once cannot be sent again.
  EXPECT_FALSE(engine_->ids().Claim(ids[2]));
  size_t asked = sink_.requests.size();
  for (size_t i = 1; i < sink_.jobs.size(); ++i) {
    Start("w1", sink_.jobs[i]);
    End("w1", sink_.jobs[i], p::TrialStatus::kSucceeded);
  }
  EXPECT_EQ(sink_.requests.size(), asked) << "the budget is spent: nothing more is asked";
  Settle();  // the tuner strand answers the barrier DONE waits for
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
}

TEST_F(EngineTest, LastPeriodicalBecomesFinalWhenTrialSucceedsWithoutOne) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  Metric("w1", job, p::MetricType::kPeriodical, 0, 0.25);
  Metric("w1", job, p::MetricType::kPeriodical, 1, 0.75);
  End("w1", job, p::TrialStatus::kSucceeded);
  EXPECT_EQ(sink_.plugin_calls.at(0), "result:0:0.750000");
  EXPECT_TRUE(engine_->Find(job.trial_id)->final_synthesized);
}

TEST_F(EngineTest, AssessorSeesContiguousHistoryAndBadStopsTrialAsEarlyStopped) {
  Make([](EngineOptions& o) { o.concurrency = 1; o.has_assessor = true; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  Metric("w1", job, p::MetricType::kPeriodical, 1, 0.2);  // gap before it: no assessment
  EXPECT_TRUE(sink_.plugin_calls.empty());
  Metric("w1", job, p::MetricType::kPeriodical, 0, 0.1);
  ASSERT_EQ(sink_.plugin_calls.size(), 1u);
  EXPECT_EQ(sink_.plugin_calls[0], "assess:" + job.trial_id + ":[0.1,0.2]");
  engine_->OnAssessment(job.trial_id, job.attempt, /*good=*/false);
  auto kills = sink_.Sent<p::KillTrialJob>("w1");
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].reason, "assessor");
  Metric("w1", job, p::MetricType::kPeriodical, 2, 0.3);  // not assessed again
  EXPECT_EQ(sink_.plugin_calls.size(), 1u);
  End("w1", job, p::TrialStatus::kUserCanceled);
  EXPECT_EQ(*engine_->Find(job.trial_id)->status, p::TrialStatus::kEarlyStopped);
  EXPECT_EQ(sink_.plugin_calls.back(), "assessor_end:" + job.trial_id + ":0");
}

TEST_F(EngineTest, DuplicateMetricsAreAcknowledgedButCountedOnce) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  Metric("w1", job, p::MetricType::kPeriodical, 0, 0.5);
  Metric("w1", job, p::MetricType::kPeriodical, 0, 0.5);
  EXPECT_EQ(sink_.Sent<p::MetricAck>("w1").size(), 2u);
  size_t metric_events = 0;
  for (const auto& b : sink_.published) metric_events += std::holds_alternative<p::ReportMetricData>(b);
  EXPECT_EQ(metric_events, 1u);
  EXPECT_EQ(engine_->Find(job.trial_id)->periodical.size(), 1u);
}

TEST_F(EngineTest, TunerFailureIsAnErrorNotAStall) {
  // Three failed generate calls in a row: the tuner is asked again after the
  // first two (an isolated one is restarted meanwhile), then the experiment
  // fails and says why.
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(sink_.requests.size(), i + 1) << "asked again after a failure";
    EXPECT_NE(engine_->status(), ExperimentStatus::kError);
    engine_->OnParameters(sink_.requests.at(i), {}, false, Status::PluginError("boom"), now_);
  }
  EXPECT_EQ(engine_->status(), ExperimentStatus::kError);
  EXPECT_NE(engine_->error().find("boom"), std::string::npos);
  EXPECT_NE(engine_->error().find("3 times in a row"), std::string::npos);
  EXPECT_TRUE(engine_->finished());
}

TEST_F(EngineTest, ASuccessfulGenerateResetsTheFailureCount) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  for (int round = 0; round < 3; ++round) {
    engine_->OnParameters(sink_.requests.back(), {}, false, Status::PluginError("boom"), now_);
    engine_->OnParameters(sink_.requests.back(), {}, false, Status::PluginError("boom"), now_);
    AnswerRequest();
    auto job = sink_.jobs.back();
    Start("w1", job);
    End("w1", job, p::TrialStatus::kSucceeded);
  }
  EXPECT_NE(engine_->status(), ExperimentStatus::kError);
}

TEST_F(EngineTest, TrialLeftOutOfTwoHeartbeatsIsReoffered) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  Heartbeat("w1", {{job.trial_id, job.attempt, -1}});
  Heartbeat("w1", {});
  EXPECT_EQ(sink_.jobs.size(), 1u);
  Heartbeat("w1", {});
  ASSERT_EQ(sink_.jobs.size(), 2u);
  EXPECT_EQ(sink_.jobs[1].attempt, 1u);
}

TEST_F(EngineTest, OnlyTheWorkerWithTheOffersLeaseStartsIt) {
  // A host with keys: a TS must echo the lease only the offer's receiver
  // learned (wire-format.md §5.3, §9).
  Make([](EngineOptions& o) { o.concurrency = 1; o.require_lease = true; });
  Hello("w1", 1);
  Hello("w2", 1);
  AnswerRequest();
  const p::NewTrialJob job = sink_.jobs.at(0);
  ASSERT_TRUE(job.lease.has_value());
  EXPECT_NE(*job.lease, 0u);
  const std::optional<uint64_t> forgeries[] = {std::nullopt, *job.lease + 1};
  for (const std::optional<uint64_t>& forged : forgeries) {
    Status st = engine_->OnStarted(p::TrialStarted{"w2", job.trial_id, job.attempt, forged}, now_);
    EXPECT_EQ(st.code(), Status::Code::kBadState);
    EXPECT_EQ(engine_->Find(job.trial_id)->state, TrialState::kOffered);
  }
  EXPECT_EQ(sink_.Sent<p::KillTrialJob>("w2").size(), 2u);
  ASSERT_OK(engine_->OnStarted(p::TrialStarted{"w1", job.trial_id, job.attempt, job.lease}, now_));
  EXPECT_EQ(engine_->Find(job.trial_id)->worker_id, "w1");
  // What events and clients see of a trial carries no lease.
  EXPECT_FALSE(engine_->JobFor(*engine_->Find(job.trial_id)).lease.has_value());
}

TEST_F(EngineTest, OnlyTheWorkerWithTheOffersLeaseHandsItBack) {
  Make([](EngineOptions& o) { o.concurrency = 1; o.require_lease = true; });
  Hello("w1", 1);
  AnswerRequest();
  const p::NewTrialJob job = sink_.jobs.at(0);
  engine_->OnRejected(p::TrialRejected{"w2", job.trial_id, job.attempt, "no", std::nullopt},
                      now_);
  engine_->OnRejected(p::TrialRejected{"w2", job.trial_id, job.attempt, "no", *job.lease + 1},
                      now_);
  EXPECT_EQ(engine_->Find(job.trial_id)->state, TrialState::kOffered) << "handed back by w2";
  engine_->OnRejected(p::TrialRejected{"w1", job.trial_id, job.attempt, "no", job.lease}, now_);
  EXPECT_EQ(engine_->Find(job.trial_id)->state, TrialState::kWaiting);
}

TEST_F(EngineTest, ResultsOfAClientsTrialComeOnlyFromTheClient) {
  // GE: the client runs the trial and reports it on the control socket (no
  // worker_id); a worker naming it is refused.
  Make([](EngineOptions& o) { o.concurrency = 1; });
  std::vector<int64_t> ids;
  ASSERT_OK(engine_->ReserveExternal(1, now_, &ids));
  auto created = engine_->OnExternalParameters(ids, {{ids.at(0), Params(1)}}, now_);
  ASSERT_EQ(created.size(), 1u);
  const p::NewTrialJob job = engine_->JobFor(*created[0]);
  EXPECT_EQ(TryMetric("w1", job, p::MetricType::kFinal, 0, 1e9).code(), Status::Code::kBadState);
  EXPECT_EQ(engine_->OnTrialEnd(p::TrialEnd{job.trial_id, job.attempt,
                                            p::TrialStatus::kSucceeded, "", "w1"}, now_)
                .code(),
            Status::Code::kBadState);
  EXPECT_OK(TryMetric("", job, p::MetricType::kFinal, 0, 0.5));
  EXPECT_DOUBLE_EQ(engine_->Find(job.trial_id)->final_metric->scalar, 0.5);
}

TEST_F(EngineTest, WithoutKeysATrialStartedWithoutALeaseIsTaken) {
  // Workers that do not echo leases keep working on a host without keys;
  // a lease they do send must still be the offer's.
  Make([](EngineOptions& o) { o.concurrency = 2; });
  Hello("w1", 2);
  AnswerRequest();
  const p::NewTrialJob a = sink_.jobs.at(0), b = sink_.jobs.at(1);
  EXPECT_NE(a.lease, b.lease);
  ASSERT_OK(engine_->OnStarted(p::TrialStarted{"w1", a.trial_id, a.attempt}, now_));
  EXPECT_EQ(engine_->Find(a.trial_id)->state, TrialState::kRunning);
  EXPECT_FALSE(engine_->OnStarted(p::TrialStarted{"w1", b.trial_id, b.attempt, a.lease}, now_)
                   .ok());
  EXPECT_EQ(engine_->Find(b.trial_id)->state, TrialState::kOffered);
}

TEST_F(EngineTest, AnOfferIsTakenByTrialStartedNotByAHelloOrResultsNamingIt) {
  // Offers are unaddressed (PUSH): a worker that names an offered trial in
  // its hello, or reports for it, without starting it takes nothing — else
  // any worker could take any trial (wire-format.md §5.3).
  Make([](EngineOptions& o) { o.concurrency = 1; o.ack_timeout = milliseconds(100); });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  p::WorkerHello h;
  h.worker_id = "w2";
  h.slots = 1;
  h.running = {{job.trial_id, job.attempt, 3}};
  engine_->OnHello(h, now_);
  EXPECT_EQ(engine_->Find(job.trial_id)->state, TrialState::kOffered);
  ASSERT_EQ(sink_.Sent<p::KillTrialJob>("w2").size(), 1u);
  EXPECT_EQ(TryMetric("w2", job, p::MetricType::kFinal, 0, 1e9).code(),
            Status::Code::kBadState);
  End("w2", job, p::TrialStatus::kSucceeded);
  EXPECT_FALSE(engine_->Find(job.trial_id)->final_metric.has_value());
  EXPECT_EQ(engine_->Find(job.trial_id)->state, TrialState::kOffered);
  Start("w1", job);
  EXPECT_EQ(engine_->Find(job.trial_id)->state, TrialState::kRunning);
  EXPECT_EQ(engine_->Find(job.trial_id)->worker_id, "w1");
}

TEST_F(EngineTest, UnknownWorkerIsAskedToSayHello) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Heartbeat("ghost", {});
  EXPECT_EQ(sink_.Sent<p::HelloRequest>("ghost").size(), 1u);
}

TEST_F(EngineTest, JobsThatCannotBeSentStayWaiting) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  sink_.accept_jobs = false;
  Hello("w1", 1);
  AnswerRequest();
  EXPECT_TRUE(sink_.jobs.empty());
  sink_.accept_jobs = true;
  Advance(milliseconds(10));
  EXPECT_EQ(sink_.jobs.size(), 1u);
}

TEST_F(EngineTest, StopEndsEveryOpenTrialOnceAsUserCanceled) {
  Make([](EngineOptions& o) { o.concurrency = 3; });
  Hello("w1", 3);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 3u);
  const p::NewTrialJob running = sink_.jobs[0];
  const p::NewTrialJob done = sink_.jobs[1];
  const p::NewTrialJob offered = sink_.jobs[2];
  Start("w1", running);
  Start("w1", done);
  End("w1", done, p::TrialStatus::kSucceeded);

  engine_->Stop("user request");
  engine_->Stop("again");  // no second end for anything

  EXPECT_EQ(engine_->status(), ExperimentStatus::kStopped);
  EXPECT_TRUE(engine_->finished());
  const auto kills = sink_.Sent<p::KillTrialJob>("w1");
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].trial_id, running.trial_id);
  EXPECT_EQ(kills[0].reason, "user request");
  EXPECT_EQ(sink_.finished,
            (std::vector<std::string>{done.trial_id, running.trial_id, offered.trial_id}));
  for (const p::NewTrialJob* job : {&running, &offered}) {
    const Trial* t = engine_->Find(job->trial_id);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->state, TrialState::kEnded);
    EXPECT_EQ(*t->status, p::TrialStatus::kUserCanceled);
    EXPECT_EQ(t->error, "experiment stopped");
  }
  // The tuner hears of each trial's end exactly once.
  for (const p::NewTrialJob* job : {&running, &done, &offered}) {
    const std::string end = "end:" + std::to_string(std::get<int64_t>(job->parameter_id));
    EXPECT_EQ(std::count_if(sink_.plugin_calls.begin(), sink_.plugin_calls.end(),
                            [&](const std::string& c) { return c.rfind(end + ":", 0) == 0; }),
              1)
        << end;
  }
  // Nothing new is asked of the tuner or offered after the stop.
  const size_t requests = sink_.requests.size();
  Advance(milliseconds(10));
  Hello("w2", 4);
  EXPECT_EQ(sink_.requests.size(), requests);
  EXPECT_EQ(sink_.jobs.size(), 3u);
}

// --- control: KillTrial, UpdateLimits, listing ---

TEST_F(EngineTest, KillTrialOfRunningTrialSendsKiAndEndsUserCanceledOnItsEnd) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  ASSERT_OK(engine_->KillTrial(job.trial_id, now_));
  auto kills = sink_.Sent<p::KillTrialJob>("w1");
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].trial_id, job.trial_id);
  EXPECT_EQ(kills[0].attempt, job.attempt);
  EXPECT_EQ(kills[0].reason, "user");
  // Watchers see the kill on event.KI too.
  EXPECT_TRUE(std::any_of(sink_.published.begin(), sink_.published.end(), [](const p::Body& b) {
    return std::holds_alternative<p::KillTrialJob>(b) && std::get<p::KillTrialJob>(b).reason == "user";
  }));
  // It runs until its worker says it stopped.
  EXPECT_EQ(engine_->Find(job.trial_id)->state, TrialState::kRunning);
  EXPECT_EQ(Engine::ControlStatus(*engine_->Find(job.trial_id)), "RUNNING");
  End("w1", job, p::TrialStatus::kUserCanceled);
  const Trial* t = engine_->Find(job.trial_id);
  ASSERT_EQ(t->state, TrialState::kEnded);
  EXPECT_EQ(*t->status, p::TrialStatus::kUserCanceled);
  EXPECT_EQ(Engine::ControlStatus(*t), "USER_CANCELED");
  EXPECT_EQ(sink_.finished, std::vector<std::string>{job.trial_id});
}

TEST_F(EngineTest, KillTrialOfUnknownOrEndedTrialIsRefused) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  End("w1", job, p::TrialStatus::kSucceeded);
  Status st = engine_->KillTrial("T99999", now_);
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.ToString();
  st = engine_->KillTrial(job.trial_id, now_);
  EXPECT_EQ(st.code(), Status::Code::kBadState) << st.ToString();
  EXPECT_TRUE(sink_.Sent<p::KillTrialJob>("w1").empty());
  EXPECT_EQ(*engine_->Find(job.trial_id)->status, p::TrialStatus::kSucceeded);
}

TEST_F(EngineTest, KillTrialOfWaitingTrialEndsItAtOnceAndItIsNeverOffered) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  const Trial* t = nullptr;
  ASSERT_OK(engine_->AddCustomized(Params(7), now_, &t));  // no worker yet: waiting
  const std::string id = t->id;
  const int64_t pid = t->parameter_id;
  ASSERT_EQ(Engine::ControlStatus(*t), "WAITING");
  ASSERT_OK(engine_->KillTrial(id, now_));
  const Trial* killed = engine_->Find(id);
  ASSERT_EQ(killed->state, TrialState::kEnded);
  EXPECT_EQ(*killed->status, p::TrialStatus::kUserCanceled);
  EXPECT_EQ(sink_.finished, std::vector<std::string>{id});
  EXPECT_EQ(sink_.plugin_calls, std::vector<std::string>{"end:" + std::to_string(pid) + ":0"});
  Hello("w1", 1);
  for (const auto& job : sink_.jobs) EXPECT_NE(job.trial_id, id);
}

TEST_F(EngineTest, KillTrialOfOfferedTrialEndsItAndALateStartIsSuperseded) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  ASSERT_EQ(engine_->Find(job.trial_id)->state, TrialState::kOffered);
  ASSERT_OK(engine_->KillTrial(job.trial_id, now_));
  EXPECT_EQ(*engine_->Find(job.trial_id)->status, p::TrialStatus::kUserCanceled);
  Start("w1", job);  // the worker took the offer after the kill
  auto kills = sink_.Sent<p::KillTrialJob>("w1");
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].reason, "superseded");
  EXPECT_EQ(sink_.finished, std::vector<std::string>{job.trial_id});
}

TEST_F(EngineTest, TrialsInOrderAndCountsByStatusFollowTheTrials) {
  Make([](EngineOptions& o) { o.concurrency = 3; });
  Hello("w1", 3);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 3u);
  Start("w1", sink_.jobs[0]);
  Start("w1", sink_.jobs[1]);
  End("w1", sink_.jobs[1], p::TrialStatus::kFailed);
  ASSERT_OK(engine_->AddCustomized(Params(9), now_));
  std::vector<std::string> ids;
  for (const Trial* t : engine_->TrialsInOrder()) ids.push_back(t->id);
  std::vector<std::string> want = {"T00000", "T00001", "T00002", "T00003"};
  EXPECT_EQ(ids, want);
  // Ending T00001 asked the tuner for one more, still unanswered (no trial).
  std::vector<std::pair<std::string, uint64_t>> counts = {
      {"WAITING", 2}, {"RUNNING", 1}, {"FAILED", 1}};
  EXPECT_EQ(engine_->CountsByStatus(), counts);
}

TEST_F(EngineTest, UpdateLimitsRaisedConcurrencyOffersMoreTrialsAtOnce) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 3);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 1u);
  ASSERT_OK(engine_->UpdateLimits(3, std::nullopt, std::nullopt, now_));
  EXPECT_EQ(engine_->options().concurrency, 3u);
  ASSERT_EQ(sink_.requests.size(), 2u);
  EXPECT_EQ(sink_.requests[1].size(), 2u);
  AnswerRequest();
  EXPECT_EQ(sink_.jobs.size(), 3u);
  EXPECT_EQ(engine_->status(), ExperimentStatus::kRunning);
}

TEST_F(EngineTest, UpdateLimitsLoweredMaxTrialsEndsTheExperimentWhenReached) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  AnswerRequest();
  Start("w1", sink_.jobs.at(0));
  End("w1", sink_.jobs.at(0), p::TrialStatus::kSucceeded);
  AnswerRequest();
  auto second = sink_.jobs.at(1);
  Start("w1", second);
  ASSERT_EQ(engine_->status(), ExperimentStatus::kRunning);
  ASSERT_OK(engine_->UpdateLimits(std::nullopt, 2, std::nullopt, now_));
  EXPECT_EQ(engine_->options().max_trials, 2u);
  EXPECT_EQ(engine_->status(), ExperimentStatus::kNoMoreTrial);
  const size_t requests = sink_.requests.size();
  End("w1", second, p::TrialStatus::kSucceeded);
  EXPECT_EQ(sink_.requests.size(), requests) << "no trial beyond the lowered budget";
  Settle();  // the tuner strand answers the barrier DONE waits for
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
  EXPECT_TRUE(engine_->finished());
}

TEST_F(EngineTest, UpdateLimitsRaisedMaxTrialsResumesCreatingTrials) {
  Make([](EngineOptions& o) { o.concurrency = 2; o.max_trials = 1; });
  Hello("w1", 2);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 1u);
  Start("w1", sink_.jobs.at(0));
  ASSERT_EQ(engine_->status(), ExperimentStatus::kNoMoreTrial);
  ASSERT_OK(engine_->UpdateLimits(std::nullopt, 3, std::nullopt, now_));
  EXPECT_EQ(engine_->status(), ExperimentStatus::kRunning);
  ASSERT_EQ(sink_.requests.size(), 2u);
  EXPECT_EQ(sink_.requests[1].size(), 1u) << "one free slot for the second trial";
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 2u);
  Start("w1", sink_.jobs[1]);
  End("w1", sink_.jobs[0], p::TrialStatus::kSucceeded);
  AnswerRequest();  // the third and last trial
  ASSERT_EQ(sink_.jobs.size(), 3u);
  EXPECT_EQ(engine_->status(), ExperimentStatus::kNoMoreTrial);
  End("w1", sink_.jobs[1], p::TrialStatus::kSucceeded);
  Start("w1", sink_.jobs[2]);
  End("w1", sink_.jobs[2], p::TrialStatus::kSucceeded);
  Settle();  // the tuner strand answers the barrier DONE waits for
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
}

TEST_F(EngineTest, UpdateLimitsAfterDoneIsRefusedAndDoneStaysFinal) {
  Make([](EngineOptions& o) { o.concurrency = 1; o.max_trials = 1; });
  Hello("w1", 1);
  AnswerRequest();
  Start("w1", sink_.jobs.at(0));
  End("w1", sink_.jobs.at(0), p::TrialStatus::kSucceeded);
  Settle();  // the tuner strand answers the barrier DONE waits for
  ASSERT_EQ(engine_->status(), ExperimentStatus::kDone);
  const size_t requests = sink_.requests.size();
  Status st = engine_->UpdateLimits(4, 10, std::nullopt, now_);
  EXPECT_EQ(st.code(), Status::Code::kBadState) << st.ToString();
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
  EXPECT_EQ(engine_->options().max_trials, 1u);
  EXPECT_EQ(engine_->options().concurrency, 1u);
  EXPECT_EQ(sink_.requests.size(), requests);
}

TEST_F(EngineTest, UpdateLimitsRefusesBadValuesAndChangesNothing) {
  Make([](EngineOptions& o) { o.concurrency = 2; o.max_trials = 5; });
  for (auto [c, d] : std::vector<std::pair<std::optional<uint32_t>, std::optional<double>>>{
           {0u, std::nullopt},
           {std::nullopt, -1.0},
           {std::nullopt, std::numeric_limits<double>::quiet_NaN()},
           {std::nullopt, std::numeric_limits<double>::infinity()}}) {
    Status st = engine_->UpdateLimits(c, 9, d, now_);
    EXPECT_EQ(st.code(), Status::Code::kBadField) << st.ToString();
  }
  EXPECT_EQ(engine_->options().concurrency, 2u);
  EXPECT_EQ(engine_->options().max_trials, 5u);
  EXPECT_EQ(engine_->options().max_duration.count(), 0);
  // nullopt everywhere changes nothing and is fine.
  ASSERT_OK(engine_->UpdateLimits(std::nullopt, std::nullopt, std::nullopt, now_));
  EXPECT_EQ(engine_->options().max_trials, 5u);
}

TEST_F(EngineTest, UpdateLimitsShorterDurationCancelsWaitingTrialsAndRunningOnesFinish) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto running = sink_.jobs.at(0);
  Start("w1", running);
  const Trial* added = nullptr;
  ASSERT_OK(engine_->AddCustomized(Params(5), now_, &added));
  const std::string waiting = added->id;
  now_ += std::chrono::seconds(10);
  Heartbeat("w1", {{running.trial_id, running.attempt, -1}});
  ASSERT_OK(engine_->UpdateLimits(std::nullopt, std::nullopt, 5.0, now_));
  EXPECT_EQ(engine_->options().max_duration, milliseconds(5000));
  const Trial* w = engine_->Find(waiting);
  ASSERT_EQ(w->state, TrialState::kEnded);
  EXPECT_EQ(*w->status, p::TrialStatus::kSysCanceled);
  EXPECT_EQ(engine_->Find(running.trial_id)->state, TrialState::kRunning);
  EXPECT_EQ(engine_->status(), ExperimentStatus::kNoMoreTrial);
  End("w1", running, p::TrialStatus::kSucceeded);
  Settle();  // the tuner strand answers the barrier DONE waits for
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
}

}  // namespace
}  // namespace tunehost::host

namespace tunehost::host {
namespace {

// The tuner answers "no more" for an id and then, in a later call, sends a
// trial for it (hyperband promoting after a rung ends). The completions reach
// the engine in that order, after the claim: DONE must wait for the barrier.
TEST_F(EngineTest, ASendTrialRacingANoMoreAnswerIsNotLostToDone) {
  Make([](EngineOptions& o) {
    o.concurrency = 2;
    o.max_trials = 3;
  });
  Hello("w1", 2);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 2u);
  const p::NewTrialJob first = sink_.jobs[0], second = sink_.jobs[1];
  Start("w1", first);
  Start("w1", second);
  End("w1", first, p::TrialStatus::kSucceeded);
  ASSERT_EQ(sink_.requests.size(), 2u);
  const int64_t id = sink_.requests[1].at(0);
  End("w1", second, p::TrialStatus::kSucceeded);
  ASSERT_TRUE(engine_->ids().Claim(id));  // send_trial from the tuner's trial_end
  engine_->OnParameters(sink_.requests[1], {}, /*no_more=*/true, Status::Ok(), now_);
  EXPECT_NE(engine_->status(), ExperimentStatus::kDone) << "its trial is on the way";
  engine_->OnSentTrial(id, Params(9), now_);
  Settle();
  EXPECT_EQ(engine_->stats().created, 3u);
  ASSERT_EQ(sink_.jobs.size(), 3u);
  Start("w1", sink_.jobs[2]);
  End("w1", sink_.jobs[2], p::TrialStatus::kSucceeded);
  Settle();
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
}

// --- addressed offers (wire-format.md §5.2) ---

TEST_F(EngineTest, OffersAreAddressedToSubscribedWorkersWithFreeSlotsInTurn) {
  Make([](EngineOptions& o) { o.concurrency = 4; });
  HelloAddressed("a", 1);
  HelloAddressed("b", 2);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 3u);
  std::vector<std::string> to = sink_.addressed_to;
  std::sort(to.begin(), to.end());
  EXPECT_EQ(to, (std::vector<std::string>{"a", "b", "b"})) << "one offer per free slot";
  EXPECT_EQ(engine_->stats().addressed, 3u);
  // a's slot is taken by its offer: a TS from a frees nothing, an end does.
  size_t a = std::find(sink_.addressed_to.begin(), sink_.addressed_to.end(), "a") -
             sink_.addressed_to.begin();
  Start("a", sink_.jobs[a]);
  End("a", sink_.jobs[a], p::TrialStatus::kSucceeded);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 4u);
  EXPECT_EQ(sink_.addressed_to.back(), "a") << "the only worker with a free slot";
}

TEST_F(EngineTest, OnlyWorkersWithoutAddressedOffersGetTheJobsSocket) {
  Make([](EngineOptions& o) { o.concurrency = 3; });
  Hello("old", 1);                                          // no offers: "addressed"
  HelloAddressed("unsubscribed", 1, /*subscribed=*/false);  // its topic not seen yet
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 1u) << "the jobs socket's round robin is only for old's slot";
  EXPECT_EQ(sink_.addressed_to, (std::vector<std::string>{""}));
  // Its subscription arrives: the waiting trial is addressed to it.
  engine_->OnSubscription("unsubscribed", true, now_);
  ASSERT_EQ(sink_.jobs.size(), 2u);
  EXPECT_EQ(sink_.addressed_to.back(), "unsubscribed");
}

TEST_F(EngineTest, OnlyTheAddresseeMayStartOrHandBackAnAddressedOffer) {
  Make([](EngineOptions& o) { o.concurrency = 1; });
  HelloAddressed("a", 1);
  Hello("thief", 1);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 1u);
  ASSERT_EQ(sink_.addressed_to[0], "a");
  const p::NewTrialJob job = sink_.jobs[0];
  // The thief read the lease from a topic prefix: still refused.
  EXPECT_FALSE(engine_->OnStarted(p::TrialStarted{"thief", job.trial_id, job.attempt, job.lease},
                                  now_)
                   .ok());
  ASSERT_EQ(sink_.Sent<p::KillTrialJob>("thief").size(), 1u);
  engine_->OnRejected(p::TrialRejected{"thief", job.trial_id, job.attempt, "x", job.lease}, now_);
  EXPECT_EQ(engine_->Find(job.trial_id)->state, TrialState::kOffered) << "not handed back";
  ASSERT_OK(engine_->OnStarted(p::TrialStarted{"a", job.trial_id, job.attempt, job.lease}, now_));
  EXPECT_EQ(engine_->Find(job.trial_id)->worker_id, "a");
}

TEST_F(EngineTest, ALostAddressedOfferIsOfferedAgainAfterTheAckTimeout) {
  Make([](EngineOptions& o) {
    o.concurrency = 1;
    o.ack_timeout = milliseconds(100);
  });
  HelloAddressed("a", 1);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 1u);
  Advance(milliseconds(150));  // never answered (the subscriber's queue was full)
  ASSERT_EQ(sink_.jobs.size(), 2u);
  EXPECT_EQ(sink_.jobs[1].trial_id, sink_.jobs[0].trial_id);
  EXPECT_EQ(sink_.jobs[1].attempt, sink_.jobs[0].attempt + 1);
  EXPECT_EQ(sink_.addressed_to[1], "a") << "its slot was freed with the lost offer";
}

TEST_F(EngineTest, TheConsecutiveFailuresLimitCountsOnlyFailuresInARow) {
  Make([](EngineOptions& o) {
    o.concurrency = 1;
    o.max_consecutive_failures = 2;
  });
  Hello("w", 1);
  auto run = [&](p::TrialStatus status) {
    AnswerRequest();
    ASSERT_FALSE(sink_.jobs.empty());
    const p::NewTrialJob job = sink_.jobs.back();
    Start("w", job);
    End("w", job, status);
  };
  run(p::TrialStatus::kFailed);
  run(p::TrialStatus::kSucceeded);  // the count starts again
  run(p::TrialStatus::kFailed);
  run(p::TrialStatus::kUserCanceled);  // neither counts nor resets
  EXPECT_EQ(engine_->status(), ExperimentStatus::kRunning);
  run(p::TrialStatus::kFailed);
  EXPECT_EQ(engine_->status(), ExperimentStatus::kError);
  EXPECT_NE(engine_->error().find("2 trials in a row failed"), std::string::npos)
      << engine_->error();
}

TEST_F(EngineTest, AGoneSubscriptionHoldsOffersUntilItComesBack) {
  Make([](EngineOptions& o) { o.concurrency = 2; });
  HelloAddressed("a", 2);
  engine_->OnSubscription("a", false, now_);  // a reconnects: its topic is gone for now
  AnswerRequest();
  EXPECT_TRUE(sink_.jobs.empty()) << "an offer published now would be lost";
  engine_->OnSubscription("a", true, now_);
  EXPECT_EQ(sink_.addressed_to, (std::vector<std::string>{"a", "a"}));
}


}  // namespace
}  // namespace tunehost::host
