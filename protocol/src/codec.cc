// MessagePack codec for protocol v1 (protocol/docs/wire-format.md).
// Decoding walks a msgpack::object tree with explicit type checks; nothing in
// here throws past Decode. Encoding writes keys in the documented order.
#include "tunehost/protocol/codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include <msgpack.hpp>

#include "tunehost/protocol/limits.h"

namespace tunehost::protocol {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

// ---------------------------------------------------------------- strings

template <class E, size_t N>
bool ParseEnum(std::string_view s, const std::pair<E, const char*> (&table)[N], E* out) {
  for (const auto& [value, name] : table) {
    if (s == name) {
      *out = value;
      return true;
    }
  }
  return false;
}

template <class E, size_t N>
std::string_view EnumName(E v, const std::pair<E, const char*> (&table)[N]) {
  for (const auto& [value, name] : table) {
    if (value == v) return name;
  }
  return "";
}

const std::pair<MetricType, const char*> kMetricTypes[] = {
    {MetricType::kPeriodical, "PERIODICAL"}, {MetricType::kFinal, "FINAL"}};
const std::pair<TrialStatus, const char*> kTrialStatuses[] = {
    {TrialStatus::kSucceeded, "SUCCEEDED"},     {TrialStatus::kFailed, "FAILED"},
    {TrialStatus::kUserCanceled, "USER_CANCELED"}, {TrialStatus::kSysCanceled, "SYS_CANCELED"},
    {TrialStatus::kEarlyStopped, "EARLY_STOPPED"}};
const std::pair<PluginIsolation, const char*> kIsolations[] = {
    {PluginIsolation::kInProcess, "in-process"}, {PluginIsolation::kProcess, "process"}};
const std::pair<ParameterSource, const char*> kSources[] = {
    {ParameterSource::kAlgorithm, "algorithm"},
    {ParameterSource::kCustomized, "customized"},
    {ParameterSource::kResumed, "resumed"},
    {ParameterSource::kExternal, "external"}};

// Type codes, in the order of the Body variant's alternatives.
constexpr const char* kTypeCodes[] = {"IN", "GE", "SS", "FD", "AD", "TE", "PI", "ME",
                                      "EN", "WH", "HB", "TS", "TJ", "WB", "TR", "SP",
                                      "KI", "MA", "HR", "ID", "NO", "ER", "ok", "error",
                                      "ST", "LT", "GT", "JS", "MT", "EX", "UX", "KT",
                                      "LW"};
static_assert(std::size(kTypeCodes) == std::variant_size_v<Body>);

// ---------------------------------------------------------------- encoding

void Str(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void Raw(Packer& pk, msgpack::sbuffer& buf, const Packed& packed, bool map_default) {
  if (packed.empty()) {
    if (map_default) {
      pk.pack_map(0);
    } else {
      pk.pack_nil();
    }
    return;
  }
  buf.write(packed.data(), packed.size());
}

void Id(Packer& pk, const ParameterId& id) {
  if (auto* i = std::get_if<int64_t>(&id)) {
    pk.pack_int64(*i);
  } else if (auto* s = std::get_if<std::string>(&id)) {
    Str(pk, *s);
  } else {
    pk.pack_nil();
  }
}

// msgpack-c 4 packs a double with an integral value as an integer; the wire
// format writes every float as float64 (wire-format.md §2), so write it here.
void Float(msgpack::sbuffer& buf, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  char out[9];
  out[0] = static_cast<char>(0xcb);
  for (int i = 0; i < 8; ++i) out[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
  buf.write(out, sizeof out);
}

class Writer {
 public:
  Writer(Packer& pk, msgpack::sbuffer& buf) : pk_(pk), buf_(buf) {}

  void operator()(const Initialize& b) {
    pk_.pack_map(2);
    Str(pk_, "search_space");
    Raw(pk_, buf_, b.search_space, true);
    Str(pk_, "experiment");
    if (b.experiment) {
      Experiment(*b.experiment);
    } else {
      pk_.pack_nil();
    }
  }
  void operator()(const RequestTrialJobs& b) {
    pk_.pack_map(1);
    Str(pk_, "count");
    pk_.pack_uint32(b.count);
  }
  void operator()(const UpdateSearchSpace& b) {
    pk_.pack_map(1);
    Str(pk_, "search_space");
    Raw(pk_, buf_, b.search_space, true);
  }
  void operator()(const ImportData& b) {
    pk_.pack_map(1);
    Str(pk_, "data");
    pk_.pack_array(static_cast<uint32_t>(b.data.size()));
    for (const auto& r : b.data) {
      pk_.pack_map(3);
      Str(pk_, "parameters");
      Raw(pk_, buf_, r.parameters, true);
      Str(pk_, "value");
      Raw(pk_, buf_, r.value.raw, false);
      Str(pk_, "trial_id");
      if (r.trial_id) {
        Str(pk_, *r.trial_id);
      } else {
        pk_.pack_nil();
      }
    }
  }
  void operator()(const AddCustomizedTrialJob& b) {
    pk_.pack_map(1);
    Str(pk_, "parameters");
    Raw(pk_, buf_, b.parameters, true);
  }
  void operator()(const Terminate&) { pk_.pack_map(0); }
  void operator()(const Ping&) { pk_.pack_map(0); }
  void operator()(const ReportMetricData& b) {
    pk_.pack_map(7);
    Str(pk_, "trial_id");
    Str(pk_, b.trial_id);
    Str(pk_, "attempt");
    pk_.pack_uint32(b.attempt);
    Str(pk_, "parameter_id");
    Id(pk_, b.parameter_id);
    Str(pk_, "type");
    Str(pk_, ToString(b.type));
    Str(pk_, "sequence");
    pk_.pack_uint64(b.sequence);
    Str(pk_, "value");
    Raw(pk_, buf_, b.value.raw, false);
    Str(pk_, "worker_id");
    Str(pk_, b.worker_id);
  }
  void operator()(const TrialEnd& b) {
    pk_.pack_map(5);
    Str(pk_, "trial_id");
    Str(pk_, b.trial_id);
    Str(pk_, "attempt");
    pk_.pack_uint32(b.attempt);
    Str(pk_, "status");
    Str(pk_, ToString(b.status));
    Str(pk_, "error");
    Str(pk_, b.error);
    Str(pk_, "worker_id");
    Str(pk_, b.worker_id);
  }
  void operator()(const WorkerHello& b) {
    pk_.pack_map(7);
    Str(pk_, "worker_id");
    Str(pk_, b.worker_id);
    Str(pk_, "slots");
    pk_.pack_uint32(b.slots);
    Str(pk_, "resources");
    pk_.pack_map(2);
    Str(pk_, "gpus");
    pk_.pack_uint32(b.resources.gpus);
    Str(pk_, "extra");
    Raw(pk_, buf_, b.resources.extra, true);
    Str(pk_, "language");
    Str(pk_, b.language);
    Str(pk_, "version");
    Str(pk_, b.version);
    Str(pk_, "running");
    Running(b.running);
    Str(pk_, "offers");
    OptStr(b.offers);
  }
  void operator()(const Heartbeat& b) {
    pk_.pack_map(3);
    Str(pk_, "worker_id");
    Str(pk_, b.worker_id);
    Str(pk_, "free_slots");
    pk_.pack_uint32(b.free_slots);
    Str(pk_, "running");
    Running(b.running);
  }
  void operator()(const TrialStarted& b) {
    pk_.pack_map(4);
    Str(pk_, "worker_id");
    Str(pk_, b.worker_id);
    Str(pk_, "trial_id");
    Str(pk_, b.trial_id);
    Str(pk_, "attempt");
    pk_.pack_uint32(b.attempt);
    Str(pk_, "lease");
    OptUInt(b.lease);
  }
  void operator()(const TrialRejected& b) {
    pk_.pack_map(5);
    Str(pk_, "worker_id");
    Str(pk_, b.worker_id);
    Str(pk_, "trial_id");
    Str(pk_, b.trial_id);
    Str(pk_, "attempt");
    pk_.pack_uint32(b.attempt);
    Str(pk_, "reason");
    Str(pk_, b.reason);
    Str(pk_, "lease");
    OptUInt(b.lease);
  }
  void operator()(const WorkerBye& b) {
    pk_.pack_map(1);
    Str(pk_, "worker_id");
    Str(pk_, b.worker_id);
  }
  void operator()(const NewTrialJob& b) {
    pk_.pack_map(9);
    Str(pk_, "experiment_id");
    Str(pk_, b.experiment_id);
    Str(pk_, "trial_id");
    Str(pk_, b.trial_id);
    Str(pk_, "sequence_id");
    pk_.pack_uint64(b.sequence_id);
    Str(pk_, "attempt");
    pk_.pack_uint32(b.attempt);
    Str(pk_, "parameter_id");
    Id(pk_, b.parameter_id);
    Str(pk_, "parameter_source");
    Str(pk_, ToString(b.parameter_source));
    Str(pk_, "parameter_index");
    pk_.pack_uint32(b.parameter_index);
    Str(pk_, "parameters");
    Raw(pk_, buf_, b.parameters, true);
    Str(pk_, "lease");
    OptUInt(b.lease);
  }
  void operator()(const SendTrialJobParameter& b) { (*this)(b.job); }
  void operator()(const KillTrialJob& b) {
    pk_.pack_map(3);
    Str(pk_, "trial_id");
    Str(pk_, b.trial_id);
    Str(pk_, "attempt");
    pk_.pack_uint32(b.attempt);
    Str(pk_, "reason");
    Str(pk_, b.reason);
  }
  void operator()(const MetricAck& b) {
    pk_.pack_map(3);
    Str(pk_, "trial_id");
    Str(pk_, b.trial_id);
    Str(pk_, "attempt");
    pk_.pack_uint32(b.attempt);
    Str(pk_, "sequence");
    pk_.pack_uint64(b.sequence);
  }
  void operator()(const HelloRequest&) { pk_.pack_map(0); }
  void operator()(const Initialized& b) {
    pk_.pack_map(1);
    Str(pk_, "experiment_id");
    Str(pk_, b.experiment_id);
  }
  void operator()(const NoMoreTrialJobs& b) {
    pk_.pack_map(2);
    Str(pk_, "requested");
    pk_.pack_uint32(b.requested);
    Str(pk_, "generated");
    pk_.pack_uint32(b.generated);
  }
  void operator()(const ErrorEvent& b) {
    pk_.pack_map(3);
    Str(pk_, "code");
    Str(pk_, b.code);
    Str(pk_, "message");
    Str(pk_, b.message);
    Str(pk_, "source");
    Str(pk_, b.source);
  }
  void operator()(const OkReply& b) {
    pk_.pack_map(1);
    Str(pk_, "data");
    Raw(pk_, buf_, b.data, true);
  }
  void operator()(const ErrorReply& b) {
    pk_.pack_map(2);
    Str(pk_, "code");
    Str(pk_, b.code);
    Str(pk_, "message");
    Str(pk_, b.message);
  }
  void operator()(const GetStatus&) { pk_.pack_map(0); }
  void operator()(const ListTrials& b) {
    pk_.pack_map(3);
    Str(pk_, "status");
    OptStr(b.status);
    Str(pk_, "offset");
    pk_.pack_uint64(b.offset);
    Str(pk_, "limit");
    pk_.pack_uint64(b.limit);
  }
  void operator()(const GetTrial& b) {
    pk_.pack_map(1);
    Str(pk_, "trial_id");
    Str(pk_, b.trial_id);
  }
  void operator()(const GetStatistics&) { pk_.pack_map(0); }
  void operator()(const GetMetrics& b) {
    pk_.pack_map(1);
    Str(pk_, "trial_id");
    OptStr(b.trial_id);
  }
  void operator()(const ExportData&) { pk_.pack_map(0); }
  void operator()(const ListWorkers&) { pk_.pack_map(0); }
  void operator()(const UpdateLimits& b) {
    pk_.pack_map(3);
    Str(pk_, "concurrency");
    if (b.concurrency) {
      pk_.pack_uint32(*b.concurrency);
    } else {
      pk_.pack_nil();
    }
    Str(pk_, "max_trials");
    if (b.max_trials) {
      pk_.pack_uint64(*b.max_trials);
    } else {
      pk_.pack_nil();
    }
    Str(pk_, "max_duration_s");
    if (b.max_duration_s) {
      Float(buf_, *b.max_duration_s);
    } else {
      pk_.pack_nil();
    }
  }
  void operator()(const KillTrial& b) {
    pk_.pack_map(1);
    Str(pk_, "trial_id");
    Str(pk_, b.trial_id);
  }

 private:
  void Plugin(const PluginSpec& p) {
    pk_.pack_map(4);
    Str(pk_, "name");
    Str(pk_, p.name);
    Str(pk_, "args");
    Raw(pk_, buf_, p.args, true);
    Str(pk_, "isolation");
    if (p.isolation) {
      Str(pk_, ToString(*p.isolation));
    } else {
      pk_.pack_nil();
    }
    Str(pk_, "memory_limit_mb");
    if (p.memory_limit_mb) {
      pk_.pack_uint64(*p.memory_limit_mb);
    } else {
      pk_.pack_nil();
    }
  }
  void Experiment(const ExperimentSpec& e) {
    pk_.pack_map(7);
    Str(pk_, "id");
    Str(pk_, e.id);
    Str(pk_, "tuner");
    Plugin(e.tuner);
    Str(pk_, "assessor");
    if (e.assessor) {
      Plugin(*e.assessor);
    } else {
      pk_.pack_nil();
    }
    Str(pk_, "concurrency");
    pk_.pack_uint32(e.concurrency);
    Str(pk_, "max_trials");
    pk_.pack_uint64(e.max_trials);
    Str(pk_, "max_duration_s");
    Float(buf_, e.max_duration_s);
    Str(pk_, "plugin_timeout_s");
    if (e.plugin_timeout_s) {
      Float(buf_, *e.plugin_timeout_s);
    } else {
      pk_.pack_nil();
    }
  }
  void OptUInt(const std::optional<uint64_t>& v) {
    if (v) {
      pk_.pack_uint64(*v);
    } else {
      pk_.pack_nil();
    }
  }
  void OptStr(const std::optional<std::string>& s) {
    if (s) {
      Str(pk_, *s);
    } else {
      pk_.pack_nil();
    }
  }
  void Running(const std::vector<RunningTrial>& running) {
    pk_.pack_array(static_cast<uint32_t>(running.size()));
    for (const auto& r : running) {
      pk_.pack_map(3);
      Str(pk_, "trial_id");
      Str(pk_, r.trial_id);
      Str(pk_, "attempt");
      pk_.pack_uint32(r.attempt);
      Str(pk_, "last_sequence");
      pk_.pack_int64(r.last_sequence);
    }
  }

  Packer& pk_;
  msgpack::sbuffer& buf_;
};

// ---------------------------------------------------------------- decoding

// Like msgpack::pack(buf, o), but floats stay floats (see Float). Recursion is
// bounded by the unpack depth limit.
void PackObject(Packer& pk, msgpack::sbuffer& buf, const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: Float(buf, o.via.f64); break;
    case msgpack::type::ARRAY:
      pk.pack_array(o.via.array.size);
      for (uint32_t i = 0; i < o.via.array.size; ++i) PackObject(pk, buf, o.via.array.ptr[i]);
      break;
    case msgpack::type::MAP:
      pk.pack_map(o.via.map.size);
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        PackObject(pk, buf, o.via.map.ptr[i].key);
        PackObject(pk, buf, o.via.map.ptr[i].val);
      }
      break;
    default: pk.pack(o); break;
  }
}

Packed Repack(const msgpack::object& o) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  PackObject(pk, buf, o);
  return Packed(buf.data(), buf.size());
}

bool IsNumber(const msgpack::object& o) {
  return o.type == msgpack::type::POSITIVE_INTEGER || o.type == msgpack::type::NEGATIVE_INTEGER ||
         o.type == msgpack::type::FLOAT32 || o.type == msgpack::type::FLOAT64;
}

double AsDouble(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::POSITIVE_INTEGER: return static_cast<double>(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER: return static_cast<double>(o.via.i64);
    default: return o.via.f64;
  }
}

Status MetricFrom(const msgpack::object& o, const std::string& field, Metric* out) {
  if (IsNumber(o)) {
    out->scalar = AsDouble(o);
  } else if (o.type == msgpack::type::MAP) {
    const msgpack::object* def = nullptr;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR &&
          std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == "default") {
        def = &kv.val;
      }
    }
    if (def == nullptr || !IsNumber(*def)) {
      return Status::BadField(field + ": a metric map needs a numeric \"default\"");
    }
    out->scalar = AsDouble(*def);
  } else {
    return Status::BadField(field + ": a metric is a number or a map with a numeric \"default\"");
  }
  out->raw = Repack(o);
  return Status::Ok();
}

// Reads fields of one map, naming them "<prefix>.<key>" in errors.
class Fields {
 public:
  Fields(const msgpack::object& map, std::string prefix) : map_(map), prefix_(std::move(prefix)) {}

  // Whether the key is present at all (nil included).
  bool Has(std::string_view key) const {
    for (uint32_t i = 0; i < map_.via.map.size; ++i) {
      const auto& kv = map_.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR &&
          std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key) {
        return true;
      }
    }
    return false;
  }
  // nullptr when absent or nil.
  const msgpack::object* Find(std::string_view key) const {
    for (uint32_t i = 0; i < map_.via.map.size; ++i) {
      const auto& kv = map_.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR &&
          std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key) {
        return kv.val.type == msgpack::type::NIL ? nullptr : &kv.val;
      }
    }
    return nullptr;
  }
  std::string Name(std::string_view key) const { return prefix_ + "." + std::string(key); }

  Status Required(std::string_view key, const msgpack::object** out) const {
    *out = Find(key);
    if (*out == nullptr) return Status::MissingField(Name(key) + " is required");
    return Status::Ok();
  }
  Status Wrong(std::string_view key, const char* want) const {
    return Status::BadField(Name(key) + ": expected " + want);
  }

  Status TooLong(std::string_view key, size_t size, size_t max) const {
    return Status::BadField(Name(key) + ": " + std::to_string(size) +
                            " bytes is over the limit of " + std::to_string(max) + " bytes");
  }
  // Identifiers are at most kMaxIdBytes; free text passes kMaxTextBytes.
  Status Str(std::string_view key, std::string* out, bool required = true,
             size_t max = kMaxIdBytes) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return required ? Status::MissingField(Name(key) + " is required") : Status::Ok();
    if (o->type != msgpack::type::STR) return Wrong(key, "a string");
    if (o->via.str.size > max) return TooLong(key, o->via.str.size, max);
    out->assign(o->via.str.ptr, o->via.str.size);
    return Status::Ok();
  }
  Status Text(std::string_view key, std::string* out) const {
    return Str(key, out, /*required=*/false, kMaxTextBytes);
  }
  Status OptStr(std::string_view key, std::optional<std::string>* out) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return Status::Ok();
    if (o->type != msgpack::type::STR) return Wrong(key, "a string or nil");
    if (o->via.str.size > kMaxIdBytes) return TooLong(key, o->via.str.size, kMaxIdBytes);
    *out = std::string(o->via.str.ptr, o->via.str.size);
    return Status::Ok();
  }
  template <class T>
  Status UInt(std::string_view key, T* out, bool required = true,
              uint64_t max = std::numeric_limits<T>::max()) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return required ? Status::MissingField(Name(key) + " is required") : Status::Ok();
    if (o->type != msgpack::type::POSITIVE_INTEGER ||
        o->via.u64 > std::numeric_limits<T>::max()) {
      return Wrong(key, "a non-negative integer in range");
    }
    if (o->via.u64 > max) {
      return Status::BadField(Name(key) + ": " + std::to_string(o->via.u64) +
                              " is over the limit of " + std::to_string(max));
    }
    *out = static_cast<T>(o->via.u64);
    return Status::Ok();
  }
  Status OptUInt(std::string_view key, std::optional<uint64_t>* out) const {
    if (Find(key) == nullptr) return Status::Ok();
    uint64_t v = 0;
    Status st = UInt(key, &v);
    if (st.ok()) *out = v;
    return st;
  }
  Status Int(std::string_view key, int64_t* out) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return Status::MissingField(Name(key) + " is required");
    if (o->type == msgpack::type::NEGATIVE_INTEGER) {
      *out = o->via.i64;
    } else if (o->type == msgpack::type::POSITIVE_INTEGER &&
               o->via.u64 <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      *out = static_cast<int64_t>(o->via.u64);
    } else {
      return Wrong(key, "an integer");
    }
    return Status::Ok();
  }
  Status Float(std::string_view key, double* out) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return Status::Ok();  // every float field is optional (0)
    if (!IsNumber(*o)) return Wrong(key, "a number");
    *out = AsDouble(*o);
    return Status::Ok();
  }
  // `max_keys`: parameters and search spaces are at most kMaxParameters keys.
  Status Map(std::string_view key, Packed* out, bool required = true,
             size_t max_keys = std::numeric_limits<uint32_t>::max()) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) {
      if (required) return Status::MissingField(Name(key) + " is required");
      *out = EmptyMap();
      return Status::Ok();
    }
    if (o->type != msgpack::type::MAP) return Wrong(key, "a map");
    if (o->via.map.size > max_keys) {
      return Status::BadField(Name(key) + ": " + std::to_string(o->via.map.size) +
                              " keys is over the limit of " + std::to_string(max_keys));
    }
    *out = Repack(*o);
    return Status::Ok();
  }
  Status Parameters(std::string_view key, Packed* out) const {
    return Map(key, out, /*required=*/true, kMaxParameters);
  }
  Status Any(std::string_view key, Packed* out) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) return Status::MissingField(Name(key) + " is required");
    *out = Repack(*o);
    return Status::Ok();
  }
  Status Metric(std::string_view key, protocol::Metric* out) const {
    const msgpack::object* o;
    Status st = Required(key, &o);
    if (!st.ok()) return st;
    return MetricFrom(*o, Name(key), out);
  }
  Status Id(std::string_view key, ParameterId* out) const {
    const msgpack::object* o = Find(key);
    if (o == nullptr) {
      *out = std::monostate{};
    } else if (o->type == msgpack::type::STR) {
      if (o->via.str.size > kMaxIdBytes) return TooLong(key, o->via.str.size, kMaxIdBytes);
      *out = std::string(o->via.str.ptr, o->via.str.size);
    } else if (o->type == msgpack::type::NEGATIVE_INTEGER) {
      *out = o->via.i64;
    } else if (o->type == msgpack::type::POSITIVE_INTEGER &&
               o->via.u64 <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      *out = static_cast<int64_t>(o->via.u64);
    } else {
      return Wrong(key, "an integer, a string or nil");
    }
    return Status::Ok();
  }
  template <class E, size_t N>
  Status Enum(std::string_view key, const std::pair<E, const char*> (&table)[N], E* out) const {
    std::string s;
    Status st = Str(key, &s);
    if (!st.ok()) return st;
    if (!ParseEnum(s, table, out)) return Status::BadField(Name(key) + ": unknown value \"" + s + "\"");
    return Status::Ok();
  }
  // A nested map (required unless `optional`); *out null when absent.
  Status Sub(std::string_view key, const msgpack::object** out, bool optional = false) const {
    *out = Find(key);
    if (*out == nullptr) {
      return optional ? Status::Ok() : Status::MissingField(Name(key) + " is required");
    }
    if ((*out)->type != msgpack::type::MAP) return Wrong(key, "a map");
    return Status::Ok();
  }
  Status Array(std::string_view key, const msgpack::object** out, size_t max_items,
               bool required = true) const {
    *out = Find(key);
    if (*out == nullptr) {
      return required ? Status::MissingField(Name(key) + " is required") : Status::Ok();
    }
    if ((*out)->type != msgpack::type::ARRAY) return Wrong(key, "an array");
    if ((*out)->via.array.size > max_items) {
      return Status::BadField(Name(key) + ": " + std::to_string((*out)->via.array.size) +
                              " items is over the limit of " + std::to_string(max_items));
    }
    return Status::Ok();
  }

 private:
  const msgpack::object& map_;
  std::string prefix_;
};

#define TH_TRY(expr)              \
  do {                            \
    Status _st = (expr);          \
    if (!_st.ok()) return _st;    \
  } while (0)

Status ReadPlugin(const msgpack::object& o, const std::string& name, PluginSpec* out) {
  Fields f(o, name);
  TH_TRY(f.Str("name", &out->name));
  TH_TRY(f.Map("args", &out->args, /*required=*/false));
  if (f.Find("isolation") != nullptr) {
    PluginIsolation isolation = PluginIsolation::kInProcess;
    TH_TRY(f.Enum("isolation", kIsolations, &isolation));
    out->isolation = isolation;
  }
  if (f.Find("memory_limit_mb") != nullptr) {
    uint64_t mb = 0;
    TH_TRY(f.UInt("memory_limit_mb", &mb, /*required=*/true, kMaxMemoryLimitMb));
    out->memory_limit_mb = mb;
  }
  return Status::Ok();
}

Status ReadRunning(const Fields& f, std::vector<RunningTrial>* out) {
  const msgpack::object* arr;
  TH_TRY(f.Array("running", &arr, kMaxRunning, /*required=*/false));
  if (arr == nullptr) return Status::Ok();
  for (uint32_t i = 0; i < arr->via.array.size; ++i) {
    const msgpack::object& item = arr->via.array.ptr[i];
    std::string name = f.Name("running") + "[" + std::to_string(i) + "]";
    if (item.type != msgpack::type::MAP) return Status::BadField(name + ": expected a map");
    Fields r(item, name);
    RunningTrial t;
    TH_TRY(r.Str("trial_id", &t.trial_id));
    TH_TRY(r.UInt("attempt", &t.attempt));
    if (r.Find("last_sequence") != nullptr) TH_TRY(r.Int("last_sequence", &t.last_sequence));
    out->push_back(std::move(t));
  }
  return Status::Ok();
}

Status Read(const Fields& f, Initialize* b) {
  TH_TRY(f.Map("search_space", &b->search_space, /*required=*/true, kMaxParameters));
  const msgpack::object* e;
  TH_TRY(f.Sub("experiment", &e, /*optional=*/true));
  if (e == nullptr) return Status::Ok();
  Fields x(*e, f.Name("experiment"));
  ExperimentSpec spec;
  TH_TRY(x.Str("id", &spec.id, /*required=*/false));
  const msgpack::object* t;
  TH_TRY(x.Sub("tuner", &t));
  TH_TRY(ReadPlugin(*t, x.Name("tuner"), &spec.tuner));
  const msgpack::object* a;
  TH_TRY(x.Sub("assessor", &a, /*optional=*/true));
  if (a != nullptr) {
    spec.assessor.emplace();
    TH_TRY(ReadPlugin(*a, x.Name("assessor"), &*spec.assessor));
  }
  TH_TRY(x.UInt("concurrency", &spec.concurrency, /*required=*/false, kMaxConcurrency));
  if (spec.concurrency == 0) return Status::BadField(x.Name("concurrency") + ": must be >= 1");
  TH_TRY(x.UInt("max_trials", &spec.max_trials, /*required=*/false));
  TH_TRY(x.Float("max_duration_s", &spec.max_duration_s));
  if (!(spec.max_duration_s >= 0)) {
    return Status::BadField(x.Name("max_duration_s") + ": must be >= 0");
  }
  if (x.Find("plugin_timeout_s") != nullptr) {
    double timeout = 0;
    TH_TRY(x.Float("plugin_timeout_s", &timeout));
    if (!(timeout > 0 && timeout <= kMaxPluginTimeoutS)) {
      return Status::BadField(x.Name("plugin_timeout_s") + ": must be > 0 and at most " +
                              std::to_string(static_cast<int>(kMaxPluginTimeoutS)));
    }
    spec.plugin_timeout_s = timeout;
  }
  b->experiment = std::move(spec);
  return Status::Ok();
}
Status Read(const Fields& f, RequestTrialJobs* b) {
  return f.UInt("count", &b->count, /*required=*/true, kMaxRequestCount);
}
Status Read(const Fields& f, UpdateSearchSpace* b) {
  return f.Map("search_space", &b->search_space, /*required=*/true, kMaxParameters);
}
Status Read(const Fields& f, ImportData* b) {
  const msgpack::object* arr;
  TH_TRY(f.Array("data", &arr, kMaxImportRecords));
  for (uint32_t i = 0; i < arr->via.array.size; ++i) {
    const msgpack::object& item = arr->via.array.ptr[i];
    std::string name = f.Name("data") + "[" + std::to_string(i) + "]";
    if (item.type != msgpack::type::MAP) return Status::BadField(name + ": expected a map");
    Fields r(item, name);
    ImportRecord rec;
    TH_TRY(r.Parameters("parameters", &rec.parameters));
    TH_TRY(r.Metric("value", &rec.value));
    TH_TRY(r.OptStr("trial_id", &rec.trial_id));
    b->data.push_back(std::move(rec));
  }
  return Status::Ok();
}
Status Read(const Fields& f, AddCustomizedTrialJob* b) {
  return f.Parameters("parameters", &b->parameters);
}
Status Read(const Fields&, Terminate*) { return Status::Ok(); }
Status Read(const Fields&, Ping*) { return Status::Ok(); }
Status Read(const Fields& f, ReportMetricData* b) {
  TH_TRY(f.Str("trial_id", &b->trial_id));
  TH_TRY(f.UInt("attempt", &b->attempt, /*required=*/false));
  TH_TRY(f.Id("parameter_id", &b->parameter_id));
  TH_TRY(f.Enum("type", kMetricTypes, &b->type));
  TH_TRY(f.UInt("sequence", &b->sequence));
  TH_TRY(f.Metric("value", &b->value));
  return f.Str("worker_id", &b->worker_id, /*required=*/false);
}
Status Read(const Fields& f, TrialEnd* b) {
  TH_TRY(f.Str("trial_id", &b->trial_id));
  TH_TRY(f.UInt("attempt", &b->attempt, /*required=*/false));
  TH_TRY(f.Enum("status", kTrialStatuses, &b->status));
  TH_TRY(f.Text("error", &b->error));
  return f.Str("worker_id", &b->worker_id, /*required=*/false);
}
Status Read(const Fields& f, WorkerHello* b) {
  TH_TRY(f.Str("worker_id", &b->worker_id));
  TH_TRY(f.UInt("slots", &b->slots, /*required=*/true, kMaxSlots));
  const msgpack::object* r;
  TH_TRY(f.Sub("resources", &r, /*optional=*/true));
  if (r != nullptr) {
    Fields res(*r, f.Name("resources"));
    TH_TRY(res.UInt("gpus", &b->resources.gpus, /*required=*/false, kMaxSlots));
    TH_TRY(res.Map("extra", &b->resources.extra, /*required=*/false));
  } else {
    b->resources.extra = EmptyMap();
  }
  TH_TRY(f.Text("language", &b->language));
  TH_TRY(f.Text("version", &b->version));
  TH_TRY(ReadRunning(f, &b->running));
  return f.OptStr("offers", &b->offers);
}
Status Read(const Fields& f, Heartbeat* b) {
  TH_TRY(f.Str("worker_id", &b->worker_id));
  TH_TRY(f.UInt("free_slots", &b->free_slots, /*required=*/false, kMaxSlots));
  return ReadRunning(f, &b->running);
}
Status Read(const Fields& f, TrialStarted* b) {
  TH_TRY(f.Str("worker_id", &b->worker_id));
  TH_TRY(f.Str("trial_id", &b->trial_id));
  TH_TRY(f.UInt("attempt", &b->attempt));
  return f.OptUInt("lease", &b->lease);
}
Status Read(const Fields& f, TrialRejected* b) {
  TH_TRY(f.Str("worker_id", &b->worker_id));
  TH_TRY(f.Str("trial_id", &b->trial_id));
  TH_TRY(f.UInt("attempt", &b->attempt));
  TH_TRY(f.Text("reason", &b->reason));
  return f.OptUInt("lease", &b->lease);
}
Status Read(const Fields& f, WorkerBye* b) { return f.Str("worker_id", &b->worker_id); }
Status Read(const Fields& f, NewTrialJob* b) {
  TH_TRY(f.Str("experiment_id", &b->experiment_id, /*required=*/false));
  TH_TRY(f.Str("trial_id", &b->trial_id));
  TH_TRY(f.UInt("sequence_id", &b->sequence_id, /*required=*/false));
  TH_TRY(f.UInt("attempt", &b->attempt));
  TH_TRY(f.Id("parameter_id", &b->parameter_id));
  TH_TRY(f.Enum("parameter_source", kSources, &b->parameter_source));
  TH_TRY(f.UInt("parameter_index", &b->parameter_index, /*required=*/false));
  TH_TRY(f.Parameters("parameters", &b->parameters));
  return f.OptUInt("lease", &b->lease);
}
Status Read(const Fields& f, SendTrialJobParameter* b) { return Read(f, &b->job); }
Status Read(const Fields& f, KillTrialJob* b) {
  TH_TRY(f.Str("trial_id", &b->trial_id));
  TH_TRY(f.UInt("attempt", &b->attempt));
  return f.Text("reason", &b->reason);
}
Status Read(const Fields& f, MetricAck* b) {
  TH_TRY(f.Str("trial_id", &b->trial_id));
  TH_TRY(f.UInt("attempt", &b->attempt));
  return f.UInt("sequence", &b->sequence);
}
Status Read(const Fields&, HelloRequest*) { return Status::Ok(); }
Status Read(const Fields& f, Initialized* b) { return f.Str("experiment_id", &b->experiment_id); }
Status Read(const Fields& f, NoMoreTrialJobs* b) {
  TH_TRY(f.UInt("requested", &b->requested, /*required=*/false));
  return f.UInt("generated", &b->generated, /*required=*/false);
}
Status Read(const Fields& f, ErrorEvent* b) {
  TH_TRY(f.Str("code", &b->code));
  TH_TRY(f.Text("message", &b->message));
  return f.Str("source", &b->source, /*required=*/false);
}
Status Read(const Fields& f, OkReply* b) {
  const msgpack::object* o = f.Find("data");
  b->data = o == nullptr ? EmptyMap() : Repack(*o);
  return Status::Ok();
}
Status Read(const Fields& f, ErrorReply* b) {
  TH_TRY(f.Str("code", &b->code));
  return f.Text("message", &b->message);
}

Status Read(const Fields&, GetStatus*) { return Status::Ok(); }
Status Read(const Fields& f, ListTrials* b) {
  TH_TRY(f.OptStr("status", &b->status));
  if (b->status && !IsControlTrialStatus(*b->status)) {
    return Status::BadField(f.Name("status") + ": unknown trial status \"" + *b->status + "\"");
  }
  TH_TRY(f.UInt("offset", &b->offset, /*required=*/false));
  return f.UInt("limit", &b->limit, /*required=*/false);
}
Status Read(const Fields& f, GetTrial* b) { return f.Str("trial_id", &b->trial_id); }
Status Read(const Fields&, GetStatistics*) { return Status::Ok(); }
Status Read(const Fields& f, GetMetrics* b) { return f.OptStr("trial_id", &b->trial_id); }
Status Read(const Fields&, ExportData*) { return Status::Ok(); }
Status Read(const Fields&, ListWorkers*) { return Status::Ok(); }
Status Read(const Fields& f, UpdateLimits* b) {
  if (f.Find("concurrency") != nullptr) {
    uint32_t c = 0;
    TH_TRY(f.UInt("concurrency", &c, /*required=*/true, kMaxConcurrency));
    if (c == 0) return Status::BadField(f.Name("concurrency") + ": must be >= 1");
    b->concurrency = c;
  }
  if (f.Find("max_trials") != nullptr) {
    uint64_t n = 0;
    TH_TRY(f.UInt("max_trials", &n));
    b->max_trials = n;
  }
  if (f.Find("max_duration_s") != nullptr) {
    double d = 0;
    TH_TRY(f.Float("max_duration_s", &d));
    // The budget becomes milliseconds on the host: finite and not negative.
    if (!(d >= 0) || !std::isfinite(d)) {
      return Status::BadField(f.Name("max_duration_s") + ": must be a finite number >= 0");
    }
    b->max_duration_s = d;
  }
  return Status::Ok();
}
Status Read(const Fields& f, KillTrial* b) { return f.Str("trial_id", &b->trial_id); }

template <size_t I = 0>
Status ReadBody(size_t index, const Fields& f, Body* out) {
  if constexpr (I < std::variant_size_v<Body>) {
    if (index == I) {
      std::variant_alternative_t<I, Body> body{};
      TH_TRY(Read(f, &body));
      *out = std::move(body);
      return Status::Ok();
    }
    return ReadBody<I + 1>(index, f, out);
  } else {
    return Status::Internal("bad body index");
  }
}

Status DecodeObject(const msgpack::object& root, Message* out) {
  if (root.type != msgpack::type::MAP) return Status::BadFrame("message is not a MessagePack map");
  Fields env(root, "envelope");
  // The id first, so even a failed request gets a reply that echoes it.
  if (const msgpack::object* id = env.Find("id");
      id != nullptr && id->type == msgpack::type::POSITIVE_INTEGER) {
    out->id = id->via.u64;
  }
  const msgpack::object* v = env.Find("v");
  if (v == nullptr || v->type != msgpack::type::POSITIVE_INTEGER) {
    return Status::UnsupportedVersion("message has no protocol version \"v\"; this host speaks v" +
                                      std::to_string(kProtocolVersion));
  }
  if (v->via.u64 != kProtocolVersion) {
    return Status::UnsupportedVersion("protocol v" + std::to_string(v->via.u64) +
                                      " is not supported; this host speaks v" +
                                      std::to_string(kProtocolVersion));
  }
  out->version = kProtocolVersion;
  TH_TRY(env.Str("type", &out->type));
  // Every envelope has exactly its four keys (§3): a nil or absent id or
  // body is refused like any required field.
  if (!env.Has("id")) return Status::MissingField(env.Name("id") + " is required");
  if (const msgpack::object* id = env.Find("id");
      id == nullptr || id->type != msgpack::type::POSITIVE_INTEGER) {
    return env.Wrong("id", "a non-negative integer");
  }
  size_t index = std::variant_size_v<Body>;
  for (size_t i = 0; i < std::size(kTypeCodes); ++i) {
    if (out->type == kTypeCodes[i]) index = i;
  }
  if (index == std::variant_size_v<Body>) {
    return Status::UnknownType("unknown message type \"" + out->type + "\"");
  }
  if (!env.Has("body")) return Status::MissingField(env.Name("body") + " is required");
  const msgpack::object* body = env.Find("body");
  if (body == nullptr || body->type != msgpack::type::MAP) return env.Wrong("body", "a map");
  return ReadBody(index, Fields(*body, "body"), &out->body);
}

}  // namespace

std::string_view ToString(MetricType t) { return EnumName(t, kMetricTypes); }
std::string_view ToString(TrialStatus s) { return EnumName(s, kTrialStatuses); }
std::string_view ToString(ParameterSource s) { return EnumName(s, kSources); }
std::string_view ToString(PluginIsolation i) { return EnumName(i, kIsolations); }
bool ParsePluginIsolation(std::string_view s, PluginIsolation* out) {
  return ParseEnum(s, kIsolations, out);
}
bool ParseMetricType(std::string_view s, MetricType* out) { return ParseEnum(s, kMetricTypes, out); }
bool ParseTrialStatus(std::string_view s, TrialStatus* out) {
  return ParseEnum(s, kTrialStatuses, out);
}
bool ParseParameterSource(std::string_view s, ParameterSource* out) {
  return ParseEnum(s, kSources, out);
}

std::string_view TypeCode(const Body& body) { return kTypeCodes[body.index()]; }

bool IsControlTrialStatus(std::string_view s) {
  for (const char* name : kControlTrialStatuses) {
    if (s == name) return true;
  }
  return false;
}

Status Decode(std::string_view bytes, Message* out, const DecodeOptions& options) {
  out->id = 0;
  if (bytes.size() > options.max_message_bytes) {
    return Status::TooLarge("message of " + std::to_string(bytes.size()) +
                            " bytes exceeds the limit of " +
                            std::to_string(options.max_message_bytes) + " bytes");
  }
  try {
    size_t offset = 0;
    // Bounded nesting and container sizes: hostile input cannot recurse deep
    // or make the unpacker reserve more than the message could hold.
    const size_t n = bytes.size();
    msgpack::unpack_limit limit(n, n, n, n, n, kMaxDepth);
    msgpack::object_handle oh =
        msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limit);
    if (offset != bytes.size()) {
      return Status::BadFrame(std::to_string(bytes.size() - offset) +
                              " trailing bytes after the message");
    }
    return DecodeObject(oh.get(), out);
  } catch (const std::exception& e) {
    return Status::BadFrame(std::string("not a MessagePack message: ") + e.what());
  } catch (...) {
    return Status::BadFrame("not a MessagePack message");
  }
}

void EncodeTo(const Message& message, std::string* out) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_map(4);
  Str(pk, "v");
  pk.pack_uint32(kProtocolVersion);
  Str(pk, "type");
  Str(pk, TypeCode(message.body));
  Str(pk, "id");
  pk.pack_uint64(message.id);
  Str(pk, "body");
  std::visit(Writer(pk, buf), message.body);
  out->assign(buf.data(), buf.size());
}

std::string Encode(const Message& message) {
  std::string out;
  EncodeTo(message, &out);
  return out;
}

Status ParseMetric(std::string_view packed, Metric* out) {
  try {
    msgpack::object_handle oh = msgpack::unpack(packed.data(), packed.size());
    return MetricFrom(oh.get(), "metric", out);
  } catch (const std::exception& e) {
    return Status::BadField(std::string("metric is not MessagePack: ") + e.what());
  }
}

Packed EmptyMap() { return Packed("\x80", 1); }

Packed PackDouble(double v) {
  msgpack::sbuffer buf;
  Float(buf, v);
  return Packed(buf.data(), buf.size());
}

}  // namespace tunehost::protocol
