// Tests of plugins/hyperband: the `hyperband` and `bohb` tuners' search space
// and class_args checks; Hyperband's seeds, state and import; and the module
// exporting both classes. Fixture in hyperband_fixture.h.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hyperband/bohb_tuner.h"
#include "hyperband/hyperband_tuner.h"
#include "hyperband_fixture.h"
#include "plugin_testing.h"
#include "tunehost/sdk/host.h"
#include "tunehost/sdk/tuner.h"
#include "tuner_testing.h"

namespace tunehost::plugins::hyperband {
namespace {

using testing::AbiTuner;
using testing::Constructing;
using testing::ExpectError;
using testing::ExpectNonArrayImportRefused;
using testing::Json;
using testing::MakeTuner;
using testing::Msgpack;
using testing::Pack;
using testing::PackText;
using testing::RecordingHost;
using testing::ToJson;
using testing::Update;
using testing::Updating;

using hyperband_testing::Bytes;
using hyperband_testing::Driver;
using hyperband_testing::kOneX;
using hyperband_testing::Simulation;
using hyperband_testing::Trial;

// --- Search space and class_args ---

TEST(HyperbandTest, NestedChoicesAndATrialBudgetKeyAreRefusedNamingTheKey) {
  RecordingHost host;
  auto hb = MakeTuner<HyperbandTuner>(host, kOneX, R"({"seed": 1})");
  auto bohb = MakeTuner<BohbTuner>(host, kOneX, R"({"seed": 1})");
  for (BracketTuner* tuner : std::vector<BracketTuner*>{hb.get(), bohb.get()}) {
    auto update = [tuner](const std::string& space) { return Updating(*tuner, space); };
    ExpectError(update(R"({"lr": {"_type": "uniform", "_value": [0, 1]},
                           "opt": {"_type": "choice", "_value": [
                             {"_name": "sgd", "m": {"_type": "uniform", "_value": [0, 1]}},
                             {"_name": "adam"}]}})"),
                TH_INVALID_ARGUMENT, {"\"opt\"", "nested"});
    ExpectError(update(R"({"TRIAL_BUDGET": {"_type": "choice", "_value": [1, 2]}})"),
                TH_INVALID_ARGUMENT, {"\"TRIAL_BUDGET\"", "reserved"});
    ExpectError(update(R"({"lr": {"_type": "loguniform", "_value": [0, 1]}})"),
                TH_INVALID_ARGUMENT, {"\"lr\""});
  }
  // A refused update keeps the previous space.
  Driver d;
  std::vector<Trial> t = d.Ask(*hb, 1);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_TRUE(t[0].params.contains("x"));
  // Every other type is accepted, values as the SDK packs them.
  const char* all_types = R"({
    "c": {"_type": "choice", "_value": ["a", 2]},
    "ri": {"_type": "randint", "_value": [1, 4]},
    "qu": {"_type": "quniform", "_value": [0, 10, 5]},
    "lu": {"_type": "loguniform", "_value": [0.01, 1]},
    "qlu": {"_type": "qloguniform", "_value": [1, 100, 1]},
    "n": {"_type": "normal", "_value": [0, 1]},
    "qn": {"_type": "qnormal", "_value": [0, 1, 0.5]},
    "ln": {"_type": "lognormal", "_value": [0, 1]},
    "qln": {"_type": "qlognormal", "_value": [0, 1, 1]}})";
  auto fresh = MakeTuner<HyperbandTuner>(host, kOneX, R"({"seed": 2})");
  Update(*fresh, all_types);
  std::vector<Trial> typed = d.Ask(*fresh, 1);
  ASSERT_EQ(typed.size(), 1u);
  EXPECT_EQ(typed[0].params.size(), 10u);
  EXPECT_TRUE(typed[0].params["ri"].is_number_integer());
}

TEST(HyperbandTest, GenerateBeforeASearchSpaceIsABadState) {
  RecordingHost host;
  auto tuner = MakeTuner<HyperbandTuner>(host, "", R"({"seed": 1})");
  Driver d;
  ExpectError([&] { d.Ask(*tuner, 1); }, TH_BAD_STATE, {"no search space"});
}

TEST(HyperbandTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) {
    return Constructing<HyperbandTuner>(host, args);
  };
  ExpectError(construct(R"({"R": 0})"), TH_INVALID_ARGUMENT, {"hyperband", "\"R\""});
  ExpectError(construct(R"({"R": 2.5})"), TH_INVALID_ARGUMENT, {"\"R\""});
  ExpectError(construct(R"({"R": "60"})"), TH_INVALID_ARGUMENT, {"\"R\""});
  ExpectError(construct(R"({"R": 1000001})"), TH_INVALID_ARGUMENT, {"\"R\""});
  ExpectError(construct(R"({"eta": 1})"), TH_INVALID_ARGUMENT, {"\"eta\""});
  ExpectError(construct(R"({"exec_mode": "sideways"})"), TH_INVALID_ARGUMENT, {"\"exec_mode\""});
  ExpectError(construct(R"({"optimize_mode": "up"})"), TH_INVALID_ARGUMENT, {"\"optimize_mode\""});
  ExpectError(construct(R"({"seed": -1})"), TH_INVALID_ARGUMENT, {"\"seed\""});
  ExpectError(construct(R"({"r": 60})"), TH_INVALID_ARGUMENT, {"\"r\""});
  ExpectError(construct(R"({"min_budget": 1})"), TH_INVALID_ARGUMENT, {"\"min_budget\""});
  // 81.0 from a YAML tool is 81.
  msgpack::object_handle ok = Msgpack(R"({"R": 81.0, "eta": 3, "exec_mode": "serial"})");
  HyperbandTuner t(host.ref(), ok.get());
  EXPECT_EQ(t.geometry().s_max(), 4);
  EXPECT_TRUE(t.serial());
}

// --- Seeds, state, import ---

// Noisy, so rankings depend on the configurations.
std::optional<double> Quadratic(const Json& p) {
  const double x = p["x"].get<double>();
  return -(x - 30) * (x - 30);
}

TEST(HyperbandTest, SameSeedGivesTheSameTrials) {
  for (const char* mode : {"serial", "parallelism"}) {
    RecordingHost host;
    const std::string args = std::string(R"({"R": 27, "seed": 42, "exec_mode": ")") + mode + "\"}";
    auto a = MakeTuner<HyperbandTuner>(host, kOneX, args);
    auto b = MakeTuner<HyperbandTuner>(host, kOneX, args);
    Simulation sa(4, Quadratic);
    Simulation sb(4, Quadratic);
    std::vector<Trial> ta = sa.Run(*a, host, 150);
    std::vector<Trial> tb = sb.Run(*b, host, 150);
    ASSERT_EQ(ta.size(), 150u);
    EXPECT_EQ(Bytes(ta), Bytes(tb)) << mode;

    auto c = MakeTuner<HyperbandTuner>(
        host, kOneX, std::string(R"({"R": 27, "seed": 43, "exec_mode": ")") + mode + "\"}");
    Simulation sc(4, Quadratic);
    EXPECT_NE(Bytes(sc.Run(*c, host, 150)), Bytes(ta)) << mode;
  }
}

TEST(HyperbandTest, OmittedSeedIsLoggedAndReproduces) {
  RecordingHost host;
  auto a = MakeTuner<HyperbandTuner>(host, kOneX, "{}");
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "hyperband: seed " + std::to_string(a->seed())));
  auto b = MakeTuner<HyperbandTuner>(host, kOneX, R"({"seed": )" + std::to_string(a->seed()) + "}");
  Driver da;
  Driver db;
  EXPECT_EQ(Bytes(da.Ask(*a, 30)), Bytes(db.Ask(*b, 30)));
}

TEST(HyperbandTest, SavedStateContinuesIdentically) {
  for (const char* mode : {"serial", "parallelism"}) {
    RecordingHost host;
    const std::string args = std::string(R"({"R": 27, "seed": 5, "exec_mode": ")") + mode + "\"}";
    auto a = MakeTuner<HyperbandTuner>(host, kOneX, args);
    Simulation sim(5, [](const Json& p) -> std::optional<double> {
      const double x = p["x"].get<double>();
      if (x > 90) return std::nullopt;  // some failures
      return -(x - 30) * (x - 30);
    });
    sim.Run(*a, host, 57);
    const std::string state = a->SaveState();
    Simulation sim_b = sim;  // the host's side of the same moment
    std::vector<Trial> next_a = sim.Run(*a, host, 120);
    ASSERT_EQ(next_a.size(), 120u);

    RecordingHost host_b;
    auto b = MakeTuner<HyperbandTuner>(
        host_b, kOneX, std::string(R"({"R": 27, "seed": 99, "exec_mode": ")") + mode + "\"}");
    b->LoadState(state);
    EXPECT_EQ(b->seed(), 5u);
    std::vector<Trial> next_b = sim_b.Run(*b, host_b, 120);
    EXPECT_EQ(Bytes(next_a), Bytes(next_b)) << mode;
    EXPECT_EQ(a->SaveState(), b->SaveState()) << mode;
  }
}

TEST(HyperbandTest, SavedStateKeepsCredits) {
  RecordingHost host;
  auto a = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "exec_mode": "serial", "seed": 6})");
  Driver d;
  std::vector<Trial> round0 = d.Ask(*a, 9);
  EXPECT_TRUE(d.Ask(*a, 2).empty());
  const std::string state = a->SaveState();
  auto b = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "exec_mode": "serial", "seed": 1})");
  b->LoadState(state);
  EXPECT_EQ(b->credits(), (std::vector<int64_t>{9, 10}));
  for (const Trial& t : round0) {
    ASSERT_TRUE(b->Locate(t.id).has_value());
    d.Finish(*b, t.id, t.params["x"].get<double>());
  }
  std::vector<Trial> sent = d.TakeSent(*b, host);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].id, 9);
  EXPECT_EQ(sent[1].id, 10);
}

TEST(HyperbandTest, BadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto tuner = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 13})");
  auto reference = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 13})");
  auto other = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 27, "seed": 13})");
  Driver d;
  d.Ask(*other, 3);
  ExpectError([&] { tuner->LoadState("\xc1"); }, TH_INVALID_ARGUMENT, {"saved state"});
  ExpectError([&] { tuner->LoadState(other->SaveState()); }, TH_INVALID_ARGUMENT,
              {"saved state", "budgets"});
  const std::string random_state = PackText(R"({"format": "org.tunehost.random", "version": 1})");
  ExpectError([&] { tuner->LoadState(random_state); }, TH_INVALID_ARGUMENT,
              {"not a state of format org.tunehost.hyperband"});
  // A damaged bracket: its configuration count does not match R=9.
  Json broken = ToJson(reference->SaveState());
  broken["brackets"] = Json::parse(R"([[0, 0, 2, [], [[]]]])");
  broken["next_bracket"] = 1;
  ExpectError([&] { tuner->LoadState(Pack(broken)); }, TH_INVALID_ARGUMENT,
              {"saved state", "configurations"});
  // A queue that hands a configuration out twice, or forgets one.
  auto started = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 13})");
  d.Ask(*started, 3);  // 6 of the 9 configurations stay queued
  Json twice = ToJson(started->SaveState());
  ASSERT_EQ(twice["queue"].size(), 6u);
  Json forgot = twice;
  twice["queue"].push_back(twice["queue"][0]);
  forgot["queue"].erase(forgot["queue"].begin());
  ExpectError([&] { tuner->LoadState(Pack(twice)); }, TH_INVALID_ARGUMENT,
              {"saved state", "queued twice"});
  ExpectError([&] { tuner->LoadState(Pack(forgot)); }, TH_INVALID_ARGUMENT,
              {"saved state", "missing from the queue"});
  Driver d1;
  Driver d2;
  EXPECT_EQ(Bytes(d1.Ask(*tuner, 12)), Bytes(d2.Ask(*reference, 12)));
}

TEST(HyperbandTest, ImportDataIsIgnoredAsNni) {
  RecordingHost host;
  auto a = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 21})");
  auto b = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 21})");
  msgpack::object_handle records = Msgpack(R"([
    {"parameters": {"x": 3.0}, "value": 0.5},
    {"parameter": {"x": 4.0, "TRIAL_BUDGET": 9}, "value": {"default": 0.7}},
    {"value": 3}])");
  a->ImportData(records.get());
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "3 imported records ignored"));
  // A concrete consequence: nothing changes.
  Simulation sa(3, Quadratic);
  Simulation sb(3, Quadratic);
  EXPECT_EQ(Bytes(sa.Run(*a, host, 40)), Bytes(sb.Run(*b, host, 40)));
  ExpectNonArrayImportRefused(*a);
}

TEST(HyperbandTest, ResultsOfUnknownIdsAreIgnored) {
  RecordingHost host;
  auto a = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 22})");
  auto b = MakeTuner<HyperbandTuner>(host, kOneX, R"({"R": 9, "seed": 22})");
  msgpack::object_handle p = Msgpack(R"({"x": 1.0})");
  msgpack::object_handle v = Msgpack("1.0");
  a->ReceiveTrialResult(1000, p.get(), v.get(), 1.0, true);
  a->TrialEnd(1000, true);
  Simulation sa(3, Quadratic);
  Simulation sb(3, Quadratic);
  EXPECT_EQ(Bytes(sa.Run(*a, host, 30)), Bytes(sb.Run(*b, host, 30)));
}

// --- The module ---

TEST(HyperbandModuleTest, ExportsHyperbandAndBohb) {
  void* lib = dlopen(TH_HYPERBAND_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  const auto* entry = static_cast<const th_plugin_entry_t*>(dlsym(lib, TH_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  ASSERT_TRUE(entry->init(TH_HYPERBAND_MODULE));
  const auto* factory =
      static_cast<const th_tuner_factory_t*>(entry->get_factory(TH_TUNER_FACTORY_ID));
  ASSERT_NE(factory, nullptr);
  ASSERT_EQ(factory->count(factory), 2u);
  std::set<std::pair<std::string, std::string>> classes;
  for (uint32_t i = 0; i < 2; ++i) {
    const th_plugin_descriptor_t* d = factory->get_descriptor(factory, i);
    ASSERT_NE(d, nullptr);
    classes.emplace(d->id, d->name);
  }
  EXPECT_EQ(classes, (std::set<std::pair<std::string, std::string>>{
                         {"org.tunehost.hyperband", "hyperband"}, {"org.tunehost.bohb", "bohb"}}));
  EXPECT_EQ(entry->get_factory("tunehost.assessor-factory/1"), nullptr);

  RecordingHost host;
  std::vector<uint8_t> args = Json::to_msgpack(Json::parse(R"({"seed": 1})"));
  for (const char* id : {"org.tunehost.hyperband", "org.tunehost.bohb"}) {
    char message[256] = {};
    th_error_t err{message, sizeof(message)};
    const th_tuner_t* created =
        factory->create(factory, host.ref().raw(), id, th_bytes_t{args.data(), args.size()}, &err);
    ASSERT_NE(created, nullptr) << id << ": " << message;
    AbiTuner t(created);
    EXPECT_EQ(t.UpdateSearchSpace(kOneX), TH_OK) << t.message();
    EXPECT_EQ(t.Generate({0}), TH_OK) << t.message();
    ASSERT_EQ(t.emitted_params().size(), 1u);
    EXPECT_TRUE(ToJson(t.emitted_params()[0]).contains("TRIAL_BUDGET"));
  }
  // Bad class_args come back as an error naming the argument.
  std::vector<uint8_t> bad = Json::to_msgpack(Json::parse(R"({"eta": 1})"));
  char message[256] = {};
  th_error_t err{message, sizeof(message)};
  EXPECT_EQ(factory->create(factory, host.ref().raw(), "org.tunehost.bohb",
                            th_bytes_t{bad.data(), bad.size()}, &err),
            nullptr);
  EXPECT_NE(std::string(message).find("\"eta\""), std::string::npos) << message;
  entry->deinit();
  dlclose(lib);
}

}  // namespace
}  // namespace tunehost::plugins::hyperband
