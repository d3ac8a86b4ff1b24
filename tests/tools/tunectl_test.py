"""tunectl against a live host: every command, run as a process against a
`tunehost serve` with a real worker (tests/e2e/harness.py starts both), with
its --json output parsed and checked, its tables spot-checked, and its exit
codes (0 ok, 1 error reply, 2 usage, 3 no host)."""

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import harness
from harness import Host, free_ports, start_worker, stop, wait_for

TUNECTL = os.path.join(harness.BIN_DIR, "tunectl")

# Each trial reports two results; a "sleep" parameter (set through `add`)
# keeps it running long enough to be killed.
TRIAL = r'''
import json, os, time
params = json.loads(os.environ["TUNEHOST_PARAMETERS"])
fd = int(os.environ["TUNEHOST_METRIC_FD"])
os.write(fd, (json.dumps({"type": "PERIODICAL", "value": params["x"] / 2}) + "\n").encode())
time.sleep(params.get("sleep", 0.5))
os.write(fd, (json.dumps({"type": "FINAL", "value": {"default": params["x"], "half": params["x"] / 2}}) + "\n").encode())
'''

SPACE = {"x": {"_type": "uniform", "_value": [0.0, 1.0]}}


def process_gone(pid):
    """The process has exited (a zombie no one reaped counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class Tunectl:
    """Runs tunectl against one control endpoint."""

    def __init__(self, control):
        self.control = control

    def run(self, *args, timeout_ms=5000, target=None):
        target = target if target is not None else ["--control", self.control]
        cmd = [TUNECTL] + list(target) + ["--timeout-ms", str(timeout_ms)] + list(args)
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=60)

    def ok(self, *args):
        r = self.run(*args)
        if r.returncode != 0:
            raise AssertionError("tunectl %s -> %d\nstdout: %s\nstderr: %s"
                                 % (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r.stdout

    def json(self, *args):
        return json.loads(self.ok(*args, "--json"))


class TunectlCommandsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tunectl-test-")
        self.host = Host()
        self.procs = []
        self.ctl = Tunectl(self.host.endpoints["control"])

    def tearDown(self):
        for proc in self.procs:
            stop(proc)
        self.host.close()

    def start_experiment(self, concurrency=1, max_trials=0, slots=3):
        kind, body = self.host.initialize(SPACE, tuner="random",
                                          tuner_args={"seed": 7, "optimize_mode": "maximize"},
                                          concurrency=concurrency, max_trials=max_trials)
        self.assertEqual(kind, "ok", body)
        trial = os.path.join(self.tmp, "trial.py")
        with open(trial, "w", encoding="utf-8") as f:
            f.write(TRIAL)
        self.procs.append(start_worker(self.host, "%s %s" % (sys.executable, trial),
                                       os.path.join(self.tmp, "w1"), "w1", slots=slots))

    def succeeded(self, n):
        return wait_for(lambda: self.ctl.json("stats")["counts"].get("SUCCEEDED", 0) >= n, 60,
                        "%d succeeded trials" % n)

    def trial_status(self, trial_id, statuses, what):
        return wait_for(lambda: self.ctl.json("trial", trial_id)["status"] in statuses, 60, what)

    def test_queries_report_the_live_experiment(self):
        # Before IN every request but PI is bad_state: exit 1 with the code.
        r = self.ctl.run("status")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertTrue(r.stderr.startswith("tunectl: bad_state: "), r.stderr)
        self.start_experiment(concurrency=1)

        ping = self.ctl.json("ping")
        self.assertEqual(ping["experiment_id"], "e2e")
        self.assertEqual(ping["status"], "RUNNING")
        self.assertIn("e2e", self.ctl.ok("ping"))

        # update --concurrency 3: the reply and a later status show 3, and three
        # trials run at once on the 3-slot worker.
        after = self.ctl.json("update", "--concurrency", "3")
        self.assertEqual(after["concurrency"], 3)
        status = self.ctl.json("status")
        self.assertEqual(status["concurrency"], 3)
        self.assertEqual(status["experiment_id"], "e2e")
        self.assertEqual(status["optimize_mode"], "maximize")
        self.assertEqual(status["endpoints"], self.host.endpoints)
        self.assertRegex(self.ctl.ok("status"), r"concurrency\s+3\n")
        wait_for(lambda: self.ctl.json("stats")["counts"].get("RUNNING", 0) == 3, 60,
                 "three trials running at once")
        self.succeeded(4)

        # trials --status SUCCEEDED lists only succeeded ones, in sequence order.
        listing = self.ctl.json("trials", "--status", "SUCCEEDED")
        trials = listing["trials"]
        self.assertGreaterEqual(len(trials), 4)
        self.assertEqual(listing["total"], len(trials))
        self.assertEqual({t["status"] for t in trials}, {"SUCCEEDED"})
        seqs = [t["sequence_id"] for t in trials]
        self.assertEqual(seqs, sorted(seqs))
        page = self.ctl.json("trials", "--status", "SUCCEEDED", "--offset", "1", "--limit", "2")
        self.assertEqual([t["trial_id"] for t in page["trials"]],
                         [t["trial_id"] for t in trials[1:3]])
        table = self.ctl.ok("trials", "--status", "SUCCEEDED")
        self.assertIn(trials[0]["trial_id"], table)
        self.assertNotIn("RUNNING", table)

        # trial, metrics: the values the trial script reported.
        first = trials[0]
        x = first["parameters"]["x"]
        info = self.ctl.json("trial", first["trial_id"])
        self.assertEqual(info["trial_id"], first["trial_id"])
        self.assertEqual(info["final"], {"default": x, "half": x / 2})
        self.assertEqual(info["intermediate_count"], 1)
        self.assertEqual(info["worker_id"], "w1")
        self.assertLessEqual(info["start_time"], info["end_time"])
        self.assertIn(first["trial_id"], self.ctl.ok("trial", first["trial_id"]))
        metrics = self.ctl.json("metrics", first["trial_id"])["metrics"]
        self.assertEqual([(m["type"], m["sequence"]) for m in metrics],
                         [("PERIODICAL", 0), ("FINAL", 1)])
        self.assertEqual(metrics[0]["value"], x / 2)
        every = self.ctl.json("metrics")["metrics"]
        self.assertGreaterEqual(len(every), 2 * len(trials))

        # stats, and status's best: the largest x among succeeded trials.
        counts = self.ctl.json("stats")["counts"]
        self.assertGreaterEqual(counts["SUCCEEDED"], 4)
        self.assertRegex(self.ctl.ok("stats"), r"SUCCEEDED\s+\d+")
        status = self.ctl.json("status")
        done = self.ctl.json("trials", "--status", "SUCCEEDED")["trials"]
        best = max(done, key=lambda t: (t["final"]["default"], -t["sequence_id"]))
        if status["best"]["trial_id"] != best["trial_id"]:
            # More trials may have ended between the two requests.
            self.assertGreaterEqual(status["best"]["metric"], best["final"]["default"])
        else:
            self.assertEqual(status["best"]["metric"], best["final"]["default"])

        # Error replies exit 1 with the code; usage errors exit 2.
        r = self.ctl.run("trial", "T99999")
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith("tunectl: not_found: "), r.stderr)
        r = self.ctl.run("kill", first["trial_id"])
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith("tunectl: bad_state: "), r.stderr)
        for args in (["update"], ["trials", "--status", "DONE"], ["add", "[1, 2]"],
                     ["add", "{not json"], ["update", "--max-duration", "soon"], ["bogus"]):
            r = self.ctl.run(*args)
            self.assertEqual(r.returncode, 2, "%s: %s" % (args, r.stderr))

    def test_changes_steer_the_live_experiment(self):
        self.start_experiment(concurrency=2)
        events_proc = subprocess.Popen(
            [TUNECTL, "--control", self.host.endpoints["control"], "events", "--count", "3"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(events_proc)
        self.succeeded(2)

        # add: a customized trial that sleeps until it is killed.
        added = self.ctl.json("add", json.dumps({"x": 0.25, "sleep": 120}))
        self.assertRegex(self.ctl.ok("add", '{"x": 0.5}'), r"^added trial T\d+ \(sequence \d+\)")
        sleeper = added["trial_id"]
        self.trial_status(sleeper, {"RUNNING"}, "the added trial to run")
        info = self.ctl.json("trial", sleeper)
        self.assertEqual(info["source"], "customized")
        self.assertEqual(info["parameters"], {"x": 0.25, "sleep": 120})
        # kill of a running trial: it ends USER_CANCELED.
        self.assertEqual(self.ctl.json("kill", sleeper), {})
        self.trial_status(sleeper, {"USER_CANCELED"}, "the killed trial to end")
        self.assertIsNone(self.ctl.json("trial", sleeper)["final"])

        # search-space: the tuner takes a new space (x stays, so trials go on).
        space_file = os.path.join(self.tmp, "space.json")
        with open(space_file, "w", encoding="utf-8") as f:
            json.dump({"x": {"_type": "uniform", "_value": [0.5, 1.0]}}, f)
        self.assertIn("search space updated", self.ctl.ok("search-space", space_file))
        self.assertEqual(self.ctl.json("search-space", space_file), {})

        # export to a file, then import it back.
        export_file = os.path.join(self.tmp, "export.json")
        self.assertIn("record(s) to", self.ctl.ok("export", "--output", export_file))
        with open(export_file, encoding="utf-8") as f:
            records = json.load(f)
        self.assertGreaterEqual(len(records), 2)
        succeeded = {t["trial_id"]: t for t in
                     self.ctl.json("trials", "--status", "SUCCEEDED")["trials"]}
        for rec in records:
            self.assertEqual(list(rec), ["trial_id", "parameters", "value"])
            self.assertIn(rec["trial_id"], succeeded)
            self.assertEqual(rec["value"], succeeded[rec["trial_id"]]["final"])
            self.assertEqual(rec["parameters"], succeeded[rec["trial_id"]]["parameters"])
        again = self.ctl.json("export")["records"]
        for rec in records:
            self.assertIn(rec, again)
        imported = self.ctl.json("import", export_file)
        self.assertIn(imported["imported"], (0, len(records)))  # 0: the tuner does not import
        self.assertRegex(self.ctl.ok("import", export_file),
                         r"^imported \d+ of %d record\(s\)" % len(records))

        # events: the watcher started above printed JSON lines of event.* topics.
        out, err = events_proc.communicate(timeout=60)
        self.assertEqual(events_proc.returncode, 0, err)
        lines = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(len(lines), 3)
        for line in lines:
            self.assertEqual(list(line), ["topic", "type", "id", "body"])
            self.assertEqual(line["topic"], "event." + line["type"])

        # update --max-trials to what exists: the experiment ends DONE.
        created = self.ctl.json("trials")["total"]
        after = self.ctl.json("update", "--max-trials", str(created), "--max-duration", "2h")
        self.assertEqual(after["max_trials"], created)
        self.assertEqual(after["max_duration_s"], 7200.0)
        # Trials may still be created between the count above and the update
        # (the experiment runs on); once it is answered, only ids the tuner
        # was already asked for, at most one per slot (concurrency 2).
        answered = self.ctl.json("trials")["total"]
        wait_for(lambda: self.ctl.json("status")["status"] == "DONE", 60, "the experiment DONE")
        total = self.ctl.json("trials")["total"]
        self.assertGreaterEqual(total, created)
        self.assertLessEqual(total, answered + 2)
        self.assertEqual(self.ctl.json("stats")["counts"].get("RUNNING", 0), 0)
        r = self.ctl.run("update", "--max-trials", "0")
        self.assertEqual(r.returncode, 1)
        self.assertIn("bad_state", r.stderr)

        # stop: the host says ok and exits.
        self.assertIn("stopping", self.ctl.ok("stop"))
        self.assertEqual(self.host.proc.wait(30), 0)

    def test_host_found_through_host_json(self):
        workdir = os.path.join(self.tmp, "experiments")
        os.makedirs(os.path.join(workdir, "abc123"))
        with open(os.path.join(workdir, "abc123", "host.json"), "w", encoding="utf-8") as f:
            json.dump(dict(experiment_id="abc123", pid=self.host.proc.pid, **self.host.endpoints),
                      f)
        target = ["--experiment", "abc123", "--workdir", workdir]
        r = self.ctl.run("ping", "--json", target=target)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["status"], "INITIALIZED")
        r = self.ctl.run("ping", target=["--experiment", "nope", "--workdir", workdir])
        self.assertEqual(r.returncode, 3)
        self.assertIn("nope", r.stderr)


class StoredExperimentTest(unittest.TestCase):
    """tunectl on an experiment no host runs: read from its store, and the
    experiments under a workdir; `tunehost run --workdir`, `view --detach`."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tunectl-stored-")
        self.workdir = os.path.join(self.tmp, "work")
        with open(os.path.join(self.tmp, "trial.py"), "w", encoding="utf-8") as f:
            f.write(TRIAL)
        config = os.path.join(self.tmp, "config.yml")
        with open(config, "w", encoding="utf-8") as f:
            f.write("searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
                    "trialCommand: %s trial.py\n"
                    "trialCodeDirectory: %s\n"
                    "trialConcurrency: 2\nmaxTrialNumber: 4\n"
                    "experimentName: stored-test\n"
                    "experimentWorkingDirectory: %s\n"
                    "tuner: {name: random}\n" % (harness.PYTHON, self.tmp,
                                                 os.path.join(self.tmp, "not-here")))
        r = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR,
                            "--id", "stored1", "--workdir", self.workdir],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout)
        # --workdir wins over the file's experimentWorkingDirectory.
        self.assertTrue(os.path.exists(os.path.join(self.workdir, "stored1", "store.db")))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "not-here")))
        self.ctl = Tunectl(None)
        self.target = ["--workdir", self.workdir, "--experiment", "stored1"]

    def run_ctl(self, *args, target=None):
        return self.ctl.run(*args, timeout_ms=3000,
                            target=self.target if target is None else target)

    def ok_json(self, *args, target=None):
        r = self.run_ctl(*args, "--json", target=target)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_queries_read_the_store(self):
        status = self.ok_json("status")
        self.assertEqual(status["status"], "DONE")  # how it ended, not VIEWED
        self.assertEqual(status["counts"], {"SUCCEEDED": 4})
        self.assertEqual(self.ok_json("ping")["status"], "DONE")
        trials = self.ok_json("trials")
        self.assertEqual(trials["total"], 4)
        metrics = self.ok_json("metrics")["metrics"]
        self.assertEqual(len(metrics), 8)  # a PERIODICAL and a FINAL each
        exported = self.ok_json("export")["records"]
        self.assertEqual(len(exported), 4)
        table = self.run_ctl("status")
        self.assertIn("DONE", table.stdout)
        self.assertNotIn(" ep ", table.stdout)  # nothing is bound

        r = self.run_ctl("export", "--csv")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = list(csv.reader(r.stdout.splitlines()))
        self.assertEqual(rows[0], ["trial_id", "x", "value", "value.half"])
        by_id = {row[0]: row for row in rows[1:]}
        self.assertEqual(len(by_id), 4)
        for record in exported:
            row = by_id[record["trial_id"]]
            self.assertAlmostEqual(float(row[1]), record["parameters"]["x"])
            self.assertAlmostEqual(float(row[2]), record["value"]["default"])
            self.assertAlmostEqual(float(row[3]), record["value"]["half"])

    def test_changes_are_refused_and_nothing_is_written(self):
        store = os.path.join(self.workdir, "stored1", "store.db")
        before = os.stat(store).st_mtime_ns
        for command in (["kill", "T00000"], ["update", "--concurrency", "3"], ["stop"],
                        ["add", '{"x": 0.5}']):
            r = self.run_ctl(*command)
            self.assertEqual(r.returncode, 1, command)
            self.assertIn("is not running (DONE", r.stderr)
            self.assertIn("tunehost resume stored1", r.stderr)
        r = self.run_ctl("events", "--count", "1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("not running", r.stderr)
        r = self.run_ctl("trial", "T99999")
        self.assertEqual(r.returncode, 1)
        self.assertIn("not_found", r.stderr)
        self.assertEqual(os.stat(store).st_mtime_ns, before)
        r = self.ctl.run("status", target=["--workdir", self.workdir, "--experiment", "nope"])
        self.assertEqual(r.returncode, 3)
        self.assertIn("tunectl experiments", r.stderr)
        # A store others may write is not read (as host.json is not trusted then).
        exp_dir = os.path.join(self.workdir, "stored1")
        os.chmod(exp_dir, 0o777)
        try:
            r = self.run_ctl("status")
        finally:
            os.chmod(exp_dir, 0o700)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn(exp_dir, r.stderr)

    def test_experiments_and_the_latest_one(self):
        listed = self.ok_json("experiments", target=["--workdir", self.workdir])["experiments"]
        self.assertEqual([(e["experiment_id"], e["status"], e["trials"], e["running"], e["name"])
                          for e in listed], [("stored1", "DONE", 4, False, "stored-test")])
        # No flags and no host running: the default endpoint, then a hint
        # naming the latest experiment.
        r = self.ctl.run("status", timeout_ms=300, target=["--workdir", self.workdir])
        self.assertEqual(r.returncode, 3)
        self.assertIn("latest experiment in %s is stored1" % self.workdir, r.stderr)

        # A detached view is found without flags and stopped by tunectl.
        r = subprocess.run([harness.TUNEHOST, "view", "stored1", "--workdir", self.workdir,
                            "--detach"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("stored1 is served read-only, detached", r.stdout)
        status = self.ok_json("status", target=["--workdir", self.workdir])
        self.assertEqual(status["status"], "VIEWED")
        listed = self.ok_json("experiments", target=["--workdir", self.workdir])["experiments"]
        self.assertTrue(listed[0]["running"])
        with open(os.path.join(self.workdir, "stored1", "host.json"), encoding="utf-8") as f:
            pid = json.load(f)["pid"]
        r = self.run_ctl("stop", target=["--workdir", self.workdir])
        self.assertEqual(r.returncode, 0, r.stderr)
        wait_for(lambda: not os.path.exists(os.path.join(self.workdir, "stored1", "host.json")),
                 30, "the view to exit")
        wait_for(lambda: process_gone(pid), 30, "the view process to end")
        self.assertEqual(self.ok_json("status")["status"], "DONE")


class LargeRepliesTest(unittest.TestCase):
    """Replies are bounded by the client, not by the host's 1 MiB request
    limit (wire-format.md §4.1): LT of a large experiment is megabytes."""

    def setUp(self):
        self.host = Host()
        self.ctl = Tunectl(self.host.endpoints["control"])

    def tearDown(self):
        self.host.close()

    def test_trials_of_an_experiment_whose_list_is_over_a_mebibyte(self):
        kind, body = self.host.initialize(SPACE, tuner="random", concurrency=1)
        self.assertEqual(kind, "ok", body)
        # No worker: 2600 added trials wait, each with 500 bytes of parameters.
        for i in range(2600):
            kind, body = self.host.request("AD", {"parameters": {"x": i, "pad": "p" * 500}})
            self.assertEqual(kind, "ok", body)
        listed = self.ctl.json("trials")
        self.assertEqual(listed["total"], 2600)
        self.assertEqual(len(listed["trials"]), 2600)
        self.assertEqual(listed["trials"][-1]["parameters"]["x"], 2599)
        self.assertGreater(len(json.dumps(listed)), 1 << 20)
        from tunehost.control import ControlClient
        with ControlClient(self.host.endpoints["control"]) as client:
            self.assertEqual(len(client.list_trials()["trials"]), 2600)


class UnreachableHostTest(unittest.TestCase):
    def test_no_host_exits_3_within_the_timeout(self):
        (port,) = free_ports(1)
        endpoint = "tcp://127.0.0.1:%d" % port
        for command in (["ping"], ["status", "--json"], ["kill", "T00001"], ["events"]):
            begin = time.monotonic()
            r = Tunectl(endpoint).run(*command, timeout_ms=300)
            took = time.monotonic() - begin
            self.assertEqual(r.returncode, 3, command)
            self.assertEqual(r.stderr, "tunectl: no answer from %s within 300 ms (is the host "
                                       "running? Does it want a key? Then give --key and "
                                       "--server-key.)\n" % endpoint)
            self.assertEqual(r.stdout, "")
            self.assertLess(took, 10, "tunectl must not hang")


if __name__ == "__main__":
    unittest.main()
