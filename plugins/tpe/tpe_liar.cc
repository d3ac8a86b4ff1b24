#include "tpe_liar.h"

#include <algorithm>

namespace tunehost::plugins::tpe {

const char* ConstantLiar::name() const {
  switch (kind_) {
    case Liar::kBest:
      return "best";
    case Liar::kWorst:
      return "worst";
    case Liar::kMean:
      return "mean";
    case Liar::kNone:
      break;
  }
  return "none";
}

void ConstantLiar::Record(double loss) {
  best_loss_ = best_loss_ ? std::min(*best_loss_, loss) : loss;
  worst_loss_ = worst_loss_ ? std::max(*worst_loss_, loss) : loss;
  loss_sum_ += loss;
  ++loss_count_;
}

void ConstantLiar::Reset() {
  best_loss_.reset();
  worst_loss_.reset();
  loss_sum_ = 0;
  loss_count_ = 0;
}

void ConstantLiar::SetPlaces(size_t n) {
  best_loss_ = n == 0 ? std::nullopt : std::optional<double>(0.0);
  worst_loss_ = n == 0 ? std::nullopt : std::optional<double>(static_cast<double>(n - 1));
  loss_sum_ = static_cast<double>(n) * (static_cast<double>(n) - 1) / 2;
  loss_count_ = static_cast<int64_t>(n);
}

double ConstantLiar::Value() const {
  // Before any real result every history entry is the same lie, so its
  // value does not matter; 0 as NNI.
  switch (kind_) {
    case Liar::kBest:
      return best_loss_.value_or(0.0);
    case Liar::kWorst:
      return worst_loss_.value_or(0.0);
    case Liar::kMean:
      return loss_count_ == 0 ? 0.0 : loss_sum_ / static_cast<double>(loss_count_);
    case Liar::kNone:
      break;
  }
  return 0.0;
}

}  // namespace tunehost::plugins::tpe
