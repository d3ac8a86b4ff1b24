#include "cmaes_tuner.h"

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

constexpr const char* kStateFormat = "org.tunehost.cmaes";
constexpr int64_t kStateVersion = 1;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "cmaes: saved state: " + what);
}

bool IsDimension(const sdk::Parameter& p) { return p.type != sdk::ParamType::kChoice; }

void PackVector(msgpack::packer<msgpack::sbuffer>& pk, const Eigen::VectorXd& v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (Eigen::Index i = 0; i < v.size(); ++i) sdk::PackFloat64(pk, v[i]);
}

Eigen::VectorXd UnpackVector(const msgpack::object* o, size_t n, const char* what) {
  if (o == nullptr || o->type != msgpack::type::ARRAY || o->via.array.size != n) {
    BadState(std::string("no ") + what + " of " + std::to_string(n) + " numbers");
  }
  Eigen::VectorXd v(static_cast<Eigen::Index>(n));
  for (size_t i = 0; i < n; ++i) {
    const msgpack::object& x = o->via.array.ptr[i];
    if (!sdk::IsNumber(x)) BadState(std::string(what) + " holds a non-number");
    v[static_cast<Eigen::Index>(i)] = sdk::AsDouble(x, what);
    if (!std::isfinite(v[static_cast<Eigen::Index>(i)])) {
      BadState(std::string(what) + " holds a value that is not finite");
    }
  }
  return v;
}

}  // namespace

CmaEsTuner::CmaEsTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  sdk::ClassArgs args("cmaes", class_args,
                      {"optimize_mode", "seed", "popsize", "sigma0", "n_startup_trials"});
  maximize_ = args.Maximize(true);
  if (args.Has("popsize") && !args.IsNull("popsize")) {
    popsize_arg_ = args.Int("popsize", 0, 2, kMaxPopsize);
  }
  if (args.Has("sigma0") && !args.IsNull("sigma0")) {
    sigma0_ = args.Number("sigma0", sigma0_, 0.0, 1.0, /*min_exclusive=*/true);
  }
  n_startup_ = args.Int("n_startup_trials", 1, 0);
  seed_ = args.SeedOrRandom(host);
  rng_.seed(seed_);
}

const sdk::SearchSpace& CmaEsTuner::Space() const {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "cmaes: no search space yet");
  return *space_;
}

void CmaEsTuner::UpdateSearchSpace(const msgpack::object& space) {
  sdk::SearchSpace parsed = sdk::SearchSpace::Parse(space);
  std::vector<size_t> dims;
  for (size_t i = 0; i < parsed.params().size(); ++i) {
    const sdk::Parameter& p = parsed.params()[i];
    if (p.nested) {
      throw sdk::Error(TH_INVALID_ARGUMENT, "cmaes: search space key \"" + p.path +
                                                "\": nested choices are not supported (tpe "
                                                "and evolution take them)");
    }
    if (IsDimension(p)) dims.push_back(i);
  }
  space_ = std::move(parsed);
  dims_ = std::move(dims);
  const auto n = static_cast<double>(dims_.size());
  popsize_ = popsize_arg_
                 ? static_cast<size_t>(*popsize_arg_)
                 : (dims_.empty() ? 0 : 4 + static_cast<size_t>(std::floor(3 * std::log(n))));
  Reset();
  generation_ = 0;
  startup_left_ = n_startup_;
  drawn_.clear();
}

void CmaEsTuner::Reset() {
  const auto n = static_cast<Eigen::Index>(dims_.size());
  mean_ = Eigen::VectorXd::Constant(n, 0.5);
  p_sigma_ = Eigen::VectorXd::Zero(n);
  p_c_ = Eigen::VectorXd::Zero(n);
  C_ = Eigen::MatrixXd::Identity(n, n);
  sigma_ = sigma0_;
  told_.clear();
  (void)Decompose();
}

bool CmaEsTuner::Decompose() {
  if (C_.size() == 0) {
    B_.resize(0, 0);
    D_.resize(0);
    return true;
  }
  C_ = ((C_ + C_.transpose()) / 2).eval();  // eval: C_ is read transposed while written
  if (!C_.allFinite()) return false;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(C_);
  if (eig.info() != Eigen::Success) return false;
  const Eigen::VectorXd& values = eig.eigenvalues();
  if (values.size() > 0 && !(values.minCoeff() > 0)) return false;
  B_ = eig.eigenvectors();
  D_ = values.cwiseSqrt();
  return true;
}

Eigen::VectorXd CmaEsTuner::Draw() {
  const auto n = static_cast<Eigen::Index>(dims_.size());
  const auto& params = Space().params();
  auto inside = [&](const Eigen::VectorXd& u) {
    for (Eigen::Index k = 0; k < n; ++k) {
      if (!params[dims_[static_cast<size_t>(k)]].normal && (u[k] < 0 || u[k] > 1)) return false;
    }
    return true;
  };
  Eigen::VectorXd u(n), z(n);
  for (int attempt = 0; attempt < kMaxResamples; ++attempt) {
    for (Eigen::Index k = 0; k < n; ++k) z[k] = sdk::StandardNormal(rng_);
    u = mean_ + sigma_ * (B_ * D_.cwiseProduct(z));
    if (inside(u)) return u;
  }
  for (Eigen::Index k = 0; k < n; ++k) {
    if (!params[dims_[static_cast<size_t>(k)]].normal) u[k] = std::clamp(u[k], 0.0, 1.0);
  }
  return u;
}

// The dimensions are unit-cube coordinates; a normal parameter's is not
// clipped (the search may follow it past mu ± 3 sigma).
Eigen::VectorXd CmaEsTuner::PointOf(const sdk::Assignment& a) const {
  const auto& params = Space().params();
  Eigen::VectorXd u(static_cast<Eigen::Index>(dims_.size()));
  for (size_t k = 0; k < dims_.size(); ++k) {
    u[static_cast<Eigen::Index>(k)] = sdk::ToUnit(params[dims_[k]], a[dims_[k]].value_or(0));
  }
  return u;
}

sdk::Assignment CmaEsTuner::AssignmentOf(const Eigen::VectorXd& u) {
  const auto& params = Space().params();
  sdk::Assignment a(params.size());
  for (size_t k = 0; k < dims_.size(); ++k) {
    a[dims_[k]] = sdk::FromUnit(params[dims_[k]], u[static_cast<Eigen::Index>(k)]);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!IsDimension(params[i])) a[i] = sdk::SampleParameter(params[i], rng_);
  }
  return a;
}

bool CmaEsTuner::GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) {
  const sdk::SearchSpace& space = Space();
  if (startup_left_ > 0 || dims_.empty()) {
    if (startup_left_ > 0) --startup_left_;
    space.Pack(space.Sample(rng_), out);
    return true;
  }
  Eigen::VectorXd u = Draw();
  space.Pack(AssignmentOf(u), out);
  drawn_[parameter_id] = Drawn{generation_, std::move(u)};
  return true;
}

void CmaEsTuner::ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                                    const msgpack::object& /*value*/, double scalar,
                                    bool customized) {
  auto it = drawn_.find(parameter_id);
  if (it != drawn_.end()) {
    Drawn d = std::move(it->second);
    drawn_.erase(it);
    // Optuna's rule: a result counts only in the generation it was drawn in.
    if (d.generation == generation_ && std::isfinite(scalar)) Tell(std::move(d.u), scalar);
    return;
  }
  if (customized && !dims_.empty() && std::isfinite(scalar)) {
    try {
      Tell(PointOf(Space().FromParameters(parameters)), scalar);
    } catch (const sdk::Error&) {
      host().Warn(
          "cmaes: result of a customized trial whose parameters do not fit the "
          "search space; ignored");
    }
  }
  // Otherwise a random start-up trial's result, or a second result: nothing to learn.
}

void CmaEsTuner::TrialEnd(int64_t parameter_id, bool /*success*/) { drawn_.erase(parameter_id); }

void CmaEsTuner::ImportData(const msgpack::object& records) {
  const sdk::SearchSpace& space = Space();
  size_t unfit = 0;
  size_t skipped = sdk::ForEachImported(
      records, "cmaes", [&](const msgpack::object& params, const msgpack::object&, double scalar) {
        try {
          Eigen::VectorXd u = PointOf(space.FromParameters(params));
          if (!dims_.empty() && std::isfinite(scalar)) Tell(std::move(u), scalar);
        } catch (const sdk::Error&) {
          ++unfit;
        }
      });
  if (skipped + unfit > 0) {
    host().Warn("cmaes: skipped " + std::to_string(skipped + unfit) +
                " imported records without a \"parameters\" map of this search space and a "
                "numeric \"value\"");
  }
}

void CmaEsTuner::Tell(Eigen::VectorXd u, double metric) {
  told_.emplace_back(std::move(u), Loss(metric));
  if (told_.size() >= popsize_) Update();
}

// One generation's update (Hansen's tutorial, eqs. 39-47, positive weights).
void CmaEsTuner::Update() {
  const auto n = static_cast<double>(dims_.size());
  const size_t lambda = told_.size();
  const size_t mu = lambda / 2;
  std::stable_sort(told_.begin(), told_.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  Eigen::VectorXd w(static_cast<Eigen::Index>(mu));
  for (size_t i = 0; i < mu; ++i) {
    w[static_cast<Eigen::Index>(i)] =
        std::log((static_cast<double>(lambda) + 1) / 2) - std::log(static_cast<double>(i + 1));
  }
  w /= w.sum();
  const double mu_eff = 1 / w.squaredNorm();
  const double c_sigma = (mu_eff + 2) / (n + mu_eff + 5);
  const double d_sigma = 1 + 2 * std::max(0.0, std::sqrt((mu_eff - 1) / (n + 1)) - 1) + c_sigma;
  const double c_c = (4 + mu_eff / n) / (n + 4 + 2 * mu_eff / n);
  const double c_1 = 2 / ((n + 1.3) * (n + 1.3) + mu_eff);
  const double c_mu =
      std::min(1 - c_1, 2 * (mu_eff - 2 + 1 / mu_eff) / ((n + 2) * (n + 2) + mu_eff));
  const double chi_n = std::sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n * n));

  Eigen::MatrixXd Y(mean_.size(), static_cast<Eigen::Index>(mu));
  for (size_t i = 0; i < mu; ++i) {
    Y.col(static_cast<Eigen::Index>(i)) = (told_[i].first - mean_) / sigma_;
  }
  const Eigen::VectorXd y_w = Y * w;
  mean_ += sigma_ * y_w;
  const Eigen::MatrixXd c_inv_sqrt = B_ * D_.cwiseInverse().asDiagonal() * B_.transpose();
  p_sigma_ =
      (1 - c_sigma) * p_sigma_ + std::sqrt(c_sigma * (2 - c_sigma) * mu_eff) * c_inv_sqrt * y_w;
  const double g = static_cast<double>(generation_ + 1);
  const bool h_sigma =
      p_sigma_.norm() / std::sqrt(1 - std::pow(1 - c_sigma, 2 * g)) < (1.4 + 2 / (n + 1)) * chi_n;
  p_c_ = (1 - c_c) * p_c_ + (h_sigma ? std::sqrt(c_c * (2 - c_c) * mu_eff) : 0.0) * y_w;
  const double delta = h_sigma ? 0.0 : c_c * (2 - c_c);
  C_ = (1 + c_1 * delta - c_1 - c_mu) * C_ + c_1 * p_c_ * p_c_.transpose() +
       c_mu * Y * w.asDiagonal() * Y.transpose();
  sigma_ *= std::exp(std::min(1.0, (c_sigma / d_sigma) * (p_sigma_.norm() / chi_n - 1)));
  told_.clear();
  ++generation_;
  if (!std::isfinite(sigma_) || sigma_ < 1e-30 || !mean_.allFinite() || !Decompose()) {
    host().Warn("cmaes: the distribution degenerated at generation " + std::to_string(generation_) +
                "; starting again from the initial one");
    Reset();
  }
}

std::string CmaEsTuner::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 15, kStateFormat, kStateVersion);  // 13 keys after the header's 2
  sdk::PackSavedRandom(pk, seed_, rng_);
  pk.pack(std::string("maximize"));
  pk.pack(maximize_);
  pk.pack(std::string("dimensions"));
  pk.pack(static_cast<uint64_t>(dims_.size()));
  pk.pack(std::string("generation"));
  pk.pack(generation_);
  pk.pack(std::string("startup_left"));
  pk.pack(startup_left_);
  pk.pack(std::string("mean"));
  PackVector(pk, mean_);
  pk.pack(std::string("sigma"));
  sdk::PackFloat64(pk, sigma_);
  pk.pack(std::string("C"));  // its n*n entries (symmetric)
  PackVector(pk, Eigen::Map<const Eigen::VectorXd>(C_.data(), C_.size()));
  pk.pack(std::string("p_sigma"));
  PackVector(pk, p_sigma_);
  pk.pack(std::string("p_c"));
  PackVector(pk, p_c_);
  pk.pack(std::string("drawn"));  // [[id, generation, point], ...]
  pk.pack_array(static_cast<uint32_t>(drawn_.size()));
  for (const auto& [id, d] : drawn_) {
    pk.pack_array(3);
    pk.pack(id);
    pk.pack(d.generation);
    PackVector(pk, d.u);
  }
  pk.pack(std::string("told"));  // [[point, loss], ...]
  pk.pack_array(static_cast<uint32_t>(told_.size()));
  for (const auto& [u, loss] : told_) {
    pk.pack_array(2);
    PackVector(pk, u);
    sdk::PackFloat64(pk, loss);
  }
  return std::string(buffer.data(), buffer.size());
}

void CmaEsTuner::LoadState(std::string_view state) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "cmaes: load_state needs the search space first");
  msgpack::object_handle h = sdk::OpenState(state, "cmaes", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  auto key = [&](const char* k) { return sdk::FindKey(o, k); };
  auto u64 = [&](const char* k) {
    const msgpack::object* v = key(k);
    if (v == nullptr || v->type != msgpack::type::POSITIVE_INTEGER)
      BadState(std::string("no ") + k);
    return v->via.u64;
  };
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, "cmaes");
  sdk::CheckSavedMaximize(o, maximize_, "cmaes");
  const size_t n = dims_.size();
  if (u64("dimensions") != n) {
    BadState("saved for " + std::to_string(u64("dimensions")) +
             " dimensions, this search space has " + std::to_string(n));
  }
  const uint64_t generation = u64("generation");
  const msgpack::object* startup = key("startup_left");
  if (startup == nullptr || !sdk::IsInteger(*startup)) BadState("no startup_left");
  const int64_t startup_left = sdk::AsInt64(*startup, "startup_left");
  Eigen::VectorXd mean = UnpackVector(key("mean"), n, "mean");
  const msgpack::object* sigma_o = key("sigma");
  if (sigma_o == nullptr || !sdk::IsNumber(*sigma_o)) BadState("no sigma");
  const double sig = sdk::AsDouble(*sigma_o, "sigma");
  if (!(sig > 0) || !std::isfinite(sig)) BadState("sigma must be positive and finite");
  Eigen::VectorXd c_flat = UnpackVector(key("C"), n * n, "C");
  Eigen::VectorXd p_sigma = UnpackVector(key("p_sigma"), n, "p_sigma");
  Eigen::VectorXd p_c = UnpackVector(key("p_c"), n, "p_c");

  std::map<int64_t, Drawn> drawn;
  const msgpack::object* d = key("drawn");
  if (d == nullptr || d->type != msgpack::type::ARRAY) BadState("no drawn list");
  for (uint32_t i = 0; i < d->via.array.size; ++i) {
    const msgpack::object& e = d->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 3 ||
        !sdk::IsInteger(e.via.array.ptr[0]) ||
        e.via.array.ptr[1].type != msgpack::type::POSITIVE_INTEGER) {
      BadState("bad drawn entry");
    }
    drawn[sdk::AsInt64(e.via.array.ptr[0], "drawn")] =
        Drawn{e.via.array.ptr[1].via.u64, UnpackVector(&e.via.array.ptr[2], n, "drawn point")};
  }
  std::vector<std::pair<Eigen::VectorXd, double>> told;
  const msgpack::object* t = key("told");
  if (t == nullptr || t->type != msgpack::type::ARRAY) BadState("no told list");
  for (uint32_t i = 0; i < t->via.array.size; ++i) {
    const msgpack::object& e = t->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 2 ||
        !sdk::IsNumber(e.via.array.ptr[1])) {
      BadState("bad told entry");
    }
    const double loss = sdk::AsDouble(e.via.array.ptr[1], "told");
    if (!std::isfinite(loss)) BadState("a told loss is not finite");
    told.emplace_back(UnpackVector(&e.via.array.ptr[0], n, "told point"), loss);
  }
  if (told.size() >= std::max<size_t>(popsize_, 1) && n > 0) BadState("a full generation not told");

  const Eigen::MatrixXd c_saved = C_;
  const Eigen::MatrixXd b_saved = B_;
  const Eigen::VectorXd d_saved = D_;
  C_ = Eigen::Map<const Eigen::MatrixXd>(c_flat.data(), static_cast<Eigen::Index>(n),
                                         static_cast<Eigen::Index>(n));
  if (!Decompose()) {
    C_ = c_saved;
    B_ = b_saved;
    D_ = d_saved;
    BadState("C is not a positive definite matrix");
  }
  seed_ = random.seed;
  rng_ = random.rng;
  generation_ = generation;
  startup_left_ = startup_left;
  mean_ = std::move(mean);
  sigma_ = sig;
  p_sigma_ = std::move(p_sigma);
  p_c_ = std::move(p_c);
  drawn_ = std::move(drawn);
  told_ = std::move(told);
}

}  // namespace tunehost::plugins
