// The server's plugins (wire-format.md §4.3, §5.3): creating them, the calls
// the engine asks of them posted to their strands with the answers brought
// back to the loop, the watchdog's reports, and their checkpoints in the
// store. Loop thread only. Private to the host library.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tunehost/host/engine.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

#include "loop_signal.h"
#include "plugin_strands.h"
#include "server_store.h"

namespace tunehost::host {

class ServerPlugins {
 public:
  using Clock = std::chrono::steady_clock;

  // `events` publishes the plugins' ER events; every pointer must outlive
  // this, and `stop_requested` ends waits early.
  ServerPlugins(PluginRegistry* registry, const std::atomic<bool>* stop_requested,
                Engine* engine, LoopSignal* loop, ServerStore* batch, EngineSink* events);

  // Creates the strands and, on them, the plugins of `spec` (a create that
  // hangs is caught like any plugin call); the search space is applied by
  // the caller. On failure a later Create may try again.
  Status Create(const protocol::ExperimentSpec& spec, std::chrono::milliseconds call_timeout,
                const std::filesystem::path& runner);
  // A setup call (configure, resume): waited for at most the call limit
  // and only while no stop was asked.
  Status SetupCall(PluginStrands::Kind kind, const char* call, std::function<Status()> fn);
  // Once per loop turn: ER events for calls that overran their limit. The
  // messages of the tuner's: the experiment failed, and what waits for the
  // tuner must be answered now.
  std::vector<std::string> CheckWatchdog(Clock::time_point now);
  // An ER event for a plugin call that failed; `kind` is "tuner" or "assessor".
  void Failed(const char* kind, const Status& st);

  // EngineSink's plugin calls.
  void RequestParameters(std::vector<int64_t> ids);
  void TunerResult(const Trial& t, const protocol::Metric& metric);
  void TunerTrialEnd(const Trial& t, bool success);
  void TunerBarrier();
  void AssessorAssess(const Trial& t, protocol::Packed history);
  void AssessorTrialEnd(const Trial& t, bool success);
  // Generate calls posted and not answered yet: the turn's commit waits.
  bool generating() const { return generates_in_flight_ > 0; }

  // Results (and imports) handed to the tuner, ever: the order a resume
  // replays them in.
  int64_t results_handed() const { return results_handed_; }
  void RestoreResultsHanded(int64_t n) { results_handed_ = n; }
  // The tuner imported `records` (FD): kept like a result, and a
  // checkpoint follows this turn.
  void Imported(const protocol::Packed& records);

  // Asks each plugin for its state after every call posted so far; with
  // `wait_until`, waits for the answers until then and commits them (at
  // exit).
  void Checkpoint(std::optional<Clock::time_point> wait_until = std::nullopt);
  // After a turn's commit: a checkpoint when one is due.
  void CheckpointIfDue(Clock::time_point now);

  PluginStrands& strands() { return strands_; }
  const PluginStrands& strands() const { return strands_; }
  Tuner* tuner() const { return strands_.tuner(); }
  Assessor* assessor() const { return strands_.assessor(); }

 private:
  void NoteTimeout(PluginStrands::Kind kind, const Status& st);
  Status CreateFailed(const std::string& source, const Status& st);
  void PostTuner(std::function<void()> fn, const char* call);
  void PostAssessor(std::function<void()> fn, const char* call);
  Status SendTrial(int64_t id, protocol::Packed params);
  uint64_t CheckpointKey() const;

  const std::atomic<bool>* stop_requested_;
  Engine* engine_;
  LoopSignal* loop_;
  ServerStore* batch_;
  EngineSink* events_;
  PluginStrands strands_;
  int generates_in_flight_ = 0;
  int64_t results_handed_ = 0;
  std::map<std::string, bool> checkpoint_failing_;  // by kind
  Clock::time_point checkpointed_at_ = Clock::now();
  uint64_t checkpointed_key_ = 0;
  bool checkpoint_due_ = false;  // after an import
};

}  // namespace tunehost::host
