// Unit tests of the trial engine alone: a recording sink stands in for the
// sockets and plugin strands, and the tests drive time explicitly. Here:
// offers, workers, results and their limits. The tuner and the budget, who may
// start or report a trial, and control are in engine_*_test.cc beside this
// file; the fixture is in engine_fixture.h.
#include "tunehost/host/engine.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "host/engine_fixture.h"
#include "test_util.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {
namespace {

namespace p = tunehost::protocol;
using std::chrono::milliseconds;
using engine_testing::EngineTest;

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

// A metric's event is built only when the sink wants it (nobody subscribed);
// everything else a metric does happens all the same.
TEST_F(EngineTest, MetricEventsNobodyWantsAreSkippedAndNothingElseIs) {
  sink_.unwanted_events = {"ME"};
  Make([](EngineOptions& o) { o.concurrency = 1; });
  Hello("w1", 1);
  AnswerRequest();
  auto job = sink_.jobs.at(0);
  Start("w1", job);
  Metric("w1", job, p::MetricType::kPeriodical, 0, 0.5);
  Metric("w1", job, p::MetricType::kFinal, 0, 0.25);
  End("w1", job, p::TrialStatus::kSucceeded);
  EXPECT_EQ(sink_.Sent<p::MetricAck>("w1").size(), 2u);
  EXPECT_EQ(engine_->Find(job.trial_id)->periodical.size(), 1u);
  EXPECT_EQ(engine_->Find(job.trial_id)->final_metric->scalar, 0.25);
  ASSERT_FALSE(sink_.plugin_calls.empty());
  EXPECT_EQ(sink_.plugin_calls.front().rfind("result:", 0), 0u);  // the tuner got the FINAL
  EXPECT_NE(sink_.plugin_calls.front().find(":0.25"), std::string::npos);
  size_t metric_events = 0, end_events = 0;
  for (const auto& b : sink_.published) {
    metric_events += std::holds_alternative<p::ReportMetricData>(b);
    end_events += std::holds_alternative<p::TrialEnd>(b);
  }
  EXPECT_EQ(metric_events, 0u);
  EXPECT_EQ(end_events, 1u);
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

}  // namespace
}  // namespace tunehost::host
