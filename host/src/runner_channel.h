// The byte channel between the host and a plugin runner process
// (isolated_plugin.cc, plugin_runner_main.cc): one end of a Unix socketpair,
// frames of a 4-byte big-endian length followed by one MessagePack value.
// A stream socket tells the host at once (EOF) that its runner died, and has
// no size limit for a large checkpoint. Private to the host.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "tunehost/status.h"

namespace tunehost::host {

class FrameChannel {
 public:
  // Largest frame either side accepts (a checkpoint, a search space).
  static constexpr uint32_t kMaxFrameBytes = 256u << 20;

  explicit FrameChannel(int fd) : fd_(fd) {}
  ~FrameChannel();
  FrameChannel(const FrameChannel&) = delete;
  FrameChannel& operator=(const FrameChannel&) = delete;

  // Writes one frame, whole. Thread: any (writes are serialized).
  Status Send(const std::string& frame);
  // Reads one frame. Thread: one reader at a time. Unavailable on EOF or a
  // broken channel, BadFrame for a frame over the limit.
  Status Receive(std::string* frame);
  // Closes the channel for writing and reading (wakes a blocked reader).
  void Shutdown();
  int fd() const { return fd_; }

 private:
  Status ReadAll(char* data, size_t size);
  int fd_;
  std::mutex write_mu_;
};

// A socketpair of stream sockets, close-on-exec. Returns false on failure.
bool MakeSocketPair(int fds[2]);

}  // namespace tunehost::host
