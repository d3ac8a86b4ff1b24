// Live progress of `run`/`resume` (a header of cmd_run.cc's, apart so each
// file holds one job).
#pragma once

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include <spdlog/fmt/fmt.h>

#include "cli.h"

namespace tunehost::host::cli {

// Live progress of `run`/`resume`: trials done/total, running, failed, best
// so far, elapsed and ETA. On a terminal one status line is redrawn in place
// under the trial lines; otherwise a plain status line every 30 seconds.
class Progress {
 public:
  Progress(bool maximize, bool tty) : maximize_(maximize), tty_(tty) {}

  void Ended(const TrialSummary& t) {
    if (t.status == protocol::TrialStatus::kSucceeded && t.final_metric &&
        std::isfinite(*t.final_metric) &&
        (!best_ || (maximize_ ? *t.final_metric > *best_ : *t.final_metric < *best_))) {
      best_ = t.final_metric;
    }
  }

  // A line that stays (a trial ended), then the status line as it is now.
  void Line(const std::string& text, const ProgressInfo& now) {
    status_ = Format(now);
    std::printf("%s%s\n", tty_ ? "\r\033[K" : "", text.c_str());
    if (tty_) std::printf("%s", status_.c_str());
    std::fflush(stdout);
  }

  void Tick(const ProgressInfo& p) {
    status_ = Format(p);
    if (tty_) {
      std::printf("\r\033[K%s", status_.c_str());
    } else if (p.elapsed_s - printed_at_s_ >= 30) {
      printed_at_s_ = p.elapsed_s;
      std::printf("%s\n", status_.c_str());
    } else {
      return;
    }
    std::fflush(stdout);
  }

  void Done() {
    if (tty_ && !status_.empty()) std::printf("\r\033[K");
    std::fflush(stdout);
  }

 private:
  static uint64_t Count(const ProgressInfo& p, const char* status) {
    auto it = p.counts.find(status);
    return it == p.counts.end() ? 0 : it->second;
  }

  static std::string Clock(double seconds) {
    auto s = static_cast<long long>(seconds);
    return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  }

  std::string Format(const ProgressInfo& p) const {
    const uint64_t max_trials_ = p.max_trials;
    const double max_duration_s_ = p.max_duration_s;
    uint64_t ended = 0;
    for (const char* s :
         {"SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED", "EARLY_STOPPED"}) {
      ended += Count(p, s);
    }
    std::string eta = "-";
    double left = -1;
    if (max_trials_ > 0 && ended > 0 && ended < max_trials_) {
      left = p.elapsed_s / static_cast<double>(ended) * static_cast<double>(max_trials_ - ended);
    }
    if (max_duration_s_ > 0) {
      double by_time = std::max(0.0, max_duration_s_ - p.elapsed_s);
      left = left < 0 ? by_time : std::min(left, by_time);
    }
    if (left >= 0) eta = Clock(left);
    return fmt::format("{} | trials {}/{} | running {} | waiting {} | failed {} | best {} | "
                       "elapsed {} | eta {}",
                       ToString(p.status), ended,
                       max_trials_ ? std::to_string(max_trials_) : std::string("-"),
                       Count(p, "RUNNING"), Count(p, "WAITING"), Count(p, "FAILED"),
                       FormatMetric(best_), Clock(p.elapsed_s), eta);
  }

  bool maximize_;
  bool tty_;
  std::optional<double> best_;
  std::string status_;
  double printed_at_s_ = 0;
};

}  // namespace tunehost::host::cli
