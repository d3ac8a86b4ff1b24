// One trial's child process: its directory, environment, output files and the
// metric pipe. Knows nothing about sockets or the protocol's reliability rules.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "metric_line.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::worker {

inline constexpr size_t kStderrTailBytes = 4096;
// The trial's end of the metric pipe is always this descriptor: one digit, so
// even dash can write to it (`>&3`).
inline constexpr int kMetricFd = 3;

struct LaunchOptions {
  std::string command;  // run as /bin/sh -c command
  std::string cwd;      // absolute
  std::string workdir;  // absolute; trial dirs go below it
  // The trial's GPUs as CUDA_VISIBLE_DEVICES ("0,2"); nullopt leaves the
  // worker's own setting.
  std::optional<std::string> cuda_visible_devices;
  // Directories put before the worker's own PYTHONPATH (empty: unchanged).
  std::string python_path;
};

class TrialProcess {
 public:
  // Creates the trial directory, writes parameter.json and starts the command
  // in its own process group.
  static Status Start(const protocol::NewTrialJob& job, const LaunchOptions& options,
                      std::unique_ptr<TrialProcess>* out);
  ~TrialProcess();
  TrialProcess(const TrialProcess&) = delete;
  TrialProcess& operator=(const TrialProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  // Read end of the metric pipe, -1 once it is closed.
  int metric_fd() const { return metric_fd_; }

  // Reads what the pipe holds now, without blocking. Closes the pipe at end
  // of stream.
  void ReadMetrics(std::vector<std::string>* lines, size_t* overlong);

  // Non-blocking waitpid. On exit: drains and closes the metric pipe (lines
  // still in it are returned) and captures the stderr tail. True once exited.
  bool Reap(std::vector<std::string>* lines, size_t* overlong);
  bool exited() const { return exited_; }
  int wait_status() const { return wait_status_; }
  // "exit code N" or "killed by signal S".
  std::string ExitDescription() const;
  // The last kStderrTailBytes of stderr.log as valid UTF-8 (known after exit).
  const std::string& stderr_tail() const { return stderr_tail_; }

  // Signals the whole process group; a no-op once the child is reaped.
  void SignalGroup(int sig);

 private:
  TrialProcess() = default;
  void CloseMetricPipe();

  pid_t pid_ = -1;
  std::string dir_;
  int metric_fd_ = -1;
  LineSplitter splitter_;
  bool exited_ = false;
  int wait_status_ = 0;
  std::string stderr_tail_;
};

// Replaces every character outside [A-Za-z0-9._-] (and a leading '.') so a
// host-supplied id can never leave the work directory.
std::string SafePathComponent(const std::string& s);

// Makes arbitrary bytes valid UTF-8 (invalid sequences become '?').
std::string SanitizeUtf8(std::string_view s);

}  // namespace tunehost::worker
