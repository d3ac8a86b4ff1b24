// The experiment store: one SQLite database per experiment, in WAL mode.
// It keeps what a restarted host needs to continue without losing work (the
// experiment file, search spaces, limits, every trial and every change of its
// state, every accepted metric, published events, plugin checkpoints) and what
// `tunehost view` shows.
//
// Writes are batched: the first write after a Commit opens a transaction and
// Commit closes it. The server commits once per loop turn and only then sends
// metric acknowledgements and hands results to the plugins, so whatever a
// worker saw acknowledged is on disk. An offer of a trial the open batch
// wrote needs that trial durable first: JournalTrial appends it to the
// offer journal (offer_journal.h), which a writable open replays. synchronous=NORMAL: a committed batch
// survives the host process dying (SIGKILL, crash); an operating-system crash
// may lose the last batches (SQLite's WAL guarantee at that level). The log
// is copied back into the database by a thread of the store's own
// (WalCheckpointer), not inside the loop's COMMIT.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

struct Trial;
class StoreBatch;
class StoreDatabase;
class StoreJournal;
class StoreQueries;
class WalCheckpointer;

inline constexpr int kStoreSchemaVersion = 4;
// Read-only opens (`tunehost view`, `tunectl`) take stores from this version
// on as they are: version 4 only put the metrics under a view with version
// 3's columns, and every read goes through those columns. Older ones must be
// migrated by a writable open first.
inline constexpr int kOldestReadableSchemaVersion = 3;

// A trial as the store has it (resume and view rebuild the engine from these).
struct StoredTrial {
  std::string trial_id;
  uint64_t sequence_id = 0;
  int64_t parameter_id = 0;
  protocol::ParameterSource source = protocol::ParameterSource::kAlgorithm;
  protocol::Packed parameters;
  std::string state;  // WAITING, OFFERED (an offer not answered yet), RUNNING, ENDED
  std::optional<protocol::TrialStatus> status;
  uint32_t attempt = 0;
  uint32_t offers = 0;
  std::string worker_id;
  std::string worker_key;  // its worker's key (User-Id) on a host with keys; else ""
  std::string error;
  double created = 0, started = 0, ended = 0;  // unix seconds; 0 = not yet
  int64_t end_order = -1;                      // position among ended trials
  int64_t result_order = -1;  // position among results handed to the tuner; -1: none
  bool final_synthesized = false;
  // The current attempt's results (superseded attempts' rows are not read).
  std::map<uint64_t, protocol::Metric> periodical;  // by sequence
  std::optional<protocol::Metric> final_metric;
};

struct StoredCheckpoint {
  std::string plugin;       // plugin name
  protocol::Packed state;   // the plugin's saved state
  uint64_t seen_results = 0; // results (trial results and imports, by result order) it had seen
};

class Store {
 public:
  enum class Mode { kCreate, kOpen, kReadOnly };

  // kCreate makes a new database (refuses an existing file); kOpen and
  // kReadOnly need one. A schema older than this host is migrated (kOpen);
  // a newer one is refused.
  static Status Open(const std::filesystem::path& file, Mode mode, std::unique_ptr<Store>* out);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::filesystem::path& file() const { return file_; }

  // --- writes (batched until Commit) ---
  void SetMeta(std::string_view key, std::string_view value);
  void SetMeta(std::string_view key, double value);
  void SetConfig(const std::filesystem::path& source_file, std::string_view yaml);
  void AddSearchSpace(const protocol::Packed& space);
  // `worker_key`: the User-Id of the key its worker speaks with (hosts with
  // keys), so a resume knows which key may re-attach it.
  void PutTrial(const Trial& t, double created, double started, double ended, int64_t end_order,
                std::string_view worker_key = "");
  void AddTrialEvent(const std::string& trial_id, std::string_view event, uint32_t attempt,
                     std::string_view worker_id, std::string_view detail);
  // Stored with the open batch. The caller keeps duplicates (same trial,
  // attempt, type and sequence) out; should one come, Trials() reads one
  // copy.
  void PutMetric(const std::string& trial_id, const protocol::ReportMetricData& m);
  // Marks the rows of attempts before `current_attempt` superseded: kept for
  // the record, never read back into a trial.
  void SupersedeMetrics(const std::string& trial_id, uint32_t current_attempt);
  void AddEvent(std::string_view type, const protocol::Packed& body);
  // The trial's result was handed to the tuner as the `order`-th result (the
  // first time only).
  void SetResultOrder(const std::string& trial_id, int64_t order);
  // Records imported into the tuner (FD) as the `order`-th result.
  void AddImport(int64_t order, const protocol::Packed& records);
  void PutCheckpoint(std::string_view kind, const StoredCheckpoint& c);
  // Ends the open batch. An error leaves the store unusable for writing: the
  // caller must stop acknowledging.
  Status Commit();
  // Makes the open batch's row of this trial, and its trial events, durable
  // before the batch commits, by appending them to the store's offer journal
  // (offer_journal.h): what an offer needs (wire-format.md §5.3) for one
  // write() instead of a commit. NotFound when the open batch has not written
  // the trial; any error: commit instead.
  Status JournalTrial(const std::string& trial_id);
  // Offers this open replayed from the journal into the database.
  size_t replayed_offers() const { return replayed_offers_; }
  bool failed() const;

  // --- reads ---
  std::optional<std::string> Meta(std::string_view key) const;
  Status Config(std::filesystem::path* source_file, std::string* yaml) const;
  std::optional<protocol::Packed> LatestSearchSpace() const;
  Status Trials(std::vector<StoredTrial>* out) const;  // by sequence_id, with metrics
  std::optional<StoredCheckpoint> Checkpoint(std::string_view kind) const;
  // Imported record arrays (FD) by result order.
  Status Imports(std::vector<std::pair<int64_t, protocol::Packed>>* out) const;
  int64_t CountRows(std::string_view table) const;
  // Checkpoints the background thread has completed (0 for a read-only store).
  uint64_t BackgroundCheckpoints() const;

 private:
  Store() = default;

  std::filesystem::path file_;
  // Its parts (host/src): the connection and schema, the reads, the write
  // batch, the offer journal (writable stores) and the WAL's checkpoints
  // (writable stores).
  std::unique_ptr<StoreDatabase> db_;
  std::unique_ptr<StoreQueries> queries_;
  std::unique_ptr<StoreBatch> batch_;
  std::unique_ptr<StoreJournal> journal_;
  std::unique_ptr<WalCheckpointer> checkpointer_;
  size_t replayed_offers_ = 0;
};

}  // namespace tunehost::host
