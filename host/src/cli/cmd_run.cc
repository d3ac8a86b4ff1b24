// tunehost run and tunehost resume: one experiment from its file or its
// store, with local workers, live progress and a summary.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "progress.h"
#include "tunehost/host/control_queries.h"
#include "tunehost/host/local_workers.h"

namespace tunehost::host::cli {

namespace {

// `run` and `resume` once the experiment, its directory and its store are
// known. `keys`: a run's keys, read (and its bind checked) before anything
// was written; a resume reads the ones it ran with.
int RunExperiment(const RunArgs& args, ExperimentConfig config, const fs::path& experiment_dir,
                  Store* store, bool resume, std::unique_ptr<KeyRing> keys = nullptr) {
  fs::path worker_binary;
  Status st = FindWorkerBinary(args.worker_bin, &worker_binary);
  if (!st.ok() && args.local_workers != 0) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitUsage;
  }

  PluginRegistry registry;
  const std::string plugin_dir = LoadPlugins(&registry, args.plugins);
  if (st = CheckPluginsExist(registry, plugin_dir, config); !st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitUsage;
  }

  // trialGpuNumber: each local worker runs one trial at a time on its own
  // GPUs, so the GPUs bound the local workers (NNI's local scheduling).
  size_t max_local_workers = kMaxLocalWorkers;
  std::vector<std::vector<int>> gpu_plan;
  const GpuOptions& gpus = config.gpus;
  if (gpus.per_trial > 0 && args.local_workers != 0) {
    const std::vector<int> indices = gpus.indices ? *gpus.indices : DetectGpus();
    if (indices.empty()) {
      std::fprintf(stderr,
                   "tunehost: %s: trialGpuNumber %u: no GPU found (nvidia-smi); list them with "
                   "trainingService: {platform: local, gpuIndices: \"0,1\"}\n",
                   config.source_file.string().c_str(), gpus.per_trial);
      return kExitUsage;
    }
    gpu_plan = PlanGpus(indices, gpus.per_trial, gpus.max_trials_per_gpu, kMaxLocalWorkers);
    if (gpu_plan.empty()) {
      std::fprintf(stderr, "tunehost: %s: trialGpuNumber %u needs more GPUs than the %zu "
                   "there are\n", config.source_file.string().c_str(), gpus.per_trial,
                   indices.size());
      return kExitUsage;
    }
    max_local_workers = gpu_plan.size();
  }

  ServerOptions options;
  std::string address = args.bind_address.empty() ? "127.0.0.1" : args.bind_address;
  options.endpoints = FreeEndpoints(address);
  if (resume && args.bind_address.empty() && !StoredEndpoint(*store, "control").empty()) {
    // The same endpoints as before, so workers that outlived the old host
    // reconnect to this one and re-attach their trials.
    options.endpoints = {StoredEndpoint(*store, "control"), StoredEndpoint(*store, "jobs"),
                         StoredEndpoint(*store, "results"), StoredEndpoint(*store, "events")};
    address = AddressOf(options.endpoints.control);
  }
  if (args.port_base != 0 && !PortBaseEndpoints(args.port_base, &options.endpoints, address)) {
    return kExitUsage;
  }
  // Keys: the ones given, else (resume) the ones the experiment ran with;
  // a bind beyond loopback needs them (§9) — a resume too.
  SecurityArgs security = args.security;
  if (resume) {
    if (security.keys_dir.empty()) security.keys_dir = store->Meta("keys_dir").value_or("");
    if (int rc = PrepareSecurity(security, options.endpoints, &keys); rc != kExitOk) return rc;
  }
  options.keys = keys.get();
  std::vector<std::string> local_worker_keys;
  if (keys != nullptr && args.local_workers != 0) {
    st = AuthorizeLocalWorkers(keys.get(), experiment_dir, &local_worker_keys);
    if (!st.ok()) {
      std::fprintf(stderr, "tunehost: keys for the local workers: %s\n", st.message().c_str());
      return kExitFailed;
    }
  }
  if (config.timing.heartbeat_interval) {
    options.heartbeat_interval = *config.timing.heartbeat_interval;
  }
  if (config.timing.ack_timeout) options.ack_timeout = *config.timing.ack_timeout;
  if (config.timing.max_message_bytes) {
    options.max_message_bytes = *config.timing.max_message_bytes;
  }
  if (config.timing.max_result_bytes) options.max_result_bytes = *config.timing.max_result_bytes;
  options.exit_when_finished = true;
  options.deduplicate = config.timing.deduplicate.value_or(false);
  options.max_consecutive_failures = config.timing.max_consecutive_failures.value_or(0);
  options.prefetch = config.timing.prefetch.value_or(0);
  options.max_connections = ConnectionsPerSocket(RaiseFileLimit());
  if (config.timing.plugin_call_timeout) {
    options.plugin_call_timeout = *config.timing.plugin_call_timeout;
  }

  auto server = std::make_unique<Server>(options, &registry);
  st = server->Bind();
  if (!st.ok() && resume && args.port_base == 0) {
    spdlog::warn("{}; binding free ports instead (workers of the old host cannot re-attach)",
                 st.message());
    options.endpoints = FreeEndpoints(address);
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
  if (!security.keys_dir.empty()) {
    store->SetMeta("keys_dir", fs::absolute(security.keys_dir).lexically_normal().string());
  }
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
  std::unique_ptr<WebUi> ui;
  if (int ui_rc = StartWebUi(server.get(), args.ui, security.insecure, experiment_dir, false, &ui);
      ui_rc != kExitOk) {
    return ui_rc;
  }
  HostFile host_file(experiment_dir / "host.json", config.spec.id, bound,
                     keys ? keys->server().public_key : std::string(),
                     {config.trial_command, config.trial_code_dir.string()},
                     options.heartbeat_interval.count(), ui ? ui->Url(true) : "");

  bool mode_from_config = false;
  const std::string mode = OptimizeModeOf(config.spec.tuner.args, &mode_from_config);
  const bool maximize = mode == "maximize";

  // Trials land in <working dir>/<id>/trials/ (the worker adds the id, as NNI
  // lays out ~/nni-experiments/<id>/trials/); worker logs in <id>/log/.
  LocalWorkersOptions wo;
  wo.worker_binary = worker_binary;
  wo.count = std::min<size_t>(args.local_workers >= 0 ? static_cast<size_t>(args.local_workers)
                                                      : config.spec.concurrency,
                              max_local_workers);
  if (args.local_workers < 0 && config.spec.concurrency > max_local_workers) {
    std::fprintf(stderr,
                 "tunehost: trialConcurrency %u: starting %zu local workers (%s); attach more "
                 "with tunehost-worker\n",
                 config.spec.concurrency, max_local_workers,
                 gpu_plan.empty() ? "the most one host starts"
                                  : "as many as the GPUs allow one trial each");
  }
  if (!gpu_plan.empty()) {
    wo.worker_args = [gpu_plan, per_trial = gpus.per_trial](size_t i) {
      std::string list;
      for (int g : gpu_plan[i % gpu_plan.size()]) list += (list.empty() ? "" : ",") + std::to_string(g);
      return std::vector<std::string>{"--gpu-indices", list, "--gpus-per-trial",
                                      std::to_string(per_trial)};
    };
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
                   "--max-result-bytes", std::to_string(options.max_result_bytes),
                   "--orphan-timeout-ms", "600000", "--host-pid", std::to_string(getpid())};
  wo.extra_args.insert(wo.extra_args.end(), local_worker_keys.begin(), local_worker_keys.end());
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
  std::printf("plugins      %s (%zu loaded, %zu refused)\n", plugin_dir.c_str(),
              registry.plugins().size(), registry.errors().size());
  if (wo.count > 0) {
    std::printf("workers      %zu x %s\n", wo.count, worker_binary.string().c_str());
    if (!gpu_plan.empty()) {
      std::printf("gpus         %u per trial, at most %u trial(s) per GPU (CUDA_VISIBLE_DEVICES)\n",
                  gpus.per_trial, gpus.max_trials_per_gpu);
    }
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
  if (ui) std::printf("web UI       %s\n", ui->Url(true).c_str());
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
      for (const std::string& err : StderrTail(t.error, 3)) line += "\n      | " + err;
    }
    progress.Line(line, server->Progress());
  });
  server->OnTick([&] {
    const ProgressInfo now = server->Progress();
    progress.Tick(now);
    // One local worker per trial slot: a concurrency raised over the control
    // API (tunectl update) gets its workers.
    if (args.local_workers < 0) {
      workers.Grow(std::min<size_t>(now.concurrency, max_local_workers));
    }
  });

  st = wo.count > 0 ? workers.Start() : Status::Ok();
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  Status run_status = server->Run();
  ui.reset();  // it asks the server, which answers no more
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
  const Objectives objectives = ObjectivesOf(config.spec.tuner.args);
  PrintBestTrials(summary, maximize, mode, objectives);
  PrintFailures(summary, experiment_dir);
  std::printf("\nstore %s  (tunehost view %s / tunehost resume %s)\n",
              store->file().string().c_str(), summary.experiment_id.c_str(),
              summary.experiment_id.c_str());
  std::fflush(stdout);

  if (!args.summary_json.empty() &&
      !WriteSummaryJson(args.summary_json, summary, config.name, mode, maximize, objectives)) {
    spdlog::error("cannot write {}", args.summary_json);
  }
  if (!run_status.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", run_status.message().c_str());
    return kExitFailed;
  }
  const bool all_failed =
      !summary.trials.empty() &&
      std::all_of(summary.trials.begin(), summary.trials.end(), [](const TrialSummary& t) {
        return t.status == protocol::TrialStatus::kFailed;
      });
  if (all_failed) {
    std::fprintf(stderr, "tunehost: every trial failed (%zu): see the errors above\n",
                 summary.trials.size());
    return kExitFailed;
  }
  return summary.status == ExperimentStatus::kDone ? kExitOk : kExitFailed;
}

}  // namespace

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
  if (!args.workdir.empty()) config.working_dir = fs::absolute(args.workdir).lexically_normal();
  if (!args.id.empty()) {
    if (!ValidExperimentId(args.id)) {
      std::fprintf(stderr, "tunehost: --id '%s': use 1-64 of [A-Za-z0-9_-]\n", args.id.c_str());
      return kExitUsage;
    }
    config.spec.id = args.id;
  }
  // An algorithm that is not there is refused before anything is written
  // (the plugins are loaded again where the experiment runs, after a
  // --detach fork: no plugin crosses a fork).
  {
    PluginRegistry registry;
    const std::string plugin_dir = LoadPlugins(&registry, args.plugins, /*log=*/false);
    if (st = CheckPluginsExist(registry, plugin_dir, config); !st.ok()) {
      std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
      return kExitUsage;
    }
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
  // Refuse a bind or a keys directory before anything is written: a
  // refused run leaves no experiment behind. (--port-base binds the same
  // address, so the same rule.)
  std::unique_ptr<KeyRing> keys;
  const std::string address = args.bind_address.empty() ? "127.0.0.1" : args.bind_address;
  if (int rc = PrepareSecurity(args.security, FreeEndpoints(address), &keys); rc != kExitOk) {
    return rc;
  }
  st = MakePrivateDirectory(experiment_dir);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  ExperimentLock lock;
  if (!lock.Acquire(experiment_dir, config.spec.id)) return kExitUsage;
  int detached_rc = 0;
  if (args.detach && Detach(experiment_dir, config.spec.id, "host.log", "runs", &detached_rc)) {
    return detached_rc;
  }
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
  return RunExperiment(args, std::move(config), experiment_dir, store.get(), /*resume=*/false,
                       std::move(keys));
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
  if (Status st = MakePrivateDirectory(dir); !st.ok()) spdlog::warn("{}", st.message());
  for (const std::string& w : config.warnings) spdlog::warn("{}", w);
  int detached_rc = 0;
  if (args.detach) {
    store.reset();  // reopened by the child: no SQLite connection crosses a fork
    if (Detach(dir, args.id, "host.log", "runs", &detached_rc)) return detached_rc;
    Status st = Store::Open(dir / "store.db", Store::Mode::kOpen, &store);
    if (!st.ok()) {
      std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
      return kExitFailed;
    }
  }
  return RunExperiment(args, std::move(config), dir, store.get(), /*resume=*/true);
}

}  // namespace tunehost::host::cli
