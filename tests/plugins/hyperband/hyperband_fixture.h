// Shared by the tests of plugins/hyperband (hyperband_test.cc,
// hyperband_args_state_test.cc, bohb_test.cc): the host's view of a tuner's
// trials, a host that hands out ids and reports results (Driver), a host loop
// with a number of slots (Simulation), and the bracket table of a Geometry.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hyperband/bracket_tuner.h"
#include "tuner_testing.h"

namespace tunehost::plugins::hyperband::hyperband_testing {

using testing::Generated;
using testing::GenerateMultiple;
using testing::Json;
using testing::RecordingHost;
using testing::ReportResult;
using testing::ToJson;

inline const char* kOneX = R"({"x": {"_type": "uniform", "_value": [0, 100]}})";

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

using Table = std::vector<std::vector<std::pair<int64_t, int64_t>>>;  // [s][i] = (n_i, r_i)

inline Table TableOf(const Geometry& g) {
  Table t(static_cast<size_t>(g.s_max() + 1));
  for (int s = 0; s <= g.s_max(); ++s) {
    for (int i = 0; i <= s; ++i) t[static_cast<size_t>(s)].emplace_back(g.Count(s, i), g.Budget(s, i));
  }
  return t;
}

inline std::vector<std::string> Bytes(const std::vector<Trial>& trials) {
  std::vector<std::string> out;
  for (const Trial& t : trials) out.push_back(std::to_string(t.id) + ":" + t.bytes);
  return out;
}

}  // namespace tunehost::plugins::hyperband::hyperband_testing
