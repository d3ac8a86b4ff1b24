#include "tunehost/host/strand.h"

#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

namespace tunehost::host {

Strand::Strand(std::string name) : name_(std::move(name)), thread_([this] { Loop(); }) {}

Strand::~Strand() { Stop(); }

void Strand::Post(std::function<void()> task) {
  size_t length;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    tasks_.push_back(std::move(task));
    length = tasks_.size();
    if (length < kQueueWarnLength) {
      warned_ = false;
      length = 0;
    } else if (warned_) {
      length = 0;
    } else {
      warned_ = true;
    }
  }
  cv_.notify_one();
  if (length > 0) {
    spdlog::warn("{} strand queue length {}: the plugin is slower than events arrive", name_,
                 length);
  }
}

void Strand::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

size_t Strand::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_.size();
}

void Strand::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("{} strand: task failed: {}", name_, e.what());
    } catch (...) {
      spdlog::error("{} strand: task failed with an unknown exception", name_);
    }
  }
}

}  // namespace tunehost::host
