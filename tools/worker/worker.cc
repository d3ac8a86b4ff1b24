#include "worker.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <msgpack.hpp>
#include <cstdlib>
#include <utility>
#include <vector>
#include <zmq_addon.hpp>

#include "tunehost/protocol/codec.h"

namespace tunehost::worker {
namespace {

using protocol::TrialStatus;
using std::chrono::milliseconds;

// Longest sleep of the poll loop, so timers run even if a wake-up is missed.
constexpr milliseconds kMaxPollWait{100};
// How long the results socket may keep unsent messages (WB, EN) at exit.
constexpr int kResultsLingerMs = 2000;
// Far above the offers in flight to one worker; the host never lets many pile up.
constexpr int kResultsSndHwm = 100000;
// Frames beyond this are dropped by ZeroMQ itself (wire-format.md §3.1: 64 × 1 MiB).
constexpr int64_t kMaxFrameBytes = int64_t{64} << 20;
// At a forced exit, how long to wait for SIGKILLed children to be reaped.
constexpr milliseconds kForcedReapWait{1000};

std::string TrialName(const protocol::NewTrialJob& job) {
  return job.trial_id + "#" + std::to_string(job.attempt);
}

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

// How long a trial killed by a stop signal from outside waits for its
// worker's own stop signal before it is reported.
constexpr auto kOutsideKillGrace = std::chrono::milliseconds(1000);

bool KilledByStopSignal(int wait_status) {
  if (!WIFSIGNALED(wait_status)) return false;
  const int sig = WTERMSIG(wait_status);
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGKILL;
}

std::string Shorten(const std::string& s, size_t max = 200) {
  return s.size() <= max ? s : s.substr(0, max) + "...";
}

}  // namespace

Worker::Worker(WorkerOptions options, int wake_fd)
    : options_(std::move(options)), wake_fd_(wake_fd), context_(1) {
  if (!options_.ack_log.empty()) {
    ack_log_fd_ = ::open(options_.ack_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (ack_log_fd_ < 0) {
      throw std::runtime_error("cannot open the ack log " + options_.ack_log + ": " +
                               std::strerror(errno));
    }
  }
}

Worker::~Worker() {
  if (ack_log_fd_ >= 0) ::close(ack_log_fd_);
}

int Worker::Run() {
  Connect();
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

void Worker::Connect() {
  jobs_ = zmq::socket_t(context_, zmq::socket_type::pull);
  // One buffered offer at most: the host's PUSH round-robins past a busy worker.
  jobs_.set(zmq::sockopt::rcvhwm, 1);
  jobs_.set(zmq::sockopt::linger, 0);
  jobs_.set(zmq::sockopt::maxmsgsize, kMaxFrameBytes);
  tunehost::protocol::ApplyClientKeys(jobs_, options_.keys);
  jobs_.connect(options_.jobs_endpoint);

  results_ = zmq::socket_t(context_, zmq::socket_type::push);
  results_.set(zmq::sockopt::sndhwm, kResultsSndHwm);
  results_.set(zmq::sockopt::linger, kResultsLingerMs);
  tunehost::protocol::ApplyClientKeys(results_, options_.keys);
  results_.connect(options_.results_endpoint);

  events_ = zmq::socket_t(context_, zmq::socket_type::sub);
  events_.set(zmq::sockopt::linger, 0);
  events_.set(zmq::sockopt::maxmsgsize, kMaxFrameBytes);
  events_.set(zmq::sockopt::subscribe, "worker." + options_.id + ".");
  events_.set(zmq::sockopt::subscribe, "worker.*");
  tunehost::protocol::ApplyClientKeys(events_, options_.keys);
  events_.connect(options_.events_endpoint);
}

void Worker::PollOnce() {
  std::vector<zmq::pollitem_t> items = {
      {jobs_.handle(), 0, ZMQ_POLLIN, 0},
      {events_.handle(), 0, ZMQ_POLLIN, 0},
      {nullptr, wake_fd_, ZMQ_POLLIN, 0},
  };
  std::vector<Trial*> owners;
  for (auto& t : trials_) {
    if (t->process->metric_fd() >= 0) {
      items.push_back({nullptr, t->process->metric_fd(), ZMQ_POLLIN, 0});
      owners.push_back(t.get());
    }
  }

  const auto now = Clock::now();
  auto next = next_heartbeat_;
  for (const auto& t : trials_) {
    for (const auto& [seq, p] : t->pending)
      next = std::min(next, p.last_sent + options_.ack_timeout);
    if (t->kill_requested && !t->sigkill_sent) next = std::min(next, t->kill_deadline);
    // Only while that grace runs: a trial that exited long ago and waits
    // for its results' MAs must not turn the poll into a busy loop.
    if (t->exited_at && now < *t->exited_at + kOutsideKillGrace) {
      next = std::min(next, *t->exited_at + kOutsideKillGrace);
    }
  }
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
    for (int i = 0; i < 64; ++i) {
      zmq::message_t frame;
      if (!jobs_.recv(frame, zmq::recv_flags::dontwait)) break;
      OnJob(frame);
    }
  }
  if (items[1].revents & ZMQ_POLLIN) {
    for (int i = 0; i < 1024; ++i) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(events_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
        break;
      }
      OnEvent(frames);
    }
  }
  for (size_t i = 0; i < owners.size(); ++i) {
    if (items[3 + i].revents == 0) continue;
    std::vector<std::string> lines;
    size_t overlong = 0;
    owners[i]->process->ReadMetrics(&lines, &overlong);
    OnMetricLines(owners[i], lines, overlong);
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

void Worker::OnJob(const zmq::message_t& frame) {
  protocol::Message message;
  const Status s = protocol::Decode(frame.to_string_view(), &message);
  if (!s.ok()) {
    spdlog::warn("jobs: dropped an undecodable message ({} bytes): {}", frame.size(), s.ToString());
    return;
  }
  const auto* job = std::get_if<protocol::NewTrialJob>(&message.body);
  if (job == nullptr) {
    spdlog::warn("jobs: dropped a '{}' message, only TR is expected here", message.type);
    return;
  }
  OnOffer(*job);
}

void Worker::OnOffer(const protocol::NewTrialJob& job) {
  last_activity_ = Clock::now();
  const auto reject = [&](const std::string& reason) {
    spdlog::info("trial {}: rejected ({})", TrialName(job), reason);
    Send(protocol::TrialRejected{options_.id, job.trial_id, job.attempt, reason, job.lease});
  };
  if (shutting_down_) return reject("worker shutting down");
  if (orphaned_) return reject("orphaned worker: the host that started it exited");
  if (FindTrial(job.trial_id, job.attempt) != nullptr) {
    // A repeated offer of what already runs here: confirm it, start nothing.
    Send(protocol::TrialStarted{options_.id, job.trial_id, job.attempt, job.lease});
    return;
  }
  if (trials_.size() >= options_.slots) return reject("no free slot");
  std::vector<int> gpus;
  if (!options_.gpu_indices.empty()) {
    gpus = FreeGpus();
    if (gpus.size() < options_.gpus_per_trial) return reject("no free GPU");
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
  Send(protocol::TrialStarted{options_.id, job.trial_id, job.attempt, job.lease});
  if (!s.ok()) {
    spdlog::error("trial {}: cannot start: {}", TrialName(job), s.ToString());
    Send(protocol::TrialEnd{job.trial_id, job.attempt, TrialStatus::kFailed,
                            "cannot start trial: " + s.message(), options_.id});
    return;
  }
  spdlog::info("trial {}: started pid {} in {}", TrialName(job), trial->process->pid(),
               trial->process->dir());
  trials_.push_back(std::move(trial));
}

void Worker::OnEvent(const std::vector<zmq::message_t>& frames) {
  if (frames.size() != 2) {
    spdlog::warn("events: dropped a message of {} frame(s), expected topic + envelope",
                 frames.size());
    return;
  }
  // SUB matches prefixes: "worker.a." also receives what is meant for
  // "worker.a.b.".
  const std::string_view topic = frames[0].to_string_view();
  if (topic != "worker." + options_.id + "." && topic != "worker.*") return;
  protocol::Message message;
  const Status s = protocol::Decode(frames[1].to_string_view(), &message);
  if (!s.ok()) {
    spdlog::warn("events: dropped an undecodable message on '{}' ({} bytes): {}",
                 frames[0].to_string(), frames[1].size(), s.ToString());
    return;
  }
  if (const auto* job = std::get_if<protocol::NewTrialJob>(&message.body)) {
    OnOffer(*job);  // an addressed offer (wire-format.md §5.2)
  } else if (const auto* kill = std::get_if<protocol::KillTrialJob>(&message.body)) {
    OnKill(*kill);
  } else if (const auto* ack = std::get_if<protocol::MetricAck>(&message.body)) {
    OnAck(*ack);
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

void Worker::OnKill(const protocol::KillTrialJob& kill) {
  Trial* trial = FindTrial(kill.trial_id, kill.attempt);
  if (trial == nullptr) {
    spdlog::debug("KI for {}#{} ignored: not running here", kill.trial_id, kill.attempt);
    return;
  }
  if (trial->process->exited()) {
    // Its end waits for acknowledgements the host, which no longer wants
    // this attempt, may never send: drop them and end it now.
    if (!trial->pending.empty()) {
      spdlog::info("KI for {}#{}: already exited, dropping {} unacknowledged result(s)",
                   kill.trial_id, kill.attempt, trial->pending.size());
      trial->pending.clear();
    } else {
      spdlog::info("KI for {}#{} ignored: already exited", kill.trial_id, kill.attempt);
    }
    return;
  }
  trial->left_behind = false;  // the host asked: it gets the trial's EN
  if (trial->kill_requested) {
    trial->kill_status =
        kill.reason == "assessor" ? TrialStatus::kEarlyStopped : TrialStatus::kUserCanceled;
  }
  RequestKill(trial,
              kill.reason == "assessor" ? TrialStatus::kEarlyStopped : TrialStatus::kUserCanceled,
              kill.reason);
}

void Worker::RequestKill(Trial* trial, TrialStatus status, const std::string& reason) {
  if (trial->kill_requested) return;
  spdlog::info("trial {}: stopping ({}), SIGTERM to its process group", TrialName(trial->job),
               reason);
  trial->kill_requested = true;
  trial->kill_status = status;
  trial->kill_deadline = Clock::now() + options_.kill_grace;
  trial->process->SignalGroup(SIGTERM);
}

void Worker::OnAck(const protocol::MetricAck& ack) {
  // An MA acknowledges `span` consecutive sequences from `sequence` on
  // (one without a span: that sequence alone; wire-format.md §5.2).
  Trial* trial = FindTrial(ack.trial_id, ack.attempt);
  size_t matched = 0;
  if (trial != nullptr) {
    for (auto it = trial->pending.lower_bound(ack.sequence);
         it != trial->pending.end() && ack.Covers(it->first); ++matched) {
      LogAck(*trial, it->first, it->second);
      it = trial->pending.erase(it);
    }
  }
  if (matched == 0) {
    spdlog::debug("MA for {}#{} seq {} (span {}) matched nothing", ack.trial_id, ack.attempt,
                  ack.sequence, ack.acknowledged());
  }
}

// One line per acknowledged result, written with a single write(2) before
// anything else happens, so that a SIGKILL right after leaves it in the file:
//   <trial_id> <attempt> <sequence> <PERIODICAL|FINAL> <scalar> <worker_id> <unix time>
void Worker::LogAck(const Trial& trial, uint64_t sequence, const PendingMetric& metric) {
  if (ack_log_fd_ < 0) return;
  char scalar[64], when[64];
  std::snprintf(scalar, sizeof scalar, "%.17g", metric.scalar);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  std::snprintf(when, sizeof when, "%lld.%06ld", static_cast<long long>(now.tv_sec),
                now.tv_nsec / 1000);
  const std::string line = trial.job.trial_id + " " + std::to_string(trial.job.attempt) + " " +
                           std::to_string(sequence) + " " +
                           std::string(protocol::ToString(metric.type)) + " " + scalar + " " +
                           options_.id + " " + when + "\n";
  if (::write(ack_log_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    spdlog::warn("ack log: {}", std::strerror(errno));
  }
}

void Worker::OnMetricLines(Trial* trial, const std::vector<std::string>& lines, size_t overlong) {
  const std::string name = TrialName(trial->job);
  if (overlong > 0) {
    spdlog::warn("trial {}: skipped {} metric line(s) longer than {} bytes", name, overlong,
                 kMaxMetricLineBytes);
  }
  for (const auto& line : lines) {
    MetricLine metric;
    if (Status s = ParseMetricLine(line, &metric); !s.ok()) {
      spdlog::warn("trial {}: skipped a bad metric line ({}): {}", name, s.message(),
                   Shorten(line));
      continue;
    }
    if (trial->final_seen) {
      spdlog::warn("trial {}: ignored a {} metric after its FINAL", name,
                   protocol::ToString(metric.type));
      continue;
    }
    const uint64_t sequence = trial->next_sequence;
    protocol::Message message;
    message.id = next_message_id_++;
    message.body = protocol::ReportMetricData{
        trial->job.trial_id,     trial->job.attempt, trial->job.parameter_id, metric.type, sequence,
        std::move(metric.value), options_.id};
    const auto now = Clock::now();
    const auto& body = std::get<protocol::ReportMetricData>(message.body);
    PendingMetric pending{protocol::Encode(message), body.type, body.value.scalar, now, now};
    if (pending.bytes.size() > options_.max_result_bytes) {
      // The host would drop it unacknowledged and the worker resend it for
      // ever (wire-format.md §1.1): the trial goes on as if the line were bad.
      spdlog::warn("trial {}: skipped a {} result of {} bytes, over the results limit of {} "
                   "bytes (the host's --max-result-bytes / maxResultBytes and this worker's "
                   "--max-result-bytes)",
                   name, protocol::ToString(body.type), pending.bytes.size(),
                   options_.max_result_bytes);
      continue;
    }
    ++trial->next_sequence;
    if (metric.type == protocol::MetricType::kFinal) {
      trial->final_seen = true;
    } else {
      trial->last_periodical = static_cast<int64_t>(sequence);
    }
    SendBytes(pending.bytes);
    trial->pending[sequence] = std::move(pending);
  }
}

void Worker::RunTimers() {
  const auto now = Clock::now();
  if (now >= next_heartbeat_) {
    SendHeartbeat();
    next_heartbeat_ = now + options_.heartbeat;
  }
  for (auto& t : trials_) {
    for (auto& [seq, p] : t->pending) {
      if (now - p.last_sent < options_.ack_timeout) continue;
      spdlog::debug("trial {}: resending metric {}", TrialName(t->job), seq);
      SendBytes(p.bytes);
      p.last_sent = now;
    }
    if (t->kill_requested && !t->sigkill_sent && !t->process->exited() && now >= t->kill_deadline) {
      spdlog::warn("trial {}: still running after the kill grace, SIGKILL", TrialName(t->job));
      t->process->SignalGroup(SIGKILL);
      t->sigkill_sent = true;
    }
  }
  CheckOrphaned(now);
  const bool forced = shutting_down_ && now >= shutdown_deadline_;
  ReapAndFinish(forced);
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
  } else if (const auto oldest = OldestUnacknowledged();
             oldest != Clock::time_point::max() && now - oldest >= options_.orphan_timeout) {
    spdlog::warn("no host acknowledged this orphaned worker's results for {} ms: stopping its "
                 "trials",
                 options_.orphan_timeout.count());
    BeginShutdown();
  }
}

Worker::Clock::time_point Worker::OldestUnacknowledged() const {
  Clock::time_point oldest = Clock::time_point::max();
  for (const auto& t : trials_) {
    for (const auto& [seq, p] : t->pending) oldest = std::min(oldest, p.first_sent);
  }
  return oldest;
}

void Worker::ReapAndFinish(bool force) {
  if (force) {
    for (auto& t : trials_) t->process->SignalGroup(SIGKILL);
  }
  const auto reap_deadline = Clock::now() + kForcedReapWait;
  for (size_t i = 0; i < trials_.size();) {
    Trial* t = trials_[i].get();
    std::vector<std::string> lines;
    size_t overlong = 0;
    bool exited = t->process->Reap(&lines, &overlong);
    while (force && !exited && Clock::now() < reap_deadline) {
      const timespec pause{0, 10 * 1000 * 1000};
      ::nanosleep(&pause, nullptr);
      exited = t->process->Reap(&lines, &overlong);
    }
    if (!lines.empty() || overlong > 0) OnMetricLines(t, lines, overlong);
    if (exited && !t->exited_at) t->exited_at = Clock::now();
    // A trial killed by a stop signal nobody here sent was most likely
    // stopped with this worker (scancel and pre-emption signal every
    // process of the job at once): wait a moment for the worker's own
    // signal, so the trial is left to the host instead of ending FAILED.
    const bool outside_kill = exited && !t->kill_requested && !shutting_down_ && !force &&
                              KilledByStopSignal(t->process->wait_status()) &&
                              Clock::now() < *t->exited_at + kOutsideKillGrace;
    // wire-format.md §5.3 item 5: EN only after every result (FINAL
    // included) is acknowledged, unless the worker is out of time.
    if (exited && !outside_kill && (t->pending.empty() || force)) {
      if (t->left_behind) {
        spdlog::info("trial {}: left to the host to offer again", TrialName(t->job));
      } else {
        SendEnd(*t);
      }
      trials_.erase(trials_.begin() + static_cast<std::ptrdiff_t>(i));
      last_activity_ = Clock::now();
    } else {
      ++i;
    }
  }
}

void Worker::BeginShutdown() {
  spdlog::info("stop signal: stopping {} trial(s), then exiting", trials_.size());
  shutting_down_ = true;
  shutdown_deadline_ =
      Clock::now() + options_.kill_grace + std::max(2 * options_.ack_timeout, milliseconds{1000});
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

void Worker::Finish() {
  Send(protocol::WorkerBye{options_.id});
  spdlog::info("worker {} exiting", options_.id);
  jobs_.close();
  events_.close();
  results_.close();  // lingers up to kResultsLingerMs for WB and EN
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
  hello.running = RunningTrials();
  hello.offers = protocol::WorkerHello::kAddressedOffers;
  hello.acks = protocol::WorkerHello::kAckSpans;
  Send(std::move(hello));
}

void Worker::SendHeartbeat() {
  Send(protocol::Heartbeat{options_.id, FreeSlots(), RunningTrials()});
}

void Worker::SendEnd(const Trial& trial) {
  if (orphaned_ && !adopted_) ended_while_orphaned_ = true;
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
  Send(protocol::TrialEnd{trial.job.trial_id, trial.job.attempt, status, std::move(error),
                          options_.id});
}

void Worker::Send(protocol::Body body) {
  protocol::Message message;
  message.id = next_message_id_++;
  message.body = std::move(body);
  SendBytes(protocol::Encode(message));
}

void Worker::SendBytes(const std::string& bytes) {
  try {
    if (!results_.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) {
      spdlog::warn("results: send queue full, a message was dropped");
    }
  } catch (const zmq::error_t& e) {
    spdlog::error("results: send failed: {}", e.what());
  }
}

std::vector<protocol::RunningTrial> Worker::RunningTrials() const {
  std::vector<protocol::RunningTrial> running;
  for (const auto& t : trials_) {
    running.push_back({t->job.trial_id, t->job.attempt, t->last_periodical});
  }
  return running;
}

uint32_t Worker::FreeSlots() const {
  if (orphaned_) return 0;
  uint32_t free = trials_.size() >= options_.slots
                      ? 0
                      : options_.slots - static_cast<uint32_t>(trials_.size());
  if (!options_.gpu_indices.empty()) {
    free = std::min(free, static_cast<uint32_t>(FreeGpus().size()) / options_.gpus_per_trial);
  }
  return free;
}

std::vector<int> Worker::FreeGpus() const {
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

Worker::Trial* Worker::FindTrial(const std::string& trial_id, uint32_t attempt) {
  for (auto& t : trials_) {
    if (t->job.trial_id == trial_id && t->job.attempt == attempt) return t.get();
  }
  return nullptr;
}

}  // namespace tunehost::worker
