// The `bohb` tuner (org.tunehost.bohb): NNI's BOHB advisor (Falkner et al.
// 2018) as a tuner. Hyperband brackets (bracket_tuner.h) between min_budget
// and max_budget, run one at a time; the configurations of a new bracket's
// first round come from a model fitted on the results of the largest budget
// that has at least min_points_in_model of them (one model per budget), and
// a random_fraction of them are random draws. Every trial gets
// "TRIAL_BUDGET" = r_i.
//
// class_args (NNI's, plus seed): optimize_mode ("maximize" default |
// "minimize"), min_budget (integer >= 1, default 1), max_budget (integer >=
// min_budget, default 3), eta (integer >= 2, default 3), min_points_in_model
// (integer; default and minimum: number of parameters + 1, as NNI),
// top_n_percent (1..99, default 15), num_samples (default 64),
// random_fraction (0..1, default 1/3), bandwidth_factor (default 3),
// min_bandwidth (default 1e-3), seed (non-negative integer; random and
// logged when omitted).
//
// Brackets: s_max = floor(log_eta(max_budget/min_budget)); bracket s has
// n = ceil((s_max+1)·eta^s/(s+1)) configurations and budgets
// r_i = floor(max_budget/eta^(s-i)) (NNI's BOHB Bracket). With the defaults:
// s=1: 3 configurations at budget 1, the best 1 at budget 3; s=0: 2 at 3;
// then over again.
//
// Deviations from NNI's BOHB (besides those listed in bracket_tuner.h):
//   - The model is tunehost's TPE (plugins/tpe/tpe_model.h) with
//     multivariate=true: a joint Parzen estimator of the good and the bad
//     configurations, candidates drawn from the good one and the best
//     l(x)/g(x) kept; NNI fits statsmodels' KDEMultivariate (normal-reference
//     bandwidths). Consequences:
//       * gamma = top_n_percent/100 splits with TPE's rule, good =
//         min(ceil(gamma·sqrt(N)), 25) lowest losses; NNI takes
//         max(min_points_in_model, top_n_percent·N/100) good and as many bad.
//       * num_samples is TPE's n_ei_candidates (NNI: samples to optimize EI).
//       * bandwidth_factor and min_bandwidth are accepted and checked but not
//         used: the TPE model's own Parzen bandwidths are used instead.
//       * A model exists for a budget as soon as it has min_points_in_model
//         results; NNI also needs more than dim points in both the good and
//         the bad set, and stops recording results of budgets below the
//         largest one that has a model (we keep them all).
//   - Results are filed under the budget the trial ran with (its
//     TRIAL_BUDGET). NNI files a trial's final result under the metric's
//     `sequence`, which is 0 for every FINAL metric, so its models do not
//     actually separate budgets.
//   - Trials that end without a result (failed) do not enter the model; NNI
//     does the same (it never sees a metric for them).
//   - ImportData feeds the models, as NNI: a record's budget is its
//     TRIAL_BUDGET key, max_budget without one. NNI skips records whose
//     value is falsy (0 too); we keep every numeric value. Results of
//     customized (unknown) parameter ids count as imports.
//   - A new search space rebuilds the models from the results that fit it
//     (NNI's BOHB does not support search space updates, #2096).
//   - Search spaces: every type but nested choice, as NNI; NNI's
//     "ConfigSpace" .pcs search-space file is not supported.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "bracket_tuner.h"
#include "tpe/tpe_model.h"
#include "tunehost/sdk/cpp/helper.h"

namespace tunehost::plugins::hyperband {

class BohbTuner : public BracketTuner {
 public:
  static constexpr int64_t kMaxBudget = 1000000;

  // Refuses bad class_args with Error(TH_INVALID_ARGUMENT) naming the argument.
  BohbTuner(sdk::HostRef host, const msgpack::object& class_args);

  void ImportData(const msgpack::object& records) override;

  // First-round configurations drawn at random / suggested by a model.
  int64_t random_picks() const { return random_picks_; }
  int64_t model_picks() const { return model_picks_; }
  // Results the models are built from (own trials and imports).
  size_t observations() const { return observations_.size(); }
  // The budget whose model the next suggestion would use, if any.
  std::optional<double> model_budget() const;
  // Effective min_points_in_model for the current search space.
  int64_t min_points_in_model() const { return min_points_; }

 protected:
  std::string NewConfiguration(int64_t budget) override;
  void OnResult(const std::string& params, int64_t budget, double scalar) override;
  void OnForeignResult(const msgpack::object& parameters, double scalar) override;
  void OnSpaceChanged() override;
  uint32_t ExtraEntries() const override { return 3; }
  void PackExtra(msgpack::packer<msgpack::sbuffer>& pk) const override;
  void UnpackExtra(const msgpack::object& state) override;

 private:
  struct Args {
    bool maximize = true;
    int64_t min_budget = 1;
    int64_t max_budget = 3;
    int64_t eta = 3;
    std::optional<int64_t> min_points_in_model;
    int64_t top_n_percent = 15;
    int64_t num_samples = 64;
    double random_fraction = 1.0 / 3.0;
    uint64_t seed = 0;
  };
  // One result: the configuration (a packed map; a TRIAL_BUDGET key in it
  // is ignored), the budget it ran with, the metric as reported.
  struct Observation {
    double budget = 0;
    std::string params;
    double scalar = 0;
  };

  static Args ReadArgs(sdk::HostRef host, const msgpack::object& class_args);
  BohbTuner(sdk::HostRef host, const Args& args);

  // Adds to the model of its budget; false when it does not fit the space.
  bool AddToModel(const Observation& o);
  void RebuildModels();
  // An imported or foreign result: budget from TRIAL_BUDGET or max_budget.
  bool Import(const msgpack::object& parameters, double scalar);
  const tpe::Model* ModelToSample() const;

  Args args_;
  int64_t min_points_ = 1;
  std::vector<Observation> observations_;
  std::map<double, tpe::Model> models_;  // by budget; rebuilt from observations_
  int64_t random_picks_ = 0;
  int64_t model_picks_ = 0;
};

}  // namespace tunehost::plugins::hyperband
