#include "evolution_tuner.h"

#include <cmath>
#include <limits>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/import.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.evolution";
constexpr int64_t kStateVersion = 1;

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "evolution: saved state: " + what);
}

// Whether params()[j] lies (at any depth) inside an option of params()[ancestor].
bool DescendsFrom(const sdk::SearchSpace& space, size_t j, size_t ancestor) {
  for (int p = space.params()[j].parent; p >= 0;
       p = space.params()[static_cast<size_t>(p)].parent) {
    if (static_cast<size_t>(p) == ancestor) return true;
  }
  return false;
}

}  // namespace

EvolutionTuner::EvolutionTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  sdk::ClassArgs args("evolution", class_args, {"optimize_mode", "population_size", "seed"});
  maximize_ = args.Maximize(true);
  population_size_ = args.Int("population_size", kDefaultPopulationSize, 1, kMaxPopulationSize);
  seed_ = args.SeedOrRandom(host);
  rng_.seed(seed_);
}

const sdk::SearchSpace& EvolutionTuner::Space() const {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "evolution: no search space yet");
  return *space_;
}

void EvolutionTuner::UpdateSearchSpace(const msgpack::object& space) {
  sdk::SearchSpace next = sdk::SearchSpace::Parse(space);
  if (space_) {
    // Running trials keep their place; their results join the new population
    // when their parameters fit the new space.
    running_.Refit(next, *space_);
  }
  space_ = std::move(next);
  population_.clear();
  for (int64_t i = 0; i < population_size_; ++i) AddRandomIndividual();
}

void EvolutionTuner::AddRandomIndividual() {
  population_.push_back({Space().Sample(rng_), std::nullopt});
}

double EvolutionTuner::FitnessOf(double metric) const {
  if (std::isnan(metric)) return -std::numeric_limits<double>::infinity();
  return maximize_ ? metric : -metric;
}

void EvolutionTuner::Shuffle() {
  for (size_t i = population_.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(sdk::UniformIndex(rng_, i));
    std::swap(population_[i - 1], population_[j]);
  }
}

sdk::Assignment EvolutionTuner::Mutate(const sdk::Assignment& parent) {
  const sdk::SearchSpace& space = Space();
  const std::vector<sdk::Parameter>& params = space.params();
  std::vector<size_t> active;
  for (size_t i = 0; i < parent.size(); ++i) {
    if (parent[i]) active.push_back(i);
  }
  if (active.empty()) return parent;  // an empty search space
  const size_t pick = active[static_cast<size_t>(sdk::UniformIndex(rng_, active.size()))];
  sdk::Assignment child = parent;
  child[pick] = sdk::SampleParameter(params[pick], rng_);
  if (params[pick].nested) {
    // NNI re-samples the whole sub-space under a re-sampled choice, even
    // when the same option comes out again.
    for (size_t j = pick + 1; j < params.size(); ++j) {
      if (DescendsFrom(space, j, pick)) child[j].reset();
    }
    for (size_t j = pick + 1; j < params.size(); ++j) {
      if (DescendsFrom(space, j, pick) && space.IsActive(j, child)) {
        child[j] = sdk::SampleParameter(params[j], rng_);
      }
    }
  }
  return child;
}

sdk::Assignment EvolutionTuner::Breed() {
  if (population_.empty()) {
    host().Warn("evolution: the population is empty; adding a random individual");
    AddRandomIndividual();
  }
  for (size_t i = 0; i < population_.size(); ++i) {
    if (!population_[i].fitness) {
      sdk::Assignment config = std::move(population_[i].config);
      population_.erase(population_.begin() + static_cast<std::ptrdiff_t>(i));
      return config;
    }
  }
  Shuffle();
  const bool pair = population_.size() > 1;
  if (pair && *population_[0].fitness < *population_[1].fitness) population_[0] = population_[1];
  sdk::Assignment child = Mutate(population_[0].config);
  if (pair) population_.erase(population_.begin() + 1);
  return child;
}

void EvolutionTuner::Start(int64_t id, msgpack::packer<msgpack::sbuffer>& out) {
  sdk::Assignment config = Breed();
  Space().Pack(config, out);
  running_.Start(id, std::move(config));
}

void EvolutionTuner::Unstart(int64_t id) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  if (it->second.config) {
    population_.insert(population_.begin(),
                       Individual{std::move(*it->second.config), std::nullopt});
  }
  running_.erase(it);
}

bool EvolutionTuner::GenerateParameters(int64_t parameter_id,
                                        msgpack::packer<msgpack::sbuffer>& out) {
  Space();  // throws without a search space
  if (static_cast<int64_t>(running_.size()) >= population_size_) {
    credits_.push_back(parameter_id);
    if (!warned_credit_) {
      warned_credit_ = true;
      host().Warn("evolution: " + std::to_string(population_size_) +
                  " trials (population_size) are running; requested ids are kept and served "
                  "as trials end (population_size should be larger than the trial concurrency)");
    }
    return false;
  }
  Start(parameter_id, out);
  return true;
}

bool EvolutionTuner::GenerateMultiple(
    const std::vector<int64_t>& ids,
    const std::function<void(int64_t, const msgpack::sbuffer&)>& emit) {
  return sdk::GenerateEachKeepingCredit(
      ids, [this](int64_t id, auto& pk) { return GenerateParameters(id, pk); }, emit,
      [this](int64_t id) { Unstart(id); });
}

void EvolutionTuner::ServeCredits() {
  while (!credits_.empty() && static_cast<int64_t>(running_.size()) < population_size_) {
    const int64_t id = credits_.front();
    credits_.pop_front();
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    Start(id, pk);
    const th_status st = host().SendTrial(id, buffer);
    if (st != TH_OK) {
      host().Warn("evolution: the host refused the trial for kept parameter id " +
                  std::to_string(id) + " (status " + std::to_string(static_cast<int>(st)) +
                  "); the id is dropped");
      Unstart(id);
    }
  }
}

void EvolutionTuner::ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                                        const msgpack::object& /*value*/, double scalar,
                                        bool customized) {
  auto it = running_.find(parameter_id);
  if (it != running_.end() && !it->second.has_result) {
    it->second.has_result = true;
    if (it->second.config) population_.push_back({*it->second.config, FitnessOf(scalar)});
    return;
  }
  if (it == running_.end() && customized) {
    std::optional<sdk::Assignment> config = Space().TryFromParameters(parameters);
    if (!config) {
      host().Warn(
          "evolution: result of a customized trial whose parameters do not fit the "
          "search space; ignored");
      return;
    }
    population_.push_back({std::move(*config), FitnessOf(scalar)});
    return;
  }
  host().Warn("evolution: result for parameter id " + std::to_string(parameter_id) +
              " that is not running here or already has one; ignored");
}

void EvolutionTuner::TrialEnd(int64_t parameter_id, bool /*success*/) {
  auto it = running_.find(parameter_id);
  if (it == running_.end()) {
    host().Warn("evolution: trial end for parameter id " + std::to_string(parameter_id) +
                " that is not running here; ignored");
    return;
  }
  const bool had_result = it->second.has_result;
  running_.erase(it);
  // Keep the population's size: a trial without a result gave it nothing back.
  if (!had_result) AddRandomIndividual();
  ServeCredits();
}

void EvolutionTuner::ImportData(const msgpack::object& records) {
  const sdk::SearchSpace& space = Space();
  size_t unfit = 0;
  size_t skipped = sdk::ForEachImported(
      records, "evolution",
      [&](const msgpack::object& params, const msgpack::object&, double scalar) {
        std::optional<sdk::Assignment> config = space.TryFromParameters(params);
        if (!config) {
          ++unfit;
          return;
        }
        population_.push_back({std::move(*config), FitnessOf(scalar)});
      });
  if (skipped + unfit > 0) {
    host().Warn("evolution: skipped " + std::to_string(skipped + unfit) +
                " imported records without a \"parameters\" map of this search space and a "
                "numeric \"value\"");
  }
}

std::string EvolutionTuner::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 8, kStateFormat, kStateVersion);
  sdk::PackSavedRandom(pk, seed_, rng_);
  pk.pack(std::string("maximize"));  // fitness is signed by it
  pk.pack(maximize_);
  pk.pack(std::string("population"));  // [[config, fitness or nil], ...]
  pk.pack_array(static_cast<uint32_t>(population_.size()));
  for (const Individual& ind : population_) {
    pk.pack_array(2);
    sdk::PackAssignment(pk, ind.config);
    if (ind.fitness) {
      sdk::PackFloat64(pk, *ind.fitness);
    } else {
      pk.pack_nil();
    }
  }
  pk.pack(std::string("running"));  // [[id, config or nil, has_result], ...]
  running_.Pack(pk);
  pk.pack(std::string("credits"));
  pk.pack_array(static_cast<uint32_t>(credits_.size()));
  for (int64_t id : credits_) pk.pack(id);
  return std::string(buffer.data(), buffer.size());
}

void EvolutionTuner::LoadState(std::string_view state) {
  if (!space_) {
    throw sdk::Error(TH_BAD_STATE, "evolution: load_state needs the search space first");
  }
  msgpack::object_handle h = sdk::OpenState(state, "evolution", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  const msgpack::object* population = sdk::FindKey(o, "population");
  const msgpack::object* running = sdk::FindKey(o, "running");
  const msgpack::object* credits = sdk::FindKey(o, "credits");
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, "evolution");
  sdk::CheckSavedMaximize(o, maximize_, "evolution");

  std::vector<Individual> pop;
  if (population == nullptr || population->type != msgpack::type::ARRAY) BadState("no population");
  for (uint32_t i = 0; i < population->via.array.size; ++i) {
    const msgpack::object& e = population->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 2) BadState("bad individual");
    std::optional<sdk::Assignment> config = sdk::UnpackAssignment(e.via.array.ptr[0], *space_);
    if (!config) BadState("an individual does not fit the search space");
    const msgpack::object& f = e.via.array.ptr[1];
    if (f.type != msgpack::type::NIL && !sdk::IsNumber(f)) BadState("bad fitness");
    pop.push_back({*config, f.type == msgpack::type::NIL
                                ? std::nullopt
                                : std::optional<double>(sdk::AsDouble(f, "fitness"))});
  }

  sdk::RunningConfigs run = sdk::RunningConfigs::Unpack(running, *space_, "evolution");

  std::deque<int64_t> kept;
  if (credits == nullptr || credits->type != msgpack::type::ARRAY) BadState("no credits");
  for (uint32_t i = 0; i < credits->via.array.size; ++i) {
    if (!sdk::IsInteger(credits->via.array.ptr[i])) BadState("bad credit id");
    kept.push_back(sdk::AsInt64(credits->via.array.ptr[i], "credit id"));
  }

  seed_ = random.seed;
  rng_ = random.rng;
  population_ = std::move(pop);
  running_ = std::move(run);
  credits_ = std::move(kept);
}

}  // namespace tunehost::plugins
