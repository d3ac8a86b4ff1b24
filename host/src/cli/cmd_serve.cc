// tunehost serve: a long-running host that experiments (IN) and workers
// attach to.
#include <memory>

#include <spdlog/spdlog.h>

#include "cli.h"

namespace tunehost::host::cli {

int CmdServe(const ServeArgs& args) {
  PluginRegistry registry;
  LoadPlugins(&registry, args.plugins);
  ServerOptions options;
  options.endpoints = args.endpoints;
  options.max_message_bytes = args.max_message_bytes;
  options.max_result_bytes = args.max_result_bytes;
  options.heartbeat_interval = std::chrono::milliseconds(args.heartbeat_ms);
  options.ack_timeout = std::chrono::milliseconds(args.ack_timeout_ms);
  options.prefetch = args.prefetch;
  const size_t file_limit = RaiseFileLimit();
  options.max_connections =
      args.max_connections != 0 ? args.max_connections : ConnectionsPerSocket(file_limit);
  std::unique_ptr<KeyRing> keys;
  if (int rc = PrepareSecurity(args.security, args.endpoints, &keys); rc != kExitOk) return rc;
  options.keys = keys.get();
  Server server(options, &registry);
  Status st = server.Bind();
  if (!st.ok()) {
    spdlog::error("{}", st.message());
    return kExitFailed;
  }
  StopOnSignal stop(&server);
  std::unique_ptr<WebUi> ui;
  if (int rc = StartWebUi(&server, args.ui, args.security.insecure, {}, false, &ui); rc != kExitOk) {
    return rc;
  }
  if (ui) spdlog::info("web UI {}", ui->Url(true));
  st = server.Run();
  ui.reset();  // before the server it asks
  g_plugin_abandoned = server.abandoned_plugin();
  if (!st.ok()) {
    spdlog::error("{}", st.message());
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace tunehost::host::cli
