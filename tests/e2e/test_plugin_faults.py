"""Plugins cannot take the host down (DESIGN.md trust model): a real `tunehost
run` with fixture plugins that hang, fail or crash, and what the user sees
(exit status, summary, ER events in the store) and what the store holds.

Fixture plugins come from TUNEHOST_TEST_PLUGIN_DIR (tests/plugins/fixtures).
"""
import json
import os
import signal
import sqlite3
import subprocess
import tempfile
import textwrap
import time
import unittest

import msgpack
import zmq

import harness
from harness import wait_for
from tunehost import protocol

TEST_PLUGIN_DIR = os.environ.get("TUNEHOST_TEST_PLUGIN_DIR", "build/test-plugins")
TUNECTL = os.path.join(harness.BIN_DIR, "tunectl")


class Run:
    """`tunehost run` of a small experiment whose tuner is a fixture plugin."""

    def __init__(self, tuner, class_args, max_trials=4, tunehost_options=None, exp_id="faults",
                 trial_command="true", assessor=None, plugin_dir=TEST_PLUGIN_DIR,
                 tuner_options=None, concurrency=1):
        self.tmp = tempfile.mkdtemp(prefix="tunehost-faults-")
        self.workdir = os.path.join(self.tmp, "wd")
        self.id = exp_id
        self.dir = os.path.join(self.workdir, exp_id)
        self.summary = os.path.join(self.tmp, "summary.json")
        self.plugin_dir = plugin_dir
        options = {"heartbeatIntervalMs": 200, "ackTimeoutMs": 1000}
        options.update(tunehost_options or {})
        config = {
            "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
            "trialCommand": trial_command,
            "trialCodeDirectory": self.tmp,
            "experimentWorkingDirectory": self.workdir,
            "trialConcurrency": concurrency,
            "maxTrialNumber": max_trials,
            "tuner": dict({"name": tuner, "classArgs": class_args}, **(tuner_options or {})),
            "tunehost": options,
        }
        if assessor:
            config["assessor"] = assessor
        self.config = os.path.join(self.tmp, "experiment.yaml")
        with open(self.config, "w") as f:
            json.dump(config, f)  # JSON is YAML
        self.log_path = os.path.join(self.tmp, "host.log")
        self.proc = None

    def start(self, *extra):
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [harness.TUNEHOST, "run", self.config, "--id", self.id, "--plugins", self.plugin_dir,
             "--summary-json", self.summary] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        return self.proc

    def resume(self):
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [harness.TUNEHOST, "resume", self.id, "--workdir", self.workdir, "--plugins",
             self.plugin_dir, "--summary-json", self.summary, "--reattach-grace-ms", "500"],
            stdout=self.log, stderr=subprocess.STDOUT)
        return self.proc

    def tuner_record(self):
        """The fixture-faulty tuner's record, from its last stored checkpoint."""
        with self.db() as db:
            row = db.execute("SELECT state FROM checkpoints WHERE kind = 'tuner'").fetchone()
        return row[0].decode().splitlines() if row else []

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        finally:
            self.log.close()

    def output(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def db(self):
        return sqlite3.connect("file:%s?mode=ro" % os.path.join(self.dir, "store.db"), uri=True)

    def stored_events(self, type_code):
        with self.db() as db:
            rows = db.execute("SELECT body FROM events WHERE type = ?", (type_code,)).fetchall()
        return [msgpack.unpackb(row[0], raw=False)["body"] for row in rows]

    def meta(self, key):
        with self.db() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def summary_json(self):
        with open(self.summary) as f:
            return json.load(f)


class WatchdogTest(unittest.TestCase):
    def test_a_hung_in_process_tuner_fails_the_experiment_and_the_host_exits(self):
        run = Run("fixture-slow", {"sleep_ms": 3600 * 1000},
                  tunehost_options={"pluginCallTimeoutMs": 1500})
        start = time.monotonic()
        run.start()
        code = run.wait(60)
        took = time.monotonic() - start
        self.assertEqual(code, 1, run.output())
        self.assertLess(took, 30, "the host took %.1f s to give up" % took)
        errors = run.stored_events("ER")
        timeouts = [e for e in errors if e["code"] == "plugin_timeout"]
        self.assertEqual(len(timeouts), 1, errors)
        self.assertEqual(timeouts[0]["source"], "tuner:fixture-slow")
        self.assertIn("generate has not returned after", timeouts[0]["message"])
        self.assertEqual(run.meta("status"), "ERROR")
        self.assertIn("generate has not returned", run.meta("error"))
        summary = run.summary_json()
        self.assertEqual(summary["status"], "ERROR")
        self.assertIn("a plugin call never returned", run.output())

    def test_sigterm_ends_the_host_within_bounds_while_a_plugin_hangs(self):
        run = Run("fixture-slow", {"sleep_ms": 3600 * 1000})  # default limit: 10 min
        run.start()
        wait_for(lambda: os.path.exists(os.path.join(run.dir, "host.json")), 30, "the host")
        wait_for(lambda: "generate: sleeping" in run.output(), 30, "the tuner inside generate")
        start = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        code = run.wait(30)
        took = time.monotonic() - start
        self.assertLess(took, 15, "stop took %.1f s" % took)
        self.assertEqual(code, 1, run.output())
        self.assertEqual(run.meta("status"), "STOPPED")

    def test_te_ends_the_host_within_bounds_while_a_plugin_hangs(self):
        run = Run("fixture-slow", {"sleep_ms": 3600 * 1000})
        run.start()
        wait_for(lambda: os.path.exists(os.path.join(run.dir, "host.json")), 30, "the host")
        wait_for(lambda: "generate: sleeping" in run.output(), 30, "the tuner inside generate")
        start = time.monotonic()
        ctl = subprocess.run([TUNECTL, "--experiment", run.id, "--workdir", run.workdir, "stop"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(ctl.returncode, 0, ctl.stdout + ctl.stderr)
        run.wait(30)
        took = time.monotonic() - start
        self.assertLess(took, 15, "stop took %.1f s" % took)
        self.assertEqual(run.meta("status"), "STOPPED")

    def test_a_trial_end_is_stored_while_the_tuner_is_slow(self):
        # While the tuner is asked for a trial, the loop turn's commit waits
        # for its answer at most 1 ms (wire-format.md §5.3): the first
        # trial's end is in the store long before a 4 s generate returns.
        run = Run("fixture-slow", {"sleep_ms": 4000}, max_trials=2)
        run.start()

        def ended():
            try:
                with run.db() as db:
                    return db.execute("SELECT COUNT(*) FROM trials WHERE status IS NOT NULL"
                                      ).fetchone()[0] == 1
            except sqlite3.Error:
                return False
        wait_for(lambda: run.output().count("generate: sleeping") == 2, 30,
                 "the tuner asked for the second trial")
        asked = time.monotonic()
        wait_for(ended, 3, "the first trial's end in the store while the tuner sleeps")
        self.assertLess(time.monotonic() - asked, 3.5)
        self.assertEqual(run.wait(60), 0, run.output())
        self.assertEqual(run.summary_json()["status"], "DONE")

    def test_requests_waiting_for_a_hung_tuner_are_answered(self):
        # Every request gets exactly one reply (wire-format.md §4): those
        # queued behind a call that never returns get plugin_error from the
        # watchdog instead of hanging their client.
        run = Run("fixture-slow", {"sleep_ms": 3600 * 1000},
                  tunehost_options={"pluginCallTimeoutMs": 3000})
        run.start()
        wait_for(lambda: os.path.exists(os.path.join(run.dir, "host.json")), 30, "the host")
        wait_for(lambda: "generate: sleeping" in run.output(), 30, "the tuner inside generate")
        space = os.path.join(run.tmp, "space.json")
        with open(space, "w") as f:
            json.dump({"x": {"_type": "uniform", "_value": [0, 2]}}, f)
        records = os.path.join(run.tmp, "import.json")
        with open(records, "w") as f:
            json.dump([{"parameters": {"x": 0.5}, "value": 1.0}], f)
        base = [TUNECTL, "--experiment", run.id, "--workdir", run.workdir, "--timeout-ms", "30000"]
        clients = [subprocess.Popen(base + command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
                   for command in (["search-space", space], ["import", records])]
        for client in clients:
            out, err = client.communicate(timeout=60)
            self.assertEqual(client.returncode, 1, out + err)
            self.assertIn("plugin_error", err)
            self.assertIn("has not returned after", err)
        self.assertEqual(run.wait(60), 1, run.output())
        self.assertEqual(run.meta("status"), "ERROR")

    def test_requests_for_a_busy_tuner_are_bounded_and_each_gets_one_reply(self):
        run = Run("fixture-slow", {"sleep_ms": 3600 * 1000})
        run.start()
        wait_for(lambda: os.path.exists(os.path.join(run.dir, "host.json")), 30, "the host")
        wait_for(lambda: "generate: sleeping" in run.output(), 30, "the tuner inside generate")
        with open(os.path.join(run.dir, "host.json")) as f:
            control = json.load(f)["control"]
        ctx = zmq.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(control)
        replies = {}

        def collect(timeout_ms):
            while dealer.poll(timeout_ms):
                reply = protocol.decode(dealer.recv())
                self.assertNotIn(reply.id, replies, "two replies to one request")
                replies[reply.id] = reply
        try:
            space = {"x": {"_type": "uniform", "_value": [0, 2]}}
            for i in range(1, 71):
                dealer.send(protocol.encode("SS", {"search_space": space}, i))
            wait_for(lambda: collect(100) or len(replies) >= 6, 20, "the refusals")
            self.assertEqual(sorted(replies), list(range(65, 71)), "64 may wait for the tuner")
            self.assertEqual({r.body["code"] for r in replies.values()}, {"unavailable"})
            run.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: collect(100) or len(replies) == 70, 30, "a reply to every request")
            waited = [replies[i].body for i in range(1, 65)]
            self.assertEqual({b["code"] for b in waited}, {"bad_state"}, waited[0])
            self.assertIn("stopped before the tuner answered", waited[0]["message"])
        finally:
            dealer.close()
            ctx.term()
        run.wait(30)

    def test_a_hung_in_process_assessor_is_left_behind_and_trials_finish(self):
        run = Run("fixture-faulty", {"fault": "none"}, max_trials=TRIALS,
                  trial_command=CURVE_TRIAL, tunehost_options={"pluginCallTimeoutMs": 1500},
                  assessor={"name": "fixture-faulty-assessor",
                            "classArgs": {"fault": "hang", "call": "assess_trial"}})
        start = time.monotonic()
        run.start()
        self.assertEqual(run.wait(120), 0, run.output())
        self.assertLess(time.monotonic() - start, 60)
        summary = run.summary_json()
        self.assertEqual(summary["status"], "DONE")
        self.assertEqual([t["status"] for t in summary["trials"]], ["SUCCEEDED"] * TRIALS)
        timeouts = [e for e in run.stored_events("ER") if e["code"] == "plugin_timeout"]
        self.assertEqual(len(timeouts), 1, timeouts)  # 6 trials of 0.6 s: it fires mid-run
        self.assertEqual(timeouts[0]["source"], "assessor:fixture-faulty-assessor")
        self.assertIn("assess_trial has not returned after", timeouts[0]["message"])

# A trial that reports three intermediate results, 0.2 s apart, and a FINAL.
CURVE_TRIAL = ("for v in 0.1 0.2 0.3; do echo \"{\\\"value\\\": $v}\" >&$TUNEHOST_METRIC_FD; "
               "sleep 0.2; done; "
               "echo '{\"type\": \"FINAL\", \"value\": 0.5}' >&$TUNEHOST_METRIC_FD")

# A trial that reports one FINAL result.
FINAL_TRIAL = "echo '{\"type\": \"FINAL\", \"value\": 0.5}' >&$TUNEHOST_METRIC_FD"
TRIALS = 6


class FaultMatrixTest(unittest.TestCase):
    """Every fault of the fixture-faulty tuner, in-process and in a runner
    process (isolation: process): what the user sees (exit status, ER events,
    the summary) and what the store holds."""

    def run_fault(self, fault, call, isolated, every=False, after=2, extra=None,
                  memory_limit_mb=None, timeout_ms=None):
        tmp = tempfile.mkdtemp(prefix="tunehost-fault-")
        args = {"fault": fault, "call": call, "after": after}
        if every:
            args["every"] = True
        else:
            args["once_file"] = os.path.join(tmp, "once")
        args.update(extra or {})
        options = {"isolation": "process"} if isolated else {}
        if memory_limit_mb:
            options["memoryLimitMb"] = memory_limit_mb
        tunehost_options = {"pluginCallTimeoutMs": timeout_ms} if timeout_ms else None
        run = Run("fixture-faulty", args, max_trials=TRIALS, trial_command=FINAL_TRIAL,
                  tuner_options=options, tunehost_options=tunehost_options, concurrency=2,
                  exp_id="f%s%s" % (fault, "-iso" if isolated else ""))
        run.start()
        return run

    def errors(self, run, code):
        return [e for e in run.stored_events("ER") if e["code"] == code]

    def assert_done_with_every_trial(self, run):
        summary = run.summary_json()
        self.assertEqual(summary["status"], "DONE", run.output())
        trials = summary["trials"]
        self.assertEqual(len(trials), TRIALS)
        self.assertEqual(len({t["trial_id"] for t in trials}), TRIALS, "a trial ran twice")
        self.assertEqual({t["status"] for t in trials}, {"SUCCEEDED"})

    def assert_no_gap(self, run):
        """The tuner's record: every trial's result and end exactly once."""
        record = run.tuner_record()
        results = [line for line in record if line.startswith("result ")]
        ends = [line for line in record if line.startswith("end ")]
        self.assertEqual(len(results), TRIALS, record)
        self.assertEqual(len(set(results)), TRIALS, record)
        self.assertEqual(len(ends), TRIALS, record)
        self.assertEqual(len(set(ends)), TRIALS, record)

    # --- the plugin reports a failure: the same in both modes ---

    def check_failing_call(self, fault, isolated):
        run = self.run_fault(fault, "receive_trial_result", isolated, every=True)
        self.assertEqual(run.wait(120), 0, run.output())
        self.assert_done_with_every_trial(run)
        failures = self.errors(run, "plugin_error")
        self.assertEqual(len(failures), TRIALS - 1, failures)  # every call from the 2nd on
        self.assertIn("fixture-faulty", failures[0]["message"])
        self.assertEqual(failures[0]["source"], "tuner:fixture-faulty")
        self.assertEqual(self.errors(run, "plugin_crashed"), [])

    def test_throw_in_process(self):
        self.check_failing_call("throw", False)

    def test_throw_isolated(self):
        self.check_failing_call("throw", True)

    def test_error_in_process(self):
        self.check_failing_call("error", False)

    def test_error_isolated(self):
        self.check_failing_call("error", True)

    def check_garbage(self, isolated):
        run = self.run_fault("garbage", "generate", isolated, every=True, after=1)
        self.assertEqual(run.wait(120), 1, run.output())
        self.assertEqual(run.meta("status"), "ERROR")
        self.assertIn("3 times in a row", run.meta("error"))
        failures = self.errors(run, "plugin_error")
        # Three in a row end it; requests already out fail too.
        self.assertGreaterEqual(len(failures), 3, failures)
        self.assertIn("invalid parameters", failures[0]["message"])
        with run.db() as db:
            self.assertEqual(db.execute("SELECT COUNT(*) FROM trials").fetchone()[0], 0)

    def test_garbage_in_process(self):
        self.check_garbage(False)

    def test_garbage_isolated(self):
        self.check_garbage(True)

    # --- faults only a process boundary survives ---

    def test_hang_in_process(self):
        run = self.run_fault("hang", "generate", False, timeout_ms=1500)
        self.assertEqual(run.wait(120), 1, run.output())
        self.assertEqual(run.meta("status"), "ERROR")
        self.assertEqual(len(self.errors(run, "plugin_timeout")), 1)

    def test_hang_isolated(self):
        run = self.run_fault("hang", "generate", True, timeout_ms=1500)
        self.assertEqual(run.wait(120), 0, run.output())
        self.assert_done_with_every_trial(run)
        timeouts = self.errors(run, "plugin_timeout")
        self.assertEqual(len(timeouts), 1, timeouts)
        self.assertIn("generate did not return within 1.5 s", timeouts[0]["message"])
        self.assert_no_gap(run)

    def test_leak_in_process(self):
        run = self.run_fault("leak", "receive_trial_result", False, extra={"leak_mb": 32})
        self.assertEqual(run.wait(120), 0, run.output())
        self.assert_done_with_every_trial(run)

    def test_leak_isolated(self):
        run = self.run_fault("leak", "receive_trial_result", True, extra={"leak_mb": 64},
                             memory_limit_mb=300)
        self.assertEqual(run.wait(120), 0, run.output())
        self.assert_done_with_every_trial(run)
        crashes = self.errors(run, "plugin_crashed")
        self.assertEqual(len(crashes), 1, crashes)
        self.assertIn("memory cap of 300 MiB", crashes[0]["message"])
        self.assert_no_gap(run)

    def check_crash(self, fault, isolated, *causes):
        run = self.run_fault(fault, "receive_trial_result", isolated, after=4)
        code = run.wait(120)
        if isolated:
            self.assertEqual(code, 0, run.output())
            self.assert_done_with_every_trial(run)
            crashes = self.errors(run, "plugin_crashed")
            self.assertEqual(len(crashes), 1, crashes)
            self.assertTrue(any(c in crashes[0]["message"] for c in causes), crashes[0])
            self.assertIn("during receive_trial_result", crashes[0]["message"])
            self.assert_no_gap(run)
            return
        # In-process, the host goes down with the plugin: the store says it
        # crashed, and a resume finishes the experiment without losing or
        # re-running a trial that had ended.
        self.assertNotEqual(code, 0, run.output())
        with run.db() as db:
            ended_before = {row[0] for row in db.execute(
                "SELECT trial_id FROM trials WHERE state = 'ENDED'")}
        view = subprocess.run([harness.TUNEHOST, "view", run.id, "--workdir", run.workdir,
                               "--once"], capture_output=True, text=True, timeout=30)
        self.assertIn("CRASHED", view.stdout)
        run.resume()
        self.assertEqual(run.wait(120), 0, run.output())
        self.assert_done_with_every_trial(run)
        with run.db() as db:
            created = db.execute("SELECT COUNT(*) FROM trial_events WHERE event = 'created'"
                                 ).fetchone()[0]
            ends = dict(db.execute("SELECT trial_id, COUNT(*) FROM trial_events "
                                   "WHERE event = 'ended' GROUP BY trial_id").fetchall())
        self.assertEqual(created, TRIALS, "trials created twice")
        for trial_id in ended_before:
            self.assertEqual(ends.get(trial_id), 1, "%s ended again after the resume" % trial_id)

    def test_segfault_in_process(self):
        self.check_crash("segfault", False)

    def test_segfault_isolated(self):
        # Under AddressSanitizer (abort_on_error) its SEGV handler reports and aborts.
        self.check_crash("segfault", True, "killed by signal 11", "killed by signal 6")

    def test_abort_in_process(self):
        self.check_crash("abort", False)

    def test_abort_isolated(self):
        self.check_crash("abort", True, "killed by signal 6")

    def test_exit_in_process(self):
        self.check_crash("exit", False)

    def test_exit_isolated(self):
        self.check_crash("exit", True, "exited with status 3")

    def test_a_failing_save_state_is_an_error_event_and_the_experiment_goes_on(self):
        run = self.run_fault("error", "save_state", False, every=True, after=1)
        self.assertEqual(run.wait(120), 0, run.output())
        self.assert_done_with_every_trial(run)
        failures = self.errors(run, "plugin_error")
        self.assertEqual(len(failures), 1, "one event when checkpoints start failing")
        self.assertIn("save_state failed", failures[0]["message"])
        self.assertEqual(run.tuner_record(), [], "no checkpoint was stored")

    def test_an_isolated_assessor_that_crashes_is_restored_without_a_gap(self):
        tmp = tempfile.mkdtemp(prefix="tunehost-fault-")
        run = Run("fixture-faulty", {"fault": "none"}, max_trials=TRIALS,
                  trial_command=CURVE_TRIAL, concurrency=2, exp_id="assessor-iso",
                  assessor={"name": "fixture-faulty-assessor", "isolation": "process",
                            "classArgs": {"fault": "segfault", "call": "assess_trial",
                                          "after": 7, "once_file": os.path.join(tmp, "once")}})
        run.start()
        self.assertEqual(run.wait(120), 0, run.output())
        self.assertEqual(run.summary_json()["status"], "DONE")
        crashes = self.errors(run, "plugin_crashed")
        self.assertEqual(len(crashes), 1, crashes)
        self.assertEqual(crashes[0]["source"], "assessor:fixture-faulty-assessor")
        self.assertIn("during assess_trial", crashes[0]["message"])
        with run.db() as db:
            row = db.execute("SELECT state FROM checkpoints WHERE kind = 'assessor'").fetchone()
        record = row[0].decode().splitlines()
        assessed = [line for line in record if line.startswith("assess ")]
        done = [line for line in record if line.startswith("done ")]
        self.assertEqual(len(assessed), 3 * TRIALS, record)
        self.assertEqual(len(set(assessed)), 3 * TRIALS, record)
        self.assertEqual(len(set(done)), TRIALS, record)

    def test_a_call_that_always_crashes_fails_after_three_tries(self):
        # after=1: every receive_trial_result crashes, whatever runner gets it.
        # (With after=2 a runner restored from a checkpoint taken after the
        # first result counts from zero again, so how many results failed
        # depended on when checkpoints happened to be taken.)
        run = self.run_fault("segfault", "receive_trial_result", True, every=True, after=1)
        self.assertEqual(run.wait(180), 0, run.output())
        self.assert_done_with_every_trial(run)
        failures = self.errors(run, "plugin_error")
        self.assertEqual(len(failures), TRIALS, failures)
        self.assertIn("crashed the plugin runner 3 times in a row", failures[0]["message"])


class ServeIsolationTest(unittest.TestCase):
    def test_in_asks_for_an_isolated_tuner_whose_crash_is_survived(self):
        host = harness.Host(plugin_dir=TEST_PLUGIN_DIR)
        self.addCleanup(host.close)
        once = os.path.join(tempfile.mkdtemp(prefix="tunehost-serve-iso-"), "once")
        kind, body = host.request("IN", {
            "search_space": {"x": {"_type": "uniform", "_value": [0, 1]}},
            "experiment": {"id": "iso", "tuner": {
                "name": "fixture-faulty", "isolation": "process", "memory_limit_mb": 512,
                "args": {"fault": "segfault", "call": "generate", "once_file": once}},
                "assessor": None, "concurrency": 1, "max_trials": 0, "max_duration_s": 0.0,
                "plugin_timeout_s": 30.0}})
        self.assertEqual(kind, "ok", body)
        kind, body = host.request("GE", {"count": 2})
        self.assertEqual(kind, "ok", body)
        self.assertEqual(len(body["data"]["trials"]), 2, "the crashed call was retried")
        self.assertTrue(os.path.exists(once), "the fault fired")
        crashes = wait_for(lambda: [e for e in host.events_of("ER")
                                    if e["code"] == "plugin_crashed"], 20, "an ER event")
        self.assertEqual(crashes[0]["source"], "tuner:fixture-faulty")
        self.assertIn("during generate", crashes[0]["message"])


class CrashedHostTest(unittest.TestCase):
    def test_a_killed_host_shows_as_crashed_not_running(self):
        run = Run("random", {"seed": 1}, max_trials=50, plugin_dir=harness.PLUGIN_DIR,
                  trial_command="sleep 5")
        run.start()
        wait_for(lambda: os.path.exists(os.path.join(run.dir, "host.json")), 30, "the host")
        wait_for(lambda: run.meta("status") == "RUNNING", 30, "status RUNNING in the store")
        run.proc.send_signal(signal.SIGKILL)
        run.wait(10)
        view = subprocess.run([harness.TUNEHOST, "view", run.id, "--workdir", run.workdir,
                               "--once"], capture_output=True, text=True, timeout=30)
        self.assertEqual(view.returncode, 0, view.stderr)
        self.assertIn("CRASHED", view.stdout)
        self.assertIn("tunehost resume %s" % run.id, view.stdout)
        # No host: tunectl reads the store, and says how to continue it.
        ctl = subprocess.run([TUNECTL, "--experiment", run.id, "--workdir", run.workdir,
                              "status"], capture_output=True, text=True, timeout=30)
        self.assertEqual(ctl.returncode, 0, ctl.stdout + ctl.stderr)
        self.assertIn("CRASHED", ctl.stdout)
        self.assertIn("tunehost resume %s" % run.id, ctl.stdout)
        ctl = subprocess.run([TUNECTL, "--experiment", run.id, "--workdir", run.workdir,
                              "stop"], capture_output=True, text=True, timeout=30)
        self.assertEqual(ctl.returncode, 1, ctl.stdout + ctl.stderr)
        self.assertIn("is not running (CRASHED", ctl.stderr)
        # A view that serves the store is a host tunectl can ask.
        viewer = subprocess.Popen([harness.TUNEHOST, "view", run.id, "--workdir", run.workdir],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def answered():
                r = subprocess.run([TUNECTL, "--experiment", run.id, "--workdir", run.workdir,
                                    "--json", "status"], capture_output=True, text=True,
                                   timeout=30)
                return r.returncode == 0 and json.loads(r.stdout)["status"] == "VIEWED"
            wait_for(answered, 30, "tunectl status through the view")
        finally:
            harness.stop(viewer)


if __name__ == "__main__":
    unittest.main()
