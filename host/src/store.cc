#include "tunehost/host/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>
#include <system_error>
#include <unordered_map>

#include "tunehost/host/engine.h"

#include "offer_journal.h"
#include "wal_checkpointer.h"

namespace tunehost::host {

namespace p = tunehost::protocol;
namespace fs = std::filesystem;

namespace {

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Schema version 1. Each later version appends one migration step to
// kMigrations (from version i to i + 1); a store is migrated step by step in
// one transaction.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE config(id INTEGER PRIMARY KEY CHECK (id = 1), source_file TEXT NOT NULL,
                    yaml TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE search_spaces(seq INTEGER PRIMARY KEY AUTOINCREMENT, space BLOB NOT NULL,
                           at REAL NOT NULL);
CREATE TABLE trials(trial_id TEXT PRIMARY KEY, sequence_id INTEGER NOT NULL UNIQUE,
                    parameter_id INTEGER NOT NULL, source TEXT NOT NULL,
                    parameters BLOB NOT NULL, state TEXT NOT NULL, status TEXT,
                    attempt INTEGER NOT NULL, offers INTEGER NOT NULL,
                    worker_id TEXT NOT NULL, error TEXT NOT NULL,
                    final_synthesized INTEGER NOT NULL,
                    created REAL NOT NULL, started REAL NOT NULL, ended REAL NOT NULL,
                    end_order INTEGER NOT NULL, result_order INTEGER NOT NULL DEFAULT -1);
CREATE TABLE trial_events(id INTEGER PRIMARY KEY, trial_id TEXT NOT NULL, at REAL NOT NULL,
                          event TEXT NOT NULL, attempt INTEGER NOT NULL,
                          worker_id TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX trial_events_by_trial ON trial_events(trial_id);
CREATE TABLE metrics(trial_id TEXT NOT NULL, type TEXT NOT NULL, sequence INTEGER NOT NULL,
                     attempt INTEGER NOT NULL, value BLOB NOT NULL, scalar REAL,
                     at REAL NOT NULL, PRIMARY KEY(trial_id, type, sequence)) WITHOUT ROWID;
CREATE TABLE events(id INTEGER PRIMARY KEY, at REAL NOT NULL, type TEXT NOT NULL,
                    body BLOB NOT NULL);
CREATE TABLE checkpoints(kind TEXT PRIMARY KEY, plugin TEXT NOT NULL, state BLOB NOT NULL,
                         seen_results INTEGER NOT NULL, at REAL NOT NULL);
CREATE TABLE imports(result_order INTEGER PRIMARY KEY, records BLOB NOT NULL, at REAL NOT NULL);
)sql";

// Version 2: a trial's metrics are kept per attempt; the rows of attempts
// that were superseded stay, marked (wire-format.md §5.3).
constexpr const char* kSchemaV1ToV2 = R"sql(
CREATE TABLE metrics_v2(trial_id TEXT NOT NULL, attempt INTEGER NOT NULL, type TEXT NOT NULL,
                        sequence INTEGER NOT NULL, value BLOB NOT NULL, scalar REAL,
                        at REAL NOT NULL, superseded INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY(trial_id, attempt, type, sequence)) WITHOUT ROWID;
INSERT INTO metrics_v2(trial_id, attempt, type, sequence, value, scalar, at, superseded)
  SELECT m.trial_id, m.attempt, m.type, m.sequence, m.value, m.scalar, m.at,
         CASE WHEN t.attempt IS NOT NULL AND m.attempt < t.attempt THEN 1 ELSE 0 END
  FROM metrics m LEFT JOIN trials t ON t.trial_id = m.trial_id;
DROP TABLE metrics;
ALTER TABLE metrics_v2 RENAME TO metrics;
)sql";

// Version 3: the key (its User-Id) of the worker that runs a trial, so a
// resumed host with keys lets only that key re-attach it (wire-format.md §9).
constexpr const char* kSchemaV2ToV3 = R"sql(
ALTER TABLE trials ADD COLUMN worker_key TEXT NOT NULL DEFAULT '';
)sql";

// Version 4: one row per (trial, attempt, type) per committed batch instead
// of one per result: a batch's values side by side in `vals`, and in `items`
// a JSON array of [sequence, scalar, offset in vals, length] per result. The
// view `metrics` shows them as version 3's rows (one per result, same
// columns), so readers of the store keep reading it as before.
constexpr const char* kSchemaV3ToV4 = R"sql(
CREATE TABLE metric_runs(id INTEGER PRIMARY KEY, trial_id TEXT NOT NULL, attempt INTEGER NOT NULL,
                         type TEXT NOT NULL, items TEXT NOT NULL, vals BLOB NOT NULL,
                         at REAL NOT NULL, superseded INTEGER NOT NULL DEFAULT 0);
INSERT INTO metric_runs(trial_id, attempt, type, items, vals, at, superseded)
  SELECT trial_id, attempt, type, json_array(json_array(sequence, scalar, 0, length(value))),
         value, at, superseded
  FROM metrics ORDER BY trial_id, attempt, type, sequence;
DROP TABLE metrics;
CREATE INDEX metric_runs_by_trial ON metric_runs(trial_id, attempt);
CREATE VIEW metrics(trial_id, attempt, type, sequence, value, scalar, at, superseded) AS
  SELECT r.trial_id, r.attempt, r.type, j.value ->> 0,
         substr(r.vals, (j.value ->> 2) + 1, j.value ->> 3), CAST(j.value ->> 1 AS REAL), r.at,
         r.superseded
  FROM metric_runs r, json_each(r.items) j;
)sql";

constexpr const char* kMigrations[] = {
    kSchemaV1,      // 0 -> 1
    kSchemaV1ToV2,  // 1 -> 2
    kSchemaV2ToV3,  // 2 -> 3
    kSchemaV3ToV4,  // 3 -> 4
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kStoreSchemaVersion,
              "one migration step per schema version");

std::string_view StateName(TrialState s) {
  switch (s) {
    case TrialState::kWaiting: return "WAITING";
    case TrialState::kOffered: return "OFFERED";
    case TrialState::kRunning: return "RUNNING";
    case TrialState::kEnded: return "ENDED";
  }
  return "WAITING";
}

std::string Column(sqlite3_stmt* st, int i) {
  const unsigned char* text = sqlite3_column_text(st, i);
  return text ? std::string(reinterpret_cast<const char*>(text),
                            static_cast<size_t>(sqlite3_column_bytes(st, i)))
              : std::string();
}

p::Packed BlobColumn(sqlite3_stmt* st, int i) {
  const void* blob = sqlite3_column_blob(st, i);
  return blob ? p::Packed(static_cast<const char*>(blob),
                          static_cast<size_t>(sqlite3_column_bytes(st, i)))
              : p::Packed();
}

void BindText(sqlite3_stmt* st, int i, std::string_view s) {
  sqlite3_bind_text(st, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
}

void BindBlob(sqlite3_stmt* st, int i, std::string_view s) {
  sqlite3_bind_blob(st, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
}

}  // namespace

// What the open batch wrote of each trial, for JournalTrial; the journal's
// sequence numbers.
struct Store::Journal {
  explicit Journal(const fs::path& store_file) : file(OfferJournal::For(store_file)) {}
  OfferJournal file;
  std::unordered_map<std::string, TrialRow> rows;
  std::unordered_map<std::string, std::vector<TrialEventRow>> events;
  // Of each trial's events, how many a record of this batch already holds
  // (a trial offered twice in one batch: the second record has the rest).
  std::unordered_map<std::string, size_t> events_journaled;
  uint64_t seq = 0;        // the last record appended (or replayed)
  uint64_t committed = 0;  // the last record a commit covered
};

Status Store::Open(const fs::path& file, Mode mode, std::unique_ptr<Store>* out) {
  std::error_code ec;
  const bool exists = fs::exists(file, ec);
  if (mode == Mode::kCreate && exists) {
    return Status::BadState("store " + file.string() + " already exists");
  }
  if (mode != Mode::kCreate && !exists) {
    return Status::NotFound("no store at " + file.string());
  }
  if (mode != Mode::kReadOnly) {
    // Private to its user whatever the umask (wire-format.md §9): SQLite
    // gives the WAL and shared-memory files the database file's mode.
    if (mode == Mode::kCreate) {
      const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) {
        return Status::Unavailable("cannot create store " + file.string() + ": " +
                                   std::strerror(errno));
      }
      close(fd);
    }
    for (const char* suffix : {"", "-wal", "-shm"}) {
      fs::path f = file;
      f += suffix;
      if (fs::exists(f, ec)) fs::permissions(f, fs::perms::owner_read | fs::perms::owner_write,
                                             fs::perm_options::replace, ec);
    }
  }
  std::unique_ptr<Store> store(new Store());
  store->file_ = file;
  int flags = mode == Mode::kReadOnly ? SQLITE_OPEN_READONLY
                                      : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(file.c_str(), &store->db_, flags | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string why = store->db_ ? sqlite3_errmsg(store->db_) : "out of memory";
    return Status::Unavailable("cannot open store " + file.string() + ": " + why);
  }
  sqlite3_busy_timeout(store->db_, 5000);
  if (mode != Mode::kReadOnly) {
    Status st = store->Exec("PRAGMA journal_mode=WAL");
    if (st.ok()) st = store->Exec("PRAGMA synchronous=NORMAL");
    if (!st.ok()) return st;
  }
  Status st = store->Migrate(mode == Mode::kReadOnly);
  if (!st.ok()) return st;
  if (mode != Mode::kReadOnly) {
    // A journal beside a new database is another experiment's leftover.
    if (mode == Mode::kCreate) fs::remove(OfferJournal::For(file), ec);
    store->journal_ = std::make_unique<Journal>(file);
    st = store->ReplayJournal();
    if (!st.ok()) return st;
    store->checkpointer_ = std::make_unique<WalCheckpointer>(store->db_, file);
  }
  *out = std::move(store);
  return Status::Ok();
}

Store::~Store() {
  if (in_batch_ && error_.empty()) Commit();
  checkpointer_.reset();  // its connection first: the last one to close checkpoints
  for (auto& [sql, st] : statements_) sqlite3_finalize(st);
  sqlite3_close(db_);
}

uint64_t Store::BackgroundCheckpoints() const {
  return checkpointer_ ? checkpointer_->completed() : 0;
}

Status Store::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return Status::Internal("store " + file_.string() + ": " + why);
  }
  return Status::Ok();
}

Status Store::Migrate(bool read_only) {
  sqlite3_stmt* st = nullptr;
  int version = 0;
  if (sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    version = sqlite3_column_int(st, 0);
  }
  sqlite3_finalize(st);
  if (version > kStoreSchemaVersion) {
    return Status::BadState("store " + file_.string() + " has schema version " +
                            std::to_string(version) + ", newer than this tunehost (" +
                            std::to_string(kStoreSchemaVersion) + "): use a newer tunehost");
  }
  if (version == kStoreSchemaVersion) return Status::Ok();
  if (read_only && version >= kOldestReadableSchemaVersion) return Status::Ok();
  if (read_only) {
    return Status::BadState("store " + file_.string() + " has schema version " +
                            std::to_string(version) + " and needs migrating: open it once with "
                            "`tunehost resume` first");
  }
  Status s = Exec("BEGIN IMMEDIATE");
  for (int v = version; s.ok() && v < kStoreSchemaVersion; ++v) s = Exec(kMigrations[v]);
  if (s.ok()) {
    s = Exec(("PRAGMA user_version=" + std::to_string(kStoreSchemaVersion)).c_str());
  }
  if (!s.ok()) {
    Exec("ROLLBACK");
    return s;
  }
  return Exec("COMMIT");
}

sqlite3_stmt* Store::Prepare(const char* sql) const {
  auto it = statements_.find(sql);
  if (it != statements_.end()) {
    sqlite3_reset(it->second);
    sqlite3_clear_bindings(it->second);
    return it->second;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &st, nullptr) != SQLITE_OK) {
    spdlog::error("store: cannot prepare '{}': {}", sql, sqlite3_errmsg(db_));
    return nullptr;
  }
  statements_[sql] = st;
  return st;
}

void Store::Fail(const char* what) {
  if (error_.empty()) {
    error_ = std::string(what) + ": " + sqlite3_errmsg(db_);
    spdlog::error("store {}: {}", file_.string(), error_);
  }
}

void Store::Begin() {
  if (in_batch_ || failed()) return;
  if (sqlite3_exec(db_, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) {
    Fail("begin");
    return;
  }
  in_batch_ = true;
}

void Store::Step(sqlite3_stmt* st, const char* what) {
  if (failed()) return;  // nothing after a failure, not even in autocommit
  if (st == nullptr) {
    Fail(what);
    return;
  }
  if (sqlite3_step(st) != SQLITE_DONE) Fail(what);
  sqlite3_reset(st);
}

Status Store::Commit() {
  WriteMetricRuns();
  if (journal_) {
    journal_->rows.clear();
    journal_->events.clear();
    journal_->events_journaled.clear();
    // The records this batch journaled are in it: a replay skips them.
    if (journal_->seq != journal_->committed) {
      SetMeta("offer_journal_seq", std::to_string(journal_->seq));
    }
  }
  if (!error_.empty()) {
    runs_.clear();
    return Status::Internal(error_);
  }
  if (!in_batch_) return Status::Ok();
  in_batch_ = false;
  if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    Fail("commit");
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return Status::Internal(error_);
  }
  if (journal_) {
    journal_->committed = journal_->seq;
    (void)journal_->file.Clear();  // mapped by then: a store of 4 bytes
  }
  return Status::Ok();
}

Status Store::JournalTrial(const std::string& trial_id) {
  if (!journal_ || failed()) return Status::BadState("no offer journal");
  const auto row = journal_->rows.find(trial_id);
  if (row == journal_->rows.end()) return Status::NotFound("trial " + trial_id + " not written");
  JournalRecord record;
  record.seq = journal_->seq + 1;
  record.trial = row->second;
  size_t& journaled = journal_->events_journaled[trial_id];
  if (auto e = journal_->events.find(trial_id); e != journal_->events.end()) {
    record.events.assign(e->second.begin() + static_cast<std::ptrdiff_t>(journaled),
                         e->second.end());
  }
  Status st = journal_->file.Append(record);
  if (st.ok()) {
    journal_->seq = record.seq;
    journaled += record.events.size();
  }
  return st;
}

// The records a commit did not cover (the host died between an offer and
// its commit) into the database, in one transaction; then an empty file.
Status Store::ReplayJournal() {
  if (auto m = Meta("offer_journal_seq")) {
    journal_->committed = std::strtoull(m->c_str(), nullptr, 10);
  }
  journal_->seq = journal_->committed;
  std::vector<JournalRecord> records;
  size_t torn = 0;
  Status st = journal_->file.ReadAll(&records, &torn);
  if (!st.ok()) return st;
  if (torn > 0) {
    spdlog::warn("store {}: the offer journal ends in {} byte(s) that are not a whole record "
                 "(a write cut short by a system crash); ignored",
                 file_.string(), torn);
  }
  for (const JournalRecord& r : records) {
    if (r.seq <= journal_->committed) continue;
    WriteTrialRow(r.trial);
    for (const TrialEventRow& e : r.events) WriteTrialEvent(e);
    journal_->seq = std::max(journal_->seq, r.seq);
    ++replayed_offers_;
  }
  st = Commit();
  if (!st.ok()) return st;
  if (replayed_offers_ > 0) {
    spdlog::info("store {}: {} offer(s) the host made before it stopped were in its offer "
                 "journal only; now stored",
                 file_.string(), replayed_offers_);
  }
  return journal_->file.Clear();
}

void Store::SetMeta(std::string_view key, std::string_view value) {
  Begin();
  sqlite3_stmt* st = Prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)");
  if (st == nullptr) return Fail("meta");
  BindText(st, 1, key);
  BindText(st, 2, value);
  Step(st, "meta");
}

void Store::SetMeta(std::string_view key, double value) {
  Begin();
  sqlite3_stmt* st = Prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)");
  if (st == nullptr) return Fail("meta");
  BindText(st, 1, key);
  sqlite3_bind_double(st, 2, value);
  Step(st, "meta");
}

void Store::SetConfig(const fs::path& source_file, std::string_view yaml) {
  Begin();
  sqlite3_stmt* st =
      Prepare("INSERT OR REPLACE INTO config(id, source_file, yaml, at) VALUES(1, ?1, ?2, ?3)");
  if (st == nullptr) return Fail("config");
  BindText(st, 1, source_file.string());
  BindText(st, 2, yaml);
  sqlite3_bind_double(st, 3, WallNow());
  Step(st, "config");
}

void Store::AddSearchSpace(const p::Packed& space) {
  Begin();
  sqlite3_stmt* st = Prepare("INSERT INTO search_spaces(space, at) VALUES(?1, ?2)");
  if (st == nullptr) return Fail("search space");
  BindBlob(st, 1, space);
  sqlite3_bind_double(st, 2, WallNow());
  Step(st, "search space");
}

void Store::PutTrial(const Trial& t, double created, double started, double ended,
                     int64_t end_order, std::string_view worker_key) {
  TrialRow row;
  row.trial_id = t.id;
  row.sequence_id = t.sequence_id;
  row.parameter_id = t.parameter_id;
  row.source = p::ToString(t.source);
  row.parameters.assign(t.parameters.begin(), t.parameters.end());
  row.state = StateName(t.state);
  if (t.status) row.status = p::ToString(*t.status);
  row.attempt = t.attempt;
  row.offers = t.offers;
  row.worker_id = t.worker_id;
  row.error = t.error;
  row.final_synthesized = t.final_synthesized;
  row.created = created;
  row.started = started;
  row.ended = ended;
  row.end_order = end_order;
  row.worker_key = worker_key;
  WriteTrialRow(row);
  if (journal_) journal_->rows[row.trial_id] = std::move(row);
}

void Store::WriteTrialRow(const TrialRow& r) {
  Begin();
  // Times and end order keep their first non-zero value.
  sqlite3_stmt* st = Prepare(R"sql(
INSERT INTO trials(trial_id, sequence_id, parameter_id, source, parameters, state, status,
                   attempt, offers, worker_id, error, final_synthesized, created, started,
                   ended, end_order, worker_key)
VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
ON CONFLICT(trial_id) DO UPDATE SET
  source = excluded.source, state = excluded.state, status = excluded.status,
  attempt = excluded.attempt, parameters = excluded.parameters,
  offers = excluded.offers, worker_id = excluded.worker_id, error = excluded.error,
  worker_key = excluded.worker_key,
  final_synthesized = excluded.final_synthesized,
  started = CASE WHEN excluded.started > 0 THEN excluded.started ELSE started END,
  ended = CASE WHEN excluded.ended > 0 THEN excluded.ended ELSE ended END,
  end_order = CASE WHEN excluded.end_order >= 0 THEN excluded.end_order ELSE end_order END
)sql");
  if (st == nullptr) return Fail("trial");
  BindText(st, 1, r.trial_id);
  sqlite3_bind_int64(st, 2, static_cast<sqlite3_int64>(r.sequence_id));
  sqlite3_bind_int64(st, 3, r.parameter_id);
  BindText(st, 4, r.source);
  BindBlob(st, 5, std::string_view(r.parameters.data(), r.parameters.size()));
  BindText(st, 6, r.state);
  if (r.status) {
    BindText(st, 7, *r.status);
  } else {
    sqlite3_bind_null(st, 7);
  }
  sqlite3_bind_int64(st, 8, r.attempt);
  sqlite3_bind_int64(st, 9, r.offers);
  BindText(st, 10, r.worker_id);
  BindText(st, 11, r.error);
  sqlite3_bind_int(st, 12, r.final_synthesized ? 1 : 0);
  sqlite3_bind_double(st, 13, r.created);
  sqlite3_bind_double(st, 14, r.started);
  sqlite3_bind_double(st, 15, r.ended);
  sqlite3_bind_int64(st, 16, r.end_order);
  BindText(st, 17, r.worker_key);
  Step(st, "trial");
}

void Store::AddTrialEvent(const std::string& trial_id, std::string_view event, uint32_t attempt,
                          std::string_view worker_id, std::string_view detail) {
  TrialEventRow row{trial_id, WallNow(), std::string(event), attempt, std::string(worker_id),
                    std::string(detail)};
  WriteTrialEvent(row);
  if (journal_) journal_->events[trial_id].push_back(std::move(row));
}

void Store::WriteTrialEvent(const TrialEventRow& r) {
  Begin();
  sqlite3_stmt* st = Prepare(
      "INSERT INTO trial_events(trial_id, at, event, attempt, worker_id, detail) "
      "VALUES(?1, ?2, ?3, ?4, ?5, ?6)");
  if (st == nullptr) return Fail("trial event");
  BindText(st, 1, r.trial_id);
  sqlite3_bind_double(st, 2, r.at);
  BindText(st, 3, r.event);
  sqlite3_bind_int64(st, 4, r.attempt);
  BindText(st, 5, r.worker_id);
  BindText(st, 6, r.detail);
  Step(st, "trial event");
}

// A result joins the open batch's run of its (trial, attempt, type); the
// runs are written when the batch commits (or before SupersedeMetrics
// updates the rows; reads see only what was written, and resume and view read
// before anything is put). The engine keeps duplicates out (wire-format.md
// §5.3: counted once), so a run never repeats a sequence that is stored.
void Store::PutMetric(const std::string& trial_id, const p::ReportMetricData& m) {
  Begin();
  if (failed()) return;
  const std::string_view type = p::ToString(m.type);
  MetricRun* run = nullptr;
  for (auto it = runs_.rbegin(); it != runs_.rend(); ++it) {
    if (it->attempt == m.attempt && it->type == type && it->trial_id == trial_id) {
      run = &*it;
      break;
    }
  }
  if (run == nullptr || run->vals.size() >= kMaxRunBytes) {
    run = &runs_.emplace_back();
    run->trial_id = trial_id;
    run->attempt = m.attempt;
    run->type = type;
    run->items = "[";
  }
  // [sequence, scalar, offset, length]; JSON has no NaN or infinities: null
  // (what a NaN stored as before) and ±9e999 (which SQLite reads as ±inf).
  const double scalar = m.value.scalar;
  const std::string_view scalar_text = std::isnan(scalar)   ? "null"
                                       : !std::isinf(scalar) ? ""
                                       : scalar > 0          ? "9e999"
                                                             : "-9e999";
  auto out = std::back_inserter(run->items);
  if (run->items.size() > 1) run->items += ',';
  if (scalar_text.empty()) {
    fmt::format_to(out, "[{},{},{},{}]", m.sequence, scalar, run->vals.size(), m.value.raw.size());
  } else {
    fmt::format_to(out, "[{},{},{},{}]", m.sequence, scalar_text, run->vals.size(),
                   m.value.raw.size());
  }
  run->vals.append(m.value.raw.data(), m.value.raw.size());
}

void Store::WriteMetricRuns() {
  if (runs_.empty()) return;
  const double now = WallNow();
  for (MetricRun& run : runs_) {
    run.items += ']';
    sqlite3_stmt* st = Prepare(
        "INSERT INTO metric_runs(trial_id, attempt, type, items, vals, at) "
        "VALUES(?1, ?2, ?3, ?4, ?5, ?6)");
    if (st == nullptr) return Fail("metric");
    BindText(st, 1, run.trial_id);
    sqlite3_bind_int64(st, 2, run.attempt);
    BindText(st, 3, run.type);
    BindText(st, 4, run.items);
    BindBlob(st, 5, run.vals);
    sqlite3_bind_double(st, 6, now);
    Step(st, "metric");
  }
  runs_.clear();
}

void Store::SupersedeMetrics(const std::string& trial_id, uint32_t current_attempt) {
  Begin();
  WriteMetricRuns();
  sqlite3_stmt* st = Prepare(
      "UPDATE metric_runs SET superseded = 1 WHERE trial_id = ?1 AND attempt < ?2 AND "
      "superseded = 0");
  if (st == nullptr) return Fail("supersede metrics");
  BindText(st, 1, trial_id);
  sqlite3_bind_int64(st, 2, current_attempt);
  Step(st, "supersede metrics");
}

void Store::SetResultOrder(const std::string& trial_id, int64_t order) {
  Begin();
  sqlite3_stmt* st =
      Prepare("UPDATE trials SET result_order = ?2 WHERE trial_id = ?1 AND result_order < 0");
  if (st == nullptr) return Fail("result order");
  BindText(st, 1, trial_id);
  sqlite3_bind_int64(st, 2, order);
  Step(st, "result order");
}

void Store::AddImport(int64_t order, const p::Packed& records) {
  Begin();
  sqlite3_stmt* st = Prepare("INSERT INTO imports(result_order, records, at) VALUES(?1, ?2, ?3)");
  if (st == nullptr) return Fail("import");
  sqlite3_bind_int64(st, 1, order);
  BindBlob(st, 2, records);
  sqlite3_bind_double(st, 3, WallNow());
  Step(st, "import");
}

Status Store::Imports(std::vector<std::pair<int64_t, p::Packed>>* out) const {
  out->clear();
  sqlite3_stmt* st = Prepare("SELECT result_order, records FROM imports ORDER BY result_order");
  if (st == nullptr) return Status::Internal("store " + file_.string() + ": cannot read imports");
  while (sqlite3_step(st) == SQLITE_ROW) {
    out->emplace_back(sqlite3_column_int64(st, 0), BlobColumn(st, 1));
  }
  sqlite3_reset(st);
  return Status::Ok();
}

void Store::AddEvent(std::string_view type, const p::Packed& body) {
  Begin();
  sqlite3_stmt* st = Prepare("INSERT INTO events(at, type, body) VALUES(?1, ?2, ?3)");
  if (st == nullptr) return Fail("event");
  sqlite3_bind_double(st, 1, WallNow());
  BindText(st, 2, type);
  BindBlob(st, 3, body);
  Step(st, "event");
}

void Store::PutCheckpoint(std::string_view kind, const StoredCheckpoint& c) {
  Begin();
  sqlite3_stmt* st = Prepare(
      "INSERT OR REPLACE INTO checkpoints(kind, plugin, state, seen_results, at) "
      "VALUES(?1, ?2, ?3, ?4, ?5)");
  if (st == nullptr) return Fail("checkpoint");
  BindText(st, 1, kind);
  BindText(st, 2, c.plugin);
  BindBlob(st, 3, c.state);
  sqlite3_bind_int64(st, 4, static_cast<sqlite3_int64>(c.seen_results));
  sqlite3_bind_double(st, 5, WallNow());
  Step(st, "checkpoint");
}

std::optional<std::string> Store::Meta(std::string_view key) const {
  sqlite3_stmt* st = Prepare("SELECT value FROM meta WHERE key = ?1");
  if (st == nullptr) return std::nullopt;
  BindText(st, 1, key);
  std::optional<std::string> value;
  if (sqlite3_step(st) == SQLITE_ROW) value = Column(st, 0);
  sqlite3_reset(st);
  return value;
}

Status Store::Config(fs::path* source_file, std::string* yaml) const {
  sqlite3_stmt* st = Prepare("SELECT source_file, yaml FROM config WHERE id = 1");
  if (st == nullptr) return Status::Internal("store " + file_.string() + ": no config table");
  Status result = Status::NotFound("store " + file_.string() + " holds no experiment file");
  if (sqlite3_step(st) == SQLITE_ROW) {
    *source_file = Column(st, 0);
    *yaml = Column(st, 1);
    result = Status::Ok();
  }
  sqlite3_reset(st);
  return result;
}

std::optional<p::Packed> Store::LatestSearchSpace() const {
  sqlite3_stmt* st = Prepare("SELECT space FROM search_spaces ORDER BY seq DESC LIMIT 1");
  if (st == nullptr) return std::nullopt;
  std::optional<p::Packed> space;
  if (sqlite3_step(st) == SQLITE_ROW) space = BlobColumn(st, 0);
  sqlite3_reset(st);
  return space;
}

Status Store::Trials(std::vector<StoredTrial>* out) const {
  out->clear();
  sqlite3_stmt* st = Prepare(R"sql(
SELECT trial_id, sequence_id, parameter_id, source, parameters, state, status, attempt, offers,
       worker_id, error, final_synthesized, created, started, ended, end_order, result_order,
       worker_key
FROM trials ORDER BY sequence_id)sql");
  if (st == nullptr) return Status::Internal("store " + file_.string() + ": cannot read trials");
  std::map<std::string, size_t> index;
  while (sqlite3_step(st) == SQLITE_ROW) {
    StoredTrial t;
    t.trial_id = Column(st, 0);
    t.sequence_id = static_cast<uint64_t>(sqlite3_column_int64(st, 1));
    t.parameter_id = sqlite3_column_int64(st, 2);
    p::ParseParameterSource(Column(st, 3), &t.source);
    t.parameters = BlobColumn(st, 4);
    t.state = Column(st, 5);
    if (sqlite3_column_type(st, 6) != SQLITE_NULL) {
      p::TrialStatus s;
      if (p::ParseTrialStatus(Column(st, 6), &s)) t.status = s;
    }
    t.attempt = static_cast<uint32_t>(sqlite3_column_int64(st, 7));
    t.offers = static_cast<uint32_t>(sqlite3_column_int64(st, 8));
    t.worker_id = Column(st, 9);
    t.error = Column(st, 10);
    t.final_synthesized = sqlite3_column_int(st, 11) != 0;
    t.created = sqlite3_column_double(st, 12);
    t.started = sqlite3_column_double(st, 13);
    t.ended = sqlite3_column_double(st, 14);
    t.end_order = sqlite3_column_int64(st, 15);
    t.result_order = sqlite3_column_int64(st, 16);
    t.worker_key = Column(st, 17);
    index[t.trial_id] = out->size();
    out->push_back(std::move(t));
  }
  sqlite3_reset(st);
  // A trial's metrics are its current attempt's (external trials: whatever
  // their client sent), through the columns of `metrics` (a table up to
  // version 3, a view of metric_runs since 4). Should a result be there
  // twice, one copy counts.
  sqlite3_stmt* ms = Prepare(R"sql(
SELECT m.trial_id, m.type, m.sequence, m.value, m.scalar FROM metrics m
JOIN trials t ON t.trial_id = m.trial_id
WHERE m.superseded = 0 AND (m.attempt = t.attempt OR t.source = 'external'))sql");
  if (ms == nullptr) return Status::Internal("store " + file_.string() + ": cannot read metrics");
  while (sqlite3_step(ms) == SQLITE_ROW) {
    auto it = index.find(Column(ms, 0));
    if (it == index.end()) continue;
    StoredTrial& t = (*out)[it->second];
    p::Metric metric;
    metric.raw = BlobColumn(ms, 3);
    metric.scalar = sqlite3_column_type(ms, 4) == SQLITE_NULL
                        ? std::numeric_limits<double>::quiet_NaN()
                        : sqlite3_column_double(ms, 4);
    if (Column(ms, 1) == "FINAL") {
      if (!t.final_metric) t.final_metric = std::move(metric);
    } else {
      t.periodical.emplace(static_cast<uint64_t>(sqlite3_column_int64(ms, 2)), std::move(metric));
    }
  }
  sqlite3_reset(ms);
  return Status::Ok();
}

std::optional<StoredCheckpoint> Store::Checkpoint(std::string_view kind) const {
  sqlite3_stmt* st =
      Prepare("SELECT plugin, state, seen_results FROM checkpoints WHERE kind = ?1");
  if (st == nullptr) return std::nullopt;
  BindText(st, 1, kind);
  std::optional<StoredCheckpoint> c;
  if (sqlite3_step(st) == SQLITE_ROW) {
    c.emplace();
    c->plugin = Column(st, 0);
    c->state = BlobColumn(st, 1);
    c->seen_results = static_cast<uint64_t>(sqlite3_column_int64(st, 2));
  }
  sqlite3_reset(st);
  return c;
}

int64_t Store::CountRows(std::string_view table) const {
  // Table names come from code, never from input.
  std::string sql = "SELECT COUNT(*) FROM " + std::string(table);
  sqlite3_stmt* st = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    n = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  return n;
}

}  // namespace tunehost::host
