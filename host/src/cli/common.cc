// What the tunehost subcommands share: signals, file limits, logging,
// plugins, the experiment directory's files (host.json, lock) and endpoints.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "tunehost/host/nni_builtins.h"
#include "tunehost/sdk/version.h"

namespace tunehost::host::cli {

namespace {

std::atomic<Server*> g_server{nullptr};
volatile sig_atomic_t g_stop_requested = 0;
static_assert(std::atomic<Server*>::is_always_lock_free, "read from a signal handler");

extern "C" void HandleStopSignal(int sig) {
  g_stop_requested = 1;
  if (Server* s = g_server.load()) s->Stop();
  // A second signal of the same kind ends the process at once.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
}

constexpr rlim_t kMaxFileLimit = rlim_t{1} << 20;
// Descriptors kept for the store, plugins, local workers' pipes and logs.
constexpr size_t kReservedFiles = 256;
constexpr size_t kMaxConnectionsPerSocket = 4096;

fs::path ExeDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path(ec) : self.parent_path();
}

}  // namespace

bool g_plugin_abandoned = false;

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = HandleStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

StopOnSignal::StopOnSignal(Server* server) {
  g_server.store(server);
  if (g_stop_requested) server->Stop();
}

StopOnSignal::~StopOnSignal() { g_server.store(nullptr); }

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
                  "plugin directory, or several separated by ':' (an earlier one wins a name "
                  "both have; default: " + DefaultPluginDir().string() + ")");
}

std::vector<fs::path> PluginDirs(const std::string& option) {
  if (option.empty()) return {DefaultPluginDir()};
  std::vector<fs::path> dirs;
  size_t begin = 0;
  while (begin <= option.size()) {
    const size_t end = std::min(option.find(':', begin), option.size());
    if (end > begin) dirs.emplace_back(option.substr(begin, end - begin));
    begin = end + 1;
  }
  return dirs;
}

std::string LoadPlugins(PluginRegistry* registry, const std::string& option, bool log) {
  std::string text;
  for (const fs::path& dir : PluginDirs(option)) {
    text += (text.empty() ? "" : ":") + dir.string();
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      spdlog::error("plugin directory {} does not exist", dir.string());
      continue;
    }
    registry->LoadDirectory(dir);
  }
  if (log) {
    for (const PluginInfo& p : registry->plugins()) {
      spdlog::info("plugin {} {} ({} {}) from {}", p.kind, p.name, p.id, p.version,
                   p.file.string());
    }
    if (registry->plugins().empty()) spdlog::warn("no plugins loaded from {}", text);
  }
  return text;
}

std::optional<PluginInfo> FindPlugin(const PluginRegistry& registry, const std::string& kind,
                                     const std::string& name_or_id) {
  return registry.Find(kind, name_or_id);
}

Status CheckPluginsExist(const PluginRegistry& registry, const std::string& plugin_dirs,
                         const ExperimentConfig& config) {
  std::string problems;
  auto check = [&](const char* kind, const char* key, const protocol::PluginSpec& spec) {
    if (registry.Find(kind, spec.name)) return;
    std::string available;
    for (const PluginInfo& p : registry.plugins()) {
      if (p.kind == kind) available += (available.empty() ? "" : ", ") + p.name;
    }
    if (!problems.empty()) problems += "\n";
    problems += config.source_file.string() + ": " + key + ".name: no " + kind +
                " plugin named '" + spec.name + "' in " + plugin_dirs + " (available: " +
                (available.empty() ? std::string("none") : available) + ")";
    if (auto advice = MissingNniBuiltin(kind, spec.name)) problems += ": " + *advice;
  };
  check("tuner", "tuner", config.spec.tuner);
  if (config.spec.assessor) check("assessor", "assessor", *config.spec.assessor);
  return problems.empty() ? Status::Ok() : Status::NotFound(problems);
}


// The experiment directory's host.json: how tunectl and clients find a
// running host. Removed when the host exits normally.
Status WritePrivateFile(const fs::path& file, const std::string& text) {
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal(file.string() + ": " + std::strerror(errno));
  bool ok = fchmod(fd, 0600) == 0 &&
            write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ok = close(fd) == 0 && ok;
  if (!ok) return Status::Internal(file.string() + ": " + std::strerror(saved));
  return Status::Ok();
}

Status MakePrivateDirectory(const fs::path& dir) {
  // Parents made here are 0700 too: under umask 000 a 0777 parent would let
  // anyone swap the experiment for one of their own.
  Status st = protocol::MakePrivateDirectories(dir);
  if (!st.ok()) return st;
  std::error_code ec;
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec) return Status::Internal(dir.string() + ": " + ec.message());
  return Status::Ok();
}

HostFile::HostFile(fs::path file, const std::string& id, const Endpoints& ep,
                   const std::string& server_key,
                   const std::pair<std::string, std::string>& trial, int64_t heartbeat_ms,
                   const std::string& ui_url)
    : file_(std::move(file)) {
  nlohmann::ordered_json j = {{"experiment_id", id},     {"pid", static_cast<int>(getpid())},
                              {"control", ep.control}, {"jobs", ep.jobs},
                              {"results", ep.results}, {"events", ep.events}};
  // The host's public key, for clients (public: not a secret).
  if (!server_key.empty()) j["server_key"] = server_key;
  if (!trial.first.empty()) {
    j["trial_command"] = trial.first;
    j["trial_code_directory"] = trial.second;
  }
  if (heartbeat_ms > 0) j["heartbeat_ms"] = heartbeat_ms;
  // The web UI with its admin token: the file is its user's only (0600).
  if (!ui_url.empty()) j["ui"] = ui_url;
  fs::path tmp = file_;
  tmp += ".tmp";
  Status st = WritePrivateFile(tmp, j.dump(1) + "\n");
  std::error_code ec;
  if (st.ok()) fs::rename(tmp, file_, ec);
  if (!st.ok() || ec) {
    spdlog::warn("cannot write {}: {}", file_.string(), st.ok() ? ec.message() : st.message());
  }
}

HostFile::~HostFile() {
  std::error_code ec;
  fs::remove(file_, ec);
}

bool ExperimentLock::Acquire(const fs::path& dir, const std::string& id, bool shared) {
  fd_ = open((dir / "lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ >= 0) (void)fchmod(fd_, 0600);
  if (fd_ >= 0 && flock(fd_, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) == 0) return true;
  std::fprintf(stderr, "tunehost: experiment %s is in use by another tunehost process%s\n",
               id.c_str(), fd_ < 0 ? (std::string(" (") + std::strerror(errno) + ")").c_str()
                                   : "");
  return false;
}

ExperimentLock::~ExperimentLock() {
  if (fd_ >= 0) close(fd_);
}

// Whether a host process holds the experiment's lock right now.
// --detach: forks; the child becomes a session leader with its output in
// <dir>/<log_name> and goes on to run (or serve) the experiment. The parent waits until
// the child wrote host.json (the host is serving) or died, prints where to
// find it and returns true with the exit code; the child gets false.
bool Detach(const fs::path& dir, const std::string& id, const char* log_name, const char* what,
            int* exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  const fs::path log = dir / log_name;
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
      std::printf("experiment %s %s detached (pid %d)\ncontrol    %s\nlog        %s\n"
                  "follow it  tunectl --experiment %s%s status\n",
                  id.c_str(), what, static_cast<int>(child), j.value("control", "").c_str(),
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

Endpoints FreeLoopbackEndpoints() { return FreeEndpoints("127.0.0.1"); }

Endpoints FreeEndpoints(const std::string& address) {
  const std::string ep = "tcp://" + address + ":*";
  return {ep, ep, ep, ep};
}

// --port-base N: control, jobs, results, events on ADDRESS:N..N+3.
bool PortBaseEndpoints(int base, Endpoints* out, const std::string& address) {
  if (base < 1 || base > 65535 - 3) {
    std::fprintf(stderr, "tunehost: --port-base %d leaves no room for 4 ports\n", base);
    return false;
  }
  auto ep = [&](int i) { return fmt::format("tcp://{}:{}", address, base + i); };
  *out = {ep(0), ep(1), ep(2), ep(3)};
  return true;
}

std::string AddressOf(const std::string& endpoint) {
  std::string rest = endpoint.rfind("tcp://", 0) == 0 ? endpoint.substr(6) : endpoint;
  return rest.substr(0, rest.rfind(':'));
}

std::string StoredEndpoint(const Store& store, const char* name) {
  return store.Meta(std::string("endpoint.") + name).value_or("");
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
  Status st = OpenStoredExperiment(*dir, mode, store, config);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: experiment %s: %s\n", id.c_str(), st.message().c_str());
    return st.code() == Status::Code::kNotFound ? kExitUsage : kExitFailed;
  }
  return kExitOk;
}

void AddSecurityOptions(CLI::App* cmd, SecurityArgs* args) {
  cmd->add_option("--keys", args->keys_dir,
                  "CURVE keys and roles: DIR/server.key_secret and DIR/{workers,viewers,admins}/"
                  "*.key (tunectl keygen); every peer then needs a key");
  cmd->add_flag("--insecure", args->insecure,
                "bind beyond loopback without keys: anyone who reaches a port may stop or "
                "steer the experiment and forge results");
}

int PrepareSecurity(const SecurityArgs& args, const Endpoints& endpoints,
                    std::unique_ptr<KeyRing>* ring) {
  ring->reset();
  if (!args.keys_dir.empty()) {
    auto keys = std::make_unique<KeyRing>();
    Status st = KeyRing::Load(args.keys_dir, keys.get());
    if (!st.ok()) {
      std::fprintf(stderr, "tunehost: --keys %s: %s\n", args.keys_dir.c_str(),
                   st.message().c_str());
      return kExitUsage;
    }
    spdlog::info("keys from {}: {} worker, {} viewer, {} admin key(s)", args.keys_dir,
                 keys->count(Role::kWorker), keys->count(Role::kViewer),
                 keys->count(Role::kAdmin));
    if (keys->count(Role::kWorker) + keys->count(Role::kViewer) + keys->count(Role::kAdmin) == 0) {
      spdlog::warn("{} has no key in workers/, viewers/ or admins/: no one but this host's own "
                   "local workers can connect",
                   args.keys_dir);
    }
    *ring = std::move(keys);
    return kExitOk;
  }
  for (const std::string* ep : {&endpoints.control, &endpoints.jobs, &endpoints.results,
                                &endpoints.events}) {
    if (IsLoopbackEndpoint(*ep)) continue;
    if (args.insecure) {
      spdlog::warn("{} is not loopback and the host has no keys (--insecure): anyone who can "
                   "reach it may stop or steer the experiment and forge results",
                   *ep);
      continue;
    }
    std::fprintf(stderr,
                 "tunehost: refusing to bind %s without keys: anyone who can reach it could "
                 "stop the experiment, steer it or forge results. Give --keys DIR (make keys "
                 "with `tunectl keygen`), bind a loopback address, or accept the risk with "
                 "--insecure.\n",
                 ep->c_str());
    return kExitUsage;
  }
  return kExitOk;
}

Status AuthorizeLocalWorkers(KeyRing* ring, const fs::path& dir,
                             std::vector<std::string>* worker_args) {
  protocol::KeyPair local;
  Status st = protocol::GenerateKeyPair(&local);
  if (!st.ok()) return st;
  // A new pair per host process: a resumed host does not trust the old one.
  std::error_code ec;
  for (const char* name : {"local-worker.key", "local-worker.key_secret", "server.key"}) {
    fs::remove(dir / name, ec);
  }
  st = protocol::WriteKeyPair(dir, "local-worker", local);
  if (st.ok()) st = protocol::WritePublicKey(dir / "server.key", ring->server().public_key);
  if (st.ok()) st = ring->Add(local.public_key, Role::kWorker, kLocalWorkersKeyName);
  if (!st.ok()) return st;
  worker_args->insert(worker_args->end(), {"--key", (dir / "local-worker.key_secret").string(),
                                           "--server-key", (dir / "server.key").string()});
  return Status::Ok();
}

void AddWebUiOptions(CLI::App* cmd, WebUiArgs* args) {
  cmd->add_option("--ui", args->address,
                  "serve the web UI on PORT or ADDRESS:PORT (0: a free port; loopback unless "
                  "TLS or --insecure), or off")
      ->capture_default_str();
  CLI::Option* cert = cmd->add_option("--ui-cert", args->cert_file,
                                      "serve the web UI over HTTPS with this certificate (PEM)");
  CLI::Option* key = cmd->add_option("--ui-key", args->key_file,
                                     "the private key of --ui-cert (PEM, unencrypted)");
  cert->needs(key);
  key->needs(cert);
}

int StartWebUi(Server* server, const WebUiArgs& args, bool insecure,
               const fs::path& experiment_dir, bool read_only, std::unique_ptr<WebUi>* ui) {
  WebUiOptions options;
  options.cert_file = args.cert_file;
  options.key_file = args.key_file;
  bool enabled = false;
  Status st = ParseWebUiAddress(args.address, insecure, &enabled, &options);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitUsage;
  }
  if (!enabled) return kExitOk;
  options.experiment_dir = experiment_dir;
  options.read_only = read_only;
  auto started = std::make_unique<WebUi>(server, options);
  st = started->Start();
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return st.code() == Status::Code::kBadField ? kExitUsage : kExitFailed;
  }
  *ui = std::move(started);
  return kExitOk;
}

}  // namespace tunehost::host::cli
