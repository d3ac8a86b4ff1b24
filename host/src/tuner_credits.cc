// Parameter ids and the tuner's credits (NNI's credit pattern): what was
// asked of the tuner, what it may still send, and when it is done.
#include <iterator>
#include <mutex>

#include <spdlog/spdlog.h>

#include "engine_parts.h"

namespace tunehost::host {

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

std::vector<int64_t> TunerCredits::Reserve(size_t n) {
  inflight_ += n;  // held against the budget until the tuner answers
  return ids_.Allocate(n);
}

void TunerCredits::Credit(const std::vector<int64_t>& ids, const std::set<int64_t>& emitted,
                          bool waiting) {
  for (int64_t id : ids) {
    if (emitted.count(id) != 0) continue;
    // An id already claimed was sent from inside generate (its trial exists).
    if (waiting && ids_.IsOpen(id)) {
      credited_.insert(id);
    } else {
      ids_.Revoke(id);
    }
  }
}

void TunerCredits::Revoke() {
  for (auto it = credited_.begin(); it != credited_.end();) {
    // A credit the tuner claimed meanwhile stays: its trial is on the way.
    it = ids_.Revoke(*it) ? credited_.erase(it) : std::next(it);
  }
}

void TunerCredits::BarrierDone(size_t active, const std::string& experiment_id) {
  barrier_pending_ = false;
  if (active == 0 && inflight_ == 0 && !credited_.empty()) {
    // Nothing runs and every tuner call has returned: ids the tuner still
    // holds will never be sent (an exhausted grid, say). The tuner is done.
    const size_t held = credited_.size();
    Revoke();
    if (credited_.empty()) {
      spdlog::info("experiment {}: tuner holds {} unanswered ids with nothing running; no more "
                   "trials",
                   experiment_id, held);
      exhausted_ = true;
    }
  }
  quiet_ = active == 0 && inflight_ == 0 && credited_.empty();
}

bool TunerCredits::NeedBarrier() {
  if (barrier_pending_) return false;
  barrier_pending_ = true;
  return true;
}

}  // namespace tunehost::host
