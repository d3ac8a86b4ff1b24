#include "wal_checkpointer.h"

#include <spdlog/spdlog.h>

namespace tunehost::host {

WalCheckpointer::WalCheckpointer(sqlite3* writer, const std::filesystem::path& file)
    : writer_(writer), file_(file) {
  // Replaces the automatic checkpoint (sqlite3_wal_autocheckpoint is this hook).
  sqlite3_wal_hook(writer, &WalCheckpointer::OnCommit, this);
  thread_ = std::thread([this] { Run(); });
}

WalCheckpointer::~WalCheckpointer() {
  sqlite3_wal_hook(writer_, nullptr, nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

// On the writer's thread, after each commit, with the log's size in pages.
int WalCheckpointer::OnCommit(void* self, sqlite3* db, const char* name, int pages) {
  if (pages < kPages) return SQLITE_OK;
  if (pages >= kWriterPages) {
    // What SQLite's automatic checkpoint does, for the pages the thread
    // has not copied yet; the next write restarts the log.
    (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    return SQLITE_OK;
  }
  auto* c = static_cast<WalCheckpointer*>(self);
  {
    std::lock_guard<std::mutex> lock(c->mu_);
    if (c->due_) return SQLITE_OK;
    c->due_ = true;
  }
  c->cv_.notify_one();
  return SQLITE_OK;
}

void WalCheckpointer::Run() {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(file_.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    spdlog::warn("store {}: no background checkpoints ({}); the log grows until the host exits",
                 file_.string(), db != nullptr ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return;
  }
  sqlite3_busy_timeout(db, 1000);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return due_ || stop_; });
    if (stop_) break;
    due_ = false;
    lock.unlock();
    int log_pages = 0, copied = 0;
    const int rc =
        sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log_pages, &copied);
    if (rc == SQLITE_OK) {
      completed_.fetch_add(1);
    } else if (rc != SQLITE_BUSY) {
      spdlog::warn("store {}: checkpoint failed: {}", file_.string(), sqlite3_errmsg(db));
    }
    lock.lock();
  }
  lock.unlock();
  sqlite3_close(db);
}

}  // namespace tunehost::host
