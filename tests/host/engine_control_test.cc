// Unit tests of the trial engine's control side: added trials, Stop,
// KillTrial, UpdateLimits and the listing. Fixture in engine_fixture.h.
#include "tunehost/host/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <string>
#include <utility>
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
using engine_testing::Params;

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
