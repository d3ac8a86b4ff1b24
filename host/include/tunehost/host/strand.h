// A strand: one thread running posted tasks in FIFO order, so calls into one
// plugin instance never overlap (NNI's per-queue worker thread, without its
// lost exceptions: a task cannot throw out, see Post).
//
// The strand also says what it is busy with (the plugin call and since
// when), so the host's watchdog can see a call that overruns, and it can be
// stopped within a bounded time even when a task never returns: the thread
// is then left behind (detached) and the strand takes no more tasks.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace tunehost::host {

class Strand {
 public:
  using Clock = std::chrono::steady_clock;
  // Warn when this many tasks are queued: the plugin is slower than events
  // arrive (NNI warns at 20 too).
  static constexpr size_t kQueueWarnLength = 20;
  static constexpr std::chrono::seconds kWarnInterval{10};

  // The task running now.
  struct Busy {
    std::string call;          // what Post was told ("generate", ...)
    Clock::time_point since;
    uint64_t task = 0;         // increases with every task
  };

  explicit Strand(std::string name);
  // Stop(): waits for the queue; a strand stuck in a task must be stopped
  // with a grace period first (Stop(grace) returning false).
  ~Strand();
  Strand(const Strand&) = delete;
  Strand& operator=(const Strand&) = delete;

  // Queues a task. Thread: any. `call` names it for the watchdog. A task
  // that throws is logged with the strand's name and the strand keeps
  // running. Tasks posted after Stop are dropped.
  void Post(std::function<void()> task, std::string call = "");
  // Runs what is queued now, then joins. False when that did not finish
  // within `grace`: the tasks still queued are dropped, the thread is left
  // running on its own, and the caller must not destroy what the stuck task
  // uses.
  bool Stop(std::chrono::milliseconds grace = std::chrono::milliseconds::max());
  size_t queued() const;
  std::optional<Busy> busy() const;
  const std::string& name() const { return name_; }

 private:
  struct State;
  static void Loop(const std::shared_ptr<State>& state);

  const std::string name_;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace tunehost::host
