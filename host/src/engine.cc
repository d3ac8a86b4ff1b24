// The trial engine's facade: it owns the parts (engine_parts.h) and hands
// each event to the one whose job it is. Its control side (resume, queries,
// limits) is in engine_control.cc.
#include "tunehost/host/engine.h"

#include "engine_parts.h"

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

void Trial::NextAttempt() {
  ++attempt;
  periodical.clear();
  final_metric.reset();
  final_synthesized = false;
  assessor_stopped = false;
  missed_heartbeats = 0;
}

Engine::Engine(EngineOptions options, EngineSink* sink)
    : parts_(std::make_unique<Parts>(std::move(options), sink)) {
  if (parts_->options.concurrency == 0) parts_->options.concurrency = 1;
  parts_->table.SetObjectives(parts_->options.objectives);
}

Engine::~Engine() = default;

void Engine::SetOptions(EngineOptions options) {
  if (parts_->run.status() != ExperimentStatus::kInitialized) return;
  parts_->options = std::move(options);
  if (parts_->options.concurrency == 0) parts_->options.concurrency = 1;
  parts_->table.SetObjectives(parts_->options.objectives);
}

void Engine::Start(Clock::time_point now) {
  if (parts_->run.status() != ExperimentStatus::kInitialized) return;
  parts_->run.set_status(ExperimentStatus::kRunning);
  parts_->run.Start(now);
  parts_->scheduler.Pump(now);
}

void Engine::Stop(std::string_view reason) {
  if (finished() || parts_->run.status() == ExperimentStatus::kViewed) return;
  parts_->run.set_status(ExperimentStatus::kStopped);
  parts_->credits.Drop();
  parts_->lifecycle.EndOpen(reason, Clock::now());
}

void Engine::Fail(std::string reason) { parts_->run.Fail(std::move(reason)); }

bool Engine::finished() const {
  switch (parts_->run.status()) {
    case ExperimentStatus::kDone:
    case ExperimentStatus::kStopped:
      return true;
    case ExperimentStatus::kError:
      return parts_->lifecycle.Active() == 0 && parts_->lifecycle.external_running() == 0;
    default:
      return false;
  }
}

// --- worker messages, results and tuner answers: each to its part ---

Status Engine::OnHello(const p::WorkerHello& m, Clock::time_point now) {
  return parts_->sessions.OnHello(m, now);
}

void Engine::OnHeartbeat(const p::Heartbeat& m, Clock::time_point now) {
  parts_->sessions.OnHeartbeat(m, now);
}

Status Engine::OnStarted(const p::TrialStarted& m, Clock::time_point now) {
  return parts_->sessions.OnStarted(m, now);
}

void Engine::OnRejected(const p::TrialRejected& m, Clock::time_point now) {
  parts_->sessions.OnRejected(m, now);
}

void Engine::OnBye(const p::WorkerBye& m, Clock::time_point now) {
  parts_->sessions.OnBye(m, now);
}

void Engine::Tick(Clock::time_point now) { parts_->sessions.Tick(now); }

void Engine::OnSubscription(const std::string& worker_id, bool subscribed,
                            Clock::time_point now) {
  if (parts_->workers.Subscribe(worker_id, subscribed)) parts_->scheduler.Pump(now);
}

void Engine::ClearSubscriptions() { parts_->workers.ClearSubscriptions(); }

Status Engine::OnMetric(const p::ReportMetricData& m, Clock::time_point now) {
  return parts_->results.OnMetric(m, now);
}

Status Engine::OnTrialEnd(const p::TrialEnd& m, Clock::time_point now) {
  return parts_->results.OnTrialEnd(m, now);
}

void Engine::OnAssessment(const std::string& trial_id, uint32_t attempt, bool good) {
  parts_->results.OnAssessment(trial_id, attempt, good);
}

void Engine::OnParameters(const std::vector<int64_t>& ids,
                          std::vector<std::pair<int64_t, p::Packed>> params, bool no_more,
                          const Status& status, Clock::time_point now) {
  parts_->supply.OnParameters(ids, std::move(params), no_more, status, now);
}

void Engine::OnSentTrial(int64_t parameter_id, p::Packed params, Clock::time_point now) {
  parts_->supply.OnSentTrial(parameter_id, std::move(params), now);
}

void Engine::OnTunerBarrier(Clock::time_point now) { parts_->supply.OnTunerBarrier(now); }

Status Engine::AddCustomized(p::Packed parameters, Clock::time_point now, const Trial** added) {
  return parts_->supply.AddCustomized(std::move(parameters), now, added);
}

Status Engine::ReserveExternal(uint32_t count, Clock::time_point now, std::vector<int64_t>* ids) {
  return parts_->supply.ReserveExternal(count, now, ids);
}

std::vector<const Trial*> Engine::OnExternalParameters(
    const std::vector<int64_t>& ids, std::vector<std::pair<int64_t, p::Packed>> params,
    Clock::time_point now) {
  return parts_->supply.OnExternalParameters(ids, std::move(params), now);
}

}  // namespace tunehost::host
