// The experiment's tuner and assessor, each on its strand (DESIGN.md: plugin
// calls run off the poll loop, one at a time per plugin), under the watchdog
// of wire-format.md §4.3: every call is named and timed, a call waited for
// is waited for at most its limit, and a plugin stuck in a call is left
// behind rather than destroyed under the running call. Private to the host
// library; the server owns one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tunehost/host/isolated_plugin.h"
#include "tunehost/host/plugin.h"
#include "tunehost/host/strand.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

class PluginStrands {
 public:
  enum Kind { kTuner = 0, kAssessor = 1 };
  using Clock = std::chrono::steady_clock;

  // A call that overran its limit, reported once (the watchdog).
  struct Overrun {
    Kind kind;
    std::string source;   // "tuner:tpe"
    std::string message;  // names the plugin, the call and the time
  };
  // An isolated plugin's crash or timeout (isolated_plugin.h); any thread.
  using EventFn = std::function<void(const std::string& code, const std::string& message,
                                     const std::string& source)>;

  // `stop_requested` ends waits early (SIGTERM, TE) and must outlive this.
  PluginStrands(PluginRegistry* registry, const std::atomic<bool>* stop_requested);
  // Stops the strands (bounded when a plugin is stuck) and destroys the
  // plugins but a stuck one.
  ~PluginStrands();
  PluginStrands(const PluginStrands&) = delete;
  PluginStrands& operator=(const PluginStrands&) = delete;

  // Creates the strands and, on them, the plugins of `spec` (a create that
  // hangs is caught like any call). On failure nothing is kept and a later
  // Create may try again, unless a call got stuck (abandoned()).
  // *failed says which plugin failed.
  Status Create(const protocol::ExperimentSpec& spec, std::chrono::milliseconds call_timeout,
                const std::filesystem::path& runner, SendTrialFn send_trial, EventFn on_event,
                Kind* failed);

  Tuner* tuner() const { return tuner_.get(); }
  Assessor* assessor() const { return assessor_.get(); }
  bool created() const { return tuner_ != nullptr; }

  // Queues a plugin call on its strand; `call` names it for the watchdog.
  // Nothing is queued behind a call that got stuck.
  void Post(Kind kind, std::function<void()> fn, const char* call);
  // Runs `fn` on the plugin's strand and waits for it (setup, resume): at
  // most the call limit, and only while no stop is asked. `fn` must own
  // what it uses: after a timeout it may still run.
  Status Wait(Kind kind, const char* call, std::function<Status()> fn);
  // The watchdog, called often: calls that have overrun their limit, each
  // reported once; the plugin counts as stuck from then on.
  std::vector<Overrun> Overruns(Clock::time_point now);
  // Stops the strands, waiting at most `grace` in all for them to finish
  // what they were handed (much less for one already stuck).
  void Stop(std::chrono::milliseconds grace);

  bool stuck(Kind kind) const { return stuck_[kind]; }
  // A call never returned: its plugin can be neither destroyed nor unloaded.
  bool abandoned() const { return stuck_[kTuner] || stuck_[kAssessor]; }
  // "tuner:tpe", "assessor:medianstop".
  std::string Source(Kind kind) const;

 private:
  Strand* StrandOf(Kind kind) const {
    return kind == kTuner ? tuner_strand_.get() : assessor_strand_.get();
  }
  // How long one call may run. An isolated plugin enforces the timeout
  // itself (its runner is killed and restarted); the watchdog then only
  // catches a proxy that failed to.
  std::chrono::milliseconds Limit(Kind kind) const;
  std::optional<IsolationOptions> IsolationFor(const protocol::PluginSpec& plugin,
                                               const char* kind) const;

  PluginRegistry* registry_;
  const std::atomic<bool>* stop_requested_;
  protocol::ExperimentSpec spec_;
  std::chrono::milliseconds call_timeout_{600000};
  std::filesystem::path runner_;
  EventFn on_event_;
  std::unique_ptr<Tuner> tuner_;
  std::unique_ptr<Assessor> assessor_;
  // After the plugins: strands stop (join) before plugins are destroyed.
  std::unique_ptr<Strand> tuner_strand_;
  std::unique_ptr<Strand> assessor_strand_;
  bool stuck_[2] = {false, false};
  uint64_t reported_[2] = {0, 0};  // task + 1 of the last overrun reported
};

}  // namespace tunehost::host
