// The `tpe` tuner's state and its checkpoint (org.tunehost.tpe, version 1;
// the SDK's saved-state header, sdk/cpp/class_args.h): a map of
// "objectives" (the multi-objective signature, nil without), the seed and
// engine, "observations" (the model's, or multi-objective [[configuration,
// index into results], ...]), "running" [[id, configuration], ...],
// "results" ([params, loss] or [params, values, violation]), "seen" and
// "exhausted". The liar's statistics and the multi-objective order are
// rebuilt from the results, not saved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpe_model.h"
#include "tunehost/sdk/cpp/objectives.h"
#include "tunehost/sdk/cpp/pareto.h"
#include "tunehost/sdk/cpp/search_space.h"
#include "tunehost/sdk/cpp/seen.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins::tpe {

// What the tuner knows, all of it saved.
struct TunerState {
  uint64_t seed = 0;
  std::mt19937_64 rng;
  std::unique_ptr<Model> model;  // null before a search space
  // Generated and not yet ended: id -> configuration (internal format).
  std::map<int64_t, sdk::Assignment> running;
  // Every result as the trial received its parameters, to carry the history
  // over a search-space update: (parameters, loss).
  std::vector<std::pair<sdk::OwnedObject, double>> results;
  sdk::SeenConfigurations seen;
  bool exhausted = false;
  // Multi-objective only: scores parallel to results (whose losses are
  // then 0), observed the configurations in the model with their score.
  std::vector<sdk::Candidate> scores;
  std::vector<std::pair<sdk::Assignment, size_t>> observed;
};

class StateCodec {
 public:
  // All borrowed: the tuner's search space, options and objectives (nullptr
  // for a single objective), which a checkpoint must match.
  StateCodec(const sdk::SearchSpace* space, const Options& options,
             const sdk::ObjectiveSet* multi)
      : space_(space), options_(options), multi_(multi) {}

  std::string Save(const TunerState& s) const;
  // Replaces `s` by the saved state; throws sdk::Error(TH_INVALID_ARGUMENT)
  // on a malformed state or one saved with other objectives, leaving `s`
  // as it was.
  void Load(std::string_view state, TunerState& s) const;

 private:
  const sdk::SearchSpace* space_;
  Options options_;
  const sdk::ObjectiveSet* multi_;
};

}  // namespace tunehost::plugins::tpe
