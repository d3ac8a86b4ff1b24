// The parts of the trial engine (tunehost/host/engine.h), each with one job.
// Engine owns one of each and forwards to them. All run on the loop thread.
// From the bottom up:
//   TrialTable      the trials, in order, with their ended counts and bests
//   WorkerRegistry  the workers, their subscriptions and the addressed turn
//   TrialPipeline   event callbacks and middleware (NNI's ExecutionEngine)
//   TunerCredits    parameter ids asked of the tuner and not used yet
//   RunState        the experiment status, its clock and budget
//   OfferBook       waiting trials and the offers out (wire-format.md §5.2)
//   TrialLifecycle  a trial's moves between states, and who is told
//   Scheduler       offers and tuner requests as slots free; the status
//   WorkerSessions  worker messages and liveness (wire-format.md §5.3)
//   ResultIntake    metrics and trial ends
//   TrialSupply     tuner answers, added (AD) and external (GE) trials
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tunehost/host/engine.h"

namespace tunehost::host {

// Whether `worker_id` may take back a trial the host restored as running
// (wire-format.md §5.3): only the worker that ran it.
inline bool MayReattach(const Trial& t, const std::string& worker_id) {
  return t.state == TrialState::kOffered && t.awaiting_reattach && !worker_id.empty() &&
         t.reattach_worker == worker_id;
}

// Every trial, by id and in sequence order, and what control queries read
// on every poll, kept as trials end so that no per-event path scans all
// trials (trials are never erased, so the pointers stay valid).
class TrialTable {
 public:
  explicit TrialTable(EngineStats& stats) : stats_(stats) {}
  void SetObjectives(const Objectives& objectives) { front_.SetObjectives(objectives); }

  // A new trial, numbered after every other (it counts against max_trials).
  Trial& Create(int64_t parameter_id, protocol::ParameterSource source,
                protocol::Packed parameters);
  // A trial read back from the store (wire-format.md §5.3).
  Trial& Restore(Trial trial);
  Trial* Find(const std::string& id);
  const Trial* Find(const std::string& id) const;
  Trial& at(const std::string& id) { return trials_.at(id); }
  const Trial& at(const std::string& id) const { return trials_.at(id); }
  // Ids of the trials not ended, sorted.
  std::vector<std::string> OpenIds() const;
  // A trial reached its terminal state (or was restored in it).
  void Ended(const Trial& trial);

  const std::vector<std::string>& ended_order() const { return ended_order_; }
  const std::vector<const Trial*>& InOrder() const;
  // `waiting` and `running` are the open trials' counts, kept by others.
  std::vector<std::pair<std::string, uint64_t>> CountsByStatus(uint64_t waiting,
                                                               uint64_t running) const;
  const Trial* Best(bool maximize) const { return maximize ? best_max_ : best_min_; }
  const ParetoFront& front() const { return front_; }
  Clock::time_point last_ended_at() const { return last_ended_at_; }

 private:
  EngineStats& stats_;
  std::unordered_map<std::string, Trial> trials_;
  uint64_t next_sequence_ = 0;
  mutable std::vector<const Trial*> in_order_;
  mutable bool in_order_sorted_ = true;
  std::vector<std::string> ended_order_;
  uint64_t ended_counts_[5] = {};  // by protocol::TrialStatus
  const Trial* best_max_ = nullptr;
  const Trial* best_min_ = nullptr;
  ParetoFront front_;
  Clock::time_point last_ended_at_{};
};

// The workers the host knows, which of them have a live topic subscription,
// the turn of those that take addressed offers (wire-format.md §5.2), and
// the workers restored trials wait for (§5.3).
class WorkerRegistry {
 public:
  using Worker = WorkerInfo;
  const std::unordered_map<std::string, Worker>& all() const { return workers_; }
  size_t size() const { return workers_.size(); }
  Worker* Find(const std::string& id);
  // A worker the host knows, or the one a restored trial waits for.
  bool InUse(const std::string& id) const {
    return workers_.count(id) != 0 || restored_waits_.count(id) != 0;
  }
  EngineFreeSlots CountFree() const;
  // A message from the worker: it is alive. Null for an unknown worker.
  Worker* Seen(const std::string& id, Clock::time_point now);
  // WH: the worker as it describes itself; refused over protocol::kMaxWorkers.
  Status Announce(const protocol::WorkerHello& m, Clock::time_point now, Worker** out);
  // A worker that started a trial before its WH reached the host.
  Worker& AddUnannounced(const std::string& id, Clock::time_point now);
  void Erase(const std::string& id) { workers_.erase(id); }
  // Workers not heard from within `deadline`, sorted.
  std::vector<std::string> Silent(Clock::time_point now, Clock::duration deadline) const;

  // Addressed offers: the next worker in turn with a free slot, or null.
  Worker* NextAddressable();
  // Queues the worker for an addressed offer when it can take one.
  void MaybeReady(Worker& w);
  // A trial left the worker (ended, requeued).
  void TrialLeft(const std::string& worker_id, const std::string& trial_id);
  // An addressed offer to the worker was answered, timed out or void.
  void OfferClosed(const std::string& worker_id);
  // True when a known worker's subscription is new (it may take offers).
  bool Subscribe(const std::string& id, bool subscribed);
  void ClearSubscriptions() { subscribed_.clear(); }

  // A restored trial waits for this worker to re-announce it.
  void AwaitReattach(const std::string& id) { ++restored_waits_[id]; }
  void StopAwaitingReattach(Trial& trial);

 private:
  // A worker that takes addressed offers, whose topic subscription is live,
  // with a slot neither running nor offered.
  bool Addressable(const Worker& w) const;

  std::unordered_map<std::string, Worker> workers_;
  std::unordered_map<std::string, size_t> restored_waits_;  // trials waiting, by worker
  std::unordered_set<std::string> subscribed_;  // worker ids whose topic is subscribed
  std::deque<std::string> ready_;  // workers that may take an addressed offer, in turn
};

// Trial event callbacks and middleware stages, in the order registered.
class TrialPipeline {
 public:
  int AddCallback(TrialEventCallback callback);
  void RemoveCallback(int id);
  void AddMiddleware(std::unique_ptr<TrialMiddleware> middleware);
  // Runs the callbacks; false when the default action must not happen.
  bool Dispatch(TrialEvent& event);
  // The first middleware that answers a new trial: its result, and its
  // name in *by.
  std::optional<protocol::Metric> Submit(Trial& trial, std::string_view* by);
  void Ended(const Trial& trial);

 private:
  std::vector<std::pair<int, TrialEventCallback>> callbacks_;
  int next_callback_ = 0;
  std::vector<std::unique_ptr<TrialMiddleware>> middleware_;
};

// Parameter ids asked of the tuner: in flight (not answered), and credited
// (NNI's credit: not answered, but the tuner may still emit them through
// send_trial, so they count against the trial budget and the concurrency
// until then). Also whether the tuner is done, and the barrier that lets
// DONE be decided.
class TunerCredits {
 public:
  explicit TunerCredits(EngineSink* sink) : sink_(sink) {}
  ParameterIdPool& ids() { return ids_; }
  // Ids that count against the budget and the concurrency.
  size_t held() const { return inflight_ + credited_.size(); }
  size_t inflight() const { return inflight_; }
  bool has_credits() const { return !credited_.empty(); }

  // Ids held for a request (the tuner's answer releases them).
  std::vector<int64_t> Reserve(size_t n);
  // Asks the tuner for n ids' parameters.
  void Request(size_t n) { sink_->RequestParameters(Reserve(n)); }
  // The tuner answered a request for n ids.
  void Answered(size_t n) { inflight_ -= std::min(inflight_, n); }
  // After an answer: ids of the request not emitted become credits while
  // `waiting`, else are revoked.
  void Credit(const std::vector<int64_t>& ids, const std::set<int64_t>& emitted, bool waiting);
  // send_trial used a credit.
  void Used(int64_t id) { credited_.erase(id); }
  // Stops waiting for the credits the tuner has not claimed yet.
  void Revoke();
  // No more credits at all (the experiment ended).
  void Drop() {
    Revoke();
    credited_.clear();
  }
  // Answer to EngineSink::TunerBarrier with `active` trials open.
  void BarrierDone(size_t active, const std::string& experiment_id);
  // True when a barrier must be asked for (none is pending yet).
  bool NeedBarrier();

  bool exhausted() const { return exhausted_; }
  void set_exhausted(bool exhausted) { exhausted_ = exhausted; }
  bool quiet() const { return quiet_; }
  // Something happened since the last barrier (a trial, an answer).
  void Stir() { quiet_ = false; }
  // generate failed again; the count so far.
  int GenerateFailed() { return ++generate_failures_; }
  void Generated() { generate_failures_ = 0; }

 private:
  EngineSink* sink_;
  ParameterIdPool ids_;
  size_t inflight_ = 0;
  std::set<int64_t> credited_;
  bool barrier_pending_ = false;
  // A barrier found nothing running and nothing in flight since the last
  // trial or tuner answer: DONE may be decided.
  bool quiet_ = false;
  bool exhausted_ = false;  // last request answered NO_MORE_TRIALS
  int generate_failures_ = 0;  // generate calls that failed in a row
};

// The experiment's status, its run time and its budget.
class RunState {
 public:
  RunState(const EngineOptions& options, const EngineStats& stats, TunerCredits& credits)
      : options_(options), stats_(stats), credits_(credits) {}
  ExperimentStatus status() const { return status_; }
  void set_status(ExperimentStatus status) { status_ = status; }
  const std::string& error() const { return error_; }
  // ERROR with a reason: no new trials; what runs may finish.
  void Fail(std::string reason);
  void Start(Clock::time_point now) { started_ = now - restored_elapsed_; }
  Clock::time_point started_at() const { return started_; }
  void set_restored_elapsed(std::chrono::milliseconds e) { restored_elapsed_ = e; }
  Clock::duration elapsed(Clock::time_point now) const;

  // STOPPED, DONE or ERROR: the tuner's trials are no longer wanted.
  bool ended() const {
    return status_ == ExperimentStatus::kStopped || status_ == ExperimentStatus::kDone ||
           status_ == ExperimentStatus::kError;
  }
  // OK while the experiment takes new trials (AD, GE).
  Status TakesNewTrials() const;
  bool OutOfTime(Clock::time_point now) const {
    return options_.max_duration.count() > 0 && now - started_ >= options_.max_duration;
  }
  // Whether max_trials and max_duration still allow a new trial.
  bool BudgetOpen(Clock::time_point now) const;

 private:
  const EngineOptions& options_;
  const EngineStats& stats_;
  TunerCredits& credits_;
  ExperimentStatus status_ = ExperimentStatus::kInitialized;
  std::string error_;
  Clock::time_point started_{};
  std::chrono::milliseconds restored_elapsed_{0};
};

// Trials waiting for a slot, front first, and the offers out: made through
// the jobs socket or addressed to one worker (wire-format.md §5.2), each
// with its lease (§5.3).
class OfferBook {
 public:
  OfferBook(const EngineOptions& options, EngineSink* sink, EngineStats& stats,
            TrialTable& table, WorkerRegistry& workers)
      : options_(options), sink_(sink), stats_(stats), table_(table), workers_(workers) {}
  size_t waiting() const { return waiting_.size(); }
  size_t offered() const { return offered_.size(); }
  const std::string& next() const { return waiting_.front(); }
  void Queue(const std::string& id) { waiting_.push_back(id); }
  // Back in front of the queue (rejected, or its worker lost).
  void Requeue(const std::string& id) { waiting_.push_front(id); }
  void Unqueue(const std::string& id);
  // A restored trial held as an offer while its worker may come back.
  void Hold(const std::string& id) { offered_.insert(id); }
  // The trial's offer is answered, timed out or void.
  void Close(Trial& trial);
  // Offers whose ack timeout passed, sorted.
  std::vector<std::string> Expired(Clock::time_point now) const;
  // Free slots less the offers out.
  size_t Capacity(size_t free) const { return free > offered() ? free - offered() : 0; }
  // Offers waiting trials: never more than free slots, never more than the
  // concurrency (with `running` trials), never more than
  // kMaxInflightOffers out at once.
  void Offer(Clock::time_point now, const EngineFreeSlots& slots, size_t running);

 private:
  static uint64_t NewLease();

  const EngineOptions& options_;
  EngineSink* sink_;
  EngineStats& stats_;
  TrialTable& table_;
  WorkerRegistry& workers_;
  std::deque<std::string> waiting_;          // trial ids, front first
  std::unordered_set<std::string> offered_;  // trial ids with an unanswered offer
  size_t addressed_out_ = 0;                 // offers in offered_ that are addressed
};

// A trial's moves between states (created, offered back, running, ended)
// with the counts of open trials and what each move tells the sink.
class TrialLifecycle {
 public:
  // The parts it moves trials between and tells.
  struct Deps {
    const EngineOptions& options;
    EngineSink* sink;
    EngineStats& stats;
    TrialTable& table;
    WorkerRegistry& workers;
    TrialPipeline& pipeline;
    TunerCredits& credits;
    RunState& run;
    OfferBook& book;
  };
  explicit TrialLifecycle(Deps deps) : d_(deps) {}

  size_t running() const { return running_; }  // worker trials running
  size_t external_running() const { return external_running_; }
  size_t customized_open() const { return customized_open_; }
  void CustomizedAdded() { ++customized_open_; }
  // Waiting, offered or running on a worker.
  size_t Active() const { return d_.book.waiting() + d_.book.offered() + running_; }

  // A new trial: queued (or, external, running), unless a middleware answers it.
  Trial& Create(int64_t parameter_id, protocol::ParameterSource source,
                protocol::Packed parameters, Clock::time_point now);
  // Before Start(): a trial from the store, placed as resume wants it
  // (wire-format.md §5.3).
  void Restore(Trial trial, Clock::time_point now, std::chrono::milliseconds reattach_grace);
  // The worker runs the trial's current attempt (its offer, or after a
  // restart); `w` is null for a worker the host does not know.
  void Attach(Trial& trial, const std::string& worker_id, WorkerInfo* w);
  void Requeue(Trial& trial, bool new_attempt, std::string_view why);
  void Kill(Trial& trial, std::string_view reason);
  void End(Trial& trial, protocol::TrialStatus status, std::string error,
           Clock::time_point now);
  // The experiment stopped: every open trial ends (running ones are killed).
  void EndOpen(std::string_view reason, Clock::time_point now);

 private:
  // A middleware answered a new trial: it ends SUCCEEDED with `result`.
  void AnswerFromMiddleware(Trial& trial, const protocol::Metric& result,
                            std::string_view middleware, Clock::time_point now);

  Deps d_;
  size_t running_ = 0;
  size_t external_running_ = 0;        // GE trials not ended yet
  size_t customized_open_ = 0;         // AD trials not ended yet
  uint32_t consecutive_failures_ = 0;  // trials ended FAILED since the last that did not
};

// After every event: offers for free slots, tuner requests for what they
// can take, and the experiment status that follows.
class Scheduler {
 public:
  Scheduler(const EngineOptions& options, EngineSink* sink, RunState& run,
            TunerCredits& credits, WorkerRegistry& workers, OfferBook& book,
            TrialTable& table, TrialLifecycle& lifecycle, const EngineStats& stats)
      : options_(options), sink_(sink), run_(run), credits_(credits), workers_(workers),
        book_(book), table_(table), lifecycle_(lifecycle), stats_(stats) {}
  void Pump(Clock::time_point now);

 private:
  void UpdateStatus(Clock::time_point now);

  const EngineOptions& options_;
  EngineSink* sink_;
  RunState& run_;
  TunerCredits& credits_;
  WorkerRegistry& workers_;
  OfferBook& book_;
  TrialTable& table_;
  TrialLifecycle& lifecycle_;
  const EngineStats& stats_;
};

// Messages from workers about themselves and their trials (WH, HB, TS, TR,
// BY), and their liveness (the Paranoid Pirate's heartbeats).
class WorkerSessions {
 public:
  WorkerSessions(const EngineOptions& options, EngineSink* sink, EngineStats& stats,
                 TrialTable& table, WorkerRegistry& workers, OfferBook& book,
                 TrialLifecycle& lifecycle, Scheduler& scheduler)
      : options_(options), sink_(sink), stats_(stats), table_(table), workers_(workers),
        book_(book), lifecycle_(lifecycle), scheduler_(scheduler) {}
  Status OnHello(const protocol::WorkerHello& m, Clock::time_point now);
  void OnHeartbeat(const protocol::Heartbeat& m, Clock::time_point now);
  Status OnStarted(const protocol::TrialStarted& m, Clock::time_point now);
  void OnRejected(const protocol::TrialRejected& m, Clock::time_point now);
  void OnBye(const protocol::WorkerBye& m, Clock::time_point now);
  // Ack timeouts and worker liveness.
  void Tick(Clock::time_point now);

 private:
  void ReconcileRunning(WorkerInfo& worker, const std::vector<protocol::RunningTrial>& running,
                        bool from_hello, Clock::time_point now);
  void DropWorker(const std::string& worker_id, std::string_view why, Clock::time_point now);
  // A running or offered trial whose worker is gone: offered again as a new
  // attempt, unless its FINAL was accepted, when it ends SUCCEEDED.
  void WorkerLost(Trial& trial, std::string_view why, Clock::time_point now);

  const EngineOptions& options_;
  EngineSink* sink_;
  EngineStats& stats_;
  TrialTable& table_;
  WorkerRegistry& workers_;
  OfferBook& book_;
  TrialLifecycle& lifecycle_;
  Scheduler& scheduler_;
};

// Results of trials: metrics (to the store, the tuner and the assessor)
// and trial ends, from workers or control clients.
class ResultIntake {
 public:
  ResultIntake(const EngineOptions& options, EngineSink* sink, TrialTable& table,
               WorkerRegistry& workers, TrialPipeline& pipeline, TrialLifecycle& lifecycle,
               Scheduler& scheduler)
      : options_(options), sink_(sink), table_(table), workers_(workers),
        pipeline_(pipeline), lifecycle_(lifecycle), scheduler_(scheduler) {}
  Status OnMetric(const protocol::ReportMetricData& m, Clock::time_point now);
  Status OnTrialEnd(const protocol::TrialEnd& m, Clock::time_point now);
  void OnAssessment(const std::string& trial_id, uint32_t attempt, bool good);

 private:
  // NNI: the assessor sees the contiguous history from sequence 0; it waits
  // while a gap precedes the new value.
  void Assess(Trial& trial, uint64_t sequence);

  const EngineOptions& options_;
  EngineSink* sink_;
  TrialTable& table_;
  WorkerRegistry& workers_;
  TrialPipeline& pipeline_;
  TrialLifecycle& lifecycle_;
  Scheduler& scheduler_;
};

// Where new trials come from: the tuner's answers and send_trial credits,
// trials a client adds (AD), and trials a client runs itself (GE).
class TrialSupply {
 public:
  TrialSupply(const EngineOptions& options, EngineSink* sink, const EngineStats& stats,
              RunState& run, TunerCredits& credits, TrialLifecycle& lifecycle,
              Scheduler& scheduler)
      : options_(options), sink_(sink), stats_(stats), run_(run), credits_(credits),
        lifecycle_(lifecycle), scheduler_(scheduler) {}
  void OnParameters(const std::vector<int64_t>& ids,
                    std::vector<std::pair<int64_t, protocol::Packed>> params, bool no_more,
                    const Status& status, Clock::time_point now);
  void OnSentTrial(int64_t parameter_id, protocol::Packed params, Clock::time_point now);
  void OnTunerBarrier(Clock::time_point now);
  Status AddCustomized(protocol::Packed parameters, Clock::time_point now, const Trial** added);
  Status ReserveExternal(uint32_t count, Clock::time_point now, std::vector<int64_t>* ids);
  std::vector<const Trial*> OnExternalParameters(
      const std::vector<int64_t>& ids,
      std::vector<std::pair<int64_t, protocol::Packed>> params, Clock::time_point now);

 private:
  // generate calls that fail in a row before the experiment fails.
  static constexpr int kMaxGenerateFailures = 3;

  const EngineOptions& options_;
  EngineSink* sink_;
  const EngineStats& stats_;
  RunState& run_;
  TunerCredits& credits_;
  TrialLifecycle& lifecycle_;
  Scheduler& scheduler_;
};

// What Engine owns: one of each part, wired to the others.
struct Engine::Parts {
  Parts(EngineOptions o, EngineSink* s) : options(std::move(o)), sink(s) {}
  EngineOptions options;
  EngineSink* sink;
  EngineStats stats;
  TrialTable table{stats};
  WorkerRegistry workers;
  TrialPipeline pipeline;
  TunerCredits credits{sink};
  RunState run{options, stats, credits};
  OfferBook book{options, sink, stats, table, workers};
  TrialLifecycle lifecycle{
      {options, sink, stats, table, workers, pipeline, credits, run, book}};
  Scheduler scheduler{options, sink, run, credits, workers, book, table, lifecycle, stats};
  WorkerSessions sessions{options, sink, stats, table, workers, book, lifecycle, scheduler};
  ResultIntake results{options, sink, table, workers, pipeline, lifecycle, scheduler};
  TrialSupply supply{options, sink, stats, run, credits, lifecycle, scheduler};
};

}  // namespace tunehost::host
