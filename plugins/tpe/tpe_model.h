// The TPE model (Bergstra et al. 2011, NNI's TpeTuner): observations of one
// search space and suggestions from them. Used by the `tpe` tuner and by
// BOHB inside `hyperband`.
//
// Univariate (NNI): every parameter is modelled on its own from the trials in
// which it was active. Multivariate (tunehost's default; Optuna's
// multivariate TPE with a narrower bandwidth): the parameters that are
// always active are modelled jointly, so interactions are learned, and (with
// Options::group) so are the parameters directly under each nested option,
// from the trials that took it.
//
// Incremental: Add() inserts an observation into per-parameter structures
// kept sorted by loss and by value; Suggest() reads them without sorting.
// The samplers are UnivariateSampler (tpe_univariate.h) and JointSampler
// (tpe_joint.h); tpe_parzen.h holds what they share.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins::tpe {

// NNI's TpeArguments (defaults as NNI) plus `multivariate` (on by default:
// NNI's per-parameter model is `multivariate = false`).
struct Options {
  double gamma = 0.25;
  int64_t n_startup_jobs = 20;
  int64_t n_ei_candidates = 24;
  int64_t linear_forgetting = 25;
  double prior_weight = 1.0;
  bool multivariate = true;
  // randint as an ordered integer (Optuna's suggest_int) rather than NNI's
  // unordered category. TpeTuner sets it with multivariate unless told.
  bool ordered_randint = true;
  // With multivariate: the parameters directly under each nested option are
  // modelled jointly too, from the trials that took that option (Optuna's
  // group=True); else they are per-parameter. TpeTuner sets it with
  // multivariate unless told.
  bool group = true;
};

class Model {
 public:
  // `space` is borrowed and must outlive the model (and not change).
  Model(const sdk::SearchSpace* space, Options options);
  ~Model();
  Model(const Model& other);
  Model& operator=(const Model& other);

  // A finished trial: its configuration (internal format) and loss (lower is
  // better; negate a metric to maximize). Non-finite losses are ignored.
  void Add(const sdk::Assignment& x, double loss);
  // Many at once, in order (the same as Add for each, in O(N log N)).
  void AddMany(const std::vector<std::pair<sdk::Assignment, double>>& observations);
  // Observations added so far.
  size_t size() const;
  // How many of n observations (lies included) form the good group.
  size_t NBelow(size_t n) const;
  const Options& options() const;

  // One configuration. `pending` are configurations in flight, counted as
  // observations with loss `lie` (NNI's constant liar); empty for none.
  sdk::Assignment Suggest(std::mt19937_64& rng, const std::vector<sdk::Assignment>& pending,
                          double lie) const;

  // State: the observations in order (the structures are rebuilt on load).
  void Pack(msgpack::packer<msgpack::sbuffer>& pk) const;
  // Throws sdk::Error(TH_INVALID_ARGUMENT) on a malformed state.
  void Unpack(const msgpack::object& o);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tunehost::plugins::tpe
