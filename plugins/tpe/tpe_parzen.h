// What the per-parameter (tpe_univariate.h) and the joint (tpe_joint.h)
// samplers of the TPE model share: the observations' per-parameter history,
// the good/bad split with NNI's constant liar and linear forgetting, and the
// priors (NNI's tpe_tuner.py: split_history, linear_forgetting_weights).
// Internal to the model; inline because the samplers call it per observation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "tpe_model.h"
#include "tunehost/sdk/cpp/search_space.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins::tpe {

inline constexpr double kLogSqrt2Pi = 0.91893853320467274178;  // log(sqrt(2*pi))

// NNI's linear_forgetting_weights(n)[r]: the last `lf` of n weigh 1, the
// ones before ramp linearly from 1/n up to 1. NNI applies it to a group in
// LOSS order (r = 0 is the group's best), so in the "bad" group the
// observations closest to good weigh least.
inline double ForgettingWeight(size_t r, size_t n, size_t lf) {
  if (n <= lf || r >= n - lf) return 1.0;
  const size_t m = n - lf;  // ramp length
  if (m == 1) return 1.0 / static_cast<double>(n);
  const double lo = 1.0 / static_cast<double>(n);
  return lo + (1.0 - lo) * static_cast<double>(r) / static_cast<double>(m - 1);
}

// A draw from `weights` (unnormalized, total > 0), one engine output.
inline size_t DrawIndex(const std::vector<double>& weights, double total, std::mt19937_64& rng) {
  double u = sdk::Uniform01(rng) * total;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (u < weights[i]) return i;
    u -= weights[i];
  }
  return weights.size() - 1;
}

// The model's prior of a numeric parameter: uniform types become a normal
// centred on the range with sigma = range, truncated to it (NNI).
struct Prior {
  double mu;
  double sigma;
  bool clip;
  double low;
  double high;
};

inline Prior PriorOf(const sdk::Parameter& p) {
  if (p.normal) return {p.mu, p.sigma, false, 0, 0};
  if (p.type == sdk::ParamType::kRandint) {  // ordered (Options::ordered_randint): the index
    const double k = static_cast<double>(p.size);
    return {(k - 1.0) * 0.5, k, true, -0.5, k - 0.5};
  }
  return {(p.low + p.high) * 0.5, p.high - p.low, true, p.low, p.high};
}

// Per-parameter history: values and losses in arrival order, and the
// arrival indices sorted by (loss, arrival) and by (value, arrival).
struct ParamHistory {
  std::vector<double> values;
  std::vector<double> losses;
  std::vector<uint32_t> by_loss;
  std::vector<uint32_t> by_value;

  // Appends without indexing (bulk loads); Reindex() afterwards.
  void Append(double value, double loss) {
    values.push_back(value);
    losses.push_back(loss);
  }
  void Reindex() {
    by_loss.resize(values.size());
    std::iota(by_loss.begin(), by_loss.end(), 0u);
    by_value = by_loss;
    std::stable_sort(by_loss.begin(), by_loss.end(),
                     [&](uint32_t a, uint32_t b) { return losses[a] < losses[b]; });
    std::stable_sort(by_value.begin(), by_value.end(),
                     [&](uint32_t a, uint32_t b) { return values[a] < values[b]; });
  }

  void Add(double value, double loss) {
    const uint32_t k = static_cast<uint32_t>(values.size());
    values.push_back(value);
    losses.push_back(loss);
    // Arrival order breaks ties, so inserting after equal keys keeps it.
    auto pos_l = std::upper_bound(by_loss.begin(), by_loss.end(), k,
                                  [&](uint32_t a, uint32_t b) { return losses[a] < losses[b]; });
    by_loss.insert(pos_l, k);
    auto pos_v = std::upper_bound(by_value.begin(), by_value.end(), k,
                                  [&](uint32_t a, uint32_t b) { return values[a] < values[b]; });
    by_value.insert(pos_v, k);
  }
};

// randint is a category in NNI's model and an ordered integer (an index
// modelled as a number, rounded) with Options::ordered_randint.
inline bool Categorical(const Options& options, const sdk::Parameter& p) {
  return p.categorical && !(options.ordered_randint && p.type == sdk::ParamType::kRandint);
}
// An ordered randint's modelled index back to a valid index.
inline double Snap(const sdk::Parameter& p, double v) {
  if (p.type != sdk::ParamType::kRandint) return v;
  return std::clamp(std::round(v), 0.0, static_cast<double>(p.size) - 1.0);
}

// How many of n observations (lies included) form the good group: NNI's
// ceil(gamma * sqrt(n)), at most linear_forgetting.
inline size_t NBelow(const Options& options, size_t n) {
  const double b = std::ceil(options.gamma * std::sqrt(static_cast<double>(n)));
  return std::min(static_cast<size_t>(b), static_cast<size_t>(options.linear_forgetting));
}

// Positions in the merged loss order of real records (sorted in
// `by_loss`) and `lies` lies of loss `lie`, which sort after real records
// of equal loss (NNI appends them to the history and sorts stably). The
// first n_below positions are the "good" group.
struct LossOrder {
  std::vector<uint32_t> real_pos;  // by arrival index
  size_t lie_start = 0;            // lies take [lie_start, lie_start + lies)
};
inline const LossOrder& Order(const std::vector<uint32_t>& by_loss,
                              const std::vector<double>& real_losses, size_t lies, double lie) {
  // Reused between calls: a long history would otherwise allocate (and
  // page-fault) megabytes per suggestion.
  thread_local LossOrder o;
  o.real_pos.resize(real_losses.size());
  o.lie_start = static_cast<size_t>(
      std::upper_bound(by_loss.begin(), by_loss.end(), lie,
                       [&](double l, uint32_t i) { return l < real_losses[i]; }) -
      by_loss.begin());
  for (size_t p = 0; p < by_loss.size(); ++p) {
    o.real_pos[by_loss[p]] = static_cast<uint32_t>(p < o.lie_start ? p : p + lies);
  }
  return o;
}

// Weight of the element at merged position `pos`: NNI's forgetting ramp
// within its group, in loss order. `extra` is 1 for numeric parameters,
// where NNI ramps over the group plus the prior.
inline double GroupWeight(const Options& options, size_t pos, size_t n_below, size_t n,
                          size_t extra) {
  const size_t lf = static_cast<size_t>(options.linear_forgetting);
  if (pos < n_below) return ForgettingWeight(pos, n_below + extra, lf);
  return ForgettingWeight(pos - n_below, n - n_below + extra, lf);
}

}  // namespace tunehost::plugins::tpe
