#include "bohb_tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins::hyperband {

BohbTuner::Args BohbTuner::ReadArgs(sdk::HostRef host, const msgpack::object& class_args) {
  sdk::ClassArgs args("bohb", class_args,
                      {"optimize_mode", "min_budget", "max_budget", "eta", "min_points_in_model",
                       "top_n_percent", "num_samples", "random_fraction", "bandwidth_factor",
                       "min_bandwidth", "seed"});
  Args a;
  a.maximize = args.Maximize(true);
  a.min_budget = args.Int("min_budget", 1, 1, kMaxBudget);
  a.max_budget = args.Int("max_budget", 3, 1, kMaxBudget);
  if (a.max_budget < a.min_budget) {
    throw args.Bad("max_budget", "must be >= min_budget (" + std::to_string(a.min_budget) +
                                     "), got " + std::to_string(a.max_budget));
  }
  a.eta = args.Int("eta", 3, 2, kMaxBudget);
  if (args.Has("min_points_in_model")) a.min_points_in_model = args.Int("min_points_in_model", 0);
  a.top_n_percent = args.Int("top_n_percent", 15, 1, 99);
  a.num_samples = args.Int("num_samples", 64, 1, 100000);
  a.random_fraction = args.Number("random_fraction", 1.0 / 3.0, 0.0, 1.0);
  // Checked as NNI checks them, then unused (see the header).
  args.Number("bandwidth_factor", 3.0, 0.0);
  args.Number("min_bandwidth", 1e-3, 0.0);
  if (args.Has("bandwidth_factor") || args.Has("min_bandwidth")) {
    host.Info("bohb: bandwidth_factor and min_bandwidth are not used: the TPE model's Parzen "
              "bandwidths are used instead of NNI's KDE bandwidths");
  }
  a.seed = args.SeedOrRandom(host);
  return a;
}

BohbTuner::BohbTuner(sdk::HostRef host, const msgpack::object& class_args)
    : BohbTuner(host, ReadArgs(host, class_args)) {}

BohbTuner::BohbTuner(sdk::HostRef host, const Args& args)
    : BracketTuner(host, "bohb", "org.tunehost.bohb", args.maximize,
                   Geometry(args.max_budget, args.eta,
                            Geometry::SMax(args.min_budget, args.max_budget, args.eta)),
                   /*serial=*/true, args.seed),
      args_(args) {}

void BohbTuner::OnSpaceChanged() {
  const int64_t dim = static_cast<int64_t>(space()->params().size());
  min_points_ = dim + 1;
  if (args_.min_points_in_model) {
    if (*args_.min_points_in_model < dim + 1) {
      // NNI raises it to the bare minimum with a warning too.
      host().Warn("bohb: min_points_in_model " + std::to_string(*args_.min_points_in_model) +
                  " is below the number of parameters + 1; using " + std::to_string(dim + 1));
    } else {
      min_points_ = *args_.min_points_in_model;
    }
  }
  RebuildModels();
}

bool BohbTuner::AddToModel(const Observation& o) {
  if (space() == nullptr) return false;
  sdk::Assignment x;
  try {
    msgpack::object_handle h = msgpack::unpack(o.params.data(), o.params.size());
    x = space()->FromParameters(h.get());  // ignores the TRIAL_BUDGET key
  } catch (const std::exception&) {
    return false;  // not MessagePack (a damaged state) or not of this space
  }
  tpe::Options options;
  options.gamma = static_cast<double>(args_.top_n_percent) / 100.0;
  options.n_ei_candidates = args_.num_samples;
  options.n_startup_jobs = min_points_;
  options.multivariate = true;
  auto it = models_.try_emplace(o.budget, space(), options).first;
  it->second.Add(x, args_.maximize ? -o.scalar : o.scalar);
  return true;
}

void BohbTuner::RebuildModels() {
  models_.clear();
  size_t unfit = 0;
  for (const Observation& o : observations_) unfit += AddToModel(o) ? 0 : 1;
  if (unfit > 0) {
    host().Warn("bohb: " + std::to_string(unfit) +
                " earlier results do not fit the search space and are left out of the models");
  }
}

const tpe::Model* BohbTuner::ModelToSample() const {
  // The largest budget that has enough results.
  for (auto it = models_.rbegin(); it != models_.rend(); ++it) {
    if (static_cast<int64_t>(it->second.size()) >= min_points_) return &it->second;
  }
  return nullptr;
}

std::optional<double> BohbTuner::model_budget() const {
  for (auto it = models_.rbegin(); it != models_.rend(); ++it) {
    if (static_cast<int64_t>(it->second.size()) >= min_points_) return it->first;
  }
  return std::nullopt;
}

std::string BohbTuner::NewConfiguration(int64_t /*budget*/) {
  const tpe::Model* model = ModelToSample();
  sdk::Assignment x;
  // NNI's get_config: random without a model, else random with probability
  // random_fraction (no draw for the coin when there is no model).
  if (model == nullptr || sdk::Uniform01(rng()) < args_.random_fraction) {
    x = space()->Sample(rng());
    ++random_picks_;
  } else {
    x = model->Suggest(rng(), {}, 0.0);
    ++model_picks_;
  }
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  space()->Pack(x, pk);
  return std::string(buffer.data(), buffer.size());
}

void BohbTuner::OnResult(const std::string& params, int64_t budget, double scalar) {
  observations_.push_back(Observation{static_cast<double>(budget), params, scalar});
  AddToModel(observations_.back());
}

bool BohbTuner::Import(const msgpack::object& parameters, double scalar) {
  if (parameters.type != msgpack::type::MAP || !std::isfinite(scalar)) return false;
  Observation o;
  o.budget = static_cast<double>(args_.max_budget);
  if (const msgpack::object* b = sdk::FindKey(parameters, kBudgetKey)) {
    if (!sdk::IsNumber(*b)) return false;
    o.budget = sdk::AsDouble(*b, kBudgetKey);
    if (!std::isfinite(o.budget) || o.budget <= 0) return false;
  }
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackObject(pk, parameters);
  o.params.assign(buffer.data(), buffer.size());
  o.scalar = scalar;
  if (space() != nullptr) {
    if (!AddToModel(o)) return false;
  }
  observations_.push_back(std::move(o));
  return true;
}

void BohbTuner::OnForeignResult(const msgpack::object& parameters, double scalar) {
  if (!Import(parameters, scalar)) {
    host().Debug("bohb: a result of unknown parameters that do not fit the search space, ignored");
  }
}

void BohbTuner::ImportData(const msgpack::object& records) {
  size_t imported = 0;
  size_t unfit = 0;
  size_t skipped = sdk::ForEachImported(
      records, "bohb", [&](const msgpack::object& params, const msgpack::object&, double scalar) {
        (Import(params, scalar) ? imported : unfit) += 1;
      });
  host().Info("bohb: imported " + std::to_string(imported) + " results");
  if (skipped + unfit > 0) {
    host().Warn("bohb: skipped " + std::to_string(skipped + unfit) +
                " imported records (no \"parameters\" map and numeric \"value\", a bad " +
                kBudgetKey + ", or parameters that do not fit the search space)");
  }
}

// State entries: observations [[budget, params bin, scalar]...],
// random_picks, model_picks. The models are rebuilt from the observations.

void BohbTuner::PackExtra(msgpack::packer<msgpack::sbuffer>& pk) const {
  pk.pack(std::string("observations"));
  pk.pack_array(static_cast<uint32_t>(observations_.size()));
  for (const Observation& o : observations_) {
    pk.pack_array(3);
    sdk::PackFloat64(pk, o.budget);
    pk.pack_bin(static_cast<uint32_t>(o.params.size()));
    pk.pack_bin_body(o.params.data(), static_cast<uint32_t>(o.params.size()));
    sdk::PackFloat64(pk, o.scalar);
  }
  pk.pack(std::string("random_picks"));
  pk.pack(random_picks_);
  pk.pack(std::string("model_picks"));
  pk.pack(model_picks_);
}

void BohbTuner::UnpackExtra(const msgpack::object& state) {
  const msgpack::object* obs = sdk::FindKey(state, "observations");
  const msgpack::object* rp = sdk::FindKey(state, "random_picks");
  const msgpack::object* mp = sdk::FindKey(state, "model_picks");
  if (obs == nullptr || obs->type != msgpack::type::ARRAY) BadState("no observations array");
  if (rp == nullptr || rp->type != msgpack::type::POSITIVE_INTEGER || mp == nullptr ||
      mp->type != msgpack::type::POSITIVE_INTEGER) {
    BadState("no random_picks/model_picks counts");
  }
  std::vector<Observation> observations;
  for (uint32_t i = 0; i < obs->via.array.size; ++i) {
    const msgpack::object& e = obs->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 3 ||
        !sdk::IsNumber(e.via.array.ptr[0]) || e.via.array.ptr[1].type != msgpack::type::BIN ||
        !sdk::IsNumber(e.via.array.ptr[2])) {
      BadState("observation " + std::to_string(i) + " is not [budget, parameters, value]");
    }
    Observation o;
    o.budget = sdk::AsDouble(e.via.array.ptr[0], "budget");
    o.params.assign(e.via.array.ptr[1].via.bin.ptr, e.via.array.ptr[1].via.bin.size);
    o.scalar = sdk::AsDouble(e.via.array.ptr[2], "value");
    observations.push_back(std::move(o));
  }
  observations_ = std::move(observations);
  random_picks_ = static_cast<int64_t>(rp->via.u64);
  model_picks_ = static_cast<int64_t>(mp->via.u64);
  if (space() != nullptr) RebuildModels();
}

}  // namespace tunehost::plugins::hyperband
