// Metric acknowledgements gathered over one loop turn (with a store: over one
// commit, since acknowledged means stored) and sent together. A worker whose
// WH says `acks: "spans"` gets one MA per run of consecutive results of one
// trial attempt; other workers one MA per result (wire-format.md §5.2,
// acknowledgement spans). Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tunehost/protocol/messages.h"

namespace tunehost::host {

class AckBatch {
 public:
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }

  // The acknowledgement of one result for `worker_id`; `spans`: whether that
  // worker takes spans.
  void Add(const std::string& worker_id, const protocol::MetricAck& ack, bool spans) {
    if (spans) {
      auto open = open_.find(worker_id);
      if (open != open_.end()) {
        protocol::MetricAck& last = entries_[open->second].ack;
        const uint64_t n = last.acknowledged();
        if (last.trial_id == ack.trial_id && last.attempt == ack.attempt &&
            ack.sequence - last.sequence == n && ack.sequence > last.sequence &&
            n < std::numeric_limits<uint32_t>::max()) {
          last.span = static_cast<uint32_t>(n + 1);
          return;
        }
      }
      open_[worker_id] = entries_.size();
    }
    entries_.push_back({worker_id, ack});
  }

  // Hands every MA to send(worker_id, ack), in the order the first result of
  // each arrived, and empties the batch.
  template <class Send>
  void Flush(Send&& send) {
    std::vector<Entry> entries;
    entries.swap(entries_);
    open_.clear();
    for (auto& e : entries) send(e.worker_id, std::move(e.ack));
  }

  void Clear() {
    entries_.clear();
    open_.clear();
  }

 private:
  struct Entry {
    std::string worker_id;
    protocol::MetricAck ack;
  };
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> open_;  // a worker's last entry, for spans
};

}  // namespace tunehost::host
