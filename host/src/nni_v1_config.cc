#include "nni_v1_config.h"

#include <string>
#include <string_view>

namespace tunehost::host::config_yaml {
namespace {

// v1 keys whose value moves to a v2 key unchanged (NNI's _move_field).
struct Move {
  std::string_view v1, v2;
};
constexpr Move kTopLevel[] = {
    {"experimentName", "experimentName"},
    {"trialConcurrency", "trialConcurrency"},
    {"maxExecDuration", "maxExperimentDuration"},
    {"maxTrialNum", "maxTrialNumber"},
    // NNI's v1 schema and legacy launcher take maxTrialDuration with v2's
    // meaning; NNI 2's to_v2 leaves it unconverted (logged as an error).
    {"maxTrialDuration", "maxTrialDuration"},
    {"searchSpacePath", "searchSpaceFile"},
    {"nniManagerIp", "nniManagerIp"},
    {"logDir", "experimentWorkingDirectory"},
    {"debug", "debug"},
    {"logLevel", "logLevel"},
    {"useAnnotation", "useAnnotation"},
    {"sharedStorage", "sharedStorage"},
    {"tunehost", "tunehost"},
};
constexpr Move kTrial[] = {
    {"command", "trialCommand"}, {"codeDir", "trialCodeDirectory"}, {"gpuNum", "trialGpuNumber"}};
constexpr Move kLocalConfig[] = {{"gpuIndices", "gpuIndices"},
                                 {"maxTrialNumPerGpu", "maxTrialNumberPerGpu"},
                                 {"useActiveGpu", "useActiveGpu"}};
// Keys NNI's converter drops (_drop_field) or sets aside (_deprecate).
constexpr std::string_view kDropped[] = {"authorName", "description", "multiThread", "versionCheck",
                                         "logCollection"};
// The settings of training services other than local: the platform's own
// error covers them.
constexpr std::string_view kOtherPlatforms[] = {
    "remoteConfig",        "machineList",    "paiConfig",
    "amlConfig",           "kubeflowConfig", "frameworkcontrollerConfig",
    "frameworkcontroller", "dlcConfig",      "hybridConfig"};
// Keys that only the v1 format has.
constexpr std::string_view kV1Only[] = {"trainingServicePlatform",
                                        "authorName",
                                        "maxTrialNum",
                                        "maxExecDuration",
                                        "searchSpacePath",
                                        "trial",
                                        "localConfig",
                                        "logDir",
                                        "multiPhase",
                                        "multiThread",
                                        "versionCheck",
                                        "logCollection"};
// NNI's v2 ExperimentConfig fields that v1 does not have: in a file read as
// v1 they mean the file mixes the two formats.
constexpr std::string_view kV2Only[] = {
    "searchSpaceFile", "searchSpace",           "trialCommand",   "trialCodeDirectory",
    "trialGpuNumber",  "maxExperimentDuration", "maxTrialNumber", "experimentWorkingDirectory",
    "tunerGpuIndices", "trainingService",       "experimentType"};
constexpr std::string_view kAlgorithms[] = {"tuner", "assessor", "advisor"};

template <size_t N>
const Move* FindMove(const Move (&table)[N], std::string_view key) {
  for (const Move& m : table) {
    if (m.v1 == key) return &m;
  }
  return nullptr;
}

template <size_t N>
bool Contains(const std::string_view (&list)[N], std::string_view key) {
  for (std::string_view k : list) {
    if (k == key) return true;
  }
  return false;
}

// builtinTunerName, builtinAssessorName, builtinAdvisorName: v2's name.
std::string BuiltinKey(std::string_view kind) {
  return "builtin" + std::string(1, static_cast<char>(kind[0] - 'a' + 'A')) +
         std::string(kind.substr(1)) + "Name";
}

// The first key of `root` that only v1 has; empty when none.
std::string_view FirstV1Key(const YAML::Node& root) {
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!it->first.IsScalar()) continue;
    for (std::string_view k : kV1Only) {
      if (k == it->first.Scalar()) return k;
    }
  }
  return {};
}

// One of tuner, assessor, advisor: builtin<Kind>Name is the v2 name. `v2`
// stays empty for a custom (Python class) algorithm, whose error is here.
Status ConvertAlgorithm(const Context& ctx, const std::string& kind, const YAML::Node& v1,
                        YAML::Node* v2) {
  const std::string builtin = BuiltinKey(kind);
  if (!v1.IsMap()) return ctx.Error(v1, kind, "must be a map with " + builtin);
  bool has_name = false, custom = false;
  Status st = ForEachEntry(ctx, v1, kind,
                           [&](const std::string& k, const std::string& full,
                               const YAML::Node& key_node, const YAML::Node& v) -> Status {
                             if (k == builtin) {
                               has_name = true;
                               (*v2)["name"] = v;
                               return Status::Ok();
                             }
                             if (k == "classArgs" || k == "isolation" || k == "memoryLimitMb") {
                               (*v2)[k] = v;
                               return Status::Ok();
                             }
                             if (k == "codeDir" || k == "classFileName" || k == "className") {
                               if (custom) return Status::Ok();  // one error for the three keys
                               custom = true;
                               return ctx.Error(
                                   key_node, full,
                                   "Python algorithm classes are not supported: tunehost loads " +
                                       kind + "s from plugins by name; give " + kind + "." +
                                       builtin + " instead (`tunehost plugins` lists them)");
                             }
                             if (k == "includeIntermediateResults") {
                               ctx.Warn(key_node, full, "ignored, as NNI's v2 does");
                               return Status::Ok();
                             }
                             if (k == "gpuIndices") {
                               // NNI's converter moves it to tunerGpuIndices,
                               // which tunehost ignores with this warning.
                               ctx.Warn(key_node, full, "ignored: plugins run inside the host");
                               return Status::Ok();
                             }
                             if (k == "name") {
                               has_name = true;  // the v2 spelling: one error, not two
                               (*v2)["name"] = v;
                               return ctx.Error(key_node, full,
                                                "NNI's v2 spelling in a v1 file: write " + builtin);
                             }
                             return ctx.Error(key_node, full, "unknown key");
                           });
  if (!has_name && !custom) {
    st = Combine(std::move(st), ctx.Error(v1, kind + "." + builtin, "required"));
  }
  if (custom) *v2 = YAML::Node(YAML::NodeType::Map);
  return st;
}

// The settings under `section` (trial, localConfig) that move to `out`.
template <size_t N>
Status MoveSection(const Context& ctx, const std::string& section, const YAML::Node& v1,
                   const Move (&table)[N], bool local, YAML::Node* out) {
  if (!v1.IsMap()) return ctx.Error(v1, section, "must be a map");
  return ForEachEntry(ctx, v1, section,
                      [&](const std::string& k, const std::string& full, const YAML::Node& key_node,
                          const YAML::Node& v) -> Status {
                        if (const Move* m = FindMove(table, k)) {
                          (*out)[std::string(m->v2)] = v;
                          return Status::Ok();
                        }
                        // Another platform's trial settings: its error says it.
                        if (!local) return Status::Ok();
                        if (section == "trial" && k == "nasMode") {
                          // NNI's v1 schema allows it for local; to_v2 does
                          // not carry it (logged as an error) and runs on.
                          ctx.Warn(key_node, full, "dropped, as NNI's converter drops it");
                          return Status::Ok();
                        }
                        return ctx.Error(key_node, full, "unknown key for the local platform");
                      });
}

}  // namespace

bool IsNniV1(const YAML::Node& root) { return root.IsMap() && !FirstV1Key(root).empty(); }

std::string V1KeyName(std::string_view key) {
  for (const Move& m : kTopLevel) {
    if (m.v2 == key) return std::string(m.v1);
  }
  for (const Move& m : kTrial) {
    if (m.v2 == key) return "trial." + std::string(m.v1);
  }
  constexpr std::string_view kService = "trainingService.";
  if (key.substr(0, kService.size()) == kService) {
    std::string_view rest = key.substr(kService.size());
    if (rest == "platform") return "trainingServicePlatform";
    for (const Move& m : kLocalConfig) {
      if (m.v2 == rest) return "localConfig." + std::string(m.v1);
    }
  }
  for (std::string_view kind : kAlgorithms) {
    if (key.substr(0, kind.size()) == kind && key.substr(kind.size()) == ".name") {
      return std::string(kind) + "." + BuiltinKey(kind);
    }
  }
  return std::string(key);
}

Status ConvertNniV1(const Context& ctx, const YAML::Node& v1, YAML::Node* v2) {
  *v2 = YAML::Node(YAML::NodeType::Map);
  YAML::Node service(YAML::NodeType::Map);
  bool local = true, has_platform = false, has_trial = false, has_command = false;
  bool has_concurrency = false, has_tuner = false, has_advisor = false, has_space = false;
  YAML::Node mark_of_platform;
  // The platform first: other keys are read knowing it.
  if (YAML::Node p = v1["trainingServicePlatform"]; p && !p.IsNull()) {
    has_platform = true;
    mark_of_platform = p;
    local = p.IsScalar() && p.Scalar() == "local";
  }
  Status st = ForEachEntry(
      ctx, v1, "",
      [&](const std::string& k, const std::string& key, const YAML::Node& key_node,
          const YAML::Node& v) -> Status {
        if (k == "trainingServicePlatform") {
          service["platform"] = v;
          if (local) return Status::Ok();
          return ctx.Error(v, key,
                           "unsupported platform '" + (v.IsScalar() ? v.Scalar() : "?") +
                               "': only local exists; use trainingServicePlatform: local "
                               "(workers of other machines attach to `tunehost serve`)");
        }
        if (const Move* m = FindMove(kTopLevel, k)) {
          if (k == "trialConcurrency") has_concurrency = true;
          // useAnnotation: true stands for the search space (and is refused
          // by the reader); false needs searchSpacePath, as in NNI.
          if (k == "searchSpacePath" ||
              (k == "useAnnotation" && v.IsScalar() && v.Scalar() != "false" &&
               v.Scalar() != "False")) {
            has_space = true;
          }
          (*v2)[std::string(m->v2)] = v;
          return Status::Ok();
        }
        if (Contains(kDropped, k)) {
          ctx.Warn(key_node, key, "dropped, as NNI's converter drops it");
          return Status::Ok();
        }
        if (k == "multiPhase") {
          if (v.IsScalar() && (v.Scalar() == "false" || v.Scalar() == "False")) {
            return Status::Ok();
          }
          return ctx.Error(v, key,
                           "multi-phase experiments are not supported (NNI 2 refuses "
                           "them too): remove multiPhase, each trial gets one configuration");
        }
        if (k == "trial") {
          has_trial = true;
          Status s = MoveSection(ctx, key, v, kTrial, local, v2);
          has_command = has_command || (v.IsMap() && v["command"] && !v["command"].IsNull());
          return s;
        }
        if (k == "localConfig") return MoveSection(ctx, key, v, kLocalConfig, true, &service);
        if (k == "tuner" || k == "assessor" || k == "advisor") {
          if (k == "tuner") has_tuner = true;
          if (k == "advisor") has_advisor = true;
          YAML::Node algorithm(YAML::NodeType::Map);
          Status s = ConvertAlgorithm(ctx, k, v, &algorithm);
          if (algorithm.size() != 0) (*v2)[k] = algorithm;
          return s;
        }
        if (Contains(kOtherPlatforms, k)) {
          if (!local) return Status::Ok();
          return ctx.Error(key_node, key,
                           "applies to another trainingServicePlatform than local: remove it");
        }
        if (Contains(kV2Only, k)) {
          return ctx.Error(key_node, key,
                           "NNI's v2 key in a file read as NNI's v1 format (it has " +
                               std::string(FirstV1Key(v1)) +
                               "): write the whole file in one format");
        }
        return ctx.Error(key_node, key, "unknown key (NNI's v1 format)");
      });
  // Another platform's error is the one above, not the v2 reader's too.
  if (has_platform && local) (*v2)["trainingService"] = service;
  auto problem = [&](const std::string& key, const std::string& what) {
    st = Combine(std::move(st), ctx.Error(YAML::Node(), key, what));
  };
  if (!has_platform) problem("trainingServicePlatform", "required in NNI's v1 format (local)");
  if (!has_trial) {
    problem("trial", "required in NNI's v1 format: {command, codeDir}");
  } else if (!has_command) {
    problem("trial.command", "required");
  }
  if (!has_concurrency) problem("trialConcurrency", "required");
  if (!has_tuner && !has_advisor) problem("tuner", "required (or advisor)");
  if (!has_space) problem("searchSpacePath", "required");
  ctx.Warn(mark_of_platform, "trainingServicePlatform",
           "NNI's v1 config format: read with the mapping NNI's own converter applies "
           "(trial.command is trialCommand, maxTrialNum maxTrialNumber, builtinTunerName "
           "tuner.name, ...)");
  return st;
}

}  // namespace tunehost::host::config_yaml
