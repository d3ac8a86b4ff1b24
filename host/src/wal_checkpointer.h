// Copies the store's write-ahead log back into the database on a thread of
// its own, with a connection of its own, so that the loop thread never waits
// for a checkpoint's fsync (SQLite's automatic checkpoint runs inside the
// COMMIT that crosses its threshold: a 10 ms stall of the loop every few
// thousand results). A PASSIVE checkpoint takes no lock the writer needs.
// The log restarts from its beginning only once a checkpoint has copied all
// of it before the next commit, which a busy writer rarely allows: past
// kWriterPages the writer checkpoints itself (the few pages the thread has
// not copied yet), so the log stays bounded.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <thread>

namespace tunehost::host {

class WalCheckpointer {
 public:
  // Log pages after a commit that ask for a checkpoint (SQLite's default
  // automatic threshold).
  static constexpr int kPages = 1000;
  // Log pages after a commit at which the writer checkpoints in the commit.
  static constexpr int kWriterPages = 4 * kPages;

  // Takes over `writer`'s automatic checkpoints (its WAL hook).
  WalCheckpointer(sqlite3* writer, const std::filesystem::path& file);
  ~WalCheckpointer();
  WalCheckpointer(const WalCheckpointer&) = delete;
  WalCheckpointer& operator=(const WalCheckpointer&) = delete;

  // Checkpoints this has completed (for tests).
  uint64_t completed() const { return completed_.load(); }

 private:
  static int OnCommit(void* self, sqlite3* db, const char* name, int pages);
  void Run();

  sqlite3* writer_;
  std::filesystem::path file_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool due_ = false;
  bool stop_ = false;
  std::atomic<uint64_t> completed_{0};
  std::thread thread_;
};

}  // namespace tunehost::host
