// tunehost SDK: header-only C++ layer over the C ABI.
//
// A plugin derives from Tuner or Assessor, gives its class a constructor
// `T(tunehost::sdk::HostRef host, const msgpack::object& class_args)` and lists
// its classes once:
//
//   TH_EXPORT_PLUGIN(
//       tunehost::sdk::TunerClass<MyTuner>({"org.example.my", "my", "me", "1.0.0", "..."}),
//       tunehost::sdk::AssessorClass<MyStop>({"org.example.stop", "stop", "me", "1.0", ""}));
//
// The macro writes the exported th_plugin_entry, both factories and the
// descriptors; use it in exactly one translation unit of the plugin. Every C
// entry point is a noexcept trampoline: an Error becomes its status and
// message, a msgpack type error TH_INVALID_ARGUMENT, any other exception
// TH_INTERNAL, so nothing ever unwinds into the host. msgpack::object
// arguments are valid only during the call (copy with .as<T>() or into your
// own zone to keep them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "tunehost/sdk/sdk.h"

namespace tunehost::sdk {

// Thrown from plugin code to return a specific status with a message.
class Error : public std::runtime_error {
 public:
  Error(th_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  th_status status() const { return status_; }

 private:
  th_status status_;
};

// Copies `message` into the caller's buffer, truncated to fit with its NUL and
// never in the middle of a UTF-8 sequence. Does nothing without a buffer.
inline void WriteError(th_error_t* err, std::string_view message) noexcept {
  if (err == nullptr || err->message == nullptr || err->capacity == 0) return;
  size_t n = message.size();
  if (n > err->capacity - 1) {
    n = err->capacity - 1;
    while (n > 0 && (static_cast<unsigned char>(message[n]) & 0xC0u) == 0x80u) --n;
  }
  if (n > 0) std::memcpy(err->message, message.data(), n);
  err->message[n] = '\0';
}

// The host as seen by one plugin instance. Cheap to copy; valid as long as the
// instance it was given to.
class HostRef {
 public:
  explicit HostRef(const th_host_t* host = nullptr) : host_(host) {}

  void Log(th_log_level_t level, const std::string& message) const {
    if (Has(offsetof(th_host_t, log) + sizeof(host_->log)) && host_->log != nullptr) {
      host_->log(host_, level, message.c_str());
    }
  }
  void Debug(const std::string& message) const { Log(TH_LOG_DEBUG, message); }
  void Info(const std::string& message) const { Log(TH_LOG_INFO, message); }
  void Warn(const std::string& message) const { Log(TH_LOG_WARNING, message); }
  void LogError(const std::string& message) const { Log(TH_LOG_ERROR, message); }

  // Tuners: emits parameters (one MessagePack map) for an id the host gave to
  // an earlier generate that was not answered then (the credit pattern).
  th_status SendTrial(int64_t parameter_id, const msgpack::sbuffer& params) const {
    if (!Has(offsetof(th_host_t, send_trial) + sizeof(host_->send_trial)) ||
        host_->send_trial == nullptr) {
      return TH_NOT_SUPPORTED;
    }
    return host_->send_trial(host_, parameter_id, reinterpret_cast<const uint8_t*>(params.data()),
                             params.size());
  }

  const th_host_t* raw() const { return host_; }

 private:
  // A host built against an older SDK may hand over a shorter struct.
  bool Has(size_t end) const { return host_ != nullptr && host_->struct_size >= end; }

  const th_host_t* host_;
};

// Base of a C++ tuner. Calls are serialized by the host (tuner strand).
class Tuner {
 public:
  explicit Tuner(HostRef host) : host_(host) {}
  virtual ~Tuner() = default;
  Tuner(const Tuner&) = delete;
  Tuner& operator=(const Tuner&) = delete;

  virtual void UpdateSearchSpace(const msgpack::object& space) = 0;

  // Packs one parameter map for `parameter_id` into `out`; returns false when
  // there are no more trials (nothing packed).
  virtual bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) = 0;

  // Emits parameters for as many of `ids` as it can, in order; returns false
  // when fewer than all were emitted. Default: GenerateParameters per id,
  // stopping at the first false.
  virtual bool GenerateMultiple(const std::vector<int64_t>& ids,
                                const std::function<void(int64_t, const msgpack::sbuffer&)>& emit) {
    for (int64_t id : ids) {
      msgpack::sbuffer buffer;
      msgpack::packer<msgpack::sbuffer> packer(buffer);
      if (!GenerateParameters(id, packer)) return false;
      emit(id, buffer);
    }
    return true;
  }

  virtual void ReceiveTrialResult(int64_t /*parameter_id*/, const msgpack::object& /*parameters*/,
                                  const msgpack::object& /*value*/, double /*scalar*/,
                                  bool /*customized*/) {}
  virtual void TrialEnd(int64_t /*parameter_id*/, bool /*success*/) {}
  virtual void ImportData(const msgpack::object& /*records*/) {
    throw Error(TH_NOT_SUPPORTED, "import_data is not supported");
  }
  virtual std::string SaveState() { throw Error(TH_NOT_SUPPORTED, "save_state is not supported"); }
  virtual void LoadState(std::string_view /*state*/) {
    throw Error(TH_NOT_SUPPORTED, "load_state is not supported");
  }

 protected:
  const HostRef& host() const { return host_; }

 private:
  HostRef host_;
};

// GenerateMultiple for a tuner that keeps ids as credit (NNI's pattern: an id
// it cannot answer now is served later through host send_trial): unlike the
// default it goes on after an id is kept, so that every id of the request is
// either emitted now or kept. `generate` packs one id's parameters or keeps
// the id and returns false; when `emit` throws, `unstart` undoes that id's
// generation before the exception goes on. Whether every id was emitted.
inline bool GenerateEachKeepingCredit(
    const std::vector<int64_t>& ids,
    const std::function<bool(int64_t, msgpack::packer<msgpack::sbuffer>&)>& generate,
    const std::function<void(int64_t, const msgpack::sbuffer&)>& emit,
    const std::function<void(int64_t)>& unstart) {
  bool all = true;
  for (int64_t id : ids) {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    if (!generate(id, pk)) {
      all = false;
      continue;
    }
    try {
      emit(id, buffer);
    } catch (...) {
      unstart(id);
      throw;
    }
  }
  return all;
}

// Base of a C++ assessor. Calls are serialized by the host (assessor strand).
class Assessor {
 public:
  explicit Assessor(HostRef host) : host_(host) {}
  virtual ~Assessor() = default;
  Assessor(const Assessor&) = delete;
  Assessor& operator=(const Assessor&) = delete;

  // `history`: array of the trial's PERIODICAL metrics. Returns true = good.
  virtual bool AssessTrial(const std::string& trial_id, const msgpack::object& history) = 0;
  virtual void TrialEnd(const std::string& /*trial_id*/, bool /*success*/) {}
  virtual std::string SaveState() { throw Error(TH_NOT_SUPPORTED, "save_state is not supported"); }
  virtual void LoadState(std::string_view /*state*/) {
    throw Error(TH_NOT_SUPPORTED, "load_state is not supported");
  }

 protected:
  const HostRef& host() const { return host_; }

 private:
  HostRef host_;
};

// Static strings describing one class; all must outlive the plugin (literals).
struct PluginInfo {
  const char* id;
  const char* name;
  const char* vendor;
  const char* version;
  const char* description;
};

// One registered class, as listed in TH_EXPORT_PLUGIN.
struct ClassDef {
  enum class Kind { kTuner, kAssessor };
  Kind kind;
  PluginInfo info;
  std::unique_ptr<Tuner> (*create_tuner)(HostRef, const msgpack::object&);
  std::unique_ptr<Assessor> (*create_assessor)(HostRef, const msgpack::object&);
};

template <class T>
struct TunerClass : ClassDef {
  // Implicit on purpose: TH_EXPORT_PLUGIN lists these in a braced list.
  TunerClass(PluginInfo plugin_info)
      : ClassDef{Kind::kTuner, plugin_info,
                 [](HostRef host, const msgpack::object& args) -> std::unique_ptr<Tuner> {
                   return std::make_unique<T>(host, args);
                 },
                 nullptr} {}
};

template <class T>
struct AssessorClass : ClassDef {
  AssessorClass(PluginInfo plugin_info)
      : ClassDef{Kind::kAssessor, plugin_info, nullptr,
                 [](HostRef host, const msgpack::object& args) -> std::unique_ptr<Assessor> {
                   return std::make_unique<T>(host, args);
                 }} {}
};

namespace detail {

// Unpacks borrowed bytes as exactly one MessagePack value.
inline msgpack::object_handle Unpack(th_bytes_t bytes, const char* what) {
  if (bytes.size == 0 || bytes.data == nullptr) {
    throw Error(TH_INVALID_ARGUMENT, std::string(what) + ": no bytes");
  }
  msgpack::object_handle handle;
  size_t offset = 0;
  try {
    msgpack::unpack(handle, reinterpret_cast<const char*>(bytes.data), bytes.size, offset);
  } catch (const std::exception& e) {
    throw Error(TH_INVALID_ARGUMENT, std::string(what) + ": invalid MessagePack: " + e.what());
  }
  if (offset != bytes.size) {
    throw Error(TH_INVALID_ARGUMENT, std::string(what) + ": trailing bytes after the value");
  }
  return handle;
}

// Runs `fn`, turning every exception into a status and a message.
template <class Fn>
th_status Guard(th_error_t* err, Fn&& fn) noexcept {
  try {
    fn();
    return TH_OK;
  } catch (const Error& e) {
    WriteError(err, e.what());
    return e.status();
  } catch (const msgpack::type_error& e) {
    // .as<T>() on input of the wrong shape: the input is at fault.
    WriteError(err, std::string("a MessagePack value has an unexpected type (") + e.what() + ")");
    return TH_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    WriteError(err, "out of memory");
    return TH_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    WriteError(err, e.what());
    return TH_INTERNAL;
  } catch (...) {
    WriteError(err, "unknown exception");
    return TH_INTERNAL;
  }
}

inline th_status WriteAll(const th_byte_writer_t* out, const std::string& bytes) {
  if (out == nullptr || out->write == nullptr) return TH_INVALID_ARGUMENT;
  return out->write(out, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

inline std::string_view View(th_bytes_t bytes) {
  if (bytes.data == nullptr) return {};
  return std::string_view(reinterpret_cast<const char*>(bytes.data), bytes.size);
}

// A plugin instance as the host sees it: the C vtable, then the object. The
// calls a tuner and an assessor share (destroy, save_state, load_state) are
// here; TunerHandle and AssessorHandle add their own.
template <class VTable, class Object, void* VTable::*kData>
struct Handle {
  VTable vtable;
  std::unique_ptr<Object> object;

  static Object& Of(const VTable* self) {
    return *static_cast<Handle*>(self->*kData)->object;
  }

  static void Destroy(const VTable* self) noexcept {
    // A throwing destructor cannot be reported here; the instance goes anyway.
    try {
      delete static_cast<Handle*>(self->*kData);
    } catch (...) {
    }
  }

  static th_status SaveState(const VTable* self, const th_byte_writer_t* out,
                             th_error_t* err) noexcept {
    th_status written = TH_OK;
    th_status st = Guard(err, [&] { written = WriteAll(out, Of(self).SaveState()); });
    return st != TH_OK ? st : written;
  }

  static th_status LoadState(const VTable* self, th_bytes_t state, th_error_t* err) noexcept {
    return Guard(err, [&] { Of(self).LoadState(View(state)); });
  }

  // The handle of `object`, its vtable made by `vtable_of(data pointer)`;
  // the host owns it from then on (destroy).
  template <class VTableOf>
  static const VTable* Create(std::unique_ptr<Object> object, VTableOf vtable_of) {
    auto handle = std::make_unique<Handle>();
    handle->object = std::move(object);
    handle->vtable = vtable_of(static_cast<void*>(handle.get()));
    return &handle.release()->vtable;
  }
};

struct TunerHandle {
  using Base = Handle<th_tuner_t, Tuner, &th_tuner_t::tuner_data>;
  static Tuner& Of(const th_tuner_t* self) { return Base::Of(self); }

  static th_status UpdateSearchSpace(const th_tuner_t* self, th_bytes_t space,
                                     th_error_t* err) noexcept {
    return Guard(err, [&] {
      msgpack::object_handle h = Unpack(space, "search space");
      Of(self).UpdateSearchSpace(h.get());
    });
  }

  static th_status Generate(const th_tuner_t* self, const int64_t* ids, uint32_t count,
                            const th_param_sink_t* out, th_error_t* err) noexcept {
    bool all = true;
    th_status st = Guard(err, [&] {
      if (out == nullptr || out->emit == nullptr) throw Error(TH_INVALID_ARGUMENT, "no sink");
      std::vector<int64_t> id_list(ids, ids + count);
      auto emit = [out](int64_t id, const msgpack::sbuffer& params) {
        th_status s = out->emit(out, id, reinterpret_cast<const uint8_t*>(params.data()),
                                params.size());
        if (s != TH_OK) {
          throw Error(s, "host rejected the parameters for id " + std::to_string(id));
        }
      };
      all = Of(self).GenerateMultiple(id_list, emit);
    });
    if (st != TH_OK) return st;
    return all ? TH_OK : TH_NO_MORE_TRIALS;
  }

  static th_status ReceiveTrialResult(const th_tuner_t* self, int64_t parameter_id,
                                      th_bytes_t parameters, th_bytes_t value, double scalar,
                                      uint32_t flags, th_error_t* err) noexcept {
    return Guard(err, [&] {
      msgpack::object_handle p = Unpack(parameters, "parameters");
      msgpack::object_handle v = Unpack(value, "metric value");
      Of(self).ReceiveTrialResult(parameter_id, p.get(), v.get(), scalar,
                                  (flags & TH_RESULT_CUSTOMIZED) != 0);
    });
  }

  static th_status TrialEnd(const th_tuner_t* self, int64_t parameter_id, bool success,
                            th_error_t* err) noexcept {
    return Guard(err, [&] { Of(self).TrialEnd(parameter_id, success); });
  }

  static th_status ImportData(const th_tuner_t* self, th_bytes_t data, th_error_t* err) noexcept {
    return Guard(err, [&] {
      msgpack::object_handle h = Unpack(data, "import data");
      Of(self).ImportData(h.get());
    });
  }

  static const th_tuner_t* Create(std::unique_ptr<Tuner> tuner) {
    return Base::Create(std::move(tuner), [](void* data) {
      return th_tuner_t{sizeof(th_tuner_t), data,       &Base::Destroy,  &UpdateSearchSpace,
                        &Generate,          &ReceiveTrialResult, &TrialEnd, &ImportData,
                        &Base::SaveState,   &Base::LoadState};
    });
  }
};

struct AssessorHandle {
  using Base = Handle<th_assessor_t, Assessor, &th_assessor_t::assessor_data>;
  static Assessor& Of(const th_assessor_t* self) { return Base::Of(self); }

  static th_status AssessTrial(const th_assessor_t* self, const char* trial_id,
                               th_bytes_t history, th_assessment_t* result,
                               th_error_t* err) noexcept {
    return Guard(err, [&] {
      if (result == nullptr) throw Error(TH_INVALID_ARGUMENT, "no result pointer");
      msgpack::object_handle h = Unpack(history, "history");
      bool good = Of(self).AssessTrial(trial_id ? trial_id : "", h.get());
      *result = good ? TH_ASSESS_GOOD : TH_ASSESS_BAD;
    });
  }

  static th_status TrialEnd(const th_assessor_t* self, const char* trial_id, bool success,
                            th_error_t* err) noexcept {
    return Guard(err, [&] { Of(self).TrialEnd(trial_id ? trial_id : "", success); });
  }

  static const th_assessor_t* Create(std::unique_ptr<Assessor> assessor) {
    return Base::Create(std::move(assessor), [](void* data) {
      return th_assessor_t{sizeof(th_assessor_t), data,     &Base::Destroy,   &AssessTrial,
                           &TrialEnd,             &Base::SaveState, &Base::LoadState};
    });
  }
};

// class_args as an object: empty bytes mean an empty map.
inline msgpack::object_handle UnpackClassArgs(th_bytes_t args) {
  static const uint8_t kEmptyMap = 0x80;
  if (args.size == 0) args = th_bytes_t{&kEmptyMap, 1};
  msgpack::object_handle h = Unpack(args, "class_args");
  if (h.get().type != msgpack::type::MAP) {
    throw Error(TH_INVALID_ARGUMENT, "class_args: not a map");
  }
  return h;
}

// Everything TH_EXPORT_PLUGIN registers: classes, descriptors, factories.
class Plugin {
 public:
  Plugin(std::initializer_list<ClassDef> classes) {
    for (const ClassDef& c : classes) {
      (c.kind == ClassDef::Kind::kTuner ? tuners_ : assessors_).push_back(c);
    }
    for (const ClassDef& c : tuners_) tuner_descriptors_.push_back(Describe(c, tuner_kinds_));
    for (const ClassDef& c : assessors_) {
      assessor_descriptors_.push_back(Describe(c, assessor_kinds_));
    }
  }
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const void* GetFactory(const char* factory_id) const {
    if (factory_id == nullptr) return nullptr;
    if (!tuners_.empty() && std::strcmp(factory_id, TH_TUNER_FACTORY_ID) == 0) {
      return &tuner_factory_.factory;
    }
    if (!assessors_.empty() && std::strcmp(factory_id, TH_ASSESSOR_FACTORY_ID) == 0) {
      return &assessor_factory_.factory;
    }
    return nullptr;
  }

 private:
  // The C factory structs carry no user pointer, so each sits first in a
  // standard-layout wrapper that leads back to the plugin.
  struct TunerFactory {
    th_tuner_factory_t factory;
    const Plugin* plugin;
  };
  struct AssessorFactory {
    th_assessor_factory_t factory;
    const Plugin* plugin;
  };

  static th_plugin_descriptor_t Describe(const ClassDef& c, const char* const* kinds) {
    return th_plugin_descriptor_t{TH_VERSION_INIT, c.info.id,          c.info.name, c.info.vendor,
                                  c.info.version,  c.info.description, kinds};
  }

  static const ClassDef& Find(const std::vector<ClassDef>& classes, const char* id) {
    for (const ClassDef& c : classes) {
      if (id != nullptr && c.info.id != nullptr && std::strcmp(c.info.id, id) == 0) return c;
    }
    throw Error(TH_INVALID_ARGUMENT, std::string("unknown plugin id '") + (id ? id : "") + "'");
  }

  static const Plugin& Self(const th_tuner_factory_t* f) {
    return *reinterpret_cast<const TunerFactory*>(f)->plugin;
  }
  static const Plugin& Self(const th_assessor_factory_t* f) {
    return *reinterpret_cast<const AssessorFactory*>(f)->plugin;
  }

  static uint32_t TunerCount(const th_tuner_factory_t* self) noexcept {
    return static_cast<uint32_t>(Self(self).tuner_descriptors_.size());
  }
  static const th_plugin_descriptor_t* TunerDescriptor(const th_tuner_factory_t* self,
                                                       uint32_t index) noexcept {
    const auto& d = Self(self).tuner_descriptors_;
    return index < d.size() ? &d[index] : nullptr;
  }
  static const th_tuner_t* CreateTuner(const th_tuner_factory_t* self, const th_host_t* host,
                                       const char* tuner_id, th_bytes_t class_args,
                                       th_error_t* err) noexcept {
    const th_tuner_t* result = nullptr;
    Guard(err, [&] {
      const ClassDef& c = Find(Self(self).tuners_, tuner_id);
      msgpack::object_handle args = UnpackClassArgs(class_args);
      result = TunerHandle::Create(c.create_tuner(HostRef(host), args.get()));
    });
    return result;
  }

  static uint32_t AssessorCount(const th_assessor_factory_t* self) noexcept {
    return static_cast<uint32_t>(Self(self).assessor_descriptors_.size());
  }
  static const th_plugin_descriptor_t* AssessorDescriptor(const th_assessor_factory_t* self,
                                                          uint32_t index) noexcept {
    const auto& d = Self(self).assessor_descriptors_;
    return index < d.size() ? &d[index] : nullptr;
  }
  static const th_assessor_t* CreateAssessor(const th_assessor_factory_t* self,
                                             const th_host_t* host, const char* assessor_id,
                                             th_bytes_t class_args, th_error_t* err) noexcept {
    const th_assessor_t* result = nullptr;
    Guard(err, [&] {
      const ClassDef& c = Find(Self(self).assessors_, assessor_id);
      msgpack::object_handle args = UnpackClassArgs(class_args);
      result = AssessorHandle::Create(c.create_assessor(HostRef(host), args.get()));
    });
    return result;
  }

  const char* const tuner_kinds_[2] = {TH_KIND_TUNER, nullptr};
  const char* const assessor_kinds_[2] = {TH_KIND_ASSESSOR, nullptr};
  std::vector<ClassDef> tuners_;
  std::vector<ClassDef> assessors_;
  std::vector<th_plugin_descriptor_t> tuner_descriptors_;
  std::vector<th_plugin_descriptor_t> assessor_descriptors_;
  const TunerFactory tuner_factory_{{&TunerCount, &TunerDescriptor, &CreateTuner}, this};
  const AssessorFactory assessor_factory_{
      {&AssessorCount, &AssessorDescriptor, &CreateAssessor}, this};
};

}  // namespace detail
}  // namespace tunehost::sdk

// Defines the plugin's one exported symbol from a list of TunerClass<T>(...)
// and AssessorClass<T>(...). Use once per plugin, at namespace scope (a
// trailing semicolon is optional).
#define TH_EXPORT_PLUGIN(...)                                                     \
  namespace {                                                                     \
  const ::tunehost::sdk::detail::Plugin& ThSdkPlugin() {                          \
    static const ::tunehost::sdk::detail::Plugin plugin{__VA_ARGS__};             \
    return plugin;                                                                \
  }                                                                               \
  bool ThSdkInit(const char* /*plugin_path*/) noexcept {                          \
    try {                                                                         \
      ThSdkPlugin();                                                              \
      return true;                                                                \
    } catch (...) {                                                               \
      return false;                                                               \
    }                                                                             \
  }                                                                               \
  void ThSdkDeinit() noexcept {}                                                  \
  const void* ThSdkGetFactory(const char* factory_id) noexcept {                  \
    try {                                                                         \
      return ThSdkPlugin().GetFactory(factory_id);                                \
    } catch (...) {                                                               \
      return nullptr;                                                             \
    }                                                                             \
  }                                                                               \
  }                                                                               \
  extern "C" TH_EXPORT const th_plugin_entry_t th_plugin_entry = {                \
      TH_VERSION_INIT, &ThSdkInit, &ThSdkDeinit, &ThSdkGetFactory};
