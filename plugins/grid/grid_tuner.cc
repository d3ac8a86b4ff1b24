#include "grid_tuner.h"

#include <cmath>
#include <limits>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.grid";
constexpr int64_t kStateVersion = 1;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "grid: saved state: " + what);
}

// Acklam's approximation of Phi^-1 for p in (0, 0.5]; relative error below
// 1.15e-9 (https://web.archive.org/web/20151030215612/http://home.online.no/
// ~pjacklam/notes/invnorm/).
double AcklamLowerHalf(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                             -2.759285104469687e+02, 1.383577518672690e+02,
                             -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                             -1.556989798598866e+02, 6.680131188771972e+01,
                             -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                             -2.400758277161838e+00, -2.549732539343734e+00,
                             4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                             2.445134137142996e+00, 3.754408661907416e+00};
  const double kLow = 0.02425;
  if (p < kLow) {
    const double q = std::sqrt(-2.0 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  }
  const double q = p - 0.5;
  const double r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
}

}  // namespace

double InverseNormalCdf(double p) {
  if (std::isnan(p) || p < 0.0 || p > 1.0) return std::numeric_limits<double>::quiet_NaN();
  if (p == 0.0) return -std::numeric_limits<double>::infinity();
  if (p == 1.0) return std::numeric_limits<double>::infinity();
  if (p == 0.5) return 0.0;
  // 1 - p is exact for p >= 0.5, and the lower half is where erfc is
  // accurate: the upper half by symmetry, which also makes the quantiles of
  // u and 1 - u exact opposites.
  if (p > 0.5) return -InverseNormalCdf(1.0 - p);
  double x = AcklamLowerHalf(p);
  // One Halley step on Phi(x) - p. In the far tail exp(x^2/2) overflows:
  // keep Acklam's value there.
  const double kSqrt2 = 1.41421356237309504880;
  const double kSqrt2Pi = 2.50662827463100050242;
  const double e = 0.5 * std::erfc(-x / kSqrt2) - p;
  const double u = e * kSqrt2Pi * std::exp(0.5 * x * x);
  const double refined = x - u / (1.0 + 0.5 * x * u);
  if (std::isfinite(refined)) x = refined;
  return x;
}

GridTuner::GridTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  // optimize_mode is accepted for NNI configs that set it on every tuner; a
  // grid does not look at results.
  sdk::ClassArgs args("grid", class_args, {"optimize_mode"});
  args.Maximize(true);
}

namespace {

size_t PointCount(const sdk::Parameter& p, const std::vector<double>& points) {
  // Categorical points are the option indices, not stored (randint may have
  // 2^53 of them).
  return p.categorical ? static_cast<size_t>(p.size) : points.size();
}

}  // namespace

double GridTuner::Quantile(size_t i, double u) const {
  const sdk::Parameter& p = space_->params()[i];
  if (p.normal) return p.mu + p.sigma * InverseNormalCdf(u);
  return p.low + (p.high - p.low) * u;
}

double GridTuner::Value(size_t i, double u) const {
  // UserValue keeps the infinities of quantiles 0 and 1 of the normal types
  // (exp(-inf) = 0 for the log ones), so ends compare as NNI's _less does.
  return sdk::UserValue(space_->params()[i], Quantile(i, u));
}

bool GridTuner::MayHoldNewValue(size_t i, const Grid& g, double l, double r) const {
  const sdk::Parameter& p = space_->params()[i];
  const double a = Value(i, l);
  const double b = Value(i, r);
  if (!(a < b)) return false;  // a single value, already known or not reachable
  if (!(p.q > 0)) return true;  // continuous: values strictly between a and b
  if (std::isinf(a) || std::isinf(b)) return true;
  // q-types take clip(k * q) for integer k, one value per k.
  if (std::nearbyint(b / p.q) - std::nearbyint(a / p.q) > 1) return true;
  // No value strictly between. Quantiles 0 and 1 are never grid points, so
  // their values may still be missing.
  if (l == 0.0 && g.values[i].count(a) == 0) return true;
  if (r == 1.0 && g.values[i].count(b) == 0) return true;
  return false;
}

GridTuner::Grid GridTuner::InitialGrid() const {
  const size_t n = space_->params().size();
  Grid g;
  g.points.resize(n);
  g.values.resize(n);
  g.divisions.resize(n);
  g.bar.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (space_->params()[i].categorical) continue;
    g.points[i].push_back(0.5);
    g.values[i].insert(Value(i, 0.5));
    for (auto [l, r] : {std::pair<double, double>{0.0, 0.5}, {0.5, 1.0}}) {
      if (MayHoldNewValue(i, g, l, r)) g.divisions[i].emplace_back(l, r);
    }
  }
  return g;
}

bool GridTuner::RefineOnce(Grid& g) const {
  bool added = false;
  for (size_t i = 0; i < g.points.size(); ++i) {
    const sdk::Parameter& p = space_->params()[i];
    g.bar[i] = PointCount(p, g.points[i]);
    if (p.categorical) continue;
    std::vector<double> fresh;
    std::vector<std::pair<double, double>> next;
    for (auto [l, r] : g.divisions[i]) {
      const double mid = (l + r) / 2;
      if (!(l < mid && mid < r)) continue;  // no double left inside
      if (g.values[i].insert(Value(i, mid)).second) fresh.push_back(mid);
      if (MayHoldNewValue(i, g, l, mid)) next.emplace_back(l, mid);
      if (MayHoldNewValue(i, g, mid, r)) next.emplace_back(mid, r);
    }
    added = added || !fresh.empty();
    g.points[i].insert(g.points[i].end(), fresh.begin(), fresh.end());
    g.divisions[i] = std::move(next);
  }
  ++g.refinements;
  return added;
}

bool GridTuner::Refine(Grid& g) const {
  for (;;) {
    bool divisible = false;
    for (const auto& d : g.divisions) divisible = divisible || !d.empty();
    if (!divisible) return false;
    // An epoch that adds nothing (q-values not hit yet) has no new
    // configuration: go straight on to the next one.
    if (RefineOnce(g)) return true;
  }
}

sdk::Assignment GridTuner::Current(const Grid& g) const {
  const std::vector<size_t>& v = *g.vector;
  sdk::Assignment a(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!space_->IsActive(i, a)) continue;
    const sdk::Parameter& p = space_->params()[i];
    a[i] = p.categorical ? static_cast<double>(v[i]) : Quantile(i, g.points[i][v[i]]);
  }
  return a;
}

void GridTuner::NextVector(Grid& g) const {
  const size_t n = g.points.size();
  if (!g.vector) {
    g.vector = std::vector<size_t>(n, 0);
    return;
  }
  // Only parameters of the chosen options move (NNI's activated_dims); the
  // others stay at 0, which counts as "already explored".
  const sdk::Assignment a = Current(g);
  std::vector<size_t>& v = *g.vector;
  for (size_t k = n; k-- > 0;) {
    if (!space_->IsActive(k, a)) continue;
    if (v[k] + 1 < PointCount(space_->params()[k], g.points[k])) {
      ++v[k];
      return;
    }
    v[k] = 0;
  }
  g.vector.reset();  // the epoch is over
}

std::optional<sdk::Assignment> GridTuner::Suggest() {
  for (;;) {
    if (grid_.done) return std::nullopt;
    NextVector(grid_);
    if (!grid_.vector) {
      if (!Refine(grid_)) {
        grid_.done = true;
        return std::nullopt;
      }
      LogGridSize(grid_, "refined");
      continue;
    }
    bool old = true;
    for (size_t i = 0; i < grid_.bar.size() && old; ++i) old = (*grid_.vector)[i] < grid_.bar[i];
    if (!old) return Current(grid_);
  }
}

void GridTuner::LogGridSize(const Grid& g, const char* what) const {
  std::string sizes;
  for (size_t i = 0; i < g.points.size(); ++i) {
    sizes += sizes.empty() ? "" : " x ";
    sizes += std::to_string(PointCount(space_->params()[i], g.points[i]));
  }
  host().Info(std::string("grid: ") + what + " grid, " + std::to_string(g.refinements) +
              " refinements, points per parameter: " + sizes);
}

void GridTuner::UpdateSearchSpace(const msgpack::object& space) {
  sdk::SearchSpace parsed = sdk::SearchSpace::Parse(space);
  // NNI refuses it too: there would be nothing to enumerate.
  if (parsed.empty()) throw sdk::Error(TH_INVALID_ARGUMENT, "grid: the search space is empty");
  std::string key = sdk::CanonicalKey(space);
  if (space_ && key == space_key_) return;  // same space: the enumeration goes on

  space_ = std::move(parsed);
  Grid g = InitialGrid();
  if (pending_ && pending_->space_key == key) {
    try {
      g = Restore(*pending_);
    } catch (const sdk::Error& e) {
      host().Warn(std::string(e.what()) + "; the enumeration starts again");
    }
  }
  pending_.reset();
  space_key_ = std::move(key);
  grid_ = std::move(g);
  LogGridSize(grid_, "initial");
}

bool GridTuner::GenerateParameters(int64_t /*parameter_id*/,
                                   msgpack::packer<msgpack::sbuffer>& out) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "grid: no search space yet");
  const bool was_done = grid_.done;
  while (std::optional<sdk::Assignment> a = Suggest()) {
    // Skips configurations generated before (imported, or a search space
    // update that starts the enumeration again).
    if (!seen_.Insert(*space_, *a)) continue;
    space_->Pack(*a, out);
    return true;
  }
  if (!was_done) host().Info("grid: the search space has been fully explored");
  return false;
}

void GridTuner::ImportData(const msgpack::object& records) {
  size_t skipped = sdk::ForEachImported(
      records, "grid", [&](const msgpack::object& params, const msgpack::object&, double) {
        seen_.InsertParameters(params);
      });
  if (skipped > 0) {
    host().Warn("grid: skipped " + std::to_string(skipped) +
                " imported records without a \"parameters\" map and a numeric \"value\"");
  }
}

std::string GridTuner::SaveState() {
  // Before a search space, a loaded state is still pending: save it as it is.
  Pending p;
  if (space_) {
    p = Pending{space_key_, grid_.refinements, grid_.vector, grid_.done};
  } else if (pending_) {
    p = *pending_;
  }
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 7, kStateFormat, kStateVersion);
  pk.pack(std::string("space"));
  pk.pack_bin(static_cast<uint32_t>(p.space_key.size()));
  pk.pack_bin_body(p.space_key.data(), static_cast<uint32_t>(p.space_key.size()));
  pk.pack(std::string("refinements"));
  pk.pack(p.refinements);
  pk.pack(std::string("vector"));
  if (p.vector) {
    pk.pack_array(static_cast<uint32_t>(p.vector->size()));
    for (size_t x : *p.vector) pk.pack(static_cast<uint64_t>(x));
  } else {
    pk.pack_nil();
  }
  pk.pack(std::string("done"));
  pk.pack(p.done);
  pk.pack(std::string("seen"));
  seen_.Pack(pk);
  return std::string(buffer.data(), buffer.size());
}

GridTuner::Grid GridTuner::Restore(const Pending& p) const {
  // The grid is a function of the search space and the number of
  // refinements: replay them.
  Grid g = InitialGrid();
  for (int64_t k = 0; k < p.refinements; ++k) {
    bool divisible = false;
    for (const auto& d : g.divisions) divisible = divisible || !d.empty();
    if (!divisible) BadState("more refinements than the search space allows");
    RefineOnce(g);
    size_t points = 0;
    for (const auto& x : g.points) points += x.size();
    if (points > kMaxRestoredGridPoints) BadState("grid too large");
  }
  g.done = p.done;
  if (p.vector && !p.done) {
    if (p.vector->size() != g.points.size()) BadState("vector does not fit the search space");
    for (size_t i = 0; i < p.vector->size(); ++i) {
      if ((*p.vector)[i] >= PointCount(space_->params()[i], g.points[i])) {
        BadState("vector does not fit the search space");
      }
    }
    g.vector = p.vector;
  }
  return g;
}

void GridTuner::LoadState(std::string_view state) {
  msgpack::object_handle h = sdk::OpenState(state, "grid", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  const msgpack::object* space = sdk::FindKey(o, "space");
  const msgpack::object* refinements = sdk::FindKey(o, "refinements");
  const msgpack::object* vector = sdk::FindKey(o, "vector");
  const msgpack::object* done = sdk::FindKey(o, "done");
  const msgpack::object* seen = sdk::FindKey(o, "seen");
  if (space == nullptr || space->type != msgpack::type::BIN) BadState("no space key");
  if (refinements == nullptr || refinements->type != msgpack::type::POSITIVE_INTEGER ||
      refinements->via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    BadState("no refinement count");
  }
  if (done == nullptr || done->type != msgpack::type::BOOLEAN) BadState("no done flag");
  Pending p;
  p.space_key.assign(space->via.bin.ptr, space->via.bin.size);
  p.refinements = static_cast<int64_t>(refinements->via.u64);
  p.done = done->via.boolean;
  if (vector == nullptr) BadState("no vector");
  if (vector->type == msgpack::type::ARRAY) {
    p.vector.emplace();
    for (uint32_t i = 0; i < vector->via.array.size; ++i) {
      const msgpack::object& x = vector->via.array.ptr[i];
      if (x.type != msgpack::type::POSITIVE_INTEGER) BadState("vector holds a non-index");
      p.vector->push_back(static_cast<size_t>(x.via.u64));
    }
  } else if (vector->type != msgpack::type::NIL) {
    BadState("vector is neither an array nor nil");
  }
  sdk::SeenConfigurations keys;
  if (seen == nullptr || !keys.Unpack(*seen)) BadState("no seen list of binary keys");

  if (!space_) {
    pending_ = std::move(p);  // applied by the search space it was saved with
  } else if (p.space_key == space_key_) {
    grid_ = Restore(p);
    pending_.reset();
  } else {
    // Saved for another search space: the tried configurations still count.
    host().Warn("grid: saved state belongs to another search space; the enumeration starts "
                "again, skipping the configurations already tried");
    grid_ = InitialGrid();
    pending_.reset();
  }
  seen_ = std::move(keys);
}

}  // namespace tunehost::plugins
