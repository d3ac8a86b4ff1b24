// Conformance of the built-in plugins. Every tuner and assessor is loaded from
// the plugin output directory (TH_DEFAULT_PLUGIN_DIR) through the host's
// PluginRegistry, exactly as `tunehost` loads it, and driven through the
// host's Tuner / Assessor wrappers with a scripted run that imitates the
// engine: concurrency 3, results from a deterministic objective, every 5th
// trial ending failed without a result, and ids the tuner keeps as credit
// served through the send_trial callback given to CreateTuner.
//
// What every built-in must do, whatever its algorithm:
//   - the same seed and the same events give the same output, byte for byte
//     (parameters generated and sent later, in the same order);
//   - SaveState / LoadState into a new instance continues exactly like the
//     original, and saving changes nothing in the original;
//   - bad classArgs are refused at create time with a message naming the
//     argument; an unsupported search space is refused naming the key and
//     leaves the tuner as it was;
//   - ImportData is accepted, and the tuner goes on generating;
//   - every parameter map has exactly the space's keys (plus TRIAL_BUDGET for
//     the bracket tuners) and values inside the space;
//   - an assessor refuses a garbage history with an error and keeps working.
//
// A row whose plugin target is not part of this build is skipped; a row whose
// target is built but whose file is missing or refused FAILS.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "tunehost/host/plugin.h"
#include "tunehost/status.h"

#ifndef TH_CONFORMANCE_BUILT_TARGETS
#error "TH_CONFORMANCE_BUILT_TARGETS (comma-separated plugin targets of this build) is not set"
#endif

namespace {

namespace th = tunehost::host;
using tunehost::Status;
using Json = nlohmann::ordered_json;  // keeps key order, as the host does

constexpr size_t kConcurrency = 3;
constexpr int kFailEvery = 5;          // every 5th trial end is a failure without result
constexpr int kSteps = 60;             // events of a scripted tuner run
constexpr int kLongSteps = 120;        // the run that checks every emitted map
constexpr size_t kMinEmissions = 8;    // a run that emits less proves nothing
constexpr size_t kImportRecords = 30;
constexpr const char* kBudgetKey = "TRIAL_BUDGET";

// ---------------------------------------------------------------------------
// Bytes and values.

std::string Pack(const Json& j) {
  std::vector<uint8_t> bytes = Json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

// The JSON of MessagePack bytes, or nullopt when they are not MessagePack.
std::optional<Json> Unpack(std::string_view bytes) {
  try {
    return Json::from_msgpack(bytes.begin(), bytes.end());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string JsonText(std::string_view bytes) {
  std::optional<Json> j = Unpack(bytes);
  return j ? j->dump() : "<not MessagePack>";
}

// A deterministic objective of a parameter map (nested maps included): every
// key's value weighs differently, so different maps get different results.
double Objective(const Json& params) {
  double acc = 0;
  double weight = 1;
  for (const auto& item : params.items()) {
    const Json& v = item.value();
    if (v.is_number()) {
      acc += weight * std::sin(v.get<double>() * weight + 0.5);
    } else if (v.is_string()) {
      acc += weight * 0.1 * static_cast<double>(v.get<std::string>().size());
    } else if (v.is_object()) {
      acc += weight * Objective(v);
    }
    weight += 1;
  }
  return acc;
}

// ---------------------------------------------------------------------------
// Search spaces and the check that a value lies inside one.

bool IsNestedChoice(const Json& spec) {
  if (spec.at("_type") != "choice") return false;
  const Json& options = spec.at("_value");
  if (options.empty()) return false;
  return std::all_of(options.begin(), options.end(),
                     [](const Json& o) { return o.is_object() && o.contains("_name"); });
}

// The sub-space of a nested option: the option without "_name".
Json SubSpace(const Json& option) {
  Json sub = Json::object();
  for (const auto& item : option.items()) {
    if (item.key() != "_name") sub[item.key()] = item.value();
  }
  return sub;
}

bool MultipleOf(double v, double q) {
  double r = v / q;
  return std::fabs(r - std::round(r)) < 1e-6;
}

std::string CheckMap(const Json& space, const Json& params, const std::string& where,
                     const std::set<std::string>& extra_keys);

// Why `value` is not a value of parameter `spec`, or "".
std::string CheckValue(const Json& spec, const Json& value) {
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
std::string CheckMap(const Json& space, const Json& params, const std::string& where,
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

double Frac(double x) { return x - std::floor(x); }

// A value of `spec` chosen deterministically from (record i, parameter k):
// import records that differ from record to record and lie inside the space.
Json SampleValue(const Json& spec, size_t i, size_t k) {
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

Json SampleMap(const Json& space, size_t i) {
  Json out = Json::object();
  size_t k = 0;
  for (const auto& item : space.items()) out[item.key()] = SampleValue(item.value(), i, k++);
  return out;
}

// Every type of NNI's search space, no nesting (Hyperband, BOHB support these).
Json FlatSpace() {
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
Json NestedSpace() {
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
Json SmallSpace() {
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
Json BatchSpace() {
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

Json UnknownTypeSpace() {
  return Json::parse(R"({"conform_bad_key": {"_type": "nosuchtype", "_value": [1]}})");
}

// ---------------------------------------------------------------------------
// The table.

enum class SpaceKind { kNni, kBatch };

struct TunerRow {
  static constexpr const char* kKind = "tuner";
  std::string label;   // test name suffix
  std::string plugin;  // registry name
  std::string target;  // CMake target that builds its file
  Json class_args;
  Json space;
  SpaceKind kind = SpaceKind::kNni;
  Json bad_space;               // refused at UpdateSearchSpace...
  std::string bad_space_key;    // ...with a message naming this key
  Json wrong_arg;               // a known argument with a wrong type or value...
  std::string wrong_arg_name;   // ...refused naming it
  bool takes_seed = true;
  bool saves_state = true;      // every built-in must
  bool imports = true;          // ImportData reports supported
  int64_t budget_max = 0;       // > 0: TRIAL_BUDGET in every map, in [1, budget_max]
};

void PrintTo(const TunerRow& row, std::ostream* os) { *os << row.label; }

// A row of the table (TunerRow or AssessorRow) with its names set.
template <class Row>
Row NewRow(std::string label, std::string plugin, std::string target) {
  Row r;
  r.label = std::move(label);
  r.plugin = std::move(plugin);
  r.target = std::move(target);
  return r;
}

// class_args a row's plugin must refuse at create time, each with the name
// the refusal must mention.
template <class Row>
std::vector<std::pair<Json, std::string>> BadClassArgs(const Row& row) {
  std::vector<std::pair<Json, std::string>> cases = {
      {Json{{"no_such_arg", 1}}, "no_such_arg"},
      {Json{{"optimize_mode", 5}}, "optimize_mode"},
      {row.wrong_arg, row.wrong_arg_name},
  };
  if (row.takes_seed) cases.push_back({Json{{"seed", "x"}}, "seed"});
  return cases;
}

std::vector<TunerRow> TunerRows() {
  const Json nested_choice = Json::parse(R"({"conform_nested_key": {"_type": "choice", "_value": [
      {"_name": "a", "x": {"_type": "uniform", "_value": [0, 1]}}, {"_name": "b"}]}})");
  Json batch_two_keys = BatchSpace();
  batch_two_keys["conform_second_key"] = Json{{"_type", "choice"}, {"_value", {1, 2}}};

  std::vector<TunerRow> rows;
  auto add = [&](TunerRow r) { rows.push_back(std::move(r)); };
  {
    TunerRow r = NewRow<TunerRow>("random", "random", "random");
    r.class_args = {{"seed", 11}};
    r.space = NestedSpace();
    r.wrong_arg = {{"seed", -1}};
    r.wrong_arg_name = "seed";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("tpe", "tpe", "tpe");
    r.class_args = {{"seed", 12}, {"optimize_mode", "maximize"}};
    r.space = NestedSpace();
    r.wrong_arg = {{"tpe_args", {{"gamma", "x"}}}};
    r.wrong_arg_name = "gamma";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("tpe_multivariate", "tpe", "tpe");
    r.class_args = {{"seed", 13}, {"tpe_args", {{"multivariate", true}, {"n_startup_jobs", 8}}}};
    r.space = NestedSpace();
    r.wrong_arg = {{"tpe_args", {{"multivariate", "yes"}}}};
    r.wrong_arg_name = "multivariate";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("grid", "grid", "grid");
    r.class_args = Json::object();
    r.space = NestedSpace();
    r.takes_seed = false;
    r.wrong_arg = {{"optimize_mode", "sideways"}};
    r.wrong_arg_name = "optimize_mode";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("batch", "batch", "batch");
    r.class_args = Json::object();
    r.space = BatchSpace();
    r.kind = SpaceKind::kBatch;
    r.bad_space = batch_two_keys;
    r.bad_space_key = "conform_second_key";
    r.takes_seed = false;
    r.wrong_arg = {{"optimize_mode", "sideways"}};
    r.wrong_arg_name = "optimize_mode";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("anneal", "anneal", "anneal");
    r.class_args = {{"seed", 14}, {"parallel_optimize", true}};
    r.space = NestedSpace();
    r.wrong_arg = {{"constant_liar_type", "median"}};
    r.wrong_arg_name = "constant_liar_type";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("evolution", "evolution", "evolution");
    r.class_args = {{"seed", 15}, {"population_size", 4}};
    r.space = NestedSpace();
    r.wrong_arg = {{"population_size", "x"}};
    r.wrong_arg_name = "population_size";
    add(r);
  }
  {
    // Fewer individuals than trials running: ids are kept as credit.
    TunerRow r = NewRow<TunerRow>("evolution_small_population", "evolution", "evolution");
    r.class_args = {{"seed", 18}, {"population_size", 2}};
    r.space = NestedSpace();
    r.wrong_arg = {{"population_size", 0}};
    r.wrong_arg_name = "population_size";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("hyperband", "hyperband", "hyperband");
    r.class_args = {{"seed", 16}, {"R", 9}, {"eta", 3}};
    r.space = FlatSpace();
    r.bad_space = nested_choice;
    r.bad_space_key = "conform_nested_key";
    r.wrong_arg = {{"eta", 1}};
    r.wrong_arg_name = "eta";
    r.budget_max = 9;
    add(r);
  }
  {
    // Serial brackets wait for each other: ids are kept as credit.
    TunerRow r = NewRow<TunerRow>("hyperband_serial", "hyperband", "hyperband");
    r.class_args = {{"seed", 19}, {"R", 9}, {"eta", 3}, {"exec_mode", "serial"}};
    r.space = FlatSpace();
    r.bad_space = nested_choice;
    r.bad_space_key = "conform_nested_key";
    r.wrong_arg = {{"exec_mode", "parallel"}};
    r.wrong_arg_name = "exec_mode";
    r.budget_max = 9;
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("bohb", "bohb", "hyperband");
    r.class_args = {{"seed", 17}, {"min_budget", 1}, {"max_budget", 9}, {"eta", 3}};
    r.space = SmallSpace();
    r.bad_space = nested_choice;
    r.bad_space_key = "conform_nested_key";
    r.wrong_arg = {{"max_budget", "x"}};
    r.wrong_arg_name = "max_budget";
    r.budget_max = 9;
    add(r);
  }
  for (TunerRow& r : rows) {
    if (r.bad_space.is_null()) {
      r.bad_space = UnknownTypeSpace();
      r.bad_space_key = "conform_bad_key";
    }
  }
  return rows;
}

// Why `bytes` is not a parameter map the row's tuner may emit, or "".
std::string ParameterProblem(const TunerRow& row, const std::string& bytes) {
  std::optional<Json> params = Unpack(bytes);
  if (!params) return "not MessagePack";
  if (row.kind == SpaceKind::kBatch) {
    for (const Json& option : row.space.at(kBatchKey).at("_value")) {
      Json expected = option.is_object() ? option : Json{{kBatchKey, option}};
      if (*params == expected) return "";
    }
    return "not one of the batch configurations";
  }
  std::set<std::string> extra;
  if (row.budget_max > 0) {
    extra.insert(kBudgetKey);
    if (!params->is_object() || !params->contains(kBudgetKey)) return "no TRIAL_BUDGET";
    const Json& b = params->at(kBudgetKey);
    if (!b.is_number_integer() || b.get<int64_t>() < 1 || b.get<int64_t>() > row.budget_max) {
      return "TRIAL_BUDGET " + b.dump() + " not an integer in [1, " +
             std::to_string(row.budget_max) + "]";
    }
  }
  return CheckMap(row.space, *params, "parameters", extra);
}

// kImportRecords records {"parameters", "value"} inside the row's space.
// Batch: three of its configurations and others that are not in its list
// (importing every option would leave nothing to run).
Json ImportRecords(const TunerRow& row) {
  Json records = Json::array();
  const int64_t budgets[] = {1, 3, 9};
  for (size_t i = 0; i < kImportRecords; ++i) {
    Json params;
    if (row.kind == SpaceKind::kBatch) {
      params = i < 3 ? row.space.at(kBatchKey).at("_value")[i]
                     : Json{{"x", 1000 + i}, {"name", "imported"}};
    } else {
      params = SampleMap(row.space, i);
      if (row.budget_max > 0) params[kBudgetKey] = std::min(budgets[i % 3], row.budget_max);
    }
    records.push_back(Json{{"parameters", params}, {"value", Objective(params)}});
  }
  return records;
}

// ---------------------------------------------------------------------------
// The plugins of this build.

th::PluginRegistry& Registry() {
  static th::PluginRegistry registry;
  static const bool loaded = [] {
    spdlog::set_level(spdlog::level::warn);  // plugins' info logs would drown the output
    registry.LoadDirectory(TH_DEFAULT_PLUGIN_DIR);
    return true;
  }();
  (void)loaded;
  return registry;
}

bool TargetInBuild(const std::string& target) {
  std::stringstream list(TH_CONFORMANCE_BUILT_TARGETS);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item == target) return true;
  }
  return false;
}

enum class Availability { kLoaded, kNotInBuild, kMissing };

// Whether plugin `name` of `kind` is loaded; *why explains otherwise.
Availability Find(const std::string& kind, const std::string& name, const std::string& target,
                  std::string* why) {
  for (const th::PluginInfo& info : Registry().plugins()) {
    if (info.kind == kind && info.name == name) return Availability::kLoaded;
  }
  if (!TargetInBuild(target)) {
    *why = "target " + target + " is not part of this build (plugin not written yet)";
    return Availability::kNotInBuild;
  }
  std::filesystem::path file = std::filesystem::path(TH_DEFAULT_PLUGIN_DIR) / (target + ".so");
  std::ostringstream os;
  os << kind << " " << name << " not loaded although target " << target << " is built; "
     << file.string() << (std::filesystem::exists(file) ? " exists" : " does not exist")
     << "; refused files:";
  for (const std::string& e : Registry().errors()) os << "\n  " << e;
  *why = os.str();
  return Availability::kMissing;
}

// A test of one row of the table: skipped when the row's plugin is not part
// of this build, failed when it is built but not loaded.
template <class Row>
class Conformance : public ::testing::TestWithParam<Row> {
 protected:
  void SetUp() override {
    std::string why;
    switch (Find(Row::kKind, row().plugin, row().target, &why)) {
      case Availability::kLoaded:
        return;
      case Availability::kNotInBuild:
        GTEST_SKIP() << why;
      case Availability::kMissing:
        FAIL() << why;
    }
  }
  const Row& row() const { return this->GetParam(); }
};

struct Record {
  std::string what;
  std::string bytes;  // parameters, when the record is an emission
};

// "" when a[from_a..] == b[from_b..], else where they first differ.
std::string FirstDifference(const std::vector<Record>& a, size_t from_a,
                            const std::vector<Record>& b, size_t from_b) {
  size_t na = a.size() - from_a;
  size_t nb = b.size() - from_b;
  for (size_t i = 0; i < std::min(na, nb); ++i) {
    const Record& x = a[from_a + i];
    const Record& y = b[from_b + i];
    if (x.what != y.what || x.bytes != y.bytes) {
      return "entry " + std::to_string(i) + ": \"" + x.what + " " + JsonText(x.bytes) +
             "\" vs \"" + y.what + " " + JsonText(y.bytes) + "\"";
    }
  }
  if (na != nb) return "lengths differ: " + std::to_string(na) + " vs " + std::to_string(nb);
  return "";
}

// A call of a scripted run that failed: a test failure, and an entry in the
// run's log.
void NoteFailure(const std::string& label, const char* op, const Status& st,
                 std::vector<Record>* log) {
  if (st.ok()) return;
  ADD_FAILURE() << label << ": " << op << ": " << st.ToString();
  log->push_back({std::string(op) + " error " + st.ToString(), ""});
}

// ---------------------------------------------------------------------------
// Tuner driver: the engine's side of a run, scripted.

// What the host side knows of a run; copied into a resumed driver.
struct TunerSim {
  int64_t next_id = 0;
  std::set<int64_t> open_ids;  // handed to the tuner and not used yet (its credit)
  std::deque<std::pair<int64_t, std::string>> running;  // created, not ended; oldest first
  bool exhausted = false;  // the last request came back short: ask again after a trial end
  int ended = 0;
};

class TunerDriver {
 public:
  explicit TunerDriver(const TunerRow& row) : row_(row) {}
  TunerDriver(const TunerDriver&) = delete;
  TunerDriver& operator=(const TunerDriver&) = delete;

  Status Create(const Json& class_args) {
    return Registry().CreateTuner(
        row_.plugin, Pack(class_args),
        [this](int64_t id, std::string params) { return OnSendTrial(id, std::move(params)); },
        &tuner_);
  }

  // Creates the instance with the row's class_args and sets its space.
  void Start() {
    Status st = Create(row_.class_args);
    ASSERT_TRUE(st.ok()) << row_.label << ": " << st.ToString();
    st = tuner_->UpdateSearchSpace(Pack(row_.space));
    ASSERT_TRUE(st.ok()) << row_.label << ": " << st.ToString();
  }

  th::Tuner& tuner() { return *tuner_; }

  // One engine event: ask for parameters for the free slots, or end the
  // oldest trial (its result first, or a failure without one).
  void Step() {
    if (!sim.exhausted && sim.running.size() < kConcurrency) {
      Request(kConcurrency - sim.running.size());
    } else if (!sim.running.empty()) {
      EndOldest();
    } else {
      log.push_back({"idle", ""});
    }
  }

  void Run(int steps) {
    for (int i = 0; i < steps; ++i) Step();
  }

  TunerSim sim;
  std::vector<Record> log;
  size_t emissions = 0;  // parameter maps, generated or sent
  size_t sent = 0;       // of which through send_trial (credit served later)

 private:
  void Request(size_t n) {
    std::vector<int64_t> ids;
    for (size_t i = 0; i < n; ++i) {
      ids.push_back(sim.next_id);
      sim.open_ids.insert(sim.next_id++);
    }
    std::vector<std::pair<int64_t, std::string>> out;
    bool no_more = false;
    Status st = tuner_->Generate(ids, &out, &no_more);
    Note("generate", st);
    for (auto& [id, bytes] : out) Emit("generated", id, std::move(bytes));
    if (no_more) {
      log.push_back({"no more trials", ""});
      sim.exhausted = true;
    }
  }

  void EndOldest() {
    auto [id, bytes] = std::move(sim.running.front());
    sim.running.pop_front();
    sim.exhausted = false;  // a trial end is when the engine asks again
    if (++sim.ended % kFailEvery == 0) {
      log.push_back({"failed " + std::to_string(id), ""});
      Note("trial_end", tuner_->TrialEnd(id, false));
      return;
    }
    std::optional<Json> params = Unpack(bytes);
    double value = params ? Objective(*params) : 0.0;
    char text[64];
    std::snprintf(text, sizeof text, "result %lld %.17g", static_cast<long long>(id), value);
    log.push_back({text, ""});
    Note("receive_trial_result",
         tuner_->ReceiveTrialResult(id, bytes, Pack(Json(value)), value, false));
    Note("trial_end", tuner_->TrialEnd(id, true));
  }

  Status OnSendTrial(int64_t id, std::string params) {
    if (!sim.open_ids.count(id)) {
      ADD_FAILURE() << row_.label << ": send_trial with id " << id
                    << ", which was not handed to the tuner or was already used";
      return Status::BadField("parameter id " + std::to_string(id) + " was not handed out");
    }
    ++sent;
    Emit("sent", id, std::move(params));
    return Status::Ok();
  }

  void Emit(const char* how, int64_t id, std::string bytes) {
    if (sim.open_ids.erase(id) == 0) {
      ADD_FAILURE() << row_.label << ": " << how << " id " << id << " was already used";
    }
    std::string problem = ParameterProblem(row_, bytes);
    EXPECT_EQ(problem, "") << row_.label << ": " << how << " id " << id << ": "
                           << JsonText(bytes);
    log.push_back({std::string(how) + " " + std::to_string(id), bytes});
    sim.running.emplace_back(id, std::move(bytes));
    ++emissions;
  }

  void Note(const char* op, const Status& st) { NoteFailure(row_.label, op, st, &log); }

  const TunerRow& row_;
  std::unique_ptr<th::Tuner> tuner_;
};

class TunerConformance : public Conformance<TunerRow> {};

TEST_P(TunerConformance, SameSeedSameOutput) {
  TunerDriver a(row()), b(row());
  ASSERT_NO_FATAL_FAILURE(a.Start());
  ASSERT_NO_FATAL_FAILURE(b.Start());
  a.Run(kSteps);
  b.Run(kSteps);
  EXPECT_GE(a.emissions, kMinEmissions);
  EXPECT_EQ(FirstDifference(a.log, 0, b.log, 0), "");
  RecordProperty("emissions", static_cast<int>(a.emissions));
  RecordProperty("sent_through_send_trial", static_cast<int>(a.sent));
}

// Drive A for k events (after an import, for one case), save, load into a new
// B with the same class_args and space, then drive both with the same events.
TEST_P(TunerConformance, CheckpointContinuesExactly) {
  TunerDriver reference(row());
  ASSERT_NO_FATAL_FAILURE(reference.Start());
  reference.Run(kSteps);

  struct Case {
    int k;
    bool import;
  };
  for (Case c : {Case{0, false}, Case{2, false}, Case{9, false}, Case{23, false},
                 Case{7, true}}) {
    SCOPED_TRACE("checkpoint after " + std::to_string(c.k) + " events" +
                 (c.import ? ", with imported data" : ""));
    TunerDriver a(row());
    ASSERT_NO_FATAL_FAILURE(a.Start());
    if (c.import) {
      bool supported = false;
      ASSERT_TRUE(a.tuner().ImportData(Pack(ImportRecords(row())), &supported).ok());
    }
    a.Run(c.k);
    std::string state;
    bool supported = false;
    Status st = a.tuner().SaveState(&state, &supported);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(supported, row().saves_state) << "save_state support";
    if (!supported) continue;

    TunerDriver b(row());
    ASSERT_NO_FATAL_FAILURE(b.Start());
    st = b.tuner().LoadState(state, &supported);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(supported) << "load_state not supported although save_state is";
    b.sim = a.sim;

    size_t mark = a.log.size();
    size_t emitted_before = a.emissions;
    a.Run(kSteps - c.k);
    b.Run(kSteps - c.k);
    EXPECT_GE(a.emissions - emitted_before, 1u) << "nothing emitted after the checkpoint";
    EXPECT_EQ(FirstDifference(a.log, mark, b.log, 0), "") << "resumed instance diverged";
    if (!c.import) {
      EXPECT_EQ(FirstDifference(a.log, 0, reference.log, 0), "")
          << "saving the state changed the saved instance's behaviour";
    }
  }
}

TEST_P(TunerConformance, BadClassArgsNamed) {
  for (const auto& [args, name] : BadClassArgs(row())) {
    SCOPED_TRACE("class_args " + args.dump());
    std::unique_ptr<th::Tuner> tuner;
    Status st = Registry().CreateTuner(row().plugin, Pack(args), nullptr, &tuner);
    EXPECT_EQ(st.code(), Status::Code::kPluginError) << st.ToString();
    EXPECT_NE(st.message().find(name), std::string::npos)
        << "message does not name \"" << name << "\": " << st.message();
    EXPECT_FALSE(tuner) << "an instance was created";
  }
}

TEST_P(TunerConformance, UnsupportedSearchSpaceNamedThenGoodSpaceWorks) {
  TunerDriver d(row());
  Status st = d.Create(row().class_args);
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = d.tuner().UpdateSearchSpace(Pack(row().bad_space));
  EXPECT_EQ(st.code(), Status::Code::kPluginError) << st.ToString();
  EXPECT_NE(st.message().find(row().bad_space_key), std::string::npos)
      << "message does not name the key \"" << row().bad_space_key << "\": " << st.message();

  st = d.tuner().UpdateSearchSpace(Pack(row().space));
  ASSERT_TRUE(st.ok()) << st.ToString();
  d.Run(12);
  EXPECT_GE(d.emissions, 3u);
}

// The host keeps using a tuner whose space update failed: the refusal must
// leave it exactly as it was.
TEST_P(TunerConformance, RefusedSearchSpaceChangesNothing) {
  TunerDriver reference(row()), d(row());
  ASSERT_NO_FATAL_FAILURE(reference.Start());
  ASSERT_NO_FATAL_FAILURE(d.Start());
  reference.Run(kSteps);
  d.Run(11);
  Status st = d.tuner().UpdateSearchSpace(Pack(row().bad_space));
  EXPECT_FALSE(st.ok());
  d.Run(kSteps - 11);
  EXPECT_EQ(FirstDifference(d.log, 0, reference.log, 0), "");
}

TEST_P(TunerConformance, ImportAcceptedThenGenerates) {
  Json records = ImportRecords(row());
  for (size_t i = 0; i < records.size(); ++i) {  // the test's own records must be valid
    if (row().kind == SpaceKind::kBatch && i >= 3) break;  // the rest are not in its list
    ASSERT_EQ(ParameterProblem(row(), Pack(records[i].at("parameters"))), "") << records[i].dump();
  }
  TunerDriver d(row());
  ASSERT_NO_FATAL_FAILURE(d.Start());
  bool supported = false;
  Status st = d.tuner().ImportData(Pack(records), &supported);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(supported, row().imports);
  d.Run(20);
  EXPECT_GE(d.emissions, 3u);
}

// Every map emitted in a long run (checked inside the driver) has exactly the
// space's keys and values inside the space.
TEST_P(TunerConformance, EmittedParametersInsideSpace) {
  TunerDriver d(row());
  ASSERT_NO_FATAL_FAILURE(d.Start());
  d.Run(kLongSteps);
  EXPECT_GE(d.emissions, kMinEmissions);
}

INSTANTIATE_TEST_SUITE_P(Builtin, TunerConformance, ::testing::ValuesIn(TunerRows()),
                         [](const ::testing::TestParamInfo<TunerRow>& info) {
                           return info.param.label;
                         });

// ---------------------------------------------------------------------------
// Assessors.

struct AssessorRow {
  static constexpr const char* kKind = "assessor";
  std::string label;
  std::string plugin;
  std::string target;
  Json class_args;
  Json wrong_arg;
  std::string wrong_arg_name;
  bool takes_seed = false;
  bool saves_state = true;
};

void PrintTo(const AssessorRow& row, std::ostream* os) { *os << row.label; }

std::vector<AssessorRow> AssessorRows() {
  std::vector<AssessorRow> rows;
  {
    AssessorRow r = NewRow<AssessorRow>("medianstop", "medianstop", "medianstop");
    r.class_args = {{"optimize_mode", "maximize"}, {"start_step", 2}};
    r.wrong_arg = {{"start_step", "x"}};
    r.wrong_arg_name = "start_step";
    rows.push_back(r);
  }
  {
    AssessorRow r = NewRow<AssessorRow>("curvefitting", "curvefitting", "curvefitting");
    r.class_args = {{"epoch_num", 20}, {"start_step", 4}, {"threshold", 0.95}, {"seed", 21}};
    r.wrong_arg = {{"epoch_num", 0}};
    r.wrong_arg_name = "epoch_num";
    r.takes_seed = true;
    rows.push_back(r);
  }
  return rows;
}

constexpr int kAssessorTrials = 24;
constexpr int kAssessorSteps = 300;  // more than the script has: it ends idle

// Learning curve of trial t at step s: saturating, different heights.
double CurveValue(int t, size_t s) {
  double height = 0.2 + 0.7 * Frac(t * 0.6180339887498949);
  double x = static_cast<double>(s + 1);
  return height * (1 - std::exp(-0.35 * x)) + 0.01 * std::sin(3.1 * x + t);
}

struct AssessorSim {
  struct Trial {
    std::string id;
    int index = 0;
    size_t length = 0;
    std::vector<double> history;
  };
  int next_trial = 0;
  std::vector<Trial> active;
  size_t turn = 0;
  int ended = 0;
};

class AssessorDriver {
 public:
  explicit AssessorDriver(const AssessorRow& row) : row_(row) {}

  void Start() {
    Status st = Registry().CreateAssessor(row_.plugin, Pack(row_.class_args), &assessor_);
    ASSERT_TRUE(st.ok()) << row_.label << ": " << st.ToString();
  }

  th::Assessor& assessor() { return *assessor_; }

  // One intermediate result of one of up to 3 running trials, assessed; a
  // trial stopped or at its last step ends (every 5th end a failure).
  void Step() {
    while (sim.active.size() < kConcurrency && sim.next_trial < kAssessorTrials) {
      int t = sim.next_trial++;
      sim.active.push_back({"trial" + std::to_string(t), t, 6 + static_cast<size_t>(t % 3) * 4, {}});
    }
    if (sim.active.empty()) {
      log.push_back({"idle", ""});
      return;
    }
    size_t slot = sim.turn++ % sim.active.size();
    AssessorSim::Trial& t = sim.active[slot];
    t.history.push_back(CurveValue(t.index, t.history.size()));
    bool good = true;
    Status st = assessor_->AssessTrial(t.id, Pack(Json(t.history)), &good);
    Note("assess_trial", st);
    log.push_back({"assess " + t.id + " step " + std::to_string(t.history.size()) +
                       (good ? " good" : " bad"),
                   ""});
    ++(good ? goods : bads);
    bool done = t.history.size() >= t.length;
    if (!good || done) {
      ++sim.ended;
      bool success = done && good && sim.ended % kFailEvery != 0;
      log.push_back({"end " + t.id + (success ? " succeeded" : " not succeeded"), ""});
      Note("trial_end", assessor_->TrialEnd(t.id, success));
      sim.active.erase(sim.active.begin() + static_cast<std::ptrdiff_t>(slot));
    }
  }

  void Run(int steps) {
    for (int i = 0; i < steps; ++i) Step();
  }

  AssessorSim sim;
  std::vector<Record> log;
  int goods = 0;
  int bads = 0;

 private:
  void Note(const char* op, const Status& st) { NoteFailure(row_.label, op, st, &log); }

  const AssessorRow& row_;
  std::unique_ptr<th::Assessor> assessor_;
};

class AssessorConformance : public Conformance<AssessorRow> {};

TEST_P(AssessorConformance, SameSeedSameDecisions) {
  AssessorDriver a(row()), b(row());
  ASSERT_NO_FATAL_FAILURE(a.Start());
  ASSERT_NO_FATAL_FAILURE(b.Start());
  a.Run(kAssessorSteps);
  b.Run(kAssessorSteps);
  EXPECT_EQ(FirstDifference(a.log, 0, b.log, 0), "");
  EXPECT_EQ(a.log.back().what, "idle") << "the script did not run to its end";
  // Both kinds of decision, so that the comparisons above mean something.
  EXPECT_GT(a.goods, 0);
  EXPECT_GT(a.bads, 0);
  RecordProperty("good_decisions", a.goods);
  RecordProperty("bad_decisions", a.bads);
}

TEST_P(AssessorConformance, CheckpointContinuesExactly) {
  AssessorDriver reference(row());
  ASSERT_NO_FATAL_FAILURE(reference.Start());
  reference.Run(kAssessorSteps);
  for (int k : {0, 30, 90, 160}) {
    SCOPED_TRACE("checkpoint after " + std::to_string(k) + " events");
    AssessorDriver a(row());
    ASSERT_NO_FATAL_FAILURE(a.Start());
    a.Run(k);
    std::string state;
    bool supported = false;
    Status st = a.assessor().SaveState(&state, &supported);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(supported, row().saves_state) << "save_state support";
    if (!supported) continue;

    AssessorDriver b(row());
    ASSERT_NO_FATAL_FAILURE(b.Start());
    st = b.assessor().LoadState(state, &supported);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(supported) << "load_state not supported although save_state is";
    b.sim = a.sim;
    size_t mark = a.log.size();
    a.Run(kAssessorSteps - k);
    b.Run(kAssessorSteps - k);
    EXPECT_EQ(FirstDifference(a.log, mark, b.log, 0), "") << "resumed instance diverged";
    EXPECT_EQ(FirstDifference(a.log, 0, reference.log, 0), "")
        << "saving the state changed the saved instance's behaviour";
  }
}

TEST_P(AssessorConformance, BadClassArgsNamed) {
  for (const auto& [args, name] : BadClassArgs(row())) {
    SCOPED_TRACE("class_args " + args.dump());
    std::unique_ptr<th::Assessor> assessor;
    Status st = Registry().CreateAssessor(row().plugin, Pack(args), &assessor);
    EXPECT_EQ(st.code(), Status::Code::kPluginError) << st.ToString();
    EXPECT_NE(st.message().find(name), std::string::npos)
        << "message does not name \"" << name << "\": " << st.message();
    EXPECT_FALSE(assessor) << "an instance was created";
  }
}

TEST_P(AssessorConformance, GarbageHistoryIsAnErrorAndAssessorKeepsWorking) {
  AssessorDriver d(row());
  ASSERT_NO_FATAL_FAILURE(d.Start());
  d.Run(20);
  for (const Json& garbage : {Json("not an array"), Json::array({"a", "b", "c"}),
                              Json{{"step", 1}}}) {
    SCOPED_TRACE("history " + garbage.dump());
    bool good = true;
    Status st = d.assessor().AssessTrial("garbage", Pack(garbage), &good);
    EXPECT_EQ(st.code(), Status::Code::kPluginError) << st.ToString();
  }
  bool good = false;
  Status st = d.assessor().AssessTrial("garbage", Pack(Json::array({0.1, 0.2})), &good);
  EXPECT_TRUE(st.ok()) << st.ToString();
  st = d.assessor().TrialEnd("garbage", false);
  EXPECT_TRUE(st.ok()) << st.ToString();

  // The rest of the script runs as if the garbage had not been there, since
  // "garbage" never succeeded.
  AssessorDriver reference(row());
  ASSERT_NO_FATAL_FAILURE(reference.Start());
  reference.Run(kAssessorSteps);
  d.Run(kAssessorSteps - 20);
  EXPECT_EQ(FirstDifference(d.log, 0, reference.log, 0), "");
}

INSTANTIATE_TEST_SUITE_P(Builtin, AssessorConformance, ::testing::ValuesIn(AssessorRows()),
                         [](const ::testing::TestParamInfo<AssessorRow>& info) {
                           return info.param.label;
                         });

}  // namespace
