// Isolated plugins (isolated_plugin.h): real tunehost-plugin-runner
// processes loading real fixture plugins, crashed on purpose; and the
// cleaning of plugin text.
#include "tunehost/host/isolated_plugin.h"

#include <dirent.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "test_util.h"
#include "tunehost/host/plugin.h"
#include "tunehost/host/plugin_text.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::host {
namespace {

namespace fs = std::filesystem;
namespace p = tunehost::protocol;

p::Packed Json(const std::string& json) {
  p::Packed out;
  EXPECT_OK(p::JsonToPacked(json, &out));
  return out;
}

// Children of this process that are tunehost-plugin-runner processes.
std::vector<pid_t> RunnerChildren() {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  while (dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    const std::string name = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == getpid() && name.rfind("tunehost-plugin", 0) == 0) out.push_back(pid);
  }
  closedir(proc);
  return out;
}

class IsolatedPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.LoadDirectory(TH_TEST_PLUGIN_DIR);
    registry_.LoadFile(fs::path(TH_PLUGIN_DIR) / "evolution.so");
    dir_ = fs::temp_directory_path() /
           ("tunehost-isolated-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_.call_timeout = std::chrono::milliseconds(5000);
    options_.on_event = [this](const std::string& code, const std::string& message) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.emplace_back(code, message);
    };
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Tuner> Faulty(const std::string& args_json, bool isolated = true) {
    std::unique_ptr<Tuner> tuner;
    Status st = registry_.CreateTuner("fixture-faulty", Json(args_json), nullptr, &tuner,
                                      isolated ? &options_ : nullptr);
    EXPECT_OK(st);
    return tuner;
  }

  // A short run: search space, 4 trials generated, their results and ends.
  static void Drive(Tuner& tuner) {
    ASSERT_OK(tuner.UpdateSearchSpace(Json(R"({"x": {"_type": "uniform", "_value": [0, 1]}})")));
    for (int64_t id = 0; id < 4; ++id) {
      std::vector<std::pair<int64_t, p::Packed>> out;
      bool no_more = false;
      ASSERT_OK(tuner.Generate({id}, &out, &no_more));
      ASSERT_EQ(out.size(), 1u);
      ASSERT_OK(tuner.ReceiveTrialResult(id, out[0].second, p::PackDouble(0.5), 0.5, false));
      ASSERT_OK(tuner.TrialEnd(id, true));
    }
  }

  static std::string Record(Tuner& tuner) {
    std::string state;
    bool supported = false;
    EXPECT_OK(tuner.SaveState(&state, &supported));
    EXPECT_TRUE(supported);
    return state;
  }

  PluginRegistry registry_;
  IsolationOptions options_;
  fs::path dir_;
  std::mutex mu_;
  std::vector<std::pair<std::string, std::string>> events_;
};

TEST_F(IsolatedPluginTest, AnIsolatedPluginBehavesLikeTheSamePluginInProcess) {
  auto isolated = Faulty("{}");
  auto local = Faulty("{}", /*isolated=*/false);
  ASSERT_TRUE(isolated && local);
  EXPECT_EQ(isolated->info().id, "org.tunehost.test.fixture-faulty");
  Drive(*isolated);
  Drive(*local);
  EXPECT_EQ(Record(*isolated), Record(*local));
  // Errors read the same, too.
  auto failing = Faulty(R"({"fault": "error", "call": "trial_end"})");
  auto failing_local = Faulty(R"({"fault": "error", "call": "trial_end"})", false);
  Status a = failing->TrialEnd(1, true), b = failing_local->TrialEnd(1, true);
  EXPECT_EQ(a.code(), Status::Code::kPluginError);
  EXPECT_EQ(a.ToString(), b.ToString());
  EXPECT_TRUE(events_.empty());
}

TEST_F(IsolatedPluginTest, ACrashIsSurvivedAndThePluginSeesNoGap) {
  for (const std::string fault : {"segfault", "abort", "exit"}) {
    SCOPED_TRACE(fault);
    events_.clear();
    const fs::path once = dir_ / (fault + ".once");
    auto tuner = Faulty(R"({"fault": ")" + fault +
                        R"(", "call": "receive_trial_result", "after": 3, "once_file": ")" +
                        once.string() + R"("})");
    ASSERT_TRUE(tuner);
    Drive(*tuner);
    EXPECT_TRUE(fs::exists(once)) << "the fault fired";
    auto reference = Faulty("{}", false);
    Drive(*reference);
    EXPECT_EQ(Record(*tuner), Record(*reference)) << "restored and replayed exactly";
    ASSERT_EQ(events_.size(), 1u);
    EXPECT_EQ(events_[0].first, "plugin_crashed");
    EXPECT_NE(events_[0].second.find("during receive_trial_result"), std::string::npos);
  }
}

TEST_F(IsolatedPluginTest, AfterACheckpointOnlyLaterCallsAreReplayed) {
  const fs::path once = dir_ / "once";
  auto tuner = Faulty(R"({"fault": "segfault", "call": "trial_end", "after": 3, "once_file": ")" +
                      once.string() + R"("})");
  ASSERT_OK(tuner->UpdateSearchSpace(Json(R"({"x": {"_type": "uniform", "_value": [0, 1]}})")));
  std::vector<std::pair<int64_t, p::Packed>> out;
  bool no_more = false;
  ASSERT_OK(tuner->Generate({0, 1, 2}, &out, &no_more));
  ASSERT_OK(tuner->TrialEnd(0, true));
  const std::string checkpoint = Record(*tuner);  // what the host would store
  ASSERT_OK(tuner->TrialEnd(1, true));
  ASSERT_OK(tuner->TrialEnd(2, true));  // crashes once, restored from the checkpoint
  ASSERT_EQ(events_.size(), 1u);
  const std::string record = Record(*tuner);
  EXPECT_EQ(record.substr(0, checkpoint.size()), checkpoint);
  EXPECT_EQ(record.substr(checkpoint.size()), "end 1 1\nend 2 1\n");
}

TEST_F(IsolatedPluginTest, ACallThatAlwaysCrashesFailsAfterTheLimitAndLaterCallsWork) {
  auto tuner = Faulty(R"({"fault": "abort", "call": "trial_end", "every": true})");
  Status st = tuner->TrialEnd(7, true);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_NE(st.message().find("trial_end crashed the plugin runner 3 times in a row"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("signal 6"), std::string::npos) << st.message();
  EXPECT_EQ(events_.size(), 3u);
  std::vector<std::pair<int64_t, p::Packed>> out;
  bool no_more = false;
  EXPECT_OK(tuner->Generate({1}, &out, &no_more));
  EXPECT_EQ(out.size(), 1u);
}

TEST_F(IsolatedPluginTest, AHungCallTimesOutAndTheNextCallGetsANewRunner) {
  options_.call_timeout = std::chrono::milliseconds(1500);
  const fs::path once = dir_ / "once";
  auto tuner = Faulty(R"({"fault": "hang", "call": "generate", "once_file": ")" + once.string() +
                      R"("})");
  ASSERT_NE(tuner, nullptr);
  std::vector<std::pair<int64_t, p::Packed>> out;
  bool no_more = false;
  const auto start = std::chrono::steady_clock::now();
  Status st = tuner->Generate({1}, &out, &no_more);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_NE(st.message().find("generate did not return within 1.5 s"), std::string::npos)
      << st.message();
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].first, "plugin_timeout");
  EXPECT_OK(tuner->Generate({2}, &out, &no_more));
  EXPECT_EQ(out.size(), 1u);
}

TEST_F(IsolatedPluginTest, AMemoryCapKillsTheRunnerAndTheCallIsRetried) {
  options_.memory_limit_bytes = size_t{300} << 20;
  const fs::path once = dir_ / "once";
  auto tuner = Faulty(R"({"fault": "leak", "leak_mb": 128, "call": "trial_end", "once_file": ")" +
                      once.string() + R"("})");
  for (int64_t id = 0; id < 6; ++id) ASSERT_OK(tuner->TrialEnd(id, true));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_NE(events_[0].second.find("memory cap of 300 MiB"), std::string::npos)
      << events_[0].second;
}

TEST_F(IsolatedPluginTest, SendTrialReachesTheHostOnceEvenWhenCallsAreReplayed) {
  // evolution serves its credits through send_trial from trial_end (NNI's
  // credit pattern).
  std::mutex mu;
  std::map<int64_t, int> sent;
  SendTrialFn send = [&](int64_t id, p::Packed params) {
    EXPECT_FALSE(params.empty());
    std::lock_guard<std::mutex> lock(mu);
    ++sent[id];
    return Status::Ok();
  };
  std::unique_ptr<Tuner> tuner;
  ASSERT_OK(registry_.CreateTuner("evolution", Json(R"({"population_size": 2, "seed": 1})"),
                                  send, &tuner, &options_));
  ASSERT_OK(tuner->UpdateSearchSpace(Json(R"({"x": {"_type": "uniform", "_value": [0, 1]}})")));
  std::vector<std::pair<int64_t, p::Packed>> out;
  bool no_more = false;
  ASSERT_OK(tuner->Generate({0, 1, 2, 3}, &out, &no_more));
  ASSERT_EQ(out.size(), 2u) << "the population first; the rest are credits";
  for (const auto& [id, params] : out) {
    ASSERT_OK(tuner->ReceiveTrialResult(id, params, p::PackDouble(0.5), 0.5, false));
    ASSERT_OK(tuner->TrialEnd(id, true));
  }
  std::map<int64_t, int> before;
  {
    std::lock_guard<std::mutex> lock(mu);
    before = sent;
  }
  EXPECT_FALSE(before.empty()) << "credits were served through send_trial";
  // Kill the runner behind the proxy's back: the next call restarts it and
  // replays every call, whose send_trial calls must not reach the host again.
  for (pid_t pid : RunnerChildren()) kill(pid, SIGKILL);
  bool supported = false;
  std::string state;
  ASSERT_OK(tuner->SaveState(&state, &supported));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(sent, before);
  for (const auto& [id, n] : sent) EXPECT_EQ(n, 1) << "id " << id;
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].first, "plugin_crashed");
}

TEST_F(IsolatedPluginTest, DestroyingTheProxyLeavesNoProcess) {
  {
    auto tuner = Faulty("{}");
    ASSERT_TRUE(tuner);
    EXPECT_EQ(RunnerChildren().size(), 1u);
  }
  EXPECT_TRUE(RunnerChildren().empty());
}

TEST_F(IsolatedPluginTest, ACreateThatFailsIsAPluginErrorAndLeavesNoProcess) {
  std::unique_ptr<Tuner> tuner;
  Status st = registry_.CreateTuner("fixture-faulty", Json(R"({"fault": "nonsense"})"), nullptr,
                                    &tuner, &options_);
  EXPECT_EQ(st.code(), Status::Code::kPluginError);
  EXPECT_NE(st.message().find("unknown fault 'nonsense'"), std::string::npos) << st.message();
  EXPECT_TRUE(RunnerChildren().empty());
}

TEST(PluginTextTest, CleansLengthEncodingAndControlCharacters) {
  EXPECT_EQ(CleanPluginText(""), "");
  EXPECT_EQ(CleanPluginText("plain text\twith a tab"), "plain text\twith a tab");
  EXPECT_EQ(CleanPluginText("line\nforged [error] line\x1b[31m"), "line forged [error] line [31m");
  EXPECT_EQ(CleanPluginText("bad \xff\xfe bytes"), "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");
  EXPECT_EQ(CleanPluginText("caf\xC3\xA9"), "caf\xC3\xA9") << "valid UTF-8 stays";
  EXPECT_EQ(CleanPluginText("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD") << "overlong form";
  EXPECT_EQ(CleanPluginText("\xC2\x9B" "2J"), " 2J") << "C1 control (CSI)";
  const std::string long_text(5000, 'a');
  const std::string cut = CleanPluginText(long_text);
  EXPECT_LE(cut.size(), kMaxPluginTextBytes + 40);
  EXPECT_NE(cut.find("(3976 bytes cut)"), std::string::npos) << cut.substr(1000);
  // Never cut inside a character.
  std::string accents;
  for (int i = 0; i < 600; ++i) accents += "\xC3\xA9";
  const std::string cut_accents = CleanPluginText(accents, 11);
  EXPECT_EQ(cut_accents.substr(0, 10), std::string("\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9"));
}

}  // namespace
}  // namespace tunehost::host
