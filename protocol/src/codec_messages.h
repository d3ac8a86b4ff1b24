// Every message body of protocol v1, described once (wire-format.md §3-§5):
// its fields in wire order, with what the spec requires of each. The
// encoder (codec_encode.cc) writes what a description lists, in that order;
// the decoder (codec_decode.cc) reads and checks it with the spec's errors.
//
// A description calls one method of its visitor per field:
//   Str(key, s, need, max)   a string of at most `max` bytes (ids: kMaxIdBytes)
//   Text(key, s)             free text, optional, at most kMaxTextBytes
//   OptStr(key, s)           a string or nil
//   UInt(key, n, need, max)  a non-negative integer that fits n and `max`
//   OptUInt(key, n, max)     the same or nil
//   Int(key, n, need)        a signed 64-bit integer
//   Float(key, d)            a number, optional; written as float64
//   OptFloat(key, d)         a number or nil
//   ParamId(key, id)         an integer, a string or nil (§3.2)
//   Enum(key, e, table)      one of the table's names; OptEnum: or nil
//   Metric(key, m)           a number or a map with a numeric "default" (§3.3)
//   Map(key, p, need, max)   a map of at most `max` keys; absent: the empty map
//   Value(key, p)            any value; absent: the empty map
//   Sub(key, s, need)        a nested map described by Describe(v, s); an
//                            absent optional one reads as an empty map
//   OptSub(key, s)           a nested map or nil
//   List(key, v, max, need)  an array of at most `max` nested maps
//   Check(key, ok, rule)     decoding only: a rule on what was just read;
//                            rule() says what the value must be
// Optional fields that are absent keep their default.
#pragma once

#include <cmath>
#include <string>

#include "codec_internal.h"
#include "tunehost/protocol/limits.h"

namespace tunehost::protocol::codec_detail {

enum class Need { kRequired, kOptional };
inline constexpr Need kRequired = Need::kRequired;
inline constexpr Need kOptional = Need::kOptional;

// ---------------------------------------------------------------- nested maps

template <class V>
void Describe(V& v, PluginSpec& p) {
  v.Str("name", p.name);
  v.Map("args", p.args, kOptional);
  v.OptEnum("isolation", p.isolation, kIsolations);
  v.OptUInt("memory_limit_mb", p.memory_limit_mb, kMaxMemoryLimitMb);
}

template <class V>
void Describe(V& v, ExperimentSpec& e) {
  v.Str("id", e.id, kOptional);
  v.Sub("tuner", e.tuner);
  v.OptSub("assessor", e.assessor);
  v.UInt("concurrency", e.concurrency, kOptional, kMaxConcurrency);
  v.Check("concurrency", e.concurrency != 0, [] { return std::string("must be >= 1"); });
  v.UInt("max_trials", e.max_trials, kOptional);
  v.Float("max_duration_s", e.max_duration_s);
  v.Check("max_duration_s", e.max_duration_s >= 0, [] { return std::string("must be >= 0"); });
  v.OptFloat("plugin_timeout_s", e.plugin_timeout_s);
  v.Check("plugin_timeout_s",
          !e.plugin_timeout_s ||
              (*e.plugin_timeout_s > 0 && *e.plugin_timeout_s <= kMaxPluginTimeoutS),
          [] {
            return "must be > 0 and at most " +
                   std::to_string(static_cast<int>(kMaxPluginTimeoutS));
          });
}

template <class V>
void Describe(V& v, ImportRecord& r) {
  v.Map("parameters", r.parameters, kRequired, kMaxParameters);
  v.Metric("value", r.value);
  v.OptStr("trial_id", r.trial_id);
}

template <class V>
void Describe(V& v, RunningTrial& r) {
  v.Str("trial_id", r.trial_id);
  v.UInt("attempt", r.attempt);
  v.Int("last_sequence", r.last_sequence, kOptional);
}

template <class V>
void Describe(V& v, Resources& r) {
  v.UInt("gpus", r.gpus, kOptional, kMaxSlots);
  v.Map("extra", r.extra, kOptional);
}

// ---------------------------------------------------------------- commands (§4)

template <class V>
void Describe(V& v, Initialize& b) {
  v.Map("search_space", b.search_space, kRequired, kMaxParameters);
  v.OptSub("experiment", b.experiment);
}
template <class V>
void Describe(V& v, RequestTrialJobs& b) {
  v.UInt("count", b.count, kRequired, kMaxRequestCount);
}
template <class V>
void Describe(V& v, UpdateSearchSpace& b) {
  v.Map("search_space", b.search_space, kRequired, kMaxParameters);
}
template <class V>
void Describe(V& v, ImportData& b) {
  v.List("data", b.data, kMaxImportRecords, kRequired);
}
template <class V>
void Describe(V& v, AddCustomizedTrialJob& b) {
  v.Map("parameters", b.parameters, kRequired, kMaxParameters);
}
template <class V>
void Describe(V&, Terminate&) {}
template <class V>
void Describe(V&, Ping&) {}
template <class V>
void Describe(V&, GetStatus&) {}
template <class V>
void Describe(V& v, ListTrials& b) {
  v.OptStr("status", b.status);
  v.Check("status", !b.status || IsControlTrialStatus(*b.status),
          [&] { return "unknown trial status \"" + *b.status + "\""; });
  v.UInt("offset", b.offset, kOptional);
  v.UInt("limit", b.limit, kOptional);
}
template <class V>
void Describe(V& v, GetTrial& b) {
  v.Str("trial_id", b.trial_id);
}
template <class V>
void Describe(V&, GetStatistics&) {}
template <class V>
void Describe(V& v, GetMetrics& b) {
  v.OptStr("trial_id", b.trial_id);
}
template <class V>
void Describe(V&, ExportData&) {}
template <class V>
void Describe(V& v, UpdateLimits& b) {
  v.OptUInt("concurrency", b.concurrency, kMaxConcurrency);
  v.Check("concurrency", !b.concurrency || *b.concurrency != 0,
          [] { return std::string("must be >= 1"); });
  v.OptUInt("max_trials", b.max_trials);
  v.OptFloat("max_duration_s", b.max_duration_s);
  // The budget becomes milliseconds on the host: finite and not negative.
  v.Check("max_duration_s",
          !b.max_duration_s || (*b.max_duration_s >= 0 && std::isfinite(*b.max_duration_s)),
          [] { return std::string("must be a finite number >= 0"); });
}
template <class V>
void Describe(V& v, KillTrial& b) {
  v.Str("trial_id", b.trial_id);
}
template <class V>
void Describe(V&, ListWorkers&) {}

// ---------------------------------------------------------------- workers (§5)

template <class V>
void Describe(V& v, ReportMetricData& b) {
  v.Str("trial_id", b.trial_id);
  v.UInt("attempt", b.attempt, kOptional);
  v.ParamId("parameter_id", b.parameter_id);
  v.Enum("type", b.type, kMetricTypes);
  v.UInt("sequence", b.sequence);
  v.Metric("value", b.value);
  v.Str("worker_id", b.worker_id, kOptional);
}
template <class V>
void Describe(V& v, TrialEnd& b) {
  v.Str("trial_id", b.trial_id);
  v.UInt("attempt", b.attempt, kOptional);
  v.Enum("status", b.status, kTrialStatuses);
  v.Text("error", b.error);
  v.Str("worker_id", b.worker_id, kOptional);
}
template <class V>
void Describe(V& v, WorkerHello& b) {
  v.Str("worker_id", b.worker_id);
  v.UInt("slots", b.slots, kRequired, kMaxSlots);
  v.Sub("resources", b.resources, kOptional);
  v.Text("language", b.language);
  v.Text("version", b.version);
  v.List("running", b.running, kMaxRunning, kOptional);
  v.OptStr("offers", b.offers);
  v.OptStr("acks", b.acks);
}
template <class V>
void Describe(V& v, Heartbeat& b) {
  v.Str("worker_id", b.worker_id);
  v.UInt("free_slots", b.free_slots, kOptional, kMaxSlots);
  v.List("running", b.running, kMaxRunning, kOptional);
}
template <class V>
void Describe(V& v, TrialStarted& b) {
  v.Str("worker_id", b.worker_id);
  v.Str("trial_id", b.trial_id);
  v.UInt("attempt", b.attempt);
  v.OptUInt("lease", b.lease);
}
template <class V>
void Describe(V& v, TrialRejected& b) {
  v.Str("worker_id", b.worker_id);
  v.Str("trial_id", b.trial_id);
  v.UInt("attempt", b.attempt);
  v.Text("reason", b.reason);
  v.OptUInt("lease", b.lease);
}
template <class V>
void Describe(V& v, WorkerBye& b) {
  v.Str("worker_id", b.worker_id);
}
template <class V>
void Describe(V& v, NewTrialJob& b) {
  v.Str("experiment_id", b.experiment_id, kOptional);
  v.Str("trial_id", b.trial_id);
  v.UInt("sequence_id", b.sequence_id, kOptional);
  v.UInt("attempt", b.attempt);
  v.ParamId("parameter_id", b.parameter_id);
  v.Enum("parameter_source", b.parameter_source, kSources);
  v.UInt("parameter_index", b.parameter_index, kOptional);
  v.Map("parameters", b.parameters, kRequired, kMaxParameters);
  v.OptUInt("lease", b.lease);
}
template <class V>
void Describe(V& v, SendTrialJobParameter& b) {
  Describe(v, b.job);
}
template <class V>
void Describe(V& v, KillTrialJob& b) {
  v.Str("trial_id", b.trial_id);
  v.UInt("attempt", b.attempt);
  v.Text("reason", b.reason);
}
template <class V>
void Describe(V& v, MetricAck& b) {
  v.Str("trial_id", b.trial_id);
  v.UInt("attempt", b.attempt);
  v.UInt("sequence", b.sequence);
  v.OptUInt("span", b.span);
  v.Check("span", !b.span || *b.span >= 1, [] { return std::string("must be >= 1"); });
}
template <class V>
void Describe(V&, HelloRequest&) {}

// ---------------------------------------------------------------- events and replies

template <class V>
void Describe(V& v, Initialized& b) {
  v.Str("experiment_id", b.experiment_id);
}
template <class V>
void Describe(V& v, NoMoreTrialJobs& b) {
  v.UInt("requested", b.requested, kOptional);
  v.UInt("generated", b.generated, kOptional);
}
template <class V>
void Describe(V& v, ErrorEvent& b) {
  v.Str("code", b.code);
  v.Text("message", b.message);
  v.Str("source", b.source, kOptional);
}
template <class V>
void Describe(V& v, OkReply& b) {
  v.Value("data", b.data);
}
template <class V>
void Describe(V& v, ErrorReply& b) {
  v.Str("code", b.code);
  v.Text("message", b.message);
}

}  // namespace tunehost::protocol::codec_detail
