// The store's reads (store.h): resume and `tunehost view` rebuild an
// experiment from these. They see what the connection has written, the open
// batch included; a read-only store reads a schema from
// kOldestReadableSchemaVersion on, so every query goes through version 3's
// columns (schema version 4 keeps them as the view `metrics`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tunehost/host/store.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

class StoreDatabase;

class StoreQueries {
 public:
  explicit StoreQueries(const StoreDatabase& db) : db_(db) {}

  // As the Store functions of the same names.
  std::optional<std::string> Meta(std::string_view key) const;
  Status Config(std::filesystem::path* source_file, std::string* yaml) const;
  std::optional<protocol::Packed> LatestSearchSpace() const;
  Status Trials(std::vector<StoredTrial>* out) const;
  std::optional<StoredCheckpoint> Checkpoint(std::string_view kind) const;
  Status Imports(std::vector<std::pair<int64_t, protocol::Packed>>* out) const;
  int64_t CountRows(std::string_view table) const;

 private:
  const StoreDatabase& db_;
};

}  // namespace tunehost::host
