// The trials a worker runs (wire-format.md §5.3): starts one per offer it
// takes (TS, or TR when it cannot), stops them for KI and when the worker
// leaves, reaps them, and reports each end (EN) once its results are
// acknowledged. Results themselves go through the ResultOutbox.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "result_outbox.h"
#include "trial_process.h"
#include "transport.h"
#include "tunehost/protocol/messages.h"
#include "worker_options.h"

namespace tunehost::worker {

class TrialRunner {
 public:
  using Clock = std::chrono::steady_clock;

  struct Trial {
    protocol::NewTrialJob job;
    std::unique_ptr<TrialProcess> process;
    bool kill_requested = false;
    protocol::TrialStatus kill_status = protocol::TrialStatus::kUserCanceled;
    Clock::time_point kill_deadline;
    bool sigkill_sent = false;
    std::vector<int> gpus;  // its share of gpu_indices
    // When the worker saw it exit (for the grace of a trial killed from
    // outside: kOutsideKillGrace in trial_runner.cc).
    std::optional<Clock::time_point> exited_at;
    // Stopped because this worker is leaving, not because the host asked:
    // no EN (wire-format.md §5.3 item 8), so the host offers it again.
    bool left_behind = false;
  };

  // What one Reap did.
  struct Reaped {
    size_t removed = 0;  // trials done with (EN sent or left to the host)
    size_t ended = 0;    // of which an EN was sent
  };

  // All three must outlive the runner.
  TrialRunner(const WorkerOptions& options, Transport* transport, ResultOutbox* outbox);

  size_t size() const { return trials_.size(); }
  bool empty() const { return trials_.empty(); }

  // Answers an offer: TS for a trial that already runs here, TR when no
  // slot or GPU is free, else starts it (TS, then EN FAILED if it cannot).
  void Offer(const protocol::NewTrialJob& job);
  // Answers an offer with TR.
  void Reject(const protocol::NewTrialJob& job, const std::string& reason);
  void Kill(const protocol::KillTrialJob& kill);
  // The worker leaves: every trial still running is stopped and left to
  // the host (no EN, wire-format.md §5.3 item 8).
  void LeaveAll();

  // The metric pipes still open, each with its trial, for zmq::poll.
  std::vector<std::pair<int, Trial*>> MetricPipes() const;
  // Reads what the trial's metric pipe holds now into the outbox.
  void ReadMetrics(Trial* trial);

  // SIGKILL for trials still running after their kill grace.
  void KillOverdue(Clock::time_point now);
  // Reaps exited trials and ends those whose results are all acknowledged;
  // `force`: the worker is out of time, SIGKILL all and end them regardless.
  Reaped Reap(bool force, bool shutting_down);
  // The earliest kill deadline or outside-kill grace still to come (max: none).
  Clock::time_point NextDeadline(Clock::time_point now) const;

  std::vector<protocol::RunningTrial> Running() const;
  uint32_t FreeSlots() const;

 private:
  void RequestKill(Trial* trial, protocol::TrialStatus status, const std::string& reason);
  void SendEnd(const Trial& trial);
  // gpu_indices no running trial holds.
  std::vector<int> FreeGpus() const;
  Trial* Find(const std::string& trial_id, uint32_t attempt);

  const WorkerOptions& options_;
  Transport* transport_;
  ResultOutbox* outbox_;
  std::vector<std::unique_ptr<Trial>> trials_;  // answered TS, EN not yet sent
};

}  // namespace tunehost::worker
