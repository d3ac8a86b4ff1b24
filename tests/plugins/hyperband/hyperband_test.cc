// Tests of plugins/hyperband: the `hyperband` tuner (NNI's Hyperband
// advisor): bracket table, TRIAL_BUDGET, promotion of the best
// configurations, failures, the credit pattern, serial and parallel brackets.
// Search space and class_args checks, seeds, state, import and the module are
// in hyperband_args_state_test.cc, BOHB in bohb_test.cc; what they share is in
// hyperband_fixture.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hyperband/hyperband_tuner.h"
#include "hyperband_fixture.h"
#include "plugin_testing.h"
#include "tunehost/sdk/host.h"
#include "tunehost/sdk/tuner.h"
#include "tuner_testing.h"

namespace tunehost::plugins::hyperband {
namespace {

using testing::AbiTuner;
using testing::Json;
using testing::MakeTuner;
using testing::RecordingHost;

using hyperband_testing::Driver;
using hyperband_testing::kOneX;
using hyperband_testing::Simulation;
using hyperband_testing::Table;
using hyperband_testing::TableOf;
using hyperband_testing::Trial;

std::optional<double> ValueOfX(const Json& p) { return p["x"].get<double>(); }

// --- Bracket geometry ---

// NNI's code for R=81, eta=3 (Bracket: n = ceil((s_max+1)·eta^s/(s+1)),
// r = R/eta^s; round i: floor(n/eta^i), floor(r·eta^i)). Brackets s=3..1
// start 34, 15 and 8 configurations: the 27/9/6 of the table in NNI's
// docstring and the Hyperband paper do not follow from that formula.
const Table kR81 = {
    {{5, 81}},
    {{8, 27}, {2, 81}},
    {{15, 9}, {5, 27}, {1, 81}},
    {{34, 3}, {11, 9}, {3, 27}, {1, 81}},
    {{81, 1}, {27, 3}, {9, 9}, {3, 27}, {1, 81}},
};

// NNI's defaults R=60, eta=3.
const Table kR60 = {
    {{4, 60}},
    {{6, 20}, {2, 60}},
    {{12, 6}, {4, 20}, {1, 60}},
    {{27, 2}, {9, 6}, {3, 20}, {1, 60}},
};

TEST(HyperbandGeometryTest, SMaxIsExactInIntegers) {
  EXPECT_EQ(Geometry::SMax(1, 81, 3), 4);  // log(81)/log(3) = 4.000000000000001
  EXPECT_EQ(Geometry::SMax(1, 80, 3), 3);
  EXPECT_EQ(Geometry::SMax(1, 243, 3), 5);
  EXPECT_EQ(Geometry::SMax(1, 1000, 10), 3);  // log(1000)/log(10) = 2.9999999999999996
  EXPECT_EQ(Geometry::SMax(1, 999, 10), 2);
  EXPECT_EQ(Geometry::SMax(1, 60, 3), 3);
  EXPECT_EQ(Geometry::SMax(1, 1, 3), 0);
  EXPECT_EQ(Geometry::SMax(1, 2, 3), 0);
  EXPECT_EQ(Geometry::SMax(1, 3, 3), 1);  // BOHB defaults
  EXPECT_EQ(Geometry::SMax(2, 18, 3), 2);
  EXPECT_EQ(Geometry::SMax(1, 1000000, 2), 19);
}

TEST(HyperbandGeometryTest, BracketTablesFollowNnisFormula) {
  RecordingHost host;
  auto r81 = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 81, "eta": 3, "seed": 1})");
  EXPECT_EQ(r81->geometry().s_max(), 4);
  EXPECT_EQ(TableOf(r81->geometry()), kR81);
  auto defaults = MakeTuner<HyperbandTuner>(host, kOneX, R"({"seed": 1})");
  EXPECT_EQ(defaults->geometry().R(), 60);
  EXPECT_EQ(defaults->geometry().eta(), 3);
  EXPECT_EQ(TableOf(defaults->geometry()), kR60);
  EXPECT_TRUE(defaults->maximize());
  EXPECT_FALSE(defaults->serial());
}

// Drives a whole serial iteration and counts what was actually handed out.
void ExpectIterationFollows(const std::string& class_args, const Table& table) {
  RecordingHost host;
  auto tuner = MakeTuner<HyperbandTuner>(host, kOneX, class_args);
  size_t per_iteration = 0;
  for (const auto& bracket : table) {
    for (const auto& [n, r] : bracket) per_iteration += static_cast<size_t>(n);
  }
  Simulation sim(1000, ValueOfX);
  std::vector<Trial> log = sim.Run(*tuner, host, per_iteration + 1);
  ASSERT_EQ(log.size(), per_iteration + 1);

  std::map<std::pair<int, int>, int64_t> counts;
  std::vector<int> bracket_order;
  for (size_t k = 0; k < per_iteration; ++k) {
    const Trial& t = log[k];
    EXPECT_EQ(t.where.iteration, 0);
    ++counts[{t.where.s, t.where.round}];
    if (bracket_order.empty() || bracket_order.back() != t.where.s) {
      bracket_order.push_back(t.where.s);
    }
    // TRIAL_BUDGET: an integer, the round's r_i, added last.
    ASSERT_TRUE(t.params.contains("TRIAL_BUDGET")) << t.params;
    ASSERT_TRUE(t.params["TRIAL_BUDGET"].is_number_integer()) << t.params;
    EXPECT_EQ(t.params["TRIAL_BUDGET"].get<int64_t>(),
              table[static_cast<size_t>(t.where.s)][static_cast<size_t>(t.where.round)].second);
    EXPECT_EQ(t.params["TRIAL_BUDGET"].get<int64_t>(), t.where.budget);
    EXPECT_EQ(t.params.size(), 2u);
    EXPECT_EQ(t.params.items().begin().key(), "x");
  }
  for (int s = 0; s < static_cast<int>(table.size()); ++s) {
    for (int i = 0; i <= s; ++i) {
      EXPECT_EQ((counts[{s, i}]), table[static_cast<size_t>(s)][static_cast<size_t>(i)].first)
          << "bracket s=" << s << " round " << i;
    }
  }
  // Brackets s_max, ..., 0, one after the other (serial), then NNI starts a
  // new iteration with s_max.
  std::vector<int> expected_order;
  for (int s = static_cast<int>(table.size()) - 1; s >= 0; --s) expected_order.push_back(s);
  EXPECT_EQ(bracket_order, expected_order);
  const Trial& next = log.back();
  EXPECT_EQ(next.where.iteration, 1);
  EXPECT_EQ(next.where.s, static_cast<int>(table.size()) - 1);
  EXPECT_EQ(next.where.round, 0);
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "iteration 1 starts over"));
}

TEST(HyperbandTest, AnIterationHandsOutTheTableR81) {
  ExpectIterationFollows(R"({"R": 81, "eta": 3, "exec_mode": "serial", "seed": 3})", kR81);
}

TEST(HyperbandTest, AnIterationHandsOutTheTableWithDefaults) {
  ExpectIterationFollows(R"({"exec_mode": "serial", "seed": 4})", kR60);
}

// --- Promotion ---

// R=9, eta=3: bracket s=2 runs 9 at budget 1, the best 3 at 3, the best 1 at 9.
void ExpectPromotionPicksTheBest(bool maximize) {
  RecordingHost host;
  auto tuner = MakeTuner<HyperbandTuner>(
      host, kOneX,
      std::string(R"({"R": 9, "eta": 3, "exec_mode": "serial", "seed": 7, "optimize_mode": )") +
          (maximize ? "\"maximize\"}" : "\"minimize\"}"));
  Driver d;
  std::vector<Trial> round0 = d.Ask(*tuner, 9);
  ASSERT_EQ(round0.size(), 9u);
  std::vector<double> xs;
  for (const Trial& t : round0) {
    EXPECT_EQ(t.params["TRIAL_BUDGET"], 1);
    xs.push_back(t.params["x"].get<double>());
    d.Finish(*tuner, t.id, t.params["x"].get<double>());
  }
  std::sort(xs.begin(), xs.end());
  if (maximize) std::reverse(xs.begin(), xs.end());

  std::vector<Trial> round1 = d.Ask(*tuner, 3);
  ASSERT_EQ(round1.size(), 3u);
  std::vector<double> promoted;
  for (const Trial& t : round1) {
    EXPECT_EQ(t.where.round, 1);
    EXPECT_EQ(t.params["TRIAL_BUDGET"], 3);
    promoted.push_back(t.params["x"].get<double>());
  }
  // The very same values, best first, under new ids.
  EXPECT_EQ(promoted, std::vector<double>(xs.begin(), xs.begin() + 3));
  for (const Trial& t : round1) EXPECT_GE(t.id, 9);
  // Same bytes apart from the budget.
  for (const Trial& t : round1) {
    auto same = std::find_if(round0.begin(), round0.end(),
                             [&](const Trial& r) { return r.params["x"] == t.params["x"]; });
    ASSERT_NE(same, round0.end());
    Json a = same->params;
    Json b = t.params;
    a.erase("TRIAL_BUDGET");
    b.erase("TRIAL_BUDGET");
    EXPECT_EQ(Json::to_msgpack(a), Json::to_msgpack(b));
  }

  // Round 1 reports the opposite order: the worst x of the three wins now.
  for (const Trial& t : round1) d.Finish(*tuner, t.id, -t.params["x"].get<double>());
  std::vector<Trial> round2 = d.Ask(*tuner, 1);
  ASSERT_EQ(round2.size(), 1u);
  EXPECT_EQ(round2[0].params["TRIAL_BUDGET"], 9);
  EXPECT_EQ(round2[0].where.round, 2);
  EXPECT_EQ(round2[0].params["x"].get<double>(), xs[2]);
}

TEST(HyperbandTest, PromotionReissuesTheBestConfigurationsMaximize) {
  ExpectPromotionPicksTheBest(true);
}

TEST(HyperbandTest, PromotionReissuesTheBestConfigurationsMinimize) {
  ExpectPromotionPicksTheBest(false);
}

TEST(HyperbandTest, FailedTrialsRankBelowEveryResult) {
  for (bool maximize : {true, false}) {
    RecordingHost host;
    auto tuner = MakeTuner<HyperbandTuner>(
        host, kOneX,
        std::string(R"({"R": 9, "exec_mode": "serial", "seed": 8, "optimize_mode": )") +
            (maximize ? "\"maximize\"}" : "\"minimize\"}"));
    Driver d;
    std::vector<Trial> round0 = d.Ask(*tuner, 9);
    ASSERT_EQ(round0.size(), 9u);
    // The first four fail, end without a result, or report NaN; the others
    // report 100 + k. Whatever the direction, the four must lose.
    d.Fail(*tuner, round0[0].id);
    tuner->TrialEnd(round0[1].id, true);  // succeeded without any result
    d.Result(*tuner, round0[2].id, std::nan(""));
    tuner->TrialEnd(round0[2].id, true);
    d.Fail(*tuner, round0[3].id);
    for (size_t k = 4; k < 9; ++k) d.Finish(*tuner, round0[k].id, 100.0 + static_cast<double>(k));
    std::vector<Trial> round1 = d.Ask(*tuner, 3);
    ASSERT_EQ(round1.size(), 3u);
    std::vector<double> expected;
    if (maximize) {
      expected = {round0[8].params["x"].get<double>(), round0[7].params["x"].get<double>(),
                  round0[6].params["x"].get<double>()};
    } else {
      expected = {round0[4].params["x"].get<double>(), round0[5].params["x"].get<double>(),
                  round0[6].params["x"].get<double>()};
    }
    std::vector<double> got;
    for (const Trial& t : round1) got.push_back(t.params["x"].get<double>());
    EXPECT_EQ(got, expected) << (maximize ? "maximize" : "minimize");
  }
}

TEST(HyperbandTest, ARoundOfMostlyFailuresStillPromotes) {
  RecordingHost host;
  auto tuner =
      MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "exec_mode": "serial", "seed": 9})");
  Driver d;
  std::vector<Trial> round0 = d.Ask(*tuner, 9);
  ASSERT_EQ(round0.size(), 9u);
  for (size_t k = 0; k < 9; ++k) {
    if (k == 5) {
      d.Finish(*tuner, round0[k].id, 1.0);
    } else {
      d.Fail(*tuner, round0[k].id);
    }
  }
  // NNI would raise IndexError here (fewer results than n_1 = 3).
  std::vector<Trial> round1 = d.Ask(*tuner, 3);
  ASSERT_EQ(round1.size(), 3u);
  EXPECT_EQ(round1[0].params["x"], round0[5].params["x"]);  // the one with a result first
  EXPECT_EQ(round1[1].params["x"], round0[0].params["x"]);  // then issue order
  EXPECT_EQ(round1[2].params["x"], round0[1].params["x"]);
}

// --- Credit pattern, serial and parallel brackets ---

TEST(HyperbandTest, IdsAskedForWhileARoundRunsAreServedLater) {
  RecordingHost host;
  auto tuner =
      MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "exec_mode": "serial", "seed": 10})");
  Driver d;
  std::vector<Trial> round0 = d.Ask(*tuner, 9);
  ASSERT_EQ(round0.size(), 9u);
  bool all = true;
  EXPECT_TRUE(d.Ask(*tuner, 2, &all).empty());  // ids 9 and 10
  EXPECT_FALSE(all);
  EXPECT_EQ(tuner->credits(), (std::vector<int64_t>{9, 10}));
  for (size_t k = 0; k < 8; ++k) d.Finish(*tuner, round0[k].id, static_cast<double>(k));
  EXPECT_TRUE(host.sent().empty()) << "nothing to hand out before the round has ended";
  d.Finish(*tuner, round0[8].id, 8.0);
  // The round ended: exactly the kept ids get the first two promoted
  // configurations (the best, x of trials 8 and 7).
  std::vector<Trial> sent = d.TakeSent(*tuner, host);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].id, 9);
  EXPECT_EQ(sent[1].id, 10);
  EXPECT_EQ(sent[0].params["x"], round0[8].params["x"]);
  EXPECT_EQ(sent[1].params["x"], round0[7].params["x"]);
  EXPECT_EQ(sent[0].params["TRIAL_BUDGET"], 3);
  EXPECT_TRUE(tuner->credits().empty());
  // The third promoted configuration goes to the next id asked for.
  std::vector<Trial> third = d.Ask(*tuner, 1, &all);
  EXPECT_TRUE(all);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].id, 11);
  EXPECT_EQ(third[0].params["x"], round0[6].params["x"]);
  // Round 1 runs: waiting again.
  EXPECT_TRUE(d.Ask(*tuner, 1, &all).empty());
  EXPECT_FALSE(all);
  EXPECT_EQ(tuner->credits(), (std::vector<int64_t>{12}));
}

TEST(HyperbandTest, RefusedCreditIsDroppedAndItsConfigurationGoesToTheNextId) {
  RecordingHost host;
  auto tuner =
      MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "exec_mode": "serial", "seed": 11})");
  Driver d;
  std::vector<Trial> round0 = d.Ask(*tuner, 9);
  EXPECT_TRUE(d.Ask(*tuner, 1).empty());  // id 9 kept
  host.send_trial_status = TH_INVALID_ARGUMENT;
  for (const Trial& t : round0) d.Finish(*tuner, t.id, t.params["x"].get<double>());
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "refused parameter id 9"));
  EXPECT_TRUE(tuner->credits().empty());
  host.send_trial_status = TH_OK;
  std::vector<Trial> next = d.Ask(*tuner, 3);
  ASSERT_EQ(next.size(), 3u);  // all three promoted configurations are still there
  for (const Trial& t : next) EXPECT_EQ(t.params["TRIAL_BUDGET"], 3);
}

TEST(HyperbandTest, WaitingReachesTheHostAsNoMoreTrialsWithNothingEmitted) {
  RecordingHost host;
  auto t = AbiTuner::Of<HyperbandTuner>(host, R"({"R": 3, "exec_mode": "serial", "seed": 5})");
  ASSERT_EQ(t->UpdateSearchSpace(kOneX), TH_OK) << t->message();
  // R=3: bracket s=1 starts ceil(2·3/2) = 3 configurations.
  EXPECT_EQ(t->Generate({0, 1, 2, 3, 4}), TH_NO_MORE_TRIALS);
  EXPECT_EQ(t->emitted_ids(), (std::vector<int64_t>{0, 1, 2}));
  t->clear_emitted();
  EXPECT_EQ(t->Generate({5}), TH_NO_MORE_TRIALS);
  EXPECT_TRUE(t->emitted_ids().empty());
}

TEST(HyperbandTest, ParallelismStartsTheNextBracketWhenNothingElseCanRun) {
  RecordingHost host;
  auto tuner = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 12})");
  Driver d;
  ASSERT_EQ(d.Ask(*tuner, 9).size(), 9u);  // bracket s=2, round 0
  bool all = false;
  std::vector<Trial> more = d.Ask(*tuner, 6, &all);
  EXPECT_TRUE(all);
  ASSERT_EQ(more.size(), 6u);
  for (size_t k = 0; k < 5; ++k) {  // bracket s=1: ceil(3·3/2) = 5 at budget 3
    EXPECT_EQ(more[k].where.s, 1);
    EXPECT_EQ(more[k].params["TRIAL_BUDGET"], 3);
  }
  EXPECT_EQ(more[5].where.s, 0);  // then s=0: 3 at budget 9
  EXPECT_EQ(more[5].params["TRIAL_BUDGET"], 9);
  EXPECT_EQ(tuner->open_brackets(), 3u);
  // Then the next iteration, as NNI: parallelism never waits.
  std::vector<Trial> rest = d.Ask(*tuner, 3, &all);
  EXPECT_TRUE(all);
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[2].where.iteration, 1);
  EXPECT_EQ(rest[2].where.s, 2);
  EXPECT_TRUE(tuner->credits().empty());
}

TEST(HyperbandTest, SerialStartsTheNextBracketOnlyWhenTheCurrentOneHasEnded) {
  RecordingHost host;
  auto tuner =
      MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "exec_mode": "serial", "seed": 13})");
  EXPECT_TRUE(tuner->serial());
  Driver d;
  std::vector<Trial> round0 = d.Ask(*tuner, 9);
  bool all = true;
  EXPECT_TRUE(d.Ask(*tuner, 1, &all).empty());
  EXPECT_FALSE(all);
  EXPECT_EQ(tuner->open_brackets(), 1u);
  for (const Trial& t : round0) d.Finish(*tuner, t.id, t.params["x"].get<double>());
  std::vector<Trial> round1 = d.TakeSent(*tuner, host);
  ASSERT_EQ(round1.size(), 1u);  // the one kept id
  for (const Trial& t : d.Ask(*tuner, 2)) round1.push_back(t);
  ASSERT_EQ(round1.size(), 3u);
  for (const Trial& t : round1) d.Finish(*tuner, t.id, t.params["x"].get<double>());
  std::vector<Trial> last = d.Ask(*tuner, 1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].where.round, 2);
  // Everything of bracket s=2 has been handed out, but it still runs.
  EXPECT_TRUE(d.Ask(*tuner, 1, &all).empty());
  EXPECT_FALSE(all);
  d.Finish(*tuner, last[0].id, 1.0);
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "bracket s=2 of iteration 0 finished"));
  std::vector<Trial> next = d.TakeSent(*tuner, host);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].where.s, 1);
  EXPECT_EQ(next[0].params["TRIAL_BUDGET"], 3);
}

}  // namespace
}  // namespace tunehost::plugins::hyperband
