// Pareto dominance among trials with several objectives and constraints, as
// NSGA-II (Deb et al. 2002) and Optuna 3.1 define it. Header-only, SDK-only.
//
// A Candidate's values are all to be minimized (a maximized objective enters
// negated) and its violation is the sum of max(0, c) over its constraint
// values c: 0 is feasible. NaN is never a value here: callers map a NaN
// objective to +infinity and a NaN constraint to an infinite violation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <numeric>
#include <vector>

namespace tunehost::sdk {

struct Candidate {
  std::vector<double> values;  // minimized
  double violation = 0;        // 0: feasible
};

// a is no worse than b in every value and better in one.
inline bool Dominates(const std::vector<double>& a, const std::vector<double>& b) {
  bool better = false;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] > b[i]) return false;
    if (a[i] < b[i]) better = true;
  }
  return better;
}

// Deb's constrained domination (Optuna's _constrained_dominates): a feasible
// candidate dominates an infeasible one, of two infeasible ones the smaller
// violation dominates, of two feasible ones Pareto dominance decides.
inline bool ConstrainedDominates(const Candidate& a, const Candidate& b) {
  const bool fa = a.violation <= 0, fb = b.violation <= 0;
  if (fa && fb) return Dominates(a.values, b.values);
  if (fa != fb) return fa;
  return a.violation < b.violation;
}

// The fronts of fast non-dominated sorting: indices into `c`, the first
// front dominated by none, each next one only by earlier fronts. O(M N^2).
inline std::vector<std::vector<size_t>> NondominatedFronts(const std::vector<Candidate>& c) {
  const size_t n = c.size();
  std::vector<std::vector<size_t>> dominated(n);  // whom i dominates
  std::vector<size_t> count(n, 0);                // how many dominate i
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (ConstrainedDominates(c[i], c[j])) {
        dominated[i].push_back(j);
        ++count[j];
      } else if (ConstrainedDominates(c[j], c[i])) {
        dominated[j].push_back(i);
        ++count[i];
      }
    }
  }
  std::vector<std::vector<size_t>> fronts;
  std::vector<size_t> front;
  for (size_t i = 0; i < n; ++i) {
    if (count[i] == 0) front.push_back(i);
  }
  while (!front.empty()) {
    std::vector<size_t> next;
    for (size_t i : front) {
      for (size_t j : dominated[i]) {
        if (--count[j] == 0) next.push_back(j);
      }
    }
    fronts.push_back(std::move(front));
    front = std::move(next);
  }
  return fronts;
}

// Crowding distance of each member of `front` (in its order): per value, the
// two ends get infinity and the others the gap between their neighbours over
// the value's range; summed over values. A value whose range is 0 adds
// nothing (Optuna's _crowding_distance_sort).
inline std::vector<double> CrowdingDistances(const std::vector<Candidate>& c,
                                             const std::vector<size_t>& front) {
  const size_t n = front.size();
  std::vector<double> d(n, 0);
  if (n == 0) return d;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<size_t> order(n);
  for (size_t m = 0; m < c[front[0]].values.size(); ++m) {
    std::iota(order.begin(), order.end(), size_t{0});
    auto value = [&](size_t k) { return c[front[k]].values[m]; };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return value(a) < value(b); });
    const double width = value(order[n - 1]) - value(order[0]);
    if (!(width > 0) || width == inf) continue;
    d[order[0]] = inf;
    d[order[n - 1]] = inf;
    for (size_t k = 1; k + 1 < n; ++k) {
      d[order[k]] += (value(order[k + 1]) - value(order[k - 1])) / width;
    }
  }
  return d;
}

// NSGA-II's survivors: whole fronts while they fit, then the members of the
// front that does not fit with the largest crowding distance (ties in
// front order). At most `n` indices into `c`.
inline std::vector<size_t> SelectElite(const std::vector<Candidate>& c, size_t n) {
  std::vector<size_t> elite;
  for (const std::vector<size_t>& front : NondominatedFronts(c)) {
    if (elite.size() + front.size() <= n) {
      elite.insert(elite.end(), front.begin(), front.end());
      continue;
    }
    const std::vector<double> d = CrowdingDistances(c, front);
    std::vector<size_t> order(front.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return d[a] > d[b]; });
    for (size_t k = 0; elite.size() < n; ++k) elite.push_back(front[order[k]]);
    break;
  }
  return elite;
}

}  // namespace tunehost::sdk
