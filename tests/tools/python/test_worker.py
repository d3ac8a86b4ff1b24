"""The Python worker and its function API against a fake host (real ZeroMQ sockets).

Every wait is a poll with a deadline on a socket or a threading.Event; no test
sleeps to let something happen.
"""

import fractions
import logging
import secrets
import threading
import time
import unittest

import msgpack
import zmq

import tunehost
from fake_host import FakeHost
from tunehost.function import function_runner
from tunehost.worker import Worker

WAIT = 5.0

# The bad-input test makes the worker log warnings by design.
logging.getLogger("tunehost").setLevel(logging.ERROR)


def wait_for(condition, timeout=WAIT):
    """Polls condition() until it is true or the deadline passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.005)


class WorkerTestCase(unittest.TestCase):
    def setUp(self):
        self.host = FakeHost()
        self.worker = None
        self.gates = []

    def tearDown(self):
        for gate in self.gates:
            gate.set()
        if self.worker is not None:
            self.worker.stop(grace=2.0)
        self.host.close()

    def gate(self):
        """An Event that trial functions wait on; set at teardown so no thread hangs."""
        event = threading.Event()
        self.gates.append(event)
        return event

    def start_worker(self, train, slots=1, heartbeat_interval=0.2, ack_timeout=0.3, **options):
        worker_id = f"test-{secrets.token_hex(4)}"
        self.worker = Worker(function_runner(train), slots=slots, worker_id=worker_id,
                             heartbeat_interval=heartbeat_interval, ack_timeout=ack_timeout,
                             **self.host.endpoints, **options)
        self.worker.start()
        hello = self.host.expect("WH")
        self.host.wait_subscribed(worker_id)
        return hello

    @property
    def wid(self):
        return self.worker.worker_id

    def expect_me(self, trial_id, sequence, type_="PERIODICAL", skip=("HB",)):
        return self.host.expect("ME", skip=skip, where=lambda b: b["trial_id"] == trial_id
                                and b["sequence"] == sequence and b["type"] == type_)

    def sync_events(self):
        """Returns once the worker processed every event sent so far: events
        to one worker arrive in order, and HR is answered with WH."""
        self.host.event(self.wid, "HR", {})
        return self.host.expect("WH", skip=("HB", "ME"))


class HelloHeartbeatTest(WorkerTestCase):
    def test_hello_then_heartbeats_then_bye(self):
        hello = self.start_worker(lambda config, reporter: None, slots=2, gpus=1, extra={"host": "n12"})
        self.assertEqual(hello.v, 1)
        self.assertEqual(hello.body["worker_id"], self.wid)
        self.assertEqual(hello.body["slots"], 2)
        self.assertEqual(hello.body["resources"], {"gpus": 1, "extra": {"host": "n12"}})
        self.assertEqual(hello.body["language"], "python")
        self.assertEqual(hello.body["version"], tunehost.__version__)
        self.assertEqual(hello.body["running"], [])
        self.assertEqual(hello.body["offers"], "addressed")
        self.assertEqual(hello.body["acks"], "spans")
        for _ in range(2):
            hb = self.host.expect("HB", skip=())
            self.assertEqual(hb.body, {"worker_id": self.wid, "free_slots": 2, "running": []})
        self.worker.stop()
        self.host.expect("WB", skip=("HB",))
        self.worker = None

    def test_default_worker_id_is_host_pid_random(self):
        import os
        import socket
        w = Worker(lambda handle: None)
        self.assertTrue(w.worker_id.startswith(f"{socket.gethostname()}-{os.getpid()}-"))
        self.assertNotEqual(w.worker_id, Worker(lambda handle: None).worker_id)
        self.assertEqual((w.jobs_endpoint, w.results_endpoint, w.events_endpoint),
                         ("tcp://127.0.0.1:5651", "tcp://127.0.0.1:5652", "tcp://127.0.0.1:5653"))
        self.assertEqual((w.heartbeat_interval, w.ack_timeout), (1.0, 1.0))

    def test_unusable_endpoint_fails_start(self):
        for name in ("jobs", "results", "events"):
            endpoints = dict(self.host.endpoints, **{name: "bogus://nowhere"})
            worker = Worker(lambda handle: None, **endpoints)
            with self.assertRaises(zmq.ZMQError, msg=name):
                worker.start()
            worker.stop()  # a no-op after a failed start

    def test_hello_request_resends_hello_with_running_trials(self):
        release = self.gate()

        def train(config, reporter):
            reporter(score=0.5)
            release.wait(WAIT)

        self.start_worker(train)
        self.host.offer("t1", attempt=3)
        self.host.expect("TS")
        self.host.ack(self.expect_me("t1", 0))
        hello = self.sync_events()
        self.assertEqual(hello.body["running"], [{"trial_id": "t1", "attempt": 3, "last_sequence": 0}])
        self.assertEqual(hello.body["slots"], 1)


class OfferTest(WorkerTestCase):
    def test_offers_started_until_full_then_rejected(self):
        release = self.gate()
        seen = {}

        def train(config, reporter):
            seen[reporter.trial_id] = (config, reporter.experiment_id, reporter.parameter_id,
                                       reporter.attempt, reporter.sequence_id)
            release.wait(WAIT)

        self.start_worker(train, slots=2)
        self.host.offer("t1", parameters={"lr": 0.1, "layers": 3}, sequence_id=4, parameter_id=9,
                        lease=(1 << 64) - 1)
        ts = self.host.expect("TS")
        self.assertEqual(ts.body, {"worker_id": self.wid, "trial_id": "t1", "attempt": 0,
                                   "lease": (1 << 64) - 1}, "TS echoes the offer's lease")
        self.host.offer("t2", attempt=1, parameter_id="h-2")
        ts = self.host.expect("TS")
        self.assertEqual((ts.body["trial_id"], ts.body["lease"]), ("t2", None))
        self.host.offer("t3")
        tj = self.host.expect("TJ")
        self.assertEqual(tj.body, {"worker_id": self.wid, "trial_id": "t3", "attempt": 0,
                                   "reason": "no free slot", "lease": None})

        hb = self.host.expect("HB", skip=())
        self.assertEqual(hb.body["free_slots"], 0)
        self.assertEqual(sorted(hb.body["running"], key=lambda r: r["trial_id"]),
                         [{"trial_id": "t1", "attempt": 0, "last_sequence": -1},
                          {"trial_id": "t2", "attempt": 1, "last_sequence": -1}])
        self.assertTrue(wait_for(lambda: len(seen) == 2))
        self.assertEqual(seen["t1"], ({"lr": 0.1, "layers": 3}, "exp1", 9, 0, 4))
        self.assertEqual(seen["t2"][2:4], ("h-2", 1))

        release.set()
        ends = [self.host.expect("EN"), self.host.expect("EN")]
        self.assertEqual(sorted(e.body["trial_id"] for e in ends), ["t1", "t2"])
        for e in ends:
            self.assertEqual(e.body["status"], "SUCCEEDED")
            self.assertEqual(e.body["error"], "")
            self.assertEqual(e.body["worker_id"], self.wid)
        # Nothing was reported, so no FINAL was made up.
        self.assertFalse([m for m in self.host.received if m.type == "ME"])
        self.host.offer("t4")
        self.assertEqual(self.host.expect("TS").body["trial_id"], "t4")

    def test_addressed_offers_on_the_events_topic_are_answered_like_jobs(self):
        # wire-format.md §5.2: the worker's WH says offers "addressed", and a
        # TR on its own events topic is an offer like one on the jobs socket.
        release = self.gate()
        started = []

        def train(config, reporter):
            started.append((reporter.trial_id, config))
            release.wait(WAIT)

        hello = self.start_worker(train, slots=1)
        self.assertEqual(hello.body["offers"], "addressed")
        job = {"experiment_id": "exp1", "trial_id": "a1", "sequence_id": 0, "attempt": 2,
               "parameter_id": 3, "parameter_source": "algorithm", "parameter_index": 0,
               "parameters": {"x": 2.5}, "lease": 77}
        self.host.event(self.wid, "TR", job)
        ts = self.host.expect("TS")
        self.assertEqual(ts.body, {"worker_id": self.wid, "trial_id": "a1", "attempt": 2,
                                   "lease": 77})
        self.host.event(self.wid, "TR", dict(job, trial_id="a2", lease=78))
        tj = self.host.expect("TJ")
        self.assertEqual((tj.body["trial_id"], tj.body["reason"], tj.body["lease"]),
                         ("a2", "no free slot", 78))
        # An offer for a worker whose id extends this one's is not ours.
        self.host.raw_event([f"worker.{self.wid}.x.".encode(),
                             tunehost.protocol.encode("TR", dict(job, trial_id="a3"), 99)])
        release.set()
        self.assertEqual(self.host.expect("EN").body["trial_id"], "a1")
        self.assertTrue(wait_for(lambda: started == [("a1", {"x": 2.5})]))
        self.assertFalse([m for m in self.host.received
                          if m.type in ("TS", "TJ") and m.body["trial_id"] == "a3"])

    def test_repeated_offer_for_running_trial_answered_ts_without_second_run(self):
        release = self.gate()
        runs = []

        def train(config, reporter):
            runs.append(reporter.trial_id)
            release.wait(WAIT)

        self.start_worker(train)
        self.host.offer("t1")
        self.host.expect("TS")
        self.host.offer("t1")
        self.host.expect("TS")
        release.set()
        self.host.expect("EN")
        self.assertEqual(runs, ["t1"])

    def test_bad_input_is_dropped_and_worker_keeps_serving(self):
        release = self.gate()

        def train(config, reporter):
            reporter(score=1.0)
            release.wait(WAIT)

        self.start_worker(train)
        self.host.send_raw_job(b"\xc1 not msgpack")
        self.host.send_raw_job(msgpack.packb({"v": 2, "type": "TR", "id": 1, "body": {}}))
        self.host.send_raw_job(msgpack.packb({"v": 1, "type": "XX", "id": 1, "body": {}}))
        self.host.raw_event([f"worker.{self.wid}.".encode(), b"garbage"])
        self.host.raw_event([f"worker.{self.wid}.".encode()])
        self.host.raw_event([b"worker.*", msgpack.packb({"v": 1, "type": "ZZ", "id": 1, "body": {}})])
        self.host.offer("t1")
        self.host.expect("TS")
        self.host.ack(self.expect_me("t1", 0))
        self.sync_events()


class ReporterTest(WorkerTestCase):
    def test_reporter_blocks_until_acknowledged_and_resends_same_sequence(self):
        returned = threading.Event()
        release = self.gate()

        def train(config, reporter):
            reporter(loss=0.5, phase="warmup")
            returned.set()
            release.wait(WAIT)
            reporter.report(0.25, final=True)

        self.start_worker(train, ack_timeout=0.2)
        self.host.offer("t1", parameter_id=11, attempt=2)
        self.host.expect("TS")
        first = self.expect_me("t1", 0)
        self.assertEqual(first.body, {"trial_id": "t1", "attempt": 2, "parameter_id": 11, "type": "PERIODICAL",
                                      "sequence": 0, "value": {"default": 0.5, "loss": 0.5, "phase": "warmup"},
                                      "worker_id": self.wid})
        self.assertFalse(returned.is_set(), "reporter returned before MA")
        # Acks that do not match (other sequence, other attempt, other trial) do not release it.
        self.host.event(self.wid, "MA", {"trial_id": "t1", "attempt": 2, "sequence": 1})
        self.host.event(self.wid, "MA", {"trial_id": "t1", "attempt": 1, "sequence": 0})
        self.host.event(self.wid, "MA", {"trial_id": "t9", "attempt": 2, "sequence": 0})
        self.sync_events()
        resent = self.expect_me("t1", 0)
        self.assertEqual(resent.body, first.body)
        self.assertNotEqual(resent.id, first.id)
        self.assertFalse(returned.is_set(), "reporter returned before MA")
        hb = self.host.expect("HB", skip=("ME",))
        self.assertEqual(hb.body["running"], [{"trial_id": "t1", "attempt": 2, "last_sequence": 0}])
        self.assertFalse(returned.is_set(), "reporter returned before MA")

        self.host.ack(first)
        self.assertTrue(returned.wait(WAIT), "reporter did not return after MA")
        release.set()
        final = self.expect_me("t1", 1, "FINAL", skip=("HB", "ME"))
        self.assertEqual(final.body["value"], 0.25)
        self.host.ack(final)
        end = self.host.expect("EN", skip=("HB", "ME"))
        self.assertEqual(end.body["status"], "SUCCEEDED")
        # The FINAL was sent before EN, and nothing after the PERIODICAL's ack but resends of it.
        kinds = [(m.body["type"], m.body["sequence"]) for m in self.host.received if m.type == "ME"]
        self.assertEqual(set(kinds), {("PERIODICAL", 0), ("FINAL", 1)})

    def test_an_ack_span_releases_every_sequence_it_covers_and_no_other(self):
        returned = threading.Event()

        def train(config, reporter):
            reporter.report(0.1)
            returned.set()
            reporter.report(0.2)

        self.start_worker(train, ack_timeout=30.0)
        self.host.offer("t1")
        self.host.expect("TS")
        self.expect_me("t1", 0)
        # Spans that start after the sequence, or stop before it (§5.2).
        self.host.event(self.wid, "MA", {"trial_id": "t1", "attempt": 0, "sequence": 1, "span": 9})
        self.host.event(self.wid, "MA", {"trial_id": "t1", "attempt": 1, "sequence": 0, "span": 9})
        self.sync_events()
        self.assertFalse(returned.is_set(), "a span that does not cover sequence 0 released it")
        self.host.event(self.wid, "MA", {"trial_id": "t1", "attempt": 0, "sequence": 0, "span": 2})
        self.assertTrue(returned.wait(WAIT), "a span covering sequence 0 did not release it")
        second = self.expect_me("t1", 1)
        self.host.event(self.wid, "MA", {"trial_id": "t1", "attempt": 0, "sequence": 1, "span": 1})
        final = self.expect_me("t1", 2, "FINAL", skip=("HB", "ME"))
        self.assertEqual(final.body["value"], 0.2)
        self.assertEqual(second.body["value"], 0.2)
        self.host.ack(final)
        self.assertEqual(self.host.expect("EN", skip=("HB", "ME")).body["status"], "SUCCEEDED")

    def test_return_without_final_sends_last_result_as_final_once(self):
        def train(config, reporter):
            reporter.report(0.1)
            reporter.report({"default": 0.2, "acc": 0.8})

        self.start_worker(train, ack_timeout=30.0)
        self.host.offer("t1")
        self.host.expect("TS")
        self.host.ack(self.expect_me("t1", 0))
        self.host.ack(self.expect_me("t1", 1))
        final = self.expect_me("t1", 2, "FINAL", skip=("HB",))
        self.assertEqual(final.body["value"], {"default": 0.2, "acc": 0.8})
        self.host.ack(final)
        end = self.host.expect("EN")
        self.assertEqual(end.body["status"], "SUCCEEDED")
        mes = [(m.body["type"], m.body["sequence"], m.body["value"]) for m in self.host.received if m.type == "ME"]
        self.assertEqual(mes, [("PERIODICAL", 0, 0.1), ("PERIODICAL", 1, {"default": 0.2, "acc": 0.8}),
                               ("FINAL", 2, {"default": 0.2, "acc": 0.8})])

    def test_done_and_returned_values_become_final_once(self):
        def train(config, reporter):
            if config["mode"] == "done":
                reporter(acc=0.7)
                reporter(acc=0.9, done=True)
            else:
                reporter(acc=0.7)
                return {"acc": 0.95}

        self.start_worker(train, ack_timeout=30.0)
        for trial_id, mode, final_value in (("t1", "done", 0.9), ("t2", "return", 0.95)):
            self.host.offer(trial_id, parameters={"mode": mode})
            self.host.expect("TS")
            self.host.ack(self.expect_me(trial_id, 0))
            final = self.expect_me(trial_id, 1, "FINAL")
            self.assertEqual(final.body["value"], {"default": final_value, "acc": final_value})
            self.host.ack(final)
            self.assertEqual(self.host.expect("EN").body["status"], "SUCCEEDED")
        finals = [m for m in self.host.received if m.type == "ME" and m.body["type"] == "FINAL"]
        self.assertEqual(len(finals), 2)

    def test_metric_keyword_rule(self):
        errors = []

        def train(config, reporter):
            reporter(default=1.5, loss=0.2)
            try:
                reporter(a=1, b=2)
            except ValueError as e:
                errors.append(str(e))
            try:
                reporter(name="only text")
            except ValueError as e:
                errors.append(str(e))
            try:
                reporter.report({"loss": True, "x": "y"})
            except ValueError as e:
                errors.append(str(e))
            try:
                reporter.report("text")
            except TypeError as e:
                errors.append(str(e))
            try:
                reporter(default=1.0, blob=object())
            except TypeError as e:
                errors.append(str(e))
            # Other numbers.Real types (NumPy scalars, here a Fraction) are sent as float.
            reporter(ratio=fractions.Fraction(1, 4))
            reporter.report(3, final=True)

        self.start_worker(train, ack_timeout=30.0)
        self.host.offer("t1")
        self.host.expect("TS")
        first = self.expect_me("t1", 0)
        self.assertEqual(first.body["value"], {"default": 1.5, "loss": 0.2})
        self.host.ack(first)
        second = self.expect_me("t1", 1)
        self.assertEqual(second.body["value"], {"default": 0.25, "ratio": 0.25})
        self.host.ack(second)
        final = self.expect_me("t1", 2, "FINAL")
        self.assertEqual(final.body["value"], 3)
        self.host.ack(final)
        self.assertEqual(self.host.expect("EN").body["status"], "SUCCEEDED")
        self.assertEqual(len(errors), 5, errors)
        self.assertIn("exactly one numeric metric", errors[0])

    def test_a_result_over_the_hosts_results_limit_raises_and_is_not_sent(self):
        errors = []
        big = {"default": 0.5, **{"k%d" % i: float(i) for i in range(300)}}

        def train(config, reporter):
            try:
                reporter.report(big)
            except ValueError as e:
                errors.append(str(e))
            reporter.report(0.25, final=True)

        self.start_worker(train, ack_timeout=30.0, max_result_bytes=2048)
        self.host.offer("t1")
        self.host.expect("TS")
        final = self.expect_me("t1", 0, "FINAL")
        self.assertEqual(final.body["value"], 0.25)
        self.host.ack(final)
        self.assertEqual(self.host.expect("EN").body["status"], "SUCCEEDED")
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("over the host's results limit of 2048 bytes", errors[0])
        sent = [m for m in self.host.received if m.type == "ME"]
        self.assertEqual(len(sent), 1, "the large result was sent")

    def test_iteration_and_time_per_iteration(self):
        records = []

        def train(config, reporter):
            for i in range(3):
                time.sleep(0.05)  # the "work" whose duration is measured
                reporter(step=i)
                records.append((reporter.iteration, reporter.time_this_iter_s, reporter.time_total_s))

        self.start_worker(train, ack_timeout=30.0)
        self.host.offer("t1")
        self.host.expect("TS")
        for seq in range(3):
            self.host.ack(self.expect_me("t1", seq))
        self.host.ack(self.expect_me("t1", 3, "FINAL"))
        self.host.expect("EN")
        self.assertEqual([r[0] for r in records], [1, 2, 3])
        for _, this_iter, _ in records:
            self.assertGreaterEqual(this_iter, 0.045)
        totals = [r[2] for r in records]
        self.assertEqual(totals, sorted(totals))
        self.assertGreaterEqual(totals[-1], 0.14)


class StopTest(WorkerTestCase):
    def _killable_trial(self):
        """A train that reports, waits for the test, then reports again."""
        state = {"stopped": None, "reporter": None}
        resume = self.gate()

        def train(config, reporter):
            state["reporter"] = reporter
            reporter(score=1.0)
            resume.wait(WAIT)
            try:
                reporter(score=2.0)
            except tunehost.TrialStopped as e:
                state["stopped"] = e
                raise
            state["stopped"] = False

        return train, state, resume

    def test_kill_makes_next_report_raise_and_ends_user_canceled(self):
        train, state, resume = self._killable_trial()
        self.start_worker(train)
        self.host.offer("t1", attempt=1)
        self.host.expect("TS")
        self.host.ack(self.expect_me("t1", 0))
        self.assertTrue(wait_for(lambda: state["reporter"] is not None and state["reporter"].iteration == 1))
        # KI for another attempt or another trial is ignored.
        self.host.kill(self.wid, "t1", attempt=0)
        self.host.kill(self.wid, "t2", attempt=1)
        self.sync_events()
        self.assertFalse(state["reporter"].should_stop)
        self.host.kill(self.wid, "t1", attempt=1, reason="user")
        self.assertTrue(wait_for(lambda: state["reporter"].should_stop))
        resume.set()
        end = self.host.expect("EN")
        self.assertEqual(end.body, {"trial_id": "t1", "attempt": 1, "status": "USER_CANCELED", "error": "",
                                    "worker_id": self.wid})
        self.assertIsInstance(state["stopped"], tunehost.TrialStopped)
        # The report after KI sent nothing.
        self.assertEqual([m.body["sequence"] for m in self.host.received if m.type == "ME"], [0])

    def test_assessor_kill_while_waiting_for_ack_ends_early_stopped(self):
        stopped = []

        def train(config, reporter):
            try:
                reporter(score=1.0)
            except tunehost.TrialStopped:
                stopped.append(True)
                raise

        self.start_worker(train, ack_timeout=30.0)
        self.host.offer("t1")
        self.host.expect("TS")
        self.expect_me("t1", 0)
        self.host.kill(self.wid, "t1", reason="assessor")
        end = self.host.expect("EN")
        self.assertEqual(end.body["status"], "EARLY_STOPPED")
        self.assertEqual(stopped, [True])

    def test_exception_fails_trial_with_traceback(self):
        def deep_helper():
            raise ValueError("boom-42")

        def train(config, reporter):
            reporter(score=1.0)
            deep_helper()

        self.start_worker(train, ack_timeout=30.0)
        self.host.offer("t1")
        self.host.expect("TS")
        self.host.ack(self.expect_me("t1", 0))
        end = self.host.expect("EN")
        self.assertEqual(end.body["status"], "FAILED")
        error = end.body["error"]
        self.assertIn("Traceback (most recent call last)", error)
        self.assertIn("deep_helper", error)
        self.assertIn("ValueError: boom-42", error)
        # A failed trial's last result is not turned into a FINAL.
        self.assertEqual([m.body["type"] for m in self.host.received if m.type == "ME"], ["PERIODICAL"])

    def test_stop_leaves_running_trials_to_the_host_and_says_bye(self):
        stopped = []

        def train(config, reporter):
            try:
                reporter(score=1.0)
            except tunehost.TrialStopped:
                stopped.append(True)
                raise

        self.start_worker(train, ack_timeout=30.0)
        self.host.offer("t1")
        self.host.expect("TS")
        self.expect_me("t1", 0)
        self.worker.stop(grace=WAIT)
        self.worker = None
        # No EN: the trial did not end (wire-format.md §5.3 item 8); any
        # message but HB before the WB fails expect().
        self.host.expect("WB")
        self.assertEqual(stopped, [True])


class WhereAmITest(unittest.TestCase):
    def test_a_worker_says_which_cluster_job_it_is(self):
        from tunehost.worker import where_am_i
        self.assertEqual(set(where_am_i({})), {"host"})
        e = where_am_i({"SLURM_ARRAY_JOB_ID": "12", "SLURM_ARRAY_TASK_ID": "3", "SLURM_JOB_ID": "15"})
        self.assertEqual(e["slurm_job"], "12_3")
        self.assertEqual(where_am_i({"SLURM_JOB_ID": "15"})["slurm_job"], "15")
        e = where_am_i({"JOB_COMPLETION_INDEX": "4", "HOSTNAME": "hpo-4-x7"})
        self.assertEqual((e["k8s_pod"], e["k8s_index"]), ("hpo-4-x7", "4"))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    unittest.main()
