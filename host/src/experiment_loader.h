// An experiment rebuilt from its store (wire-format.md §5.3): resumed (the
// tuner's checkpoint and every result it had not seen replayed, the trials
// the stop ended queued again, running ones waiting for their workers to
// re-attach) or viewed read-only. Private to the host library.
#pragma once

#include <chrono>
#include <vector>

#include "tunehost/host/server.h"
#include "tunehost/host/store.h"
#include "tunehost/status.h"

namespace tunehost::host {

class ExperimentLoader {
 public:
  // `server` must outlive this.
  explicit ExperimentLoader(Server::Impl& server) : server_(server) {}

  // A configured experiment resumed from the store it uses.
  Status Resume(std::chrono::milliseconds grace);
  // The trials of `stored` into the engine. With `resume`, trials the
  // experiment's stop ended are queued again (source "resumed").
  void RestoreTrials(const std::vector<StoredTrial>& stored, bool resume,
                     std::chrono::milliseconds grace);

 private:
  // Whether the tuner took its stored checkpoint; the assessor's too.
  bool LoadCheckpoints(const Store& store, uint64_t* known);
  // Every result and import the tuner has not seen, in order; the number.
  Status ReplayResults(const Store& store, const std::vector<StoredTrial>& stored,
                       uint64_t known, size_t* replayed);

  Server::Impl& server_;
};

}  // namespace tunehost::host
