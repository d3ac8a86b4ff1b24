#include "runner_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tunehost::host {

FrameChannel::~FrameChannel() {
  if (fd_ >= 0) close(fd_);
}

Status FrameChannel::Send(const std::string& frame) {
  if (frame.size() > kMaxFrameBytes) {
    return Status::TooLarge("frame of " + std::to_string(frame.size()) + " bytes over the limit");
  }
  const uint32_t n = static_cast<uint32_t>(frame.size());
  char header[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                    static_cast<char>(n >> 8), static_cast<char>(n)};
  std::lock_guard<std::mutex> lock(write_mu_);
  for (const auto& [data, size] : {std::pair<const char*, size_t>{header, 4},
                                   std::pair<const char*, size_t>{frame.data(), frame.size()}}) {
    size_t done = 0;
    while (done < size) {
      // MSG_NOSIGNAL: a dead peer is an error here, not a SIGPIPE.
      ssize_t w = send(fd_, data + done, size - done, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return Status::Unavailable(std::string("channel closed: ") + std::strerror(errno));
      done += static_cast<size_t>(w);
    }
  }
  return Status::Ok();
}

Status FrameChannel::ReadAll(char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t r = read(fd_, data + done, size - done);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Status::Unavailable("channel closed by the peer");
    if (r < 0) return Status::Unavailable(std::string("channel broken: ") + std::strerror(errno));
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status FrameChannel::Receive(std::string* frame) {
  unsigned char header[4];
  Status st = ReadAll(reinterpret_cast<char*>(header), 4);
  if (!st.ok()) return st;
  const uint32_t n = (uint32_t{header[0]} << 24) | (uint32_t{header[1]} << 16) |
                     (uint32_t{header[2]} << 8) | uint32_t{header[3]};
  if (n > kMaxFrameBytes) return Status::BadFrame("frame of " + std::to_string(n) + " bytes");
  frame->resize(n);
  return ReadAll(frame->data(), n);
}

void FrameChannel::Shutdown() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

bool MakeSocketPair(int fds[2]) {
  return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0;
}

}  // namespace tunehost::host
