// The `cmaes` tuner (org.tunehost.cmaes): CMA-ES, the covariance matrix
// adaptation evolution strategy (Hansen, "The CMA Evolution Strategy: A
// Tutorial", 2016), with the defaults of Optuna 3.1's CmaEsSampler.
//
// The numeric parameters (uniform, loguniform, the q-types, the normal types,
// randint) are the strategy's dimensions, each in its internal form (the log
// for log types) scaled to [0, 1]: a bounded draw's [low, high], a normal
// draw's mu ± 3 sigma (not clipped), randint's indices in equal slices.
// `choice` parameters are drawn at random for every trial, as Optuna draws
// the parameters CMA-ES cannot model with its independent sampler; nested
// choices are refused. The first n_startup_trials trials are random draws.
//
// Generations: every trial is drawn from the current distribution N(m,
// sigma^2 C) (a draw outside [0, 1] in a bounded dimension is drawn again, up
// to kMaxResamples times, then clipped). Once popsize trials of the current
// generation have a result, the best half updates m, sigma, C and the
// evolution paths, and the next generation starts; results of trials drawn
// in an older generation are not used (Optuna's rule). A trial that ends
// without a result gives nothing.
//
// Defaults as Optuna's: the mean starts at the centre (0.5), sigma0 = 1/6 of
// the scaled range, popsize = 4 + floor(3 ln n), n_startup_trials = 1.
// Deviations: only positive recombination weights (Hansen's default
// (mu/mu_w, lambda)-CMA-ES; Optuna's `cmaes` package also uses negative
// weights), no restarts (IPOP/BIPOP), no x0 argument; a distribution that
// degenerates (non-finite or vanishing sigma or C) starts again from the
// initial one, with a warning. Imported results of this search space join
// the current generation like results of its trials.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Dense>
#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins {

class CmaEsTuner : public sdk::Tuner {
 public:
  static constexpr int kMaxResamples = 100;
  static constexpr int64_t kMaxPopsize = 100000;

  // class_args: optimize_mode ("maximize" by default, as NNI's tuners),
  // seed, popsize (an integer in [2, 100000]; default 4 + floor(3 ln n)),
  // sigma0 (a number in (0, 1], in the scaled space; default 1/6),
  // n_startup_trials (an integer >= 0; default 1). Anything else is refused
  // with Error(TH_INVALID_ARGUMENT) naming the argument.
  CmaEsTuner(sdk::HostRef host, const msgpack::object& class_args);

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
  size_t dimensions() const { return dims_.size(); }
  size_t popsize() const { return popsize_; }
  uint64_t generation() const { return generation_; }
  double sigma() const { return sigma_; }
  const Eigen::VectorXd& mean() const { return mean_; }

 private:
  struct Drawn {
    uint64_t generation = 0;
    Eigen::VectorXd u;  // the point in the scaled space
  };

  const sdk::SearchSpace& Space() const;
  // The initial distribution for the current dimensions.
  void Reset();
  // B and D from C (C = B diag(D^2) B^T); false when C is not usable.
  bool Decompose();
  Eigen::VectorXd Draw();
  // The scaled point of an assignment, and the assignment of a point (choice
  // parameters drawn at random).
  Eigen::VectorXd PointOf(const sdk::Assignment& a) const;
  sdk::Assignment AssignmentOf(const Eigen::VectorXd& u);
  void Tell(Eigen::VectorXd u, double metric);
  void Update();
  double Loss(double metric) const { return maximize_ ? -metric : metric; }

  bool maximize_ = true;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::optional<int64_t> popsize_arg_;
  double sigma0_ = 1.0 / 6.0;
  int64_t n_startup_ = 1;

  std::optional<sdk::SearchSpace> space_;
  std::vector<size_t> dims_;  // indices in space_->params() of the dimensions
  size_t popsize_ = 0;

  // The strategy (Hansen's notation).
  uint64_t generation_ = 0;
  int64_t startup_left_ = 0;
  Eigen::VectorXd mean_, p_sigma_, p_c_, D_;
  Eigen::MatrixXd C_, B_;
  double sigma_ = 0;
  std::map<int64_t, Drawn> drawn_;  // trials waiting for a result
  std::vector<std::pair<Eigen::VectorXd, double>> told_;  // this generation: point, loss
};

}  // namespace tunehost::plugins
