#include "store_journal.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "store_batch.h"
#include "store_queries.h"

namespace tunehost::host {

namespace {

// The meta row with the last record a commit covered.
constexpr const char* kCommittedSeq = "offer_journal_seq";

}  // namespace

Status StoreJournal::Append(const std::string& trial_id) {
  const auto row = rows_.find(trial_id);
  if (row == rows_.end()) return Status::NotFound("trial " + trial_id + " not written");
  JournalRecord record;
  record.seq = seq_ + 1;
  record.trial = row->second;
  size_t& journaled = events_journaled_[trial_id];
  if (auto e = events_.find(trial_id); e != events_.end()) {
    record.events.assign(e->second.begin() + static_cast<std::ptrdiff_t>(journaled),
                         e->second.end());
  }
  Status st = file_.Append(record);
  if (st.ok()) {
    seq_ = record.seq;
    journaled += record.events.size();
  }
  return st;
}

Status StoreJournal::Commit(StoreBatch& batch) {
  batch.WriteMetricRuns();  // its results before the meta row below, as always
  rows_.clear();
  events_.clear();
  events_journaled_.clear();
  // The records this batch journaled are in it: a replay skips them.
  if (seq_ != committed_) batch.SetMeta(kCommittedSeq, std::to_string(seq_));
  const bool open = batch.in_batch();
  Status st = batch.Commit();
  if (st.ok() && open) {
    committed_ = seq_;
    (void)file_.Clear();  // mapped by then: a store of 4 bytes
  }
  return st;
}

Status StoreJournal::Replay(const StoreQueries& queries, StoreBatch& batch, size_t* replayed) {
  if (auto m = queries.Meta(kCommittedSeq)) {
    committed_ = std::strtoull(m->c_str(), nullptr, 10);
  }
  seq_ = committed_;
  std::vector<JournalRecord> records;
  size_t torn = 0;
  Status st = file_.ReadAll(&records, &torn);
  if (!st.ok()) return st;
  if (torn > 0) {
    spdlog::warn("store {}: the offer journal ends in {} byte(s) that are not a whole record "
                 "(a write cut short by a system crash); ignored",
                 store_file_.string(), torn);
  }
  for (const JournalRecord& r : records) {
    if (r.seq <= committed_) continue;
    batch.WriteTrialRow(r.trial);
    for (const TrialEventRow& e : r.events) batch.WriteTrialEvent(e);
    seq_ = std::max(seq_, r.seq);
    ++*replayed;
  }
  st = Commit(batch);
  if (!st.ok()) return st;
  if (*replayed > 0) {
    spdlog::info("store {}: {} offer(s) the host made before it stopped were in its offer "
                 "journal only; now stored",
                 store_file_.string(), *replayed);
  }
  return file_.Clear();
}

}  // namespace tunehost::host
