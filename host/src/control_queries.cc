#include "tunehost/host/control_queries.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

// Writes maps with their keys in wire-format.md order.
class Writer {
 public:
  Writer() : pk_(buf_) {}

  Writer& Map(uint32_t n) {
    pk_.pack_map(n);
    return *this;
  }
  Writer& Array(size_t n) {
    pk_.pack_array(static_cast<uint32_t>(n));
    return *this;
  }
  Writer& Key(std::string_view key) { return Str(key); }
  Writer& Str(std::string_view s) {
    pk_.pack_str(static_cast<uint32_t>(s.size()));
    pk_.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
    return *this;
  }
  Writer& UInt(uint64_t v) {
    pk_.pack_uint64(v);
    return *this;
  }
  Writer& Int(int64_t v) {
    pk_.pack_int64(v);
    return *this;
  }
  // Always float64 (msgpack-c would write an integral double as an integer).
  Writer& Float(double v) { return Raw(p::PackDouble(v)); }
  Writer& Nil() {
    pk_.pack_nil();
    return *this;
  }
  // An encoded value; an empty one (never set) as `empty_map` says.
  Writer& Raw(const p::Packed& packed, bool empty_map = false) {
    if (packed.empty()) return empty_map ? Map(0) : Nil();
    buf_.write(packed.data(), packed.size());
    return *this;
  }

  p::Packed Take() const { return p::Packed(buf_.data(), buf_.size()); }

 private:
  msgpack::sbuffer buf_;
  Packer pk_;
};

void WriteCounts(Writer& w, const Engine& engine) {
  auto counts = engine.CountsByStatus();
  w.Map(static_cast<uint32_t>(counts.size()));
  for (const auto& [status, n] : counts) w.Key(status).UInt(n);
}

void WriteTrial(Writer& w, const Trial& t, const ControlClock& clock) {
  w.Map(13);
  w.Key("trial_id").Str(t.id);
  w.Key("sequence_id").UInt(t.sequence_id);
  w.Key("parameter_id").Int(t.parameter_id);
  w.Key("source").Str(p::ToString(t.source));
  w.Key("status").Str(Engine::ControlStatus(t));
  w.Key("attempt").UInt(t.attempt);
  w.Key("worker_id").Str(t.worker_id);
  w.Key("parameters").Raw(t.parameters, /*empty_map=*/true);
  w.Key("final");
  if (t.final_metric) {
    w.Raw(t.final_metric->raw);
  } else {
    w.Nil();
  }
  w.Key("intermediate_count").UInt(t.periodical.size());
  w.Key("start_time");
  if (t.started_at != Clock::time_point{}) {
    w.Float(clock.UnixSeconds(t.started_at));
  } else {
    w.Nil();
  }
  w.Key("end_time");
  if (t.state == TrialState::kEnded) {
    w.Float(clock.UnixSeconds(t.ended_at));
  } else {
    w.Nil();
  }
  w.Key("error").Str(t.error);
}

// Run time of the experiment: until now while it runs; for a finished one,
// until its last trial ended (DONE, STOPPED and ERROR do not age).
double ElapsedSeconds(const Engine& engine, Clock::time_point now) {
  const ExperimentStatus s = engine.status();
  Clock::time_point until = now;
  if (engine.started_at() != Clock::time_point{} &&
      (s == ExperimentStatus::kDone || s == ExperimentStatus::kStopped ||
       (s == ExperimentStatus::kError && engine.finished()))) {
    until = std::min(std::max(engine.started_at(), engine.last_ended_at()), now);
  }
  double seconds = std::chrono::duration<double>(engine.elapsed(until)).count();
  return seconds > 0 ? seconds : 0.0;
}

}  // namespace

ControlClock ControlClock::Now() {
  return ControlClock{Clock::now(), std::chrono::system_clock::now()};
}

double ControlClock::UnixSeconds(Clock::time_point t) const {
  using Seconds = std::chrono::duration<double>;
  return Seconds(wall.time_since_epoch()).count() - Seconds(steady - t).count();
}

std::string OptimizeModeOf(const p::Packed& tuner_args, bool* from_args) {
  if (from_args != nullptr) *from_args = false;
  try {
    msgpack::object_handle oh = msgpack::unpack(tuner_args.data(), tuner_args.size());
    const msgpack::object& o = oh.get();
    if (o.type != msgpack::type::MAP) return "maximize";
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR || kv.val.type != msgpack::type::STR ||
          std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) != "optimize_mode") {
        continue;
      }
      const std::string_view mode(kv.val.via.str.ptr, kv.val.via.str.size);
      if (mode == "maximize" || mode == "minimize") {
        if (from_args != nullptr) *from_args = true;
        return std::string(mode);
      }
    }
  } catch (const std::exception&) {
    // Unreadable arguments: the default below.
  }
  return "maximize";
}

bool IsMutatingRequest(const p::Body& body) {
  return std::holds_alternative<p::UpdateLimits>(body) ||
         std::holds_alternative<p::KillTrial>(body) ||
         std::holds_alternative<p::AddCustomizedTrialJob>(body) ||
         std::holds_alternative<p::UpdateSearchSpace>(body) ||
         std::holds_alternative<p::ImportData>(body) ||
         std::holds_alternative<p::RequestTrialJobs>(body) ||
         std::holds_alternative<p::ReportMetricData>(body) ||
         std::holds_alternative<p::TrialEnd>(body);
}

bool IsControlRequest(const p::Body& body) {
  return std::holds_alternative<p::GetStatus>(body) ||
         std::holds_alternative<p::ListTrials>(body) ||
         std::holds_alternative<p::GetTrial>(body) ||
         std::holds_alternative<p::GetStatistics>(body) ||
         std::holds_alternative<p::GetMetrics>(body) ||
         std::holds_alternative<p::ExportData>(body) ||
         std::holds_alternative<p::UpdateLimits>(body) ||
         std::holds_alternative<p::KillTrial>(body) ||
         std::holds_alternative<p::ListWorkers>(body);
}

p::Packed StatusInfo(const Engine& engine, const ControlContext& ctx) {
  const EngineOptions& o = engine.options();
  const std::string mode = OptimizeModeOf(ctx.spec.tuner.args);
  Writer w;
  w.Map(16);
  w.Key("experiment_id").Str(ctx.spec.id);
  w.Key("status").Str(ToString(engine.status()));
  w.Key("error").Str(engine.error());
  w.Key("start_time");
  w.Float(engine.started_at() == Clock::time_point{}
              ? 0.0
              : ctx.clock.UnixSeconds(engine.started_at()));
  w.Key("elapsed_s").Float(ElapsedSeconds(engine, ctx.clock.steady));
  w.Key("concurrency").UInt(o.concurrency);
  w.Key("max_trials").UInt(o.max_trials);
  w.Key("max_duration_s").Float(std::chrono::duration<double>(o.max_duration).count());
  w.Key("counts");
  WriteCounts(w, engine);
  w.Key("best");
  // Ties keep the earlier trial; a non-finite value never wins.
  if (const Trial* best = engine.BestTrial(mode == "maximize")) {
    w.Map(3);
    w.Key("trial_id").Str(best->id);
    w.Key("sequence_id").UInt(best->sequence_id);
    w.Key("metric").Float(best->final_metric->scalar);
  } else {
    w.Nil();
  }
  w.Key("optimize_mode").Str(mode);
  w.Key("pareto_front");
  // Kept as trials end (pareto_front.h); the reply lists at most
  // kMaxFrontInStatus members, the earliest to join.
  const ParetoFront& front = engine.pareto_front();
  const size_t listed = std::min(front.members().size(), p::kMaxFrontInStatus);
  if (!front.objectives().empty()) {
    w.Array(listed);
    for (size_t i = 0; i < listed; ++i) {
      const Trial* t = front.members()[i];
      w.Map(3);
      w.Key("trial_id").Str(t->id);
      w.Key("sequence_id").UInt(t->sequence_id);
      w.Key("result").Raw(t->final_metric->raw);
    }
  } else {
    w.Nil();
  }
  w.Key("pareto_front_size");
  if (front.objectives().empty()) {
    w.Nil();
  } else {
    w.UInt(front.members().size());
  }
  // What the front is made of, as the tuner's classArgs name it.
  const Objectives& named = engine.pareto_front().objectives();
  w.Key("objectives");
  if (named.empty()) {
    w.Nil();
  } else {
    w.Map(named.objectives.size());
    for (const auto& [key, maximize] : named.objectives) {
      w.Key(key).Str(maximize ? "maximize" : "minimize");
    }
  }
  w.Key("constraints");
  if (named.empty()) {
    w.Nil();
  } else {
    w.Array(named.constraints.size());
    for (const std::string& key : named.constraints) w.Str(key);
  }
  w.Key("endpoints").Map(4);
  w.Key("control").Str(ctx.endpoints.control);
  w.Key("jobs").Str(ctx.endpoints.jobs);
  w.Key("results").Str(ctx.endpoints.results);
  w.Key("events").Str(ctx.endpoints.events);
  return w.Take();
}

Status ListTrialsData(const Engine& engine, const p::ListTrials& request,
                      const ControlClock& clock, p::Packed* data) {
  if (request.status && !p::IsControlTrialStatus(*request.status)) {
    return Status::BadField("body.status: unknown trial status \"" + *request.status + "\"");
  }
  std::vector<const Trial*> matches;
  for (const Trial* t : engine.TrialsInOrder()) {
    if (!request.status || Engine::ControlStatus(*t) == *request.status) matches.push_back(t);
  }
  const size_t begin = request.offset < matches.size() ? request.offset : matches.size();
  size_t end = matches.size();
  if (request.limit != 0 && request.limit < end - begin) end = begin + request.limit;
  Writer w;
  w.Map(2);
  w.Key("total").UInt(matches.size());
  w.Key("trials").Array(end - begin);
  for (size_t i = begin; i < end; ++i) WriteTrial(w, *matches[i], clock);
  *data = w.Take();
  return Status::Ok();
}

Status TrialData(const Engine& engine, const std::string& trial_id, const ControlClock& clock,
                 p::Packed* data) {
  const Trial* t = engine.Find(trial_id);
  if (t == nullptr) return Status::NotFound("unknown trial " + trial_id);
  Writer w;
  WriteTrial(w, *t, clock);
  *data = w.Take();
  return Status::Ok();
}

p::Packed StatisticsData(const Engine& engine) {
  Writer w;
  w.Map(1);
  w.Key("counts");
  WriteCounts(w, engine);
  return w.Take();
}

Status MetricsData(const Engine& engine, const std::optional<std::string>& trial_id,
                   p::Packed* data) {
  std::vector<const Trial*> trials;
  if (trial_id) {
    const Trial* t = engine.Find(*trial_id);
    if (t == nullptr) return Status::NotFound("unknown trial " + *trial_id);
    trials.push_back(t);
  } else {
    trials = engine.TrialsInOrder();
  }
  // A FINAL the trial never sent (its last PERIODICAL used as final) is not
  // a metric of its own.
  auto has_final = [](const Trial* t) { return t->final_metric && !t->final_synthesized; };
  size_t n = 0;
  for (const Trial* t : trials) n += t->periodical.size() + (has_final(t) ? 1 : 0);
  auto record = [](Writer& w, const Trial& t, p::MetricType type, uint64_t seq,
                   const p::Metric& value) {
    w.Map(4);
    w.Key("trial_id").Str(t.id);
    w.Key("type").Str(p::ToString(type));
    w.Key("sequence").UInt(seq);
    w.Key("value").Raw(value.raw);
  };
  Writer w;
  w.Map(1);
  w.Key("metrics").Array(n);
  for (const Trial* t : trials) {
    for (const auto& [seq, value] : t->periodical) {
      record(w, *t, p::MetricType::kPeriodical, seq, value);
    }
    if (has_final(t)) {
      // The engine keeps no FINAL sequence: it is the one after the last
      // PERIODICAL, which is what workers send (§5.1).
      uint64_t seq = t->periodical.empty() ? 0 : t->periodical.rbegin()->first + 1;
      record(w, *t, p::MetricType::kFinal, seq, *t->final_metric);
    }
  }
  *data = w.Take();
  return Status::Ok();
}

p::Packed ExportRecordsData(const Engine& engine) {
  std::vector<const Trial*> done;
  for (const Trial* t : engine.TrialsInOrder()) {
    if (t->state == TrialState::kEnded && t->status == p::TrialStatus::kSucceeded &&
        t->final_metric) {
      done.push_back(t);
    }
  }
  Writer w;
  w.Map(1);
  w.Key("records").Array(done.size());
  for (const Trial* t : done) {
    w.Map(3);
    w.Key("trial_id").Str(t->id);
    w.Key("parameters").Raw(t->parameters, /*empty_map=*/true);
    w.Key("value").Raw(t->final_metric->raw);
  }
  return w.Take();
}

namespace {

// LW: {"workers": [WorkerInfo, ...]} sorted by worker id (wire-format.md §4.2).
p::Packed WorkersData(const Engine& engine, const ControlContext& ctx) {
  std::vector<const Engine::Worker*> workers;
  for (const auto& [id, w] : engine.workers()) workers.push_back(&w);
  std::sort(workers.begin(), workers.end(), [](auto* a, auto* b) { return a->id < b->id; });
  Writer w;
  w.Map(1).Key("workers").Array(workers.size());
  for (const Engine::Worker* worker : workers) {
    std::vector<std::string> running(worker->running.begin(), worker->running.end());
    std::sort(running.begin(), running.end());
    w.Map(9);
    w.Key("worker_id").Str(worker->id);
    w.Key("slots").UInt(worker->slots);
    w.Key("running").Array(running.size());
    for (const std::string& t : running) w.Str(t);
    w.Key("gpus").UInt(worker->gpus);
    w.Key("language").Str(worker->language);
    w.Key("version").Str(worker->version);
    w.Key("extra").Raw(worker->extra, /*empty_map=*/true);
    w.Key("seen_s_ago").Float(
        std::chrono::duration<double>(ctx.clock.steady - worker->last_seen).count());
    const std::string key =
        ctx.worker_keys != nullptr ? ctx.worker_keys->KeyOf(worker->id) : std::string();
    w.Key("key").Str(key);
  }
  return w.Take();
}

}  // namespace

Status AnswerControl(Engine& engine, const ControlContext& ctx, const p::Body& body,
                     p::Packed* data) {
  const Clock::time_point now = ctx.clock.steady;
  if (std::holds_alternative<p::GetStatus>(body)) {
    *data = StatusInfo(engine, ctx);
  } else if (auto* lt = std::get_if<p::ListTrials>(&body)) {
    return ListTrialsData(engine, *lt, ctx.clock, data);
  } else if (auto* gt = std::get_if<p::GetTrial>(&body)) {
    return TrialData(engine, gt->trial_id, ctx.clock, data);
  } else if (std::holds_alternative<p::GetStatistics>(body)) {
    *data = StatisticsData(engine);
  } else if (auto* mt = std::get_if<p::GetMetrics>(&body)) {
    return MetricsData(engine, mt->trial_id, data);
  } else if (std::holds_alternative<p::ExportData>(body)) {
    *data = ExportRecordsData(engine);
  } else if (auto* ux = std::get_if<p::UpdateLimits>(&body)) {
    Status st = engine.UpdateLimits(ux->concurrency, ux->max_trials, ux->max_duration_s, now);
    if (!st.ok()) return st;
    *data = StatusInfo(engine, ctx);
  } else if (std::holds_alternative<p::ListWorkers>(body)) {
    *data = WorkersData(engine, ctx);
  } else if (auto* kt = std::get_if<p::KillTrial>(&body)) {
    Status st = engine.KillTrial(kt->trial_id, now);
    if (!st.ok()) return st;
    *data = p::EmptyMap();
  } else {
    return Status::Internal("not a control API request");
  }
  return Status::Ok();
}

}  // namespace tunehost::host
