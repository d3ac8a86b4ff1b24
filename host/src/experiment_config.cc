#include "tunehost/host/experiment_config.h"

#include <pwd.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <msgpack.hpp>
#include <random>
#include <set>
#include <sstream>
#include <utility>

#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"

#include "nni_v1_config.h"
#include "yaml_values.h"

// Key policy. The reader takes NNI v2 experiment configs (camelCase keys),
// and v1 ones through NNI's own mapping (nni_v1_config.h). `advisor` names
// the tuner (NNI's advisors are tuner plugins here). A key NNI has but
// tunehost lacks is either
//   refused  when running without it would change the experiment's meaning:
//            sharedStorage, useAnnotation: true,
//            experimentType other than hpo, tuner/assessor className and
//            codeDirectory (Python classes), any platform but local, a list
//            of training services;
//   warned   when it only tunes the runtime or is not enforced yet, so the
//            config still runs: maxTrialDuration (parsed, not enforced),
//            nniManagerIp, debug, logLevel (use --log-level), tunerGpuIndices,
//            and the local platform's useActiveGpu, reuseMode, nniManagerIp
//            and debug.
// trialGpuNumber, gpuIndices and maxTrialNumberPerGpu give each local trial
// its GPUs (CUDA_VISIBLE_DEVICES), as NNI's local training service does.
// trainingService may also hold trialCommand, trialCodeDirectory and
// trialGpuNumber, which then win over the top-level ones, as in NNI.
// A refusal says what to write instead. In a v1 file every message names the
// v1 key the file has (V1KeyName).
// Any other key is an error, so a typo never passes unnoticed. A key whose
// value is null counts as absent, as in NNI.

namespace tunehost::host {

namespace fs = std::filesystem;

namespace {

using namespace config_yaml;

fs::path HomeDir() {
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return home;
  if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return pw->pw_dir;
  }
  return fs::temp_directory_path();
}

// "~" and "~/x" are the home directory, as NNI expands them; relative paths
// are relative to the YAML file's directory.
fs::path ResolvePath(const std::string& text, const fs::path& base) {
  fs::path p;
  if (text == "~") {
    p = HomeDir();
  } else if (text.rfind("~/", 0) == 0) {
    p = HomeDir() / text.substr(2);
  } else {
    p = text;
  }
  if (p.is_relative()) p = base / p;
  return p.lexically_normal();
}

Status ReadFile(const fs::path& file, std::string* out) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::NotFound(file.string() + ": cannot read file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::NotFound(file.string() + ": read error");
  *out = ss.str();
  return Status::Ok();
}

Status LoadSearchSpaceFile(const Context& ctx, const YAML::Node& at, const fs::path& file,
                           protocol::Packed* out) {
  std::string text;
  Status st = ReadFile(file, &text);
  if (!st.ok()) return ctx.Error(at, "searchSpaceFile", st.message());
  std::string ext = file.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".json") {
    st = protocol::JsonToPacked(text, out);
    if (!st.ok()) return ctx.Error(at, "searchSpaceFile", file.string() + ": " + st.message());
  } else {
    YAML::Node root;
    st = ParseYaml(text, file.string(), &root);
    if (!st.ok()) return st;
    Context file_ctx(file.string(), YAML::Mark(), nullptr);
    st = ToPacked(file_ctx, root, "searchSpaceFile", out);
    if (!st.ok()) return st;
  }
  if (!IsPackedMap(*out)) {
    return ctx.Error(at, "searchSpaceFile", file.string() + ": the search space must be a map");
  }
  return Status::Ok();
}

Status ReadAlgorithm(const Context& ctx, const YAML::Node& n, const std::string& key,
                     protocol::PluginSpec* out) {
  if (!n.IsMap()) return ctx.Error(n, key, "must be a map with name and classArgs");
  bool has_name = false, custom = false;
  out->args = std::string(1, static_cast<char>(0x80));  // empty map
  Status st = ForEachEntry(ctx, n, key,
                           [&](const std::string& k, const std::string& full,
                               const YAML::Node& key_node, const YAML::Node& v) -> Status {
                             if (k == "name") {
                               has_name = true;
                               Status s = GetString(ctx, v, full, &out->name);
                               if (s.ok() && out->name.empty())
                                 return ctx.Error(v, full, "must not be empty");
                               return s;
                             }
                             if (k == "classArgs") {
                               if (!v.IsMap()) return ctx.Error(v, full, "must be a map");
                               return ToPacked(ctx, v, full, &out->args);
                             }
                             if (k == "isolation") {
                               // tunehost: where the plugin runs (wire-format.md
                               // §4.2 PluginSpec).
                               std::string where;
                               Status s = GetString(ctx, v, full, &where);
                               if (!s.ok()) return s;
                               protocol::PluginIsolation isolation;
                               if (!protocol::ParsePluginIsolation(where, &isolation)) {
                                 return ctx.Error(v, full,
                                                  "must be in-process or process, got '" +
                                                      where + "'");
                               }
                               out->isolation = isolation;
                               return Status::Ok();
                             }
                             if (k == "memoryLimitMb") {
                               int64_t mb = 0;
                               Status s = GetInt(ctx, v, full, 1,
                                                 static_cast<int64_t>(
                                                     protocol::kMaxMemoryLimitMb),
                                                 &mb);
                               if (!s.ok()) return s;
                               out->memory_limit_mb = static_cast<uint64_t>(mb);
                               return Status::Ok();
                             }
                             if (k == "className" || k == "codeDirectory") {
                               if (custom) return Status::Ok();  // one error for the two keys
                               custom = true;
                               return ctx.Error(
                                   key_node, full,
                                   "Python algorithm classes are not supported: tunehost loads " +
                                       key + "s from plugins by name; give " + key +
                                       ".name instead (`tunehost plugins` lists them)");
                             }
                             return ctx.Error(key_node, full, "unknown key");
                           });
  if (!has_name && !custom) st = Combine(std::move(st), ctx.Error(n, key + ".name", "required"));
  if (out->memory_limit_mb && out->isolation != protocol::PluginIsolation::kProcess) {
    st = Combine(std::move(st),
                 ctx.Error(n, key + ".memoryLimitMb",
                           "applies to a plugin in a process of its own: add isolation: process"));
  }
  return st;
}

// NNI's gpuIndices: an int, "0,1,3", or a list of ints.
Status GetGpuIndices(const Context& ctx, const YAML::Node& n, const std::string& key,
                     std::vector<int>* out) {
  out->clear();
  std::vector<std::string> parts;
  if (n.IsSequence()) {
    for (const YAML::Node& item : n) {
      if (!item.IsScalar()) return ctx.Error(item, key, "must list GPU indices (integers)");
      parts.push_back(item.Scalar());
    }
  } else if (n.IsScalar()) {
    std::stringstream in(n.Scalar());
    std::string part;
    while (std::getline(in, part, ',')) parts.push_back(part);
  } else {
    return ctx.Error(n, key, "must be GPU indices: 0, \"0,1\" or [0, 1]");
  }
  for (std::string part : parts) {
    part.erase(0, part.find_first_not_of(" \t"));
    part.erase(part.find_last_not_of(" \t") + 1);
    int index = -1;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    if (ec != std::errc() || end != part.data() + part.size() || index < 0 || index > 1023) {
      return ctx.Error(n, key, "'" + part + "' is not a GPU index (0-1023)");
    }
    if (std::find(out->begin(), out->end(), index) != out->end()) {
      return ctx.Error(n, key, "GPU " + std::to_string(index) + " is listed twice");
    }
    out->push_back(index);
  }
  if (out->empty()) return ctx.Error(n, key, "lists no GPU");
  return Status::Ok();
}

// A trial command: a string with more than blanks.
Status GetCommand(const Context& ctx, const YAML::Node& n, const std::string& key,
                  std::string* out) {
  Status st = GetString(ctx, n, key, out);
  if (st.ok() && out->find_first_not_of(" \t\n") == std::string::npos) {
    return ctx.Error(n, key, "must not be empty");
  }
  return st;
}

// NNI's TrainingServiceConfig fields that may also be set at the top level;
// the training service's own value wins (TrainingServiceConfig._canonicalize
// copies a top-level value only where the service has none).
struct ServiceTrial {
  std::optional<std::string> command;
  std::optional<YAML::Node> code_dir;
  std::optional<uint32_t> gpu_number;
};

Status ReadTrainingService(const Context& ctx, const YAML::Node& n, GpuOptions* gpus,
                           ServiceTrial* trial) {
  const std::string key = "trainingService";
  if (n.IsSequence()) {
    return ctx.Error(n, key,
                     "a list of training services (NNI's hybrid mode) is not supported: only "
                     "local exists; write trainingService: {platform: local} (workers on other "
                     "machines attach to `tunehost serve`)");
  }
  if (!n.IsMap()) return ctx.Error(n, key, "must be a map such as {platform: local}");
  bool has_platform = false;
  // Another platform's settings: the platform's error covers them.
  const YAML::Node platform_node = n["platform"];
  const bool local = !platform_node || !platform_node.IsScalar() ||
                     platform_node.Scalar() == "local";
  Status st = ForEachEntry(
      ctx, n, key,
      [&](const std::string& k, const std::string& full, const YAML::Node& key_node,
          const YAML::Node& v) -> Status {
        if (k == "platform") {
          has_platform = true;
          std::string platform;
          Status s = GetString(ctx, v, full, &platform);
          if (!s.ok()) return s;
          if (platform != "local") {
            return ctx.Error(v, full,
                             "unsupported platform '" + platform +
                                 "': only local exists; use platform: local (workers on other "
                                 "machines attach to `tunehost serve`)");
          }
          return Status::Ok();
        }
        if (!local) return Status::Ok();
        if (k == "trialCommand") {
          std::string command;
          Status s = GetCommand(ctx, v, full, &command);
          if (s.ok()) trial->command = std::move(command);
          return s;
        }
        if (k == "trialCodeDirectory") {
          std::string unused;
          Status s = GetString(ctx, v, full, &unused);
          if (s.ok()) trial->code_dir.emplace(v);
          return s;
        }
        if (k == "trialGpuNumber") {
          int64_t g = 0;
          Status s = GetInt(ctx, v, full, 0, 1024, &g);
          if (s.ok()) trial->gpu_number = static_cast<uint32_t>(g);
          return s;
        }
        if (k == "nniManagerIp") {
          // NNI's LocalConfig clears it too.
          ctx.Warn(key_node, full, "ignored: local trials reach the host on this machine");
          return Status::Ok();
        }
        if (k == "debug") {
          ctx.Warn(key_node, full, "ignored: use --log-level");
          return Status::Ok();
        }
        if (k == "gpuIndices") {
          std::vector<int> indices;
          Status s = GetGpuIndices(ctx, v, full, &indices);
          if (s.ok()) gpus->indices = std::move(indices);
          return s;
        }
        if (k == "maxTrialNumberPerGpu") {
          int64_t m = 0;
          Status s = GetInt(ctx, v, full, 1, 1024, &m);
          gpus->max_trials_per_gpu = static_cast<uint32_t>(m);
          return s;
        }
        if (k == "useActiveGpu") {
          ctx.Warn(key_node, full, "not checked: tunehost gives trials the listed GPUs whatever "
                                   "else runs on them");
          return Status::Ok();
        }
        if (k == "reuseMode") {
          ctx.Warn(key_node, full, "ignored: local workers are always reused");
          return Status::Ok();
        }
        return ctx.Error(key_node, full, "unknown key");
      });
  if (!has_platform) st = Combine(std::move(st), ctx.Error(n, key + ".platform", "required"));
  return st;
}

Status ReadTunehostSection(const Context& ctx, const YAML::Node& n, TimingOptions* out) {
  const std::string key = "tunehost";
  if (!n.IsMap()) return ctx.Error(n, key, "must be a map");
  return ForEachEntry(
      ctx, n, key,
      [&](const std::string& k, const std::string& full, const YAML::Node& key_node,
          const YAML::Node& v) -> Status {
        int64_t value = 0;
        if (k == "heartbeatIntervalMs" || k == "ackTimeoutMs") {
          Status s = GetInt(ctx, v, full, 1, 24LL * 3600 * 1000, &value);
          if (!s.ok()) return s;
          (k == "heartbeatIntervalMs" ? out->heartbeat_interval : out->ack_timeout) =
              std::chrono::milliseconds(value);
          return Status::Ok();
        }
        if (k == "deduplicate") {
          bool b = false;
          Status s = GetBool(ctx, v, full, &b);
          if (!s.ok()) return s;
          out->deduplicate = b;
          return Status::Ok();
        }
        if (k == "pluginCallTimeoutMs") {
          Status s = GetInt(ctx, v, full, 1,
                            static_cast<int64_t>(protocol::kMaxPluginTimeoutS * 1000), &value);
          if (!s.ok()) return s;
          out->plugin_call_timeout = std::chrono::milliseconds(value);
          return Status::Ok();
        }
        if (k == "maxConsecutiveFailures") {
          Status s = GetInt(ctx, v, full, 1, 1000000, &value);
          if (!s.ok()) return s;
          out->max_consecutive_failures = static_cast<uint32_t>(value);
          return Status::Ok();
        }
        if (k == "prefetch") {
          Status s = GetInt(ctx, v, full, 0, protocol::kMaxPrefetch, &value);
          if (!s.ok()) return s;
          out->prefetch = static_cast<uint32_t>(value);
          return Status::Ok();
        }
        if (k == "maxMessageBytes") {
          Status s = GetInt(ctx, v, full, 1024, std::numeric_limits<int64_t>::max(), &value);
          if (!s.ok()) return s;
          out->max_message_bytes = static_cast<size_t>(value);
          return Status::Ok();
        }
        if (k == "maxResultBytes") {
          Status s = GetInt(ctx, v, full, 1024, int64_t{1} << 31, &value);
          if (!s.ok()) return s;
          out->max_result_bytes = static_cast<size_t>(value);
          return Status::Ok();
        }
        return ctx.Error(key_node, full, "unknown key");
      });
}

}  // namespace

bool ParseDuration(std::string_view text, double* seconds) {
  size_t i = 0;
  while (i < text.size() && isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t start = i;
  while (i < text.size() && (isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             text[i] == 'e' || text[i] == 'E' ||
                             ((text[i] == '+' || text[i] == '-') && i > start &&
                              (text[i - 1] == 'e' || text[i - 1] == 'E')))) {
    ++i;
  }
  double number = 0;
  if (!ParseYamlFloat(text.substr(start, i - start), &number)) return false;
  while (i < text.size() && isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) {
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  while (!unit.empty() && isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
  double scale = 0;
  if (unit.empty() || unit == "s" || unit == "sec" || unit == "secs" || unit == "second" ||
      unit == "seconds") {
    scale = 1;
  } else if (unit == "m" || unit == "min" || unit == "mins" || unit == "minute" ||
             unit == "minutes") {
    scale = 60;
  } else if (unit == "h" || unit == "hr" || unit == "hrs" || unit == "hour" || unit == "hours") {
    scale = 3600;
  } else if (unit == "d" || unit == "day" || unit == "days") {
    scale = 86400;
  } else {
    return false;
  }
  double value = number * scale;
  if (!std::isfinite(value) || value <= 0) return false;
  *seconds = value;
  return true;
}

std::string NewExperimentId() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::mt19937 gen(rd());
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string id(8, 'a');
  for (char& c : id) c = kAlphabet[pick(gen)];
  return id;
}

bool ValidExperimentId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
  });
}

fs::path DefaultWorkingDir() { return (HomeDir() / "tunehost-experiments").lexically_normal(); }

Status LoadExperimentConfig(const fs::path& file, ExperimentConfig* out) {
  std::string text;
  Status st = ReadFile(file, &text);
  if (!st.ok()) return st;
  return ParseExperimentConfig(text, file, out);
}

Status ParseExperimentConfig(std::string_view yaml, const fs::path& source_file,
                             ExperimentConfig* out) {
  *out = ExperimentConfig();
  std::error_code ec;
  fs::path source = fs::absolute(source_file, ec).lexically_normal();
  if (ec) source = source_file;
  const std::string label = source_file.string();
  const fs::path base = source.parent_path();

  YAML::Node root;
  Status st = ParseYaml(yaml, label, &root);
  if (!st.ok()) return st;
  YAML::Mark top;  // 1:1, where "required" errors point when a key is missing
  if (!root.IsMap()) {
    return Status::BadField(Where(label, top) + ": experiment: the file must be a YAML map");
  }

  // NNI's v1 format is read through the v2 keys it maps to; the messages
  // name the v1 keys.
  const bool v1 = IsNniV1(root);
  Status converted;
  if (v1) {
    YAML::Node v2;
    converted = ConvertNniV1(Context(label, top, &out->warnings), root, &v2);
    root.reset(v2);
  }
  const Context ctx(label, top, &out->warnings, v1 ? V1KeyName : nullptr);

  ExperimentConfig& c = *out;
  c.source_file = source;
  c.spec.id = NewExperimentId();
  c.trial_code_dir = base;
  c.working_dir = DefaultWorkingDir();
  bool has_command = false, has_concurrency = false, has_tuner = false, has_assessor = false;
  std::optional<YAML::Node> advisor;
  ServiceTrial service;
  // Plain YAML::Node assignment writes through to the node assigned to, so
  // the nodes found are kept in optionals.
  std::optional<YAML::Node> search_space, search_space_file, code_dir;

  st = Combine(std::move(converted), ForEachEntry(
      ctx, root, "",
      [&](const std::string& k, const std::string& key, const YAML::Node& key_node,
          const YAML::Node& v) -> Status {
        int64_t i = 0;
        bool b = false;
        std::string s;
        if (k == "experimentName") return GetString(ctx, v, key, &c.name);
        if (k == "searchSpace") {
          if (!v.IsMap()) return ctx.Error(v, key, "must be a map");
          search_space.emplace(v);
          return ToPacked(ctx, v, key, &c.search_space);
        }
        if (k == "searchSpaceFile") {
          search_space_file.emplace(v);
          return GetString(ctx, v, key, &s);
        }
        if (k == "trialCommand") {
          has_command = true;
          return GetCommand(ctx, v, key, &c.trial_command);
        }
        if (k == "trialCodeDirectory") {
          code_dir.emplace(v);
          return GetString(ctx, v, key, &s);
        }
        if (k == "trialConcurrency") {
          has_concurrency = true;
          Status r = GetInt(ctx, v, key, 1, protocol::kMaxConcurrency, &i);
          c.spec.concurrency = static_cast<uint32_t>(i);
          return r;
        }
        if (k == "maxTrialNumber") {
          Status r = GetInt(ctx, v, key, 1, std::numeric_limits<int64_t>::max(), &i);
          c.spec.max_trials = static_cast<uint64_t>(i);
          return r;
        }
        if (k == "maxExperimentDuration") return GetDuration(ctx, v, key, &c.spec.max_duration_s);
        if (k == "maxTrialDuration") {
          double unused = 0;
          Status r = GetDuration(ctx, v, key, &unused);
          if (r.ok()) ctx.Warn(key_node, key, "not enforced yet: trials run until they end");
          return r;
        }
        if (k == "tuner") {
          has_tuner = true;
          return ReadAlgorithm(ctx, v, key, &c.spec.tuner);
        }
        if (k == "assessor") {
          has_assessor = true;
          c.spec.assessor.emplace();
          return ReadAlgorithm(ctx, v, key, &*c.spec.assessor);
        }
        if (k == "advisor") {
          // NNI's advisors (Hyperband, BOHB) both suggest and stop trials;
          // here each is a tuner plugin of that name.
          advisor.emplace(key_node);
          return ReadAlgorithm(ctx, v, key, &c.spec.tuner);
        }
        if (k == "trainingService") return ReadTrainingService(ctx, v, &c.gpus, &service);
        if (k == "experimentWorkingDirectory") {
          Status r = GetString(ctx, v, key, &s);
          if (r.ok()) c.working_dir = ResolvePath(s, base);
          return r;
        }
        if (k == "trialGpuNumber") {
          Status r = GetInt(ctx, v, key, 0, 1024, &i);
          c.gpus.per_trial = static_cast<uint32_t>(i);
          return r;
        }
        if (k == "useAnnotation") {
          Status r = GetBool(ctx, v, key, &b);
          if (r.ok() && b) {
            return ctx.Error(v, key,
                             std::string("annotations are not supported: write the search "
                                         "space in ") +
                                 (v1 ? "a file named by searchSpacePath"
                                     : "searchSpace or searchSpaceFile") +
                                 " and remove useAnnotation");
          }
          return r;
        }
        if (k == "experimentType") {
          Status r = GetString(ctx, v, key, &s);
          if (r.ok() && s != "hpo") {
            return ctx.Error(v, key,
                             "only hpo experiments are supported, got '" + s +
                                 "': remove experimentType (hpo is the default)");
          }
          return r;
        }
        if (k == "sharedStorage") {
          return ctx.Error(key_node, key,
                           "shared storage is not supported: trials run on this machine and "
                           "read trialCodeDirectory in place; remove sharedStorage (mount "
                           "the storage yourself if trials need its files)");
        }
        if (k == "nniManagerIp") {
          ctx.Warn(key_node, key, "ignored: `tunehost run` binds to loopback");
          return Status::Ok();
        }
        if (k == "debug" || k == "logLevel") {
          ctx.Warn(key_node, key, "ignored: use --log-level");
          return Status::Ok();
        }
        if (k == "tunerGpuIndices") {
          ctx.Warn(key_node, key, "ignored: plugins run inside the host");
          return Status::Ok();
        }
        if (k == "tunehost") return ReadTunehostSection(ctx, v, &c.timing);
        return ctx.Error(key_node, key, "unknown key");
      }));

  // Every problem at once (with the ones above), not one per attempt.
  auto problem = [&](const YAML::Node& at, const std::string& key, const std::string& what) {
    st = Combine(std::move(st), ctx.Error(at, key, what));
  };
  if (advisor && (has_tuner || has_assessor)) {
    problem(*advisor, "advisor", "an advisor is the experiment's tuner and assessor: give "
                                 "either advisor, or tuner (and assessor), as NNI requires");
  }
  if (service.command) {
    c.trial_command = *service.command;
    has_command = true;
  }
  if (service.gpu_number) c.gpus.per_trial = *service.gpu_number;
  std::string code_dir_key = "trialCodeDirectory";
  if (service.code_dir) {
    code_dir = service.code_dir;
    code_dir_key = "trainingService.trialCodeDirectory";
  }
  // The v1 reader named what its format lacks.
  if (!v1 && !has_command) problem(YAML::Node(), "trialCommand", "required");
  if (!v1 && !has_concurrency) problem(YAML::Node(), "trialConcurrency", "required");
  if (!v1 && !has_tuner && !advisor) problem(YAML::Node(), "tuner", "required");
  if (search_space && search_space_file) {
    problem(*search_space_file, "searchSpaceFile",
            "give either searchSpace or searchSpaceFile, not both");
  } else if (search_space_file && search_space_file->IsScalar()) {
    st = Combine(std::move(st),
                 LoadSearchSpaceFile(ctx, *search_space_file,
                                     ResolvePath(search_space_file->Scalar(), base),
                                     &c.search_space));
  } else if (!v1 && !search_space && !search_space_file) {
    problem(YAML::Node(), "searchSpace", "required (or searchSpaceFile)");
  }
  if (code_dir && code_dir->IsScalar()) {
    c.trial_code_dir = ResolvePath(code_dir->Scalar(), base);
    if (!fs::is_directory(c.trial_code_dir, ec)) {
      problem(*code_dir, code_dir_key, "not a directory: " + c.trial_code_dir.string());
    }
  }
  return st;
}

}  // namespace tunehost::host
