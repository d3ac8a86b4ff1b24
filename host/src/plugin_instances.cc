// In-process plugin instances: the Tuner / Assessor wrappers that turn the C
// ABI into tunehost::Status. Every call into a plugin is wrapped in
// try/catch: the ABI forbids exceptions, but a broken plugin that throws
// anyway must cost an error, not the host.
#include <algorithm>
#include <cctype>
#include <array>
#include <cstddef>
#include <cstring>
#include <exception>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include <boost/dll/shared_library.hpp>
#include <msgpack.hpp>
#include <spdlog/spdlog.h>

#include "tunehost/host/isolated_plugin.h"
#include "tunehost/host/plugin.h"
#include "tunehost/host/plugin_text.h"
#include "tunehost/sdk/sdk.h"

#include "plugin_abi.h"

namespace tunehost::host {

namespace plugin_abi {

std::string VersionString(const th_version_t& v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.revision);
}

std::string HostVersionString() {
  return VersionString(th_version_t TH_VERSION_INIT);
}

std::string CurrentExceptionText() {
  try {
    throw;
  } catch (const std::exception& e) {
    return CleanPluginText(e.what());
  } catch (...) {
    return "unknown exception";
  }
}

bool IsOneMap(const uint8_t* data, size_t size, std::string* why) {
  if (data == nullptr || size == 0) {
    *why = "no bytes";
    return false;
  }
  try {
    size_t offset = 0;
    msgpack::object_handle h =
        msgpack::unpack(reinterpret_cast<const char*>(data), size, offset);
    if (offset != size) {
      *why = "trailing bytes after the map";
      return false;
    }
    if (h.get().type != msgpack::type::MAP) {
      *why = "not a MessagePack map";
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    *why = std::string("invalid MessagePack (") + e.what() + ")";
    return false;
  }
}

}  // namespace plugin_abi

using plugin_abi::CurrentExceptionText;
using plugin_abi::IsOneMap;

namespace {

constexpr size_t kErrorCapacity = 4096;

const char* StatusName(th_status status) {
  switch (status) {
    case TH_OK: return "TH_OK";
    case TH_INVALID_ARGUMENT: return "TH_INVALID_ARGUMENT";
    case TH_NOT_SUPPORTED: return "TH_NOT_SUPPORTED";
    case TH_NO_MORE_TRIALS: return "TH_NO_MORE_TRIALS";
    case TH_INTERNAL: return "TH_INTERNAL";
    case TH_OUT_OF_MEMORY: return "TH_OUT_OF_MEMORY";
    case TH_BAD_STATE: return "TH_BAD_STATE";
  }
  return nullptr;
}

std::string DescribeStatus(th_status status) {
  const char* name = StatusName(status);
  return name ? std::string(name) : "unknown status " + std::to_string(status);
}

th_bytes_t Bytes(std::string_view s) {
  return th_bytes_t{reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A caller-owned message buffer for one call.
class ErrorBuffer {
 public:
  ErrorBuffer() { Reset(); }
  th_error_t* get() {
    Reset();
    return &err_;
  }
  // The message the plugin wrote, cleaned, or "" (never reads past the buffer).
  std::string text() const {
    return CleanPluginText(std::string_view(buffer_.data(), strnlen(buffer_.data(), buffer_.size())));
  }

 private:
  void Reset() {
    buffer_[0] = '\0';
    err_ = th_error_t{buffer_.data(), buffer_.size()};
  }
  std::array<char, kErrorCapacity> buffer_;
  th_error_t err_;
};

spdlog::level::level_enum SpdLevel(th_log_level_t level) {
  switch (level) {
    case TH_LOG_DEBUG: return spdlog::level::debug;
    case TH_LOG_INFO: return spdlog::level::info;
    case TH_LOG_WARNING: return spdlog::level::warn;
    case TH_LOG_ERROR: return spdlog::level::err;
  }
  return spdlog::level::info;
}

th_status ToThStatus(const Status& st) {
  switch (st.code()) {
    case Status::Code::kOk: return TH_OK;
    case Status::Code::kBadState:
    case Status::Code::kUnavailable: return TH_BAD_STATE;
    case Status::Code::kInternal: return TH_INTERNAL;
    default: return TH_INVALID_ARGUMENT;
  }
}

// Whether a growable struct of `struct_size` bytes has the field ending at `end`.
constexpr bool HasField(uint32_t struct_size, size_t end) { return struct_size >= end; }

#define TH_FIELD_END(type, field) (offsetof(type, field) + sizeof(static_cast<type*>(nullptr)->field))

}  // namespace

LoadedLibrary::~LoadedLibrary() {
  if (!initialized || entry->deinit == nullptr) return;
  try {
    entry->deinit();
  } catch (...) {
    spdlog::warn("plugin {}: deinit threw across the ABI: {}", file.string(),
                 CurrentExceptionText());
  }
}

namespace {

// The th_host_t one instance gets, plus what its callbacks need. Lives inside
// the wrapper object, so its address is stable for the instance's lifetime.
struct HostContext {
  th_host_t host;
  std::string label;  // "tuner random", for log lines
  SendTrialFn send_trial;

  HostContext(std::string kind, const std::string& name, SendTrialFn fn)
      : label(std::move(kind) + " " + name), send_trial(std::move(fn)) {
    host.struct_size = sizeof(th_host_t);
    host.abi_version = th_version_t TH_VERSION_INIT;
    host.host_data = this;
    host.name = "tunehost";
    host.version = TH_HOST_VERSION;
    host.log = &Log;
    host.send_trial = &SendTrial;
    host.get_extension = &GetExtension;
  }
  HostContext(const HostContext&) = delete;
  HostContext& operator=(const HostContext&) = delete;

  static HostContext& Of(const th_host_t* self) {
    return *static_cast<HostContext*>(self->host_data);
  }

  static void Log(const th_host_t* self, th_log_level_t level, const char* message) {
    try {
      spdlog::log(SpdLevel(level), "[{}] {}", Of(self).label,
                  CleanPluginText(message ? message : ""));
    } catch (...) {
      // Logging never fails towards the plugin.
    }
  }

  static th_status SendTrial(const th_host_t* self, int64_t parameter_id, const uint8_t* params,
                             size_t size) {
    try {
      HostContext& ctx = Of(self);
      if (!ctx.send_trial) return TH_NOT_SUPPORTED;
      std::string why;
      if (!IsOneMap(params, size, &why)) {
        spdlog::warn("[{}] send_trial for id {} refused: {}", ctx.label, parameter_id, why);
        return TH_INVALID_ARGUMENT;
      }
      Status st = ctx.send_trial(parameter_id,
                                 protocol::Packed(reinterpret_cast<const char*>(params), size));
      if (!st.ok()) {
        spdlog::warn("[{}] send_trial for id {} refused: {}", ctx.label, parameter_id,
                     st.ToString());
      }
      return ToThStatus(st);
    } catch (...) {
      return TH_INTERNAL;
    }
  }

  static const void* GetExtension(const th_host_t*, const char*) { return nullptr; }
};

// Collects the bytes a plugin writes through a th_byte_writer_t.
struct StringWriter {
  th_byte_writer_t writer{this, &Write};
  std::string* out;

  explicit StringWriter(std::string* o) : out(o) {}

  static th_status Write(const th_byte_writer_t* self, const uint8_t* data, size_t size) {
    try {
      auto* w = static_cast<StringWriter*>(self->writer_data);
      if (size > 0 && data == nullptr) return TH_INVALID_ARGUMENT;
      w->out->append(reinterpret_cast<const char*>(data), size);
      return TH_OK;
    } catch (const std::bad_alloc&) {
      return TH_OUT_OF_MEMORY;
    } catch (...) {
      return TH_INTERNAL;
    }
  }
};

// Shared plumbing of both wrappers: one place that calls into the plugin.
class InstanceBase {
 protected:
  InstanceBase(std::shared_ptr<LoadedLibrary> library, PluginInfo info, SendTrialFn send_trial)
      : library_(std::move(library)),
        info_(std::move(info)),
        context_(info_.kind, info_.name, std::move(send_trial)) {}

  // Runs one plugin call `op` that returns a th_status. Plugin statuses other
  // than TH_OK become PluginError unless listed in `accepted`, which are
  // handed back through *status_out.
  template <class Fn>
  Status Call(const char* op, Fn&& fn, th_status* status_out = nullptr,
              std::initializer_list<th_status> accepted = {}) {
    th_status st = TH_INTERNAL;
    try {
      st = fn(errors_.get());
    } catch (...) {
      return Status::PluginError(Prefix() + op + " threw across the ABI: " +
                                 CurrentExceptionText());
    }
    if (status_out) *status_out = st;
    if (st == TH_OK) return Status::Ok();
    for (th_status a : accepted) {
      if (st == a) return Status::Ok();
    }
    std::string message = errors_.text();
    std::string detail = std::string(op) + " returned " + DescribeStatus(st);
    return Status::PluginError(Prefix() + (message.empty() ? detail : message + " (" + detail + ")"));
  }

  // An optional callback (`present` false: absent from the vtable): a plugin
  // status TH_NOT_SUPPORTED, or its absence, clears *supported.
  template <class Fn>
  Status Optional(const char* op, bool present, bool* supported, Fn&& fn) {
    *supported = present;
    if (!present) return Status::Ok();
    th_status st = TH_OK;
    Status status = Call(op, std::forward<Fn>(fn), &st, {TH_NOT_SUPPORTED});
    if (st == TH_NOT_SUPPORTED) *supported = false;
    return status;
  }

  // save_state and load_state of a tuner or an assessor (optional callbacks).
  template <class Instance>
  Status SaveStateOf(const Instance* instance,
                     th_status (*save)(const Instance*, const th_byte_writer_t*, th_error_t*),
                     std::string* state, bool* supported) {
    state->clear();
    StringWriter writer(state);
    return Optional("save_state", save != nullptr, supported, [&](th_error_t* err) {
      return save(instance, &writer.writer, err);
    });
  }
  template <class Instance>
  Status LoadStateOf(const Instance* instance,
                     th_status (*load)(const Instance*, th_bytes_t, th_error_t*),
                     std::string_view state, bool* supported) {
    return Optional("load_state", load != nullptr, supported, [&](th_error_t* err) {
      return load(instance, Bytes(state), err);
    });
  }

  static constexpr const char* kTooSmall = "struct_size too small for the required callbacks";

  // Creates an instance with `factory` and checks its vtable: `missing`
  // names what a usable instance lacks, or is nullptr. An instance found
  // unusable sets *broken and is destroyed if it can be.
  template <class Instance, class Factory, class Missing>
  Status CreateInstance(const Factory* factory, const char* id, std::string_view class_args,
                        bool* broken, const Instance** out, Missing missing_of) {
    const Instance* instance = nullptr;
    try {
      instance = factory->create(factory, host(), id, Bytes(class_args), errors_.get());
    } catch (...) {
      return Status::PluginError(Prefix() + "create threw across the ABI: " +
                                 CurrentExceptionText());
    }
    if (instance == nullptr) {
      std::string message = errors_.text();
      return Status::PluginError(Prefix() + "create failed: " +
                                 (message.empty() ? "no message" : message));
    }
    if (const char* missing = missing_of(*instance); missing != nullptr) {
      // Without a valid vtable the instance cannot be trusted to destroy itself.
      if (HasField(instance->struct_size, TH_FIELD_END(Instance, destroy)) &&
          instance->destroy != nullptr) {
        try {
          instance->destroy(instance);
        } catch (...) {
        }
      }
      *broken = true;
      return Status::PluginError(Prefix() + missing);
    }
    *out = instance;
    return Status::Ok();
  }

  std::string Prefix() const { return info_.kind + " " + info_.name + ": "; }

  const th_host_t* host() const { return &context_.host; }

  // Declared first: destroyed last, after the instance and its host struct.
  std::shared_ptr<LoadedLibrary> library_;
  PluginInfo info_;
  HostContext context_;
  ErrorBuffer errors_;
};

class TunerImpl final : public Tuner, private InstanceBase {
 public:
  TunerImpl(std::shared_ptr<LoadedLibrary> library, PluginInfo info, SendTrialFn send_trial)
      : InstanceBase(std::move(library), std::move(info), std::move(send_trial)) {}

  ~TunerImpl() override {
    if (tuner_ == nullptr) return;
    try {
      tuner_->destroy(tuner_);
    } catch (...) {
      spdlog::warn("{}destroy threw across the ABI: {}", Prefix(), CurrentExceptionText());
    }
  }

  // Creates the plugin instance and checks its vtable.
  // *broken is set when the instance itself is unusable (bad vtable).
  Status Create(const th_tuner_factory_t* factory, const char* id, std::string_view class_args,
                bool* broken) {
    const th_tuner_t* tuner = nullptr;
    Status st = CreateInstance(factory, id, class_args, broken, &tuner, [](const th_tuner_t& t) {
      if (!HasField(t.struct_size, TH_FIELD_END(th_tuner_t, trial_end))) return kTooSmall;
      if (t.destroy == nullptr) return "missing required callback destroy";
      if (t.update_search_space == nullptr) return "missing required callback update_search_space";
      if (t.generate == nullptr) return "missing required callback generate";
      if (t.receive_trial_result == nullptr) {
        return "missing required callback receive_trial_result";
      }
      if (t.trial_end == nullptr) return "missing required callback trial_end";
      return static_cast<const char*>(nullptr);
    });
    if (!st.ok()) return st;
    const uint32_t size = tuner->struct_size;
    tuner_ = tuner;
    import_data_ = HasField(size, TH_FIELD_END(th_tuner_t, import_data)) ? tuner->import_data : nullptr;
    save_state_ = HasField(size, TH_FIELD_END(th_tuner_t, save_state)) ? tuner->save_state : nullptr;
    load_state_ = HasField(size, TH_FIELD_END(th_tuner_t, load_state)) ? tuner->load_state : nullptr;
    return Status::Ok();
  }

  const PluginInfo& info() const override { return info_; }

  Status UpdateSearchSpace(std::string_view search_space) override {
    return Call("update_search_space", [&](th_error_t* err) {
      return tuner_->update_search_space(tuner_, Bytes(search_space), err);
    });
  }

  Status Generate(const std::vector<int64_t>& ids,
                  std::vector<std::pair<int64_t, protocol::Packed>>* out, bool* no_more) override {
    *no_more = false;
    Sink sink(ids, out);
    th_status st = TH_OK;
    Status status = Call(
        "generate",
        [&](th_error_t* err) {
          return tuner_->generate(tuner_, ids.data(), static_cast<uint32_t>(ids.size()),
                                  &sink.sink, err);
        },
        &st, {TH_NO_MORE_TRIALS});
    if (!sink.error.empty()) {
      return Status::PluginError(Prefix() + "generate emitted invalid parameters: " + sink.error);
    }
    if (!status.ok()) return status;
    *no_more = st == TH_NO_MORE_TRIALS || sink.emitted < ids.size();
    return Status::Ok();
  }

  Status ReceiveTrialResult(int64_t parameter_id, std::string_view parameters,
                            std::string_view value, double scalar, bool customized) override {
    return Call("receive_trial_result", [&](th_error_t* err) {
      return tuner_->receive_trial_result(tuner_, parameter_id, Bytes(parameters), Bytes(value),
                                          scalar, customized ? TH_RESULT_CUSTOMIZED : 0u, err);
    });
  }

  Status TrialEnd(int64_t parameter_id, bool success) override {
    return Call("trial_end", [&](th_error_t* err) {
      return tuner_->trial_end(tuner_, parameter_id, success, err);
    });
  }

  Status ImportData(std::string_view records, bool* supported) override {
    return Optional("import_data", import_data_ != nullptr, supported, [&](th_error_t* err) {
      return import_data_(tuner_, Bytes(records), err);
    });
  }

  Status SaveState(std::string* state, bool* supported) override {
    return SaveStateOf(tuner_, save_state_, state, supported);
  }

  Status LoadState(std::string_view state, bool* supported) override {
    return LoadStateOf(tuner_, load_state_, state, supported);
  }

 private:
  // The th_param_sink_t of one generate call: accepts each given id once,
  // with bytes that are exactly one map; remembers the first violation.
  struct Sink {
    th_param_sink_t sink{this, &Emit};
    const std::vector<int64_t>& ids;
    std::vector<bool> used;
    std::vector<std::pair<int64_t, protocol::Packed>>* out;
    size_t emitted = 0;
    std::string error;

    Sink(const std::vector<int64_t>& i, std::vector<std::pair<int64_t, protocol::Packed>>* o)
        : ids(i), used(i.size(), false), out(o) {}

    static th_status Emit(const th_param_sink_t* self, int64_t id, const uint8_t* params,
                          size_t size) {
      try {
        auto* s = static_cast<Sink*>(self->sink_data);
        auto it = std::find(s->ids.begin(), s->ids.end(), id);
        std::string why;
        if (it == s->ids.end()) {
          why = "id " + std::to_string(id) + " was not requested";
        } else if (s->used[static_cast<size_t>(it - s->ids.begin())]) {
          why = "id " + std::to_string(id) + " emitted twice";
        } else if (!IsOneMap(params, size, &why)) {
          why = "id " + std::to_string(id) + ": " + why;
        }
        if (!why.empty()) {
          if (s->error.empty()) s->error = why;
          return TH_INVALID_ARGUMENT;
        }
        s->used[static_cast<size_t>(it - s->ids.begin())] = true;
        s->out->emplace_back(id, protocol::Packed(reinterpret_cast<const char*>(params), size));
        ++s->emitted;
        return TH_OK;
      } catch (...) {
        return TH_INTERNAL;
      }
    }
  };

  const th_tuner_t* tuner_ = nullptr;
  th_status (*import_data_)(const th_tuner_t*, th_bytes_t, th_error_t*) = nullptr;
  th_status (*save_state_)(const th_tuner_t*, const th_byte_writer_t*, th_error_t*) = nullptr;
  th_status (*load_state_)(const th_tuner_t*, th_bytes_t, th_error_t*) = nullptr;
};

class AssessorImpl final : public Assessor, private InstanceBase {
 public:
  AssessorImpl(std::shared_ptr<LoadedLibrary> library, PluginInfo info)
      : InstanceBase(std::move(library), std::move(info), nullptr) {}

  ~AssessorImpl() override {
    if (assessor_ == nullptr) return;
    try {
      assessor_->destroy(assessor_);
    } catch (...) {
      spdlog::warn("{}destroy threw across the ABI: {}", Prefix(), CurrentExceptionText());
    }
  }

  // *broken is set when the instance itself is unusable (bad vtable).
  Status Create(const th_assessor_factory_t* factory, const char* id, std::string_view class_args,
                bool* broken) {
    const th_assessor_t* assessor = nullptr;
    Status st =
        CreateInstance(factory, id, class_args, broken, &assessor, [](const th_assessor_t& a) {
          if (!HasField(a.struct_size, TH_FIELD_END(th_assessor_t, trial_end))) return kTooSmall;
          if (a.destroy == nullptr) return "missing required callback destroy";
          if (a.assess_trial == nullptr) return "missing required callback assess_trial";
          if (a.trial_end == nullptr) return "missing required callback trial_end";
          return static_cast<const char*>(nullptr);
        });
    if (!st.ok()) return st;
    const uint32_t size = assessor->struct_size;
    assessor_ = assessor;
    save_state_ =
        HasField(size, TH_FIELD_END(th_assessor_t, save_state)) ? assessor->save_state : nullptr;
    load_state_ =
        HasField(size, TH_FIELD_END(th_assessor_t, load_state)) ? assessor->load_state : nullptr;
    return Status::Ok();
  }

  const PluginInfo& info() const override { return info_; }

  Status AssessTrial(const std::string& trial_id, std::string_view history, bool* good) override {
    th_assessment_t result = TH_ASSESS_GOOD;
    Status st = Call("assess_trial", [&](th_error_t* err) {
      return assessor_->assess_trial(assessor_, trial_id.c_str(), Bytes(history), &result, err);
    });
    if (!st.ok()) return st;
    if (result != TH_ASSESS_GOOD && result != TH_ASSESS_BAD) {
      return Status::PluginError(Prefix() + "assess_trial wrote an invalid result " +
                                 std::to_string(static_cast<int>(result)));
    }
    *good = result == TH_ASSESS_GOOD;
    return Status::Ok();
  }

  Status TrialEnd(const std::string& trial_id, bool success) override {
    return Call("trial_end", [&](th_error_t* err) {
      return assessor_->trial_end(assessor_, trial_id.c_str(), success, err);
    });
  }

  Status SaveState(std::string* state, bool* supported) override {
    return SaveStateOf(assessor_, save_state_, state, supported);
  }

  Status LoadState(std::string_view state, bool* supported) override {
    return LoadStateOf(assessor_, load_state_, state, supported);
  }

 private:
  const th_assessor_t* assessor_ = nullptr;
  th_status (*save_state_)(const th_assessor_t*, const th_byte_writer_t*, th_error_t*) = nullptr;
  th_status (*load_state_)(const th_assessor_t*, th_bytes_t, th_error_t*) = nullptr;
};

}  // namespace

Status CreateAbiTuner(std::shared_ptr<LoadedLibrary> library, const PluginInfo& info,
                      SendTrialFn send_trial, const th_tuner_factory_t* factory, const char* id,
                      std::string_view class_args, bool* broken, std::unique_ptr<Tuner>* out) {
  auto tuner = std::make_unique<TunerImpl>(std::move(library), info, std::move(send_trial));
  Status st = tuner->Create(factory, id, class_args, broken);
  if (st.ok()) *out = std::move(tuner);
  return st;
}

Status CreateAbiAssessor(std::shared_ptr<LoadedLibrary> library, const PluginInfo& info,
                         const th_assessor_factory_t* factory, const char* id,
                         std::string_view class_args, bool* broken,
                         std::unique_ptr<Assessor>* out) {
  auto assessor = std::make_unique<AssessorImpl>(std::move(library), info);
  Status st = assessor->Create(factory, id, class_args, broken);
  if (st.ok()) *out = std::move(assessor);
  return st;
}

}  // namespace tunehost::host
