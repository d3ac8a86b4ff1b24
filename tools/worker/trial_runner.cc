#include "trial_runner.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <cstddef>
#include <utility>

namespace tunehost::worker {
namespace {

using protocol::TrialStatus;

// How long a trial killed by a stop signal from outside waits for its
// worker's own stop signal before it is reported.
constexpr auto kOutsideKillGrace = std::chrono::milliseconds(1000);
// At a forced exit, how long to wait for SIGKILLed children to be reaped.
constexpr std::chrono::milliseconds kForcedReapWait{1000};

std::string TrialName(const protocol::NewTrialJob& job) {
  return job.trial_id + "#" + std::to_string(job.attempt);
}

bool KilledByStopSignal(int wait_status) {
  if (!WIFSIGNALED(wait_status)) return false;
  const int sig = WTERMSIG(wait_status);
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGKILL;
}

}  // namespace

TrialRunner::TrialRunner(const WorkerOptions& options, Transport* transport,
                         ResultOutbox* outbox)
    : options_(options), transport_(transport), outbox_(outbox) {}

void TrialRunner::Reject(const protocol::NewTrialJob& job, const std::string& reason) {
  spdlog::info("trial {}: rejected ({})", TrialName(job), reason);
  transport_->Send(
      protocol::TrialRejected{options_.id, job.trial_id, job.attempt, reason, job.lease});
}

void TrialRunner::Offer(const protocol::NewTrialJob& job) {
  if (Find(job.trial_id, job.attempt) != nullptr) {
    // A repeated offer of what already runs here: confirm it, start nothing.
    transport_->Send(protocol::TrialStarted{options_.id, job.trial_id, job.attempt, job.lease});
    return;
  }
  if (trials_.size() >= options_.slots) return Reject(job, "no free slot");
  std::vector<int> gpus;
  if (!options_.gpu_indices.empty()) {
    gpus = FreeGpus();
    if (gpus.size() < options_.gpus_per_trial) return Reject(job, "no free GPU");
    gpus.resize(options_.gpus_per_trial);
  }

  auto trial = std::make_unique<Trial>();
  trial->job = job;
  trial->gpus = gpus;
  LaunchOptions launch{options_.command, options_.cwd, options_.workdir, std::nullopt,
                       options_.python_path};
  if (!options_.gpu_indices.empty()) {
    std::string devices;
    for (int g : gpus) devices += (devices.empty() ? "" : ",") + std::to_string(g);
    launch.cuda_visible_devices = devices;
  }
  const Status s = TrialProcess::Start(job, launch, &trial->process);
  // Answered TS even when the start failed: the trial then ends FAILED with
  // the reason, instead of bouncing between workers that cannot run it.
  transport_->Send(protocol::TrialStarted{options_.id, job.trial_id, job.attempt, job.lease});
  if (!s.ok()) {
    spdlog::error("trial {}: cannot start: {}", TrialName(job), s.ToString());
    transport_->Send(protocol::TrialEnd{job.trial_id, job.attempt, TrialStatus::kFailed,
                                        "cannot start trial: " + s.message(), options_.id});
    return;
  }
  spdlog::info("trial {}: started pid {} in {}", TrialName(job), trial->process->pid(),
               trial->process->dir());
  outbox_->Open(job);
  trials_.push_back(std::move(trial));
}

void TrialRunner::Kill(const protocol::KillTrialJob& kill) {
  Trial* trial = Find(kill.trial_id, kill.attempt);
  if (trial == nullptr) {
    spdlog::debug("KI for {}#{} ignored: not running here", kill.trial_id, kill.attempt);
    return;
  }
  if (trial->process->exited()) {
    // Its end waits for acknowledgements the host, which no longer wants
    // this attempt, may never send: drop them and end it now.
    if (const size_t dropped = outbox_->Drop(kill.trial_id, kill.attempt); dropped > 0) {
      spdlog::info("KI for {}#{}: already exited, dropping {} unacknowledged result(s)",
                   kill.trial_id, kill.attempt, dropped);
    } else {
      spdlog::info("KI for {}#{} ignored: already exited", kill.trial_id, kill.attempt);
    }
    return;
  }
  trial->left_behind = false;  // the host asked: it gets the trial's EN
  const TrialStatus status =
      kill.reason == "assessor" ? TrialStatus::kEarlyStopped : TrialStatus::kUserCanceled;
  if (trial->kill_requested) trial->kill_status = status;
  RequestKill(trial, status, kill.reason);
}

void TrialRunner::RequestKill(Trial* trial, TrialStatus status, const std::string& reason) {
  if (trial->kill_requested) return;
  spdlog::info("trial {}: stopping ({}), SIGTERM to its process group", TrialName(trial->job),
               reason);
  trial->kill_requested = true;
  trial->kill_status = status;
  trial->kill_deadline = Clock::now() + options_.kill_grace;
  trial->process->SignalGroup(SIGTERM);
}

void TrialRunner::LeaveAll() {
  for (auto& t : trials_) {
    if (t->kill_requested) continue;
    if (t->process->exited()) {
      // Killed by the same stop (scancel signals every process of the job):
      // it did not end on its own either.
      if (KilledByStopSignal(t->process->wait_status())) t->left_behind = true;
      continue;
    }
    // The trial did not end: this worker leaves it, and the host gives it
    // to another worker (§5.3 item 8).
    t->left_behind = true;
    RequestKill(t.get(), TrialStatus::kUserCanceled, "worker exiting");
  }
}

std::vector<std::pair<int, TrialRunner::Trial*>> TrialRunner::MetricPipes() const {
  std::vector<std::pair<int, Trial*>> pipes;
  for (const auto& t : trials_) {
    if (t->process->metric_fd() >= 0) pipes.emplace_back(t->process->metric_fd(), t.get());
  }
  return pipes;
}

void TrialRunner::ReadMetrics(Trial* trial) {
  std::vector<std::string> lines;
  size_t overlong = 0;
  trial->process->ReadMetrics(&lines, &overlong);
  outbox_->OnMetricLines(trial->job.trial_id, trial->job.attempt, lines, overlong);
}

void TrialRunner::KillOverdue(Clock::time_point now) {
  for (auto& t : trials_) {
    if (t->kill_requested && !t->sigkill_sent && !t->process->exited() && now >= t->kill_deadline) {
      spdlog::warn("trial {}: still running after the kill grace, SIGKILL", TrialName(t->job));
      t->process->SignalGroup(SIGKILL);
      t->sigkill_sent = true;
    }
  }
}

TrialRunner::Reaped TrialRunner::Reap(bool force, bool shutting_down) {
  Reaped reaped;
  if (force) {
    for (auto& t : trials_) t->process->SignalGroup(SIGKILL);
  }
  const auto reap_deadline = Clock::now() + kForcedReapWait;
  for (size_t i = 0; i < trials_.size();) {
    Trial* t = trials_[i].get();
    const std::string& id = t->job.trial_id;
    const uint32_t attempt = t->job.attempt;
    std::vector<std::string> lines;
    size_t overlong = 0;
    bool exited = t->process->Reap(&lines, &overlong);
    while (force && !exited && Clock::now() < reap_deadline) {
      const timespec pause{0, 10 * 1000 * 1000};
      ::nanosleep(&pause, nullptr);
      exited = t->process->Reap(&lines, &overlong);
    }
    if (!lines.empty() || overlong > 0) outbox_->OnMetricLines(id, attempt, lines, overlong);
    if (exited && !t->exited_at) t->exited_at = Clock::now();
    // A trial killed by a stop signal nobody here sent was most likely
    // stopped with this worker (scancel and pre-emption signal every
    // process of the job at once): wait a moment for the worker's own
    // signal, so the trial is left to the host instead of ending FAILED.
    const bool outside_kill = exited && !t->kill_requested && !shutting_down && !force &&
                              KilledByStopSignal(t->process->wait_status()) &&
                              Clock::now() < *t->exited_at + kOutsideKillGrace;
    // wire-format.md §5.3 item 5: EN only after every result (FINAL
    // included) is acknowledged, unless the worker is out of time.
    if (exited && !outside_kill && (outbox_->Unacknowledged(id, attempt) == 0 || force)) {
      if (t->left_behind) {
        spdlog::info("trial {}: left to the host to offer again", TrialName(t->job));
      } else {
        SendEnd(*t);
        ++reaped.ended;
      }
      outbox_->Close(id, attempt);
      trials_.erase(trials_.begin() + static_cast<std::ptrdiff_t>(i));
      ++reaped.removed;
    } else {
      ++i;
    }
  }
  return reaped;
}

void TrialRunner::SendEnd(const Trial& trial) {
  const TrialProcess& p = *trial.process;
  const int ws = p.wait_status();
  TrialStatus status = TrialStatus::kFailed;
  if (trial.kill_requested) {
    status = trial.kill_status;
  } else if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) {
    status = TrialStatus::kSucceeded;
  }
  std::string error;
  if (status != TrialStatus::kSucceeded) {
    error = p.ExitDescription();
    if (!p.stderr_tail().empty()) error += "\nstderr (last 4 KiB):\n" + p.stderr_tail();
  }
  spdlog::info("trial {}: ended {} ({})", TrialName(trial.job), protocol::ToString(status),
               p.ExitDescription());
  transport_->Send(protocol::TrialEnd{trial.job.trial_id, trial.job.attempt, status,
                                      std::move(error), options_.id});
}

TrialRunner::Clock::time_point TrialRunner::NextDeadline(Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto& t : trials_) {
    if (t->kill_requested && !t->sigkill_sent) next = std::min(next, t->kill_deadline);
    // Only while that grace runs: a trial that exited long ago and waits
    // for its results' MAs must not turn the poll into a busy loop.
    if (t->exited_at && now < *t->exited_at + kOutsideKillGrace) {
      next = std::min(next, *t->exited_at + kOutsideKillGrace);
    }
  }
  return next;
}

std::vector<protocol::RunningTrial> TrialRunner::Running() const {
  std::vector<protocol::RunningTrial> running;
  for (const auto& t : trials_) {
    running.push_back({t->job.trial_id, t->job.attempt,
                       outbox_->LastPeriodical(t->job.trial_id, t->job.attempt)});
  }
  return running;
}

uint32_t TrialRunner::FreeSlots() const {
  uint32_t free = trials_.size() >= options_.slots
                      ? 0
                      : options_.slots - static_cast<uint32_t>(trials_.size());
  if (!options_.gpu_indices.empty()) {
    free = std::min(free, static_cast<uint32_t>(FreeGpus().size()) / options_.gpus_per_trial);
  }
  return free;
}

std::vector<int> TrialRunner::FreeGpus() const {
  std::vector<int> free;
  for (int g : options_.gpu_indices) {
    bool used = false;
    for (const auto& t : trials_) {
      used = used || std::find(t->gpus.begin(), t->gpus.end(), g) != t->gpus.end();
    }
    if (!used) free.push_back(g);
  }
  return free;
}

TrialRunner::Trial* TrialRunner::Find(const std::string& trial_id, uint32_t attempt) {
  for (auto& t : trials_) {
    if (t->job.trial_id == trial_id && t->job.attempt == attempt) return t.get();
  }
  return nullptr;
}

}  // namespace tunehost::worker
