// Fixtures of the multi-objective tuner tests (nsga2, tpe with objectives):
// results reported as maps, ZDT1 on five unit parameters and the hypervolume
// of its results.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plugins/plugin_testing.h"
#include "plugins/tuner_testing.h"

namespace tunehost::plugins::testing {

// x0 .. x4, uniform on [0, 1]: ZDT1's space.
inline const Json& Unit5() {
  static const Json space = Json::parse(R"({
  "x0": {"_type": "uniform", "_value": [0, 1]},
  "x1": {"_type": "uniform", "_value": [0, 1]},
  "x2": {"_type": "uniform", "_value": [0, 1]},
  "x3": {"_type": "uniform", "_value": [0, 1]},
  "x4": {"_type": "uniform", "_value": [0, 1]}
})");
  return space;
}

// Reports `value` (a number or a map) as the final result of trial `id`.
inline void Report(sdk::Tuner& t, int64_t id, const std::string& params, const Json& value) {
  msgpack::object_handle p = msgpack::unpack(params.data(), params.size());
  msgpack::object_handle v = MsgpackOf(value);
  const double scalar = value.is_number()                                       ? value.get<double>()
                        : value.contains("default") && value["default"].is_number() ? value["default"].get<double>()
                                                                                  : 0.0;
  t.ReceiveTrialResult(id, p.get(), v.get(), scalar, false);
}

// ZDT1 over the map's x0..x4: f1 = x0, f2 = g (1 - sqrt(x0 / g)), g = 1 + 9
// mean(x1..x4); the Pareto front is x1..x4 = 0.
inline Json Zdt1(const Json& params) {
  const double x0 = params["x0"].get<double>();
  double rest = 0;
  for (int i = 1; i < 5; ++i) rest += params["x" + std::to_string(i)].get<double>();
  const double g = 1 + 9 * rest / 4;
  return {{"default", 0}, {"f1", x0}, {"f2", g * (1 - std::sqrt(x0 / g))}};
}

// The area dominated by the points' first front and bounded by (1, 10).
inline double Hypervolume(std::vector<std::pair<double, double>> points) {
  std::sort(points.begin(), points.end());
  double area = 0, best_f2 = 10;
  for (const auto& [f1, f2] : points) {
    if (f1 >= 1 || f2 >= best_f2) continue;
    area += (1 - f1) * (best_f2 - f2);
    best_f2 = f2;
  }
  return area;
}

// Runs `trials` trials of ZDT1 in batches of `batch`; the hypervolume of all results.
inline double RunZdt1(sdk::Tuner& t, int trials, int batch) {
  std::vector<std::pair<double, double>> points;
  for (int64_t id = 0; id < trials; id += batch) {
    std::vector<std::string> params = GenerateN(t, batch, id);
    for (int i = 0; i < batch; ++i) {
      const Json v = Zdt1(ToJson(params[static_cast<size_t>(i)]));
      points.emplace_back(v["f1"].get<double>(), v["f2"].get<double>());
      Report(t, id + i, params[static_cast<size_t>(i)], v);
      t.TrialEnd(id + i, true);
    }
  }
  return Hypervolume(points);
}

}  // namespace tunehost::plugins::testing
