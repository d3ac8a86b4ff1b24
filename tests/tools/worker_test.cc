// tunehost-worker as a real process against a host played by the test
// (tools/worker_testing.h).
#include "tools/worker_testing.h"

namespace tunehost::protocol {
namespace {

using namespace worker_testing;  // NOLINT: the shared fixture

TEST_F(WorkerTest, HelloThenHeartbeat) {
  StartWorker("true", {"--slots", "3", "--gpus", "2"});
  const WorkerHello& hello = *hello_;
  EXPECT_EQ(hello.worker_id, id_);
  EXPECT_EQ(hello.slots, 3u);
  EXPECT_EQ(hello.resources.gpus, 2u);
  EXPECT_EQ(hello.language, "c++");
  EXPECT_FALSE(hello.version.empty());
  EXPECT_TRUE(hello.running.empty());
  auto hb = host_.Await<Heartbeat>();
  ASSERT_TRUE(hb);
  EXPECT_EQ(hb->worker_id, id_);
  EXPECT_EQ(hb->free_slots, 3u);
  EXPECT_TRUE(hb->running.empty());
}

TEST_F(WorkerTest, AnswersOffersAndRejectsWhenFull) {
  StartWorker("sleep 60", {"--slots", "2"});
  NewTrialJob leased = MakeJob("t1");
  leased.lease = 0xFFFFFFFFFFFFFFFFull;
  host_.Offer(leased);
  host_.Offer(MakeJob("t2"));
  auto t1 = AwaitStarted("t1");
  ASSERT_TRUE(t1);
  EXPECT_EQ(t1->lease, leased.lease) << "TS echoes the offer's lease";
  auto t2 = AwaitStarted("t2");
  ASSERT_TRUE(t2);
  EXPECT_EQ(t2->lease, std::nullopt);
  host_.Offer(MakeJob("t3", 4));
  auto rejected = host_.Await<TrialRejected>();
  ASSERT_TRUE(rejected);
  EXPECT_EQ(rejected->trial_id, "t3");
  EXPECT_EQ(rejected->attempt, 4u);
  EXPECT_EQ(rejected->reason, "no free slot");
  EXPECT_EQ(rejected->worker_id, id_);
  host_.Forget();
  auto hb = host_.Await<Heartbeat>();
  ASSERT_TRUE(hb);
  EXPECT_EQ(hb->free_slots, 0u);
  EXPECT_TRUE(HasTrial(hb->running, "t1"));
  EXPECT_TRUE(HasTrial(hb->running, "t2"));
}

TEST_F(WorkerTest, AddressedOffersOnItsEventsTopicAreAnsweredLikeJobs) {
  // wire-format.md §5.2: WH says offers "addressed"; a TR on the worker's own
  // topic is an offer, and one for a longer id sharing the prefix is not.
  StartWorker("sleep 60", {"--slots", "1"});
  EXPECT_EQ(hello_->offers, std::optional<std::string>("addressed"));
  NewTrialJob job = MakeJob("a1", 2);
  job.lease = 77;
  host_.Publish("worker." + id_ + ".", job);
  auto started = AwaitStarted("a1");
  ASSERT_TRUE(started);
  EXPECT_EQ(started->attempt, 2u);
  EXPECT_EQ(started->lease, std::optional<uint64_t>(77));
  host_.Publish("worker." + id_ + ".x.", MakeJob("a3"));
  NewTrialJob full = MakeJob("a2");
  full.lease = 78;
  host_.Publish("worker." + id_ + ".", full);
  auto rejected = host_.Await<TrialRejected>();
  ASSERT_TRUE(rejected);
  EXPECT_EQ(rejected->trial_id, "a2") << "a3 was meant for another worker";
  EXPECT_EQ(rejected->lease, std::optional<uint64_t>(78));
  for (const Message& m : host_.log()) {
    if (const auto* ts = std::get_if<TrialStarted>(&m.body)) {
      EXPECT_NE(ts->trial_id, "a3");
    }
  }
}

TEST_F(WorkerTest, MetricsAreSequencedResentUntilAckedAndEndFollowsFinalAck) {
  const std::string script = WriteScript("metrics.py", R"(import os
fd = int(os.environ["TUNEHOST_METRIC_FD"])
def send(line):
    os.write(fd, (line + "\n").encode())
send('{"type": "PERIODICAL", "value": 0.5}')
send('{"value": 1.5}')
send('this is not json')
send('{"value": "not a number"}')
send('{"value": %s}' % ("1" * (1 << 20)))
send('{"type": "PERIODICAL", "value": 2.5}')
send('{"type": "FINAL", "value": {"default": 0.9, "loss": 0.1}}')
send('{"type": "FINAL", "value": 7}')
)");
  StartWorker(std::string(TH_PYTHON) + " " + script);
  host_.Offer(MakeJob("m1", 2));
  ASSERT_TRUE(AwaitStarted("m1"));

  std::map<uint64_t, int> seen;
  std::vector<ReportMetricData> firsts;
  size_t final_resend_index = 0;
  std::optional<TrialEnd> end;
  const auto deadline = Clock::now() + kTimeout;
  while (!end && Clock::now() < deadline) {
    auto m = host_.Next(milliseconds{100});
    if (!m) continue;
    if (auto* me = std::get_if<ReportMetricData>(&m->body)) {
      ASSERT_EQ(me->trial_id, "m1");
      ASSERT_EQ(me->attempt, 2u);
      EXPECT_EQ(me->worker_id, id_);
      EXPECT_EQ(me->parameter_id, ParameterId(int64_t{5}));
      const int count = ++seen[me->sequence];
      if (count == 1) firsts.push_back(*me);
      // Withhold the first ack of sequence 0 and of the FINAL.
      const bool withhold = count == 1 && (me->sequence == 0 || me->type == MetricType::kFinal);
      if (me->type == MetricType::kFinal && count == 2) final_resend_index = host_.log().size();
      if (!withhold) Ack(*me);
    } else if (auto* en = std::get_if<TrialEnd>(&m->body)) {
      end = *en;
      EXPECT_GT(final_resend_index, 0u) << "EN before the FINAL was acknowledged";
    }
  }
  ASSERT_TRUE(end) << "no EN";
  EXPECT_EQ(end->status, TrialStatus::kSucceeded);
  EXPECT_EQ(end->attempt, 2u);
  EXPECT_EQ(end->worker_id, id_);
  EXPECT_EQ(end->error, "");

  ASSERT_EQ(firsts.size(), 4u);
  const double expected[] = {0.5, 1.5, 2.5, 0.9};
  for (size_t i = 0; i < firsts.size(); ++i) {
    EXPECT_EQ(firsts[i].sequence, i);
    EXPECT_DOUBLE_EQ(firsts[i].value.scalar, expected[i]);
    EXPECT_EQ(firsts[i].type, i < 3 ? MetricType::kPeriodical : MetricType::kFinal);
  }
  EXPECT_GE(seen[0], 2) << "sequence 0 was not resent";
  EXPECT_GE(seen[3], 2) << "FINAL was not resent";
  EXPECT_EQ(seen.count(4), 0u) << "the second FINAL was not ignored";
}

// CPU seconds (user + system) a process has used so far.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A trial that exited while its result waits for an MA keeps the worker
// waiting on timers (heartbeats, resends), not spinning.
TEST_F(WorkerTest, AnExitedTrialWaitingForItsAcksDoesNotSpin) {
  StartWorker(R"(echo '{"type": "FINAL", "value": 0.5}' >&$TUNEHOST_METRIC_FD)");
  host_.Offer(MakeJob("s1", 0));
  ASSERT_TRUE(AwaitStarted("s1"));
  ASSERT_TRUE(host_.Await<ReportMetricData>([](const ReportMetricData& m) {
    return m.trial_id == "s1";
  }));
  // Past the grace the worker gives a trial that exited (never acknowledged).
  std::this_thread::sleep_for(milliseconds(1500));
  const double before = CpuSeconds(pid_);
  std::this_thread::sleep_for(milliseconds(2000));
  EXPECT_LT(CpuSeconds(pid_) - before, 0.5) << "the worker spins while it waits for an MA";
}

TEST_F(WorkerTest, AckLogListsExactlyTheAcknowledgedResults) {
  // tools/soak compares these lines with the host's store.
  const std::string log = (dir_ / "acks.log").string();
  StartWorker("printf '{\"value\": 0.25}\\n{\"value\": 0.5}\\n{\"type\": \"FINAL\", "
              "\"value\": 0.75}\\n' >&$TUNEHOST_METRIC_FD",
              {"--ack-log", log});
  host_.Offer(MakeJob("a1", 1));
  ASSERT_TRUE(AwaitStarted("a1"));
  std::optional<TrialEnd> end;
  std::map<uint64_t, int> seen;
  const auto deadline = Clock::now() + kTimeout;
  while (!end && Clock::now() < deadline) {
    auto m = host_.Next(milliseconds{100});
    if (!m) continue;
    if (auto* me = std::get_if<ReportMetricData>(&m->body)) {
      // Sequence 1 is acknowledged on its second sending only; the log
      // still has it once.
      if (++seen[me->sequence] == 1 && me->sequence == 1) continue;
      Ack(*me);
      Ack(*me);  // a duplicate ack matches nothing
    } else if (auto* en = std::get_if<TrialEnd>(&m->body)) {
      end = *en;
    }
  }
  ASSERT_TRUE(end) << "no EN";
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  std::sort(lines.begin(), lines.end());
  // The last field is when the ack came (Unix seconds).
  EXPECT_EQ(lines[0].rfind("a1 1 0 PERIODICAL 0.25 " + id_ + " ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("a1 1 1 PERIODICAL 0.5 " + id_ + " ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("a1 1 2 FINAL 0.75 " + id_ + " ", 0), 0u) << lines[2];
  const double when = std::stod(lines[0].substr(lines[0].rfind(' ') + 1));
  EXPECT_NEAR(when, static_cast<double>(std::time(nullptr)), 60);
}

TEST_F(WorkerTest, FailingCommandsReportExitCodeSignalAndStderrTail) {
  StartWorker(
      "if [ \"$TUNEHOST_TRIAL_ID\" = f1 ]; then echo boom >&2; exit 3; "
      "else kill -9 $$; fi",
      {"--slots", "2"});
  host_.Offer(MakeJob("f1"));
  auto end = AwaitEnd("f1");
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status, TrialStatus::kFailed);
  EXPECT_NE(end->error.find("exit code 3"), std::string::npos) << end->error;
  EXPECT_NE(end->error.find("boom"), std::string::npos) << end->error;

  host_.Offer(MakeJob("f2", 1));
  end = AwaitEnd("f2");
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status, TrialStatus::kFailed);
  EXPECT_EQ(end->attempt, 1u);
  EXPECT_NE(end->error.find("killed by signal 9"), std::string::npos) << end->error;
}

TEST_F(WorkerTest, TrialWithoutFinalEndsNormallyAfterItsResultsAreAcked) {
  StartWorker("echo '{\"value\": 2}' >&3; echo '{\"value\": 3}' >&\"$TUNEHOST_METRIC_FD\"");
  host_.Offer(MakeJob("p1"));
  for (uint64_t sequence : {0u, 1u}) {
    auto me = host_.Await<ReportMetricData>();
    ASSERT_TRUE(me);
    EXPECT_EQ(me->sequence, sequence);
    EXPECT_EQ(me->type, MetricType::kPeriodical);
    Ack(*me);
  }
  auto end = AwaitEnd("p1");
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status, TrialStatus::kSucceeded);
}

TEST_F(WorkerTest, KillStopsTrialsAndIgnoresOtherAttempts) {
  StartWorker("sleep 60", {"--slots", "2"});
  const std::string topic = "worker." + id_ + ".";
  host_.Offer(MakeJob("k1", 1));
  host_.Offer(MakeJob("k2", 1));
  ASSERT_TRUE(AwaitStarted("k1"));
  ASSERT_TRUE(AwaitStarted("k2"));

  // KI for an attempt this worker does not run; the HR after it is handled
  // later on the same socket, so its WH shows the KI was seen and ignored.
  host_.Publish(topic, KillTrialJob{"k1", 0, "user"});
  host_.Publish(topic, HelloRequest{});
  auto hello = host_.Await<WorkerHello>();
  ASSERT_TRUE(hello);
  EXPECT_TRUE(HasTrial(hello->running, "k1"));
  EXPECT_TRUE(HasTrial(hello->running, "k2"));

  host_.Publish(topic, KillTrialJob{"k1", 1, "user"});
  host_.Publish(topic, KillTrialJob{"k2", 1, "assessor"});
  auto end1 = AwaitEnd("k1");
  ASSERT_TRUE(end1);
  EXPECT_EQ(end1->status, TrialStatus::kUserCanceled);
  EXPECT_EQ(end1->attempt, 1u);
  EXPECT_NE(end1->error.find("killed by signal 15"), std::string::npos) << end1->error;
  auto end2 = AwaitEnd("k2");
  ASSERT_TRUE(end2);
  EXPECT_EQ(end2->status, TrialStatus::kEarlyStopped);
  for (const Message& m : host_.log()) {
    if (const auto* e = std::get_if<TrialEnd>(&m.body)) {
      EXPECT_EQ(e->attempt, 1u);
    }
  }
  host_.Forget();
  auto hb = host_.Await<Heartbeat>();
  ASSERT_TRUE(hb);
  EXPECT_EQ(hb->free_slots, 2u);
}

TEST_F(WorkerTest, KillEscalatesToSigkillAfterGrace) {
  // The trial reports a metric once SIGTERM is ignored, so the KI cannot
  // arrive before the trap is set.
  StartWorker(
      "trap '' TERM; echo '{\"value\": 1}' >&\"$TUNEHOST_METRIC_FD\"; "
      "while :; do sleep 0.05; done",
      {"--kill-grace-ms", "300"});
  host_.Offer(MakeJob("g1"));
  ASSERT_TRUE(AwaitStarted("g1"));
  auto ready = host_.Await<ReportMetricData>();
  ASSERT_TRUE(ready);
  Ack(*ready);
  host_.Publish("worker." + id_ + ".", KillTrialJob{"g1", 0, "user"});
  auto end = AwaitEnd("g1");
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status, TrialStatus::kUserCanceled);
  EXPECT_NE(end->error.find("killed by signal 9"), std::string::npos) << end->error;
}

// A trial that exited with results the host never acknowledges (the host
// superseded that attempt) ends when the host kills it: the worker drops
// those results instead of resending them forever.
TEST_F(WorkerTest, KillOfAnExitedTrialDropsItsUnacknowledgedResultsAndEndsIt) {
  StartWorker("echo '{\"type\": \"FINAL\", \"value\": 1}' >&\"$TUNEHOST_METRIC_FD\"");
  host_.Offer(MakeJob("x1", 2));
  ASSERT_TRUE(AwaitStarted("x1"));
  auto first = host_.Await<ReportMetricData>();
  ASSERT_TRUE(first);
  auto resent = host_.Await<ReportMetricData>(
      [&](const ReportMetricData& me) { return me.sequence == first->sequence; });
  ASSERT_TRUE(resent) << "an unacknowledged result is resent";
  for (const Message& m : host_.log()) {
    ASSERT_FALSE(std::holds_alternative<TrialEnd>(m.body)) << "EN before its results were acked";
  }
  host_.Publish("worker." + id_ + ".", KillTrialJob{"x1", 2, "superseded"});
  auto end = AwaitEnd("x1");
  ASSERT_TRUE(end);
  EXPECT_EQ(end->attempt, 2u);
  EXPECT_EQ(end->status, TrialStatus::kSucceeded) << "it exited 0 before the KI";
  host_.Forget();
  auto hb = host_.Await<Heartbeat>();
  ASSERT_TRUE(hb);
  EXPECT_EQ(hb->free_slots, 1u);
}

// An orphaned worker adopted by a host that then goes away too: its results
// stay unacknowledged, and after --orphan-timeout-ms it stops and exits
// instead of resending them forever.
TEST_F(WorkerTest, AdoptedOrphanWhoseResultsAreNeverAcknowledgedExits) {
  const pid_t fake_host = ::fork();
  ASSERT_GE(fake_host, 0);
  if (fake_host == 0) {
    ::pause();
    _exit(0);
  }
  StartWorker("echo '{\"type\": \"FINAL\", \"value\": 1}' >&3; sleep 60",
              {"--orphan-timeout-ms", "1500", "--host-pid", std::to_string(fake_host)});
  host_.Offer(MakeJob("o1"));
  ASSERT_TRUE(AwaitStarted("o1"));
  ASSERT_TRUE(host_.Await<ReportMetricData>());
  ::kill(fake_host, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(fake_host, &status, 0), fake_host);
  // A resumed host adopts the orphan (HR), then never acknowledges anything.
  host_.Publish("worker.*", HelloRequest{});
  auto hello = host_.Await<WorkerHello>(
      [](const WorkerHello& h) { return h.slots == 1 && h.running.size() == 1; });
  ASSERT_TRUE(hello) << "the orphan answers the adopting host";
  ASSERT_TRUE(WaitExit(kTimeout, &status)) << "the adopted orphan did not give up";
  EXPECT_TRUE(WIFEXITED(status)) << "status " << status;
  ASSERT_TRUE(host_.Await<WorkerBye>());
  // It leaves its trial to a host that comes back (wire-format.md §5.3 item 8).
  EXPECT_FALSE(host_.Await<TrialEnd>(milliseconds(0)));
}

TEST_F(WorkerTest, HelloRequestIsAnsweredWithHello) {
  StartWorker("sleep 60");
  host_.Offer(MakeJob("h1", 3));
  ASSERT_TRUE(AwaitStarted("h1"));
  host_.Publish("worker.*", HelloRequest{});
  auto hello = host_.Await<WorkerHello>();
  ASSERT_TRUE(hello);
  ASSERT_EQ(hello->running.size(), 1u);
  EXPECT_EQ(hello->running[0].trial_id, "h1");
  EXPECT_EQ(hello->running[0].attempt, 3u);
  EXPECT_EQ(hello->running[0].last_sequence, -1);
}

TEST_F(WorkerTest, EnvironmentParameterFileAndOutputsAreAsDocumented) {
  const std::string script = WriteScript("env.py", R"(import json, os, sys
keys = ["TUNEHOST_EXPERIMENT_ID", "TUNEHOST_TRIAL_ID", "TUNEHOST_SEQUENCE_ID",
        "TUNEHOST_ATTEMPT", "TUNEHOST_PARAMETER_ID", "TUNEHOST_PARAMETERS",
        "TUNEHOST_PARAMETER_FILE", "TUNEHOST_TRIAL_DIR", "TUNEHOST_METRIC_FD",
        "NNI_PLATFORM", "NNI_EXP_ID", "NNI_TRIAL_JOB_ID", "NNI_TRIAL_SEQ_ID",
        "NNI_SYS_DIR", "NNI_OUTPUT_DIR", "TRIAL_BUDGET"]
out = {k: os.environ.get(k) for k in keys}
out["fds"] = sorted(int(x) for x in os.listdir("/proc/self/fd"))
out["cwd"] = os.getcwd()
with open(os.path.join(os.environ["TUNEHOST_TRIAL_DIR"], "env.json"), "w") as f:
    json.dump(out, f)
print("to stdout")
print("to stderr", file=sys.stderr)
os.write(int(os.environ["TUNEHOST_METRIC_FD"]), b'{"type": "FINAL", "value": 1}\n')
)");
  StartWorker(std::string(TH_PYTHON) + " " + script);
  host_.Offer(MakeJob("e1", 1));
  auto me = host_.Await<ReportMetricData>();
  ASSERT_TRUE(me);
  Ack(*me);
  auto end = AwaitEnd("e1");
  ASSERT_TRUE(end);
  ASSERT_EQ(end->status, TrialStatus::kSucceeded) << end->error;

  const std::string dir = TrialDir("e1", 1);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const json env = json::parse(read(dir + "/env.json"));
  EXPECT_EQ(env["TUNEHOST_EXPERIMENT_ID"], "exp1");
  EXPECT_EQ(env["TUNEHOST_TRIAL_ID"], "e1");
  EXPECT_EQ(env["TUNEHOST_SEQUENCE_ID"], "4");
  EXPECT_EQ(env["TUNEHOST_ATTEMPT"], "1");
  EXPECT_EQ(env["TUNEHOST_PARAMETER_ID"], "5");
  const json params = {{"lr", 0.25}, {"layers", 3}, {"name", "x y"}, {"TRIAL_BUDGET", 7}};
  EXPECT_EQ(json::parse(env["TUNEHOST_PARAMETERS"].get<std::string>()), params);
  EXPECT_EQ(env["TUNEHOST_PARAMETER_FILE"], dir + "/parameter.json");
  EXPECT_EQ(env["TUNEHOST_TRIAL_DIR"], dir);
  EXPECT_EQ(env["NNI_PLATFORM"], "tunehost");
  EXPECT_EQ(env["NNI_EXP_ID"], "exp1");
  EXPECT_EQ(env["NNI_TRIAL_JOB_ID"], "e1");
  EXPECT_EQ(env["NNI_TRIAL_SEQ_ID"], "4");
  EXPECT_EQ(env["NNI_SYS_DIR"], dir);
  EXPECT_EQ(env["NNI_OUTPUT_DIR"], dir);
  EXPECT_EQ(env["TRIAL_BUDGET"], "7");
  EXPECT_EQ(env["cwd"].get<std::string>(), dir_.string());

  // Only stdio and the metric pipe are inherited; the listing's own directory
  // fd may show up once.
  const int metric_fd = std::stoi(env["TUNEHOST_METRIC_FD"].get<std::string>());
  std::set<int> fds = env["fds"].get<std::set<int>>();
  for (int fd : {0, 1, 2, metric_fd}) EXPECT_EQ(fds.erase(fd), 1u) << fd;
  EXPECT_LE(fds.size(), 1u);

  const json record = json::parse(read(dir + "/parameter.json"));
  EXPECT_EQ(record, (json{{"parameter_id", 5},
                          {"parameter_source", "algorithm"},
                          {"parameter_index", 0},
                          {"parameters", params}}));
  EXPECT_EQ(read(dir + "/stdout.log"), "to stdout\n");
  EXPECT_EQ(read(dir + "/stderr.log"), "to stderr\n");
}

TEST_F(WorkerTest, SurvivesGarbageFromTheNetwork) {
  StartWorker("true");
  host_.SendRawJob("\xc1 definitely not msgpack");
  host_.SendRawJob(Encode(1, Ping{}));
  host_.PublishRaw("worker." + id_ + ".", "\x93\x01\x02");
  host_.Publish("worker." + id_ + ".", MetricAck{"nobody", 0, 9});
  host_.Publish("worker." + id_ + ".", KillTrialJob{"nobody", 0, "user"});
  host_.Offer(MakeJob("ok1"));
  ASSERT_TRUE(AwaitStarted("ok1"));
  auto end = AwaitEnd("ok1");
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status, TrialStatus::kSucceeded);
}

TEST_F(WorkerTest, SigtermStopsTrialsLeavesThemToTheHostSendsByeAndExitsZero) {
  StartWorker("sleep 60");
  host_.Offer(MakeJob("s1"));
  ASSERT_TRUE(AwaitStarted("s1"));
  ASSERT_EQ(::kill(pid_, SIGTERM), 0);
  auto bye = host_.Await<WorkerBye>();
  ASSERT_TRUE(bye);
  EXPECT_EQ(bye->worker_id, id_);
  // The trial did not end, its worker left: no EN (an EN would come before
  // the WB), so the host offers it again (wire-format.md §5.3 item 8).
  EXPECT_FALSE(host_.Await<TrialEnd>(milliseconds(0)));
  int status = 0;
  ASSERT_TRUE(WaitExit(kTimeout, &status));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(WorkerTest, ATrialKilledTogetherWithItsWorkerIsLeftToTheHost) {
  // scancel and pre-emption signal every process of the job at once: the
  // trial may die before its worker hears its own signal.
  const pid_t trial = StartTrialThatSleeps("k1");
  ASSERT_GT(trial, 0);
  ASSERT_EQ(::kill(trial, SIGTERM), 0);
  std::this_thread::sleep_for(milliseconds(100));  // the worker sees its trial die first
  ASSERT_EQ(::kill(pid_, SIGTERM), 0);
  ASSERT_TRUE(host_.Await<WorkerBye>());
  EXPECT_FALSE(host_.Await<TrialEnd>(milliseconds(0))) << "no EN: the host offers it again";
}

TEST_F(WorkerTest, ATrialKilledFromOutsideAloneEndsFailed) {
  const pid_t trial = StartTrialThatSleeps("k2");
  ASSERT_GT(trial, 0);
  ASSERT_EQ(::kill(trial, SIGTERM), 0);
  auto end = AwaitEnd("k2");
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status, TrialStatus::kFailed);
  EXPECT_NE(end->error.find("signal 15"), std::string::npos) << end->error;
}

TEST_F(WorkerTest, ExitsWhenIdleLongerThanMaxIdle) {
  StartWorker("true", {"--max-idle-ms", "300"});
  auto bye = host_.Await<WorkerBye>();
  ASSERT_TRUE(bye);
  int status = 0;
  ASSERT_TRUE(WaitExit(kTimeout, &status));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace tunehost::protocol
