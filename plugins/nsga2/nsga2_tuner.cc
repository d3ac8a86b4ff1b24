#include "nsga2_tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"
#include "tunehost/sdk/cpp/objectives.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.nsga2";
constexpr int64_t kStateVersion = 1;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "nsga2: saved state: " + what);
}

template <class Stream>
void PackMembers(msgpack::packer<Stream>& pk, const std::vector<Nsga2Tuner::Member>& members) {
  pk.pack_array(static_cast<uint32_t>(members.size()));  // [[config, values, violation], ...]
  for (const Nsga2Tuner::Member& m : members) {
    pk.pack_array(3);
    sdk::PackAssignment(pk, m.config);
    pk.pack_array(static_cast<uint32_t>(m.score.values.size()));
    for (double v : m.score.values) sdk::PackFloat64(pk, v);
    sdk::PackFloat64(pk, m.score.violation);
  }
}

std::vector<Nsga2Tuner::Member> UnpackMembers(const msgpack::object* o, const char* what,
                                              const sdk::SearchSpace& space, size_t objectives) {
  if (o == nullptr || o->type != msgpack::type::ARRAY) BadState(std::string("no ") + what);
  std::vector<Nsga2Tuner::Member> out;
  for (uint32_t i = 0; i < o->via.array.size; ++i) {
    const msgpack::object& e = o->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 3) BadState("bad member");
    std::optional<sdk::Assignment> config = sdk::UnpackAssignment(e.via.array.ptr[0], space);
    if (!config) BadState("a member does not fit the search space");
    const msgpack::object& values = e.via.array.ptr[1];
    const msgpack::object& violation = e.via.array.ptr[2];
    if (values.type != msgpack::type::ARRAY || values.via.array.size != objectives ||
        !sdk::IsNumber(violation)) {
      BadState("bad member score");
    }
    Nsga2Tuner::Member m{std::move(*config), {}};
    for (uint32_t k = 0; k < values.via.array.size; ++k) {
      if (!sdk::IsNumber(values.via.array.ptr[k])) BadState("bad member score");
      m.score.values.push_back(sdk::AsDouble(values.via.array.ptr[k], "value"));
    }
    m.score.violation = sdk::AsDouble(violation, "violation");
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

Nsga2Tuner::Nsga2Tuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  sdk::ClassArgs args("nsga2", class_args,
                      {"objectives", "optimize_mode", "constraints", "population_size",
                       "mutation_prob", "crossover_prob", "swapping_prob", "seed"});
  objectives_ = sdk::ObjectiveSet::Parse(args, /*default_maximize=*/true);
  population_size_ = args.Int("population_size", kDefaultPopulationSize, 2, kMaxPopulationSize);
  if (args.Has("mutation_prob")) mutation_prob_ = args.Number("mutation_prob", 0, 0, 1);
  crossover_prob_ = args.Number("crossover_prob", 0.9, 0, 1);
  swapping_prob_ = args.Number("swapping_prob", 0.5, 0, 1);
  seed_ = args.SeedOrRandom(host);
  rng_.seed(seed_);
}

const sdk::SearchSpace& Nsga2Tuner::Space() const {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "nsga2: no search space yet");
  return *space_;
}

void Nsga2Tuner::UpdateSearchSpace(const msgpack::object& space) {
  sdk::SearchSpace next = sdk::SearchSpace::Parse(space);
  if (space_) {
    running_.Refit(next, *space_);
  }
  space_ = std::move(next);
  generation_ = 0;
  parents_.clear();
  current_.clear();
}

std::optional<sdk::Candidate> Nsga2Tuner::Score(const msgpack::object& value, double scalar) {
  return objectives_.Score(value, scalar, host());
}

void Nsga2Tuner::Add(sdk::Assignment config, sdk::Candidate score) {
  current_.push_back({std::move(config), std::move(score)});
  if (static_cast<int64_t>(current_.size()) < population_size_) return;
  std::vector<Member> pool = std::move(parents_);
  for (Member& m : current_) pool.push_back(std::move(m));
  std::vector<sdk::Candidate> scores;
  for (const Member& m : pool) scores.push_back(m.score);
  parents_.clear();
  for (size_t i : sdk::SelectElite(scores, static_cast<size_t>(population_size_))) {
    parents_.push_back(std::move(pool[i]));
  }
  current_.clear();
  ++generation_;
}

const Nsga2Tuner::Member& Nsga2Tuner::Tournament() {
  const Member& a = parents_[sdk::UniformIndex(rng_, parents_.size())];
  const Member& b = parents_[sdk::UniformIndex(rng_, parents_.size())];
  if (sdk::ConstrainedDominates(a.score, b.score)) return a;
  if (sdk::ConstrainedDominates(b.score, a.score)) return b;
  return sdk::Uniform01(rng_) < 0.5 ? a : b;
}

sdk::Assignment Nsga2Tuner::Child() {
  const sdk::SearchSpace& space = Space();
  if (parents_.empty()) return space.Sample(rng_);
  const Member* first = &Tournament();
  const Member* second = first;
  const bool cross = sdk::Uniform01(rng_) < crossover_prob_ && parents_.size() > 1;
  if (cross) {
    // Two different parents when the tournaments allow it (Optuna retries).
    for (int tries = 0; tries < 16 && second == first; ++tries) second = &Tournament();
  }
  size_t active = 0;
  for (const std::optional<double>& x : first->config) active += x.has_value() ? 1 : 0;
  const double mutate = mutation_prob_.value_or(1.0 / static_cast<double>(std::max<size_t>(1, active)));
  const std::vector<sdk::Parameter>& params = space.params();
  sdk::Assignment child(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (!space.IsActive(i, child)) continue;
    const std::optional<double>* from = &first->config[i];
    if (cross && sdk::Uniform01(rng_) < swapping_prob_) from = &second->config[i];
    if (!from->has_value()) from = from == &first->config[i] ? &second->config[i] : &first->config[i];
    child[i] = from->has_value() && !(sdk::Uniform01(rng_) < mutate)
                   ? **from
                   : sdk::SampleParameter(params[i], rng_);
  }
  return child;
}

bool Nsga2Tuner::GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) {
  sdk::Assignment config = Child();
  Space().Pack(config, out);
  running_.Start(parameter_id, std::move(config));
  return true;
}

void Nsga2Tuner::ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                                    const msgpack::object& value, double scalar, bool customized) {
  auto it = running_.find(parameter_id);
  std::optional<sdk::Assignment> config;
  if (it != running_.end() && !it->second.has_result) {
    it->second.has_result = true;
    config = it->second.config;
    if (!config) return;  // made for an older search space
  } else if (it == running_.end() && customized) {
    config = Space().TryFromParameters(parameters);
    if (!config) {
      host().Warn("nsga2: result of a customized trial whose parameters do not fit the "
                  "search space; ignored");
      return;
    }
  } else {
    host().Warn("nsga2: result for parameter id " + std::to_string(parameter_id) +
                " that is not running here or already has one; ignored");
    return;
  }
  if (std::optional<sdk::Candidate> score = Score(value, scalar)) {
    Add(std::move(*config), std::move(*score));
  }
}

void Nsga2Tuner::TrialEnd(int64_t parameter_id, bool /*success*/) {
  if (running_.erase(parameter_id) == 0) {
    host().Warn("nsga2: trial end for parameter id " + std::to_string(parameter_id) +
                " that is not running here; ignored");
  }
}

void Nsga2Tuner::ImportData(const msgpack::object& records) {
  const sdk::SearchSpace& space = Space();
  size_t unfit = 0;
  const size_t skipped = sdk::ForEachImported(
      records, "nsga2", [&](const msgpack::object& params, const msgpack::object& value, double scalar) {
        std::optional<sdk::Assignment> config = space.TryFromParameters(params);
        std::optional<sdk::Candidate> score = config ? Score(value, scalar) : std::nullopt;
        if (!score) {
          ++unfit;
          return;
        }
        Add(std::move(*config), std::move(*score));
      });
  if (skipped + unfit > 0) {
    host().Warn("nsga2: skipped " + std::to_string(skipped + unfit) +
                " imported records without a \"parameters\" map of this search space and a "
                "\"value\" holding every objective");
  }
}

std::string Nsga2Tuner::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 9, kStateFormat, kStateVersion);
  sdk::PackSavedRandom(pk, seed_, rng_);
  pk.pack(std::string("objectives"));  // the scores' meaning: [[name, maximize], ...], constraints
  objectives_.PackSignature(pk);
  pk.pack(std::string("generation"));
  pk.pack(generation_);
  pk.pack(std::string("parents"));
  PackMembers(pk, parents_);
  pk.pack(std::string("current"));
  PackMembers(pk, current_);
  pk.pack(std::string("running"));  // [[id, config or nil, has_result], ...]
  running_.Pack(pk);
  return std::string(buffer.data(), buffer.size());
}

void Nsga2Tuner::LoadState(std::string_view state) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "nsga2: load_state needs the search space first");
  msgpack::object_handle h = sdk::OpenState(state, "nsga2", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  const msgpack::object* objectives = sdk::FindKey(o, "objectives");
  const msgpack::object* generation = sdk::FindKey(o, "generation");
  const msgpack::object* running = sdk::FindKey(o, "running");
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, "nsga2");
  // The saved scores mean what this tuner's objectives say only if they match.
  if (!objectives_.SameSignature(objectives)) {
    BadState("saved with other objectives or constraints than this tuner's class_args");
  }
  if (generation == nullptr || generation->type != msgpack::type::POSITIVE_INTEGER) {
    BadState("no generation");
  }
  std::vector<Member> parents = UnpackMembers(sdk::FindKey(o, "parents"), "parents", *space_,
                                              objectives_.objectives().size());
  std::vector<Member> current = UnpackMembers(sdk::FindKey(o, "current"), "current", *space_,
                                              objectives_.objectives().size());
  sdk::RunningConfigs run = sdk::RunningConfigs::Unpack(running, *space_, "nsga2");
  seed_ = random.seed;
  rng_ = random.rng;
  generation_ = static_cast<int64_t>(generation->via.u64);
  parents_ = std::move(parents);
  current_ = std::move(current);
  running_ = std::move(run);
}

}  // namespace tunehost::plugins
