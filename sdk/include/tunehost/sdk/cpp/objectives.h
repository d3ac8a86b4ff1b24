// The objectives and constraints a multi-objective tuner reads from each
// trial's final result (wire-format.md §5.1, Metric), as its class_args name
// them. Header-only, SDK-only; used by `nsga2` and by `tpe` (MOTPE).
//
//   objectives:  {"default": "maximize", "latency": "minimize"}  (1 to 32 keys)
//   constraints: ["mem_over"]  (result keys whose value must be <= 0)
//
// "default" is the result's scalar; every other key is a numeric entry of the
// final result map. Without `objectives` the one objective is "default" in
// `optimize_mode`, which cannot be given together with `objectives`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/cpp/class_args.h"
#include "tunehost/sdk/cpp/helper.h"
#include "tunehost/sdk/cpp/pareto.h"
#include "tunehost/sdk/cpp/value.h"

namespace tunehost::sdk {

class ObjectiveSet {
 public:
  static constexpr size_t kMaxObjectives = 32;
  static constexpr size_t kMaxConstraints = 32;

  struct Objective {
    std::string name;
    bool maximize = false;
  };

  ObjectiveSet() = default;

  // Reads "objectives", "constraints" and (without objectives)
  // "optimize_mode" from `args`; throws the ClassArgs error naming the
  // argument on a bad value or a key named twice.
  static ObjectiveSet Parse(const ClassArgs& args, bool default_maximize) {
    ObjectiveSet s;
    s.plugin_ = args.plugin();
    if (const msgpack::object* o = args.Find("objectives")) {
      if (args.Has("optimize_mode")) {
        throw args.Bad("optimize_mode",
                       "cannot be given with \"objectives\", which gives each objective's "
                       "direction");
      }
      if (o->type != msgpack::type::MAP || o->via.map.size == 0 ||
          o->via.map.size > kMaxObjectives) {
        throw args.Bad("objectives", "must be a map of 1 to " + std::to_string(kMaxObjectives) +
                                         " result keys to \"maximize\" or \"minimize\", got " +
                                         ClassArgs::Describe(*o));
      }
      for (uint32_t i = 0; i < o->via.map.size; ++i) {
        const msgpack::object_kv& kv = o->via.map.ptr[i];
        Objective obj{KeyName(args, "objectives", kv.key), false};
        const std::string_view dir = IsString(kv.val) ? StringView(kv.val) : std::string_view();
        if (dir != "maximize" && dir != "minimize") {
          throw args.Bad("objectives", "\"" + obj.name +
                                           "\" must be \"maximize\" or \"minimize\", got " +
                                           ClassArgs::Describe(kv.val));
        }
        obj.maximize = dir == "maximize";
        s.objectives_.push_back(std::move(obj));
      }
      s.named_ = true;
    } else {
      s.objectives_.push_back({"default", args.Maximize(default_maximize)});
    }
    if (const msgpack::object* c = args.Find("constraints")) {
      if (c->type != msgpack::type::ARRAY || c->via.array.size > kMaxConstraints) {
        throw args.Bad("constraints", "must be a list of at most " +
                                          std::to_string(kMaxConstraints) + " result keys, got " +
                                          ClassArgs::Describe(*c));
      }
      for (uint32_t i = 0; i < c->via.array.size; ++i) {
        s.constraints_.push_back(KeyName(args, "constraints", c->via.array.ptr[i]));
      }
    }
    std::vector<std::string> names;
    for (const Objective& o : s.objectives_) names.push_back(o.name);
    names.insert(names.end(), s.constraints_.begin(), s.constraints_.end());
    std::sort(names.begin(), names.end());
    if (auto d = std::adjacent_find(names.begin(), names.end()); d != names.end()) {
      throw args.Bad(s.constraints_.empty() ? "objectives" : "constraints",
                     "names result key \"" + *d + "\" twice");
    }
    return s;
  }

  const std::vector<Objective>& objectives() const { return objectives_; }
  const std::vector<std::string>& constraints() const { return constraints_; }
  // True when class_args gave "objectives" (not only optimize_mode).
  bool named() const { return named_; }

  // What the scores of a saved state mean, for the state:
  // [[name, maximize], ..., [constraint, ...]].
  template <class Stream>
  void PackSignature(msgpack::packer<Stream>& pk) const {
    pk.pack_array(static_cast<uint32_t>(objectives_.size() + 1));
    for (const Objective& o : objectives_) {
      pk.pack_array(2);
      pk.pack(o.name);
      pk.pack(o.maximize);
    }
    pk.pack(constraints_);
  }
  // True when a saved signature (nullptr: none) is this set's.
  bool SameSignature(const msgpack::object* saved) const {
    if (saved == nullptr) return false;
    msgpack::sbuffer mine, theirs;
    msgpack::packer<msgpack::sbuffer> pm(mine);
    PackSignature(pm);
    msgpack::packer<msgpack::sbuffer>(theirs).pack(*saved);
    return std::string_view(mine.data(), mine.size()) ==
           std::string_view(theirs.data(), theirs.size());
  }

  // The minimized score of a final result (maximized objectives negated, a
  // NaN objective +infinity; violation: the sum of the positive constraint
  // values, infinite for a missing or NaN one), or nullopt when an
  // objective is missing or not a number. A warning names each such key
  // once.
  std::optional<Candidate> Score(const msgpack::object& value, double scalar,
                                 const HostRef& host) {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    auto number = [&](const std::string& key) -> std::optional<double> {
      if (key == "default") return scalar;
      const msgpack::object* v = value.type == msgpack::type::MAP ? FindKey(value, key) : nullptr;
      if (v == nullptr || !IsNumber(*v)) return std::nullopt;
      return AsDouble(*v, key);
    };
    Candidate c;
    for (const Objective& o : objectives_) {
      const std::optional<double> x = number(o.name);
      if (!x) {
        WarnOnce(host, o.name,
                 "a result without a numeric objective \"" + o.name +
                     "\" is not used; report a map holding every objective");
        return std::nullopt;
      }
      c.values.push_back(std::isnan(*x) ? kInf : o.maximize ? -*x : *x);
    }
    for (const std::string& name : constraints_) {
      const std::optional<double> x = number(name);
      if (!x) {
        WarnOnce(host, name,
                 "a result without a numeric constraint \"" + name + "\" counts as infeasible");
      }
      c.violation += !x || std::isnan(*x) ? kInf : std::max(0.0, *x);
    }
    return c;
  }

 private:
  // A result key's name as class_args give it: a non-empty string.
  static std::string KeyName(const ClassArgs& args, std::string_view arg,
                             const msgpack::object& k) {
    if (!IsString(k) || StringView(k).empty()) {
      throw args.Bad(arg, "names result keys: each must be a non-empty string, got " +
                              ClassArgs::Describe(k));
    }
    return std::string(StringView(k));
  }

  void WarnOnce(const HostRef& host, const std::string& key, const std::string& what) {
    if (std::find(warned_.begin(), warned_.end(), key) != warned_.end()) return;
    warned_.push_back(key);
    host.Warn(plugin_ + ": " + what + " (warned once per key)");
  }

  std::string plugin_;
  std::vector<Objective> objectives_;
  std::vector<std::string> constraints_;
  bool named_ = false;
  std::vector<std::string> warned_;  // keys a warning was given for
};

}  // namespace tunehost::sdk
