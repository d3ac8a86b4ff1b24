// A stored experiment read back from its directory (stored_experiment.h).
#include "tunehost/host/stored_experiment.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace tunehost::host {

namespace fs = std::filesystem;

bool HostHoldsLock(const fs::path& dir) {
  int fd = open((dir / "lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

std::string StoredStatus(const Store& store, const fs::path& dir, std::string* error) {
  std::string status = store.Meta("status").value_or("UNKNOWN");
  *error = store.Meta("error").value_or("");
  const bool finished =
      status == "DONE" || status == "STOPPED" || status == "ERROR" || status == "UNKNOWN";
  if (!finished && !HostHoldsLock(dir)) {
    *error = "its host died while it was " + status + "; `tunehost resume " +
             dir.filename().string() + "` continues it";
    status = "CRASHED";
  }
  return status;
}

Status OpenStoredExperiment(const fs::path& dir, Store::Mode mode, std::unique_ptr<Store>* store,
                            ExperimentConfig* config) {
  Status st = Store::Open(dir / "store.db", mode, store);
  if (!st.ok()) return st;
  fs::path source;
  std::string yaml;
  st = (*store)->Config(&source, &yaml);
  if (st.ok()) st = ParseExperimentConfig(yaml, source, config);
  if (!st.ok()) return st;
  config->spec.id = dir.filename().string();
  auto number = [&](const char* key, double fallback) {
    auto v = (*store)->Meta(key);
    return v ? std::strtod(v->c_str(), nullptr) : fallback;
  };
  config->spec.concurrency =
      static_cast<uint32_t>(number("concurrency", config->spec.concurrency));
  config->spec.max_trials = static_cast<uint64_t>(number("max_trials", config->spec.max_trials));
  config->spec.max_duration_s = number("max_duration_s", config->spec.max_duration_s);
  if (auto space = (*store)->LatestSearchSpace()) config->search_space = *space;
  return Status::Ok();
}

}  // namespace tunehost::host
