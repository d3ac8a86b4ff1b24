// The store's writes (store.h): the first write after a commit opens a
// transaction and Commit ends it. Each write binds one cached statement,
// except results: those of one trial, attempt and type are gathered into
// one row of `metric_runs` (schema version 4), written when the batch
// commits. After an error nothing more is written and Commit reports it.
#pragma once

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tunehost/host/store.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

class StoreDatabase;
struct TrialRow;
struct TrialEventRow;

class StoreBatch {
 public:
  explicit StoreBatch(StoreDatabase& db) : db_(db) {}

  // As the Store functions of the same names.
  void SetMeta(std::string_view key, std::string_view value);
  void SetMeta(std::string_view key, double value);
  void SetConfig(const std::filesystem::path& source_file, std::string_view yaml);
  void AddSearchSpace(const protocol::Packed& space);
  void PutMetric(const std::string& trial_id, const protocol::ReportMetricData& m);
  void SupersedeMetrics(const std::string& trial_id, uint32_t current_attempt);
  void AddEvent(std::string_view type, const protocol::Packed& body);
  void SetResultOrder(const std::string& trial_id, int64_t order);
  void AddImport(int64_t order, const protocol::Packed& records);
  void PutCheckpoint(std::string_view kind, const StoredCheckpoint& c);
  // One row of `trials` (inserted, or updated keeping its first times) and
  // one of `trial_events`: from Store::PutTrial and AddTrialEvent, and from
  // the offer journal's replay.
  void WriteTrialRow(const TrialRow& r);
  void WriteTrialEvent(const TrialEventRow& r);
  // Writes the gathered results (Commit does, first).
  void WriteMetricRuns();
  // Ends the open batch; an error leaves the batch failed for good.
  Status Commit();

  bool in_batch() const { return in_batch_; }
  bool failed() const { return !error_.empty(); }

 private:
  void Begin();
  void Step(sqlite3_stmt* st, const char* what);
  void Fail(const char* what);

  // The open batch's results of one trial, attempt and type, written as one
  // row of `metric_runs` when the batch commits.
  struct MetricRun {
    std::string trial_id;
    uint32_t attempt = 0;
    std::string_view type;  // p::ToString's static text
    std::string items;      // JSON: [[sequence, scalar, offset, length], ...
    std::string vals;       // the results' msgpack values, back to back
  };
  // A run past this many bytes of values is closed and another opened.
  static constexpr size_t kMaxRunBytes = size_t{1} << 20;

  StoreDatabase& db_;
  bool in_batch_ = false;
  std::string error_;
  std::vector<MetricRun> runs_;
};

}  // namespace tunehost::host
