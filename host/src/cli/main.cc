// The tunehost command line: `serve` (a host for remote workers and clients),
// `run` (one experiment from a YAML file with local workers), `resume` and
// `view` (a stored experiment), `report` (one HTML file), `plugins`. Each subcommand is a file of its
// own (cmd_*.cc); this one reads the command line.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "tunehost/host/experiment_config.h"
#include "tunehost/host/local_workers.h"

namespace tunehost::host::cli {
namespace {

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
  serve_cmd->add_option("--events", serve.endpoints.events, "events endpoint (XPUB)")
      ->capture_default_str();
  AddSecurityOptions(serve_cmd, &serve.security);
  serve_cmd->add_option("--max-message-bytes", serve.max_message_bytes, "largest message accepted")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 31))
      ->capture_default_str();
  serve_cmd
      ->add_option("--max-result-bytes", serve.max_result_bytes,
                   "largest message accepted on the results socket (workers' results)")
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
  serve_cmd
      ->add_option("--prefetch", serve.prefetch,
                   "trials generated ahead of a free slot, so a freed slot is offered one at "
                   "once (the tuner then suggests without the last N results)")
      ->check(CLI::Range(uint32_t{0}, static_cast<uint32_t>(protocol::kMaxPrefetch)))
      ->capture_default_str();
  AddWebUiOptions(serve_cmd, &serve.ui);
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
                      "bind control, jobs, results, events on ports N..N+3 (default: free "
                      "ports)");
  run_cmd->add_option("--bind", run.bind_address,
                      "address to bind (default 127.0.0.1; another one, e.g. 0.0.0.0 for "
                      "workers on other machines, needs --keys)");
  AddSecurityOptions(run_cmd, &run.security);
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
  AddWebUiOptions(run_cmd, &run.ui);
  auto add_detach = [](CLI::App* cmd, bool* detach) {
    cmd->add_flag("--detach", *detach,
                  "run in the background, detached from this terminal (output in "
                  "<experiment dir>/host.log); returns once the host serves");
  };
  add_detach(run_cmd, &run.detach);
  run_cmd->add_option("--workdir", run.workdir,
                      "where the experiment's directory goes (default: the file's "
                      "experimentWorkingDirectory, else " + DefaultWorkingDir().string() + ")");
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
  resume_cmd->add_option("--bind", resume.bind_address,
                         "bind free ports (or --port-base) on this address instead of the "
                         "endpoints the experiment had; its workers cannot re-attach");
  resume_cmd->add_option("--summary-json", resume.summary_json,
                         "write the final status and every trial to this JSON file");
  resume_cmd
      ->add_option("--reattach-grace-ms", resume.reattach_grace_ms,
                   "how long trials that were running wait for their workers to re-attach "
                   "before they are offered again")
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}))
      ->capture_default_str();
  add_local_workers(resume_cmd, &resume.local_workers);
  AddSecurityOptions(resume_cmd, &resume.security);
  AddWebUiOptions(resume_cmd, &resume.ui);
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
  view_cmd->add_flag("--detach", view.detach,
                     "serve in the background, detached from this terminal (output in "
                     "<experiment dir>/view.log); returns once it serves")
      ->excludes("--once");
  AddWebUiOptions(view_cmd, &view.ui);
  view_cmd->add_flag("--insecure", view.insecure, "allow --ui on an address beyond loopback");
  AddLogLevel(view_cmd, &log_level);

  ReportArgs report;
  CLI::App* report_cmd = app.add_subcommand(
      "report", "write a stored experiment's web UI as one HTML file that opens offline");
  report_cmd->add_option("ID", report.id, "experiment id")->required();
  report_cmd->add_option("--workdir", report.workdir,
                         "where experiments live (default: " + DefaultWorkingDir().string() +
                             ")");
  report_cmd->add_option("-o,--output", report.output,
                         "the file to write (default: <experiment dir>/report.html; - for "
                         "standard output)");
  AddLogLevel(report_cmd, &log_level);

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
  } else if (report_cmd->parsed()) {
    rc = CmdReport(report);
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
}  // namespace tunehost::host::cli

int main(int argc, char** argv) { return tunehost::host::cli::Main(argc, argv); }
