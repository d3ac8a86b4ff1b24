// The `medianstop` assessor (org.tunehost.medianstop): NNI's Medianstop.
// A trial at step S (S = length of its history) is stopped when its best
// value so far is strictly worse than the median, over completed trials with
// at least S values, of their running average at step S.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"

namespace tunehost::plugins {

class MedianstopAssessor : public sdk::Assessor {
 public:
  // class_args: `optimize_mode` ("maximize", the default, or "minimize"),
  // `start_step` (integer in [0, 9999] as in NNI, default 0). Anything else is
  // refused with Error(TH_INVALID_ARGUMENT) naming the argument.
  MedianstopAssessor(sdk::HostRef host, const msgpack::object& class_args);

  bool AssessTrial(const std::string& trial_id, const msgpack::object& history) override;
  void TrialEnd(const std::string& trial_id, bool success) override;
  std::string SaveState() override;
  void LoadState(std::string_view state) override;

  bool maximize() const { return maximize_; }
  int64_t start_step() const { return start_step_; }
  size_t completed_count() const { return completed_avg_.size(); }

 private:
  bool maximize_ = true;
  int64_t start_step_ = 0;
  // Values seen so far of trials still running (only extended, as NNI does).
  std::map<std::string, std::vector<double>> running_;
  // Running averages of the full histories of trials that SUCCEEDED.
  std::map<std::string, std::vector<double>> completed_avg_;
};

}  // namespace tunehost::plugins
