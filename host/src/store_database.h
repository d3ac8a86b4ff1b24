// The store's SQLite connection (store.h): the file, private to its user
// (wire-format.md §9), opened in WAL mode; the schema and its migrations;
// and the prepared statements the store's writes and reads share. Also the
// few column and binding helpers both of those use.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "tunehost/host/store.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

class StoreDatabase {
 public:
  // As Store::Open: kCreate makes a new database (refusing an existing
  // file), kOpen and kReadOnly need one; kCreate and kOpen bring an older
  // schema up to kStoreSchemaVersion, kReadOnly takes one from
  // kOldestReadableSchemaVersion on as it is; a newer one is refused.
  static Status Open(const std::filesystem::path& file, Store::Mode mode,
                     std::unique_ptr<StoreDatabase>* out);
  ~StoreDatabase();
  StoreDatabase(const StoreDatabase&) = delete;
  StoreDatabase& operator=(const StoreDatabase&) = delete;

  sqlite3* handle() const { return db_; }
  const std::filesystem::path& file() const { return file_; }

  // Runs `sql` (statements without rows).
  Status Exec(const char* sql);
  // The statement of `sql`, reset and unbound, prepared the first time it is
  // asked for. Statements are kept by the text's address: `sql` is a
  // literal. Null (logged) when SQLite refuses it.
  sqlite3_stmt* Prepare(const char* sql) const;

 private:
  explicit StoreDatabase(std::filesystem::path file) : file_(std::move(file)) {}
  Status Migrate(bool read_only);

  std::filesystem::path file_;
  sqlite3* db_ = nullptr;
  mutable std::map<const char*, sqlite3_stmt*> statements_;  // by SQL text pointer
};

namespace store_sql {

inline double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline std::string Column(sqlite3_stmt* st, int i) {
  const unsigned char* text = sqlite3_column_text(st, i);
  return text ? std::string(reinterpret_cast<const char*>(text),
                            static_cast<size_t>(sqlite3_column_bytes(st, i)))
              : std::string();
}

inline protocol::Packed BlobColumn(sqlite3_stmt* st, int i) {
  const void* blob = sqlite3_column_blob(st, i);
  return blob ? protocol::Packed(static_cast<const char*>(blob),
                                 static_cast<size_t>(sqlite3_column_bytes(st, i)))
              : protocol::Packed();
}

inline void BindText(sqlite3_stmt* st, int i, std::string_view s) {
  sqlite3_bind_text(st, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
}

inline void BindBlob(sqlite3_stmt* st, int i, std::string_view s) {
  sqlite3_bind_blob(st, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
}

}  // namespace store_sql

}  // namespace tunehost::host
