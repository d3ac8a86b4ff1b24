// The tunehost command line: `serve` (a host for remote workers and clients),
// `run` (one experiment from a YAML file with local workers), `plugins`.
#include <signal.h>
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
#include <optional>
#include <string>
#include <vector>

#include "tunehost/host/experiment_config.h"
#include "tunehost/host/local_workers.h"
#include "tunehost/host/plugin.h"
#include "tunehost/host/server.h"
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
};

int CmdServe(const ServeArgs& args) {
  PluginRegistry registry;
  LoadPlugins(&registry, args.plugins);
  ServerOptions options;
  options.endpoints = args.endpoints;
  options.max_message_bytes = args.max_message_bytes;
  options.heartbeat_interval = std::chrono::milliseconds(args.heartbeat_ms);
  options.ack_timeout = std::chrono::milliseconds(args.ack_timeout_ms);
  Server server(options, &registry);
  Status st = server.Bind();
  if (!st.ok()) {
    spdlog::error("{}", st.message());
    return kExitFailed;
  }
  StopOnSignal stop(&server);
  st = server.Run();
  if (!st.ok()) {
    spdlog::error("{}", st.message());
    return kExitFailed;
  }
  return kExitOk;
}

// --- tunehost run ---

struct RunArgs {
  std::string experiment;
  std::string plugins;
  std::string worker_bin;
  int port_base = 0;  // 0: free ports
  std::string summary_json;
  std::string log_level = "info";
};

// optimize_mode from the tuner's classArgs; *from_config false when absent.
std::string OptimizeMode(const protocol::Packed& args, bool* from_config) {
  *from_config = false;
  try {
    msgpack::object_handle oh = msgpack::unpack(args.data(), args.size());
    const msgpack::object& o = oh.get();
    if (o.type != msgpack::type::MAP) return "maximize";
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR && kv.key.as<std::string>() == "optimize_mode" &&
          kv.val.type == msgpack::type::STR) {
        std::string mode = kv.val.as<std::string>();
        if (mode == "maximize" || mode == "minimize") {
          *from_config = true;
          return mode;
        }
        spdlog::warn(
            "tuner optimize_mode '{}' is neither maximize nor minimize: ranking as "
            "maximize",
            mode);
      }
    }
  } catch (const std::exception&) {
  }
  return "maximize";
}

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

int CmdRun(const RunArgs& args) {
  ExperimentConfig config;
  Status st = LoadExperimentConfig(args.experiment, &config);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitUsage;
  }
  for (const std::string& w : config.warnings) spdlog::warn("{}", w);

  fs::path worker_binary;
  st = FindWorkerBinary(args.worker_bin, &worker_binary);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitUsage;
  }

  PluginRegistry registry;
  const fs::path plugin_dir = LoadPlugins(&registry, args.plugins);

  ServerOptions options;
  if (args.port_base != 0) {
    const int base = args.port_base;
    if (base < 1 || base > 65535 - 3) {
      std::fprintf(stderr, "tunehost: --port-base %d leaves no room for 4 ports\n", base);
      return kExitUsage;
    }
    auto ep = [base](int i) { return fmt::format("tcp://127.0.0.1:{}", base + i); };
    options.endpoints = {ep(0), ep(1), ep(2), ep(3)};
  } else {
    options.endpoints = {"tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                         "tcp://127.0.0.1:*"};
  }
  if (config.timing.heartbeat_interval) {
    options.heartbeat_interval = *config.timing.heartbeat_interval;
  }
  if (config.timing.ack_timeout) options.ack_timeout = *config.timing.ack_timeout;
  if (config.timing.max_message_bytes) {
    options.max_message_bytes = *config.timing.max_message_bytes;
  }
  options.exit_when_finished = true;

  Server server(options, &registry);
  StopOnSignal stop(&server);
  st = server.Bind();
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  st = server.Configure(config.spec, config.search_space);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s: %s\n", config.source_file.string().c_str(),
                 st.ToString().c_str());
    return kExitUsage;
  }

  const fs::path experiment_dir = config.working_dir / config.spec.id;
  std::error_code ec;
  fs::create_directories(experiment_dir, ec);
  if (ec) {
    std::fprintf(stderr, "tunehost: %s: %s\n", experiment_dir.string().c_str(),
                 ec.message().c_str());
    return kExitFailed;
  }

  bool mode_from_config = false;
  const std::string mode = OptimizeMode(config.spec.tuner.args, &mode_from_config);
  const bool maximize = mode == "maximize";
  const Endpoints& bound = server.bound();

  // Trials land in <working dir>/<id>/trials/ (the worker adds the id, as NNI
  // lays out ~/nni-experiments/<id>/trials/); worker logs in <id>/log/.
  LocalWorkersOptions wo;
  wo.worker_binary = worker_binary;
  wo.count = config.spec.concurrency;
  wo.jobs = bound.jobs;
  wo.results = bound.results;
  wo.events = bound.events;
  wo.command = config.trial_command;
  wo.cwd = config.trial_code_dir;
  wo.workdir = config.working_dir;
  wo.heartbeat_interval = options.heartbeat_interval;
  wo.log_dir = experiment_dir / "log";
  // Trials get SIGKILL well before the supervisor would kill their worker.
  wo.extra_args = {"--log-level", args.log_level, "--kill-grace-ms", "2000"};
  LocalWorkers workers(wo);

  auto plugin_text = [&](const std::string& kind, const protocol::PluginSpec& spec) {
    std::optional<PluginInfo> p = FindPlugin(registry, kind, spec.name);
    return p ? fmt::format("{} ({} {}, {})", p->name, p->id, p->version, p->file.string())
             : spec.name;
  };
  std::printf("%s\n", VersionText().c_str());
  std::printf("experiment   %s%s\n", config.spec.id.c_str(),
              config.name.empty() ? "" : (" \"" + config.name + "\"").c_str());
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
  std::printf("workers      %s\n", worker_binary.string().c_str());
  std::printf("optimize     %s (%s)\n", mode.c_str(),
              mode_from_config ? "tuner classArgs optimize_mode"
                               : "default: no optimize_mode in tuner classArgs");
  std::printf("command      %s  (in %s)\n", config.trial_command.c_str(),
              config.trial_code_dir.string().c_str());
  std::printf("directory    %s\n", experiment_dir.string().c_str());
  std::printf("endpoints    control %s  jobs %s  results %s  events %s\n", bound.control.c_str(),
              bound.jobs.c_str(), bound.results.c_str(), bound.events.c_str());
  std::printf("\n");
  std::fflush(stdout);

  const std::string total =
      config.spec.max_trials ? std::to_string(config.spec.max_trials) : std::string("-");
  size_t finished = 0;
  server.OnTrialEnd([&](const TrialSummary& t) {
    ++finished;
    std::string line = fmt::format("[{:>4}/{}] #{:<4} {:<8} {:<14} metric {:>10}  {}", finished,
                                   total, t.sequence_id, t.trial_id, protocol::ToString(t.status),
                                   FormatMetric(t.final_metric), t.parameters_json);
    if (t.status == protocol::TrialStatus::kFailed && !t.error.empty()) {
      line += "  error: " + FirstLine(t.error);
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  });

  st = workers.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  Status run_status = server.Run();
  workers.Stop();

  const ExperimentSummary summary = server.Summary();
  std::printf("\nexperiment %s %s", summary.experiment_id.c_str(),
              std::string(ToString(summary.status)).c_str());
  if (!summary.error.empty()) std::printf(": %s", summary.error.c_str());
  std::printf(
      "\n%zu trial(s) ended; offers %llu, rejects %llu, reoffers %llu; worker respawns "
      "%zu\n",
      summary.trials.size(), static_cast<unsigned long long>(summary.offers),
      static_cast<unsigned long long>(summary.rejects),
      static_cast<unsigned long long>(summary.reoffers), workers.respawns());
  std::vector<const TrialSummary*> best = BestTrials(summary, maximize, 5);
  if (best.empty()) {
    std::printf("no succeeded trial with a metric\n");
  } else {
    std::printf("\nbest trials (%s):\n", mode.c_str());
    std::printf("%-4s %-5s %-14s %10s  %s\n", "rank", "seq", "trial", "metric", "parameters");
    for (size_t i = 0; i < best.size(); ++i) {
      const TrialSummary& t = *best[i];
      std::printf("%-4zu %-5llu %-14s %10s  %s\n", i + 1,
                  static_cast<unsigned long long>(t.sequence_id), t.trial_id.c_str(),
                  FormatMetric(t.final_metric).c_str(), t.parameters_json.c_str());
    }
  }
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
  if (serve_cmd->parsed()) return CmdServe(serve);
  if (run_cmd->parsed()) {
    run.log_level = log_level;
    return CmdRun(run);
  }
  return CmdPlugins(plugins_dir);
}

}  // namespace
}  // namespace tunehost::host

int main(int argc, char** argv) { return tunehost::host::Main(argc, argv); }
