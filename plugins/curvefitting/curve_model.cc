#include "curve_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "tunehost/sdk/cpp/search_space.h"  // Uniform01, StandardNormal

namespace tunehost::plugins::curvefitting {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// --- The curve families (curvefunctions.py), parameters in NNI's order ---

double Vap(double x, const Params& p) { return std::exp(p[0] + p[1] / x + p[2] * std::log(x)); }
double Pow3(double x, const Params& p) { return p[0] - p[1] * std::pow(x, -p[2]); }
double Linear(double x, const Params& p) { return p[0] * x + p[1]; }
double LogxLinear(double x, const Params& p) { return p[0] * std::log(x) + p[1]; }
double DrHillZeroBackground(double x, const Params& p) {
  const double xe = std::pow(x, p[1]);
  return p[0] * xe / (std::pow(p[2], p[1]) + xe);
}
double LogPower(double x, const Params& p) {
  return p[0] / (1.0 + std::pow(x / std::exp(p[1]), p[2]));
}
double Pow4(double x, const Params& p) { return p[3] - std::pow(p[1] * x + p[2], -p[0]); }
double Mmf(double x, const Params& p) {
  return p[0] - (p[0] - p[1]) / (1.0 + std::pow(p[2] * x, p[3]));
}
double Exp4(double x, const Params& p) { return p[0] - std::exp(-p[1] * std::pow(x, p[3]) + p[2]); }
double Ilog2(double x, const Params& p) { return p[0] - p[1] / std::log(x); }
double Weibull(double x, const Params& p) {
  return p[0] - (p[0] - p[1]) * std::exp(-std::pow(p[2] * x, p[3]));
}
double Janoschek(double x, const Params& p) {
  return p[0] - (p[0] - p[1]) * std::exp(-p[2] * std::pow(x, p[3]));
}

const std::array<Family, 12> kFamilies = {{
    {"vap", 3, {-0.622028, -0.470050, 0.042322, 0}, &Vap},
    {"pow3", 3, {0.84, 0.52, 0.01, 0}, &Pow3},
    {"linear", 2, {1.0, 0.0, 0, 0}, &Linear},
    {"logx_linear", 2, {0.378106, 0.046506, 0, 0}, &LogxLinear},
    {"dr_hill_zero_background", 3, {0.772320, 0.586449, 2.460843, 0}, &DrHillZeroBackground},
    {"log_power", 3, {0.77, 2.98, -0.51, 0}, &LogPower},
    {"pow4", 4, {0.1, 200, 0.0, 0.8}, &Pow4},
    {"mmf", 4, {0.7, 0.1, 0.01, 5}, &Mmf},
    {"exp4", 4, {0.7, 0.8, -0.8, 0.3}, &Exp4},
    {"ilog2", 2, {0.78, 0.43, 0, 0}, &Ilog2},
    {"weibull", 4, {0.7, 0.1, 0.01, 1}, &Weibull},
    {"janoschek", 4, {0.73, 0.07, 0.355, 0.46}, &Janoschek},
}};

// --- Levenberg-Marquardt ---

// MINPACK's default tolerances (scipy's leastsq ftol and xtol).
constexpr double kTolerance = 1.49012e-08;
// Forward-difference step relative to max(|p_j|, 1): sqrt(machine epsilon).
constexpr double kDiffStep = 1.49011611938953e-08;
constexpr double kLambdaStart = 1e-3;
constexpr double kLambdaMax = 1e16;  // beyond it no step lowers the cost: stuck

// Residuals f(x_i; p) - y_i into `r`; the sum of their squares, or +inf when
// any is not finite (outside the family's domain, overflow).
double Residuals(const Family& family, const std::vector<double>& xs,
                 const std::vector<double>& ys, const Params& p, std::vector<double>& r) {
  double cost = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    r[i] = family.formula(xs[i], p) - ys[i];
    if (!std::isfinite(r[i])) return kInf;
    cost += r[i] * r[i];
  }
  return std::isfinite(cost) ? cost : kInf;
}

// Solves a * s = b (m x m, m <= 4) by Gaussian elimination with partial
// pivoting; false when singular or not finite.
bool Solve(std::array<std::array<double, kMaxParams>, kMaxParams> a, Params b, int m, Params& s) {
  for (int col = 0; col < m; ++col) {
    int pivot = col;
    for (int row = col + 1; row < m; ++row) {
      if (std::fabs(a[row][col]) > std::fabs(a[pivot][col])) pivot = row;
    }
    if (!(std::fabs(a[pivot][col]) > 0) || !std::isfinite(a[pivot][col])) return false;
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (int row = col + 1; row < m; ++row) {
      const double factor = a[row][col] / a[col][col];
      for (int k = col; k < m; ++k) a[row][k] -= factor * a[col][k];
      b[row] -= factor * b[col];
    }
  }
  for (int row = m - 1; row >= 0; --row) {
    double sum = b[row];
    for (int k = row + 1; k < m; ++k) sum -= a[row][k] * s[k];
    s[row] = sum / a[row][row];
    if (!std::isfinite(s[row])) return false;
  }
  return true;
}

// The Jacobian of the residuals at p (n x m, row-major) by forward
// differences, or backward ones where the forward point is outside the
// domain; a column with neither stays 0 (that parameter rests this step).
void Jacobian(const Family& family, const std::vector<double>& xs, const std::vector<double>& ys,
              const Params& p, const std::vector<double>& r, std::vector<double>& jac,
              std::vector<double>& scratch, int& evaluations) {
  const int m = family.num_params;
  const size_t n = xs.size();
  for (int j = 0; j < m; ++j) {
    const double h = kDiffStep * std::max(std::fabs(p[j]), 1.0);
    double step = h;
    Params q = p;
    q[j] = p[j] + h;
    ++evaluations;
    if (!std::isfinite(Residuals(family, xs, ys, q, scratch))) {
      step = -h;
      q[j] = p[j] - h;
      ++evaluations;
      if (!std::isfinite(Residuals(family, xs, ys, q, scratch))) step = 0;
    }
    for (size_t i = 0; i < n; ++i) {
      jac[i * m + j] = step == 0 ? 0.0 : (scratch[i] - r[i]) / step;
    }
  }
}

// --- Ensemble (model_factory.py) ---

// The families that survived filtering: their values at x = 1..n and at the
// target epoch.
struct Ensemble {
  std::vector<std::string> names;
  std::vector<std::vector<double>> fitted;  // [family][i]: value at x = i + 1
  std::vector<double> at_target;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Population standard deviation (np.std).
double StdDev(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double sq = 0;
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / static_cast<double>(v.size()));
}

// fit_theta + filter_curve.
Ensemble FitAndFilter(const std::vector<double>& history, int64_t target_pos) {
  const size_t n = history.size();
  std::vector<double> xs(n);
  for (size_t i = 0; i < n; ++i) xs[i] = static_cast<double>(i + 1);
  double sum = 0;
  for (double y : history) sum += y;
  const double avg = sum / static_cast<double>(n);
  const double standard = avg * avg * static_cast<double>(n);
  const double target = static_cast<double>(target_pos);

  // Families whose residual passes NNI's test: sum of squares < n * mean^2.
  Ensemble candidates;
  for (const Family& family : kFamilies) {
    const int cap = MaxEvaluations(family.num_params, n);
    // NNI's model_para values, then scipy's default start (all ones), which
    // is what NNI's curve_fit call actually starts from; keep the better.
    Params ones{};
    for (int j = 0; j < family.num_params; ++j) ones[j] = 1.0;
    FitResult best = FitLeastSquares(family, xs, history, family.initial, cap);
    FitResult other = FitLeastSquares(family, xs, history, ones, cap);
    if (other.ok && (!best.ok || other.cost < best.cost)) best = other;
    if (!best.ok || !(best.cost < standard)) continue;
    const double y_target = family.formula(target, best.params);
    if (!std::isfinite(y_target)) continue;
    std::vector<double> fitted(n);
    for (size_t i = 0; i < n; ++i) fitted[i] = family.formula(xs[i], best.params);
    candidates.names.push_back(family.name);
    candidates.fitted.push_back(std::move(fitted));
    candidates.at_target.push_back(y_target);
  }
  if (candidates.names.empty()) return candidates;

  // NNI's consensus band: median and std of the candidates' fitted values at
  // the LAST observed epoch (x = n); a family stays when its prediction at
  // the target epoch is strictly inside median +- n/10 * std. So a family
  // stays only when it predicts little change from the current level
  // relative to the families' spread there: while a curve still climbs
  // steeply, fewer than 4 stay and the trial is kept ("wait for more
  // information"); a curve that has levelled off is judged.
  std::vector<double> at_last;
  for (const std::vector<double>& f : candidates.fitted) at_last.push_back(f.back());
  const double median = Median(at_last);
  const double epsilon = static_cast<double>(n) / 10.0 * StdDev(at_last);
  Ensemble kept;
  for (size_t k = 0; k < candidates.names.size(); ++k) {
    const double y = candidates.at_target[k];
    if (y < median + epsilon && y > median - epsilon) {
      kept.names.push_back(candidates.names[k]);
      kept.fitted.push_back(std::move(candidates.fitted[k]));
      kept.at_target.push_back(candidates.at_target[k]);
    }
  }
  return kept;
}

// sum_k w[k] * values[k]
double Combine(const std::vector<double>& w, const std::vector<double>& values) {
  double s = 0;
  for (size_t k = 0; k < w.size(); ++k) s += w[k] * values[k];
  return s;
}

// log of NNI's target_distribution (likelihood x prior) for one weight
// vector. Prior: every weight > 0 and the combined curve rising from epoch 1
// to the target. Likelihood: the product over the history of NNI's density
// exp(-d^2 / (2 s2)) / sqrt(2 pi sqrt(s2)), s2 the combination's mean
// squared residual. In logs, so long histories neither overflow nor
// underflow; +inf for an exact fit (s2 = 0).
double LogTarget(const Ensemble& e, const std::vector<double>& history,
                 const std::vector<double>& w) {
  for (double x : w) {
    if (!(x > 0)) return -kInf;
  }
  const size_t m = w.size();
  std::vector<double> at(m);
  for (size_t k = 0; k < m; ++k) at[k] = e.fitted[k][0];
  const double first = Combine(w, at);
  if (!(first < Combine(w, e.at_target))) return -kInf;

  const size_t n = history.size();
  std::vector<double> d(n);
  double s2 = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < m; ++k) at[k] = e.fitted[k][i];
    d[i] = history[i] - Combine(w, at);
    s2 += d[i] * d[i];
  }
  s2 /= static_cast<double>(n);
  if (std::isnan(s2)) return -kInf;
  if (s2 == 0) return kInf;
  const double kTwoPi = 6.283185307179586476925286766559;
  double log_l = 0;
  for (size_t i = 0; i < n; ++i) {
    log_l += -d[i] * d[i] / (2.0 * s2) - 0.5 * std::log(kTwoPi * std::sqrt(s2));
  }
  return log_l;
}

// mcmc_sampling: kNumOfInstance chains from equal weights, kNumOfSimulationTime
// Metropolis steps with Gaussian proposals (renormalized to sum 1). Random
// draws in NNI's order: all proposals of a step (instance-major), then one
// uniform per instance.
std::vector<std::vector<double>> SampleWeights(const Ensemble& e,
                                               const std::vector<double>& history,
                                               std::mt19937_64& rng) {
  const size_t m = e.names.size();
  std::vector<std::vector<double>> samples(kNumOfInstance,
                                           std::vector<double>(m, 1.0 / static_cast<double>(m)));
  std::vector<double> current(kNumOfInstance, LogTarget(e, history, samples[0]));
  std::vector<std::vector<double>> proposals(kNumOfInstance, std::vector<double>(m));
  for (int step = 0; step < kNumOfSimulationTime; ++step) {
    for (int i = 0; i < kNumOfInstance; ++i) {
      double total = 0;
      for (size_t k = 0; k < m; ++k) {
        proposals[i][k] = sdk::StandardNormal(rng) * kStepSize + samples[i][k];
        total += proposals[i][k];
      }
      for (size_t k = 0; k < m; ++k) proposals[i][k] /= total;
    }
    for (int i = 0; i < kNumOfInstance; ++i) {
      const double u = sdk::Uniform01(rng);
      const double proposed = LogTarget(e, history, proposals[i]);
      // alpha = min(1, P(new) / P(old)); NNI's 0/0 and inf/inf are NaN and
      // never accepted, which inf - inf = NaN reproduces.
      const double diff = proposed - current[i];
      const double alpha = std::isnan(diff) ? diff : std::min(1.0, std::exp(diff));
      if (u < alpha) {
        samples[i] = proposals[i];
        current[i] = proposed;
      }
    }
  }
  return samples;
}

}  // namespace

const std::array<Family, 12>& Families() { return kFamilies; }

const Family* FindFamily(const std::string& name) {
  for (const Family& f : kFamilies) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

int MaxEvaluations(int num_params, size_t points) {
  constexpr size_t kFormulaBudget = 100000;
  const size_t minpack = 200 * static_cast<size_t>(num_params + 1);
  const size_t by_budget = kFormulaBudget / std::max<size_t>(points, 1);
  // Never fewer than enough for a few LM iterations.
  const size_t floor = 10 * static_cast<size_t>(num_params + 1);
  return static_cast<int>(std::max(floor, std::min(minpack, by_budget)));
}

FitResult FitLeastSquares(const Family& family, const std::vector<double>& xs,
                          const std::vector<double>& ys, const Params& start,
                          int max_evaluations) {
  const int m = family.num_params;
  const size_t n = xs.size();
  std::vector<double> r(n), trial_r(n), scratch(n), jac(n * static_cast<size_t>(m));
  FitResult result;
  result.params = start;
  double cost = Residuals(family, xs, ys, start, r);
  result.evaluations = 1;
  if (!std::isfinite(cost)) return result;
  result.ok = true;
  result.cost = cost;

  double lambda = kLambdaStart;
  while (result.evaluations < max_evaluations && cost > 0) {
    Jacobian(family, xs, ys, result.params, r, jac, scratch, result.evaluations);
    // Normal equations: a = J^T J, g = -J^T r.
    std::array<std::array<double, kMaxParams>, kMaxParams> a{};
    Params g{};
    for (size_t i = 0; i < n; ++i) {
      for (int j = 0; j < m; ++j) {
        g[j] -= jac[i * m + j] * r[i];
        for (int k = 0; k < m; ++k) a[j][k] += jac[i * m + j] * jac[i * m + k];
      }
    }
    double max_g = 0;
    for (int j = 0; j < m; ++j) max_g = std::max(max_g, std::fabs(g[j]));
    if (!(max_g > 0)) break;  // stationary point (or a non-finite gradient)

    // Damped steps until one lowers the cost (or the budget runs out).
    bool improved = false;
    bool converged = false;
    while (!improved && result.evaluations < max_evaluations && lambda <= kLambdaMax) {
      auto damped = a;
      for (int j = 0; j < m; ++j) damped[j][j] += lambda * std::max(a[j][j], 1e-12);
      Params delta{};
      if (!Solve(damped, g, m, delta)) {
        lambda *= 10;
        continue;
      }
      Params trial = result.params;
      double step_size = 0;
      for (int j = 0; j < m; ++j) {
        trial[j] += delta[j];
        step_size = std::max(step_size,
                             std::fabs(delta[j]) / (std::fabs(result.params[j]) + kTolerance));
      }
      const double trial_cost = Residuals(family, xs, ys, trial, trial_r);
      ++result.evaluations;
      if (trial_cost < cost) {
        // Only a (nearly) Gauss-Newton step that barely moves means a minimum;
        // a heavily damped one is small because of the damping.
        converged = lambda <= 1.0 &&
                    ((cost - trial_cost) <= kTolerance * cost || step_size <= kTolerance);
        result.params = trial;
        cost = trial_cost;
        std::swap(r, trial_r);
        lambda = std::max(lambda / 10, 1e-15);
        improved = true;
      } else {
        lambda *= 10;
      }
    }
    if (!improved || converged) break;
  }
  result.cost = cost;
  for (int j = 0; j < m; ++j) result.ok = result.ok && std::isfinite(result.params[j]);
  return result;
}

Prediction PredictCurve(const std::vector<double>& history, int64_t target_pos,
                        std::mt19937_64& rng) {
  Prediction out;
  if (history.empty()) return out;
  Ensemble e = FitAndFilter(history, target_pos);
  out.kept = e.names;
  if (static_cast<int>(e.names.size()) < kLeastFittedFunction) return out;
  const std::vector<std::vector<double>> samples = SampleWeights(e, history, rng);
  double sum = 0;
  for (const std::vector<double>& w : samples) sum += Combine(w, e.at_target);
  out.has_value = true;
  out.value = sum / kNumOfInstance;
  return out;
}

}  // namespace tunehost::plugins::curvefitting
