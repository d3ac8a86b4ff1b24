// The `nsga2` tuner (org.tunehost.nsga2): NSGA-II (Deb et al. 2002) as
// Optuna 3.1's NSGAIISampler runs it, for one or several named objectives and
// constraints. NNI has no multi-objective tuner; the defaults are Optuna's.
//
// Objectives and constraints are read from each trial's final result, a map
// with a numeric "default" whose other keys are the trial's own
// (wire-format.md §5.1, Metric): class_args `objectives` names them with
// their directions, as a map {"default": "maximize", "latency": "minimize"}, where "default" is
// the result's scalar. Without `objectives` the one objective is "default"
// in `optimize_mode` (maximize), so the tuner also runs single-objective.
// `constraints` names result keys whose values must be <= 0 (Optuna's
// constraints_func convention): a trial's violation is the sum of the
// positive ones, and a feasible trial always ranks before an infeasible one.
//
// Generations: the first population_size results (generation 0) come from
// random configurations. Once a generation holds population_size results,
// the next parents are the elite of the old parents and that generation:
// whole non-dominated fronts (constrained domination), then the front that
// does not fit cut by crowding distance. Each new trial is a child of the
// current parents: two binary tournaments (constrained domination, a coin on
// a tie), with crossover_prob a uniform crossover (each parameter from the
// second parent with swapping_prob), else a copy of the first; then each
// parameter is re-sampled at random with mutation_prob (1 / the number of
// active parameters when not given). A parameter that only one parent has (a
// nested choice's sub-space) comes from that parent, one that neither has is
// sampled. Trials are never held back: the host may run more than
// population_size at once, as with Optuna.
//
// Deviations from Optuna (documented for the README):
//   - A result that arrives after its generation was closed (a slow trial)
//     joins the current generation instead of being ignored: no work is lost.
//   - A result without one of the objectives, or with a non-numeric one, is
//     not used (a warning names the key); a NaN objective ranks worst; a
//     missing or NaN constraint value counts as an infinite violation.
//   - ImportData and customized trials' results join the current generation.
//   - A new search space starts over at generation 0; running trials whose
//     parameters fit it still join it with their results.
#pragma once

#include <cstdint>
#include <map>
#include <msgpack.hpp>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/running_configs.h"
#include "tunehost/sdk/cpp/objectives.h"
#include "tunehost/sdk/cpp/pareto.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins {

class Nsga2Tuner : public sdk::Tuner {
 public:
  static constexpr int64_t kDefaultPopulationSize = 50;  // Optuna's
  static constexpr int64_t kMaxPopulationSize = 100000;
  using Objective = sdk::ObjectiveSet::Objective;
  struct Member {
    sdk::Assignment config;
    sdk::Candidate score;
  };

  // class_args: objectives, optimize_mode (only without objectives),
  // constraints, population_size (50, in [2, 100000]), mutation_prob (nil or
  // [0, 1]), crossover_prob (0.9), swapping_prob (0.5), seed. Anything else
  // is refused naming the argument.
  Nsga2Tuner(sdk::HostRef host, const msgpack::object& class_args);

  void UpdateSearchSpace(const msgpack::object& space) override;
  bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) override;
  void ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                          const msgpack::object& value, double scalar, bool customized) override;
  void TrialEnd(int64_t parameter_id, bool success) override;
  void ImportData(const msgpack::object& records) override;
  std::string SaveState() override;
  // Needs the search space first (the same one the state was saved with).
  void LoadState(std::string_view state) override;

  // The minimized score of a result (objectives negated where maximized),
  // or nullopt when an objective is missing (a warning says which).
  std::optional<sdk::Candidate> Score(const msgpack::object& value, double scalar);

  const std::vector<Objective>& objectives() const { return objectives_.objectives(); }
  const std::vector<std::string>& constraints() const { return objectives_.constraints(); }
  int64_t population_size() const { return population_size_; }
  std::optional<double> mutation_prob() const { return mutation_prob_; }
  double crossover_prob() const { return crossover_prob_; }
  double swapping_prob() const { return swapping_prob_; }
  int64_t generation() const { return generation_; }
  const std::vector<Member>& parents() const { return parents_; }
  const std::vector<Member>& current() const { return current_; }

 private:
  const sdk::SearchSpace& Space() const;
  sdk::Assignment Child();
  const Member& Tournament();
  void Add(sdk::Assignment config, sdk::Candidate score);

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  sdk::ObjectiveSet objectives_;
  int64_t population_size_ = kDefaultPopulationSize;
  std::optional<double> mutation_prob_;
  double crossover_prob_ = 0.9;
  double swapping_prob_ = 0.5;
  std::optional<sdk::SearchSpace> space_;

  int64_t generation_ = 0;
  std::vector<Member> parents_;  // breed generation_ (empty in generation 0)
  std::vector<Member> current_;  // generation_'s results so far
  sdk::RunningConfigs running_;
};

}  // namespace tunehost::plugins
