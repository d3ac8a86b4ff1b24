// The worker's protocol side (wire-format.md §5.3): one thread, one zmq::poll
// loop over the jobs and events sockets, the trials' metric pipes and a
// wake-up pipe for signals. The Worker decides what to do (offers, kills,
// hellos, heartbeats, shutdown, orphan mode); the Transport moves messages,
// the TrialRunner runs trials and the ResultOutbox holds their results.
#pragma once

#include <chrono>
#include <cstdint>

#include "result_outbox.h"
#include "transport.h"
#include "trial_runner.h"
#include "tunehost/protocol/messages.h"
#include "worker_options.h"

namespace tunehost::worker {

class Worker {
 public:
  // `wake_fd` is the read end of a non-blocking pipe that signal handlers
  // write to: 'T' asks for shutdown, anything else (SIGCHLD) just wakes.
  // Throws std::runtime_error when the ack log cannot be opened.
  Worker(WorkerOptions options, int wake_fd);

  // Connects, runs until a shutdown request or the idle limit, returns the
  // process exit code.
  int Run();

 private:
  using Clock = std::chrono::steady_clock;

  void PollOnce();
  void OnEvent(const protocol::Message& message);
  void OnOffer(const protocol::NewTrialJob& job);
  void DrainWakePipe();
  void RunTimers();
  void BeginShutdown();
  void CheckOrphaned(Clock::time_point now);
  void Finish();

  void SendHello();
  void SendHeartbeat();

  WorkerOptions options_;
  int wake_fd_;
  Transport transport_;
  ResultOutbox outbox_;
  TrialRunner trials_;
  Clock::time_point next_heartbeat_;
  Clock::time_point last_activity_;
  bool shutting_down_ = false;
  bool stop_ = false;
  Clock::time_point shutdown_deadline_;
  int shutdown_signals_ = 0;
  pid_t parent_ = 0;          // the process that started the worker
  bool orphaned_ = false;     // it is gone
  bool adopted_ = false;      // a host asked for a hello since then
  bool ended_while_orphaned_ = false;  // an EN went out while no host was there
  Clock::time_point orphaned_at_;
};

}  // namespace tunehost::worker
