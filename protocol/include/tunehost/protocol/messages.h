// Protocol v1 messages as C++ values. The grammar is protocol/docs/wire-format.md;
// field order here is the order on the wire.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tunehost::protocol {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kDefaultMaxMessageBytes = size_t{1} << 20;
// Messages on the results socket (worker -> host, wire-format.md §1.1) have a
// limit of their own: room for an EN with an error text of kMaxTextBytes and
// a WH or HB listing every slot's trial, with a queue of 512 of them.
inline constexpr size_t kDefaultMaxResultBytes = size_t{128} << 10;

// One MessagePack value kept as its encoded bytes (search spaces, parameters,
// class arguments, metric values). Re-encoded verbatim.
using Packed = std::string;

// NNI parameter id: integer, string (Hyperband-style) or nil (customized).
using ParameterId = std::variant<std::monostate, int64_t, std::string>;

// A metric: a number, or a map with a numeric "default" key.
struct Metric {
  Packed raw;           // the value as sent
  double scalar = 0.0;  // the number, or map["default"]
};

enum class MetricType { kPeriodical, kFinal };
enum class TrialStatus { kSucceeded, kFailed, kUserCanceled, kSysCanceled, kEarlyStopped };
enum class ParameterSource { kAlgorithm, kCustomized, kResumed, kExternal };
// Where a plugin runs: in the host process, or in a runner process of its own
// that the host restarts when it crashes (wire-format.md §4.2, PluginSpec).
enum class PluginIsolation { kInProcess, kProcess };

std::string_view ToString(MetricType t);
std::string_view ToString(TrialStatus s);
std::string_view ToString(ParameterSource s);
std::string_view ToString(PluginIsolation i);
bool ParseMetricType(std::string_view s, MetricType* out);
bool ParseTrialStatus(std::string_view s, TrialStatus* out);
bool ParseParameterSource(std::string_view s, ParameterSource* out);
bool ParsePluginIsolation(std::string_view s, PluginIsolation* out);

struct PluginSpec {
  std::string name;
  Packed args;  // a map; "\x80" (empty map) when none
  std::optional<PluginIsolation> isolation;  // nil: in-process
  std::optional<uint64_t> memory_limit_mb;   // an isolated runner's memory cap; nil: none
};

struct ExperimentSpec {
  std::string id;
  PluginSpec tuner;
  std::optional<PluginSpec> assessor;
  uint32_t concurrency = 1;
  uint64_t max_trials = 0;       // 0 = unlimited
  double max_duration_s = 0.0;   // 0 = unlimited
  std::optional<double> plugin_timeout_s;  // one plugin call's limit; nil: the host's default
};

struct ImportRecord {
  Packed parameters;
  Metric value;
  std::optional<std::string> trial_id;
};

struct RunningTrial {
  std::string trial_id;
  uint32_t attempt = 0;
  int64_t last_sequence = -1;
};

struct Resources {
  uint32_t gpus = 0;
  Packed extra;  // a map
};

// --- control requests (client -> host) ---
struct Initialize { Packed search_space; std::optional<ExperimentSpec> experiment; };   // IN
struct RequestTrialJobs { uint32_t count = 0; };                                         // GE
struct UpdateSearchSpace { Packed search_space; };                                       // SS
struct ImportData { std::vector<ImportRecord> data; };                                   // FD
struct AddCustomizedTrialJob { Packed parameters; };                                     // AD
struct Terminate {};                                                                     // TE
struct Ping {};                                                                          // PI
// Control API (wire-format.md §4.2): queries and changes of a running experiment.
struct GetStatus {};                                                                     // ST
struct ListTrials {                                                                      // LT
  std::optional<std::string> status;  // a trial status (WAITING, RUNNING, SUCCEEDED, ...)
  uint64_t offset = 0;
  uint64_t limit = 0;  // 0 = all
};
struct GetTrial { std::string trial_id; };                                               // GT
struct GetStatistics {};                                                                 // JS
struct GetMetrics { std::optional<std::string> trial_id; };                              // MT (nil: all)
struct ExportData {};                                                                    // EX
struct UpdateLimits {                                                                    // UX
  std::optional<uint32_t> concurrency;    // >= 1
  std::optional<uint64_t> max_trials;     // 0 = unlimited
  std::optional<double> max_duration_s;   // 0 = unlimited
};
struct KillTrial { std::string trial_id; };                                              // KT
struct ListWorkers {};                                                                   // LW

// Trial statuses of the control API (NNI's trialJobStatus): the terminal
// statuses plus WAITING (queued or offered) and RUNNING.
inline constexpr const char* kControlTrialStatuses[] = {
    "WAITING", "RUNNING", "SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED",
    "EARLY_STOPPED"};
bool IsControlTrialStatus(std::string_view s);

// --- worker -> host (results socket); ME and EN also on control ---
struct ReportMetricData {                                                                // ME
  std::string trial_id;
  uint32_t attempt = 0;
  ParameterId parameter_id;
  MetricType type = MetricType::kPeriodical;
  uint64_t sequence = 0;
  Metric value;
  std::string worker_id;
};
struct TrialEnd {                                                                        // EN
  std::string trial_id;
  uint32_t attempt = 0;
  TrialStatus status = TrialStatus::kSucceeded;
  std::string error;
  std::string worker_id;
};
struct WorkerHello {                                                                     // WH
  std::string worker_id;
  uint32_t slots = 1;
  Resources resources;
  std::string language;
  std::string version;
  std::vector<RunningTrial> running;
  // "addressed": the worker also takes offers on its events topic, so the
  // host can address each offer to a worker with a free slot (wire-format.md
  // §5.2). Nil (workers before it) or any other value: offers reach it only
  // through the jobs socket's round robin.
  std::optional<std::string> offers = std::nullopt;
  bool addressed_offers() const { return offers && *offers == kAddressedOffers; }
  static constexpr const char* kAddressedOffers = "addressed";
  // "spans": the worker understands an MA's `span`, so the host may
  // acknowledge consecutive results of a trial in one MA (wire-format.md
  // §5.2). Nil or any other value: one MA per result.
  std::optional<std::string> acks = std::nullopt;
  bool ack_spans() const { return acks && *acks == kAckSpans; }
  static constexpr const char* kAckSpans = "spans";
};
struct Heartbeat {                                                                       // HB
  std::string worker_id;
  uint32_t free_slots = 0;
  std::vector<RunningTrial> running;
};
struct TrialStarted {                                                                    // TS
  std::string worker_id;
  std::string trial_id;
  uint32_t attempt = 0;
  // The offer's lease, echoed (§5.3); nil from workers that do not echo it.
  std::optional<uint64_t> lease = std::nullopt;
};
struct TrialRejected {                                                                   // TJ
  std::string worker_id;
  std::string trial_id;
  uint32_t attempt = 0;
  std::string reason;
  std::optional<uint64_t> lease = std::nullopt;  // the offer's lease, echoed (§5.3)
};
struct WorkerBye { std::string worker_id; };                                             // WB

// --- host -> worker / watchers ---
struct NewTrialJob {                                                                     // TR
  std::string experiment_id;
  std::string trial_id;
  uint64_t sequence_id = 0;
  uint32_t attempt = 0;
  ParameterId parameter_id;
  ParameterSource parameter_source = ParameterSource::kAlgorithm;
  uint32_t parameter_index = 0;
  Packed parameters;
  // A number only the worker that receives this offer learns; its TS echoes
  // it, so no other worker can start the offered attempt (§5.3, §9).
  std::optional<uint64_t> lease = std::nullopt;
};
struct SendTrialJobParameter { NewTrialJob job; };                                       // SP (reserved)
struct KillTrialJob { std::string trial_id; uint32_t attempt = 0; std::string reason; };  // KI
struct MetricAck {                                                                       // MA
  std::string trial_id;
  uint32_t attempt = 0;
  uint64_t sequence = 0;
  // How many consecutive sequences from `sequence` on this acknowledges;
  // nil means 1. Sent only to workers whose WH says `acks: "spans"`
  // (wire-format.md §5.2, acknowledgement spans).
  std::optional<uint32_t> span = std::nullopt;
  uint64_t acknowledged() const { return span ? *span : 1; }
  // Whether this acknowledges `seq` (no overflow near the top of uint64).
  bool Covers(uint64_t seq) const { return seq >= sequence && seq - sequence < acknowledged(); }
};
struct HelloRequest {};                                                                  // HR
struct Initialized { std::string experiment_id; };                                       // ID
struct NoMoreTrialJobs { uint32_t requested = 0; uint32_t generated = 0; };              // NO
struct ErrorEvent { std::string code; std::string message; std::string source; };        // ER

// --- control replies ---
struct OkReply { Packed data; };                                                         // ok
struct ErrorReply { std::string code; std::string message; };                           // error

using Body = std::variant<Initialize, RequestTrialJobs, UpdateSearchSpace, ImportData,
                          AddCustomizedTrialJob, Terminate, Ping, ReportMetricData, TrialEnd,
                          WorkerHello, Heartbeat, TrialStarted, TrialRejected, WorkerBye,
                          NewTrialJob, SendTrialJobParameter, KillTrialJob, MetricAck,
                          HelloRequest, Initialized, NoMoreTrialJobs, ErrorEvent, OkReply,
                          ErrorReply, GetStatus, ListTrials, GetTrial, GetStatistics,
                          GetMetrics, ExportData, UpdateLimits, KillTrial, ListWorkers>;

// The wire type code of a body ("IN", "TR", "ok", ...).
std::string_view TypeCode(const Body& body);

struct Message {
  uint32_t version = kProtocolVersion;
  std::string type;  // filled by Decode; Encode derives it from body
  uint64_t id = 0;
  Body body;
};

}  // namespace tunehost::protocol
