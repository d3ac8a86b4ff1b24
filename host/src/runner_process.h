// One tunehost-plugin-runner process and its channel: start it, make calls,
// notice its death, kill it. The crash policy (restart, replay, retry) is the
// caller's (isolated_plugin.cc). Private to the host.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "runner_channel.h"
#include "tunehost/host/plugin.h"

namespace tunehost::host {

class RunnerProcess {
 public:
  struct Hooks {
    std::string label;  // "tuner tpe", for log lines
    // The plugin's send_trial; empty for assessors.
    SendTrialFn send_trial;
    // While true, send_trial calls are answered OK and dropped (a replay).
    std::function<bool()> replaying;
  };
  enum class Outcome { kReplied, kDied, kTimedOut };

  // Starts `runner` for `info` (its file and kind). Unavailable when it
  // cannot be started.
  static Status Start(const std::filesystem::path& runner, const PluginInfo& info, Hooks hooks,
                      std::unique_ptr<RunnerProcess>* out);
  // Asks the runner to destroy its instance and exit; kills it when it does
  // not within a second or two. Reaps it.
  ~RunnerProcess();
  RunnerProcess(const RunnerProcess&) = delete;
  RunnerProcess& operator=(const RunnerProcess&) = delete;

  // One call: `args` holds `nargs` packed MessagePack values. On kReplied,
  // *reply is the reply frame. kTimedOut kills the runner; so does a memory
  // use over `memory_limit` (0: none), which is then kDied.
  Outcome Call(const std::string& op, const std::string& args, uint32_t nargs,
               std::chrono::milliseconds timeout, size_t memory_limit, std::string* reply);
  // How the runner ended ("killed by signal 11 (Segmentation fault)", "exited
  // with status 3", "killed: over its memory cap of 64 MiB"). Reaps it.
  std::string DeathReason();
  pid_t pid() const { return pid_; }

 private:
  RunnerProcess(pid_t pid, int fd, Hooks hooks);
  void ReadLoop();
  void Kill();
  // Kills the runner when its resident memory is over `memory_limit` (0:
  // none) and waits for the channel to close; true then.
  bool OverMemoryLimit(size_t memory_limit);
  // Reaps the runner within `wait`, killing it first when `kill`.
  std::optional<int> Reap(std::chrono::milliseconds wait);

  pid_t pid_;
  FrameChannel channel_;
  Hooks hooks_;
  std::thread reader_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool dead_ = false;           // the channel closed
  int64_t waiting_seq_ = -1;    // the call waiting for its reply
  std::optional<std::string> reply_;
  int64_t next_seq_ = 0;
  std::string kill_reason_;     // set when the host killed it
  std::optional<int> wait_status_;
};

// Resident memory of a process in bytes (0 when it cannot be read).
size_t ResidentBytes(pid_t pid);

}  // namespace tunehost::host
