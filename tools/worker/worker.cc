#include "worker.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <msgpack.hpp>
#include <zmq.hpp>

namespace tunehost::worker {
namespace {

using std::chrono::milliseconds;

// Longest sleep of the poll loop, so timers run even if a wake-up is missed.
constexpr milliseconds kMaxPollWait{100};

// Where this worker runs, for `tunectl workers`: the host name and, when a
// cluster engine started it, its job (Slurm: JOBID or ARRAYJOB_TASK; a
// Kubernetes Indexed Job's pod and completion index).
protocol::Packed HostExtra() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  std::vector<std::pair<std::string, std::string>> fields = {{"host", name}};
  auto env = [](const char* key) -> std::string {
    const char* v = std::getenv(key);
    return v != nullptr ? std::string(v).substr(0, 128) : std::string();
  };
  const std::string array_job = env("SLURM_ARRAY_JOB_ID"), task = env("SLURM_ARRAY_TASK_ID");
  if (!array_job.empty() && !task.empty()) {
    fields.emplace_back("slurm_job", array_job + "_" + task);
  } else if (const std::string job = env("SLURM_JOB_ID"); !job.empty()) {
    fields.emplace_back("slurm_job", job);
  }
  if (const std::string index = env("JOB_COMPLETION_INDEX"); !index.empty()) {
    fields.emplace_back("k8s_pod", env("HOSTNAME"));
    fields.emplace_back("k8s_index", index);
  }
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  packer.pack_map(static_cast<uint32_t>(fields.size()));
  for (const auto& [key, value] : fields) {
    packer.pack(key);
    packer.pack(value);
  }
  return protocol::Packed(buffer.data(), buffer.size());
}

}  // namespace

Worker::Worker(WorkerOptions options, int wake_fd)
    : options_(std::move(options)),
      wake_fd_(wake_fd),
      transport_(options_),
      outbox_(options_, &transport_),
      trials_(options_, &transport_, &outbox_) {}

int Worker::Run() {
  transport_.Connect();
  spdlog::info("worker {} connected: jobs {}, results {}, events {}; {} slot(s)", options_.id,
               options_.jobs_endpoint, options_.results_endpoint, options_.events_endpoint,
               options_.slots);
  parent_ = options_.host_pid != 0 ? options_.host_pid : getppid();
  SendHello();
  const auto now = Clock::now();
  next_heartbeat_ = now + options_.heartbeat;
  last_activity_ = now;
  while (!stop_) {
    PollOnce();
    RunTimers();
  }
  Finish();
  return 0;
}

void Worker::PollOnce() {
  std::vector<zmq::pollitem_t> items = {
      transport_.JobsPollItem(),
      transport_.EventsPollItem(),
      {nullptr, wake_fd_, ZMQ_POLLIN, 0},
  };
  const auto pipes = trials_.MetricPipes();
  for (const auto& [fd, trial] : pipes) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});

  const auto now = Clock::now();
  auto next = std::min({next_heartbeat_, outbox_.NextResend(), trials_.NextDeadline(now)});
  if (shutting_down_) next = std::min(next, shutdown_deadline_);
  if (options_.max_idle.count() > 0 && trials_.empty()) {
    next = std::min(next, last_activity_ + options_.max_idle);
  }
  const auto wait = std::clamp(std::chrono::duration_cast<milliseconds>(next - now),
                               milliseconds{0}, kMaxPollWait);
  try {
    zmq::poll(items, wait);
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return;  // a signal; its byte is in the wake pipe
    throw;
  }

  if (items[2].revents != 0) DrainWakePipe();
  if (items[0].revents & ZMQ_POLLIN) {
    transport_.ReceiveJobs([this](const protocol::NewTrialJob& job) { OnOffer(job); });
  }
  if (items[1].revents & ZMQ_POLLIN) {
    transport_.ReceiveEvents([this](const protocol::Message& message) { OnEvent(message); });
  }
  for (size_t i = 0; i < pipes.size(); ++i) {
    if (items[3 + i].revents != 0) trials_.ReadMetrics(pipes[i].second);
  }
}

void Worker::DrainWakePipe() {
  char buf[64];
  ssize_t n;
  while ((n = ::read(wake_fd_, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != 'T') continue;
      if (++shutdown_signals_ == 1) {
        BeginShutdown();
      } else {
        spdlog::warn("second stop signal: killing trials now");
        shutdown_deadline_ = Clock::now();
      }
    }
  }
}

void Worker::OnOffer(const protocol::NewTrialJob& job) {
  last_activity_ = Clock::now();
  if (shutting_down_) return trials_.Reject(job, "worker shutting down");
  if (orphaned_) return trials_.Reject(job, "orphaned worker: the host that started it exited");
  trials_.Offer(job);
}

void Worker::OnEvent(const protocol::Message& message) {
  if (const auto* job = std::get_if<protocol::NewTrialJob>(&message.body)) {
    OnOffer(*job);  // an addressed offer (wire-format.md §5.2)
  } else if (const auto* kill = std::get_if<protocol::KillTrialJob>(&message.body)) {
    trials_.Kill(*kill);
  } else if (const auto* ack = std::get_if<protocol::MetricAck>(&message.body)) {
    outbox_.OnAck(*ack);
  } else if (std::holds_alternative<protocol::HelloRequest>(message.body)) {
    spdlog::info("host asked for a hello");
    if (orphaned_ && !adopted_) {
      adopted_ = true;
      spdlog::info("orphaned worker adopted by a host: finishing {} trial(s) for it",
                   trials_.size());
    }
    SendHello();
  } else {
    spdlog::debug("events: ignored a '{}' message", message.type);
  }
}

void Worker::RunTimers() {
  const auto now = Clock::now();
  if (now >= next_heartbeat_) {
    SendHeartbeat();
    next_heartbeat_ = now + options_.heartbeat;
  }
  outbox_.ResendDue(now);
  trials_.KillOverdue(now);
  CheckOrphaned(now);
  const bool forced = shutting_down_ && now >= shutdown_deadline_;
  const TrialRunner::Reaped reaped = trials_.Reap(forced, shutting_down_);
  if (reaped.ended > 0 && orphaned_ && !adopted_) ended_while_orphaned_ = true;
  if (reaped.removed > 0) last_activity_ = Clock::now();
  if (shutting_down_) {
    stop_ = forced || trials_.empty();
  } else if (options_.max_idle.count() > 0 && trials_.empty() &&
             now - last_activity_ >= options_.max_idle) {
    spdlog::info("idle for {} ms, exiting", options_.max_idle.count());
    stop_ = true;
  }
}

void Worker::CheckOrphaned(Clock::time_point now) {
  if (options_.orphan_timeout.count() <= 0 || shutting_down_) return;
  if (!orphaned_ && getppid() != parent_) {
    orphaned_ = true;
    orphaned_at_ = now;
    spdlog::warn("the process that started this worker exited: taking no new trials, finishing "
                 "{} running one(s) for a host that takes them back",
                 trials_.size());
  }
  if (!orphaned_) return;
  // A trial end sent while no host was there waits in the results socket for
  // the next host: stay until one asks for us, or the end is lost and the
  // trial would run again.
  if (trials_.empty() && (adopted_ || !ended_while_orphaned_)) {
    spdlog::info("orphaned worker has no trial left: exiting");
    BeginShutdown();
  } else if (!adopted_ && now - orphaned_at_ >= options_.orphan_timeout) {
    spdlog::warn("no host took this orphaned worker's trials within {} ms: stopping them",
                 options_.orphan_timeout.count());
    BeginShutdown();
  } else if (const auto oldest = outbox_.OldestUnacknowledged();
             oldest != Clock::time_point::max() && now - oldest >= options_.orphan_timeout) {
    spdlog::warn("no host acknowledged this orphaned worker's results for {} ms: stopping its "
                 "trials",
                 options_.orphan_timeout.count());
    BeginShutdown();
  }
}

void Worker::BeginShutdown() {
  spdlog::info("stop signal: stopping {} trial(s), then exiting", trials_.size());
  shutting_down_ = true;
  shutdown_deadline_ =
      Clock::now() + options_.kill_grace + std::max(2 * options_.ack_timeout, milliseconds{1000});
  trials_.LeaveAll();
}

void Worker::Finish() {
  transport_.Send(protocol::WorkerBye{options_.id});
  spdlog::info("worker {} exiting", options_.id);
  transport_.Close();
}

void Worker::SendHello() {
  protocol::WorkerHello hello;
  hello.worker_id = options_.id;
  // An orphan offers no slot beyond the trials it still runs.
  hello.slots = orphaned_ ? static_cast<uint32_t>(trials_.size()) : options_.slots;
  hello.resources.gpus = options_.gpus;
  hello.resources.extra = HostExtra();
  hello.language = "c++";
  hello.version = TH_WORKER_VERSION;
  hello.running = trials_.Running();
  hello.offers = protocol::WorkerHello::kAddressedOffers;
  hello.acks = protocol::WorkerHello::kAckSpans;
  transport_.Send(std::move(hello));
}

void Worker::SendHeartbeat() {
  transport_.Send(
      protocol::Heartbeat{options_.id, orphaned_ ? 0 : trials_.FreeSlots(), trials_.Running()});
}

}  // namespace tunehost::worker
