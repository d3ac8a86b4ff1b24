#include "experiment_loader.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>

#include "server_impl.h"

namespace tunehost::host {

using server_detail::Packer;
using server_detail::PackStr;
using server_detail::SummaryOf;
using server_detail::ToPacked;

namespace {

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

// One replay record {parameters, value}, as the tuner's import_data takes it.
msgpack::object_handle Record(const p::Packed& parameters, const p::Metric& value) {
  msgpack::sbuffer b;
  Packer pk(b);
  pk.pack_map(2);
  PackStr(pk, "parameters");
  b.write(parameters.data(), parameters.size());
  PackStr(pk, "value");
  b.write(value.raw.data(), value.raw.size());
  return msgpack::unpack(b.data(), b.size());
}

}  // namespace

void ExperimentLoader::RestoreTrials(const std::vector<StoredTrial>& stored, bool resume,
                                     std::chrono::milliseconds grace) {
  Engine& engine = server_.engine();
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
    server_.AddFinished(SummaryOf(t, s->started > 0 ? s->ended - s->started : 0));
    engine.Restore(std::move(t), now, grace);
  }
  for (const StoredTrial* s : open) {
    Trial t = ToTrial(*s);
    if (t.state == TrialState::kRunning && !s->worker_key.empty()) {
      // Only the key its worker spoke with may take it back (§9).
      server_.workers_by_key().Tie(s->worker_id, s->worker_key);
    }
    if (t.state == TrialState::kEnded) {
      t.state = TrialState::kWaiting;
      t.status.reset();
      t.error.clear();
      t.worker_id.clear();
      t.NextAttempt();
      t.source = p::ParameterSource::kResumed;
      server_.TrialChanged(t, "requeued", "experiment resumed");
    } else if (resume && t.state == TrialState::kWaiting) {
      // Its last offer may still be in a worker's hands (answered after
      // the host died, or queued in a socket); offers are not written to
      // the store before they are sent, so any trial that was not running
      // may have one out. That attempt is never run again: a new one is
      // (wire-format.md §5.3), and a worker that announces the old one is
      // told it is superseded.
      t.worker_id.clear();
      t.NextAttempt();
      server_.TrialChanged(t, "requeued", "host restarted: an offer may be out");
    }
    engine.Restore(std::move(t), now, grace);
  }
}

Status ExperimentLoader::Resume(std::chrono::milliseconds grace) {
  Store* store = server_.batch().store();
  if (!server_.state().configured || store == nullptr) {
    return Status::BadState("restore needs a configured experiment and a store");
  }
  std::vector<StoredTrial> stored;
  Status st = store->Trials(&stored);
  if (!st.ok()) return st;
  int64_t next_id = 0;
  for (const StoredTrial& s : stored) next_id = std::max(next_id, s.parameter_id + 1);
  if (auto m = store->Meta("next_parameter_id")) {
    next_id = std::max<int64_t>(next_id, std::strtoll(m->c_str(), nullptr, 10));
  }
  double elapsed_s = 0;
  if (auto m = store->Meta("elapsed_s")) elapsed_s = std::strtod(m->c_str(), nullptr);
  server_.engine().RestoreCounters(
      next_id, std::chrono::milliseconds(static_cast<int64_t>(elapsed_s * 1000)));
  // What the tuner knew: its checkpoint, then every result (and import)
  // numbered from the count it had seen (all of them without a checkpoint).
  uint64_t known = 0;
  const bool from_checkpoint = LoadCheckpoints(*store, &known);
  size_t replayed = 0;
  st = ReplayResults(*store, stored, known, &replayed);
  if (!st.ok()) return st;
  RestoreTrials(stored, /*resume=*/true, grace);
  spdlog::info("experiment {} resumed: {} trial(s) in the store, {} result(s) replayed to the "
               "tuner{}",
               server_.state().spec.id, stored.size(), replayed,
               from_checkpoint ? " after its checkpoint" : "");
  server_.batch().Commit();
  return Status::Ok();
}

bool ExperimentLoader::LoadCheckpoints(const Store& store, uint64_t* known) {
  ServerPlugins& plugins = server_.plugins();
  bool from_checkpoint = false;
  if (auto cp = store.Checkpoint("tuner"); cp && cp->plugin == plugins.tuner()->info().name) {
    auto supported = std::make_shared<bool>(false);
    Status st = plugins.SetupCall(PluginStrands::kTuner, "load_state",
                                  [tuner = plugins.tuner(), state = cp->state, supported] {
                                    return tuner->LoadState(state, supported.get());
                                  });
    if (st.ok() && *supported) {
      *known = cp->seen_results;
      from_checkpoint = true;
    } else {
      spdlog::warn("tuner {}: checkpoint not restored ({}); importing every result instead",
                   plugins.tuner()->info().name,
                   st.ok() ? "load_state not supported" : st.message());
    }
  }
  if (plugins.assessor() != nullptr) {
    if (auto cp = store.Checkpoint("assessor");
        cp && cp->plugin == plugins.assessor()->info().name) {
      auto supported = std::make_shared<bool>(false);
      Status st = plugins.SetupCall(PluginStrands::kAssessor, "load_state",
                                    [assessor = plugins.assessor(), state = cp->state, supported] {
                                      return assessor->LoadState(state, supported.get());
                                    });
      if (!st.ok()) spdlog::warn("assessor checkpoint not restored: {}", st.message());
    }
  }
  return from_checkpoint;
}

Status ExperimentLoader::ReplayResults(const Store& store, const std::vector<StoredTrial>& stored,
                                       uint64_t known, size_t* replayed) {
  ServerPlugins& plugins = server_.plugins();
  std::vector<std::pair<int64_t, p::Packed>> imports;
  Status st = store.Imports(&imports);
  if (!st.ok()) return st;
  int64_t handed = plugins.results_handed();
  // (order, one record) for everything the tuner has not seen, in order.
  std::vector<std::pair<int64_t, msgpack::object_handle>> replay;
  for (const StoredTrial& s : stored) {
    handed = std::max(handed, s.result_order + 1);
    if (s.result_order < 0 || static_cast<uint64_t>(s.result_order) < known) continue;
    Trial t = ToTrial(s);
    if (t.final_metric) replay.emplace_back(s.result_order, Record(t.parameters, *t.final_metric));
  }
  for (auto& [order, records] : imports) {
    handed = std::max(handed, order + 1);
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
  plugins.RestoreResultsHanded(handed);
  std::stable_sort(replay.begin(), replay.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  *replayed = replay.size();
  if (replay.empty()) return Status::Ok();
  msgpack::sbuffer records;
  Packer pk(records);
  pk.pack_array(static_cast<uint32_t>(replay.size()));
  for (const auto& [order, oh] : replay) pk.pack(oh.get());
  auto supported = std::make_shared<bool>(true);
  st = plugins.SetupCall(PluginStrands::kTuner, "import_data",
                         [tuner = plugins.tuner(), data = ToPacked(records), supported] {
                           return tuner->ImportData(data, supported.get());
                         });
  if (!st.ok()) return st;
  if (!*supported) {
    spdlog::warn("tuner {} neither keeps state nor imports data: it starts from scratch "
                 "({} results not replayed)",
                 plugins.tuner()->info().name, replay.size());
  }
  return Status::Ok();
}

}  // namespace tunehost::host
