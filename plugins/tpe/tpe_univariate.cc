#include "tpe_univariate.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <utility>

#include "tpe_parzen.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins::tpe {
namespace {

constexpr double kEps = 1e-12;

// A 1-D Gaussian mixture sorted by mean: log(weight / sigma) and 1/sigma per
// component (weights unnormalized: constants do not change the argmax).
struct Mixture {
  std::vector<double> mu;
  std::vector<double> sigma;
  std::vector<double> weight;
  std::vector<double> log_coef;
  std::vector<double> inv_sigma;

  void Finish() {
    log_coef.resize(mu.size());
    inv_sigma.resize(mu.size());
    for (size_t i = 0; i < mu.size(); ++i) {
      inv_sigma[i] = 1.0 / std::max(sigma[i], kEps);
      log_coef[i] = std::log(std::max(weight[i], 1e-300) * inv_sigma[i]) - kLogSqrt2Pi;
    }
  }

  // log of the (unnormalized) density at x. Terms more than kCut below the
  // largest add less than N * e^-kCut relative and are skipped, which saves
  // the exp for almost every component of a long history.
  double LogPdf(double x, std::vector<double>& scratch) const {
    constexpr double kCut = 36.0;
    const size_t n = mu.size();
    scratch.resize(n);
    double m = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < n; ++i) {
      const double z = (x - mu[i]) * inv_sigma[i];
      scratch[i] = log_coef[i] - 0.5 * z * z;
      m = std::max(m, scratch[i]);
    }
    if (!std::isfinite(m)) return m;
    const double floor = m - kCut;
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
      if (scratch[i] > floor) sum += std::exp(scratch[i] - m);
    }
    return m + std::log(sum);
  }
};

// NNI's adaptive_parzen_normal on values already sorted, with their weights,
// plus the prior component (mu, sigma, prior_weight) at its sorted place.
// `m` is overwritten; passing the same one again reuses its memory.
void AdaptiveParzen(const std::vector<std::pair<double, double>>& sorted_values_weights,
                    double prior_mu, double prior_sigma, double prior_weight, Mixture& m) {
  const size_t n = sorted_values_weights.size() + 1;
  m.mu.clear();
  m.weight.clear();
  m.mu.reserve(n);
  m.weight.reserve(n);
  size_t prior_index = n - 1;
  bool placed = false;
  for (const auto& [v, w] : sorted_values_weights) {
    if (!placed && !(v < prior_mu)) {  // searchsorted: the prior goes before equal values
      prior_index = m.mu.size();
      m.mu.push_back(prior_mu);
      m.weight.push_back(prior_weight);
      placed = true;
    }
    m.mu.push_back(v);
    m.weight.push_back(w);
  }
  if (!placed) {
    prior_index = m.mu.size();
    m.mu.push_back(prior_mu);
    m.weight.push_back(prior_weight);
  }
  m.sigma.assign(n, prior_sigma);
  if (n == 2) {
    m.sigma[0] = m.sigma[1] = prior_sigma * 0.5;
  } else if (n > 2) {
    m.sigma[0] = m.mu[1] - m.mu[0];
    m.sigma[n - 1] = m.mu[n - 1] - m.mu[n - 2];
    for (size_t i = 1; i + 1 < n; ++i) {
      m.sigma[i] = std::max(m.mu[i] - m.mu[i - 1], m.mu[i + 1] - m.mu[i]);
    }
  }
  m.sigma[prior_index] = prior_sigma;
  const double floor = prior_sigma / static_cast<double>(std::min<size_t>(100, n + 1));
  for (double& s : m.sigma) s = std::min(std::max(s, floor), prior_sigma);
  m.Finish();
}

}  // namespace

double UnivariateSampler::SuggestCategorical(const sdk::Parameter& p, const ParamHistory& h,
                                             const std::vector<double>& lie_values, double lie,
                                             std::mt19937_64& rng) const {
  const size_t real = h.values.size();
  const size_t n = real + lie_values.size();
  const size_t n_below = NBelow(options_, n);
  const LossOrder& order = Order(h.by_loss, h.losses, lie_values.size(), lie);
  const double pw = options_.prior_weight;
  const double k = static_cast<double>(p.size);

  // Weighted counts per group, kept sparse (randint can be huge):
  // (category, weight) entries, and the group's total with the prior.
  thread_local std::vector<std::pair<double, double>> below, above;
  below.clear();
  above.clear();
  auto add = [&](double value, size_t pos) {
    (pos < n_below ? below : above).emplace_back(value, GroupWeight(options_, pos, n_below, n, 0));
  };
  for (size_t i = 0; i < real; ++i) add(h.values[i], order.real_pos[i]);
  for (size_t j = 0; j < lie_values.size(); ++j) add(lie_values[j], order.lie_start + j);
  double below_observed = 0, above_total = pw * k;
  for (const auto& e : below) below_observed += e.second;
  for (const auto& e : above) above_total += e.second;
  const double below_total = below_observed + pw * k;

  // Candidates from the good distribution: an observed category with its
  // weight, else a uniformly drawn one (the prior_weight share).
  const size_t n_cand = static_cast<size_t>(options_.n_ei_candidates);
  std::vector<double> cand(n_cand);
  std::vector<double> observed_w(below.size());
  for (size_t i = 0; i < below.size(); ++i) observed_w[i] = below[i].second;
  for (size_t c = 0; c < n_cand; ++c) {
    const double u = sdk::Uniform01(rng) * below_total;
    if (u < below_observed) {
      cand[c] = below[DrawIndex(observed_w, below_observed, rng)].first;
    } else {
      cand[c] = static_cast<double>(sdk::UniformIndex(rng, static_cast<uint64_t>(p.size)));
    }
  }
  auto count = [](const std::vector<std::pair<double, double>>& group, double v) {
    double s = 0;
    for (const auto& e : group) s += (e.first == v) ? e.second : 0.0;
    return s;
  };
  // The above group can be long: count only the candidates' categories.
  std::vector<double> above_count(n_cand, 0.0);
  for (const auto& e : above) {
    for (size_t c = 0; c < n_cand; ++c) above_count[c] += (cand[c] == e.first) ? e.second : 0.0;
  }
  size_t best = 0;
  double best_score = -std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < n_cand; ++c) {
    const double lb = std::log((count(below, cand[c]) + pw) / below_total);
    const double la = std::log((above_count[c] + pw) / above_total);
    if (lb - la > best_score) {
      best_score = lb - la;
      best = c;
    }
  }
  return cand[best];
}

double UnivariateSampler::SuggestNumeric(const sdk::Parameter& p, const ParamHistory& h,
                                         const std::vector<double>& lie_values, double lie,
                                         std::mt19937_64& rng) const {
  const Prior prior = PriorOf(p);
  const size_t real = h.values.size();
  const size_t n = real + lie_values.size();
  const size_t n_below = NBelow(options_, n);
  const LossOrder& order = Order(h.by_loss, h.losses, lie_values.size(), lie);

  // Both groups sorted by value: walk the value-sorted reals, then merge
  // in the lies (few) sorted by value.
  thread_local std::vector<std::pair<double, double>> below, above;  // (value, weight)
  below.clear();
  above.clear();
  above.reserve(n);
  for (uint32_t idx : h.by_value) {
    const size_t pos = order.real_pos[idx];
    (pos < n_below ? below : above).emplace_back(h.values[idx], GroupWeight(options_, pos, n_below, n, 1));
  }
  if (!lie_values.empty()) {
    std::vector<std::pair<double, double>> lies_b, lies_a;
    for (size_t j = 0; j < lie_values.size(); ++j) {
      const size_t pos = order.lie_start + j;
      (pos < n_below ? lies_b : lies_a)
          .emplace_back(lie_values[j], GroupWeight(options_, pos, n_below, n, 1));
    }
    auto by_value = [](const auto& x, const auto& y) { return x.first < y.first; };
    for (auto* group : {&below, &above}) {
      auto& lies = group == &below ? lies_b : lies_a;
      if (lies.empty()) continue;
      std::stable_sort(lies.begin(), lies.end(), by_value);
      std::vector<std::pair<double, double>> merged;
      merged.reserve(group->size() + lies.size());
      std::merge(group->begin(), group->end(), lies.begin(), lies.end(),
                 std::back_inserter(merged), by_value);
      group->swap(merged);
    }
  }
  thread_local Mixture good, bad;
  AdaptiveParzen(below, prior.mu, prior.sigma, options_.prior_weight, good);
  AdaptiveParzen(above, prior.mu, prior.sigma, options_.prior_weight, bad);

  // Candidates: draws from the good mixture, inside the bounds.
  const size_t n_cand = static_cast<size_t>(options_.n_ei_candidates);
  std::vector<double> cand;
  cand.reserve(n_cand);
  double total = 0;
  for (double w : good.weight) total += w;
  for (int guard = 0; cand.size() < n_cand; ++guard) {
    const size_t j = DrawIndex(good.weight, total, rng);
    const double x = good.mu[j] + good.sigma[j] * sdk::StandardNormal(rng);
    if (!prior.clip || (x >= prior.low && x <= prior.high)) {
      cand.push_back(Snap(p, x));
    } else if (guard > 100000) {
      cand.push_back(Snap(p, std::min(std::max(x, prior.low), prior.high)));  // pathological
    }
  }

  thread_local std::vector<double> scratch;
  size_t best = 0;
  double best_score = -std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < cand.size(); ++c) {
    const double score = good.LogPdf(cand[c], scratch) - bad.LogPdf(cand[c], scratch);
    if (score > best_score) {
      best_score = score;
      best = c;
    }
  }
  return cand[best];
}

double UnivariateSampler::Suggest(size_t i, const ParamHistory& h,
                                  const std::vector<sdk::Assignment>& pending, double lie,
                                  std::mt19937_64& rng) const {
  const sdk::Parameter& p = space_->params()[i];
  std::vector<double> lie_values;
  for (const sdk::Assignment& a : pending) {
    if (i < a.size() && a[i]) lie_values.push_back(*a[i]);
  }
  if (h.values.size() + lie_values.size() < static_cast<size_t>(options_.n_startup_jobs)) {
    return sdk::SampleParameter(p, rng);  // warming up
  }
  if (Categorical(options_, p)) return SuggestCategorical(p, h, lie_values, lie, rng);
  return SuggestNumeric(p, h, lie_values, lie, rng);
}

}  // namespace tunehost::plugins::tpe
