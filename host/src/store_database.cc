#include "store_database.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace tunehost::host {

namespace fs = std::filesystem;

namespace {

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

}  // namespace

Status StoreDatabase::Open(const fs::path& file, Store::Mode mode,
                           std::unique_ptr<StoreDatabase>* out) {
  using Mode = Store::Mode;
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
      if (fs::exists(f, ec))
        fs::permissions(f, fs::perms::owner_read | fs::perms::owner_write,
                        fs::perm_options::replace, ec);
    }
  }
  std::unique_ptr<StoreDatabase> db(new StoreDatabase(file));
  int flags =
      mode == Mode::kReadOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(file.c_str(), &db->db_, flags | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    std::string why = db->db_ ? sqlite3_errmsg(db->db_) : "out of memory";
    return Status::Unavailable("cannot open store " + file.string() + ": " + why);
  }
  sqlite3_busy_timeout(db->db_, 5000);
  if (mode != Mode::kReadOnly) {
    Status st = db->Exec("PRAGMA journal_mode=WAL");
    if (st.ok()) st = db->Exec("PRAGMA synchronous=NORMAL");
    if (!st.ok()) return st;
  }
  Status st = db->Migrate(mode == Mode::kReadOnly);
  if (!st.ok()) return st;
  *out = std::move(db);
  return Status::Ok();
}

StoreDatabase::~StoreDatabase() {
  for (auto& [sql, st] : statements_) sqlite3_finalize(st);
  sqlite3_close(db_);
}

Status StoreDatabase::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return Status::Internal("store " + file_.string() + ": " + why);
  }
  return Status::Ok();
}

Status StoreDatabase::Migrate(bool read_only) {
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
                            std::to_string(version) +
                            " and needs migrating: open it once with "
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

sqlite3_stmt* StoreDatabase::Prepare(const char* sql) const {
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

}  // namespace tunehost::host
