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
//     fewer than n_{i+1} trials of a round reported (microsoft/nni issue 2467 is a
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
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "bracket_book.h"
#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins::hyperband {

// The common engine as a tuner: hands out the BracketBook's configurations
// for the host's ids (keeping ids as credit while none can be handed out),
// feeds it results and trial ends, saves and restores it. Subclasses
// provide the configurations of a new bracket's first round and may watch
// results.
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

  const Geometry& geometry() const { return book_.geometry(); }
  bool maximize() const { return maximize_; }
  bool serial() const { return serial_; }
  uint64_t seed() const { return seed_; }
  // Ids kept as credit, oldest first.
  std::vector<int64_t> credits() const { return {book_.credits().begin(), book_.credits().end()}; }
  // Where an id handed out and not yet ended runs.
  std::optional<Placement> Locate(int64_t parameter_id) const { return book_.Locate(parameter_id); }
  // Brackets started and not finished.
  size_t open_brackets() const { return book_.open_brackets(); }

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
  void RequireSpace() const;
  // The next configuration to hand out, starting a bracket when allowed.
  std::optional<SlotRef> Next();
  // Hands out configurations to kept ids while both exist.
  void ServeCredits();

  std::string name_;
  std::string state_format_;
  bool maximize_;
  bool serial_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::unique_ptr<sdk::SearchSpace> space_;  // stable address: models borrow it
  BracketBook book_;
};

}  // namespace tunehost::plugins::hyperband
