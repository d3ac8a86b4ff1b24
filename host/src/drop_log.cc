#include "tunehost/host/drop_log.h"

#include <utility>

#include <spdlog/spdlog.h>

namespace tunehost::host {

namespace {

constexpr const char* kOtherPeers = "other peers";

std::string_view PeerName(std::string_view peer) { return peer.empty() ? "an unknown peer" : peer; }

}  // namespace

DropLog::DropLog(std::string what, std::chrono::milliseconds window)
    : what_(std::move(what)), window_(window) {}

void DropLog::Drop(std::string_view peer, std::string_view reason, Clock::time_point now) {
  Flush(now);
  ++total_;
  if (!window_open_) {
    // The first drop of a quiet period is shown as it happens.
    window_open_ = true;
    window_start_ = now;
    spdlog::warn("{}: dropped a message from {}: {}", what_, PeerName(peer), reason);
    return;
  }
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    it = peers_.size() < kMaxPeers ? peers_.emplace(std::string(peer), PeerDrops{}).first
                                   : peers_.try_emplace(kOtherPeers).first;
  }
  ++it->second.count;
  it->second.last_reason.assign(reason.substr(0, 200));
}

void DropLog::Flush(Clock::time_point now) {
  if (!window_open_ || now - window_start_ < window_) return;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(window_).count();
  for (const auto& [peer, drops] : peers_) {
    spdlog::warn("{}: dropped {} more message(s) from {} in the last {} s (last: {})", what_,
                 drops.count, PeerName(peer), seconds, drops.last_reason);
  }
  // A window with only its first drop closes quietly; the next drop opens a
  // new one and is shown at once again.
  window_open_ = !peers_.empty();
  window_start_ = now;
  peers_.clear();
}

}  // namespace tunehost::host
