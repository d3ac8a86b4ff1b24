// The worker's protocol side (wire-format.md §5.3): one thread, one zmq::poll
// loop over the jobs, events and results sockets, the trials' metric pipes and
// a wake-up pipe for signals.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "trial_process.h"
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

class Worker {
 public:
  // `wake_fd` is the read end of a non-blocking pipe that signal handlers
  // write to: 'T' asks for shutdown, anything else (SIGCHLD) just wakes.
  Worker(WorkerOptions options, int wake_fd);
  ~Worker();

  // Connects, runs until a shutdown request or the idle limit, returns the
  // process exit code.
  int Run();

 private:
  using Clock = std::chrono::steady_clock;

  struct PendingMetric {
    std::string bytes;  // the encoded ME, resent verbatim
    protocol::MetricType type = protocol::MetricType::kPeriodical;
    double scalar = 0;
    Clock::time_point first_sent;
    Clock::time_point last_sent;
  };

  struct Trial {
    protocol::NewTrialJob job;
    std::unique_ptr<TrialProcess> process;
    uint64_t next_sequence = 0;
    int64_t last_periodical = -1;
    bool final_seen = false;
    std::map<uint64_t, PendingMetric> pending;  // by sequence, until MA
    bool kill_requested = false;
    protocol::TrialStatus kill_status = protocol::TrialStatus::kUserCanceled;
    Clock::time_point kill_deadline;
    bool sigkill_sent = false;
    std::vector<int> gpus;  // its share of gpu_indices
    // When the worker saw it exit (for the grace of a trial killed from
    // outside: kOutsideKillGrace in worker.cc).
    std::optional<Clock::time_point> exited_at;
    // Stopped because this worker is leaving, not because the host asked:
    // no EN (wire-format.md §5.3 item 8), so the host offers it again.
    bool left_behind = false;
  };

  void Connect();
  void PollOnce();
  void OnJob(const zmq::message_t& frame);
  void OnEvent(const std::vector<zmq::message_t>& frames);
  void OnOffer(const protocol::NewTrialJob& job);
  void OnKill(const protocol::KillTrialJob& kill);
  void OnAck(const protocol::MetricAck& ack);
  void OnMetricLines(Trial* trial, const std::vector<std::string>& lines, size_t overlong);
  void RequestKill(Trial* trial, protocol::TrialStatus status, const std::string& reason);
  void DrainWakePipe();
  void RunTimers();
  void ReapAndFinish(bool force);
  void BeginShutdown();
  // gpu_indices no running trial holds.
  std::vector<int> FreeGpus() const;
  void Finish();

  void SendHello();
  void SendHeartbeat();
  void SendEnd(const Trial& trial);
  void Send(protocol::Body body);
  void SendBytes(const std::string& bytes);
  std::vector<protocol::RunningTrial> RunningTrials() const;
  uint32_t FreeSlots() const;
  Trial* FindTrial(const std::string& trial_id, uint32_t attempt);
  // When the oldest unacknowledged result was first sent (max: none).
  Clock::time_point OldestUnacknowledged() const;
  void LogAck(const Trial& trial, uint64_t sequence, const PendingMetric& metric);

  WorkerOptions options_;
  int wake_fd_;
  zmq::context_t context_;
  zmq::socket_t jobs_;
  zmq::socket_t results_;
  zmq::socket_t events_;
  uint64_t next_message_id_ = 1;
  std::vector<std::unique_ptr<Trial>> trials_;  // answered TS, EN not yet sent
  Clock::time_point next_heartbeat_;
  Clock::time_point last_activity_;
  bool shutting_down_ = false;
  bool stop_ = false;
  Clock::time_point shutdown_deadline_;
  int shutdown_signals_ = 0;
  int ack_log_fd_ = -1;
  pid_t parent_ = 0;          // the process that started the worker
  bool orphaned_ = false;     // it is gone
  bool adopted_ = false;      // a host asked for a hello since then
  bool ended_while_orphaned_ = false;  // an EN went out while no host was there
  Clock::time_point orphaned_at_;
  void CheckOrphaned(Clock::time_point now);
};

}  // namespace tunehost::worker
