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

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins {

class GpTuner : public sdk::Tuner {
 public:
  // Results the model holds at most (the newest): fitting costs their cube.
  static constexpr size_t kMaxModelPoints = 500;
  static constexpr int64_t kMaxWarmUp = 10000000;
  static constexpr int64_t kMaxStartingPoints = 100000;

  enum class Utility { kEi, kUcb, kPoi };

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
  double length_scale() const { return length_scale_; }
  Utility utility() const { return utility_; }

 private:
  // A GP fitted to points (rows of X) and standardized targets.
  struct Model {
    Eigen::MatrixXd X;
    Eigen::LLT<Eigen::MatrixXd> llt;
    Eigen::VectorXd alpha;  // K^-1 y (standardized)
    double y_mean = 0, y_std = 1, length = 1;
  };

  const sdk::SearchSpace& Space() const;
  Eigen::VectorXd PointOf(const sdk::Assignment& a) const;
  sdk::Assignment AssignmentOf(const Eigen::VectorXd& u) const;
  void Observe(Eigen::VectorXd u, double metric);
  // The kernel of points at distances `r` for a length scale.
  Eigen::MatrixXd Kernel(const Eigen::MatrixXd& r, double length) const;
  // Fits X, y with the given length scale; false when K is not usable.
  bool Fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, double length, Model* m,
           double* log_likelihood) const;
  // The fitted model of the results (and, as believed, the running trials).
  Model FitModel();
  // Acquisition values of candidates (columns of C).
  Eigen::VectorXd Acquisition(const Model& m, const Eigen::MatrixXd& C, double best) const;
  Eigen::VectorXd Suggest();

  bool maximize_ = true;
  Utility utility_ = Utility::kEi;
  double kappa_ = 5, xi_ = 0, nu_ = 2.5, alpha_ = 1e-6;
  int64_t cold_start_ = 10, warm_up_ = 100000, starting_points_ = 250;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;

  std::optional<sdk::SearchSpace> space_;
  size_t dims_ = 0;
  double length_scale_ = 0;
  std::deque<Eigen::VectorXd> points_;          // results: the point...
  std::deque<double> targets_;                  // ...and its target (maximized)
  std::map<int64_t, Eigen::VectorXd> running_;  // trials drawn, no result yet
};

}  // namespace tunehost::plugins
