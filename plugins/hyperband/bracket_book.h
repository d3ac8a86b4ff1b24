// The bookkeeping of successive-halving brackets (see bracket_tuner.h for
// the bracket table): which configurations each bracket holds, which round
// it is in, what is queued to be handed out, which host id runs which slot
// and the results of a round, ranked when its last trial ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"

namespace tunehost::plugins::hyperband {

// The key added to every parameter map (NNI's _KEY).
inline constexpr const char* kBudgetKey = "TRIAL_BUDGET";

// Bracket sizes and budgets, in integers.
class Geometry {
 public:
  // The largest s with min_budget·eta^s <= max_budget (NNI's
  // floor(log_eta(max/min) + 1e-6)); hyperband uses min_budget = 1,
  // max_budget = R. Needs 1 <= min_budget <= max_budget, eta >= 2.
  static int SMax(int64_t min_budget, int64_t max_budget, int64_t eta);

  // R is the largest budget (hyperband's R, BOHB's max_budget).
  Geometry(int64_t R, int64_t eta, int s_max);

  int64_t R() const { return R_; }
  int64_t eta() const { return eta_; }
  int s_max() const { return s_max_; }

  // Configurations of bracket s in round i (i <= s): n_i = floor(n/eta^i).
  int64_t Count(int s, int i) const;
  // Their budget: r_i = floor(r·eta^i) with r = R/eta^s, i.e. floor(R/eta^(s-i)).
  int64_t Budget(int s, int i) const;

 private:
  int64_t Power(int k) const;  // eta^k, k <= s_max (so eta^k <= R)

  int64_t R_;
  int64_t eta_;
  int s_max_;
};

// Where a host parameter id runs: exposed for tests and logs.
struct Placement {
  int64_t iteration = 0;  // Hyperband iteration (NNI's curr_hb), from 0
  int s = 0;              // bracket
  int round = 0;          // i
  int64_t config = 0;     // configuration index within the bracket
  int64_t budget = 0;     // r_i
};

// One configuration's run in one round.
struct Slot {
  int64_t config = 0;            // index in Bracket::configs
  int64_t id = -1;               // host id once handed out
  std::optional<double> result;  // finite final metric
  bool ended = false;
};
struct Round {
  std::vector<Slot> slots;
  size_t ended = 0;
};
struct Bracket {
  int64_t iteration = 0;
  int s = 0;
  std::vector<std::string> configs;  // packed maps without TRIAL_BUDGET
  std::vector<Round> rounds;         // up to the current round
};
struct SlotRef {
  int64_t bracket = 0;  // key in Progress::brackets
  int round = 0;
  size_t slot = 0;
};
// Everything a saved state restores at once (bracket_state.h).
struct Progress {
  std::map<int64_t, Bracket> brackets;  // started and unfinished, by number
  std::deque<SlotRef> queue;            // to hand out, in order (NNI's generated_hyper_configs)
  std::deque<int64_t> credits;          // ids waiting for a configuration, oldest first
  int next_s = 0;                       // NNI's curr_s
  int64_t iteration = 0;                // NNI's curr_hb
  int64_t next_bracket = 0;
};

class BracketBook {
 public:
  // The packed parameter map (without TRIAL_BUDGET) of a new bracket's
  // first-round configuration, whose trial will run with `budget`.
  using NewConfiguration = std::function<std::string(int64_t budget)>;
  // What a recorded result ran: its configuration and budget.
  struct Run {
    const std::string* config = nullptr;  // valid until the book changes
    int64_t budget = 0;
  };

  // `name` prefixes the progress messages logged through `host`.
  BracketBook(sdk::HostRef host, std::string name, Geometry geometry, bool serial,
              bool maximize);

  const Geometry& geometry() const { return geometry_; }
  const Progress& progress() const { return run_; }
  std::deque<int64_t>& credits() { return run_.credits; }
  const std::deque<int64_t>& credits() const { return run_.credits; }
  size_t open_brackets() const { return run_.brackets.size(); }

  // The next configuration to hand out, starting a bracket when allowed
  // (parallelism: whenever the queue is empty; serial: when no bracket runs).
  std::optional<SlotRef> Next(const NewConfiguration& make);
  // Puts back what Next gave when it could not be handed out (it goes first).
  void PutBack(const SlotRef& ref) { run_.queue.push_front(ref); }
  // The map for a slot: its configuration plus TRIAL_BUDGET.
  msgpack::sbuffer Pack(const SlotRef& ref) const;
  void Issue(const SlotRef& ref, int64_t id);

  // True for an id handed out and not ended.
  bool Issued(int64_t id) const { return issued_.count(id) > 0; }
  // Keeps the first finite result of an issued id; what it ran when kept.
  std::optional<Run> Record(int64_t id, double scalar);
  // The end of an issued id (false: not one); finishes its round when it
  // was the round's last.
  bool End(int64_t id, bool success);
  std::optional<Placement> Locate(int64_t id) const;

  // Replaces everything with a validated saved state (bracket_state.h).
  void Restore(Progress progress);

 private:
  void StartBracket(const NewConfiguration& make);
  void FinishRound(int64_t bracket_number, int round);
  Slot& SlotAt(const SlotRef& ref) {
    return run_.brackets.at(ref.bracket).rounds[static_cast<size_t>(ref.round)].slots[ref.slot];
  }
  const Slot& SlotAt(const SlotRef& ref) const {
    return run_.brackets.at(ref.bracket).rounds[static_cast<size_t>(ref.round)].slots[ref.slot];
  }

  sdk::HostRef host_;
  std::string name_;
  Geometry geometry_;
  bool serial_;
  bool maximize_;
  Progress run_;
  // Ids handed out and not ended yet (rebuilt from the slots on Restore).
  std::map<int64_t, SlotRef> issued_;
};

}  // namespace tunehost::plugins::hyperband
