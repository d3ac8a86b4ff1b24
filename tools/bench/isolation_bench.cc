// Isolation benchmark: what `isolation: process` costs per plugin call.
// The same tuner is driven through the host's registry twice in one run,
// in-process and in a tunehost-plugin-runner process, with the calls one
// trial makes (generate one id, receive_trial_result, trial_end), and the
// per-trial cost is printed as a ratio plus the added time in µs. The random
// tuner shows the pure round-trip cost; tpe with a history shows it next to
// a tuner that computes something. Run with tools/bench/isolation.sh.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "tunehost/host/isolated_plugin.h"
#include "tunehost/host/plugin.h"
#include "tunehost/protocol/codec.h"

namespace {

namespace p = tunehost::protocol;
namespace th = tunehost::host;
using Clock = std::chrono::steady_clock;

p::Packed Json(const std::string& text) {
  p::Packed out;
  if (!p::JsonToPacked(text, &out).ok()) std::abort();
  return out;
}

struct Timing {
  double median_us = 0, p99_us = 0;
};

Timing Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)]};
}

// Times `trials` trials after `history` untimed ones.
Timing Run(th::PluginRegistry& registry, const std::string& tuner_name, bool isolated,
           int history, int trials) {
  th::IsolationOptions isolation;
  std::unique_ptr<th::Tuner> tuner;
  tunehost::Status st = registry.CreateTuner(tuner_name, Json(R"({"seed": 1})"), nullptr, &tuner,
                                             isolated ? &isolation : nullptr);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    std::exit(1);
  }
  (void)tuner->UpdateSearchSpace(Json(
      R"({"x": {"_type": "uniform", "_value": [0, 1]}, "y": {"_type": "loguniform", "_value": [0.001, 1]},
          "k": {"_type": "choice", "_value": [1, 2, 4, 8]}})"));
  std::vector<double> times;
  for (int64_t id = 0; id < history + trials; ++id) {
    const auto start = Clock::now();
    std::vector<std::pair<int64_t, p::Packed>> out;
    bool no_more = false;
    (void)tuner->Generate({id}, &out, &no_more);
    const double value = static_cast<double>(id % 97) / 97.0;
    if (!out.empty()) {
      (void)tuner->ReceiveTrialResult(id, out[0].second, p::PackDouble(value), value, false);
    }
    (void)tuner->TrialEnd(id, true);
    if (id >= history) {
      times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
  }
  return Summarize(times);
}

}  // namespace

int main(int argc, char** argv) {
  std::string plugins = "build/plugins";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--plugins") plugins = argv[i + 1];
  }
  spdlog::set_level(spdlog::level::warn);
  th::PluginRegistry registry;
  registry.LoadDirectory(plugins);
  std::printf("| tuner | history | in-process median / p99 (µs per trial) | isolated median / p99 "
              "| ratio (median) | added (median µs) |\n|---|---:|---:|---:|---:|---:|\n");
  struct Case {
    const char* tuner;
    int history;
    int trials;
  };
  for (const Case& c : {Case{"random", 0, 2000}, Case{"tpe", 100, 300}, Case{"tpe", 1000, 200}}) {
    // Interleaved rounds, so a busy machine slows both alike.
    std::vector<Timing> local, remote;
    for (int round = 0; round < 3; ++round) {
      local.push_back(Run(registry, c.tuner, false, c.history, c.trials));
      remote.push_back(Run(registry, c.tuner, true, c.history, c.trials));
    }
    // The round with the middle median, with its own p99.
    const auto middle = [](std::vector<Timing> v) {
      std::sort(v.begin(), v.end(),
                [](const Timing& a, const Timing& b) { return a.median_us < b.median_us; });
      return v[1];
    };
    const Timing l = middle(local), r = middle(remote);
    std::printf("| %s | %d | %.1f / %.1f | %.1f / %.1f | %.2f | %.1f |\n", c.tuner, c.history,
                l.median_us, l.p99_us, r.median_us, r.p99_us, r.median_us / l.median_us,
                r.median_us - l.median_us);
  }
  return 0;
}
