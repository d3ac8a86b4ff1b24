// Control requests waiting for a plugin call (IN, SS, GE, FD). Every request
// gets exactly one reply (wire-format.md §4): from its call's completion, or
// from the watchdog when the plugin never returns (§4.3), whichever comes
// first; the other finds its token taken. Bounded: a client cannot queue
// calls without end behind a slow plugin. Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace tunehost::host {

template <class Peer>
class PendingReplies {
 public:
  explicit PendingReplies(size_t limit) : limit_(limit) {}

  bool full() const { return waiting_.size() >= limit_; }
  size_t size() const { return waiting_.size(); }
  size_t limit() const { return limit_; }

  // A token for the call's completion to take the peer back with.
  uint64_t Add(Peer peer) {
    const uint64_t token = ++next_;
    waiting_.emplace(token, std::move(peer));
    return token;
  }
  // The peer to answer, once; nullopt when it has been answered already.
  std::optional<Peer> Take(uint64_t token) {
    auto it = waiting_.find(token);
    if (it == waiting_.end()) return std::nullopt;
    Peer peer = std::move(it->second);
    waiting_.erase(it);
    return peer;
  }
  // Every peer still waiting (in the order they asked), each taken.
  std::vector<Peer> TakeAll() {
    std::vector<Peer> out;
    for (auto& [token, peer] : waiting_) out.push_back(std::move(peer));
    waiting_.clear();
    return out;
  }

 private:
  size_t limit_;
  uint64_t next_ = 0;
  std::map<uint64_t, Peer> waiting_;
};

}  // namespace tunehost::host
