// The experiment's status and budget, and the scheduler that acts on them
// after every event: offers for free slots, tuner requests for what those
// slots can take (wire-format.md §5.3, prefetch), and the status that follows.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "engine_parts.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

void RunState::Fail(std::string reason) {
  if (status_ == ExperimentStatus::kError || status_ == ExperimentStatus::kStopped) return;
  spdlog::error("experiment {}: {}", options_.experiment_id, reason);
  status_ = ExperimentStatus::kError;
  credits_.Drop();
  error_ = std::move(reason);
}

Clock::duration RunState::elapsed(Clock::time_point now) const {
  if (status_ == ExperimentStatus::kInitialized || status_ == ExperimentStatus::kViewed) {
    return restored_elapsed_;
  }
  return now - started_;
}

Status RunState::TakesNewTrials() const {
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

bool RunState::BudgetOpen(Clock::time_point now) const {
  if (options_.max_trials != 0 && stats_.created + credits_.held() >= options_.max_trials) {
    return false;
  }
  return !OutOfTime(now);
}

void Scheduler::Pump(Clock::time_point now) {
  const ExperimentStatus status = run_.status();
  bool live = status == ExperimentStatus::kRunning ||
              status == ExperimentStatus::kTunerNoMoreTrial ||
              status == ExperimentStatus::kNoMoreTrial || status == ExperimentStatus::kError;
  if (!live) return;
  if (run_.OutOfTime(now)) {
    // Out of time: what never started is cancelled; what runs may finish.
    while (book_.waiting() != 0) {
      lifecycle_.End(table_.at(book_.next()), p::TrialStatus::kSysCanceled,
                     "experiment duration exhausted", now);
    }
  }
  const EngineFreeSlots slots = workers_.CountFree();
  book_.Offer(now, slots, lifecycle_.running());
  // Requests: ask the tuner only for what free slots can take now, so it
  // decides as late as possible (with the most results), plus the prefetch.
  if (run_.status() != ExperimentStatus::kError && !credits_.exhausted() &&
      run_.BudgetOpen(now)) {
    const size_t running = lifecycle_.running();
    const size_t active = lifecycle_.Active() + credits_.held();
    const size_t limit = size_t{options_.concurrency} + options_.prefetch;
    const size_t want = limit > active ? limit - active : 0;
    const size_t ready = slots.all + options_.prefetch;
    const size_t takers = ready > active - running ? ready - (active - running) : 0;
    size_t n = std::min({want, takers, p::kMaxGenerateBatch});
    if (options_.max_trials != 0) {
      n = std::min<size_t>(n, options_.max_trials - stats_.created - credits_.held());
    }
    if (n > 0) credits_.Request(n);
  }
  UpdateStatus(now);
}

void Scheduler::UpdateStatus(Clock::time_point now) {
  const ExperimentStatus status = run_.status();
  if (status == ExperimentStatus::kError || status == ExperimentStatus::kStopped ||
      status == ExperimentStatus::kDone || status == ExperimentStatus::kInitialized ||
      status == ExperimentStatus::kViewed) {
    return;
  }
  // Trials a client runs itself (GE) are part of the experiment: it is not
  // DONE while one runs.
  bool idle = lifecycle_.Active() == 0 && credits_.inflight() == 0 &&
              lifecycle_.external_running() == 0;
  if (idle && (credits_.has_credits() || !credits_.quiet())) {
    // The tuner may still send trials for its credits from a call not yet
    // run, or have sent one whose completion has not reached us: decide DONE
    // only after every posted tuner call has returned (a barrier).
    if (credits_.NeedBarrier()) sink_->TunerBarrier();
    idle = false;
  }
  if (!run_.BudgetOpen(now)) {
    run_.set_status(idle ? ExperimentStatus::kDone : ExperimentStatus::kNoMoreTrial);
  } else if (credits_.exhausted()) {
    // Unlike NNI, an exhausted tuner with nothing left running is DONE.
    run_.set_status(idle ? ExperimentStatus::kDone : ExperimentStatus::kTunerNoMoreTrial);
  } else {
    run_.set_status(ExperimentStatus::kRunning);
  }
}

}  // namespace tunehost::host
