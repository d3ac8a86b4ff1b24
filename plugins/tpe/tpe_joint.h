// The TPE model's joint sampler (tunehost's default, `multivariate: true`):
// a group of parameters that are active together drawn together from
// product kernels with a Scott-rule bandwidth, as Optuna's
// TPESampler(multivariate=True) (optuna/samplers/_tpe/parzen_estimator.py),
// narrower (Bandwidth says why). The model (tpe_model.cc) keeps one for the
// always-active parameters and, with Options::group, one per nested option
// for the parameters directly under it (Optuna's group=True).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "tpe_model.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins::tpe {

class JointSampler {
 public:
  // `space` is borrowed and must outlive the sampler. The always-active
  // parameters; none without options.multivariate.
  JointSampler(const sdk::SearchSpace* space, const Options& options);
  // The parameters `params` (indices into the space's params), which must be
  // active together.
  JointSampler(const sdk::SearchSpace* space, const Options& options, std::vector<size_t> params);

  // The parameters modelled jointly (indices into the space's params).
  const std::vector<size_t>& params() const { return joint_; }
  bool empty() const { return joint_.empty(); }

  // Sets out[i] for every joint parameter i from the observations
  // xs[members[k]] with losses[k] (arrival order; `by_loss` the k sorted by
  // loss; no `members`: every xs) and the `pending` configurations counted
  // with loss `lie` (NNI's constant liar). Every observation and pending
  // configuration given must have the parameters active.
  void Suggest(const std::vector<sdk::Assignment>& xs, const std::vector<uint32_t>* members,
               const std::vector<double>& losses, const std::vector<uint32_t>& by_loss,
               const std::vector<const sdk::Assignment*>& pending, double lie,
               std::mt19937_64& rng, sdk::Assignment& out) const;

 private:
  // One group of the joint model: observations as rows of `values`
  // (dims columns), their log weights, and the prior as one more component.
  struct Group {
    std::vector<double> values;
    std::vector<double> log_w;
    std::vector<double> w;       // with the prior's weight last (for drawing)
    double total = 0;            // sum of w
    std::vector<double> inv_bw;  // 0 for a categorical dimension
    // Categorical dimensions: log probability of the observation's own
    // category and of any other one.
    std::vector<double> log_same, log_other;
    double log_norm = 0;  // sum over numeric dims of -log(bandwidth) - log(sqrt(2 pi))
    size_t size() const { return log_w.size(); }
  };

  double Bandwidth(const sdk::Parameter& p, size_t count) const;
  double CategorySpread(const Group& g) const;
  void FinishGroup(Group& g) const;
  double LogPdf(const Group& g, const double* x, std::vector<double>& terms) const;
  // A draw from component j of the good group (j == size(): the prior).
  void Sample(const Group& g, size_t j, std::mt19937_64& rng, double* x) const;

  const sdk::SearchSpace* space_;
  Options options_;
  std::vector<size_t> joint_;
};

}  // namespace tunehost::plugins::tpe
