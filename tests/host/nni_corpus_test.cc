// NNI config corpus: every file of tests/host/fixtures/nni_corpus/ (NNI's v2
// and v1 formats, every key NNI documents for local training) goes through
// LoadExperimentConfig, the reader `tunehost run` uses. The table says what
// each file must give: accepted, with its values where they belong and the
// keys warned about; or refused, with every problem naming its key and saying
// what to write instead. A file missing from the table fails the test too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "tunehost/host/experiment_config.h"
#include "tunehost/protocol/codec.h"

#ifndef TH_NNI_CORPUS_DIR
#error "TH_NNI_CORPUS_DIR must name tests/host/fixtures/nni_corpus"
#endif

namespace tunehost::host {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(TH_NNI_CORPUS_DIR).lexically_normal();
// What the corpus files point to (search spaces, a trial code directory);
// the only entry of the directory that is not a corpus file.
constexpr char kSupport[] = "support";

fs::path Support(const char* rest) { return kCorpus / kSupport / rest; }

std::string Json(const protocol::Packed& packed) { return protocol::PackedToJson(packed); }

// One problem the reader reports: `key` is named, `says` is part of its text
// (what to do instead, or the rule broken).
struct Problem {
  std::string key, says;
};

using Check = void (*)(const ExperimentConfig& c);

struct Entry {
  std::string file;
  bool accepted;
  Check check;                      // accepted: where the values landed
  std::vector<std::string> warned;  // accepted: the keys warned about
  std::vector<Problem> problems;    // refused: every problem, one per line
};

// gtest names a failing entry by its file.
void PrintTo(const Entry& e, std::ostream* os) { *os << e.file; }

Entry Accepts(std::string file, std::vector<std::string> warned, Check check) {
  return {std::move(file), true, check, std::move(warned), {}};
}

Entry Refuses(std::string file, std::vector<Problem> problems) {
  return {std::move(file), false, nullptr, {}, std::move(problems)};
}

const char kSpaceJson[] = R"({"batch_size":{"_type":"choice","_value":[16,32,64]},)"
                          R"("lr":{"_type":"loguniform","_value":[0.0001,0.1]}})";

// The expected outcome of every corpus file. Keys of NNI's v2
// ExperimentConfig (nni/experiment/config/experiment_config.py), LocalConfig
// (training_services/local.py, training_service.py), AlgorithmConfig
// (algorithm.py) and SharedStorageConfig (shared_storage.py); of v1's schema
// (nni/tools/nnictl/config_schema.py, local platform) as to_v2
// (nni/experiment/config/convert.py) converts them.
const std::vector<Entry>& Table() {
  static const std::vector<Entry> table = {
      // ---- v2: accepted ----
      Accepts("v2_docs_local_mode.yml", {"trainingService.useActiveGpu"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.name, "MNIST");
                EXPECT_EQ(Json(c.search_space), kSpaceJson);
                EXPECT_EQ(c.trial_command, "python mnist.py");
                EXPECT_EQ(c.trial_code_dir, Support("code"));
                EXPECT_EQ(c.gpus.per_trial, 1u);
                EXPECT_EQ(c.spec.concurrency, 2u);
                EXPECT_DOUBLE_EQ(c.spec.max_duration_s, 24 * 3600);
                EXPECT_EQ(c.spec.max_trials, 100u);
                EXPECT_EQ(c.spec.tuner.name, "TPE");
                EXPECT_EQ(Json(c.spec.tuner.args), R"({"optimize_mode":"maximize"})");
                EXPECT_FALSE(c.spec.assessor);
              }),
      Accepts("v2_docs_inline_search_space.yml", {"trainingService.useActiveGpu"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(Json(c.search_space),
                          R"({"batch_size":{"_type":"choice","_value":[16,32,64]},)"
                          R"("learning_rate":{"_type":"loguniform","_value":[0.0001,0.1]}})");
                EXPECT_EQ(c.trial_code_dir, kCorpus);  // NNI's default "."
                EXPECT_EQ(c.spec.max_trials, 0u);
                EXPECT_EQ(c.spec.max_duration_s, 0.0);
                EXPECT_EQ(c.working_dir, DefaultWorkingDir());
              }),
      Accepts("v2_search_space_yaml_file.yml", {},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(Json(c.search_space),
                          R"({"momentum":{"_type":"uniform","_value":[0,0.99]}})");
                EXPECT_EQ(c.spec.tuner.name, "Anneal");
                EXPECT_EQ(Json(c.spec.tuner.args), R"({"optimize_mode":"minimize"})");
                ASSERT_TRUE(c.spec.assessor);
                EXPECT_EQ(c.spec.assessor->name, "Medianstop");
                EXPECT_EQ(Json(c.spec.assessor->args),
                          R"({"optimize_mode":"minimize","start_step":5})");
              }),
      Accepts("v2_runtime_keys.yml",
              {"maxTrialDuration", "nniManagerIp", "debug", "logLevel", "tunerGpuIndices"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.name, "runtime-keys");
                EXPECT_EQ(c.working_dir, Support("runs"));
                EXPECT_EQ(c.spec.concurrency, 3u);
                EXPECT_EQ(c.spec.tuner.name, "Random");
                EXPECT_EQ(Json(c.spec.tuner.args), "{}");
              }),
      Accepts("v2_advisor.yml", {},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.spec.tuner.name, "Hyperband");
                EXPECT_EQ(Json(c.spec.tuner.args),
                          R"({"optimize_mode":"maximize","R":60,"eta":3})");
                EXPECT_FALSE(c.spec.assessor);
                EXPECT_EQ(c.spec.max_trials, 30u);
                EXPECT_EQ(c.spec.concurrency, 4u);
              }),
      Accepts("v2_local_gpu_keys.yml",
              {"trainingService.useActiveGpu", "trainingService.reuseMode"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.gpus.per_trial, 2u);
                EXPECT_EQ(c.gpus.indices, (std::vector<int>{0, 2}));
                EXPECT_EQ(c.gpus.max_trials_per_gpu, 2u);
              }),
      Accepts("v2_gpu_indices_forms.yml", {"tunerGpuIndices", "trainingService.useActiveGpu"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.gpus.per_trial, 1u);
                EXPECT_EQ(c.gpus.indices, std::vector<int>{3});
                EXPECT_EQ(c.gpus.max_trials_per_gpu, 1u);
              }),
      Accepts(
          "v2_service_trial_keys.yml",
          {"trainingService.useActiveGpu", "trainingService.nniManagerIp", "trainingService.debug"},
          [](const ExperimentConfig& c) {
            EXPECT_EQ(c.trial_command, "python3 service_trial.py");
            EXPECT_EQ(c.trial_code_dir, Support("code"));
            EXPECT_EQ(c.gpus.per_trial, 1u);
            EXPECT_EQ(c.gpus.indices, (std::vector<int>{0, 1}));
          }),
      Accepts("v2_service_keys_win.yml", {"trainingService.useActiveGpu"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.trial_command, "python3 service.py");
                EXPECT_EQ(c.trial_code_dir, Support("code"));
                EXPECT_EQ(c.gpus.per_trial, 1u);
              }),
      Accepts("v2_null_values.yml", {},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.name, "");
                EXPECT_EQ(c.spec.max_trials, 0u);
                EXPECT_EQ(c.spec.max_duration_s, 0.0);
                EXPECT_FALSE(c.spec.assessor);
                EXPECT_EQ(c.spec.tuner.name, "TPE");
                EXPECT_FALSE(c.gpus.indices);
              }),
      // ---- v2: refused ----
      Refuses("v2_custom_tuner_class.yml", {{"tuner.className", "give tuner.name instead"}}),
      Refuses("v2_custom_assessor_class.yml",
              {{"assessor.codeDirectory", "give assessor.name instead"}}),
      Refuses("v2_custom_advisor_class.yml", {{"advisor.className", "give advisor.name instead"}}),
      Refuses("v2_shared_storage_nfs.yml", {{"sharedStorage", "remove sharedStorage"}}),
      Refuses("v2_shared_storage_azureblob.yml", {{"sharedStorage", "remove sharedStorage"}}),
      Refuses("v2_use_annotation.yml",
              {{"useAnnotation", "in searchSpace or searchSpaceFile and remove useAnnotation"},
               {"searchSpace", "required (or searchSpaceFile)"}}),
      Refuses("v2_experiment_type_nas.yml", {{"experimentType", "remove experimentType"}}),
      Refuses("v2_hybrid_training_services.yml",
              {{"trainingService", "write trainingService: {platform: local}"}}),
      Refuses("v2_remote_platform.yml", {{"trainingService.platform", "use platform: local"}}),
      Refuses("v2_with_v1_key.yml",
              {{"searchSpaceFile", "(it has authorName): write the whole file in one format"},
               {"trialCommand", "write the whole file in one format"},
               {"trainingService", "write the whole file in one format"},
               {"tuner.name", "write builtinTunerName"},
               {"trainingServicePlatform", "required"},
               {"trial", "required"},
               {"searchSpacePath", "required"}}),
      // ---- v1: accepted ----
      Accepts("v1_mnist_example.yml", {"authorName", "trainingServicePlatform"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.name, "example_mnist");
                EXPECT_EQ(c.spec.concurrency, 1u);
                EXPECT_DOUBLE_EQ(c.spec.max_duration_s, 3600);
                EXPECT_EQ(c.spec.max_trials, 10u);
                EXPECT_EQ(Json(c.search_space), kSpaceJson);
                EXPECT_EQ(c.trial_command, "python3 mnist.py");
                EXPECT_EQ(c.trial_code_dir, Support("code"));
                EXPECT_EQ(c.gpus.per_trial, 0u);
                EXPECT_EQ(c.spec.tuner.name, "TPE");
                EXPECT_EQ(Json(c.spec.tuner.args), R"({"optimize_mode":"maximize"})");
                EXPECT_FALSE(c.spec.assessor);
              }),
      Accepts("v1_top_level_keys.yml",
              {"authorName", "description", "multiThread", "versionCheck", "logCollection",
               "trainingServicePlatform", "maxTrialDuration", "nniManagerIp", "debug", "logLevel"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.name, "every-top-level-key");
                EXPECT_EQ(c.spec.concurrency, 2u);
                EXPECT_DOUBLE_EQ(c.spec.max_duration_s, 2 * 86400);
                EXPECT_EQ(c.spec.max_trials, 99999u);
                EXPECT_EQ(c.working_dir, Support("logs"));  // logDir
                EXPECT_EQ(c.trial_command, "python3 trial.py");
                EXPECT_TRUE(fs::equivalent(c.trial_code_dir, kCorpus)) << c.trial_code_dir;  // "."
                EXPECT_EQ(c.spec.tuner.name, "Evolution");
                EXPECT_EQ(Json(c.spec.tuner.args),
                          R"({"optimize_mode":"maximize","population_size":8})");
              }),
      Accepts("v1_tuner_and_assessor_keys.yml",
              {"authorName", "tuner.gpuIndices", "tuner.includeIntermediateResults",
               "trainingServicePlatform"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.spec.tuner.name, "TPE");
                EXPECT_EQ(Json(c.spec.tuner.args), R"({"optimize_mode":"minimize"})");
                ASSERT_TRUE(c.spec.assessor);
                EXPECT_EQ(c.spec.assessor->name, "Curvefitting");
                EXPECT_EQ(Json(c.spec.assessor->args), R"({"epoch_num":20,"threshold":0.9})");
                EXPECT_EQ(c.spec.max_trials, 20u);
              }),
      Accepts("v1_advisor.yml", {"authorName", "advisor.gpuIndices", "trainingServicePlatform"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.spec.tuner.name, "BOHB");
                EXPECT_EQ(Json(c.spec.tuner.args),
                          R"({"optimize_mode":"maximize","min_budget":1,"max_budget":27,"eta":3})");
                EXPECT_FALSE(c.spec.assessor);
                EXPECT_DOUBLE_EQ(c.spec.max_duration_s, 1800);
                EXPECT_EQ(c.spec.concurrency, 3u);
              }),
      Accepts("v1_local_config.yml",
              {"authorName", "trainingServicePlatform", "localConfig.useActiveGpu"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.gpus.per_trial, 1u);
                EXPECT_EQ(c.gpus.indices, (std::vector<int>{1, 3}));
                EXPECT_EQ(c.gpus.max_trials_per_gpu, 2u);
                EXPECT_EQ(c.spec.tuner.name, "Random");
                EXPECT_EQ(c.spec.concurrency, 4u);
              }),
      Accepts("v1_trial_nas_mode.yml", {"authorName", "trial.nasMode", "trainingServicePlatform"},
              [](const ExperimentConfig& c) {
                EXPECT_EQ(c.trial_command, "python3 trial.py");
                EXPECT_EQ(c.spec.tuner.name, "TPE");
              }),
      // ---- v1: refused ----
      Refuses("v1_custom_tuner_class.yml",
              {{"tuner.codeDir", "give tuner.builtinTunerName instead"}}),
      Refuses("v1_custom_assessor_class.yml",
              {{"assessor.codeDir", "give assessor.builtinAssessorName instead"}}),
      Refuses("v1_custom_advisor_class.yml",
              {{"advisor.codeDir", "give advisor.builtinAdvisorName instead"}}),
      Refuses("v1_multi_phase.yml", {{"multiPhase", "remove multiPhase"}}),
      Refuses("v1_use_annotation.yml",
              {{"useAnnotation", "in a file named by searchSpacePath and remove useAnnotation"}}),
      Refuses("v1_no_search_space.yml", {{"searchSpacePath", "required"}}),
      Refuses("v1_shared_storage.yml", {{"sharedStorage", "remove sharedStorage"}}),
      Refuses("v1_remote_platform.yml",
              {{"trainingServicePlatform", "use trainingServicePlatform: local"}}),
      Refuses("v1_other_platform_section.yml", {{"paiConfig", "remove it"}}),
      Refuses("v1_bad_values.yml", {{"maxExecDuration", "must be a positive duration"},
                                    {"maxTrialNum", "must be at least 1"},
                                    {"trial.gpuNum", "must be at least 0"},
                                    {"localConfig.maxTrialNumPerGpu", "must be at least 1"},
                                    {"tuner.builtinTunerName", "must not be empty"}}),
  };
  return table;
}

// The lines of a message, or warnings, as (key, text): each line is
// "<file>:<line>:<col>: <key>: <text>".
std::vector<Problem> Split(const fs::path& file, const std::vector<std::string>& lines) {
  std::vector<Problem> out;
  const std::string prefix = file.string();
  for (const std::string& line : lines) {
    Problem p;
    size_t at = line.rfind(prefix, 0) == 0 ? prefix.size() : std::string::npos;
    // ":<line>:<col>", absent when no position is known
    while (at != std::string::npos && at < line.size() && line[at] == ':' && at + 1 < line.size() &&
           std::isdigit(static_cast<unsigned char>(line[at + 1]))) {
      at = line.find_first_not_of("0123456789", at + 1);
    }
    if (at == std::string::npos || line.compare(at, 2, ": ") != 0) {
      ADD_FAILURE() << "not \"<file>:<line>:<col>: <key>: <text>\": " << line;
      continue;
    }
    size_t key_end = line.find(": ", at + 2);
    if (key_end == std::string::npos) {
      ADD_FAILURE() << "no key in: " << line;
      continue;
    }
    p.key = line.substr(at + 2, key_end - at - 2);
    p.says = line.substr(key_end + 2);
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::vector<std::string> SortedKeys(const std::vector<Problem>& problems) {
  std::vector<std::string> keys;
  for (const Problem& p : problems) keys.push_back(p.key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += "  " + l + "\n";
  return all;
}

class NniCorpusTest : public ::testing::TestWithParam<Entry> {};

TEST_P(NniCorpusTest, FileHasItsOutcome) {
  const Entry& e = GetParam();
  const fs::path file = kCorpus / e.file;
  ExperimentConfig config;
  Status st = LoadExperimentConfig(file, &config);
  if (e.accepted) {
    ASSERT_OK(st);
    std::vector<std::string> want = e.warned;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(SortedKeys(Split(file, config.warnings)), want)
        << "the keys warned about changed; warnings:\n"
        << Joined(config.warnings);
    e.check(config);
    return;
  }
  ASSERT_FALSE(st.ok()) << "accepted; warnings:\n" << Joined(config.warnings);
  EXPECT_EQ(st.code(), Status::Code::kBadField) << st.ToString();
  const std::vector<Problem> got = Split(file, SplitLines(st.message()));
  EXPECT_EQ(SortedKeys(got), SortedKeys(e.problems)) << "the problems reported changed:\n"
                                                     << st.message();
  for (const Problem& want : e.problems) {
    bool found = std::any_of(got.begin(), got.end(), [&](const Problem& p) {
      return p.key == want.key && p.says.find(want.says) != std::string::npos;
    });
    EXPECT_TRUE(found) << "no problem for " << want.key << " saying \"" << want.says << "\" in:\n"
                       << st.message();
  }
}

std::string EntryName(const ::testing::TestParamInfo<Entry>& info) {
  std::string name = info.param.file.substr(0, info.param.file.rfind('.'));
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Corpus, NniCorpusTest, ::testing::ValuesIn(Table()), EntryName);

TEST(NniCorpusTableTest, EveryCorpusFileIsInTheTableAndEveryRowIsAFile) {
  std::set<std::string> listed;
  for (const Entry& e : Table()) {
    EXPECT_TRUE(listed.insert(e.file).second) << e.file << " is in the table twice";
    EXPECT_TRUE(fs::is_regular_file(kCorpus / e.file)) << e.file << " is in the table, not on disk";
  }
  size_t files = 0;
  for (const fs::directory_entry& d : fs::directory_iterator(kCorpus)) {
    const std::string name = d.path().filename().string();
    if (name == kSupport && d.is_directory()) continue;
    ++files;
    EXPECT_TRUE(listed.count(name) == 1)
        << name << " is in " << kCorpus << " but not in the table: write down its outcome";
  }
  EXPECT_EQ(files, listed.size());
  EXPECT_TRUE(fs::is_directory(kCorpus / kSupport));
}

}  // namespace
}  // namespace tunehost::host
