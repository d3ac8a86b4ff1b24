#include "tpe_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "tpe_joint.h"
#include "tpe_parzen.h"
#include "tpe_univariate.h"
#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::plugins::tpe {

// The observations, indexed for the samplers; the per-parameter
// (tpe_univariate.h) and joint (tpe_joint.h) samplers draw from them.
struct Model::Impl {
  const sdk::SearchSpace* space;
  Options options;
  // Every observation in arrival order (the state).
  std::vector<sdk::Assignment> xs;
  std::vector<double> losses;
  std::vector<ParamHistory> per_param;
  ParamHistory joint_losses;  // by_loss over observations (values unused)
  UnivariateSampler univariate;
  // Multivariate: parameters modelled jointly (always active).
  JointSampler joint;
  // Multivariate with Options::group: the parameters directly under one
  // nested option, modelled jointly from the observations that took it.
  struct Branch {
    JointSampler sampler;
    size_t anchor;                 // its first parameter (all are active together)
    std::vector<uint32_t> members;  // observations (indices into xs) that took it
    ParamHistory history;          // their losses (values unused)
  };
  std::vector<Branch> branches;

  Impl(const sdk::SearchSpace* s, Options o)
      : space(s), options(o), univariate(s, options), joint(s, options) {
    per_param.resize(space->params().size());
    if (!options.multivariate || !options.group) return;
    // One branch per (parent, option), in the order of their first
    // parameter: a parent is flattened before what is nested in it, so a
    // branch is suggested after the one that holds its parent.
    std::map<std::pair<int, int>, std::vector<size_t>> by_option;
    for (size_t i = 0; i < space->params().size(); ++i) {
      const sdk::Parameter& p = space->params()[i];
      if (p.parent >= 0) by_option[{p.parent, p.parent_option}].push_back(i);
    }
    for (auto& [option, params] : by_option) {
      const size_t anchor = params.front();
      branches.push_back(Branch{JointSampler(space, options, std::move(params)), anchor, {}, {}});
    }
    std::sort(branches.begin(), branches.end(),
              [](const Branch& a, const Branch& b) { return a.anchor < b.anchor; });
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
    auto record = [&](ParamHistory& h) {
      if (index) {
        h.Add(0.0, loss);
      } else {
        h.Append(0.0, loss);
      }
    };
    record(joint_losses);
    for (Branch& b : branches) {
      if (!x[b.anchor]) continue;
      b.members.push_back(static_cast<uint32_t>(xs.size() - 1));
      record(b.history);
    }
  }
  void Reindex() {
    for (ParamHistory& h : per_param) h.Reindex();
    joint_losses.Reindex();
    for (Branch& b : branches) b.history.Reindex();
  }

  sdk::Assignment Suggest(std::mt19937_64& rng, const std::vector<sdk::Assignment>& pending,
                          double lie) const {
    const auto& params = space->params();
    sdk::Assignment a(params.size());
    // The joint samplers start once the experiment as a whole is past its
    // warm-up (Optuna's n_startup_trials), a branch from however many
    // observations took it; the per-parameter sampler counts the
    // parameter's own history (NNI).
    const bool joint_model =
        !joint.empty() && xs.size() + pending.size() >= static_cast<size_t>(options.n_startup_jobs);
    std::vector<const sdk::Assignment*> lies;
    std::vector<char> done(params.size(), 0);
    if (joint_model) {
      for (const sdk::Assignment& p : pending) lies.push_back(&p);
      joint.Suggest(xs, nullptr, losses, joint_losses.by_loss, lies, lie, rng, a);
      for (size_t i : joint.params()) done[i] = 1;
      for (const Branch& b : branches) {
        if (!space->IsActive(b.anchor, a)) continue;
        lies.clear();
        for (const sdk::Assignment& p : pending) {
          if (p[b.anchor]) lies.push_back(&p);
        }
        b.sampler.Suggest(xs, &b.members, b.history.losses, b.history.by_loss, lies, lie, rng, a);
        for (size_t i : b.sampler.params()) done[i] = 1;
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (done[i]) continue;
      if (space->IsActive(i, a)) a[i] = univariate.Suggest(i, per_param[i], pending, lie, rng);
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
size_t Model::NBelow(size_t n) const { return tpe::NBelow(impl_->options, n); }
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
