// The engine's resume, control queries and middleware (wire-format.md §4.2,
// §5.3): what the store and clients see of it.
#include "tunehost/host/engine.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>

#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

// --- resume (wire-format.md §5.3) ---

void Engine::Restore(Trial t, Clock::time_point now, std::chrono::milliseconds reattach_grace) {
  const std::string id = t.id;
  Trial& r = trials_[id] = std::move(t);
  if (!in_order_.empty() && in_order_.back()->sequence_id > r.sequence_id) {
    in_order_sorted_ = false;
  }
  in_order_.push_back(&r);
  next_sequence_ = std::max(next_sequence_, r.sequence_id + 1);
  ++stats_.created;
  if (r.state != TrialState::kEnded && r.source == p::ParameterSource::kCustomized) {
    ++customized_open_;
  }
  switch (r.state) {
    case TrialState::kEnded:
      ended_order_.push_back(id);
      CountEnded(r);
      for (auto& m : middleware_) m->OnEnded(r);
      break;
    case TrialState::kRunning:
      if (r.source == p::ParameterSource::kExternal) {  // its client reports it
        ++external_running_;
        break;
      }
      // Its worker may still run it: hold it as an offer whose lease ends
      // after the grace period. A worker that re-announces it (WH after our
      // HR) takes it back; otherwise it is re-offered with a new attempt.
      r.state = TrialState::kOffered;
      r.reattach_worker = std::move(r.worker_id);
      r.worker_id.clear();
      r.awaiting_reattach = true;
      ++restored_waits_[r.reattach_worker];
      r.offered_at = now + reattach_grace - options_.ack_timeout;
      offered_.insert(id);
      break;
    case TrialState::kWaiting:
    case TrialState::kOffered:
      r.state = TrialState::kWaiting;
      r.worker_id.clear();
      waiting_.push_back(id);
      break;
  }
}

void Engine::RestoreCounters(int64_t next_parameter_id, std::chrono::milliseconds elapsed) {
  ids_.StartAt(next_parameter_id);
  restored_elapsed_ = elapsed;
}

void Engine::SetViewed() {
  if (status_ == ExperimentStatus::kInitialized) status_ = ExperimentStatus::kViewed;
}

Clock::duration Engine::elapsed(Clock::time_point now) const {
  if (status_ == ExperimentStatus::kInitialized || status_ == ExperimentStatus::kViewed) {
    return restored_elapsed_;
  }
  return now - started_;
}

// --- control (wire-format.md §4.2) ---

const std::vector<const Trial*>& Engine::TrialsInOrder() const {
  if (!in_order_sorted_) {
    std::sort(in_order_.begin(), in_order_.end(),
              [](const Trial* a, const Trial* b) { return a->sequence_id < b->sequence_id; });
    in_order_sorted_ = true;
  }
  return in_order_;
}

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
  // Every waiting trial is in waiting_, every offered one in offered_, every
  // running one counted in running_ or external_running_ (the engine keeps
  // them in step with Trial::state); ended ones are counted as they end.
  constexpr size_t kN = std::size(p::kControlTrialStatuses);
  static_assert(kN == 2 + std::size(decltype(ended_counts_){}));
  uint64_t counts[kN] = {waiting_.size() + offered_.size(), running_ + external_running_};
  for (size_t i = 2; i < kN; ++i) counts[i] = ended_counts_[i - 2];
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 0; i < kN; ++i) {
    if (counts[i] != 0) out.emplace_back(p::kControlTrialStatuses[i], counts[i]);
  }
  return out;
}

void Engine::CountEnded(const Trial& t) {
  // A stored trial whose status did not read back counts as FAILED, as
  // ControlStatus shows it.
  ++ended_counts_[static_cast<size_t>(t.status.value_or(p::TrialStatus::kFailed))];
  if (t.ended_at > last_ended_at_) last_ended_at_ = t.ended_at;
  if (t.status != p::TrialStatus::kSucceeded || !t.final_metric) return;
  front_.Offer(&t, *t.final_metric);
  if (!std::isfinite(t.final_metric->scalar)) return;
  const double v = t.final_metric->scalar;
  auto better = [&](const Trial* best, bool maximize) {
    if (best == nullptr) return true;
    const double b = best->final_metric->scalar;
    if (v != b) return maximize ? v > b : v < b;
    return t.sequence_id < best->sequence_id;  // a tie keeps the earlier trial
  };
  if (better(best_max_, true)) best_max_ = &t;
  if (better(best_min_, false)) best_min_ = &t;
}

Status Engine::KillTrial(const std::string& id, Clock::time_point now) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return Status::NotFound("unknown trial " + id);
  Trial& t = it->second;
  if (t.state == TrialState::kEnded) {
    return Status::BadState("trial " + id + " has already ended (" +
                            std::string(ControlStatus(t)) + ")");
  }
  spdlog::info("experiment {}: trial {} killed by a client", options_.experiment_id, t.id);
  if (t.state == TrialState::kRunning && !t.worker_id.empty()) {
    // Its worker stops it and answers EN USER_CANCELED; the trial ends then.
    Kill(t, "user");
    return Status::Ok();
  }
  // Nothing runs it (queued, an offer not answered yet, or an external
  // trial): it ends now. A worker that starts the offer later is told
  // "superseded" by OnStarted.
  EndTrial(t, p::TrialStatus::kUserCanceled, "killed by user", now);
  Pump(now);
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
  const bool changeable = status_ == ExperimentStatus::kInitialized ||
                          status_ == ExperimentStatus::kRunning ||
                          status_ == ExperimentStatus::kNoMoreTrial ||
                          status_ == ExperimentStatus::kTunerNoMoreTrial;
  if (!changeable) {
    return Status::BadState("experiment is " + std::string(ToString(status_)) +
                            ": its limits can no longer change");
  }
  if (concurrency) options_.concurrency = *concurrency;
  if (max_trials) options_.max_trials = *max_trials;
  if (max_duration_s) {
    double s = std::min(*max_duration_s, kMaxDurationS);
    options_.max_duration = std::chrono::milliseconds(static_cast<int64_t>(s * 1000 + 0.5));
  }
  spdlog::info("experiment {}: limits now concurrency {}, max_trials {}, max_duration {} ms",
               options_.experiment_id, options_.concurrency, options_.max_trials,
               options_.max_duration.count());
  if (status_ == ExperimentStatus::kInitialized) return Status::Ok();  // Start() applies them
  if (options_.max_trials != 0 &&
      stats_.created + inflight_ids_ + credited_.size() > options_.max_trials) {
    // Credits the tuner has not used would overrun the lowered budget.
    RevokeCredits();
  }
  // Offers and requests for a raised concurrency or a reopened budget; the
  // status follows (NO_MORE_TRIAL/DONE for a budget reached, RUNNING again).
  Pump(now);
  return Status::Ok();
}

// --- trial events and middleware ---

size_t Engine::IdleSlots() const {
  const size_t free = CountFreeSlots().all;
  const size_t capacity = free > offered_.size() ? free - offered_.size() : 0;
  const size_t busy = ActiveCount() + inflight_ids_ + credited_.size();
  const size_t room = options_.concurrency > busy ? options_.concurrency - busy : 0;
  return std::min(capacity, room);
}

int Engine::AddEventCallback(TrialEventCallback callback) {
  callbacks_.emplace_back(next_callback_, std::move(callback));
  return next_callback_++;
}

void Engine::RemoveEventCallback(int id) {
  callbacks_.erase(std::remove_if(callbacks_.begin(), callbacks_.end(),
                                  [id](const auto& c) { return c.first == id; }),
                   callbacks_.end());
}

void Engine::AddMiddleware(std::unique_ptr<TrialMiddleware> middleware) {
  middleware_.push_back(std::move(middleware));
}

bool Engine::Dispatch(TrialEvent& event) {
  for (auto& [id, callback] : callbacks_) {
    callback(event);
    if (event.cancel) return false;
  }
  return !event.prevent_default;
}

void Engine::AnswerFromMiddleware(Trial& t, const p::Metric& result, std::string_view middleware,
                                  Clock::time_point now) {
  spdlog::info("trial {} answered by middleware {} without running", t.id, middleware);
  p::ReportMetricData m;
  m.trial_id = t.id;
  m.attempt = t.attempt;
  m.parameter_id = t.parameter_id;
  m.type = p::MetricType::kFinal;
  m.sequence = 0;
  m.value = result;
  t.final_metric = result;
  sink_->MetricAccepted(t, m);
  sink_->Publish(m);
  sink_->TunerResult(t, result);
  sink_->TrialChanged(t, "answered", middleware);
  EndTrial(t, p::TrialStatus::kSucceeded, "", now);
}

std::optional<p::Metric> DeduplicateMiddleware::OnSubmit(Trial& trial) {
  auto it = results_.find(trial.parameters);
  if (it == results_.end()) return std::nullopt;
  return it->second;
}

void DeduplicateMiddleware::OnEnded(const Trial& trial) {
  if (trial.status == p::TrialStatus::kSucceeded && trial.final_metric) {
    results_.emplace(trial.parameters, *trial.final_metric);
  }
}

}  // namespace tunehost::host
