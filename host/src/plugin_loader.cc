// The plugin registry: loads plugin files, checks their entry and
// descriptors against the ABI, registers what they provide under NNI's names
// too, and creates instances in-process (plugin_abi.h) or in a runner process
// (isolated_plugin.h).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <exception>
#include <string>
#include <system_error>
#include <utility>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>

#include "plugin_abi.h"
#include "tunehost/host/isolated_plugin.h"
#include "tunehost/host/nni_builtins.h"
#include "tunehost/host/plugin.h"
#include "tunehost/host/plugin_text.h"
#include "tunehost/sdk/sdk.h"

namespace tunehost::host {

namespace fs = std::filesystem;
using plugin_abi::CurrentExceptionText;
using plugin_abi::HostVersionString;
using plugin_abi::IsOneMap;
using plugin_abi::VersionString;

namespace {

constexpr uint32_t kMaxDescriptors = 4096;  // a bigger count is garbage, not a plugin

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
      {"gridsearch", "grid"}, {"batchtuner", "batch"}, {"randomsearch", "random"},
      {"gptuner", "gp"}, {"pbttuner", "pbt"}};
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

std::optional<PluginInfo> PluginRegistry::Find(std::string_view kind,
                                               std::string_view name_or_id) const {
  const Entry* e = FindEntry(entries_, kind, name_or_id);
  if (e == nullptr) return std::nullopt;
  return e->info;
}

Status PluginRegistry::CreateTuner(std::string_view name_or_id, std::string_view class_args,
                                   SendTrialFn send_trial, std::unique_ptr<Tuner>* out,
                                   const IsolationOptions* isolation) {
  const Entry* e = FindEntry(entries_, TH_KIND_TUNER, name_or_id);
  if (e == nullptr) {
    std::string text = "no tuner plugin named " + std::string(name_or_id);
    if (auto advice = MissingNniBuiltin(TH_KIND_TUNER, name_or_id)) text += ": " + *advice;
    return Status::NotFound(text);
  }
  Status st = CheckClassArgs(&class_args, "tuner " + e->info.name);
  if (!st.ok()) return st;
  if (isolation != nullptr) {
    return CreateIsolatedTuner(e->info, class_args, std::move(send_trial), *isolation, out);
  }
  bool broken = false;
  st = CreateAbiTuner(e->library, e->info, std::move(send_trial), e->tuner_factory,
                      e->descriptor->id, class_args, &broken, out);
  if (!st.ok()) RecordCreateFailure(&errors_, e->info, st, broken);
  return st;
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
  bool broken = false;
  st = CreateAbiAssessor(e->library, e->info, e->assessor_factory, e->descriptor->id, class_args,
                         &broken, out);
  if (!st.ok()) RecordCreateFailure(&errors_, e->info, st, broken);
  return st;
}

}  // namespace tunehost::host
