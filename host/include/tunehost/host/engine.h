// The trial engine (NNI's manager loop and ExecutionEngine role): the trial
// table, worker slots, the lease table of offers, budgets and experiment
// status. Pure logic on the loop thread: no sockets, no threads, no plugins.
// Everything it wants done goes through EngineSink; everything that happens
// comes in through On*() with the current time, so tests drive it directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tunehost/host/server.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

using Clock = std::chrono::steady_clock;

enum class TrialState { kWaiting, kOffered, kRunning, kEnded };

struct Trial {
  std::string id;
  uint64_t sequence_id = 0;
  int64_t parameter_id = 0;
  protocol::ParameterSource source = protocol::ParameterSource::kAlgorithm;
  protocol::Packed parameters;
  TrialState state = TrialState::kWaiting;
  uint32_t attempt = 0;        // current lease; older attempts are superseded
  uint32_t offers = 0;         // offers made (for the summary)
  std::string worker_id;       // while running
  Clock::time_point offered_at{};
  Clock::time_point started_at{};
  Clock::time_point ended_at{};
  int missed_heartbeats = 0;   // consecutive heartbeats of its worker not listing it
  std::map<uint64_t, protocol::Metric> periodical;  // by sequence
  std::optional<protocol::Metric> final_metric;
  bool final_synthesized = false;  // last PERIODICAL used as FINAL
  std::optional<protocol::TrialStatus> status;  // set once, when ended
  std::string error;
  bool assessed = false;       // the assessor saw it at least once
  bool assessor_stopped = false;
  bool kill_sent = false;
};

// What the engine asks the outside world to do. Implemented by the server
// (sockets, strands) and by fakes in tests.
class EngineSink {
 public:
  virtual ~EngineSink() = default;
  // Offers a job on the jobs socket. False when it cannot be sent now (no
  // connected worker); the trial then stays waiting.
  virtual bool SendJob(const protocol::NewTrialJob& job) = 0;
  // Addressed signal on the events socket (KI, MA, HR).
  virtual void SendToWorker(const std::string& worker_id, protocol::Body body) = 0;
  // Experiment event on the events socket, topic "event.<code>".
  virtual void Publish(protocol::Body body) = 0;
  // Asks the tuner for parameters for these ids; the answer comes back as
  // Engine::OnParameters (and possibly later Engine::OnSentTrial).
  virtual void RequestParameters(std::vector<int64_t> ids) = 0;
  // Tuner strand: FINAL result, then trial end (the engine guarantees order).
  virtual void TunerResult(const Trial& trial, const protocol::Metric& metric) = 0;
  virtual void TunerTrialEnd(const Trial& trial, bool success) = 0;
  // Assessor strand: assess a history; the answer comes back as
  // Engine::OnAssessment.
  virtual void AssessorAssess(const Trial& trial, protocol::Packed history) = 0;
  virtual void AssessorTrialEnd(const Trial& trial, bool success) = 0;
  // A trial reached its terminal state.
  virtual void TrialFinished(const Trial& trial) = 0;
  // Runs after every tuner call posted so far (the tuner strand is FIFO) and
  // then calls Engine::OnTunerBarrier: by then any send_trial those calls
  // made has reached the engine.
  virtual void TunerBarrier() = 0;
};

// Parameter ids handed to the tuner and not yet used. Thread-safe: the
// tuner's send_trial callback claims ids from the tuner strand.
class ParameterIdPool {
 public:
  std::vector<int64_t> Allocate(size_t n);
  // True exactly once per allocated id: for the trial that uses it (emitted
  // by generate or sent later through send_trial), or for the engine when it
  // stops waiting for a credit (Revoke). Whoever gets true owns the id.
  bool Claim(int64_t id);
  bool Revoke(int64_t id) { return Claim(id); }
  // Allocated and neither claimed nor revoked.
  bool IsOpen(int64_t id) const;
  // Next id that Allocate would hand out (for numbering after resume).
  int64_t next() const;

 private:
  mutable std::mutex mu_;
  int64_t next_ = 0;
  std::unordered_set<int64_t> open_;
};

struct EngineOptions {
  std::string experiment_id;
  uint32_t concurrency = 1;
  uint64_t max_trials = 0;               // 0 = unlimited
  std::chrono::milliseconds max_duration{0};  // 0 = unlimited
  std::chrono::milliseconds ack_timeout{2000};
  std::chrono::milliseconds heartbeat_interval{1000};
  int liveness = 3;
  bool has_assessor = false;
};

class Engine {
 public:
  Engine(EngineOptions options, EngineSink* sink);

  // Replaces the options; only before Start().
  void SetOptions(EngineOptions options);
  // RUNNING: starts asking for parameters as workers offer slots.
  void Start(Clock::time_point now);
  // STOPPED: no new offers; running trials are told to stop.
  void Stop(std::string_view reason);
  // ERROR with a reason: no new trials; what runs may finish.
  void Fail(std::string reason);

  // Worker messages (results socket).
  void OnHello(const protocol::WorkerHello& m, Clock::time_point now);
  void OnHeartbeat(const protocol::Heartbeat& m, Clock::time_point now);
  void OnStarted(const protocol::TrialStarted& m, Clock::time_point now);
  void OnRejected(const protocol::TrialRejected& m, Clock::time_point now);
  void OnBye(const protocol::WorkerBye& m, Clock::time_point now);
  // Metrics and trial ends, from workers (acknowledged with MA) or from
  // control clients (worker_id empty; the Status is the reply).
  Status OnMetric(const protocol::ReportMetricData& m, Clock::time_point now);
  Status OnTrialEnd(const protocol::TrialEnd& m, Clock::time_point now);

  // Tuner answers. `ids` are the ids of the request, `params` what came back.
  void OnParameters(const std::vector<int64_t>& ids,
                    std::vector<std::pair<int64_t, protocol::Packed>> params, bool no_more,
                    const Status& status, Clock::time_point now);
  // The tuner's send_trial (credit) after the id was claimed from ids().
  void OnSentTrial(int64_t parameter_id, protocol::Packed params, Clock::time_point now);
  // Answer to EngineSink::TunerBarrier.
  void OnTunerBarrier(Clock::time_point now);
  void OnAssessment(const std::string& trial_id, uint32_t attempt, bool good);

  // Control: a customized trial (AD), offered like any other.
  const Trial& AddCustomized(protocol::Packed parameters, Clock::time_point now);
  // Control: trials a client runs itself (GE), never offered to workers.
  const Trial& AddExternal(int64_t parameter_id, protocol::Packed parameters,
                           Clock::time_point now);

  // Timers: ack timeouts, worker liveness, duration budget. Call often.
  void Tick(Clock::time_point now);

  ExperimentStatus status() const { return status_; }
  const std::string& error() const { return error_; }
  // DONE, STOPPED, or ERROR with nothing left running.
  bool finished() const;
  const Trial* Find(const std::string& trial_id) const;
  const std::vector<std::string>& ended_order() const { return ended_order_; }
  ParameterIdPool& ids() { return ids_; }
  const EngineOptions& options() const { return options_; }
  protocol::NewTrialJob JobFor(const Trial& trial) const;

  struct Stats {
    uint64_t offers = 0, rejects = 0, reoffers = 0, created = 0;
  };
  const Stats& stats() const { return stats_; }
  size_t free_slots() const;  // announced by live workers, minus running

 private:
  struct Worker {
    std::string id;
    uint32_t slots = 1;
    uint32_t gpus = 0;
    Clock::time_point last_seen{};
    bool blocked = false;  // rejected an offer: no offers counted until its next heartbeat
    std::unordered_set<std::string> running;
  };

  Trial& NewTrial(int64_t parameter_id, protocol::ParameterSource source,
                  protocol::Packed parameters, Clock::time_point now);
  Worker* Seen(const std::string& worker_id, Clock::time_point now);
  void Requeue(Trial& trial, bool new_attempt, std::string_view why);
  void Kill(Trial& trial, std::string_view reason);
  void EndTrial(Trial& trial, protocol::TrialStatus status, std::string error,
                Clock::time_point now);
  void ReconcileRunning(Worker& worker, const std::vector<protocol::RunningTrial>& running,
                        bool from_hello, Clock::time_point now);
  void DropWorker(const std::string& worker_id, std::string_view why);
  bool BudgetOpen(Clock::time_point now) const;
  void Pump(Clock::time_point now);
  void UpdateStatus(Clock::time_point now);
  size_t ActiveCount() const { return waiting_.size() + offered_.size() + running_; }
  // Stops waiting for the credits the tuner has not claimed yet.
  void RevokeCredits();

  EngineOptions options_;
  EngineSink* sink_;
  ParameterIdPool ids_;
  ExperimentStatus status_ = ExperimentStatus::kInitialized;
  std::string error_;
  Clock::time_point started_{};
  std::unordered_map<std::string, Trial> trials_;
  std::unordered_map<std::string, Worker> workers_;
  std::deque<std::string> waiting_;  // trial ids, front first
  std::unordered_set<std::string> offered_;  // trial ids with an unanswered offer
  size_t running_ = 0;
  size_t inflight_ids_ = 0;          // ids asked of the tuner, not answered
  // Ids the tuner was asked for and did not answer (NNI's credit): it may
  // still emit them through send_trial, so they count against the trial
  // budget and the concurrency until then.
  std::set<int64_t> credited_;
  bool barrier_pending_ = false;
  bool tuner_exhausted_ = false;     // last request answered NO_MORE_TRIALS
  uint64_t next_sequence_ = 0;
  std::vector<std::string> ended_order_;
  Stats stats_;
};

}  // namespace tunehost::host
