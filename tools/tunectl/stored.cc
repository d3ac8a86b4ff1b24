// tunectl on an experiment that no host runs: its store, read in this
// process as `tunehost view` reads it (a viewed experiment: queries are
// answered, changes refused). Nothing is written.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>

#include <spdlog/spdlog.h>

#include "tunectl.h"
#include "tunehost/host/control_queries.h"
#include "tunehost/host/plugin.h"
#include "tunehost/host/server.h"
#include "tunehost/host/stored_experiment.h"

namespace tunehost::tunectl {

namespace host = tunehost::host;

struct StoredExperiment {
  fs::path dir;
  std::unique_ptr<host::Store> store;
  host::ExperimentConfig config;
  host::PluginRegistry registry;  // a viewed experiment runs no plugin
  std::unique_ptr<host::Server> server;
  std::string status, error;
};

std::shared_ptr<StoredExperiment> OpenStored(const fs::path& dir) {
  spdlog::set_level(spdlog::level::warn);  // the view's own log lines are not the answer
  auto s = std::make_shared<StoredExperiment>();
  s->dir = dir;
  const std::string id = dir.filename().string();
  tunehost::Status st =
      host::OpenStoredExperiment(dir, host::Store::Mode::kReadOnly, &s->store, &s->config);
  if (!st.ok()) Fail(kExitNoHost, "experiment " + id + ": " + st.message());
  // Never bound: ST shows no endpoints.
  s->server = std::make_unique<host::Server>(host::ServerOptions{}, &s->registry);
  st = s->server->View(s->config.spec, *s->store);
  if (!st.ok()) Fail(kExitNoHost, "experiment " + id + ": " + st.message());
  s->status = host::StoredStatus(*s->store, dir, &s->error);
  return s;
}

std::string StoredDescription(const StoredExperiment& s) {
  return "store " + s.store->file().string();
}

Json CallStored(StoredExperiment& s, p::Body body) {
  const std::string id = s.config.spec.id;
  if (std::holds_alternative<p::Ping>(body)) {
    return Json{{"status", s.status}, {"experiment_id", id}};
  }
  if (!host::IsControlRequest(body) || host::IsMutatingRequest(body)) {
    Fail(kExitHostError, "experiment " + id + " is not running (" + s.status +
                             ", read from its store): nothing can change it; `tunehost resume " +
                             id + "` continues it");
  }
  const bool status_query = std::holds_alternative<p::GetStatus>(body);
  p::Packed data;
  tunehost::Status st = s.server->AnswerQuery(body, &data);
  if (!st.ok()) Fail(kExitHostError, std::string(st.CodeName()) + ": " + st.message());
  Json j = Json::parse(p::PackedToJson(data));
  if (status_query) {
    // How it ended, not the VIEWED of a read-only view.
    j["status"] = s.status;
    j["error"] = s.error;
  }
  return j;
}

// Every experiment under the workdir, newest first: read from each store
// (read-only, beside a host that may be writing it).
int Experiments(const GlobalOptions& o) {
  spdlog::set_level(spdlog::level::warn);
  const fs::path dir = o.workdir.empty() ? DefaultWorkdir() : fs::path(o.workdir);
  Json list = Json::array();
  for (const ExperimentEntry& e : ListExperiments(dir)) {
    Json row = {{"experiment_id", e.id}, {"dir", e.dir.string()}, {"running", e.live}};
    std::unique_ptr<host::Store> store;
    tunehost::Status st = host::Store::Open(e.dir / "store.db", host::Store::Mode::kReadOnly, &store);
    if (st.ok()) {
      std::string error;
      row["status"] = host::StoredStatus(*store, e.dir, &error);
      row["name"] = store->Meta("name").value_or("");
      row["trials"] = store->CountRows("trials");
      row["error"] = error;
    } else {
      row["status"] = "UNREADABLE";
      row["error"] = st.message();
    }
    const auto changed = std::chrono::time_point_cast<std::chrono::seconds>(
        e.changed - fs::file_time_type::clock::now() + std::chrono::system_clock::now());
    row["changed"] = std::chrono::duration<double>(changed.time_since_epoch()).count();
    list.push_back(std::move(row));
  }
  if (o.json) {
    std::cout << Json{{"experiments", list}}.dump(2) << "\n";
    return kExitOk;
  }
  if (list.empty()) {
    std::printf("no experiments in %s\n", dir.string().c_str());
    return kExitOk;
  }
  std::printf("%-10s %-9s %-7s %7s  %-19s  %s\n", "ID", "STATUS", "HOST", "TRIALS", "CHANGED",
              "NAME");
  for (const Json& r : list) {
    const std::time_t t = static_cast<std::time_t>(r["changed"].get<double>());
    char when[32] = "-";
    std::tm tm{};
    if (localtime_r(&t, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    std::printf("%-10s %-9s %-7s %7s  %-19s  %s%s\n",
                r["experiment_id"].get<std::string>().c_str(),
                r["status"].get<std::string>().c_str(), r["running"].get<bool>() ? "serving" : "-",
                r.contains("trials") ? std::to_string(r["trials"].get<int64_t>()).c_str() : "-",
                when, r.value("name", "").c_str(),
                r.value("error", "").empty() ? "" : ("  (" + r.value("error", "") + ")").c_str());
  }
  return kExitOk;
}

}  // namespace tunehost::tunectl
