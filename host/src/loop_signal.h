// Hands work to the server's loop thread from any thread (DESIGN.md: plugin
// calls run off the poll loop and their answers come back to it): a queue of
// completions and a pipe the poll loop watches. Private to the host library.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <mutex>

namespace tunehost::host {

class LoopSignal {
 public:
  LoopSignal();  // throws std::runtime_error when the pipe cannot be made
  ~LoopSignal();
  LoopSignal(const LoopSignal&) = delete;
  LoopSignal& operator=(const LoopSignal&) = delete;

  // The descriptor the loop polls for reading.
  int fd() const { return pipe_[0]; }
  // Any thread: runs `fn` on the loop thread at its next RunAll.
  void Post(std::function<void()> fn);
  // Any thread: makes the loop's poll return.
  void Wake();
  // Loop thread: after fd() polled readable.
  void Drain();
  // Loop thread: runs what was posted so far, in order.
  void RunAll();

 private:
  int pipe_[2] = {-1, -1};
  std::atomic<bool> pending_{false};
  std::mutex mu_;
  std::deque<std::function<void()>> posted_;
};

}  // namespace tunehost::host
