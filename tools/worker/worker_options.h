// What a worker is told on its command line (tools/worker/main.cc).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tunehost/protocol/client_keys.h"
#include "tunehost/protocol/messages.h"

namespace tunehost::worker {

struct WorkerOptions {
  std::string command;
  std::string jobs_endpoint;
  std::string results_endpoint;
  std::string events_endpoint;
  std::string id;
  uint32_t slots = 1;
  uint32_t gpus = 0;
  std::string workdir;  // absolute
  std::string cwd;      // absolute
  // Put before trials' PYTHONPATH: tunehost's Python package and the `nni`
  // package for NNI trial scripts (tools/python/nni_compat); empty: none.
  std::string python_path;
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds ack_timeout{1000};
  // The host's limit for a message on its results socket: a larger result
  // is skipped with a warning instead of being resent unacknowledged.
  size_t max_result_bytes = protocol::kDefaultMaxResultBytes;
  std::chrono::milliseconds kill_grace{5000};
  std::chrono::milliseconds max_idle{0};  // 0 = forever
  // Orphan mode (0 = off): when the process that started the worker exits
  // (its host was killed), the worker takes no new trials, keeps running and
  // reporting the ones it has to whatever host serves the endpoints (a
  // resumed host re-attaches them) and exits once they are done; if no host
  // asks for it (HR) within this time, it stops its trials and exits. An
  // orphan also gives up, adopted or not, when a result of its trials stays
  // unacknowledged this long (the host that adopted it is gone too).
  std::chrono::milliseconds orphan_timeout{0};
  // The process whose exit makes the worker an orphan; 0: its parent when it
  // starts (a host that died while the worker started is then missed).
  pid_t host_pid = 0;
  // A file to append one line per acknowledged result to (tools/soak): what
  // this worker was told the host has stored. Empty: none.
  std::string ack_log;
  // CURVE keys for a host that authenticates (wire-format.md §9).
  tunehost::protocol::ClientKeys keys;
  // GPUs this worker hands out: each trial gets gpus_per_trial of them, not
  // used by its other running trials, as CUDA_VISIBLE_DEVICES. Empty: none.
  std::vector<int> gpu_indices;
  uint32_t gpus_per_trial = 1;
};

}  // namespace tunehost::worker
