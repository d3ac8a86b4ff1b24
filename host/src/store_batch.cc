#include "store_batch.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <iterator>

#include "offer_journal.h"
#include "store_database.h"

namespace tunehost::host {

namespace p = tunehost::protocol;
namespace fs = std::filesystem;
using store_sql::BindBlob;
using store_sql::BindText;
using store_sql::WallNow;

void StoreBatch::Fail(const char* what) {
  if (error_.empty()) {
    error_ = std::string(what) + ": " + sqlite3_errmsg(db_.handle());
    spdlog::error("store {}: {}", db_.file().string(), error_);
  }
}

void StoreBatch::Begin() {
  if (in_batch_ || failed()) return;
  if (sqlite3_exec(db_.handle(), "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) {
    Fail("begin");
    return;
  }
  in_batch_ = true;
}

void StoreBatch::Step(sqlite3_stmt* st, const char* what) {
  if (failed()) return;  // nothing after a failure, not even in autocommit
  if (st == nullptr) {
    Fail(what);
    return;
  }
  if (sqlite3_step(st) != SQLITE_DONE) Fail(what);
  sqlite3_reset(st);
}

Status StoreBatch::Commit() {
  WriteMetricRuns();
  if (failed()) {
    runs_.clear();
    return Status::Internal(error_);
  }
  if (!in_batch_) return Status::Ok();
  in_batch_ = false;
  if (sqlite3_exec(db_.handle(), "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    Fail("commit");
    sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
    return Status::Internal(error_);
  }
  return Status::Ok();
}

void StoreBatch::SetMeta(std::string_view key, std::string_view value) {
  Begin();
  sqlite3_stmt* st = db_.Prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)");
  if (st == nullptr) return Fail("meta");
  BindText(st, 1, key);
  BindText(st, 2, value);
  Step(st, "meta");
}

void StoreBatch::SetMeta(std::string_view key, double value) {
  Begin();
  sqlite3_stmt* st = db_.Prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)");
  if (st == nullptr) return Fail("meta");
  BindText(st, 1, key);
  sqlite3_bind_double(st, 2, value);
  Step(st, "meta");
}

void StoreBatch::SetConfig(const fs::path& source_file, std::string_view yaml) {
  Begin();
  sqlite3_stmt* st =
      db_.Prepare("INSERT OR REPLACE INTO config(id, source_file, yaml, at) VALUES(1, ?1, ?2, ?3)");
  if (st == nullptr) return Fail("config");
  BindText(st, 1, source_file.string());
  BindText(st, 2, yaml);
  sqlite3_bind_double(st, 3, WallNow());
  Step(st, "config");
}

void StoreBatch::AddSearchSpace(const p::Packed& space) {
  Begin();
  sqlite3_stmt* st = db_.Prepare("INSERT INTO search_spaces(space, at) VALUES(?1, ?2)");
  if (st == nullptr) return Fail("search space");
  BindBlob(st, 1, space);
  sqlite3_bind_double(st, 2, WallNow());
  Step(st, "search space");
}

void StoreBatch::WriteTrialRow(const TrialRow& r) {
  Begin();
  // Times and end order keep their first non-zero value.
  sqlite3_stmt* st = db_.Prepare(R"sql(
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

void StoreBatch::WriteTrialEvent(const TrialEventRow& r) {
  Begin();
  sqlite3_stmt* st = db_.Prepare(
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
void StoreBatch::PutMetric(const std::string& trial_id, const p::ReportMetricData& m) {
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
  const std::string_view scalar_text = std::isnan(scalar)    ? "null"
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

void StoreBatch::WriteMetricRuns() {
  if (runs_.empty()) return;
  const double now = WallNow();
  for (MetricRun& run : runs_) {
    run.items += ']';
    sqlite3_stmt* st = db_.Prepare(
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

void StoreBatch::SupersedeMetrics(const std::string& trial_id, uint32_t current_attempt) {
  Begin();
  WriteMetricRuns();
  sqlite3_stmt* st = db_.Prepare(
      "UPDATE metric_runs SET superseded = 1 WHERE trial_id = ?1 AND attempt < ?2 AND "
      "superseded = 0");
  if (st == nullptr) return Fail("supersede metrics");
  BindText(st, 1, trial_id);
  sqlite3_bind_int64(st, 2, current_attempt);
  Step(st, "supersede metrics");
}

void StoreBatch::SetResultOrder(const std::string& trial_id, int64_t order) {
  Begin();
  sqlite3_stmt* st =
      db_.Prepare("UPDATE trials SET result_order = ?2 WHERE trial_id = ?1 AND result_order < 0");
  if (st == nullptr) return Fail("result order");
  BindText(st, 1, trial_id);
  sqlite3_bind_int64(st, 2, order);
  Step(st, "result order");
}

void StoreBatch::AddImport(int64_t order, const p::Packed& records) {
  Begin();
  sqlite3_stmt* st =
      db_.Prepare("INSERT INTO imports(result_order, records, at) VALUES(?1, ?2, ?3)");
  if (st == nullptr) return Fail("import");
  sqlite3_bind_int64(st, 1, order);
  BindBlob(st, 2, records);
  sqlite3_bind_double(st, 3, WallNow());
  Step(st, "import");
}

void StoreBatch::AddEvent(std::string_view type, const p::Packed& body) {
  Begin();
  sqlite3_stmt* st = db_.Prepare("INSERT INTO events(at, type, body) VALUES(?1, ?2, ?3)");
  if (st == nullptr) return Fail("event");
  sqlite3_bind_double(st, 1, WallNow());
  BindText(st, 2, type);
  BindBlob(st, 3, body);
  Step(st, "event");
}

void StoreBatch::PutCheckpoint(std::string_view kind, const StoredCheckpoint& c) {
  Begin();
  sqlite3_stmt* st = db_.Prepare(
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

}  // namespace tunehost::host
