#include "loop_signal.h"

#include <fcntl.h>
#include <unistd.h>

#include <stdexcept>
#include <utility>

namespace tunehost::host {

LoopSignal::LoopSignal() {
  if (pipe2(pipe_, O_NONBLOCK | O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
}

LoopSignal::~LoopSignal() {
  close(pipe_[0]);
  close(pipe_[1]);
}

void LoopSignal::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted_.push_back(std::move(fn));
  }
  Wake();
}

void LoopSignal::Wake() {
  if (!pending_.exchange(true)) {
    char c = 1;
    ssize_t n = write(pipe_[1], &c, 1);
    (void)n;  // EAGAIN means a wake-up is already pending
  }
}

void LoopSignal::Drain() {
  char buf[64];
  while (read(pipe_[0], buf, sizeof buf) > 0) {
  }
  pending_.store(false);
}

void LoopSignal::RunAll() {
  std::deque<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) fn();
}

}  // namespace tunehost::host
