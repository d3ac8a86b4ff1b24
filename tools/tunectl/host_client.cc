// tunectl: finding the host (flags, host.json, its lock) and this client's keys.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "tunehost/host/stored_experiment.h"

#include "tunectl.h"

namespace tunehost::tunectl {

fs::path DefaultWorkdir() {
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : ".") / "tunehost-experiments";
}

namespace {

// Whether a host process holds the experiment's lock; true when there is no
// lock file (a host.json written by hand or by another program: only asking
// the host tells).
bool LockedOrUnlockable(const fs::path& dir) {
  std::error_code ec;
  return !fs::exists(dir / "lock", ec) || tunehost::host::HostHoldsLock(dir);
}

bool Live(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "host.json", ec) && tunehost::host::HostHoldsLock(dir);
}

}  // namespace

std::vector<ExperimentEntry> ListExperiments(const fs::path& workdir) {
  std::vector<ExperimentEntry> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(workdir, ec)) {
    const fs::path store = e.path() / "store.db";
    if (!e.is_directory(ec) || !fs::exists(store, ec)) continue;
    ExperimentEntry x;
    x.id = e.path().filename().string();
    x.dir = e.path();
    x.live = Live(e.path());
    x.changed = fs::last_write_time(store, ec);
    for (const char* newer : {"store.db-wal", "host.json"}) {
      auto t = fs::last_write_time(e.path() / newer, ec);
      if (!ec && t > x.changed) x.changed = t;
    }
    out.push_back(std::move(x));
  }
  std::sort(out.begin(), out.end(), [](const ExperimentEntry& a, const ExperimentEntry& b) {
    return a.changed != b.changed ? a.changed > b.changed : a.id < b.id;
  });
  return out;
}

// See tunectl.h: --control, else --experiment (its host or its store), else
// the most recent experiment a host runs, else the default endpoint.
HostAddress FindHost(const GlobalOptions& o) {
  HostAddress a;
  if (!o.server_key_file.empty()) {
    p::KeyPair server;
    tunehost::Status st = p::ReadKeyFile(o.server_key_file, /*need_secret=*/false, &server);
    if (!st.ok()) Fail(kExitUsage, st.message());
    a.server_key = server.public_key;
  }
  if (!o.control.empty()) {
    a.control = o.control;
    return a;
  }
  const fs::path dir = o.workdir.empty() ? DefaultWorkdir() : fs::path(o.workdir);
  std::string experiment = o.experiment;
  if (experiment.empty()) {
    // The most recent experiment a host runs; else `tunehost serve`'s
    // default endpoint, naming the latest stored experiment if nobody answers.
    const std::vector<ExperimentEntry> all = ListExperiments(dir);
    auto live = std::find_if(all.begin(), all.end(), [](const auto& e) { return e.live; });
    if (live == all.end()) {
      a.control = kDefaultControl;
      if (!all.empty()) {
        a.hint = "; the latest experiment in " + dir.string() + " is " + all.front().id +
                 ", not running: tunectl --experiment " + all.front().id + " ...";
      }
      return a;
    }
    experiment = live->id;
  }
  const fs::path file = dir / experiment / "host.json";
  std::ifstream in(file);
  std::error_code ec;
  if (!in || !LockedOrUnlockable(dir / experiment)) {
    // No host runs it (host.json is removed when a host exits; left behind,
    // its host died): read its store.
    if (fs::exists(dir / experiment / "store.db", ec)) {
      // Read only if it is the user's own, like host.json below (§9).
      for (const fs::path& path : {dir / experiment, dir / experiment / "store.db"}) {
        if (tunehost::Status st = p::CheckTrustedPath(path); !st.ok()) {
          Fail(kExitUsage, st.message());
        }
      }
      a.stored_dir = dir / experiment;
      return a;
    }
    Fail(kExitNoHost, "experiment " + experiment + " has no " + file.string() +
                          " and no store (is the id right? `tunectl experiments` lists them)");
  }
  // host.json says where to connect and what the workers run (launch):
  // only the user's own, unwritable by others, is trusted (§9).
  for (const fs::path& path : {dir / experiment, file}) {
    if (tunehost::Status st = p::CheckTrustedPath(path); !st.ok()) Fail(kExitUsage, st.message());
  }
  Json j = Json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("control") ||
      !j["control"].is_string()) {
    Fail(kExitNoHost, file.string() + " has no \"control\" endpoint");
  }
  a.control = j["control"].get<std::string>();
  if (a.server_key.empty() && j.contains("server_key") && j["server_key"].is_string()) {
    a.server_key = j["server_key"].get<std::string>();
  }
  return a;
}

// This client's keys for a host that authenticates (wire-format.md §9).
p::ClientKeys KeysFor(const GlobalOptions& o, const HostAddress& host) {
  p::ClientKeys keys;
  if (host.server_key.empty()) {
    // $TUNEHOST_KEY serves every host that authenticates; this one does not.
    if (!o.key_file.empty() && !o.key_from_environment) {
      Fail(kExitUsage, "--key needs the host's public key: --server-key FILE (or an "
                       "--experiment whose host.json has it)");
    }
    return keys;
  }
  if (o.key_file.empty()) {
    Fail(kExitUsage, "the host authenticates: give this client's key with --key FILE (or "
                     "$TUNEHOST_KEY), a .key_secret file from `tunectl keygen`");
  }
  tunehost::Status st = p::ReadKeyFile(o.key_file, /*need_secret=*/true, &keys.own);
  if (!st.ok()) Fail(kExitUsage, st.message());
  keys.server_key = host.server_key;
  return keys;
}

}  // namespace tunehost::tunectl
