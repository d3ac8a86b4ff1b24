// Unit tests of the trial engine: asking the tuner, its credits (ids it
// answers later), its failures, and the trial budget. Fixture in
// engine_fixture.h.
#include "tunehost/host/engine.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "host/engine_fixture.h"
#include "test_util.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host {
namespace {

namespace p = tunehost::protocol;
using engine_testing::EngineTest;
using engine_testing::Params;

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

}  // namespace
}  // namespace tunehost::host
