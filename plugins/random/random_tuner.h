// The `random` tuner (org.tunehost.random): NNI's Random tuner. Every
// parameter is drawn independently from its distribution; configurations
// already generated or imported are drawn again, and a finite space that has
// been fully tried reports no more trials.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/search_space.h"
#include "tunehost/sdk/cpp/seen.h"

namespace tunehost::plugins {

class RandomTuner : public sdk::Tuner {
 public:
  // Draws of a duplicate before the tuner looks for an unseen configuration
  // by enumeration (finite spaces) or gives up for this request.
  static constexpr int kMaxRedraws = 100;

  // class_args: `seed` (non-negative integer; random when omitted or nil),
  // `optimize_mode` ("maximize" or "minimize", ignored). Anything else is
  // refused with Error(TH_INVALID_ARGUMENT) naming the argument.
  RandomTuner(sdk::HostRef host, const msgpack::object& class_args);

  void UpdateSearchSpace(const msgpack::object& space) override;
  bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) override;
  void ImportData(const msgpack::object& records) override;
  std::string SaveState() override;
  void LoadState(std::string_view state) override;

  uint64_t seed() const { return seed_; }
  size_t seen_count() const { return seen_.size(); }

 private:
  // Packs `a` into `out` and records it, unless it was seen before.
  bool EmitIfNew(const sdk::Assignment& a, msgpack::packer<msgpack::sbuffer>& out);

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::optional<sdk::SearchSpace> space_;
  // Every configuration generated or imported.
  sdk::SeenConfigurations seen_;
  // Set when enumeration found nothing unseen; cleared by a new space or state.
  bool exhausted_ = false;
};

}  // namespace tunehost::plugins
