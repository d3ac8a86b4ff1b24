// The trial engine (NNI's manager loop and ExecutionEngine role): the trial
// table, worker slots, the lease table of offers, budgets and experiment
// status. Pure logic on the loop thread: no sockets, no threads, no plugins.
// Everything it wants done goes through EngineSink; everything that happens
// comes in through On*() with the current time, so tests drive it directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
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

#include "tunehost/host/pareto_front.h"
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
  bool awaiting_reattach = false;  // restored as running: its worker may come back
  std::string reattach_worker;     // ... and which worker that is (the stored worker_id)
  uint64_t lease = 0;              // the current offer's: only its TS may start it
  std::string offered_to;          // the worker an addressed offer went to (§5.2)

  // A new lease: attempt + 1. The previous attempt's results no longer count
  // (wire-format.md §5.3: a trial's metrics are its current attempt's); the
  // store keeps them, marked superseded.
  void NextAttempt();
};

// What the engine asks the outside world to do. Implemented by the server
// (sockets, strands) and by fakes in tests.
class EngineSink {
 public:
  virtual ~EngineSink() = default;
  // Offers a job on the jobs socket. False when it cannot be sent now (no
  // connected worker); the trial then stays waiting.
  virtual bool SendJob(const protocol::NewTrialJob& job) = 0;
  // Offers a job to one worker on its events topic (addressed offers,
  // wire-format.md §5.2). Default: the jobs socket.
  virtual bool SendJobTo(const std::string& worker_id, const protocol::NewTrialJob& job) {
    (void)worker_id;
    return SendJob(job);
  }
  // Addressed signal on the events socket (KI, MA, HR).
  virtual void SendToWorker(const std::string& worker_id, protocol::Body body) = 0;
  // Experiment event on the events socket, topic "event.<code>".
  virtual void Publish(protocol::Body body) = 0;
  // Whether Publish does anything with an event of this type code; the
  // engine skips building the events nobody takes (a metric per result).
  virtual bool WantsEvent(std::string_view type) const {
    (void)type;
    return true;
  }
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
  // Persistence (the store). A trial was created or changed state: `event`
  // is created, started, reattached, requeued, kill, answered (by a
  // middleware, which `detail` names) or ended; `detail` says
  // why. A metric was accepted (the first time; duplicates are not
  // reported). Both come before anything is published or handed to a plugin
  // for it. Default: nothing is kept.
  virtual void TrialChanged(const Trial& trial, std::string_view event, std::string_view detail) {
    (void)trial, (void)event, (void)detail;
  }
  virtual void MetricAccepted(const Trial& trial, const protocol::ReportMetricData& m) {
    (void)trial, (void)m;
  }
};

// --- trial events and middleware (NNI's ExecutionEngine) ---

enum class TrialEventKind { kIntermediateMetric, kFinalMetric, kTrainingEnd };

// One event of a trial, shown to each registered callback in order before
// the engine acts on it. A callback may cancel the event (later callbacks
// and the default action skip it) or only prevent the default action
// (recording the metric; ending the trial). Callbacks run on the loop thread
// and must not call back into the engine.
struct TrialEvent {
  TrialEventKind kind = TrialEventKind::kIntermediateMetric;
  const Trial* trial = nullptr;                        // as it is before the event
  const protocol::ReportMetricData* metric = nullptr;  // metric events
  protocol::TrialStatus status = protocol::TrialStatus::kSucceeded;  // kTrainingEnd
  bool cancel = false;
  bool prevent_default = false;
};
using TrialEventCallback = std::function<void(TrialEvent&)>;

// A stage between the tuner and the workers (NNI's Middleware). OnSubmit
// sees each new trial before it is queued (not external ones): it may
// rewrite the parameters, or answer with a final result, and the trial then
// ends SUCCEEDED with it without running. OnEnded sees every trial that
// reached its terminal state (restored ones too).
class TrialMiddleware {
 public:
  virtual ~TrialMiddleware() = default;
  virtual std::string_view name() const = 0;
  virtual std::optional<protocol::Metric> OnSubmit(Trial& trial) = 0;
  virtual void OnEnded(const Trial& trial) { (void)trial; }
};

// A configuration that already SUCCEEDED (same parameters, byte for byte as
// MessagePack) returns its final result instead of running again.
class DeduplicateMiddleware final : public TrialMiddleware {
 public:
  std::string_view name() const override { return "deduplicate"; }
  std::optional<protocol::Metric> OnSubmit(Trial& trial) override;
  void OnEnded(const Trial& trial) override;

 private:
  std::unordered_map<std::string, protocol::Metric> results_;  // by packed parameters
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
  // Resume: Allocate continues at `next` (or later).
  void StartAt(int64_t next);

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
  // A TS must echo its offer's lease (a host with keys: no worker can start
  // an attempt offered to another, wire-format.md §9); without, a TS with no
  // lease is taken from workers that do not echo it.
  bool require_lease = false;
  // ERROR once this many trials in a row end FAILED (0: never, as NNI).
  uint32_t max_consecutive_failures = 0;
  // Trials generated ahead of a free slot (wire-format.md §5.3, prefetch):
  // up to this many wait, committed, beyond what free slots take, so a slot
  // that frees is offered one at once instead of after a tuner call and a
  // commit. 0 (NNI's way): the tuner is asked only when a slot is free, so
  // it suggests with every result so far; with P, it suggests without the
  // last P results (as if the concurrency were P higher).
  uint32_t prefetch = 0;
  // Several objectives (the tuner's classArgs name them): the Pareto front
  // is kept as trials end. Empty: one metric, BestTrial.
  Objectives objectives;
};

// Counts for the summary: trials created, offers made, rejected, made again.
struct EngineStats {
  uint64_t offers = 0, rejects = 0, reoffers = 0, created = 0;
  uint64_t addressed = 0;  // offers addressed to one worker (§5.2)
};

// Slots announced by live workers, minus running: all of them, and those
// of workers that take no addressed offers (the jobs socket's share).
struct EngineFreeSlots {
  size_t all = 0, push = 0;
};

// A worker as its WH described it, and what the host knows of it.
struct WorkerInfo {
  std::string id;
  uint32_t slots = 1;
  uint32_t gpus = 0;
  std::string language, version;
  protocol::Packed extra;  // WH resources.extra (host name, Slurm job, ...)
  Clock::time_point last_seen{};
  bool blocked = false;  // rejected an offer: no offers counted until its next heartbeat
  std::unordered_set<std::string> running;
  bool addressed = false;  // WH offers "addressed" (§5.2)
  uint32_t offered = 0;    // addressed offers it has not answered
  bool ack_spans = false;  // WH acks "spans" (§5.2)
  bool in_ready = false;   // queued for an addressed offer
};

// The trial as a ParameterRecord (no lease: what events and clients see).
protocol::NewTrialJob JobFor(const std::string& experiment_id, const Trial& trial);

// The engine's face to the server, the store and tests. It owns one of each
// of its parts (host/src/engine_parts.h: the trial table, the worker
// registry, the offer book, ...) and hands each event to the one whose job
// it is.
class Engine {
 public:
  Engine(EngineOptions options, EngineSink* sink);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Replaces the options; only before Start().
  void SetOptions(EngineOptions options);
  // RUNNING: starts asking for parameters as workers offer slots.
  void Start(Clock::time_point now);
  // STOPPED: no new offers; running trials are told to stop.
  void Stop(std::string_view reason);
  // ERROR with a reason: no new trials; what runs may finish.
  void Fail(std::string reason);

  // Worker messages (results socket). A Status that is not OK means the
  // message was refused (a worker over protocol::kMaxWorkers, a trial that
  // does not exist); the caller logs it, rate-limited.
  Status OnHello(const protocol::WorkerHello& m, Clock::time_point now);
  void OnHeartbeat(const protocol::Heartbeat& m, Clock::time_point now);
  Status OnStarted(const protocol::TrialStarted& m, Clock::time_point now);
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

  // Control: a customized trial (AD), offered like any other; *added (when
  // given) points to it. BadState once the experiment takes no new trials,
  // its budget is used up, or kMaxQueuedCustomTrials added trials are open.
  Status AddCustomized(protocol::Packed parameters, Clock::time_point now,
                       const Trial** added = nullptr);
  // Control: trials a client runs itself (GE), never offered to workers.
  // They count against max_trials, and the experiment is not DONE while one
  // runs. ReserveExternal hands out at most `count` ids within the budget
  // (none when it is used up; BadState once the experiment takes no new
  // trials); the tuner's answer for them goes to OnExternalParameters,
  // which creates the trials (ids it did not answer are released).
  Status ReserveExternal(uint32_t count, Clock::time_point now, std::vector<int64_t>* ids);
  std::vector<const Trial*> OnExternalParameters(
      const std::vector<int64_t>& ids,
      std::vector<std::pair<int64_t, protocol::Packed>> params, Clock::time_point now);

  // The events socket saw the subscription to a worker's topic come or go.
  // Offers are addressed only to workers whose subscription is live (an
  // offer published before it would be lost).
  void OnSubscription(const std::string& worker_id, bool subscribed, Clock::time_point now);
  // Every subscription is gone (the events socket was bound again).
  void ClearSubscriptions();

  // Timers: ack timeouts, worker liveness, duration budget. Call often.
  void Tick(Clock::time_point now);

  ExperimentStatus status() const;
  const std::string& error() const;
  // DONE, STOPPED, or ERROR with nothing left running.
  bool finished() const;
  const Trial* Find(const std::string& trial_id) const;
  const std::vector<std::string>& ended_order() const;
  ParameterIdPool& ids();
  const EngineOptions& options() const;
  // The trial as a ParameterRecord (no lease: what events and clients see).
  protocol::NewTrialJob JobFor(const Trial& trial) const;

  using Stats = EngineStats;
  const Stats& stats() const;
  using FreeSlots = EngineFreeSlots;
  FreeSlots CountFreeSlots() const;
  size_t free_slots() const { return CountFreeSlots().all; }

  // --- resume (wire-format.md §5.3) ---
  // Before Start(): rebuilds one trial from the store. Ended trials keep
  // their status and count against the budget (restore them in end order);
  // a trial that was running waits `reattach_grace` for its worker to
  // re-announce it, then is re-offered with a new attempt; a waiting one is
  // offered again.
  void Restore(Trial trial, Clock::time_point now, std::chrono::milliseconds reattach_grace);
  // Parameter ids continue at `next_parameter_id`; `elapsed` of
  // max_duration was used before the restart.
  void RestoreCounters(int64_t next_parameter_id, std::chrono::milliseconds elapsed);
  // A stored experiment opened read-only: status VIEWED, nothing is offered.
  void SetViewed();
  // Run time counted against max_duration (including before a restart).
  Clock::duration elapsed(Clock::time_point now) const;

  // --- ExecutionEngine operations ---
  // Submits a trial with these parameters (source customized), as AD does.
  Status Submit(protocol::Packed parameters, Clock::time_point now, const Trial** added) {
    return AddCustomized(std::move(parameters), now, added);
  }
  // Trials that could start now: free worker slots, within the concurrency.
  size_t IdleSlots() const;
  // Whether max_trials and max_duration still allow a new trial.
  bool BudgetAvailable(Clock::time_point now) const;
  // Event callbacks, called in registration order; the id removes one.
  int AddEventCallback(TrialEventCallback callback);
  void RemoveEventCallback(int id);
  // Middleware stages, applied in the order added.
  void AddMiddleware(std::unique_ptr<TrialMiddleware> middleware);

  // --- control (wire-format.md §4.2) ---
  // Every trial, sorted by sequence_id. Kept as trials are made; sorted
  // again only after a Restore brought one out of order.
  const std::vector<const Trial*>& TrialsInOrder() const;
  // The control API's trial status: WAITING (queued or offered), RUNNING, or
  // the terminal status.
  static std::string_view ControlStatus(const Trial& trial);
  // Trials per ControlStatus, only non-zero ones, in the order of
  // protocol::kControlTrialStatuses. Kept as trials change: O(1), because
  // status polls and the progress line ask for it on every trial end.
  std::vector<std::pair<std::string, uint64_t>> CountsByStatus() const;
  // The SUCCEEDED trial with the best finite final result (ties: the lower
  // sequence_id), or null. Kept as trials end.
  const Trial* BestTrial(bool maximize) const;
  // With options().objectives: the SUCCEEDED, feasible trials no other
  // dominates, kept incrementally.
  const ParetoFront& pareto_front() const;
  // When the last trial ended (Clock::time_point{} before any did).
  Clock::time_point last_ended_at() const;
  // When Start() ran (steady clock); Clock::time_point{} before.
  Clock::time_point started_at() const;
  // KT: a running trial gets KI (reason "user") and ends USER_CANCELED when
  // its worker answers; a waiting or offered one (and a running external
  // one, which has no worker) ends USER_CANCELED at once. NotFound for an
  // unknown id, BadState for an ended trial.
  Status KillTrial(const std::string& id, Clock::time_point now);
  // UX: changes the limits (nullopt keeps one). concurrency >= 1; 0 means
  // unlimited for the two budgets. Acts at once (more offers, DONE when a
  // lowered budget is reached, RUNNING again when a raised one reopens it).
  // BadState once the experiment is DONE, STOPPED or ERROR.
  Status UpdateLimits(std::optional<uint32_t> concurrency, std::optional<uint64_t> max_trials,
                      std::optional<double> max_duration_s, Clock::time_point now);

  using Worker = WorkerInfo;
  // LW: the workers the host knows.
  const std::unordered_map<std::string, Worker>& workers() const;
  // Whether a worker id is in use: a worker the host knows, or the one a
  // restored trial waits for.
  bool WorkerInUse(const std::string& worker_id) const;

 private:
  // The parts, each with one job (host/src/engine_parts.h); allocated once,
  // so the parts may point at each other.
  struct Parts;
  std::unique_ptr<Parts> parts_;
};

}  // namespace tunehost::host
