// tunehost report: a stored experiment's web UI as one HTML file (data,
// styles and scripts inlined) that opens offline, for sharing and CI
// artifacts.
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host::cli {

namespace {

// The reply data of one control API query, as JSON.
Status QueryJson(Server& server, const protocol::Body& request, nlohmann::json* out) {
  protocol::Packed data;
  Status st = server.AnswerQuery(request, &data);
  if (st.ok()) *out = nlohmann::json::parse(protocol::PackedToJson(data), nullptr, false);
  return st;
}

}  // namespace

int CmdReport(const ReportArgs& args) {
  fs::path dir;
  std::unique_ptr<Store> store;
  ExperimentConfig config;
  // Read-only: a host may be running the experiment (SQLite lets a reader in).
  int rc = OpenStored(args.id, args.workdir, Store::Mode::kReadOnly, &dir, &store, &config);
  if (rc != kExitOk) return rc;
  PluginRegistry registry;  // a report runs no plugin
  Server server(ServerOptions{}, &registry);
  Status st = server.View(config.spec, *store);
  nlohmann::json status, trials, metrics;
  if (st.ok()) st = QueryJson(server, protocol::GetStatus{}, &status);
  if (st.ok()) st = QueryJson(server, protocol::ListTrials{}, &trials);
  if (st.ok()) st = QueryJson(server, protocol::GetMetrics{}, &metrics);
  if (!st.ok()) {
    std::fprintf(stderr, "tunehost: report %s: %s\n", args.id.c_str(), st.message().c_str());
    return kExitFailed;
  }
  // The status the experiment has (VIEWED only says how it is read here).
  std::string error;
  status["status"] = StoredStatus(*store, dir, &error);
  if (!error.empty()) status["error"] = error;
  const nlohmann::json data = {
      {"session",
       {{"role", "report"}, {"live", false}, {"read_only", true},
        {"experiment_dir", dir.string()}, {"version", kVersion}}},
      {"status", status}, {"trials", trials}, {"metrics", metrics}};
  const std::string page =
      ReportPage(data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));

  if (args.output == "-") {
    std::fwrite(page.data(), 1, page.size(), stdout);
    return std::fflush(stdout) == 0 ? kExitOk : kExitFailed;
  }
  const fs::path out = args.output.empty() ? dir / "report.html" : fs::path(args.output);
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file.write(page.data(), static_cast<std::streamsize>(page.size()));
  file.close();
  if (!file) {
    std::fprintf(stderr, "tunehost: cannot write %s\n", out.string().c_str());
    return kExitFailed;
  }
  std::printf("report of experiment %s (%zu trial(s), %s) written to %s\n", args.id.c_str(),
              trials.value("total", size_t{0}), status["status"].get<std::string>().c_str(),
              out.string().c_str());
  return kExitOk;
}

}  // namespace tunehost::host::cli
