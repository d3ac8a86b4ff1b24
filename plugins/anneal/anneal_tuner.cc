#include "anneal_tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.anneal";
constexpr int64_t kStateVersion = 1;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "anneal: saved state: " + what);
}

// The state's number as a double (losses may be infinite).
double StateNumber(const msgpack::object* o, const char* what) {
  if (o == nullptr || !sdk::IsNumber(*o)) BadState(std::string("no ") + what);
  return sdk::AsDouble(*o, what);
}

// Geometric(p) - 1 with p = 1 / avg_best_idx (numpy's geometric counts
// trials up to the first success), clipped to `last`.
size_t GeometricRank(std::mt19937_64& rng, size_t last) {
  const double u = 1.0 - sdk::Uniform01(rng);  // (0, 1]
  const double k = std::floor(std::log(u) / std::log(1.0 - 1.0 / AnnealTuner::kAvgBestIdx));
  if (!(k < static_cast<double>(last))) return last;
  return static_cast<size_t>(k);
}

// The observed form of a configuration (AnnealTuner::Observation): what
// hyperopt records of the value a trial received.
sdk::Assignment ObserveIn(const sdk::SearchSpace& space, const sdk::Assignment& a) {
  const std::vector<sdk::Parameter>& params = space.params();
  sdk::Assignment out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i]) continue;
    const sdk::Parameter& p = params[i];
    if (p.categorical) {
      out[i] = a[i];
      continue;
    }
    double v = sdk::UserValue(p, *a[i]);
    if (p.log) {
      // hyperopt's qlognormal takes log(1e-16 + v): a rounded value can be 0.
      v = p.type == sdk::ParamType::kQlognormal
              ? std::log(1e-16 + v)
              : std::log(std::max(v, std::numeric_limits<double>::min()));
    }
    out[i] = v;
  }
  return out;
}

}  // namespace

AnnealTuner::AnnealTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  sdk::ClassArgs args("anneal", class_args,
                      {"optimize_mode", "seed", "parallel_optimize", "constant_liar_type"});
  maximize_ = args.Maximize(false);
  parallel_ = args.Bool("parallel_optimize", false);
  const std::string liar = args.Choice("constant_liar_type", "min", {"min", "max", "mean"});
  liar_ = liar == "max" ? Liar::kMax : liar == "mean" ? Liar::kMean : Liar::kMin;
  seed_ = args.SeedOrRandom(host);
  rng_.seed(seed_);
}

const sdk::SearchSpace& AnnealTuner::Space() const {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "anneal: no search space yet");
  return *space_;
}

void AnnealTuner::UpdateSearchSpace(const msgpack::object& space) {
  sdk::SearchSpace next = sdk::SearchSpace::Parse(space);
  if (space_) {
    // Keep what still fits the new space: the map a trial received, read
    // with the new space.
    size_t dropped = 0;
    auto remap = [&](const sdk::Assignment& a) -> std::optional<sdk::Assignment> {
      std::optional<sdk::Assignment> b = next.Refit(*space_, a);
      if (!b) {
        ++dropped;
        return std::nullopt;
      }
      return ObserveIn(next, *b);
    };
    std::vector<Observation> kept;
    for (const Observation& o : observations_) {
      if (std::optional<sdk::Assignment> b = remap(o.values)) kept.push_back({*b, o.loss});
    }
    std::map<int64_t, sdk::Assignment> running;
    for (const auto& [id, a] : running_) {
      if (std::optional<sdk::Assignment> b = remap(a)) running.emplace(id, *b);
    }
    if (dropped > 0) {
      host().Warn("anneal: " + std::to_string(dropped) +
                  " past configurations do not fit the new search space and are forgotten");
    }
    observations_ = std::move(kept);
    running_ = std::move(running);
  }
  space_ = std::move(next);
  exhausted_ = false;
}

sdk::Assignment AnnealTuner::Observe(const sdk::Assignment& a) const {
  return ObserveIn(*space_, a);
}

double AnnealTuner::LossOf(double metric) const {
  // hyperopt gives results without a usable loss an infinite one.
  if (std::isnan(metric)) return std::numeric_limits<double>::infinity();
  return maximize_ ? -metric : metric;
}

void AnnealTuner::AddResult(sdk::Assignment values, double metric) {
  observations_.push_back({std::move(values), LossOf(metric)});
  if (std::isnan(metric)) return;
  metric_min_ = metric_count_ == 0 ? metric : std::min(metric_min_, metric);
  metric_max_ = metric_count_ == 0 ? metric : std::max(metric_max_, metric);
  metric_sum_ += metric;
  ++metric_count_;
}

bool AnnealTuner::LiarActive() const {
  return parallel_ && configurations_ > kLiarMinConfigurations && !running_.empty() &&
         metric_count_ > 0;
}

std::vector<AnnealTuner::Observation> AnnealTuner::ModelHistory() const {
  std::vector<Observation> history = observations_;
  if (!LiarActive()) return history;
  const double lie = liar_ == Liar::kMin   ? metric_min_
                     : liar_ == Liar::kMax ? metric_max_
                                           : metric_sum_ / static_cast<double>(metric_count_);
  for (const auto& [id, values] : running_) history.push_back({values, LossOf(lie)});
  return history;
}

size_t AnnealTuner::ChooseReference(size_t i, const std::vector<size_t>& having,
                                    const std::vector<Observation>& history,
                                    std::vector<size_t>& chosen) {
  // A reference already chosen for this configuration, so that parameters
  // tend to come from the same past trial.
  for (size_t c : chosen) {
    if (history[c].values[i]) return c;
  }
  std::vector<size_t> ranked = having;
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](size_t a, size_t b) { return history[a].loss < history[b].loss; });
  const size_t pick = ranked[GeometricRank(rng_, ranked.size() - 1)];
  chosen.push_back(pick);
  return pick;
}

double AnnealTuner::Perturb(const sdk::Parameter& p, double reference, double shrinking) {
  if (p.categorical) {
    // (1 - shrinking) * onehot(reference) + shrinking * uniform, one draw.
    const double keep = 1.0 - shrinking;
    const double u = sdk::Uniform01(rng_);
    if (u < keep) return reference;
    const double j = std::floor((u - keep) / shrinking * static_cast<double>(p.size));
    return std::min(j, static_cast<double>(p.size - 1));
  }
  if (p.normal) return reference + p.sigma * shrinking * sdk::StandardNormal(rng_);
  const double width = (p.high - p.low) * shrinking;
  const double half = 0.5 * width;
  const double mid = std::min(std::max(reference, p.low + half), p.high - half);
  return mid - half + width * sdk::Uniform01(rng_);
}

sdk::Assignment AnnealTuner::Suggest(const std::vector<Observation>& history) {
  const sdk::SearchSpace& space = *space_;
  const std::vector<sdk::Parameter>& params = space.params();
  sdk::Assignment a(params.size());
  std::vector<size_t> chosen;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!space.IsActive(i, a)) continue;
    std::vector<size_t> having;
    for (size_t h = 0; h < history.size(); ++h) {
      if (history[h].values[i]) having.push_back(h);
    }
    if (having.empty()) {
      a[i] = sdk::SampleParameter(params[i], rng_);
      continue;
    }
    const double shrinking = 1.0 / (1.0 + static_cast<double>(having.size()) * kShrinkCoef);
    const size_t ref = ChooseReference(i, having, history, chosen);
    a[i] = Perturb(params[i], *history[ref].values[i], shrinking);
  }
  return a;
}

std::optional<sdk::Assignment> AnnealTuner::Deduplicate(sdk::Assignment a) {
  const sdk::SearchSpace& space = *space_;
  if (seen_.Insert(space, a)) return a;
  for (int i = 0; i < kMaxRedraws; ++i) {
    sdk::Assignment b = space.Sample(rng_);
    if (seen_.Insert(space, b)) return b;
  }
  bool exhausted = false;
  if (std::optional<sdk::Assignment> b = seen_.FindUnseen(space, rng_, &exhausted)) {
    seen_.Insert(space, *b);
    return b;
  }
  if (exhausted) {
    exhausted_ = true;
    host().Info("anneal: all " + std::to_string(*space.CountConfigurations()) +
                " configurations of the search space have been tried");
  } else {
    host().Warn("anneal: " + std::to_string(kMaxRedraws) +
                " draws in a row were configurations already tried; no trial this time");
  }
  return std::nullopt;
}

bool AnnealTuner::GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) {
  Space();  // throws without a search space
  if (exhausted_) return false;
  std::optional<sdk::Assignment> a = Deduplicate(Suggest(ModelHistory()));
  if (!a) return false;
  space_->Pack(*a, out);
  running_[parameter_id] = Observe(*a);
  ++configurations_;
  return true;
}

void AnnealTuner::ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                                     const msgpack::object& /*value*/, double scalar,
                                     bool customized) {
  auto it = running_.find(parameter_id);
  if (it != running_.end()) {
    sdk::Assignment values = std::move(it->second);
    running_.erase(it);
    AddResult(std::move(values), scalar);
    return;
  }
  if (!customized) {
    host().Warn("anneal: result for parameter id " + std::to_string(parameter_id) +
                " that is not running here; ignored");
    return;
  }
  std::optional<sdk::Assignment> a = Space().TryFromParameters(parameters);
  if (!a) {
    host().Warn(
        "anneal: result of a customized trial whose parameters do not fit the search "
        "space; ignored");
    return;
  }
  AddResult(Observe(*a), scalar);
  seen_.InsertParameters(parameters);
}

void AnnealTuner::TrialEnd(int64_t parameter_id, bool /*success*/) {
  // After its result (if any): a trial without one must not be lied about forever.
  running_.erase(parameter_id);
}

void AnnealTuner::ImportData(const msgpack::object& records) {
  const sdk::SearchSpace& space = Space();
  size_t unfit = 0;
  size_t skipped = sdk::ForEachImported(
      records, "anneal", [&](const msgpack::object& params, const msgpack::object&, double scalar) {
        std::optional<sdk::Assignment> a = space.TryFromParameters(params);
        if (!a) {
          ++unfit;
          return;
        }
        AddResult(Observe(*a), scalar);
        seen_.InsertParameters(params);
        ++configurations_;
      });
  if (skipped + unfit > 0) {
    host().Warn("anneal: skipped " + std::to_string(skipped + unfit) +
                " imported records without a \"parameters\" map of this search space and a "
                "numeric \"value\"");
  }
}

std::string AnnealTuner::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 11, kStateFormat, kStateVersion);
  sdk::PackSavedRandom(pk, seed_, rng_);
  pk.pack(std::string("maximize"));  // losses are signed by it
  pk.pack(maximize_);
  pk.pack(std::string("seen"));
  seen_.Pack(pk);
  pk.pack(std::string("configurations"));
  pk.pack(configurations_);
  pk.pack(std::string("metrics"));  // [count, min, max, sum]
  pk.pack_array(4);
  pk.pack(metric_count_);
  sdk::PackFloat64(pk, metric_min_);
  sdk::PackFloat64(pk, metric_max_);
  sdk::PackFloat64(pk, metric_sum_);
  pk.pack(std::string("observations"));  // [[values, loss], ...]
  pk.pack_array(static_cast<uint32_t>(observations_.size()));
  for (const Observation& o : observations_) {
    pk.pack_array(2);
    sdk::PackAssignment(pk, o.values);
    sdk::PackFloat64(pk, o.loss);
  }
  pk.pack(std::string("running"));  // [[id, values], ...]
  pk.pack_array(static_cast<uint32_t>(running_.size()));
  for (const auto& [id, values] : running_) {
    pk.pack_array(2);
    pk.pack(id);
    sdk::PackAssignment(pk, values);
  }
  pk.pack(std::string("exhausted"));
  pk.pack(exhausted_);
  return std::string(buffer.data(), buffer.size());
}

void AnnealTuner::LoadState(std::string_view state) {
  if (!space_) {
    throw sdk::Error(TH_BAD_STATE, "anneal: load_state needs the search space first");
  }
  msgpack::object_handle h = sdk::OpenState(state, "anneal", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  const msgpack::object* seen = sdk::FindKey(o, "seen");
  const msgpack::object* configurations = sdk::FindKey(o, "configurations");
  const msgpack::object* metrics = sdk::FindKey(o, "metrics");
  const msgpack::object* observations = sdk::FindKey(o, "observations");
  const msgpack::object* running = sdk::FindKey(o, "running");
  const msgpack::object* exhausted = sdk::FindKey(o, "exhausted");
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, "anneal");
  sdk::CheckSavedMaximize(o, maximize_, "anneal");
  sdk::SeenConfigurations keys;
  if (seen == nullptr || !keys.Unpack(*seen)) BadState("no seen list of binary keys");
  if (configurations == nullptr || !sdk::IsInteger(*configurations)) {
    BadState("no configurations count");
  }
  if (metrics == nullptr || metrics->type != msgpack::type::ARRAY || metrics->via.array.size != 4 ||
      !sdk::IsInteger(metrics->via.array.ptr[0])) {
    BadState("no metrics [count, min, max, sum]");
  }
  if (exhausted == nullptr || exhausted->type != msgpack::type::BOOLEAN) BadState("no exhausted");

  std::vector<Observation> obs;
  if (observations == nullptr || observations->type != msgpack::type::ARRAY) {
    BadState("no observations");
  }
  for (uint32_t i = 0; i < observations->via.array.size; ++i) {
    const msgpack::object& e = observations->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 2) BadState("bad observation");
    std::optional<sdk::Assignment> a = sdk::UnpackAssignment(e.via.array.ptr[0], *space_);
    if (!a) BadState("an observation does not fit the search space");
    obs.push_back({*a, StateNumber(&e.via.array.ptr[1], "loss")});
  }
  std::map<int64_t, sdk::Assignment> run;
  if (running == nullptr || running->type != msgpack::type::ARRAY) BadState("no running");
  for (uint32_t i = 0; i < running->via.array.size; ++i) {
    const msgpack::object& e = running->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 2 ||
        !sdk::IsInteger(e.via.array.ptr[0])) {
      BadState("bad running entry");
    }
    std::optional<sdk::Assignment> a = sdk::UnpackAssignment(e.via.array.ptr[1], *space_);
    if (!a) BadState("a running configuration does not fit the search space");
    run.emplace(sdk::AsInt64(e.via.array.ptr[0], "running id"), *a);
  }

  const double metric_min = StateNumber(&metrics->via.array.ptr[1], "metrics min");
  const double metric_max = StateNumber(&metrics->via.array.ptr[2], "metrics max");
  const double metric_sum = StateNumber(&metrics->via.array.ptr[3], "metrics sum");

  seed_ = random.seed;
  rng_ = random.rng;
  seen_ = std::move(keys);
  configurations_ = sdk::AsInt64(*configurations, "configurations");
  metric_count_ = sdk::AsInt64(metrics->via.array.ptr[0], "metrics count");
  metric_min_ = metric_min;
  metric_max_ = metric_max;
  metric_sum_ = metric_sum;
  observations_ = std::move(obs);
  running_ = std::move(run);
  exhausted_ = exhausted->via.boolean;
}

}  // namespace tunehost::plugins
