#include "gp_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tunehost/sdk/cpp/helper.h"

namespace tunehost::plugins {
namespace {

// The length scale's search: a log grid, then golden section around its best.
constexpr double kMinLength = 0.01, kMaxLength = 10.0;
constexpr int kLengthGrid = 25, kGoldenSteps = 12;
// Candidates scored at once (memory: the model's points times this).
constexpr Eigen::Index kBatch = 1024;
// The compass search: steps per start, the first step and the smallest.
constexpr int kRefineSteps = 12;
constexpr double kFirstStep = 0.05, kLastStep = 1e-3;
// Jitter added when K is not positive definite, times alpha, at most.
constexpr double kMaxJitter = 1e6;

double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }
double NormalPdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI); }

// Euclidean distances between the rows of A and the rows of B.
Eigen::MatrixXd Distances(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) {
  Eigen::MatrixXd d2 = (-2.0 * A * B.transpose()).eval();
  d2.colwise() += A.rowwise().squaredNorm();
  d2.rowwise() += B.rowwise().squaredNorm().transpose();
  return d2.cwiseMax(0.0).cwiseSqrt();
}

}  // namespace

Eigen::MatrixXd GpModel::Kernel(const Eigen::MatrixXd& r, double length) const {
  if (options_.nu == 0.5) return (-r.array() / length).exp().matrix();
  const double c = options_.nu == 1.5 ? std::sqrt(3.0) : std::sqrt(5.0);
  const Eigen::ArrayXXd s = c * r.array() / length;
  if (options_.nu == 1.5) return ((1 + s) * (-s).exp()).matrix();
  return ((1 + s + s.square() / 3) * (-s).exp()).matrix();
}

bool GpModel::Fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, double length, Fitted* m,
                  double* log_likelihood) const {
  const Eigen::MatrixXd K0 = Kernel(Distances(X, X), length);
  const auto n = X.rows();
  // alpha as NNI's; more only when K is numerically not positive definite
  // (points closer than the kernel resolves), up to kMaxJitter times alpha.
  for (double jitter = 1; jitter <= kMaxJitter; jitter *= 100) {
    Eigen::MatrixXd K = K0;
    K.diagonal().array() += options_.alpha * jitter;
    m->llt.compute(K);
    if (m->llt.info() == Eigen::Success) {
      m->X = X;
      m->length = length;
      m->alpha = m->llt.solve(y);
      if (log_likelihood != nullptr) {
        const Eigen::MatrixXd& L = m->llt.matrixLLT();
        *log_likelihood = -0.5 * y.dot(m->alpha) - L.diagonal().array().log().sum() -
                          0.5 * static_cast<double>(n) * std::log(2 * M_PI);
      }
      return m->alpha.allFinite();
    }
  }
  return false;
}

GpModel::Fitted GpModel::FitModel(const std::deque<Eigen::VectorXd>& points,
                                  const std::deque<double>& targets,
                                  const std::map<int64_t, Eigen::VectorXd>& running) {
  const auto n = static_cast<Eigen::Index>(points.size());
  const auto d = points.front().size();
  Eigen::MatrixXd X(n, d);
  Eigen::VectorXd y(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    X.row(i) = points[static_cast<size_t>(i)].transpose();
    y[i] = targets[static_cast<size_t>(i)];
  }
  Fitted m;
  m.y_mean = y.mean();
  const double var = (y.array() - m.y_mean).square().mean();
  m.y_std = var > 0 ? std::sqrt(var) : 1.0;
  const Eigen::VectorXd ys = (y.array() - m.y_mean) / m.y_std;

  // The length scale of the largest log marginal likelihood.
  auto score = [&](double log_length) {
    Fitted trial;
    double ll = -std::numeric_limits<double>::infinity();
    if (!Fit(X, ys, std::exp(log_length), &trial, &ll))
      return -std::numeric_limits<double>::infinity();
    return ll;
  };
  const double lo = std::log(kMinLength), hi = std::log(kMaxLength);
  double best_at = std::log(0.5), best = -std::numeric_limits<double>::infinity();
  int best_i = -1;
  for (int i = 0; i < kLengthGrid; ++i) {
    const double at = lo + (hi - lo) * i / (kLengthGrid - 1);
    const double s = score(at);
    if (s > best) {
      best = s;
      best_at = at;
      best_i = i;
    }
  }
  if (best_i >= 0) {
    const double step = (hi - lo) / (kLengthGrid - 1);
    double a = std::max(lo, best_at - step), b = std::min(hi, best_at + step);
    const double phi = (std::sqrt(5.0) - 1) / 2;
    double c = b - phi * (b - a), e = a + phi * (b - a);
    double sc = score(c), se = score(e);
    for (int k = 0; k < kGoldenSteps; ++k) {
      if (sc > se) {
        b = e;
        e = c;
        se = sc;
        c = b - phi * (b - a);
        sc = score(c);
      } else {
        a = c;
        c = e;
        sc = se;
        e = a + phi * (b - a);
        se = score(e);
      }
    }
    const double mid = sc > se ? c : e;
    if (std::max(sc, se) > best) best_at = mid;
  }
  length_scale_ = std::exp(best_at);
  if (!Fit(X, ys, length_scale_, &m, nullptr)) {
    throw sdk::Error(TH_INTERNAL, "gp: the model cannot be fitted to these results");
  }
  // Trials still running, at the value the model predicts for them, so that
  // parallel suggestions spread out (the variance there drops to the noise).
  if (!running.empty()) {
    // The newest kMaxPoints of them at most (ids grow).
    const auto believed_n = static_cast<Eigen::Index>(std::min(running.size(), kMaxPoints));
    Eigen::MatrixXd R(believed_n, d);
    Eigen::Index i = 0;
    for (auto it = running.rbegin(); i < believed_n; ++it) R.row(i++) = it->second.transpose();
    const Eigen::VectorXd believed = Kernel(Distances(X, R), m.length).transpose() * m.alpha;
    Eigen::MatrixXd X2(n + R.rows(), d);
    X2 << X, R;
    Eigen::VectorXd y2(n + R.rows());
    y2 << ys, believed;
    Fitted with;
    if (Fit(X2, y2, m.length, &with, nullptr)) {
      with.y_mean = m.y_mean;
      with.y_std = m.y_std;
      m = std::move(with);
    }
  }
  return m;
}

Eigen::VectorXd GpModel::Acquisition(const Fitted& m, const Eigen::MatrixXd& C, double best) const {
  const Eigen::MatrixXd Ks = Kernel(Distances(m.X, C), m.length);  // n x candidates
  const Eigen::VectorXd mean = (Ks.transpose() * m.alpha).array() * m.y_std + m.y_mean;
  const Eigen::MatrixXd v = m.llt.matrixL().solve(Ks);
  const Eigen::ArrayXd sd =
      (1.0 - v.colwise().squaredNorm().transpose().array()).cwiseMax(1e-18).sqrt() * m.y_std;
  switch (options_.utility) {
    case Utility::kUcb:
      return (mean.array() + options_.kappa * sd).matrix();
    case Utility::kPoi: {
      Eigen::VectorXd out(C.rows());
      for (Eigen::Index i = 0; i < C.rows(); ++i) {
        out[i] = NormalCdf((mean[i] - best - options_.xi) / sd[i]);
      }
      return out;
    }
    case Utility::kEi:
      break;
  }
  Eigen::VectorXd out(C.rows());
  for (Eigen::Index i = 0; i < C.rows(); ++i) {
    const double a = mean[i] - best - options_.xi;
    const double z = a / sd[i];
    out[i] = a * NormalCdf(z) + sd[i] * NormalPdf(z);
  }
  return out;
}

Eigen::VectorXd GpModel::Suggest(const std::deque<Eigen::VectorXd>& points,
                                 const std::deque<double>& targets,
                                 const std::map<int64_t, Eigen::VectorXd>& running,
                                 std::mt19937_64& rng) {
  const Fitted model = FitModel(points, targets, running);
  const double best = *std::max_element(targets.begin(), targets.end());
  const size_t dims = static_cast<size_t>(points.front().size());
  const auto d = static_cast<Eigen::Index>(dims);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  // Warm-up: random points, keeping the best `starts` as the refinement's
  // starts in a heap whose front is the worst kept (starts may be 10^5).
  const size_t starts = static_cast<size_t>(std::max<int64_t>(options_.starting_points, 1));
  auto worse = [](const auto& a, const auto& b) { return a.first > b.first; };
  std::vector<std::pair<double, Eigen::VectorXd>> top;  // (value, point)
  for (int64_t done = 0; done < options_.warm_up;) {
    const Eigen::Index m = std::min<Eigen::Index>(kBatch, options_.warm_up - done);
    Eigen::MatrixXd C(m, d);
    for (Eigen::Index i = 0; i < m; ++i) {
      for (Eigen::Index k = 0; k < d; ++k) C(i, k) = unit(rng);
    }
    const Eigen::VectorXd value = Acquisition(model, C, best);
    for (Eigen::Index i = 0; i < m; ++i) {
      if (top.size() < starts) {
        top.emplace_back(value[i], C.row(i).transpose());
        std::push_heap(top.begin(), top.end(), worse);
      } else if (value[i] > top.front().first) {
        std::pop_heap(top.begin(), top.end(), worse);
        top.back() = {value[i], C.row(i).transpose()};
        std::push_heap(top.begin(), top.end(), worse);
      }
    }
    done += m;
  }
  if (options_.starting_points == 0) return top.front().second;

  // Compass search from each start: a start moves to its best neighbour
  // (± step along one dimension) when that is better, else halves its step.
  // Starts are scored together, at most kBatch candidates at once.
  const size_t per_chunk = std::max<size_t>(1, static_cast<size_t>(kBatch) / (2 * dims));
  std::vector<double> step(top.size(), kFirstStep);
  for (int it = 0; it < kRefineSteps; ++it) {
    std::vector<size_t> live;
    for (size_t s = 0; s < top.size(); ++s) {
      if (step[s] >= kLastStep) live.push_back(s);
    }
    if (live.empty()) break;
    for (size_t from = 0; from < live.size(); from += per_chunk) {
      const size_t to = std::min(live.size(), from + per_chunk);
      Eigen::MatrixXd C(static_cast<Eigen::Index>(to - from) * 2 * d, d);
      Eigen::Index row = 0;
      for (size_t j = from; j < to; ++j) {
        const size_t s = live[j];
        for (Eigen::Index k = 0; k < d; ++k) {
          for (double sign : {-1.0, 1.0}) {
            Eigen::VectorXd u = top[s].second;
            u[k] = std::clamp(u[k] + sign * step[s], 0.0, 1.0);
            C.row(row++) = u.transpose();
          }
        }
      }
      const Eigen::VectorXd value = Acquisition(model, C, best);
      row = 0;
      for (size_t j = from; j < to; ++j) {
        const size_t s = live[j];
        Eigen::Index arg = 0;
        const double got = value.segment(row, 2 * d).maxCoeff(&arg);
        if (got > top[s].first) {
          top[s].first = got;
          top[s].second = C.row(row + arg).transpose();
        } else {
          step[s] /= 2;
        }
        row += 2 * d;
      }
    }
  }
  return std::max_element(top.begin(), top.end(),
                          [](const auto& a, const auto& b) { return a.first < b.first; })
      ->second;
}

}  // namespace tunehost::plugins
