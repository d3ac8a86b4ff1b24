// Persistence: store commits, plugin checkpoints, and an experiment restored (resume) or viewed.
#include "server_impl.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>

#include "tunehost/host/store.h"

namespace tunehost::host {

using server_detail::Packer;
using server_detail::PackStr;
using server_detail::SummaryOf;
using server_detail::ToPacked;

namespace {

constexpr auto kCheckpointInterval = std::chrono::seconds(5);
constexpr auto kMetaInterval = std::chrono::seconds(1);

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A trial the host itself ended because the experiment stopped: a resumed
// experiment runs it again.
bool StoppedWithExperiment(const StoredTrial& s) {
  return s.state == "ENDED" && s.status == p::TrialStatus::kUserCanceled &&
         s.error == "experiment stopped";
}

Trial ToTrial(const StoredTrial& s) {
  Trial t;
  t.id = s.trial_id;
  t.sequence_id = s.sequence_id;
  t.parameter_id = s.parameter_id;
  t.source = s.source;
  t.parameters = s.parameters;
  t.state = s.state == "ENDED"     ? TrialState::kEnded
            : s.state == "RUNNING" ? TrialState::kRunning
                                   : TrialState::kWaiting;
  t.attempt = s.attempt;
  t.offers = s.offers;
  t.worker_id = s.worker_id;
  t.periodical = s.periodical;
  t.final_metric = s.final_metric;
  t.final_synthesized = s.final_synthesized;
  if (t.final_synthesized && !t.final_metric && !t.periodical.empty()) {
    t.final_metric = t.periodical.rbegin()->second;
  }
  t.status = s.status;
  t.error = s.error;
  // Stored wall-clock times as the engine's steady clock.
  const auto steady_now = Clock::now();
  const double wall_now = WallNow();
  auto steady = [&](double wall) {
    return steady_now - std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(wall_now - wall));
  };
  if (s.started > 0) t.started_at = steady(s.started);
  if (s.ended > 0) t.ended_at = steady(s.ended);
  return t;
}

}  // namespace

void Server::Impl::UseStore(Store* store) { store_ = store; }

// Rebuilds the engine's trials from stored ones. With `resume`, trials the
// experiment's stop ended are queued again (source "resumed").
void Server::Impl::RestoreTrials(const std::vector<StoredTrial>& stored, bool resume,
                                 std::chrono::milliseconds grace) {
  std::vector<const StoredTrial*> ended, open;
  for (const StoredTrial& s : stored) {
    bool again = resume && StoppedWithExperiment(s);
    (s.state == "ENDED" && !again ? ended : open).push_back(&s);
  }
  std::stable_sort(ended.begin(), ended.end(),
                   [](auto* a, auto* b) { return a->end_order < b->end_order; });
  const auto now = Clock::now();
  for (const StoredTrial* s : ended) {
    Trial t = ToTrial(*s);
    finished_.push_back(SummaryOf(t, s->started > 0 ? s->ended - s->started : 0));
    engine_.Restore(std::move(t), now, grace);
  }
  for (const StoredTrial* s : open) {
    Trial t = ToTrial(*s);
    if (t.state == TrialState::kRunning && !s->worker_key.empty()) {
      // Only the key its worker spoke with may take it back (§9).
      workers_by_key_.Tie(s->worker_id, s->worker_key);
    }
    if (t.state == TrialState::kEnded) {
      t.state = TrialState::kWaiting;
      t.status.reset();
      t.error.clear();
      t.worker_id.clear();
      t.NextAttempt();
      t.source = p::ParameterSource::kResumed;
      TrialChanged(t, "requeued", "experiment resumed");
    } else if (resume && t.state == TrialState::kWaiting) {
      // Its last offer may still be in a worker's hands (answered after
      // the host died, or queued in a socket); offers are not written to
      // the store before they are sent, so any trial that was not running
      // may have one out. That attempt is never run again: a new one is
      // (wire-format.md §5.3), and a worker that announces the old one is
      // told it is superseded.
      t.worker_id.clear();
      t.NextAttempt();
      TrialChanged(t, "requeued", "host restarted: an offer may be out");
    }
    engine_.Restore(std::move(t), now, grace);
  }
}

Status Server::Impl::Restore(std::chrono::milliseconds grace) {
  if (!configured_ || store_ == nullptr) {
    return Status::BadState("restore needs a configured experiment and a store");
  }
  std::vector<StoredTrial> stored;
  Status st = store_->Trials(&stored);
  if (!st.ok()) return st;
  int64_t next_id = 0;
  for (const StoredTrial& s : stored) next_id = std::max(next_id, s.parameter_id + 1);
  if (auto m = store_->Meta("next_parameter_id")) {
    next_id = std::max<int64_t>(next_id, std::strtoll(m->c_str(), nullptr, 10));
  }
  double elapsed_s = 0;
  if (auto m = store_->Meta("elapsed_s")) elapsed_s = std::strtod(m->c_str(), nullptr);
  engine_.RestoreCounters(next_id,
                          std::chrono::milliseconds(static_cast<int64_t>(elapsed_s * 1000)));

  // What the tuner knew: its checkpoint, then every result (and import)
  // numbered from the count it had seen (all of them without a checkpoint).
  uint64_t known = 0;
  bool from_checkpoint = false;
  if (auto cp = store_->Checkpoint("tuner"); cp && cp->plugin == plugins_.tuner()->info().name) {
    auto supported = std::make_shared<bool>(false);
    st = SetupCall(PluginStrands::kTuner, "load_state",
                   [tuner = plugins_.tuner(), state = cp->state, supported] {
      return tuner->LoadState(state, supported.get());
    });
    if (st.ok() && *supported) {
      known = cp->seen_results;
      from_checkpoint = true;
    } else {
      spdlog::warn("tuner {}: checkpoint not restored ({}); importing every result instead",
                   plugins_.tuner()->info().name, st.ok() ? "load_state not supported" : st.message());
    }
  }
  if (plugins_.assessor() != nullptr) {
    if (auto cp = store_->Checkpoint("assessor"); cp && cp->plugin == plugins_.assessor()->info().name) {
      auto supported = std::make_shared<bool>(false);
      st = SetupCall(PluginStrands::kAssessor, "load_state",
                     [assessor = plugins_.assessor(), state = cp->state, supported] {
                       return assessor->LoadState(state, supported.get());
                     });
      if (!st.ok()) spdlog::warn("assessor checkpoint not restored: {}", st.message());
    }
  }
  std::vector<std::pair<int64_t, p::Packed>> imports;
  st = store_->Imports(&imports);
  if (!st.ok()) return st;
  // (order, one record) for everything the tuner has not seen, in order.
  std::vector<std::pair<int64_t, msgpack::object_handle>> replay;
  auto record = [](const p::Packed& parameters, const p::Metric& value) {
    msgpack::sbuffer b;
    Packer pk(b);
    pk.pack_map(2);
    PackStr(pk, "parameters");
    b.write(parameters.data(), parameters.size());
    PackStr(pk, "value");
    b.write(value.raw.data(), value.raw.size());
    return msgpack::unpack(b.data(), b.size());
  };
  for (const StoredTrial& s : stored) {
    results_handed_ = std::max(results_handed_, s.result_order + 1);
    if (s.result_order < 0 || static_cast<uint64_t>(s.result_order) < known) continue;
    Trial t = ToTrial(s);
    if (t.final_metric) replay.emplace_back(s.result_order, record(t.parameters, *t.final_metric));
  }
  for (auto& [order, records] : imports) {
    results_handed_ = std::max(results_handed_, order + 1);
    if (order < 0 || static_cast<uint64_t>(order) < known) continue;
    msgpack::object_handle oh = msgpack::unpack(records.data(), records.size());
    if (oh.get().type != msgpack::type::ARRAY) continue;
    for (uint32_t i = 0; i < oh.get().via.array.size; ++i) {
      msgpack::sbuffer b;
      Packer pk(b);
      pk.pack(oh.get().via.array.ptr[i]);
      replay.emplace_back(order, msgpack::unpack(b.data(), b.size()));
    }
  }
  std::stable_sort(replay.begin(), replay.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  msgpack::sbuffer records;
  Packer pk(records);
  pk.pack_array(static_cast<uint32_t>(replay.size()));
  for (const auto& [order, oh] : replay) pk.pack(oh.get());
  const size_t n = replay.size();
  if (n > 0) {
    auto supported = std::make_shared<bool>(true);
    st = SetupCall(PluginStrands::kTuner, "import_data",
                   [tuner = plugins_.tuner(), data = ToPacked(records), supported] {
                     return tuner->ImportData(data, supported.get());
                   });
    if (!st.ok()) return st;
    if (!*supported) {
      spdlog::warn("tuner {} neither keeps state nor imports data: it starts from scratch "
                   "({} results not replayed)",
                   plugins_.tuner()->info().name, n);
    }
  }
  RestoreTrials(stored, /*resume=*/true, grace);
  spdlog::info("experiment {} resumed: {} trial(s) in the store, {} result(s) replayed to the "
               "tuner{}",
               spec_.id, stored.size(), n, from_checkpoint ? " after its checkpoint" : "");
  CommitStore();
  return Status::Ok();
}

Status Server::Impl::View(const p::ExperimentSpec& spec, const Store& store) {
  if (configured_) return Status::BadState("experiment already configured");
  std::vector<StoredTrial> stored;
  Status st = store.Trials(&stored);
  if (!st.ok()) return st;
  spec_ = spec;
  EngineOptions eo;
  eo.experiment_id = spec_.id;
  eo.concurrency = spec_.concurrency;
  eo.max_trials = spec_.max_trials;
  eo.max_duration = std::chrono::milliseconds(static_cast<int64_t>(spec_.max_duration_s * 1000));
  eo.objectives = ObjectivesOf(spec_.tuner.args);
  engine_.SetOptions(std::move(eo));
  double elapsed_s = 0;
  if (auto m = store.Meta("elapsed_s")) elapsed_s = std::strtod(m->c_str(), nullptr);
  engine_.RestoreCounters(0, std::chrono::milliseconds(static_cast<int64_t>(elapsed_s * 1000)));
  RestoreTrials(stored, /*resume=*/false, std::chrono::milliseconds(0));
  engine_.SetViewed();
  viewed_ = true;
  read_only_ = true;
  configured_ = true;
  return Status::Ok();
}

// --- EngineSink ---
void Server::Impl::TrialChanged(const Trial& t, std::string_view event, std::string_view detail) {
  if (!store_) return;
  const double now = WallNow();
  const bool started = event == "started" || event == "reattached";
  const bool ended = event == "ended";
  store_->PutTrial(t, event == "created" ? now : 0, started ? now : 0, ended ? now : 0,
                   ended ? static_cast<int64_t>(engine_.ended_order().size()) - 1 : -1,
                   workers_by_key_.KeyOf(t.worker_id));
  store_->AddTrialEvent(t.id, event, t.attempt, t.worker_id, detail);
  uncommitted_trials_.insert(t.id);
  // Earlier attempts' results stay in the store for the record, marked
  // superseded; nothing reads them back into a trial (wire-format.md §5.3).
  if (event == "requeued") store_->SupersedeMetrics(t.id, t.attempt);
}

void Server::Impl::MetricAccepted(const Trial& t, const p::ReportMetricData& m) {
  if (store_) store_->PutMetric(t.id, m);
}

// --- the store: acknowledgements and assessor calls wait for the commit ---
void Server::Impl::AfterCommit(std::function<void()> fn) {
  if (store_) {
    after_commit_.push_back(std::move(fn));
  } else {
    fn();
  }
}

// Commits what the store holds; false (and the experiment fails) when it
// cannot: nothing more is acknowledged, workers keep their results.
bool Server::Impl::CommitStore() {
  if (!store_) return true;
  Status st = store_->Commit();
  if (st.ok()) {
    uncommitted_trials_.clear();
    offer_journaled_at_.reset();
    return true;
  }
  after_commit_.clear();
  acks_.Clear();
  if (!store_failed_) {
    store_failed_ = true;
    Publish(p::ErrorEvent{"internal", st.message(), "store"});
    engine_.Fail("store failed: " + st.message());
    // Nothing can be acknowledged any more: stop (running trials are
    // killed; their workers keep what was not acknowledged).
    Stop();
  }
  return false;
}

// How long a turn's commit may wait for the tuner's answer (wire-format.md
// §5.3): the trial it makes is committed with it, one commit instead of two.
constexpr auto kCommitDeferral = std::chrono::milliseconds(1);
// How long the commit waits after an offer that left before it (its trial
// journaled): the commit's writes and locks would take the CPU from the
// offer's delivery (the host's I/O thread, the worker) on a small machine.
// A few round trips on loopback; what waits for the commit (MA, replies)
// waits that much longer. Chosen once, not tuned: only this value was tried
// (tools/bench/RESULTS.md).
constexpr auto kOfferCommitDelay = std::chrono::microseconds(300);

// How long the loop may sleep: until the deferred commit is due (the poll
// counts in milliseconds).
std::chrono::milliseconds Server::Impl::PollTimeout(std::chrono::milliseconds idle) const {
  if (!commit_due_) return idle;
  return std::clamp(std::chrono::ceil<std::chrono::milliseconds>(*commit_due_ - Clock::now()),
                    std::chrono::milliseconds(0), idle);
}

// Once per loop turn: experiment metadata now and then, the batch's commit,
// then what waited for it; a tuner checkpoint every kCheckpointInterval.
// While the tuner is asked for a trial to offer, the commit waits for its
// answer up to kCommitDeferral, so that one commit takes the turn's writes
// (a trial's end) and the trial it makes; after an offer that left before
// its commit, it waits kOfferCommitDelay.
void Server::Impl::FlushStore(bool final) {
  if (!store_ || store_failed_) return;
  const auto now = Clock::now();
  if (!final) {
    std::optional<Clock::time_point> due;
    if (generates_in_flight_ > 0) {
      if (!commit_deferred_since_) commit_deferred_since_ = now;
      due = *commit_deferred_since_ + kCommitDeferral;
    }
    if (offer_journaled_at_) {
      due = std::max(due.value_or(now), *offer_journaled_at_ + kOfferCommitDelay);
    }
    if (due && now < *due) {
      commit_due_ = due;
      return;
    }
  }
  commit_deferred_since_.reset();
  commit_due_.reset();
  const ExperimentStatus status = engine_.status();
  if (final || status != stored_status_ || now - meta_written_ >= kMetaInterval) {
    meta_written_ = now;
    stored_status_ = status;
    store_->SetMeta("status", ToString(status));
    store_->SetMeta("error", engine_.error());
    store_->SetMeta("elapsed_s",
                    std::chrono::duration<double>(engine_.elapsed(now)).count());
  }
  // Ids handed to the tuner are never handed out again after a resume,
  // even when its checkpoint is newer than the last metadata write.
  if (const int64_t next = engine_.ids().next(); next != stored_next_id_) {
    stored_next_id_ = next;
    store_->SetMeta("next_parameter_id", std::to_string(next));
  }
  if (!CommitStore()) return;
  std::vector<std::function<void()>> batch;
  batch.swap(after_commit_);
  for (auto& fn : batch) fn();
  if (!final && (checkpoint_due_ || (now - checkpointed_at_ >= kCheckpointInterval &&
                                     CheckpointKey() != checkpointed_key_))) {
    Checkpoint();
  }
}

// Changes when the tuner has seen something new since the last checkpoint.
uint64_t Server::Impl::CheckpointKey() const {
  return engine_.stats().created * 1000003 + static_cast<uint64_t>(results_handed_);
}

// Asks the plugins for their state after every call posted so far.
// Asks each plugin for its state; with `wait_until`, waits for the
// answers until then and commits them (at exit).
void Server::Impl::Checkpoint(std::optional<Clock::time_point> wait_until) {
  if (!plugins_.created() || viewed_) return;
  checkpointed_at_ = Clock::now();
  checkpointed_key_ = CheckpointKey();
  checkpoint_due_ = false;
  auto save = [this](const char* kind, auto* plugin, uint64_t seen) {
    std::string state;
    bool supported = false;
    Status st = plugin->SaveState(&state, &supported);
    Complete([this, kind, st, supported, seen, name = plugin->info().name,
              state = std::move(state)]() mutable {
      bool& failing = checkpoint_failing_[kind];
      if (!st.ok()) {
        // An ER event when checkpoints start failing, not one per attempt:
        // a resume then replays from the last good one.
        if (!failing) {
          PluginFailed(kind, Status::PluginError("save_state failed (the last good checkpoint "
                                                 "stays; a resume replays from it): " +
                                                 st.message()));
        }
        failing = true;
      } else {
        if (failing) spdlog::info("{} {}: checkpoints work again", kind, name);
        failing = false;
        if (supported && store_ && !store_failed_) {
          store_->PutCheckpoint(kind, StoredCheckpoint{name, std::move(state), seen});
        }
      }
    });
  };
  std::vector<std::future<void>> done;
  auto post = [&](PluginStrands::Kind kind, auto fn) {
    if (plugins_.stuck(kind)) return;
    auto task = std::make_shared<std::packaged_task<void()>>(std::move(fn));
    done.push_back(task->get_future());
    plugins_.Post(kind, [task] { (*task)(); }, "save_state");
  };
  // Called after the loop turn's batch ran: every result numbered below
  // this was posted to the tuner before its save_state.
  const uint64_t seen = static_cast<uint64_t>(results_handed_);
  post(PluginStrands::kTuner, [save, this, seen] { save("tuner", plugins_.tuner(), seen); });
  if (plugins_.assessor() != nullptr) {
    post(PluginStrands::kAssessor,
         [save, this, seen] { save("assessor", plugins_.assessor(), seen); });
  }
  if (!wait_until) return;
  for (auto& f : done) f.wait_until(*wait_until);
  RunCompletions();
  CommitStore();
}

}  // namespace tunehost::host
