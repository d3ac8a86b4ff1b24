// What the tunehost subcommands share (private to the tunehost binary).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "tunehost/host/experiment_config.h"
#include "tunehost/host/key_ring.h"
#include "tunehost/host/pareto_front.h"
#include "tunehost/host/plugin.h"
#include "tunehost/host/server.h"
#include "tunehost/host/store.h"
#include "tunehost/host/stored_experiment.h"
#include "tunehost/host/web_ui.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host::cli {

namespace fs = std::filesystem;

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // experiment ERROR or stopped, runtime failure
inline constexpr int kExitUsage = 2;   // bad command line or experiment file

inline constexpr char kVersion[] = TH_HOST_VERSION;

// --- signals: the handler only calls Server::Stop, which is signal-safe ---

void InstallStopHandlers();
// Registers the server with the handler; a signal that came earlier stops it
// as soon as it is known.
class StopOnSignal {
 public:
  explicit StopOnSignal(Server* server);
  ~StopOnSignal();
};
// A plugin call never returned: the process ends with _exit (no static
// destructors run under a thread that is still inside the plugin).
extern bool g_plugin_abandoned;

// --- file descriptors: every connection is one (wire-format.md §1.1) ---

// Raises the soft limit on open files to the hard one and returns it.
size_t RaiseFileLimit();
// Connections each of the four sockets admits: the file limit shared out,
// so a flood on one socket cannot take the descriptors the control socket
// needs to keep answering.
size_t ConnectionsPerSocket(size_t file_limit);

// --- options every subcommand has ---

std::string VersionText();
void AddLogLevel(CLI::App* cmd, std::string* level);
void SetUpLogging(const std::string& level);
fs::path DefaultPluginDir();
void AddPluginDir(CLI::App* cmd, std::string* dir);
// --plugins: one directory or several separated by ':' (as in PATH), or the
// default directory.
std::vector<fs::path> PluginDirs(const std::string& option);
// Loads every plugin of the --plugins directories, in order (a name that an
// earlier directory has is refused in a later one, and said so); with
// `log`, logs each plugin (the registry logs each refused file itself).
// Returns the directories, as --plugins spells them.
std::string LoadPlugins(PluginRegistry* registry, const std::string& option, bool log = true);
std::optional<PluginInfo> FindPlugin(const PluginRegistry& registry, const std::string& kind,
                                     const std::string& name_or_id);
// The config's tuner and assessor are among the loaded plugins; else one line
// per missing one, naming the ones there are.
Status CheckPluginsExist(const PluginRegistry& registry, const std::string& plugin_dirs,
                         const ExperimentConfig& config);

// --- the experiment directory ---

// The experiment directory's host.json: how tunectl and clients find a
// running host. Removed when the host exits normally.
class HostFile {
 public:
  // `server_key`: the host's public key (Z85) when it authenticates.
  // `trial`: the trial command and its directory, and `heartbeat_ms` the
  // workers' heartbeat interval, for `tunectl launch`.
  HostFile(fs::path file, const std::string& id, const Endpoints& ep,
           const std::string& server_key = "",
           const std::pair<std::string, std::string>& trial = {}, int64_t heartbeat_ms = 0,
           const std::string& ui_url = "");
  ~HostFile();

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
  bool Acquire(const fs::path& dir, const std::string& id, bool shared = false);
  ~ExperimentLock();

 private:
  int fd_ = -1;
};

// Writes `file` readable by its owner only (0600 whatever the umask).
Status WritePrivateFile(const fs::path& file, const std::string& text);
// Creates `dir` (and its parents) and makes it 0700: an experiment's files
// are its user's (wire-format.md §9).
Status MakePrivateDirectory(const fs::path& dir);

// The pid in a host.json whose process still runs, or 0.
int LiveHostPid(const fs::path& host_file);
bool ReadText(const fs::path& file, std::string* out);
// The stored experiment `id`: its directory, store and configuration (with
// the limits and search space it last had). An exit code.
// --detach: forks; the child (false returned) becomes a session leader with
// its output in <dir>/<log_name>; the parent waits until the child wrote
// host.json or died, prints "experiment ID <what> detached" and where to
// follow it, and returns true with the exit code.
bool Detach(const fs::path& dir, const std::string& id, const char* log_name, const char* what,
            int* exit_code);

int OpenStored(const std::string& id, const std::string& workdir, Store::Mode mode,
               fs::path* dir, std::unique_ptr<Store>* store, ExperimentConfig* config);

// --- authentication (wire-format.md §9) ---

struct SecurityArgs {
  std::string keys_dir;   // --keys DIR: CURVE keys and roles (key_ring.h)
  bool insecure = false;  // --insecure: bind beyond loopback without keys
};
void AddSecurityOptions(CLI::App* cmd, SecurityArgs* args);
// Reads --keys (null *ring without) and applies the rule: an endpoint that
// is not loopback needs keys, unless --insecure. An exit code; the refusal
// says why on stderr.
int PrepareSecurity(const SecurityArgs& args, const Endpoints& endpoints,
                    std::unique_ptr<KeyRing>* ring);
// With keys, the host's own local workers get a key pair of their own,
// authorized as worker "local": written to DIR/local-worker.key_secret
// (0600) with the host's public key in DIR/server.key. Appends the worker
// arguments that use them to *worker_args.
Status AuthorizeLocalWorkers(KeyRing* ring, const fs::path& dir,
                             std::vector<std::string>* worker_args);

// --- the web UI (web_ui.h) ---

struct WebUiArgs {
  std::string address = "127.0.0.1:0";  // --ui PORT|ADDRESS:PORT|off
  std::string cert_file, key_file;      // --ui-cert, --ui-key: HTTPS
};
// --ui, --ui-cert and --ui-key, on run, resume, serve and view.
void AddWebUiOptions(CLI::App* cmd, WebUiArgs* args);
// After Bind: serves the web UI of `server` unless --ui off (*ui stays
// null). `insecure`: --insecure allows an address beyond loopback without
// TLS. An exit code; a refusal says why on stderr.
int StartWebUi(Server* server, const WebUiArgs& args, bool insecure,
               const fs::path& experiment_dir, bool read_only, std::unique_ptr<WebUi>* ui);

// --- endpoints ---

Endpoints FreeLoopbackEndpoints();
// --port-base N: control, jobs, results, events on ADDRESS:N..N+3.
bool PortBaseEndpoints(int base, Endpoints* out, const std::string& address = "127.0.0.1");
// Free ports on ADDRESS (tcp://ADDRESS:*).
Endpoints FreeEndpoints(const std::string& address);
std::string StoredEndpoint(const Store& store, const char* name);
// The address of a tcp endpoint ("tcp://10.0.0.7:5650" -> "10.0.0.7").
std::string AddressOf(const std::string& endpoint);

// --- reporting (summary.cc) ---

std::string FormatDuration(double seconds);
std::string FirstLine(const std::string& s);
// The last `n` non-blank lines of the trial stderr a worker put in a failed
// trial's error text (none when it sent none), each cut at 200 columns.
std::vector<std::string> StderrTail(const std::string& error, size_t n);
// How many trials failed, and the last one's error and stderr lines.
void PrintFailures(const ExperimentSummary& summary, const fs::path& experiment_dir);
std::string FormatMetric(const std::optional<double>& m);
// The trials of s.pareto_front, in the order of s.trials.
std::vector<const TrialSummary*> FrontTrials(const ExperimentSummary& s);
// The terminal trials with a metric, best first.
std::vector<const TrialSummary*> BestTrials(const ExperimentSummary& s, bool maximize, size_t n);
// The best trials, or the Pareto front when `o` names objectives.
void PrintBestTrials(const ExperimentSummary& summary, bool maximize, const std::string& mode,
                     const Objectives& o);
// Machine-readable run summary (--summary-json), for scripts and tests.
bool WriteSummaryJson(const fs::path& file, const ExperimentSummary& s, const std::string& name,
                      const std::string& optimize_mode, bool maximize, const Objectives& o);

// --- the subcommands ---

struct ServeArgs {
  std::string plugins;
  SecurityArgs security;
  Endpoints endpoints;
  size_t max_message_bytes = protocol::kDefaultMaxMessageBytes;
  size_t max_result_bytes = protocol::kDefaultMaxResultBytes;
  int64_t heartbeat_ms = 1000;
  int64_t ack_timeout_ms = 2000;
  size_t max_connections = 0;  // 0: from the open-file limit
  uint32_t prefetch = 0;        // trials generated ahead of a free slot
  WebUiArgs ui;
};
int CmdServe(const ServeArgs& args);

struct RunArgs {
  std::string experiment;
  std::string id;       // run: --id; resume: the experiment
  std::string workdir;  // where experiments live (run: instead of experimentWorkingDirectory)
  int64_t reattach_grace_ms = 5000;
  int local_workers = -1;  // -1: trialConcurrency
  bool detach = false;
  std::string plugins;
  std::string worker_bin;
  int port_base = 0;  // 0: free ports
  std::string summary_json;
  std::string log_level = "info";
  std::string bind_address;  // run: --bind (default 127.0.0.1)
  SecurityArgs security;
  WebUiArgs ui;
};
int CmdRun(const RunArgs& args);
int CmdResume(const RunArgs& args);

struct ViewArgs {
  std::string id;
  std::string workdir;
  int port_base = 0;
  bool once = false;
  bool detach = false;
  WebUiArgs ui;
  bool insecure = false;
};
int CmdView(const ViewArgs& args);

struct ReportArgs {
  std::string id;
  std::string workdir;
  std::string output;  // empty: <experiment dir>/report.html; "-": stdout
};
int CmdReport(const ReportArgs& args);

}  // namespace tunehost::host::cli
