// The plugins: creating and configuring them, the watchdog, and the calls posted to their strands.
#include "server_impl.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "tunehost/host/store.h"

namespace tunehost::host {

// Creates the strands and, on them, the plugins (a create that hangs is
// caught like any plugin call); the search space is applied by the caller.
Status Server::Impl::CreatePlugins(const p::ExperimentSpec& spec) {
  spec_ = spec;
  if (spec_.plugin_timeout_s) {
    options_.plugin_call_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(std::ceil(*spec_.plugin_timeout_s * 1000)));
  }
  PluginStrands::Kind failed = PluginStrands::kTuner;
  Status st = plugins_.Create(
      spec, options_.plugin_call_timeout, options_.plugin_runner,
      [this](int64_t id, p::Packed params) { return SendTrial(id, std::move(params)); },
      // An isolated plugin's crash or timeout, from its strand.
      [this](const std::string& code, const std::string& message, const std::string& source) {
        Complete([this, code, message, source] { Publish(p::ErrorEvent{code, message, source}); });
      },
      &failed);
  if (!st.ok()) {
    // Not initialized: a later IN may try again.
    NoteTimeout(failed, st);
    return CreateFailed(failed == PluginStrands::kTuner ? "tuner:" + spec.tuner.name
                                                        : "assessor:" + spec.assessor->name,
                        st);
  }
  if (spec_.id.empty()) spec_.id = "exp";
  EngineOptions eo;
  eo.experiment_id = spec_.id;
  eo.concurrency = spec_.concurrency;
  eo.max_trials = spec_.max_trials;
  eo.max_duration = std::chrono::milliseconds(static_cast<int64_t>(spec_.max_duration_s * 1000));
  eo.objectives = ObjectivesOf(spec_.tuner.args);
  eo.ack_timeout = options_.ack_timeout;
  eo.heartbeat_interval = options_.heartbeat_interval;
  eo.liveness = options_.liveness;
  eo.has_assessor = plugins_.assessor() != nullptr;
  eo.require_lease = options_.keys != nullptr;
  eo.max_consecutive_failures = options_.max_consecutive_failures;
  eo.prefetch = options_.prefetch;
  engine_.SetOptions(std::move(eo));
  if (options_.deduplicate && !deduplicating_) {
    deduplicating_ = true;
    engine_.AddMiddleware(std::make_unique<DeduplicateMiddleware>());
  }
  return Status::Ok();
}

// A plugin that refused to be created (bad class arguments, a throwing
// constructor) is an ER event as well as a failed reply; an unknown name is
// only the caller's error.
Status Server::Impl::CreateFailed(const std::string& source, const Status& st) {
  if (st.code() == Status::Code::kPluginError) {
    spdlog::error("{} failed: {}", source, st.message());
    Publish(p::ErrorEvent{std::string(st.CodeName()), st.message(), source});
  }
  return st;
}

Status Server::Impl::Configure(const p::ExperimentSpec& spec, const p::Packed& search_space) {
  if (configured_) return Status::BadState("experiment already configured");
  Status st = CreatePlugins(spec);
  if (!st.ok()) return st;
  st = SetupCall(PluginStrands::kTuner, "update_search_space",
                 [tuner = plugins_.tuner(), search_space] {
                   return tuner->UpdateSearchSpace(search_space);
                 });
  if (!st.ok()) return st;
  configured_ = true;
  if (store_ && store_->LatestSearchSpace() != search_space) {
    store_->AddSearchSpace(search_space);
    CommitStore();
  }
  return Status::Ok();
}

// A setup call (configure, resume): waited for at most the call limit and
// only while no stop was asked (PluginStrands::Wait).
Status Server::Impl::SetupCall(PluginStrands::Kind kind, const char* call,
                               std::function<Status()> fn) {
  Status st = plugins_.Wait(kind, call, std::move(fn));
  NoteTimeout(kind, st);
  return st;
}

// A call waited for that never returned is an ER event plugin_timeout.
void Server::Impl::NoteTimeout(PluginStrands::Kind kind, const Status& st) {
  if (plugins_.stuck(kind) && !stop_requested_.load() &&
      st.code() == Status::Code::kPluginError) {
    Publish(p::ErrorEvent{"plugin_timeout", st.message(), plugins_.Source(kind)});
  }
}

// The watchdog, once per loop turn: a plugin call that overran its limit
// is an ER event, once per call. An in-process tuner cannot be
// interrupted: the experiment fails (no new trials; what runs finishes).
// A hung in-process assessor is left alone: trials run on without
// assessment.
void Server::Impl::CheckWatchdog(Clock::time_point now) {
  for (const PluginStrands::Overrun& o : plugins_.Overruns(now)) {
    spdlog::error("{}", o.message);
    Publish(p::ErrorEvent{"plugin_timeout", o.message, o.source});
    if (o.kind == PluginStrands::kTuner) {
      engine_.Fail(o.message + "; an in-process plugin cannot be interrupted (isolation: "
                               "process restarts it instead)");
      // Nothing queued behind the stuck call will run: answer now.
      for (const Peer& peer : waiting_requests_.TakeAll()) {
        Reply(peer, Status::PluginError(o.message));
      }
    } else {
      spdlog::error("assessment stops: trials run to their end without it");
    }
  }
}

// --- EngineSink ---
void Server::Impl::RequestParameters(std::vector<int64_t> ids) {
  ++generates_in_flight_;
  PostTuner([this, ids] {
    std::vector<std::pair<int64_t, p::Packed>> out;
    bool no_more = false;
    Status st = plugins_.tuner()->Generate(ids, &out, &no_more);
    Complete([this, ids, out = std::move(out), no_more, st]() mutable {
      --generates_in_flight_;
      if (!st.ok()) PluginFailed("tuner", st);
      engine_.OnParameters(ids, std::move(out), no_more, st, Clock::now());
    });
  }, "generate");
}

void Server::Impl::TunerResult(const Trial& t, const p::Metric& metric) {
  // Results are numbered in the order the tuner gets them; a checkpoint
  // says how many it had seen, so a resume replays exactly the rest.
  if (store_) store_->SetResultOrder(t.id, results_handed_);
  ++results_handed_;
  bool customized = t.source != p::ParameterSource::kAlgorithm &&
                    t.source != p::ParameterSource::kExternal;
  PostTuner([this, id = t.parameter_id, params = t.parameters, metric, customized] {
    Status st = plugins_.tuner()->ReceiveTrialResult(id, params, metric.raw, metric.scalar, customized);
    if (!st.ok()) Complete([this, st] { PluginFailed("tuner", st); });
  }, "receive_trial_result");
}

void Server::Impl::TunerTrialEnd(const Trial& t, bool success) {
  PostTuner([this, id = t.parameter_id, success] {
    Status st = plugins_.tuner()->TrialEnd(id, success);
    if (!st.ok()) Complete([this, st] { PluginFailed("tuner", st); });
  }, "trial_end");
}

void Server::Impl::TunerBarrier() {
  PostTuner([this] { Complete([this] { engine_.OnTunerBarrier(Clock::now()); }); }, "");
}

void Server::Impl::AssessorAssess(const Trial& t, p::Packed history) {
  PostAssessor([this, id = t.id, attempt = t.attempt, history = std::move(history)] {
    bool good = true;
    Status st = plugins_.assessor()->AssessTrial(id, history, &good);
    Complete([this, id, attempt, good, st] {
      if (!st.ok()) {
        PluginFailed("assessor", st);
        return;  // a failing assessor never stops a trial
      }
      engine_.OnAssessment(id, attempt, good);
    });
  }, "assess_trial");
}

void Server::Impl::AssessorTrialEnd(const Trial& t, bool success) {
  PostAssessor([this, id = t.id, success] {
    Status st = plugins_.assessor()->TrialEnd(id, success);
    if (!st.ok()) Complete([this, st] { PluginFailed("assessor", st); });
  }, "trial_end");
}

// `call` names the plugin call for the watchdog. The tuner hears of a
// result or an end at once, before the loop turn's commit (wire-format.md
// §5.3): what it learns can only reach the store in that commit or a later
// one (its checkpoints, the trials it makes), and SQLite commits in order, so
// no stored checkpoint or trial ever depends on a result the store lacks. A
// crash before the commit loses the tuner's memory with it.
void Server::Impl::PostTuner(std::function<void()> fn, const char* call) {
  plugins_.Post(PluginStrands::kTuner, std::move(fn), call);
}

void Server::Impl::PostAssessor(std::function<void()> fn, const char* call) {
  AfterCommit([this, fn = std::move(fn), call]() mutable {
    plugins_.Post(PluginStrands::kAssessor, std::move(fn), call);
  });
}

Status Server::Impl::SendTrial(int64_t id, p::Packed params) {
  if (!engine_.ids().Claim(id)) {
    return Status::BadField("parameter id " + std::to_string(id) +
                            " was not handed to the tuner or was already used");
  }
  Complete([this, id, params = std::move(params)]() mutable {
    engine_.OnSentTrial(id, std::move(params), Clock::now());
  });
  return Status::Ok();
}

void Server::Impl::PluginFailed(const char* kind, const Status& st) {
  const std::string source = plugins_.Source(std::string(kind) == "tuner"
                                                 ? PluginStrands::kTuner
                                                 : PluginStrands::kAssessor);
  spdlog::error("{} failed: {}", source, st.message());
  Publish(p::ErrorEvent{std::string(st.CodeName()), st.message(), source});
}

}  // namespace tunehost::host
