// Pareto dominance among trials with several objectives and constraints, as
// NSGA-II (Deb et al. 2002) and Optuna 3.1 define it. Header-only, SDK-only.
//
// A Candidate's values are all to be minimized (a maximized objective enters
// negated) and its violation is the sum of max(0, c) over its constraint
// values c: 0 is feasible. NaN is never a value here: callers map a NaN
// objective to +infinity and a NaN constraint to an infinite violation.
#pragma once

#include <algorithm>
#include <cmath>
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

// The hypervolume dominated by `points` (minimized) up to `ref`: the volume
// of the union of the boxes [p, ref]. Points not below `ref` in every value
// add nothing. Recursive slicing on the last value: O(n^(M-1) log n) for n
// points of M values, meant for the small sets of SplitOrder.
inline double Hypervolume(std::vector<std::vector<double>> points, const std::vector<double>& ref) {
  const size_t m = ref.size();
  points.erase(std::remove_if(points.begin(), points.end(),
                              [&](const std::vector<double>& p) {
                                for (size_t k = 0; k < m; ++k) {
                                  if (!(p[k] < ref[k])) return true;
                                }
                                return false;
                              }),
               points.end());
  if (points.empty() || m == 0) return 0;
  if (m == 1) {
    double best = points[0][0];
    for (const auto& p : points) best = std::min(best, p[0]);
    return ref[0] - best;
  }
  std::sort(points.begin(), points.end(),
            [m](const auto& a, const auto& b) { return a[m - 1] < b[m - 1]; });
  const std::vector<double> sub_ref(ref.begin(), ref.end() - 1);
  std::vector<std::vector<double>> slab;
  double volume = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    slab.emplace_back(points[i].begin(), points[i].end() - 1);
    const double top = i + 1 < points.size() ? points[i + 1][m - 1] : ref[m - 1];
    if (top > points[i][m - 1]) volume += Hypervolume(slab, sub_ref) * (top - points[i][m - 1]);
  }
  return volume;
}

// Greedy hypervolume subset selection (Optuna 3.1's _solve_hssp): `k`
// members of `front` (indices into `c`, feasible, finite values), each next
// one the member whose box adds the most hypervolume to those chosen, with
// Optuna's reference point max(1.1 w, 0.9 w) of the front's worst values w
// (a zero entry moved to 1e-12). Ties go to the earlier member.
inline std::vector<size_t> GreedyHypervolumeSubset(const std::vector<Candidate>& c,
                                                   const std::vector<size_t>& front, size_t k) {
  if (front.empty()) return {};
  const size_t m = c[front[0]].values.size();
  std::vector<double> ref(m, -std::numeric_limits<double>::infinity());
  for (size_t i : front) {
    for (size_t d = 0; d < m; ++d) ref[d] = std::max(ref[d], c[i].values[d]);
  }
  for (double& r : ref) r = r == 0 ? 1e-12 : std::max(1.1 * r, 0.9 * r);
  std::vector<std::vector<double>> chosen_values;
  std::vector<size_t> chosen;
  std::vector<bool> taken(front.size(), false);
  double base = 0;
  while (chosen.size() < std::min(k, front.size())) {
    size_t best = front.size();
    double best_gain = -1;
    for (size_t j = 0; j < front.size(); ++j) {
      if (taken[j]) continue;
      chosen_values.push_back(c[front[j]].values);
      const double gain = Hypervolume(chosen_values, ref) - base;
      chosen_values.pop_back();
      // A NaN gain (values so large that the reference point overflowed)
      // never wins; the first member left is taken when none does.
      if (gain > best_gain || best == front.size()) {
        best_gain = std::isnan(gain) ? -1 : gain;
        best = j;
      }
    }
    taken[best] = true;
    chosen.push_back(front[best]);
    chosen_values.push_back(c[front[best]].values);
    base = Hypervolume(chosen_values, ref);
  }
  return chosen;
}

// An order of all candidates, best first, whose first `n_below` are MOTPE's
// good group (Ozaki et al. 2020; Optuna 3.1's
// _split_complete_trials_multi_objective): whole constrained non-dominated
// fronts while they fit, then from the front that does not fit the members
// chosen by greedy hypervolume subset selection, then the rest in front
// order. A front holding an infeasible or infinite score, or whose greedy
// selection would exceed `budget` hypervolume terms (many values on a
// large front), is cut by crowding distance instead (NSGA-II's rule).
inline std::vector<size_t> SplitOrder(const std::vector<Candidate>& c, size_t n_below,
                                      double budget = 2e7) {
  std::vector<size_t> order;
  order.reserve(c.size());
  for (const std::vector<size_t>& front : NondominatedFronts(c)) {
    if (order.size() >= n_below || order.size() + front.size() <= n_below) {
      order.insert(order.end(), front.begin(), front.end());
      continue;
    }
    const size_t need = n_below - order.size();
    bool finite = true;
    for (size_t i : front) {
      finite = finite && c[i].violation <= 0;
      for (double v : c[i].values) finite = finite && std::isfinite(v);
    }
    const double m = static_cast<double>(c[front[0]].values.size());
    const double terms = static_cast<double>(front.size()) * static_cast<double>(need) *
                         std::pow(static_cast<double>(need) + 1, std::max(1.0, m - 1));
    std::vector<size_t> first;
    if (finite && terms <= budget) {
      first = GreedyHypervolumeSubset(c, front, need);
    } else {
      const std::vector<double> d = CrowdingDistances(c, front);
      std::vector<size_t> by(front.size());
      std::iota(by.begin(), by.end(), size_t{0});
      std::stable_sort(by.begin(), by.end(), [&](size_t a, size_t b) { return d[a] > d[b]; });
      for (size_t k = 0; k < need; ++k) first.push_back(front[by[k]]);
    }
    order.insert(order.end(), first.begin(), first.end());
    for (size_t i : front) {
      if (std::find(first.begin(), first.end(), i) == first.end()) order.push_back(i);
    }
  }
  return order;
}

}  // namespace tunehost::sdk
