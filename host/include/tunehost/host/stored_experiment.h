// A stored experiment read back from its directory: what `tunehost view` and
// `resume` open, and what tunectl reads when no host runs the experiment.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "tunehost/host/experiment_config.h"
#include "tunehost/host/store.h"
#include "tunehost/status.h"

namespace tunehost::host {

// Whether a host process holds the experiment's lock (<dir>/lock, flock):
// a run or resume host holds it exclusively, a serving view shared. False
// when there is no lock file.
bool HostHoldsLock(const std::filesystem::path& dir);

// The store's status as a person should read it, and its error text: a
// status no host leaves behind (RUNNING, ...) while no host holds the lock
// means its host died: "CRASHED", with an error saying how to continue it.
std::string StoredStatus(const Store& store, const std::filesystem::path& dir,
                         std::string* error);

// Opens <dir>/store.db and the experiment's configuration as it last was
// (its limits after updates, its latest search space); spec.id is the
// directory's name.
Status OpenStoredExperiment(const std::filesystem::path& dir, Store::Mode mode,
                            std::unique_ptr<Store>* store, ExperimentConfig* config);

}  // namespace tunehost::host
