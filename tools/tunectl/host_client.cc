// tunectl: finding the host (flags, host.json, its lock) and this client's keys.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "tunectl.h"

namespace tunehost::tunectl {

fs::path DefaultWorkdir() {
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : ".") / "tunehost-experiments";
}

// Whether a host process holds the experiment's lock (<dir>/lock, flock);
// true when there is no lock file (a host.json written by hand or by another
// program: only asking the host tells).
bool HostHoldsLock(const fs::path& dir) {
  int fd = open((dir / "lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  // Exclusive: a run or resume host holds it exclusively, a serving view shared.
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

// --control EP, else --experiment ID's host.json, else the default endpoint;
// the host's public key from --server-key, else from host.json.
HostAddress FindHost(const GlobalOptions& o) {
  HostAddress a;
  if (!o.server_key_file.empty()) {
    p::KeyPair server;
    tunehost::Status st = p::ReadKeyFile(o.server_key_file, /*need_secret=*/false, &server);
    if (!st.ok()) Fail(kExitUsage, st.message());
    a.server_key = server.public_key;
  }
  if (!o.control.empty() || o.experiment.empty()) {
    a.control = o.control.empty() ? kDefaultControl : o.control;
    return a;
  }
  const fs::path dir = o.workdir.empty() ? DefaultWorkdir() : fs::path(o.workdir);
  const fs::path file = dir / o.experiment / "host.json";
  std::ifstream in(file);
  if (!in) {
    Fail(kExitNoHost, "experiment " + o.experiment + " has no " + file.string() +
                          " (is its host running?)");
  }
  // host.json says where to connect and what the workers run (launch):
  // only the user's own, unwritable by others, is trusted (§9).
  for (const fs::path& path : {dir / o.experiment, file}) {
    if (tunehost::Status st = p::CheckTrustedPath(path); !st.ok()) Fail(kExitUsage, st.message());
  }
  if (!HostHoldsLock(dir / o.experiment)) {
    // host.json is removed when a host exits; left behind, its host died.
    Fail(kExitNoHost, "experiment " + o.experiment + ": CRASHED: no host holds it (its host "
                      "died); `tunehost resume " + o.experiment + "` continues it");
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
