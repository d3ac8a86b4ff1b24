// The `curvefitting` assessor (org.tunehost.curvefitting): NNI's
// CurvefittingAssessor (nni/algorithms/hpo/curvefitting_assessor/).
//
// A running trial at step S (S = length of its history) is judged Good
// without any prediction
//   - until some trial has succeeded (which sets the "best performance"),
//   - while S < start_step,
//   - when fewer than `gap` values arrived since this trial's last judgement.
// Otherwise its curve is extrapolated to epoch `epoch_num` (curve_model.h:
// 12 curve families fitted by least squares, weighted by MCMC). With no
// prediction (fewer than 4 families fit) the trial is Good; otherwise it is
// Good iff prediction > threshold * best, where best is the largest final
// value (last intermediate result) among succeeded trials. Maximize only.
//
// Differences from NNI, all on purpose:
//  1. trial_end takes the final value from THAT trial's own history. NNI
//     takes the last element of whatever history was assessed last (possibly
//     another trial's), and raises IndexError when nothing was assessed yet.
//     A trial that succeeds without ever being assessed leaves the best as
//     it was (logged at debug level).
//  2. An exception inside the prediction, or a non-finite prediction, gives
//     Good and a warning. NNI returns None from assess_trial there, which its
//     dispatcher turns into an error that stops the assessor thread (and it
//     would call a NaN prediction Bad).
//  3. Least squares: a Levenberg-Marquardt written here (no numerics
//     library) instead of scipy's curve_fit. Each family is fitted from NNI's
//     model_para values and from all ones (scipy's default p0, which is what
//     NNI's call really starts from); the lower cost wins. Each fit is capped
//     at MINPACK's default 200 * (params + 1) residual evaluations (fewer for
//     histories over 100 values) and the best finite point is used even when
//     not converged. A family with no finite point is dropped. NNI instead
//     keeps a failed family with the parameters left in its module-global
//     model_para dict: the defaults, or another trial's last successful fit
//     (fits leak between trials there; here every prediction starts afresh).
//  4. MCMC weights: NNI's constants and proposal/acceptance rule, NNI's
//     likelihood (including its normalizer 1/sqrt(2*pi*sqrt(s2))), but
//     computed in logs: NNI's product of densities under/overflows on long
//     histories and then rejects every proposal (0/0). An exact fit (s2 = 0)
//     counts as the best possible weight vector, not NaN.
//  5. Random numbers come from a std::mt19937_64 seeded by class_args `seed`
//     (random and logged when absent) with the SDK's Uniform01 and
//     StandardNormal, so runs are reproducible and the state can be saved;
//     NNI uses numpy's global, unseeded generator.
//  6. class_args: `epoch_num` defaults to 20 (NNI's validator requires it)
//     and must be >= 1 (NNI accepts 0, which extrapolates to x = 0 where
//     several families are undefined). `optimize_mode` is accepted, but only
//     "maximize"; "minimize" is refused (NNI refuses the key altogether, and
//     its algorithm only handles metrics to maximize). `seed` is new.
//  7. An empty history is Good (NNI would try to fit zero points when
//     start_step is 0). A trial's history and gap counter are dropped when it
//     ends (NNI keeps the gap counters forever).
// Same as NNI, noted because they surprise:
//  - ilog2 (c - a / log x) is infinite at x = 1, the first epoch, so it never
//    fits and never joins the ensemble.
//  - NNI's filter keeps a family only when its prediction at epoch_num lies
//    strictly within n/10 std of the median of the families' fitted values
//    at the LAST observed epoch. While a curve still climbs steeply few
//    families pass and the trial is Good ("wait for more information"); a
//    curve that has levelled off is judged. Kept as written (curve_model.h).
//  - best is the final reported intermediate value of a succeeded trial,
//    not its maximum.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"

namespace tunehost::plugins {

class CurvefittingAssessor : public sdk::Assessor {
 public:
  // class_args (all optional): `epoch_num` (integer in [1, 9999], default 20),
  // `start_step` ([0, 9999], default 6), `threshold` (number in [0, 9999],
  // default 0.95), `gap` ([1, 9999], default 1), `optimize_mode` ("maximize"
  // only), `seed` (non-negative integer). Anything else is refused with
  // Error(TH_INVALID_ARGUMENT) naming the argument.
  CurvefittingAssessor(sdk::HostRef host, const msgpack::object& class_args);

  bool AssessTrial(const std::string& trial_id, const msgpack::object& history) override;
  void TrialEnd(const std::string& trial_id, bool success) override;
  std::string SaveState() override;
  void LoadState(std::string_view state) override;

  int64_t epoch_num() const { return epoch_num_; }
  int64_t start_step() const { return start_step_; }
  double threshold() const { return threshold_; }
  int64_t gap() const { return gap_; }
  bool has_best() const { return has_best_; }
  double best() const { return best_; }
  int64_t completed_count() const { return completed_; }
  // Predictions made so far (judgements that reached the curve model).
  int64_t predictions() const { return predictions_; }

 private:
  // Good/Bad for a trial that passed the no-prediction rules.
  bool Judge(const std::string& trial_id, const std::vector<double>& values);

  int64_t epoch_num_ = 20;
  int64_t start_step_ = 6;
  double threshold_ = 0.95;
  int64_t gap_ = 1;
  std::mt19937_64 rng_;

  // Latest history of each running trial (its last value becomes the best
  // candidate when it succeeds).
  std::map<std::string, std::vector<double>> histories_;
  // Length of each running trial's history at its last judgement.
  std::map<std::string, int64_t> last_judgment_;
  bool has_best_ = false;
  double best_ = 0;
  int64_t completed_ = 0;  // succeeded trials that had a history
  int64_t predictions_ = 0;
};

}  // namespace tunehost::plugins
