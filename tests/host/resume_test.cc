// The engine's lifecycle (wire-format.md §5.3): its resume path
// (Engine::Restore: re-attaching workers, the grace, budgets and numbering
// carried over) and its ExecutionEngine operations (event callbacks,
// middleware, idle slots, budget, deduplication), driven with a small
// recording sink. The store itself is tested in lifecycle_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "host/engine_testing.h"
#include "test_util.h"
#include "tunehost/host/engine.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host {
namespace {

namespace p = tunehost::protocol;
using std::chrono::milliseconds;

using engine_testing::MakeTrial;
using engine_testing::MetricData;
using engine_testing::MetricOf;
using engine_testing::Params;

// --- Engine::Restore ---

class MiniSink : public EngineSink {
 public:
  std::vector<p::NewTrialJob> jobs;
  std::vector<std::vector<int64_t>> requests;
  std::vector<std::string> changes;  // "<trial>:<event>"
  std::vector<p::KillTrialJob> kills;
  bool SendJob(const p::NewTrialJob& job) override {
    jobs.push_back(job);
    return true;
  }
  void SendToWorker(const std::string&, p::Body b) override {
    if (auto* k = std::get_if<p::KillTrialJob>(&b)) kills.push_back(*k);
  }
  void Publish(p::Body) override {}
  void RequestParameters(std::vector<int64_t> ids) override { requests.push_back(ids); }
  void TunerResult(const Trial&, const p::Metric&) override {}
  void TunerTrialEnd(const Trial&, bool) override {}
  void AssessorAssess(const Trial&, p::Packed) override {}
  void AssessorTrialEnd(const Trial&, bool) override {}
  void TrialFinished(const Trial&) override {}
  void TunerBarrier() override {}
  void TrialChanged(const Trial& t, std::string_view event, std::string_view) override {
    changes.push_back(t.id + ":" + std::string(event));
  }
};

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.experiment_id = "exp";
    o.concurrency = 3;
    o.max_trials = 4;
    o.ack_timeout = milliseconds(1000);
    engine_ = std::make_unique<Engine>(o, &sink_);
    Trial ended = MakeTrial("T00000", 0);
    ended.state = TrialState::kEnded;
    ended.status = p::TrialStatus::kSucceeded;
    ended.final_metric = MetricOf(0.5);
    Trial running = MakeTrial("T00001", 1);
    running.state = TrialState::kRunning;
    running.worker_id = "w-old";
    running.periodical[0] = MetricOf(0.1);
    Trial waiting = MakeTrial("T00002", 2);
    engine_->Restore(ended, now_, grace_);
    engine_->Restore(running, now_, grace_);
    engine_->Restore(waiting, now_, grace_);
    engine_->RestoreCounters(20, milliseconds(0));
    engine_->Start(now_);
  }
  void Hello(const std::string& w, uint32_t slots, std::vector<p::RunningTrial> running) {
    p::WorkerHello h;
    h.worker_id = w;
    h.slots = slots;
    h.running = std::move(running);
    engine_->OnHello(h, now_);
  }

  MiniSink sink_;
  // Every test also checks the engine's incremental views against its trials.
  void TearDown() override {
    if (engine_) engine_testing::ExpectIncrementalViewsMatchTrials(*engine_);
  }
  std::unique_ptr<Engine> engine_;
  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
  milliseconds grace_{5000};
};

TEST_F(ResumeTest, ARunningTrialReattachesToItsWorkerWithoutANewAttempt) {
  Hello("w-old", 1, {p::RunningTrial{"T00001", 0, 0}});
  const Trial* t = engine_->Find("T00001");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->state, TrialState::kRunning);
  EXPECT_EQ(t->attempt, 0u);
  EXPECT_EQ(t->worker_id, "w-old");
  EXPECT_TRUE(sink_.kills.empty());
  EXPECT_EQ(sink_.changes, std::vector<std::string>{"T00001:reattached"});
  // Its stored metric still counts: a resent duplicate is not new.
  p::ReportMetricData m = MetricData("T00001", p::MetricType::kPeriodical, 0, 0.1);
  m.worker_id = "w-old";
  ASSERT_OK(engine_->OnMetric(m, now_));
  EXPECT_EQ(engine_->Find("T00001")->periodical.size(), 1u);
}

TEST_F(ResumeTest, TheEndOfARestoredRunningTrialFromItsWorkerCounts) {
  // The worker finished while no host ran: it resends the FINAL, then EN,
  // before it is asked for a hello.
  p::ReportMetricData m = MetricData("T00001", p::MetricType::kFinal, 1, 0.8);
  m.worker_id = "w-old";
  ASSERT_OK(engine_->OnMetric(m, now_));
  ASSERT_OK(engine_->OnTrialEnd(
      p::TrialEnd{"T00001", 0, p::TrialStatus::kSucceeded, "", "w-old"}, now_));
  const Trial* t = engine_->Find("T00001");
  EXPECT_EQ(t->state, TrialState::kEnded);
  EXPECT_EQ(t->status, p::TrialStatus::kSucceeded);
  EXPECT_EQ(t->attempt, 0u) << "not run again";
  EXPECT_DOUBLE_EQ(t->final_metric->scalar, 0.8);
  EXPECT_EQ(sink_.changes, (std::vector<std::string>{"T00001:reattached", "T00001:ended"}));
  // An end of an attempt that is not the current one still does not count.
  ASSERT_OK(engine_->OnTrialEnd(
      p::TrialEnd{"T00002", 3, p::TrialStatus::kSucceeded, "", "w-old"}, now_));
  EXPECT_NE(engine_->Find("T00002")->state, TrialState::kEnded);
}

TEST_F(ResumeTest, OnlyTheWorkerThatRanARestoredTrialTakesItBack) {
  // Another worker names the trial in its hello, reports for it and ends
  // it: none of it counts (wire-format.md §5.3), and the trial still waits
  // for its own worker.
  Hello("w-thief", 1, {p::RunningTrial{"T00001", 0, 0}});
  ASSERT_EQ(sink_.kills.size(), 1u);
  EXPECT_EQ(sink_.kills[0].reason, "superseded");
  p::ReportMetricData m = MetricData("T00001", p::MetricType::kFinal, 1, 1e9);
  m.worker_id = "w-thief";
  EXPECT_EQ(engine_->OnMetric(m, now_).code(), Status::Code::kBadState);
  ASSERT_OK(engine_->OnTrialEnd(
      p::TrialEnd{"T00001", 0, p::TrialStatus::kSucceeded, "", "w-thief"}, now_));
  const Trial* t = engine_->Find("T00001");
  EXPECT_EQ(t->state, TrialState::kOffered);
  EXPECT_FALSE(t->final_metric.has_value()) << "a result from a worker that never ran it";
  EXPECT_TRUE(sink_.changes.empty());
  // Nor by a TS: a restored trial is no offer and has no lease.
  for (std::optional<uint64_t> lease : {std::optional<uint64_t>(0), std::optional<uint64_t>()}) {
    EXPECT_EQ(engine_->OnStarted(p::TrialStarted{"w-thief", "T00001", 0, lease}, now_).code(),
              Status::Code::kBadState);
  }
  // Nor handed back by a TJ, which would offer the same attempt to another
  // worker while its own may still run it.
  engine_->OnRejected(p::TrialRejected{"w-thief", "T00001", 0, "no free slot", 0}, now_);
  EXPECT_EQ(engine_->Find("T00001")->state, TrialState::kOffered);
  EXPECT_TRUE(engine_->WorkerInUse("w-old")) << "a restored trial waits for it";
  Hello("w-old", 1, {p::RunningTrial{"T00001", 0, 0}});
  EXPECT_EQ(engine_->Find("T00001")->state, TrialState::kRunning);
  EXPECT_EQ(engine_->Find("T00001")->worker_id, "w-old");
}

TEST_F(ResumeTest, AWorkerThatDoesNotComeBackIsNoLongerWaitedFor) {
  EXPECT_TRUE(engine_->WorkerInUse("w-old"));
  now_ += grace_ + milliseconds(1);
  engine_->Tick(now_);
  EXPECT_EQ(engine_->Find("T00001")->attempt, 1u);
  EXPECT_FALSE(engine_->WorkerInUse("w-old")) << "its id can make room for others' ties";
}

TEST_F(ResumeTest, ARunningTrialWhoseWorkerIsGoneIsReofferedAfterTheGrace) {
  now_ += grace_ - milliseconds(1);
  engine_->Tick(now_);
  EXPECT_EQ(engine_->Find("T00001")->state, TrialState::kOffered) << "still within the grace";
  now_ += milliseconds(2);
  engine_->Tick(now_);
  EXPECT_EQ(engine_->Find("T00001")->state, TrialState::kWaiting);
  EXPECT_EQ(engine_->Find("T00001")->attempt, 1u);
  Hello("w-new", 2, {});
  ASSERT_EQ(sink_.jobs.size(), 2u);
  EXPECT_EQ(sink_.jobs[0].trial_id, "T00001");
  EXPECT_EQ(sink_.jobs[0].attempt, 1u);
  EXPECT_EQ(sink_.jobs[1].trial_id, "T00002");
  EXPECT_EQ(sink_.jobs[1].attempt, 0u);
}

TEST_F(ResumeTest, EndedTrialsCountAgainstTheBudgetAndNumberingContinues) {
  Hello("w-new", 4, {});
  // Budget 4: three trials are stored, so exactly one new one is asked for,
  // with a parameter id after the restored counter.
  ASSERT_EQ(sink_.requests.size(), 1u);
  ASSERT_EQ(sink_.requests[0].size(), 1u) << "three trials stored, budget 4";
  EXPECT_EQ(sink_.requests[0][0], 20);
  engine_->OnParameters(sink_.requests[0], {{20, Params(9)}}, false, Status::Ok(), now_);
  const Trial* t = engine_->Find("T00003");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->sequence_id, 3u);
  ASSERT_EQ(engine_->ended_order().size(), 1u);
  EXPECT_EQ(engine_->ended_order()[0], "T00000");
}

TEST_F(ResumeTest, ATrialThatReportedItsFinalAndLostItsWorkerEndsInsteadOfRunningAgain) {
  EngineOptions o;
  o.experiment_id = "exp";
  o.ack_timeout = milliseconds(1000);
  MiniSink sink;
  Engine e(o, &sink);
  Trial finished = MakeTrial("T00000", 0);
  finished.state = TrialState::kRunning;
  finished.final_metric = MetricOf(0.7);
  e.Restore(finished, now_, grace_);
  e.Start(now_);
  e.Tick(now_ + grace_);
  const Trial* t = e.Find("T00000");
  EXPECT_EQ(t->state, TrialState::kEnded);
  EXPECT_EQ(t->status, p::TrialStatus::kSucceeded);
  EXPECT_EQ(t->attempt, 0u);
  EXPECT_TRUE(sink.jobs.empty()) << "never offered again";
}

TEST_F(ResumeTest, ElapsedTimeCarriesOverTheRestart) {
  EngineOptions o;
  o.experiment_id = "exp";
  o.max_duration = milliseconds(10000);
  MiniSink sink;
  Engine e(o, &sink);
  e.RestoreCounters(0, milliseconds(9000));
  e.Start(now_);
  EXPECT_EQ(e.elapsed(now_), milliseconds(9000));
  p::WorkerHello h;
  h.worker_id = "w";
  h.slots = 1;
  e.OnHello(h, now_);
  EXPECT_EQ(sink.requests.size(), 1u) << "one second of budget left";
  e.Tick(now_ + milliseconds(1000));
  EXPECT_EQ(e.status(), ExperimentStatus::kNoMoreTrial);
}

TEST_F(ResumeTest, AViewedExperimentOffersNothing) {
  EngineOptions o;
  o.experiment_id = "exp";
  MiniSink sink;
  Engine e(o, &sink);
  Trial waiting = MakeTrial("T00000", 0);
  e.Restore(waiting, now_, grace_);
  e.SetViewed();
  p::WorkerHello h;
  h.worker_id = "w";
  h.slots = 1;
  e.OnHello(h, now_);
  e.Stop("stopped");
  EXPECT_EQ(e.status(), ExperimentStatus::kViewed);
  EXPECT_TRUE(sink.jobs.empty());
  EXPECT_TRUE(sink.requests.empty());
  EXPECT_EQ(e.Find("T00000")->state, TrialState::kWaiting);
}

// --- ExecutionEngine operations ---

class ExecutionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.experiment_id = "exp";
    o.concurrency = 2;
    o.max_trials = 3;
    engine_ = std::make_unique<Engine>(o, &sink_);
  }
  void Hello(const std::string& w, uint32_t slots) {
    p::WorkerHello h;
    h.worker_id = w;
    h.slots = slots;
    engine_->OnHello(h, now_);
  }
  // Answers the oldest unanswered request with parameters x = `x`.
  void Answer(int x) {
    ASSERT_LT(answered_, sink_.requests.size());
    auto ids = sink_.requests[answered_++];
    std::vector<std::pair<int64_t, p::Packed>> params;
    for (int64_t id : ids) params.emplace_back(id, Params(x));
    engine_->OnParameters(ids, std::move(params), false, Status::Ok(), now_);
  }
  // Runs the job to a FINAL `value` and a SUCCEEDED end on worker `w`.
  void Finish(const std::string& w, const p::NewTrialJob& job, double value) {
    engine_->OnStarted(p::TrialStarted{w, job.trial_id, job.attempt}, now_);
    p::ReportMetricData m = MetricData(job.trial_id, p::MetricType::kFinal, 0, value);
    m.attempt = job.attempt;
    m.worker_id = w;
    ASSERT_OK(engine_->OnMetric(m, now_));
    ASSERT_OK(engine_->OnTrialEnd(
        p::TrialEnd{job.trial_id, job.attempt, p::TrialStatus::kSucceeded, "", w}, now_));
  }

  MiniSink sink_;
  size_t answered_ = 0;
  // Every test also checks the engine's incremental views against its trials.
  void TearDown() override {
    if (engine_) engine_testing::ExpectIncrementalViewsMatchTrials(*engine_);
  }
  std::unique_ptr<Engine> engine_;
  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
};

TEST_F(ExecutionTest, IdleSlotsAndBudgetFollowWorkersTrialsAndLimits) {
  engine_->Start(now_);
  EXPECT_EQ(engine_->IdleSlots(), 0u) << "no worker yet";
  EXPECT_TRUE(engine_->BudgetAvailable(now_));
  Hello("w", 4);
  EXPECT_EQ(engine_->IdleSlots(), 0u) << "two ids asked of the tuner fill the concurrency";
  Answer(1);
  ASSERT_EQ(sink_.jobs.size(), 2u);
  Finish("w", sink_.jobs[0], 0.5);
  // One slot freed: the engine asked for one more (the third and last of
  // the budget), so nothing is idle and no budget is left.
  EXPECT_EQ(engine_->IdleSlots(), 0u);
  EXPECT_FALSE(engine_->BudgetAvailable(now_));
}

TEST_F(ExecutionTest, CallbacksSeeEventsInOrderAndCanCancelThemOrTheirDefault) {
  std::vector<std::string> seen;
  int first = engine_->AddEventCallback([&](TrialEvent& e) {
    seen.push_back("first:" + std::to_string(static_cast<int>(e.kind)));
    // Intermediate results at sequence 1 are cancelled (later callbacks and
    // the engine never see them).
    if (e.metric && e.metric->sequence == 1) e.cancel = true;
  });
  int ends = 0;
  engine_->AddEventCallback([&](TrialEvent& e) {
    seen.push_back("second:" + std::to_string(static_cast<int>(e.kind)));
    // The first training end is not acted on: the trial keeps running.
    if (e.kind == TrialEventKind::kTrainingEnd && ends++ == 0) e.prevent_default = true;
  });
  engine_->Start(now_);
  Hello("w", 2);
  Answer(1);
  const p::NewTrialJob job = sink_.jobs.at(0);
  engine_->OnStarted(p::TrialStarted{"w", job.trial_id, 0}, now_);
  for (uint64_t seq : {0, 1}) {
    p::ReportMetricData m = MetricData(job.trial_id, p::MetricType::kPeriodical, seq, 0.1);
    m.worker_id = "w";
    ASSERT_OK(engine_->OnMetric(m, now_));
  }
  const Trial* t = engine_->Find(job.trial_id);
  EXPECT_EQ(t->periodical.size(), 1u) << "the cancelled result was not recorded";
  EXPECT_EQ(t->periodical.count(0), 1u);
  p::TrialEnd end{job.trial_id, 0, p::TrialStatus::kSucceeded, "", "w"};
  ASSERT_OK(engine_->OnTrialEnd(end, now_));
  EXPECT_EQ(t->state, TrialState::kRunning) << "default action prevented";
  engine_->RemoveEventCallback(first);
  ASSERT_OK(engine_->OnTrialEnd(end, now_));
  EXPECT_EQ(t->state, TrialState::kEnded);
  EXPECT_EQ(seen, (std::vector<std::string>{"first:0", "second:0", "first:0", "first:2",
                                            "second:2", "second:2"}));
}

TEST_F(ExecutionTest, DeduplicationAnswersARepeatedConfigurationWithoutRunningIt) {
  engine_->AddMiddleware(std::make_unique<DeduplicateMiddleware>());
  engine_->Start(now_);
  Hello("w", 1);
  Answer(7);  // concurrency 2 but one slot: one id asked
  ASSERT_EQ(sink_.jobs.size(), 1u);
  Finish("w", sink_.jobs[0], 0.25);
  Answer(7);  // the tuner proposes the same configuration again
  const Trial* again = engine_->Find("T00001");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->state, TrialState::kEnded);
  EXPECT_EQ(again->status, p::TrialStatus::kSucceeded);
  ASSERT_TRUE(again->final_metric);
  EXPECT_DOUBLE_EQ(again->final_metric->scalar, 0.25);
  EXPECT_EQ(sink_.jobs.size(), 1u) << "never offered to a worker";
  EXPECT_NE(std::find(sink_.changes.begin(), sink_.changes.end(), "T00001:answered"),
            sink_.changes.end());
  // It counted against the budget (3): one more id is asked, for a new
  // configuration that does run.
  Answer(8);
  ASSERT_EQ(sink_.jobs.size(), 2u);
  EXPECT_EQ(sink_.jobs[1].trial_id, "T00002");
}

TEST_F(ExecutionTest, DeduplicationRemembersRestoredResults) {
  auto dedup = std::make_unique<DeduplicateMiddleware>();
  engine_->AddMiddleware(std::move(dedup));
  Trial ended = MakeTrial("T00000", 0);
  ended.parameters = Params(3);
  ended.state = TrialState::kEnded;
  ended.status = p::TrialStatus::kSucceeded;
  ended.final_metric = MetricOf(0.9);
  engine_->Restore(ended, now_, milliseconds(0));
  engine_->Start(now_);
  const Trial* t = nullptr;
  ASSERT_OK(engine_->Submit(Params(3), now_, &t));
  EXPECT_EQ(t->state, TrialState::kEnded);
  EXPECT_DOUBLE_EQ(t->final_metric->scalar, 0.9);
  EXPECT_EQ(t->source, p::ParameterSource::kCustomized);
}

}  // namespace
}  // namespace tunehost::host
