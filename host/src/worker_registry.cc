// The worker registry: the workers the host knows, their topic
// subscriptions and the turn of those that take addressed offers
// (wire-format.md §5.2), and the workers restored trials wait for (§5.3).
#include <algorithm>

#include <spdlog/spdlog.h>

#include "engine_parts.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

WorkerInfo* WorkerRegistry::Find(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

EngineFreeSlots WorkerRegistry::CountFree() const {
  EngineFreeSlots free;
  for (const auto& [id, w] : workers_) {
    if (w.blocked || w.slots <= w.running.size()) continue;
    free.all += w.slots - w.running.size();
    if (!w.addressed) free.push += w.slots - w.running.size();
  }
  return free;
}

WorkerInfo* WorkerRegistry::Seen(const std::string& id, Clock::time_point now) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return nullptr;
  it->second.last_seen = now;
  MaybeReady(it->second);
  return &it->second;
}

Status WorkerRegistry::Announce(const p::WorkerHello& m, Clock::time_point now, Worker** out) {
  if (workers_.count(m.worker_id) == 0 && workers_.size() >= p::kMaxWorkers) {
    return Status::BadState("worker " + m.worker_id + " refused: " +
                            std::to_string(p::kMaxWorkers) + " workers is the limit");
  }
  Worker& w = workers_[m.worker_id];
  bool fresh = w.id.empty();
  w.id = m.worker_id;
  w.slots = m.slots;
  w.gpus = m.resources.gpus;
  w.language = m.language;
  w.version = m.version;
  w.extra = m.resources.extra;
  w.last_seen = now;
  w.blocked = false;
  w.addressed = m.addressed_offers();
  w.ack_spans = m.ack_spans();
  if (fresh) {
    spdlog::info("worker {} joined: {} slot(s), {} GPU(s), {} {}{}", m.worker_id, m.slots,
                 m.resources.gpus, m.language, m.version,
                 w.addressed ? ", addressed offers" : "");
  }
  MaybeReady(w);
  *out = &w;
  return Status::Ok();
}

WorkerInfo& WorkerRegistry::AddUnannounced(const std::string& id, Clock::time_point now) {
  Worker& w = workers_[id];
  w.id = id;
  w.slots = 1;
  w.last_seen = now;
  return w;
}

std::vector<std::string> WorkerRegistry::Silent(Clock::time_point now,
                                                Clock::duration deadline) const {
  std::vector<std::string> silent;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_seen > deadline) silent.push_back(id);
  }
  std::sort(silent.begin(), silent.end());
  return silent;
}

bool WorkerRegistry::Addressable(const Worker& w) const {
  return w.addressed && !w.blocked && w.slots > w.running.size() + w.offered &&
         subscribed_.count(w.id) != 0;
}

void WorkerRegistry::MaybeReady(Worker& w) {
  if (w.in_ready || !Addressable(w)) return;
  w.in_ready = true;
  ready_.push_back(w.id);
}

WorkerInfo* WorkerRegistry::NextAddressable() {
  // Entries are checked as they come out (a worker may have filled up, gone,
  // or come back under the same id since it went in): O(1) per offer,
  // whatever the number of workers.
  while (!ready_.empty()) {
    std::string id = std::move(ready_.front());
    ready_.pop_front();
    auto it = workers_.find(id);
    if (it == workers_.end()) continue;
    Worker& w = it->second;
    w.in_ready = false;
    if (!Addressable(w)) continue;
    if (w.slots > w.running.size() + w.offered + 1) {  // room after this offer too
      w.in_ready = true;
      ready_.push_back(std::move(id));
    }
    return &w;
  }
  return nullptr;
}

void WorkerRegistry::TrialLeft(const std::string& worker_id, const std::string& trial_id) {
  auto w = workers_.find(worker_id);
  if (w == workers_.end()) return;
  w->second.running.erase(trial_id);
  MaybeReady(w->second);
}

void WorkerRegistry::OfferClosed(const std::string& worker_id) {
  auto w = workers_.find(worker_id);
  if (w == workers_.end()) return;
  if (w->second.offered > 0) --w->second.offered;
  MaybeReady(w->second);
}

bool WorkerRegistry::Subscribe(const std::string& id, bool subscribed) {
  if (!subscribed) {
    subscribed_.erase(id);
    return false;
  }
  if (!subscribed_.insert(id).second) return false;
  auto w = workers_.find(id);
  if (w == workers_.end()) return false;
  MaybeReady(w->second);
  return true;
}

void WorkerRegistry::StopAwaitingReattach(Trial& t) {
  if (!t.awaiting_reattach) return;
  t.awaiting_reattach = false;
  auto it = restored_waits_.find(t.reattach_worker);
  if (it != restored_waits_.end() && --it->second == 0) restored_waits_.erase(it);
}

}  // namespace tunehost::host
