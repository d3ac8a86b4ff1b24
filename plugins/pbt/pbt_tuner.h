// The `pbt` tuner (org.tunehost.pbt; NNI's name PBTTuner): population-based
// training (Jaderberg et al. 2017) with NNI's PBTTuner semantics
// (nni-semantics.md §6).
//
// A population of population_size members, each with its own checkpoint
// directory <all_checkpoint_dir>/<member>. A trial runs one step of one
// member: its parameters carry, besides the hyperparameters,
//   load_checkpoint_dir  where the trial loads the model it continues, and
//   save_checkpoint_dir  where it saves the model after its step
// (<all_checkpoint_dir>/<member>/<step>; in step 0 both are the same
// directory, which does not exist yet: the trial starts from scratch). The
// trial creates the directory it saves to. Generations are synchronous:
// when every member of step e has a result (or has failed: the worst score),
// members are ranked and the bottom `fraction` (rounded up) each copy a
// random top-`fraction` member -- they load its checkpoint and take its
// hyperparameters -- which are then perturbed one by one: re-sampled with
// probability resample_probability, otherwise moved up or down (equal odds)
// by (range * factor) for uniform, by a factor of the log range for
// loguniform, by one step for choice (index), randint, quniform and
// qloguniform (q), by sigma * factor for normal and lognormal (in log), by q
// for qnormal and qlognormal, each clipped to its range. The others load what
// they saved. While a generation is complete but not finished, requested ids
// are kept (credit) and served through send_trial when the next one starts.
//
// class_args: optimize_mode ("maximize" by default), all_checkpoint_dir
// (default: $NNI_CHECKPOINT_DIRECTORY when set, else
// $HOME/tunehost/checkpoint/pbt-<seed>), population_size 10 (in [1, 99999]),
// factor 0.2 (NNI's validator spells it "factors": both are accepted),
// resample_probability 0.25, fraction 0.2 (in (0, 1]), seed.
//
// Deviations from NNI, on purpose:
//   - A trial that ends without a result counts as failed (worst score)
//     whatever its status; NNI waits for it forever when it succeeded.
//   - Kept ids are served oldest first (NNI: newest first), and every member
//     of a generation is served (NNI the same).
//   - Perturbations draw from one seeded generator (class_args seed).
//   - Nested choices and parameters named load_checkpoint_dir or
//     save_checkpoint_dir are refused with the key named (NNI fails later).
//   - A new search space starts a new population at the current step;
//     running trials of the old one are dropped with a warning.
//   - import_data (NNI's resume from records) resumes from the last step
//     every member finished, as NNI; records of an unfinished later step are
//     not used (NNI the same). What NNI asserts or crashes on (a step with
//     more records than members, a directory that is not a step number) and
//     a missing checkpoint directory abandon the import with a warning; a
//     value of 0 is a score (NNI takes it for a failure). tunehost also
//     resumes from the tuner's saved state, which needs no records.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::plugins {

class PbtTuner : public sdk::Tuner {
 public:
  static constexpr int64_t kDefaultPopulationSize = 10;
  static constexpr int64_t kMaxPopulationSize = 99999;  // NNI's validator

  struct Member {
    std::string checkpoint_dir;  // <all_checkpoint_dir>/<member>
    sdk::Assignment config;
    std::string load_dir;
    std::string save_dir;
    std::optional<double> score;  // this step's fitness (larger is better)
  };

  PbtTuner(sdk::HostRef host, const msgpack::object& class_args);

  void UpdateSearchSpace(const msgpack::object& space) override;
  // False when every member of this step has been handed out: the id is kept
  // and served through send_trial when the next step starts.
  bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) override;
  bool GenerateMultiple(const std::vector<int64_t>& ids,
                        const std::function<void(int64_t, const msgpack::sbuffer&)>& emit) override;
  void ReceiveTrialResult(int64_t parameter_id, const msgpack::object& parameters,
                          const msgpack::object& value, double scalar, bool customized) override;
  void TrialEnd(int64_t parameter_id, bool success) override;
  void ImportData(const msgpack::object& records) override;
  std::string SaveState() override;
  void LoadState(std::string_view state) override;

  uint64_t seed() const { return seed_; }
  const std::string& all_checkpoint_dir() const { return all_checkpoint_dir_; }
  int64_t population_size() const { return population_size_; }
  double factor() const { return factor_; }
  double resample_probability() const { return resample_probability_; }
  double fraction() const { return fraction_; }
  int64_t step() const { return step_; }
  const std::vector<Member>& population() const { return population_; }

 private:
  const sdk::SearchSpace& Space() const;
  void Pack(const Member& m, msgpack::packer<msgpack::sbuffer>& out) const;
  // Hands member pos_ + 1 to `id`.
  void Start(int64_t id, msgpack::packer<msgpack::sbuffer>& out);
  void Finish(size_t member, double score);
  void NextStep();
  sdk::Assignment Perturb(const sdk::Assignment& config);
  double PerturbOne(const sdk::Parameter& p, double x);
  std::string Dir(const std::string& base, int64_t leaf) const;
  double FitnessOf(double metric) const;

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  bool maximize_ = true;
  std::string all_checkpoint_dir_;
  int64_t population_size_ = kDefaultPopulationSize;
  double factor_ = 0.2;
  double resample_probability_ = 0.25;
  double fraction_ = 0.2;
  std::optional<sdk::SearchSpace> space_;

  int64_t step_ = 0;
  std::vector<Member> population_;
  int64_t pos_ = -1;                  // the last member handed out this step
  std::map<int64_t, size_t> running_;  // id -> member
  std::vector<size_t> finished_;       // members of this step with a score, in order
  std::deque<int64_t> credits_;        // ids kept, oldest first
};

}  // namespace tunehost::plugins
