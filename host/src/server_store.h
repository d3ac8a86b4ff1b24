// The store's side of the server's loop (wire-format.md §5.3): what a loop
// turn writes goes into one batch, committed once per turn; what must wait
// for that commit (acknowledgements, replies, assessor calls) waits here;
// an offer of a trial written in the batch is journaled before it leaves.
// Loop thread only. Private to the host library.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tunehost/host/engine.h"
#include "tunehost/host/key_ring.h"
#include "tunehost/host/store.h"
#include "tunehost/status.h"

namespace tunehost::host {

class ServerStore {
 public:
  // `on_failure` runs when a commit fails; `first` the first time.
  using FailureFn = std::function<void(const Status& st, bool first)>;
  ServerStore(Engine* engine, const WorkerKeys* keys, FailureFn on_failure);

  void Use(Store* store) { store_ = store; }
  // Null without a store.
  Store* store() const { return store_; }
  // A store that has not failed.
  bool writable() const { return store_ != nullptr && !failed_; }

  // Runs `fn` after the batch's commit (at once without a store).
  void AfterCommit(std::function<void()> fn);
  // Commits what the batch holds; false (and on_failure) when it cannot.
  bool Commit();
  // Once per loop turn: experiment metadata now and then, then the commit
  // and what waited for it. While the tuner is asked for a trial
  // (`generating`), or just after a journaled offer, the commit may wait:
  // false when it did not happen in this turn.
  bool Flush(bool final, bool generating);
  // How long the loop may sleep: until a deferred commit is due.
  std::chrono::milliseconds PollTimeout(std::chrono::milliseconds idle) const;
  // Whether an offer of this trial may leave now: a trial written in this
  // batch is journaled first (or, when the journal fails, committed).
  bool Offerable(const std::string& trial_id);

  // EngineSink's persistence calls.
  void TrialChanged(const Trial& t, std::string_view event, std::string_view detail);
  void MetricAccepted(const Trial& t, const protocol::ReportMetricData& m);

 private:
  using Clock = std::chrono::steady_clock;

  Engine* engine_;
  const WorkerKeys* keys_;
  FailureFn on_failure_;
  Store* store_ = nullptr;
  bool failed_ = false;
  std::vector<std::function<void()>> after_commit_;
  // Trials written in the batch not committed yet: an offer of one of them
  // is journaled first, an offer of any other trial is not (§5.3).
  std::unordered_set<std::string> uncommitted_trials_;
  bool journal_failing_ = false;  // the store's offer journal refused a record
  ExperimentStatus stored_status_ = ExperimentStatus::kInitialized;
  Clock::time_point meta_written_{};
  int64_t stored_next_id_ = -1;
  // Since when the turn's commit waits for the tuner, since when a
  // journaled offer waits for its commit, and when the commit is due.
  std::optional<Clock::time_point> deferred_since_;
  std::optional<Clock::time_point> offer_journaled_at_;
  std::optional<Clock::time_point> due_;
};

}  // namespace tunehost::host
