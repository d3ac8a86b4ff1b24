#include "trial_process.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "tunehost/protocol/codec.h"

extern char** environ;

namespace tunehost::worker {
namespace {

// Closes on scope exit unless released; keeps the error paths of Start short.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ParameterIdJson(const protocol::ParameterId& id) {
  if (const auto* i = std::get_if<int64_t>(&id)) return std::to_string(*i);
  if (const auto* s = std::get_if<std::string>(&id)) return DumpJson(*s);
  return "null";
}

Status WriteFile(const std::string& path, const std::string& text) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return Status::Internal(Errno("open " + path));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Internal(Errno("write " + path));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

std::string ReadTail(const std::string& path, size_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) return {};
  const off_t size = st.st_size;
  const off_t start =
      size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
  std::string out(static_cast<size_t>(size - start), '\0');
  const ssize_t n = ::pread(fd.get(), out.data(), out.size(), start);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

// The environment of the child: the worker's own, with ours added or replaced.
std::vector<std::string> BuildEnvironment(const protocol::NewTrialJob& job, const std::string& dir,
                                          int metric_fd, const LaunchOptions& options) {
  std::vector<std::pair<std::string, std::string>> vars = {
      {"TUNEHOST_EXPERIMENT_ID", job.experiment_id},
      {"TUNEHOST_TRIAL_ID", job.trial_id},
      {"TUNEHOST_SEQUENCE_ID", std::to_string(job.sequence_id)},
      {"TUNEHOST_ATTEMPT", std::to_string(job.attempt)},
      {"TUNEHOST_PARAMETER_ID", ParameterIdJson(job.parameter_id)},
      {"TUNEHOST_PARAMETERS", protocol::PackedToJson(job.parameters)},
      {"TUNEHOST_PARAMETER_FILE", dir + "/parameter.json"},
      {"TUNEHOST_TRIAL_DIR", dir},
      {"TUNEHOST_METRIC_FD", std::to_string(metric_fd)},
      {"NNI_PLATFORM", "tunehost"},
      {"NNI_EXP_ID", job.experiment_id},
      {"NNI_TRIAL_JOB_ID", job.trial_id},
      {"NNI_TRIAL_SEQ_ID", std::to_string(job.sequence_id)},
      {"NNI_SYS_DIR", dir},
      {"NNI_OUTPUT_DIR", dir},
  };
  if (options.cuda_visible_devices) {
    vars.emplace_back("CUDA_VISIBLE_DEVICES", *options.cuda_visible_devices);
  }
  if (!options.python_path.empty()) {
    const char* own = std::getenv("PYTHONPATH");
    vars.emplace_back("PYTHONPATH", options.python_path + (own != nullptr && *own != '\0'
                                                                ? ":" + std::string(own)
                                                                : std::string()));
  }
  nlohmann::json params = nlohmann::json::from_msgpack(job.parameters, /*strict=*/true,
                                                       /*allow_exceptions=*/false);
  if (params.is_object()) {
    if (auto it = params.find("TRIAL_BUDGET"); it != params.end()) {
      vars.emplace_back("TRIAL_BUDGET", it->is_string() ? it->get<std::string>() : DumpJson(*it));
    }
  }

  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string key = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& v : vars) replaced = replaced || v.first == key;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [key, value] : vars) {
    // A NUL would silently cut the variable; parameters are JSON, so this
    // only strips garbage.
    std::string clean = value;
    clean.erase(std::remove(clean.begin(), clean.end(), '\0'), clean.end());
    env.push_back(key + "=" + clean);
  }
  return env;
}

void WriteStderr(const char* msg) {
  ssize_t ignored = ::write(2, msg, std::strlen(msg));
  (void)ignored;
}

}  // namespace

std::string SafePathComponent(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  const auto cont = [&](size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    if (i + k >= s.size()) return false;
    const auto c = static_cast<unsigned char>(s[i + k]);
    return c >= lo && c <= hi;
  };
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = cont(1) ? 2 : 0;
    } else if (c >= 0xE0 && c <= 0xEF) {
      const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;
      const unsigned char hi = c == 0xED ? 0x9F : 0xBF;
      len = cont(1, lo, hi) && cont(2) ? 3 : 0;
    } else if (c >= 0xF0 && c <= 0xF4) {
      const unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
      const unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;
      len = cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
    }
    if (len == 0) {
      out.push_back('?');
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

Status TrialProcess::Start(const protocol::NewTrialJob& job, const LaunchOptions& options,
                           std::unique_ptr<TrialProcess>* out) {
  namespace fs = std::filesystem;
  std::unique_ptr<TrialProcess> p(new TrialProcess());
  const fs::path dir = fs::path(options.workdir) / SafePathComponent(job.experiment_id) / "trials" /
                       (SafePathComponent(job.trial_id) + "-" + std::to_string(job.attempt));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Internal("cannot create " + dir.string() + ": " + ec.message());
  p->dir_ = dir.string();

  const std::string record =
      std::string("{\"parameter_id\":") + ParameterIdJson(job.parameter_id) +
      ",\"parameter_source\":" + DumpJson(std::string(protocol::ToString(job.parameter_source))) +
      ",\"parameter_index\":" + std::to_string(job.parameter_index) +
      ",\"parameters\":" + protocol::PackedToJson(job.parameters) + "}\n";
  if (Status s = WriteFile(p->dir_ + "/parameter.json", record); !s.ok()) return s;

  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  Fd out_fd(::open((p->dir_ + "/stdout.log").c_str(), flags, 0644));
  Fd err_fd(::open((p->dir_ + "/stderr.log").c_str(), flags, 0644));
  Fd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (out_fd.get() < 0 || err_fd.get() < 0 || null_fd.get() < 0) {
    return Status::Internal(Errno("cannot open the trial's output files in " + p->dir_));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Status::Internal(Errno("pipe2"));
  Fd read_end(pipe_fds[0]);
  Fd write_end(pipe_fds[1]);

  // Everything the child needs is built before fork: between fork and exec
  // only async-signal-safe calls are allowed (zmq has threads running).
  const std::vector<std::string> env = BuildEnvironment(job, p->dir_, kMetricFd, options);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const char* argv[] = {"/bin/sh", "-c", options.command.c_str(), nullptr};
  const char* cwd = options.cwd.c_str();

  // Signals stay blocked from before fork until the child has reset the
  // worker's handlers: a SIGTERM for the new group must not run the worker's
  // handler (and write to its wake pipe) inside the child.
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGCHLD}) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // A worker that dies without stopping its trials (SIGKILL) takes the
    // trial's shell with it; the host re-offers the trial elsewhere anyway.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) _exit(127);
    if (::dup2(null_fd.get(), 0) < 0 || ::dup2(out_fd.get(), 1) < 0 ||
        ::dup2(err_fd.get(), 2) < 0) {
      _exit(127);
    }
    // dup2 onto a different number leaves the copy without close-on-exec.
    const int moved = write_end.get() == kMetricFd ? ::fcntl(kMetricFd, F_SETFD, 0)
                                                   : ::dup2(write_end.get(), kMetricFd);
    if (moved < 0) _exit(127);
    if (::chdir(cwd) != 0) {
      WriteStderr("tunehost-worker: cannot change to the trial's working directory\n");
      _exit(127);
    }
    ::execve("/bin/sh", const_cast<char* const*>(argv), envp.data());
    WriteStderr("tunehost-worker: cannot execute /bin/sh\n");
    _exit(127);
  }
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) return Status::Internal(Errno("fork"));
  // Also set here: whichever of parent and child runs first, the group exists
  // before anyone signals it.
  ::setpgid(pid, pid);
  p->pid_ = pid;
  p->metric_fd_ = read_end.release();
  ::fcntl(p->metric_fd_, F_SETFL, ::fcntl(p->metric_fd_, F_GETFL) | O_NONBLOCK);
  *out = std::move(p);
  return Status::Ok();
}

TrialProcess::~TrialProcess() {
  if (!exited_ && pid_ > 0) {
    ::killpg(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  CloseMetricPipe();
}

void TrialProcess::CloseMetricPipe() {
  if (metric_fd_ >= 0) ::close(metric_fd_);
  metric_fd_ = -1;
}

void TrialProcess::ReadMetrics(std::vector<std::string>* lines, size_t* overlong) {
  char buf[65536];
  // Bounded so one chatty trial cannot starve the poll loop.
  for (int i = 0; i < 16 && metric_fd_ >= 0; ++i) {
    const ssize_t n = ::read(metric_fd_, buf, sizeof buf);
    if (n > 0) {
      splitter_.Feed(std::string_view(buf, static_cast<size_t>(n)), lines, overlong);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    splitter_.Finish(lines, overlong);
    CloseMetricPipe();
  }
}

bool TrialProcess::Reap(std::vector<std::string>* lines, size_t* overlong) {
  if (exited_) return true;
  int status = 0;
  const pid_t rc = ::waitpid(pid_, &status, WNOHANG);
  if (rc == 0 || (rc < 0 && errno == EINTR)) return false;
  exited_ = true;
  wait_status_ = rc == pid_ ? status : (127 << 8);
  // Whatever the child wrote before it exited is in the pipe now. A
  // background process that still holds the write end is not waited for.
  while (metric_fd_ >= 0) {
    char buf[65536];
    const ssize_t n = ::read(metric_fd_, buf, sizeof buf);
    if (n > 0) {
      splitter_.Feed(std::string_view(buf, static_cast<size_t>(n)), lines, overlong);
    } else if (!(n < 0 && errno == EINTR)) {
      splitter_.Finish(lines, overlong);
      CloseMetricPipe();
    }
  }
  stderr_tail_ = SanitizeUtf8(ReadTail(dir_ + "/stderr.log", kStderrTailBytes));
  return true;
}

std::string TrialProcess::ExitDescription() const {
  if (WIFSIGNALED(wait_status_))
    return "killed by signal " + std::to_string(WTERMSIG(wait_status_));
  return "exit code " + std::to_string(WEXITSTATUS(wait_status_));
}

void TrialProcess::SignalGroup(int sig) {
  // The unreaped leader keeps the group id from being reused.
  if (!exited_ && pid_ > 0) ::killpg(pid_, sig);
}

}  // namespace tunehost::worker
