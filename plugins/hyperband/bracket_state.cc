#include "bracket_state.h"

#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins::hyperband {
namespace {

const msgpack::object& Array(const msgpack::object* o, size_t size, const char* what,
                             const OnBadState& bad) {
  if (o == nullptr || o->type != msgpack::type::ARRAY ||
      (size != 0 && o->via.array.size != size)) {
    bad(std::string(what) + " is not an array" +
        (size != 0 ? " of " + std::to_string(size) : std::string()));
  }
  return *o;
}

int64_t Int(const msgpack::object* o, const char* what, int64_t min, int64_t max,
            const OnBadState& bad) {
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

void PackProgress(const Progress& p, msgpack::packer<msgpack::sbuffer>& pk) {
  pk.pack(std::string("next_s"));
  pk.pack(p.next_s);
  pk.pack(std::string("iteration"));
  pk.pack(p.iteration);
  pk.pack(std::string("next_bracket"));
  pk.pack(p.next_bracket);
  pk.pack(std::string("credits"));
  pk.pack_array(static_cast<uint32_t>(p.credits.size()));
  for (int64_t id : p.credits) pk.pack(id);
  pk.pack(std::string("queue"));
  pk.pack_array(static_cast<uint32_t>(p.queue.size()));
  for (const SlotRef& r : p.queue) {
    pk.pack_array(3);
    pk.pack(r.bracket);
    pk.pack(r.round);
    pk.pack(static_cast<uint64_t>(r.slot));
  }
  pk.pack(std::string("brackets"));
  pk.pack_array(static_cast<uint32_t>(p.brackets.size()));
  for (const auto& [number, b] : p.brackets) {
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
}

Progress UnpackProgress(const msgpack::object& o, const Geometry& geometry,
                        const OnBadState& bad) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int s_max = geometry.s_max();
  if (Int(sdk::FindKey(o, "R"), "R", 0, kMax, bad) != geometry.R() ||
      Int(sdk::FindKey(o, "eta"), "eta", 0, kMax, bad) != geometry.eta()) {
    bad("it was saved with other budgets (R/max_budget or eta) than this tuner's class_args");
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
    if (configs.via.array.size != static_cast<uint32_t>(geometry.Count(b.s, 0))) {
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
      if (slots.via.array.size !=
          static_cast<uint32_t>(geometry.Count(b.s, static_cast<int>(i)))) {
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
  // A parameter id runs in one slot at most.
  std::set<int64_t> running;
  for (const auto& [number, b] : p.brackets) {
    for (const Round& round : b.rounds) {
      for (const Slot& slot : round.slots) {
        if (slot.id >= 0 && !slot.ended && !running.insert(slot.id).second) {
          bad("a parameter id runs twice");
        }
      }
    }
  }
  return p;
}

}  // namespace tunehost::plugins::hyperband
