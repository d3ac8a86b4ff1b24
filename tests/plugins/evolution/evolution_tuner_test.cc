// Tests of plugins/evolution/evolution_tuner.{h,cc}: NNI's EvolutionTuner
// (random initial population run first, tournament of two with the worse
// dropped, mutation of exactly one parameter, nested re-sampling, failed
// trials replaced), the credit pattern with every kept id served, import,
// class_args, search space validation, seeded reproducibility and state.
#include "evolution/evolution_tuner.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "plugins/plugin_testing.h"
#include "plugins/tuner_testing.h"
#include "tunehost/sdk/host.h"

namespace tunehost::plugins::testing {
namespace {

// The population as (parameter map, fitness) pairs, packed by the space.
struct Member {
  Json config;
  std::optional<double> fitness;
  bool operator<(const Member& o) const {
    return std::tie(config, fitness) < std::tie(o.config, o.fitness);
  }
};

std::vector<Member> PopulationOf(const EvolutionTuner& tuner, const std::string& space_text) {
  msgpack::object_handle s = Msgpack(space_text);
  sdk::SearchSpace space = sdk::SearchSpace::Parse(s.get());
  std::vector<Member> out;
  for (const EvolutionTuner::Individual& ind : tuner.population()) {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    space.Pack(ind.config, pk);
    out.push_back({ToJson(std::string(buffer.data(), buffer.size())), ind.fitness});
  }
  return out;
}

// Keys whose values differ between two flat maps of the same keys.
std::vector<std::string> Differing(const Json& a, const Json& b) {
  std::vector<std::string> keys;
  for (const auto& item : a.items()) {
    if (b.at(item.key()) != item.value()) keys.push_back(item.key());
  }
  return keys;
}

const char* kFour = R"({
  "a": {"_type": "uniform", "_value": [0, 1]},
  "b": {"_type": "loguniform", "_value": [0.001, 1]},
  "c": {"_type": "normal", "_value": [0, 1]},
  "d": {"_type": "quniform", "_value": [0, 100, 0.001]}
})";

const char* kNested = R"({
  "z": {"_type": "uniform", "_value": [0, 1]},
  "opt": {"_type": "choice", "_value": [
    {"_name": "a", "x": {"_type": "uniform", "_value": [0, 1]},
                   "y": {"_type": "uniform", "_value": [0, 1]}},
    {"_name": "b", "w": {"_type": "uniform", "_value": [0, 1]}}
  ]}
})";

// Drives a tuner like a host: each step asks for two ids; the oldest running
// trials then end (every 4th without a result) until two are left. Records
// what was emitted and what was sent later for a kept id.
struct Driver {
  std::deque<std::pair<int64_t, std::string>> running;
  int64_t next_id = 0;
  int ended = 0;

  std::vector<std::string> Run(EvolutionTuner& tuner, RecordingHost& host, int steps) {
    std::vector<std::string> log;
    for (int i = 0; i < steps; ++i) {
      Generated m = GenerateMultiple(tuner, {next_id, next_id + 1});
      next_id += 2;
      log.push_back(m.all ? "all" : "some");
      for (auto& [id, params] : m.emitted) {
        log.push_back("E" + std::to_string(id) + ":" + params);
        running.emplace_back(id, params);
      }
      while (running.size() > 2) {
        auto [id, params] = running.front();
        running.pop_front();
        const bool fail = ++ended % 4 == 0;
        if (!fail) ReportResult(tuner, id, params, MetricOf(ToJson(params)));
        tuner.TrialEnd(id, !fail);
        for (auto& [sid, sparams] : host.sent()) {
          log.push_back("S" + std::to_string(sid) + ":" + sparams);
          running.emplace_back(sid, sparams);
        }
        host.clear_sent();
      }
    }
    return log;
  }
};

// A line of a driver log ("E<id>:" emitted, "S<id>:" sent later, then the
// packed map) with the map as JSON, for ExpectSameSequence.
std::string ReadableLine(const std::string& line) {
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return line;
  return line.substr(0, colon + 1) + ToJson(line.substr(colon + 1)).dump();
}

// --- Evolution semantics ---

TEST(EvolutionTunerTest, RandomInitialPopulationIsRunFirst) {
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, kFour, R"({"seed": 1, "population_size": 5})");
  std::vector<Member> initial = PopulationOf(*tuner, kFour);
  ASSERT_EQ(initial.size(), 5u);
  std::set<Json> distinct;
  for (const Member& m : initial) {
    EXPECT_FALSE(m.fitness.has_value());
    distinct.insert(m.config);
  }
  EXPECT_EQ(distinct.size(), 5u);
  // The un-evaluated individuals, in order, before anything else.
  for (int64_t id = 0; id < 5; ++id) {
    std::optional<std::string> p = Generate(*tuner, id);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(ToJson(*p), initial[static_cast<size_t>(id)].config);
  }
  EXPECT_TRUE(tuner->population().empty());
  EXPECT_EQ(tuner->running_count(), 5u);
}

// Drives `generations` children one at a time on a population with results
// and checks NNI's step on each: the worse of a pair is dropped, the child is
// the better one with one parameter re-sampled (`is_mutation`).
void CheckGenerations(
    EvolutionTuner& tuner, const std::string& space, int generations, int64_t first_id,
    const std::function<bool(const Json& parent, const Json& child)>& is_mutation) {
  for (int g = 0; g < generations; ++g) {
    SCOPED_TRACE("generation " + std::to_string(g));
    std::vector<Member> before = PopulationOf(tuner, space);
    ASSERT_GE(before.size(), 2u);
    for (const Member& m : before) ASSERT_TRUE(m.fitness.has_value());
    const int64_t id = first_id + g;
    std::optional<std::string> p = Generate(tuner, id);
    ASSERT_TRUE(p.has_value());
    const Json child = ToJson(*p);
    std::vector<Member> after = PopulationOf(tuner, space);
    ASSERT_EQ(after.size(), before.size() - 1);
    // Exactly one member left: the worse one of the compared pair.
    std::multiset<Member> left(before.begin(), before.end());
    for (const Member& m : after) {
      auto it = left.find(m);
      ASSERT_NE(it, left.end()) << "new member " << m.config;
      left.erase(it);
    }
    ASSERT_EQ(left.size(), 1u);
    const Member& dropped = *left.begin();
    // The parent stays, and it is at least as good as the dropped one (a
    // parent's earlier children can look like parents too: one must fit).
    bool found = false;
    for (const Member& parent : after) {
      found = found || (*dropped.fitness <= *parent.fitness && is_mutation(parent.config, child));
    }
    EXPECT_TRUE(found) << "no member at least as good as the dropped one (" << *dropped.fitness
                       << ") is the parent of " << child;
    ReportResult(tuner, id, *p, MetricOf(child) * ((g % 3) - 1));
    tuner.TrialEnd(id, true);
  }
}

void StartWithResults(EvolutionTuner& tuner, int n) {
  for (int64_t id = 0; id < n; ++id) {
    std::string p = *Generate(tuner, id);
    ReportResult(tuner, id, p, MetricOf(ToJson(p)));
    tuner.TrialEnd(id, true);
  }
}

TEST(EvolutionTunerTest, ChildIsTheBetterOfTwoWithExactlyOneParameterResampled) {
  for (const char* mode : {"maximize", "minimize"}) {
    SCOPED_TRACE(mode);
    RecordingHost host;
    auto tuner = MakeTuner<EvolutionTuner>(
        host, kFour,
        std::string(R"({"seed": 2, "population_size": 4, "optimize_mode": ")") + mode + "\"}");
    StartWithResults(*tuner, 4);
    std::set<std::string> mutated;
    CheckGenerations(*tuner, kFour, 80, 100, [&](const Json& parent, const Json& child) {
      std::vector<std::string> keys = Differing(parent, child);
      if (keys.size() != 1) return false;
      mutated.insert(keys[0]);
      return true;
    });
    EXPECT_EQ(mutated.size(), 4u) << "every parameter gets mutated sometimes";
  }
}

TEST(EvolutionTunerTest, FitnessFollowsOptimizeMode) {
  RecordingHost host;
  auto max = MakeTuner<EvolutionTuner>(
      host, kFour, R"({"seed": 3, "population_size": 1})");  // maximize by default
  auto min = MakeTuner<EvolutionTuner>(
      host, kFour, R"({"seed": 3, "population_size": 1, "optimize_mode": "minimize"})");
  for (EvolutionTuner* t : {max.get(), min.get()}) {
    std::string p = *Generate(*t, 0);
    ReportResult(*t, 0, p, 2.5);
    t->TrialEnd(0, true);
  }
  ASSERT_EQ(max->population().size(), 1u);
  EXPECT_EQ(max->population()[0].fitness, 2.5);
  ASSERT_EQ(min->population().size(), 1u);
  EXPECT_EQ(min->population()[0].fitness, -2.5);
  // Two results in a minimizing population: the child comes from the lower metric.
  std::string p = *Generate(*min, 1);
  ReportResult(*min, 1, p, 1.0);
  min->TrialEnd(1, true);
  const Json best = ToJson(p);
  const Json child = ToJson(*Generate(*min, 2));
  EXPECT_EQ(Differing(best, child).size(), 1u) << best << " -> " << child;
  ASSERT_EQ(min->population().size(), 1u);
  EXPECT_EQ(min->population()[0].fitness, -1.0);
}

TEST(EvolutionTunerTest, NestedChoiceMutationResamplesItsSubSpace) {
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, kNested, R"({"seed": 4, "population_size": 4})");
  StartWithResults(*tuner, 4);
  int z_only = 0;
  int inner_one = 0;
  int choice = 0;
  CheckGenerations(*tuner, kNested, 300, 100, [&](const Json& parent, const Json& child) {
    const bool z_same = parent["z"] == child["z"];
    const Json& po = parent["opt"];
    const Json& co = child["opt"];
    if (!z_same) {
      if (po != co) return false;
      ++z_only;
      return true;
    }
    if (po == co) return false;
    if (po["_name"] != co["_name"]) {
      ++choice;  // another option: its own sub-space, freshly drawn
      return true;
    }
    // Same option: one inner parameter (mutated alone) or all of them (the
    // choice was re-sampled to the same option).
    const size_t n = Differing(po, co).size();
    if (n == 1 && po.size() == 3) {
      ++inner_one;
      return true;
    }
    if (n == po.size() - 1) {
      ++choice;
      return true;
    }
    return false;
  });
  EXPECT_GT(z_only, 30);
  EXPECT_GT(inner_one, 30);
  EXPECT_GT(choice, 30);
}

TEST(EvolutionTunerTest, TrialEndingWithoutResultIsReplacedByARandomIndividual) {
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, kFour, R"({"seed": 5, "population_size": 2})");
  std::vector<Member> initial = PopulationOf(*tuner, kFour);
  const std::string p0 = *Generate(*tuner, 0);
  const std::string p1 = *Generate(*tuner, 1);
  ASSERT_TRUE(tuner->population().empty());

  tuner->TrialEnd(0, false);
  std::vector<Member> after = PopulationOf(*tuner, kFour);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_FALSE(after[0].fitness.has_value());
  EXPECT_NE(after[0].config, initial[0].config);
  EXPECT_NE(after[0].config, initial[1].config);

  ReportResult(*tuner, 1, p1, 3.0);
  tuner->TrialEnd(1, true);  // a result: nothing to replace
  ASSERT_EQ(tuner->population().size(), 2u);

  // The new random individual runs before any child is bred.
  std::optional<std::string> p2 = Generate(*tuner, 2);
  ASSERT_TRUE(p2.has_value());
  EXPECT_EQ(ToJson(*p2), after[0].config);
  // Success without a result gives nothing back either: replaced as well.
  tuner->TrialEnd(2, true);
  after = PopulationOf(*tuner, kFour);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].config, ToJson(p1));
  EXPECT_FALSE(after[1].fitness.has_value());
}

// --- Credit ---

TEST(EvolutionTunerTest, IdsBeyondThePopulationAreKeptAndEachTrialEndServesOne) {
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, kFour, R"({"seed": 6, "population_size": 2})");
  Generated m = GenerateMultiple(*tuner, {10, 11, 12, 13});
  EXPECT_FALSE(m.all);
  ASSERT_EQ(m.emitted.size(), 2u);
  EXPECT_EQ(m.emitted[0].first, 10);
  EXPECT_EQ(m.emitted[1].first, 11);
  EXPECT_EQ(tuner->credits(), (std::deque<int64_t>{12, 13}));
  EXPECT_TRUE(host.sent().empty());
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "population_size"));

  ReportResult(*tuner, 10, m.emitted[0].second, 1.0);
  tuner->TrialEnd(10, true);
  ASSERT_EQ(host.sent().size(), 1u);
  EXPECT_EQ(host.sent()[0].first, 12);
  EXPECT_EQ(tuner->credits(), (std::deque<int64_t>{13}));
  EXPECT_EQ(tuner->running_count(), 2u);

  tuner->TrialEnd(11, false);
  ASSERT_EQ(host.sent().size(), 2u);
  EXPECT_EQ(host.sent()[1].first, 13);
  EXPECT_TRUE(tuner->credits().empty());

  // Every credit served: a further trial end sends nothing.
  tuner->TrialEnd(12, true);
  EXPECT_EQ(host.sent().size(), 2u);
  // Served parameters are configurations of the space, like emitted ones.
  for (const auto& [id, bytes] : host.sent()) {
    Json p = ToJson(bytes);
    EXPECT_EQ(p.size(), 4u) << p;
    EXPECT_GE(p["a"].get<double>(), 0.0);
    EXPECT_LE(p["a"].get<double>(), 1.0);
  }
  // A free slot again: a new id is emitted at once.
  Generated next = GenerateMultiple(*tuner, {14});
  EXPECT_TRUE(next.all);
  ASSERT_EQ(next.emitted.size(), 1u);
}

TEST(EvolutionTunerTest, TheLastCreditIsServedToo) {
  // NNI serves only while credit > 1: with one kept id that slot is lost.
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, kFour, R"({"seed": 7, "population_size": 1})");
  Generated m = GenerateMultiple(*tuner, {0, 1});
  ASSERT_EQ(m.emitted.size(), 1u);
  EXPECT_EQ(tuner->credits().size(), 1u);
  ReportResult(*tuner, 0, m.emitted[0].second, 1.0);
  tuner->TrialEnd(0, true);
  ASSERT_EQ(host.sent().size(), 1u);
  EXPECT_EQ(host.sent()[0].first, 1);
  EXPECT_TRUE(tuner->credits().empty());
}

TEST(EvolutionTunerTest, CreditThroughTheCAbiIsNoMoreTrialsThenSendTrial) {
  RecordingHost host;
  auto t = AbiTuner::Of<EvolutionTuner>(host, R"({"seed": 8, "population_size": 2})");
  ASSERT_EQ(t->UpdateSearchSpace(kFour), TH_OK) << t->message();
  EXPECT_EQ(t->Generate({20, 21, 22, 23, 24}), TH_NO_MORE_TRIALS);
  EXPECT_EQ(t->emitted_ids(), (std::vector<int64_t>{20, 21}));
  for (int64_t id : {20, 21, 22}) ASSERT_EQ(t->TrialEnd(id, false), TH_OK) << t->message();
  ASSERT_EQ(host.sent().size(), 3u);
  EXPECT_EQ(host.sent()[0].first, 22);
  EXPECT_EQ(host.sent()[1].first, 23);
  EXPECT_EQ(host.sent()[2].first, 24);
}

TEST(EvolutionTunerTest, RefusedSendTrialDropsTheIdAndKeepsTheConfiguration) {
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, kFour, R"({"seed": 9, "population_size": 1})");
  Generated m = GenerateMultiple(*tuner, {0, 1});
  ASSERT_EQ(m.emitted.size(), 1u);
  host.send_trial_status = TH_INVALID_ARGUMENT;
  tuner->TrialEnd(0, false);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "refused the trial for kept parameter id 1"));
  EXPECT_TRUE(tuner->credits().empty());
  EXPECT_EQ(tuner->running_count(), 0u);
  // The configuration that could not run is the next one to run.
  std::vector<Member> pop = PopulationOf(*tuner, kFour);
  ASSERT_FALSE(pop.empty());
  EXPECT_FALSE(pop[0].fitness.has_value());
  host.send_trial_status = TH_OK;
  EXPECT_EQ(ToJson(*Generate(*tuner, 2)), pop[0].config);
}

// --- Import, unknown ids, new space ---

TEST(EvolutionTunerTest, ImportedIndividualsCompeteWithTheirResults) {
  RecordingHost host;
  const char* space = R"({"a": {"_type": "uniform", "_value": [0, 1]},
                         "b": {"_type": "uniform", "_value": [0, 1]},
                         "c": {"_type": "uniform", "_value": [0, 1]}})";
  auto tuner = MakeTuner<EvolutionTuner>(host, space, R"({"seed": 10, "population_size": 1})");
  const Json x = Json::parse(R"({"a": 0.25, "b": 0.5, "c": 0.75})");
  Import(*tuner, Json::array({Json{{"parameter", x}, {"value", {{"default", 100.0}}}},
                              Json{{"parameters", {{"a", 0.1}}}, {"value", 1.0}},
                              Json{{"parameters", x}, {"value", "high"}}}));
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "skipped 2"));
  std::vector<Member> pop = PopulationOf(*tuner, space);
  ASSERT_EQ(pop.size(), 2u);  // the random one, then the import
  EXPECT_EQ(pop[1].config, x);
  EXPECT_EQ(pop[1].fitness, 100.0);

  // The random individual runs first and does worse than the import ...
  std::string r = *Generate(*tuner, 0);
  ReportResult(*tuner, 0, r, 0.0);
  tuner->TrialEnd(0, true);
  // ... so the next child is the imported configuration with one change.
  const Json child = ToJson(*Generate(*tuner, 1));
  EXPECT_EQ(Differing(x, child).size(), 1u) << child;
  pop = PopulationOf(*tuner, space);
  ASSERT_EQ(pop.size(), 1u);
  EXPECT_EQ(pop[0].config, x);

  ExpectNonArrayImportRefused(*tuner);
}

TEST(EvolutionTunerTest, UnknownIdsAreIgnoredAndCustomizedResultsJoin) {
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, kFour, R"({"seed": 11, "population_size": 2})");
  msgpack::object_handle params = Msgpack(R"({"a": 0.5, "b": 0.1, "c": 0.0, "d": 7.0})");
  msgpack::object_handle value = Msgpack("4.0");
  tuner->ReceiveTrialResult(50, params.get(), value.get(), 4.0, false);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "parameter id 50"));
  tuner->TrialEnd(51, true);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "trial end for parameter id 51"));
  EXPECT_EQ(tuner->population().size(), 2u);
  tuner->ReceiveTrialResult(52, params.get(), value.get(), 4.0, true);
  ASSERT_EQ(tuner->population().size(), 3u);
  EXPECT_EQ(tuner->population()[2].fitness, 4.0);
}

TEST(EvolutionTunerTest, NewSearchSpaceStartsANewPopulation) {
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, kFour, R"({"seed": 12, "population_size": 3})");
  StartWithResults(*tuner, 3);
  std::string running = *Generate(*tuner, 3);
  Update(*tuner, R"({"a": {"_type": "uniform", "_value": [0, 1]},
                     "b": {"_type": "loguniform", "_value": [0.001, 1]},
                     "c": {"_type": "normal", "_value": [0, 1]},
                     "d": {"_type": "quniform", "_value": [0, 100, 0.001]},
                     "e": {"_type": "choice", "_value": [1, 2]}})");
  ASSERT_EQ(tuner->population().size(), 3u);
  for (const auto& ind : tuner->population()) EXPECT_FALSE(ind.fitness.has_value());
  // The running trial's configuration has no "e": its result cannot join.
  ReportResult(*tuner, 3, running, 1.0);
  tuner->TrialEnd(3, true);
  EXPECT_EQ(tuner->population().size(), 3u);
  EXPECT_EQ(tuner->running_count(), 0u);
}

// --- class_args, search space, errors ---

TEST(EvolutionTunerTest, InvalidClassArgsAreRefusedNamingTheArgument) {
  RecordingHost host;
  auto construct = [&](const std::string& args) {
    return Constructing<EvolutionTuner>(host, args);
  };
  for (const char* bad : {"0", "-1", "1.5", "\"8\"", "100000", "true"}) {
    ExpectError(construct(std::string(R"({"population_size": )") + bad + "}"), TH_INVALID_ARGUMENT,
                {"\"population_size\"", "evolution"});
  }
  ExpectError(construct(R"({"sample_size": 25})"), TH_INVALID_ARGUMENT, {"\"sample_size\""});
  ExpectError(construct(R"({"optimize_mode": "max"})"), TH_INVALID_ARGUMENT, {"\"optimize_mode\""});
  ExpectError(construct(R"({"seed": "1"})"), TH_INVALID_ARGUMENT, {"\"seed\""});
  msgpack::object_handle ok = Msgpack(R"({"population_size": 20.0, "optimize_mode": "minimize"})");
  EvolutionTuner t(host.ref(), ok.get());
  EXPECT_EQ(t.population_size(), 20);
  msgpack::object_handle none = Msgpack("{}");
  EXPECT_EQ(EvolutionTuner(host.ref(), none.get()).population_size(), 32);
}

TEST(EvolutionTunerTest, BadSearchSpaceIsRefusedNamingTheKey) {
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, kFour, R"({"seed": 13, "population_size": 2})");
  auto update = [&](const std::string& space) { return Updating(*tuner, space); };
  ExpectError(update(R"({"lr": {"_type": "qloguniform", "_value": [0.1, 1]}})"),
              TH_INVALID_ARGUMENT, {"\"lr\""});
  ExpectError(update(R"({"opt": {"_type": "choice", "_value": [
                 {"_name": "sgd", "m": {"_type": "normal", "_value": [0, -1]}}]}})"),
              TH_INVALID_ARGUMENT, {"\"opt/m\"", "sgd"});
  // A refused update leaves the previous space and population.
  EXPECT_EQ(PopulationOf(*tuner, kFour).size(), 2u);
}

TEST(EvolutionTunerTest, CallsBeforeASearchSpaceAreABadState) {
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, "", R"({"population_size": 2})");
  EXPECT_TRUE(host.Logged(TH_LOG_INFO, "evolution: seed "));
  ExpectCallsBeforeASearchSpaceRefused(*tuner);
}

// --- Reproducibility and state ---

TEST(EvolutionTunerTest, SameSeedAndEventsGiveTheSameParameters) {
  RecordingHost host_a;
  RecordingHost host_b;
  RecordingHost host_c;
  const char* args = R"({"seed": 14, "population_size": 3})";
  auto a = MakeTuner<EvolutionTuner>(host_a, kNested, args);
  auto b = MakeTuner<EvolutionTuner>(host_b, kNested, args);
  Driver da;
  Driver db;
  std::vector<std::string> log_a = da.Run(*a, host_a, 60);
  ExpectSameSequence(db.Run(*b, host_b, 60), log_a, ReadableLine);
  // The script used both paths: emitted now and sent for a kept id.
  size_t sent = 0;
  for (const std::string& line : log_a) sent += line[0] == 'S' ? 1 : 0;
  EXPECT_GT(sent, 10u);
  auto c = MakeTuner<EvolutionTuner>(host_c, kNested, R"({"seed": 15, "population_size": 3})");
  Driver dc;
  EXPECT_TRUE(dc.Run(*c, host_c, 60) != log_a);
}

TEST(EvolutionTunerTest, SavedStateContinuesExactlyLikeTheOriginal) {
  RecordingHost host_a;
  auto a = MakeTuner<EvolutionTuner>(host_a, kNested, R"({"seed": 16, "population_size": 3})");
  Driver driver;
  driver.Run(*a, host_a, 25);
  // Saved mid-run with trials running and ids kept as credit.
  Generated m = GenerateMultiple(*a, {driver.next_id, driver.next_id + 1});
  driver.next_id += 2;
  for (auto& [id, params] : m.emitted) driver.running.emplace_back(id, params);
  ASSERT_FALSE(a->credits().empty());
  ASSERT_GT(a->running_count(), 0u);
  const std::string state = a->SaveState();
  const std::deque<int64_t> credits = a->credits();
  Driver copy = driver;
  std::vector<std::string> next = driver.Run(*a, host_a, 40);

  RecordingHost host_b;
  auto b = MakeTuner<EvolutionTuner>(host_b, kNested, R"({"seed": 1, "population_size": 3})");
  b->LoadState(state);
  EXPECT_EQ(b->seed(), 16u);
  EXPECT_EQ(b->credits(), credits);
  ExpectSameSequence(copy.Run(*b, host_b, 40), next, ReadableLine);
  EXPECT_TRUE(b->SaveState() == a->SaveState());
}

TEST(EvolutionTunerTest, BadSavedStateIsRefusedAndChangesNothing) {
  RecordingHost host;
  auto tuner = MakeTuner<EvolutionTuner>(host, kFour, R"({"seed": 17, "population_size": 2})");
  auto reference = MakeTuner<EvolutionTuner>(host, kFour, R"({"seed": 17, "population_size": 2})");
  ExpectError([&] { tuner->LoadState("\xc1"); }, TH_INVALID_ARGUMENT, {"saved state"});
  const std::string other = PackText(R"({"format": "org.tunehost.anneal", "version": 1})");
  ExpectError([&] { tuner->LoadState(other); }, TH_INVALID_ARGUMENT,
              {"saved state", "org.tunehost.evolution"});
  auto nested = MakeTuner<EvolutionTuner>(host, kNested, R"({"seed": 17, "population_size": 2})");
  ExpectError([&] { tuner->LoadState(nested->SaveState()); }, TH_INVALID_ARGUMENT,
              {"saved state", "does not fit the search space"});
  // Fitness is signed by optimize_mode: a state of the other mode is refused.
  auto minimizing = MakeTuner<EvolutionTuner>(
      host, kFour, R"({"seed": 17, "population_size": 2, "optimize_mode": "minimize"})");
  ExpectError([&] { tuner->LoadState(minimizing->SaveState()); }, TH_INVALID_ARGUMENT,
              {"saved state", "optimize_mode minimize"});
  EXPECT_EQ(tuner->seed(), 17u);
  for (int64_t id = 0; id < 2; ++id) EXPECT_EQ(Generate(*tuner, id), Generate(*reference, id));
}

}  // namespace
}  // namespace tunehost::plugins::testing
