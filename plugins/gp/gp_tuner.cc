#include "gp_tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"
#include "tunehost/sdk/cpp/unit_cube.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.gp";
constexpr int64_t kStateVersion = 1;
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
// Running trials a saved state may list.
constexpr uint32_t kMaxRunning = 1000000;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "gp: saved state: " + what);
}

double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }
double NormalPdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI); }

// Euclidean distances between the rows of A and the rows of B.
Eigen::MatrixXd Distances(const Eigen::MatrixXd& A, const Eigen::MatrixXd& B) {
  Eigen::MatrixXd d2 = (-2.0 * A * B.transpose()).eval();
  d2.colwise() += A.rowwise().squaredNorm();
  d2.rowwise() += B.rowwise().squaredNorm().transpose();
  return d2.cwiseMax(0.0).cwiseSqrt();
}

void PackVector(msgpack::packer<msgpack::sbuffer>& pk, const Eigen::VectorXd& v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (Eigen::Index i = 0; i < v.size(); ++i) sdk::PackFloat64(pk, v[i]);
}

Eigen::VectorXd UnpackPoint(const msgpack::object& o, size_t n, const char* what) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size != n) {
    BadState(std::string(what) + " is not a list of " + std::to_string(n) + " numbers");
  }
  Eigen::VectorXd v(static_cast<Eigen::Index>(n));
  for (size_t i = 0; i < n; ++i) {
    const msgpack::object& x = o.via.array.ptr[i];
    if (!sdk::IsNumber(x)) BadState(std::string(what) + " holds a non-number");
    const double d = sdk::AsDouble(x, what);
    if (!std::isfinite(d)) BadState(std::string(what) + " holds a value that is not finite");
    v[static_cast<Eigen::Index>(i)] = d;
  }
  return v;
}

}  // namespace

GpTuner::GpTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  sdk::ClassArgs args("gp", class_args,
                      {"optimize_mode", "utility", "kappa", "xi", "nu", "alpha", "cold_start_num",
                       "selection_num_warm_up", "selection_num_starting_points", "seed"});
  maximize_ = args.Maximize(true);
  const std::string utility = args.Choice("utility", "ei", {"ei", "ucb", "poi"});
  utility_ = utility == "ucb" ? Utility::kUcb : utility == "poi" ? Utility::kPoi : Utility::kEi;
  kappa_ = args.Number("kappa", 5, 0);
  xi_ = args.Number("xi", 0, 0);
  nu_ = args.Number("nu", 2.5, 0);
  if (nu_ != 0.5 && nu_ != 1.5 && nu_ != 2.5) {
    throw args.Bad("nu", "must be 0.5, 1.5 or 2.5 (the Matern kernels with a closed form)");
  }
  alpha_ = args.Number("alpha", 1e-6, 0, 1, /*min_exclusive=*/true);
  cold_start_ = args.Int("cold_start_num", 10, 1);
  warm_up_ = args.Int("selection_num_warm_up", 100000, 1, kMaxWarmUp);
  starting_points_ = args.Int("selection_num_starting_points", 250, 0, kMaxStartingPoints);
  seed_ = args.SeedOrRandom(host);
  rng_.seed(seed_);
}

const sdk::SearchSpace& GpTuner::Space() const {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "gp: no search space yet");
  return *space_;
}

void GpTuner::UpdateSearchSpace(const msgpack::object& space) {
  sdk::SearchSpace parsed = sdk::SearchSpace::Parse(space);
  for (const sdk::Parameter& p : parsed.params()) {
    if (p.nested) {
      throw sdk::Error(TH_INVALID_ARGUMENT, "gp: search space key \"" + p.path +
                                                "\": nested choices are not supported (tpe "
                                                "and evolution take them)");
    }
  }
  dims_ = parsed.params().size();
  space_ = std::move(parsed);
  points_.clear();
  targets_.clear();
  running_.clear();
  length_scale_ = 0;
}

// Every parameter is a coordinate of the unit cube; the model's box is
// [0, 1], normal types clipped to mu ± 3 sigma.
Eigen::VectorXd GpTuner::PointOf(const sdk::Assignment& a) const {
  const auto& params = Space().params();
  Eigen::VectorXd u(static_cast<Eigen::Index>(dims_));
  for (size_t k = 0; k < dims_; ++k) {
    u[static_cast<Eigen::Index>(k)] =
        std::clamp(sdk::ToUnit(params[k], a[k].value_or(0)), 0.0, 1.0);
  }
  return u;
}

sdk::Assignment GpTuner::AssignmentOf(const Eigen::VectorXd& u) const {
  const auto& params = Space().params();
  sdk::Assignment a(params.size());
  for (size_t k = 0; k < dims_; ++k) {
    a[k] = sdk::FromUnit(params[k], std::clamp(u[static_cast<Eigen::Index>(k)], 0.0, 1.0));
  }
  return a;
}

void GpTuner::Observe(Eigen::VectorXd u, double metric) {
  points_.push_back(std::move(u));
  targets_.push_back(maximize_ ? metric : -metric);
  while (points_.size() > kMaxModelPoints) {
    points_.pop_front();
    targets_.pop_front();
  }
}

Eigen::MatrixXd GpTuner::Kernel(const Eigen::MatrixXd& r, double length) const {
  if (nu_ == 0.5) return (-r.array() / length).exp().matrix();
  const double c = nu_ == 1.5 ? std::sqrt(3.0) : std::sqrt(5.0);
  const Eigen::ArrayXXd s = c * r.array() / length;
  if (nu_ == 1.5) return ((1 + s) * (-s).exp()).matrix();
  return ((1 + s + s.square() / 3) * (-s).exp()).matrix();
}

bool GpTuner::Fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, double length, Model* m,
                  double* log_likelihood) const {
  const Eigen::MatrixXd K0 = Kernel(Distances(X, X), length);
  const auto n = X.rows();
  // alpha as NNI's; more only when K is numerically not positive definite
  // (points closer than the kernel resolves), up to kMaxJitter times alpha.
  for (double jitter = 1; jitter <= kMaxJitter; jitter *= 100) {
    Eigen::MatrixXd K = K0;
    K.diagonal().array() += alpha_ * jitter;
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

GpTuner::Model GpTuner::FitModel() {
  const auto n = static_cast<Eigen::Index>(points_.size());
  const auto d = static_cast<Eigen::Index>(dims_);
  Eigen::MatrixXd X(n, d);
  Eigen::VectorXd y(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    X.row(i) = points_[static_cast<size_t>(i)].transpose();
    y[i] = targets_[static_cast<size_t>(i)];
  }
  Model m;
  m.y_mean = y.mean();
  const double var = (y.array() - m.y_mean).square().mean();
  m.y_std = var > 0 ? std::sqrt(var) : 1.0;
  const Eigen::VectorXd ys = (y.array() - m.y_mean) / m.y_std;

  // The length scale of the largest log marginal likelihood.
  auto score = [&](double log_length) {
    Model trial;
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
  if (!running_.empty()) {
    // The newest kMaxModelPoints of them at most (ids grow).
    const auto believed_n = static_cast<Eigen::Index>(std::min(running_.size(), kMaxModelPoints));
    Eigen::MatrixXd R(believed_n, d);
    Eigen::Index i = 0;
    for (auto it = running_.rbegin(); i < believed_n; ++it) R.row(i++) = it->second.transpose();
    const Eigen::VectorXd believed = Kernel(Distances(X, R), m.length).transpose() * m.alpha;
    Eigen::MatrixXd X2(n + R.rows(), d);
    X2 << X, R;
    Eigen::VectorXd y2(n + R.rows());
    y2 << ys, believed;
    Model with;
    if (Fit(X2, y2, m.length, &with, nullptr)) {
      with.y_mean = m.y_mean;
      with.y_std = m.y_std;
      m = std::move(with);
    }
  }
  return m;
}

Eigen::VectorXd GpTuner::Acquisition(const Model& m, const Eigen::MatrixXd& C, double best) const {
  const Eigen::MatrixXd Ks = Kernel(Distances(m.X, C), m.length);  // n x candidates
  const Eigen::VectorXd mean = (Ks.transpose() * m.alpha).array() * m.y_std + m.y_mean;
  const Eigen::MatrixXd v = m.llt.matrixL().solve(Ks);
  const Eigen::ArrayXd sd =
      (1.0 - v.colwise().squaredNorm().transpose().array()).cwiseMax(1e-18).sqrt() * m.y_std;
  switch (utility_) {
    case Utility::kUcb:
      return (mean.array() + kappa_ * sd).matrix();
    case Utility::kPoi: {
      Eigen::VectorXd out(C.rows());
      for (Eigen::Index i = 0; i < C.rows(); ++i) {
        out[i] = NormalCdf((mean[i] - best - xi_) / sd[i]);
      }
      return out;
    }
    case Utility::kEi:
      break;
  }
  Eigen::VectorXd out(C.rows());
  for (Eigen::Index i = 0; i < C.rows(); ++i) {
    const double a = mean[i] - best - xi_;
    const double z = a / sd[i];
    out[i] = a * NormalCdf(z) + sd[i] * NormalPdf(z);
  }
  return out;
}

Eigen::VectorXd GpTuner::Suggest() {
  const Model model = FitModel();
  const double best = *std::max_element(targets_.begin(), targets_.end());
  const auto d = static_cast<Eigen::Index>(dims_);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  // Warm-up: random points, keeping the best `starts` as the refinement's
  // starts in a heap whose front is the worst kept (starts may be 10^5).
  const size_t starts = static_cast<size_t>(std::max<int64_t>(starting_points_, 1));
  auto worse = [](const auto& a, const auto& b) { return a.first > b.first; };
  std::vector<std::pair<double, Eigen::VectorXd>> top;  // (value, point)
  for (int64_t done = 0; done < warm_up_;) {
    const Eigen::Index m = std::min<Eigen::Index>(kBatch, warm_up_ - done);
    Eigen::MatrixXd C(m, d);
    for (Eigen::Index i = 0; i < m; ++i) {
      for (Eigen::Index k = 0; k < d; ++k) C(i, k) = unit(rng_);
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
  if (starting_points_ == 0) return top.front().second;

  // Compass search from each start: a start moves to its best neighbour
  // (± step along one dimension) when that is better, else halves its step.
  // Starts are scored together, at most kBatch candidates at once.
  const size_t per_chunk = std::max<size_t>(1, static_cast<size_t>(kBatch) / (2 * dims_));
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

bool GpTuner::GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) {
  const sdk::SearchSpace& space = Space();
  sdk::Assignment a;
  if (dims_ == 0 || points_.size() < static_cast<size_t>(cold_start_)) {
    a = space.Sample(rng_);
  } else {
    a = AssignmentOf(Suggest());
  }
  space.Pack(a, out);
  if (dims_ > 0) running_[parameter_id] = PointOf(a);
  return true;
}

void GpTuner::ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                                 const msgpack::object& /*value*/, double scalar,
                                 bool /*customized*/) {
  const bool ours = running_.erase(parameter_id) > 0;
  if (dims_ == 0 || !std::isfinite(scalar)) return;
  try {
    Observe(PointOf(Space().FromParameters(parameters)), scalar);
  } catch (const sdk::Error&) {
    if (!ours) {
      host().Warn("gp: result of a trial whose parameters do not fit the search space; ignored");
    }
  }
}

void GpTuner::TrialEnd(int64_t parameter_id, bool /*success*/) { running_.erase(parameter_id); }

void GpTuner::ImportData(const msgpack::object& records) {
  const sdk::SearchSpace& space = Space();
  size_t unfit = 0;
  size_t skipped = sdk::ForEachImported(
      records, "gp", [&](const msgpack::object& params, const msgpack::object&, double scalar) {
        try {
          Eigen::VectorXd u = PointOf(space.FromParameters(params));
          if (dims_ > 0 && std::isfinite(scalar)) Observe(std::move(u), scalar);
        } catch (const sdk::Error&) {
          ++unfit;
        }
      });
  if (skipped + unfit > 0) {
    host().Warn("gp: skipped " + std::to_string(skipped + unfit) +
                " imported records without a \"parameters\" map of this search space and a "
                "numeric \"value\"");
  }
}

std::string GpTuner::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 8, kStateFormat, kStateVersion);  // 6 keys after the header's 2
  sdk::PackSavedRandom(pk, seed_, rng_);
  pk.pack(std::string("maximize"));
  pk.pack(maximize_);
  pk.pack(std::string("dimensions"));
  pk.pack(static_cast<uint64_t>(dims_));
  pk.pack(std::string("observed"));  // [[point, target], ...], oldest first
  pk.pack_array(static_cast<uint32_t>(points_.size()));
  for (size_t i = 0; i < points_.size(); ++i) {
    pk.pack_array(2);
    PackVector(pk, points_[i]);
    sdk::PackFloat64(pk, targets_[i]);
  }
  pk.pack(std::string("running"));  // [[id, point], ...]
  pk.pack_array(static_cast<uint32_t>(running_.size()));
  for (const auto& [id, u] : running_) {
    pk.pack_array(2);
    pk.pack(id);
    PackVector(pk, u);
  }
  return std::string(buffer.data(), buffer.size());
}

void GpTuner::LoadState(std::string_view state) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "gp: load_state needs the search space first");
  msgpack::object_handle h = sdk::OpenState(state, "gp", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  auto key = [&](const char* k) { return sdk::FindKey(o, k); };
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, "gp");
  sdk::CheckSavedMaximize(o, maximize_, "gp");
  const msgpack::object* dims = key("dimensions");
  if (dims == nullptr || dims->type != msgpack::type::POSITIVE_INTEGER || dims->via.u64 != dims_) {
    BadState("not saved for this search space's " + std::to_string(dims_) + " dimensions");
  }
  std::deque<Eigen::VectorXd> points;
  std::deque<double> targets;
  const msgpack::object* observed = key("observed");
  if (observed == nullptr || observed->type != msgpack::type::ARRAY) BadState("no observed list");
  if (observed->via.array.size > kMaxModelPoints) BadState("more observations than a model holds");
  for (uint32_t i = 0; i < observed->via.array.size; ++i) {
    const msgpack::object& e = observed->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 2 ||
        !sdk::IsNumber(e.via.array.ptr[1])) {
      BadState("bad observed entry");
    }
    const double target = sdk::AsDouble(e.via.array.ptr[1], "observed");
    if (!std::isfinite(target)) BadState("an observed target is not finite");
    points.push_back(UnpackPoint(e.via.array.ptr[0], dims_, "observed point"));
    targets.push_back(target);
  }
  std::map<int64_t, Eigen::VectorXd> running;
  const msgpack::object* r = key("running");
  if (r == nullptr || r->type != msgpack::type::ARRAY) BadState("no running list");
  if (r->via.array.size > kMaxRunning) BadState("more running trials than a host runs");
  for (uint32_t i = 0; i < r->via.array.size; ++i) {
    const msgpack::object& e = r->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 2 ||
        !sdk::IsInteger(e.via.array.ptr[0])) {
      BadState("bad running entry");
    }
    running[sdk::AsInt64(e.via.array.ptr[0], "running")] =
        UnpackPoint(e.via.array.ptr[1], dims_, "running point");
  }
  seed_ = random.seed;
  rng_ = random.rng;
  points_ = std::move(points);
  targets_ = std::move(targets);
  running_ = std::move(running);
}

}  // namespace tunehost::plugins
