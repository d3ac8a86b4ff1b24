#include "tpe_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins::tpe {
namespace {

constexpr double kLogSqrt2Pi = 0.91893853320467274178;  // log(sqrt(2*pi))
constexpr double kEps = 1e-12;
// Multivariate bandwidth factor (see JointBandwidth).
constexpr double kJointBandwidth = 0.05;

// One record of a parameter's history as a suggestion sees it: real
// observations (index < real count) and lies (the rest).
struct Record {
  double value;
  double loss;
};

// NNI's linear_forgetting_weights(n)[r]: the last `lf` of n weigh 1, the
// ones before ramp linearly from 1/n up to 1. NNI applies it to a group in
// LOSS order (r = 0 is the group's best), so in the "bad" group the
// observations closest to good weigh least.
double ForgettingWeight(size_t r, size_t n, size_t lf) {
  if (n <= lf || r >= n - lf) return 1.0;
  const size_t m = n - lf;  // ramp length
  if (m == 1) return 1.0 / static_cast<double>(n);
  const double lo = 1.0 / static_cast<double>(n);
  return lo + (1.0 - lo) * static_cast<double>(r) / static_cast<double>(m - 1);
}

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

// A draw from `weights` (unnormalized, total > 0), one engine output.
size_t DrawIndex(const std::vector<double>& weights, double total, std::mt19937_64& rng) {
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

Prior PriorOf(const sdk::Parameter& p) {
  if (p.normal) return {p.mu, p.sigma, false, 0, 0};
  if (p.type == sdk::ParamType::kRandint) {  // ordered (Options::ordered_randint): the index
    const double k = static_cast<double>(p.size);
    return {(k - 1.0) * 0.5, k, true, -0.5, k - 0.5};
  }
  return {(p.low + p.high) * 0.5, p.high - p.low, true, p.low, p.high};
}

}  // namespace

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

struct Model::Impl {
  const sdk::SearchSpace* space;
  Options options;
  // Every observation in arrival order (the state).
  std::vector<sdk::Assignment> xs;
  std::vector<double> losses;
  std::vector<ParamHistory> per_param;
  // Multivariate: parameters modelled jointly (always active).
  std::vector<size_t> joint;
  ParamHistory joint_losses;  // by_loss over observations (values unused)

  Impl(const sdk::SearchSpace* s, Options o) : space(s), options(o) {
    per_param.resize(space->params().size());
    if (options.multivariate) {
      for (size_t i = 0; i < space->params().size(); ++i) {
        if (space->params()[i].parent < 0) joint.push_back(i);
      }
    }
  }

  // `index` false: append only (a bulk load calls Reindex() at the end), so
  // loading N observations costs O(N log N), not O(N^2).
  void Add(const sdk::Assignment& x, double loss, bool index = true) {
    if (!std::isfinite(loss) || x.size() != per_param.size()) return;
    xs.push_back(x);
    losses.push_back(loss);
    for (size_t i = 0; i < x.size(); ++i) {
      if (!x[i]) continue;
      if (index) {
        per_param[i].Add(*x[i], loss);
      } else {
        per_param[i].Append(*x[i], loss);
      }
    }
    if (index) {
      joint_losses.Add(0.0, loss);
    } else {
      joint_losses.Append(0.0, loss);
    }
  }
  void Reindex() {
    for (ParamHistory& h : per_param) h.Reindex();
    joint_losses.Reindex();
  }

  // randint is a category in NNI's model and an ordered integer (an index
  // modelled as a number, rounded) with Options::ordered_randint.
  bool Categorical(const sdk::Parameter& p) const {
    return p.categorical && !(options.ordered_randint && p.type == sdk::ParamType::kRandint);
  }
  static double Snap(const sdk::Parameter& p, double v) {
    if (p.type != sdk::ParamType::kRandint) return v;
    return std::clamp(std::round(v), 0.0, static_cast<double>(p.size) - 1.0);
  }

  size_t NBelow(size_t n) const {
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
  static const LossOrder& Order(const std::vector<uint32_t>& by_loss,
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
  double GroupWeight(size_t pos, size_t n_below, size_t n, size_t extra) const {
    const size_t lf = static_cast<size_t>(options.linear_forgetting);
    if (pos < n_below) return ForgettingWeight(pos, n_below + extra, lf);
    return ForgettingWeight(pos - n_below, n - n_below + extra, lf);
  }

  double SuggestCategorical(const sdk::Parameter& p, const ParamHistory& h,
                            const std::vector<double>& lie_values, double lie,
                            std::mt19937_64& rng) const {
    const size_t real = h.values.size();
    const size_t n = real + lie_values.size();
    const size_t n_below = NBelow(n);
    const LossOrder& order = Order(h.by_loss, h.losses, lie_values.size(), lie);
    const double pw = options.prior_weight;
    const double k = static_cast<double>(p.size);

    // Weighted counts per group, kept sparse (randint can be huge):
    // (category, weight) entries, and the group's total with the prior.
    thread_local std::vector<std::pair<double, double>> below, above;
    below.clear();
    above.clear();
    auto add = [&](double value, size_t pos) {
      (pos < n_below ? below : above).emplace_back(value, GroupWeight(pos, n_below, n, 0));
    };
    for (size_t i = 0; i < real; ++i) add(h.values[i], order.real_pos[i]);
    for (size_t j = 0; j < lie_values.size(); ++j) add(lie_values[j], order.lie_start + j);
    double below_observed = 0, above_total = pw * k;
    for (const auto& e : below) below_observed += e.second;
    for (const auto& e : above) above_total += e.second;
    const double below_total = below_observed + pw * k;

    // Candidates from the good distribution: an observed category with its
    // weight, else a uniformly drawn one (the prior_weight share).
    const size_t n_cand = static_cast<size_t>(options.n_ei_candidates);
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

  double SuggestNumeric(const sdk::Parameter& p, const ParamHistory& h,
                        const std::vector<double>& lie_values, double lie,
                        std::mt19937_64& rng) const {
    const Prior prior = PriorOf(p);
    const size_t real = h.values.size();
    const size_t n = real + lie_values.size();
    const size_t n_below = NBelow(n);
    const LossOrder& order = Order(h.by_loss, h.losses, lie_values.size(), lie);

    // Both groups sorted by value: walk the value-sorted reals, then merge
    // in the lies (few) sorted by value.
    thread_local std::vector<std::pair<double, double>> below, above;  // (value, weight)
    below.clear();
    above.clear();
    above.reserve(n);
    for (uint32_t idx : h.by_value) {
      const size_t pos = order.real_pos[idx];
      (pos < n_below ? below : above).emplace_back(h.values[idx], GroupWeight(pos, n_below, n, 1));
    }
    if (!lie_values.empty()) {
      std::vector<std::pair<double, double>> lies_b, lies_a;
      for (size_t j = 0; j < lie_values.size(); ++j) {
        const size_t pos = order.lie_start + j;
        (pos < n_below ? lies_b : lies_a)
            .emplace_back(lie_values[j], GroupWeight(pos, n_below, n, 1));
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
    AdaptiveParzen(below, prior.mu, prior.sigma, options.prior_weight, good);
    AdaptiveParzen(above, prior.mu, prior.sigma, options.prior_weight, bad);

    // Candidates: draws from the good mixture, inside the bounds.
    const size_t n_cand = static_cast<size_t>(options.n_ei_candidates);
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

  double SuggestOne(size_t i, const std::vector<sdk::Assignment>& pending, double lie,
                    std::mt19937_64& rng) const {
    const sdk::Parameter& p = space->params()[i];
    const ParamHistory& h = per_param[i];
    std::vector<double> lie_values;
    for (const sdk::Assignment& a : pending) {
      if (i < a.size() && a[i]) lie_values.push_back(*a[i]);
    }
    if (h.values.size() + lie_values.size() < static_cast<size_t>(options.n_startup_jobs)) {
      return sdk::SampleParameter(p, rng);  // warming up
    }
    if (Categorical(p)) return SuggestCategorical(p, h, lie_values, lie, rng);
    return SuggestNumeric(p, h, lie_values, lie, rng);
  }

  // --- Multivariate ---

  // One group of the joint model: observations as rows of `values`
  // (dims columns), their log weights, and the prior as one more component.
  struct JointGroup {
    std::vector<double> values;
    std::vector<double> log_w;
    std::vector<double> w;       // with the prior's weight last (for drawing)
    double total = 0;            // sum of w
    std::vector<double> inv_bw;  // 0 for a categorical dimension
    // Categorical dimensions: log probability of the observation's own
    // category and of any other one.
    std::vector<double> log_same, log_other;
    double log_norm = 0;  // sum over numeric dims of -log(bandwidth) - log(sqrt(2 pi))
    size_t size() const { return log_w.size(); }
  };

  // Bandwidth of a numeric dimension for a group of `count` observations:
  // Scott's rule, kJointBandwidth * prior sigma * n^(-1/(d+4)), never below
  // sigma / 100. Optuna's multivariate TPE uses 0.2 (its source calls the
  // constant possibly not optimal); 0.05 was measured on the benchmark
  // functions at 100 and 300 trials (with 0.2 the joint model is only about
  // level with Optuna's univariate TPE at 100 trials; data-scaled bandwidths
  // collapse onto the first good points).
  double JointBandwidth(const sdk::Parameter& p, size_t count) const {
    const double dims = static_cast<double>(joint.size());
    const double scale = PriorOf(p).sigma;
    const double factor =
        kJointBandwidth *
        std::pow(static_cast<double>(std::max<size_t>(count, 1)), -1.0 / (dims + 4.0));
    return std::max(scale * factor, scale / 100.0);
  }

  void FinishGroup(JointGroup& g) const {
    g.inv_bw.assign(joint.size(), 0.0);
    g.log_same.assign(joint.size(), 0.0);
    g.log_other.assign(joint.size(), 0.0);
    g.log_norm = 0;
    const double pw = options.prior_weight;
    for (size_t d = 0; d < joint.size(); ++d) {
      const sdk::Parameter& p = space->params()[joint[d]];
      if (Categorical(p)) {
        // An observation puts weight 1 on its category plus prior_weight
        // spread uniformly.
        const double k = static_cast<double>(p.size);
        g.log_same[d] = std::log((1.0 + pw / k) / (1.0 + pw));
        g.log_other[d] = std::log((pw / k) / (1.0 + pw));
        continue;
      }
      const double bw = JointBandwidth(p, g.size());
      g.inv_bw[d] = 1.0 / bw;
      g.log_norm += -std::log(bw) - kLogSqrt2Pi;
    }
    g.w.resize(g.size());
    for (size_t j = 0; j < g.size(); ++j) g.w[j] = std::exp(g.log_w[j]);
    g.w.push_back(options.prior_weight);
    g.total = std::accumulate(g.w.begin(), g.w.end(), 0.0);
  }

  // log of the group's (unnormalized) mixture density at x. As Mixture::LogPdf,
  // terms far below the largest are skipped.
  double JointLogPdf(const JointGroup& g, const double* x, std::vector<double>& terms) const {
    constexpr double kCut = 36.0;
    const size_t dims = joint.size();
    const double pw = options.prior_weight;
    terms.resize(g.size() + 1);
    double m = -std::numeric_limits<double>::infinity();
    for (size_t j = 0; j < g.size(); ++j) {
      const double* o = &g.values[j * dims];
      double t = g.log_w[j] + g.log_norm;
      for (size_t d = 0; d < dims; ++d) {
        if (g.inv_bw[d] != 0.0) {
          const double z = (x[d] - o[d]) * g.inv_bw[d];
          t -= 0.5 * z * z;
        } else {
          t += x[d] == o[d] ? g.log_same[d] : g.log_other[d];
        }
      }
      terms[j] = t;
      m = std::max(m, t);
    }
    // The prior: uniform over categories, the parameter's prior normal.
    double t = std::log(std::max(pw, 1e-300));
    for (size_t d = 0; d < dims; ++d) {
      const sdk::Parameter& p = space->params()[joint[d]];
      if (Categorical(p)) {
        t -= std::log(static_cast<double>(p.size));
      } else {
        const Prior prior = PriorOf(p);
        const double z = (x[d] - prior.mu) / prior.sigma;
        t += -0.5 * z * z - std::log(prior.sigma) - kLogSqrt2Pi;
      }
    }
    terms[g.size()] = t;
    m = std::max(m, t);
    if (!std::isfinite(m)) return m;
    double sum = 0;
    for (double term : terms) {
      if (term > m - kCut) sum += std::exp(term - m);
    }
    return m + std::log(sum);
  }

  // A draw from component j of the good group (j == size(): the prior).
  void JointSample(const JointGroup& g, size_t j, std::mt19937_64& rng, double* x) const {
    const bool is_prior = j == g.size();
    const size_t dims = joint.size();
    for (size_t d = 0; d < dims; ++d) {
      const sdk::Parameter& p = space->params()[joint[d]];
      if (Categorical(p)) {
        const double pw = options.prior_weight;
        if (is_prior || sdk::Uniform01(rng) * (1.0 + pw) >= 1.0) {
          x[d] = static_cast<double>(sdk::UniformIndex(rng, static_cast<uint64_t>(p.size)));
        } else {
          x[d] = g.values[j * dims + d];
        }
        continue;
      }
      const Prior prior = PriorOf(p);
      const double mu = is_prior ? prior.mu : g.values[j * dims + d];
      const double sigma = is_prior ? prior.sigma : 1.0 / g.inv_bw[d];
      double v = mu + sigma * sdk::StandardNormal(rng);
      for (int guard = 0; prior.clip && (v < prior.low || v > prior.high); ++guard) {
        v = guard > 1000 ? std::min(std::max(v, prior.low), prior.high)
                         : mu + sigma * sdk::StandardNormal(rng);
      }
      x[d] = Snap(p, v);
    }
  }

  // Joint suggestion of the always-active parameters (multivariate TPE:
  // product kernels with a Scott-rule bandwidth, as Optuna's
  // multivariate=True, narrower).
  void SuggestJoint(const std::vector<sdk::Assignment>& pending, double lie, std::mt19937_64& rng,
                    sdk::Assignment& out) const {
    const size_t real = xs.size();
    const size_t n = real + pending.size();
    const size_t n_below = NBelow(n);
    const LossOrder& order = Order(joint_losses.by_loss, losses, pending.size(), lie);
    const size_t dims = joint.size();

    thread_local JointGroup good, bad;
    for (JointGroup* g : {&good, &bad}) {
      g->values.clear();
      g->log_w.clear();
    }
    auto add = [&](const sdk::Assignment& a, size_t pos) {
      JointGroup& g = pos < n_below ? good : bad;
      for (size_t d = 0; d < dims; ++d) g.values.push_back(a[joint[d]].value_or(0.0));
      g.log_w.push_back(std::log(GroupWeight(pos, n_below, n, 0)));
    };
    for (size_t i = 0; i < real; ++i) add(xs[i], order.real_pos[i]);
    for (size_t j = 0; j < pending.size(); ++j) add(pending[j], order.lie_start + j);
    FinishGroup(good);
    FinishGroup(bad);

    thread_local std::vector<double> x, best_x, terms;
    x.resize(dims);
    best_x.assign(dims, 0.0);
    double best_score = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < options.n_ei_candidates; ++c) {
      JointSample(good, DrawIndex(good.w, good.total, rng), rng, x.data());
      const double score = JointLogPdf(good, x.data(), terms) - JointLogPdf(bad, x.data(), terms);
      if (c == 0 || score > best_score) {
        best_score = score;
        best_x = x;
      }
    }
    for (size_t d = 0; d < dims; ++d) out[joint[d]] = best_x[d];
  }

  sdk::Assignment Suggest(std::mt19937_64& rng, const std::vector<sdk::Assignment>& pending,
                          double lie) const {
    const auto& params = space->params();
    sdk::Assignment a(params.size());
    const bool joint_model =
        !joint.empty() && xs.size() + pending.size() >= static_cast<size_t>(options.n_startup_jobs);
    if (joint_model) SuggestJoint(pending, lie, rng, a);
    for (size_t i = 0; i < params.size(); ++i) {
      if (joint_model && params[i].parent < 0) continue;
      if (space->IsActive(i, a)) a[i] = SuggestOne(i, pending, lie, rng);
    }
    return a;
  }
};

Model::Model(const sdk::SearchSpace* space, Options options)
    : impl_(std::make_unique<Impl>(space, options)) {}
Model::~Model() = default;
Model::Model(const Model& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Model& Model::operator=(const Model& other) {
  impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}

void Model::Add(const sdk::Assignment& x, double loss) { impl_->Add(x, loss); }
void Model::AddMany(const std::vector<std::pair<sdk::Assignment, double>>& observations) {
  for (const auto& [x, loss] : observations) impl_->Add(x, loss, /*index=*/false);
  impl_->Reindex();
}
size_t Model::size() const { return impl_->xs.size(); }
size_t Model::NBelow(size_t n) const { return impl_->NBelow(n); }
const Options& Model::options() const { return impl_->options; }

sdk::Assignment Model::Suggest(std::mt19937_64& rng, const std::vector<sdk::Assignment>& pending,
                               double lie) const {
  return impl_->Suggest(rng, pending, lie);
}

void Model::Pack(msgpack::packer<msgpack::sbuffer>& pk) const {
  pk.pack_array(static_cast<uint32_t>(impl_->xs.size()));
  for (size_t i = 0; i < impl_->xs.size(); ++i) {
    pk.pack_array(2);
    sdk::PackAssignment(pk, impl_->xs[i]);
    sdk::PackFloat64(pk, impl_->losses[i]);
  }
}

void Model::Unpack(const msgpack::object& o) {
  auto bad = [](const std::string& what) {
    return sdk::Error(TH_INVALID_ARGUMENT, "tpe: saved state: observations: " + what);
  };
  if (o.type != msgpack::type::ARRAY) throw bad("not an array");
  Impl fresh(impl_->space, impl_->options);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    const msgpack::object& rec = o.via.array.ptr[i];
    std::optional<sdk::Assignment> x;
    if (rec.type == msgpack::type::ARRAY && rec.via.array.size == 2 &&
        sdk::IsNumber(rec.via.array.ptr[1])) {
      x = sdk::UnpackAssignment(rec.via.array.ptr[0], *impl_->space);
    }
    if (!x) throw bad("record " + std::to_string(i) + " does not fit the search space");
    fresh.Add(*x, sdk::AsDouble(rec.via.array.ptr[1], "loss"), /*index=*/false);
  }
  fresh.Reindex();
  *impl_ = std::move(fresh);
}

}  // namespace tunehost::plugins::tpe
