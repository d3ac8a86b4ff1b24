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

// A multi-objective result entry of a saved state: [params, values, violation].
sdk::Candidate UnpackScore(const msgpack::object& r, size_t objectives) {
  if (r.type != msgpack::type::ARRAY || r.via.array.size != 3 ||
      r.via.array.ptr[1].type != msgpack::type::ARRAY ||
      r.via.array.ptr[1].via.array.size != objectives || !sdk::IsNumber(r.via.array.ptr[2])) {
    BadState("bad multi-objective result entry");
  }
  sdk::Candidate c;
  for (uint32_t k = 0; k < objectives; ++k) {
    const msgpack::object& v = r.via.array.ptr[1].via.array.ptr[k];
    if (!sdk::IsNumber(v)) BadState("bad multi-objective result entry");
    c.values.push_back(sdk::AsDouble(v, "value"));
  }
  c.violation = sdk::AsDouble(r.via.array.ptr[2], "violation");
  return c;
}

// Multi-objective observations of a saved state: [[configuration, result index], ...].
std::vector<std::pair<sdk::Assignment, size_t>> UnpackObserved(const msgpack::object& o,
                                                               const sdk::SearchSpace& space) {
  if (o.type != msgpack::type::ARRAY) BadState("bad observations");
  std::vector<std::pair<sdk::Assignment, size_t>> out;
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    const msgpack::object& e = o.via.array.ptr[i];
    std::optional<sdk::Assignment> x;
    if (e.type == msgpack::type::ARRAY && e.via.array.size == 2 &&
        e.via.array.ptr[1].type == msgpack::type::POSITIVE_INTEGER) {
      x = sdk::UnpackAssignment(e.via.array.ptr[0], space);
    }
    if (!x) BadState("bad observation");
    out.emplace_back(std::move(*x), static_cast<size_t>(e.via.array.ptr[1].via.u64));
  }
  return out;
}

}  // namespace

TpeTuner::TpeTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  sdk::ClassArgs args("tpe", class_args,
                      {"optimize_mode", "seed", "tpe_args", "objectives", "constraints"});
  if (args.Has("objectives") || args.Has("constraints")) {
    multi_ = sdk::ObjectiveSet::Parse(args, /*default_maximize=*/false);
  } else {
    maximize_ = args.Maximize(false);
  }
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
  const std::string goal =
      multi_ ? std::to_string(multi_->objectives().size()) + " objective(s), " +
                   std::to_string(multi_->constraints().size()) + " constraint(s)"
      : maximize_ ? "maximize"
                  : "minimize";
  host.Debug("tpe: " + goal + ", liar " +
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
  observed_.clear();
  for (size_t i = 0; i < results_.size(); ++i) {
    try {
      sdk::Assignment x = parsed->FromParameters(results_[i].first.get());
      if (multi_) {
        observed_.emplace_back(std::move(x), i);
      } else {
        kept.emplace_back(std::move(x), results_[i].second);
      }
    } catch (const sdk::Error&) {
      ++dropped;
    }
  }
  model->AddMany(kept);
  reorder_ = multi_.has_value();
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
  if (multi_) Reorder();
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

void TpeTuner::Reorder() {
  if (!space_) return;
  // The good group's size the model will use (lies count): a new result or
  // another number of running trials moves the boundary.
  const size_t lies = liar_ == Liar::kNone ? 0 : running_.size();
  const size_t n_below = model_->NBelow(observed_.size() + lies);
  if (!reorder_ && n_below == ordered_below_) return;
  reorder_ = false;
  ordered_below_ = n_below;
  std::vector<sdk::Candidate> scores;
  scores.reserve(observed_.size());
  for (const auto& [x, k] : observed_) scores.push_back(scores_[k]);
  auto model = std::make_unique<tpe::Model>(space_.get(), options_);
  const std::vector<size_t> order = sdk::SplitOrder(scores, n_below);
  std::vector<std::pair<sdk::Assignment, double>> ranked;
  ranked.reserve(order.size());
  for (size_t r = 0; r < order.size(); ++r) {
    ranked.emplace_back(observed_[order[r]].first, static_cast<double>(r));
  }
  model->AddMany(ranked);
  model_ = std::move(model);
  // The liar's statistics over the places 0 .. n-1.
  const size_t n = order.size();
  best_loss_ = n == 0 ? std::nullopt : std::optional<double>(0.0);
  worst_loss_ = n == 0 ? std::nullopt : std::optional<double>(static_cast<double>(n - 1));
  loss_sum_ = static_cast<double>(n) * (static_cast<double>(n) - 1) / 2;
  loss_count_ = static_cast<int64_t>(n);
}

void TpeTuner::Observe(const msgpack::object& parameters, const sdk::Assignment* x,
                       size_t score) {
  if (!space_) return;
  try {
    observed_.emplace_back(x != nullptr ? *x : space_->FromParameters(parameters), score);
    reorder_ = true;
  } catch (const sdk::Error& e) {
    host().Warn(std::string("tpe: a result's parameters do not fit the search space: ") +
                e.what());
  }
}

void TpeTuner::AddResult(const msgpack::object& parameters, const sdk::Assignment* x,
                         const msgpack::object& value, double scalar) {
  if (multi_) {
    std::optional<sdk::Candidate> score = multi_->Score(value, scalar, host());
    if (!score) return;
    results_.emplace_back(sdk::OwnedObject(parameters), 0.0);
    scores_.push_back(std::move(*score));
    Observe(parameters, x, scores_.size() - 1);
    return;
  }
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
                                  const msgpack::object& value, double scalar,
                                  bool customized) {
  auto it = running_.find(parameter_id);
  if (it != running_.end() && !customized) {
    // The configuration as drawn (before q-rounding), as NNI keeps it.
    AddResult(parameters, &it->second, value, scalar);
    running_.erase(it);
    return;
  }
  if (space_) seen_.InsertParameters(parameters);
  AddResult(parameters, nullptr, value, scalar);
}

void TpeTuner::TrialEnd(int64_t parameter_id, bool /*success*/) { running_.erase(parameter_id); }

void TpeTuner::ImportData(const msgpack::object& records) {
  size_t used = 0;
  const size_t skipped = sdk::ForEachImported(
      records, "tpe",
      [&](const msgpack::object& params, const msgpack::object& value, double scalar) {
        seen_.InsertParameters(params);
        AddResult(params, nullptr, value, scalar);
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
  sdk::PackStateHeader(pk, 10, kStateFormat, kStateVersion);
  pk.pack(std::string("objectives"));  // multi-objective: what the scores mean
  if (multi_) {
    multi_->PackSignature(pk);
  } else {
    pk.pack_nil();
  }
  sdk::PackSavedRandom(pk, seed_, rng_);
  pk.pack(std::string("observations"));
  if (multi_) {  // [[configuration, index into results], ...]
    pk.pack_array(static_cast<uint32_t>(observed_.size()));
    for (const auto& [x, k] : observed_) {
      pk.pack_array(2);
      sdk::PackAssignment(pk, x);
      pk.pack(static_cast<uint64_t>(k));
    }
  } else if (model_) {
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
  for (size_t i = 0; i < results_.size(); ++i) {  // [params, loss] or [params, values, violation]
    pk.pack_array(multi_ ? 3 : 2);
    sdk::PackObject(pk, results_[i].first.get());
    if (!multi_) {
      sdk::PackFloat64(pk, results_[i].second);
      continue;
    }
    pk.pack_array(static_cast<uint32_t>(scores_[i].values.size()));
    for (double v : scores_[i].values) sdk::PackFloat64(pk, v);
    sdk::PackFloat64(pk, scores_[i].violation);
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
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, "tpe");
  const msgpack::object& running = Require(o, "running");
  const msgpack::object& results = Require(o, "results");
  const msgpack::object& exhausted = Require(o, "exhausted");
  const msgpack::object* objectives = sdk::FindKey(o, "objectives");
  if (multi_ ? !multi_->SameSignature(objectives)
             : objectives != nullptr && objectives->type != msgpack::type::NIL) {
    BadState("saved with other objectives or constraints than this tuner's class_args");
  }
  auto model = std::make_unique<tpe::Model>(space_.get(), options_);
  std::vector<std::pair<sdk::Assignment, size_t>> observed;
  if (multi_) {
    observed = UnpackObserved(Require(o, "observations"), *space_);
  } else {
    model->Unpack(Require(o, "observations"));
  }
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
  std::vector<sdk::Candidate> scores;
  std::optional<double> best, worst;
  double sum = 0;
  int64_t count = 0;
  for (const auto& [x, k] : observed) {
    if (k >= results.via.array.size) BadState("an observation names no result");
  }
  for (uint32_t i = 0; i < results.via.array.size; ++i) {
    const msgpack::object& r = results.via.array.ptr[i];
    if (multi_) {
      scores.push_back(UnpackScore(r, multi_->objectives().size()));
      res.emplace_back(sdk::OwnedObject(r.via.array.ptr[0]), 0.0);
      continue;
    }
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
  seed_ = random.seed;
  rng_ = random.rng;
  model_ = std::move(model);
  running_ = std::move(run);
  results_ = std::move(res);
  scores_ = std::move(scores);
  observed_ = std::move(observed);
  reorder_ = multi_.has_value();
  seen_ = std::move(seen);
  best_loss_ = best;
  worst_loss_ = worst;
  loss_sum_ = sum;
  loss_count_ = count;
  exhausted_ = exhausted.via.boolean;
}

}  // namespace tunehost::plugins
