// Search spaces of the tuners' conformance tests (conformance_test.cc), the
// check that a parameter map lies inside one, and values sampled from one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "conformance_fixture.h"

namespace conformance_testing {

// ---------------------------------------------------------------------------
// Search spaces and the check that a value lies inside one.

inline bool IsNestedChoice(const Json& spec) {
  if (spec.at("_type") != "choice") return false;
  const Json& options = spec.at("_value");
  if (options.empty()) return false;
  return std::all_of(options.begin(), options.end(),
                     [](const Json& o) { return o.is_object() && o.contains("_name"); });
}

// The sub-space of a nested option: the option without "_name".
inline Json SubSpace(const Json& option) {
  Json sub = Json::object();
  for (const auto& item : option.items()) {
    if (item.key() != "_name") sub[item.key()] = item.value();
  }
  return sub;
}

inline bool MultipleOf(double v, double q) {
  double r = v / q;
  return std::fabs(r - std::round(r)) < 1e-6;
}

inline std::string CheckMap(const Json& space, const Json& params, const std::string& where,
                            const std::set<std::string>& extra_keys);

// Why `value` is not a value of parameter `spec`, or "".
inline std::string CheckValue(const Json& spec, const Json& value) {
  const std::string type = spec.at("_type").get<std::string>();
  const Json& arg = spec.at("_value");
  if (type == "choice") {
    if (IsNestedChoice(spec)) {
      if (!value.is_object() || !value.contains("_name")) return "not a nested choice map";
      for (const Json& option : arg) {
        if (option.at("_name") == value.at("_name")) {
          Json rest = value;
          rest.erase("_name");
          return CheckMap(SubSpace(option), rest, "option " + value.at("_name").dump(), {});
        }
      }
      return "no option named " + value.at("_name").dump();
    }
    for (const Json& option : arg) {
      if (option == value) return "";
    }
    return "not one of the options";
  }
  if (type == "randint") {
    if (!value.is_number_integer()) return "randint value is not an integer";
    int64_t v = value.get<int64_t>();
    if (v < arg[0].get<int64_t>() || v >= arg[1].get<int64_t>()) return "outside [lower, upper)";
    return "";
  }
  if (!value.is_number()) return "not a number";
  double v = value.get<double>();
  if (!std::isfinite(v)) return "not finite";
  double a = arg[0].get<double>();
  double b = arg[1].get<double>();
  auto inside = [&](double lo, double hi, double rel) {
    double slack = rel * std::max(std::fabs(lo), std::fabs(hi));
    return v >= lo - slack && v <= hi + slack;
  };
  if (type == "uniform") return inside(a, b, 1e-12) ? "" : "outside [low, high]";
  if (type == "loguniform") return inside(a, b, 1e-9) ? "" : "outside [low, high]";
  if (type == "quniform" || type == "qloguniform") {
    double q = arg[2].get<double>();
    if (!inside(a, b, 1e-9)) return "outside [low, high]";
    if (!MultipleOf(v, q) && v != a && v != b) return "not a multiple of q nor a bound";
    return "";
  }
  if (type == "normal") return "";
  if (type == "lognormal") return v > 0 ? "" : "lognormal value not positive";
  if (type == "qnormal") return MultipleOf(v, arg[2].get<double>()) ? "" : "not a multiple of q";
  if (type == "qlognormal") {
    if (v < 0) return "qlognormal value negative";
    return MultipleOf(v, arg[2].get<double>()) ? "" : "not a multiple of q";
  }
  return "unknown type " + type + " in the test's own space";
}

// Why `params` is not a parameter map of `space` (exactly its keys, plus
// `extra_keys`, which the caller checks), or "".
inline std::string CheckMap(const Json& space, const Json& params, const std::string& where,
                            const std::set<std::string>& extra_keys) {
  if (!params.is_object()) return where + ": not a map";
  for (const auto& item : space.items()) {
    if (!params.contains(item.key())) return where + ": key \"" + item.key() + "\" missing";
  }
  for (const auto& item : params.items()) {
    if (extra_keys.count(item.key())) continue;
    if (!space.contains(item.key())) return where + ": unexpected key \"" + item.key() + "\"";
    std::string bad = CheckValue(space.at(item.key()), item.value());
    if (!bad.empty()) return where + ": \"" + item.key() + "\" = " + item.value().dump() + ": " + bad;
  }
  return "";
}

// A value of `spec` chosen deterministically from (record i, parameter k):
// import records that differ from record to record and lie inside the space.
inline Json SampleValue(const Json& spec, size_t i, size_t k) {
  const std::string type = spec.at("_type").get<std::string>();
  const Json& arg = spec.at("_value");
  double u = Frac(static_cast<double>(i + 1) * 0.6180339887498949 + static_cast<double>(k) * 0.1372);
  if (type == "choice") {
    const Json& option = arg[(i * 7 + k) % arg.size()];
    if (!IsNestedChoice(spec)) return option;
    Json out = Json::object();
    out["_name"] = option.at("_name");
    size_t kk = 0;
    const Json sub = SubSpace(option);  // named: items() must not outlive it
    for (const auto& item : sub.items()) {
      out[item.key()] = SampleValue(item.value(), i, k + 1 + kk++);
    }
    return out;
  }
  if (type == "randint") {
    int64_t lo = arg[0].get<int64_t>();
    int64_t n = arg[1].get<int64_t>() - lo;
    return lo + static_cast<int64_t>((i * 3 + k) % static_cast<size_t>(n));
  }
  double a = arg[0].get<double>();
  double b = arg[1].get<double>();
  auto qround = [&](double v) {
    double q = arg[2].get<double>();
    return std::round(v / q) * q;
  };
  if (type == "uniform") return a + (b - a) * u;
  if (type == "quniform") return std::clamp(qround(a + (b - a) * u), a, b);
  if (type == "loguniform") return std::exp(std::log(a) + (std::log(b) - std::log(a)) * u);
  if (type == "qloguniform") {
    return std::clamp(qround(std::exp(std::log(a) + (std::log(b) - std::log(a)) * u)), a, b);
  }
  if (type == "normal") return a + b * (4 * u - 2);
  if (type == "qnormal") return qround(a + b * (4 * u - 2));
  if (type == "lognormal") return std::exp(a + b * (4 * u - 2));
  if (type == "qlognormal") return qround(std::exp(a + b * (4 * u - 2)));
  return nullptr;
}

inline Json SampleMap(const Json& space, size_t i) {
  Json out = Json::object();
  size_t k = 0;
  for (const auto& item : space.items()) out[item.key()] = SampleValue(item.value(), i, k++);
  return out;
}

// Every type of NNI's search space, no nesting (Hyperband, BOHB support these).
inline Json FlatSpace() {
  return Json::parse(R"({
    "lr":      {"_type": "loguniform",  "_value": [0.0001, 0.1]},
    "batch":   {"_type": "qloguniform", "_value": [16, 256, 16]},
    "units":   {"_type": "quniform",    "_value": [16, 128, 16]},
    "act":     {"_type": "choice",      "_value": ["relu", "tanh", "sigmoid"]},
    "layers":  {"_type": "randint",     "_value": [1, 5]},
    "dropout": {"_type": "uniform",     "_value": [0, 0.5]},
    "w":       {"_type": "normal",      "_value": [0, 1]},
    "shift":   {"_type": "qnormal",     "_value": [0, 4, 0.5]},
    "scale":   {"_type": "lognormal",   "_value": [0, 1]},
    "decay":   {"_type": "qlognormal",  "_value": [1, 0.5, 0.1]}
  })");
}

// FlatSpace plus a nested choice (TPE, Random, Grid, Anneal, Evolution).
inline Json NestedSpace() {
  Json space = FlatSpace();
  space["optimizer"] = Json::parse(R"({"_type": "choice", "_value": [
    {"_name": "sgd", "momentum": {"_type": "uniform", "_value": [0, 0.9]}},
    {"_name": "adam", "beta1": {"_type": "choice", "_value": [0.9, 0.99]},
                      "eps": {"_type": "loguniform", "_value": [1e-8, 1e-6]}},
    {"_name": "none"}]})");
  return space;
}

// Few parameters, so that BOHB's model (min_points_in_model = parameters + 1)
// is fitted within a scripted run.
inline Json SmallSpace() {
  return Json::parse(R"({
    "lr":    {"_type": "loguniform", "_value": [0.0001, 0.1]},
    "units": {"_type": "quniform",   "_value": [16, 128, 16]},
    "act":   {"_type": "choice",     "_value": ["relu", "tanh", "sigmoid"]}
  })");
}

constexpr const char* kBatchKey = "combine_params";
constexpr size_t kBatchOptions = 24;

// Batch: one choice whose options are the configurations; two of them are not
// maps (sent as {"combine_params": option}).
inline Json BatchSpace() {
  Json options = Json::array();
  for (size_t i = 0; i < kBatchOptions; ++i) {
    if (i == 5) {
      options.push_back(7);
    } else if (i == 11) {
      options.push_back("plain");
    } else {
      options.push_back(Json{{"x", i}, {"name", "c" + std::to_string(i)}});
    }
  }
  return Json{{kBatchKey, Json{{"_type", "choice"}, {"_value", options}}}};
}

inline Json UnknownTypeSpace() {
  return Json::parse(R"({"conform_bad_key": {"_type": "nosuchtype", "_value": [1]}})");
}

}  // namespace conformance_testing
