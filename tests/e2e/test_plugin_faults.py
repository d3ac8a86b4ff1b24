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

import harness
from harness import wait_for

TEST_PLUGIN_DIR = os.environ.get("TUNEHOST_TEST_PLUGIN_DIR", "build/test-plugins")
TUNECTL = os.path.join(harness.BIN_DIR, "tunectl")


class Run:
    """`tunehost run` of a small experiment whose tuner is a fixture plugin."""

    def __init__(self, tuner, class_args, max_trials=4, tunehost_options=None, exp_id="faults",
                 trial_command="true", assessor=None, plugin_dir=TEST_PLUGIN_DIR):
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
            "trialConcurrency": 1,
            "maxTrialNumber": max_trials,
            "tuner": dict({"name": tuner, "classArgs": class_args}),
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
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [harness.TUNEHOST, "run", self.config, "--id", self.id, "--plugins", self.plugin_dir,
             "--summary-json", self.summary] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        return self.proc

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
        ctl = subprocess.run([TUNECTL, "--experiment", run.id, "--workdir", run.workdir,
                              "status"], capture_output=True, text=True, timeout=30)
        self.assertEqual(ctl.returncode, 3, ctl.stdout + ctl.stderr)
        self.assertIn("CRASHED", ctl.stderr)
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
