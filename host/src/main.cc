// The tunehost command line: `serve` (a host for remote workers and clients),
// `run` (one experiment from a YAML file with local workers), `resume` and
// `view` (a stored experiment), `plugins`.
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <cerrno>
#include <cstring>
#include <sys/wait.h>
#include <fcntl.h>
#include <spdlog/fmt/fmt.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tunehost/host/control_queries.h"
#include "tunehost/host/experiment_config.h"
#include "tunehost/host/local_workers.h"
#include "tunehost/host/plugin.h"
#include "tunehost/host/server.h"
#include "tunehost/host/store.h"
#include "tunehost/protocol/messages.h"
#include "tunehost/sdk/version.h"

namespace tunehost::host {
namespace {

namespace fs = std::filesystem;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;  // experiment ERROR or stopped, runtime failure
constexpr int kExitUsage = 2;   // bad command line or experiment file

constexpr char kVersion[] = TH_HOST_VERSION;

// --- signals: the handler only calls Server::Stop, which is signal-safe ---

std::atomic<Server*> g_server{nullptr};
volatile sig_atomic_t g_stop_requested = 0;
// A plugin call never returned: the process ends with _exit (no static
// destructors run under a thread that is still inside the plugin).
bool g_plugin_abandoned = false;
static_assert(std::atomic<Server*>::is_always_lock_free, "read from a signal handler");

extern "C" void HandleStopSignal(int sig) {
  g_stop_requested = 1;
  if (Server* s = g_server.load()) s->Stop();
  // A second signal of the same kind ends the process at once.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
}

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = HandleStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// Registers the server with the handler; a signal that came earlier stops it
// as soon as it is known.
class StopOnSignal {
 public:
  explicit StopOnSignal(Server* server) {
    g_server.store(server);
    if (g_stop_requested) server->Stop();
  }
  ~StopOnSignal() { g_server.store(nullptr); }
};

// --- file descriptors: every connection is one (wire-format.md §1.1) ---

constexpr rlim_t kMaxFileLimit = rlim_t{1} << 20;
// Descriptors kept for the store, plugins, local workers' pipes and logs.
constexpr size_t kReservedFiles = 256;
constexpr size_t kMaxConnectionsPerSocket = 4096;

// Raises the soft limit on open files to the hard one and returns it.
size_t RaiseFileLimit() {
  struct rlimit rl {};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  const rlim_t wanted = std::min(rl.rlim_max, kMaxFileLimit);
  if (rl.rlim_cur < wanted) {
    struct rlimit raised = rl;
    raised.rlim_cur = wanted;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return static_cast<size_t>(std::min(rl.rlim_cur, kMaxFileLimit));
}

// Connections each of the four sockets admits: the file limit shared out,
// so a flood on one socket cannot take the descriptors the control socket
// needs to keep answering.
size_t ConnectionsPerSocket(size_t file_limit) {
  const size_t usable = file_limit > kReservedFiles + 64 ? file_limit - kReservedFiles : 64;
  const size_t share = std::min(usable / 4, kMaxConnectionsPerSocket);
  if (share < 256) {
    spdlog::warn("open-file limit {} allows only {} connections per socket; raise it (ulimit "
                 "-n) for more workers",
                 file_limit, share);
  }
  return share;
}

// --- shared options ---

std::string VersionText() {
  return fmt::format("tunehost {} (plugin ABI {}.{}.{})", kVersion, TH_VERSION_MAJOR,
                     TH_VERSION_MINOR, TH_VERSION_REVISION);
}

void AddLogLevel(CLI::App* cmd, std::string* level) {
  cmd->add_option("--log-level", *level, "log level: trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
}

void SetUpLogging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("tunehost");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_level(spdlog::level::from_str(level));
}

fs::path ExeDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path(ec) : self.parent_path();
}

// The build tree's plugin folder when this binary was built there and it
// still exists; otherwise the installed layout <prefix>/lib/tunehost/plugins.
fs::path DefaultPluginDir() {
#ifdef TH_DEFAULT_PLUGIN_DIR
  std::error_code ec;
  if (fs::is_directory(TH_DEFAULT_PLUGIN_DIR, ec)) return TH_DEFAULT_PLUGIN_DIR;
#endif
  return (ExeDir() / ".." / "lib" / "tunehost" / "plugins").lexically_normal();
}

void AddPluginDir(CLI::App* cmd, std::string* dir) {
  cmd->add_option("--plugins", *dir,
                  "plugin directory (default: " + DefaultPluginDir().string() + ")");
}

// Loads every plugin of `dir`, logging each plugin (the registry logs each
// refused file itself). Returns the directory used.
fs::path LoadPlugins(PluginRegistry* registry, const std::string& dir_option) {
  fs::path dir = dir_option.empty() ? DefaultPluginDir() : fs::path(dir_option);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    spdlog::error("plugin directory {} does not exist", dir.string());
    return dir;
  }
  registry->LoadDirectory(dir);
  for (const PluginInfo& p : registry->plugins()) {
    spdlog::info("plugin {} {} ({} {}) from {}", p.kind, p.name, p.id, p.version, p.file.string());
  }
  if (registry->plugins().empty()) spdlog::warn("no plugins loaded from {}", dir.string());
  return dir;
}

std::optional<PluginInfo> FindPlugin(const PluginRegistry& registry, const std::string& kind,
                                     const std::string& name_or_id) {
  for (const PluginInfo& p : registry.plugins()) {
    if (p.kind == kind && (p.name == name_or_id || p.id == name_or_id)) return p;
  }
  return std::nullopt;
}

// --- tunehost plugins ---

int CmdPlugins(const std::string& dir) {
  PluginRegistry registry;
  LoadPlugins(&registry, dir);
  std::vector<PluginInfo> plugins = registry.plugins();
  std::printf("%-9s %-16s %-32s %-9s %s\n", "KIND", "NAME", "ID", "VERSION", "FILE");
  for (const PluginInfo& p : plugins) {
    std::printf("%-9s %-16s %-32s %-9s %s\n", p.kind.c_str(), p.name.c_str(), p.id.c_str(),
                p.version.c_str(), p.file.string().c_str());
  }
  if (!registry.errors().empty()) {
    std::printf("\nrefused:\n");
    for (const std::string& e : registry.errors()) std::printf("  %s\n", e.c_str());
  }
  return kExitOk;
}

// --- tunehost serve ---

struct ServeArgs {
  std::string plugins;
  Endpoints endpoints;
  size_t max_message_bytes = protocol::kDefaultMaxMessageBytes;
  int64_t heartbeat_ms = 1000;
  int64_t ack_timeout_ms = 2000;
  size_t max_connections = 0;  // 0: from the open-file limit
};

int CmdServe(const ServeArgs& args) {
  PluginRegistry registry;
  LoadPlugins(&registry, args.plugins);
  ServerOptions options;
  options.endpoints = args.endpoints;
  options.max_message_bytes = args.max_message_bytes;
  options.heartbeat_interval = std::chrono::milliseconds(args.heartbeat_ms);
  options.ack_timeout = std::chrono::milliseconds(args.ack_timeout_ms);
  const size_t file_limit = RaiseFileLimit();
  options.max_connections =
      args.max_connections != 0 ? args.max_connections : ConnectionsPerSocket(file_limit);
  Server server(options, &registry);
  Status st = server.Bind();
  if (!st.ok()) {
    spdlog::error("{}", st.message());
    return kExitFailed;
  }
  StopOnSignal stop(&server);
  st = server.Run();
  g_plugin_abandoned = server.abandoned_plugin();
  if (!st.ok()) {
    spdlog::error("{}", st.message());
    return kExitFailed;
  }
  return kExitOk;
}

// --- tunehost run ---

struct RunArgs {
  std::string experiment;
  std::string id;       // run: --id; resume: the experiment
  std::string workdir;  // resume: where experiments live
  int64_t reattach_grace_ms = 5000;
  int local_workers = -1;  // -1: trialConcurrency
  bool detach = false;
  std::string plugins;
  std::string worker_bin;
  int port_base = 0;  // 0: free ports
  std::string summary_json;
  std::string log_level = "info";
};

std::string FormatDuration(double seconds) {
  if (seconds <= 0) return "unlimited";
  if (std::fmod(seconds, 86400) == 0) return fmt::format("{}d", seconds / 86400);
  if (std::fmod(seconds, 3600) == 0) return fmt::format("{}h", seconds / 3600);
  if (std::fmod(seconds, 60) == 0) return fmt::format("{}m", seconds / 60);
  return fmt::format("{}s", seconds);
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string FormatMetric(const std::optional<double>& m) {
  return m ? fmt::format("{:.4f}", *m) : std::string("-");
}

// The terminal trials with a metric, best first.
std::vector<const TrialSummary*> BestTrials(const ExperimentSummary& s, bool maximize, size_t n) {
  std::vector<const TrialSummary*> ranked;
  for (const TrialSummary& t : s.trials) {
    if (t.status == protocol::TrialStatus::kSucceeded && t.final_metric &&
        !std::isnan(*t.final_metric)) {
      ranked.push_back(&t);
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(), [maximize](auto* a, auto* b) {
    return maximize ? *a->final_metric > *b->final_metric : *a->final_metric < *b->final_metric;
  });
  if (ranked.size() > n) ranked.resize(n);
  return ranked;
}

// A JSON text held as a string (parameters, metric values) as a JSON value;
// null when empty or unparsable.
nlohmann::ordered_json JsonValue(const std::string& text) {
  if (text.empty()) return nullptr;
  nlohmann::ordered_json v = nlohmann::ordered_json::parse(text, nullptr, false);
  return v.is_discarded() ? nlohmann::ordered_json() : v;
}

nlohmann::ordered_json JsonNumber(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
}

// Machine-readable run summary (--summary-json), for scripts and tests.
bool WriteSummaryJson(const fs::path& file, const ExperimentSummary& s, const std::string& name,
                      const std::string& optimize_mode, bool maximize) {
  using Json = nlohmann::ordered_json;
  Json trials = Json::array();
  for (const TrialSummary& t : s.trials) {
    trials.push_back({{"sequence_id", t.sequence_id},
                      {"trial_id", t.trial_id},
                      {"status", protocol::ToString(t.status)},
                      {"final_metric", t.final_metric ? JsonNumber(*t.final_metric) : Json()},
                      {"final_result", JsonValue(t.final_metric_json)},
                      {"parameters", JsonValue(t.parameters_json)},
                      {"attempts", t.attempts},
                      {"error", t.error},
                      {"duration_s", JsonNumber(t.duration_s)}});
  }
  Json best = Json::array();
  for (const TrialSummary* t : BestTrials(s, maximize, 5)) best.push_back(t->trial_id);
  Json j = {{"experiment_id", s.experiment_id},
            {"name", name},
            {"status", ToString(s.status)},
            {"error", s.error},
            {"optimize_mode", optimize_mode},
            {"offers", s.offers},
            {"rejects", s.rejects},
            {"reoffers", s.reoffers},
            {"trials", std::move(trials)},
            {"best", std::move(best)}};
  std::ofstream out(file, std::ios::trunc);
  // Replace invalid UTF-8 (trial error text is arbitrary bytes) instead of throwing.
  out << j.dump(1, ' ', false, Json::error_handler_t::replace) << "\n";
  return static_cast<bool>(out);
}

// The experiment directory's host.json: how tunectl and clients find a
// running host. Removed when the host exits normally.
class HostFile {
 public:
  HostFile(fs::path file, const std::string& id, const Endpoints& ep) : file_(std::move(file)) {
    nlohmann::ordered_json j = {{"experiment_id", id},     {"pid", static_cast<int>(getpid())},
                                {"control", ep.control}, {"jobs", ep.jobs},
                                {"results", ep.results}, {"events", ep.events}};
    fs::path tmp = file_;
    tmp += ".tmp";
    std::ofstream(tmp, std::ios::trunc) << j.dump(1) << "\n";
    std::error_code ec;
    fs::rename(tmp, file_, ec);
    if (ec) spdlog::warn("cannot write {}: {}", file_.string(), ec.message());
  }
  ~HostFile() {
    std::error_code ec;
    fs::remove(file_, ec);
  }

 private:
  fs::path file_;
};

// An exclusive lock on <dir>/lock for the host's lifetime: one host per
// experiment (two resumes of one store would run every trial twice). The
// lock belongs to the open file, so a --detach child keeps it.
class ExperimentLock {
 public:
  // `shared`: a view that serves the store read-only (tunectl then knows a
  // host answers for the experiment).
  bool Acquire(const fs::path& dir, const std::string& id, bool shared = false) {
    fd_ = open((dir / "lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0 && flock(fd_, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) == 0) return true;
    std::fprintf(stderr, "tunehost: experiment %s is in use by another tunehost process%s\n",
                 id.c_str(), fd_ < 0 ? (std::string(" (") + std::strerror(errno) + ")").c_str()
                                     : "");
    return false;
  }
  ~ExperimentLock() {
    if (fd_ >= 0) close(fd_);
  }

 private:
  int fd_ = -1;
};

// Whether a host process holds the experiment's lock right now.
bool HostHoldsLock(const fs::path& dir) {
  int fd = open((dir / "lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // Exclusive: a run or resume host holds it exclusively, a serving view shared.
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

// A stored status no host would leave behind: the host died mid-run.
bool UnfinishedStatus(const std::string& status) {
  return status != "DONE" && status != "STOPPED" && status != "ERROR" && status != "UNKNOWN";
}

// The pid in a host.json whose process still runs, or 0.
int LiveHostPid(const fs::path& host_file) {
  std::ifstream in(host_file);
  if (!in) return 0;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("pid") || !j["pid"].is_number_integer()) return 0;
  int pid = j["pid"].get<int>();
  return pid > 0 && pid != getpid() && kill(pid, 0) == 0 ? pid : 0;
}

bool ReadText(const fs::path& file, std::string* out) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

Endpoints FreeLoopbackEndpoints() {
  return {"tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"};
}

// --port-base N: control, jobs, results, events on 127.0.0.1:N..N+3.
bool PortBaseEndpoints(int base, Endpoints* out) {
  if (base < 1 || base > 65535 - 3) {
    std::fprintf(stderr, "tunehost: --port-base %d leaves no room for 4 ports\n", base);
    return false;
  }
  auto ep = [base](int i) { return fmt::format("tcp://127.0.0.1:{}", base + i); };
  *out = {ep(0), ep(1), ep(2), ep(3)};
  return true;
}

std::string StoredEndpoint(const Store& store, const char* name) {
  return store.Meta(std::string("endpoint.") + name).value_or("");
}

void PrintBestTrials(const ExperimentSummary& summary, bool maximize, const std::string& mode) {
  std::vector<const TrialSummary*> best = BestTrials(summary, maximize, 5);
  if (best.empty()) {
    std::printf("no succeeded trial with a metric\n");
    return;
  }
  std::printf("\nbest trials (%s):\n", mode.c_str());
  std::printf("%-4s %-5s %-14s %10s  %s\n", "rank", "seq", "trial", "metric", "parameters");
  for (size_t i = 0; i < best.size(); ++i) {
    const TrialSummary& t = *best[i];
    std::printf("%-4zu %-5llu %-14s %10s  %s\n", i + 1,
                static_cast<unsigned long long>(t.sequence_id), t.trial_id.c_str(),
                FormatMetric(t.final_metric).c_str(), t.parameters_json.c_str());
  }
}

// Live progress of `run`/`resume`: trials done/total, running, failed, best
// so far, elapsed and ETA. On a terminal one status line is redrawn in place
// under the trial lines; otherwise a plain status line every 30 seconds.
class Progress {
 public:
  Progress(bool maximize, bool tty) : maximize_(maximize), tty_(tty) {}

  void Ended(const TrialSummary& t) {
    if (t.status == protocol::TrialStatus::kSucceeded && t.final_metric &&
        std::isfinite(*t.final_metric) &&
        (!best_ || (maximize_ ? *t.final_metric > *best_ : *t.final_metric < *best_))) {
      best_ = t.final_metric;
    }
  }

  // A line that stays (a trial ended), then the status line as it is now.
  void Line(const std::string& text, const ProgressInfo& now) {
    status_ = Format(now);
    std::printf("%s%s\n", tty_ ? "\r\033[K" : "", text.c_str());
    if (tty_) std::printf("%s", status_.c_str());
    std::fflush(stdout);
  }

  void Tick(const ProgressInfo& p) {
    status_ = Format(p);
    if (tty_) {
      std::printf("\r\033[K%s", status_.c_str());
    } else if (p.elapsed_s - printed_at_s_ >= 30) {
      printed_at_s_ = p.elapsed_s;
      std::printf("%s\n", status_.c_str());
    } else {
      return;
    }
    std::fflush(stdout);
  }

  void Done() {
    if (tty_ && !status_.empty()) std::printf("\r\033[K");
    std::fflush(stdout);
  }

 private:
  static uint64_t Count(const ProgressInfo& p, const char* status) {
    auto it = p.counts.find(status);
    return it == p.counts.end() ? 0 : it->second;
  }

  static std::string Clock(double seconds) {
    auto s = static_cast<long long>(seconds);
    return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  }

  std::string Format(const ProgressInfo& p) const {
    const uint64_t max_trials_ = p.max_trials;
    const double max_duration_s_ = p.max_duration_s;
    uint64_t ended = 0;
    for (const char* s :
         {"SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED", "EARLY_STOPPED"}) {
      ended += Count(p, s);
    }
    std::string eta = "-";
    double left = -1;
    if (max_trials_ > 0 && ended > 0 && ended < max_trials_) {
      left = p.elapsed_s / static_cast<double>(ended) * static_cast<double>(max_trials_ - ended);
    }
    if (max_duration_s_ > 0) {
      double by_time = std::max(0.0, max_duration_s_ - p.elapsed_s);
      left = left < 0 ? by_time : std::min(left, by_time);
    }
    if (left >= 0) eta = Clock(left);
    return fmt::format("{} | trials {}/{} | running {} | waiting {} | failed {} | best {} | "
                       "elapsed {} | eta {}",
                       ToString(p.status), ended,
                       max_trials_ ? std::to_string(max_trials_) : std::string("-"),
                       Count(p, "RUNNING"), Count(p, "WAITING"), Count(p, "FAILED"),
                       FormatMetric(best_), Clock(p.elapsed_s), eta);
  }

  bool maximize_;
  bool tty_;
  std::optional<double> best_;
  std::string status_;
  double printed_at_s_ = 0;
};

// `run` and `resume` once the experiment, its directory and its store are
// known.
int RunExperiment(const RunArgs& args, ExperimentConfig config, const fs::path& experiment_dir,
                  Store* store, bool resume) {
  fs::path worker_binary;
  Status st = FindWorkerBinary(args.worker_bin, &worker_binary);
  if (!st.ok() && args.local_workers != 0) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitUsage;
  }

  PluginRegistry registry;
  const fs::path plugin_dir = LoadPlugins(&registry, args.plugins);

  ServerOptions options;
  options.endpoints = FreeLoopbackEndpoints();
  if (args.port_base != 0) {
    if (!PortBaseEndpoints(args.port_base, &options.endpoints)) return kExitUsage;
  } else if (resume && !StoredEndpoint(*store, "control").empty()) {
    // The same endpoints as before, so workers that outlived the old host
    // reconnect to this one and re-attach their trials.
    options.endpoints = {StoredEndpoint(*store, "control"), StoredEndpoint(*store, "jobs"),
                         StoredEndpoint(*store, "results"), StoredEndpoint(*store, "events")};
  }
  if (config.timing.heartbeat_interval) {
    options.heartbeat_interval = *config.timing.heartbeat_interval;
  }
  if (config.timing.ack_timeout) options.ack_timeout = *config.timing.ack_timeout;
  if (config.timing.max_message_bytes) {
    options.max_message_bytes = *config.timing.max_message_bytes;
  }
  options.exit_when_finished = true;
  options.deduplicate = config.timing.deduplicate.value_or(false);
  options.max_connections = ConnectionsPerSocket(RaiseFileLimit());
  if (config.timing.plugin_call_timeout) {
    options.plugin_call_timeout = *config.timing.plugin_call_timeout;
  }

  auto server = std::make_unique<Server>(options, &registry);
  st = server->Bind();
  if (!st.ok() && resume && args.port_base == 0) {
    spdlog::warn("{}; binding free ports instead (workers of the old host cannot re-attach)",
                 st.message());
    options.endpoints = FreeLoopbackEndpoints();
    server = std::make_unique<Server>(options, &registry);
    st = server->Bind();
  }
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  StopOnSignal stop(server.get());
  // However this returns, note a plugin call that never returned (Main then
  // leaves with _exit).
  struct AbandonedCheck {
    Server* server;
    ~AbandonedCheck() { g_plugin_abandoned = g_plugin_abandoned || server->abandoned_plugin(); }
  } abandoned_check{server.get()};
  const Endpoints& bound = server->bound();
  store->SetMeta("endpoint.control", bound.control);
  store->SetMeta("endpoint.jobs", bound.jobs);
  store->SetMeta("endpoint.results", bound.results);
  store->SetMeta("endpoint.events", bound.events);
  store->SetMeta("concurrency", static_cast<double>(config.spec.concurrency));
  store->SetMeta("max_trials", static_cast<double>(config.spec.max_trials));
  store->SetMeta("max_duration_s", config.spec.max_duration_s);
  st = store->Commit();
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  server->UseStore(store);
  st = server->Configure(config.spec, config.search_space);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s: %s\n", config.source_file.string().c_str(),
                 st.ToString().c_str());
    return kExitUsage;
  }
  if (resume) {
    st = server->Restore(std::chrono::milliseconds(args.reattach_grace_ms));
    if (!st.ok()) {
      std::fprintf(stderr, "tunehost: resume %s: %s\n", config.spec.id.c_str(),
                   st.ToString().c_str());
      return kExitFailed;
    }
  }
  HostFile host_file(experiment_dir / "host.json", config.spec.id, bound);

  bool mode_from_config = false;
  const std::string mode = OptimizeModeOf(config.spec.tuner.args, &mode_from_config);
  const bool maximize = mode == "maximize";

  // Trials land in <working dir>/<id>/trials/ (the worker adds the id, as NNI
  // lays out ~/nni-experiments/<id>/trials/); worker logs in <id>/log/.
  LocalWorkersOptions wo;
  wo.worker_binary = worker_binary;
  wo.count = args.local_workers >= 0 ? static_cast<size_t>(args.local_workers)
                                     : std::min<size_t>(config.spec.concurrency, kMaxLocalWorkers);
  if (args.local_workers < 0 && config.spec.concurrency > kMaxLocalWorkers) {
    std::fprintf(stderr,
                 "tunehost: trialConcurrency %u: starting %zu local workers (the most one host "
                 "starts); attach more with tunehost-worker\n",
                 config.spec.concurrency, kMaxLocalWorkers);
  }
  wo.jobs = bound.jobs;
  wo.results = bound.results;
  wo.events = bound.events;
  wo.command = config.trial_command;
  wo.cwd = config.trial_code_dir;
  wo.workdir = experiment_dir.parent_path();
  wo.heartbeat_interval = options.heartbeat_interval;
  wo.log_dir = experiment_dir / "log";
  // Trials get SIGKILL well before the supervisor would kill their worker.
  // Workers outlive a host that is killed: they finish their trials for the
  // resumed host (which re-attaches them) and exit; ids are unique per host
  // process so they never clash with the resumed host's own workers.
  wo.extra_args = {"--log-level", args.log_level, "--kill-grace-ms", "2000",
                   "--orphan-timeout-ms", "600000", "--host-pid", std::to_string(getpid())};
  wo.outlive_host = true;
  wo.id_prefix = fmt::format("local-{}-", getpid());
  LocalWorkers workers(wo);

  auto plugin_text = [&](const std::string& kind, const protocol::PluginSpec& spec) {
    std::optional<PluginInfo> p = FindPlugin(registry, kind, spec.name);
    return p ? fmt::format("{} ({} {}, {})", p->name, p->id, p->version, p->file.string())
             : spec.name;
  };
  const size_t restored = server->Summary().trials.size();
  std::printf("%s\n", VersionText().c_str());
  std::printf("experiment   %s%s%s\n", config.spec.id.c_str(),
              config.name.empty() ? "" : (" \"" + config.name + "\"").c_str(),
              resume ? fmt::format(" (resumed: {} trial(s) already ended)", restored).c_str()
                     : "");
  std::printf("config       %s\n", config.source_file.string().c_str());
  std::printf("tuner        %s\n", plugin_text("tuner", config.spec.tuner).c_str());
  if (config.spec.assessor) {
    std::printf("assessor     %s\n", plugin_text("assessor", *config.spec.assessor).c_str());
  }
  std::printf("trials       %s, %u at a time, max duration %s\n",
              config.spec.max_trials ? std::to_string(config.spec.max_trials).c_str() : "unlimited",
              config.spec.concurrency, FormatDuration(config.spec.max_duration_s).c_str());
  std::printf("plugins      %s (%zu loaded, %zu refused)\n", plugin_dir.string().c_str(),
              registry.plugins().size(), registry.errors().size());
  if (wo.count > 0) {
    std::printf("workers      %zu x %s\n", wo.count, worker_binary.string().c_str());
  } else {
    std::printf("workers      none started: attach workers to the endpoints below\n");
  }
  std::printf("optimize     %s (%s)\n", mode.c_str(),
              mode_from_config ? "tuner classArgs optimize_mode"
                               : "default: no optimize_mode in tuner classArgs");
  std::printf("command      %s  (in %s)\n", config.trial_command.c_str(),
              config.trial_code_dir.string().c_str());
  std::printf("directory    %s\n", experiment_dir.string().c_str());
  std::printf("store        %s\n", store->file().string().c_str());
  std::printf("endpoints    control %s  jobs %s  results %s  events %s\n", bound.control.c_str(),
              bound.jobs.c_str(), bound.results.c_str(), bound.events.c_str());
  std::printf("\n");
  std::fflush(stdout);

  const std::string total =
      config.spec.max_trials ? std::to_string(config.spec.max_trials) : std::string("-");
  size_t finished = restored;
  Progress progress(maximize, isatty(STDOUT_FILENO) == 1);
  for (const TrialSummary& t : server->Summary().trials) progress.Ended(t);
  server->OnTrialEnd([&](const TrialSummary& t) {
    ++finished;
    progress.Ended(t);
    std::string line = fmt::format("[{:>4}/{}] #{:<4} {:<8} {:<14} metric {:>10}  {}", finished,
                                   total, t.sequence_id, t.trial_id, protocol::ToString(t.status),
                                   FormatMetric(t.final_metric), t.parameters_json);
    if (t.status == protocol::TrialStatus::kFailed && !t.error.empty()) {
      line += "  error: " + FirstLine(t.error);
    }
    progress.Line(line, server->Progress());
  });
  server->OnTick([&] {
    const ProgressInfo now = server->Progress();
    progress.Tick(now);
    // One local worker per trial slot: a concurrency raised over the control
    // API (tunectl update) gets its workers.
    if (args.local_workers < 0) {
      workers.Grow(std::min<size_t>(now.concurrency, kMaxLocalWorkers));
    }
  });

  st = wo.count > 0 ? workers.Start() : Status::Ok();
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  Status run_status = server->Run();
  progress.Done();
  workers.Stop();

  const ExperimentSummary summary = server->Summary();
  std::printf("\nexperiment %s %s", summary.experiment_id.c_str(),
              std::string(ToString(summary.status)).c_str());
  if (!summary.error.empty()) std::printf(": %s", summary.error.c_str());
  std::printf(
      "\n%zu trial(s) ended; offers %llu, rejects %llu, reoffers %llu; worker respawns "
      "%zu\n",
      summary.trials.size(), static_cast<unsigned long long>(summary.offers),
      static_cast<unsigned long long>(summary.rejects),
      static_cast<unsigned long long>(summary.reoffers), workers.respawns());
  PrintBestTrials(summary, maximize, mode);
  std::printf("\nstore %s  (tunehost view %s / tunehost resume %s)\n",
              store->file().string().c_str(), summary.experiment_id.c_str(),
              summary.experiment_id.c_str());
  std::fflush(stdout);

  if (!args.summary_json.empty() &&
      !WriteSummaryJson(args.summary_json, summary, config.name, mode, maximize)) {
    spdlog::error("cannot write {}", args.summary_json);
  }
  if (!run_status.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", run_status.message().c_str());
    return kExitFailed;
  }
  return summary.status == ExperimentStatus::kDone ? kExitOk : kExitFailed;
}

// --detach: forks; the child becomes a session leader with its output in
// <dir>/host.log and goes on to run the experiment. The parent waits until
// the child wrote host.json (the host is serving) or died, prints where to
// find it and returns true with the exit code; the child gets false.
bool Detach(const fs::path& dir, const std::string& id, int* exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  const fs::path log = dir / "host.log";
  pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "tunehost: fork: %s\n", std::strerror(errno));
    *exit_code = kExitFailed;
    return true;
  }
  if (child == 0) {
    setsid();
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    return false;
  }
  const fs::path host_file = dir / "host.json";
  for (int i = 0; i < 600; ++i) {  // up to 60 s
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) {
      std::fprintf(stderr, "tunehost: the detached host exited at once (status %d); see %s\n",
                   WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                   log.c_str());
      *exit_code = kExitFailed;
      return true;
    }
    std::ifstream in(host_file);
    nlohmann::json j = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    if (j.is_object() && j.value("pid", 0) == child) {
      const std::string workdir = dir.parent_path() == DefaultWorkingDir()
                                      ? std::string()
                                      : " --workdir " + dir.parent_path().string();
      std::printf("experiment %s runs detached (pid %d)\ncontrol    %s\nlog        %s\n"
                  "follow it  tunectl --experiment %s%s status\n",
                  id.c_str(), static_cast<int>(child), j.value("control", "").c_str(),
                  log.c_str(), id.c_str(), workdir.c_str());
      *exit_code = kExitOk;
      return true;
    }
    usleep(100 * 1000);
  }
  std::fprintf(stderr, "tunehost: the detached host (pid %d) did not start serving within 60 s; "
               "see %s\n", static_cast<int>(child), log.c_str());
  *exit_code = kExitFailed;
  return true;
}

int CmdRun(const RunArgs& args) {
  ExperimentConfig config;
  Status st = LoadExperimentConfig(args.experiment, &config);
  std::string yaml;
  if (st.ok() && !ReadText(config.source_file, &yaml)) {
    st = Status::NotFound("cannot read " + config.source_file.string());
  }
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitUsage;
  }
  for (const std::string& w : config.warnings) spdlog::warn("{}", w);
  if (!args.id.empty()) {
    if (!ValidExperimentId(args.id)) {
      std::fprintf(stderr, "tunehost: --id '%s': use 1-64 of [A-Za-z0-9_-]\n", args.id.c_str());
      return kExitUsage;
    }
    config.spec.id = args.id;
  }
  const fs::path experiment_dir = config.working_dir / config.spec.id;
  std::error_code ec;
  if (fs::exists(experiment_dir / "store.db", ec)) {
    std::fprintf(stderr,
                 "tunehost: experiment %s already exists in %s: `tunehost resume %s` continues "
                 "it\n",
                 config.spec.id.c_str(), experiment_dir.string().c_str(), config.spec.id.c_str());
    return kExitUsage;
  }
  fs::create_directories(experiment_dir, ec);
  if (ec) {
    std::fprintf(stderr, "tunehost: %s: %s\n", experiment_dir.string().c_str(),
                 ec.message().c_str());
    return kExitFailed;
  }
  ExperimentLock lock;
  if (!lock.Acquire(experiment_dir, config.spec.id)) return kExitUsage;
  int detached_rc = 0;
  if (args.detach && Detach(experiment_dir, config.spec.id, &detached_rc)) return detached_rc;
  std::unique_ptr<Store> store;
  st = Store::Open(experiment_dir / "store.db", Store::Mode::kCreate, &store);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  store->SetConfig(config.source_file, yaml);
  store->SetMeta("experiment_id", config.spec.id);
  store->SetMeta("name", config.name);
  store->SetMeta("host_version", kVersion);
  return RunExperiment(args, std::move(config), experiment_dir, store.get(), /*resume=*/false);
}

// The stored experiment `id`: its directory, store and configuration (with
// the limits and search space it last had).
int OpenStored(const std::string& id, const std::string& workdir, Store::Mode mode,
               fs::path* dir, std::unique_ptr<Store>* store, ExperimentConfig* config) {
  if (!ValidExperimentId(id)) {
    std::fprintf(stderr, "tunehost: '%s' is not an experiment id\n", id.c_str());
    return kExitUsage;
  }
  *dir = (workdir.empty() ? DefaultWorkingDir() : fs::absolute(workdir)) / id;
  Status st = Store::Open(*dir / "store.db", mode, store);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: experiment %s: %s\n", id.c_str(), st.message().c_str());
    return st.code() == Status::Code::kNotFound ? kExitUsage : kExitFailed;
  }
  fs::path source;
  std::string yaml;
  st = (*store)->Config(&source, &yaml);
  if (st.ok()) st = ParseExperimentConfig(yaml, source, config);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: experiment %s: %s\n", id.c_str(), st.message().c_str());
    return kExitFailed;
  }
  config->spec.id = id;
  auto number = [&](const char* key, double fallback) {
    auto v = (*store)->Meta(key);
    return v ? std::strtod(v->c_str(), nullptr) : fallback;
  };
  config->spec.concurrency =
      static_cast<uint32_t>(number("concurrency", config->spec.concurrency));
  config->spec.max_trials = static_cast<uint64_t>(number("max_trials", config->spec.max_trials));
  config->spec.max_duration_s = number("max_duration_s", config->spec.max_duration_s);
  if (auto space = (*store)->LatestSearchSpace()) config->search_space = *space;
  return kExitOk;
}

int CmdResume(const RunArgs& args) {
  fs::path dir;
  std::unique_ptr<Store> store;
  ExperimentConfig config;
  int rc = OpenStored(args.id, args.workdir, Store::Mode::kOpen, &dir, &store, &config);
  if (rc != kExitOk) return rc;
  if (int pid = LiveHostPid(dir / "host.json")) {
    std::fprintf(stderr, "tunehost: experiment %s is running (host pid %d)\n", args.id.c_str(),
                 pid);
    return kExitUsage;
  }
  ExperimentLock lock;
  if (!lock.Acquire(dir, args.id)) return kExitUsage;
  for (const std::string& w : config.warnings) spdlog::warn("{}", w);
  int detached_rc = 0;
  if (args.detach) {
    store.reset();  // reopened by the child: no SQLite connection crosses a fork
    if (Detach(dir, args.id, &detached_rc)) return detached_rc;
    Status st = Store::Open(dir / "store.db", Store::Mode::kOpen, &store);
    if (!st.ok()) {
      std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
      return kExitFailed;
    }
  }
  return RunExperiment(args, std::move(config), dir, store.get(), /*resume=*/true);
}

struct ViewArgs {
  std::string id;
  std::string workdir;
  int port_base = 0;
  bool once = false;
};

int CmdView(const ViewArgs& args) {
  fs::path dir;
  std::unique_ptr<Store> store;
  ExperimentConfig config;
  int rc = OpenStored(args.id, args.workdir, Store::Mode::kReadOnly, &dir, &store, &config);
  if (rc != kExitOk) return rc;
  ServerOptions options;
  options.endpoints = FreeLoopbackEndpoints();
  if (args.port_base != 0 && !PortBaseEndpoints(args.port_base, &options.endpoints)) {
    return kExitUsage;
  }
  PluginRegistry registry;  // a viewed experiment runs no plugin
  Server server(options, &registry);
  Status st = server.View(config.spec, *store);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: view %s: %s\n", args.id.c_str(), st.message().c_str());
    return kExitFailed;
  }
  const std::string mode = OptimizeModeOf(config.spec.tuner.args);
  const ExperimentSummary summary = server.Summary();
  std::string stored_status = store->Meta("status").value_or("UNKNOWN");
  std::string error = store->Meta("error").value_or("");
  if (UnfinishedStatus(stored_status) && !HostHoldsLock(dir)) {
    // No host holds it, yet the store says it runs: its host died.
    error = "its host died while it was " + stored_status + "; `tunehost resume " + args.id +
            "` continues it";
    stored_status = "CRASHED";
  }
  std::printf("experiment %s%s: %s%s (viewed read-only)\n", args.id.c_str(),
              config.name.empty() ? "" : (" \"" + config.name + "\"").c_str(),
              stored_status.c_str(), error.empty() ? "" : (": " + error).c_str());
  std::map<std::string, size_t> counts;
  for (const TrialSummary& t : summary.trials) ++counts[std::string(protocol::ToString(t.status))];
  std::printf("%zu trial(s) ended", summary.trials.size());
  for (const auto& [status, n] : counts) std::printf(", %s %zu", status.c_str(), n);
  std::printf("\n");
  PrintBestTrials(summary, mode == "maximize", mode);
  std::printf("store %s\n", store->file().string().c_str());
  std::fflush(stdout);
  if (args.once) return kExitOk;

  if (int pid = LiveHostPid(dir / "host.json")) {
    std::fprintf(stderr, "tunehost: experiment %s is running (host pid %d): ask that host\n",
                 args.id.c_str(), pid);
    return kExitUsage;
  }
  ExperimentLock lock;
  if (!lock.Acquire(dir, args.id, /*shared=*/true)) return kExitUsage;
  st = server.Bind();
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  StopOnSignal stop(&server);
  HostFile host_file(dir / "host.json", args.id, server.bound());
  std::printf("serving read-only on control %s until stopped (Ctrl-C or `tunectl stop`)\n",
              server.bound().control.c_str());
  std::fflush(stdout);
  st = server.Run();
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  return kExitOk;
}

int Main(int argc, char** argv) {
  CLI::App app{"tunehost: a native hyperparameter-tuning host"};
  app.set_version_flag("--version", VersionText());
  app.require_subcommand(1);

  std::string log_level = "info";

  ServeArgs serve;
  CLI::App* serve_cmd =
      app.add_subcommand("serve", "run a host for workers and clients that connect to it");
  AddPluginDir(serve_cmd, &serve.plugins);
  serve_cmd->add_option("--control", serve.endpoints.control, "control endpoint (ROUTER)")
      ->capture_default_str();
  serve_cmd->add_option("--jobs", serve.endpoints.jobs, "jobs endpoint (PUSH)")
      ->capture_default_str();
  serve_cmd->add_option("--results", serve.endpoints.results, "results endpoint (PULL)")
      ->capture_default_str();
  serve_cmd->add_option("--events", serve.endpoints.events, "events endpoint (PUB)")
      ->capture_default_str();
  serve_cmd->add_option("--max-message-bytes", serve.max_message_bytes, "largest message accepted")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 31))
      ->capture_default_str();
  serve_cmd->add_option("--heartbeat-ms", serve.heartbeat_ms, "worker heartbeat interval")
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}))
      ->capture_default_str();
  serve_cmd
      ->add_option("--ack-timeout-ms", serve.ack_timeout_ms, "time a worker has to answer an offer")
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}))
      ->capture_default_str();
  serve_cmd
      ->add_option("--max-connections", serve.max_connections,
                   "connections each socket admits (default: the open-file limit shared by the "
                   "four sockets, at most 4096)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  AddLogLevel(serve_cmd, &log_level);

  RunArgs run;
  CLI::App* run_cmd =
      app.add_subcommand("run",
                         "run one experiment from an NNI-style YAML file, with local "
                         "workers");
  run_cmd->add_option("EXPERIMENT", run.experiment, "experiment file (YAML)")->required();
  AddPluginDir(run_cmd, &run.plugins);
  run_cmd->add_option("--worker-bin", run.worker_bin,
                      "tunehost-worker to start (default: next to tunehost, then PATH)");
  run_cmd->add_option("--port-base", run.port_base,
                      "bind control, jobs, results, events on 127.0.0.1 ports N..N+3 "
                      "(default: free ports)");
  run_cmd->add_option("--summary-json", run.summary_json,
                      "write the final status and every trial to this JSON file");
  AddLogLevel(run_cmd, &log_level);

  auto add_local_workers = [](CLI::App* cmd, int* n) {
    cmd->add_option("--local-workers", *n,
                    "tunehost-worker processes to start (default: trialConcurrency; 0: attach "
                    "your own workers to the endpoints)")
        ->check(CLI::Range(0, static_cast<int>(kMaxLocalWorkers)));
  };
  add_local_workers(run_cmd, &run.local_workers);
  auto add_detach = [](CLI::App* cmd, bool* detach) {
    cmd->add_flag("--detach", *detach,
                  "run in the background, detached from this terminal (output in "
                  "<experiment dir>/host.log); returns once the host serves");
  };
  add_detach(run_cmd, &run.detach);
  run_cmd->add_option("--id", run.id,
                      "experiment id (default: 8 random characters); its directory is "
                      "<experimentWorkingDirectory>/<id>");

  RunArgs resume;
  CLI::App* resume_cmd = app.add_subcommand(
      "resume", "continue a stopped or crashed experiment from its store");
  resume_cmd->add_option("ID", resume.id, "experiment id")->required();
  resume_cmd->add_option("--workdir", resume.workdir,
                         "where experiments live (default: " + DefaultWorkingDir().string() +
                             ")");
  AddPluginDir(resume_cmd, &resume.plugins);
  resume_cmd->add_option("--worker-bin", resume.worker_bin,
                         "tunehost-worker to start (default: next to tunehost, then PATH)");
  resume_cmd->add_option("--port-base", resume.port_base,
                         "bind ports N..N+3 (default: the endpoints the experiment had)");
  resume_cmd->add_option("--summary-json", resume.summary_json,
                         "write the final status and every trial to this JSON file");
  resume_cmd
      ->add_option("--reattach-grace-ms", resume.reattach_grace_ms,
                   "how long trials that were running wait for their workers to re-attach "
                   "before they are offered again")
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}))
      ->capture_default_str();
  add_local_workers(resume_cmd, &resume.local_workers);
  add_detach(resume_cmd, &resume.detach);
  AddLogLevel(resume_cmd, &log_level);

  ViewArgs view;
  CLI::App* view_cmd = app.add_subcommand(
      "view", "show a stored experiment and serve its control API read-only");
  view_cmd->add_option("ID", view.id, "experiment id")->required();
  view_cmd->add_option("--workdir", view.workdir,
                       "where experiments live (default: " + DefaultWorkingDir().string() + ")");
  view_cmd->add_option("--port-base", view.port_base, "bind ports N..N+3 (default: free ports)");
  view_cmd->add_flag("--once", view.once, "print the summary and exit instead of serving");
  AddLogLevel(view_cmd, &log_level);

  std::string plugins_dir;
  CLI::App* plugins_cmd = app.add_subcommand("plugins", "list the plugins that load");
  AddPluginDir(plugins_cmd, &plugins_dir);
  AddLogLevel(plugins_cmd, &log_level);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }

  SetUpLogging(log_level);
  InstallStopHandlers();
  int rc = kExitOk;
  if (serve_cmd->parsed()) {
    rc = CmdServe(serve);
  } else if (run_cmd->parsed()) {
    run.log_level = log_level;
    rc = CmdRun(run);
  } else if (resume_cmd->parsed()) {
    resume.log_level = log_level;
    rc = CmdResume(resume);
  } else if (view_cmd->parsed()) {
    rc = CmdView(view);
  } else {
    rc = CmdPlugins(plugins_dir);
  }
  if (g_plugin_abandoned) {
    spdlog::error("a plugin call never returned; exiting without it");
    // The sockets are never closed (the server stays alive for the stuck
    // call): give ZeroMQ's I/O threads a moment to send the last replies.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(rc);  // the experiment's own status: a DONE run left its hung assessor behind
  }
  return rc;
}

}  // namespace
}  // namespace tunehost::host

int main(int argc, char** argv) { return tunehost::host::Main(argc, argv); }
