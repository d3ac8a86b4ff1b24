// Local-worker supervisor, with a stand-in worker: a /bin/sh script that
// records its arguments in <dir>/rec/<pid>.args and sleeps.
#include "tunehost/host/local_workers.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace tunehost::host {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

// Polls `done` until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& done, milliseconds timeout = milliseconds(10000)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return done();
}

bool ProcessGone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

class LocalWorkersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tunehost-workers-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "rec");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes an executable stand-in worker; `body` runs after the arguments are recorded.
  fs::path WriteWorker(const std::string& body = "exec sleep 600\n") {
    fs::path script = dir_ / "fake-worker";
    std::ofstream(script) << "#!/bin/sh\n"
                          << "printf '%s\\n' \"$@\" > '" << (dir_ / "rec").string()
                          << "'/$$.args.tmp\n"
                          << "mv '" << (dir_ / "rec").string() << "'/$$.args.tmp '"
                          << (dir_ / "rec").string() << "'/$$.args\n"
                          << body;
    chmod(script.c_str(), 0755);
    return script;
  }

  LocalWorkersOptions Options(const fs::path& binary, size_t count) {
    LocalWorkersOptions o;
    o.worker_binary = binary;
    o.count = count;
    o.jobs = "tcp://127.0.0.1:4001";
    o.results = "tcp://127.0.0.1:4002";
    o.events = "tcp://127.0.0.1:4003";
    o.command = "python3 trial.py --x 1";
    o.cwd = dir_ / "code";
    o.workdir = dir_ / "exp";
    o.heartbeat_interval = milliseconds(250);
    o.log_dir = dir_ / "logs";
    return o;
  }

  // The recorded arguments of process `pid`, empty if it has not written them yet.
  std::vector<std::string> RecordedArgs(pid_t pid) {
    std::vector<std::string> args;
    std::ifstream in(dir_ / "rec" / (std::to_string(pid) + ".args"));
    for (std::string line; std::getline(in, line);) args.push_back(line);
    return args;
  }

  bool AllRecorded(const std::vector<pid_t>& pids) {
    for (pid_t pid : pids) {
      if (pid <= 0 || RecordedArgs(pid).empty()) return false;
    }
    return true;
  }

  std::vector<std::string> ExpectedArgs(size_t i) {
    return {"--jobs",         "tcp://127.0.0.1:4001",
            "--results",      "tcp://127.0.0.1:4002",
            "--events",       "tcp://127.0.0.1:4003",
            "--command",      "python3 trial.py --x 1",
            "--slots",        "1",
            "--id",           "local-" + std::to_string(i),
            "--heartbeat-ms", "250",
            "--cwd",          (dir_ / "code").string(),
            "--workdir",      (dir_ / "exp").string(),
            "--log-level",    "debug"};
  }

  fs::path dir_;
};

TEST_F(LocalWorkersTest, StartsWorkersWithTheirArguments) {
  LocalWorkersOptions o = Options(WriteWorker(), 3);
  o.extra_args = {"--log-level", "debug"};
  LocalWorkers workers(o);
  ASSERT_OK(workers.Start());
  ASSERT_TRUE(WaitFor([&] { return AllRecorded(workers.pids()); }));
  std::vector<pid_t> pids = workers.pids();
  ASSERT_EQ(pids.size(), 3u);
  for (size_t i = 0; i < pids.size(); ++i) {
    EXPECT_EQ(RecordedArgs(pids[i]), ExpectedArgs(i)) << "worker " << i;
    // Its own process group.
    EXPECT_EQ(getpgid(pids[i]), pids[i]);
    EXPECT_TRUE(fs::exists(dir_ / "logs" / ("local-" + std::to_string(i) + ".log")));
  }
  EXPECT_EQ(workers.respawns(), 0u);
}

TEST_F(LocalWorkersTest, RespawnsAWorkerKilledWithSigkill) {
  LocalWorkersOptions o = Options(WriteWorker(), 2);
  o.extra_args = {"--log-level", "debug"};
  LocalWorkers workers(o);
  ASSERT_OK(workers.Start());
  ASSERT_TRUE(WaitFor([&] { return AllRecorded(workers.pids()); }));
  const pid_t victim = workers.pids()[1];
  const pid_t survivor = workers.pids()[0];
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] {
    pid_t now = workers.pids()[1];
    return now > 0 && now != victim && !RecordedArgs(now).empty();
  })) << "worker 1 was not respawned";
  pid_t replacement = workers.pids()[1];
  EXPECT_EQ(RecordedArgs(replacement), ExpectedArgs(1));
  EXPECT_EQ(workers.pids()[0], survivor);
  EXPECT_EQ(workers.respawns(), 1u);
  EXPECT_TRUE(ProcessGone(victim));
}

TEST_F(LocalWorkersTest, RespawnsAreBoundedPerMinute) {
  LocalWorkersOptions o = Options(WriteWorker(), 1);
  o.max_respawns_per_minute = 1;
  LocalWorkers workers(o);
  ASSERT_OK(workers.Start());
  ASSERT_TRUE(WaitFor([&] { return AllRecorded(workers.pids()); }));
  const pid_t first = workers.pids()[0];
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] {
    pid_t now = workers.pids()[0];
    return now > 0 && now != first && !RecordedArgs(now).empty();
  }));
  const pid_t second = workers.pids()[0];
  ASSERT_EQ(kill(second, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return workers.pids()[0] == 0; })) << "death not noticed";
  // The reaper runs every 50 ms; ten rounds later the slot must still be waiting.
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(workers.pids()[0], 0);
  EXPECT_EQ(workers.respawns(), 1u);
}

TEST_F(LocalWorkersTest, StopTerminatesAllWorkers) {
  LocalWorkers workers(Options(WriteWorker(), 3));
  ASSERT_OK(workers.Start());
  ASSERT_TRUE(WaitFor([&] { return AllRecorded(workers.pids()); }));
  std::vector<pid_t> pids = workers.pids();
  auto start = std::chrono::steady_clock::now();
  workers.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(4000))
      << "workers that obey SIGTERM should not wait for the SIGKILL deadline";
  for (pid_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
  for (pid_t pid : workers.pids()) EXPECT_EQ(pid, 0);
  workers.Stop();  // idempotent
}

TEST_F(LocalWorkersTest, StopKillsWorkersThatIgnoreSigterm) {
  // The whole group ignores SIGTERM (ignored signals survive exec into sleep).
  LocalWorkersOptions o = Options(WriteWorker("trap '' TERM\nwhile :; do sleep 1; done\n"), 2);
  o.stop_timeout = milliseconds(300);
  LocalWorkers workers(o);
  ASSERT_OK(workers.Start());
  ASSERT_TRUE(WaitFor([&] { return AllRecorded(workers.pids()); }));
  std::vector<pid_t> pids = workers.pids();
  workers.Stop();
  for (pid_t pid : pids) {
    EXPECT_TRUE(ProcessGone(pid)) << pid;
    // The worker's own children die too (orphans are reaped by init shortly after).
    EXPECT_TRUE(WaitFor([&] { return kill(-pid, 0) != 0; }))
        << "process group " << pid << " still has members";
  }
}

TEST_F(LocalWorkersTest, DestructorStopsWorkers) {
  std::vector<pid_t> pids;
  {
    LocalWorkers workers(Options(WriteWorker(), 2));
    ASSERT_OK(workers.Start());
    ASSERT_TRUE(WaitFor([&] { return AllRecorded(workers.pids()); }));
    pids = workers.pids();
  }
  for (pid_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

TEST_F(LocalWorkersTest, StartFailsCleanlyWhenTheBinaryCannotRun) {
  fs::path not_exec = dir_ / "not-executable";
  std::ofstream(not_exec) << "#!/bin/sh\n";
  Status st = LocalWorkers(Options(not_exec, 1)).Start();
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("not-executable"), std::string::npos);

  // Executable but not a program exec can run: exec fails in the child.
  fs::path garbage = dir_ / "garbage";
  std::ofstream(garbage) << "\x7f"
                            "ELF garbage";
  chmod(garbage.c_str(), 0755);
  LocalWorkers workers(Options(garbage, 2));
  st = workers.Start();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot execute"), std::string::npos) << st.ToString();
}

TEST(FindWorkerBinaryTest, BareNamesAreLookedUpInPath) {
  fs::path out;
  ASSERT_OK(FindWorkerBinary("sh", &out));
  EXPECT_TRUE(out.is_absolute());
  EXPECT_EQ(out.filename(), "sh");
  EXPECT_EQ(FindWorkerBinary("no-such-tunehost-binary", &out).code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace tunehost::host

namespace tunehost::host {
namespace {

TEST(PlanGpusTest, EachWorkerGetsDistinctGpusAndNoGpuServesMoreThanAllowed) {
  const std::vector<int> four = {0, 1, 2, 3};
  EXPECT_EQ(PlanGpus(four, 2, 1, 8), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(PlanGpus(four, 1, 1, 2), (std::vector<std::vector<int>>{{0}, {1}}));
  EXPECT_EQ(PlanGpus(four, 3, 1, 8), (std::vector<std::vector<int>>{{0, 1, 2}}));
  EXPECT_EQ(PlanGpus(four, 2, 2, 8),
            (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {0, 1}, {2, 3}}));
  // Shared GPUs with more than one GPU per trial: never one GPU twice in a trial.
  for (const auto& mine : PlanGpus({5, 7, 9}, 2, 2, 8)) {
    ASSERT_EQ(mine.size(), 2u);
    EXPECT_NE(mine[0], mine[1]);
  }
  EXPECT_EQ(PlanGpus({5, 7, 9}, 2, 2, 8).size(), 3u);
  std::map<int, int> uses;
  for (const auto& mine : PlanGpus({5, 7, 9}, 2, 2, 8)) {
    for (int g : mine) ++uses[g];
  }
  for (const auto& [g, n] : uses) EXPECT_LE(n, 2) << g;
  EXPECT_TRUE(PlanGpus(four, 5, 1, 8).empty()) << "a trial needs more GPUs than there are";
  EXPECT_TRUE(PlanGpus({}, 1, 1, 8).empty());
}

}  // namespace
}  // namespace tunehost::host
