// tunehost view: a stored experiment, printed and served read-only.
#include <cstdio>
#include <map>

#include "cli.h"
#include "tunehost/host/control_queries.h"

namespace tunehost::host::cli {

int CmdView(const ViewArgs& args) {
  fs::path dir;
  std::unique_ptr<Store> store;
  ExperimentConfig config;
  int rc = OpenStored(args.id, args.workdir, Store::Mode::kReadOnly, &dir, &store, &config);
  if (rc != kExitOk) return rc;
  ExperimentLock lock;
  if (args.detach) {
    // Checked before the fork, so the caller hears of a running host; the
    // store is opened again in the child (no connection crosses a fork).
    if (int pid = LiveHostPid(dir / "host.json")) {
      std::fprintf(stderr, "tunehost: experiment %s is running (host pid %d): ask that host\n",
                   args.id.c_str(), pid);
      return kExitUsage;
    }
    if (!lock.Acquire(dir, args.id, /*shared=*/true)) return kExitUsage;
    store.reset();
    int detached_rc = 0;
    if (Detach(dir, args.id, "view.log", "is served read-only,", &detached_rc)) {
      return detached_rc;
    }
    rc = OpenStored(args.id, args.workdir, Store::Mode::kReadOnly, &dir, &store, &config);
    if (rc != kExitOk) return rc;
  }
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
  std::string error;
  const std::string stored_status = StoredStatus(*store, dir, &error);
  std::printf("experiment %s%s: %s%s (viewed read-only)\n", args.id.c_str(),
              config.name.empty() ? "" : (" \"" + config.name + "\"").c_str(),
              stored_status.c_str(), error.empty() ? "" : (": " + error).c_str());
  std::map<std::string, size_t> counts;
  for (const TrialSummary& t : summary.trials) ++counts[std::string(protocol::ToString(t.status))];
  std::printf("%zu trial(s) ended", summary.trials.size());
  for (const auto& [status, n] : counts) std::printf(", %s %zu", status.c_str(), n);
  std::printf("\n");
  PrintBestTrials(summary, mode == "maximize", mode, ObjectivesOf(config.spec.tuner.args));
  std::printf("store %s\n", store->file().string().c_str());
  std::fflush(stdout);
  if (args.once) return kExitOk;

  if (!args.detach) {
    if (int pid = LiveHostPid(dir / "host.json")) {
      std::fprintf(stderr, "tunehost: experiment %s is running (host pid %d): ask that host\n",
                   args.id.c_str(), pid);
      return kExitUsage;
    }
    if (!lock.Acquire(dir, args.id, /*shared=*/true)) return kExitUsage;
  }
  st = server.Bind();
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  StopOnSignal stop(&server);
  std::unique_ptr<WebUi> ui;
  if (int ui_rc = StartWebUi(&server, args.ui, args.insecure, dir, true, &ui); ui_rc != kExitOk) {
    return ui_rc;
  }
  HostFile host_file(dir / "host.json", args.id, server.bound(), "", {}, 0,
                     ui ? ui->Url(true) : "");
  std::printf("serving read-only on control %s until stopped (Ctrl-C or `tunectl stop`)\n",
              server.bound().control.c_str());
  if (ui) std::printf("web UI %s\n", ui->Url(true).c_str());
  std::fflush(stdout);
  st = server.Run();
  ui.reset();  // before the server it asks
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: %s\n", st.message().c_str());
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace tunehost::host::cli
