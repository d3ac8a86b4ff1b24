"""tunehost.control against a fake ROUTER (codec, timeout, error replies), and
tunehost.experiment.Experiment against a real `tunehost run` host."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

import msgpack
import zmq

import tunehost
from tunehost import protocol
from tunehost.control import NO_KEY_HINT, ControlClient, ControlError, ControlTimeout, encode_request
from tunehost.experiment import Experiment, TrialResult, parse_duration

PYTHONPATH = os.path.dirname(os.path.dirname(tunehost.__file__))


# ------------------------------------------------------------------ fake ROUTER


class FakeRouter:
    """A control ROUTER on a random loopback port, played by a thread that
    answers each request with the replies `script(request)` returns (a list of
    (type, body, id) tuples; an empty list: no answer)."""

    def __init__(self, script):
        self.ctx = zmq.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = "tcp://127.0.0.1:%d" % port
        self.script = script
        self.requests = []  # (raw bytes, unpacked envelope)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            if not self.router.poll(50):
                continue
            peer, frame = self.router.recv_multipart()
            envelope = msgpack.unpackb(frame, raw=False)
            self.requests.append((frame, envelope))
            for type_code, body, msg_id in self.script(envelope):
                self.router.send_multipart([peer, protocol.encode(type_code, body, msg_id)])

    def close(self):
        self.stop.set()
        self.thread.join()
        self.router.close()
        self.ctx.term()


class ControlClientTest(unittest.TestCase):
    def serve(self, script):
        router = FakeRouter(script)
        self.addCleanup(router.close)
        client = ControlClient(router.endpoint, timeout_ms=300)
        self.addCleanup(client.close)
        return router, client

    def test_requests_are_encoded_canonically_and_ok_data_is_returned(self):
        router, client = self.serve(
            lambda req: [("ok", {"data": {"total": 0, "trials": [], "echo": req["type"]}}, req["id"])])
        self.assertEqual(client.list_trials(status="RUNNING"), {"total": 0, "trials": [], "echo": "LT"})
        self.assertEqual(client.update(concurrency=3)["echo"], "UX")
        self.assertEqual(client.update(max_duration_s=3600)["echo"], "UX")
        self.assertEqual(client.kill_trial("t1")["echo"], "KT")
        self.assertEqual(client.status()["echo"], "ST")
        self.assertEqual(client.metrics()["echo"], "MT")
        frames = [frame for frame, _ in router.requests]
        # Every key in the documented order, nil for absent values, ids 1, 2, ...
        self.assertEqual(frames[0], msgpack.packb({"v": 1, "type": "LT", "id": 1, "body": {
            "status": "RUNNING", "offset": 0, "limit": 0}}))
        self.assertEqual(frames[1], msgpack.packb({"v": 1, "type": "UX", "id": 2, "body": {
            "concurrency": 3, "max_trials": None, "max_duration_s": None}}))
        # max_duration_s is a float64 even when given as an int.
        self.assertEqual(frames[2], msgpack.packb({"v": 1, "type": "UX", "id": 3, "body": {
            "concurrency": None, "max_trials": None, "max_duration_s": 3600.0}}))
        self.assertIn(b"\xcb", frames[2])
        self.assertEqual(frames[3], msgpack.packb({"v": 1, "type": "KT", "id": 4, "body": {
            "trial_id": "t1"}}))
        self.assertEqual(frames[4], msgpack.packb({"v": 1, "type": "ST", "id": 5, "body": {}}))
        self.assertEqual(frames[5], msgpack.packb({"v": 1, "type": "MT", "id": 6, "body": {
            "trial_id": None}}))

    def test_extension_requests_encode_like_the_checked_in_vectors(self):
        # protocol/vectors/vectors.json holds the C++ encoder's bytes for the
        # control API requests; encode_request must produce the same.
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                            "protocol", "vectors", "vectors.json")
        with open(path, encoding="utf-8") as f:
            vectors = [v for v in json.load(f)
                       if v["expect"]["type"] in ("ST", "LT", "GT", "JS", "MT", "EX", "UX", "KT")]
        self.assertEqual({v["expect"]["type"] for v in vectors},
                         {"ST", "LT", "GT", "JS", "MT", "EX", "UX", "KT"})
        for v in vectors:
            with self.subTest(v["name"]):
                e = v["expect"]
                self.assertEqual(encode_request(e["type"], e["body"], e["id"]).hex(),
                                 v.get("canonical_hex", v["hex"]))

    def test_error_reply_raises_with_code_and_message(self):
        _, client = self.serve(lambda req: [("error", {"code": "not_found",
                                                       "message": "no trial nope"}, req["id"])])
        with self.assertRaises(ControlError) as cm:
            client.get_trial("nope")
        self.assertEqual(cm.exception.code, "not_found")
        self.assertEqual(cm.exception.message, "no trial nope")
        self.assertEqual(cm.exception.request, "GT")
        self.assertEqual(str(cm.exception), "GT: not_found: no trial nope")
        self.assertNotIsInstance(cm.exception, ControlTimeout)

    def test_no_answer_raises_timeout_naming_endpoint_and_time(self):
        router, client = self.serve(lambda req: [])
        with self.assertRaises(ControlTimeout) as cm:
            client.status()
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertIsInstance(cm.exception, ControlError)
        self.assertEqual(cm.exception.code, "timeout")
        self.assertEqual(str(cm.exception), "ST: timeout: no answer from %s within 300 ms (%s)"
                         % (router.endpoint, NO_KEY_HINT))

    def test_replies_to_other_requests_are_skipped(self):
        # A stale reply (an earlier id) and a reply to a later id come first;
        # the client returns the one that matches its request.
        _, client = self.serve(lambda req: [("ok", {"data": "stale"}, req["id"] + 100),
                                            ("ok", {"data": "stale"}, 0),
                                            ("ok", {"data": "mine"}, req["id"])])
        self.assertEqual(client.ping(), "mine")
        self.assertEqual(client.ping(), "mine")

    def test_after_a_timeout_the_next_request_works(self):
        answered = []

        def script(req):
            answered.append(req["id"])
            return [] if len(answered) == 1 else [("ok", {"data": {"n": req["id"]}}, req["id"])]

        _, client = self.serve(script)
        with self.assertRaises(ControlTimeout):
            client.status()
        self.assertEqual(client.status(), {"n": 2})

    def test_bad_bodies_are_refused_before_sending(self):
        router, client = self.serve(lambda req: [("ok", {"data": {}}, req["id"])])
        for call, code, field in ((lambda: client.update(concurrency=-1), "bad_field", "body.concurrency"),
                                  (lambda: client.kill_trial(None), "missing_field", "body.trial_id"),
                                  (lambda: client.list_trials(status=3), "bad_field", "body.status"),
                                  (lambda: client.request("LT", {"nope": 1}), "bad_field", "body.nope"),
                                  (lambda: client.request("ZZ"), "unknown_type", None)):
            with self.assertRaises(protocol.ProtocolError) as cm:
                call()
            self.assertEqual(cm.exception.code, code)
            self.assertEqual(cm.exception.field, field)
        self.assertEqual(client.ping(), {})
        self.assertEqual([env["type"] for _, env in router.requests], ["PI"])


class ParseDurationTest(unittest.TestCase):
    def test_nni_duration_strings(self):
        self.assertEqual(parse_duration("1h"), 3600.0)
        self.assertEqual(parse_duration("10m"), 600.0)
        self.assertEqual(parse_duration("90s"), 90.0)
        self.assertEqual(parse_duration("2d"), 172800.0)
        self.assertEqual(parse_duration("1.5h"), 5400.0)
        self.assertEqual(parse_duration("30"), 30.0)
        self.assertEqual(parse_duration(0), 0.0)
        self.assertEqual(parse_duration(12.5), 12.5)
        for bad in ("1w", "h", "-1h", "", "1 hour", True, -3):
            with self.assertRaises(ValueError, msg=repr(bad)):
                parse_duration(bad)


class ConnectTest(unittest.TestCase):
    def test_connect_to_nothing_fails_clearly(self):
        with tempfile.TemporaryDirectory() as workdir:
            with self.assertRaises(FileNotFoundError) as cm:
                Experiment.connect("nosuchid", workdir=workdir)
            self.assertIn(os.path.join(workdir, "nosuchid", "host.json"), str(cm.exception))
        with self.assertRaises(ControlTimeout) as cm:
            Experiment.connect("tcp://127.0.0.1:1", timeout_ms=200)
        self.assertIn("no answer from tcp://127.0.0.1:1 within 200 ms", str(cm.exception))


# ------------------------------------------------------------------ real host


def binaries():
    """(tunehost, plugin dir, tunehost-worker) from TUNEHOST_BIN_DIR and
    TUNEHOST_PLUGIN_DIR (set by ctest). Without them the real-host tests are
    skipped, unless TUNEHOST_TEST_REQUIRE_BINARIES is set (then they fail)."""
    bin_dir = os.environ.get("TUNEHOST_BIN_DIR")
    plugin_dir = os.environ.get("TUNEHOST_PLUGIN_DIR")
    if bin_dir and plugin_dir and os.path.exists(os.path.join(bin_dir, "tunehost")):
        return (os.path.join(bin_dir, "tunehost"), plugin_dir,
                os.path.join(bin_dir, "tunehost-worker"))
    if os.environ.get("TUNEHOST_TEST_REQUIRE_BINARIES"):
        raise AssertionError("tunehost binary not found (TUNEHOST_BIN_DIR=%r)" % bin_dir)
    raise unittest.SkipTest("TUNEHOST_BIN_DIR/TUNEHOST_PLUGIN_DIR not set (run through ctest)")


def wait_until(predicate, what, timeout=60.0):
    """Polls predicate until it returns something true, which is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(0.05)


# A trial that reports its x, then waits until the test opens its gate (a file
# named after its trial id, or "all"), then reports its final result.
GATED_TRIAL = textwrap.dedent("""
    import os, sys, time
    import tunehost.nni as nni

    params = nni.get_next_parameter()
    nni.report_intermediate_result(params["x"])
    gates = sys.argv[1]
    while not (os.path.exists(os.path.join(gates, nni.get_trial_id()))
               or os.path.exists(os.path.join(gates, "all"))):
        time.sleep(0.02)
    nni.report_final_result({"default": params["x"], "seq": nni.get_sequence_id()})
""")


class ExperimentTest(unittest.TestCase):
    def setUp(self):
        self.tunehost, self.plugins, self.worker = binaries()
        self.tmp = tempfile.mkdtemp(prefix="tunehost-pyexp-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.gates = os.path.join(self.tmp, "gates")
        os.mkdir(self.gates)
        with open(os.path.join(self.tmp, "trial.py"), "w", encoding="utf-8") as f:
            f.write(GATED_TRIAL)
        self.workdir = os.path.join(self.tmp, "work")
        self.experiments = []

    def tearDown(self):
        self.open_gate("all")
        for exp in self.experiments:
            if exp.process is not None and exp.process.poll() is None:
                exp.process.kill()
                exp.process.wait()
            exp.close()

    def open_gate(self, name):
        with open(os.path.join(self.gates, name), "w"):
            pass

    def config(self, concurrency=2, max_trials=6):
        return {
            "experimentName": "python-client-test",
            "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
            "trialCommand": "PYTHONPATH=%s %s trial.py %s" % (PYTHONPATH, sys.executable, self.gates),
            "trial_code_directory": self.tmp,  # NNI's Python (snake_case) name works too
            "trialConcurrency": concurrency,
            "maxTrialNumber": max_trials,
            "experimentWorkingDirectory": self.workdir,
            "tuner": {"name": "random", "class_args": {"seed": 5}},
        }

    def new_experiment(self, config, **kw):
        exp = Experiment(config, tunehost=self.tunehost, plugins=self.plugins, **kw)
        self.experiments.append(exp)
        return exp

    def running(self, exp, n):
        """The RUNNING trials once n of them have reported their first result."""
        def check():
            jobs = exp.list_trial_jobs("RUNNING")
            return jobs if len(jobs) == n and all(j.intermediate_count >= 1 for j in jobs) else None
        return wait_until(check, "%d running trials with a result" % n)

    def status_of(self, exp, trial_id, status):
        return wait_until(lambda: (lambda j: j if j.status == status else None)(exp.get_trial_job(trial_id)),
                          "trial %s to be %s" % (trial_id, status))

    def test_start_query_update_kill_export_stop(self):
        exp = self.new_experiment(self.config())
        exp.start()
        with open(exp.host_file, encoding="utf-8") as f:
            host = json.load(f)
        self.assertEqual(host["experiment_id"], exp.id)
        self.assertEqual(host["pid"], exp.process.pid)
        self.assertEqual(exp.endpoints["control"], host["control"])
        self.assertEqual(os.path.dirname(exp.host_file), os.path.join(self.workdir, exp.id))

        first, second = sorted(self.running(exp, 2), key=lambda j: j.sequenceId)
        self.assertEqual(exp.get_status(), "RUNNING")
        profile = exp.get_experiment_profile()
        self.assertEqual(profile["experiment_id"], exp.id)
        self.assertEqual((profile["concurrency"], profile["max_trials"]), (2, 6))
        self.assertEqual(profile["endpoints"]["control"], host["control"])

        job = exp.get_trial_job(first.trialJobId)
        self.assertEqual(job.status, "RUNNING")
        self.assertEqual(job.sequenceId, first.sequenceId)
        self.assertEqual(set(job.parameters), {"x"})
        self.assertEqual(job.hyperParameters[0].parameters, job.parameters)
        self.assertEqual(job.hyperParameters[0].parameter_source, "algorithm")
        self.assertIsNotNone(job.startTime)
        self.assertIsNone(job.endTime)
        self.assertEqual(job.finalMetricData, [])
        self.assertTrue(os.path.isdir(job.logPath), job.logPath)  # the trial directory
        self.assertEqual(job.stderrPath, os.path.join(job.logPath, "stderr.log"))

        with self.assertRaises(ControlError) as cm:
            exp.get_trial_job("no-such-trial")
        self.assertEqual(cm.exception.code, "not_found")
        # Refused by the client's encoder before it is sent (the host would
        # answer the same code).
        with self.assertRaises(protocol.ProtocolError) as cm:
            exp.list_trial_jobs("BOGUS")
        self.assertEqual(cm.exception.code, "bad_field")

        self.assertEqual(exp.update_trial_concurrency(1)["concurrency"], 1)

        exp.kill_trial_job(first.trialJobId)
        self.status_of(exp, first.trialJobId, "USER_CANCELED")
        with self.assertRaises(ControlError) as cm:
            exp.kill_trial_job(first.trialJobId)
        self.assertEqual(cm.exception.code, "bad_state")

        self.open_gate(second.trialJobId)
        done = self.status_of(exp, second.trialJobId, "SUCCEEDED")
        x = done.parameters["x"]
        self.assertEqual(done.final, {"default": x, "seq": second.sequenceId})
        self.assertEqual([(m.type, m.data) for m in done.finalMetricData],
                         [("FINAL", {"default": x, "seq": second.sequenceId})])
        self.assertIsNotNone(done.endTime)

        stats = {s["trialJobStatus"]: s["trialJobNumber"] for s in exp.get_job_statistics()}
        self.assertEqual(stats.get("SUCCEEDED"), 1)
        self.assertEqual(stats.get("USER_CANCELED"), 1)
        self.assertTrue(all(n > 0 for n in stats.values()))

        metrics = exp.get_job_metrics(second.trialJobId)
        self.assertEqual(list(metrics), [second.trialJobId])
        self.assertEqual([(m.type, m.sequence, m.data) for m in metrics[second.trialJobId]],
                         [("PERIODICAL", 0, x), ("FINAL", 1, {"default": x, "seq": second.sequenceId})])
        self.assertEqual({m.parameterId for m in metrics[second.trialJobId]}, {done.hyperParameters[0].parameter_id})
        every = exp.get_job_metrics()
        self.assertEqual([(m.type, m.data) for m in every[first.trialJobId]],
                         [("PERIODICAL", first.parameters["x"])])
        self.assertEqual(every[second.trialJobId], metrics[second.trialJobId])

        self.assertEqual(exp.export_data(), [TrialResult(parameter={"x": x},
                                                         value={"default": x, "seq": second.sequenceId},
                                                         trialJobId=second.trialJobId)])

        self.assertEqual(exp.update_max_trial_number(5)["max_trials"], 5)
        self.assertEqual(exp.update_max_experiment_duration("1h")["max_duration_s"], 3600.0)
        exp.update_search_space({"x": {"_type": "uniform", "_value": [0, 0.5]}})
        with self.assertRaises(ControlError) as cm:
            exp.update_search_space({"x": {"_type": "no-such-type", "_value": [0, 1]}})
        self.assertEqual(cm.exception.code, "plugin_error")
        imported = exp.import_data([{"parameter": {"x": 0.3}, "value": 0.3},
                                    TrialResult(parameter={"x": 0.4}, value='{"default": 0.4}',
                                                trialJobId="old-1")])
        self.assertEqual(imported, 2)

        # A second client finds the host by id (host.json) or by endpoint.
        other = Experiment.connect(exp.id, workdir=self.workdir)
        self.experiments.append(other)
        self.assertEqual(other.get_status(), "RUNNING")
        self.assertEqual([j.trialJobId for j in other.list_trial_jobs()],
                         [j.trialJobId for j in exp.list_trial_jobs()])
        by_endpoint = Experiment.connect(host["control"])
        self.experiments.append(by_endpoint)
        self.assertEqual(by_endpoint.id, exp.id)
        other.close()
        by_endpoint.close()

        exp.stop()
        self.assertIsNotNone(exp.process.poll())
        self.assertEqual(exp.get_status(), "STOPPED")
        self.assertFalse(os.path.exists(exp.host_file))
        with self.assertRaises(RuntimeError):
            exp.list_trial_jobs()

    def test_submit_and_wait_for_trials(self):
        # NNI's ExecutionEngine submit_models / wait_models over the control API.
        exp = self.new_experiment(self.config(concurrency=2, max_trials=3))
        exp.start()
        first = self.running(exp, 2)
        added = exp.add_trial({"x": 0.75})["trial_id"]
        with self.assertRaises(TimeoutError):
            exp.wait_trials([first[0].trialJobId], timeout=0.3)
        # The other running trial stays gated, so the experiment goes on.
        self.open_gate(first[0].trialJobId)
        self.open_gate(added)
        jobs = exp.wait_trials([added, first[0].trialJobId], timeout=60)
        self.assertEqual([j.trialJobId for j in jobs], [added, first[0].trialJobId])
        self.assertEqual([j.status for j in jobs], ["SUCCEEDED", "SUCCEEDED"])
        self.assertEqual(jobs[0].finalMetricData[0].data, {"default": 0.75, "seq": 2})
        with self.assertRaises(ControlError) as cm:
            exp.wait_trials(["nope"], timeout=5)
        self.assertEqual(cm.exception.code, "not_found")

    def test_run_waits_until_done(self):
        self.open_gate("all")
        exp = self.new_experiment(self.config(concurrency=2, max_trials=3))
        self.assertTrue(exp.run())
        self.assertEqual(exp.get_status(), "DONE")
        self.assertEqual(exp.run_process.returncode, 0)
        # A read-only view keeps the ended experiment queryable until stop().
        self.assertEqual(len(exp.export_data()), 3)
        exp.stop()
        self.assertIsNotNone(exp.process.returncode)
        self.assertFalse(os.path.exists(exp.host_file))
        with open(exp.summary_path) as f:
            summary = json.load(f)
        self.assertEqual(summary["experiment_id"], exp.id)
        self.assertEqual(sorted(t["status"] for t in summary["trials"]), ["SUCCEEDED"] * 3)
        for t in summary["trials"]:
            self.assertEqual(t["final_result"], {"default": t["parameters"]["x"], "seq": t["sequence_id"]})

    def test_run_from_a_yaml_file_in_another_directory(self):
        self.open_gate("all")
        config = os.path.join(self.tmp, "experiment.yml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent("""
                searchSpace:
                  x: {_type: uniform, _value: [0, 1]}
                trialCommand: PYTHONPATH=%s %s trial.py %s
                trialCodeDirectory: .
                trialConcurrency: 1
                maxTrialNumber: 2
                experimentWorkingDirectory: work   # relative to this file
                tuner:
                  name: random
                """ % (PYTHONPATH, sys.executable, self.gates)))
        cwd = os.getcwd()
        os.chdir(tempfile.gettempdir())
        try:
            exp = self.new_experiment(os.path.relpath(config))
        finally:
            os.chdir(cwd)
        self.assertEqual(exp.workdir, self.workdir)
        self.assertTrue(exp.run())
        with open(exp.summary_path) as f:
            self.assertEqual(len(json.load(f)["trials"]), 2)
        self.assertTrue(os.path.isdir(os.path.join(self.workdir, exp.id)))

    def test_a_host_that_cannot_start_is_reported(self):
        config = self.config()
        config["tuner"] = {"name": "no-such-tuner"}
        exp = self.new_experiment(config)
        with self.assertRaises(RuntimeError) as cm:
            exp.start()
        self.assertIn("no-such-tuner", str(cm.exception))

    def test_view_and_resume_a_stopped_experiment(self):
        help_text = subprocess.run([self.tunehost, "--help"], capture_output=True, text=True).stdout
        if "resume" not in help_text or "view" not in help_text:
            self.fail("tunehost has no resume/view commands yet")
        exp = self.new_experiment(self.config(concurrency=1, max_trials=3))
        exp.start()
        (first,) = self.running(exp, 1)
        self.open_gate(first.trialJobId)
        self.status_of(exp, first.trialJobId, "SUCCEEDED")
        exp.stop()

        view = Experiment.view(exp.id, non_blocking=True, workdir=self.workdir,
                               tunehost=self.tunehost)
        self.experiments.append(view)
        self.assertEqual(view.get_status(), "VIEWED")
        jobs = {j.trialJobId: j for j in view.list_trial_jobs()}
        self.assertEqual(jobs[first.trialJobId].status, "SUCCEEDED")
        with self.assertRaises(ControlError) as cm:
            view.update_trial_concurrency(2)
        self.assertEqual(cm.exception.code, "bad_state")
        view.stop()

        self.open_gate("all")
        resumed = Experiment.resume(exp.id, wait_completion=False, workdir=self.workdir,
                                    tunehost=self.tunehost, plugins=self.plugins)
        self.experiments.append(resumed)
        self.assertEqual(resumed.wait(timeout=120), "DONE")
        with open(resumed.summary_path, encoding="utf-8") as f:
            trials = {t["trial_id"]: t for t in json.load(f)["trials"]}
        self.assertEqual(len(trials), 3)
        self.assertEqual(trials[first.trialJobId]["status"], "SUCCEEDED")
        self.assertEqual(trials[first.trialJobId]["final_result"]["default"], first.parameters["x"])


if __name__ == "__main__":
    unittest.main()
