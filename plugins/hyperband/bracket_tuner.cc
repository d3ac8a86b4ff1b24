#include "bracket_tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins::hyperband {

// --- Geometry ---

int Geometry::SMax(int64_t min_budget, int64_t max_budget, int64_t eta) {
  int s = 0;
  // min_budget·eta^(s+1) <= max_budget, written without overflow.
  for (int64_t b = min_budget; b <= max_budget / eta; b *= eta) ++s;
  return s;
}

Geometry::Geometry(int64_t R, int64_t eta, int s_max) : R_(R), eta_(eta), s_max_(s_max) {}

int64_t Geometry::Power(int k) const {
  int64_t p = 1;
  for (int j = 0; j < k; ++j) p *= eta_;
  return p;
}

int64_t Geometry::Count(int s, int i) const {
  // n = ceil((s_max+1)·eta^s/(s+1)), exactly.
  const int64_t n = ((s_max_ + 1) * Power(s) + s) / (s + 1);
  return n / Power(i);
}

int64_t Geometry::Budget(int s, int i) const { return R_ / Power(s - i); }

// --- BracketTuner ---

namespace {

constexpr int64_t kStateVersion = 1;

// Packs a stored configuration (a packed map) plus TRIAL_BUDGET, the budget
// last as NNI appends it.
void PackWithBudget(const std::string& config, int64_t budget,
                    msgpack::packer<msgpack::sbuffer>& out) {
  msgpack::object_handle h = msgpack::unpack(config.data(), config.size());
  const msgpack::object& map = h.get();
  out.pack_map(map.via.map.size + 1);
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    sdk::PackObject(out, map.via.map.ptr[i].key);
    sdk::PackObject(out, map.via.map.ptr[i].val);
  }
  out.pack(std::string(kBudgetKey));
  out.pack(budget);
}

}  // namespace

BracketTuner::BracketTuner(sdk::HostRef host, std::string name, std::string state_format,
                           bool maximize, Geometry geometry, bool serial, uint64_t seed)
    : Tuner(host),
      name_(std::move(name)),
      state_format_(std::move(state_format)),
      maximize_(maximize),
      geometry_(geometry),
      serial_(serial),
      seed_(seed) {
  rng_.seed(seed_);
  run_.next_s = geometry_.s_max();
}

void BracketTuner::BadState(const std::string& what) const {
  throw sdk::Error(TH_INVALID_ARGUMENT, name_ + ": saved state: " + what);
}

void BracketTuner::UpdateSearchSpace(const msgpack::object& space) {
  sdk::SearchSpace parsed = sdk::SearchSpace::Parse(space);
  for (const sdk::Parameter& p : parsed.params()) {
    if (p.nested) {
      throw sdk::Error(TH_INVALID_ARGUMENT,
                       name_ + ": search space key \"" + p.path +
                           "\": nested choices are not supported (as in NNI's Hyperband and BOHB)");
    }
    if (p.parent < 0 && p.name == kBudgetKey) {
      throw sdk::Error(TH_INVALID_ARGUMENT,
                       name_ + ": search space key \"" + p.path + "\": the name " + kBudgetKey +
                           " is reserved for the budget this tuner adds to every trial");
    }
  }
  // Configurations already generated keep their values (NNI keeps them too).
  space_ = std::make_unique<sdk::SearchSpace>(std::move(parsed));
  OnSpaceChanged();
}

void BracketTuner::RequireSpace() const {
  if (!space_) throw sdk::Error(TH_BAD_STATE, name_ + ": no search space yet");
}

void BracketTuner::StartBracket() {
  if (run_.next_s < 0) {
    // NNI: after bracket 0 a new Hyperband iteration starts over.
    run_.next_s = geometry_.s_max();
    ++run_.iteration;
    host().Info(name_ + ": Hyperband iteration " + std::to_string(run_.iteration - 1) +
                " has started all its brackets; iteration " + std::to_string(run_.iteration) +
                " starts over with s=" + std::to_string(run_.next_s));
  }
  const int s = run_.next_s--;
  const int64_t number = run_.next_bracket++;
  const int64_t n = geometry_.Count(s, 0);
  const int64_t budget = geometry_.Budget(s, 0);
  Bracket b;
  b.iteration = run_.iteration;
  b.s = s;
  b.configs.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) b.configs.push_back(NewConfiguration(budget));
  Round first;
  first.slots.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) first.slots[static_cast<size_t>(k)].config = k;
  b.rounds.push_back(std::move(first));
  run_.brackets.emplace(number, std::move(b));
  for (int64_t k = 0; k < n; ++k) run_.queue.push_back(SlotRef{number, 0, static_cast<size_t>(k)});
  host().Info(name_ + ": bracket s=" + std::to_string(s) + " of iteration " +
              std::to_string(run_.iteration) + " starts: " + std::to_string(n) +
              " configurations with " + kBudgetKey + " " + std::to_string(budget));
}

std::optional<BracketTuner::SlotRef> BracketTuner::Next() {
  if (run_.queue.empty()) {
    // Parallelism: a new bracket whenever nothing else can be handed out.
    // Serial: only when no bracket is running.
    if (serial_ && !run_.brackets.empty()) return std::nullopt;
    StartBracket();
  }
  SlotRef ref = run_.queue.front();
  run_.queue.pop_front();
  return ref;
}

msgpack::sbuffer BracketTuner::PackSlot(const SlotRef& ref) const {
  const Bracket& b = run_.brackets.at(ref.bracket);
  const Slot& slot = SlotAt(ref);
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  PackWithBudget(b.configs[static_cast<size_t>(slot.config)], geometry_.Budget(b.s, ref.round),
                 pk);
  return buffer;
}

void BracketTuner::Issue(const SlotRef& ref, int64_t id) {
  SlotAt(ref).id = id;
  issued_[id] = ref;
}

void BracketTuner::ServeCredits() {
  while (!run_.credits.empty()) {
    std::optional<SlotRef> ref = Next();
    if (!ref) return;
    const int64_t id = run_.credits.front();
    run_.credits.pop_front();
    const th_status st = host().SendTrial(id, PackSlot(*ref));
    if (st == TH_OK) {
      Issue(*ref, id);
      continue;
    }
    // The configuration goes to the next id.
    run_.queue.push_front(*ref);
    if (st == TH_NOT_SUPPORTED || st == TH_BAD_STATE) {
      host().Warn(name_ + ": the host takes no more trials later (send_trial status " +
                  std::to_string(static_cast<int>(st)) + "); " +
                  std::to_string(run_.credits.size() + 1) + " waiting ids dropped");
      run_.credits.clear();
      return;
    }
    host().Warn(name_ + ": the host refused parameter id " + std::to_string(id) +
                " (send_trial status " + std::to_string(static_cast<int>(st)) +
                "); id dropped");
  }
}

bool BracketTuner::GenerateMultiple(
    const std::vector<int64_t>& ids,
    const std::function<void(int64_t, const msgpack::sbuffer&)>& emit) {
  RequireSpace();
  ServeCredits();  // older ids first
  bool all = true;
  for (int64_t id : ids) {
    std::optional<SlotRef> ref;
    if (run_.credits.empty()) ref = Next();
    if (!ref) {
      // Nothing to hand out until a round finishes: keep the id (credit).
      run_.credits.push_back(id);
      all = false;
      continue;
    }
    try {
      emit(id, PackSlot(*ref));
    } catch (...) {
      run_.queue.push_front(*ref);
      throw;
    }
    Issue(*ref, id);
  }
  if (!all) {
    host().Debug(name_ + ": waiting for running trials; " + std::to_string(run_.credits.size()) +
                 " ids kept to be served later");
  }
  return all;
}

bool BracketTuner::GenerateParameters(int64_t parameter_id,
                                      msgpack::packer<msgpack::sbuffer>& out) {
  bool emitted = false;
  GenerateMultiple({parameter_id}, [&](int64_t, const msgpack::sbuffer& params) {
    // Raw bytes of one packed map (pack_bin_body only appends).
    out.pack_bin_body(params.data(), static_cast<uint32_t>(params.size()));
    emitted = true;
  });
  return emitted;
}

void BracketTuner::ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                                      const msgpack::object& /*value*/, double scalar,
                                      bool /*customized*/) {
  auto it = issued_.find(parameter_id);
  if (it == issued_.end()) {
    OnForeignResult(parameters, scalar);
    return;
  }
  Slot& slot = SlotAt(it->second);
  if (slot.result || !std::isfinite(scalar)) return;  // NaN/inf rank as no result
  slot.result = scalar;
  const Bracket& b = run_.brackets.at(it->second.bracket);
  OnResult(b.configs[static_cast<size_t>(slot.config)], geometry_.Budget(b.s, it->second.round),
           scalar);
}

void BracketTuner::TrialEnd(int64_t parameter_id, bool success) {
  auto it = issued_.find(parameter_id);
  if (it == issued_.end()) {
    host().Debug(name_ + ": end of parameter id " + std::to_string(parameter_id) +
                 ", not one of this tuner's running trials, ignored");
    return;
  }
  const SlotRef ref = it->second;
  issued_.erase(it);
  Slot& slot = SlotAt(ref);
  slot.ended = true;
  if (!slot.result) {
    host().Debug(name_ + ": parameter id " + std::to_string(parameter_id) + " ended " +
                 (success ? "without a result" : "failed") + "; it ranks last in its round");
  }
  Round& round = run_.brackets.at(ref.bracket).rounds[static_cast<size_t>(ref.round)];
  if (++round.ended == round.slots.size()) FinishRound(ref.bracket, ref.round);
  ServeCredits();
}

void BracketTuner::FinishRound(int64_t bracket_number, int round_index) {
  Bracket& b = run_.brackets.at(bracket_number);
  const Round& round = b.rounds[static_cast<size_t>(round_index)];
  // Best first; no result ranks last; ties keep the issue order.
  std::vector<size_t> order(round.slots.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const std::optional<double>& a = round.slots[x].result;
    const std::optional<double>& c = round.slots[y].result;
    if (!a || !c) return a.has_value() && !c.has_value();
    return maximize_ ? *a > *c : *a < *c;
  });
  if (round_index == b.s) {
    const std::optional<double>& best = round.slots[order.front()].result;
    host().Info(name_ + ": bracket s=" + std::to_string(b.s) + " of iteration " +
                std::to_string(b.iteration) + " finished" +
                (best ? "; best result at the full budget: " + std::to_string(*best) : ""));
    run_.brackets.erase(bracket_number);
    return;
  }
  const int next = round_index + 1;
  const int64_t n = geometry_.Count(b.s, next);
  const size_t ran = round.slots.size();
  Round promoted;
  promoted.slots.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    promoted.slots[static_cast<size_t>(k)].config = round.slots[order[static_cast<size_t>(k)]].config;
  }
  b.rounds.push_back(std::move(promoted));  // `round` dangles from here on
  for (int64_t k = 0; k < n; ++k) {
    run_.queue.push_back(SlotRef{bracket_number, next, static_cast<size_t>(k)});
  }
  host().Info(name_ + ": bracket s=" + std::to_string(b.s) + " round " + std::to_string(next) +
              ": the best " + std::to_string(n) + " of " + std::to_string(ran) +
              " configurations continue with " + kBudgetKey + " " +
              std::to_string(geometry_.Budget(b.s, next)));
}

std::optional<Placement> BracketTuner::Locate(int64_t parameter_id) const {
  auto it = issued_.find(parameter_id);
  if (it == issued_.end()) return std::nullopt;
  const Bracket& b = run_.brackets.at(it->second.bracket);
  Placement p;
  p.iteration = b.iteration;
  p.s = b.s;
  p.round = it->second.round;
  p.config = SlotAt(it->second).config;
  p.budget = geometry_.Budget(b.s, it->second.round);
  return p;
}

// --- State ---
//
// A map: format, version, seed, rng, R, eta, next_s, iteration,
// next_bracket, credits [id...], queue [[bracket, round, slot]...],
// brackets [[number, iteration, s, [config bin...],
//            [[[config, id, result|nil, ended]...]...]]...],
// then the subclass's entries.

std::string BracketTuner::SaveState() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  sdk::PackStateHeader(pk, 12 + ExtraEntries(), state_format_, kStateVersion);
  sdk::PackSavedRandom(pk, seed_, rng_);
  pk.pack(std::string("R"));
  pk.pack(geometry_.R());
  pk.pack(std::string("eta"));
  pk.pack(geometry_.eta());
  pk.pack(std::string("next_s"));
  pk.pack(run_.next_s);
  pk.pack(std::string("iteration"));
  pk.pack(run_.iteration);
  pk.pack(std::string("next_bracket"));
  pk.pack(run_.next_bracket);
  pk.pack(std::string("credits"));
  pk.pack_array(static_cast<uint32_t>(run_.credits.size()));
  for (int64_t id : run_.credits) pk.pack(id);
  pk.pack(std::string("queue"));
  pk.pack_array(static_cast<uint32_t>(run_.queue.size()));
  for (const SlotRef& r : run_.queue) {
    pk.pack_array(3);
    pk.pack(r.bracket);
    pk.pack(r.round);
    pk.pack(static_cast<uint64_t>(r.slot));
  }
  pk.pack(std::string("brackets"));
  pk.pack_array(static_cast<uint32_t>(run_.brackets.size()));
  for (const auto& [number, b] : run_.brackets) {
    pk.pack_array(5);
    pk.pack(number);
    pk.pack(b.iteration);
    pk.pack(b.s);
    pk.pack_array(static_cast<uint32_t>(b.configs.size()));
    for (const std::string& c : b.configs) {
      pk.pack_bin(static_cast<uint32_t>(c.size()));
      pk.pack_bin_body(c.data(), static_cast<uint32_t>(c.size()));
    }
    pk.pack_array(static_cast<uint32_t>(b.rounds.size()));
    for (const Round& round : b.rounds) {
      pk.pack_array(static_cast<uint32_t>(round.slots.size()));
      for (const Slot& slot : round.slots) {
        pk.pack_array(4);
        pk.pack(slot.config);
        pk.pack(slot.id);
        if (slot.result) {
          sdk::PackFloat64(pk, *slot.result);
        } else {
          pk.pack_nil();
        }
        pk.pack(slot.ended);
      }
    }
  }
  PackExtra(pk);
  return std::string(buffer.data(), buffer.size());
}

namespace {

const msgpack::object& Array(const msgpack::object* o, size_t size, const char* what,
                             const std::function<void(const std::string&)>& bad) {
  if (o == nullptr || o->type != msgpack::type::ARRAY ||
      (size != 0 && o->via.array.size != size)) {
    bad(std::string(what) + " is not an array" +
        (size != 0 ? " of " + std::to_string(size) : std::string()));
  }
  return *o;
}

int64_t Int(const msgpack::object* o, const char* what, int64_t min, int64_t max,
            const std::function<void(const std::string&)>& bad) {
  if (o == nullptr || !sdk::IsInteger(*o)) bad(std::string(what) + " is not an integer");
  if (o->type == msgpack::type::POSITIVE_INTEGER &&
      o->via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    bad(std::string(what) + " is out of range");
  }
  const int64_t v =
      o->type == msgpack::type::POSITIVE_INTEGER ? static_cast<int64_t>(o->via.u64) : o->via.i64;
  if (v < min || v > max) bad(std::string(what) + " is out of range");
  return v;
}

}  // namespace

BracketTuner::Progress BracketTuner::UnpackProgress(const msgpack::object& o) const {
  const auto bad = [this](const std::string& what) { BadState(what); };
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int s_max = geometry_.s_max();
  if (Int(sdk::FindKey(o, "R"), "R", 0, kMax, bad) != geometry_.R() ||
      Int(sdk::FindKey(o, "eta"), "eta", 0, kMax, bad) != geometry_.eta()) {
    BadState("it was saved with other budgets (R/max_budget or eta) than this tuner's class_args");
  }
  Progress p;
  p.next_s = static_cast<int>(Int(sdk::FindKey(o, "next_s"), "next_s", -1, s_max, bad));
  p.iteration = Int(sdk::FindKey(o, "iteration"), "iteration", 0, kMax, bad);
  p.next_bracket = Int(sdk::FindKey(o, "next_bracket"), "next_bracket", 0, kMax, bad);

  const msgpack::object& brackets = Array(sdk::FindKey(o, "brackets"), 0, "brackets", bad);
  for (uint32_t k = 0; k < brackets.via.array.size; ++k) {
    const msgpack::object& e = Array(&brackets.via.array.ptr[k], 5, "a bracket", bad);
    const msgpack::object* f = e.via.array.ptr;
    const int64_t number = Int(&f[0], "a bracket number", 0, p.next_bracket - 1, bad);
    Bracket b;
    b.iteration = Int(&f[1], "a bracket iteration", 0, p.iteration, bad);
    b.s = static_cast<int>(Int(&f[2], "a bracket s", 0, s_max, bad));
    const msgpack::object& configs = Array(&f[3], 0, "a bracket's configurations", bad);
    if (configs.via.array.size != static_cast<uint32_t>(geometry_.Count(b.s, 0))) {
      bad("a bracket has the wrong number of configurations");
    }
    for (uint32_t c = 0; c < configs.via.array.size; ++c) {
      const msgpack::object& bin = configs.via.array.ptr[c];
      if (bin.type != msgpack::type::BIN) bad("a configuration is not binary");
      std::string packed(bin.via.bin.ptr, bin.via.bin.size);
      try {
        msgpack::object_handle h = msgpack::unpack(packed.data(), packed.size());
        if (h.get().type != msgpack::type::MAP) bad("a configuration is not a map");
      } catch (const msgpack::unpack_error&) {
        bad("a configuration is not MessagePack");
      }
      b.configs.push_back(std::move(packed));
    }
    const msgpack::object& rounds = Array(&f[4], 0, "a bracket's rounds", bad);
    if (rounds.via.array.size == 0 || rounds.via.array.size > static_cast<uint32_t>(b.s + 1)) {
      bad("a bracket has the wrong number of rounds");
    }
    for (uint32_t i = 0; i < rounds.via.array.size; ++i) {
      const msgpack::object& slots = Array(&rounds.via.array.ptr[i], 0, "a round", bad);
      if (slots.via.array.size != static_cast<uint32_t>(geometry_.Count(b.s, static_cast<int>(i)))) {
        bad("a round has the wrong number of configurations");
      }
      Round round;
      for (uint32_t j = 0; j < slots.via.array.size; ++j) {
        const msgpack::object& se = Array(&slots.via.array.ptr[j], 4, "a slot", bad);
        Slot slot;
        slot.config = Int(&se.via.array.ptr[0], "a slot's configuration", 0,
                          static_cast<int64_t>(b.configs.size()) - 1, bad);
        slot.id = Int(&se.via.array.ptr[1], "a slot's id", -1, kMax, bad);
        const msgpack::object& r = se.via.array.ptr[2];
        if (r.type != msgpack::type::NIL) {
          if (!sdk::IsNumber(r)) bad("a slot's result is not a number");
          slot.result = sdk::AsDouble(r, "result");
        }
        if (se.via.array.ptr[3].type != msgpack::type::BOOLEAN) bad("a slot's ended is not a bool");
        slot.ended = se.via.array.ptr[3].via.boolean;
        if (slot.ended && slot.id < 0) bad("a slot ended without an id");
        if (slot.ended) ++round.ended;
        round.slots.push_back(std::move(slot));
      }
      // Only the current (last) round may be unfinished.
      if (i + 1 < rounds.via.array.size && round.ended != round.slots.size()) {
        bad("an earlier round is unfinished");
      }
      b.rounds.push_back(std::move(round));
    }
    if (!p.brackets.emplace(number, std::move(b)).second) bad("a bracket number repeats");
  }

  const msgpack::object& queue = Array(sdk::FindKey(o, "queue"), 0, "queue", bad);
  std::set<std::tuple<int64_t, int, size_t>> queued;
  for (uint32_t k = 0; k < queue.via.array.size; ++k) {
    const msgpack::object& e = Array(&queue.via.array.ptr[k], 3, "a queue entry", bad);
    SlotRef r;
    r.bracket = Int(&e.via.array.ptr[0], "a queued bracket", 0, kMax, bad);
    auto b = p.brackets.find(r.bracket);
    if (b == p.brackets.end()) bad("a queued configuration names an unknown bracket");
    r.round = static_cast<int>(Int(&e.via.array.ptr[1], "a queued round", 0,
                                   static_cast<int64_t>(b->second.rounds.size()) - 1, bad));
    const Round& round = b->second.rounds[static_cast<size_t>(r.round)];
    r.slot = static_cast<size_t>(Int(&e.via.array.ptr[2], "a queued slot", 0,
                                     static_cast<int64_t>(round.slots.size()) - 1, bad));
    if (round.slots[r.slot].id >= 0) bad("a queued configuration was handed out already");
    if (!queued.insert({r.bracket, r.round, r.slot}).second) bad("a configuration is queued twice");
    p.queue.push_back(r);
  }
  // Every configuration not handed out yet must be queued, or its round
  // would never end.
  size_t waiting = 0;
  for (const auto& [number, b] : p.brackets) {
    for (const Round& round : b.rounds) {
      for (const Slot& slot : round.slots) waiting += slot.id < 0 ? 1 : 0;
    }
  }
  if (waiting != p.queue.size()) bad("configurations not handed out are missing from the queue");

  const msgpack::object& credits = Array(sdk::FindKey(o, "credits"), 0, "credits", bad);
  for (uint32_t k = 0; k < credits.via.array.size; ++k) {
    p.credits.push_back(Int(&credits.via.array.ptr[k], "a credit", 0, kMax, bad));
  }
  return p;
}

void BracketTuner::LoadState(std::string_view state) {
  msgpack::object_handle h = sdk::OpenState(state, name_, state_format_, kStateVersion);
  const msgpack::object& o = h.get();
  sdk::SavedRandom random = sdk::ReadSavedRandom(o, name_);
  Progress progress = UnpackProgress(o);
  std::map<int64_t, SlotRef> issued;
  for (const auto& [number, b] : progress.brackets) {
    for (size_t i = 0; i < b.rounds.size(); ++i) {
      for (size_t j = 0; j < b.rounds[i].slots.size(); ++j) {
        const Slot& slot = b.rounds[i].slots[j];
        if (slot.id < 0 || slot.ended) continue;
        if (!issued.emplace(slot.id, SlotRef{number, static_cast<int>(i), j}).second) {
          BadState("a parameter id runs twice");
        }
      }
    }
  }
  UnpackExtra(o);  // validates before it changes anything
  seed_ = random.seed;
  rng_ = random.rng;
  run_ = std::move(progress);
  issued_ = std::move(issued);
}

}  // namespace tunehost::plugins::hyperband
