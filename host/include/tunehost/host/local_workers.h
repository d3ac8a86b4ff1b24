// Supervises the local `tunehost-worker` processes of `tunehost run`: starts
// them, respawns one that dies unexpectedly (bounded), and stops them all.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tunehost/status.h"

namespace tunehost::host {

// Local worker processes one host starts at most (`--local-workers` and the
// default of one per trial slot); a larger concurrency is for attached workers.
inline constexpr size_t kMaxLocalWorkers = 1024;

// NNI's local GPU scheduling (trialGpuNumber, gpuIndices,
// maxTrialNumberPerGpu) as a plan for one-slot local workers: worker i gets
// `per_trial` distinct GPUs, and no GPU serves more than `max_per_gpu`
// workers. At most `workers` entries; fewer when the GPUs go no further
// (none when one trial needs more GPUs than there are).
std::vector<std::vector<int>> PlanGpus(const std::vector<int>& gpus, uint32_t per_trial,
                                       uint32_t max_per_gpu, size_t workers);
// The GPUs nvidia-smi lists (empty when it is missing or fails).
std::vector<int> DetectGpus();

struct LocalWorkersOptions {
  std::filesystem::path worker_binary;  // empty: FindWorkerBinary("")
  size_t count = 1;                     // one worker per slot, each --slots 1
  std::string jobs, results, events;    // the server's bound endpoints
  std::string command;                  // --command
  std::filesystem::path cwd;            // --cwd: the trial code directory
  std::filesystem::path workdir;        // --workdir: trials go below <workdir>/<experiment id>/
  std::chrono::milliseconds heartbeat_interval{1000};  // --heartbeat-ms
  std::string id_prefix = "local-";                    // worker i gets --id <prefix><i>
  std::vector<std::string> extra_args;                 // appended to every worker's arguments
  // Appended to worker i's arguments (its GPUs); may be empty.
  std::function<std::vector<std::string>(size_t i)> worker_args;
  // Each worker's stdout and stderr are appended to <log_dir>/<id>.log; empty
  // means they inherit the host's.
  std::filesystem::path log_dir;
  // A slot whose worker died this many times within a minute waits until the
  // oldest of those deaths is a minute old before the next respawn.
  int max_respawns_per_minute = 3;
  std::chrono::milliseconds stop_timeout{5000};  // SIGTERM -> SIGKILL
  // Workers outlive a host that dies without stopping them (no SIGTERM on
  // the host's death): pass --orphan-timeout-ms in extra_args so they finish
  // their trials for a resumed host and then exit.
  bool outlive_host = false;
};

// Workers run in their own process groups, so a terminal's Ctrl-C reaches the
// host only and the host decides how workers stop. On Linux each worker also
// gets SIGTERM if the host dies, unless outlive_host is set. Not copyable; methods are not thread-safe
// with each other (call them from one thread).
class LocalWorkers {
 public:
  explicit LocalWorkers(LocalWorkersOptions options);
  ~LocalWorkers();  // Stop()
  LocalWorkers(const LocalWorkers&) = delete;
  LocalWorkers& operator=(const LocalWorkers&) = delete;

  // Spawns all workers and the supervisor thread. Fails (and leaves nothing
  // running) when the binary cannot be found or a worker cannot be started.
  Status Start();
  // SIGTERM to every worker's process group, up to stop_timeout for them to
  // exit, then SIGKILL; reaps them all. Idempotent.
  void Stop();

  // The process ids running now, indexed by slot (0 while a slot awaits a
  // respawn). For status lines and tests.
  std::vector<pid_t> pids() const;
  // Respawns so far, all slots together.
  size_t respawns() const;
  // Grows to `count` workers (a raised trial concurrency); never shrinks: the
  // host's concurrency already limits what runs. No-op before Start().
  void Grow(size_t count);
  const LocalWorkersOptions& options() const { return options_; }

 private:
  class Supervisor;
  LocalWorkersOptions options_;
  std::unique_ptr<Supervisor> supervisor_;
};

// `requested` when it is set (a bare name is looked up in PATH); otherwise
// `tunehost-worker` next to the running executable (/proc/self/exe), then in
// PATH. NotFound names the places tried.
Status FindWorkerBinary(const std::filesystem::path& requested, std::filesystem::path* out);

}  // namespace tunehost::host
