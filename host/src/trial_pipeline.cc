// Trial event callbacks and middleware (NNI's ExecutionEngine): what the
// engine shows each trial event to, and the stages between the tuner and
// the workers.
#include <algorithm>

#include "engine_parts.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

int TrialPipeline::AddCallback(TrialEventCallback callback) {
  callbacks_.emplace_back(next_callback_, std::move(callback));
  return next_callback_++;
}

void TrialPipeline::RemoveCallback(int id) {
  callbacks_.erase(std::remove_if(callbacks_.begin(), callbacks_.end(),
                                  [id](const auto& c) { return c.first == id; }),
                   callbacks_.end());
}

void TrialPipeline::AddMiddleware(std::unique_ptr<TrialMiddleware> middleware) {
  middleware_.push_back(std::move(middleware));
}

bool TrialPipeline::Dispatch(TrialEvent& event) {
  for (auto& [id, callback] : callbacks_) {
    callback(event);
    if (event.cancel) return false;
  }
  return !event.prevent_default;
}

std::optional<p::Metric> TrialPipeline::Submit(Trial& trial, std::string_view* by) {
  for (auto& m : middleware_) {
    if (std::optional<p::Metric> result = m->OnSubmit(trial)) {
      *by = m->name();
      return result;
    }
  }
  return std::nullopt;
}

void TrialPipeline::Ended(const Trial& trial) {
  for (auto& m : middleware_) m->OnEnded(trial);
}

std::optional<p::Metric> DeduplicateMiddleware::OnSubmit(Trial& trial) {
  auto it = results_.find(trial.parameters);
  if (it == results_.end()) return std::nullopt;
  return it->second;
}

void DeduplicateMiddleware::OnEnded(const Trial& trial) {
  if (trial.status == p::TrialStatus::kSucceeded && trial.final_metric) {
    results_.emplace(trial.parameters, *trial.final_metric);
  }
}

}  // namespace tunehost::host
