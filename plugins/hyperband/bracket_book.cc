#include "bracket_book.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

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

// --- BracketBook ---

namespace {

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

BracketBook::BracketBook(sdk::HostRef host, std::string name, Geometry geometry, bool serial,
                         bool maximize)
    : host_(host),
      name_(std::move(name)),
      geometry_(geometry),
      serial_(serial),
      maximize_(maximize) {
  run_.next_s = geometry_.s_max();
}

void BracketBook::StartBracket(const NewConfiguration& make) {
  if (run_.next_s < 0) {
    // NNI: after bracket 0 a new Hyperband iteration starts over.
    run_.next_s = geometry_.s_max();
    ++run_.iteration;
    host_.Info(name_ + ": Hyperband iteration " + std::to_string(run_.iteration - 1) +
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
  for (int64_t k = 0; k < n; ++k) b.configs.push_back(make(budget));
  Round first;
  first.slots.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) first.slots[static_cast<size_t>(k)].config = k;
  b.rounds.push_back(std::move(first));
  run_.brackets.emplace(number, std::move(b));
  for (int64_t k = 0; k < n; ++k) run_.queue.push_back(SlotRef{number, 0, static_cast<size_t>(k)});
  host_.Info(name_ + ": bracket s=" + std::to_string(s) + " of iteration " +
             std::to_string(run_.iteration) + " starts: " + std::to_string(n) +
             " configurations with " + kBudgetKey + " " + std::to_string(budget));
}

std::optional<SlotRef> BracketBook::Next(const NewConfiguration& make) {
  if (run_.queue.empty()) {
    // Parallelism: a new bracket whenever nothing else can be handed out.
    // Serial: only when no bracket is running.
    if (serial_ && !run_.brackets.empty()) return std::nullopt;
    StartBracket(make);
  }
  SlotRef ref = run_.queue.front();
  run_.queue.pop_front();
  return ref;
}

msgpack::sbuffer BracketBook::Pack(const SlotRef& ref) const {
  const Bracket& b = run_.brackets.at(ref.bracket);
  const Slot& slot = SlotAt(ref);
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  PackWithBudget(b.configs[static_cast<size_t>(slot.config)], geometry_.Budget(b.s, ref.round),
                 pk);
  return buffer;
}

void BracketBook::Issue(const SlotRef& ref, int64_t id) {
  SlotAt(ref).id = id;
  issued_[id] = ref;
}

std::optional<BracketBook::Run> BracketBook::Record(int64_t id, double scalar) {
  auto it = issued_.find(id);
  if (it == issued_.end()) return std::nullopt;
  Slot& slot = SlotAt(it->second);
  if (slot.result || !std::isfinite(scalar)) return std::nullopt;  // NaN/inf rank as no result
  slot.result = scalar;
  const Bracket& b = run_.brackets.at(it->second.bracket);
  return Run{&b.configs[static_cast<size_t>(slot.config)], geometry_.Budget(b.s, it->second.round)};
}

bool BracketBook::End(int64_t id, bool success) {
  auto it = issued_.find(id);
  if (it == issued_.end()) return false;
  const SlotRef ref = it->second;
  issued_.erase(it);
  Slot& slot = SlotAt(ref);
  slot.ended = true;
  if (!slot.result) {
    host_.Debug(name_ + ": parameter id " + std::to_string(id) + " ended " +
                (success ? "without a result" : "failed") + "; it ranks last in its round");
  }
  Round& round = run_.brackets.at(ref.bracket).rounds[static_cast<size_t>(ref.round)];
  if (++round.ended == round.slots.size()) FinishRound(ref.bracket, ref.round);
  return true;
}

void BracketBook::FinishRound(int64_t bracket_number, int round_index) {
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
    host_.Info(name_ + ": bracket s=" + std::to_string(b.s) + " of iteration " +
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
    promoted.slots[static_cast<size_t>(k)].config =
        round.slots[order[static_cast<size_t>(k)]].config;
  }
  b.rounds.push_back(std::move(promoted));  // `round` dangles from here on
  for (int64_t k = 0; k < n; ++k) {
    run_.queue.push_back(SlotRef{bracket_number, next, static_cast<size_t>(k)});
  }
  host_.Info(name_ + ": bracket s=" + std::to_string(b.s) + " round " + std::to_string(next) +
             ": the best " + std::to_string(n) + " of " + std::to_string(ran) +
             " configurations continue with " + kBudgetKey + " " +
             std::to_string(geometry_.Budget(b.s, next)));
}

std::optional<Placement> BracketBook::Locate(int64_t id) const {
  auto it = issued_.find(id);
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

void BracketBook::Restore(Progress progress) {
  std::map<int64_t, SlotRef> issued;
  for (const auto& [number, b] : progress.brackets) {
    for (size_t i = 0; i < b.rounds.size(); ++i) {
      for (size_t j = 0; j < b.rounds[i].slots.size(); ++j) {
        const Slot& slot = b.rounds[i].slots[j];
        if (slot.id >= 0 && !slot.ended) {
          issued.emplace(slot.id, SlotRef{number, static_cast<int>(i), j});
        }
      }
    }
  }
  run_ = std::move(progress);
  issued_ = std::move(issued);
}

}  // namespace tunehost::plugins::hyperband
