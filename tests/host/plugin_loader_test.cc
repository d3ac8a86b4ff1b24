// PluginRegistry and the Tuner/Assessor wrappers against the fixture plugins
// of tests/plugins/fixtures (built into TH_TEST_PLUGIN_DIR).
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "test_util.h"
#include "tunehost/host/nni_builtins.h"
#include "tunehost/host/plugin.h"
#include "tunehost/sdk/version.h"

namespace tunehost::host {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path Fixture(const std::string& name) { return fs::path(TH_TEST_PLUGIN_DIR) / (name + ".so"); }

std::string Pack(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& fn) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  fn(packer);
  return std::string(buffer.data(), buffer.size());
}

const std::string kEmptyMap = "\x80";

std::string SearchSpace() {
  return Pack([](auto& pk) {
    pk.pack_map(2);
    pk.pack(std::string("a"));
    pk.pack_map(2);
    pk.pack(std::string("_type"));
    pk.pack(std::string("choice"));
    pk.pack(std::string("_value"));
    pk.pack(std::vector<int>{10, 20, 30});
    pk.pack(std::string("b"));
    pk.pack_map(2);
    pk.pack(std::string("_type"));
    pk.pack(std::string("uniform"));
    pk.pack(std::string("_value"));
    pk.pack(std::vector<double>{0.0, 1.0});
  });
}

// {key: value} for one-entry class_args.
template <class T>
std::string Args(const std::string& key, const T& value) {
  return Pack([&](auto& pk) {
    pk.pack_map(1);
    pk.pack(key);
    pk.pack(value);
  });
}

std::string VersionText(uint32_t major, uint32_t minor, uint32_t revision) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(revision);
}

std::string HostVersion() {
  return VersionText(TH_VERSION_MAJOR, TH_VERSION_MINOR, TH_VERSION_REVISION);
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool IsMapped(const fs::path& file) {
  void* handle = dlopen(fs::absolute(file).c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

struct Refusal {
  const char* file;
  std::string reason;
};

class RefusedFixtureTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(RefusedFixtureTest, IsRefusedNamingFileAndReason) {
  const Refusal& r = GetParam();
  PluginRegistry registry;
  Status st = registry.LoadFile(Fixture(r.file));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_THAT(st.message(), HasSubstr(r.reason));
  ASSERT_EQ(registry.errors().size(), 1u);
  EXPECT_EQ(registry.errors()[0].rfind(Fixture(r.file).string() + ": ", 0), 0u)
      << registry.errors()[0];
  EXPECT_THAT(registry.errors()[0], HasSubstr(r.reason));
  EXPECT_TRUE(registry.plugins().empty());
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, RefusedFixtureTest,
    ::testing::Values(
        Refusal{"no_entry", "no th_plugin_entry symbol"},
        Refusal{"wrong_major",
                "plugin ABI version " +
                    VersionText(TH_VERSION_MAJOR + 1, TH_VERSION_MINOR, TH_VERSION_REVISION) +
                    " is incompatible with host ABI version " + HostVersion()},
        Refusal{"newer_minor",
                "plugin ABI version " +
                    VersionText(TH_VERSION_MAJOR, TH_VERSION_MINOR + 1, TH_VERSION_REVISION) +
                    " is incompatible with host ABI version " + HostVersion()},
        Refusal{"bad_descriptor_version",
                "tuner descriptor 0 has ABI version " +
                    VersionText(TH_VERSION_MAJOR + 1, TH_VERSION_MINOR, TH_VERSION_REVISION)},
        Refusal{"init_fails", "init() returned false"},
        Refusal{"throw_abi_init", "init() threw across the ABI: init threw across the ABI"},
        Refusal{"no_id", "tuner descriptor 0 has no id"},
        Refusal{"no_kinds", "(org.tunehost.test.no-kinds) has no kinds"}),
    [](const ::testing::TestParamInfo<Refusal>& info) { return std::string(info.param.file); });

TEST(PluginRegistryTest, MissingFileIsRefused) {
  PluginRegistry registry;
  EXPECT_FALSE(registry.LoadFile(Fixture("does_not_exist")).ok());
  ASSERT_EQ(registry.errors().size(), 1u);
  EXPECT_THAT(registry.errors()[0], HasSubstr("does_not_exist.so: not a regular file"));
}

TEST(PluginRegistryTest, LoadsGoodFixturesWithTheirDescriptors) {
  PluginRegistry registry;
  for (const char* f : {"good_tuner", "good_assessor", "c_tuner", "slow_tuner", "garbage",
                        "throwing", "throw_abi", "null_generate"}) {
    ASSERT_OK(registry.LoadFile(Fixture(f)));
  }
  EXPECT_TRUE(registry.errors().empty());
  bool found = false;
  for (const PluginInfo& p : registry.plugins()) {
    if (p.id != "org.tunehost.test.fixture-assessor") continue;
    found = true;
    EXPECT_EQ(p.name, "fixture-assessor");
    EXPECT_EQ(p.kind, "assessor");
    EXPECT_EQ(p.vendor, "tunehost tests");
    EXPECT_EQ(p.version, "1.0.0");
    EXPECT_EQ(p.description, "deterministic test assessor");
    EXPECT_EQ(p.file, Fixture("good_assessor"));
  }
  EXPECT_TRUE(found);
}

TEST(PluginRegistryTest, DirectoryLoadRefusesBadFilesAndKeepsTheRest) {
  PluginRegistry registry;
  size_t loaded = registry.LoadDirectory(TH_TEST_PLUGIN_DIR);
  std::vector<std::string> refused = {"bad_descriptor_version", "duplicate_b", "init_fails",
                                      "newer_minor", "no_entry", "no_id", "no_kinds",
                                      "throw_abi_init", "wrong_major"};
  ASSERT_EQ(registry.errors().size(), refused.size());
  for (size_t i = 0; i < refused.size(); ++i) {
    EXPECT_EQ(registry.errors()[i].rfind(Fixture(refused[i]).string() + ": ", 0), 0u)
        << registry.errors()[i];
  }
  EXPECT_EQ(loaded, 10u);  // the good fixtures, faulty.so included
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry.CreateTuner("fixture-tuner", kEmptyMap, nullptr, &tuner));
  ASSERT_OK(tuner->UpdateSearchSpace(SearchSpace()));
  std::unique_ptr<Assessor> assessor;
  ASSERT_OK(registry.CreateAssessor("fixture-assessor", kEmptyMap, &assessor));
}

TEST(PluginRegistryTest, DuplicateIdIsRefusedNamingTheOtherFile) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("duplicate_a")));
  Status st = registry.LoadFile(Fixture("duplicate_b"));
  ASSERT_FALSE(st.ok());
  ASSERT_EQ(registry.errors().size(), 1u);
  EXPECT_EQ(registry.errors()[0],
            Fixture("duplicate_b").string() +
                ": duplicate tuner id org.tunehost.test.duplicate, already loaded from " +
                Fixture("duplicate_a").string());
  ASSERT_EQ(registry.plugins().size(), 1u);
  EXPECT_EQ(registry.plugins()[0].name, "duplicate-a");
}

TEST(PluginRegistryTest, SameFileTwiceIsADuplicate) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("good_tuner")));
  EXPECT_FALSE(registry.LoadFile(Fixture("good_tuner")).ok());
  EXPECT_EQ(registry.plugins().size(), 1u);
}

TEST(PluginRegistryTest, LooksUpByNameAndByIdWithinKind) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("good_tuner")));
  ASSERT_OK(registry.LoadFile(Fixture("good_assessor")));
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry.CreateTuner("fixture-tuner", kEmptyMap, nullptr, &tuner));
  EXPECT_EQ(tuner->info().id, "org.tunehost.test.fixture-tuner");
  tuner.reset();
  ASSERT_OK(registry.CreateTuner("org.tunehost.test.fixture-tuner", kEmptyMap, nullptr, &tuner));
  EXPECT_EQ(tuner->info().name, "fixture-tuner");
  std::unique_ptr<Assessor> assessor;
  ASSERT_OK(registry.CreateAssessor("org.tunehost.test.fixture-assessor", "", &assessor));
  // NNI configs write builtin names in any case (TPE, Medianstop).
  tuner.reset();
  ASSERT_OK(registry.CreateTuner("FIXTURE-Tuner", kEmptyMap, nullptr, &tuner));
  EXPECT_EQ(tuner->info().name, "fixture-tuner");
  EXPECT_EQ(registry.CreateTuner("nope", kEmptyMap, nullptr, &tuner).code(),
            Status::Code::kNotFound);
  EXPECT_EQ(registry.CreateTuner("fixture-assessor", kEmptyMap, nullptr, &tuner).code(),
            Status::Code::kNotFound);
  EXPECT_EQ(registry.CreateAssessor("fixture-tuner", kEmptyMap, &assessor).code(),
            Status::Code::kNotFound);
}

// NNI's built-ins that tunehost does not ship are refused with the closest
// built-in (nni-semantics.md §6), in either of NNI's spellings and any case;
// other unknown names, and assessors, get the plain refusal.
TEST(PluginRegistryTest, AnNniBuiltinNotShippedIsRefusedWithTheClosestBuiltin) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("good_tuner")));
  std::unique_ptr<Tuner> tuner;
  Status st = registry.CreateTuner("SMAC", kEmptyMap, nullptr, &tuner);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("no tuner plugin named SMAC: NNI's SMAC"));
  EXPECT_THAT(st.message(), HasSubstr("closest built-in is tpe"));
  for (const char* name : {"MetisTuner", "metis", "DNGOTuner", "TPE_legacy",
                           "RegularizedEvolutionTuner", "NetworkMorphism", "PPOTuner"}) {
    ASSERT_TRUE(MissingNniBuiltin("tuner", name).has_value()) << name;
    EXPECT_THAT(*MissingNniBuiltin("tuner", name), HasSubstr("not shipped")) << name;
  }
  EXPECT_THAT(*MissingNniBuiltin("tuner", "MetisTuner"), HasSubstr("closest built-in is gp"));
  // Shipped since: gp and pbt, under NNI's names too.
  for (const char* name : {"nope", "", "SMA", "smacc", "tpe", "GridSearch", "GPTuner", "gp",
                           "PBTTuner", "pbt"}) {
    EXPECT_FALSE(MissingNniBuiltin("tuner", name).has_value()) << name;
  }
  EXPECT_FALSE(MissingNniBuiltin("assessor", "SMAC").has_value());
  st = registry.CreateTuner("nope", kEmptyMap, nullptr, &tuner);
  EXPECT_EQ(st.message(), "no tuner plugin named nope");
}

TEST(PluginRegistryTest, BadClassArgsAreReported) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("good_tuner")));
  std::unique_ptr<Tuner> tuner;
  Status st = registry.CreateTuner("fixture-tuner", Args("batch_limit", std::string("x")), nullptr,
                                   &tuner);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_THAT(st.message(), HasSubstr("tuner fixture-tuner: create failed: class argument "
                                      "'batch_limit' must be an integer"));
  st = registry.CreateTuner("fixture-tuner", Args("bogus", 1), nullptr, &tuner);
  EXPECT_THAT(st.message(), HasSubstr("unknown class argument 'bogus'"));
  st = registry.CreateTuner("fixture-tuner", "\x01", nullptr, &tuner);
  EXPECT_EQ(st.code(), Status::Code::kBadField);
  EXPECT_EQ(tuner, nullptr);
  EXPECT_TRUE(registry.errors().empty()) << "bad class_args are not the plugin's fault";
}

TEST(TunerTest, FixtureTunerIsDeterministicAndKeepsState) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("good_tuner")));
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry.CreateTuner("fixture-tuner", kEmptyMap, nullptr, &tuner));
  ASSERT_OK(tuner->UpdateSearchSpace(SearchSpace()));
  std::vector<std::pair<int64_t, protocol::Packed>> out;
  bool no_more = true;
  ASSERT_OK(tuner->Generate({5, 6}, &out, &no_more));
  EXPECT_FALSE(no_more);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].first, 5);
  EXPECT_EQ(out[1].first, 6);
  msgpack::object_handle h = msgpack::unpack(out[0].second.data(), out[0].second.size());
  std::map<std::string, msgpack::object> m = h.get().as<std::map<std::string, msgpack::object>>();
  EXPECT_EQ(m.at("a").as<int>(), 30);
  EXPECT_DOUBLE_EQ(m.at("b").as<double>(), 0.5);

  ASSERT_OK(tuner->ReceiveTrialResult(5, out[0].second, Pack([](auto& pk) { pk.pack(1.5); }), 1.5,
                                      false));
  ASSERT_OK(tuner->TrialEnd(5, true));
  bool supported = false;
  std::string state;
  ASSERT_OK(tuner->SaveState(&state, &supported));
  EXPECT_TRUE(supported);
  EXPECT_EQ(state, "2");
  ASSERT_OK(tuner->LoadState("7", &supported));
  EXPECT_TRUE(supported);
  ASSERT_OK(tuner->SaveState(&state, &supported));
  EXPECT_EQ(state, "7");
  ASSERT_OK(tuner->ImportData(Pack([](auto& pk) { pk.pack_array(0); }), &supported));
  EXPECT_TRUE(supported);

  Status st = tuner->UpdateSearchSpace(Pack([](auto& pk) { pk.pack(1); }));
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_EQ(st.message(),
            "tuner fixture-tuner: search space is not a map (update_search_space returned "
            "TH_INVALID_ARGUMENT)");
}

TEST(TunerTest, NoMoreTrialsIsNotAnError) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("good_tuner")));
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry.CreateTuner("fixture-tuner", Args("max_trials", 1), nullptr, &tuner));
  ASSERT_OK(tuner->UpdateSearchSpace(SearchSpace()));
  std::vector<std::pair<int64_t, protocol::Packed>> out;
  bool no_more = false;
  ASSERT_OK(tuner->Generate({1, 2, 3}, &out, &no_more));
  EXPECT_TRUE(no_more);
  EXPECT_EQ(out.size(), 1u);
}

TEST(TunerTest, SendTrialCarriesCreditedParametersToTheHost) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("good_tuner")));
  std::vector<std::pair<int64_t, protocol::Packed>> sent;
  Status answer = Status::Ok();
  SendTrialFn send = [&](int64_t id, protocol::Packed params) {
    sent.emplace_back(id, std::move(params));
    return answer;
  };
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry.CreateTuner("fixture-tuner", Args("batch_limit", 1), send, &tuner));
  ASSERT_OK(tuner->UpdateSearchSpace(SearchSpace()));
  std::vector<std::pair<int64_t, protocol::Packed>> out;
  bool no_more = false;
  ASSERT_OK(tuner->Generate({1, 2, 3}, &out, &no_more));
  EXPECT_TRUE(no_more);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first, 1);

  ASSERT_OK(tuner->TrialEnd(1, true));
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].first, 2);
  EXPECT_EQ(msgpack::unpack(sent[0].second.data(), sent[0].second.size()).get().type,
            msgpack::type::MAP);

  answer = Status::BadState("experiment ended");
  Status st = tuner->TrialEnd(2, true);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_THAT(st.message(), HasSubstr("send_trial refused id 3 (trial_end returned TH_BAD_STATE)"));
}

TEST(TunerTest, CTunerWithoutOptionalCallbacksReportsUnsupported) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("c_tuner")));
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry.CreateTuner("c-tuner", kEmptyMap, nullptr, &tuner));
  bool supported = true;
  EXPECT_OK(tuner->ImportData(Pack([](auto& pk) { pk.pack_array(0); }), &supported));
  EXPECT_FALSE(supported);
  std::string state = "junk";
  supported = true;
  EXPECT_OK(tuner->SaveState(&state, &supported));
  EXPECT_FALSE(supported);
  EXPECT_TRUE(state.empty());
  supported = true;
  EXPECT_OK(tuner->LoadState("x", &supported));
  EXPECT_FALSE(supported);
}

TEST(TunerTest, HelperDefaultsReportUnsupported) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("slow_tuner")));
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry.CreateTuner("fixture-slow", Args("sleep_ms", 0), nullptr, &tuner));
  bool supported = true;
  EXPECT_OK(tuner->ImportData(Pack([](auto& pk) { pk.pack_array(0); }), &supported));
  EXPECT_FALSE(supported);
  supported = true;
  std::string state;
  EXPECT_OK(tuner->SaveState(&state, &supported));
  EXPECT_FALSE(supported);
  std::vector<std::pair<int64_t, protocol::Packed>> out;
  bool no_more = true;
  ASSERT_OK(tuner->Generate({4}, &out, &no_more));
  EXPECT_FALSE(no_more);
  EXPECT_EQ(out.size(), 1u);
}

TEST(TunerTest, NullRequiredCallbackIsRefusedAtCreate) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("null_generate")));
  std::unique_ptr<Tuner> tuner;
  Status st = registry.CreateTuner("null-generate", kEmptyMap, nullptr, &tuner);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_EQ(st.message(), "tuner null-generate: missing required callback generate");
  EXPECT_EQ(tuner, nullptr);
  ASSERT_EQ(registry.errors().size(), 1u);
  EXPECT_EQ(registry.errors()[0], Fixture("null_generate").string() +
                                      ": tuner null-generate: missing required callback generate");
}

struct GarbageCase {
  const char* name;
  const char* message;
};

class GarbageTunerTest : public ::testing::TestWithParam<GarbageCase> {};

TEST_P(GarbageTunerTest, InvalidEmitsAreRejected) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("garbage")));
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry.CreateTuner(GetParam().name, kEmptyMap, nullptr, &tuner));
  std::vector<std::pair<int64_t, protocol::Packed>> out;
  bool no_more = false;
  Status st = tuner->Generate({1, 2}, &out, &no_more);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_THAT(st.message(), HasSubstr(std::string("tuner ") + GetParam().name + ": "));
  EXPECT_THAT(st.message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Garbage, GarbageTunerTest,
    ::testing::Values(
        GarbageCase{"garbage-not-map", "invalid parameters: id 1: not a MessagePack map"},
        GarbageCase{"garbage-truncated", "invalid parameters: id 1: invalid MessagePack"},
        GarbageCase{"garbage-trailing", "invalid parameters: id 1: trailing bytes after the map"},
        GarbageCase{"garbage-unknown-id", "invalid parameters: id 1001 was not requested"},
        GarbageCase{"garbage-twice", "invalid parameters: id 1 emitted twice"},
        GarbageCase{"garbage-bad-status", "generate returned unknown status 999"}),
    [](const ::testing::TestParamInfo<GarbageCase>& info) {
      std::string n = info.param.name;
      for (char& c : n) {
        if (c == '-') c = '_';
      }
      return n;
    });

TEST(GarbageTest, CreateReturningNullWithoutMessage) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("garbage")));
  std::unique_ptr<Tuner> tuner;
  Status st = registry.CreateTuner("garbage-null-create", kEmptyMap, nullptr, &tuner);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_EQ(st.message(), "tuner garbage-null-create: create failed: no message");
}

TEST(GarbageTest, SendTrialWithNonMapBytesIsRefusedBeforeTheHostSeesIt) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("garbage")));
  int calls = 0;
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry.CreateTuner(
      "garbage-send-trial", kEmptyMap,
      [&](int64_t, protocol::Packed) {
        ++calls;
        return Status::Ok();
      },
      &tuner));
  std::vector<std::pair<int64_t, protocol::Packed>> out;
  bool no_more = false;
  ASSERT_OK(tuner->Generate({1}, &out, &no_more));
  EXPECT_TRUE(no_more);
  EXPECT_TRUE(out.empty());
  Status st = tuner->TrialEnd(1, true);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_THAT(st.message(), HasSubstr("trial_end returned TH_INVALID_ARGUMENT"));
  EXPECT_EQ(calls, 0);
}

// Every hook of a tuner returns PluginError with `text` in the message.
void ExpectEveryTunerHookFails(Tuner* tuner, const std::string& text) {
  std::vector<std::pair<int64_t, protocol::Packed>> out;
  bool no_more = false;
  bool supported = false;
  std::string state;
  const std::string params = Pack([](auto& pk) { pk.pack_map(0); });
  const std::string value = Pack([](auto& pk) { pk.pack(1.0); });
  std::vector<std::pair<std::string, Status>> calls = {
      {"update_search_space", tuner->UpdateSearchSpace(SearchSpace())},
      {"generate", tuner->Generate({1}, &out, &no_more)},
      {"receive_trial_result", tuner->ReceiveTrialResult(1, params, value, 1.0, false)},
      {"trial_end", tuner->TrialEnd(1, true)},
      {"import_data", tuner->ImportData(Pack([](auto& pk) { pk.pack_array(0); }), &supported)},
      {"save_state", tuner->SaveState(&state, &supported)},
      {"load_state", tuner->LoadState("s", &supported)},
  };
  for (const auto& [hook, st] : calls) {
    EXPECT_EQ(st.code(), Status::Code::kPluginError) << hook;
    EXPECT_THAT(st.message(), HasSubstr(hook)) << hook;
    EXPECT_THAT(st.message(), HasSubstr(text)) << hook;
  }
}

void ExpectEveryAssessorHookFails(Assessor* assessor, const std::string& text) {
  bool good = true;
  bool supported = false;
  std::string state;
  std::vector<std::pair<std::string, Status>> calls = {
      {"assess_trial", assessor->AssessTrial("t1", Pack([](auto& pk) {
                                               pk.pack(std::vector<double>{1.0});
                                             }),
                                             &good)},
      {"trial_end", assessor->TrialEnd("t1", true)},
      {"save_state", assessor->SaveState(&state, &supported)},
      {"load_state", assessor->LoadState("s", &supported)},
  };
  for (const auto& [hook, st] : calls) {
    EXPECT_EQ(st.code(), Status::Code::kPluginError) << hook;
    EXPECT_THAT(st.message(), HasSubstr(hook)) << hook;
    EXPECT_THAT(st.message(), HasSubstr(text)) << hook;
  }
}

TEST(ThrowingPluginTest, HelperTurnsEveryExceptionIntoPluginError) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("throwing")));
  struct Case {
    std::string kind;
    std::string text;
  };
  for (const Case& c : {Case{"error", "throws tunehost::sdk::Error (%s returned TH_INVALID_ARGUMENT)"},
                        Case{"std", "throws std::runtime_error (%s returned TH_INTERNAL)"},
                        Case{"other", "unknown exception (%s returned TH_INTERNAL)"}}) {
    SCOPED_TRACE(c.kind);
    // The hook name stands where %s is; check the part after it.
    std::string tail = c.text.substr(c.text.find("%s") + 2);
    std::unique_ptr<Tuner> tuner;
    ASSERT_OK(registry.CreateTuner("throwing-tuner", Args("throw", c.kind), nullptr, &tuner));
    ExpectEveryTunerHookFails(tuner.get(), tail);
    ExpectEveryTunerHookFails(tuner.get(), "tuner throwing-tuner: ");
    std::unique_ptr<Assessor> assessor;
    ASSERT_OK(registry.CreateAssessor("throwing-assessor", Args("throw", c.kind), &assessor));
    ExpectEveryAssessorHookFails(assessor.get(), tail);
    ExpectEveryAssessorHookFails(assessor.get(), "assessor throwing-assessor: ");
  }
  std::unique_ptr<Tuner> tuner;
  Status st = registry.CreateTuner("throwing-tuner", Args("in_create", true), nullptr, &tuner);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_EQ(st.message(),
            "tuner throwing-tuner: create failed: class argument 'in_create' asked to fail");
}

TEST(ThrowingPluginTest, ExceptionsThrownAcrossTheAbiBecomePluginErrors) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("throw_abi")));
  {
    std::unique_ptr<Tuner> tuner;
    ASSERT_OK(registry.CreateTuner("throw-abi", kEmptyMap, nullptr, &tuner));
    ExpectEveryTunerHookFails(tuner.get(), "threw across the ABI: ");
    std::unique_ptr<Assessor> assessor;
    ASSERT_OK(registry.CreateAssessor("throw-abi-assessor", kEmptyMap, &assessor));
    ExpectEveryAssessorHookFails(assessor.get(), "threw across the ABI: ");
  }  // destroy throws too: logged, not fatal
  std::unique_ptr<Tuner> tuner;
  Status st = registry.CreateTuner("throw-abi-create", kEmptyMap, nullptr, &tuner);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_EQ(st.message(),
            "tuner throw-abi-create: create threw across the ABI: create threw across the ABI");
  // The registry is still usable afterwards.
  ASSERT_OK(registry.LoadFile(Fixture("good_tuner")));
  ASSERT_OK(registry.CreateTuner("fixture-tuner", kEmptyMap, nullptr, &tuner));
}

TEST(AssessorTest, FixtureAssessorAppliesItsThreshold) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("good_assessor")));
  std::unique_ptr<Assessor> assessor;
  ASSERT_OK(registry.CreateAssessor("fixture-assessor", Args("threshold", 0.5), &assessor));
  bool good = false;
  ASSERT_OK(assessor->AssessTrial("t1", Pack([](auto& pk) { pk.pack(std::vector<double>{1, 0.7}); }),
                                  &good));
  EXPECT_TRUE(good);
  ASSERT_OK(assessor->AssessTrial("t2", Pack([](auto& pk) {
                                    pk.pack_array(2);
                                    pk.pack(1.0);
                                    pk.pack_map(1);
                                    pk.pack(std::string("default"));
                                    pk.pack(0.1);
                                  }),
                                  &good));
  EXPECT_FALSE(good);
  ASSERT_OK(assessor->TrialEnd("t2", false));
  std::string state;
  bool supported = false;
  ASSERT_OK(assessor->SaveState(&state, &supported));
  EXPECT_TRUE(supported);
  EXPECT_EQ(state, "2");
  Status st = assessor->AssessTrial("t3", "\xc1", &good);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_THAT(st.message(), HasSubstr("history: invalid MessagePack"));
}

class KeepAliveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    events_ = fs::temp_directory_path() /
              ("tunehost-plugin-events-" + std::to_string(::getpid()) + ".txt");
    fs::remove(events_);
    ::setenv("TH_FIXTURE_EVENTS", events_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("TH_FIXTURE_EVENTS");
    fs::remove(events_);
  }
  fs::path events_;
};

TEST_F(KeepAliveTest, InstancesKeepTheLibraryLoadedUntilTheLastOneGoes) {
  auto registry = std::make_unique<PluginRegistry>();
  ASSERT_OK(registry->LoadFile(Fixture("c_tuner")));
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry->CreateTuner("c-tuner", kEmptyMap, nullptr, &tuner));
  registry.reset();
  EXPECT_EQ(ReadFile(events_), "init\n");
  EXPECT_TRUE(IsMapped(Fixture("c_tuner")));

  ASSERT_OK(tuner->UpdateSearchSpace(kEmptyMap));
  std::vector<std::pair<int64_t, protocol::Packed>> out;
  bool no_more = false;
  ASSERT_OK(tuner->Generate({7}, &out, &no_more));
  ASSERT_EQ(out.size(), 1u);
  auto params = msgpack::unpack(out[0].second.data(), out[0].second.size())
                    .get()
                    .as<std::map<std::string, int64_t>>();
  EXPECT_EQ(params.at("x"), 7);

  tuner.reset();
  EXPECT_EQ(ReadFile(events_), "init\ndestroy\ndeinit\n");
  EXPECT_FALSE(IsMapped(Fixture("c_tuner")));
}

TEST_F(KeepAliveTest, RefusedAfterInitStillGetsDeinit) {
  PluginRegistry registry;
  ASSERT_OK(registry.LoadFile(Fixture("duplicate_a")));
  EXPECT_EQ(ReadFile(events_), "init\n");
  EXPECT_FALSE(registry.LoadFile(Fixture("duplicate_b")).ok());
  EXPECT_EQ(ReadFile(events_), "init\ninit\ndeinit\n");
  EXPECT_FALSE(IsMapped(Fixture("duplicate_b")));
}

}  // namespace
}  // namespace tunehost::host
