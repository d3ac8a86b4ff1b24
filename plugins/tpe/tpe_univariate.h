// The TPE model's per-parameter sampler (NNI's TPE, Bergstra et al. 2011):
// one parameter drawn from its own history, a Parzen estimator (adaptive
// Gaussian mixture, or weighted category counts) over the good group and
// one over the bad, the candidate with the best ratio of the two winning.
// NNI's tpe_tuner.py: suggest_categorical, suggest_normal_common.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

#include "tpe_model.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins::tpe {

struct ParamHistory;

class UnivariateSampler {
 public:
  // `space` is borrowed and must outlive the sampler.
  UnivariateSampler(const sdk::SearchSpace* space, const Options& options)
      : space_(space), options_(options) {}

  // Parameter i from its history `h`; `pending` configurations in flight
  // count as observations of loss `lie` (NNI's constant liar). Draws at
  // random while warming up (fewer than n_startup_jobs).
  double Suggest(size_t i, const ParamHistory& h, const std::vector<sdk::Assignment>& pending,
                 double lie, std::mt19937_64& rng) const;

 private:
  double SuggestCategorical(const sdk::Parameter& p, const ParamHistory& h,
                            const std::vector<double>& lie_values, double lie,
                            std::mt19937_64& rng) const;
  double SuggestNumeric(const sdk::Parameter& p, const ParamHistory& h,
                        const std::vector<double>& lie_values, double lie,
                        std::mt19937_64& rng) const;

  const sdk::SearchSpace* space_;
  Options options_;
};

}  // namespace tunehost::plugins::tpe
