// The `batch` tuner (org.tunehost.batch): NNI's BatchTuner
// (nni/algorithms/hpo/batch_tuner.py). The search space has exactly one key,
// of type choice, whose options are the configurations to run, in order:
//
//   {"combine_params": {"_type": "choice", "_value": [
//       {"optimizer": "Adam", "learning_rate": 0.001},
//       {"optimizer": "SGD", "learning_rate": 0.01}]}}
//
// gives the trials {"optimizer": "Adam", "learning_rate": 0.001}, then
// {"optimizer": "SGD", "learning_rate": 0.01}, then "no more trials" for good
// (until a different search space arrives). Anything else (several keys,
// another type) is refused at UpdateSearchSpace with Error(TH_INVALID_ARGUMENT)
// naming the key and the type.
//
// Deviations from NNI:
//   - An option that is not a map is sent as {key: option}: NNI hands the
//     bare value to the trial, but tunehost parameters are always a map.
//     Map options are sent as they are, as in NNI.
//   - Configurations imported (ImportData) or already generated are skipped,
//     every occurrence of them. NNI also drops imported configurations from
//     the options still to run, but only one occurrence per record, and it
//     ignores records whose value is falsy (a metric of 0); here records
//     without a numeric "value" are ignored (sdk::ForEachImported). An option
//     listed twice is therefore run once (NNI runs it twice). Imports before
//     the first search space count too (NNI discards them).
//   - A new search space starts at its first option (NNI keeps counting from
//     where the old list was, an index into a different list); options
//     already tried are skipped. The same search space again changes nothing.
//   - A choice without options is refused (NNI accepts it and has no trial).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/seen.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins {

class BatchTuner : public sdk::Tuner {
 public:
  // class_args: `optimize_mode` ("maximize" or "minimize", ignored). Anything
  // else is refused with Error(TH_INVALID_ARGUMENT) naming the argument.
  BatchTuner(sdk::HostRef host, const msgpack::object& class_args);

  void UpdateSearchSpace(const msgpack::object& space) override;
  bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) override;
  void ImportData(const msgpack::object& records) override;
  std::string SaveState() override;
  void LoadState(std::string_view state) override;

  // Index of the next option to consider.
  size_t next() const { return next_; }
  size_t option_count() const { return configurations_.size(); }
  size_t seen_count() const { return seen_.size(); }

 private:
  // One option and what a trial receives for it.
  struct Configuration {
    sdk::OwnedObject option;
    bool wrapped = false;  // sent as {key_: option}, the option not being a map
    std::string key;       // sdk::CanonicalKey of what the trial receives
  };

  std::optional<std::string> space_key_;  // sdk::CanonicalKey of the search space
  std::string key_;                       // the search space's one key
  std::vector<Configuration> configurations_;
  size_t next_ = 0;
  bool done_logged_ = false;
  // Every configuration generated or imported.
  sdk::SeenConfigurations seen_;
  // From a state loaded before its search space: the position to resume at.
  std::optional<std::string> pending_space_key_;
  size_t pending_next_ = 0;
};

}  // namespace tunehost::plugins
