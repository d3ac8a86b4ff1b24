// The learning-curve model behind the `curvefitting` assessor: NNI's
// CurveModel (nni/algorithms/hpo/curvefitting_assessor/model_factory.py and
// curvefunctions.py), which follows Domhan et al., "Speeding up automatic
// hyperparameter optimization of deep neural networks by extrapolation of
// learning curves" (IJCAI 2015).
//
// Given a history y_1..y_n (x = 1..n) it
//   1. fits each of 12 curve families to the history by least squares,
//   2. keeps the families that fit (finite, mean squared residual below
//      mean(y)^2) and whose prediction at the target epoch lies strictly
//      within n/10 standard deviations of the median of those families'
//      fitted values at epoch n (NNI's filter_curve, as written),
//   3. when at least 4 are kept, samples ensemble weights by Metropolis-
//      Hastings (NNI's constants) and returns the mean over the samples of the
//      weighted prediction at the target epoch.
//
// The least-squares fit is a small Levenberg-Marquardt written here, with a
// forward-difference Jacobian: NNI uses scipy.optimize.curve_fit, and a
// plugin built against the SDK alone should not pull in a numerics library
// for a 4-parameter problem.
//
// Every loop has a fixed cap (LM evaluations per fit, NNI's 20 x 10 MCMC
// steps), so a prediction costs O(n) and stays short: it runs on the host's
// assessor strand. See curvefitting_assessor.h for the differences from NNI.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tunehost::plugins::curvefitting {

constexpr int kMaxParams = 4;
using Params = std::array<double, kMaxParams>;

// NNI's constants (model_factory.py).
constexpr int kNumOfSimulationTime = 20;  // MCMC steps
constexpr int kNumOfInstance = 10;        // weight samples (chains) per step
constexpr double kStepSize = 0.0005;      // std. deviation of a weight proposal
constexpr int kLeastFittedFunction = 4;   // fewer kept families: no prediction

// One curve family: y = formula(x; params).
struct Family {
  const char* name;
  int num_params;
  Params initial;  // NNI's model_para (the LM's first starting point)
  double (*formula)(double x, const Params& p);
};

// The 12 families in NNI's order (curve_combination_models).
const std::array<Family, 12>& Families();
// nullptr when there is no family of that name.
const Family* FindFamily(const std::string& name);

// The result of one least-squares fit.
struct FitResult {
  bool ok = false;     // params and cost are finite
  Params params{};     // unused entries stay 0
  double cost = 0;     // sum of squared residuals at params
  int evaluations = 0; // residual-vector evaluations spent
};

// Minimizes sum_i (family(xs[i]; p) - ys[i])^2 by Levenberg-Marquardt from
// `start`, spending at most `max_evaluations` evaluations of the residual
// vector (Jacobian columns included). Returns the best point reached (not
// necessarily converged); ok is false when no finite point was found.
FitResult FitLeastSquares(const Family& family, const std::vector<double>& xs,
                          const std::vector<double>& ys, const Params& start,
                          int max_evaluations);

// The evaluation cap for one fit of a family with `num_params` parameters to
// `points` points: MINPACK's default 200 * (num_params + 1), lowered for
// histories longer than 100 values so that a fit evaluates the formula at
// most ~100,000 times (but never below 10 * (num_params + 1)).
int MaxEvaluations(int num_params, size_t points);

struct Prediction {
  bool has_value = false;          // false: fewer than 4 families kept
  double value = 0;                // ensemble prediction at the target epoch
  std::vector<std::string> kept;   // names of the families in the ensemble
};

// Predicts the value at epoch `target_pos` of a curve whose values at epochs
// 1..history.size() are `history`. Uses `rng` only when at least 4 families
// are kept (then a fixed number of draws for a given number of families).
Prediction PredictCurve(const std::vector<double>& history, int64_t target_pos,
                        std::mt19937_64& rng);

}  // namespace tunehost::plugins::curvefitting
