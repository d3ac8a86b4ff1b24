#include "tunehost/host/pareto_front.h"

#include <cmath>
#include <exception>
#include <msgpack.hpp>
#include <string_view>

#include "tunehost/sdk/cpp/value.h"

namespace tunehost::host {
namespace {

std::string_view Str(const msgpack::object& o) {
  return o.type == msgpack::type::STR ? std::string_view(o.via.str.ptr, o.via.str.size)
                                      : std::string_view();
}

}  // namespace

Objectives ObjectivesOf(const protocol::Packed& tuner_args) {
  Objectives out;
  bool minimize = false;  // optimize_mode, for constraints without objectives
  try {
    msgpack::object_handle oh = msgpack::unpack(tuner_args.data(), tuner_args.size());
    const msgpack::object& args = oh.get();
    if (args.type != msgpack::type::MAP) return out;
    for (uint32_t i = 0; i < args.via.map.size; ++i) {
      const msgpack::object_kv& kv = args.via.map.ptr[i];
      if (Str(kv.key) == "objectives" && kv.val.type == msgpack::type::MAP) {
        for (uint32_t k = 0; k < kv.val.via.map.size; ++k) {
          const msgpack::object_kv& o = kv.val.via.map.ptr[k];
          if (!Str(o.key).empty()) {
            out.objectives.emplace_back(std::string(Str(o.key)), Str(o.val) == "maximize");
          }
        }
      } else if (Str(kv.key) == "optimize_mode") {
        minimize = Str(kv.val) == "minimize";
      } else if (Str(kv.key) == "constraints" && kv.val.type == msgpack::type::ARRAY) {
        for (uint32_t k = 0; k < kv.val.via.array.size; ++k) {
          const std::string_view c = Str(kv.val.via.array.ptr[k]);
          if (!c.empty()) out.constraints.emplace_back(c);
        }
      }
    }
  } catch (const std::exception&) {
    return Objectives{};  // unreadable: the tuner refused them
  }
  // Constraints alone: the one objective is the metric in optimize_mode
  // (maximize unless told, as the best trial's), so that an infeasible
  // trial is never the best.
  if (out.objectives.empty() && !out.constraints.empty()) {
    out.objectives.emplace_back("default", !minimize);
  }
  return out;
}

std::optional<sdk::Candidate> FeasibleScore(
    const Objectives& o, const std::function<std::optional<double>(const std::string&)>& number) {
  sdk::Candidate c;
  for (const auto& [key, maximize] : o.objectives) {
    const std::optional<double> x = number(key);
    if (!x || std::isnan(*x)) return std::nullopt;
    c.values.push_back(maximize ? -*x : *x);
  }
  for (const std::string& key : o.constraints) {
    const std::optional<double> x = number(key);
    if (!x || !(*x <= 0)) return std::nullopt;
  }
  return c;
}

std::optional<sdk::Candidate> FeasibleScore(const Objectives& o, const protocol::Metric& m) {
  msgpack::object_handle oh;
  try {
    oh = msgpack::unpack(m.raw.data(), m.raw.size());
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const msgpack::object& value = oh.get();
  return FeasibleScore(o, [&](const std::string& key) -> std::optional<double> {
    if (key == "default") return m.scalar;
    if (value.type != msgpack::type::MAP) return std::nullopt;
    for (uint32_t i = 0; i < value.via.map.size; ++i) {
      const msgpack::object& v = value.via.map.ptr[i].val;
      if (Str(value.via.map.ptr[i].key) == key) {
        return sdk::IsNumber(v) ? std::optional<double>(sdk::AsDouble(v, key)) : std::nullopt;
      }
    }
    return std::nullopt;
  });
}

void ParetoFront::SetObjectives(Objectives o) {
  objectives_ = std::move(o);
  members_.clear();
  scores_.clear();
}

void ParetoFront::Offer(const Trial* t, const protocol::Metric& final_metric) {
  if (objectives_.empty()) return;
  std::optional<sdk::Candidate> c = FeasibleScore(objectives_, final_metric);
  if (!c) return;
  for (const std::vector<double>& s : scores_) {
    if (sdk::Dominates(s, c->values)) return;
  }
  size_t kept = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (sdk::Dominates(c->values, scores_[i])) continue;
    if (kept != i) {  // a vector moved onto itself would be left empty
      members_[kept] = members_[i];
      scores_[kept] = std::move(scores_[i]);
    }
    ++kept;
  }
  members_.resize(kept);
  scores_.resize(kept);
  members_.push_back(t);
  scores_.push_back(std::move(c->values));
}

}  // namespace tunehost::host
