#include "tunehost/host/local_workers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <spdlog/spdlog.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

namespace tunehost::host {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kReapInterval = std::chrono::milliseconds(50);
constexpr auto kStopPollInterval = std::chrono::milliseconds(10);
constexpr auto kRespawnWindow = std::chrono::minutes(1);

bool IsExecutableFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
}

bool SearchPath(const std::string& name, fs::path* out) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (IsExecutableFile(candidate)) {
      *out = fs::absolute(candidate).lexically_normal();
      return true;
    }
  }
  return false;
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "ended (status " + std::to_string(status) + ")";
}

// fork + exec with everything the child needs prepared before fork, so the
// child only makes async-signal-safe calls (the host is multi-threaded).
Status SpawnProcess(const std::vector<std::string>& args, const fs::path& log_file,
                    bool die_with_parent, pid_t* out) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) return Status::Internal(std::string("open /dev/null: ") + strerror(errno));
  int log_fd = -1;
  if (!log_file.empty()) {
    log_fd = open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      int err = errno;
      close(devnull);
      return Status::Internal(log_file.string() + ": " + strerror(err));
    }
  }
  // The child reports a failed exec through this pipe; a successful exec
  // closes it (O_CLOEXEC), so the parent reads EOF.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    int err = errno;
    close(devnull);
    if (log_fd >= 0) close(log_fd);
    return Status::Internal(std::string("pipe2: ") + strerror(err));
  }
  const pid_t parent = getpid();
  sigset_t empty_mask;
  sigemptyset(&empty_mask);

  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
#ifdef __linux__
    // The worker gets SIGTERM if this (supervisor) thread's process dies.
    if (die_with_parent) prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
#endif
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT}) {
      sigaction(sig, &dfl, nullptr);
    }
    sigprocmask(SIG_SETMASK, &empty_mask, nullptr);
    dup2(devnull, STDIN_FILENO);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execv(argv[0], argv.data());
    int err = errno;
    ssize_t unused = write(report[1], &err, sizeof err);
    (void)unused;
    _exit(127);
  }
  int fork_errno = errno;
  close(report[1]);
  close(devnull);
  if (log_fd >= 0) close(log_fd);
  if (pid < 0) {
    close(report[0]);
    return Status::Internal(std::string("fork: ") + strerror(fork_errno));
  }
  setpgid(pid, pid);  // also here, so the group exists before anyone signals it

  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return Status::Internal(args[0] + ": cannot execute: " + strerror(child_errno));
  }
  *out = pid;
  return Status::Ok();
}

}  // namespace

// Owns the worker processes. Every fork happens on the supervisor thread: the
// Linux parent-death signal is tied to the thread that forked, and this thread
// lives until every worker has been reaped.
class LocalWorkers::Supervisor {
 public:
  explicit Supervisor(const LocalWorkersOptions& options) : options_(options) {
    slots_.resize(options_.count);
  }

  ~Supervisor() { Stop(); }

  Status Start() {
    std::promise<Status> started;
    std::future<Status> result = started.get_future();
    // The thread owns the promise, so it outlives set_value.
    thread_ = std::thread([this, p = std::move(started)]() mutable { Main(&p); });
    Status st = result.get();
    if (!st.ok()) thread_.join();
    return st;
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  std::vector<pid_t> pids() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<pid_t> out;
    for (const Slot& s : slots_) out.push_back(s.pid);
    return out;
  }

  size_t respawns() const { return respawns_.load(); }

  void Grow(size_t count) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      wanted_ = std::max(wanted_, count);
    }
    cv_.notify_all();
  }

 private:
  struct Slot {
    pid_t pid = 0;
    std::deque<Clock::time_point> respawns;  // within the last minute
    bool throttle_logged = false;
  };

  std::string WorkerId(size_t i) const { return options_.id_prefix + std::to_string(i); }

  std::vector<std::string> Args(size_t i) const {
    std::vector<std::string> a = {options_.worker_binary.string(),
                                  "--jobs",
                                  options_.jobs,
                                  "--results",
                                  options_.results,
                                  "--events",
                                  options_.events,
                                  "--command",
                                  options_.command,
                                  "--slots",
                                  "1",
                                  "--id",
                                  WorkerId(i),
                                  "--heartbeat-ms",
                                  std::to_string(options_.heartbeat_interval.count())};
    if (!options_.cwd.empty()) a.insert(a.end(), {"--cwd", options_.cwd.string()});
    if (!options_.workdir.empty()) a.insert(a.end(), {"--workdir", options_.workdir.string()});
    a.insert(a.end(), options_.extra_args.begin(), options_.extra_args.end());
    if (options_.worker_args) {
      std::vector<std::string> own = options_.worker_args(i);
      a.insert(a.end(), own.begin(), own.end());
    }
    return a;
  }

  Status SpawnSlot(size_t i) {
    fs::path log_file;
    if (!options_.log_dir.empty()) log_file = options_.log_dir / (WorkerId(i) + ".log");
    pid_t pid = 0;
    Status st = SpawnProcess(Args(i), log_file, !options_.outlive_host, &pid);
    if (!st.ok()) return st;
    std::lock_guard<std::mutex> lock(mu_);
    slots_[i].pid = pid;
    spdlog::debug("worker {} started (pid {})", WorkerId(i), pid);
    return Status::Ok();
  }

  void Main(std::promise<Status>* started) {
    for (size_t i = 0; i < slots_.size(); ++i) {
      Status st = SpawnSlot(i);
      if (!st.ok()) {
        Terminate();
        started->set_value(
            Status::Internal("starting worker " + WorkerId(i) + ": " + st.message()));
        return;
      }
    }
    started->set_value(Status::Ok());
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, kReapInterval,
                         [this] { return stop_ || wanted_ > slots_.size(); }) &&
            stop_) {
          break;
        }
      }
      AddSlots();
      ReapAndRespawn();
    }
    Terminate();
  }

  // Starts the workers Grow asked for (on this thread, like every fork).
  void AddSlots() {
    size_t first = 0, last = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = slots_.size();
      last = std::max(first, wanted_);
      slots_.resize(last);
    }
    for (size_t i = first; i < last; ++i) {
      Status st = SpawnSlot(i);
      if (st.ok()) {
        spdlog::info("worker {} added (pid {})", WorkerId(i), slots_[i].pid);
      } else {
        spdlog::error("adding worker {}: {}", WorkerId(i), st.message());
      }
    }
  }

  void ReapAndRespawn() {
    const auto now = Clock::now();
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (slot.pid > 0) {
        int status = 0;
        pid_t r = waitpid(slot.pid, &status, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR)) continue;
        spdlog::warn("worker {} (pid {}) {}", WorkerId(i), slot.pid,
                     r < 0 ? std::string("vanished") : DescribeExit(status));
        std::lock_guard<std::mutex> lock(mu_);
        slot.pid = 0;
      }
      while (!slot.respawns.empty() && now - slot.respawns.front() >= kRespawnWindow) {
        slot.respawns.pop_front();
      }
      if (static_cast<int>(slot.respawns.size()) >= options_.max_respawns_per_minute) {
        if (!slot.throttle_logged) {
          auto wait = std::chrono::duration_cast<std::chrono::seconds>(slot.respawns.front() +
                                                                       kRespawnWindow - now);
          spdlog::error("worker {} died {} times within a minute: next respawn in {} s",
                        WorkerId(i), slot.respawns.size(), wait.count() + 1);
          slot.throttle_logged = true;
        }
        continue;
      }
      slot.throttle_logged = false;
      slot.respawns.push_back(now);
      respawns_.fetch_add(1);
      Status st = SpawnSlot(i);
      if (st.ok()) {
        spdlog::info("worker {} respawned (pid {})", WorkerId(i), slot.pid);
      } else {
        spdlog::error("respawning worker {}: {}", WorkerId(i), st.message());
      }
    }
  }

  // SIGTERM to every group, a bounded wait, then SIGKILL; reaps everything.
  void Terminate() {
    std::vector<size_t> live;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].pid <= 0) continue;
      if (kill(-slots_[i].pid, SIGTERM) != 0) kill(slots_[i].pid, SIGTERM);
      live.push_back(i);
    }
    const auto deadline = Clock::now() + options_.stop_timeout;
    while (!live.empty()) {
      std::vector<size_t> still;
      for (size_t i : live) {
        int status = 0;
        pid_t r = waitpid(slots_[i].pid, &status, WNOHANG);
        if (r == 0) {
          still.push_back(i);
          continue;
        }
        spdlog::debug("worker {} (pid {}) {}", WorkerId(i), slots_[i].pid,
                      r < 0 ? std::string("vanished") : DescribeExit(status));
        std::lock_guard<std::mutex> lock(mu_);
        slots_[i].pid = 0;
      }
      live.swap(still);
      if (live.empty()) break;
      if (Clock::now() >= deadline) {
        for (size_t i : live) {
          spdlog::warn("worker {} (pid {}) did not stop within {} ms: killing it", WorkerId(i),
                       slots_[i].pid, options_.stop_timeout.count());
          if (kill(-slots_[i].pid, SIGKILL) != 0) kill(slots_[i].pid, SIGKILL);
          int status = 0;
          while (waitpid(slots_[i].pid, &status, 0) < 0 && errno == EINTR) {
          }
          std::lock_guard<std::mutex> lock(mu_);
          slots_[i].pid = 0;
        }
        break;
      }
      std::this_thread::sleep_for(kStopPollInterval);
    }
  }

  const LocalWorkersOptions& options_;
  mutable std::mutex mu_;  // guards stop_ and the slots' pids (read by pids())
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<Slot> slots_;
  std::atomic<size_t> respawns_{0};
  size_t wanted_ = 0;  // Grow's count; guarded by mu_
  std::thread thread_;
};

LocalWorkers::LocalWorkers(LocalWorkersOptions options) : options_(std::move(options)) {}

LocalWorkers::~LocalWorkers() { Stop(); }

Status LocalWorkers::Start() {
  if (supervisor_) return Status::BadState("local workers already started");
  if (options_.count == 0) return Status::BadField("local workers: count must be at least 1");
  fs::path binary;
  Status st = FindWorkerBinary(options_.worker_binary, &binary);
  if (!st.ok()) return st;
  options_.worker_binary = binary;
  if (!options_.log_dir.empty()) {
    std::error_code ec;
    fs::create_directories(options_.log_dir, ec);
    if (ec) return Status::Internal(options_.log_dir.string() + ": " + ec.message());
  }
  auto supervisor = std::make_unique<Supervisor>(options_);
  st = supervisor->Start();
  if (!st.ok()) return st;
  supervisor_ = std::move(supervisor);
  return Status::Ok();
}

void LocalWorkers::Stop() {
  if (supervisor_) supervisor_->Stop();
}

std::vector<pid_t> LocalWorkers::pids() const {
  return supervisor_ ? supervisor_->pids() : std::vector<pid_t>();
}

size_t LocalWorkers::respawns() const { return supervisor_ ? supervisor_->respawns() : 0; }

void LocalWorkers::Grow(size_t count) {
  if (supervisor_) supervisor_->Grow(count);
}

Status FindWorkerBinary(const fs::path& requested, fs::path* out) {
  if (!requested.empty()) {
    if (requested.has_parent_path()) {
      if (IsExecutableFile(requested)) {
        *out = fs::absolute(requested).lexically_normal();
        return Status::Ok();
      }
      return Status::NotFound(requested.string() + ": not an executable file");
    }
    if (SearchPath(requested.string(), out)) return Status::Ok();
    return Status::NotFound(requested.string() + ": not found in PATH");
  }
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path beside = self.parent_path() / "tunehost-worker";
    if (IsExecutableFile(beside)) {
      *out = beside;
      return Status::Ok();
    }
  }
  if (SearchPath("tunehost-worker", out)) return Status::Ok();
  return Status::NotFound("tunehost-worker not found next to " +
                          (ec ? std::string("this executable") : self.string()) +
                          " nor in PATH (use --worker-bin)");
}

std::vector<std::vector<int>> PlanGpus(const std::vector<int>& gpus, uint32_t per_trial,
                                       uint32_t max_per_gpu, size_t workers) {
  std::vector<std::vector<int>> plan;
  if (per_trial == 0 || gpus.empty() || per_trial > gpus.size()) return plan;
  // GPU slots round-robin over the GPUs, max_per_gpu rounds: consecutive
  // slots are distinct GPUs, so each worker's per_trial slots are too.
  const size_t slots = gpus.size() * std::max<uint32_t>(1, max_per_gpu);
  for (size_t w = 0; w < workers && (w + 1) * per_trial <= slots; ++w) {
    std::vector<int> mine;
    for (size_t k = 0; k < per_trial; ++k) mine.push_back(gpus[(w * per_trial + k) % gpus.size()]);
    plan.push_back(std::move(mine));
  }
  return plan;
}

std::vector<int> DetectGpus() {
  std::vector<int> gpus;
  FILE* out = ::popen("nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null", "r");
  if (out == nullptr) return gpus;
  char line[64];
  while (std::fgets(line, sizeof line, out) != nullptr) {
    char* end = nullptr;
    const long g = std::strtol(line, &end, 10);
    if (end != line && g >= 0 && g < 1024) gpus.push_back(static_cast<int>(g));
  }
  if (::pclose(out) != 0) gpus.clear();
  return gpus;
}

}  // namespace tunehost::host
