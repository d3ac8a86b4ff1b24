// Where new trials come from: the tuner's answers to requests and its
// send_trial credits (NNI's credit pattern), trials a client adds (AD), and
// trials a client runs itself (GE) (wire-format.md §4.2).
#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "engine_parts.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

void TrialSupply::OnParameters(const std::vector<int64_t>& ids,
                               std::vector<std::pair<int64_t, p::Packed>> params, bool no_more,
                               const Status& status, Clock::time_point now) {
  credits_.Answered(ids.size());
  credits_.Stir();
  if (status.ok()) credits_.Generated();
  size_t created = 0;
  std::set<int64_t> emitted;
  for (auto& [id, packed] : params) {
    if (!credits_.ids().Claim(id)) {
      spdlog::warn("tuner emitted parameter id {} twice: second ignored", id);
      continue;
    }
    emitted.insert(id);
    lifecycle_.Create(id, p::ParameterSource::kAlgorithm, std::move(packed), now);
    ++created;
  }
  const bool waiting = status.ok() && run_.status() != ExperimentStatus::kStopped &&
                       run_.status() != ExperimentStatus::kDone &&
                       run_.status() != ExperimentStatus::kError;
  if (waiting && created == ids.size()) {
    // A tuner that answers a request in full produces on demand: earlier
    // credits it has not served are not coming (a credit-pattern tuner
    // serves its credits first), so they stop holding slots and budget. A
    // send_trial for one of them now fails.
    credits_.Revoke();
  }
  credits_.Credit(ids, emitted, waiting);
  if (!status.ok()) {
    // A tuner that cannot generate would stall the experiment silently:
    // after kMaxGenerateFailures in a row, stop asking and say why. Fewer
    // are asked again (an isolated tuner is restarted meanwhile).
    const int failures = credits_.GenerateFailed();
    if (failures >= kMaxGenerateFailures) {
      run_.Fail("tuner failed to generate parameters " + std::to_string(failures) +
                " times in a row: " + status.message());
    } else {
      spdlog::warn("experiment {}: tuner failed to generate parameters ({} of {} tries): {}",
                   options_.experiment_id, failures, kMaxGenerateFailures, status.message());
    }
  } else if (no_more || created < ids.size()) {
    credits_.set_exhausted(true);
    sink_->Publish(p::NoMoreTrialJobs{static_cast<uint32_t>(ids.size()),
                                      static_cast<uint32_t>(created)});
  }
  scheduler_.Pump(now);
}

void TrialSupply::OnSentTrial(int64_t parameter_id, p::Packed params, Clock::time_point now) {
  // The pool already gave this id to the tuner's send_trial (the claim is the
  // authority: an id revoked before could not be claimed).
  credits_.Used(parameter_id);
  if (run_.ended()) {
    spdlog::warn("experiment {}: tuner sent parameters for id {} after the experiment ended; "
                 "ignored",
                 options_.experiment_id, parameter_id);
    return;
  }
  lifecycle_.Create(parameter_id, p::ParameterSource::kAlgorithm, std::move(params), now);
  scheduler_.Pump(now);
}

void TrialSupply::OnTunerBarrier(Clock::time_point now) {
  credits_.BarrierDone(lifecycle_.Active(), options_.experiment_id);
  scheduler_.Pump(now);
}

Status TrialSupply::AddCustomized(p::Packed parameters, Clock::time_point now,
                                  const Trial** added) {
  Status st = run_.TakesNewTrials();
  if (!st.ok()) return st;
  if (!run_.BudgetOpen(now)) {
    return Status::BadState("the experiment's budget (max_trials " +
                            std::to_string(options_.max_trials) +
                            ", max_duration) is used up: it takes no new trials");
  }
  if (lifecycle_.customized_open() >= p::kMaxQueuedCustomTrials) {
    return Status::BadState(std::to_string(lifecycle_.customized_open()) +
                            " added trials have not ended yet (the limit is " +
                            std::to_string(p::kMaxQueuedCustomTrials) + ")");
  }
  int64_t id = credits_.ids().Allocate(1).front();
  credits_.ids().Claim(id);
  Trial& t = lifecycle_.Create(id, p::ParameterSource::kCustomized, std::move(parameters), now);
  lifecycle_.CustomizedAdded();
  if (added != nullptr) *added = &t;
  scheduler_.Pump(now);
  return Status::Ok();
}

Status TrialSupply::ReserveExternal(uint32_t count, Clock::time_point now,
                                    std::vector<int64_t>* ids) {
  ids->clear();
  Status st = run_.TakesNewTrials();
  if (!st.ok()) return st;
  size_t n = count;
  if (run_.OutOfTime(now)) n = 0;
  if (options_.max_trials != 0) {
    const uint64_t used = stats_.created + credits_.held();
    n = std::min<uint64_t>(n, used >= options_.max_trials ? 0 : options_.max_trials - used);
  }
  if (n == 0) return Status::Ok();
  *ids = credits_.Reserve(n);  // held against the budget until the tuner answers
  return Status::Ok();
}

std::vector<const Trial*> TrialSupply::OnExternalParameters(
    const std::vector<int64_t>& ids, std::vector<std::pair<int64_t, p::Packed>> params,
    Clock::time_point now) {
  credits_.Answered(ids.size());
  std::vector<const Trial*> created;
  for (auto& [id, packed] : params) {
    if (!credits_.ids().Claim(id)) continue;
    created.push_back(
        &lifecycle_.Create(id, p::ParameterSource::kExternal, std::move(packed), now));
  }
  // A client asked now; ids the tuner did not answer are not credits.
  for (int64_t id : ids) credits_.ids().Revoke(id);
  scheduler_.Pump(now);
  return created;
}

}  // namespace tunehost::host
