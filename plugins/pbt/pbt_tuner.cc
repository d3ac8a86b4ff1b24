#include "pbt_tuner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {
namespace {

constexpr const char* kStateFormat = "org.tunehost.pbt";
constexpr int64_t kStateVersion = 1;
constexpr const char* kLoadKey = "load_checkpoint_dir";
constexpr const char* kSaveKey = "save_checkpoint_dir";

[[noreturn]] void BadState(const std::string& what) {
  throw sdk::Error(TH_INVALID_ARGUMENT, "pbt: saved state: " + what);
}

std::string StringArg(const sdk::ClassArgs& args, std::string_view key) {
  const msgpack::object* v = args.Find(key);
  if (v == nullptr) return "";
  if (!sdk::IsString(*v) || sdk::StringView(*v).empty()) {
    throw args.Bad(key, "must be a non-empty string (a directory every trial can reach)");
  }
  return std::string(sdk::StringView(*v));
}

std::string DefaultCheckpointDir(uint64_t seed) {
  if (const char* nni = std::getenv("NNI_CHECKPOINT_DIRECTORY"); nni != nullptr && *nni) {
    return nni;
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home ? home : "/tmp") + "/tunehost/checkpoint/pbt-" +
         std::to_string(seed);
}

// Element i of a saved array, which must be a string.
std::string StringAt(const msgpack::object& a, uint32_t i, const char* what) {
  if (!sdk::IsString(a.via.array.ptr[i])) BadState(std::string("bad ") + what);
  return std::string(sdk::StringView(a.via.array.ptr[i]));
}

// One imported record as PBT reads it: where the trial saved, the step that
// directory names and what it scored.
struct Imported {
  std::string save_dir;
  sdk::Assignment config;
  double metric;  // NaN: failed or no result (the worst score)
};

// The records of the last step that every one of `population` members
// finished (NNI's PBTTuner.import_data: records grouped by the step their
// save_checkpoint_dir names; an incomplete last step is not used). Returns
// why the import is abandoned, or "".
std::string ReadImported(const msgpack::object& records, const sdk::SearchSpace& space,
                         int64_t population, int64_t& step, std::vector<Imported>& out) {
  if (records.type != msgpack::type::ARRAY) return "import data must be an array of records";
  std::map<int64_t, std::vector<Imported>> steps;
  for (uint32_t i = 0; i < records.via.array.size; ++i) {
    const std::string where = "record " + std::to_string(i) + ": ";
    const msgpack::object& record = records.via.array.ptr[i];
    const msgpack::object* params = sdk::FindKey(record, "parameters");
    if (params == nullptr) params = sdk::FindKey(record, "parameter");
    if (params == nullptr || params->type != msgpack::type::MAP) return where + "no parameter map";
    const msgpack::object* save = sdk::FindKey(*params, kSaveKey);
    if (save == nullptr || !sdk::IsString(*save)) {
      return where + "no " + std::string(kSaveKey) + " (not a record of a pbt trial)";
    }
    Imported r;
    r.save_dir = std::string(sdk::StringView(*save));
    const std::string leaf = std::filesystem::path(r.save_dir).filename().string();
    if (leaf.empty() || leaf.size() > 9 ||
        leaf.find_first_not_of("0123456789") != std::string::npos) {
      return where + std::string(kSaveKey) + " \"" + r.save_dir + "\" does not end in a step number";
    }
    std::optional<sdk::Assignment> config = space.TryFromParameters(*params);
    if (!config) return where + "the parameters do not fit the search space";
    r.config = std::move(*config);
    // NNI counts a failed trial (no value) as the worst score; so do we. (NNI
    // also takes a value of 0 for a failure, which we do not.)
    r.metric = std::numeric_limits<double>::quiet_NaN();
    if (const msgpack::object* value = sdk::FindKey(record, "value"); value != nullptr) {
      try {
        r.metric = sdk::MetricScalar(*value, "value");
      } catch (const sdk::Error&) {
      }
    }
    steps[std::stoll(leaf)].push_back(std::move(r));
  }
  if (steps.empty()) return "no records";
  auto last = std::prev(steps.end());
  if (static_cast<int64_t>(last->second.size()) < population) {
    if (last == steps.begin() || std::prev(last)->first != last->first - 1) {
      return "no step has a record for every one of the " + std::to_string(population) +
             " members";
    }
    --last;
  }
  if (static_cast<int64_t>(last->second.size()) != population) {
    return "step " + std::to_string(last->first) + " has " +
           std::to_string(last->second.size()) + " records for a population of " +
           std::to_string(population);
  }
  for (const Imported& r : last->second) {
    std::error_code ec;
    if (!std::filesystem::is_directory(r.save_dir, ec)) {
      return "checkpoint directory " + r.save_dir + " does not exist";
    }
  }
  step = last->first;
  out = std::move(last->second);
  return "";
}

}  // namespace

PbtTuner::PbtTuner(sdk::HostRef host, const msgpack::object& class_args) : Tuner(host) {
  sdk::ClassArgs args("pbt", class_args,
                      {"optimize_mode", "all_checkpoint_dir", "population_size", "factor",
                       "factors", "resample_probability", "fraction", "seed"});
  maximize_ = args.Maximize(true);
  population_size_ = args.Int("population_size", kDefaultPopulationSize, 1, kMaxPopulationSize);
  factor_ = args.Number("factor", args.Number("factors", 0.2, 0.0, 1e6, true), 0.0, 1e6, true);
  resample_probability_ = args.Number("resample_probability", 0.25, 0.0, 1.0);
  fraction_ = args.Number("fraction", 0.2, 0.0, 1.0, /*min_exclusive=*/true);
  seed_ = args.SeedOrRandom(host);
  rng_.seed(seed_);
  all_checkpoint_dir_ = StringArg(args, "all_checkpoint_dir");
  if (all_checkpoint_dir_.empty()) all_checkpoint_dir_ = DefaultCheckpointDir(seed_);
  while (all_checkpoint_dir_.size() > 1 && all_checkpoint_dir_.back() == '/') {
    all_checkpoint_dir_.pop_back();
  }
  host.Info("pbt: checkpoints under " + all_checkpoint_dir_ + ", population " +
            std::to_string(population_size_));
}

const sdk::SearchSpace& PbtTuner::Space() const {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "pbt: no search space yet");
  return *space_;
}

std::string PbtTuner::Dir(const std::string& base, int64_t leaf) const {
  return base + "/" + std::to_string(leaf);
}

double PbtTuner::FitnessOf(double metric) const {
  if (std::isnan(metric)) return -std::numeric_limits<double>::infinity();
  return maximize_ ? metric : -metric;
}

void PbtTuner::UpdateSearchSpace(const msgpack::object& space) {
  sdk::SearchSpace next = sdk::SearchSpace::Parse(space);
  for (const sdk::Parameter& p : next.params()) {
    if (p.nested) {
      throw sdk::Error(TH_INVALID_ARGUMENT,
                       "pbt: search space key \"" + p.path +
                           "\": nested choices are not supported (PBT perturbs each "
                           "hyperparameter of a flat space)");
    }
    if (p.name == kLoadKey || p.name == kSaveKey) {
      throw sdk::Error(TH_INVALID_ARGUMENT, "pbt: search space key \"" + p.path +
                                                "\" is the name of a checkpoint directory the "
                                                "tuner adds to each trial's parameters");
    }
  }
  if (!running_.empty()) {
    host().Warn("pbt: a new search space starts a new population; the results of " +
                std::to_string(running_.size()) + " running trials will be ignored");
  }
  space_ = std::move(next);
  population_.clear();
  running_.clear();
  finished_.clear();
  pos_ = -1;
  for (int64_t i = 0; i < population_size_; ++i) {
    Member m;
    m.checkpoint_dir = Dir(all_checkpoint_dir_, i);
    m.config = space_->Sample(rng_);
    m.load_dir = m.save_dir = Dir(m.checkpoint_dir, step_);
    population_.push_back(std::move(m));
  }
}

void PbtTuner::Pack(const Member& m, msgpack::packer<msgpack::sbuffer>& out) const {
  // The space's map with two more entries: its header is rewritten and its
  // entries copied as they are (re-packing them through msgpack::object
  // would turn a float with an integral value into an integer).
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  Space().Pack(m.config, pk);
  const auto first = static_cast<uint8_t>(buffer.data()[0]);
  const size_t header = first <= 0x8f ? 1 : first == 0xde ? 3 : 5;  // fixmap, map16, map32
  msgpack::object_handle h = msgpack::unpack(buffer.data(), buffer.size());
  out.pack_map(h.get().via.map.size + 2);
  out.pack_bin_body(buffer.data() + header, static_cast<uint32_t>(buffer.size() - header));
  out.pack(std::string(kLoadKey));
  out.pack(m.load_dir);
  out.pack(std::string(kSaveKey));
  out.pack(m.save_dir);
}

void PbtTuner::Start(int64_t id, msgpack::packer<msgpack::sbuffer>& out) {
  const size_t member = static_cast<size_t>(++pos_);
  Pack(population_[member], out);
  running_[id] = member;
}

bool PbtTuner::GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) {
  Space();  // throws without a search space
  if (pos_ + 1 >= static_cast<int64_t>(population_.size())) {
    credits_.push_back(parameter_id);
    return false;
  }
  Start(parameter_id, out);
  return true;
}

bool PbtTuner::GenerateMultiple(const std::vector<int64_t>& ids,
                                const std::function<void(int64_t, const msgpack::sbuffer&)>& emit) {
  return sdk::GenerateEachKeepingCredit(
      ids, [this](int64_t id, auto& pk) { return GenerateParameters(id, pk); }, emit,
      [this](int64_t id) {  // the member goes back, to be handed out next
        running_.erase(id);
        --pos_;
      });
}

void PbtTuner::ReceiveTrialResult(int64_t parameter_id, const msgpack::object& /*parameters*/,
                                  const msgpack::object& /*value*/, double scalar,
                                  bool /*customized*/) {
  auto it = running_.find(parameter_id);
  if (it == running_.end()) {
    host().Warn("pbt: result for parameter id " + std::to_string(parameter_id) +
                " that is not a running member of this step; ignored");
    return;
  }
  const size_t member = it->second;
  running_.erase(it);
  Finish(member, FitnessOf(scalar));
}

void PbtTuner::TrialEnd(int64_t parameter_id, bool /*success*/) {
  auto it = running_.find(parameter_id);
  if (it == running_.end()) return;  // it had its result (or is not ours)
  const size_t member = it->second;
  running_.erase(it);
  Finish(member, -std::numeric_limits<double>::infinity());
}

void PbtTuner::Finish(size_t member, double score) {
  population_[member].score = score;
  finished_.push_back(member);
  if (finished_.size() == population_.size()) NextStep();
}

void PbtTuner::NextStep() {
  ++step_;
  // Best first; equal scores keep the order they finished in (NNI's stable sort).
  std::vector<size_t> ranked = finished_;
  std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) {
    return *population_[a].score > *population_[b].score;
  });
  const size_t n = ranked.size();
  const size_t cutoff = std::min(
      n, static_cast<size_t>(std::ceil(fraction_ * static_cast<double>(n) - 1e-9)));
  const std::vector<Member> before = population_;  // tops are read as they were
  for (size_t r = 0; r < n; ++r) {
    Member& m = population_[ranked[r]];
    if (r >= n - cutoff) {
      const Member& top = before[ranked[sdk::UniformIndex(rng_, cutoff)]];
      m.config = Perturb(top.config);
      m.load_dir = top.save_dir;
    } else {
      m.load_dir = m.save_dir;
    }
    m.save_dir = Dir(m.checkpoint_dir, step_);
    m.score.reset();
  }
  // NNI hands the next step out worst first (it pops the ranked list).
  std::vector<Member> next;
  next.reserve(n);
  for (size_t r = n; r-- > 0;) next.push_back(std::move(population_[ranked[r]]));
  population_ = std::move(next);
  finished_.clear();
  running_.clear();
  pos_ = -1;
  host().Info("pbt: step " + std::to_string(step_) + ": the bottom " + std::to_string(cutoff) +
              " of " + std::to_string(n) + " continue from a top member's checkpoint");
  while (!credits_.empty() && pos_ + 1 < static_cast<int64_t>(population_.size())) {
    const int64_t id = credits_.front();
    credits_.pop_front();
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    Start(id, pk);
    const th_status st = host().SendTrial(id, buffer);
    if (st != TH_OK) {
      host().Warn("pbt: the host refused the trial for kept parameter id " + std::to_string(id) +
                  " (status " + std::to_string(static_cast<int>(st)) +
                  "); the member goes to the next id");
      running_.erase(id);
      --pos_;
    }
  }
}

// NNI's PBTTuner.import_data, which resumes a run from its records: the
// last step that every member finished (a record each) becomes the
// finished step, and the next step starts from it as if its trials had
// just reported. Only before the first trial, as NNI. Anything else in the
// records leaves the tuner as it was, with a warning that says why.
void PbtTuner::ImportData(const msgpack::object& records) {
  const sdk::SearchSpace& space = Space();
  if (step_ > 0 || pos_ >= 0) {  // e.g. results replayed after a restored checkpoint
    host().Warn("pbt: imported records are not used once trials were handed out (NNI's PBT "
                "imports only before its first trial)");
    return;
  }
  int64_t step = 0;
  std::vector<Imported> last;
  if (std::string why = ReadImported(records, space, population_size_, step, last); !why.empty()) {
    host().Warn("pbt: import abandoned, the population starts from scratch: " + why);
    return;
  }
  population_.clear();
  finished_.clear();
  for (Imported& r : last) {
    Member m;
    m.checkpoint_dir = std::filesystem::path(r.save_dir).parent_path().string();
    m.config = std::move(r.config);
    m.load_dir = m.save_dir = r.save_dir;
    m.score = FitnessOf(r.metric);
    finished_.push_back(population_.size());
    population_.push_back(std::move(m));
  }
  step_ = step;
  NextStep();
}

sdk::Assignment PbtTuner::Perturb(const sdk::Assignment& config) {
  const std::vector<sdk::Parameter>& params = Space().params();
  sdk::Assignment out = config;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!out[i]) continue;
    if (sdk::Uniform01(rng_) < resample_probability_) {
      out[i] = sdk::SampleParameter(params[i], rng_);
    } else {
      out[i] = PerturbOne(params[i], *out[i]);
    }
  }
  return out;
}

// One step up or down (equal odds), clipped to the range. x and the result
// are internal values: an index for choice and randint, the log for log types,
// the rounded value (or its log) for q types.
double PbtTuner::PerturbOne(const sdk::Parameter& p, double x) {
  const double sign = sdk::Uniform01(rng_) > 0.5 ? 1.0 : -1.0;
  if (p.categorical) {
    return std::clamp(x + sign, 0.0, static_cast<double>(p.size) - 1.0);
  }
  if (p.q > 0) {  // quniform, qloguniform, qnormal, qlognormal: one q in the value
    const double value = p.log ? std::exp(x) : x;
    double moved = p.normal ? value + sign * p.q : (std::round(value / p.q) + sign) * p.q;
    if (p.normal) {
      if (p.log) moved = std::max(moved, 1e-10);
    } else {
      moved = std::clamp(moved, p.clip_low, p.clip_high);
    }
    return p.log ? std::log(moved) : moved;
  }
  if (p.normal) return x + sign * p.sigma * factor_;  // normal; lognormal in log
  return std::clamp(x + sign * (p.high - p.low) * factor_, p.low, p.high);
}

std::string PbtTuner::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 11, kStateFormat, kStateVersion);
  sdk::PackSavedRandom(pk, seed_, rng_);
  pk.pack(std::string("maximize"));
  pk.pack(maximize_);
  pk.pack(std::string("step"));
  pk.pack(step_);
  pk.pack(std::string("population"));  // [[dir, config, load, save, score or nil], ...]
  pk.pack_array(static_cast<uint32_t>(population_.size()));
  for (const Member& m : population_) {
    pk.pack_array(5);
    pk.pack(m.checkpoint_dir);
    sdk::PackAssignment(pk, m.config);
    pk.pack(m.load_dir);
    pk.pack(m.save_dir);
    if (m.score) {
      sdk::PackFloat64(pk, *m.score);
    } else {
      pk.pack_nil();
    }
  }
  pk.pack(std::string("pos"));
  pk.pack(pos_);
  pk.pack(std::string("running"));  // [[id, member], ...]
  pk.pack_array(static_cast<uint32_t>(running_.size()));
  for (const auto& [id, member] : running_) {
    pk.pack_array(2);
    pk.pack(id);
    pk.pack(static_cast<uint64_t>(member));
  }
  pk.pack(std::string("finished"));
  pk.pack_array(static_cast<uint32_t>(finished_.size()));
  for (size_t member : finished_) pk.pack(static_cast<uint64_t>(member));
  pk.pack(std::string("credits"));
  pk.pack_array(static_cast<uint32_t>(credits_.size()));
  for (int64_t id : credits_) pk.pack(id);
  return std::string(buffer.data(), buffer.size());
}

void PbtTuner::LoadState(std::string_view state) {
  if (!space_) throw sdk::Error(TH_BAD_STATE, "pbt: load_state needs the search space first");
  msgpack::object_handle h = sdk::OpenState(state, "pbt", kStateFormat, kStateVersion);
  const msgpack::object& o = h.get();
  auto array = [&](const char* key) {
    const msgpack::object* v = sdk::FindKey(o, key);
    if (v == nullptr || v->type != msgpack::type::ARRAY) BadState(std::string("no ") + key);
    return v;
  };
  const msgpack::object* step = sdk::FindKey(o, "step");
  const msgpack::object* pos = sdk::FindKey(o, "pos");
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, "pbt");
  sdk::CheckSavedMaximize(o, maximize_, "pbt");
  if (step == nullptr || !sdk::IsInteger(*step) || sdk::AsInt64(*step, "step") < 0) {
    BadState("no step");
  }
  if (pos == nullptr || !sdk::IsInteger(*pos)) BadState("no pos");

  std::vector<Member> pop;
  const msgpack::object* population = array("population");
  for (uint32_t i = 0; i < population->via.array.size; ++i) {
    const msgpack::object& e = population->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 5) BadState("bad member");
    Member m;
    m.checkpoint_dir = StringAt(e, 0, "member directory");
    std::optional<sdk::Assignment> config = sdk::UnpackAssignment(e.via.array.ptr[1], *space_);
    if (!config) BadState("a member does not fit the search space");
    m.config = std::move(*config);
    m.load_dir = StringAt(e, 2, "load directory");
    m.save_dir = StringAt(e, 3, "save directory");
    const msgpack::object& score = e.via.array.ptr[4];
    if (score.type != msgpack::type::NIL) {
      if (!sdk::IsNumber(score)) BadState("bad score");
      m.score = sdk::AsDouble(score, "score");
    }
    pop.push_back(std::move(m));
  }
  const int64_t p = sdk::AsInt64(*pos, "pos");
  if (p < -1 || p >= static_cast<int64_t>(pop.size())) BadState("pos out of range");
  auto member_at = [&](const msgpack::object& v) {
    if (v.type != msgpack::type::POSITIVE_INTEGER || v.via.u64 >= pop.size()) {
      BadState("member index out of range");
    }
    return static_cast<size_t>(v.via.u64);
  };
  std::map<int64_t, size_t> running;
  const msgpack::object* run = array("running");
  for (uint32_t i = 0; i < run->via.array.size; ++i) {
    const msgpack::object& e = run->via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 2 ||
        !sdk::IsInteger(e.via.array.ptr[0])) {
      BadState("bad running entry");
    }
    running[sdk::AsInt64(e.via.array.ptr[0], "running id")] = member_at(e.via.array.ptr[1]);
  }
  std::vector<size_t> finished;
  const msgpack::object* fin = array("finished");
  for (uint32_t i = 0; i < fin->via.array.size; ++i) {
    finished.push_back(member_at(fin->via.array.ptr[i]));
    if (!pop[finished.back()].score) BadState("a finished member has no score");
  }
  std::deque<int64_t> credits;
  const msgpack::object* cred = array("credits");
  for (uint32_t i = 0; i < cred->via.array.size; ++i) {
    if (!sdk::IsInteger(cred->via.array.ptr[i])) BadState("bad credit id");
    credits.push_back(sdk::AsInt64(cred->via.array.ptr[i], "credit id"));
  }

  seed_ = random.seed;
  rng_ = random.rng;
  step_ = sdk::AsInt64(*step, "step");
  population_ = std::move(pop);
  pos_ = p;
  running_ = std::move(running);
  finished_ = std::move(finished);
  credits_ = std::move(credits);
}

}  // namespace tunehost::plugins
