// Tests of plugins/hyperband: the `hyperband` and `bohb` tuners (NNI's
// Hyperband and BOHB advisors): bracket table, TRIAL_BUDGET, promotion of the
// best configurations, failures, the credit pattern, serial and parallel
// brackets, BOHB's model, class_args and search space checks, seeds, state,
// import, and the module exporting both classes.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hyperband/bohb_tuner.h"
#include "hyperband/hyperband_tuner.h"
#include "plugin_testing.h"
#include "tunehost/sdk/host.h"
#include "tunehost/sdk/tuner.h"
#include "tuner_testing.h"

namespace tunehost::plugins::hyperband {
namespace {

using testing::AbiTuner;
using testing::Constructing;
using testing::ExpectError;
using testing::ExpectNonArrayImportRefused;
using testing::Generated;
using testing::GenerateMultiple;
using testing::Import;
using testing::Json;
using testing::MakeTuner;
using testing::Msgpack;
using testing::Pack;
using testing::PackText;
using testing::RecordingHost;
using testing::ReportResult;
using testing::ToJson;
using testing::Update;
using testing::Updating;

const char* kOneX = R"({"x": {"_type": "uniform", "_value": [0, 100]}})";

// One trial as the host saw it: id, the exact bytes, and where the tuner
// placed it (asked right after it was handed out).
struct Trial {
  int64_t id = 0;
  std::string bytes;
  Json params;
  Placement where;
};

// Plays the host: hands out ids, delivers results and ends, collects what
// the tuner sends later through send_trial. Copyable, so a test can save a
// tuner's state together with the host's view of it.
class Driver {
 public:
  // Asks for `n` ids at once; returns the trials emitted now.
  std::vector<Trial> Ask(BracketTuner& tuner, size_t n, bool* all = nullptr) {
    std::vector<int64_t> ids;
    for (size_t i = 0; i < n; ++i) ids.push_back(next_id++);
    Generated g = GenerateMultiple(tuner, ids);
    std::vector<Trial> out;
    for (auto& [id, bytes] : g.emitted) out.push_back(Record(id, std::move(bytes)));
    for (Trial& t : out) Place(tuner, t);
    if (all != nullptr) *all = g.all;
    return out;
  }

  // Trials the tuner sent through send_trial since the last call.
  std::vector<Trial> TakeSent(BracketTuner& tuner, RecordingHost& host) {
    std::vector<Trial> out;
    for (const auto& [id, bytes] : host.sent()) {
      out.push_back(Record(id, bytes));
      Place(tuner, out.back());
    }
    host.clear_sent();
    return out;
  }

  void Result(BracketTuner& tuner, int64_t id, double value) {
    ReportResult(tuner, id, params_.at(id), value);
  }
  void Finish(BracketTuner& tuner, int64_t id, double value) {
    Result(tuner, id, value);
    tuner.TrialEnd(id, true);
  }
  void Fail(BracketTuner& tuner, int64_t id) { tuner.TrialEnd(id, false); }

  int64_t next_id = 0;

 private:
  Trial Record(int64_t id, std::string bytes) {
    Trial t;
    t.id = id;
    t.params = ToJson(bytes);
    t.bytes = std::move(bytes);
    params_[id] = t.bytes;
    return t;
  }
  static void Place(BracketTuner& tuner, Trial& t) {
    std::optional<Placement> p = tuner.Locate(t.id);
    ASSERT_TRUE(p.has_value()) << "id " << t.id << " handed out but unknown to the tuner";
    t.where = *p;
  }

  std::map<int64_t, std::string> params_;
};

// A host loop with `concurrency` slots: asks for free slots, ends the oldest
// running trial with objective(params) (nullopt: it fails), takes what the
// tuner sends later. Like tunehost, it asks again only after a trial ended
// once the tuner said "no more for now".
class Simulation {
 public:
  using Objective = std::function<std::optional<double>(const Json&)>;

  Simulation(size_t concurrency, Objective objective)
      : concurrency_(concurrency), objective_(std::move(objective)) {}

  // Runs until `trials` more trials have been handed out (or nothing runs);
  // returns them in order. Trials the tuner sent beyond that are returned
  // by the next call.
  std::vector<Trial> Run(BracketTuner& tuner, RecordingHost& host, size_t trials) {
    std::vector<Trial> log = std::move(leftover_);
    leftover_.clear();
    while (log.size() < trials) {
      while (!exhausted_ && running_.size() < concurrency_ && log.size() < trials) {
        bool all = true;
        const size_t n = std::min(concurrency_ - running_.size(), trials - log.size());
        std::vector<Trial> got = driver_.Ask(tuner, n, &all);
        for (Trial& t : got) {
          running_.push_back(t);
          log.push_back(t);
        }
        if (!all) exhausted_ = true;
      }
      if (running_.empty() || log.size() >= trials) break;
      Trial t = running_.front();
      running_.pop_front();
      std::optional<double> v = objective_(t.params);
      if (v) {
        driver_.Finish(tuner, t.id, *v);
      } else {
        driver_.Fail(tuner, t.id);
      }
      exhausted_ = false;
      for (Trial& s : driver_.TakeSent(tuner, host)) {
        running_.push_back(s);
        log.push_back(s);
      }
    }
    if (log.size() > trials) {
      leftover_.assign(log.begin() + static_cast<std::ptrdiff_t>(trials), log.end());
      log.resize(trials);
    }
    return log;
  }

 private:
  size_t concurrency_;
  Objective objective_;
  Driver driver_;
  std::deque<Trial> running_;
  std::vector<Trial> leftover_;
  bool exhausted_ = false;
};

std::optional<double> ValueOfX(const Json& p) { return p["x"].get<double>(); }

// --- Bracket geometry ---

using Table = std::vector<std::vector<std::pair<int64_t, int64_t>>>;  // [s][i] = (n_i, r_i)

Table TableOf(const Geometry& g) {
  Table t(static_cast<size_t>(g.s_max() + 1));
  for (int s = 0; s <= g.s_max(); ++s) {
    for (int i = 0; i <= s; ++i) t[static_cast<size_t>(s)].emplace_back(g.Count(s, i), g.Budget(s, i));
  }
  return t;
}

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

// --- Search space and class_args ---

TEST(HyperbandTest, NestedChoicesAndATrialBudgetKeyAreRefusedNamingTheKey) {
  RecordingHost host;
  auto hb = MakeTuner<HyperbandTuner>(host, kOneX, R"({"seed": 1})");
  auto bohb = MakeTuner<BohbTuner>(host, kOneX, R"({"seed": 1})");
  for (BracketTuner* tuner : std::vector<BracketTuner*>{hb.get(), bohb.get()}) {
    auto update = [tuner](const std::string& space) { return Updating(*tuner, space); };
    ExpectError(update(R"({"lr": {"_type": "uniform", "_value": [0, 1]},
                           "opt": {"_type": "choice", "_value": [
                             {"_name": "sgd", "m": {"_type": "uniform", "_value": [0, 1]}},
                             {"_name": "adam"}]}})"),
                TH_INVALID_ARGUMENT, {"\"opt\"", "nested"});
    ExpectError(update(R"({"TRIAL_BUDGET": {"_type": "choice", "_value": [1, 2]}})"),
                TH_INVALID_ARGUMENT, {"\"TRIAL_BUDGET\"", "reserved"});
    ExpectError(update(R"({"lr": {"_type": "loguniform", "_value": [0, 1]}})"),
                TH_INVALID_ARGUMENT, {"\"lr\""});
  }
  // A refused update keeps the previous space.
  Driver d;
  std::vector<Trial> t = d.Ask(*hb, 1);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_TRUE(t[0].params.contains("x"));
  // Every other type is accepted, values as the SDK packs them.
  const char* all_types = R"({
    "c": {"_type": "choice", "_value": ["a", 2]},
    "ri": {"_type": "randint", "_value": [1, 4]},
    "qu": {"_type": "quniform", "_value": [0, 10, 5]},
    "lu": {"_type": "loguniform", "_value": [0.01, 1]},
    "qlu": {"_type": "qloguniform", "_value": [1, 100, 1]},
    "n": {"_type": "normal", "_value": [0, 1]},
    "qn": {"_type": "qnormal", "_value": [0, 1, 0.5]},
    "ln": {"_type": "lognormal", "_value": [0, 1]},
    "qln": {"_type": "qlognormal", "_value": [0, 1, 1]}})";
  auto fresh = MakeTuner<HyperbandTuner>(host, kOneX, R"({"seed": 2})");
  Update(*fresh, all_types);
  std::vector<Trial> typed = d.Ask(*fresh, 1);
  ASSERT_EQ(typed.size(), 1u);
  EXPECT_EQ(typed[0].params.size(), 10u);
  EXPECT_TRUE(typed[0].params["ri"].is_number_integer());
}

TEST(HyperbandTest, GenerateBeforeASearchSpaceIsABadState) {
  RecordingHost host;
  auto tuner = MakeTuner<HyperbandTuner>(host, "", R"({"seed": 1})");
  Driver d;
  ExpectError([&] { d.Ask(*tuner, 1); }, TH_BAD_STATE, {"no search space"});
}

TEST(HyperbandTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) {
    return Constructing<HyperbandTuner>(host, args);
  };
  ExpectError(construct(R"({"R": 0})"), TH_INVALID_ARGUMENT, {"hyperband", "\"R\""});
  ExpectError(construct(R"({"R": 2.5})"), TH_INVALID_ARGUMENT, {"\"R\""});
  ExpectError(construct(R"({"R": "60"})"), TH_INVALID_ARGUMENT, {"\"R\""});
  ExpectError(construct(R"({"R": 1000001})"), TH_INVALID_ARGUMENT, {"\"R\""});
  ExpectError(construct(R"({"eta": 1})"), TH_INVALID_ARGUMENT, {"\"eta\""});
  ExpectError(construct(R"({"exec_mode": "sideways"})"), TH_INVALID_ARGUMENT, {"\"exec_mode\""});
  ExpectError(construct(R"({"optimize_mode": "up"})"), TH_INVALID_ARGUMENT, {"\"optimize_mode\""});
  ExpectError(construct(R"({"seed": -1})"), TH_INVALID_ARGUMENT, {"\"seed\""});
  ExpectError(construct(R"({"r": 60})"), TH_INVALID_ARGUMENT, {"\"r\""});
  ExpectError(construct(R"({"min_budget": 1})"), TH_INVALID_ARGUMENT, {"\"min_budget\""});
  // 81.0 from a YAML tool is 81.
  msgpack::object_handle ok = Msgpack(R"({"R": 81.0, "eta": 3, "exec_mode": "serial"})");
  HyperbandTuner t(host.ref(), ok.get());
  EXPECT_EQ(t.geometry().s_max(), 4);
  EXPECT_TRUE(t.serial());
}

// --- Seeds, state, import ---

std::vector<std::string> Bytes(const std::vector<Trial>& trials) {
  std::vector<std::string> out;
  for (const Trial& t : trials) out.push_back(std::to_string(t.id) + ":" + t.bytes);
  return out;
}

// Noisy, so rankings depend on the configurations.
std::optional<double> Quadratic(const Json& p) {
  const double x = p["x"].get<double>();
  return -(x - 30) * (x - 30);
}

TEST(HyperbandTest, SameSeedGivesTheSameTrials) {
  for (const char* mode : {"serial", "parallelism"}) {
    RecordingHost host;
    const std::string args = std::string(R"({"R": 27, "seed": 42, "exec_mode": ")") + mode + "\"}";
    auto a = MakeTuner<HyperbandTuner>(host, kOneX, args);
    auto b = MakeTuner<HyperbandTuner>(host, kOneX, args);
    Simulation sa(4, Quadratic);
    Simulation sb(4, Quadratic);
    std::vector<Trial> ta = sa.Run(*a, host, 150);
    std::vector<Trial> tb = sb.Run(*b, host, 150);
    ASSERT_EQ(ta.size(), 150u);
    EXPECT_EQ(Bytes(ta), Bytes(tb)) << mode;

    auto c = MakeTuner<HyperbandTuner>(
        host, kOneX, std::string(R"({"R": 27, "seed": 43, "exec_mode": ")") + mode + "\"}");
    Simulation sc(4, Quadratic);
    EXPECT_NE(Bytes(sc.Run(*c, host, 150)), Bytes(ta)) << mode;
  }
}

TEST(HyperbandTest, OmittedSeedIsLoggedAndReproduces) {
  RecordingHost host;
  auto a = MakeTuner<HyperbandTuner>(host, kOneX, "{}");
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "hyperband: seed " + std::to_string(a->seed())));
  auto b = MakeTuner<HyperbandTuner>(host, kOneX, R"({"seed": )" + std::to_string(a->seed()) + "}");
  Driver da;
  Driver db;
  EXPECT_EQ(Bytes(da.Ask(*a, 30)), Bytes(db.Ask(*b, 30)));
}

TEST(HyperbandTest, SavedStateContinuesIdentically) {
  for (const char* mode : {"serial", "parallelism"}) {
    RecordingHost host;
    const std::string args = std::string(R"({"R": 27, "seed": 5, "exec_mode": ")") + mode + "\"}";
    auto a = MakeTuner<HyperbandTuner>(host, kOneX, args);
    Simulation sim(5, [](const Json& p) -> std::optional<double> {
      const double x = p["x"].get<double>();
      if (x > 90) return std::nullopt;  // some failures
      return -(x - 30) * (x - 30);
    });
    sim.Run(*a, host, 57);
    const std::string state = a->SaveState();
    Simulation sim_b = sim;  // the host's side of the same moment
    std::vector<Trial> next_a = sim.Run(*a, host, 120);
    ASSERT_EQ(next_a.size(), 120u);

    RecordingHost host_b;
    auto b = MakeTuner<HyperbandTuner>(
        host_b, kOneX, std::string(R"({"R": 27, "seed": 99, "exec_mode": ")") + mode + "\"}");
    b->LoadState(state);
    EXPECT_EQ(b->seed(), 5u);
    std::vector<Trial> next_b = sim_b.Run(*b, host_b, 120);
    EXPECT_EQ(Bytes(next_a), Bytes(next_b)) << mode;
    EXPECT_EQ(a->SaveState(), b->SaveState()) << mode;
  }
}

TEST(HyperbandTest, SavedStateKeepsCredits) {
  RecordingHost host;
  auto a = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "exec_mode": "serial", "seed": 6})");
  Driver d;
  std::vector<Trial> round0 = d.Ask(*a, 9);
  EXPECT_TRUE(d.Ask(*a, 2).empty());
  const std::string state = a->SaveState();
  auto b = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "exec_mode": "serial", "seed": 1})");
  b->LoadState(state);
  EXPECT_EQ(b->credits(), (std::vector<int64_t>{9, 10}));
  for (const Trial& t : round0) {
    ASSERT_TRUE(b->Locate(t.id).has_value());
    d.Finish(*b, t.id, t.params["x"].get<double>());
  }
  std::vector<Trial> sent = d.TakeSent(*b, host);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].id, 9);
  EXPECT_EQ(sent[1].id, 10);
}

TEST(HyperbandTest, BadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto tuner = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 13})");
  auto reference = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 13})");
  auto other = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 27, "seed": 13})");
  Driver d;
  d.Ask(*other, 3);
  ExpectError([&] { tuner->LoadState("\xc1"); }, TH_INVALID_ARGUMENT, {"saved state"});
  ExpectError([&] { tuner->LoadState(other->SaveState()); }, TH_INVALID_ARGUMENT,
              {"saved state", "budgets"});
  const std::string random_state = PackText(R"({"format": "org.tunehost.random", "version": 1})");
  ExpectError([&] { tuner->LoadState(random_state); }, TH_INVALID_ARGUMENT,
              {"not a state of format org.tunehost.hyperband"});
  // A damaged bracket: its configuration count does not match R=9.
  Json broken = ToJson(reference->SaveState());
  broken["brackets"] = Json::parse(R"([[0, 0, 2, [], [[]]]])");
  broken["next_bracket"] = 1;
  ExpectError([&] { tuner->LoadState(Pack(broken)); }, TH_INVALID_ARGUMENT,
              {"saved state", "configurations"});
  // A queue that hands a configuration out twice, or forgets one.
  auto started = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 13})");
  d.Ask(*started, 3);  // 6 of the 9 configurations stay queued
  Json twice = ToJson(started->SaveState());
  ASSERT_EQ(twice["queue"].size(), 6u);
  Json forgot = twice;
  twice["queue"].push_back(twice["queue"][0]);
  forgot["queue"].erase(forgot["queue"].begin());
  ExpectError([&] { tuner->LoadState(Pack(twice)); }, TH_INVALID_ARGUMENT,
              {"saved state", "queued twice"});
  ExpectError([&] { tuner->LoadState(Pack(forgot)); }, TH_INVALID_ARGUMENT,
              {"saved state", "missing from the queue"});
  Driver d1;
  Driver d2;
  EXPECT_EQ(Bytes(d1.Ask(*tuner, 12)), Bytes(d2.Ask(*reference, 12)));
}

TEST(HyperbandTest, ImportDataIsIgnoredAsNni) {
  RecordingHost host;
  auto a = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 21})");
  auto b = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 21})");
  msgpack::object_handle records = Msgpack(R"([
    {"parameters": {"x": 3.0}, "value": 0.5},
    {"parameter": {"x": 4.0, "TRIAL_BUDGET": 9}, "value": {"default": 0.7}},
    {"value": 3}])");
  a->ImportData(records.get());
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "3 imported records ignored"));
  // A concrete consequence: nothing changes.
  Simulation sa(3, Quadratic);
  Simulation sb(3, Quadratic);
  EXPECT_EQ(Bytes(sa.Run(*a, host, 40)), Bytes(sb.Run(*b, host, 40)));
  ExpectNonArrayImportRefused(*a);
}

TEST(HyperbandTest, ResultsOfUnknownIdsAreIgnored) {
  RecordingHost host;
  auto a = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 22})");
  auto b = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 22})");
  msgpack::object_handle p = Msgpack(R"({"x": 1.0})");
  msgpack::object_handle v = Msgpack("1.0");
  a->ReceiveTrialResult(1000, p.get(), v.get(), 1.0, true);
  a->TrialEnd(1000, true);
  Simulation sa(3, Quadratic);
  Simulation sb(3, Quadratic);
  EXPECT_EQ(Bytes(sa.Run(*a, host, 30)), Bytes(sb.Run(*b, host, 30)));
}

// --- BOHB ---

const char* kQuadSpace = R"({"x": {"_type": "uniform", "_value": [-5, 5]}})";

// Minimize (x - 2)^2.
std::optional<double> Bowl(const Json& p) {
  const double x = p["x"].get<double>();
  return (x - 2) * (x - 2);
}

TEST(BohbTest, DefaultsGiveNnisBohbBrackets) {
  RecordingHost host;
  auto tuner = MakeTuner<BohbTuner>(host, kQuadSpace, R"({"seed": 1})");
  EXPECT_TRUE(tuner->serial());
  EXPECT_TRUE(tuner->maximize());
  EXPECT_EQ(tuner->geometry().s_max(), 1);
  EXPECT_EQ(TableOf(tuner->geometry()), (Table{{{2, 3}}, {{3, 1}, {1, 3}}}));
  EXPECT_EQ(tuner->min_points_in_model(), 2);  // one parameter + 1
  Simulation sim(10, Bowl);
  std::vector<Trial> log = sim.Run(*tuner, host, 13);
  std::vector<std::pair<int, int64_t>> seen;  // (s, budget)
  for (const Trial& t : log) seen.emplace_back(t.where.s, t.params["TRIAL_BUDGET"].get<int64_t>());
  EXPECT_EQ(seen, (std::vector<std::pair<int, int64_t>>{
                      {1, 1}, {1, 1}, {1, 1}, {1, 3}, {0, 3}, {0, 3},
                      {1, 1}, {1, 1}, {1, 1}, {1, 3}, {0, 3}, {0, 3}, {1, 1}}));

  // min_budget 2, max_budget 18: s_max = 2, r_i = floor(18/3^(s-i)).
  auto wide =
      MakeTuner<BohbTuner>(host, kQuadSpace, R"({"min_budget": 2, "max_budget": 18, "seed": 1})");
  EXPECT_EQ(TableOf(wide->geometry()),
            (Table{{{3, 18}}, {{5, 6}, {1, 18}}, {{9, 2}, {3, 6}, {1, 18}}}));
}

// Mean |x - 2| of first-round configurations after `skip` trials.
double MeanDistance(const std::string& args, uint64_t seed, size_t skip, size_t total) {
  RecordingHost host;
  auto tuner = MakeTuner<BohbTuner>(
      host, kQuadSpace,
      args.substr(0, args.size() - 1) + ", \"seed\": " + std::to_string(seed) + "}");
  Simulation sim(3, Bowl);
  std::vector<Trial> log = sim.Run(*tuner, host, total);
  EXPECT_EQ(log.size(), total);
  double sum = 0;
  size_t n = 0;
  for (size_t k = skip; k < log.size(); ++k) {
    if (log[k].where.round != 0) continue;
    sum += std::fabs(log[k].params["x"].get<double>() - 2);
    ++n;
  }
  EXPECT_GT(n, 0u);
  return sum / static_cast<double>(n);
}

TEST(BohbTest, NewConfigurationsConcentrateNearTheOptimum) {
  double model = 0;
  double random = 0;
  for (uint64_t seed : {1, 2, 3, 4}) {
    const double m = MeanDistance(R"({"optimize_mode": "minimize"})", seed, 60, 300);
    const double r =
        MeanDistance(R"({"optimize_mode": "minimize", "random_fraction": 1})", seed, 60, 300);
    EXPECT_LT(m, r) << "seed " << seed;
    model += m;
    random += r;
  }
  // Uniform on [-5, 5]: E|x - 2| = 2.9.
  EXPECT_NEAR(random / 4, 2.9, 0.5);
  EXPECT_LT(model / 4, 0.6 * (random / 4)) << "model " << model / 4 << " random " << random / 4;
}

TEST(BohbTest, RandomFractionIsHonoured) {
  auto picks = [](const std::string& fraction) {
    RecordingHost host;
    auto tuner = MakeTuner<BohbTuner>(
        host, kQuadSpace,
        R"({"optimize_mode": "minimize", "seed": 17, "random_fraction": )" + fraction + "}");
    Simulation sim(3, Bowl);
    sim.Run(*tuner, host, 1200);  // 200 brackets, 1000 first-round configurations
    return std::make_pair(tuner->random_picks(), tuner->model_picks());
  };
  // The first bracket (3 configurations) has no model yet.
  const auto none = picks("1");
  EXPECT_EQ(none.second, 0);
  EXPECT_EQ(none.first, 1000);
  const auto all = picks("0");
  EXPECT_EQ(all.first, 3);
  EXPECT_EQ(all.second, 997);
  const auto third = picks("0.3333333333333333");
  EXPECT_EQ(third.first + third.second, 1000);
  const double fraction = static_cast<double>(third.first - 3) / 997.0;
  EXPECT_NEAR(fraction, 1.0 / 3.0, 0.05) << third.first << " random picks";
}

TEST(BohbTest, TheModelOfTheLargestBudgetWithEnoughResultsIsUsed) {
  RecordingHost host;
  auto tuner =
      MakeTuner<BohbTuner>(host, kQuadSpace, R"({"optimize_mode": "minimize", "seed": 2})");
  EXPECT_FALSE(tuner->model_budget().has_value());
  Driver d;
  std::vector<Trial> round0 = d.Ask(*tuner, 3);  // s=1: 3 at budget 1
  ASSERT_EQ(round0.size(), 3u);
  d.Finish(*tuner, round0[0].id, 1.0);
  EXPECT_FALSE(tuner->model_budget().has_value());  // 1 < min_points_in_model = 2
  d.Finish(*tuner, round0[1].id, 2.0);
  EXPECT_EQ(tuner->model_budget(), std::optional<double>(1.0));
  d.Fail(*tuner, round0[2].id);
  std::vector<Trial> round1 = d.Ask(*tuner, 1);
  ASSERT_EQ(round1.size(), 1u);
  EXPECT_EQ(round1[0].params["TRIAL_BUDGET"], 3);
  d.Finish(*tuner, round1[0].id, 0.5);
  EXPECT_EQ(tuner->model_budget(), std::optional<double>(1.0));  // 1 result at budget 3
  std::vector<Trial> s0 = d.Ask(*tuner, 2);  // s=0: 2 at budget 3
  ASSERT_EQ(s0.size(), 2u);
  d.Finish(*tuner, s0[0].id, 0.7);
  EXPECT_EQ(tuner->model_budget(), std::optional<double>(3.0));
  EXPECT_EQ(tuner->observations(), 4u);  // the failed trial is not one

  // min_points_in_model below dim + 1 is raised with a warning, as NNI.
  auto low = MakeTuner<BohbTuner>(host, kQuadSpace, R"({"min_points_in_model": 1, "seed": 2})");
  EXPECT_EQ(low->min_points_in_model(), 2);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "min_points_in_model 1"));
  auto high = MakeTuner<BohbTuner>(host, kQuadSpace, R"({"min_points_in_model": 5, "seed": 2})");
  EXPECT_EQ(high->min_points_in_model(), 5);
}

TEST(BohbTest, ImportedResultsFeedTheModel) {
  RecordingHost host;
  const std::string args = R"({"optimize_mode": "minimize", "random_fraction": 0, "seed": 3})";
  auto a = MakeTuner<BohbTuner>(host, kQuadSpace, args);
  // Good results near x = 2 at budget 3 (no TRIAL_BUDGET: max_budget) and at
  // budget 1; one record with a bad budget, one of another space.
  Json records = Json::array();
  for (int k = 0; k < 10; ++k) {
    const double x = -5 + k;  // -5..4
    records.push_back({{"parameters", {{"x", x}}}, {"value", (x - 2) * (x - 2)}});
    records.push_back({{"parameters", {{"x", x}, {"TRIAL_BUDGET", 1}}}, {"value", (x - 2) * (x - 2)}});
  }
  records.push_back({{"parameters", {{"x", 1.0}, {"TRIAL_BUDGET", "big"}}}, {"value", 1}});
  records.push_back({{"parameters", {{"y", 1.0}}}, {"value", 1}});
  Import(*a, records);
  EXPECT_EQ(a->observations(), 20u);
  EXPECT_EQ(a->model_budget(), std::optional<double>(3.0));
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "imported 20 results"));
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "skipped 2 imported records"));

  // The first bracket is model-based already and close to x = 2; without the
  // import it is random.
  Driver d;
  std::vector<Trial> first = d.Ask(*a, 3);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(a->model_picks(), 3);
  EXPECT_EQ(a->random_picks(), 0);
  for (const Trial& t : first) EXPECT_LT(std::fabs(t.params["x"].get<double>() - 2), 1.5) << t.params;
  auto b = MakeTuner<BohbTuner>(host, kQuadSpace, args);
  Driver db;
  ASSERT_EQ(db.Ask(*b, 3).size(), 3u);
  EXPECT_EQ(b->model_picks(), 0);
  EXPECT_EQ(b->random_picks(), 3);
}

TEST(BohbTest, ModelSuggestionsStayInsideAMixedSpace) {
  RecordingHost host;
  const char* space = R"({
    "lr":      {"_type": "loguniform",  "_value": [0.0001, 0.1]},
    "units":   {"_type": "quniform",    "_value": [16, 128, 16]},
    "act":     {"_type": "choice",      "_value": ["relu", "tanh", "sigmoid"]},
    "layers":  {"_type": "randint",     "_value": [1, 5]},
    "dropout": {"_type": "uniform",     "_value": [0, 0.5]},
    "w":       {"_type": "normal",      "_value": [0, 1]}})";
  auto tuner = MakeTuner<BohbTuner>(host, space, R"({"max_budget": 9, "seed": 31})");
  Simulation sim(3, [](const Json& p) -> std::optional<double> {
    if (p["layers"] == 4) return std::nullopt;
    return -std::fabs(std::log10(p["lr"].get<double>()) + 2) - p["dropout"].get<double>() +
           (p["act"] == "tanh" ? 1.0 : 0.0) + p["units"].get<double>() / 128.0;
  });
  std::vector<Trial> log = sim.Run(*tuner, host, 400);
  ASSERT_EQ(log.size(), 400u);
  EXPECT_GT(tuner->model_picks(), 50);
  std::set<std::string> acts;
  for (const Trial& t : log) {
    const Json& p = t.params;
    std::vector<std::string> keys;
    for (const auto& item : p.items()) keys.push_back(item.key());
    ASSERT_EQ(keys, (std::vector<std::string>{"lr", "units", "act", "layers", "dropout", "w",
                                              "TRIAL_BUDGET"}))
        << p;
    EXPECT_GE(p["lr"].get<double>(), 0.0001) << p;
    EXPECT_LE(p["lr"].get<double>(), 0.1) << p;
    const double units = p["units"].get<double>();
    EXPECT_TRUE(units >= 16 && units <= 128 && std::fmod(units, 16) == 0) << p;
    acts.insert(p["act"].get<std::string>());
    ASSERT_TRUE(p["layers"].is_number_integer()) << p;
    EXPECT_GE(p["layers"].get<int64_t>(), 1);
    EXPECT_LT(p["layers"].get<int64_t>(), 5);
    EXPECT_GE(p["dropout"].get<double>(), 0.0) << p;
    EXPECT_LE(p["dropout"].get<double>(), 0.5) << p;
    EXPECT_TRUE(std::isfinite(p["w"].get<double>())) << p;
    const int64_t budget = p["TRIAL_BUDGET"].get<int64_t>();
    EXPECT_TRUE(budget == 1 || budget == 3 || budget == 9) << p;
  }
  EXPECT_EQ(acts, (std::set<std::string>{"relu", "tanh", "sigmoid"}));
}

TEST(BohbTest, SameSeedGivesTheSameTrials) {
  RecordingHost host;
  const std::string args = R"({"max_budget": 9, "optimize_mode": "minimize", "seed": 8})";
  auto a = MakeTuner<BohbTuner>(host, kQuadSpace, args);
  auto b = MakeTuner<BohbTuner>(host, kQuadSpace, args);
  Simulation sa(2, Bowl);
  Simulation sb(2, Bowl);
  std::vector<Trial> ta = sa.Run(*a, host, 120);
  ASSERT_EQ(ta.size(), 120u);
  EXPECT_EQ(Bytes(ta), Bytes(sb.Run(*b, host, 120)));
  EXPECT_GT(a->model_picks(), 0);
}

TEST(BohbTest, SavedStateContinuesIdentically) {
  RecordingHost host;
  const std::string space = R"({"x": {"_type": "uniform", "_value": [-5, 5]},
                                "c": {"_type": "choice", "_value": ["a", "b", "c"]}})";
  auto objective = [](const Json& p) -> std::optional<double> {
    const double x = p["x"].get<double>();
    if (x > 4.5) return std::nullopt;
    return (x - 2) * (x - 2) + (p["c"] == "b" ? 0.0 : 1.0);
  };
  auto a = MakeTuner<BohbTuner>(host, space,
                                R"({"max_budget": 9, "optimize_mode": "minimize", "seed": 4})");
  Simulation sim(3, objective);
  sim.Run(*a, host, 77);
  ASSERT_GT(a->model_picks(), 0);
  const std::string state = a->SaveState();
  Simulation sim_b = sim;
  std::vector<Trial> next_a = sim.Run(*a, host, 100);

  RecordingHost host_b;
  auto b = MakeTuner<BohbTuner>(host_b, space,
                                R"({"max_budget": 9, "optimize_mode": "minimize", "seed": 1})");
  b->LoadState(state);
  EXPECT_EQ(Bytes(next_a), Bytes(sim_b.Run(*b, host_b, 100)));
  EXPECT_EQ(a->SaveState(), b->SaveState());
  EXPECT_EQ(a->model_picks(), b->model_picks());

  // Loading before the search space works too: the models are built then.
  RecordingHost host_c;
  auto c = MakeTuner<BohbTuner>(host_c, "",
                                R"({"max_budget": 9, "optimize_mode": "minimize", "seed": 1})");
  c->LoadState(state);
  Update(*c, space);
  EXPECT_EQ(c->SaveState(), state);
  // A BOHB state is not a Hyperband state.
  auto hb = MakeTuner<HyperbandTuner>(host_c, kOneX, R"({"R": 9})");
  ExpectError([&] { hb->LoadState(state); }, TH_INVALID_ARGUMENT,
              {"not a state of format org.tunehost.hyperband"});
}

TEST(BohbTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) { return Constructing<BohbTuner>(host, args); };
  ExpectError(construct(R"({"min_budget": 0})"), TH_INVALID_ARGUMENT, {"bohb", "\"min_budget\""});
  ExpectError(construct(R"({"min_budget": 5, "max_budget": 3})"), TH_INVALID_ARGUMENT,
              {"\"max_budget\"", ">= min_budget"});
  ExpectError(construct(R"({"max_budget": 2.5})"), TH_INVALID_ARGUMENT, {"\"max_budget\""});
  ExpectError(construct(R"({"eta": 1})"), TH_INVALID_ARGUMENT, {"\"eta\""});
  ExpectError(construct(R"({"top_n_percent": 0})"), TH_INVALID_ARGUMENT, {"\"top_n_percent\""});
  ExpectError(construct(R"({"top_n_percent": 100})"), TH_INVALID_ARGUMENT, {"\"top_n_percent\""});
  ExpectError(construct(R"({"num_samples": 0})"), TH_INVALID_ARGUMENT, {"\"num_samples\""});
  ExpectError(construct(R"({"random_fraction": 1.5})"), TH_INVALID_ARGUMENT,
              {"\"random_fraction\""});
  ExpectError(construct(R"({"min_points_in_model": -1})"), TH_INVALID_ARGUMENT,
              {"\"min_points_in_model\""});
  ExpectError(construct(R"({"bandwidth_factor": -1})"), TH_INVALID_ARGUMENT,
              {"\"bandwidth_factor\""});
  ExpectError(construct(R"({"min_bandwidth": "small"})"), TH_INVALID_ARGUMENT,
              {"\"min_bandwidth\""});
  ExpectError(construct(R"({"optimize_mode": "up"})"), TH_INVALID_ARGUMENT, {"\"optimize_mode\""});
  ExpectError(construct(R"({"R": 60})"), TH_INVALID_ARGUMENT, {"\"R\""});
  ExpectError(construct(R"({"exec_mode": "serial"})"), TH_INVALID_ARGUMENT, {"\"exec_mode\""});
  // Accepted, unused, and said so.
  msgpack::object_handle ok = Msgpack(R"({"bandwidth_factor": 2, "min_bandwidth": 0.01})");
  BohbTuner t(host.ref(), ok.get());
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "bandwidth_factor and min_bandwidth are not used"));
}

// --- The module ---

TEST(HyperbandModuleTest, ExportsHyperbandAndBohb) {
  void* lib = dlopen(TH_HYPERBAND_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  const auto* entry = static_cast<const th_plugin_entry_t*>(dlsym(lib, TH_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  ASSERT_TRUE(entry->init(TH_HYPERBAND_MODULE));
  const auto* factory =
      static_cast<const th_tuner_factory_t*>(entry->get_factory(TH_TUNER_FACTORY_ID));
  ASSERT_NE(factory, nullptr);
  ASSERT_EQ(factory->count(factory), 2u);
  std::set<std::pair<std::string, std::string>> classes;
  for (uint32_t i = 0; i < 2; ++i) {
    const th_plugin_descriptor_t* d = factory->get_descriptor(factory, i);
    ASSERT_NE(d, nullptr);
    classes.emplace(d->id, d->name);
  }
  EXPECT_EQ(classes, (std::set<std::pair<std::string, std::string>>{
                         {"org.tunehost.hyperband", "hyperband"}, {"org.tunehost.bohb", "bohb"}}));
  EXPECT_EQ(entry->get_factory("tunehost.assessor-factory/1"), nullptr);

  RecordingHost host;
  std::vector<uint8_t> args = Json::to_msgpack(Json::parse(R"({"seed": 1})"));
  for (const char* id : {"org.tunehost.hyperband", "org.tunehost.bohb"}) {
    char message[256] = {};
    th_error_t err{message, sizeof(message)};
    const th_tuner_t* created =
        factory->create(factory, host.ref().raw(), id, th_bytes_t{args.data(), args.size()}, &err);
    ASSERT_NE(created, nullptr) << id << ": " << message;
    AbiTuner t(created);
    EXPECT_EQ(t.UpdateSearchSpace(kOneX), TH_OK) << t.message();
    EXPECT_EQ(t.Generate({0}), TH_OK) << t.message();
    ASSERT_EQ(t.emitted_params().size(), 1u);
    EXPECT_TRUE(ToJson(t.emitted_params()[0]).contains("TRIAL_BUDGET"));
  }
  // Bad class_args come back as an error naming the argument.
  std::vector<uint8_t> bad = Json::to_msgpack(Json::parse(R"({"eta": 1})"));
  char message[256] = {};
  th_error_t err{message, sizeof(message)};
  EXPECT_EQ(factory->create(factory, host.ref().raw(), "org.tunehost.bohb",
                            th_bytes_t{bad.data(), bad.size()}, &err),
            nullptr);
  EXPECT_NE(std::string(message).find("\"eta\""), std::string::npos) << message;
  entry->deinit();
  dlclose(lib);
}

}  // namespace
}  // namespace tunehost::plugins::hyperband
