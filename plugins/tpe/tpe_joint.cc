#include "tpe_joint.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tpe_parzen.h"

namespace tunehost::plugins::tpe {
namespace {

// Multivariate bandwidth factor (see JointSampler::Bandwidth).
constexpr double kJointBandwidth = 0.05;

}  // namespace

JointSampler::JointSampler(const sdk::SearchSpace* space, const Options& options)
    : space_(space), options_(options) {
  if (!options_.multivariate) return;
  for (size_t i = 0; i < space_->params().size(); ++i) {
    if (space_->params()[i].parent < 0) joint_.push_back(i);
  }
}

JointSampler::JointSampler(const sdk::SearchSpace* space, const Options& options,
                           std::vector<size_t> params)
    : space_(space), options_(options), joint_(std::move(params)) {}

// Bandwidth of a numeric dimension for a group of `count` observations:
// Scott's rule, kJointBandwidth * prior sigma * n^(-1/(d+4)), never below
// sigma / 100. Optuna's multivariate TPE uses 0.2 (its source calls the
// constant possibly not optimal); 0.05 was measured on the benchmark
// functions at 100 and 300 trials (with 0.2 the joint model is only about
// level with Optuna's univariate TPE at 100 trials; data-scaled bandwidths
// collapse onto the first good points).
double JointSampler::Bandwidth(const sdk::Parameter& p, size_t count) const {
  const double dims = static_cast<double>(joint_.size());
  const double scale = PriorOf(p).sigma;
  const double factor =
      kJointBandwidth *
      std::pow(static_cast<double>(std::max<size_t>(count, 1)), -1.0 / (dims + 4.0));
  return std::max(scale * factor, scale / 100.0);
}

// What a categorical kernel of a group of n observations adds to every
// category: prior_weight / (n + 1), as Optuna's ParzenEstimator
// (_calculate_categorical_params). The group as a whole then adds about
// prior_weight to every category, as the per-parameter model's counts do
// (NNI: count + prior_weight; tpe_univariate.cc). This sampler used
// prior_weight / k per kernel before 2026-11-29, which gives the prior n / k
// times that weight: in the large "bad" group it flattened the categories so
// much that a combination tried often with bad results scored about as well
// as one never tried (mixed_cats in tools/bench/problems.py: median regret
// 0.35 against Optuna multivariate TPE's 0.015).
double JointSampler::CategorySpread(const Group& g) const {
  return options_.prior_weight / static_cast<double>(g.size() + 1);
}

void JointSampler::FinishGroup(Group& g) const {
  g.inv_bw.assign(joint_.size(), 0.0);
  g.log_same.assign(joint_.size(), 0.0);
  g.log_other.assign(joint_.size(), 0.0);
  g.log_norm = 0;
  for (size_t d = 0; d < joint_.size(); ++d) {
    const sdk::Parameter& p = space_->params()[joint_[d]];
    if (Categorical(options_, p)) {
      // An observation puts weight 1 on its category plus CategorySpread on
      // every category.
      const double k = static_cast<double>(p.size);
      const double v = CategorySpread(g);
      g.log_same[d] = std::log((1.0 + v) / (1.0 + k * v));
      g.log_other[d] = std::log(v / (1.0 + k * v));
      continue;
    }
    const double bw = Bandwidth(p, g.size());
    g.inv_bw[d] = 1.0 / bw;
    g.log_norm += -std::log(bw) - kLogSqrt2Pi;
  }
  g.w.resize(g.size());
  for (size_t j = 0; j < g.size(); ++j) g.w[j] = std::exp(g.log_w[j]);
  g.w.push_back(options_.prior_weight);  // the prior, as one more component
  g.total = std::accumulate(g.w.begin(), g.w.end(), 0.0);
}

// log of the group's (unnormalized) mixture density at x. As in the
// per-parameter mixtures (tpe_univariate.cc), terms far below the largest
// are skipped.
double JointSampler::LogPdf(const Group& g, const double* x, std::vector<double>& terms) const {
  constexpr double kCut = 36.0;
  const size_t dims = joint_.size();
  const double pw = options_.prior_weight;
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
    const sdk::Parameter& p = space_->params()[joint_[d]];
    if (Categorical(options_, p)) {
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
void JointSampler::Sample(const Group& g, size_t j, std::mt19937_64& rng, double* x) const {
  const bool is_prior = j == g.size();
  const size_t dims = joint_.size();
  for (size_t d = 0; d < dims; ++d) {
    const sdk::Parameter& p = space_->params()[joint_[d]];
    if (Categorical(options_, p)) {
      // Component j's own category with probability (1 + v) / (1 + k v),
      // that is: any category, uniformly, with probability k v / (1 + k v).
      const double kv = static_cast<double>(p.size) * CategorySpread(g);
      if (is_prior || sdk::Uniform01(rng) * (1.0 + kv) >= 1.0) {
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

// Joint suggestion of the group's parameters (multivariate TPE: product
// kernels with a Scott-rule bandwidth, as Optuna's multivariate=True,
// narrower).
void JointSampler::Suggest(const std::vector<sdk::Assignment>& xs,
                           const std::vector<uint32_t>* members, const std::vector<double>& losses,
                           const std::vector<uint32_t>& by_loss,
                           const std::vector<const sdk::Assignment*>& pending, double lie,
                           std::mt19937_64& rng, sdk::Assignment& out) const {
  const size_t real = losses.size();
  const size_t n = real + pending.size();
  const size_t n_below = NBelow(options_, n);
  const LossOrder& order = Order(by_loss, losses, pending.size(), lie);
  const size_t dims = joint_.size();

  thread_local Group good, bad;
  for (Group* g : {&good, &bad}) {
    g->values.clear();
    g->log_w.clear();
  }
  auto add = [&](const sdk::Assignment& a, size_t pos) {
    Group& g = pos < n_below ? good : bad;
    for (size_t d = 0; d < dims; ++d) g.values.push_back(a[joint_[d]].value_or(0.0));
    g.log_w.push_back(std::log(GroupWeight(options_, pos, n_below, n, 0)));
  };
  for (size_t i = 0; i < real; ++i) add(xs[members ? (*members)[i] : i], order.real_pos[i]);
  for (size_t j = 0; j < pending.size(); ++j) add(*pending[j], order.lie_start + j);
  FinishGroup(good);
  FinishGroup(bad);

  thread_local std::vector<double> x, best_x, terms;
  x.resize(dims);
  best_x.assign(dims, 0.0);
  double best_score = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < options_.n_ei_candidates; ++c) {
    Sample(good, DrawIndex(good.w, good.total, rng), rng, x.data());
    const double score = LogPdf(good, x.data(), terms) - LogPdf(bad, x.data(), terms);
    if (c == 0 || score > best_score) {
      best_score = score;
      best_x = x;
    }
  }
  for (size_t d = 0; d < dims; ++d) out[joint_[d]] = best_x[d];
}

}  // namespace tunehost::plugins::tpe
