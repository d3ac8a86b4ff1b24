// The store's offer journal (wire-format.md §5.3): an offer may leave once
// the trial and attempt it names are durable, and appending them to this
// file is a copy where a SQLite commit is several locks and writes. The
// loop turn's commit follows the offer; a store opened for writing replays
// the records its database does not hold yet (a host that died between the
// offer and the commit) and empties the file.
//
// The file (256 KiB) is mapped shared: appending is a copy into the page
// cache, which the kernel writes back, so a record survives the host process
// dying as a commit with synchronous=NORMAL does; an operating-system crash
// may lose the last ones (and the commits around them). Records are a 4-byte
// little-endian length and a MessagePack array (JournalRecord), from the
// file's start; a length of 0 ends them. After each commit the next record
// goes to the start again. The database's meta row `offer_journal_seq` holds
// the last record a commit covered, so a record is replayed once even when
// the host died between a commit and the journal's reset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/status.h"

namespace tunehost::host {

// One row of `trials` as Store::PutTrial writes it.
struct TrialRow {
  std::string trial_id;
  uint64_t sequence_id = 0;
  int64_t parameter_id = 0;
  std::string source;
  std::vector<char> parameters;  // MessagePack (a bin: std::vector<char> packs as one)
  std::string state;
  std::optional<std::string> status;
  uint32_t attempt = 0;
  uint32_t offers = 0;
  std::string worker_id;
  std::string error;
  bool final_synthesized = false;
  double created = 0, started = 0, ended = 0;
  int64_t end_order = -1;
  std::string worker_key;
  MSGPACK_DEFINE(trial_id, sequence_id, parameter_id, source, parameters, state, status, attempt,
                 offers, worker_id, error, final_synthesized, created, started, ended, end_order,
                 worker_key);
};

// One row of `trial_events`.
struct TrialEventRow {
  std::string trial_id;
  double at = 0;
  std::string event;
  uint32_t attempt = 0;
  std::string worker_id;
  std::string detail;
  MSGPACK_DEFINE(trial_id, at, event, attempt, worker_id, detail);
};

// An offered trial as the open batch holds it: its row and its events.
struct JournalRecord {
  uint64_t seq = 0;
  TrialRow trial;
  std::vector<TrialEventRow> events;
  MSGPACK_DEFINE(seq, trial, events);
};

class OfferJournal {
 public:
  // The journal's size: a turn that journals more offers than fit commits
  // before its next offer instead.
  static constexpr size_t kCapacity = size_t{256} << 10;

  // The journal of the store at `store_file`: that path with "-offers".
  static std::filesystem::path For(const std::filesystem::path& store_file);

  explicit OfferJournal(std::filesystem::path file) : file_(std::move(file)) {}
  ~OfferJournal();
  OfferJournal(const OfferJournal&) = delete;
  OfferJournal& operator=(const OfferJournal&) = delete;

  // Appends one record: a copy into the file's shared mapping, no system
  // call (the first maps the file, with its blocks allocated). Unavailable
  // when the file cannot be allocated or mapped or the record does not fit.
  Status Append(const JournalRecord& record);
  // The records in the file, in order, up to the first that is not whole
  // (its bytes go to `*torn_bytes`).
  Status ReadAll(std::vector<JournalRecord>* out, size_t* torn_bytes) const;
  // Forgets every record (each is committed): the next one is the first.
  Status Clear();
  // Bytes of the records appended since the last Clear.
  size_t used() const { return used_; }

 private:
  Status Open();

  std::filesystem::path file_;
  char* map_ = nullptr;
  size_t used_ = 0;
  msgpack::sbuffer buffer_{512};
};

}  // namespace tunehost::host
