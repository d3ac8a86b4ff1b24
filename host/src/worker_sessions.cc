// Worker sessions: hellos and heartbeats, trial starts and rejects, lost
// workers and offers nobody answered (wire-format.md §5.2, §5.3).
#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine_parts.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

Status WorkerSessions::OnHello(const p::WorkerHello& m, Clock::time_point now) {
  WorkerInfo* w = nullptr;
  Status st = workers_.Announce(m, now, &w);
  if (!st.ok()) return st;
  ReconcileRunning(*w, m.running, /*from_hello=*/true, now);
  scheduler_.Pump(now);
  return Status::Ok();
}

void WorkerSessions::OnHeartbeat(const p::Heartbeat& m, Clock::time_point now) {
  WorkerInfo* w = workers_.Seen(m.worker_id, now);
  if (w == nullptr) {
    sink_->SendToWorker(m.worker_id, p::HelloRequest{});
    return;
  }
  w->blocked = false;
  workers_.MaybeReady(*w);
  ReconcileRunning(*w, m.running, /*from_hello=*/false, now);
  scheduler_.Pump(now);
}

void WorkerSessions::ReconcileRunning(WorkerInfo& w, const std::vector<p::RunningTrial>& running,
                                      bool from_hello, Clock::time_point now) {
  std::unordered_set<std::string> listed;
  for (const p::RunningTrial& r : running) {
    listed.insert(r.trial_id);
    Trial* found = table_.Find(r.trial_id);
    if (found == nullptr) {
      sink_->SendToWorker(w.id, p::KillTrialJob{r.trial_id, r.attempt, "unknown trial"});
      continue;
    }
    Trial& t = *found;
    bool current = r.attempt == t.attempt && t.state != TrialState::kEnded;
    if (current && t.state == TrialState::kRunning && t.worker_id == w.id) continue;
    if (current && from_hello && MayReattach(t, w.id)) {
      // The worker that ran it before the host restarted re-announces it:
      // take it back instead of running it again.
      lifecycle_.Attach(t, w.id, &w);
      t.started_at = now;
      sink_->TrialChanged(t, "reattached", "");
      spdlog::info("trial {} attempt {} re-attached to worker {}", t.id, t.attempt, w.id);
      continue;
    }
    sink_->SendToWorker(w.id, p::KillTrialJob{r.trial_id, r.attempt, "superseded"});
  }
  // Trials the host believes run here but the worker no longer lists.
  std::vector<std::string> lost;
  for (const std::string& id : w.running) {
    Trial& t = table_.at(id);
    if (listed.count(id) != 0) {
      t.missed_heartbeats = 0;
    } else if (++t.missed_heartbeats >= 2 || from_hello) {
      lost.push_back(id);
    }
  }
  for (const std::string& id : lost) {
    Trial& t = table_.at(id);
    spdlog::warn("worker {} no longer runs trial {} attempt {}", w.id, t.id, t.attempt);
    if (!t.final_metric) lifecycle_.Kill(t, "superseded");
    WorkerLost(t, "lost by its worker", now);
  }
}

Status WorkerSessions::OnStarted(const p::TrialStarted& m, Clock::time_point now) {
  WorkerInfo* w = workers_.Seen(m.worker_id, now);
  Trial* found = table_.Find(m.trial_id);
  if (found == nullptr) {
    sink_->SendToWorker(m.worker_id, p::KillTrialJob{m.trial_id, m.attempt, "unknown trial"});
    return Status::NotFound("start of unknown trial " + m.trial_id);
  }
  Trial& t = *found;
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
    w = &workers_.AddUnannounced(m.worker_id, now);
    sink_->SendToWorker(m.worker_id, p::HelloRequest{});
  }
  t.started_at = now;
  t.missed_heartbeats = 0;
  lifecycle_.Attach(t, m.worker_id, w);
  sink_->TrialChanged(t, "started", "");
  spdlog::debug("trial {} attempt {} running on {}", t.id, t.attempt, m.worker_id);
  scheduler_.Pump(now);
  return Status::Ok();
}

void WorkerSessions::OnRejected(const p::TrialRejected& m, Clock::time_point now) {
  if (WorkerInfo* w = workers_.Seen(m.worker_id, now)) w->blocked = true;
  ++stats_.rejects;
  Trial* found = table_.Find(m.trial_id);
  if (found == nullptr) return;
  Trial& t = *found;
  if (t.state != TrialState::kOffered || t.attempt != m.attempt) return;  // stale
  // Only the worker the offer reached may hand it back (§5.3), and a
  // restored trial is no offer (its worker may still run it).
  const bool lease_ok = m.lease ? *m.lease == t.lease : !options_.require_lease;
  const bool addressee_ok = t.offered_to.empty() || t.offered_to == m.worker_id;
  if (t.awaiting_reattach || !lease_ok || !addressee_ok) return;
  lifecycle_.Requeue(t, /*new_attempt=*/false, "rejected");
  scheduler_.Pump(now);
}

void WorkerSessions::OnBye(const p::WorkerBye& m, Clock::time_point now) {
  DropWorker(m.worker_id, "said goodbye", now);
  scheduler_.Pump(now);
}

void WorkerSessions::Tick(Clock::time_point now) {
  // Offers nobody answered.
  for (const std::string& id : book_.Expired(now)) {
    // A restored trial whose worker did not come back, or an offer nobody
    // answered; one that already reported its FINAL (its worker ran it and
    // the EN died with the old host, or its TS was lost) finished.
    Trial& t = table_.at(id);
    WorkerLost(t, t.awaiting_reattach ? "its worker did not re-attach"
                                      : "offer not answered in time",
               now);
  }
  // Workers gone silent (Paranoid Pirate liveness).
  auto deadline = options_.heartbeat_interval * options_.liveness;
  for (const std::string& id : workers_.Silent(now, deadline)) {
    DropWorker(id, "missed heartbeats", now);
  }
  scheduler_.Pump(now);
}

void WorkerSessions::DropWorker(const std::string& worker_id, std::string_view why,
                                Clock::time_point now) {
  WorkerInfo* w = workers_.Find(worker_id);
  if (w == nullptr) return;
  std::vector<std::string> running(w->running.begin(), w->running.end());
  std::sort(running.begin(), running.end());
  spdlog::warn("worker {} {}: {} running trial(s) lost", worker_id, why, running.size());
  for (const std::string& id : running) WorkerLost(table_.at(id), why, now);
  workers_.Erase(worker_id);
}

void WorkerSessions::WorkerLost(Trial& t, std::string_view why, Clock::time_point now) {
  if (t.final_metric) {
    // Its FINAL is stored and acknowledged: the trial finished, only its EN
    // is missing. A trial whose FINAL is stored never runs again
    // (wire-format.md §5.3).
    spdlog::info("trial {} attempt {} lost its worker ({}) after reporting its final result: "
                 "SUCCEEDED",
                 t.id, t.attempt, why);
    lifecycle_.End(t, p::TrialStatus::kSucceeded, "", now);
    return;
  }
  lifecycle_.Requeue(t, /*new_attempt=*/true, why);
}

}  // namespace tunehost::host
