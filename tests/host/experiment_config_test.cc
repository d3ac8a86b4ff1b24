// Experiment file reader: NNI-style configs, value types after the YAML ->
// MessagePack conversion, path resolution, durations, and error positions.
#include "tunehost/host/experiment_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <msgpack.hpp>
#include <string>

#include "test_util.h"

namespace tunehost::host {
namespace {

namespace fs = std::filesystem;

// A MessagePack value as text that keeps the types apart: ints bare, floats
// with an "f" suffix, strings quoted, maps and arrays in wire order.
std::string Describe(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return "null";
    case msgpack::type::BOOLEAN:
      return o.via.boolean ? "true" : "false";
    case msgpack::type::POSITIVE_INTEGER:
      return std::to_string(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER:
      return std::to_string(o.via.i64);
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%gf", o.via.f64);
      return buf;
    }
    case msgpack::type::STR:
      return "\"" + std::string(o.via.str.ptr, o.via.str.size) + "\"";
    case msgpack::type::ARRAY: {
      std::string s = "[";
      for (uint32_t i = 0; i < o.via.array.size; ++i) {
        if (i) s += ",";
        s += Describe(o.via.array.ptr[i]);
      }
      return s + "]";
    }
    case msgpack::type::MAP: {
      std::string s = "{";
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        if (i) s += ",";
        s += Describe(o.via.map.ptr[i].key) + ":" + Describe(o.via.map.ptr[i].val);
      }
      return s + "}";
    }
    default:
      return "?";
  }
}

std::string Describe(const protocol::Packed& packed) {
  msgpack::object_handle oh = msgpack::unpack(packed.data(), packed.size());
  return Describe(oh.get());
}

class ExperimentConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tunehost-config-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path Write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }

  // Parses `text` as <dir>/experiment.yaml and returns the status.
  Status Parse(const std::string& text) {
    return LoadExperimentConfig(Write("experiment.yaml", text), &config_);
  }

  // Expects a BadField error "<file>:<line>:<col>: <key>: ..." containing `problem`.
  void ExpectError(const std::string& text, int line, int col, const std::string& key,
                   const std::string& problem) {
    Status st = Parse(text);
    ASSERT_FALSE(st.ok()) << text;
    EXPECT_EQ(st.code(), Status::Code::kBadField) << st.ToString();
    std::string prefix = (dir_ / "experiment.yaml").string() + ":" + std::to_string(line) + ":" +
                         std::to_string(col) + ": " + key + ": ";
    EXPECT_EQ(st.message().rfind(prefix, 0), 0u) << st.message() << "\nwanted prefix: " << prefix;
    EXPECT_NE(st.message().find(problem), std::string::npos) << st.message();
  }

  fs::path dir_;
  ExperimentConfig config_;
};

constexpr char kMinimal[] =
    "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
    "trialCommand: python3 trial.py\n"
    "trialConcurrency: 2\n"
    "tuner: {name: random}\n";

TEST_F(ExperimentConfigTest, FullNniConfigParsesToSpec) {
  fs::create_directories(dir_ / "code");
  ASSERT_OK(Parse(R"(# NNI v2 config
experimentName: mnist
searchSpace:
  lr:
    _type: loguniform
    _value: [0.0001, 0.1]
  layers: {_type: randint, _value: [1, 6]}
  optimizer:
    _type: choice
    _value: [sgd, "adam", '1', 2, 2.5, true, null]
trialCommand: python3 mnist.py --epochs 3
trialCodeDirectory: code
trialConcurrency: 4
trialGpuNumber: 0
maxTrialNumber: 24
maxExperimentDuration: 10m
tuner:
  name: tpe
  classArgs:
    optimize_mode: minimize
    seed: 7
    gamma: 0.25
    constant_liar: false
    n_startup: -3
    big: 18446744073709551615
    tag: "42"
    nothing: ~
assessor:
  name: medianstop
  classArgs: {optimize_mode: minimize, start_step: 3}
trainingService:
  platform: local
experimentWorkingDirectory: runs
tunehost:
  heartbeatIntervalMs: 250
  ackTimeoutMs: 1500
  maxMessageBytes: 65536
  maxResultBytes: 32768
)"));
  EXPECT_EQ(config_.name, "mnist");
  EXPECT_EQ(config_.trial_command, "python3 mnist.py --epochs 3");
  EXPECT_EQ(config_.trial_code_dir, dir_ / "code");
  EXPECT_EQ(config_.working_dir, dir_ / "runs");
  EXPECT_EQ(config_.source_file, dir_ / "experiment.yaml");
  EXPECT_EQ(config_.spec.concurrency, 4u);
  EXPECT_EQ(config_.spec.max_trials, 24u);
  EXPECT_DOUBLE_EQ(config_.spec.max_duration_s, 600.0);
  EXPECT_EQ(config_.spec.tuner.name, "tpe");
  EXPECT_EQ(Describe(config_.spec.tuner.args),
            "{\"optimize_mode\":\"minimize\",\"seed\":7,\"gamma\":0.25f,\"constant_liar\":false,"
            "\"n_startup\":-3,\"big\":18446744073709551615,\"tag\":\"42\",\"nothing\":null}");
  ASSERT_TRUE(config_.spec.assessor.has_value());
  EXPECT_EQ(config_.spec.assessor->name, "medianstop");
  EXPECT_EQ(Describe(config_.spec.assessor->args),
            "{\"optimize_mode\":\"minimize\",\"start_step\":3}");
  EXPECT_EQ(Describe(config_.search_space),
            "{\"lr\":{\"_type\":\"loguniform\",\"_value\":[0.0001f,0.1f]},"
            "\"layers\":{\"_type\":\"randint\",\"_value\":[1,6]},"
            "\"optimizer\":{\"_type\":\"choice\",\"_value\":[\"sgd\",\"adam\",\"1\",2,2.5f,true,"
            "null]}}");
  ASSERT_TRUE(config_.timing.heartbeat_interval.has_value());
  EXPECT_EQ(config_.timing.heartbeat_interval->count(), 250);
  EXPECT_EQ(config_.timing.ack_timeout->count(), 1500);
  EXPECT_EQ(*config_.timing.max_message_bytes, 65536u);
  EXPECT_EQ(*config_.timing.max_result_bytes, 32768u);
  EXPECT_TRUE(config_.warnings.empty());
  // NNI ids: 8 characters from [a-z0-9].
  ASSERT_EQ(config_.spec.id.size(), 8u);
  for (char c : config_.spec.id) EXPECT_TRUE(std::isdigit(c) || std::islower(c)) << c;
}

TEST_F(ExperimentConfigTest, DefaultsWhenOptionalKeysAreAbsent) {
  ASSERT_OK(Parse(kMinimal));
  EXPECT_TRUE(fs::equivalent(config_.trial_code_dir, dir_)) << config_.trial_code_dir;
  EXPECT_EQ(config_.spec.max_trials, 0u);
  EXPECT_EQ(config_.spec.max_duration_s, 0.0);
  EXPECT_FALSE(config_.spec.assessor.has_value());
  EXPECT_EQ(config_.spec.tuner.args, std::string(1, '\x80'));  // empty map
  EXPECT_EQ(config_.working_dir.filename(), "tunehost-experiments");
  EXPECT_TRUE(config_.working_dir.is_absolute());
  EXPECT_FALSE(config_.timing.heartbeat_interval.has_value());
  ExperimentConfig other;
  ASSERT_OK(LoadExperimentConfig(dir_ / "experiment.yaml", &other));
  EXPECT_NE(other.spec.id, config_.spec.id);
}

TEST_F(ExperimentConfigTest, NullValueCountsAsAbsent) {
  ASSERT_OK(Parse(std::string(kMinimal) + "maxTrialNumber: null\nassessor:\n"));
  EXPECT_EQ(config_.spec.max_trials, 0u);
  EXPECT_FALSE(config_.spec.assessor.has_value());
}

TEST_F(ExperimentConfigTest, SearchSpaceFileIsRelativeToTheYamlFile) {
  Write(
      "spaces/space.json",
      R"({"x": {"_type": "quniform", "_value": [0, 10, 2.5]}, "c": {"_type": "choice", "_value": ["a", 1]}})");
  fs::path yaml = Write("conf/experiment.yaml",
                        "searchSpaceFile: ../spaces/space.json\n"
                        "trialCommand: ./run.sh\n"
                        "trialConcurrency: 1\n"
                        "tuner: {name: random}\n");
  ASSERT_OK(LoadExperimentConfig(yaml, &config_));
  EXPECT_EQ(Describe(config_.search_space),
            "{\"x\":{\"_type\":\"quniform\",\"_value\":[0,10,2.5f]},"
            "\"c\":{\"_type\":\"choice\",\"_value\":[\"a\",1]}}");
  EXPECT_EQ(config_.trial_code_dir, dir_ / "conf");

  Write("conf/space.yml", "y:\n  _type: choice\n  _value: [1, '2', x]\n");
  fs::path yaml2 = Write("conf/experiment2.yaml",
                         "searchSpaceFile: space.yml\n"
                         "trialCommand: ./run.sh\n"
                         "trialConcurrency: 1\n"
                         "tuner: {name: random}\n");
  ASSERT_OK(LoadExperimentConfig(yaml2, &config_));
  EXPECT_EQ(Describe(config_.search_space),
            "{\"y\":{\"_type\":\"choice\",\"_value\":[1,\"2\",\"x\"]}}");
}

TEST_F(ExperimentConfigTest, SearchSpaceFileErrors) {
  ExpectError(
      "searchSpaceFile: missing.json\ntrialCommand: x\ntrialConcurrency: 1\ntuner: {name: r}\n", 1,
      18, "searchSpaceFile", "cannot read");
  Write("list.yaml", "- 1\n- 2\n");
  ExpectError(
      "searchSpaceFile: list.yaml\ntrialCommand: x\ntrialConcurrency: 1\ntuner: {name: r}\n", 1, 18,
      "searchSpaceFile", "must be a map");
  ExpectError(std::string(kMinimal) + "searchSpaceFile: list.yaml\n", 5, 18, "searchSpaceFile",
              "not both");
}

TEST_F(ExperimentConfigTest, Durations) {
  struct Case {
    const char* text;
    double seconds;
  } cases[] = {{"90s", 90}, {"10m", 600},   {"2h", 7200},      {"1d", 86400}, {"1.5h", 5400},
               {"90", 90},  {"30 sec", 30}, {"2 hours", 7200}, {"0.5", 0.5},  {"3D", 259200}};
  for (const Case& c : cases) {
    double s = 0;
    EXPECT_TRUE(ParseDuration(c.text, &s)) << c.text;
    EXPECT_DOUBLE_EQ(s, c.seconds) << c.text;
  }
  for (const char* bad : {"", "m", "10x", "-5s", "0", "0s", "1h30m", "ten minutes", ".s"}) {
    double s = -1;
    EXPECT_FALSE(ParseDuration(bad, &s)) << bad;
  }
  ASSERT_OK(Parse(std::string(kMinimal) + "maxExperimentDuration: 1d\n"));
  EXPECT_DOUBLE_EQ(config_.spec.max_duration_s, 86400.0);
  ASSERT_OK(Parse(std::string(kMinimal) + "maxExperimentDuration: 45\n"));
  EXPECT_DOUBLE_EQ(config_.spec.max_duration_s, 45.0);
  ASSERT_OK(Parse(std::string(kMinimal) + "maxExperimentDuration: 2.5\n"));
  EXPECT_DOUBLE_EQ(config_.spec.max_duration_s, 2.5);
}

TEST_F(ExperimentConfigTest, MissingRequiredKeysAreNamed) {
  ExpectError(
      "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
      "trialConcurrency: 1\ntuner: {name: random}\n",
      1, 1, "trialCommand", "required");
  ExpectError("searchSpace: {}\ntrialCommand: x\ntuner: {name: random}\n", 1, 1, "trialConcurrency",
              "required");
  ExpectError("searchSpace: {}\ntrialCommand: x\ntrialConcurrency: 1\n", 1, 1, "tuner", "required");
  ExpectError("trialCommand: x\ntrialConcurrency: 1\ntuner: {name: random}\n", 1, 1, "searchSpace",
              "required");
  ExpectError(
      "searchSpace: {}\ntrialCommand: x\ntrialConcurrency: 1\n"
      "tuner:\n  classArgs: {seed: 1}\n",
      5, 3, "tuner.name", "required");
}

TEST_F(ExperimentConfigTest, BadValuesNameFileLineAndKey) {
  ExpectError("searchSpace: {}\ntrialCommand: x\ntrialConcurrency: 0\ntuner: {name: random}\n", 3,
              19, "trialConcurrency", "at least 1");
  ExpectError("searchSpace: {}\ntrialCommand: x\ntrialConcurrency: 4294967295\ntuner: {name: random}\n",
              3, 19, "trialConcurrency", "at most 100000");
  ExpectError("searchSpace: {}\ntrialCommand: x\ntrialConcurrency: two\ntuner: {name: random}\n", 3,
              19, "trialConcurrency", "must be an integer");
  ExpectError("searchSpace: {}\ntrialCommand: x\ntrialConcurrency: '2'\ntuner: {name: random}\n", 3,
              19, "trialConcurrency", "must be an integer");
  ExpectError("searchSpace: {}\ntrialCommand: x\ntrialConcurrency: 1.5\ntuner: {name: random}\n", 3,
              19, "trialConcurrency", "must be an integer");
  ExpectError(std::string(kMinimal) + "maxTrialNumber: -1\n", 5, 17, "maxTrialNumber",
              "at least 1");
  ExpectError(std::string(kMinimal) + "maxExperimentDuration: 10 parsecs\n", 5, 24,
              "maxExperimentDuration", "duration");
  ExpectError(std::string(kMinimal) + "maxExperimentDuration: -3\n", 5, 24, "maxExperimentDuration",
              "duration");
  ExpectError(std::string(kMinimal) + "trialCodeDirectory: nowhere\n", 5, 21, "trialCodeDirectory",
              "not a directory");
  ExpectError("searchSpace: [1, 2]\ntrialCommand: x\ntrialConcurrency: 1\ntuner: {name: r}\n", 1,
              14, "searchSpace", "must be a map");
  ExpectError(std::string(kMinimal) + "tunehost: {heartbeatIntervalMs: 0}\n", 5, 33,
              "tunehost.heartbeatIntervalMs", "at least 1");
  ExpectError(std::string(kMinimal) + "maxTrialNumber: 99999999999999999999\n", 5, 17,
              "maxTrialNumber", "at most");
}

TEST_F(ExperimentConfigTest, UnknownKeysAreErrors) {
  ExpectError(std::string(kMinimal) + "trialConcurency: 3\n", 5, 1, "trialConcurency",
              "unknown key");
  ExpectError(std::string(kMinimal) + "assessor:\n  name: medianstop\n  clasArgs: {}\n", 7, 3,
              "assessor.clasArgs", "unknown key");
  ExpectError(std::string(kMinimal) + "tunehost: {heartbeat: 5}\n", 5, 12, "tunehost.heartbeat",
              "unknown key");
  ExpectError(std::string(kMinimal) + "trainingService: {platform: local, foo: 1}\n", 5, 36,
              "trainingService.foo", "unknown key");
  ExpectError(std::string(kMinimal) + "trialCommand: y\n", 5, 1, "trialCommand", "duplicate key");
}

TEST_F(ExperimentConfigTest, UnsupportedNniFeaturesAreRefused) {
  ExpectError(std::string(kMinimal) + "trainingService:\n  platform: remote\n", 6, 13,
              "trainingService.platform", "only local");
  ExpectError(std::string(kMinimal) + "trainingService:\n  - platform: local\n", 6, 3,
              "trainingService", "only local");
  ExpectError(std::string(kMinimal) + "useAnnotation: true\n", 5, 16, "useAnnotation",
              "not supported");
  ExpectError(std::string(kMinimal) + "advisor: {name: hyperband}\n", 5, 1, "advisor",
              "either advisor, or tuner");
  ExpectError(
      "searchSpace: {}\ntrialCommand: x\ntrialConcurrency: 1\n"
      "tuner: {className: my.Tuner, codeDirectory: .}\n",
      4, 9, "tuner.className", "not supported");
}

TEST_F(ExperimentConfigTest, IgnoredNniKeysAreWarned) {
  ASSERT_OK(Parse(std::string(kMinimal) +
                  "nniManagerIp: 10.0.0.1\ndebug: true\nmaxTrialDuration: 1h\n"
                  "trainingService: {platform: local, useActiveGpu: false}\n"));
  ASSERT_EQ(config_.warnings.size(), 4u);
  std::string file = (dir_ / "experiment.yaml").string();
  EXPECT_EQ(config_.warnings[0].rfind(file + ":5:1: nniManagerIp: ", 0), 0u) << config_.warnings[0];
  EXPECT_EQ(config_.warnings[2].rfind(file + ":7:1: maxTrialDuration: ", 0), 0u)
      << config_.warnings[2];
  EXPECT_EQ(config_.warnings[3].rfind(file + ":8:36: trainingService.useActiveGpu: ", 0), 0u)
      << config_.warnings[3];
}

TEST_F(ExperimentConfigTest, GpuKeysOfNnisLocalTrainingServiceAreRead) {
  ASSERT_OK(Parse(std::string(kMinimal) + "trialGpuNumber: 2\n"
                  "trainingService: {platform: local, gpuIndices: \"3, 1,0\", "
                  "maxTrialNumberPerGpu: 2}\n"));
  EXPECT_EQ(config_.gpus.per_trial, 2u);
  ASSERT_TRUE(config_.gpus.indices);
  EXPECT_EQ(*config_.gpus.indices, (std::vector<int>{3, 1, 0}));
  EXPECT_EQ(config_.gpus.max_trials_per_gpu, 2u);
  ASSERT_OK(Parse(std::string(kMinimal) + "trainingService: {platform: local, gpuIndices: [2]}\n"));
  EXPECT_EQ(*config_.gpus.indices, std::vector<int>{2});
  EXPECT_EQ(config_.gpus.per_trial, 0u);
  ASSERT_OK(Parse(std::string(kMinimal) + "trainingService: {platform: local, gpuIndices: 5}\n"));
  EXPECT_EQ(*config_.gpus.indices, std::vector<int>{5});
  ASSERT_OK(Parse(std::string(kMinimal) + "trialGpuNumber: 1\n"));
  EXPECT_FALSE(config_.gpus.indices) << "absent: every GPU found";
  ExpectError(std::string(kMinimal) + "trainingService: {platform: local, gpuIndices: \"0,x\"}\n",
              5, 48, "trainingService.gpuIndices", "'x' is not a GPU index");
  ExpectError(std::string(kMinimal) + "trainingService: {platform: local, gpuIndices: [1, 1]}\n",
              5, 48, "trainingService.gpuIndices", "listed twice");
  ExpectError(std::string(kMinimal) + "trainingService: {platform: local, gpuIndices: \"\"}\n",
              5, 48, "trainingService.gpuIndices", "lists no GPU");
  ExpectError(std::string(kMinimal) + "trialGpuNumber: -1\n", 5, 17, "trialGpuNumber",
              "at least 0");
  ExpectError(std::string(kMinimal) +
                  "trainingService: {platform: local, maxTrialNumberPerGpu: 0}\n",
              5, 58, "trainingService.maxTrialNumberPerGpu", "at least 1");
}

TEST_F(ExperimentConfigTest, InvalidYamlAndMissingFile) {
  Status st = Parse("searchSpace: {x: [1, 2}\n");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kBadField);
  EXPECT_EQ(st.message().rfind((dir_ / "experiment.yaml").string() + ":1:", 0), 0u) << st.message();
  st = LoadExperimentConfig(dir_ / "nope.yaml", &config_);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_NE(st.message().find("nope.yaml"), std::string::npos);
  ExpectError("- a\n- b\n", 1, 1, "experiment", "map");
}

}  // namespace
}  // namespace tunehost::host

namespace tunehost::host {
namespace {

// NNI's advisors (Hyperband, BOHB) are tuner plugins here: `advisor:` names
// the experiment's tuner, as NNI's config allows it instead of a tuner.
TEST_F(ExperimentConfigTest, ConsecutiveFailuresLimitIsOffUnlessGiven) {
  ASSERT_OK(Parse(kMinimal));
  EXPECT_FALSE(config_.timing.max_consecutive_failures.has_value());
  ASSERT_OK(Parse(std::string(kMinimal) + "tunehost: {maxConsecutiveFailures: 3}\n"));
  EXPECT_EQ(config_.timing.max_consecutive_failures, 3u);
  ExpectError(std::string(kMinimal) + "tunehost: {maxConsecutiveFailures: 0}\n", 5, 36,
              "tunehost.maxConsecutiveFailures", "at least 1");
}

TEST_F(ExperimentConfigTest, PrefetchIsOffUnlessGivenAndBounded) {
  ASSERT_OK(Parse(kMinimal));
  EXPECT_FALSE(config_.timing.prefetch.has_value());
  ASSERT_OK(Parse(std::string(kMinimal) + "tunehost: {prefetch: 2}\n"));
  EXPECT_EQ(config_.timing.prefetch, 2u);
  ExpectError(std::string(kMinimal) + "tunehost: {prefetch: 5000}\n", 5, 22,
              "tunehost.prefetch", "at most 1024");
  ExpectError(std::string(kMinimal) + "tunehost: {prefetch: -1}\n", 5, 22,
              "tunehost.prefetch", "at least 0");
  ExpectError(std::string(kMinimal) + "tunehost: {maxResultBytes: 100}\n", 5, 28,
              "tunehost.maxResultBytes", "at least 1024");
}

TEST_F(ExperimentConfigTest, AnAdvisorIsTheTuner) {
  ASSERT_OK(Parse(
      "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
      "trialCommand: python3 trial.py\ntrialConcurrency: 2\n"
      "advisor: {name: Hyperband, classArgs: {R: 60, eta: 3}}\n"));
  EXPECT_EQ(config_.spec.tuner.name, "Hyperband");
  EXPECT_EQ(Describe(config_.spec.tuner.args), "{\"R\":60,\"eta\":3}");
  EXPECT_FALSE(config_.spec.assessor.has_value());
}

TEST_F(ExperimentConfigTest, EveryProblemIsReportedAtOnce) {
  Status st = Parse(
      "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
      "trialConcurency: 2\n"     // a typo
      "maxTrialNumber: 0\n"      // out of range
      "tuner: {nam: tpe}\n"      // a typo, and so no name
      "trainingService: {platform: remote}\n");
  ASSERT_FALSE(st.ok());
  const std::string& m = st.message();
  for (const char* part : {":2:1: trialConcurency: unknown key", ":3:17: maxTrialNumber: must be at least 1",
                           ":4:9: tuner.nam: unknown key", ":4:8: tuner.name: required",
                           ":5:29: trainingService.platform: unsupported platform",
                           ":1:1: trialCommand: required", ":1:1: trialConcurrency: required"}) {
    EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in:\n" << m;
  }
  EXPECT_EQ(std::count(m.begin(), m.end(), '\n'), 6) << "one problem per line:\n" << m;
}

// NNI's v1 format as NNI's examples shipped it (mnist, before NNI 2.0).
constexpr char kNniV1[] =
    "authorName: default\n"
    "experimentName: example_mnist\n"
    "trialConcurrency: 1\n"
    "maxExecDuration: 1h\n"
    "maxTrialNum: 10\n"
    "#choice: local, remote, pai\n"
    "trainingServicePlatform: local\n"
    "searchSpacePath: search_space.json\n"
    "#choice: true, false\n"
    "useAnnotation: false\n"
    "tuner:\n"
    "  #choice: TPE, Random, Anneal, Evolution, BatchTuner, MetisTuner, GPTuner\n"
    "  builtinTunerName: TPE\n"
    "  classArgs:\n"
    "    #choice: maximize, minimize\n"
    "    optimize_mode: maximize\n"
    "assessor:\n"
    "  builtinAssessorName: Medianstop\n"
    "  classArgs:\n"
    "    optimize_mode: maximize\n"
    "trial:\n"
    "  command: python3 mnist.py\n"
    "  codeDir: .\n"
    "  gpuNum: 0\n"
    "localConfig:\n"
    "  maxTrialNumPerGpu: 2\n";

TEST_F(ExperimentConfigTest, NnisV1FormatIsConvertedAsNniDoes) {
  Write("search_space.json", R"({"lr": {"_type": "loguniform", "_value": [0.0001, 0.1]}})");
  ASSERT_OK(Parse(kNniV1));
  EXPECT_EQ(config_.name, "example_mnist");
  EXPECT_EQ(config_.spec.concurrency, 1u);
  EXPECT_EQ(config_.spec.max_trials, 10u);
  EXPECT_DOUBLE_EQ(config_.spec.max_duration_s, 3600);
  EXPECT_EQ(config_.trial_command, "python3 mnist.py");
  EXPECT_TRUE(fs::equivalent(config_.trial_code_dir, dir_)) << config_.trial_code_dir;
  EXPECT_EQ(Describe(config_.search_space),
            "{\"lr\":{\"_type\":\"loguniform\",\"_value\":[0.0001f,0.1f]}}");
  EXPECT_EQ(config_.spec.tuner.name, "TPE");
  EXPECT_EQ(Describe(config_.spec.tuner.args), "{\"optimize_mode\":\"maximize\"}");
  ASSERT_TRUE(config_.spec.assessor.has_value());
  EXPECT_EQ(config_.spec.assessor->name, "Medianstop");
  EXPECT_EQ(config_.gpus.per_trial, 0u);
  EXPECT_EQ(config_.gpus.max_trials_per_gpu, 2u);
  // A notice that the file was converted, and authorName's drop, say where.
  const std::string file = (dir_ / "experiment.yaml").string();
  std::string all;
  for (const std::string& w : config_.warnings) all += w + "\n";
  EXPECT_NE(all.find(file + ":7:26: trainingServicePlatform: NNI's v1 config format"),
            std::string::npos) << all;
  EXPECT_NE(all.find(file + ":1:1: authorName: dropped"), std::string::npos) << all;
}

// Keys the v1 conversion wrote have no position of their own: messages point
// at the v1 value and name the v1 key.
TEST_F(ExperimentConfigTest, NnisV1FormatMessagesNameTheV1KeyAtItsLine) {
  Write("search_space.json", R"({"x": {"_type": "uniform", "_value": [0, 1]}})");
  std::string bad = kNniV1;
  bad.replace(bad.find("maxTrialNum: 10"), 15, "maxTrialNum: 0");
  ExpectError(bad, 5, 14, "maxTrialNum", "at least 1");
  ASSERT_OK(Parse(std::string(kNniV1) + "  useActiveGpu: true\nnniManagerIp: 10.0.0.1\n"));
  const std::string file = (dir_ / "experiment.yaml").string();
  std::string all;
  for (const std::string& w : config_.warnings) all += w + "\n";
  EXPECT_NE(all.find(file + ":27:17: localConfig.useActiveGpu: "), std::string::npos) << all;
  EXPECT_NE(all.find(file + ":28:15: nniManagerIp: "), std::string::npos) << all;
}

TEST_F(ExperimentConfigTest, NnisV1FormatProblemsNameTheV1Keys) {
  const std::string file = (dir_ / "experiment.yaml").string();
  // Every problem at once, under the keys the file has.
  Status st = Parse(
      "authorName: me\n"
      "trainingServicePlatform: remote\n"
      "machineList: [{ip: 10.1.1.1}]\n"
      "trial: {codeDir: ., image: x}\n"
      "tuner: {codeDir: ., classFileName: my.py, className: My}\n"
      "maxTrailNum: 3\n");
  ASSERT_FALSE(st.ok());
  for (const char* part :
       {":2:26: trainingServicePlatform: unsupported platform 'remote'", ":1:1: trial.command: required",
        ":5:9: tuner.codeDir: Python algorithm classes are not supported",
        ":6:1: maxTrailNum: unknown key", ":1:1: trialConcurrency: required",
        ":1:1: searchSpacePath: required"}) {
    EXPECT_NE(st.message().find(file + part), std::string::npos)
        << "missing '" << part << "' in:\n" << st.message();
  }
  EXPECT_EQ(st.message().find("machineList"), std::string::npos)
      << "another platform's settings are covered by the platform's error:\n" << st.message();
  EXPECT_EQ(st.message().find("trialCommand"), std::string::npos)
      << "v2 names of keys the file does not have:\n" << st.message();
  // No platform: v1 needs one, as NNI's converter does.
  Status none = Parse(std::string(kNniV1).replace(std::string(kNniV1).find("trainingServicePlatform: local\n"),
                                                  31, ""));
  EXPECT_NE(none.message().find("trainingServicePlatform: required"), std::string::npos)
      << none.message();
  // multiPhase: true is refused, as NNI 2 refuses it; an advisor is the tuner.
  Write("search_space.json", R"({"x": {"_type": "uniform", "_value": [0, 1]}})");
  std::string advisor = std::string(kNniV1);
  advisor.replace(advisor.find("tuner:"), advisor.find("trial:") - advisor.find("tuner:"),
                  "advisor:\n  builtinAdvisorName: BOHB\n  classArgs: {max_budget: 27}\n");
  ASSERT_OK(Parse(advisor));
  EXPECT_EQ(config_.spec.tuner.name, "BOHB");
  EXPECT_FALSE(config_.spec.assessor.has_value());
  ExpectError(advisor + "multiPhase: true\n", 20, 13, "multiPhase", "not supported");
}

}  // namespace
}  // namespace tunehost::host
