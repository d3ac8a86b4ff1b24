#include "gp_tuner.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"
#include "tunehost/sdk/cpp/unit_cube.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.gp";
constexpr int64_t kStateVersion = 1;
// Running trials a saved state may list.
constexpr uint32_t kMaxRunning = 1000000;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "gp: saved state: " + what);
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
  GpModel::Options model;
  const std::string utility = args.Choice("utility", "ei", {"ei", "ucb", "poi"});
  model.utility =
      utility == "ucb" ? Utility::kUcb : utility == "poi" ? Utility::kPoi : Utility::kEi;
  model.kappa = args.Number("kappa", 5, 0);
  model.xi = args.Number("xi", 0, 0);
  model.nu = args.Number("nu", 2.5, 0);
  if (model.nu != 0.5 && model.nu != 1.5 && model.nu != 2.5) {
    throw args.Bad("nu", "must be 0.5, 1.5 or 2.5 (the Matern kernels with a closed form)");
  }
  model.alpha = args.Number("alpha", 1e-6, 0, 1, /*min_exclusive=*/true);
  cold_start_ = args.Int("cold_start_num", 10, 1);
  model.warm_up = args.Int("selection_num_warm_up", 100000, 1, kMaxWarmUp);
  model.starting_points =
      args.Int("selection_num_starting_points", 250, 0, kMaxStartingPoints);
  model_ = GpModel(model);
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
  model_.Reset();
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

bool GpTuner::GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) {
  const sdk::SearchSpace& space = Space();
  sdk::Assignment a;
  if (dims_ == 0 || points_.size() < static_cast<size_t>(cold_start_)) {
    a = space.Sample(rng_);
  } else {
    a = AssignmentOf(model_.Suggest(points_, targets_, running_, rng_));
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
