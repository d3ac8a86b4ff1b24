// tunehost SDK: a search space's parameters as coordinates in [0, 1], the
// way model-based tuners (gp, cmaes) see a space.
//
// - choice and randint: the index i of n takes the slice [i/n, (i+1)/n) and
//   maps to its middle, (i + 0.5) / n;
// - uniform types: linear between the draw's bounds (log space for the log
//   types, as sdk::Parameter keeps them);
// - normal types: mu ± (kUnitNormalSpan / 2) sigma spans [0, 1]; the
//   coordinate is not clipped (a normal draw may lie outside), the caller
//   clips it if its model needs a bounded box.
//
// Both work on the internal values of an sdk::Assignment.
#pragma once

#include <algorithm>
#include <cmath>

#include "tunehost/sdk/cpp/search_space.h"

namespace tunehost::sdk {

inline constexpr double kUnitNormalSpan = 6.0;

// The coordinate of internal value `x` of `p`.
inline double ToUnit(const Parameter& p, double x) {
  if (p.categorical) return (x + 0.5) / static_cast<double>(p.size);
  if (p.normal) return 0.5 + (x - p.mu) / (kUnitNormalSpan * p.sigma);
  if (p.high > p.low) return std::clamp((x - p.low) / (p.high - p.low), 0.0, 1.0);
  return 0.5;
}

// The internal value at coordinate `v` (clipped to [0, 1] but for normal
// types).
inline double FromUnit(const Parameter& p, double v) {
  if (p.categorical) {
    const double index = std::floor(std::clamp(v, 0.0, 1.0) * static_cast<double>(p.size));
    return std::min(index, static_cast<double>(p.size - 1));
  }
  if (p.normal) return p.mu + (v - 0.5) * kUnitNormalSpan * p.sigma;
  return p.low + std::clamp(v, 0.0, 1.0) * (p.high - p.low);
}

}  // namespace tunehost::sdk
