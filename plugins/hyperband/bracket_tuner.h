// The successive-halving bracket machinery shared by the `hyperband` and
// `bohb` tuners (NNI's Hyperband and BOHB advisors, written as tuners over
// tunehost's integer parameter ids and the credit pattern).
//
// A Hyperband iteration runs brackets s = s_max, s_max-1, ..., 0. Bracket s
// starts n = ceil((s_max+1)·eta^s/(s+1)) configurations with budget
// r_0 = floor(R/eta^s); round i runs the best n_i = floor(n/eta^i) of the
// previous round with budget r_i = floor(R/eta^(s-i)). Every parameter map
// handed out carries an extra key "TRIAL_BUDGET" = r_i (an integer), which
// trial code must honour. All of it is computed in integers, so s_max for
// R=81, eta=3 is 4 (log(81)/log(3) is 4.000000000000001 in floating point).
//
// Deviations from NNI (also in hyperband_tuner.h and bohb_tuner.h):
//   - Trials are tunehost's int64 parameter ids; NNI's string ids
//     "<bracket>_<round>_<n>" become a map id -> (bracket, round, slot).
//   - Ranking uses the FINAL result the host passes to ReceiveTrialResult
//     (the host turns a successful trial's last intermediate result into the
//     final one when it reported none). NNI ranks by the latest PERIODICAL
//     value, FINAL counting as the latest. A trial that ended without a
//     (finite) result, e.g. a failed one, ranks below every trial with a
//     result, ties keep the order the configurations were issued in; NNI
//     leaves such trials out of the ranking and crashes (IndexError) when
//     fewer than n_{i+1} trials of a round reported (issue #2467 is a
//     relative of that).
//   - Serial mode starts the next bracket once every trial of the current
//     bracket has ended (what NNI's documentation says: "the next bucket
//     will start strictly after the current bucket"). NNI's code starts it
//     as soon as the last round of the current bracket has been handed out.
//   - Like NNI, after bracket s = 0 a new Hyperband iteration starts with
//     s = s_max: the tuner never runs out of trials; maxTrialNumber or
//     maxExperimentDuration end the experiment. GenerateMultiple returns
//     false only while it waits for a round to finish (see the credit
//     pattern below), which the host reports as TUNER_NO_MORE_TRIAL until
//     a trial ends (NNI's serial mode sends NO_MORE_TRIAL_JOBS then too).
//   - Credit pattern: ids the host asks for while nothing can be handed out
//     are kept, oldest first, and served with host().SendTrial as soon as
//     configurations become available (on TrialEnd). NNI counts credit the
//     same way. An id the host refuses (a restored state's ids after a
//     restart, or an experiment that ended) is dropped, and its
//     configuration goes to the next id.
//   - R (hyperband) is limited to 10^6: bracket s_max alone generates about
//     R configurations at once.
//   - The tuner state (brackets, rounds, results, credits, RNG) is saved and
//     restored; NNI's advisors cannot be checkpointed.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"

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

// The common engine. Subclasses provide the configurations of a new
// bracket's first round and may watch results.
class BracketTuner : public sdk::Tuner {
 public:
  // `name` prefixes messages ("hyperband", "bohb"); `state_format` names the
  // saved state. `serial`: one bracket at a time.
  BracketTuner(sdk::HostRef host, std::string name, std::string state_format, bool maximize,
               Geometry geometry, bool serial, uint64_t seed);

  void UpdateSearchSpace(const msgpack::object& space) override;
  bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) override;
  bool GenerateMultiple(const std::vector<int64_t>& ids,
                        const std::function<void(int64_t, const msgpack::sbuffer&)>& emit) override;
  void ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                          const msgpack::object& value, double scalar, bool customized) override;
  void TrialEnd(int64_t parameter_id, bool success) override;
  std::string SaveState() override;
  void LoadState(std::string_view state) override;

  const Geometry& geometry() const { return geometry_; }
  bool maximize() const { return maximize_; }
  bool serial() const { return serial_; }
  uint64_t seed() const { return seed_; }
  // Ids kept as credit, oldest first.
  std::vector<int64_t> credits() const { return {run_.credits.begin(), run_.credits.end()}; }
  // Where an id handed out and not yet ended runs.
  std::optional<Placement> Locate(int64_t parameter_id) const;
  // Brackets started and not finished.
  size_t open_brackets() const { return run_.brackets.size(); }

 protected:
  const std::string& name() const { return name_; }
  const sdk::SearchSpace* space() const { return space_.get(); }
  std::mt19937_64& rng() { return rng_; }

  // A packed parameter map (without TRIAL_BUDGET) for a new bracket's
  // first round, whose trials will run with `budget`.
  virtual std::string NewConfiguration(int64_t budget) = 0;
  // A result of one of our trials: its configuration (packed map without
  // TRIAL_BUDGET), the budget it ran with, the metric.
  virtual void OnResult(const std::string& /*params*/, int64_t /*budget*/, double /*scalar*/) {}
  // A result for an id this tuner does not know (a customized trial).
  virtual void OnForeignResult(const msgpack::object& /*parameters*/, double /*scalar*/) {}
  // After a new search space was accepted.
  virtual void OnSpaceChanged() {}
  // Extra state of a subclass: PackExtra packs exactly ExtraEntries()
  // key/value pairs; UnpackExtra reads them from the state map (validate
  // everything before changing anything; throw BadState).
  virtual uint32_t ExtraEntries() const { return 0; }
  virtual void PackExtra(msgpack::packer<msgpack::sbuffer>& /*pk*/) const {}
  virtual void UnpackExtra(const msgpack::object& /*state*/) {}

  [[noreturn]] void BadState(const std::string& what) const;

 private:
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
  // Everything LoadState replaces at once.
  struct Progress {
    std::map<int64_t, Bracket> brackets;  // started and unfinished, by number
    std::deque<SlotRef> queue;            // to hand out, in order (NNI's generated_hyper_configs)
    std::deque<int64_t> credits;
    int next_s = 0;                       // NNI's curr_s
    int64_t iteration = 0;                // NNI's curr_hb
    int64_t next_bracket = 0;
  };

  void RequireSpace() const;
  // The next configuration to hand out, starting a bracket when allowed.
  std::optional<SlotRef> Next();
  void StartBracket();
  // Packs the map for a slot: the configuration plus TRIAL_BUDGET.
  msgpack::sbuffer PackSlot(const SlotRef& ref) const;
  void Issue(const SlotRef& ref, int64_t id);
  // Hands out configurations to kept ids while both exist.
  void ServeCredits();
  void FinishRound(int64_t bracket_number, int round);
  Slot& SlotAt(const SlotRef& ref) {
    return run_.brackets.at(ref.bracket).rounds[static_cast<size_t>(ref.round)].slots[ref.slot];
  }
  const Slot& SlotAt(const SlotRef& ref) const {
    return run_.brackets.at(ref.bracket).rounds[static_cast<size_t>(ref.round)].slots[ref.slot];
  }
  Progress UnpackProgress(const msgpack::object& o) const;

  std::string name_;
  std::string state_format_;
  bool maximize_;
  Geometry geometry_;
  bool serial_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::unique_ptr<sdk::SearchSpace> space_;  // stable address: models borrow it

  Progress run_;
  // Ids handed out and not ended yet (rebuilt from the slots on load).
  std::map<int64_t, SlotRef> issued_;
};

}  // namespace tunehost::plugins::hyperband
