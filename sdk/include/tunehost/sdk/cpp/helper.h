// tunehost SDK, header-only C++ helper: write a tuner or assessor as a C++
// class and export it with one macro. It writes the ABI entry point, the
// factories and noexcept trampolines that turn every exception into a
// th_status with a message, so nothing ever throws across the ABI.
//
//   class MyTuner : public tunehost::sdk::Tuner { ... };
//   TH_EXPORT_PLUGIN(tunehost::sdk::TunerClass<MyTuner>(
//       {"com.example.my", "my", "Example", "1.0.0", "what it does"}))
//
// Plugin classes are constructed as T(HostRef host, const msgpack::object&
// class_args) and throw Error(TH_INVALID_ARGUMENT, "...") for bad arguments.
// Include this header in exactly one translation unit that uses
// TH_EXPORT_PLUGIN; other files of the plugin may include it freely.
#ifndef TUNEHOST_SDK_CPP_HELPER_H
#define TUNEHOST_SDK_CPP_HELPER_H

#include <algorithm>
#include <cstring>
#include <functional>
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

// Throw from plugin code to return a specific status with a message.
class Error : public std::runtime_error {
 public:
  Error(th_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  th_status status() const { return status_; }

 private:
  th_status status_;
};

// Copies a message into a caller-owned error buffer, truncating safely.
inline void WriteError(th_error_t* err, std::string_view message) {
  if (err == nullptr || err->message == nullptr || err->capacity == 0) return;
  size_t n = std::min(message.size(), err->capacity - 1);
  std::memcpy(err->message, message.data(), n);
  err->message[n] = '\0';
}

// The host as seen by a plugin instance. Cheap to copy.
class HostRef {
 public:
  explicit HostRef(const th_host_t* host) : host_(host) {}

  void Log(th_log_level_t level, const std::string& message) const {
    if (host_ != nullptr && host_->log != nullptr) host_->log(host_, level, message.c_str());
  }
  void Debug(const std::string& m) const { Log(TH_LOG_DEBUG, m); }
  void Info(const std::string& m) const { Log(TH_LOG_INFO, m); }
  void Warn(const std::string& m) const { Log(TH_LOG_WARNING, m); }
  void LogError(const std::string& m) const { Log(TH_LOG_ERROR, m); }

  // The NNI send-trial callback: parameters (one MessagePack map) for an id
  // handed to GenerateMultiple earlier and not emitted then.
  th_status SendTrial(int64_t parameter_id, const msgpack::sbuffer& params) const {
    if (host_ == nullptr || host_->send_trial == nullptr) return TH_NOT_SUPPORTED;
    return host_->send_trial(host_, parameter_id, reinterpret_cast<const uint8_t*>(params.data()),
                             params.size());
  }

  const th_host_t* raw() const { return host_; }

 private:
  const th_host_t* host_;
};

// Base class of tuners. Calls never overlap (the host's tuner strand).
class Tuner {
 public:
  explicit Tuner(HostRef host) : host_(host) {}
  virtual ~Tuner() = default;

  virtual void UpdateSearchSpace(const msgpack::object& space) = 0;
  // Packs one parameter map for `parameter_id` into `out`; false when there
  // are no more trials (nothing packed).
  virtual bool GenerateParameters(int64_t parameter_id, msgpack::packer<msgpack::sbuffer>& out) = 0;
  // Emits parameters for as many ids as it can, in order. The default calls
  // GenerateParameters per id and stops at the first false. Returns false
  // when fewer than all ids were emitted (the rest stay usable as credit
  // through host().SendTrial).
  virtual bool GenerateMultiple(const std::vector<int64_t>& ids,
                                const std::function<void(int64_t, const msgpack::sbuffer&)>& emit) {
    for (int64_t id : ids) {
      msgpack::sbuffer buf;
      msgpack::packer<msgpack::sbuffer> pk(buf);
      if (!GenerateParameters(id, pk)) return false;
      emit(id, buf);
    }
    return true;
  }
  virtual void ReceiveTrialResult(int64_t /*parameter_id*/, const msgpack::object& /*parameters*/,
                                  const msgpack::object& /*value*/, double /*scalar*/,
                                  bool /*customized*/) {}
  virtual void TrialEnd(int64_t /*parameter_id*/, bool /*success*/) {}
  // `records`: array of {"parameters": map, "value": metric}.
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

// Base class of assessors. Calls never overlap (the host's assessor strand).
class Assessor {
 public:
  explicit Assessor(HostRef host) : host_(host) {}
  virtual ~Assessor() = default;

  // `history`: array of the trial's PERIODICAL metrics (numbers, or maps with
  // a numeric "default"), in order. True = good (keep running).
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

// Plain data for a descriptor; the strings must be static.
struct PluginInfo {
  const char* id;
  const char* name;
  const char* vendor;
  const char* version;
  const char* description;
};

template <class T>
struct TunerClass {
  explicit TunerClass(PluginInfo i) : info(i) {}
  PluginInfo info;
};

template <class T>
struct AssessorClass {
  explicit AssessorClass(PluginInfo i) : info(i) {}
  PluginInfo info;
};

namespace detail {

// Runs `f` (which returns a th_status) and maps every exception to a status.
template <class F>
th_status Guard(th_error_t* err, F&& f) noexcept {
  try {
    return f();
  } catch (const Error& e) {
    WriteError(err, e.what());
    return e.status();
  } catch (const msgpack::unpack_error& e) {
    WriteError(err, std::string("bad MessagePack input: ") + e.what());
    return TH_INVALID_ARGUMENT;
  } catch (const msgpack::type_error&) {
    WriteError(err, "a MessagePack value has an unexpected type");
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

inline msgpack::object_handle Unpack(th_bytes_t bytes) {
  if (bytes.data == nullptr || bytes.size == 0) {
    msgpack::sbuffer empty;
    msgpack::packer<msgpack::sbuffer>(empty).pack_map(0);
    return msgpack::unpack(empty.data(), empty.size());
  }
  return msgpack::unpack(reinterpret_cast<const char*>(bytes.data), bytes.size);
}

inline th_status WriteState(const th_byte_writer_t* out, const std::string& state) {
  if (out == nullptr || out->write == nullptr) return TH_INVALID_ARGUMENT;
  return out->write(out, reinterpret_cast<const uint8_t*>(state.data()), state.size());
}

struct TunerInstance {
  th_tuner_t vtable;
  std::unique_ptr<Tuner> impl;
};

struct AssessorInstance {
  th_assessor_t vtable;
  std::unique_ptr<Assessor> impl;
};

inline Tuner& TunerOf(const th_tuner_t* self) {
  return *static_cast<TunerInstance*>(self->tuner_data)->impl;
}
inline Assessor& AssessorOf(const th_assessor_t* self) {
  return *static_cast<AssessorInstance*>(self->assessor_data)->impl;
}

struct TunerTrampolines {
  static void Destroy(const th_tuner_t* self) noexcept {
    try {
      delete static_cast<TunerInstance*>(self->tuner_data);
    } catch (...) {
      // A destructor that throws: nothing sensible to report, and nothing may cross the ABI.
    }
  }
  static th_status UpdateSearchSpace(const th_tuner_t* self, th_bytes_t space,
                                     th_error_t* err) noexcept {
    return Guard(err, [&] {
      auto oh = Unpack(space);
      TunerOf(self).UpdateSearchSpace(oh.get());
      return TH_OK;
    });
  }
  static th_status Generate(const th_tuner_t* self, const int64_t* ids, uint32_t count,
                            const th_param_sink_t* out, th_error_t* err) noexcept {
    return Guard(err, [&] {
      std::vector<int64_t> list(ids, ids + count);
      bool all = TunerOf(self).GenerateMultiple(
          list, [&](int64_t id, const msgpack::sbuffer& params) {
            th_status st = out->emit(out, id, reinterpret_cast<const uint8_t*>(params.data()),
                                     params.size());
            if (st != TH_OK) {
              throw Error(st, "the host refused the parameters for id " + std::to_string(id));
            }
          });
      return all ? TH_OK : TH_NO_MORE_TRIALS;
    });
  }
  static th_status ReceiveTrialResult(const th_tuner_t* self, int64_t id, th_bytes_t parameters,
                                      th_bytes_t value, double scalar, uint32_t flags,
                                      th_error_t* err) noexcept {
    return Guard(err, [&] {
      auto params = Unpack(parameters);
      auto metric = Unpack(value);
      TunerOf(self).ReceiveTrialResult(id, params.get(), metric.get(), scalar,
                                       (flags & TH_RESULT_CUSTOMIZED) != 0);
      return TH_OK;
    });
  }
  static th_status TrialEnd(const th_tuner_t* self, int64_t id, bool success,
                            th_error_t* err) noexcept {
    return Guard(err, [&] {
      TunerOf(self).TrialEnd(id, success);
      return TH_OK;
    });
  }
  static th_status ImportData(const th_tuner_t* self, th_bytes_t data, th_error_t* err) noexcept {
    return Guard(err, [&] {
      auto oh = Unpack(data);
      TunerOf(self).ImportData(oh.get());
      return TH_OK;
    });
  }
  static th_status SaveState(const th_tuner_t* self, const th_byte_writer_t* out,
                             th_error_t* err) noexcept {
    return Guard(err, [&] { return WriteState(out, TunerOf(self).SaveState()); });
  }
  static th_status LoadState(const th_tuner_t* self, th_bytes_t state, th_error_t* err) noexcept {
    return Guard(err, [&] {
      TunerOf(self).LoadState(
          std::string_view(reinterpret_cast<const char*>(state.data), state.size));
      return TH_OK;
    });
  }
};

struct AssessorTrampolines {
  static void Destroy(const th_assessor_t* self) noexcept {
    try {
      delete static_cast<AssessorInstance*>(self->assessor_data);
    } catch (...) {
      // See TunerTrampolines::Destroy.
    }
  }
  static th_status AssessTrial(const th_assessor_t* self, const char* trial_id,
                               th_bytes_t history, th_assessment_t* result,
                               th_error_t* err) noexcept {
    return Guard(err, [&] {
      auto oh = Unpack(history);
      if (oh.get().type != msgpack::type::ARRAY) {
        throw Error(TH_INVALID_ARGUMENT, "history is not an array");
      }
      bool good = AssessorOf(self).AssessTrial(trial_id == nullptr ? "" : trial_id, oh.get());
      *result = good ? TH_ASSESS_GOOD : TH_ASSESS_BAD;
      return TH_OK;
    });
  }
  static th_status TrialEnd(const th_assessor_t* self, const char* trial_id, bool success,
                            th_error_t* err) noexcept {
    return Guard(err, [&] {
      AssessorOf(self).TrialEnd(trial_id == nullptr ? "" : trial_id, success);
      return TH_OK;
    });
  }
  static th_status SaveState(const th_assessor_t* self, const th_byte_writer_t* out,
                             th_error_t* err) noexcept {
    return Guard(err, [&] { return WriteState(out, AssessorOf(self).SaveState()); });
  }
  static th_status LoadState(const th_assessor_t* self, th_bytes_t state,
                             th_error_t* err) noexcept {
    return Guard(err, [&] {
      AssessorOf(self).LoadState(
          std::string_view(reinterpret_cast<const char*>(state.data), state.size));
      return TH_OK;
    });
  }
};

inline const char* const kTunerKinds[] = {TH_KIND_TUNER, nullptr};
inline const char* const kAssessorKinds[] = {TH_KIND_ASSESSOR, nullptr};

// One exported class: its descriptor and how to make an instance.
template <class Vtable>
struct ClassEntry {
  th_plugin_descriptor_t descriptor;
  std::function<const Vtable*(const th_host_t*, const msgpack::object&)> create;
};

// Everything TH_EXPORT_PLUGIN registered, and the factories that serve it.
struct Registry {
  std::vector<ClassEntry<th_tuner_t>> tuners;
  std::vector<ClassEntry<th_assessor_t>> assessors;
  th_tuner_factory_t tuner_factory{};
  th_assessor_factory_t assessor_factory{};
  bool registered = false;
};

inline Registry& GetRegistry() {
  static Registry registry;
  return registry;
}

inline th_plugin_descriptor_t Describe(const PluginInfo& info, const char* const* kinds) {
  th_plugin_descriptor_t d{};
  d.abi_version = TH_VERSION_INIT;
  d.id = info.id;
  d.name = info.name;
  d.vendor = info.vendor;
  d.version = info.version;
  d.description = info.description;
  d.kinds = kinds;
  return d;
}

template <class T>
void Add(Registry& r, const TunerClass<T>& c) {
  r.tuners.push_back({Describe(c.info, kTunerKinds),
                      [](const th_host_t* host, const msgpack::object& args) -> const th_tuner_t* {
                        auto* inst = new TunerInstance{};
                        try {
                          inst->impl = std::make_unique<T>(HostRef(host), args);
                        } catch (...) {
                          delete inst;
                          throw;
                        }
                        th_tuner_t& v = inst->vtable;
                        v.struct_size = sizeof(th_tuner_t);
                        v.tuner_data = inst;
                        v.destroy = &TunerTrampolines::Destroy;
                        v.update_search_space = &TunerTrampolines::UpdateSearchSpace;
                        v.generate = &TunerTrampolines::Generate;
                        v.receive_trial_result = &TunerTrampolines::ReceiveTrialResult;
                        v.trial_end = &TunerTrampolines::TrialEnd;
                        v.import_data = &TunerTrampolines::ImportData;
                        v.save_state = &TunerTrampolines::SaveState;
                        v.load_state = &TunerTrampolines::LoadState;
                        return &inst->vtable;
                      }});
}

template <class T>
void Add(Registry& r, const AssessorClass<T>& c) {
  r.assessors.push_back(
      {Describe(c.info, kAssessorKinds),
       [](const th_host_t* host, const msgpack::object& args) -> const th_assessor_t* {
         auto* inst = new AssessorInstance{};
         try {
           inst->impl = std::make_unique<T>(HostRef(host), args);
         } catch (...) {
           delete inst;
           throw;
         }
         th_assessor_t& v = inst->vtable;
         v.struct_size = sizeof(th_assessor_t);
         v.assessor_data = inst;
         v.destroy = &AssessorTrampolines::Destroy;
         v.assess_trial = &AssessorTrampolines::AssessTrial;
         v.trial_end = &AssessorTrampolines::TrialEnd;
         v.save_state = &AssessorTrampolines::SaveState;
         v.load_state = &AssessorTrampolines::LoadState;
         return &inst->vtable;
       }});
}

template <class Vtable>
const Vtable* Create(std::vector<ClassEntry<Vtable>>& classes, const th_host_t* host,
                     const char* id, th_bytes_t class_args, th_error_t* err) noexcept {
  const Vtable* out = nullptr;
  th_status st = Guard(err, [&] {
    for (auto& c : classes) {
      if (id != nullptr && std::strcmp(c.descriptor.id, id) == 0) {
        auto args = Unpack(class_args);
        if (args.get().type != msgpack::type::MAP) {
          throw Error(TH_INVALID_ARGUMENT, "class arguments must be a map");
        }
        out = c.create(host, args.get());
        return TH_OK;
      }
    }
    throw Error(TH_INVALID_ARGUMENT, std::string("no class with id ") + (id ? id : "(null)"));
  });
  return st == TH_OK ? out : nullptr;
}

// Defined by TH_EXPORT_PLUGIN in the plugin.
void RegisterClasses(Registry& registry);

template <class... Classes>
void AddAll(Registry& registry, const Classes&... classes) {
  (Add(registry, classes), ...);
}

inline void BuildFactories(Registry& r) {
  r.tuner_factory.count = [](const th_tuner_factory_t*) -> uint32_t {
    return static_cast<uint32_t>(GetRegistry().tuners.size());
  };
  r.tuner_factory.get_descriptor = [](const th_tuner_factory_t*,
                                      uint32_t i) -> const th_plugin_descriptor_t* {
    auto& t = GetRegistry().tuners;
    return i < t.size() ? &t[i].descriptor : nullptr;
  };
  r.tuner_factory.create = [](const th_tuner_factory_t*, const th_host_t* host, const char* id,
                              th_bytes_t args, th_error_t* err) -> const th_tuner_t* {
    return Create(GetRegistry().tuners, host, id, args, err);
  };
  r.assessor_factory.count = [](const th_assessor_factory_t*) -> uint32_t {
    return static_cast<uint32_t>(GetRegistry().assessors.size());
  };
  r.assessor_factory.get_descriptor = [](const th_assessor_factory_t*,
                                         uint32_t i) -> const th_plugin_descriptor_t* {
    auto& a = GetRegistry().assessors;
    return i < a.size() ? &a[i].descriptor : nullptr;
  };
  r.assessor_factory.create = [](const th_assessor_factory_t*, const th_host_t* host,
                                 const char* id, th_bytes_t args,
                                 th_error_t* err) -> const th_assessor_t* {
    return Create(GetRegistry().assessors, host, id, args, err);
  };
}

inline bool EntryInit(const char* /*plugin_path*/) {
  try {
    Registry& r = GetRegistry();
    if (!r.registered) {
      RegisterClasses(r);
      BuildFactories(r);
      r.registered = true;
    }
    return true;
  } catch (...) {
    return false;
  }
}

inline void EntryDeinit() {}

inline const void* EntryGetFactory(const char* factory_id) {
  if (factory_id == nullptr) return nullptr;
  Registry& r = GetRegistry();
  if (std::strcmp(factory_id, TH_TUNER_FACTORY_ID) == 0 && !r.tuners.empty()) {
    return &r.tuner_factory;
  }
  if (std::strcmp(factory_id, TH_ASSESSOR_FACTORY_ID) == 0 && !r.assessors.empty()) {
    return &r.assessor_factory;
  }
  return nullptr;
}

}  // namespace detail
}  // namespace tunehost::sdk

// Exports the plugin: pass any mix of TunerClass<T>(info) and
// AssessorClass<T>(info). Use once per plugin.
#define TH_EXPORT_PLUGIN(...)                                                           \
  void tunehost::sdk::detail::RegisterClasses(tunehost::sdk::detail::Registry& r) {     \
    tunehost::sdk::detail::AddAll(r, __VA_ARGS__);                                      \
  }                                                                                     \
  extern "C" TH_EXPORT const th_plugin_entry_t th_plugin_entry = {                      \
      TH_VERSION_INIT, &tunehost::sdk::detail::EntryInit,                               \
      &tunehost::sdk::detail::EntryDeinit, &tunehost::sdk::detail::EntryGetFactory};

#endif  // TUNEHOST_SDK_CPP_HELPER_H
