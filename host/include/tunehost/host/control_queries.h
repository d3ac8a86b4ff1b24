// The control API (wire-format.md §4.2: ST LT GT JS MT EX UX
// KT): the reply data built from the engine's state. Pure functions on the
// loop thread; the server only dispatches to AnswerControl.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "tunehost/host/engine.h"
#include "tunehost/host/key_ring.h"
#include "tunehost/host/server.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

// Both clocks read at one instant: the engine keeps steady times, replies
// carry Unix seconds.
struct ControlClock {
  Clock::time_point steady;
  std::chrono::system_clock::time_point wall;

  static ControlClock Now();
  double UnixSeconds(Clock::time_point t) const;
};

// What the replies need besides the engine.
struct ControlContext {
  const protocol::ExperimentSpec& spec;
  const Endpoints& endpoints;
  ControlClock clock;
  // The key each worker speaks with (LW); null without authentication.
  const WorkerKeys* worker_keys = nullptr;
};

// "maximize" or "minimize": the tuner's optimize_mode class argument;
// "maximize" when it has none, or another value (the built-in tuners refuse
// other values). *from_args (if given) says whether the argument decided.
std::string OptimizeModeOf(const protocol::Packed& tuner_args, bool* from_args = nullptr);

// Requests a read-only (viewed) experiment refuses: UX KT AD SS FD GE ME EN.
bool IsMutatingRequest(const protocol::Body& body);
// The requests AnswerControl answers: ST LT GT JS MT EX UX KT.
bool IsControlRequest(const protocol::Body& body);

// Answers one IsControlRequest request; KT and UX change the engine. On
// success `data` is the ok reply's data; otherwise the Status is the error.
Status AnswerControl(Engine& engine, const ControlContext& ctx, const protocol::Body& body,
                     protocol::Packed* data);

// The pieces, one per request.
protocol::Packed StatusInfo(const Engine& engine, const ControlContext& ctx);      // ST, UX
Status ListTrialsData(const Engine& engine, const protocol::ListTrials& request,
                      const ControlClock& clock, protocol::Packed* data);          // LT
Status TrialData(const Engine& engine, const std::string& trial_id, const ControlClock& clock,
                 protocol::Packed* data);                                          // GT
protocol::Packed StatisticsData(const Engine& engine);                             // JS
Status MetricsData(const Engine& engine, const std::optional<std::string>& trial_id,
                   protocol::Packed* data);                                        // MT
protocol::Packed ExportRecordsData(const Engine& engine);                        // EX

}  // namespace tunehost::host
