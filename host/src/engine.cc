// The trial engine: trials, leases, budgets and the experiment status. The
// worker side is in engine_workers.cc; resume, control queries and
// middleware in engine_control.cc.
#include "tunehost/host/engine.h"

#include <sys/random.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>

#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

std::string_view ToString(ExperimentStatus s) {
  switch (s) {
    case ExperimentStatus::kInitialized: return "INITIALIZED";
    case ExperimentStatus::kRunning: return "RUNNING";
    case ExperimentStatus::kNoMoreTrial: return "NO_MORE_TRIAL";
    case ExperimentStatus::kTunerNoMoreTrial: return "TUNER_NO_MORE_TRIAL";
    case ExperimentStatus::kDone: return "DONE";
    case ExperimentStatus::kStopping: return "STOPPING";
    case ExperimentStatus::kStopped: return "STOPPED";
    case ExperimentStatus::kError: return "ERROR";
    case ExperimentStatus::kViewed: return "VIEWED";
  }
  return "ERROR";
}

std::vector<int64_t> ParameterIdPool::Allocate(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    ids.push_back(next_);
    open_.insert(next_++);
  }
  return ids;
}

bool ParameterIdPool::Claim(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.erase(id) == 1;
}

bool ParameterIdPool::IsOpen(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.count(id) == 1;
}

int64_t ParameterIdPool::next() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_;
}

void ParameterIdPool::StartAt(int64_t next) {
  std::lock_guard<std::mutex> lock(mu_);
  next_ = std::max(next_, next);
}

void Trial::NextAttempt() {
  ++attempt;
  periodical.clear();
  final_metric.reset();
  final_synthesized = false;
  assessor_stopped = false;
  missed_heartbeats = 0;
}

Engine::Engine(EngineOptions options, EngineSink* sink)
    : options_(std::move(options)), sink_(sink) {
  if (options_.concurrency == 0) options_.concurrency = 1;
  front_.SetObjectives(options_.objectives);
}

void Engine::SetOptions(EngineOptions options) {
  if (status_ != ExperimentStatus::kInitialized) return;
  options_ = std::move(options);
  if (options_.concurrency == 0) options_.concurrency = 1;
  front_.SetObjectives(options_.objectives);
}

void Engine::Start(Clock::time_point now) {
  if (status_ != ExperimentStatus::kInitialized) return;
  status_ = ExperimentStatus::kRunning;
  started_ = now - restored_elapsed_;
  Pump(now);
}

void Engine::Stop(std::string_view reason) {
  if (finished() || status_ == ExperimentStatus::kViewed) return;
  status_ = ExperimentStatus::kStopped;
  RevokeCredits();
  credited_.clear();
  // Every trial still open ends here, once, as USER_CANCELED (NNI's status for
  // a stopped experiment's trials), so plugins and the summary see all of
  // them. Running ones are killed first; an offer nobody answered yet has no
  // known worker to tell.
  std::vector<std::string> open;
  for (const auto& [id, trial] : trials_) {
    if (trial.state != TrialState::kEnded) open.push_back(id);
  }
  std::sort(open.begin(), open.end());
  const Clock::time_point now = Clock::now();
  for (const std::string& id : open) {
    Trial& t = trials_.at(id);
    if (t.state == TrialState::kRunning) Kill(t, reason);
    if (t.final_metric) {
      // It reported its FINAL; only its EN is missing. A trial whose FINAL
      // is stored is never run again, not even by a resume.
      EndTrial(t, p::TrialStatus::kSucceeded, "", now);
    } else {
      EndTrial(t, p::TrialStatus::kUserCanceled, "experiment stopped", now);
    }
  }
}

void Engine::Fail(std::string reason) {
  if (status_ == ExperimentStatus::kError || status_ == ExperimentStatus::kStopped) return;
  spdlog::error("experiment {}: {}", options_.experiment_id, reason);
  status_ = ExperimentStatus::kError;
  RevokeCredits();
  credited_.clear();
  error_ = std::move(reason);
}

bool Engine::finished() const {
  switch (status_) {
    case ExperimentStatus::kDone:
    case ExperimentStatus::kStopped:
      return true;
    case ExperimentStatus::kError:
      return ActiveCount() == 0 && external_running_ == 0;
    default:
      return false;
  }
}

const Trial* Engine::Find(const std::string& trial_id) const {
  auto it = trials_.find(trial_id);
  return it == trials_.end() ? nullptr : &it->second;
}

uint64_t Engine::NewLease() {
  // Unpredictable, so a worker that saw other offers cannot guess one it
  // did not get (getrandom: the kernel's CSPRNG; a few hundred ns).
  uint64_t lease = 0;
  while (lease == 0) {
    if (getrandom(&lease, sizeof lease, 0) != static_cast<ssize_t>(sizeof lease)) {
      std::random_device device;  // getrandom fails only when interrupted
      lease = (static_cast<uint64_t>(device()) << 32) ^ device();
    }
  }
  return lease;
}

p::NewTrialJob Engine::JobFor(const Trial& trial) const {
  p::NewTrialJob job;
  job.experiment_id = options_.experiment_id;
  job.trial_id = trial.id;
  job.sequence_id = trial.sequence_id;
  job.attempt = trial.attempt;
  job.parameter_id = trial.parameter_id;
  job.parameter_source = trial.source;
  job.parameter_index = 0;
  job.parameters = trial.parameters;
  return job;
}

Trial& Engine::NewTrial(int64_t parameter_id, p::ParameterSource source, p::Packed parameters,
                        Clock::time_point now) {
  char id[32];
  std::snprintf(id, sizeof id, "T%05llu", static_cast<unsigned long long>(next_sequence_));
  Trial& t = trials_[id];
  t.id = id;
  t.sequence_id = next_sequence_++;
  in_order_.push_back(&t);  // sequence ids only grow here
  t.parameter_id = parameter_id;
  t.source = source;
  t.parameters = std::move(parameters);
  t.offered_at = now;
  ++stats_.created;  // every trial counts against max_trials, external ones too
  if (source != p::ParameterSource::kExternal) {
    waiting_.push_back(t.id);
  } else {
    t.state = TrialState::kRunning;  // run by the client that asked for it
    t.started_at = now;
    ++external_running_;
  }
  quiet_ = false;
  sink_->TrialChanged(t, "created", p::ToString(source));
  sink_->Publish(JobFor(t));
  if (source != p::ParameterSource::kExternal) {
    for (auto& m : middleware_) {
      if (std::optional<p::Metric> result = m->OnSubmit(t)) {
        AnswerFromMiddleware(t, *result, m->name(), now);
        break;
      }
    }
  }
  return t;
}

Status Engine::TakesNewTrials() const {
  switch (status_) {
    case ExperimentStatus::kRunning:
    case ExperimentStatus::kTunerNoMoreTrial:
    case ExperimentStatus::kNoMoreTrial:
      return Status::Ok();
    default:
      return Status::BadState("experiment is " + std::string(ToString(status_)) +
                              ": it takes no new trials");
  }
}

Status Engine::AddCustomized(p::Packed parameters, Clock::time_point now, const Trial** added) {
  Status st = TakesNewTrials();
  if (!st.ok()) return st;
  if (!BudgetOpen(now)) {
    return Status::BadState("the experiment's budget (max_trials " +
                            std::to_string(options_.max_trials) +
                            ", max_duration) is used up: it takes no new trials");
  }
  if (customized_open_ >= p::kMaxQueuedCustomTrials) {
    return Status::BadState(std::to_string(customized_open_) +
                            " added trials have not ended yet (the limit is " +
                            std::to_string(p::kMaxQueuedCustomTrials) + ")");
  }
  int64_t id = ids_.Allocate(1).front();
  ids_.Claim(id);
  Trial& t = NewTrial(id, p::ParameterSource::kCustomized, std::move(parameters), now);
  ++customized_open_;
  if (added != nullptr) *added = &t;
  Pump(now);
  return Status::Ok();
}

Status Engine::ReserveExternal(uint32_t count, Clock::time_point now, std::vector<int64_t>* ids) {
  ids->clear();
  Status st = TakesNewTrials();
  if (!st.ok()) return st;
  size_t n = count;
  if (options_.max_duration.count() > 0 && now - started_ >= options_.max_duration) n = 0;
  if (options_.max_trials != 0) {
    const uint64_t used = stats_.created + inflight_ids_ + credited_.size();
    n = std::min<uint64_t>(n, used >= options_.max_trials ? 0 : options_.max_trials - used);
  }
  if (n == 0) return Status::Ok();
  inflight_ids_ += n;  // held against the budget until the tuner answers
  *ids = ids_.Allocate(n);
  return Status::Ok();
}

std::vector<const Trial*> Engine::OnExternalParameters(
    const std::vector<int64_t>& ids, std::vector<std::pair<int64_t, p::Packed>> params,
    Clock::time_point now) {
  inflight_ids_ -= std::min(inflight_ids_, ids.size());
  std::vector<const Trial*> created;
  for (auto& [id, packed] : params) {
    if (!ids_.Claim(id)) continue;
    created.push_back(&NewTrial(id, p::ParameterSource::kExternal, std::move(packed), now));
  }
  // A client asked now; ids the tuner did not answer are not credits.
  for (int64_t id : ids) ids_.Revoke(id);
  Pump(now);
  return created;
}

void Engine::Requeue(Trial& t, bool new_attempt, std::string_view why) {
  if (t.state == TrialState::kRunning) {
    auto w = workers_.find(t.worker_id);
    if (w != workers_.end()) {
      w->second.running.erase(t.id);
      MaybeReady(w->second);
    }
    --running_;
  } else if (t.state == TrialState::kOffered) {
    CloseOffer(t);
  } else {
    return;
  }
  t.state = TrialState::kWaiting;
  t.worker_id.clear();
  t.kill_sent = false;
  StopAwaitingReattach(t);
  if (new_attempt) {
    t.NextAttempt();
    ++stats_.reoffers;
    spdlog::info("trial {} re-offered as attempt {}: {}", t.id, t.attempt, why);
  }
  waiting_.push_front(t.id);
  sink_->TrialChanged(t, "requeued", why);
}

void Engine::Kill(Trial& t, std::string_view reason) {
  if (t.worker_id.empty()) return;
  t.kill_sent = true;
  sink_->TrialChanged(t, "kill", reason);
  p::KillTrialJob ki{t.id, t.attempt, std::string(reason)};
  sink_->SendToWorker(t.worker_id, ki);
  sink_->Publish(ki);
}

Status Engine::OnMetric(const p::ReportMetricData& m, Clock::time_point now) {
  bool from_worker = !m.worker_id.empty();
  if (from_worker) {
    if (Seen(m.worker_id, now) == nullptr) sink_->SendToWorker(m.worker_id, p::HelloRequest{});
    // Acknowledge whatever happens next: the worker must stop resending.
    sink_->SendToWorker(m.worker_id, p::MetricAck{m.trial_id, m.attempt, m.sequence});
  }
  auto it = trials_.find(m.trial_id);
  if (it == trials_.end()) return Status::NotFound("metric for unknown trial " + m.trial_id);
  Trial& t = it->second;
  if (t.attempt != m.attempt && t.source != p::ParameterSource::kExternal) {
    spdlog::debug("metric of superseded attempt {} of trial {} dropped", m.attempt, t.id);
    return Status::Ok();
  }
  if (from_worker && t.source == p::ParameterSource::kExternal) {
    return Status::BadState("metric for trial " + t.id + " from worker " + m.worker_id +
                            ": the client that asked for it (GE) runs it and reports it");
  }
  if (from_worker &&
      (t.state == TrialState::kRunning ? t.worker_id != m.worker_id
                                       : t.state != TrialState::kEnded &&
                                             !MayReattach(t, m.worker_id))) {
    // One worker holds a running attempt (its lease): results of the same
    // attempt from another are not this trial's, and nobody's count for an
    // attempt no worker holds, but those of the worker a restored trial
    // waits for (wire-format.md §5.3).
    return Status::BadState("metric for trial " + t.id + " from worker " + m.worker_id +
                            ", which does not run it");
  }
  if (m.type == p::MetricType::kPeriodical && m.sequence >= p::kMaxPeriodicalResults) {
    // Acknowledged (the worker must stop resending) and dropped.
    return Status::BadField("metric sequence " + std::to_string(m.sequence) + " of trial " +
                            t.id + " is over the limit of " +
                            std::to_string(p::kMaxPeriodicalResults) +
                            " intermediate results per attempt");
  }
  if (t.state == TrialState::kEnded) {
    if (from_worker && t.worker_id != m.worker_id) {
      // Only the worker that ran the attempt may still deliver its results.
      return Status::BadState("metric for ended trial " + t.id + " from worker " +
                              m.worker_id + ", which did not run it");
    }
    // A result that arrives after its trial ended (its worker resent it after
    // a restart, say) is kept, since it was acknowledged; it changes nothing.
    const bool known = m.type == p::MetricType::kFinal ? t.final_metric.has_value()
                                                       : t.periodical.count(m.sequence) != 0;
    if (!known) {
      if (m.type == p::MetricType::kPeriodical) t.periodical.emplace(m.sequence, m.value);
      sink_->MetricAccepted(t, m);
      spdlog::debug("late metric {} of ended trial {} kept", m.sequence, t.id);
    }
    return Status::Ok();
  }
  const bool final = m.type == p::MetricType::kFinal;
  if (final ? t.final_metric.has_value() : t.periodical.count(m.sequence) != 0) {
    return Status::Ok();  // duplicate
  }
  TrialEvent event;
  event.kind = final ? TrialEventKind::kFinalMetric : TrialEventKind::kIntermediateMetric;
  event.trial = &t;
  event.metric = &m;
  if (!Dispatch(event)) return Status::Ok();
  if (final) {
    t.final_metric = m.value;
    sink_->MetricAccepted(t, m);
    if (sink_->WantsEvent("ME")) sink_->Publish(m);
    sink_->TunerResult(t, m.value);
    return Status::Ok();
  }
  if (!t.periodical.emplace(m.sequence, m.value).second) return Status::Ok();  // duplicate
  sink_->MetricAccepted(t, m);
  if (sink_->WantsEvent("ME")) sink_->Publish(m);
  if (!options_.has_assessor || t.assessor_stopped) return Status::Ok();
  // NNI: assess the contiguous history from sequence 0; wait while a gap
  // precedes the new value.
  uint64_t contiguous = 0;
  for (const auto& [seq, value] : t.periodical) {
    if (seq != contiguous) break;
    ++contiguous;
  }
  if (contiguous < m.sequence + 1) return Status::Ok();
  msgpack::sbuffer history;
  msgpack::packer<msgpack::sbuffer> pk(history);
  pk.pack_array(static_cast<uint32_t>(contiguous));
  uint64_t n = 0;
  for (const auto& [seq, value] : t.periodical) {
    if (n++ == contiguous) break;
    history.write(value.raw.data(), value.raw.size());
  }
  t.assessed = true;
  sink_->AssessorAssess(t, p::Packed(history.data(), history.size()));
  return Status::Ok();
}

void Engine::OnAssessment(const std::string& trial_id, uint32_t attempt, bool good) {
  if (good) return;
  auto it = trials_.find(trial_id);
  if (it == trials_.end()) return;
  Trial& t = it->second;
  if (t.state != TrialState::kRunning || t.attempt != attempt || t.assessor_stopped) return;
  t.assessor_stopped = true;
  spdlog::info("assessor stops trial {} (attempt {})", t.id, attempt);
  Kill(t, "assessor");
}

Status Engine::OnTrialEnd(const p::TrialEnd& m, Clock::time_point now) {
  if (!m.worker_id.empty() && Seen(m.worker_id, now) == nullptr) {
    sink_->SendToWorker(m.worker_id, p::HelloRequest{});
  }
  auto it = trials_.find(m.trial_id);
  if (it == trials_.end()) return Status::NotFound("unknown trial " + m.trial_id);
  Trial& t = it->second;
  if (t.state == TrialState::kEnded) return Status::Ok();  // duplicate
  if (!m.worker_id.empty() && t.source == p::ParameterSource::kExternal) {
    return Status::BadState("end of trial " + t.id + " from worker " + m.worker_id +
                            ": the client that asked for it (GE) runs it and reports it");
  }
  if (t.source != p::ParameterSource::kExternal && t.attempt == m.attempt &&
      MayReattach(t, m.worker_id)) {
    // The host restarted while this worker ran the attempt (a resumed trial
    // waits as an offer): the end counts.
    CloseOffer(t);
    StopAwaitingReattach(t);
    t.state = TrialState::kRunning;
    t.worker_id = m.worker_id;
    ++running_;
    if (auto w = workers_.find(m.worker_id); w != workers_.end()) w->second.running.insert(t.id);
    sink_->TrialChanged(t, "reattached", "its worker reported its end");
  }
  if (t.source != p::ParameterSource::kExternal &&
      (t.attempt != m.attempt || t.state != TrialState::kRunning)) {
    spdlog::debug("end of superseded attempt {} of trial {} ignored", m.attempt, t.id);
    return Status::Ok();
  }
  if (!m.worker_id.empty() && t.worker_id != m.worker_id &&
      t.source != p::ParameterSource::kExternal) {
    return Status::Ok();
  }
  p::TrialStatus status = m.status;
  if (t.assessor_stopped && status == p::TrialStatus::kUserCanceled) {
    status = p::TrialStatus::kEarlyStopped;
  }
  TrialEvent event;
  event.kind = TrialEventKind::kTrainingEnd;
  event.trial = &t;
  event.status = status;
  if (!Dispatch(event)) return Status::Ok();
  EndTrial(t, status, m.error, now);
  Pump(now);
  return Status::Ok();
}

void Engine::EndTrial(Trial& t, p::TrialStatus status, std::string error, Clock::time_point now) {
  if (t.state == TrialState::kRunning) {
    auto w = workers_.find(t.worker_id);
    if (w != workers_.end()) {
      w->second.running.erase(t.id);
      MaybeReady(w->second);
    }
    if (t.source != p::ParameterSource::kExternal) {
      --running_;
    } else {
      --external_running_;
    }
  } else if (t.state == TrialState::kOffered) {
    CloseOffer(t);
    StopAwaitingReattach(t);
  } else if (t.state == TrialState::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), t.id));
  }
  if (t.source == p::ParameterSource::kCustomized) --customized_open_;
  t.state = TrialState::kEnded;
  t.status = status;
  t.error = std::move(error);
  t.ended_at = now;
  bool success = status == p::TrialStatus::kSucceeded;
  // A trial that ended without a FINAL result: its last result is final
  // (Ray Tune's __duplicate__ rule).
  const bool synthesize = !t.final_metric && success && !t.periodical.empty();
  if (synthesize) {
    t.final_metric = t.periodical.rbegin()->second;
    t.final_synthesized = true;
  }
  CountEnded(t);
  ended_order_.push_back(t.id);
  quiet_ = false;
  sink_->TrialChanged(t, "ended", t.error);
  if (synthesize) sink_->TunerResult(t, *t.final_metric);
  sink_->TunerTrialEnd(t, success);
  if (t.assessed) sink_->AssessorTrialEnd(t, success);
  p::TrialEnd en{t.id, t.attempt, status, t.error, t.worker_id};
  sink_->Publish(en);
  for (auto& m : middleware_) m->OnEnded(t);
  tuner_exhausted_ = false;  // a trial end is when NNI asks the tuner again
  sink_->TrialFinished(t);
  // Cancelled and early-stopped trials say nothing about the trial command.
  if (status == p::TrialStatus::kFailed) {
    ++consecutive_failures_;
  } else if (success) {
    consecutive_failures_ = 0;
  }
  if (options_.max_consecutive_failures != 0 &&
      consecutive_failures_ == options_.max_consecutive_failures) {
    Fail(std::to_string(consecutive_failures_) + " trials in a row failed (the limit, "
         "maxConsecutiveFailures); the last, " + t.id + ": " +
         t.error.substr(0, t.error.find('\n')));
  }
}

void Engine::OnParameters(const std::vector<int64_t>& ids,
                          std::vector<std::pair<int64_t, p::Packed>> params, bool no_more,
                          const Status& status, Clock::time_point now) {
  inflight_ids_ -= std::min(inflight_ids_, ids.size());
  quiet_ = false;
  if (status.ok()) generate_failures_ = 0;
  size_t created = 0;
  std::set<int64_t> emitted;
  for (auto& [id, packed] : params) {
    if (!ids_.Claim(id)) {
      spdlog::warn("tuner emitted parameter id {} twice: second ignored", id);
      continue;
    }
    emitted.insert(id);
    NewTrial(id, p::ParameterSource::kAlgorithm, std::move(packed), now);
    ++created;
  }
  const bool waiting = status.ok() && status_ != ExperimentStatus::kStopped &&
                       status_ != ExperimentStatus::kDone && status_ != ExperimentStatus::kError;
  if (waiting && created == ids.size()) {
    // A tuner that answers a request in full produces on demand: earlier
    // credits it has not served are not coming (a credit-pattern tuner
    // serves its credits first), so they stop holding slots and budget. A
    // send_trial for one of them now fails.
    RevokeCredits();
  }
  for (int64_t id : ids) {
    if (emitted.count(id) != 0) continue;
    // An id already claimed was sent from inside generate (its trial exists).
    if (waiting && ids_.IsOpen(id)) {
      credited_.insert(id);
    } else {
      ids_.Revoke(id);
    }
  }
  if (!status.ok()) {
    // A tuner that cannot generate would stall the experiment silently:
    // after kMaxGenerateFailures in a row, stop asking and say why. Fewer
    // are asked again (an isolated tuner is restarted meanwhile).
    if (++generate_failures_ >= kMaxGenerateFailures) {
      Fail("tuner failed to generate parameters " + std::to_string(generate_failures_) +
           " times in a row: " + status.message());
    } else {
      spdlog::warn("experiment {}: tuner failed to generate parameters ({} of {} tries): {}",
                   options_.experiment_id, generate_failures_, kMaxGenerateFailures,
                   status.message());
    }
  } else if (no_more || created < ids.size()) {
    tuner_exhausted_ = true;
    sink_->Publish(p::NoMoreTrialJobs{static_cast<uint32_t>(ids.size()),
                                      static_cast<uint32_t>(created)});
  }
  Pump(now);
}

void Engine::OnSentTrial(int64_t parameter_id, p::Packed params, Clock::time_point now) {
  // The pool already gave this id to the tuner's send_trial (the claim is the
  // authority: an id revoked before could not be claimed).
  credited_.erase(parameter_id);
  if (status_ == ExperimentStatus::kStopped || status_ == ExperimentStatus::kDone ||
      status_ == ExperimentStatus::kError) {
    spdlog::warn("experiment {}: tuner sent parameters for id {} after the experiment ended; "
                 "ignored",
                 options_.experiment_id, parameter_id);
    return;
  }
  NewTrial(parameter_id, p::ParameterSource::kAlgorithm, std::move(params), now);
  Pump(now);
}

void Engine::RevokeCredits() {
  for (auto it = credited_.begin(); it != credited_.end();) {
    // A credit the tuner claimed meanwhile stays: its trial is on the way.
    it = ids_.Revoke(*it) ? credited_.erase(it) : std::next(it);
  }
}

void Engine::OnTunerBarrier(Clock::time_point now) {
  barrier_pending_ = false;
  if (ActiveCount() == 0 && inflight_ids_ == 0 && !credited_.empty()) {
    // Nothing runs and every tuner call has returned: ids the tuner still
    // holds will never be sent (an exhausted grid, say). The tuner is done.
    const size_t held = credited_.size();
    RevokeCredits();
    if (credited_.empty()) {
      spdlog::info("experiment {}: tuner holds {} unanswered ids with nothing running; no more "
                   "trials",
                   options_.experiment_id, held);
      tuner_exhausted_ = true;
    }
  }
  quiet_ = ActiveCount() == 0 && inflight_ids_ == 0 && credited_.empty();
  Pump(now);
}

void Engine::Tick(Clock::time_point now) {
  // Offers nobody answered.
  std::vector<std::string> expired;
  for (const std::string& id : offered_) {
    if (now - trials_.at(id).offered_at >= options_.ack_timeout) expired.push_back(id);
  }
  std::sort(expired.begin(), expired.end());
  for (const std::string& id : expired) {
    // A restored trial whose worker did not come back, or an offer nobody
    // answered; one that already reported its FINAL (its worker ran it and
    // the EN died with the old host, or its TS was lost) finished.
    Trial& t = trials_.at(id);
    WorkerLost(t, t.awaiting_reattach ? "its worker did not re-attach"
                                      : "offer not answered in time",
               now);
  }
  // Workers gone silent (Paranoid Pirate liveness).
  auto deadline = options_.heartbeat_interval * options_.liveness;
  std::vector<std::string> dead;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_seen > deadline) dead.push_back(id);
  }
  std::sort(dead.begin(), dead.end());
  for (const std::string& id : dead) DropWorker(id, "missed heartbeats", now);
  Pump(now);
}

bool Engine::BudgetOpen(Clock::time_point now) const {
  if (options_.max_trials != 0 &&
      stats_.created + inflight_ids_ + credited_.size() >= options_.max_trials) {
    return false;
  }
  if (options_.max_duration.count() > 0 && now - started_ >= options_.max_duration) return false;
  return true;
}

void Engine::Pump(Clock::time_point now) {
  bool live = status_ == ExperimentStatus::kRunning ||
              status_ == ExperimentStatus::kTunerNoMoreTrial ||
              status_ == ExperimentStatus::kNoMoreTrial || status_ == ExperimentStatus::kError;
  if (!live) return;
  if (options_.max_duration.count() > 0 && now - started_ >= options_.max_duration) {
    // Out of time: what never started is cancelled; what runs may finish.
    while (!waiting_.empty()) {
      Trial& t = trials_.at(waiting_.front());
      EndTrial(t, p::TrialStatus::kSysCanceled, "experiment duration exhausted", now);
    }
  }
  // Offers: never more than free slots, never more than the concurrency,
  // never more than kMaxInflightOffers out at once.
  const FreeSlots slots = CountFreeSlots();
  const size_t free = slots.all;
  size_t capacity = free > offered_.size() ? free - offered_.size() : 0;
  capacity = std::min(capacity, p::kMaxInflightOffers > offered_.size()
                                    ? p::kMaxInflightOffers - offered_.size()
                                    : size_t{0});
  // The jobs socket's round robin is for workers that take no addressed
  // offers: the free slots of the others are offered only by address (one
  // whose subscription is not seen yet waits for it, §5.2).
  const size_t push_offered = offered_.size() - addressed_out_;
  size_t push_capacity = slots.push > push_offered ? slots.push - push_offered : 0;
  while (capacity > 0 && !waiting_.empty() &&
         offered_.size() + running_ < options_.concurrency) {
    Trial& t = trials_.at(waiting_.front());
    t.offered_at = now;
    t.lease = NewLease();
    p::NewTrialJob job = JobFor(t);
    job.lease = t.lease;
    // Addressed to a worker with a free slot when one takes addressed
    // offers; else through the jobs socket's round robin (§5.2).
    Worker* to = NextAddressable();
    if (to == nullptr && push_capacity == 0) break;
    if (!(to != nullptr ? sink_->SendJobTo(to->id, job) : sink_->SendJob(job))) {
      if (to != nullptr) MaybeReady(*to);  // taken from the queue, not offered
      break;
    }
    if (to == nullptr) --push_capacity;
    waiting_.pop_front();
    t.state = TrialState::kOffered;
    ++t.offers;
    offered_.insert(t.id);
    if (to != nullptr) {
      t.offered_to = to->id;
      ++to->offered;
      ++addressed_out_;
      ++stats_.addressed;
    }
    ++stats_.offers;
    --capacity;
  }
  // Requests: ask the tuner only for what free slots can take now, so it
  // decides as late as possible (with the most results), plus the prefetch.
  if (status_ != ExperimentStatus::kError && !tuner_exhausted_ && BudgetOpen(now)) {
    const size_t active = ActiveCount() + inflight_ids_ + credited_.size();
    const size_t limit = size_t{options_.concurrency} + options_.prefetch;
    const size_t want = limit > active ? limit - active : 0;
    const size_t ready = free + options_.prefetch;
    const size_t takers = ready > active - running_ ? ready - (active - running_) : 0;
    size_t n = std::min({want, takers, p::kMaxGenerateBatch});
    if (options_.max_trials != 0) {
      n = std::min<size_t>(
          n, options_.max_trials - stats_.created - inflight_ids_ - credited_.size());
    }
    if (n > 0) {
      inflight_ids_ += n;
      sink_->RequestParameters(ids_.Allocate(n));
    }
  }
  UpdateStatus(now);
}

void Engine::UpdateStatus(Clock::time_point now) {
  if (status_ == ExperimentStatus::kError || status_ == ExperimentStatus::kStopped ||
      status_ == ExperimentStatus::kDone || status_ == ExperimentStatus::kInitialized ||
      status_ == ExperimentStatus::kViewed) {
    return;
  }
  // Trials a client runs itself (GE) are part of the experiment: it is not
  // DONE while one runs.
  bool idle = ActiveCount() == 0 && inflight_ids_ == 0 && external_running_ == 0;
  if (idle && (!credited_.empty() || !quiet_)) {
    // The tuner may still send trials for its credits from a call not yet
    // run, or have sent one whose completion has not reached us: decide DONE
    // only after every posted tuner call has returned (a barrier).
    if (!barrier_pending_) {
      barrier_pending_ = true;
      sink_->TunerBarrier();
    }
    idle = false;
  }
  if (!BudgetOpen(now)) {
    status_ = idle ? ExperimentStatus::kDone : ExperimentStatus::kNoMoreTrial;
  } else if (tuner_exhausted_) {
    // Unlike NNI (#3859), an exhausted tuner with nothing left running is DONE.
    status_ = idle ? ExperimentStatus::kDone : ExperimentStatus::kTunerNoMoreTrial;
  } else {
    status_ = ExperimentStatus::kRunning;
  }
}

}  // namespace tunehost::host
