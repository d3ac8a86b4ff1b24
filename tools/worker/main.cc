// tunehost-worker: connects to a tunehost host and runs each offered trial as
// `/bin/sh -c COMMAND`. Options and the trial interface: README.md.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <vector>

#include "worker.h"

namespace {

int g_wake_write_fd = -1;

void OnSignal(int sig) {
  const int saved = errno;
  const char c = (sig == SIGTERM || sig == SIGINT) ? 'T' : 'C';
  ssize_t ignored = ::write(g_wake_write_fd, &c, 1);
  (void)ignored;
  errno = saved;
}

// The self-pipe turns signals into a readable fd for the poll loop.
int InstallSignalPipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  g_wake_write_fd = fds[1];
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &sa, nullptr);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, nullptr);
  return fds[0];
}

// Children get fds 0-2 replaced; the worker itself needs them open so that no
// pipe or file of ours lands on a standard descriptor number. Descriptors the
// worker inherited beyond those are made close-on-exec, so a trial inherits
// nothing but stdio and its metric pipe. Runs before any thread exists.
void PrepareFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
  std::error_code ec;
  std::vector<int> inherited;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") == std::string::npos) {
      inherited.push_back(std::stoi(name));
    }
  }
  for (int fd : inherited) {
    if (fd > 2) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
}

std::string DefaultId() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
    std::snprintf(host, 8, "worker");
  std::random_device rd;
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%04x", static_cast<unsigned>(rd() & 0xffff));
  return std::string(host) + "-" + std::to_string(::getpid()) + "-" + suffix;
}

std::string DefaultWorkdir() {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/tunehost-worker";
}

// tunehost's Python package and NNI's name for its trial API, so an NNI
// trial script's `import nni` works unchanged (tools/python/nni_compat).
std::string DefaultPythonPath() {
#ifdef TH_PYTHON_DIR
  std::error_code ec;
  const std::filesystem::path dir = TH_PYTHON_DIR;
  if (std::filesystem::is_directory(dir / "nni_compat", ec)) {
    return (dir / "nni_compat").string() + ":" + dir.string();
  }
#endif
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  PrepareFds();
  namespace fs = std::filesystem;
  using std::chrono::milliseconds;

  CLI::App app{"tunehost-worker: runs tunehost trials as shell commands"};
  std::string command, host = "127.0.0.1", jobs, results, events, id, workdir, cwd;
  std::string log_level = "info";
  uint32_t slots = 1, gpus = 0;
  int64_t heartbeat_ms = 1000, ack_timeout_ms = 1000, kill_grace_ms = 5000, max_idle_ms = 0;
  int64_t orphan_timeout_ms = 0;
  int64_t host_pid = 0;
  std::string ack_log, key_file, server_key_file, gpu_indices;
  uint32_t gpus_per_trial = 0;
  size_t max_result_bytes = tunehost::protocol::kDefaultMaxResultBytes;
  // A repeated option overrides the earlier one, as wrappers appending flags expect.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--command", command, "trial command, run as /bin/sh -c COMMAND")->required();
  app.add_option("--host", host, "host address for the default endpoints")->capture_default_str();
  app.add_option("--jobs", jobs, "jobs endpoint (default tcp://HOST:5651)");
  app.add_option("--results", results, "results endpoint (default tcp://HOST:5652)");
  app.add_option("--events", events, "events endpoint (default tcp://HOST:5653)");
  app.add_option("--slots", slots, "trials run at once")
      ->check(CLI::Range(1u, 1u << 16))
      ->capture_default_str();
  app.add_option("--id", id, "worker id (default HOSTNAME-PID-RANDOM)");
  app.add_option("--gpus", gpus, "GPUs announced to the host (default: the --gpu-indices)")
      ->capture_default_str();
  app.add_option("--gpu-indices", gpu_indices,
                 "GPUs this worker gives its trials (\"0,1,3\"): each trial gets "
                 "--gpus-per-trial of them, unused by its other trials, as CUDA_VISIBLE_DEVICES");
  app.add_option("--gpus-per-trial", gpus_per_trial,
                 "GPUs per trial with --gpu-indices (default: the indices shared by the slots)")
      ->check(CLI::Range(1u, 1024u));
  app.add_option("--workdir", workdir,
                 "trial directories go below it (default $TMPDIR/tunehost-worker)");
  app.add_option("--cwd", cwd, "working directory of trial commands (default: current)");
  std::string python_path = DefaultPythonPath();
  app.add_option("--python-path", python_path,
                 "directories put before trials' PYTHONPATH, ':'-separated; \"\" for none")
      ->capture_default_str();
  app.add_option("--heartbeat-ms", heartbeat_ms, "heartbeat interval")
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}))
      ->capture_default_str();
  app.add_option("--ack-timeout-ms", ack_timeout_ms, "metric resend interval until acknowledged")
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}))
      ->capture_default_str();
  app.add_option("--max-result-bytes", max_result_bytes,
                 "the host's results limit (its --max-result-bytes): larger results are skipped")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 31))
      ->capture_default_str();
  app.add_option("--kill-grace-ms", kill_grace_ms, "SIGTERM to SIGKILL delay when stopping a trial")
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}))
      ->capture_default_str();
  app.add_option("--max-idle-ms", max_idle_ms, "exit after this long without trials (0 = never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--orphan-timeout-ms", orphan_timeout_ms,
                 "when the process that started the worker exits: take no new trials, finish "
                 "the running ones for a host that re-attaches them, exit when done, or after "
                 "this long if no host asks for them (0 = off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--host-pid", host_pid,
                 "for --orphan-timeout-ms: the parent process whose exit makes this worker an "
                 "orphan (default: the parent at start)")
      ->check(CLI::PositiveNumber);
  app.add_option("--ack-log", ack_log,
                 "append one line per acknowledged result to this file: trial attempt sequence "
                 "type value worker (what the host said it stored; tools/soak)");
  app.add_option("--key", key_file,
                 "this worker's key pair (a .key_secret file, 0600) for a host that "
                 "authenticates")
      ->envname("TUNEHOST_KEY");
  app.add_option("--server-key", server_key_file, "the host's public key (a .key file)")
      ->envname("TUNEHOST_SERVER_KEY");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto logger = spdlog::stderr_color_mt("tunehost-worker");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));

  tunehost::worker::WorkerOptions options;
  options.command = command;
  options.jobs_endpoint = jobs.empty() ? "tcp://" + host + ":5651" : jobs;
  options.results_endpoint = results.empty() ? "tcp://" + host + ":5652" : results;
  options.events_endpoint = events.empty() ? "tcp://" + host + ":5653" : events;
  options.id = id.empty() ? DefaultId() : id;
  options.slots = slots;
  options.gpus = gpus;
  std::error_code ec;
  options.workdir = fs::absolute(workdir.empty() ? DefaultWorkdir() : workdir, ec).string();
  options.cwd = cwd.empty() ? fs::current_path(ec).string() : fs::absolute(cwd, ec).string();
  if (ec) {
    spdlog::critical("cannot resolve the work or trial directory: {}", ec.message());
    return 2;
  }
  options.heartbeat = milliseconds(heartbeat_ms);
  options.ack_timeout = milliseconds(ack_timeout_ms);
  options.max_result_bytes = max_result_bytes;
  options.kill_grace = milliseconds(kill_grace_ms);
  options.max_idle = milliseconds(max_idle_ms);
  options.orphan_timeout = milliseconds(orphan_timeout_ms);
  options.host_pid = static_cast<pid_t>(host_pid);
  options.ack_log = ack_log;
  options.python_path = python_path;
  if (!gpu_indices.empty()) {
    std::stringstream in(gpu_indices);
    std::string part;
    while (std::getline(in, part, ',')) {
      char* end = nullptr;
      const long g = std::strtol(part.c_str(), &end, 10);
      if (part.empty() || *end != '\0' || g < 0 || g > 1023 ||
          std::find(options.gpu_indices.begin(), options.gpu_indices.end(), g) !=
              options.gpu_indices.end()) {
        spdlog::critical("--gpu-indices {}: '{}' is not a new GPU index (0-1023)", gpu_indices,
                         part);
        return 2;
      }
      options.gpu_indices.push_back(static_cast<int>(g));
    }
    const uint32_t n = static_cast<uint32_t>(options.gpu_indices.size());
    options.gpus_per_trial = gpus_per_trial != 0 ? gpus_per_trial : std::max(1u, n / slots);
    if (options.gpus_per_trial > n) {
      spdlog::critical("--gpus-per-trial {} is more than the {} GPU(s) of --gpu-indices",
                       options.gpus_per_trial, n);
      return 2;
    }
    if (gpus == 0) options.gpus = n;
  }
  if (tunehost::Status st =
          tunehost::protocol::LoadClientKeys(key_file, server_key_file, &options.keys);
      !st.ok()) {
    spdlog::critical("{}", st.message());
    return 2;
  }

  const int wake_fd = InstallSignalPipe();
  if (wake_fd < 0) {
    spdlog::critical("cannot create the signal pipe");
    return 2;
  }
  try {
    tunehost::worker::Worker worker(std::move(options), wake_fd);
    return worker.Run();
  } catch (const std::exception& e) {
    spdlog::critical("fatal: {}", e.what());
    return 2;
  }
}
