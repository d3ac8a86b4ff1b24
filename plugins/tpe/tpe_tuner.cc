#include "tpe_tuner.h"

#include <cmath>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"
#include "tunehost/sdk/cpp/pareto.h"

namespace tunehost::plugins {

TpeTuner::TpeTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  sdk::ClassArgs args("tpe", class_args,
                      {"optimize_mode", "seed", "tpe_args", "objectives", "constraints"});
  if (args.Has("objectives") || args.Has("constraints")) {
    multi_ = sdk::ObjectiveSet::Parse(args, /*default_maximize=*/false);
  } else {
    maximize_ = args.Maximize(false);
  }
  state_.seed = args.SeedOrRandom(host);
  state_.rng.seed(state_.seed);
  sdk::ClassArgs tpe = args.Sub("tpe_args", {"constant_liar_type", "n_startup_jobs",
                                             "n_ei_candidates", "linear_forgetting",
                                             "prior_weight", "gamma", "multivariate",
                                             "ordered_randint", "group"});
  if (tpe.IsNull("constant_liar_type")) {
    liar_ = tpe::ConstantLiar(Liar::kNone);
  } else {
    const std::string liar =
        tpe.Choice("constant_liar_type", "best", {"best", "worst", "mean", "none"});
    liar_ = tpe::ConstantLiar(liar == "best"    ? Liar::kBest
                              : liar == "worst" ? Liar::kWorst
                              : liar == "mean"  ? Liar::kMean
                                                : Liar::kNone);
  }
  options_.n_startup_jobs = tpe.Int("n_startup_jobs", 20, 0, 1000000);
  options_.n_ei_candidates = tpe.Int("n_ei_candidates", 24, 1, 100000);
  options_.linear_forgetting = tpe.Int("linear_forgetting", 25, 1, 100000000);
  options_.prior_weight = tpe.Number("prior_weight", 1.0, 0.0, 1e9);
  options_.gamma = tpe.Number("gamma", 0.25, 0.0, 1.0, /*min_exclusive=*/true);
  options_.multivariate = tpe.Bool("multivariate", true);
  options_.ordered_randint = tpe.Bool("ordered_randint", options_.multivariate);
  options_.group = tpe.Bool("group", options_.multivariate);
  if (options_.group && !options_.multivariate) {
    throw tpe.Bad("group", "needs the joint model (multivariate: true); NNI's model has no groups");
  }
  const std::string goal =
      multi_ ? std::to_string(multi_->objectives().size()) + " objective(s), " +
                   std::to_string(multi_->constraints().size()) + " constraint(s)"
      : maximize_ ? "maximize"
                  : "minimize";
  host.Debug("tpe: " + goal + ", liar " +
             liar_.name() + ", n_startup_jobs " + std::to_string(options_.n_startup_jobs) +
             (options_.multivariate ? ", multivariate" : ", univariate (NNI)"));
}

void TpeTuner::UpdateSearchSpace(const msgpack::object& space) {
  auto parsed = std::make_unique<sdk::SearchSpace>(sdk::SearchSpace::Parse(space));
  auto model = std::make_unique<tpe::Model>(parsed.get(), options_);
  // Carry the history over: results whose parameters fit the new space.
  size_t dropped = 0;
  std::vector<std::pair<sdk::Assignment, double>> kept;
  kept.reserve(state_.results.size());
  state_.observed.clear();
  for (size_t i = 0; i < state_.results.size(); ++i) {
    try {
      sdk::Assignment x = parsed->FromParameters(state_.results[i].first.get());
      if (multi_) {
        state_.observed.emplace_back(std::move(x), i);
      } else {
        kept.emplace_back(std::move(x), state_.results[i].second);
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
  state_.model = std::move(model);
  state_.running.clear();
  state_.exhausted = false;
}

bool TpeTuner::GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "tpe: no search space yet");
  if (state_.exhausted) return false;
  if (multi_) Reorder();
  std::vector<sdk::Assignment> pending;
  if (liar_.enabled()) {
    pending.reserve(state_.running.size());
    for (const auto& [id, x] : state_.running) pending.push_back(x);
  }
  const double lie = liar_.Value();
  std::optional<sdk::Assignment> chosen;
  for (int i = 0; i < kMaxRedraws && !chosen; ++i) {
    sdk::Assignment x = state_.model->Suggest(state_.rng, pending, lie);
    if (state_.seen.Insert(*space_, x)) chosen = std::move(x);
  }
  // The model keeps proposing tried configurations: a small finite space is
  // nearly exhausted. Random draws, then a walk of the space.
  for (int i = 0; i < 100 && !chosen; ++i) {
    sdk::Assignment x = space_->Sample(state_.rng);
    if (state_.seen.Insert(*space_, x)) chosen = std::move(x);
  }
  if (!chosen) {
    bool exhausted = false;
    chosen = state_.seen.FindUnseen(*space_, state_.rng, &exhausted);
    if (!chosen) {
      if (exhausted) {
        state_.exhausted = true;
        host().Info("tpe: all " + std::to_string(*space_->CountConfigurations()) +
                    " configurations of the search space have been tried");
      } else {
        host().Warn("tpe: could not find a configuration not tried yet; no trial this time");
      }
      return false;
    }
    state_.seen.Insert(*space_, *chosen);
  }
  space_->Pack(*chosen, out);
  state_.running[parameter_id] = std::move(*chosen);
  return true;
}

void TpeTuner::Reorder() {
  if (!space_) return;
  // The good group's size the model will use (lies count): a new result or
  // another number of running trials moves the boundary.
  const size_t lies = liar_.enabled() ? state_.running.size() : 0;
  const size_t n_below = state_.model->NBelow(state_.observed.size() + lies);
  if (!reorder_ && n_below == ordered_below_) return;
  reorder_ = false;
  ordered_below_ = n_below;
  std::vector<sdk::Candidate> scores;
  scores.reserve(state_.observed.size());
  for (const auto& [x, k] : state_.observed) scores.push_back(state_.scores[k]);
  auto model = std::make_unique<tpe::Model>(space_.get(), options_);
  const std::vector<size_t> order = sdk::SplitOrder(scores, n_below);
  std::vector<std::pair<sdk::Assignment, double>> ranked;
  ranked.reserve(order.size());
  for (size_t r = 0; r < order.size(); ++r) {
    ranked.emplace_back(state_.observed[order[r]].first, static_cast<double>(r));
  }
  model->AddMany(ranked);
  state_.model = std::move(model);
  // The liar's statistics over the places 0 .. n-1.
  liar_.SetPlaces(order.size());
}

void TpeTuner::Observe(const msgpack::object& parameters, const sdk::Assignment* x,
                       size_t score) {
  if (!space_) return;
  try {
    state_.observed.emplace_back(x != nullptr ? *x : space_->FromParameters(parameters), score);
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
    state_.results.emplace_back(sdk::OwnedObject(parameters), 0.0);
    state_.scores.push_back(std::move(*score));
    Observe(parameters, x, state_.scores.size() - 1);
    return;
  }
  const double loss = maximize_ ? -scalar : scalar;
  if (!std::isfinite(loss)) {
    host().Warn("tpe: ignoring a non-finite result");
    return;
  }
  liar_.Record(loss);
  state_.results.emplace_back(sdk::OwnedObject(parameters), loss);
  if (!space_) return;
  if (x != nullptr) {
    state_.model->Add(*x, loss);
    return;
  }
  try {
    state_.model->Add(space_->FromParameters(parameters), loss);
  } catch (const sdk::Error& e) {
    host().Warn(std::string("tpe: a result's parameters do not fit the search space: ") +
                e.what());
  }
}

void TpeTuner::ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                                  const msgpack::object& value, double scalar,
                                  bool customized) {
  auto it = state_.running.find(parameter_id);
  if (it != state_.running.end() && !customized) {
    // The configuration as drawn (before q-rounding), as NNI keeps it.
    AddResult(parameters, &it->second, value, scalar);
    state_.running.erase(it);
    return;
  }
  if (space_) state_.seen.InsertParameters(parameters);
  AddResult(parameters, nullptr, value, scalar);
}

void TpeTuner::TrialEnd(int64_t parameter_id, bool /*success*/) { state_.running.erase(parameter_id); }

void TpeTuner::ImportData(const msgpack::object& records) {
  size_t used = 0;
  const size_t skipped = sdk::ForEachImported(
      records, "tpe",
      [&](const msgpack::object& params, const msgpack::object& value, double scalar) {
        state_.seen.InsertParameters(params);
        AddResult(params, nullptr, value, scalar);
        ++used;
      });
  host().Info("tpe: imported " + std::to_string(used) + " results");
  if (skipped > 0) {
    host().Warn("tpe: skipped " + std::to_string(skipped) +
                " imported records without a \"parameters\" map and a numeric \"value\"");
  }
}

tpe::StateCodec TpeTuner::Codec() const {
  return tpe::StateCodec(space_.get(), options_, objective_set());
}

std::string TpeTuner::SaveState() { return Codec().Save(state_); }

void TpeTuner::LoadState(std::string_view state) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "tpe: load_state needs the search space first");
  Codec().Load(state, state_);
  reorder_ = multi_.has_value();
  // The liar's statistics from the results (multi-objective: Reorder sets them).
  liar_.Reset();
  if (!multi_) {
    for (const auto& [parameters, loss] : state_.results) liar_.Record(loss);
  }
}

}  // namespace tunehost::plugins
