// Unit tests of the trial engine: who may start, hand back or report for a
// trial (attempts, leases, client trials) and addressed offers. Fixture in
// engine_fixture.h.
#include "tunehost/host/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "host/engine_fixture.h"
#include "test_util.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host {
namespace {

namespace p = tunehost::protocol;
using std::chrono::milliseconds;
using engine_testing::EngineTest;
using engine_testing::MetricOf;
using engine_testing::Params;

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
