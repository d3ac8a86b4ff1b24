// Trials generated ahead of a free slot (EngineOptions::prefetch,
// wire-format.md §5.3): how many are asked for, that a freed slot is offered
// one at once, and that the budgets still hold.
#include <gtest/gtest.h>

#include <string>

#include "host/engine_fixture.h"
#include "test_util.h"
#include "tunehost/host/engine.h"

namespace tunehost::host {
namespace {

namespace p = tunehost::protocol;
using engine_testing::EngineTest;
using engine_testing::RecordingSink;
using std::chrono::milliseconds;

size_t Asked(const RecordingSink& sink) {
  size_t n = 0;
  for (const auto& ids : sink.requests) n += ids.size();
  return n;
}

uint64_t CountOf(const Engine& engine, const std::string& status) {
  for (const auto& [name, n] : engine.CountsByStatus()) {
    if (name == status) return n;
  }
  return 0;
}

TEST_F(EngineTest, WithoutPrefetchTheTunerIsAskedOnlyForAFreeSlot) {
  Make([](EngineOptions& o) { o.concurrency = 2; });
  Hello("w", 2);
  EXPECT_EQ(Asked(sink_), 2u);
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 2u);
  Start("w", sink_.jobs[0]);
  Start("w", sink_.jobs[1]);
  EXPECT_EQ(Asked(sink_), 2u) << "nothing asked while both slots run";
  Metric("w", sink_.jobs[0], p::MetricType::kFinal, 0, 1.0);
  End("w", sink_.jobs[0], p::TrialStatus::kSucceeded);
  EXPECT_EQ(sink_.jobs.size(), 2u) << "the freed slot waits for the tuner";
  EXPECT_EQ(Asked(sink_), 3u);
}

TEST_F(EngineTest, PrefetchKeepsTrialsReadyAndOffersAFreedSlotAtOnce) {
  Make([](EngineOptions& o) {
    o.concurrency = 2;
    o.prefetch = 1;
  });
  Hello("w", 2);
  EXPECT_EQ(Asked(sink_), 3u) << "two for the slots, one ahead";
  AnswerRequest();
  ASSERT_EQ(sink_.jobs.size(), 2u) << "never more offers than the concurrency";
  EXPECT_EQ(CountOf(*engine_, "WAITING"), 3u);
  Start("w", sink_.jobs[0]);
  Start("w", sink_.jobs[1]);
  EXPECT_EQ(Asked(sink_), 3u) << "one ahead is enough";
  Metric("w", sink_.jobs[0], p::MetricType::kFinal, 0, 1.0);
  const size_t calls_before_end = sink_.plugin_calls.size();
  End("w", sink_.jobs[0], p::TrialStatus::kSucceeded);
  ASSERT_EQ(sink_.jobs.size(), 3u) << "the freed slot got the trial made ahead";
  EXPECT_EQ(sink_.jobs[2].sequence_id, 2u);
  // The tuner hears of the end and is asked for the next one ahead.
  ASSERT_GT(sink_.plugin_calls.size(), calls_before_end);
  EXPECT_EQ(sink_.plugin_calls.back().rfind("end:", 0), 0u) << sink_.plugin_calls.back();
  EXPECT_EQ(Asked(sink_), 4u);
  EXPECT_EQ(CountOf(*engine_, "RUNNING"), 1u);
  EXPECT_EQ(CountOf(*engine_, "WAITING"), 1u);  // the offer; the new one is not answered yet
}

TEST_F(EngineTest, PrefetchNeverMakesMoreTrialsThanTheBudget) {
  Make([](EngineOptions& o) {
    o.concurrency = 1;
    o.prefetch = 4;
    o.max_trials = 3;
  });
  Hello("w", 1);
  EXPECT_EQ(Asked(sink_), 3u);
  AnswerRequest();
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(sink_.jobs.size(), i + 1);
    Start("w", sink_.jobs[i]);
    Metric("w", sink_.jobs[i], p::MetricType::kFinal, 0, static_cast<double>(i));
    End("w", sink_.jobs[i], p::TrialStatus::kSucceeded);
  }
  Settle();
  EXPECT_EQ(Asked(sink_), 3u);
  EXPECT_EQ(engine_->stats().created, 3u);
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
  EXPECT_EQ(CountOf(*engine_, "SUCCEEDED"), 3u);
}

TEST_F(EngineTest, PrefetchedTrialsThatNeverStartAreCancelledWhenTimeRunsOut) {
  Make([](EngineOptions& o) {
    o.concurrency = 1;
    o.prefetch = 2;
    o.max_duration = milliseconds(1000);
  });
  p::NewTrialJob job = RunOne("w");
  EXPECT_EQ(CountOf(*engine_, "WAITING"), 2u);
  Advance(milliseconds(1500));
  EXPECT_EQ(CountOf(*engine_, "SYS_CANCELED"), 2u);
  Metric("w", job, p::MetricType::kFinal, 0, 1.0);
  End("w", job, p::TrialStatus::kSucceeded);
  Settle();
  EXPECT_EQ(sink_.jobs.size(), 1u) << "nothing offered after the time budget";
  EXPECT_EQ(engine_->status(), ExperimentStatus::kDone);
}

}  // namespace
}  // namespace tunehost::host
