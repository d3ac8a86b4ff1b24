// The lifecycle pieces of the host (wire-format.md §5.3): the experiment
// store, real SQLite files in a temporary directory. The engine's resume
// path and its ExecutionEngine operations are in resume_test.cc.
#include "tunehost/host/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "host/engine_testing.h"
#include "test_util.h"
#include "tunehost/host/engine.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host {
namespace {

namespace fs = std::filesystem;
namespace p = tunehost::protocol;
using std::chrono::milliseconds;

using engine_testing::MakeTrial;
using engine_testing::MetricData;
using engine_testing::MetricOf;
using engine_testing::Params;


class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tunehost-store-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = dir_ / "store.db";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Store> Open(Store::Mode mode) {
    std::unique_ptr<Store> s;
    Status st = Store::Open(file_, mode, &s);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return s;
  }

  // Runs SQL on the file with a separate connection (what another process sees).
  int64_t Query(const std::string& sql) {
    sqlite3* db = nullptr;
    sqlite3_open_v2(file_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_stmt* st = nullptr;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      v = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
  }

  fs::path dir_, file_;
};

TEST_F(StoreTest, CreatesAVersionedWalDatabaseAndRefusesToCreateTwice) {
  auto s = Open(Store::Mode::kCreate);
  ASSERT_TRUE(s);
  EXPECT_EQ(Query("PRAGMA user_version"), kStoreSchemaVersion);
  std::unique_ptr<Store> again;
  Status st = Store::Open(file_, Store::Mode::kCreate, &again);
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find("already exists"), std::string::npos);
  st = Store::Open(dir_ / "missing.db", Store::Mode::kOpen, &again);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  sqlite3* db = nullptr;
  sqlite3_open(file_.c_str(), &db);
  sqlite3_stmt* q = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &q, nullptr);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(q, 0)), "wal");
  sqlite3_finalize(q);
  sqlite3_close(db);
}

// The write-ahead log is copied back by a thread of the store's own, never
// inside the writer's COMMIT (a stall of the host's loop); a writer that
// commits all the time still keeps the log bounded.
TEST_F(StoreTest, TheLogIsCheckpointedOffTheWriterAndStaysBounded) {
  constexpr int kCommits = 400, kRows = 250;
  {
    auto s = Open(Store::Mode::kCreate);
    Trial t = MakeTrial("T00000", 0);
    s->PutTrial(t, 100.0, 0, 0, -1);
    p::ReportMetricData m = MetricData(t.id, p::MetricType::kPeriodical, 0, 0.5);
    m.value.raw = std::string(300, 'x');  // about 10 rows a page: many log pages
    uint64_t seq = 0;
    for (int c = 0; c < kCommits; ++c) {
      for (int r = 0; r < kRows; ++r) {
        m.sequence = seq++;
        s->PutMetric(t.id, m);
      }
      ASSERT_OK(s->Commit());
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (s->BackgroundCheckpoints() == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    EXPECT_GE(s->BackgroundCheckpoints(), 1u);
    // Some 40 MB went through the log; it restarted instead of growing.
    fs::path wal = file_;
    wal += "-wal";
    EXPECT_LT(fs::file_size(wal), uintmax_t{24} << 20);
  }
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metrics"), int64_t{kCommits} * kRows);
}

TEST_F(StoreTest, WritesAreInvisibleUntilCommit) {
  auto s = Open(Store::Mode::kCreate);
  Trial t = MakeTrial("T00000", 0);
  s->PutTrial(t, 100.0, 0, 0, -1);
  s->PutMetric(t.id, MetricData(t.id, p::MetricType::kPeriodical, 0, 0.5));
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metrics"), 0) << "a batch is one transaction";
  ASSERT_OK(s->Commit());
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metrics"), 1);
  EXPECT_EQ(Query("SELECT COUNT(*) FROM trials"), 1);
}

// Schema version 4: a batch's results of one trial, attempt and type are one
// row of metric_runs; the `metrics` view shows them one per result, values
// and scalars exactly as they came (NaN as NULL, infinities kept).
TEST_F(StoreTest, ABatchsResultsAreOneRowReadBackOnePerResult) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> values = {0.1, nan, inf, -inf, -1.0 / 3, 1e-300, 42};
  {
    auto s = Open(Store::Mode::kCreate);
    Trial t = MakeTrial("T00000", 0);
    s->PutTrial(t, 100.0, 0, 0, -1);
    for (size_t i = 0; i < values.size(); ++i) {
      s->PutMetric(t.id, MetricData(t.id, p::MetricType::kPeriodical, i, values[i]));
    }
    s->PutMetric(t.id, MetricData(t.id, p::MetricType::kFinal, 0, 0.5));
    ASSERT_OK(s->Commit());
    EXPECT_EQ(Query("SELECT COUNT(*) FROM metric_runs"), 2) << "one row per trial, attempt, type";
    // Values past a run's size limit open another run.
    p::ReportMetricData big = MetricData(t.id, p::MetricType::kPeriodical, 0, 1);
    big.value.raw = std::string(600 << 10, 'x');
    for (uint64_t i = 100; i < 103; ++i) {
      big.sequence = i;
      s->PutMetric(t.id, big);
    }
    ASSERT_OK(s->Commit());
  }
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metric_runs"), 4);
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metrics"), static_cast<int64_t>(values.size()) + 4);
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metrics WHERE sequence = 1 AND scalar IS NULL"), 1);
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metrics WHERE sequence = 101 AND length(value) = 614400 "
                  "AND value = (SELECT value FROM metrics WHERE sequence = 100)"),
            1);
  auto s = Open(Store::Mode::kReadOnly);
  std::vector<StoredTrial> trials;
  ASSERT_OK(s->Trials(&trials));
  ASSERT_EQ(trials.size(), 1u);
  const StoredTrial& t = trials[0];
  ASSERT_EQ(t.periodical.size(), values.size() + 3);
  for (size_t i = 0; i < values.size(); ++i) {
    const p::Metric& m = t.periodical.at(i);
    EXPECT_EQ(m.raw, p::PackDouble(values[i])) << i;
    if (std::isnan(values[i])) {
      EXPECT_TRUE(std::isnan(m.scalar));
    } else {
      EXPECT_EQ(m.scalar, values[i]) << "bit for bit, " << i;
    }
  }
  EXPECT_EQ(t.periodical.at(102).raw, std::string(600 << 10, 'x'));
  ASSERT_TRUE(t.final_metric);
  EXPECT_EQ(t.final_metric->scalar, 0.5);
}

// A read-only open (tunehost view, tunectl) takes a version 3 store as it is
// (its metrics table has the columns version 4's view shows); a version 2
// store must be migrated by a writable open first.
TEST_F(StoreTest, AReadOnlyOpenReadsAVersionThreeStoreAndRefusesOlder) {
  {
    auto s = Open(Store::Mode::kCreate);
    Trial t = MakeTrial("T00000", 0);
    s->PutTrial(t, 100.0, 0, 0, -1);
    s->PutMetric(t.id, MetricData(t.id, p::MetricType::kPeriodical, 0, 0.25));
    s->PutMetric(t.id, MetricData(t.id, p::MetricType::kFinal, 0, 0.75));
    ASSERT_OK(s->Commit());
  }
  auto exec = [&](const char* sql) {
    sqlite3* db = nullptr;
    sqlite3_open(file_.c_str(), &db);
    EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  };
  // Back to version 3's metrics table, rows as the view shows them.
  exec(R"sql(
CREATE TABLE metrics_v3(trial_id TEXT NOT NULL, attempt INTEGER NOT NULL, type TEXT NOT NULL,
                        sequence INTEGER NOT NULL, value BLOB NOT NULL, scalar REAL,
                        at REAL NOT NULL, superseded INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY(trial_id, attempt, type, sequence)) WITHOUT ROWID;
INSERT INTO metrics_v3 SELECT trial_id, attempt, type, sequence, value, scalar, at, superseded
  FROM metrics;
DROP VIEW metrics;
DROP TABLE metric_runs;
ALTER TABLE metrics_v3 RENAME TO metrics;
PRAGMA user_version=3;
)sql");
  {
    auto s = Open(Store::Mode::kReadOnly);
    ASSERT_TRUE(s);
    std::vector<StoredTrial> trials;
    ASSERT_OK(s->Trials(&trials));
    ASSERT_EQ(trials.size(), 1u);
    EXPECT_EQ(trials[0].periodical.at(0).raw, p::PackDouble(0.25));
    ASSERT_TRUE(trials[0].final_metric);
    EXPECT_EQ(trials[0].final_metric->scalar, 0.75);
  }
  EXPECT_EQ(Query("PRAGMA user_version"), 3) << "a read-only open changes nothing";
  exec("PRAGMA user_version=2");
  std::unique_ptr<Store> old;
  Status st = Store::Open(file_, Store::Mode::kReadOnly, &old);
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find("needs migrating"), std::string::npos) << st.message();
}

TEST_F(StoreTest, TrialsRoundTripWithTheirMetricsAndKeepFirstTimes) {
  {
    auto s = Open(Store::Mode::kCreate);
    Trial t = MakeTrial("T00001", 1);
    t.source = p::ParameterSource::kCustomized;
    s->PutTrial(t, 100.0, 0, 0, -1);
    t.state = TrialState::kRunning;
    t.worker_id = "w1";
    s->PutTrial(t, 0, 101.0, 0, -1);
    s->PutMetric(t.id, MetricData(t.id, p::MetricType::kPeriodical, 0, 0.25));
    s->PutMetric(t.id, MetricData(t.id, p::MetricType::kPeriodical, 1, 0.5));
    s->PutMetric(t.id, MetricData(t.id, p::MetricType::kPeriodical, 1, 0.99));  // duplicate
    s->PutMetric(t.id, MetricData(t.id, p::MetricType::kFinal, 2, 0.75));
    t.state = TrialState::kEnded;
    t.status = p::TrialStatus::kSucceeded;
    s->PutTrial(t, 0, 0, 105.0, 3);
    s->AddTrialEvent(t.id, "ended", 0, "w1", "");
    s->SetResultOrder(t.id, 4);
    s->SetResultOrder(t.id, 9);  // the first order stays
    Trial waiting = MakeTrial("T00000", 0);
    s->PutTrial(waiting, 99.0, 0, 0, -1);
    ASSERT_OK(s->Commit());
  }
  auto s = Open(Store::Mode::kReadOnly);
  std::vector<StoredTrial> trials;
  ASSERT_OK(s->Trials(&trials));
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0].trial_id, "T00000") << "ordered by sequence id";
  EXPECT_EQ(trials[0].state, "WAITING");
  EXPECT_FALSE(trials[0].status.has_value());
  const StoredTrial& t = trials[1];
  EXPECT_EQ(t.state, "ENDED");
  EXPECT_EQ(t.status, p::TrialStatus::kSucceeded);
  EXPECT_EQ(t.source, p::ParameterSource::kCustomized);
  EXPECT_EQ(t.parameter_id, 11);
  EXPECT_EQ(t.parameters, Params(1));
  EXPECT_EQ(t.worker_id, "w1");
  EXPECT_DOUBLE_EQ(t.created, 100.0);
  EXPECT_DOUBLE_EQ(t.started, 101.0);
  EXPECT_DOUBLE_EQ(t.ended, 105.0);
  EXPECT_EQ(t.end_order, 3);
  EXPECT_EQ(t.result_order, 4);
  EXPECT_EQ(trials[0].result_order, -1);
  ASSERT_EQ(t.periodical.size(), 2u);
  EXPECT_DOUBLE_EQ(t.periodical.at(1).scalar, 0.5) << "the first copy of a metric wins";
  ASSERT_TRUE(t.final_metric);
  EXPECT_DOUBLE_EQ(t.final_metric->scalar, 0.75);
  EXPECT_EQ(t.final_metric->raw, p::PackDouble(0.75));
}

TEST_F(StoreTest, MetricsArePerAttemptAndSupersededAttemptsAreKeptButNotRead) {
  // wire-format.md §5.3: a trial's metrics are those of its current attempt.
  {
    auto s = Open(Store::Mode::kCreate);
    Trial t = MakeTrial("T00000", 0);
    s->PutTrial(t, 100.0, 0, 0, -1);
    s->PutMetric(t.id, MetricData(t.id, p::MetricType::kPeriodical, 0, 0.1));
    s->PutMetric(t.id, MetricData(t.id, p::MetricType::kPeriodical, 1, 0.2));
    t.attempt = 1;  // its worker died: a new attempt reuses the sequence numbers
    s->PutTrial(t, 0, 0, 0, -1);
    s->SupersedeMetrics(t.id, t.attempt);
    p::ReportMetricData again = MetricData(t.id, p::MetricType::kPeriodical, 0, 0.7);
    again.attempt = 1;
    s->PutMetric(t.id, again);
    ASSERT_OK(s->Commit());
  }
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metrics"), 3) << "the old attempt's rows are kept";
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metrics WHERE superseded = 1"), 2);
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metrics WHERE superseded = 1 AND attempt = 0"), 2);
  auto s = Open(Store::Mode::kReadOnly);
  std::vector<StoredTrial> trials;
  ASSERT_OK(s->Trials(&trials));
  ASSERT_EQ(trials.size(), 1u);
  ASSERT_EQ(trials[0].periodical.size(), 1u) << "only the current attempt's results";
  EXPECT_DOUBLE_EQ(trials[0].periodical.at(0).scalar, 0.7);
}

TEST_F(StoreTest, AVersionOneStoreIsMigratedKeepingEveryMetric) {
  {
    sqlite3* db = nullptr;
    sqlite3_open(file_.c_str(), &db);
    // The version 1 tables this migration starts from (the rest unchanged).
    const char* v1 = R"sql(
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
INSERT INTO trials VALUES('T00000', 0, 0, 'algorithm', x'80', 'RUNNING', NULL, 2, 3, 'w', '',
                          0, 1, 2, 0, -1, -1);
INSERT INTO metrics VALUES('T00000', 'PERIODICAL', 0, 1, x'01', 1, 5);
INSERT INTO metrics VALUES('T00000', 'PERIODICAL', 1, 2, x'02', 2, 6);
PRAGMA user_version=1;
)sql";
    ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  std::unique_ptr<Store> s;
  ASSERT_OK(Store::Open(file_, Store::Mode::kOpen, &s));
  EXPECT_EQ(Query("PRAGMA user_version"), kStoreSchemaVersion);
  EXPECT_EQ(Query("SELECT COUNT(*) FROM metrics"), 2);
  EXPECT_EQ(Query("SELECT superseded FROM metrics WHERE attempt = 1"), 1);
  EXPECT_EQ(Query("SELECT superseded FROM metrics WHERE attempt = 2"), 0);
  std::vector<StoredTrial> trials;
  ASSERT_OK(s->Trials(&trials));
  ASSERT_EQ(trials.size(), 1u);
  ASSERT_EQ(trials[0].periodical.size(), 1u);
  EXPECT_EQ(trials[0].periodical.count(1), 1u);
}

TEST_F(StoreTest, MetaConfigSearchSpacesAndCheckpoints) {
  {
    auto s = Open(Store::Mode::kCreate);
    s->SetMeta("status", "RUNNING");
    s->SetMeta("elapsed_s", 12.5);
    s->SetMeta("status", "DONE");
    s->SetConfig("/x/experiment.yaml", "searchSpace: {}\n");
    s->AddSearchSpace(Params(1));
    s->AddSearchSpace(Params(2));
    s->PutCheckpoint("tuner", StoredCheckpoint{"tpe", "state-1", 4});
    s->AddImport(3, Params(5));
    s->PutCheckpoint("tuner", StoredCheckpoint{"tpe", "state-2", 7});
    ASSERT_OK(s->Commit());
  }
  auto s = Open(Store::Mode::kOpen);
  EXPECT_EQ(s->Meta("status"), "DONE");
  EXPECT_EQ(std::stod(*s->Meta("elapsed_s")), 12.5);
  EXPECT_FALSE(s->Meta("nothing").has_value());
  fs::path source;
  std::string yaml;
  ASSERT_OK(s->Config(&source, &yaml));
  EXPECT_EQ(source, "/x/experiment.yaml");
  EXPECT_EQ(yaml, "searchSpace: {}\n");
  EXPECT_EQ(s->LatestSearchSpace(), Params(2));
  EXPECT_EQ(s->CountRows("search_spaces"), 2);
  auto cp = s->Checkpoint("tuner");
  ASSERT_TRUE(cp);
  EXPECT_EQ(cp->plugin, "tpe");
  EXPECT_EQ(cp->state, "state-2");
  EXPECT_EQ(cp->seen_results, 7u);
  std::vector<std::pair<int64_t, p::Packed>> imports;
  ASSERT_OK(s->Imports(&imports));
  ASSERT_EQ(imports.size(), 1u);
  EXPECT_EQ(imports[0].first, 3);
  EXPECT_EQ(imports[0].second, Params(5));
  EXPECT_FALSE(s->Checkpoint("assessor"));
}

TEST_F(StoreTest, ANewerSchemaIsRefusedAndAnEmptyFileIsMigrated) {
  {
    sqlite3* db = nullptr;
    sqlite3_open(file_.c_str(), &db);
    sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  std::unique_ptr<Store> s;
  Status st = Store::Open(file_, Store::Mode::kOpen, &s);
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find("schema version 99"), std::string::npos) << st.message();
  fs::remove(file_);
  {
    sqlite3* db = nullptr;  // version 0: a database without our tables
    sqlite3_open(file_.c_str(), &db);
    sqlite3_exec(db, "CREATE TABLE unrelated(x)", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  st = Store::Open(file_, Store::Mode::kReadOnly, &s);
  EXPECT_EQ(st.code(), Status::Code::kBadState) << "read-only never migrates";
  ASSERT_OK(Store::Open(file_, Store::Mode::kOpen, &s));
  EXPECT_EQ(Query("PRAGMA user_version"), kStoreSchemaVersion);
  EXPECT_EQ(s->CountRows("trials"), 0);
}

TEST_F(StoreTest, AReadOnlyStoreFailsWritesInsteadOfPretending) {
  { Open(Store::Mode::kCreate); }
  auto s = Open(Store::Mode::kReadOnly);
  s->SetMeta("status", "RUNNING");
  Status st = s->Commit();
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(s->failed());
  EXPECT_FALSE(s->Meta("status").has_value());
}

}  // namespace
}  // namespace tunehost::host
