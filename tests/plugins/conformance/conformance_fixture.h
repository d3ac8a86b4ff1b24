// Shared by the conformance tests of the built-in plugins
// (conformance_test.cc: tuners, conformance_assessor_test.cc: assessors):
// bytes and values, the plugins of this build loaded through the host's
// PluginRegistry, the test of one row of the table, and the run logs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
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

namespace conformance_testing {

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

inline std::string Pack(const Json& j) {
  std::vector<uint8_t> bytes = Json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

// The JSON of MessagePack bytes, or nullopt when they are not MessagePack.
inline std::optional<Json> Unpack(std::string_view bytes) {
  try {
    return Json::from_msgpack(bytes.begin(), bytes.end());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

inline std::string JsonText(std::string_view bytes) {
  std::optional<Json> j = Unpack(bytes);
  return j ? j->dump() : "<not MessagePack>";
}

// A deterministic objective of a parameter map (nested maps included): every
// key's value weighs differently, so different maps get different results.
inline double Objective(const Json& params) {
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

inline double Frac(double x) { return x - std::floor(x); }

// ---------------------------------------------------------------------------
// Rows of the table (TunerRow in conformance_test.cc, AssessorRow in
// conformance_assessor_test.cc).

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

// ---------------------------------------------------------------------------
// The plugins of this build.

inline th::PluginRegistry& Registry() {
  static th::PluginRegistry registry;
  static const bool loaded = [] {
    spdlog::set_level(spdlog::level::warn);  // plugins' info logs would drown the output
    registry.LoadDirectory(TH_DEFAULT_PLUGIN_DIR);
    return true;
  }();
  (void)loaded;
  return registry;
}

inline bool TargetInBuild(const std::string& target) {
  std::stringstream list(TH_CONFORMANCE_BUILT_TARGETS);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item == target) return true;
  }
  return false;
}

enum class Availability { kLoaded, kNotInBuild, kMissing };

// Whether plugin `name` of `kind` is loaded; *why explains otherwise.
inline Availability Find(const std::string& kind, const std::string& name,
                         const std::string& target, std::string* why) {
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
inline std::string FirstDifference(const std::vector<Record>& a, size_t from_a,
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
inline void NoteFailure(const std::string& label, const char* op, const Status& st,
                        std::vector<Record>* log) {
  if (st.ok()) return;
  ADD_FAILURE() << label << ": " << op << ": " << st.ToString();
  log->push_back({std::string(op) + " error " + st.ToString(), ""});
}

}  // namespace conformance_testing
