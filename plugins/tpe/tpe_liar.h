// NNI's constant liar for the `tpe` tuner (NNI's tpe_tuner.py,
// constant_liar_type): trials still running count as observations of one
// made-up loss, the best, worst or mean real loss so far, so that parallel
// suggestions spread out. This class keeps the statistics the lie comes
// from; the model adds the running trials' configurations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace tunehost::plugins::tpe {

enum class Liar { kNone, kBest, kWorst, kMean };

class ConstantLiar {
 public:
  explicit ConstantLiar(Liar kind = Liar::kBest) : kind_(kind) {}

  Liar kind() const { return kind_; }
  // False for "none": running trials are not counted at all.
  bool enabled() const { return kind_ != Liar::kNone; }
  // "best", "worst", "mean" or "none".
  const char* name() const;

  // A real (finite) loss.
  void Record(double loss);
  // Forgets every loss.
  void Reset();
  // Multi-objective: the losses are the places 0 .. n-1 of n observations.
  void SetPlaces(size_t n);
  // The lie.
  double Value() const;

 private:
  Liar kind_;
  std::optional<double> best_loss_;
  std::optional<double> worst_loss_;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
};

}  // namespace tunehost::plugins::tpe
