// In-process plugins through the C ABI (sdk/include/tunehost/sdk/sdk.h): a
// mapped plugin file and the Tuner / Assessor wrappers over one instance
// (plugin_instances.cc). The registry (plugin_loader.cc) loads and checks
// files and creates instances through these.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <boost/dll/shared_library.hpp>

#include "tunehost/host/plugin.h"
#include "tunehost/sdk/sdk.h"

namespace tunehost::host {

// A mapped plugin file. deinit() runs, then the file is unmapped, when the
// last holder (registry entry or instance) lets go.
struct LoadedLibrary {
  std::filesystem::path file;
  boost::dll::shared_library library;
  const th_plugin_entry_t* entry = nullptr;
  bool initialized = false;

  ~LoadedLibrary();
};

// A new instance of `factory`'s plugin, its vtable checked. *broken is set
// when the instance itself is unusable (bad vtable).
Status CreateAbiTuner(std::shared_ptr<LoadedLibrary> library, const PluginInfo& info,
                      SendTrialFn send_trial, const th_tuner_factory_t* factory, const char* id,
                      std::string_view class_args, bool* broken, std::unique_ptr<Tuner>* out);
Status CreateAbiAssessor(std::shared_ptr<LoadedLibrary> library, const PluginInfo& info,
                         const th_assessor_factory_t* factory, const char* id,
                         std::string_view class_args, bool* broken,
                         std::unique_ptr<Assessor>* out);

namespace plugin_abi {

// "major.minor.revision"
std::string VersionString(const th_version_t& v);
std::string HostVersionString();

// What a current exception says, for messages (cleaned: the plugin wrote it).
// Call only inside a catch block.
std::string CurrentExceptionText();

// Whether `bytes` hold exactly one MessagePack map; *why says why not.
bool IsOneMap(const uint8_t* data, size_t size, std::string* why);

}  // namespace plugin_abi

}  // namespace tunehost::host
