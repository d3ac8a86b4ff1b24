"""End-to-end tests of `tunehost serve`: workers and clients attached by
hand to a long-running host (real processes, plugins and sockets)."""
import collections
import os
import signal
import subprocess
import sys
import tempfile
import unittest

import harness
from harness import Host, start_worker, stop, wait_for
from test_e2e import SPACE, write


class ServeTest(unittest.TestCase):
    """`tunehost serve` with workers attached by hand."""

    def setUp(self):
        self.host = Host()
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix="tunehost-serve-")

    def tearDown(self):
        for p in self.procs:
            stop(p)
        self.host.close()

    def test_worker_killed_mid_trial_its_trial_is_reoffered_and_all_end_once(self):
        trial = write(os.path.join(self.tmp, "trial.py"), """
            import json, os, time
            out = os.fdopen(int(os.environ["TUNEHOST_METRIC_FD"]), "w", buffering=1)
            time.sleep(1.0)
            out.write(json.dumps({"type": "FINAL", "value": 1.0}) + "\\n")
            """)
        kind, body = self.host.initialize(SPACE, tuner_args={"seed": 1}, concurrency=2,
                                          max_trials=6)
        self.assertEqual(kind, "ok", body)
        command = "%s %s" % (sys.executable, trial)
        victim_dir = os.path.join(self.tmp, "victim")
        victim = start_worker(self.host, command, victim_dir, "victim")
        self.procs.append(victim)
        self.procs.append(start_worker(self.host, command, os.path.join(self.tmp, "w2"), "w2"))

        def victim_started_trial():
            for _root, dirs, _files in os.walk(victim_dir):
                if any(d.startswith("T") for d in dirs):
                    return True
            return False

        wait_for(victim_started_trial, 30, "the victim worker to start a trial")
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        # A replacement joins later; the experiment must finish without the victim.
        self.host.wait_status({"DONE"}, 90)
        ends = self.host.events_of("EN")
        counts = collections.Counter(e["trial_id"] for e in ends)
        self.assertEqual(len(counts), 6, ends)
        self.assertTrue(all(c == 1 for c in counts.values()), counts)
        self.assertTrue(all(e["status"] == "SUCCEEDED" for e in ends), ends)
        self.assertTrue(any(e["attempt"] >= 1 for e in ends),
                        "the killed worker's trial was re-offered with a new attempt")
        self.assertIn("victim", self.host.log())

    def test_python_function_worker_runs_an_experiment(self):
        write(os.path.join(self.tmp, "objective.py"), """
            def train(config, reporter):
                for step in range(3):
                    reporter(default=config["x"] * (step + 1) / 3.0)
            """)
        kind, body = self.host.initialize(SPACE, tuner_args={"seed": 2}, concurrency=2,
                                          max_trials=4)
        self.assertEqual(kind, "ok", body)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([self.tmp, harness.PYTHONPATH]))
        worker = subprocess.Popen(
            [harness.PYTHON, "-m", "tunehost.worker", "--function", "objective:train",
             "--slots", "2", "--heartbeat-ms", str(self.host.heartbeat_ms),
             "--jobs", self.host.endpoints["jobs"], "--results", self.host.endpoints["results"],
             "--events", self.host.endpoints["events"]],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(worker)
        self.host.wait_status({"DONE"}, 60)
        ends = self.host.events_of("EN")
        self.assertEqual(len(ends), 4)
        self.assertTrue(all(e["status"] == "SUCCEEDED" for e in ends), ends)
        finals = [m for m in self.host.events_of("ME") if m["type"] == "FINAL"]
        self.assertEqual(len(finals), 4)
        # Returned without an explicit final: the last result (step 3 of 3 = x) is final.
        for m in finals:
            self.assertEqual(m["sequence"], 3)

    def test_nni_style_manager_gets_parameters_and_reports_results(self):
        kind, body = self.host.initialize(SPACE, tuner_args={"seed": 5}, concurrency=1)
        self.assertEqual(kind, "ok", body)
        kind, body = self.host.request("GE", {"count": 3})
        self.assertEqual(kind, "ok", body)
        trials = body["data"]["trials"]
        self.assertEqual(len(trials), 3)
        self.assertFalse(body["data"]["no_more"])
        for t in trials:
            self.assertEqual(t["parameter_source"], "external")
            self.assertTrue(0 <= t["parameters"]["x"] <= 1)
            self.assertIn(t["parameters"]["k"], range(4))
        t = trials[0]
        kind, body = self.host.request("ME", {
            "trial_id": t["trial_id"], "attempt": 0, "parameter_id": t["parameter_id"],
            "type": "FINAL", "sequence": 0, "value": {"default": 0.5, "loss": 1.0},
            "worker_id": ""})
        self.assertEqual(kind, "ok", body)
        kind, body = self.host.request("EN", {"trial_id": t["trial_id"], "attempt": 0,
                                              "status": "SUCCEEDED", "error": "",
                                              "worker_id": ""})
        self.assertEqual(kind, "ok", body)
        kind, body = self.host.request("EN", {"trial_id": "nope", "attempt": 0,
                                              "status": "SUCCEEDED", "error": "",
                                              "worker_id": ""})
        self.assertEqual(kind, "error")
        self.assertEqual(body["code"], "not_found")

    def test_bad_requests_get_clear_errors_and_host_keeps_serving(self):
        import msgpack
        from tunehost import protocol
        cases = [
            ([b"\xc1garbage"], "bad_frame"),
            ([msgpack.packb({"v": 2, "type": "PI", "id": 7, "body": {}})], "unsupported_version"),
            ([msgpack.packb({"v": 1, "type": "ZZ", "id": 8, "body": {}})], "unknown_type"),
            ([msgpack.packb({"v": 1, "type": "GE", "id": 9, "body": {}})], "missing_field"),
            ([msgpack.packb({"v": 1, "type": "GE", "id": 10, "body": {"count": "x"}})],
             "bad_field"),
            ([b"\x00" * (2 << 20)], "too_large"),
            ([protocol.encode("GE", {"count": 1}, 11)], "bad_state"),  # before IN
        ]
        for frames, code in cases:
            reply = self.host.send_raw(frames)
            self.assertEqual(reply.type, "error", (code, reply))
            self.assertEqual(reply.body["code"], code, reply.body)
            self.assertTrue(reply.body["message"])
        self.assertEqual(self.host.status(), "INITIALIZED")
        kind, body = self.host.initialize({"x": {"_type": "uniform", "_value": [1, 0]}})
        self.assertEqual(kind, "error")
        self.assertEqual(body["code"], "plugin_error")
        self.assertIn("x", body["message"])
        self.assertEqual(self.host.status(), "INITIALIZED")
        # Class arguments the plugin refuses: a failed reply and an ER event
        # (every refusal publishes one; events are best effort, so ask again
        # until one is seen rather than trusting a single delivery).
        def refused_with_event():
            kind, body = self.host.initialize(SPACE, tuner_args={"bogus": 1})
            self.assertEqual(kind, "error")
            self.assertEqual(body["code"], "plugin_error")
            self.assertIn("bogus", body["message"])
            return harness.wait_for_or_none(
                lambda: any(e["source"] == "tuner:random" and "bogus" in e["message"]
                            for e in self.host.events_of("ER")), 1.0)
        harness.wait_for(refused_with_event, 15, "ER event")
        # This host has no experiment configured elsewhere: IN must carry one.
        kind, body = self.host.request("IN", {"search_space": SPACE})
        self.assertEqual(kind, "error")
        self.assertEqual(body["code"], "bad_state")
        self.assertEqual(self.host.status(), "INITIALIZED")


if __name__ == "__main__":
    unittest.main()
