// Tests of plugins/pbt/pbt_tuner.{h,cc}: NNI's PBTTuner semantics (checkpoint
// directories per member and step, synchronous steps with credit served
// through send_trial, exploit of the bottom fraction from the top, explore by
// perturbation per parameter type), failures as the worst score, class_args,
// search space validation, seeded reproducibility, saved state and NNI's
// import_data (resume from records).
#include "pbt/pbt_tuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdlib.h>
#include <string>
#include <utility>
#include <vector>

#include "plugins/plugin_testing.h"
#include "plugins/tuner_testing.h"

namespace tunehost::plugins::testing {
namespace {

const Json kSpace = Json::parse(R"({
  "lr": {"_type": "loguniform", "_value": [0.0001, 1]},
  "u": {"_type": "uniform", "_value": [0, 10]},
  "n": {"_type": "randint", "_value": [1, 9]},
  "q": {"_type": "quniform", "_value": [0, 100, 5]},
  "c": {"_type": "choice", "_value": ["a", "b", "c", "d"]}
})");

std::unique_ptr<PbtTuner> MakePbt(const RecordingHost& host, const Json& args) {
  Json a = {{"seed", 5}, {"all_checkpoint_dir", "/ck"}, {"population_size", 5}};
  a.update(args);
  return MakeTunerOf<PbtTuner>(host, kSpace, a);
}

std::string Dir(int member, int step) {
  return "/ck/" + std::to_string(member) + "/" + std::to_string(step);
}

// One step of a whole population: ids from *next_id, each trial's result
// from `score` (nullopt: it ends failed without one). Returns the maps run.
std::vector<Json> RunStep(PbtTuner& t, RecordingHost& host, int64_t* next_id,
                          const std::function<std::optional<double>(const Json&)>& score) {
  std::vector<std::pair<int64_t, std::string>> trials;
  for (const auto& [id, bytes] : host.sent()) trials.emplace_back(id, bytes);
  host.clear_sent();
  while (static_cast<int64_t>(trials.size()) < t.population_size()) {
    Packed p = PackParameters(t, (*next_id)++);
    EXPECT_TRUE(p.generated) << "a member of the step was not handed out";
    if (!p.generated) break;
    trials.emplace_back(*next_id - 1, p.bytes);
  }
  std::vector<Json> out;
  for (const auto& [id, bytes] : trials) {
    Json params = ToJson(bytes);
    std::optional<double> s = score(params);
    if (s) ReportResult(t, id, bytes, *s);
    t.TrialEnd(id, s.has_value());
    out.push_back(params);
  }
  return out;
}

TEST(PbtTest, DefaultsAreNnis) {
  RecordingHost host;
  auto t = MakeTunerOf<PbtTuner>(host, kSpace, Json::object());
  EXPECT_EQ(t->population_size(), 10);
  EXPECT_DOUBLE_EQ(t->factor(), 0.2);
  EXPECT_DOUBLE_EQ(t->resample_probability(), 0.25);
  EXPECT_DOUBLE_EQ(t->fraction(), 0.2);
  EXPECT_NE(t->all_checkpoint_dir().find("/tunehost/checkpoint/pbt-"), std::string::npos)
      << t->all_checkpoint_dir();
  // NNI's validator spells factor "factors": both are read.
  auto f = MakeTunerOf<PbtTuner>(host, kSpace, {{"factors", 0.5}});
  EXPECT_DOUBLE_EQ(f->factor(), 0.5);
}

TEST(PbtTest, BadClassArgsAndSpacesAreRefusedNamingTheKey) {
  RecordingHost host;
  ExpectError(Constructing<PbtTuner>(host, R"({"population_size": 0})"), TH_INVALID_ARGUMENT,
              {"population_size"});
  ExpectError(Constructing<PbtTuner>(host, R"({"fraction": 0})"), TH_INVALID_ARGUMENT,
              {"fraction"});
  ExpectError(Constructing<PbtTuner>(host, R"({"all_checkpoint_dir": ""})"), TH_INVALID_ARGUMENT,
              {"all_checkpoint_dir"});
  ExpectError(Constructing<PbtTuner>(host, R"({"resample_probability": 2})"), TH_INVALID_ARGUMENT,
              {"resample_probability"});
  auto t = MakePbt(host, Json::object());
  ExpectError(Updating(*t, R"({"k": {"_type": "choice", "_value": [{"_name": "a"}]}})"),
              TH_INVALID_ARGUMENT, {"\"k\"", "nested"});
  ExpectError(Updating(*t, R"({"save_checkpoint_dir": {"_type": "uniform", "_value": [0, 1]}})"),
              TH_INVALID_ARGUMENT, {"save_checkpoint_dir"});
}

// Step 0: every member starts from scratch; both directories are its own
// <dir>/<member>/0. A sixth id is kept until the step ends, then served
// through send_trial with the member's step-1 directories.
TEST(PbtTest, CheckpointDirectoriesFollowMembersAndSteps) {
  RecordingHost host;
  auto t = MakePbt(host, {{"fraction", 0.2}});
  std::vector<Json> step0 = GenerateNJson(*t, 5);
  ASSERT_EQ(step0.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(step0[i]["load_checkpoint_dir"], Dir(i, 0));
    EXPECT_EQ(step0[i]["save_checkpoint_dir"], Dir(i, 0));
  }
  EXPECT_FALSE(Generate(*t, 5).has_value()) << "the step has no more members: id 5 is kept";
  // Member i scores i: member 4 is the top, member 0 the bottom (maximize).
  for (int i = 0; i < 5; ++i) {
    ReportResult(*t, i, Pack(step0[i]), i);
    t->TrialEnd(i, true);
    if (i < 4) {
      EXPECT_TRUE(host.sent().empty()) << "steps are synchronous";
    }
  }
  EXPECT_EQ(t->step(), 1);
  ASSERT_EQ(host.sent().size(), 1u);
  EXPECT_EQ(host.sent()[0].first, 5);
  std::map<std::string, Json> by_save;  // step 1, keyed by where each saves
  by_save[ToJson(host.sent()[0].second)["save_checkpoint_dir"]] = ToJson(host.sent()[0].second);
  for (const Json& p : GenerateNJson(*t, 4, 6)) by_save[p["save_checkpoint_dir"]] = p;
  ASSERT_EQ(by_save.size(), 5u);
  for (int i = 1; i < 5; ++i) {  // the rest continue from what they saved
    const Json& p = by_save.at(Dir(i, 1));
    EXPECT_EQ(p["load_checkpoint_dir"], Dir(i, 0));
    for (const char* k : {"lr", "u", "n", "q", "c"}) EXPECT_EQ(p[k], step0[i][k]) << k;
  }
  // The bottom (member 0) loads the top's checkpoint, saves under its own
  // directory, and starts from the top's hyperparameters, perturbed.
  const Json& bottom = by_save.at(Dir(0, 1));
  EXPECT_EQ(bottom["load_checkpoint_dir"], Dir(4, 0));
  int moved = 0;
  for (const char* k : {"lr", "u", "n", "q", "c"}) moved += bottom[k] != step0[4][k];
  EXPECT_GE(moved, 3) << "each parameter is re-sampled or moved (a move can hit a bound)";
}

// Explore: without re-sampling, each parameter moves by exactly NNI's step
// from the top member's value, clipped to its range.
TEST(PbtTest, PerturbationMovesEachTypeByNnisStep) {
  int checked = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    RecordingHost host;
    auto t = MakePbt(host, {{"seed", seed}, {"resample_probability", 0.0}, {"population_size", 2},
                            {"fraction", 0.5}});
    std::vector<Json> s0 = GenerateNJson(*t, 2);
    ReportResult(*t, 0, Pack(s0[0]), 1.0);  // member 0 is the top
    t->TrialEnd(0, true);
    ReportResult(*t, 1, Pack(s0[1]), 0.0);
    t->TrialEnd(1, true);
    std::vector<Json> s1 = GenerateNJson(*t, 2, 2);
    ASSERT_EQ(s1.size(), 2u);
    const Json& top = s0[0];
    const Json& child = s1[0]["save_checkpoint_dir"] == Dir(1, 1) ? s1[0] : s1[1];
    ASSERT_EQ(child["load_checkpoint_dir"], Dir(0, 0));
    const double lr = child["lr"], lr0 = top["lr"];
    const double step = 0.2 * std::log(1.0 / 0.0001);
    const double up = std::min(std::log(lr0) + step, 0.0), down = std::max(std::log(lr0) - step,
                                                                           std::log(0.0001));
    EXPECT_TRUE(std::fabs(std::log(lr) - up) < 1e-9 || std::fabs(std::log(lr) - down) < 1e-9)
        << lr << " from " << lr0;
    const double u = child["u"], u0 = top["u"];
    EXPECT_TRUE(std::fabs(u - std::min(u0 + 2, 10.0)) < 1e-9 ||
                std::fabs(u - std::max(u0 - 2, 0.0)) < 1e-9) << u << " from " << u0;
    const int n = child["n"], n0 = top["n"];
    EXPECT_TRUE(n == std::min(n0 + 1, 8) || n == std::max(n0 - 1, 1)) << n << " from " << n0;
    // Floats stay floats (a quniform value of 40 is 40.0, as from every tuner).
    EXPECT_TRUE(child["q"].is_number_float()) << child.dump();
    EXPECT_TRUE(child["u"].is_number_float()) << child.dump();
    const double q = child["q"], q0 = top["q"];
    EXPECT_TRUE(q == std::min(q0 + 5, 100.0) || q == std::max(q0 - 5, 0.0)) << q << " from " << q0;
    const std::string c = child["c"], c0 = top["c"];
    EXPECT_LE(std::abs(c[0] - c0[0]), 1) << c << " from " << c0;
    ++checked;
  }
  EXPECT_EQ(checked, 20);
}

// A trial that ends without a result (failed, or succeeded silently) scores
// worst: it is the one replaced, and the step still turns over.
TEST(PbtTest, ATrialWithoutAResultScoresWorst) {
  for (bool maximize : {true, false}) {
    RecordingHost host;
    auto t = MakePbt(host, {{"optimize_mode", maximize ? "maximize" : "minimize"},
                            {"population_size", 4}, {"fraction", 0.25}});
    int64_t id = 0;
    std::vector<Json> s0 = RunStep(*t, host, &id, [&](const Json& p) -> std::optional<double> {
      if (p["save_checkpoint_dir"] == Dir(2, 0)) return std::nullopt;
      return 1.0;
    });
    EXPECT_EQ(t->step(), 1);
    std::vector<Json> s1 = RunStep(*t, host, &id, [](const Json&) { return 1.0; });
    int from_other = 0;
    for (const Json& p : s1) {
      if (p["save_checkpoint_dir"] == Dir(2, 1)) {
        EXPECT_NE(p["load_checkpoint_dir"], Dir(2, 0)) << "the failed member copies another";
      }
      from_other += p["load_checkpoint_dir"].get<std::string>().substr(0, 5) !=
                    p["save_checkpoint_dir"].get<std::string>().substr(0, 5);
    }
    EXPECT_EQ(from_other, 1) << "exactly the bottom quarter (one member) is replaced";
  }
}

// The population improves: on a one-step objective that rewards u near 7,
// the best member's u gets closer over the steps (exploit and explore).
TEST(PbtTest, PopulationMovesTowardTheOptimum) {
  RecordingHost host;
  auto t = MakePbt(host, {{"population_size", 10}, {"optimize_mode", "minimize"}});
  int64_t id = 0;
  auto score = [](const Json& p) -> std::optional<double> {
    return std::fabs(p["u"].get<double>() - 7.0);
  };
  double first = 0, last = 0;
  for (int step = 0; step < 15; ++step) {
    std::vector<Json> ps = RunStep(*t, host, &id, score);
    ASSERT_EQ(ps.size(), 10u);
    double mean = 0;
    for (const Json& p : ps) mean += *score(p) / 10;
    if (step == 0) first = mean;
    last = mean;
  }
  EXPECT_EQ(t->step(), 15);
  EXPECT_LT(last, first * 0.6) << "mean distance to the optimum, step 0 " << first << ", step 14 "
                               << last;
}

TEST(PbtTest, SameSeedSameRunAndSavedStateContinuesExactly) {
  auto run = [](PbtTuner& t, RecordingHost& host, int64_t* id, int steps) {
    std::vector<Json> all;
    for (int s = 0; s < steps; ++s) {
      for (Json& p : RunStep(t, host, id, [](const Json& p) -> std::optional<double> {
             return p["u"].get<double>() + p["n"].get<int>();
           })) {
        all.push_back(std::move(p));
      }
    }
    return all;
  };
  RecordingHost h1, h2, h3;
  auto a = MakePbt(h1, Json::object());
  auto b = MakePbt(h2, Json::object());
  int64_t ia = 0, ib = 0;
  EXPECT_EQ(run(*a, h1, &ia, 4), run(*b, h2, &ib, 4));
  // Mid-step: two members out, one finished.
  std::vector<Json> out = GenerateNJson(*a, 2, ia);
  ReportResult(*a, ia, Pack(out[0]), 3.0);
  a->TrialEnd(ia, true);
  const std::string state = a->SaveState();
  EXPECT_EQ(state, a->SaveState()) << "saving changes nothing";
  auto c = MakePbt(h3, Json::object());
  c->LoadState(state);
  EXPECT_EQ(c->SaveState(), state);
  ReportResult(*a, ia + 1, Pack(out[1]), 1.0);
  a->TrialEnd(ia + 1, true);
  ReportResult(*c, ia + 1, Pack(out[1]), 1.0);
  c->TrialEnd(ia + 1, true);
  EXPECT_EQ(GenerateNJson(*a, 3, ia + 2), GenerateNJson(*c, 3, ia + 2));
  EXPECT_EQ(a->SaveState(), c->SaveState());
  ExpectError([&] { c->LoadState(state.substr(0, state.size() / 2)); }, TH_INVALID_ARGUMENT,
              {"pbt"});
  auto minimize = MakePbt(h3, {{"optimize_mode", "minimize"}});
  ExpectError([&] { minimize->LoadState(state); }, TH_INVALID_ARGUMENT, {"optimize_mode"});
}

// A fresh directory under the system's temporary one, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "pbt-import-XXXXXX").string();
    path_ = mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Dir(int member, int step) const {
    std::filesystem::path d = std::filesystem::path(path_) / std::to_string(member) /
                              std::to_string(step);
    std::filesystem::create_directories(d);
    return d.string();
  }

 private:
  std::string path_;
};

// An NNI import record of a pbt trial: member's u = `u`, saved at `save`.
Json Record(double u, const std::string& save, std::optional<double> value) {
  Json params = {{"lr", 0.01}, {"u", u}, {"n", 3}, {"q", 50}, {"c", "b"},
                 {"load_checkpoint_dir", save}, {"save_checkpoint_dir", save}};
  Json r = {{"parameter", params}};
  if (value) r["value"] = *value;
  return r;
}

// NNI's import_data: the last step with a record of every member is taken as
// finished and the next one starts from it (the bottom from a top member's
// checkpoint); a later, incomplete step is not used.
TEST(PbtTest, ImportResumesAfterTheLastStepEveryMemberFinished) {
  TempDir tmp;
  Json records = Json::array();
  for (int i = 0; i < 5; ++i) records.push_back(Record(i, tmp.Dir(i, 0), i));
  // Step 1: member 0 failed (no value: the worst), member 1 scored 0, which
  // is a score (NNI takes 0 for a failure, and would replace member 1).
  records.push_back(Record(0, tmp.Dir(0, 1), std::nullopt));
  records.push_back(Record(1, tmp.Dir(1, 1), 0.0));
  for (int i = 2; i < 5; ++i) records.push_back(Record(i, tmp.Dir(i, 1), 10.0 * i));
  for (int i = 0; i < 3; ++i) records.push_back(Record(i, tmp.Dir(i, 2), 100.0));
  RecordingHost host;
  auto t = MakePbt(host, Json::object());
  Import(*t, records);
  EXPECT_EQ(t->step(), 2);
  std::map<std::string, Json> by_save;
  for (const Json& p : GenerateNJson(*t, 5)) by_save[p["save_checkpoint_dir"]] = p;
  ASSERT_EQ(by_save.size(), 5u);
  for (int i = 1; i < 5; ++i) {
    const Json& p = by_save.at(tmp.Dir(i, 2));
    EXPECT_EQ(p["load_checkpoint_dir"], tmp.Dir(i, 1)) << "member " << i << " continues";
    EXPECT_DOUBLE_EQ(p["u"].get<double>(), i);
  }
  EXPECT_EQ(by_save.at(tmp.Dir(0, 2))["load_checkpoint_dir"], tmp.Dir(4, 1))
      << "the failed member continues from the top member's checkpoint";
  EXPECT_FALSE(host.Logged(TH_LOG_WARNING, "import"));
}

// What NNI asserts or crashes on, and what it abandons, leaves the tuner at
// step 0 with a warning that says why.
TEST(PbtTest, ABadImportIsAbandonedWithAReason) {
  TempDir tmp;
  Json full = Json::array();
  for (int i = 0; i < 5; ++i) full.push_back(Record(i, tmp.Dir(i, 0), i));
  auto with = [&](const std::function<void(Json&)>& change) {
    Json r = full;
    change(r);
    return r;
  };
  const std::vector<std::pair<Json, std::string>> cases = {
      {Json::array(), "no records"},
      {Json::object(), "must be an array"},
      {with([](Json& r) { r[2]["parameter"].erase("save_checkpoint_dir"); }),
       "no save_checkpoint_dir"},
      {with([](Json& r) { r[2]["parameter"]["save_checkpoint_dir"] = "/ck/2/last"; }),
       "does not end in a step number"},
      {with([](Json& r) { r[2]["parameter"]["c"] = "zz"; }), "do not fit the search space"},
      {with([](Json& r) { r.erase(r.begin()); }), "no step has a record for every one"},
      {with([&](Json& r) { r.push_back(Record(1, tmp.Dir(5, 0), 1)); }), "6 records"},
      {with([](Json& r) { r[3]["parameter"]["save_checkpoint_dir"] = "/no/such/dir/3/0"; }),
       "/no/such/dir/3/0 does not exist"},
  };
  for (const auto& [records, why] : cases) {
    RecordingHost host;
    auto t = MakePbt(host, Json::object());
    Import(*t, records);
    EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "import abandoned")) << why;
    EXPECT_TRUE(host.Logged(TH_LOG_WARNING, why)) << records.dump();
    EXPECT_EQ(t->step(), 0);
    EXPECT_EQ(GenerateNJson(*t, 1)[0]["save_checkpoint_dir"], Dir(0, 0));
  }
  // Only before the first trial, as NNI.
  RecordingHost host;
  auto t = MakePbt(host, Json::object());
  GenerateNJson(*t, 1);
  Import(*t, full);
  EXPECT_TRUE(host.Logged(TH_LOG_WARNING, "not used once trials were handed out"));
  EXPECT_EQ(t->step(), 0);
}

}  // namespace
}  // namespace tunehost::plugins::testing
