#include "server_store.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

namespace tunehost::host {

namespace {

constexpr auto kMetaInterval = std::chrono::seconds(1);
// How long a turn's commit may wait for the tuner's answer (wire-format.md
// §5.3): the trial it makes is committed with it, one commit instead of two.
constexpr auto kCommitDeferral = std::chrono::milliseconds(1);
// How long the commit waits after an offer that left before it (its trial
// journaled): the commit's writes and locks would take the CPU from the
// offer's delivery (the host's I/O thread, the worker) on a small machine.
// A few round trips on loopback; what waits for the commit (MA, replies)
// waits that much longer. Chosen once, not tuned: only this value was tried
// (tools/bench/RESULTS.md).
constexpr auto kOfferCommitDelay = std::chrono::microseconds(300);

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ServerStore::ServerStore(Engine* engine, const WorkerKeys* keys, FailureFn on_failure)
    : engine_(engine), keys_(keys), on_failure_(std::move(on_failure)) {}

void ServerStore::AfterCommit(std::function<void()> fn) {
  if (store_) {
    after_commit_.push_back(std::move(fn));
  } else {
    fn();
  }
}

// Nothing more is acknowledged after a failed commit: workers keep their
// results.
bool ServerStore::Commit() {
  if (!store_) return true;
  Status st = store_->Commit();
  if (st.ok()) {
    uncommitted_trials_.clear();
    offer_journaled_at_.reset();
    return true;
  }
  after_commit_.clear();
  const bool first = !failed_;
  failed_ = true;
  on_failure_(st, first);
  return false;
}

std::chrono::milliseconds ServerStore::PollTimeout(std::chrono::milliseconds idle) const {
  if (!due_) return idle;
  // The poll counts in milliseconds.
  return std::clamp(std::chrono::ceil<std::chrono::milliseconds>(*due_ - Clock::now()),
                    std::chrono::milliseconds(0), idle);
}

// While the tuner is asked for a trial to offer, the commit waits for its
// answer up to kCommitDeferral, so that one commit takes the turn's writes
// (a trial's end) and the trial it makes; after an offer that left before
// its commit, it waits kOfferCommitDelay.
bool ServerStore::Flush(bool final, bool generating) {
  if (!writable()) return false;
  const auto now = Clock::now();
  if (!final) {
    std::optional<Clock::time_point> due;
    if (generating) {
      if (!deferred_since_) deferred_since_ = now;
      due = *deferred_since_ + kCommitDeferral;
    }
    if (offer_journaled_at_) {
      due = std::max(due.value_or(now), *offer_journaled_at_ + kOfferCommitDelay);
    }
    if (due && now < *due) {
      due_ = due;
      return false;
    }
  }
  deferred_since_.reset();
  due_.reset();
  const ExperimentStatus status = engine_->status();
  if (final || status != stored_status_ || now - meta_written_ >= kMetaInterval) {
    meta_written_ = now;
    stored_status_ = status;
    store_->SetMeta("status", ToString(status));
    store_->SetMeta("error", engine_->error());
    store_->SetMeta("elapsed_s", std::chrono::duration<double>(engine_->elapsed(now)).count());
  }
  // Ids handed to the tuner are never handed out again after a resume,
  // even when its checkpoint is newer than the last metadata write.
  if (const int64_t next = engine_->ids().next(); next != stored_next_id_) {
    stored_next_id_ = next;
    store_->SetMeta("next_parameter_id", std::to_string(next));
  }
  if (!Commit()) return false;
  std::vector<std::function<void()>> batch;
  batch.swap(after_commit_);
  for (auto& fn : batch) fn();
  return true;
}

// An offer leaves only once the trial and the attempt it names are durable:
// a resume must know every attempt a worker may have been handed
// (wire-format.md §5.3). A trial committed before (generated ahead,
// re-queued in an earlier turn) leaves at once; one written in this turn is
// appended to the store's offer journal (a copy into a mapped file, where a
// commit is several locks and writes) and committed with the turn's other
// writes after the offer has left. When the journal fails, the turn commits
// first.
bool ServerStore::Offerable(const std::string& trial_id) {
  if (uncommitted_trials_.count(trial_id) == 0) return true;
  const Status st = store_->JournalTrial(trial_id);
  if (st.ok()) {
    if (!offer_journaled_at_) offer_journaled_at_ = Clock::now();
    return true;
  }
  if (!journal_failing_) spdlog::warn("offers wait for commits: {}", st.message());
  journal_failing_ = true;
  return Commit();
}

void ServerStore::TrialChanged(const Trial& t, std::string_view event, std::string_view detail) {
  if (!store_) return;
  const double now = WallNow();
  const bool started = event == "started" || event == "reattached";
  const bool ended = event == "ended";
  store_->PutTrial(t, event == "created" ? now : 0, started ? now : 0, ended ? now : 0,
                   ended ? static_cast<int64_t>(engine_->ended_order().size()) - 1 : -1,
                   keys_->KeyOf(t.worker_id));
  store_->AddTrialEvent(t.id, event, t.attempt, t.worker_id, detail);
  uncommitted_trials_.insert(t.id);
  // Earlier attempts' results stay in the store for the record, marked
  // superseded; nothing reads them back into a trial (wire-format.md §5.3).
  if (event == "requeued") store_->SupersedeMetrics(t.id, t.attempt);
}

void ServerStore::MetricAccepted(const Trial& t, const protocol::ReportMetricData& m) {
  if (store_) store_->PutMetric(t.id, m);
}

}  // namespace tunehost::host
