// The trial table: every trial by id and in sequence order, and the counts
// and bests control queries read on every poll (wire-format.md §4.2).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "engine_parts.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

p::NewTrialJob JobFor(const std::string& experiment_id, const Trial& trial) {
  p::NewTrialJob job;
  job.experiment_id = experiment_id;
  job.trial_id = trial.id;
  job.sequence_id = trial.sequence_id;
  job.attempt = trial.attempt;
  job.parameter_id = trial.parameter_id;
  job.parameter_source = trial.source;
  job.parameter_index = 0;
  job.parameters = trial.parameters;
  return job;
}

Trial& TrialTable::Create(int64_t parameter_id, p::ParameterSource source,
                          p::Packed parameters) {
  char id[32];
  std::snprintf(id, sizeof id, "T%05llu", static_cast<unsigned long long>(next_sequence_));
  Trial& t = trials_[id];
  t.id = id;
  t.sequence_id = next_sequence_++;
  in_order_.push_back(&t);  // sequence ids only grow here
  t.parameter_id = parameter_id;
  t.source = source;
  t.parameters = std::move(parameters);
  ++stats_.created;  // every trial counts against max_trials, external ones too
  return t;
}

Trial& TrialTable::Restore(Trial trial) {
  const std::string id = trial.id;
  Trial& r = trials_[id] = std::move(trial);
  if (!in_order_.empty() && in_order_.back()->sequence_id > r.sequence_id) {
    in_order_sorted_ = false;
  }
  in_order_.push_back(&r);
  next_sequence_ = std::max(next_sequence_, r.sequence_id + 1);
  ++stats_.created;
  return r;
}

Trial* TrialTable::Find(const std::string& id) {
  auto it = trials_.find(id);
  return it == trials_.end() ? nullptr : &it->second;
}

const Trial* TrialTable::Find(const std::string& id) const {
  auto it = trials_.find(id);
  return it == trials_.end() ? nullptr : &it->second;
}

std::vector<std::string> TrialTable::OpenIds() const {
  std::vector<std::string> open;
  for (const auto& [id, trial] : trials_) {
    if (trial.state != TrialState::kEnded) open.push_back(id);
  }
  std::sort(open.begin(), open.end());
  return open;
}

const std::vector<const Trial*>& TrialTable::InOrder() const {
  if (!in_order_sorted_) {
    std::sort(in_order_.begin(), in_order_.end(),
              [](const Trial* a, const Trial* b) { return a->sequence_id < b->sequence_id; });
    in_order_sorted_ = true;
  }
  return in_order_;
}

std::vector<std::pair<std::string, uint64_t>> TrialTable::CountsByStatus(
    uint64_t waiting, uint64_t running) const {
  constexpr size_t kN = std::size(p::kControlTrialStatuses);
  static_assert(kN == 2 + std::size(decltype(ended_counts_){}));
  uint64_t counts[kN] = {waiting, running};
  for (size_t i = 2; i < kN; ++i) counts[i] = ended_counts_[i - 2];
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 0; i < kN; ++i) {
    if (counts[i] != 0) out.emplace_back(p::kControlTrialStatuses[i], counts[i]);
  }
  return out;
}

void TrialTable::Ended(const Trial& t) {
  ended_order_.push_back(t.id);
  // A stored trial whose status did not read back counts as FAILED, as
  // Engine::ControlStatus shows it.
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

}  // namespace tunehost::host
