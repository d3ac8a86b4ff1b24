#include "server_plugins.h"

#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "tunehost/host/store.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

namespace {
constexpr auto kCheckpointInterval = std::chrono::seconds(5);
}  // namespace

ServerPlugins::ServerPlugins(PluginRegistry* registry, const std::atomic<bool>* stop_requested,
                             Engine* engine, LoopSignal* loop, ServerStore* batch,
                             EngineSink* events)
    : stop_requested_(stop_requested),
      engine_(engine),
      loop_(loop),
      batch_(batch),
      events_(events),
      strands_(registry, stop_requested) {}

Status ServerPlugins::Create(const p::ExperimentSpec& spec, std::chrono::milliseconds call_timeout,
                             const std::filesystem::path& runner) {
  PluginStrands::Kind failed = PluginStrands::kTuner;
  Status st = strands_.Create(
      spec, call_timeout, runner,
      [this](int64_t id, p::Packed params) { return SendTrial(id, std::move(params)); },
      // An isolated plugin's crash or timeout, from its strand.
      [this](const std::string& code, const std::string& message, const std::string& source) {
        loop_->Post([this, code, message, source] {
          events_->Publish(p::ErrorEvent{code, message, source});
        });
      },
      &failed);
  if (st.ok()) return st;
  NoteTimeout(failed, st);
  return CreateFailed(
      failed == PluginStrands::kTuner ? "tuner:" + spec.tuner.name : "assessor:" + spec.assessor->name,
      st);
}

// A plugin that refused to be created (bad class arguments, a throwing
// constructor) is an ER event as well as a failed reply; an unknown name is
// only the caller's error.
Status ServerPlugins::CreateFailed(const std::string& source, const Status& st) {
  if (st.code() == Status::Code::kPluginError) {
    spdlog::error("{} failed: {}", source, st.message());
    events_->Publish(p::ErrorEvent{std::string(st.CodeName()), st.message(), source});
  }
  return st;
}

Status ServerPlugins::SetupCall(PluginStrands::Kind kind, const char* call,
                                std::function<Status()> fn) {
  Status st = strands_.Wait(kind, call, std::move(fn));
  NoteTimeout(kind, st);
  return st;
}

// A call waited for that never returned is an ER event plugin_timeout.
void ServerPlugins::NoteTimeout(PluginStrands::Kind kind, const Status& st) {
  if (strands_.stuck(kind) && !stop_requested_->load() &&
      st.code() == Status::Code::kPluginError) {
    events_->Publish(p::ErrorEvent{"plugin_timeout", st.message(), strands_.Source(kind)});
  }
}

// A plugin call that overran its limit is an ER event, once per call
// (§4.3). An in-process tuner cannot be interrupted: the experiment fails
// (no new trials; what runs finishes). A hung in-process assessor is left
// alone: trials run on without assessment.
std::vector<std::string> ServerPlugins::CheckWatchdog(Clock::time_point now) {
  std::vector<std::string> tuner_stuck;
  for (const PluginStrands::Overrun& o : strands_.Overruns(now)) {
    spdlog::error("{}", o.message);
    events_->Publish(p::ErrorEvent{"plugin_timeout", o.message, o.source});
    if (o.kind == PluginStrands::kTuner) {
      engine_->Fail(o.message + "; an in-process plugin cannot be interrupted (isolation: "
                                "process restarts it instead)");
      tuner_stuck.push_back(o.message);
    } else {
      spdlog::error("assessment stops: trials run to their end without it");
    }
  }
  return tuner_stuck;
}

void ServerPlugins::Failed(const char* kind, const Status& st) {
  const std::string source = strands_.Source(std::string(kind) == "tuner"
                                                 ? PluginStrands::kTuner
                                                 : PluginStrands::kAssessor);
  spdlog::error("{} failed: {}", source, st.message());
  events_->Publish(p::ErrorEvent{std::string(st.CodeName()), st.message(), source});
}

// --- EngineSink's plugin calls ---
void ServerPlugins::RequestParameters(std::vector<int64_t> ids) {
  ++generates_in_flight_;
  PostTuner([this, ids] {
    std::vector<std::pair<int64_t, p::Packed>> out;
    bool no_more = false;
    Status st = tuner()->Generate(ids, &out, &no_more);
    loop_->Post([this, ids, out = std::move(out), no_more, st]() mutable {
      --generates_in_flight_;
      if (!st.ok()) Failed("tuner", st);
      engine_->OnParameters(ids, std::move(out), no_more, st, Clock::now());
    });
  }, "generate");
}

void ServerPlugins::TunerResult(const Trial& t, const p::Metric& metric) {
  // Results are numbered in the order the tuner gets them; a checkpoint
  // says how many it had seen, so a resume replays exactly the rest.
  if (batch_->store()) batch_->store()->SetResultOrder(t.id, results_handed_);
  ++results_handed_;
  bool customized = t.source != p::ParameterSource::kAlgorithm &&
                    t.source != p::ParameterSource::kExternal;
  PostTuner([this, id = t.parameter_id, params = t.parameters, metric, customized] {
    Status st = tuner()->ReceiveTrialResult(id, params, metric.raw, metric.scalar, customized);
    if (!st.ok()) loop_->Post([this, st] { Failed("tuner", st); });
  }, "receive_trial_result");
}

void ServerPlugins::TunerTrialEnd(const Trial& t, bool success) {
  PostTuner([this, id = t.parameter_id, success] {
    Status st = tuner()->TrialEnd(id, success);
    if (!st.ok()) loop_->Post([this, st] { Failed("tuner", st); });
  }, "trial_end");
}

void ServerPlugins::TunerBarrier() {
  PostTuner([this] { loop_->Post([this] { engine_->OnTunerBarrier(Clock::now()); }); }, "");
}

void ServerPlugins::AssessorAssess(const Trial& t, p::Packed history) {
  PostAssessor([this, id = t.id, attempt = t.attempt, history = std::move(history)] {
    bool good = true;
    Status st = assessor()->AssessTrial(id, history, &good);
    loop_->Post([this, id, attempt, good, st] {
      if (!st.ok()) {
        Failed("assessor", st);
        return;  // a failing assessor never stops a trial
      }
      engine_->OnAssessment(id, attempt, good);
    });
  }, "assess_trial");
}

void ServerPlugins::AssessorTrialEnd(const Trial& t, bool success) {
  PostAssessor([this, id = t.id, success] {
    Status st = assessor()->TrialEnd(id, success);
    if (!st.ok()) loop_->Post([this, st] { Failed("assessor", st); });
  }, "trial_end");
}

// `call` names the plugin call for the watchdog. The tuner hears of a
// result or an end at once, before the loop turn's commit (wire-format.md
// §5.3): what it learns can only reach the store in that commit or a later
// one (its checkpoints, the trials it makes), and SQLite commits in order, so
// no stored checkpoint or trial ever depends on a result the store lacks. A
// crash before the commit loses the tuner's memory with it.
void ServerPlugins::PostTuner(std::function<void()> fn, const char* call) {
  strands_.Post(PluginStrands::kTuner, std::move(fn), call);
}

// The assessor hears of a trial only after the turn's commit.
void ServerPlugins::PostAssessor(std::function<void()> fn, const char* call) {
  batch_->AfterCommit([this, fn = std::move(fn), call]() mutable {
    strands_.Post(PluginStrands::kAssessor, std::move(fn), call);
  });
}

// The tuner's send_trial, from its strand.
Status ServerPlugins::SendTrial(int64_t id, p::Packed params) {
  if (!engine_->ids().Claim(id)) {
    return Status::BadField("parameter id " + std::to_string(id) +
                            " was not handed to the tuner or was already used");
  }
  loop_->Post([this, id, params = std::move(params)]() mutable {
    engine_->OnSentTrial(id, std::move(params), Clock::now());
  });
  return Status::Ok();
}

void ServerPlugins::Imported(const p::Packed& records) {
  // A resume replays it unless the tuner's checkpoint already holds it.
  if (batch_->store()) batch_->store()->AddImport(results_handed_, records);
  ++results_handed_;
  checkpoint_due_ = true;
}

// --- checkpoints ---
// Changes when the tuner has seen something new since the last checkpoint.
uint64_t ServerPlugins::CheckpointKey() const {
  return engine_->stats().created * 1000003 + static_cast<uint64_t>(results_handed_);
}

void ServerPlugins::CheckpointIfDue(Clock::time_point now) {
  if (checkpoint_due_ || (now - checkpointed_at_ >= kCheckpointInterval &&
                          CheckpointKey() != checkpointed_key_)) {
    Checkpoint();
  }
}

void ServerPlugins::Checkpoint(std::optional<Clock::time_point> wait_until) {
  if (!strands_.created()) return;
  checkpointed_at_ = Clock::now();
  checkpointed_key_ = CheckpointKey();
  checkpoint_due_ = false;
  auto save = [this](const char* kind, auto* plugin, uint64_t seen) {
    std::string state;
    bool supported = false;
    Status st = plugin->SaveState(&state, &supported);
    loop_->Post([this, kind, st, supported, seen, name = plugin->info().name,
                 state = std::move(state)]() mutable {
      bool& failing = checkpoint_failing_[kind];
      if (!st.ok()) {
        // An ER event when checkpoints start failing, not one per attempt:
        // a resume then replays from the last good one.
        if (!failing) {
          Failed(kind, Status::PluginError("save_state failed (the last good checkpoint "
                                           "stays; a resume replays from it): " +
                                           st.message()));
        }
        failing = true;
      } else {
        if (failing) spdlog::info("{} {}: checkpoints work again", kind, name);
        failing = false;
        if (supported && batch_->writable()) {
          batch_->store()->PutCheckpoint(kind, StoredCheckpoint{name, std::move(state), seen});
        }
      }
    });
  };
  std::vector<std::future<void>> done;
  auto post = [&](PluginStrands::Kind kind, auto fn) {
    if (strands_.stuck(kind)) return;
    auto task = std::make_shared<std::packaged_task<void()>>(std::move(fn));
    done.push_back(task->get_future());
    strands_.Post(kind, [task] { (*task)(); }, "save_state");
  };
  // Called after the loop turn's batch ran: every result numbered below
  // this was posted to the tuner before its save_state.
  const uint64_t seen = static_cast<uint64_t>(results_handed_);
  post(PluginStrands::kTuner, [save, this, seen] { save("tuner", tuner(), seen); });
  if (assessor() != nullptr) {
    post(PluginStrands::kAssessor, [save, this, seen] { save("assessor", assessor(), seen); });
  }
  if (!wait_until) return;
  for (auto& f : done) f.wait_until(*wait_until);
  loop_->RunAll();
  batch_->Commit();
}

}  // namespace tunehost::host
