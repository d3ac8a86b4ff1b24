// Tests of plugins/medianstop/medianstop_assessor.{h,cc}: NNI's median
// stopping rule. Expected verdicts are worked out by hand from the rule in
// /work/shared/reference/nni-semantics.md: at step S = len(history), Bad when
// the trial's best value is strictly worse than the median (lower median
// when maximizing, upper when minimizing) of the running averages at step S
// of succeeded trials with at least S values.
#include "medianstop/medianstop_assessor.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "assessor_testing.h"
#include "plugin_testing.h"
#include "tunehost/sdk/host.h"

namespace tunehost::plugins::testing {
namespace {

// Succeeded trials and their running averages:
//   A [1, 3, 5]     -> [1, 2, 3]
//   B [4, 4, 4]     -> [4, 4, 4]
//   C [0, 2]        -> [0, 1]
//   D [10, 0, 0, 0] -> [10, 5, 10/3, 2.5]
// Comparison sets: S=1 {0,1,4,10}; S=2 {1,2,4,5} (lower median 2, upper 4);
// S=3 {3, 10/3, 4} (median 10/3); S=4 {2.5}; S>=5 empty.
void AddCompletedTrials(MedianstopAssessor& a) {
  Finish(a, "A", {1, 3, 5});
  Finish(a, "B", {4, 4, 4});
  Finish(a, "C", {0, 2});
  Finish(a, "D", {10, 0, 0, 0});
  ASSERT_EQ(a.completed_count(), 4u);
}

TEST(MedianstopTest, DefaultsAreMaximizeFromStepZero) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, "{}");
  EXPECT_TRUE(a->maximize());
  EXPECT_EQ(a->start_step(), 0);
  EXPECT_EQ(a->completed_count(), 0u);
  auto b = MakeAssessor<MedianstopAssessor>(host,
                                            R"({"optimize_mode": "minimize", "start_step": 9999})");
  EXPECT_FALSE(b->maximize());
  EXPECT_EQ(b->start_step(), 9999);
}

TEST(MedianstopTest, GoodWithoutCompletedTrials) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, "{}");
  EXPECT_TRUE(Assess(*a, "T", {}));  // nothing to judge
  EXPECT_TRUE(Assess(*a, "T", {-1e9}));
  EXPECT_TRUE(Assess(*a, "T", {-1e9, -1e9, -1e9}));
}

TEST(MedianstopTest, MaximizeComparesBestSoFarWithTheLowerMedian) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, R"({"optimize_mode": "maximize"})");
  AddCompletedTrials(*a);
  // S=1, median of {0,1,4,10} at index (4-1)/2 = 1: 1.
  EXPECT_FALSE(Assess(*a, "s1-bad", {0.9}));
  EXPECT_TRUE(Assess(*a, "s1-good", {1.0}));
  // S=2, median 2.
  EXPECT_FALSE(Assess(*a, "s2-bad", {1.5, 1.9}));
  EXPECT_TRUE(Assess(*a, "s2-tie", {0.5, 2.0}));  // not strictly worse
  EXPECT_TRUE(Assess(*a, "s2-best-early", {2.5, 0.0}));  // the best value counts, not the last
  EXPECT_TRUE(Assess(*a, "s2-between", {3.0, 3.0}));  // the upper median (4) would say Bad
  // S=3, median 10/3.
  EXPECT_FALSE(Assess(*a, "s3-bad", {3.3, 3.3, 3.3}));
  EXPECT_TRUE(Assess(*a, "s3-good", {0.0, 3.34, 0.0}));
  // S=4, only D: 2.5.
  EXPECT_FALSE(Assess(*a, "s4-bad", {2.4, 2.4, 2.4, 2.4}));
  EXPECT_TRUE(Assess(*a, "s4-tie", {2.5, 0.0, 0.0, 0.0}));
  // S=5: no succeeded trial is that long.
  EXPECT_TRUE(Assess(*a, "s5", {-100, -100, -100, -100, -100}));
}

TEST(MedianstopTest, MinimizeComparesBestSoFarWithTheUpperMedian) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, R"({"optimize_mode": "minimize"})");
  AddCompletedTrials(*a);
  // S=1, median of {0,1,4,10} at index 4/2 = 2: 4.
  EXPECT_FALSE(Assess(*a, "s1-bad", {4.1}));
  EXPECT_TRUE(Assess(*a, "s1-good", {4.0}));
  // S=2, median 4.
  EXPECT_FALSE(Assess(*a, "s2-bad", {5.0, 4.1}));
  EXPECT_TRUE(Assess(*a, "s2-tie", {5.0, 4.0}));
  EXPECT_TRUE(Assess(*a, "s2-best-early", {3.9, 100.0}));  // the lower median (2) would say Bad
  // S=3, median 10/3.
  EXPECT_FALSE(Assess(*a, "s3-bad", {3.4, 3.4, 3.4}));
  EXPECT_TRUE(Assess(*a, "s3-good", {9.0, 3.3, 9.0}));
  // S=4, 2.5.
  EXPECT_FALSE(Assess(*a, "s4-bad", {2.6, 2.6, 2.6, 2.6}));
  EXPECT_TRUE(Assess(*a, "s4-tie", {9.0, 9.0, 9.0, 2.5}));
  EXPECT_TRUE(Assess(*a, "s5", {100, 100, 100, 100, 100}));
}

TEST(MedianstopTest, OptimizeModeFlipsTheVerdict) {
  RecordingHost host;
  auto up = MakeAssessor<MedianstopAssessor>(host, R"({"optimize_mode": "maximize"})");
  auto down = MakeAssessor<MedianstopAssessor>(host, R"({"optimize_mode": "minimize"})");
  AddCompletedTrials(*up);
  AddCompletedTrials(*down);
  // Low values: bad when maximizing, good when minimizing (S=2: 1.9 < 2; 1.5 <= 4).
  EXPECT_FALSE(Assess(*up, "low", {1.5, 1.9}));
  EXPECT_TRUE(Assess(*down, "low", {1.5, 1.9}));
  // High values: the other way round.
  EXPECT_TRUE(Assess(*up, "high", {9.0, 9.0}));
  EXPECT_FALSE(Assess(*down, "high", {9.0, 9.0}));
}

TEST(MedianstopTest, NoVerdictBeforeStartStep) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, R"({"start_step": 3})");
  Finish(*a, "P", {1, 1, 1, 1});
  ASSERT_EQ(a->completed_count(), 1u);
  EXPECT_TRUE(Assess(*a, "T", {0}));
  EXPECT_TRUE(Assess(*a, "T", {0, 0}));
  // S == start_step is judged: 0 < 1.
  EXPECT_FALSE(Assess(*a, "T", {0, 0, 0}));
  EXPECT_FALSE(Assess(*a, "T", {0, 0, 0, 0}));
}

TEST(MedianstopTest, TrialEndingBeforeStartStepIsNotKept) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, R"({"start_step": 2})");
  // Assessed only at S=1 < start_step: NNI records nothing for it.
  Finish(*a, "early", {100});
  EXPECT_EQ(a->completed_count(), 0u);
  EXPECT_TRUE(host.Logged(TH_LOG_DEBUG, "early"));
  EXPECT_TRUE(Assess(*a, "T", {0, 0}));
}

TEST(MedianstopTest, OnlySucceededTrialsAreKept) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, "{}");
  Finish(*a, "failed", {10, 10}, /*success=*/false);
  EXPECT_EQ(a->completed_count(), 0u);
  EXPECT_TRUE(Assess(*a, "T1", {1, 1}));  // the failed trial does not count
  // Its history is dropped with it: a second (late) end adds nothing.
  a->TrialEnd("failed", true);
  EXPECT_EQ(a->completed_count(), 0u);
  // Unknown trials are ignored.
  a->TrialEnd("never-assessed", true);
  EXPECT_EQ(a->completed_count(), 0u);

  Finish(*a, "ok", {10, 10});
  EXPECT_EQ(a->completed_count(), 1u);
  EXPECT_FALSE(Assess(*a, "T2", {1, 1}));  // 1 < 10
}

TEST(MedianstopTest, CompletedAverageUsesTheHistorySeenWhileRunning) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, "{}");
  // Assessed as its results arrive: [4], then [4, 0]; a later, shorter
  // history does not shorten what was recorded (NNI only appends the tail).
  EXPECT_TRUE(Assess(*a, "X", {4}));
  EXPECT_TRUE(Assess(*a, "X", {4, 0}));
  EXPECT_TRUE(Assess(*a, "X", {4}));
  a->TrialEnd("X", true);
  // Running average of X: [4, 2]. S=2 median 2; S=3 no comparison.
  EXPECT_FALSE(Assess(*a, "T", {1.9, 1.9}));
  EXPECT_TRUE(Assess(*a, "U", {2.0, 0.0}));
  EXPECT_TRUE(Assess(*a, "V", {0, 0, 0}));
  // S=1 compares with X's first value, 4.
  EXPECT_FALSE(Assess(*a, "W", {3.9}));
}

TEST(MedianstopTest, MetricMapsUseTheirDefaultValue) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, "{}");
  Finish(*a, "P", {1, 1});
  msgpack::object_handle low =
      MsgpackOf(Json::parse(R"([{"default": 0.5, "loss": 9}, {"default": 0.5, "loss": 9}])"));
  EXPECT_FALSE(a->AssessTrial("low", low.get()));
  // Integers are numbers too.
  msgpack::object_handle ints = MsgpackOf(Json::parse("[2, 1]"));
  EXPECT_TRUE(a->AssessTrial("ints", ints.get()));
}

TEST(MedianstopTest, MalformedHistoriesAreRefused) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, "{}");
  ExpectMalformedHistoriesRefused(*a);
}

TEST(MedianstopTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) {
    return Constructing<MedianstopAssessor>(host, args);
  };
  ExpectError(construct(R"({"optimize_mode": "sideways"})"), TH_INVALID_ARGUMENT,
              {"\"optimize_mode\""});
  ExpectError(construct(R"({"optimize_mode": 1})"), TH_INVALID_ARGUMENT, {"\"optimize_mode\""});
  ExpectError(construct(R"({"start_step": -1})"), TH_INVALID_ARGUMENT, {"\"start_step\""});
  ExpectError(construct(R"({"start_step": 10000})"), TH_INVALID_ARGUMENT, {"\"start_step\""});
  ExpectError(construct(R"({"start_step": "3"})"), TH_INVALID_ARGUMENT, {"\"start_step\""});
  ExpectError(construct(R"({"start_step": 2.5})"), TH_INVALID_ARGUMENT, {"\"start_step\""});
  ExpectError(construct(R"({"threshold": 0.9})"), TH_INVALID_ARGUMENT, {"\"threshold\""});
  ExpectError(construct("[]"), TH_INVALID_ARGUMENT, {"class_args must be a map"});
}

TEST(MedianstopTest, SavedStateRestoresCompletedAndRunningTrials) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, "{}");
  AddCompletedTrials(*a);
  Assess(*a, "R", {9, 9, 9, 9, 9});  // still running
  const std::string state = a->SaveState();

  auto b = MakeAssessor<MedianstopAssessor>(host, "{}");
  b->LoadState(state);
  EXPECT_EQ(b->completed_count(), 4u);
  EXPECT_FALSE(Assess(*b, "s2-bad", {1.5, 1.9}));
  EXPECT_TRUE(Assess(*b, "s2-tie", {0.5, 2.0}));
  EXPECT_FALSE(Assess(*b, "s3-bad", {3.3, 3.3, 3.3}));
  EXPECT_TRUE(Assess(*b, "s5", {8, 8, 8, 8, 8}));
  // R's history came along: once it succeeds, S=5 compares with its 9.
  b->TrialEnd("R", true);
  EXPECT_EQ(b->completed_count(), 5u);
  EXPECT_FALSE(Assess(*b, "s5-after", {8, 8, 8, 8, 8}));
}

TEST(MedianstopTest, BadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto a = MakeAssessor<MedianstopAssessor>(host, "{}");
  AddCompletedTrials(*a);
  ExpectError([&] { a->LoadState("\xc1"); }, TH_INVALID_ARGUMENT, {"saved state"});
  const std::string other = PackText(R"({"format": "org.tunehost.random", "version": 1})");
  ExpectError([&] { a->LoadState(other); }, TH_INVALID_ARGUMENT,
              {"saved state", "not a state of format org.tunehost.medianstop"});
  const std::string bad_value =
      PackText(R"({"format": "org.tunehost.medianstop", "version": 1, "running": {},
                   "completed": {"A": [1, "x"]}})");
  ExpectError([&] { a->LoadState(bad_value); }, TH_INVALID_ARGUMENT, {"saved state", "completed"});
  EXPECT_EQ(a->completed_count(), 4u);
  EXPECT_FALSE(Assess(*a, "s2-bad", {1.5, 1.9}));
}

}  // namespace
}  // namespace tunehost::plugins::testing
