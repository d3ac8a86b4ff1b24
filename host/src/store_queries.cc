#include "store_queries.h"

#include <limits>
#include <map>

#include "store_database.h"

namespace tunehost::host {

namespace p = tunehost::protocol;
namespace fs = std::filesystem;
using store_sql::BindText;
using store_sql::BlobColumn;
using store_sql::Column;

std::optional<std::string> StoreQueries::Meta(std::string_view key) const {
  sqlite3_stmt* st = db_.Prepare("SELECT value FROM meta WHERE key = ?1");
  if (st == nullptr) return std::nullopt;
  BindText(st, 1, key);
  std::optional<std::string> value;
  if (sqlite3_step(st) == SQLITE_ROW) value = Column(st, 0);
  sqlite3_reset(st);
  return value;
}

Status StoreQueries::Config(fs::path* source_file, std::string* yaml) const {
  sqlite3_stmt* st = db_.Prepare("SELECT source_file, yaml FROM config WHERE id = 1");
  if (st == nullptr) return Status::Internal("store " + db_.file().string() + ": no config table");
  Status result = Status::NotFound("store " + db_.file().string() + " holds no experiment file");
  if (sqlite3_step(st) == SQLITE_ROW) {
    *source_file = Column(st, 0);
    *yaml = Column(st, 1);
    result = Status::Ok();
  }
  sqlite3_reset(st);
  return result;
}

std::optional<p::Packed> StoreQueries::LatestSearchSpace() const {
  sqlite3_stmt* st = db_.Prepare("SELECT space FROM search_spaces ORDER BY seq DESC LIMIT 1");
  if (st == nullptr) return std::nullopt;
  std::optional<p::Packed> space;
  if (sqlite3_step(st) == SQLITE_ROW) space = BlobColumn(st, 0);
  sqlite3_reset(st);
  return space;
}

Status StoreQueries::Trials(std::vector<StoredTrial>* out) const {
  out->clear();
  sqlite3_stmt* st = db_.Prepare(R"sql(
SELECT trial_id, sequence_id, parameter_id, source, parameters, state, status, attempt, offers,
       worker_id, error, final_synthesized, created, started, ended, end_order, result_order,
       worker_key
FROM trials ORDER BY sequence_id)sql");
  if (st == nullptr) {
    return Status::Internal("store " + db_.file().string() + ": cannot read trials");
  }
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
  sqlite3_stmt* ms = db_.Prepare(R"sql(
SELECT m.trial_id, m.type, m.sequence, m.value, m.scalar FROM metrics m
JOIN trials t ON t.trial_id = m.trial_id
WHERE m.superseded = 0 AND (m.attempt = t.attempt OR t.source = 'external'))sql");
  if (ms == nullptr) {
    return Status::Internal("store " + db_.file().string() + ": cannot read metrics");
  }
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

std::optional<StoredCheckpoint> StoreQueries::Checkpoint(std::string_view kind) const {
  sqlite3_stmt* st =
      db_.Prepare("SELECT plugin, state, seen_results FROM checkpoints WHERE kind = ?1");
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

Status StoreQueries::Imports(std::vector<std::pair<int64_t, p::Packed>>* out) const {
  out->clear();
  sqlite3_stmt* st = db_.Prepare("SELECT result_order, records FROM imports ORDER BY result_order");
  if (st == nullptr) {
    return Status::Internal("store " + db_.file().string() + ": cannot read imports");
  }
  while (sqlite3_step(st) == SQLITE_ROW) {
    out->emplace_back(sqlite3_column_int64(st, 0), BlobColumn(st, 1));
  }
  sqlite3_reset(st);
  return Status::Ok();
}

int64_t StoreQueries::CountRows(std::string_view table) const {
  // Table names come from code, never from input.
  std::string sql = "SELECT COUNT(*) FROM " + std::string(table);
  sqlite3_stmt* st = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db_.handle(), sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    n = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  return n;
}

}  // namespace tunehost::host
