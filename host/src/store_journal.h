// The offer journal as a writable store uses it (store.h, offer_journal.h,
// wire-format.md §5.3): what the open batch wrote of each trial, so that
// Store::JournalTrial can make one trial durable before the batch commits;
// the journal's sequence numbers, which the batch's commit records in the
// meta row `offer_journal_seq`; and the replay, when the store opens, of the
// records no commit covered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "offer_journal.h"
#include "tunehost/status.h"

namespace tunehost::host {

class StoreBatch;
class StoreQueries;

class StoreJournal {
 public:
  explicit StoreJournal(const std::filesystem::path& store_file)
      : store_file_(store_file), file_(OfferJournal::For(store_file)) {}

  // Writes the records that a commit did not cover (the host died between an
  // offer and its commit) with `batch` and commits them, in one transaction;
  // then empties the file. `*replayed`: how many.
  Status Replay(const StoreQueries& queries, StoreBatch& batch, size_t* replayed);

  // What the open batch wrote of a trial (Store::PutTrial, AddTrialEvent).
  void KeepRow(TrialRow&& row) { rows_[row.trial_id] = std::move(row); }
  void KeepEvent(TrialEventRow&& row) { events_[row.trial_id].push_back(std::move(row)); }
  // Appends the open batch's row of the trial and its events not appended
  // yet (Store::JournalTrial). NotFound when the batch has not written the
  // trial.
  Status Append(const std::string& trial_id);
  // Commits `batch` (Store::Commit): with it, which records it covers; once
  // it is committed, an empty journal.
  Status Commit(StoreBatch& batch);

 private:
  const std::filesystem::path store_file_;
  OfferJournal file_;
  std::unordered_map<std::string, TrialRow> rows_;
  std::unordered_map<std::string, std::vector<TrialEventRow>> events_;
  // Of each trial's events, how many a record of this batch already holds
  // (a trial offered twice in one batch: the second record has the rest).
  std::unordered_map<std::string, size_t> events_journaled_;
  uint64_t seq_ = 0;        // the last record appended (or replayed)
  uint64_t committed_ = 0;  // the last record a commit covered
};

}  // namespace tunehost::host
