#include "tunehost/host/strand.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <utility>

#include <spdlog/spdlog.h>

namespace tunehost::host {

// Shared by the strand and its thread, so a thread left behind by Stop never
// touches a destroyed strand.
struct Strand::State {
  std::string name;
  std::mutex mu;
  std::condition_variable cv;       // tasks queued, or stopping
  std::condition_variable drained;  // the thread finished
  std::deque<std::pair<std::function<void()>, std::string>> tasks;
  bool stopping = false;
  bool finished = false;
  bool warned = false;
  // A large fleet ending trials together crosses the warning length in
  // bursts: one line per kWarnInterval at most, with how often it happened.
  std::chrono::steady_clock::time_point warned_at{};
  uint64_t crossings = 0;
  std::optional<Busy> busy;
  uint64_t next_task = 0;
};

Strand::Strand(std::string name) : name_(name), state_(std::make_shared<State>()) {
  state_->name = std::move(name);
  thread_ = std::thread([state = state_] { Loop(state); });
}

Strand::~Strand() { Stop(); }

void Strand::Post(std::function<void()> task, std::string call) {
  size_t length;
  uint64_t crossings = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->stopping) return;
    state_->tasks.emplace_back(std::move(task), std::move(call));
    length = state_->tasks.size();
    if (length < kQueueWarnLength) {
      state_->warned = false;
      length = 0;
    } else if (state_->warned) {
      length = 0;
    } else {
      state_->warned = true;
      ++state_->crossings;
      const auto now = std::chrono::steady_clock::now();
      if (state_->warned_at != std::chrono::steady_clock::time_point{} &&
          now - state_->warned_at < kWarnInterval) {
        length = 0;
      } else {
        state_->warned_at = now;
        crossings = std::exchange(state_->crossings, 0);
      }
    }
  }
  state_->cv.notify_one();
  if (length > 0) {
    spdlog::warn("{} strand queue length {}: the plugin is slower than events arrive ({} time(s) "
                 "in the last {} s)",
                 name_, length, crossings,
                 std::chrono::duration_cast<std::chrono::seconds>(kWarnInterval).count());
  }
}

bool Strand::Stop(std::chrono::milliseconds grace) {
  if (!thread_.joinable()) return true;
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->stopping = true;
  state_->cv.notify_one();
  const auto done = [this] { return state_->finished; };
  if (grace == std::chrono::milliseconds::max()) {
    state_->drained.wait(lock, done);
  } else if (!state_->drained.wait_for(lock, grace, done)) {
    const std::string call = state_->busy ? state_->busy->call : "";
    // What waits behind the stuck task never runs: it would use what the
    // owner is about to give up.
    state_->tasks.clear();
    lock.unlock();
    spdlog::error("{} strand: {} did not return within {} ms of the stop; leaving it behind",
                  name_, call.empty() ? std::string("a call") : call, grace.count());
    thread_.detach();
    return false;
  }
  lock.unlock();
  thread_.join();
  return true;
}

size_t Strand::queued() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->tasks.size();
}

std::optional<Strand::Busy> Strand::busy() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->busy;
}

void Strand::Loop(const std::shared_ptr<State>& state) {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(state->mu);
      state->busy.reset();
      state->cv.wait(lock, [&] { return state->stopping || !state->tasks.empty(); });
      if (state->tasks.empty()) {  // stopping and drained
        state->finished = true;
        state->drained.notify_all();
        return;
      }
      task = std::move(state->tasks.front().first);
      state->busy = Busy{std::move(state->tasks.front().second), Clock::now(), state->next_task++};
      state->tasks.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("{} strand: task failed: {}", state->name, e.what());
    } catch (...) {
      spdlog::error("{} strand: task failed with an unknown exception", state->name);
    }
  }
}

}  // namespace tunehost::host
