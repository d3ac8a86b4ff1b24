// The `evolution` tuner (org.tunehost.evolution): NNI's EvolutionTuner
// (naive evolution, after "Large-Scale Evolution of Image Classifiers").
//
// A search space starts a population of population_size random individuals
// without results. Each new trial takes the first individual without a result
// if there is one; otherwise the population is shuffled, the first two are
// compared, the better one stays, a copy of it with exactly one randomly
// chosen active parameter re-sampled becomes the trial (re-sampling a nested
// choice re-samples its option's sub-space too) and the worse one is dropped.
// A result adds the trial's configuration to the population with its fitness
// (the metric, negated when minimizing). A trial that ends without a result
// (failed, cancelled) is replaced by a random individual.
//
// Credit: while population_size trials are running, no trial is generated;
// the ids the host asked for are kept, in order, and a generate reports no
// more trials (TH_NO_MORE_TRIALS). Each trial end then frees a slot and the
// oldest kept id is served at once through host send_trial.
//
// Deviations from NNI (documented for the README):
//   - Every kept id is served. NNI serves only while credit > 1, so its last
//     credit is never served and one concurrency slot is lost for good.
//   - class_args `seed` (tunehost addition): one seeded std::mt19937_64 for
//     every draw, so a run can be repeated (NNI uses unseeded numpy and Python
//     generators).
//   - population_size must be in [1, 99999] (NNI accepts 0, then fails with
//     "The population is empty"); should the population ever be empty, a
//     random individual is added instead of failing.
//   - A trial is replaced by a random individual when it ends without a
//     result, whatever its status (NNI: only when not successful; a failed
//     trial that had reported a result makes NNI raise KeyError).
//   - ImportData adds each record as an individual with its result (NNI's
//     import_data does nothing).
//   - A result or trial end for an id that is not running here is ignored with
//     a warning (NNI raises), except a customized trial's result, which joins
//     the population when its parameters fit the search space.
//   - A new search space starts a new random population as in NNI; running
//     trials whose parameters fit the new space still join it with their
//     results.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <msgpack.hpp>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/running_configs.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins {

class EvolutionTuner : public sdk::Tuner {
 public:
  static constexpr int64_t kDefaultPopulationSize = 32;
  static constexpr int64_t kMaxPopulationSize = 99999;  // NNI's validator

  struct Individual {
    sdk::Assignment config;
    // The metric (negated when minimizing): larger is better. None until the
    // individual has run.
    std::optional<double> fitness;
  };

  // class_args: optimize_mode ("maximize" by default), population_size (32,
  // an integer in [1, 99999]), seed. Anything else is refused with
  // Error(TH_INVALID_ARGUMENT) naming the argument.
  EvolutionTuner(sdk::HostRef host, const msgpack::object& class_args);

  void UpdateSearchSpace(const msgpack::object& space) override;
  // False (nothing packed) when population_size trials are running: the id is
  // kept as credit and served later through host send_trial.
  bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) override;
  // Unlike the default, goes on after an id is credited, so that every id of
  // the request is either emitted now or kept as credit.
  bool GenerateMultiple(const std::vector<int64_t>& ids,
                        const std::function<void(int64_t, const msgpack::sbuffer&)>& emit) override;
  void ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                          const msgpack::object& value, double scalar, bool customized) override;
  void TrialEnd(int64_t parameter_id, bool success) override;
  void ImportData(const msgpack::object& records) override;
  std::string SaveState() override;
  // Needs the search space first (the same one the state was saved with).
  void LoadState(std::string_view state) override;

  uint64_t seed() const { return seed_; }
  int64_t population_size() const { return population_size_; }
  const std::vector<Individual>& population() const { return population_; }
  size_t running_count() const { return running_.size(); }
  const std::deque<int64_t>& credits() const { return credits_; }

 private:
  const sdk::SearchSpace& Space() const;
  // The next trial's configuration (NNI's _generate_individual).
  sdk::Assignment Breed();
  sdk::Assignment Mutate(const sdk::Assignment& parent);
  void Shuffle();
  void AddRandomIndividual();
  // Starts a trial for `id`: the configuration packed into `out`.
  void Start(int64_t id, msgpack::packer<msgpack::sbuffer>& out);
  // Undoes Start when the host refused the trial: its configuration goes back
  // to the front of the population, to be tried next.
  void Unstart(int64_t id);
  void ServeCredits();
  double FitnessOf(double metric) const;

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  bool maximize_ = true;
  int64_t population_size_ = kDefaultPopulationSize;
  std::optional<sdk::SearchSpace> space_;

  std::vector<Individual> population_;
  // Trials generated and not ended, by id.
  sdk::RunningConfigs running_;
  // Ids asked for while population_size trials were running, oldest first.
  std::deque<int64_t> credits_;
  bool warned_credit_ = false;
};

}  // namespace tunehost::plugins
