// Several objectives and constraints: which trials are best when there is no
// one best. A multi-objective tuner's classArgs name the result keys
// (`objectives`: a map of keys to "maximize" or "minimize"; `constraints`: a
// list of keys whose values must be <= 0; wire-format.md §5.1, Metric); the
// host keeps the Pareto front of the SUCCEEDED trials whose results hold
// every objective and meet every constraint. Infeasible trials are never on
// it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tunehost/protocol/messages.h"
#include "tunehost/sdk/cpp/pareto.h"

namespace tunehost::host {

struct Trial;

struct Objectives {
  std::vector<std::pair<std::string, bool>> objectives;  // result key, maximize
  std::vector<std::string> constraints;                   // result keys, <= 0
  bool empty() const { return objectives.empty(); }
};

// The objectives the tuner's classArgs name; with constraints but no
// objectives, the metric ("default") in optimize_mode (maximize unless
// given); empty (one scalar metric) when they name neither or cannot be read
// (the tuner refuses those).
Objectives ObjectivesOf(const protocol::Packed& tuner_args);

// A result's minimized score (maximized objectives negated) if it holds every
// objective as a number that is not NaN and every constraint as a number
// <= 0; nullopt otherwise. `number(key)` reads one key of the result
// ("default" is the metric's scalar).
std::optional<sdk::Candidate> FeasibleScore(
    const Objectives& o, const std::function<std::optional<double>(const std::string&)>& number);
// The same for a final result as the wire carries it.
std::optional<sdk::Candidate> FeasibleScore(const Objectives& o, const protocol::Metric& m);

// The front, kept as results arrive: a result joins unless a member
// dominates it, and the members it dominates leave. O(front) per result;
// nothing scans all trials.
class ParetoFront {
 public:
  void SetObjectives(Objectives o);  // and forgets the members
  const Objectives& objectives() const { return objectives_; }
  // A SUCCEEDED trial's final result (`t` must outlive the front).
  void Offer(const Trial* t, const protocol::Metric& final_metric);
  // The members, in the order they joined.
  const std::vector<const Trial*>& members() const { return members_; }

 private:
  Objectives objectives_;
  std::vector<const Trial*> members_;
  std::vector<std::vector<double>> scores_;  // members_'s, minimized
};

}  // namespace tunehost::host
