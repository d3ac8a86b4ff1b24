// The gp tuner's surrogate (gp_tuner.h): a Gaussian process with a Matérn
// kernel fitted to the results in the unit cube, and the search for the
// maximum of its acquisition function. It holds no results itself: the
// tuner passes them in for each suggestion.
#pragma once

#include <Eigen/Dense>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <random>

namespace tunehost::plugins {

class GpModel {
 public:
  // Results (and running trials) the model holds at most, the newest:
  // fitting costs their cube.
  static constexpr size_t kMaxPoints = 500;

  enum class Utility { kEi, kUcb, kPoi };

  // NNI's GPTuner arguments of the model (gp_tuner.h for their meaning).
  struct Options {
    Utility utility = Utility::kEi;
    double kappa = 5, xi = 0, nu = 2.5, alpha = 1e-6;
    int64_t warm_up = 100000, starting_points = 250;
  };

  GpModel() = default;
  explicit GpModel(const Options& options) : options_(options) {}

  Utility utility() const { return options_.utility; }
  // The length scale of the last model fitted (0 before the first).
  double length_scale() const { return length_scale_; }
  void Reset() { length_scale_ = 0; }

  // The point of the unit cube to try next: fits the model to `points`
  // (at least one, all of one dimension) and their `targets` (to be
  // maximized), with the `running` trials' points at the values it predicts
  // for them, and maximizes the acquisition function with `rng`'s draws.
  Eigen::VectorXd Suggest(const std::deque<Eigen::VectorXd>& points,
                          const std::deque<double>& targets,
                          const std::map<int64_t, Eigen::VectorXd>& running, std::mt19937_64& rng);

 private:
  // A GP fitted to points (rows of X) and standardized targets.
  struct Fitted {
    Eigen::MatrixXd X;
    Eigen::LLT<Eigen::MatrixXd> llt;
    Eigen::VectorXd alpha;  // K^-1 y (standardized)
    double y_mean = 0, y_std = 1, length = 1;
  };

  // The kernel of points at distances `r` for a length scale.
  Eigen::MatrixXd Kernel(const Eigen::MatrixXd& r, double length) const;
  // Fits X, y with the given length scale; false when K is not usable.
  bool Fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, double length, Fitted* m,
           double* log_likelihood) const;
  // The fitted model of the results (and, as believed, the running trials).
  Fitted FitModel(const std::deque<Eigen::VectorXd>& points, const std::deque<double>& targets,
                  const std::map<int64_t, Eigen::VectorXd>& running);
  // Acquisition values of candidates (rows of C).
  Eigen::VectorXd Acquisition(const Fitted& m, const Eigen::MatrixXd& C, double best) const;

  Options options_;
  double length_scale_ = 0;
};

}  // namespace tunehost::plugins
