#include "tpe_tuner.h"

#include <algorithm>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.tpe";
constexpr int64_t kStateVersion = 1;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "tpe: saved state: " + what);
}

const char* LiarName(TpeTuner::Liar liar) {
  switch (liar) {
    case TpeTuner::Liar::kBest:
      return "best";
    case TpeTuner::Liar::kWorst:
      return "worst";
    case TpeTuner::Liar::kMean:
      return "mean";
    case TpeTuner::Liar::kNone:
      break;
  }
  return "none";
}

const msgpack::object& Require(const msgpack::object& o, const char* key) {
  const msgpack::object* v = sdk::FindKey(o, key);
  if (v == nullptr) BadState(std::string("no \"") + key + "\"");
  return *v;
}

}  // namespace

TpeTuner::TpeTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  sdk::ClassArgs args("tpe", class_args, {"optimize_mode", "seed", "tpe_args"});
  maximize_ = args.Maximize(false);
  seed_ = args.SeedOrRandom(host);
  rng_.seed(seed_);
  sdk::ClassArgs tpe = args.Sub("tpe_args", {"constant_liar_type", "n_startup_jobs",
                                             "n_ei_candidates", "linear_forgetting",
                                             "prior_weight", "gamma", "multivariate",
                                             "ordered_randint"});
  if (tpe.IsNull("constant_liar_type")) {
    liar_ = Liar::kNone;
  } else {
    const std::string liar =
        tpe.Choice("constant_liar_type", "best", {"best", "worst", "mean", "none"});
    liar_ = liar == "best" ? Liar::kBest
            : liar == "worst" ? Liar::kWorst
            : liar == "mean"  ? Liar::kMean
                              : Liar::kNone;
  }
  options_.n_startup_jobs = tpe.Int("n_startup_jobs", 20, 0, 1000000);
  options_.n_ei_candidates = tpe.Int("n_ei_candidates", 24, 1, 100000);
  options_.linear_forgetting = tpe.Int("linear_forgetting", 25, 1, 100000000);
  options_.prior_weight = tpe.Number("prior_weight", 1.0, 0.0, 1e9);
  options_.gamma = tpe.Number("gamma", 0.25, 0.0, 1.0, /*min_exclusive=*/true);
  options_.multivariate = tpe.Bool("multivariate", true);
  options_.ordered_randint = tpe.Bool("ordered_randint", options_.multivariate);
  host.Debug(std::string("tpe: ") + (maximize_ ? "maximize" : "minimize") + ", liar " +
             LiarName(liar_) + ", n_startup_jobs " + std::to_string(options_.n_startup_jobs) +
             (options_.multivariate ? ", multivariate" : ", univariate (NNI)"));
}

void TpeTuner::UpdateSearchSpace(const msgpack::object& space) {
  auto parsed = std::make_unique<sdk::SearchSpace>(sdk::SearchSpace::Parse(space));
  auto model = std::make_unique<tpe::Model>(parsed.get(), options_);
  // Carry the history over: results whose parameters fit the new space.
  size_t dropped = 0;
  std::vector<std::pair<sdk::Assignment, double>> kept;
  kept.reserve(results_.size());
  for (const auto& [params, loss] : results_) {
    try {
      kept.emplace_back(parsed->FromParameters(params.get()), loss);
    } catch (const sdk::Error&) {
      ++dropped;
    }
  }
  model->AddMany(kept);
  if (dropped > 0) {
    host().Info("tpe: " + std::to_string(dropped) +
                " earlier results do not fit the new search space and are not used");
  }
  space_ = std::move(parsed);
  model_ = std::move(model);
  running_.clear();
  exhausted_ = false;
}

double TpeTuner::Lie() const {
  // Before any real result every history entry is the same lie, so its
  // value does not matter; 0 as NNI.
  switch (liar_) {
    case Liar::kBest:
      return best_loss_.value_or(0.0);
    case Liar::kWorst:
      return worst_loss_.value_or(0.0);
    case Liar::kMean:
      return loss_count_ == 0 ? 0.0 : loss_sum_ / static_cast<double>(loss_count_);
    case Liar::kNone:
      break;
  }
  return 0.0;
}

bool TpeTuner::GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "tpe: no search space yet");
  if (exhausted_) return false;
  std::vector<sdk::Assignment> pending;
  if (liar_ != Liar::kNone) {
    pending.reserve(running_.size());
    for (const auto& [id, x] : running_) pending.push_back(x);
  }
  const double lie = Lie();
  std::optional<sdk::Assignment> chosen;
  for (int i = 0; i < kMaxRedraws && !chosen; ++i) {
    sdk::Assignment x = model_->Suggest(rng_, pending, lie);
    if (seen_.Insert(*space_, x)) chosen = std::move(x);
  }
  // The model keeps proposing tried configurations: a small finite space is
  // nearly exhausted. Random draws, then a walk of the space.
  for (int i = 0; i < 100 && !chosen; ++i) {
    sdk::Assignment x = space_->Sample(rng_);
    if (seen_.Insert(*space_, x)) chosen = std::move(x);
  }
  if (!chosen) {
    bool exhausted = false;
    chosen = seen_.FindUnseen(*space_, rng_, &exhausted);
    if (!chosen) {
      if (exhausted) {
        exhausted_ = true;
        host().Info("tpe: all " + std::to_string(*space_->CountConfigurations()) +
                    " configurations of the search space have been tried");
      } else {
        host().Warn("tpe: could not find a configuration not tried yet; no trial this time");
      }
      return false;
    }
    seen_.Insert(*space_, *chosen);
  }
  space_->Pack(*chosen, out);
  running_[parameter_id] = std::move(*chosen);
  return true;
}

void TpeTuner::AddResult(const msgpack::object& parameters, const sdk::Assignment* x,
                         double scalar) {
  const double loss = maximize_ ? -scalar : scalar;
  if (!std::isfinite(loss)) {
    host().Warn("tpe: ignoring a non-finite result");
    return;
  }
  best_loss_ = best_loss_ ? std::min(*best_loss_, loss) : loss;
  worst_loss_ = worst_loss_ ? std::max(*worst_loss_, loss) : loss;
  loss_sum_ += loss;
  ++loss_count_;
  results_.emplace_back(sdk::OwnedObject(parameters), loss);
  if (!space_) return;
  if (x != nullptr) {
    model_->Add(*x, loss);
    return;
  }
  try {
    model_->Add(space_->FromParameters(parameters), loss);
  } catch (const sdk::Error& e) {
    host().Warn(std::string("tpe: a result's parameters do not fit the search space: ") +
                e.what());
  }
}

void TpeTuner::ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                                  const msgpack::object& /*value*/, double scalar,
                                  bool customized) {
  auto it = running_.find(parameter_id);
  if (it != running_.end() && !customized) {
    // The configuration as drawn (before q-rounding), as NNI keeps it.
    AddResult(parameters, &it->second, scalar);
    running_.erase(it);
    return;
  }
  if (space_) seen_.InsertParameters(parameters);
  AddResult(parameters, nullptr, scalar);
}

void TpeTuner::TrialEnd(int64_t parameter_id, bool /*success*/) { running_.erase(parameter_id); }

void TpeTuner::ImportData(const msgpack::object& records) {
  size_t used = 0;
  const size_t skipped = sdk::ForEachImported(
      records, "tpe", [&](const msgpack::object& params, const msgpack::object&, double scalar) {
        seen_.InsertParameters(params);
        AddResult(params, nullptr, scalar);
        ++used;
      });
  host().Info("tpe: imported " + std::to_string(used) + " results");
  if (skipped > 0) {
    host().Warn("tpe: skipped " + std::to_string(skipped) +
                " imported records without a \"parameters\" map and a numeric \"value\"");
  }
}

std::string TpeTuner::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 9, kStateFormat, kStateVersion);
  pk.pack(std::string("seed"));
  pk.pack(seed_);
  pk.pack(std::string("rng"));
  pk.pack(sdk::RngToString(rng_));
  pk.pack(std::string("observations"));
  if (model_) {
    model_->Pack(pk);
  } else {
    pk.pack_array(0);
  }
  pk.pack(std::string("running"));
  pk.pack_array(static_cast<uint32_t>(running_.size()));
  for (const auto& [id, x] : running_) {
    pk.pack_array(2);
    pk.pack(id);
    sdk::PackAssignment(pk, x);
  }
  pk.pack(std::string("results"));
  pk.pack_array(static_cast<uint32_t>(results_.size()));
  for (const auto& [params, loss] : results_) {
    pk.pack_array(2);
    sdk::PackObject(pk, params.get());
    sdk::PackFloat64(pk, loss);
  }
  pk.pack(std::string("seen"));
  seen_.Pack(pk);
  pk.pack(std::string("exhausted"));
  pk.pack(exhausted_);
  return std::string(buffer.data(), buffer.size());
}

void TpeTuner::LoadState(std::string_view state) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "tpe: load_state needs the search space first");
  msgpack::object_handle h = sdk::OpenState(state, "tpe", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  const msgpack::object& seed = Require(o, "seed");
  const msgpack::object& rng_text = Require(o, "rng");
  const msgpack::object& running = Require(o, "running");
  const msgpack::object& results = Require(o, "results");
  const msgpack::object& exhausted = Require(o, "exhausted");
  if (seed.type != msgpack::type::POSITIVE_INTEGER) BadState("bad seed");
  std::mt19937_64 rng;
  if (!sdk::IsString(rng_text) || !sdk::RngFromString(sdk::StringView(rng_text), &rng)) {
    BadState("bad rng");
  }
  auto model = std::make_unique<tpe::Model>(space_.get(), options_);
  model->Unpack(Require(o, "observations"));
  sdk::SeenConfigurations seen;
  if (!seen.Unpack(Require(o, "seen"))) BadState("bad seen list");
  if (running.type != msgpack::type::ARRAY || results.type != msgpack::type::ARRAY ||
      exhausted.type != msgpack::type::BOOLEAN) {
    BadState("bad running, results or exhausted");
  }
  std::map<int64_t, sdk::Assignment> run;
  for (uint32_t i = 0; i < running.via.array.size; ++i) {
    const msgpack::object& r = running.via.array.ptr[i];
    std::optional<sdk::Assignment> x;
    if (r.type == msgpack::type::ARRAY && r.via.array.size == 2 &&
        sdk::IsInteger(r.via.array.ptr[0])) {
      x = sdk::UnpackAssignment(r.via.array.ptr[1], *space_);
    }
    if (!x) BadState("bad running entry");
    run[sdk::AsInt64(r.via.array.ptr[0], "tpe: saved state: running id")] = std::move(*x);
  }
  // Results rebuild the liar's statistics and the carried-over history.
  std::vector<std::pair<sdk::OwnedObject, double>> res;
  std::optional<double> best, worst;
  double sum = 0;
  int64_t count = 0;
  for (uint32_t i = 0; i < results.via.array.size; ++i) {
    const msgpack::object& r = results.via.array.ptr[i];
    if (r.type != msgpack::type::ARRAY || r.via.array.size != 2 ||
        !sdk::IsNumber(r.via.array.ptr[1])) {
      BadState("bad result entry");
    }
    const double loss = sdk::AsDouble(r.via.array.ptr[1], "loss");
    res.emplace_back(sdk::OwnedObject(r.via.array.ptr[0]), loss);
    best = best ? std::min(*best, loss) : loss;
    worst = worst ? std::max(*worst, loss) : loss;
    sum += loss;
    ++count;
  }
  seed_ = seed.via.u64;
  rng_ = rng;
  model_ = std::move(model);
  running_ = std::move(run);
  results_ = std::move(res);
  seen_ = std::move(seen);
  best_loss_ = best;
  worst_loss_ = worst;
  loss_sum_ = sum;
  loss_count_ = count;
  exhausted_ = exhausted.via.boolean;
}

}  // namespace tunehost::plugins
