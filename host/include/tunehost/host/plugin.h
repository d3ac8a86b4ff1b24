// Host-side view of plugins: a registry that loads plugin files through
// Boost.DLL and checks them, and C++ wrappers around tuner/assessor instances
// that turn the C ABI (status codes, error buffers) into tunehost::Status.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tunehost/protocol/messages.h"
#include "tunehost/status.h"

namespace tunehost::host {

struct LoadedLibrary;  // keeps the shared library mapped while instances live
struct IsolationOptions;  // isolated_plugin.h

// What a loaded plugin offers, for listings and errors.
struct PluginInfo {
  std::string id;           // "org.tunehost.random"
  std::string name;         // "random"
  std::string kind;         // "tuner" or "assessor"
  std::string vendor;
  std::string version;
  std::string description;
  std::filesystem::path file;
};

// Called by a tuner (any thread) to emit parameters for an id it was given
// earlier: the NNI send-trial callback. Returns the status reported back to
// the plugin.
using SendTrialFn = std::function<Status(int64_t parameter_id, protocol::Packed parameters)>;

// One tuner instance. Not thread-safe: the dispatcher's tuner strand
// serializes calls. A plugin's failure (bad status, exception that crossed the
// ABI) is Status::PluginError with the plugin's message and its name.
class Tuner {
 public:
  virtual ~Tuner() = default;
  virtual const PluginInfo& info() const = 0;
  virtual Status UpdateSearchSpace(std::string_view search_space) = 0;
  // Appends (id, parameters) in emission order to *out. *no_more is set when
  // the tuner returned TH_NO_MORE_TRIALS (fewer than ids.size() emitted).
  virtual Status Generate(const std::vector<int64_t>& ids,
                          std::vector<std::pair<int64_t, protocol::Packed>>* out,
                          bool* no_more) = 0;
  virtual Status ReceiveTrialResult(int64_t parameter_id, std::string_view parameters,
                                    std::string_view value, double scalar, bool customized) = 0;
  virtual Status TrialEnd(int64_t parameter_id, bool success) = 0;
  // *supported is false when the plugin does not implement it (not an error).
  virtual Status ImportData(std::string_view records, bool* supported) = 0;
  virtual Status SaveState(std::string* state, bool* supported) = 0;
  virtual Status LoadState(std::string_view state, bool* supported) = 0;
};

// One assessor instance; serialized by the assessor strand.
class Assessor {
 public:
  virtual ~Assessor() = default;
  virtual const PluginInfo& info() const = 0;
  // `history`: MessagePack array of the PERIODICAL metric values, in order.
  virtual Status AssessTrial(const std::string& trial_id, std::string_view history,
                             bool* good) = 0;
  virtual Status TrialEnd(const std::string& trial_id, bool success) = 0;
  virtual Status SaveState(std::string* state, bool* supported) = 0;
  virtual Status LoadState(std::string_view state, bool* supported) = 0;
};

// Loads plugin files, validates them (entry symbol, ABI version, descriptors)
// before calling anything else, and registers them by id and name. Bad files
// are logged (file + reason) and skipped; the registry keeps working.
class PluginRegistry {
 public:
  PluginRegistry();
  ~PluginRegistry();
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // Loads every shared library (*.so, *.dylib, *.dll) directly in `dir`, in
  // file-name order. Returns how many files loaded; failures are in errors().
  size_t LoadDirectory(const std::filesystem::path& dir);
  // Loads one file. The error names the file and the reason.
  Status LoadFile(const std::filesystem::path& file);

  std::vector<PluginInfo> plugins() const;
  // The plugin of `kind` ("tuner", "assessor") that Create* would take for
  // `name_or_id`: exact id, exact name, then the name without regard to case
  // or by its NNI alias (GridSearch, BatchTuner).
  std::optional<PluginInfo> Find(std::string_view kind, std::string_view name_or_id) const;
  // "<file>: <reason>" for every refused file, in load order.
  const std::vector<std::string>& errors() const { return errors_; }

  // Creates an instance by name or id. `class_args` is a MessagePack map.
  // NotFound when no such plugin of that kind; PluginError when create fails.
  // With `isolation`, the instance lives in a runner process of its own
  // (isolated_plugin.h) and the returned object forwards every call to it.
  Status CreateTuner(std::string_view name_or_id, std::string_view class_args,
                     SendTrialFn send_trial, std::unique_ptr<Tuner>* out,
                     const IsolationOptions* isolation = nullptr);
  Status CreateAssessor(std::string_view name_or_id, std::string_view class_args,
                        std::unique_ptr<Assessor>* out,
                        const IsolationOptions* isolation = nullptr);

 private:
  struct Entry;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::vector<std::string> errors_;
};

}  // namespace tunehost::host
