// The engine's resume, control queries and limits (wire-format.md §4.2,
// §5.3): what the store and clients see of it and may change.
#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "engine_parts.h"
#include "tunehost/host/engine.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

// --- resume (wire-format.md §5.3) ---

void Engine::Restore(Trial t, Clock::time_point now, std::chrono::milliseconds reattach_grace) {
  parts_->lifecycle.Restore(std::move(t), now, reattach_grace);
}

void Engine::RestoreCounters(int64_t next_parameter_id, std::chrono::milliseconds elapsed) {
  parts_->credits.ids().StartAt(next_parameter_id);
  parts_->run.set_restored_elapsed(elapsed);
}

void Engine::SetViewed() {
  if (parts_->run.status() == ExperimentStatus::kInitialized) {
    parts_->run.set_status(ExperimentStatus::kViewed);
  }
}

Clock::duration Engine::elapsed(Clock::time_point now) const { return parts_->run.elapsed(now); }

// --- state and control queries (wire-format.md §4.2) ---

ExperimentStatus Engine::status() const { return parts_->run.status(); }
const std::string& Engine::error() const { return parts_->run.error(); }
Clock::time_point Engine::started_at() const { return parts_->run.started_at(); }
const EngineOptions& Engine::options() const { return parts_->options; }
const Engine::Stats& Engine::stats() const { return parts_->stats; }
ParameterIdPool& Engine::ids() { return parts_->credits.ids(); }
const Trial* Engine::Find(const std::string& trial_id) const {
  return parts_->table.Find(trial_id);
}
const std::vector<std::string>& Engine::ended_order() const {
  return parts_->table.ended_order();
}
const std::vector<const Trial*>& Engine::TrialsInOrder() const {
  return parts_->table.InOrder();
}
const Trial* Engine::BestTrial(bool maximize) const { return parts_->table.Best(maximize); }
const ParetoFront& Engine::pareto_front() const { return parts_->table.front(); }
Clock::time_point Engine::last_ended_at() const { return parts_->table.last_ended_at(); }
p::NewTrialJob Engine::JobFor(const Trial& trial) const {
  return host::JobFor(parts_->options.experiment_id, trial);
}

const std::unordered_map<std::string, Engine::Worker>& Engine::workers() const {
  return parts_->workers.all();
}
bool Engine::WorkerInUse(const std::string& worker_id) const {
  return parts_->workers.InUse(worker_id);
}
Engine::FreeSlots Engine::CountFreeSlots() const { return parts_->workers.CountFree(); }

std::string_view Engine::ControlStatus(const Trial& t) {
  switch (t.state) {
    case TrialState::kWaiting:
    case TrialState::kOffered: return "WAITING";
    case TrialState::kRunning: return "RUNNING";
    case TrialState::kEnded: break;
  }
  return t.status ? p::ToString(*t.status) : "FAILED";
}

std::vector<std::pair<std::string, uint64_t>> Engine::CountsByStatus() const {
  // Every waiting trial is in the offer book's queue, every offered one among
  // its offers, every running one counted by the lifecycle (each kept in step
  // with Trial::state); ended ones are counted as they end.
  const Parts& x = *parts_;
  return x.table.CountsByStatus(x.book.waiting() + x.book.offered(),
                                x.lifecycle.running() + x.lifecycle.external_running());
}

bool Engine::BudgetAvailable(Clock::time_point now) const { return parts_->run.BudgetOpen(now); }

size_t Engine::IdleSlots() const {
  const size_t capacity = parts_->book.Capacity(CountFreeSlots().all);
  const size_t busy = parts_->lifecycle.Active() + parts_->credits.held();
  const size_t room = options().concurrency > busy ? options().concurrency - busy : 0;
  return std::min(capacity, room);
}

int Engine::AddEventCallback(TrialEventCallback callback) {
  return parts_->pipeline.AddCallback(std::move(callback));
}

void Engine::RemoveEventCallback(int id) { parts_->pipeline.RemoveCallback(id); }

void Engine::AddMiddleware(std::unique_ptr<TrialMiddleware> middleware) {
  parts_->pipeline.AddMiddleware(std::move(middleware));
}

// --- control changes (wire-format.md §4.2) ---

Status Engine::KillTrial(const std::string& id, Clock::time_point now) {
  Trial* found = parts_->table.Find(id);
  if (found == nullptr) return Status::NotFound("unknown trial " + id);
  Trial& t = *found;
  if (t.state == TrialState::kEnded) {
    return Status::BadState("trial " + id + " has already ended (" +
                            std::string(ControlStatus(t)) + ")");
  }
  spdlog::info("experiment {}: trial {} killed by a client", options().experiment_id, t.id);
  if (t.state == TrialState::kRunning && !t.worker_id.empty()) {
    // Its worker stops it and answers EN USER_CANCELED; the trial ends then.
    parts_->lifecycle.Kill(t, "user");
    return Status::Ok();
  }
  // Nothing runs it (queued, an offer not answered yet, or an external
  // trial): it ends now. A worker that starts the offer later is told
  // "superseded" by OnStarted.
  parts_->lifecycle.End(t, p::TrialStatus::kUserCanceled, "killed by user", now);
  parts_->scheduler.Pump(now);
  return Status::Ok();
}

Status Engine::UpdateLimits(std::optional<uint32_t> concurrency,
                            std::optional<uint64_t> max_trials,
                            std::optional<double> max_duration_s, Clock::time_point now) {
  // Steady-clock arithmetic is in nanoseconds: longer budgets would overflow
  // it, and 100 years is unlimited in practice.
  constexpr double kMaxDurationS = 100.0 * 365 * 86400;
  if (concurrency && *concurrency == 0) return Status::BadField("concurrency: must be >= 1");
  if (max_duration_s && !(*max_duration_s >= 0 && *max_duration_s < 1e300)) {
    return Status::BadField("max_duration_s: must be a finite number >= 0");
  }
  const ExperimentStatus status = parts_->run.status();
  const bool changeable = status == ExperimentStatus::kInitialized ||
                          status == ExperimentStatus::kRunning ||
                          status == ExperimentStatus::kNoMoreTrial ||
                          status == ExperimentStatus::kTunerNoMoreTrial;
  if (!changeable) {
    return Status::BadState("experiment is " + std::string(ToString(status)) +
                            ": its limits can no longer change");
  }
  EngineOptions& o = parts_->options;
  if (concurrency) o.concurrency = *concurrency;
  if (max_trials) o.max_trials = *max_trials;
  if (max_duration_s) {
    double s = std::min(*max_duration_s, kMaxDurationS);
    o.max_duration = std::chrono::milliseconds(static_cast<int64_t>(s * 1000 + 0.5));
  }
  spdlog::info("experiment {}: limits now concurrency {}, max_trials {}, max_duration {} ms",
               o.experiment_id, o.concurrency, o.max_trials, o.max_duration.count());
  if (status == ExperimentStatus::kInitialized) return Status::Ok();  // Start() applies them
  if (o.max_trials != 0 && parts_->stats.created + parts_->credits.held() > o.max_trials) {
    // Credits the tuner has not used would overrun the lowered budget.
    parts_->credits.Revoke();
  }
  // Offers and requests for a raised concurrency or a reopened budget; the
  // status follows (NO_MORE_TRIAL/DONE for a budget reached, RUNNING again).
  parts_->scheduler.Pump(now);
  return Status::Ok();
}

}  // namespace tunehost::host
