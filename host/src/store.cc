#include "tunehost/host/store.h"

#include <system_error>
#include <utility>

#include "tunehost/host/engine.h"

#include "offer_journal.h"
#include "store_batch.h"
#include "store_database.h"
#include "store_journal.h"
#include "store_queries.h"
#include "wal_checkpointer.h"

namespace tunehost::host {

namespace p = tunehost::protocol;
namespace fs = std::filesystem;

namespace {

std::string_view StateName(TrialState s) {
  switch (s) {
    case TrialState::kWaiting: return "WAITING";
    case TrialState::kOffered: return "OFFERED";
    case TrialState::kRunning: return "RUNNING";
    case TrialState::kEnded: return "ENDED";
  }
  return "WAITING";
}

}  // namespace

Status Store::Open(const fs::path& file, Mode mode, std::unique_ptr<Store>* out) {
  std::unique_ptr<StoreDatabase> db;
  Status st = StoreDatabase::Open(file, mode, &db);
  if (!st.ok()) return st;
  std::unique_ptr<Store> store(new Store());
  store->file_ = file;
  store->queries_ = std::make_unique<StoreQueries>(*db);
  store->batch_ = std::make_unique<StoreBatch>(*db);
  store->db_ = std::move(db);
  if (mode != Mode::kReadOnly) {
    // A journal beside a new database is another experiment's leftover.
    std::error_code ec;
    if (mode == Mode::kCreate) fs::remove(OfferJournal::For(file), ec);
    store->journal_ = std::make_unique<StoreJournal>(file);
    st = store->journal_->Replay(*store->queries_, *store->batch_, &store->replayed_offers_);
    if (!st.ok()) return st;
    store->checkpointer_ = std::make_unique<WalCheckpointer>(store->db_->handle(), file);
  }
  *out = std::move(store);
  return Status::Ok();
}

Store::~Store() {
  if (batch_ && batch_->in_batch() && !batch_->failed()) Commit();
  // The parts go in the reverse of their order in store.h: the
  // checkpointer's connection first (the last one to close checkpoints), the
  // database's last.
}

uint64_t Store::BackgroundCheckpoints() const {
  return checkpointer_ ? checkpointer_->completed() : 0;
}

bool Store::failed() const { return batch_->failed(); }

Status Store::Commit() { return journal_ ? journal_->Commit(*batch_) : batch_->Commit(); }

Status Store::JournalTrial(const std::string& trial_id) {
  if (!journal_ || failed()) return Status::BadState("no offer journal");
  return journal_->Append(trial_id);
}

void Store::SetMeta(std::string_view key, std::string_view value) { batch_->SetMeta(key, value); }

void Store::SetMeta(std::string_view key, double value) { batch_->SetMeta(key, value); }

void Store::SetConfig(const fs::path& source_file, std::string_view yaml) {
  batch_->SetConfig(source_file, yaml);
}

void Store::AddSearchSpace(const p::Packed& space) { batch_->AddSearchSpace(space); }

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
  batch_->WriteTrialRow(row);
  if (journal_) journal_->KeepRow(std::move(row));
}

void Store::AddTrialEvent(const std::string& trial_id, std::string_view event, uint32_t attempt,
                          std::string_view worker_id, std::string_view detail) {
  TrialEventRow row{trial_id, store_sql::WallNow(), std::string(event), attempt,
                    std::string(worker_id), std::string(detail)};
  batch_->WriteTrialEvent(row);
  if (journal_) journal_->KeepEvent(std::move(row));
}

void Store::PutMetric(const std::string& trial_id, const p::ReportMetricData& m) {
  batch_->PutMetric(trial_id, m);
}

void Store::SupersedeMetrics(const std::string& trial_id, uint32_t current_attempt) {
  batch_->SupersedeMetrics(trial_id, current_attempt);
}

void Store::AddEvent(std::string_view type, const p::Packed& body) { batch_->AddEvent(type, body); }

void Store::SetResultOrder(const std::string& trial_id, int64_t order) {
  batch_->SetResultOrder(trial_id, order);
}

void Store::AddImport(int64_t order, const p::Packed& records) {
  batch_->AddImport(order, records);
}

void Store::PutCheckpoint(std::string_view kind, const StoredCheckpoint& c) {
  batch_->PutCheckpoint(kind, c);
}

std::optional<std::string> Store::Meta(std::string_view key) const { return queries_->Meta(key); }

Status Store::Config(fs::path* source_file, std::string* yaml) const {
  return queries_->Config(source_file, yaml);
}

std::optional<p::Packed> Store::LatestSearchSpace() const { return queries_->LatestSearchSpace(); }

Status Store::Trials(std::vector<StoredTrial>* out) const { return queries_->Trials(out); }

std::optional<StoredCheckpoint> Store::Checkpoint(std::string_view kind) const {
  return queries_->Checkpoint(kind);
}

Status Store::Imports(std::vector<std::pair<int64_t, p::Packed>>* out) const {
  return queries_->Imports(out);
}

int64_t Store::CountRows(std::string_view table) const { return queries_->CountRows(table); }

}  // namespace tunehost::host
