// The `gp` tuner (org.tunehost.gp, NNI's GPTuner): Bayesian optimization
// with a Gaussian-process model of the metric and NNI's arguments and
// defaults (nni-semantics.md §6, "GP").
//
// Every parameter is a dimension in [0, 1]: a numeric one in its internal
// form (the log for log types) scaled from [low, high] (a normal draw's
// mu ± 3 sigma), choice and randint as equal slices of their indices, as
// NNI's GPTuner treats a choice as its index. Nested choices are refused.
//
// Until `cold_start_num` results have arrived, trials are random draws.
// Then each trial is the maximum of the acquisition function (`utility`:
// "ei" expected improvement over the best target + xi, "ucb" mean + kappa
// std, "poi" probability of improvement) under a GP with a Matérn kernel of
// smoothness `nu` (0.5, 1.5 or 2.5), one length scale for all dimensions
// chosen by the log marginal likelihood, observation noise `alpha` and the
// targets standardized (sklearn's normalize_y, as NNI). The target is the
// metric, negated with optimize_mode minimize. The maximum is searched as
// NNI does, among `selection_num_warm_up` random points, then refined from
// `selection_num_starting_points` starts.
//
// Deviations from NNI, each written down: the refinement is a compass
// search started from the best warm-up points (NNI: L-BFGS-B from random
// starts); the length scale is searched on a log grid in [0.01, 10] and
// refined by golden section (NNI: sklearn's optimizer with 25 restarts); the
// model holds the newest kMaxModelPoints results; trials still running are
// in the model at the value it predicts for them (a "kriging believer"), so
// parallel trials are not all drawn at the same point (NNI's GPTuner draws
// them there); a result without a finite value, or a failed trial, gives
// nothing. Imported results of this search space count like results.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <deque>
#include <map>
#include <msgpack.hpp>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gp_model.h"
#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins {

// The plugin: class_args, the search space and its unit cube, the results
// and running trials, the saved state. The model and the search for the
// acquisition's maximum are GpModel's (gp_model.h).
class GpTuner : public sdk::Tuner {
 public:
  // Results the model holds at most (the newest): fitting costs their cube.
  static constexpr size_t kMaxModelPoints = GpModel::kMaxPoints;
  static constexpr int64_t kMaxWarmUp = 10000000;
  static constexpr int64_t kMaxStartingPoints = 100000;

  using Utility = GpModel::Utility;

  // class_args (NNI's names and defaults): optimize_mode ("maximize"),
  // utility ("ei" | "ucb" | "poi"), kappa (5, >= 0), xi (0, >= 0), nu (2.5:
  // 0.5, 1.5 or 2.5), alpha (1e-6, > 0), cold_start_num (10, >= 1),
  // selection_num_warm_up (100000, in [1, 1e7]),
  // selection_num_starting_points (250, in [0, 1e5]); and seed. Anything
  // else is refused with Error(TH_INVALID_ARGUMENT) naming the argument.
  GpTuner(sdk::HostRef host, const msgpack::object& class_args);

  void UpdateSearchSpace(const msgpack::object& space) override;
  bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) override;
  void ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                          const msgpack::object& value, double scalar, bool customized) override;
  void TrialEnd(int64_t parameter_id, bool success) override;
  void ImportData(const msgpack::object& records) override;
  std::string SaveState() override;
  // Needs the search space first (one with as many dimensions as the state's).
  void LoadState(std::string_view state) override;

  // For tests.
  size_t dimensions() const { return dims_; }
  size_t observations() const { return points_.size(); }
  // The length scale of the last model fitted (0 before the first).
  double length_scale() const { return model_.length_scale(); }
  Utility utility() const { return model_.utility(); }

 private:
  const sdk::SearchSpace& Space() const;
  Eigen::VectorXd PointOf(const sdk::Assignment& a) const;
  sdk::Assignment AssignmentOf(const Eigen::VectorXd& u) const;
  void Observe(Eigen::VectorXd u, double metric);

  bool maximize_ = true;
  int64_t cold_start_ = 10;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  GpModel model_;

  std::optional<sdk::SearchSpace> space_;
  size_t dims_ = 0;
  std::deque<Eigen::VectorXd> points_;          // results: the point...
  std::deque<double> targets_;                  // ...and its target (maximized)
  std::map<int64_t, Eigen::VectorXd> running_;  // trials drawn, no result yet
};

}  // namespace tunehost::plugins
