// Rate-limited warnings for input the host drops (bad frames, messages for
// unknown trials, refused peers). A flood of garbage must not become a flood
// of log lines: the first drop of a window is logged at once with its
// reason, the rest are counted per peer and summarized when the window ends:
//   results socket: dropped 12345 messages from tcp://10.0.0.7 in the last
//   10 s (last: bad_frame: not a MessagePack message)
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace tunehost::host {

class DropLog {
 public:
  using Clock = std::chrono::steady_clock;
  // Peers tracked separately per window; drops from more peers are summed
  // under "other peers", so a peer flood cannot grow this map.
  static constexpr size_t kMaxPeers = 32;

  explicit DropLog(std::string what, std::chrono::milliseconds window = std::chrono::seconds(10));

  // One dropped message from `peer` (an address, or "" when unknown).
  void Drop(std::string_view peer, std::string_view reason, Clock::time_point now);
  // Writes the summary of a window that has ended. Call now and then (every
  // loop turn is fine: it is cheap when nothing is due).
  void Flush(Clock::time_point now);

  uint64_t total() const { return total_; }

 private:
  struct PeerDrops {
    uint64_t count = 0;
    std::string last_reason;
  };

  std::string what_;
  std::chrono::milliseconds window_;
  Clock::time_point window_start_{};
  bool window_open_ = false;
  std::map<std::string, PeerDrops, std::less<>> peers_;
  uint64_t total_ = 0;
};

}  // namespace tunehost::host
