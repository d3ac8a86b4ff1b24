// The `anneal` tuner (org.tunehost.anneal): NNI's Anneal tuner, which is
// hyperopt's anneal.suggest (AnnealingAlgo with avg_best_idx = 2 and
// shrink_coef = 0.1) behind NNI's HyperoptTuner.
//
// For each new configuration the parameters are drawn in search-space order
// (a nested choice before its options' parameters). A parameter without a
// past result (only results of trials in which it was active count) is drawn
// from its prior. Otherwise a past result is chosen as the reference: the
// first reference chosen earlier for this configuration that used the
// parameter (hyperopt's best_tids, so parameters usually come from one
// trial), else a new one by loss rank: index = Geometric(1 / avg_best_idx) - 1,
// clipped to the last, in the results sorted by loss. With T = results of the
// parameter and shrinking = 1 / (1 + T * shrink_coef):
//   - uniform, quniform, loguniform, qloguniform: uniform on a window of width
//     (high - low) * shrinking centred on the reference value and shifted to
//     stay inside [low, high] (in log space for the log types); q-rounding and
//     clipping happen when the value is handed out;
//   - normal, qnormal, lognormal, qlognormal: normal around the reference
//     (its log for the log types; log(1e-16 + v) for qlognormal, as hyperopt)
//     with sigma * shrinking;
//   - choice, randint (categorical): option j with probability
//     (1 - shrinking) * [j == reference] + shrinking / size.
// A configuration generated or imported before is replaced by random draws.
//
// Constant liar (parallel_optimize): when more than 20 configurations were
// generated or imported, trials are running and at least one result arrived,
// every running trial is added to the history for the next draw with a fake
// metric: the min, max or mean (constant_liar_type) of the metrics received,
// turned into a loss like a real metric (negated when maximizing). As in NNI,
// "min" under optimize_mode maximize is therefore a pessimistic lie.
//
// Deviations from NNI (documented for the README):
//   - Draws use tunehost's seeded std::mt19937_64 (class_args `seed`), not
//     numpy's generators: the distributions are hyperopt's, the sequences are
//     not. Equal losses rank by arrival order (numpy's argsort is not stable).
//   - A duplicate is re-drawn at random until it is new (NNI re-draws once and
//     may still repeat); a fully tried finite space reports no more trials.
//   - A trial that ends without a result stops counting as running (NNI keeps
//     it in running_data forever, so its lie never goes away).
//   - Imported results are observations in every mode and count as received
//     metrics for the liar (NNI ignores imports when parallel_optimize is on,
//     and skips imported values that are 0).
//   - A new search space keeps the results that still fit it (NNI starts an
//     empty hyperopt history on every update_search_space).
//   - A result for an id this tuner did not generate is used when flagged
//     customized (its parameters are in the search space), else ignored with a
//     warning (NNI raises).
#pragma once

#include <cstdint>
#include <map>
#include <msgpack.hpp>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"
#include "tunehost/sdk/cpp/seen.h"

namespace tunehost::plugins {

class AnnealTuner : public sdk::Tuner {
 public:
  // hyperopt's AnnealingAlgo defaults, which NNI uses.
  static constexpr double kAvgBestIdx = 2.0;
  static constexpr double kShrinkCoef = 0.1;
  // NNI: the liar needs more than this many configurations.
  static constexpr int64_t kLiarMinConfigurations = 20;
  // Random draws of a duplicate before a finite space is searched for an
  // unseen configuration (as the random tuner).
  static constexpr int kMaxRedraws = 100;

  enum class Liar { kMin, kMax, kMean };

  // One past result (or lie) the annealing learns from: the parameters as
  // hyperopt records them (categorical index; the handed-out value, q-rounded,
  // in log space for the log types) and the loss (metric, negated when
  // maximizing).
  struct Observation {
    sdk::Assignment values;
    double loss = 0;
    bool operator==(const Observation& o) const { return values == o.values && loss == o.loss; }
  };

  // class_args: optimize_mode ("minimize" by default), seed, parallel_optimize
  // (false), constant_liar_type ("min", "max" or "mean"; "min"). Anything else
  // is refused with Error(TH_INVALID_ARGUMENT) naming the argument.
  AnnealTuner(sdk::HostRef host, const msgpack::object& class_args);

  void UpdateSearchSpace(const msgpack::object& space) override;
  bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) override;
  void ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                          const msgpack::object& value, double scalar, bool customized) override;
  void TrialEnd(int64_t parameter_id, bool success) override;
  void ImportData(const msgpack::object& records) override;
  std::string SaveState() override;
  // Needs the search space first (the same one the state was saved with).
  void LoadState(std::string_view state) override;

  uint64_t seed() const { return seed_; }
  bool maximize() const { return maximize_; }
  // Real results, in arrival order.
  const std::vector<Observation>& observations() const { return observations_; }
  size_t running_count() const { return running_.size(); }
  // Whether the next draw adds lies for the running trials (NNI's rule).
  bool LiarActive() const;
  // The history the next draw learns from: the results, then one lie per
  // running trial (in id order) when the liar is active.
  std::vector<Observation> ModelHistory() const;

 private:
  const sdk::SearchSpace& Space() const;
  // hyperopt's anneal.suggest for one configuration (internal format).
  sdk::Assignment Suggest(const std::vector<Observation>& history);
  // The reference result for parameter i among `having` (indices of
  // history that used it); `chosen` is hyperopt's best_tids.
  size_t ChooseReference(size_t i, const std::vector<size_t>& having,
                         const std::vector<Observation>& history, std::vector<size_t>& chosen);
  double Perturb(const sdk::Parameter& p, double reference, double shrinking);
  // A configuration not generated or imported before, or nullopt.
  std::optional<sdk::Assignment> Deduplicate(sdk::Assignment a);
  // The observed form of a drawn or parsed configuration (see Observation).
  sdk::Assignment Observe(const sdk::Assignment& a) const;
  void AddResult(sdk::Assignment values, double metric);
  double LossOf(double metric) const;

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  bool maximize_ = false;
  bool parallel_ = false;
  Liar liar_ = Liar::kMin;
  std::optional<sdk::SearchSpace> space_;

  std::vector<Observation> observations_;
  // Generated configurations awaiting their result (observed form), by id.
  std::map<int64_t, sdk::Assignment> running_;
  sdk::SeenConfigurations seen_;
  // Configurations generated or imported (NNI's len(total_data)).
  int64_t configurations_ = 0;
  // Metrics received (NNI's optimal_y), for the liar.
  int64_t metric_count_ = 0;
  double metric_min_ = 0;
  double metric_max_ = 0;
  double metric_sum_ = 0;
  // Set when a finite space is fully tried; cleared by a new space or state.
  bool exhausted_ = false;
};

}  // namespace tunehost::plugins
