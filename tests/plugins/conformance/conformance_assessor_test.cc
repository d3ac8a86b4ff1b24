// Conformance of the built-in assessors, loaded from the plugin output
// directory through the host's PluginRegistry (see conformance_test.cc for
// what every built-in plugin must do; the shared fixture is in
// conformance_fixture.h).
#include <cmath>
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "conformance_fixture.h"
#include "tunehost/host/plugin.h"
#include "tunehost/status.h"

namespace conformance_testing {
namespace {

// ---------------------------------------------------------------------------
// Assessors.

struct AssessorRow {
  static constexpr const char* kKind = "assessor";
  std::string label;
  std::string plugin;
  std::string target;
  Json class_args;
  Json wrong_arg;
  std::string wrong_arg_name;
  bool takes_seed = false;
  bool saves_state = true;
};

void PrintTo(const AssessorRow& row, std::ostream* os) { *os << row.label; }

std::vector<AssessorRow> AssessorRows() {
  std::vector<AssessorRow> rows;
  {
    AssessorRow r = NewRow<AssessorRow>("medianstop", "medianstop", "medianstop");
    r.class_args = {{"optimize_mode", "maximize"}, {"start_step", 2}};
    r.wrong_arg = {{"start_step", "x"}};
    r.wrong_arg_name = "start_step";
    rows.push_back(r);
  }
  {
    AssessorRow r = NewRow<AssessorRow>("curvefitting", "curvefitting", "curvefitting");
    r.class_args = {{"epoch_num", 20}, {"start_step", 4}, {"threshold", 0.95}, {"seed", 21}};
    r.wrong_arg = {{"epoch_num", 0}};
    r.wrong_arg_name = "epoch_num";
    r.takes_seed = true;
    rows.push_back(r);
  }
  return rows;
}

constexpr int kAssessorTrials = 24;
constexpr int kAssessorSteps = 300;  // more than the script has: it ends idle

// Learning curve of trial t at step s: saturating, different heights.
double CurveValue(int t, size_t s) {
  double height = 0.2 + 0.7 * Frac(t * 0.6180339887498949);
  double x = static_cast<double>(s + 1);
  return height * (1 - std::exp(-0.35 * x)) + 0.01 * std::sin(3.1 * x + t);
}

struct AssessorSim {
  struct Trial {
    std::string id;
    int index = 0;
    size_t length = 0;
    std::vector<double> history;
  };
  int next_trial = 0;
  std::vector<Trial> active;
  size_t turn = 0;
  int ended = 0;
};

class AssessorDriver {
 public:
  explicit AssessorDriver(const AssessorRow& row) : row_(row) {}

  void Start() {
    Status st = Registry().CreateAssessor(row_.plugin, Pack(row_.class_args), &assessor_);
    ASSERT_TRUE(st.ok()) << row_.label << ": " << st.ToString();
  }

  th::Assessor& assessor() { return *assessor_; }

  // One intermediate result of one of up to 3 running trials, assessed; a
  // trial stopped or at its last step ends (every 5th end a failure).
  void Step() {
    while (sim.active.size() < kConcurrency && sim.next_trial < kAssessorTrials) {
      int t = sim.next_trial++;
      sim.active.push_back({"trial" + std::to_string(t), t, 6 + static_cast<size_t>(t % 3) * 4, {}});
    }
    if (sim.active.empty()) {
      log.push_back({"idle", ""});
      return;
    }
    size_t slot = sim.turn++ % sim.active.size();
    AssessorSim::Trial& t = sim.active[slot];
    t.history.push_back(CurveValue(t.index, t.history.size()));
    bool good = true;
    Status st = assessor_->AssessTrial(t.id, Pack(Json(t.history)), &good);
    Note("assess_trial", st);
    log.push_back({"assess " + t.id + " step " + std::to_string(t.history.size()) +
                       (good ? " good" : " bad"),
                   ""});
    ++(good ? goods : bads);
    bool done = t.history.size() >= t.length;
    if (!good || done) {
      ++sim.ended;
      bool success = done && good && sim.ended % kFailEvery != 0;
      log.push_back({"end " + t.id + (success ? " succeeded" : " not succeeded"), ""});
      Note("trial_end", assessor_->TrialEnd(t.id, success));
      sim.active.erase(sim.active.begin() + static_cast<std::ptrdiff_t>(slot));
    }
  }

  void Run(int steps) {
    for (int i = 0; i < steps; ++i) Step();
  }

  AssessorSim sim;
  std::vector<Record> log;
  int goods = 0;
  int bads = 0;

 private:
  void Note(const char* op, const Status& st) { NoteFailure(row_.label, op, st, &log); }

  const AssessorRow& row_;
  std::unique_ptr<th::Assessor> assessor_;
};

class AssessorConformance : public Conformance<AssessorRow> {};

TEST_P(AssessorConformance, SameSeedSameDecisions) {
  AssessorDriver a(row()), b(row());
  ASSERT_NO_FATAL_FAILURE(a.Start());
  ASSERT_NO_FATAL_FAILURE(b.Start());
  a.Run(kAssessorSteps);
  b.Run(kAssessorSteps);
  EXPECT_EQ(FirstDifference(a.log, 0, b.log, 0), "");
  EXPECT_EQ(a.log.back().what, "idle") << "the script did not run to its end";
  // Both kinds of decision, so that the comparisons above mean something.
  EXPECT_GT(a.goods, 0);
  EXPECT_GT(a.bads, 0);
  RecordProperty("good_decisions", a.goods);
  RecordProperty("bad_decisions", a.bads);
}

TEST_P(AssessorConformance, CheckpointContinuesExactly) {
  AssessorDriver reference(row());
  ASSERT_NO_FATAL_FAILURE(reference.Start());
  reference.Run(kAssessorSteps);
  for (int k : {0, 30, 90, 160}) {
    SCOPED_TRACE("checkpoint after " + std::to_string(k) + " events");
    AssessorDriver a(row());
    ASSERT_NO_FATAL_FAILURE(a.Start());
    a.Run(k);
    std::string state;
    bool supported = false;
    Status st = a.assessor().SaveState(&state, &supported);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(supported, row().saves_state) << "save_state support";
    if (!supported) continue;

    AssessorDriver b(row());
    ASSERT_NO_FATAL_FAILURE(b.Start());
    st = b.assessor().LoadState(state, &supported);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(supported) << "load_state not supported although save_state is";
    b.sim = a.sim;
    size_t mark = a.log.size();
    a.Run(kAssessorSteps - k);
    b.Run(kAssessorSteps - k);
    EXPECT_EQ(FirstDifference(a.log, mark, b.log, 0), "") << "resumed instance diverged";
    EXPECT_EQ(FirstDifference(a.log, 0, reference.log, 0), "")
        << "saving the state changed the saved instance's behaviour";
  }
}

TEST_P(AssessorConformance, BadClassArgsNamed) {
  for (const auto& [args, name] : BadClassArgs(row())) {
    SCOPED_TRACE("class_args " + args.dump());
    std::unique_ptr<th::Assessor> assessor;
    Status st = Registry().CreateAssessor(row().plugin, Pack(args), &assessor);
    EXPECT_EQ(st.code(), Status::Code::kPluginError) << st.ToString();
    EXPECT_NE(st.message().find(name), std::string::npos)
        << "message does not name \"" << name << "\": " << st.message();
    EXPECT_FALSE(assessor) << "an instance was created";
  }
}

TEST_P(AssessorConformance, GarbageHistoryIsAnErrorAndAssessorKeepsWorking) {
  AssessorDriver d(row());
  ASSERT_NO_FATAL_FAILURE(d.Start());
  d.Run(20);
  for (const Json& garbage : {Json("not an array"), Json::array({"a", "b", "c"}),
                              Json{{"step", 1}}}) {
    SCOPED_TRACE("history " + garbage.dump());
    bool good = true;
    Status st = d.assessor().AssessTrial("garbage", Pack(garbage), &good);
    EXPECT_EQ(st.code(), Status::Code::kPluginError) << st.ToString();
  }
  bool good = false;
  Status st = d.assessor().AssessTrial("garbage", Pack(Json::array({0.1, 0.2})), &good);
  EXPECT_TRUE(st.ok()) << st.ToString();
  st = d.assessor().TrialEnd("garbage", false);
  EXPECT_TRUE(st.ok()) << st.ToString();

  // The rest of the script runs as if the garbage had not been there, since
  // "garbage" never succeeded.
  AssessorDriver reference(row());
  ASSERT_NO_FATAL_FAILURE(reference.Start());
  reference.Run(kAssessorSteps);
  d.Run(kAssessorSteps - 20);
  EXPECT_EQ(FirstDifference(d.log, 0, reference.log, 0), "");
}

INSTANTIATE_TEST_SUITE_P(Builtin, AssessorConformance, ::testing::ValuesIn(AssessorRows()),
                         [](const ::testing::TestParamInfo<AssessorRow>& info) {
                           return info.param.label;
                         });

}  // namespace
}  // namespace conformance_testing
