"""Experiment lifecycle end to end: the store, SIGKILL and resume, re-attach of
running trials across a host restart, and the read-only view. Real tunehost and
tunehost-worker processes, real plugins, real SQLite files (read here with
Python's sqlite3 module)."""
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import tempfile
import textwrap
import time
import unittest

import zmq

import harness
from harness import wait_for
from tunehost import protocol

TERMINAL = {"SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED", "EARLY_STOPPED"}

# A trial that logs each start, reports `steps` PERIODICAL results and a FINAL.
# With `gate` (not "-"), it waits after its first result until that file
# exists; with `after`, it sleeps that long after its FINAL.
TRIAL = """
import json, os, sys, time
p = json.loads(os.environ["TUNEHOST_PARAMETERS"])
with open(os.path.join(sys.argv[1], "starts.log"), "a") as log:
    log.write("%s %s\\n" % (os.environ["TUNEHOST_TRIAL_ID"], os.environ["TUNEHOST_ATTEMPT"]))
out = os.fdopen(int(os.environ["TUNEHOST_METRIC_FD"]), "w", buffering=1)
steps, pause = int(sys.argv[2]), float(sys.argv[3])
gate = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else None
after = float(sys.argv[5]) if len(sys.argv) > 5 else 0
for step in range(steps):
    out.write(json.dumps({"value": p["x"] * (step + 1) / steps}) + "\\n")
    if step == 0 and gate:
        while not os.path.exists(gate):
            time.sleep(0.05)
    time.sleep(pause)
out.write(json.dumps({"type": "FINAL", "value": p["x"]}) + "\\n")
out.flush()
time.sleep(after)
"""


def process_gone(pid):
    """Whether the process has exited: no longer there, or a zombie that its
    new parent (an init that does not reap, in some containers) never waits for."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(text))
    return path


class Experiment:
    """One experiment directory, driven through `tunehost run/resume/view`."""

    def __init__(self, test, trials, concurrency, steps, pause, gate=None, exp_id="life",
                 after=0.0):
        self.test = test
        self.tmp = tempfile.mkdtemp(prefix="tunehost-life-")
        self.workdir = os.path.join(self.tmp, "wd")
        self.id = exp_id
        self.dir = os.path.join(self.workdir, exp_id)
        self.store_path = os.path.join(self.dir, "store.db")
        self.starts = os.path.join(self.tmp, "starts.log")
        write(os.path.join(self.tmp, "trial.py"), TRIAL)
        args = "%s %d %s %s %s" % (self.tmp, steps, pause, gate or "-", after)
        self.config = write(os.path.join(self.tmp, "experiment.yaml"), """
            experimentName: lifecycle
            searchSpace:
              x: {_type: uniform, _value: [0, 1]}
            trialCommand: %s trial.py %s
            trialCodeDirectory: %s
            experimentWorkingDirectory: %s
            trialConcurrency: %d
            maxTrialNumber: %d
            tuner: {name: random, classArgs: {seed: 5, optimize_mode: maximize}}
            tunehost: {heartbeatIntervalMs: 200, ackTimeoutMs: 1000}
            """ % (harness.PYTHON, args, self.tmp, self.workdir, concurrency, trials))
        self.summary = os.path.join(self.tmp, "summary.json")
        self.proc = None

    def start(self, command, *extra):
        if command == "run":
            args = [harness.TUNEHOST, "run", self.config, "--id", self.id]
        else:
            args = [harness.TUNEHOST, command, self.id, "--workdir", self.workdir]
        if command != "view":
            args += ["--plugins", harness.PLUGIN_DIR, "--summary-json", self.summary]
        args += list(extra)
        self.log = open(os.path.join(self.tmp, "host-%d.log" % time.monotonic_ns()), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        return self.proc

    def host_file(self):
        """host.json once the current process wrote it."""
        return harness.host_file(self.dir, self.proc.pid)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.wait(10)

    def wait(self, timeout=120):
        try:
            return self.proc.wait(timeout)
        finally:
            self.log.close()

    def output(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def db(self):
        return sqlite3.connect("file:%s?mode=ro" % self.store_path, uri=True)

    def start_lines(self):
        if not os.path.exists(self.starts):
            return []
        with open(self.starts) as f:
            return [tuple(line.split()) for line in f if line.strip()]


class AckWatcher:
    """Subscribes to every worker topic of a host's events socket and records
    each MetricAck (trial, attempt, sequence) the host sent."""

    def __init__(self, endpoint):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"worker.")
        self.sub.connect(endpoint)
        self.acks = set()

    def drain(self, timeout_ms=0):
        while self.sub.poll(timeout_ms):
            timeout_ms = 0
            _, payload = self.sub.recv_multipart()
            m = protocol.decode(payload)
            if m.type == "MA":
                self.acks.add((m.body["trial_id"], m.body["attempt"], m.body["sequence"]))
        return self.acks

    def close(self):
        self.sub.close()
        self.ctx.term()


class StoreAndResumeTest(unittest.TestCase):
    def check_store(self, exp, acks):
        """The store is consistent and holds every acknowledged metric."""
        with exp.db() as db:
            self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            trials = {row[0]: row for row in db.execute(
                "SELECT trial_id, state, status, attempt, sequence_id FROM trials")}
            metrics = set(db.execute("SELECT trial_id, sequence FROM metrics"))
            orphans = db.execute(
                "SELECT COUNT(*) FROM metrics WHERE trial_id NOT IN (SELECT trial_id FROM trials)"
            ).fetchone()[0]
            attempts = {}
            for trial_id, attempt in db.execute(
                    "SELECT trial_id, attempt FROM trial_events WHERE event IN "
                    "('started', 'reattached')"):
                attempts.setdefault(trial_id, set()).add(attempt)
        self.assertEqual(orphans, 0)
        for trial_id, state, status, attempt, seq in trials.values():
            self.assertIn(state, ("WAITING", "OFFERED", "RUNNING", "ENDED"))
            self.assertEqual(state == "ENDED", status in TERMINAL, (trial_id, state, status))
        lost = []
        for trial_id, attempt, sequence in acks:
            # The host acknowledges and drops results of an attempt it has
            # superseded (wire format §5.3: the trial runs again as a new
            # attempt) and of attempts that never ran here; every ack of the
            # trial's current attempt must have its metric on disk.
            current = trials[trial_id][3] if trial_id in trials else None
            if (attempt == current and attempt in attempts.get(trial_id, ()) and
                    (trial_id, sequence) not in metrics):
                lost.append((trial_id, attempt, sequence))
        self.assertEqual(lost, [], "acknowledged metrics missing from the store")
        return trials

    def test_sigkill_then_resume_loses_nothing_and_reruns_nothing(self):
        exp = Experiment(self, trials=14, concurrency=3, steps=25, pause=0.01)
        acks = set()
        ended_at_kills = []  # (trials ended, lines in starts.log) at each kill
        command = "run"
        for round_ in range(5):
            exp.start(command, *(["--reattach-grace-ms", "300"] if command == "resume" else []))
            watcher = AckWatcher(exp.host_file()["events"])
            try:
                # Kill in the middle of a busy stretch: after some metrics of
                # this life were acknowledged.
                target = len(watcher.drain()) + 15 + 10 * round_
                wait_for(lambda: len(watcher.drain(50)) >= target or exp.proc.poll() is not None,
                         60, "acknowledged metrics")
                exp.kill()
                acks |= watcher.drain(100)
            finally:
                watcher.close()
            trials = self.check_store(exp, acks)
            ended = {t for t, row in trials.items() if row[1] == "ENDED"}
            ended_at_kills.append((ended, len(exp.start_lines())))
            command = "resume"

        exp.start("resume", "--reattach-grace-ms", "300")
        self.assertEqual(exp.wait(180), 0, exp.output())
        with open(exp.summary) as f:
            summary = json.load(f)
        self.assertEqual(summary["status"], "DONE")
        trials = summary["trials"]
        self.assertEqual(len(trials), 14)
        self.assertEqual(sorted(t["sequence_id"] for t in trials), list(range(14)))
        self.assertEqual(len({t["trial_id"] for t in trials}), 14)
        for t in trials:
            self.assertEqual(t["status"], "SUCCEEDED", t)
            self.assertIsNotNone(t["final_metric"], t)
        self.check_store(exp, acks)
        with exp.db() as db:
            self.assertEqual(db.execute("SELECT COUNT(*) FROM trials").fetchone()[0], 14)
            finals = db.execute("SELECT COUNT(*) FROM metrics WHERE type = 'FINAL'").fetchone()[0]
            self.assertEqual(finals, 14)
            status = db.execute("SELECT value FROM meta WHERE key = 'status'").fetchone()[0]
            self.assertEqual(status, "DONE")
        lines = exp.start_lines()
        for ended, position in ended_at_kills:
            rerun = [line for line in lines[position:] if line[0] in ended]
            self.assertEqual(rerun, [], "a trial that had ended ran again")

    def test_running_trial_reattaches_across_host_restart(self):
        tmp_gate = tempfile.mktemp(prefix="tunehost-gate-")
        exp = Experiment(self, trials=2, concurrency=1, steps=3, pause=0.05, gate=tmp_gate,
                         exp_id="reattach")
        exp.start("run", "--local-workers", "0")
        endpoints = exp.host_file()
        worker = subprocess.Popen(
            [harness.WORKER, "--command", "%s trial.py %s 3 0.05 %s" % (
                harness.PYTHON, exp.tmp, tmp_gate),
             "--cwd", exp.tmp, "--workdir", exp.workdir, "--id", "survivor",
             "--heartbeat-ms", "200", "--ack-timeout-ms", "200",
             "--jobs", endpoints["jobs"], "--results", endpoints["results"],
             "--events", endpoints["events"]],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def first_metric_stored():
                with exp.db() as db:
                    return db.execute("SELECT COUNT(*) FROM metrics WHERE trial_id = 'T00000'"
                                      ).fetchone()[0] > 0
            wait_for(first_metric_stored, 60, "the first trial's first metric in the store")
            exp.kill()
            # The worker and its trial outlive the host; a new host on the
            # same endpoints gets the trial back instead of running it again.
            exp.start("resume", "--local-workers", "0", "--reattach-grace-ms", "60000")
            exp.host_file()
            with open(tmp_gate, "w"):
                pass
            self.assertEqual(exp.wait(120), 0, exp.output())
        finally:
            harness.stop(worker)
            if os.path.exists(tmp_gate):
                os.unlink(tmp_gate)
        self.assertEqual(exp.start_lines(), [("T00000", "0"), ("T00001", "0")])
        with exp.db() as db:
            events = [row[0] for row in db.execute(
                "SELECT event FROM trial_events WHERE trial_id = 'T00000' ORDER BY id")]
            status, attempt = db.execute(
                "SELECT status, attempt FROM trials WHERE trial_id = 'T00000'").fetchone()
        self.assertEqual(events, ["created", "started", "reattached", "ended"])
        self.assertEqual((status, attempt), ("SUCCEEDED", 0))
        with open(exp.summary) as f:
            summary = json.load(f)
        self.assertEqual([t["status"] for t in summary["trials"]], ["SUCCEEDED"] * 2)

        # The finished experiment, read-only.
        view = subprocess.run([harness.TUNEHOST, "view", exp.id, "--workdir", exp.workdir,
                               "--once"], capture_output=True, text=True, timeout=30)
        self.assertEqual(view.returncode, 0, view.stderr)
        self.assertIn("DONE", view.stdout)
        self.assertIn("2 trial(s) ended, SUCCEEDED 2", view.stdout)
        exp.start("view")
        endpoints = exp.host_file()
        ctx = zmq.Context()
        control = ctx.socket(zmq.DEALER)
        control.setsockopt(zmq.LINGER, 0)
        control.connect(endpoints["control"])

        def request(type_code, body, msg_id):
            control.send(protocol.encode(type_code, body, msg_id))
            self.assertTrue(control.poll(10000), "no reply to " + type_code)
            return protocol.decode(control.recv())
        try:
            reply = request("PI", {}, 1)
            self.assertEqual(reply.type, "ok")
            self.assertEqual(reply.body["data"]["status"], "VIEWED")
            reply = request("AD", {"parameters": {"x": 0.5}}, 2)
            self.assertEqual(reply.type, "error")
            self.assertEqual(reply.body["code"], "bad_state")
            self.assertEqual(request("TE", {}, 3).type, "ok")
            self.assertEqual(exp.wait(30), 0)
        finally:
            control.close()
            ctx.term()

    def test_local_workers_outlive_a_killed_host_and_reattach(self):
        gate = tempfile.mktemp(prefix="tunehost-gate-")
        exp = Experiment(self, trials=3, concurrency=2, steps=2, pause=0.05, gate=gate,
                         exp_id="orphans")
        exp.start("run")
        exp.host_file()
        wait_for(lambda: len(exp.start_lines()) >= 2, 60, "two trials to start")
        old_pid = exp.proc.pid
        exp.kill()
        try:
            exp.start("resume", "--reattach-grace-ms", "60000")
            exp.host_file()

            def reattached():
                with exp.db() as db:
                    return db.execute("SELECT COUNT(*) FROM trial_events WHERE "
                                      "event = 'reattached'").fetchone()[0] >= 2
            wait_for(reattached, 60, "both running trials to re-attach")
        finally:
            with open(gate, "w"):
                pass
        self.assertEqual(exp.wait(120), 0, exp.output())
        os.unlink(gate)
        starts = sorted(exp.start_lines())
        # The two re-attached trials were not run again; the third ran once
        # (a new attempt only if an offer of it went unanswered, e.g. on a
        # loaded machine: that attempt never started).
        self.assertEqual([trial for trial, _ in starts], ["T00000", "T00001", "T00002"],
                         "every trial ran exactly once: %s" % starts)
        self.assertEqual(starts[:2], [("T00000", "0"), ("T00001", "0")])
        with open(exp.summary) as f:
            self.assertEqual([t["status"] for t in json.load(f)["trials"]],
                             ["SUCCEEDED"] * 3)
        # The orphaned workers of the killed host exit once their trials are done.
        def orphans_gone():
            out = subprocess.run(["pgrep", "-f", "--", "--id local-%d-" % old_pid],
                                 capture_output=True, text=True)
            return out.returncode == 1
        wait_for(orphans_gone, 30, "the killed host's workers to exit")

    def test_a_trial_that_finishes_while_no_host_runs_is_not_run_again(self):
        exp = Experiment(self, trials=2, concurrency=1, steps=1, pause=0, after=1.5,
                         exp_id="finished")
        exp.start("run")
        exp.host_file()

        def final_stored():
            with exp.db() as db:
                return db.execute("SELECT COUNT(*) FROM metrics WHERE trial_id = 'T00000' "
                                  "AND type = 'FINAL'").fetchone()[0] == 1
        wait_for(final_stored, 60, "the first trial's FINAL in the store")
        exp.kill()
        # The trial exits (and its worker reports the end) while no host runs.
        wait_for(lambda: os.path.exists(os.path.join(exp.dir, "trials", "T00000-0",
                                                     "stdout.log")), 10, "trial dir")
        time.sleep(2.0)  # not a synchronization: the outage must outlast the trial
        exp.start("resume", "--reattach-grace-ms", "3000")
        self.assertEqual(exp.wait(120), 0, exp.output())
        # Its FINAL reached the store before the kill, its end did not: the
        # tuner still gets the result, replayed, or in its checkpoint when one
        # was taken after the result.
        self.assertRegex(exp.output(), r"resumed: \d+ trial\(s\) in the store, (1 result\(s\) "
                         r"replayed to the tuner\n|0 result\(s\) replayed to the tuner after "
                         r"its checkpoint)")
        self.assertEqual([line[0] for line in exp.start_lines()], ["T00000", "T00001"])
        with open(exp.summary) as f:
            trials = {t["trial_id"]: t for t in json.load(f)["trials"]}
        self.assertEqual(trials["T00000"]["status"], "SUCCEEDED")
        self.assertEqual(len(trials), 2)

    def test_imported_results_survive_a_kill(self):
        exp = Experiment(self, trials=5, concurrency=1, steps=1, pause=0, exp_id="imported")

        def request(endpoint, type_code, body):
            ctx = zmq.Context()
            control = ctx.socket(zmq.DEALER)
            control.setsockopt(zmq.LINGER, 0)
            control.connect(endpoint)
            try:
                control.send(protocol.encode(type_code, body, 1))
                self.assertTrue(control.poll(10000), "no reply to " + type_code)
                return protocol.decode(control.recv())
            finally:
                control.close()
                ctx.term()
        exp.start("run", "--local-workers", "0")
        records = [{"parameters": {"x": x}, "value": x} for x in (0.1, 0.2, 0.3)]
        reply = request(exp.host_file()["control"], "FD", {"data": records})
        self.assertEqual(reply.type, "ok", reply.body)
        self.assertEqual(reply.body["data"]["imported"], 3)
        exp.kill()
        exp.start("resume", "--local-workers", "0")
        endpoint = exp.host_file()["control"]
        self.assertEqual(request(endpoint, "TE", {}).type, "ok")
        exp.wait(60)
        # The tuner has the three results again: replayed, or inside the
        # checkpoint taken right after the import.
        self.assertRegex(exp.output(), r"in the store, (3 result\(s\) replayed to the tuner\n|"
                         r"0 result\(s\) replayed to the tuner after its checkpoint)")
        with exp.db() as db:
            self.assertEqual(db.execute("SELECT COUNT(*) FROM imports").fetchone()[0], 1)

    def test_one_host_per_experiment(self):
        exp = Experiment(self, trials=1, concurrency=1, steps=1, pause=0, exp_id="locked")
        exp.start("run")
        self.assertEqual(exp.wait(60), 0, exp.output())
        with open(os.path.join(exp.dir, "lock"), "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            other = subprocess.run([harness.TUNEHOST, "resume", exp.id, "--workdir",
                                    exp.workdir, "--plugins", harness.PLUGIN_DIR],
                                   capture_output=True, text=True, timeout=30)
        self.assertEqual(other.returncode, 2, other.stdout + other.stderr)
        self.assertIn("in use by another tunehost process", other.stderr)

    def test_an_orphaned_worker_without_trials_exits(self):
        # The worker's parent (a shell) exits at once; no host ever answers.
        # The shell names itself (--host-pid $$): a worker slow to start (a
        # sanitizer build on a busy machine) may look for its parent only
        # after the shell has gone.
        jobs, results, events = harness.free_ports(3)
        script = ("%s --command true --jobs tcp://127.0.0.1:%d --results tcp://127.0.0.1:%d "
                  "--events tcp://127.0.0.1:%d --heartbeat-ms 100 --orphan-timeout-ms 60000 "
                  "--host-pid $$ >/dev/null 2>&1 & echo $!; sleep 0.5") % (
                      harness.WORKER, jobs, results, events)
        out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                             timeout=30)
        pid = int(out.stdout.split()[0])
        wait_for(lambda: process_gone(pid), 20, "the orphaned worker to exit")


class ExperimentCommandsTest(unittest.TestCase):
    """resume, --detach, deduplication, a raised concurrency and the errors of
    `tunehost run`, each on a real host with its store."""

    def test_stopped_experiment_resumes_its_cancelled_trials(self):
        exp = Experiment(self, trials=4, concurrency=2, steps=200, pause=0.01, exp_id="stopped")
        exp.start("run")
        exp.host_file()
        wait_for(lambda: len(exp.start_lines()) >= 2, 60, "two trials to start")
        exp.proc.send_signal(signal.SIGTERM)
        self.assertEqual(exp.wait(60), 1, exp.output())  # STOPPED is not DONE
        with exp.db() as db:
            cancelled = {row[0] for row in db.execute(
                "SELECT trial_id FROM trials WHERE status = 'USER_CANCELED'")}
            self.assertEqual(db.execute("SELECT value FROM meta WHERE key = 'status'"
                                        ).fetchone()[0], "STOPPED")
        self.assertTrue(cancelled)
        exp.start("resume")
        self.assertEqual(exp.wait(180), 0, exp.output())
        # The tuner came back from the checkpoint it saved when it stopped.
        self.assertIn("result(s) replayed to the tuner after its checkpoint", exp.output())
        with open(exp.summary) as f:
            trials = {t["trial_id"]: t for t in json.load(f)["trials"]}
        self.assertEqual(len(trials), 4)
        for trial_id in cancelled:
            self.assertEqual(trials[trial_id]["status"], "SUCCEEDED")
        with exp.db() as db:
            rows = dict(db.execute("SELECT trial_id, source FROM trials"))
        for trial_id in cancelled:
            self.assertEqual(rows[trial_id], "resumed")
        reruns = [line for line in exp.start_lines() if line[0] in cancelled and line[1] != "0"]
        self.assertEqual(len(reruns), len(cancelled))

    def test_detached_run_returns_while_the_experiment_goes_on(self):
        exp = Experiment(self, trials=3, concurrency=1, steps=2, pause=0.3, exp_id="detached")
        proc = subprocess.run([harness.TUNEHOST, "run", exp.config, "--id", exp.id,
                               "--plugins", harness.PLUGIN_DIR, "--detach"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("runs detached", proc.stdout)
        with open(os.path.join(exp.dir, "host.json")) as f:
            pid = json.load(f)["pid"]
        self.assertIn("(pid %d)" % pid, proc.stdout)
        self.assertFalse(process_gone(pid), "still running after the command returned")
        wait_for(lambda: process_gone(pid), 120, "the detached host to finish")
        self.assertFalse(os.path.exists(os.path.join(exp.dir, "host.json")))
        with exp.db() as db:
            self.assertEqual(db.execute("SELECT value FROM meta WHERE key = 'status'"
                                        ).fetchone()[0], "DONE")
            self.assertEqual(db.execute("SELECT COUNT(*) FROM trials WHERE status = 'SUCCEEDED'"
                                        ).fetchone()[0], 3)
        with open(os.path.join(exp.dir, "host.log")) as f:
            self.assertIn("experiment detached DONE", f.read())

    def test_deduplication_answers_a_repeated_configuration_without_running_it(self):
        exp = Experiment(self, trials=4, concurrency=1, steps=1, pause=0.2, exp_id="dedup")
        with open(exp.config) as f:
            text = f.read().replace("tunehost: {", "tunehost: {deduplicate: true, ")
        with open(exp.config, "w") as f:
            f.write(text)
        exp.start("run")
        ctx = zmq.Context()
        control = ctx.socket(zmq.DEALER)
        control.setsockopt(zmq.LINGER, 0)
        control.connect(exp.host_file()["control"])

        def add(msg_id):
            control.send(protocol.encode("AD", {"parameters": {"x": 0.125}}, msg_id))
            self.assertTrue(control.poll(10000), "no reply to AD")
            reply = protocol.decode(control.recv())
            self.assertEqual(reply.type, "ok", reply.body)
            return reply.body["data"]["trial_id"]

        def status_of(trial_id):
            with exp.db() as db:
                row = db.execute("SELECT status FROM trials WHERE trial_id = ?",
                                 (trial_id,)).fetchone()
            return row[0] if row else None
        try:
            first = add(1)
            wait_for(lambda: status_of(first) == "SUCCEEDED", 60, "the first x=0.125 trial")
            second = add(2)
            self.assertEqual(exp.wait(120), 0, exp.output())
        finally:
            control.close()
            ctx.term()
        with open(exp.summary) as f:
            trials = {t["trial_id"]: t for t in json.load(f)["trials"]}
        self.assertEqual(len(trials), 4)
        self.assertEqual(trials[second]["status"], "SUCCEEDED")
        self.assertEqual(trials[second]["final_metric"], 0.125)
        started = [line[0] for line in exp.start_lines()]
        self.assertIn(first, started)
        self.assertNotIn(second, started, "the repeated configuration ran again")
        self.assertEqual(len(started), 3)
        with exp.db() as db:
            answered = [row[0] for row in db.execute(
                "SELECT trial_id FROM trial_events WHERE event = 'answered'")]
            final = db.execute("SELECT COUNT(*) FROM metrics WHERE trial_id = ? AND "
                               "type = 'FINAL'", (second,)).fetchone()[0]
        self.assertEqual(answered, [second])
        self.assertEqual(final, 1)

    def test_raised_concurrency_gets_local_workers(self):
        gate = tempfile.mktemp(prefix="tunehost-gate-")
        exp = Experiment(self, trials=4, concurrency=1, steps=1, pause=0, gate=gate,
                         exp_id="grow")
        exp.start("run")
        ctx = zmq.Context()
        control = ctx.socket(zmq.DEALER)
        control.setsockopt(zmq.LINGER, 0)
        control.connect(exp.host_file()["control"])
        try:
            wait_for(lambda: len(exp.start_lines()) == 1, 60, "the first trial to start")
            control.send(protocol.encode("UX", {"concurrency": 3}, 1))
            self.assertTrue(control.poll(10000), "no reply to UX")
            reply = protocol.decode(control.recv())
            self.assertEqual(reply.type, "ok", reply.body)
            self.assertEqual(reply.body["data"]["concurrency"], 3)
            # Three trials run at once while the gate holds them: two workers
            # were added for the two new slots.
            wait_for(lambda: len(exp.start_lines()) == 3, 60, "three trials running at once")
        finally:
            with open(gate, "w"):
                pass
            control.close()
            ctx.term()
        self.assertEqual(exp.wait(120), 0, exp.output())
        os.unlink(gate)
        self.assertIn("added (pid", exp.output())
        with exp.db() as db:
            self.assertEqual(db.execute("SELECT value FROM meta WHERE key = 'concurrency'"
                                        ).fetchone()[0], 3.0)

    def test_errors_name_the_problem(self):
        exp = Experiment(self, trials=1, concurrency=1, steps=1, pause=0, exp_id="once")
        exp.start("run")
        self.assertEqual(exp.wait(60), 0, exp.output())
        again = subprocess.run([harness.TUNEHOST, "run", exp.config, "--id", exp.id,
                                "--plugins", harness.PLUGIN_DIR],
                               capture_output=True, text=True, timeout=30)
        self.assertEqual(again.returncode, 2)
        self.assertIn("already exists", again.stderr)
        self.assertIn("tunehost resume once", again.stderr)
        missing = subprocess.run([harness.TUNEHOST, "resume", "nosuch", "--workdir",
                                  exp.workdir], capture_output=True, text=True, timeout=30)
        self.assertEqual(missing.returncode, 2)
        self.assertIn("no store at", missing.stderr)
        bad = subprocess.run([harness.TUNEHOST, "view", "../etc", "--workdir", exp.workdir],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("not an experiment id", bad.stderr)


if __name__ == "__main__":
    unittest.main()
