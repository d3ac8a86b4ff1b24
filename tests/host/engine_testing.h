// Values the engine tests build again and again.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "tunehost/host/engine.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host::engine_testing {

// Parameters {"x": x}.
inline protocol::Packed Params(int x) {
  protocol::Packed out;
  EXPECT_OK(protocol::JsonToPacked("{\"x\": " + std::to_string(x) + "}", &out));
  return out;
}

// A plain-number metric.
inline protocol::Metric MetricOf(double v) {
  protocol::Metric m;
  m.raw = protocol::PackDouble(v);
  m.scalar = v;
  return m;
}

// The engine keeps its status counts, best trials and last end time as
// trials change; this recomputes them from every trial and compares.
inline void ExpectIncrementalViewsMatchTrials(const Engine& engine) {
  std::vector<std::pair<std::string, uint64_t>> want;
  for (const char* s : protocol::kControlTrialStatuses) {
    uint64_t n = 0;
    for (const Trial* t : engine.TrialsInOrder()) n += Engine::ControlStatus(*t) == s;
    if (n != 0) want.emplace_back(s, n);
  }
  EXPECT_EQ(engine.CountsByStatus(), want);
  for (bool maximize : {true, false}) {
    const Trial* best = nullptr;
    for (const Trial* t : engine.TrialsInOrder()) {
      if (t->state != TrialState::kEnded || t->status != protocol::TrialStatus::kSucceeded ||
          !t->final_metric || !std::isfinite(t->final_metric->scalar)) {
        continue;
      }
      const double v = t->final_metric->scalar;
      if (best == nullptr || (maximize ? v > best->final_metric->scalar
                                       : v < best->final_metric->scalar)) {
        best = t;
      }
    }
    EXPECT_EQ(engine.BestTrial(maximize), best) << (maximize ? "maximize" : "minimize");
  }
  Clock::time_point last{};
  uint64_t previous = 0;
  bool first = true;
  for (const Trial* t : engine.TrialsInOrder()) {
    if (t->state == TrialState::kEnded && t->ended_at > last) last = t->ended_at;
    EXPECT_TRUE(first || t->sequence_id > previous) << "TrialsInOrder out of order at " << t->id;
    previous = t->sequence_id;
    first = false;
  }
  EXPECT_EQ(engine.last_ended_at(), last);
}

// A trial as the store and Engine::Restore take it: id, sequence and
// parameters {"x": seq}, parameter id seq + 10.
inline Trial MakeTrial(const std::string& id, uint64_t seq) {
  Trial t;
  t.id = id;
  t.sequence_id = seq;
  t.parameter_id = static_cast<int64_t>(seq) + 10;
  t.parameters = Params(static_cast<int>(seq));
  return t;
}

inline protocol::ReportMetricData MetricData(const std::string& trial, protocol::MetricType type,
                                             uint64_t seq, double v) {
  protocol::ReportMetricData m;
  m.trial_id = trial;
  m.type = type;
  m.sequence = seq;
  m.value = MetricOf(v);
  return m;
}

}  // namespace tunehost::host::engine_testing
