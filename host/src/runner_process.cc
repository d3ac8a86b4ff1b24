#include "runner_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "runner_frames.h"
#include "tunehost/host/plugin_text.h"

extern char** environ;

namespace tunehost::host {

namespace rf = runner_frames;

namespace {

// The runner's end of the channel, as the runner sees it.
constexpr int kRunnerFd = 3;
constexpr auto kMemoryCheckInterval = std::chrono::milliseconds(50);
constexpr auto kExitGrace = std::chrono::milliseconds(2000);

std::string Frame(const std::function<void(rf::Packer&)>& fill) {
  msgpack::sbuffer b;
  rf::Packer pk(b);
  fill(pk);
  return std::string(b.data(), b.size());
}

}  // namespace

size_t ResidentBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/statm");
  size_t total = 0, resident = 0;
  if (!(in >> total >> resident)) return 0;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

Status RunnerProcess::Start(const std::filesystem::path& runner, const PluginInfo& info,
                            Hooks hooks, std::unique_ptr<RunnerProcess>* out) {
  int fds[2];
  if (!MakeSocketPair(fds)) {
    return Status::Unavailable(std::string("socketpair: ") + std::strerror(errno));
  }
  const std::string fd_arg = std::to_string(kRunnerFd);
  const std::string parent = std::to_string(getpid());
  const std::string file = info.file.string();
  const std::string path = runner.string();
  std::vector<char*> argv;
  std::string flags[] = {"--fd", "--file", "--kind", "--parent"};
  argv.push_back(const_cast<char*>(path.c_str()));
  argv.push_back(flags[0].data());
  argv.push_back(const_cast<char*>(fd_arg.c_str()));
  argv.push_back(flags[1].data());
  argv.push_back(const_cast<char*>(file.c_str()));
  argv.push_back(flags[2].data());
  argv.push_back(const_cast<char*>(info.kind.c_str()));
  argv.push_back(flags[3].data());
  argv.push_back(const_cast<char*>(parent.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears close-on-exec on the runner's end only.
  posix_spawn_file_actions_adddup2(&actions, fds[1], kRunnerFd);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return Status::Unavailable("cannot start " + path + ": " + std::strerror(rc));
  }
  out->reset(new RunnerProcess(pid, fds[0], std::move(hooks)));
  return Status::Ok();
}

RunnerProcess::RunnerProcess(pid_t pid, int fd, Hooks hooks)
    : pid_(pid), channel_(fd), hooks_(std::move(hooks)) {
  reader_ = std::thread([this] { ReadLoop(); });
}

RunnerProcess::~RunnerProcess() {
  bool dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dead = dead_;
  }
  if (!dead) {
    std::string reply;
    (void)Call(rf::kDestroy, "", 0, kExitGrace, 0, &reply);
  }
  if (!Reap(kExitGrace)) Kill();
  (void)Reap(kExitGrace);
  channel_.Shutdown();
  if (reader_.joinable()) reader_.join();
}

void RunnerProcess::ReadLoop() {
  for (;;) {
    std::string frame;
    if (!channel_.Receive(&frame).ok()) break;
    rf::Reader r(frame);
    std::string type;
    if (!r.ok() || !r.String(0, &type)) continue;
    if (type == "reply") {
      int64_t seq = -1;
      r.Int(1, &seq);
      std::lock_guard<std::mutex> lock(mu_);
      if (seq == waiting_seq_) {
        reply_ = std::move(frame);
        cv_.notify_all();
      }
    } else if (type == "send_trial") {
      int64_t req = 0, id = 0;
      std::string params;
      Status st = Status::Internal("malformed send_trial");
      if (r.Int(1, &req) && r.Int(2, &id) && r.String(3, &params)) {
        if (hooks_.replaying && hooks_.replaying()) {
          st = Status::Ok();  // sent before the crash already
        } else if (hooks_.send_trial) {
          st = hooks_.send_trial(id, protocol::Packed(std::move(params)));
        } else {
          st = Status::BadState("send_trial is for tuners");
        }
      }
      (void)channel_.Send(Frame([&](rf::Packer& pk) {
        pk.pack_array(4);
        rf::Str(pk, "sent");
        pk.pack_int64(req);
        rf::Str(pk, st.CodeName());
        rf::Str(pk, st.message());
      }));
    } else if (type == "log") {
      int64_t level = spdlog::level::info;
      std::string text;
      r.Int(1, &level);
      r.String(2, &text);
      if (level < spdlog::level::trace || level > spdlog::level::critical) level = 2;
      spdlog::log(static_cast<spdlog::level::level_enum>(level), "[{} runner] {}", hooks_.label,
                  CleanPluginText(text));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  dead_ = true;
  cv_.notify_all();
}

RunnerProcess::Outcome RunnerProcess::Call(const std::string& op, const std::string& args,
                                           uint32_t nargs, std::chrono::milliseconds timeout,
                                           size_t memory_limit, std::string* reply) {
  int64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return Outcome::kDied;
    seq = ++next_seq_;
    waiting_seq_ = seq;
    reply_.reset();
  }
  // Checked before every call too: most calls answer before the first check
  // while waiting.
  if (OverMemoryLimit(memory_limit)) return Outcome::kDied;
  std::string frame = Frame([&](rf::Packer& pk) {
    pk.pack_array(3 + nargs);
    rf::Str(pk, "call");
    pk.pack_int64(seq);
    rf::Str(pk, op);
  });
  frame += args;
  (void)channel_.Send(frame);  // a dead runner shows as EOF to the reader
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, kMemoryCheckInterval, [&] { return reply_.has_value() || dead_; });
    if (reply_) {
      *reply = std::move(*reply_);
      reply_.reset();
      waiting_seq_ = -1;
      return Outcome::kReplied;
    }
    if (dead_) return Outcome::kDied;
    lock.unlock();
    const bool over = OverMemoryLimit(memory_limit);
    lock.lock();
    if (over) return Outcome::kDied;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill_reason_ = "killed: the call did not return in time";
      lock.unlock();
      Kill();
      return Outcome::kTimedOut;
    }
  }
}

bool RunnerProcess::OverMemoryLimit(size_t memory_limit) {
  if (memory_limit == 0 || ResidentBytes(pid_) <= memory_limit) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    kill_reason_ = "killed: over its memory cap of " + std::to_string(memory_limit >> 20) + " MiB";
  }
  Kill();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, kExitGrace, [&] { return dead_; });
  return true;
}

void RunnerProcess::Kill() {
  if (pid_ > 0 && !wait_status_) kill(pid_, SIGKILL);
}

std::optional<int> RunnerProcess::Reap(std::chrono::milliseconds wait) {
  if (wait_status_) return wait_status_;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) {
      wait_status_ = status;
      return wait_status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string RunnerProcess::DeathReason() {
  // The channel closed; the process exits (or is made to).
  std::optional<int> status = Reap(kExitGrace);
  if (!status) {
    Kill();
    status = Reap(kExitGrace);
    if (!status) return "did not exit";
    return "closed its channel and was killed";
  }
  std::string reason;
  if (!kill_reason_.empty()) {
    reason = kill_reason_;
  } else if (WIFSIGNALED(*status)) {
    const int sig = WTERMSIG(*status);
    reason = "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  } else if (WIFEXITED(*status)) {
    reason = "exited with status " + std::to_string(WEXITSTATUS(*status));
  } else {
    reason = "ended";
  }
  return reason;
}

}  // namespace tunehost::host
