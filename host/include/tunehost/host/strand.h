// A strand: one thread running posted tasks in FIFO order, so calls into one
// plugin instance never overlap (NNI's per-queue worker thread, without its
// lost exceptions: a task cannot throw out, see Post).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tunehost::host {

class Strand {
 public:
  // Warn when this many tasks are queued: the plugin is slower than events
  // arrive (NNI warns at 20 too).
  static constexpr size_t kQueueWarnLength = 20;

  explicit Strand(std::string name);
  ~Strand();  // Stop()
  Strand(const Strand&) = delete;
  Strand& operator=(const Strand&) = delete;

  // Queues a task. Thread: any. A task that throws is logged with the
  // strand's name and the strand keeps running.
  void Post(std::function<void()> task);
  // Runs what is queued now, then joins. Tasks posted later are dropped.
  void Stop();
  size_t queued() const;
  const std::string& name() const { return name_; }

 private:
  void Loop();

  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  bool warned_ = false;
  std::thread thread_;
};

}  // namespace tunehost::host
