// A trial's moves between states: created (or restored), offered back,
// running on a worker, killed, ended; each told to the sink in the order
// EngineSink promises (the store first, then events and plugins).
#include <spdlog/spdlog.h>

#include "engine_parts.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

Trial& TrialLifecycle::Create(int64_t parameter_id, p::ParameterSource source,
                              p::Packed parameters, Clock::time_point now) {
  Trial& t = d_.table.Create(parameter_id, source, std::move(parameters));
  t.offered_at = now;
  if (source != p::ParameterSource::kExternal) {
    d_.book.Queue(t.id);
  } else {
    t.state = TrialState::kRunning;  // run by the client that asked for it
    t.started_at = now;
    ++external_running_;
  }
  d_.credits.Stir();
  d_.sink->TrialChanged(t, "created", p::ToString(source));
  d_.sink->Publish(JobFor(d_.options.experiment_id, t));
  if (source != p::ParameterSource::kExternal) {
    std::string_view by;
    if (std::optional<p::Metric> result = d_.pipeline.Submit(t, &by)) {
      AnswerFromMiddleware(t, *result, by, now);
    }
  }
  return t;
}

void TrialLifecycle::Restore(Trial trial, Clock::time_point now,
                             std::chrono::milliseconds reattach_grace) {
  Trial& r = d_.table.Restore(std::move(trial));
  if (r.state != TrialState::kEnded && r.source == p::ParameterSource::kCustomized) {
    ++customized_open_;
  }
  switch (r.state) {
    case TrialState::kEnded:
      d_.table.Ended(r);
      d_.pipeline.Ended(r);
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
      d_.workers.AwaitReattach(r.reattach_worker);
      r.offered_at = now + reattach_grace - d_.options.ack_timeout;
      d_.book.Hold(r.id);
      break;
    case TrialState::kWaiting:
    case TrialState::kOffered:
      r.state = TrialState::kWaiting;
      r.worker_id.clear();
      d_.book.Queue(r.id);
      break;
  }
}

void TrialLifecycle::Attach(Trial& t, const std::string& worker_id, WorkerInfo* w) {
  d_.book.Close(t);
  d_.workers.StopAwaitingReattach(t);
  t.state = TrialState::kRunning;
  t.worker_id = worker_id;
  if (w != nullptr) w->running.insert(t.id);
  ++running_;
}

void TrialLifecycle::Requeue(Trial& t, bool new_attempt, std::string_view why) {
  if (t.state == TrialState::kRunning) {
    d_.workers.TrialLeft(t.worker_id, t.id);
    --running_;
  } else if (t.state == TrialState::kOffered) {
    d_.book.Close(t);
  } else {
    return;
  }
  t.state = TrialState::kWaiting;
  t.worker_id.clear();
  t.kill_sent = false;
  d_.workers.StopAwaitingReattach(t);
  if (new_attempt) {
    t.NextAttempt();
    ++d_.stats.reoffers;
    spdlog::info("trial {} re-offered as attempt {}: {}", t.id, t.attempt, why);
  }
  d_.book.Requeue(t.id);
  d_.sink->TrialChanged(t, "requeued", why);
}

void TrialLifecycle::Kill(Trial& t, std::string_view reason) {
  if (t.worker_id.empty()) return;
  t.kill_sent = true;
  d_.sink->TrialChanged(t, "kill", reason);
  p::KillTrialJob ki{t.id, t.attempt, std::string(reason)};
  d_.sink->SendToWorker(t.worker_id, ki);
  d_.sink->Publish(ki);
}

void TrialLifecycle::End(Trial& t, p::TrialStatus status, std::string error,
                         Clock::time_point now) {
  if (t.state == TrialState::kRunning) {
    d_.workers.TrialLeft(t.worker_id, t.id);
    if (t.source != p::ParameterSource::kExternal) {
      --running_;
    } else {
      --external_running_;
    }
  } else if (t.state == TrialState::kOffered) {
    d_.book.Close(t);
    d_.workers.StopAwaitingReattach(t);
  } else if (t.state == TrialState::kWaiting) {
    d_.book.Unqueue(t.id);
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
  d_.table.Ended(t);
  d_.credits.Stir();
  d_.sink->TrialChanged(t, "ended", t.error);
  if (synthesize) d_.sink->TunerResult(t, *t.final_metric);
  d_.sink->TunerTrialEnd(t, success);
  if (t.assessed) d_.sink->AssessorTrialEnd(t, success);
  p::TrialEnd en{t.id, t.attempt, status, t.error, t.worker_id};
  d_.sink->Publish(en);
  d_.pipeline.Ended(t);
  d_.credits.set_exhausted(false);  // a trial end is when NNI asks the tuner again
  d_.sink->TrialFinished(t);
  // Cancelled and early-stopped trials say nothing about the trial command.
  if (status == p::TrialStatus::kFailed) {
    ++consecutive_failures_;
  } else if (success) {
    consecutive_failures_ = 0;
  }
  if (d_.options.max_consecutive_failures != 0 &&
      consecutive_failures_ == d_.options.max_consecutive_failures) {
    d_.run.Fail(std::to_string(consecutive_failures_) + " trials in a row failed (the limit, "
                "maxConsecutiveFailures); the last, " + t.id + ": " +
                t.error.substr(0, t.error.find('\n')));
  }
}

void TrialLifecycle::EndOpen(std::string_view reason, Clock::time_point now) {
  // Every trial still open ends here, once, as USER_CANCELED (NNI's status for
  // a stopped experiment's trials), so plugins and the summary see all of
  // them. Running ones are killed first; an offer nobody answered yet has no
  // known worker to tell.
  for (const std::string& id : d_.table.OpenIds()) {
    Trial& t = d_.table.at(id);
    if (t.state == TrialState::kRunning) Kill(t, reason);
    if (t.final_metric) {
      // It reported its FINAL; only its EN is missing. A trial whose FINAL
      // is stored is never run again, not even by a resume.
      End(t, p::TrialStatus::kSucceeded, "", now);
    } else {
      End(t, p::TrialStatus::kUserCanceled, "experiment stopped", now);
    }
  }
}

void TrialLifecycle::AnswerFromMiddleware(Trial& t, const p::Metric& result,
                                          std::string_view middleware, Clock::time_point now) {
  spdlog::info("trial {} answered by middleware {} without running", t.id, middleware);
  p::ReportMetricData m;
  m.trial_id = t.id;
  m.attempt = t.attempt;
  m.parameter_id = t.parameter_id;
  m.type = p::MetricType::kFinal;
  m.sequence = 0;
  m.value = result;
  t.final_metric = result;
  d_.sink->MetricAccepted(t, m);
  d_.sink->Publish(m);
  d_.sink->TunerResult(t, result);
  d_.sink->TrialChanged(t, "answered", middleware);
  End(t, p::TrialStatus::kSucceeded, "", now);
}

}  // namespace tunehost::host
