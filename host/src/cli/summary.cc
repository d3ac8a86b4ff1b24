// How the subcommands report an experiment: formatted values, the best
// trials, the --summary-json file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>

#include "cli.h"

namespace tunehost::host::cli {

namespace {

// A JSON text held as a string (parameters, metric values) as a JSON value;
// null when empty or unparsable.
nlohmann::ordered_json JsonValue(const std::string& text) {
  if (text.empty()) return nullptr;
  nlohmann::ordered_json v = nlohmann::ordered_json::parse(text, nullptr, false);
  return v.is_discarded() ? nlohmann::ordered_json() : v;
}

nlohmann::ordered_json JsonNumber(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (seconds <= 0) return "unlimited";
  if (std::fmod(seconds, 86400) == 0) return fmt::format("{}d", seconds / 86400);
  if (std::fmod(seconds, 3600) == 0) return fmt::format("{}h", seconds / 3600);
  if (std::fmod(seconds, 60) == 0) return fmt::format("{}m", seconds / 60);
  return fmt::format("{}s", seconds);
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

std::vector<std::string> StderrTail(const std::string& error, size_t n) {
  // tunehost-worker appends the trial's stderr after this line (trial_runner.cc).
  static constexpr std::string_view kMarker = "\nstderr (last 4 KiB):\n";
  const size_t at = error.find(kMarker);
  std::vector<std::string> lines;
  if (at == std::string::npos) return lines;
  size_t end = error.size();
  while (end > at + kMarker.size() && lines.size() < n) {
    size_t start = error.rfind('\n', end - 1);
    start = start == std::string::npos || start < at + kMarker.size() - 1
                ? at + kMarker.size()
                : start + 1;
    std::string line = error.substr(start, end - start);
    end = start > 0 ? start - 1 : 0;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line.size() > 200) line = line.substr(0, 197) + "...";
    lines.insert(lines.begin(), std::move(line));
  }
  return lines;
}

void PrintFailures(const ExperimentSummary& summary, const fs::path& experiment_dir) {
  const TrialSummary* last = nullptr;
  size_t failed = 0;
  for (const TrialSummary& t : summary.trials) {
    if (t.status != protocol::TrialStatus::kFailed) continue;
    ++failed;
    last = &t;
  }
  if (last == nullptr) return;
  std::printf("\n%zu trial(s) FAILED; the last, %s: %s\n", failed, last->trial_id.c_str(),
              FirstLine(last->error).c_str());
  for (const std::string& line : StderrTail(last->error, 10)) {
    std::printf("  | %s\n", line.c_str());
  }
  std::printf("  its logs: %s\n",
              (experiment_dir / "trials" / (last->trial_id + "-*")).string().c_str());
}

std::string FormatMetric(const std::optional<double>& m) {
  return m ? fmt::format("{:.4f}", *m) : std::string("-");
}

std::vector<const TrialSummary*> FrontTrials(const ExperimentSummary& s) {
  const std::set<std::string> ids(s.pareto_front.begin(), s.pareto_front.end());
  std::vector<const TrialSummary*> front;
  for (const TrialSummary& t : s.trials) {
    if (ids.count(t.trial_id) != 0) front.push_back(&t);
  }
  return front;
}

// The terminal trials with a metric, best first.
std::vector<const TrialSummary*> BestTrials(const ExperimentSummary& s, bool maximize, size_t n) {
  std::vector<const TrialSummary*> ranked;
  for (const TrialSummary& t : s.trials) {
    if (t.status == protocol::TrialStatus::kSucceeded && t.final_metric &&
        !std::isnan(*t.final_metric)) {
      ranked.push_back(&t);
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(), [maximize](auto* a, auto* b) {
    return maximize ? *a->final_metric > *b->final_metric : *a->final_metric < *b->final_metric;
  });
  if (ranked.size() > n) ranked.resize(n);
  return ranked;
}

// Machine-readable run summary (--summary-json), for scripts and tests.
bool WriteSummaryJson(const fs::path& file, const ExperimentSummary& s, const std::string& name,
                      const std::string& optimize_mode, bool maximize, const Objectives& o) {
  using Json = nlohmann::ordered_json;
  Json trials = Json::array();
  for (const TrialSummary& t : s.trials) {
    trials.push_back({{"sequence_id", t.sequence_id},
                      {"trial_id", t.trial_id},
                      {"status", protocol::ToString(t.status)},
                      {"final_metric", t.final_metric ? JsonNumber(*t.final_metric) : Json()},
                      {"final_result", JsonValue(t.final_metric_json)},
                      {"parameters", JsonValue(t.parameters_json)},
                      {"attempts", t.attempts},
                      {"error", t.error},
                      {"duration_s", JsonNumber(t.duration_s)}});
  }
  Json best = Json::array();
  for (const TrialSummary* t : BestTrials(s, maximize, 5)) best.push_back(t->trial_id);
  Json objectives = Json::object(), front = Json::array();
  for (const auto& [key, max] : o.objectives) objectives[key] = max ? "maximize" : "minimize";
  for (const TrialSummary* t : FrontTrials(s)) front.push_back(t->trial_id);
  Json j = {{"experiment_id", s.experiment_id},
            {"name", name},
            {"status", ToString(s.status)},
            {"error", s.error},
            {"optimize_mode", optimize_mode},
            {"offers", s.offers},
            {"rejects", s.rejects},
            {"reoffers", s.reoffers},
            {"trials", std::move(trials)},
            {"best", std::move(best)}};
  if (!o.objectives.empty()) {
    // Several objectives: "best" by the metric alone would mislead.
    j["best"] = front;
    j["objectives"] = std::move(objectives);
    j["constraints"] = o.constraints;
    j["pareto_front"] = std::move(front);
  }
  std::ofstream out(file, std::ios::trunc);
  // Replace invalid UTF-8 (trial error text is arbitrary bytes) instead of throwing.
  out << j.dump(1, ' ', false, Json::error_handler_t::replace) << "\n";
  return static_cast<bool>(out);
}

void PrintBestTrials(const ExperimentSummary& summary, bool maximize, const std::string& mode,
                     const Objectives& o) {
  if (!o.objectives.empty()) {
    std::string what;
    for (const auto& [key, max] : o.objectives) {
      what += (what.empty() ? "" : ", ") + key + (max ? " maximized" : " minimized");
    }
    for (const std::string& key : o.constraints) what += ", " + key + " <= 0";
    const std::vector<const TrialSummary*> front = FrontTrials(summary);
    std::printf("\nPareto front: %zu trial(s) (%s):\n", front.size(), what.c_str());
    for (const TrialSummary* t : front) {
      std::printf("  %-5llu %-14s %s  %s\n", static_cast<unsigned long long>(t->sequence_id),
                  t->trial_id.c_str(), t->final_metric_json.c_str(), t->parameters_json.c_str());
    }
    return;
  }
  std::vector<const TrialSummary*> best = BestTrials(summary, maximize, 5);
  if (best.empty()) {
    std::printf("no succeeded trial with a metric\n");
    return;
  }
  std::printf("\nbest trials (%s):\n", mode.c_str());
  std::printf("%-4s %-5s %-14s %10s  %s\n", "rank", "seq", "trial", "metric", "parameters");
  for (size_t i = 0; i < best.size(); ++i) {
    const TrialSummary& t = *best[i];
    std::printf("%-4zu %-5llu %-14s %10s  %s\n", i + 1,
                static_cast<unsigned long long>(t.sequence_id), t.trial_id.c_str(),
                FormatMetric(t.final_metric).c_str(), t.parameters_json.c_str());
  }
}

}  // namespace tunehost::host::cli
