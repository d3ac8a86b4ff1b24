// The plugin loader: PluginRegistry (load, check, register) and the Tuner /
// Assessor wrappers that turn the C ABI into tunehost::Status. Every call
// into a plugin is wrapped in try/catch: the ABI forbids exceptions, but a
// broken plugin that throws anyway must cost an error, not the host.
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

namespace tunehost::host {

namespace fs = std::filesystem;

namespace {

constexpr size_t kErrorCapacity = 4096;
constexpr uint32_t kMaxDescriptors = 4096;  // a bigger count is garbage, not a plugin

std::string VersionString(const th_version_t& v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.revision);
}

std::string HostVersionString() {
  return VersionString(th_version_t TH_VERSION_INIT);
}

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

// What a current exception says, for messages (cleaned: the plugin wrote it).
std::string CurrentExceptionText() {
  try {
    throw;
  } catch (const std::exception& e) {
    return CleanPluginText(e.what());
  } catch (...) {
    return "unknown exception";
  }
}

// Whether `bytes` hold exactly one MessagePack map; *why says why not.
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

// A mapped plugin file. deinit() runs, then the file is unmapped, when the
// last holder (registry entry or instance) lets go.
struct LoadedLibrary {
  fs::path file;
  boost::dll::shared_library library;
  const th_plugin_entry_t* entry = nullptr;
  bool initialized = false;

  ~LoadedLibrary() {
    if (!initialized || entry->deinit == nullptr) return;
    try {
      entry->deinit();
    } catch (...) {
      spdlog::warn("plugin {}: deinit threw across the ABI: {}", file.string(),
                   CurrentExceptionText());
    }
  }
};

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
    try {
      tuner = factory->create(factory, host(), id, Bytes(class_args), errors_.get());
    } catch (...) {
      return Status::PluginError(Prefix() + "create threw across the ABI: " +
                                 CurrentExceptionText());
    }
    if (tuner == nullptr) {
      std::string message = errors_.text();
      return Status::PluginError(Prefix() + "create failed: " +
                                 (message.empty() ? "no message" : message));
    }
    const char* missing = nullptr;
    uint32_t size = tuner->struct_size;
    if (!HasField(size, TH_FIELD_END(th_tuner_t, trial_end))) {
      missing = "struct_size too small for the required callbacks";
    } else if (tuner->destroy == nullptr) {
      missing = "missing required callback destroy";
    } else if (tuner->update_search_space == nullptr) {
      missing = "missing required callback update_search_space";
    } else if (tuner->generate == nullptr) {
      missing = "missing required callback generate";
    } else if (tuner->receive_trial_result == nullptr) {
      missing = "missing required callback receive_trial_result";
    } else if (tuner->trial_end == nullptr) {
      missing = "missing required callback trial_end";
    }
    if (missing != nullptr) {
      // Without a valid vtable the instance cannot be trusted to destroy itself.
      if (HasField(size, TH_FIELD_END(th_tuner_t, destroy)) && tuner->destroy != nullptr) {
        try {
          tuner->destroy(tuner);
        } catch (...) {
        }
      }
      *broken = true;
      return Status::PluginError(Prefix() + missing);
    }
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
    state->clear();
    StringWriter writer(state);
    return Optional("save_state", save_state_ != nullptr, supported, [&](th_error_t* err) {
      return save_state_(tuner_, &writer.writer, err);
    });
  }

  Status LoadState(std::string_view state, bool* supported) override {
    return Optional("load_state", load_state_ != nullptr, supported, [&](th_error_t* err) {
      return load_state_(tuner_, Bytes(state), err);
    });
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

  template <class Fn>
  Status Optional(const char* op, bool present, bool* supported, Fn&& fn) {
    *supported = present;
    if (!present) return Status::Ok();
    th_status st = TH_OK;
    Status status = Call(op, std::forward<Fn>(fn), &st, {TH_NOT_SUPPORTED});
    if (st == TH_NOT_SUPPORTED) *supported = false;
    return status;
  }

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
    try {
      assessor = factory->create(factory, host(), id, Bytes(class_args), errors_.get());
    } catch (...) {
      return Status::PluginError(Prefix() + "create threw across the ABI: " +
                                 CurrentExceptionText());
    }
    if (assessor == nullptr) {
      std::string message = errors_.text();
      return Status::PluginError(Prefix() + "create failed: " +
                                 (message.empty() ? "no message" : message));
    }
    const char* missing = nullptr;
    uint32_t size = assessor->struct_size;
    if (!HasField(size, TH_FIELD_END(th_assessor_t, trial_end))) {
      missing = "struct_size too small for the required callbacks";
    } else if (assessor->destroy == nullptr) {
      missing = "missing required callback destroy";
    } else if (assessor->assess_trial == nullptr) {
      missing = "missing required callback assess_trial";
    } else if (assessor->trial_end == nullptr) {
      missing = "missing required callback trial_end";
    }
    if (missing != nullptr) {
      if (HasField(size, TH_FIELD_END(th_assessor_t, destroy)) && assessor->destroy != nullptr) {
        try {
          assessor->destroy(assessor);
        } catch (...) {
        }
      }
      *broken = true;
      return Status::PluginError(Prefix() + missing);
    }
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
    state->clear();
    StringWriter writer(state);
    return Optional("save_state", save_state_ != nullptr, supported, [&](th_error_t* err) {
      return save_state_(assessor_, &writer.writer, err);
    });
  }

  Status LoadState(std::string_view state, bool* supported) override {
    return Optional("load_state", load_state_ != nullptr, supported, [&](th_error_t* err) {
      return load_state_(assessor_, Bytes(state), err);
    });
  }

 private:
  template <class Fn>
  Status Optional(const char* op, bool present, bool* supported, Fn&& fn) {
    *supported = present;
    if (!present) return Status::Ok();
    th_status st = TH_OK;
    Status status = Call(op, std::forward<Fn>(fn), &st, {TH_NOT_SUPPORTED});
    if (st == TH_NOT_SUPPORTED) *supported = false;
    return status;
  }

  const th_assessor_t* assessor_ = nullptr;
  th_status (*save_state_)(const th_assessor_t*, const th_byte_writer_t*, th_error_t*) = nullptr;
  th_status (*load_state_)(const th_assessor_t*, th_bytes_t, th_error_t*) = nullptr;
};

bool IsPluginFile(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".so" || ext == ".dylib" || ext == ".dll";
}

// An empty class_args means "no arguments".
Status CheckClassArgs(std::string_view* class_args, const std::string& what) {
  static const char kEmptyMap[] = "\x80";
  if (class_args->empty()) {
    *class_args = std::string_view(kEmptyMap, 1);
    return Status::Ok();
  }
  std::string why;
  if (!IsOneMap(reinterpret_cast<const uint8_t*>(class_args->data()), class_args->size(), &why)) {
    return Status::BadField("class_args of " + what + ": " + why);
  }
  return Status::Ok();
}

}  // namespace

// One (kind, descriptor) a loaded file provides.
struct PluginRegistry::Entry {
  PluginInfo info;
  std::shared_ptr<LoadedLibrary> library;
  const th_tuner_factory_t* tuner_factory = nullptr;
  const th_assessor_factory_t* assessor_factory = nullptr;
  const th_plugin_descriptor_t* descriptor = nullptr;
};

PluginRegistry::PluginRegistry() = default;
PluginRegistry::~PluginRegistry() = default;

namespace {

// Loads and checks one file, producing its entries or the reason it is refused.
class FileLoader {
 public:
  explicit FileLoader(fs::path file) : file_(std::move(file)) {}

  // Returns "" on success, else the reason.
  std::string Load(std::shared_ptr<LoadedLibrary>* out) {
    std::error_code ec;
    if (!fs::is_regular_file(file_, ec)) return "not a regular file";
    auto lib = std::make_shared<LoadedLibrary>();
    lib->file = file_;
    try {
      // Absolute, so dlopen does not search the library path instead.
      lib->library.load(boost::dll::fs::path(fs::absolute(file_)),
                        boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    } catch (const std::exception& e) {
      return std::string("cannot load: ") + e.what();
    }
    if (!lib->library.has(TH_PLUGIN_ENTRY_SYMBOL)) {
      return "no " TH_PLUGIN_ENTRY_SYMBOL " symbol (not a tunehost plugin)";
    }
    lib->entry = &lib->library.get<const th_plugin_entry_t>(TH_PLUGIN_ENTRY_SYMBOL);
    const th_version_t v = lib->entry->abi_version;
    if (!th_version_is_compatible(v)) {
      return "plugin ABI version " + VersionString(v) + " is incompatible with host ABI version " +
             HostVersionString() + " (needs the same major and a minor not newer)";
    }
    if (lib->entry->init == nullptr || lib->entry->deinit == nullptr ||
        lib->entry->get_factory == nullptr) {
      return "entry has a NULL init, deinit or get_factory";
    }
    bool ok = false;
    try {
      ok = lib->entry->init(file_.c_str());
    } catch (...) {
      return "init() threw across the ABI: " + CurrentExceptionText();
    }
    if (!ok) return "init() returned false";
    lib->initialized = true;
    *out = std::move(lib);
    return "";
  }

 private:
  fs::path file_;
};

std::string CheckDescriptor(const th_plugin_descriptor_t* d, const char* kind, uint32_t index) {
  std::string where = std::string(kind) + " descriptor " + std::to_string(index);
  if (d == nullptr) return where + " is NULL";
  if (!th_version_is_compatible(d->abi_version)) {
    return where + " has ABI version " + VersionString(d->abi_version) +
           ", incompatible with host ABI version " + HostVersionString();
  }
  if (d->id == nullptr || d->id[0] == '\0') return where + " has no id";
  where += " (" + CleanPluginText(d->id, 256) + ")";
  if (d->name == nullptr || d->name[0] == '\0') return where + " has no name";
  if (d->kinds == nullptr) return where + " has no kinds";
  bool listed = false;
  for (size_t i = 0; i < 64 && d->kinds[i] != nullptr; ++i) {
    listed = listed || std::strcmp(d->kinds[i], kind) == 0;
  }
  if (!listed) return where + " does not list kind \"" + kind + "\" but comes from its factory";
  return "";
}

}  // namespace

Status PluginRegistry::LoadFile(const fs::path& file) {
  auto refuse = [&](const std::string& reason) {
    std::string line = file.string() + ": " + reason;
    spdlog::warn("plugin refused: {}", line);
    errors_.push_back(line);
    return Status::PluginError(line);
  };

  std::shared_ptr<LoadedLibrary> lib;
  std::string reason = FileLoader(file).Load(&lib);
  if (!reason.empty()) return refuse(reason);

  std::vector<std::unique_ptr<Entry>> found;
  const th_tuner_factory_t* tuner_factory = nullptr;
  const th_assessor_factory_t* assessor_factory = nullptr;
  try {
    tuner_factory =
        static_cast<const th_tuner_factory_t*>(lib->entry->get_factory(TH_TUNER_FACTORY_ID));
    assessor_factory =
        static_cast<const th_assessor_factory_t*>(lib->entry->get_factory(TH_ASSESSOR_FACTORY_ID));
  } catch (...) {
    return refuse("get_factory threw across the ABI: " + CurrentExceptionText());
  }
  if (tuner_factory == nullptr && assessor_factory == nullptr) {
    return refuse("provides neither a tuner nor an assessor factory");
  }

  // Both factories have the same shape up to create; list descriptors of each.
  auto collect = [&](const char* kind, auto* factory) -> std::string {
    if (factory == nullptr) return "";
    if (factory->count == nullptr || factory->get_descriptor == nullptr ||
        factory->create == nullptr) {
      return std::string(kind) + " factory has a NULL count, get_descriptor or create";
    }
    try {
      uint32_t n = factory->count(factory);
      if (n > kMaxDescriptors) {
        return std::string(kind) + " factory count " + std::to_string(n) + " is implausible";
      }
      for (uint32_t i = 0; i < n; ++i) {
        const th_plugin_descriptor_t* d = factory->get_descriptor(factory, i);
        std::string bad = CheckDescriptor(d, kind, i);
        if (!bad.empty()) return bad;
        auto e = std::make_unique<Entry>();
        e->info = PluginInfo{CleanPluginText(d->id, 256),
                             CleanPluginText(d->name, 256),
                             kind,
                             CleanPluginText(d->vendor ? d->vendor : "", 256),
                             CleanPluginText(d->version ? d->version : "", 256),
                             CleanPluginText(d->description ? d->description : ""),
                             file};
        e->library = lib;
        e->descriptor = d;
        if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(factory)>>,
                                     th_tuner_factory_t>) {
          e->tuner_factory = factory;
        } else {
          e->assessor_factory = factory;
        }
        found.push_back(std::move(e));
      }
    } catch (...) {
      return std::string(kind) + " factory threw across the ABI: " + CurrentExceptionText();
    }
    return "";
  };
  reason = collect(TH_KIND_TUNER, tuner_factory);
  if (reason.empty()) reason = collect(TH_KIND_ASSESSOR, assessor_factory);
  if (!reason.empty()) return refuse(reason);
  if (found.empty()) return refuse("provides no plugin descriptors");

  // Ids and names are unique per kind across the registry (a descriptor that
  // names both kinds appears once in each factory with the same id).
  for (size_t i = 0; i < found.size(); ++i) {
    const PluginInfo& a = found[i]->info;
    for (size_t j = 0; j < i; ++j) {
      const PluginInfo& b = found[j]->info;
      if (a.kind != b.kind) continue;
      if (a.id == b.id) return refuse("duplicate " + a.kind + " id " + a.id + " within the file");
      if (a.name == b.name) {
        return refuse("duplicate " + a.kind + " name " + a.name + " within the file");
      }
    }
    for (const auto& existing : entries_) {
      const PluginInfo& b = existing->info;
      if (a.kind != b.kind) continue;
      if (a.id == b.id) {
        return refuse("duplicate " + a.kind + " id " + a.id + ", already loaded from " +
                      b.file.string());
      }
      if (a.name == b.name) {
        return refuse("duplicate " + a.kind + " name " + a.name + " (id " + a.id +
                      "), already used by " + b.id + " from " + b.file.string());
      }
    }
  }
  for (auto& e : found) entries_.push_back(std::move(e));
  return Status::Ok();
}

size_t PluginRegistry::LoadDirectory(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_regular_file(type_ec) && IsPluginFile(it->path())) files.push_back(it->path());
  }
  if (ec) {
    std::string line = dir.string() + ": cannot read directory: " + ec.message();
    spdlog::warn("plugin refused: {}", line);
    errors_.push_back(line);
    return 0;
  }
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  size_t loaded = 0;
  for (const fs::path& f : files) {
    if (LoadFile(f).ok()) ++loaded;
  }
  return loaded;
}

std::vector<PluginInfo> PluginRegistry::plugins() const {
  std::vector<PluginInfo> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e->info);
  return out;
}

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// NNI's builtin names (any case) for the built-in plugins whose short name
// differs, so an NNI config's `name: GridSearch` works unchanged.
std::string_view NniAlias(const std::string& lower) {
  static const std::pair<std::string_view, std::string_view> kAliases[] = {
      {"gridsearch", "grid"}, {"batchtuner", "batch"}, {"randomsearch", "random"}};
  for (const auto& [nni, ours] : kAliases) {
    if (lower == nni) return ours;
  }
  return lower;
}

// Exact id first, then exact name, then the name without regard to case
// (NNI writes `TPE`, `Medianstop`) or by its NNI alias.
template <class Entries>
auto FindEntry(const Entries& entries, std::string_view kind, std::string_view name_or_id)
    -> decltype(entries.front().get()) {
  for (const auto& e : entries) {
    if (e->info.kind == kind && e->info.id == name_or_id) return e.get();
  }
  for (const auto& e : entries) {
    if (e->info.kind == kind && e->info.name == name_or_id) return e.get();
  }
  const std::string lower = Lower(name_or_id);
  const std::string_view wanted = NniAlias(lower);
  for (const auto& e : entries) {
    if (e->info.kind == kind && Lower(e->info.name) == wanted) return e.get();
  }
  return nullptr;
}

// A broken vtable is the plugin's fault, like a refused file: it goes to
// errors() too. Other create failures (bad class_args) are the caller's.
void RecordCreateFailure(std::vector<std::string>* errors, const PluginInfo& info,
                         const Status& st, bool broken) {
  std::string line = info.file.string() + ": " + st.message();
  spdlog::warn("plugin {}", line);
  if (broken) errors->push_back(line);
}

}  // namespace

Status PluginRegistry::CreateTuner(std::string_view name_or_id, std::string_view class_args,
                                   SendTrialFn send_trial, std::unique_ptr<Tuner>* out,
                                   const IsolationOptions* isolation) {
  const Entry* e = FindEntry(entries_, TH_KIND_TUNER, name_or_id);
  if (e == nullptr) return Status::NotFound("no tuner plugin named " + std::string(name_or_id));
  Status st = CheckClassArgs(&class_args, "tuner " + e->info.name);
  if (!st.ok()) return st;
  if (isolation != nullptr) {
    return CreateIsolatedTuner(e->info, class_args, std::move(send_trial), *isolation, out);
  }
  auto tuner = std::make_unique<TunerImpl>(e->library, e->info, std::move(send_trial));
  bool broken = false;
  st = tuner->Create(e->tuner_factory, e->descriptor->id, class_args, &broken);
  if (!st.ok()) {
    RecordCreateFailure(&errors_, e->info, st, broken);
    return st;
  }
  *out = std::move(tuner);
  return Status::Ok();
}

Status PluginRegistry::CreateAssessor(std::string_view name_or_id, std::string_view class_args,
                                      std::unique_ptr<Assessor>* out,
                                      const IsolationOptions* isolation) {
  const Entry* e = FindEntry(entries_, TH_KIND_ASSESSOR, name_or_id);
  if (e == nullptr) {
    return Status::NotFound("no assessor plugin named " + std::string(name_or_id));
  }
  Status st = CheckClassArgs(&class_args, "assessor " + e->info.name);
  if (!st.ok()) return st;
  if (isolation != nullptr) {
    return CreateIsolatedAssessor(e->info, class_args, *isolation, out);
  }
  auto assessor = std::make_unique<AssessorImpl>(e->library, e->info);
  bool broken = false;
  st = assessor->Create(e->assessor_factory, e->descriptor->id, class_args, &broken);
  if (!st.ok()) {
    RecordCreateFailure(&errors_, e->info, st, broken);
    return st;
  }
  *out = std::move(assessor);
  return Status::Ok();
}

}  // namespace tunehost::host
