// Plugins in a process of their own (`isolation: process`, wire-format.md
// §4.3). The host-side object is an ordinary Tuner or Assessor whose every
// call is a round trip to a tunehost-plugin-runner process that loaded the
// same plugin file through the same loader. When the runner dies (a crash,
// an abort, exit(), its memory cap), the next attempt starts a new runner,
// creates the instance again, loads the last checkpoint the host took
// (SaveState) and gives it again, in order, every call made since; then the
// failed call is retried. So the plugin sees no gap:
//
//   - a call that kills the runner is retried, up to max_attempts_per_call
//     times in a row; then it fails (Status::PluginError naming the plugin,
//     the call and how the runner died);
//   - a call that does not answer within call_timeout kills the runner and
//     fails at once (a hang is usually deterministic); the next call starts
//     a new runner, restored as above;
//   - replayed calls have no effect outside the plugin: parameters a
//     replayed generate emits and send_trial calls during the replay are
//     dropped (those trials exist already).
//
// Each crash, timeout and restart is reported through on_event, on the
// calling thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "tunehost/host/plugin.h"

namespace tunehost::host {

struct IsolationOptions {
  // The tunehost-plugin-runner binary; empty: next to the running program.
  std::filesystem::path runner;
  // A runner whose resident memory exceeds this is killed (a crash). 0: none.
  size_t memory_limit_bytes = 0;
  // The longest one call may take.
  std::chrono::milliseconds call_timeout{600000};
  int max_attempts_per_call = 3;
  // code: "plugin_crashed" (the runner died: message says how, and whether
  // the call is retried) or "plugin_timeout". Thread: the caller's.
  std::function<void(const std::string& code, const std::string& message)> on_event;
};

// The runner binary next to the running program.
std::filesystem::path DefaultRunnerPath();

// Start a runner for the registered plugin `info` (its file and id) and
// create the instance in it. PluginError (create failed, or the runner did
// not start) with the reason.
Status CreateIsolatedTuner(const PluginInfo& info, std::string_view class_args,
                           SendTrialFn send_trial, const IsolationOptions& options,
                           std::unique_ptr<Tuner>* out);
Status CreateIsolatedAssessor(const PluginInfo& info, std::string_view class_args,
                              const IsolationOptions& options, std::unique_ptr<Assessor>* out);

}  // namespace tunehost::host
