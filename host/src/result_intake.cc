// Results of trials: metrics from workers (acknowledged with MA) or control
// clients, what the assessor makes of them, and trial ends
// (wire-format.md §5.3: a trial's metrics are its current attempt's).
#include <msgpack.hpp>
#include <spdlog/spdlog.h>

#include "engine_parts.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

Status ResultIntake::OnMetric(const p::ReportMetricData& m, Clock::time_point now) {
  bool from_worker = !m.worker_id.empty();
  if (from_worker) {
    if (workers_.Seen(m.worker_id, now) == nullptr) {
      sink_->SendToWorker(m.worker_id, p::HelloRequest{});
    }
    // Acknowledge whatever happens next: the worker must stop resending.
    sink_->SendToWorker(m.worker_id, p::MetricAck{m.trial_id, m.attempt, m.sequence});
  }
  Trial* found = table_.Find(m.trial_id);
  if (found == nullptr) return Status::NotFound("metric for unknown trial " + m.trial_id);
  Trial& t = *found;
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
  if (!pipeline_.Dispatch(event)) return Status::Ok();
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
  Assess(t, m.sequence);
  return Status::Ok();
}

void ResultIntake::Assess(Trial& t, uint64_t sequence) {
  uint64_t contiguous = 0;
  for (const auto& [seq, value] : t.periodical) {
    if (seq != contiguous) break;
    ++contiguous;
  }
  if (contiguous < sequence + 1) return;
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
}

void ResultIntake::OnAssessment(const std::string& trial_id, uint32_t attempt, bool good) {
  if (good) return;
  Trial* found = table_.Find(trial_id);
  if (found == nullptr) return;
  Trial& t = *found;
  if (t.state != TrialState::kRunning || t.attempt != attempt || t.assessor_stopped) return;
  t.assessor_stopped = true;
  spdlog::info("assessor stops trial {} (attempt {})", t.id, attempt);
  lifecycle_.Kill(t, "assessor");
}

Status ResultIntake::OnTrialEnd(const p::TrialEnd& m, Clock::time_point now) {
  if (!m.worker_id.empty() && workers_.Seen(m.worker_id, now) == nullptr) {
    sink_->SendToWorker(m.worker_id, p::HelloRequest{});
  }
  Trial* found = table_.Find(m.trial_id);
  if (found == nullptr) return Status::NotFound("unknown trial " + m.trial_id);
  Trial& t = *found;
  if (t.state == TrialState::kEnded) return Status::Ok();  // duplicate
  if (!m.worker_id.empty() && t.source == p::ParameterSource::kExternal) {
    return Status::BadState("end of trial " + t.id + " from worker " + m.worker_id +
                            ": the client that asked for it (GE) runs it and reports it");
  }
  if (t.source != p::ParameterSource::kExternal && t.attempt == m.attempt &&
      MayReattach(t, m.worker_id)) {
    // The host restarted while this worker ran the attempt (a resumed trial
    // waits as an offer): the end counts.
    lifecycle_.Attach(t, m.worker_id, workers_.Find(m.worker_id));
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
  if (!pipeline_.Dispatch(event)) return Status::Ok();
  lifecycle_.End(t, status, m.error, now);
  scheduler_.Pump(now);
  return Status::Ok();
}

}  // namespace tunehost::host
