// Conformance of the built-in plugins. Every tuner and assessor is loaded from
// the plugin output directory (TH_DEFAULT_PLUGIN_DIR) through the host's
// PluginRegistry, exactly as `tunehost` loads it, and driven through the
// host's Tuner / Assessor wrappers with a scripted run that imitates the
// engine: concurrency 3, results from a deterministic objective, every 5th
// trial ending failed without a result, and ids the tuner keeps as credit
// served through the send_trial callback given to CreateTuner.
//
// What every built-in must do, whatever its algorithm:
//   - the same seed and the same events give the same output, byte for byte
//     (parameters generated and sent later, in the same order);
//   - SaveState / LoadState into a new instance continues exactly like the
//     original, and saving changes nothing in the original;
//   - bad classArgs are refused at create time with a message naming the
//     argument; an unsupported search space is refused naming the key and
//     leaves the tuner as it was;
//   - ImportData is accepted, and the tuner goes on generating;
//   - every parameter map has exactly the space's keys (plus TRIAL_BUDGET for
//     the bracket tuners) and values inside the space;
//   - an assessor refuses a garbage history with an error and keeps working.
//
// A row whose plugin target is not part of this build is skipped; a row whose
// target is built but whose file is missing or refused FAILS.
//
// The tuners' tests are here, the assessors' in conformance_assessor_test.cc;
// what both use is in conformance_fixture.h, the search spaces in
// conformance_spaces.h.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "conformance_fixture.h"
#include "conformance_spaces.h"
#include "tunehost/host/plugin.h"
#include "tunehost/status.h"

namespace conformance_testing {
namespace {

// ---------------------------------------------------------------------------
// The table.

enum class SpaceKind { kNni, kBatch };

struct TunerRow {
  static constexpr const char* kKind = "tuner";
  std::string label;   // test name suffix
  std::string plugin;  // registry name
  std::string target;  // CMake target that builds its file
  Json class_args;
  Json space;
  SpaceKind kind = SpaceKind::kNni;
  Json bad_space;               // refused at UpdateSearchSpace...
  std::string bad_space_key;    // ...with a message naming this key
  Json wrong_arg;               // a known argument with a wrong type or value...
  std::string wrong_arg_name;   // ...refused naming it
  bool takes_seed = true;
  bool saves_state = true;      // every built-in must
  bool imports = true;          // ImportData reports supported
  int64_t budget_max = 0;       // > 0: TRIAL_BUDGET in every map, in [1, budget_max]
  std::vector<std::string> string_keys;  // keys the tuner adds, each a non-empty string
};

void PrintTo(const TunerRow& row, std::ostream* os) { *os << row.label; }

std::vector<TunerRow> TunerRows() {
  const Json nested_choice = Json::parse(R"({"conform_nested_key": {"_type": "choice", "_value": [
      {"_name": "a", "x": {"_type": "uniform", "_value": [0, 1]}}, {"_name": "b"}]}})");
  Json batch_two_keys = BatchSpace();
  batch_two_keys["conform_second_key"] = Json{{"_type", "choice"}, {"_value", {1, 2}}};

  std::vector<TunerRow> rows;
  auto add = [&](TunerRow r) { rows.push_back(std::move(r)); };
  {
    TunerRow r = NewRow<TunerRow>("random", "random", "random");
    r.class_args = {{"seed", 11}};
    r.space = NestedSpace();
    r.wrong_arg = {{"seed", -1}};
    r.wrong_arg_name = "seed";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("tpe", "tpe", "tpe");
    r.class_args = {{"seed", 12}, {"optimize_mode", "maximize"}};
    r.space = NestedSpace();
    r.wrong_arg = {{"tpe_args", {{"gamma", "x"}}}};
    r.wrong_arg_name = "gamma";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("tpe_multivariate", "tpe", "tpe");
    r.class_args = {{"seed", 13}, {"tpe_args", {{"multivariate", true}, {"n_startup_jobs", 8}}}};
    r.space = NestedSpace();
    r.wrong_arg = {{"tpe_args", {{"multivariate", "yes"}}}};
    r.wrong_arg_name = "multivariate";
    add(r);
  }
  {
    // MOTPE: the multi-objective path with "default" as its one objective.
    TunerRow r = NewRow<TunerRow>("tpe_objectives", "tpe", "tpe");
    r.class_args = {{"seed", 14},
                    {"objectives", {{"default", "maximize"}}},
                    {"tpe_args", {{"n_startup_jobs", 8}}}};
    r.space = NestedSpace();
    r.wrong_arg = {{"objectives", {{"default", "up"}}}};
    r.wrong_arg_name = "objectives";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("grid", "grid", "grid");
    r.class_args = Json::object();
    r.space = NestedSpace();
    r.takes_seed = false;
    r.wrong_arg = {{"optimize_mode", "sideways"}};
    r.wrong_arg_name = "optimize_mode";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("batch", "batch", "batch");
    r.class_args = Json::object();
    r.space = BatchSpace();
    r.kind = SpaceKind::kBatch;
    r.bad_space = batch_two_keys;
    r.bad_space_key = "conform_second_key";
    r.takes_seed = false;
    r.wrong_arg = {{"optimize_mode", "sideways"}};
    r.wrong_arg_name = "optimize_mode";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("anneal", "anneal", "anneal");
    r.class_args = {{"seed", 14}, {"parallel_optimize", true}};
    r.space = NestedSpace();
    r.wrong_arg = {{"constant_liar_type", "median"}};
    r.wrong_arg_name = "constant_liar_type";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("evolution", "evolution", "evolution");
    r.class_args = {{"seed", 15}, {"population_size", 4}};
    r.space = NestedSpace();
    r.wrong_arg = {{"population_size", "x"}};
    r.wrong_arg_name = "population_size";
    add(r);
  }
  {
    // Fewer individuals than trials running: ids are kept as credit.
    TunerRow r = NewRow<TunerRow>("evolution_small_population", "evolution", "evolution");
    r.class_args = {{"seed", 18}, {"population_size", 2}};
    r.space = NestedSpace();
    r.wrong_arg = {{"population_size", 0}};
    r.wrong_arg_name = "population_size";
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("hyperband", "hyperband", "hyperband");
    r.class_args = {{"seed", 16}, {"R", 9}, {"eta", 3}};
    r.space = FlatSpace();
    r.bad_space = nested_choice;
    r.bad_space_key = "conform_nested_key";
    r.wrong_arg = {{"eta", 1}};
    r.wrong_arg_name = "eta";
    r.budget_max = 9;
    add(r);
  }
  {
    // Serial brackets wait for each other: ids are kept as credit.
    TunerRow r = NewRow<TunerRow>("hyperband_serial", "hyperband", "hyperband");
    r.class_args = {{"seed", 19}, {"R", 9}, {"eta", 3}, {"exec_mode", "serial"}};
    r.space = FlatSpace();
    r.bad_space = nested_choice;
    r.bad_space_key = "conform_nested_key";
    r.wrong_arg = {{"exec_mode", "parallel"}};
    r.wrong_arg_name = "exec_mode";
    r.budget_max = 9;
    add(r);
  }
  {
    TunerRow r = NewRow<TunerRow>("bohb", "bohb", "hyperband");
    r.class_args = {{"seed", 17}, {"min_budget", 1}, {"max_budget", 9}, {"eta", 3}};
    r.space = SmallSpace();
    r.bad_space = nested_choice;
    r.bad_space_key = "conform_nested_key";
    r.wrong_arg = {{"max_budget", "x"}};
    r.wrong_arg_name = "max_budget";
    r.budget_max = 9;
    add(r);
  }
  {
    // A small population, so that generations turn over within a scripted run.
    TunerRow r = NewRow<TunerRow>("cmaes", "cmaes", "cmaes");
    r.class_args = {{"seed", 20}, {"popsize", 4}};
    r.space = FlatSpace();
    r.bad_space = nested_choice;
    r.bad_space_key = "conform_nested_key";
    r.wrong_arg = {{"popsize", 1}};
    r.wrong_arg_name = "popsize";
    add(r);
  }
  {
    // A short cold start and small searches for the acquisition's maximum,
    // so that the model proposes most of a scripted run's trials quickly.
    TunerRow r = NewRow<TunerRow>("gp", "gp", "gp");
    r.class_args = {{"seed", 21},
                    {"cold_start_num", 4},
                    {"selection_num_warm_up", 500},
                    {"selection_num_starting_points", 3}};
    r.space = FlatSpace();
    r.bad_space = nested_choice;
    r.bad_space_key = "conform_nested_key";
    r.wrong_arg = {{"utility", "pi"}};
    r.wrong_arg_name = "utility";
    add(r);
  }
  {
    // A small population, so that steps turn over within a scripted run.
    TunerRow r = NewRow<TunerRow>("pbt", "pbt", "pbt");
    r.class_args = {{"seed", 22}, {"population_size", 4}, {"all_checkpoint_dir", "/ckpt"}};
    r.space = FlatSpace();
    r.bad_space = nested_choice;
    r.bad_space_key = "conform_nested_key";
    r.wrong_arg = {{"fraction", 0}};
    r.wrong_arg_name = "fraction";
    r.string_keys = {"load_checkpoint_dir", "save_checkpoint_dir"};
    add(r);
  }
  {
    // A small population, so that generations turn over within a scripted run.
    TunerRow r = NewRow<TunerRow>("nsga2", "nsga2", "nsga2");
    r.class_args = {{"seed", 23}, {"population_size", 4}};
    r.space = NestedSpace();
    r.wrong_arg = {{"crossover_prob", 2}};
    r.wrong_arg_name = "crossover_prob";
    add(r);
  }
  for (TunerRow& r : rows) {
    if (r.bad_space.is_null()) {
      r.bad_space = UnknownTypeSpace();
      r.bad_space_key = "conform_bad_key";
    }
  }
  return rows;
}

// Why `bytes` is not a parameter map the row's tuner may emit, or "".
std::string ParameterProblem(const TunerRow& row, const std::string& bytes) {
  std::optional<Json> params = Unpack(bytes);
  if (!params) return "not MessagePack";
  if (row.kind == SpaceKind::kBatch) {
    for (const Json& option : row.space.at(kBatchKey).at("_value")) {
      Json expected = option.is_object() ? option : Json{{kBatchKey, option}};
      if (*params == expected) return "";
    }
    return "not one of the batch configurations";
  }
  std::set<std::string> extra;
  if (row.budget_max > 0) {
    extra.insert(kBudgetKey);
    if (!params->is_object() || !params->contains(kBudgetKey)) return "no TRIAL_BUDGET";
    const Json& b = params->at(kBudgetKey);
    if (!b.is_number_integer() || b.get<int64_t>() < 1 || b.get<int64_t>() > row.budget_max) {
      return "TRIAL_BUDGET " + b.dump() + " not an integer in [1, " +
             std::to_string(row.budget_max) + "]";
    }
  }
  for (const std::string& key : row.string_keys) {
    extra.insert(key);
    if (!params->is_object() || !params->contains(key) || !params->at(key).is_string() ||
        params->at(key).get<std::string>().empty()) {
      return "no string " + key;
    }
  }
  return CheckMap(row.space, *params, "parameters", extra);
}

// kImportRecords records {"parameters", "value"} inside the row's space.
// Batch: three of its configurations and others that are not in its list
// (importing every option would leave nothing to run).
Json ImportRecords(const TunerRow& row) {
  Json records = Json::array();
  const int64_t budgets[] = {1, 3, 9};
  for (size_t i = 0; i < kImportRecords; ++i) {
    Json params;
    if (row.kind == SpaceKind::kBatch) {
      params = i < 3 ? row.space.at(kBatchKey).at("_value")[i]
                     : Json{{"x", 1000 + i}, {"name", "imported"}};
    } else {
      params = SampleMap(row.space, i);
      if (row.budget_max > 0) params[kBudgetKey] = std::min(budgets[i % 3], row.budget_max);
      for (const std::string& key : row.string_keys) params[key] = "/imported/" + key;
    }
    records.push_back(Json{{"parameters", params}, {"value", Objective(params)}});
  }
  return records;
}

// ---------------------------------------------------------------------------
// Tuner driver: the engine's side of a run, scripted.

// What the host side knows of a run; copied into a resumed driver.
struct TunerSim {
  int64_t next_id = 0;
  std::set<int64_t> open_ids;  // handed to the tuner and not used yet (its credit)
  std::deque<std::pair<int64_t, std::string>> running;  // created, not ended; oldest first
  bool exhausted = false;  // the last request came back short: ask again after a trial end
  int ended = 0;
};

class TunerDriver {
 public:
  explicit TunerDriver(const TunerRow& row) : row_(row) {}
  TunerDriver(const TunerDriver&) = delete;
  TunerDriver& operator=(const TunerDriver&) = delete;

  Status Create(const Json& class_args) {
    return Registry().CreateTuner(
        row_.plugin, Pack(class_args),
        [this](int64_t id, std::string params) { return OnSendTrial(id, std::move(params)); },
        &tuner_);
  }

  // Creates the instance with the row's class_args and sets its space.
  void Start() {
    Status st = Create(row_.class_args);
    ASSERT_TRUE(st.ok()) << row_.label << ": " << st.ToString();
    st = tuner_->UpdateSearchSpace(Pack(row_.space));
    ASSERT_TRUE(st.ok()) << row_.label << ": " << st.ToString();
  }

  th::Tuner& tuner() { return *tuner_; }

  // One engine event: ask for parameters for the free slots, or end the
  // oldest trial (its result first, or a failure without one).
  void Step() {
    if (!sim.exhausted && sim.running.size() < kConcurrency) {
      Request(kConcurrency - sim.running.size());
    } else if (!sim.running.empty()) {
      EndOldest();
    } else {
      log.push_back({"idle", ""});
    }
  }

  void Run(int steps) {
    for (int i = 0; i < steps; ++i) Step();
  }

  TunerSim sim;
  std::vector<Record> log;
  size_t emissions = 0;  // parameter maps, generated or sent
  size_t sent = 0;       // of which through send_trial (credit served later)

 private:
  void Request(size_t n) {
    std::vector<int64_t> ids;
    for (size_t i = 0; i < n; ++i) {
      ids.push_back(sim.next_id);
      sim.open_ids.insert(sim.next_id++);
    }
    std::vector<std::pair<int64_t, std::string>> out;
    bool no_more = false;
    Status st = tuner_->Generate(ids, &out, &no_more);
    Note("generate", st);
    for (auto& [id, bytes] : out) Emit("generated", id, std::move(bytes));
    if (no_more) {
      log.push_back({"no more trials", ""});
      sim.exhausted = true;
    }
  }

  void EndOldest() {
    auto [id, bytes] = std::move(sim.running.front());
    sim.running.pop_front();
    sim.exhausted = false;  // a trial end is when the engine asks again
    if (++sim.ended % kFailEvery == 0) {
      log.push_back({"failed " + std::to_string(id), ""});
      Note("trial_end", tuner_->TrialEnd(id, false));
      return;
    }
    std::optional<Json> params = Unpack(bytes);
    double value = params ? Objective(*params) : 0.0;
    char text[64];
    std::snprintf(text, sizeof text, "result %lld %.17g", static_cast<long long>(id), value);
    log.push_back({text, ""});
    Note("receive_trial_result",
         tuner_->ReceiveTrialResult(id, bytes, Pack(Json(value)), value, false));
    Note("trial_end", tuner_->TrialEnd(id, true));
  }

  Status OnSendTrial(int64_t id, std::string params) {
    if (!sim.open_ids.count(id)) {
      ADD_FAILURE() << row_.label << ": send_trial with id " << id
                    << ", which was not handed to the tuner or was already used";
      return Status::BadField("parameter id " + std::to_string(id) + " was not handed out");
    }
    ++sent;
    Emit("sent", id, std::move(params));
    return Status::Ok();
  }

  void Emit(const char* how, int64_t id, std::string bytes) {
    if (sim.open_ids.erase(id) == 0) {
      ADD_FAILURE() << row_.label << ": " << how << " id " << id << " was already used";
    }
    std::string problem = ParameterProblem(row_, bytes);
    EXPECT_EQ(problem, "") << row_.label << ": " << how << " id " << id << ": "
                           << JsonText(bytes);
    log.push_back({std::string(how) + " " + std::to_string(id), bytes});
    sim.running.emplace_back(id, std::move(bytes));
    ++emissions;
  }

  void Note(const char* op, const Status& st) { NoteFailure(row_.label, op, st, &log); }

  const TunerRow& row_;
  std::unique_ptr<th::Tuner> tuner_;
};

class TunerConformance : public Conformance<TunerRow> {};

TEST_P(TunerConformance, SameSeedSameOutput) {
  TunerDriver a(row()), b(row());
  ASSERT_NO_FATAL_FAILURE(a.Start());
  ASSERT_NO_FATAL_FAILURE(b.Start());
  a.Run(kSteps);
  b.Run(kSteps);
  EXPECT_GE(a.emissions, kMinEmissions);
  EXPECT_EQ(FirstDifference(a.log, 0, b.log, 0), "");
  RecordProperty("emissions", static_cast<int>(a.emissions));
  RecordProperty("sent_through_send_trial", static_cast<int>(a.sent));
}

// Drive A for k events (after an import, for one case), save, load into a new
// B with the same class_args and space, then drive both with the same events.
TEST_P(TunerConformance, CheckpointContinuesExactly) {
  TunerDriver reference(row());
  ASSERT_NO_FATAL_FAILURE(reference.Start());
  reference.Run(kSteps);

  struct Case {
    int k;
    bool import;
  };
  for (Case c : {Case{0, false}, Case{2, false}, Case{9, false}, Case{23, false},
                 Case{7, true}}) {
    SCOPED_TRACE("checkpoint after " + std::to_string(c.k) + " events" +
                 (c.import ? ", with imported data" : ""));
    TunerDriver a(row());
    ASSERT_NO_FATAL_FAILURE(a.Start());
    if (c.import) {
      bool supported = false;
      ASSERT_TRUE(a.tuner().ImportData(Pack(ImportRecords(row())), &supported).ok());
    }
    a.Run(c.k);
    std::string state;
    bool supported = false;
    Status st = a.tuner().SaveState(&state, &supported);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(supported, row().saves_state) << "save_state support";
    if (!supported) continue;

    TunerDriver b(row());
    ASSERT_NO_FATAL_FAILURE(b.Start());
    st = b.tuner().LoadState(state, &supported);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(supported) << "load_state not supported although save_state is";
    b.sim = a.sim;

    size_t mark = a.log.size();
    size_t emitted_before = a.emissions;
    a.Run(kSteps - c.k);
    b.Run(kSteps - c.k);
    EXPECT_GE(a.emissions - emitted_before, 1u) << "nothing emitted after the checkpoint";
    EXPECT_EQ(FirstDifference(a.log, mark, b.log, 0), "") << "resumed instance diverged";
    if (!c.import) {
      EXPECT_EQ(FirstDifference(a.log, 0, reference.log, 0), "")
          << "saving the state changed the saved instance's behaviour";
    }
  }
}

TEST_P(TunerConformance, BadClassArgsNamed) {
  for (const auto& [args, name] : BadClassArgs(row())) {
    SCOPED_TRACE("class_args " + args.dump());
    std::unique_ptr<th::Tuner> tuner;
    Status st = Registry().CreateTuner(row().plugin, Pack(args), nullptr, &tuner);
    EXPECT_EQ(st.code(), Status::Code::kPluginError) << st.ToString();
    EXPECT_NE(st.message().find(name), std::string::npos)
        << "message does not name \"" << name << "\": " << st.message();
    EXPECT_FALSE(tuner) << "an instance was created";
  }
}

TEST_P(TunerConformance, UnsupportedSearchSpaceNamedThenGoodSpaceWorks) {
  TunerDriver d(row());
  Status st = d.Create(row().class_args);
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = d.tuner().UpdateSearchSpace(Pack(row().bad_space));
  EXPECT_EQ(st.code(), Status::Code::kPluginError) << st.ToString();
  EXPECT_NE(st.message().find(row().bad_space_key), std::string::npos)
      << "message does not name the key \"" << row().bad_space_key << "\": " << st.message();

  st = d.tuner().UpdateSearchSpace(Pack(row().space));
  ASSERT_TRUE(st.ok()) << st.ToString();
  d.Run(12);
  EXPECT_GE(d.emissions, 3u);
}

// The host keeps using a tuner whose space update failed: the refusal must
// leave it exactly as it was.
TEST_P(TunerConformance, RefusedSearchSpaceChangesNothing) {
  TunerDriver reference(row()), d(row());
  ASSERT_NO_FATAL_FAILURE(reference.Start());
  ASSERT_NO_FATAL_FAILURE(d.Start());
  reference.Run(kSteps);
  d.Run(11);
  Status st = d.tuner().UpdateSearchSpace(Pack(row().bad_space));
  EXPECT_FALSE(st.ok());
  d.Run(kSteps - 11);
  EXPECT_EQ(FirstDifference(d.log, 0, reference.log, 0), "");
}

TEST_P(TunerConformance, ImportAcceptedThenGenerates) {
  Json records = ImportRecords(row());
  for (size_t i = 0; i < records.size(); ++i) {  // the test's own records must be valid
    if (row().kind == SpaceKind::kBatch && i >= 3) break;  // the rest are not in its list
    ASSERT_EQ(ParameterProblem(row(), Pack(records[i].at("parameters"))), "") << records[i].dump();
  }
  TunerDriver d(row());
  ASSERT_NO_FATAL_FAILURE(d.Start());
  bool supported = false;
  Status st = d.tuner().ImportData(Pack(records), &supported);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(supported, row().imports);
  d.Run(20);
  EXPECT_GE(d.emissions, 3u);
}

// Every map emitted in a long run (checked inside the driver) has exactly the
// space's keys and values inside the space.
TEST_P(TunerConformance, EmittedParametersInsideSpace) {
  TunerDriver d(row());
  ASSERT_NO_FATAL_FAILURE(d.Start());
  d.Run(kLongSteps);
  EXPECT_GE(d.emissions, kMinEmissions);
}

INSTANTIATE_TEST_SUITE_P(Builtin, TunerConformance, ::testing::ValuesIn(TunerRows()),
                         [](const ::testing::TestParamInfo<TunerRow>& info) {
                           return info.param.label;
                         });

}  // namespace
}  // namespace conformance_testing
