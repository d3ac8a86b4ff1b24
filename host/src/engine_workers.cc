// The engine's worker side: the worker table, hellos and heartbeats, trial
// starts and rejects, lost workers, and where each offer goes (the jobs
// socket, or addressed to a free worker: wire-format.md §5.2, §5.3).
#include "tunehost/host/engine.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>

#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

Engine::FreeSlots Engine::CountFreeSlots() const {
  FreeSlots free;
  for (const auto& [id, w] : workers_) {
    if (w.blocked || w.slots <= w.running.size()) continue;
    free.all += w.slots - w.running.size();
    if (!w.addressed) free.push += w.slots - w.running.size();
  }
  return free;
}

bool Engine::Addressable(const Worker& w) const {
  return w.addressed && !w.blocked && w.slots > w.running.size() + w.offered &&
         subscribed_.count(w.id) != 0;
}

void Engine::MaybeReady(Worker& w) {
  if (w.in_ready || !Addressable(w)) return;
  w.in_ready = true;
  ready_.push_back(w.id);
}

Engine::Worker* Engine::NextAddressable() {
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

void Engine::CloseOffer(Trial& t) {
  offered_.erase(t.id);
  if (t.offered_to.empty()) return;
  --addressed_out_;
  if (auto w = workers_.find(t.offered_to); w != workers_.end()) {
    if (w->second.offered > 0) --w->second.offered;
    MaybeReady(w->second);
  }
  t.offered_to.clear();
}

void Engine::OnSubscription(const std::string& worker_id, bool subscribed,
                            Clock::time_point now) {
  if (!subscribed) {
    subscribed_.erase(worker_id);
    return;
  }
  if (!subscribed_.insert(worker_id).second) return;
  if (auto w = workers_.find(worker_id); w != workers_.end()) {
    MaybeReady(w->second);
    Pump(now);
  }
}

void Engine::ClearSubscriptions() { subscribed_.clear(); }

Engine::Worker* Engine::Seen(const std::string& worker_id, Clock::time_point now) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return nullptr;
  it->second.last_seen = now;
  MaybeReady(it->second);
  return &it->second;
}

Status Engine::OnHello(const p::WorkerHello& m, Clock::time_point now) {
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
  ReconcileRunning(w, m.running, /*from_hello=*/true, now);
  Pump(now);
  return Status::Ok();
}

void Engine::OnHeartbeat(const p::Heartbeat& m, Clock::time_point now) {
  Worker* w = Seen(m.worker_id, now);
  if (w == nullptr) {
    sink_->SendToWorker(m.worker_id, p::HelloRequest{});
    return;
  }
  w->blocked = false;
  MaybeReady(*w);
  ReconcileRunning(*w, m.running, /*from_hello=*/false, now);
  Pump(now);
}

void Engine::StopAwaitingReattach(Trial& t) {
  if (!t.awaiting_reattach) return;
  t.awaiting_reattach = false;
  auto it = restored_waits_.find(t.reattach_worker);
  if (it != restored_waits_.end() && --it->second == 0) restored_waits_.erase(it);
}

bool Engine::MayReattach(const Trial& t, const std::string& worker_id) {
  return t.state == TrialState::kOffered && t.awaiting_reattach && !worker_id.empty() &&
         t.reattach_worker == worker_id;
}

void Engine::ReconcileRunning(Worker& w, const std::vector<p::RunningTrial>& running,
                              bool from_hello, Clock::time_point now) {
  std::unordered_set<std::string> listed;
  for (const p::RunningTrial& r : running) {
    listed.insert(r.trial_id);
    auto it = trials_.find(r.trial_id);
    if (it == trials_.end()) {
      sink_->SendToWorker(w.id, p::KillTrialJob{r.trial_id, r.attempt, "unknown trial"});
      continue;
    }
    Trial& t = it->second;
    bool current = r.attempt == t.attempt && t.state != TrialState::kEnded;
    if (current && t.state == TrialState::kRunning && t.worker_id == w.id) continue;
    if (current && from_hello && MayReattach(t, w.id)) {
      // The worker that ran it before the host restarted re-announces it:
      // take it back instead of running it again.
      CloseOffer(t);
      StopAwaitingReattach(t);
      t.state = TrialState::kRunning;
      t.worker_id = w.id;
      t.started_at = now;
      w.running.insert(t.id);
      ++running_;
      sink_->TrialChanged(t, "reattached", "");
      spdlog::info("trial {} attempt {} re-attached to worker {}", t.id, t.attempt, w.id);
      continue;
    }
    sink_->SendToWorker(w.id, p::KillTrialJob{r.trial_id, r.attempt, "superseded"});
  }
  // Trials the host believes run here but the worker no longer lists.
  std::vector<std::string> lost;
  for (const std::string& id : w.running) {
    Trial& t = trials_.at(id);
    if (listed.count(id) != 0) {
      t.missed_heartbeats = 0;
    } else if (++t.missed_heartbeats >= 2 || from_hello) {
      lost.push_back(id);
    }
  }
  for (const std::string& id : lost) {
    Trial& t = trials_.at(id);
    spdlog::warn("worker {} no longer runs trial {} attempt {}", w.id, t.id, t.attempt);
    if (!t.final_metric) Kill(t, "superseded");
    WorkerLost(t, "lost by its worker", now);
  }
}

Status Engine::OnStarted(const p::TrialStarted& m, Clock::time_point now) {
  Worker* w = Seen(m.worker_id, now);
  auto it = trials_.find(m.trial_id);
  if (it == trials_.end()) {
    sink_->SendToWorker(m.worker_id, p::KillTrialJob{m.trial_id, m.attempt, "unknown trial"});
    return Status::NotFound("start of unknown trial " + m.trial_id);
  }
  Trial& t = it->second;
  if (t.state == TrialState::kRunning && t.attempt == m.attempt && t.worker_id == m.worker_id) {
    return Status::Ok();  // duplicate
  }
  if (t.state != TrialState::kOffered || t.attempt != m.attempt) {
    spdlog::debug("trial {} attempt {} started on {} but is superseded: killing it", t.id,
                  m.attempt, m.worker_id);
    sink_->SendToWorker(m.worker_id, p::KillTrialJob{m.trial_id, m.attempt, "superseded"});
    return Status::Ok();
  }
  // Offers are unaddressed; only the worker an offer reached learns its
  // lease, so no other may take the attempt (§5.3). A restored trial is
  // no offer: only its own worker takes it back, by WH.
  // An addressed offer (§5.2) is taken only by its addressee: its lease
  // travelled on a topic other subscribers may read.
  const bool lease_ok = m.lease ? *m.lease == t.lease : !options_.require_lease;
  const bool addressee_ok = t.offered_to.empty() || t.offered_to == m.worker_id;
  if (t.awaiting_reattach || !lease_ok || !addressee_ok) {
    sink_->SendToWorker(m.worker_id, p::KillTrialJob{m.trial_id, m.attempt, "superseded"});
    return Status::BadState(
        "trial start of " + t.id + " from worker " + m.worker_id + " refused: " +
        (t.awaiting_reattach ? "it waits for the worker that ran it"
         : !addressee_ok     ? "its offer was addressed to worker " + t.offered_to
         : m.lease           ? "not the lease of its offer"
                             : "no lease (this worker does not echo the offer's lease, which a "
                               "host with keys needs: wire-format.md §5.3 item 3)"));
  }
  if (w == nullptr) {
    if (workers_.size() >= p::kMaxWorkers) {
      return Status::BadState("trial start from worker " + m.worker_id + " refused: " +
                              std::to_string(p::kMaxWorkers) + " workers is the limit");
    }
    // Started before its hello reached us (or after we dropped it): accept the
    // trial, ask who it is.
    Worker& nw = workers_[m.worker_id];
    nw.id = m.worker_id;
    nw.slots = 1;
    nw.last_seen = now;
    w = &nw;
    sink_->SendToWorker(m.worker_id, p::HelloRequest{});
  }
  CloseOffer(t);
  t.state = TrialState::kRunning;
  t.worker_id = m.worker_id;
  t.started_at = now;
  t.missed_heartbeats = 0;
  w->running.insert(t.id);
  ++running_;
  sink_->TrialChanged(t, "started", "");
  spdlog::debug("trial {} attempt {} running on {}", t.id, t.attempt, m.worker_id);
  Pump(now);
  return Status::Ok();
}

void Engine::OnRejected(const p::TrialRejected& m, Clock::time_point now) {
  if (Worker* w = Seen(m.worker_id, now)) w->blocked = true;
  ++stats_.rejects;
  auto it = trials_.find(m.trial_id);
  if (it == trials_.end()) return;
  Trial& t = it->second;
  if (t.state != TrialState::kOffered || t.attempt != m.attempt) return;  // stale
  // Only the worker the offer reached may hand it back (§5.3), and a
  // restored trial is no offer (its worker may still run it).
  const bool lease_ok = m.lease ? *m.lease == t.lease : !options_.require_lease;
  const bool addressee_ok = t.offered_to.empty() || t.offered_to == m.worker_id;
  if (t.awaiting_reattach || !lease_ok || !addressee_ok) return;
  Requeue(t, /*new_attempt=*/false, "rejected");
  Pump(now);
}

void Engine::OnBye(const p::WorkerBye& m, Clock::time_point now) {
  DropWorker(m.worker_id, "said goodbye", now);
  Pump(now);
}

void Engine::DropWorker(const std::string& worker_id, std::string_view why,
                        Clock::time_point now) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  std::vector<std::string> running(it->second.running.begin(), it->second.running.end());
  std::sort(running.begin(), running.end());
  spdlog::warn("worker {} {}: {} running trial(s) lost", worker_id, why, running.size());
  for (const std::string& id : running) WorkerLost(trials_.at(id), why, now);
  workers_.erase(worker_id);
}

void Engine::WorkerLost(Trial& t, std::string_view why, Clock::time_point now) {
  if (t.final_metric) {
    // Its FINAL is stored and acknowledged: the trial finished, only its EN
    // is missing. A trial whose FINAL is stored never runs again
    // (wire-format.md §5.3).
    spdlog::info("trial {} attempt {} lost its worker ({}) after reporting its final result: "
                 "SUCCEEDED",
                 t.id, t.attempt, why);
    EndTrial(t, p::TrialStatus::kSucceeded, "", now);
    return;
  }
  Requeue(t, /*new_attempt=*/true, why);
}

}  // namespace tunehost::host
