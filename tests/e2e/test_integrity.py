"""Integrity under worker and host faults, end to end: a real `tunehost run`
host with its SQLite store, workers played message by message by the test
(fake_worker.FakeWorker), and the rules of wire-format.md §5.3:

- a trial's metrics are those of its current attempt; earlier attempts' rows
  are kept in the store, marked superseded, and never reach MT or plugins;
- a trial whose FINAL was accepted is never run again;
- after a host restart, an offer that was out is never run with the same
  attempt by another worker;
- trials a client runs itself (GE) are part of the experiment: it is not
  DONE while one runs, and they count against maxTrialNumber.
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
from fake_worker import FakeWorker
from harness import wait_for
from tunehost import keys as tunehost_keys
from tunehost import protocol


class RunHost:
    """`tunehost run EXPERIMENT --local-workers 0` (or resume) in a temp dir."""

    def __init__(self, max_trials, concurrency=1, exp_id="integrity", trial_command=None,
                 control_keys=None, prefetch=0):
        self.tmp = tempfile.mkdtemp(prefix="tunehost-integrity-")
        self.workdir = os.path.join(self.tmp, "wd")
        self.id = exp_id
        self.dir = os.path.join(self.workdir, exp_id)
        self.config = os.path.join(self.tmp, "experiment.yaml")
        with open(self.config, "w") as f:
            f.write(textwrap.dedent("""
                searchSpace:
                  x: {_type: uniform, _value: [0, 1]}
                trialCommand: %s
                trialCodeDirectory: %s
                experimentWorkingDirectory: %s
                trialConcurrency: %d
                maxTrialNumber: %d
                tuner: {name: random, classArgs: {seed: 3}}
                tunehost: {heartbeatIntervalMs: 200, ackTimeoutMs: 1000, prefetch: %d}
                """ % (trial_command or "true", self.tmp, self.workdir, concurrency,
                       max_trials, prefetch)))
        self.summary = os.path.join(self.tmp, "summary.json")
        self.proc = None
        self.ctx = zmq.Context()
        self.control = None
        self.control_keys = control_keys  # a tunehost.keys.ClientKeys for a host with --keys

    def start(self, command, *extra, env=None):
        if command == "run":
            args = [harness.TUNEHOST, "run", self.config, "--id", self.id]
        else:
            args = [harness.TUNEHOST, "resume", self.id, "--workdir", self.workdir]
        args += ["--plugins", harness.PLUGIN_DIR, "--summary-json", self.summary]
        args += list(extra)
        self.log = open(os.path.join(self.tmp, "host-%d.log" % time.monotonic_ns()), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **(env or {})))
        endpoints = self.host_file()
        if self.control is not None:
            self.control.close()
        self.control = self.ctx.socket(zmq.DEALER)
        self.control.setsockopt(zmq.LINGER, 0)
        tunehost_keys.apply(self.control, self.control_keys)
        self.control.connect(endpoints["control"])
        return endpoints

    def host_file(self):
        """host.json once the current process wrote it."""
        return harness.host_file(self.dir, self.proc.pid)

    def request(self, type_code, body, timeout=10):
        msg_id = int(time.monotonic_ns() % 1000000000)
        self.control.send(protocol.encode(type_code, body, msg_id))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.control.poll(int(left * 1000)):
                raise AssertionError("no reply to %s" % type_code)
            reply = protocol.decode(self.control.recv())
            if reply.id == msg_id:
                return reply

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout=60):
        return self.proc.wait(timeout)

    def output(self):
        self.log.flush()
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def db(self):
        return sqlite3.connect("file:%s?mode=ro" % os.path.join(self.dir, "store.db"), uri=True)

    def journaled_trials(self):
        """The trial rows in the store's offer journal that no commit covered
        (host/src/offer_journal.h: 4-byte little-endian lengths, each a
        MessagePack [seq, trial row, events]; a length of 0 ends them), as
        (trial_id, attempt, parameters)."""
        with self.db() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'offer_journal_seq'").fetchone()
        committed = int(row[0]) if row else 0
        with open(os.path.join(self.dir, "store.db-offers"), "rb") as f:
            data = f.read()
        out, at = [], 0
        while at + 4 <= len(data):
            n = int.from_bytes(data[at:at + 4], "little")
            if n == 0:
                break
            seq, trial, _events = msgpack.unpackb(data[at + 4:at + 4 + n], raw=True)
            if seq > committed:
                out.append((trial[0].decode(), trial[7], trial[4]))
            at += 4 + n
        return out

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
        if self.control is not None:
            self.control.close()
        self.ctx.term()


class IntegrityTest(unittest.TestCase):
    def setUp(self):
        self.workers = []
        self.host = None

    def tearDown(self):
        for w in self.workers:
            w.close()
        if self.host is not None:
            self.host.close()

    def worker(self, endpoints, worker_id):
        w = FakeWorker(endpoints, worker_id)
        self.workers.append(w)
        w.hello()
        return w

    def test_a_reoffered_trial_keeps_only_its_current_attempts_metrics(self):
        self.host = host = RunHost(max_trials=1)
        endpoints = host.start("run", "--local-workers", "0")
        a = self.worker(endpoints, "a")
        first = a.next_offer(20)
        self.assertIsNotNone(first, host.output())
        self.assertEqual(first["attempt"], 0)
        a.start(first)
        a.metric_acked(first, 0, 0.1)
        a.metric_acked(first, 1, 0.2)
        # a dies (goes silent); b gets the trial again as attempt 1 and
        # reports from sequence 0 again.
        a.stop_taking_jobs()
        b = self.worker(endpoints, "b")
        second = b.next_offer(20)
        self.assertIsNotNone(second, host.output())
        self.assertEqual((second["trial_id"], second["attempt"]), (first["trial_id"], 1))
        b.start(second)
        b.metric_acked(second, 0, 0.7)
        a.metric(first, 2, 0.3)  # the dead attempt's late result: acked, never counted
        wait_for(lambda: a.poll_events(100) or (first["trial_id"], 0, 2) in a.acks, 20,
                 "the late result's ack")
        reply = host.request("MT", {"trial_id": first["trial_id"]})
        self.assertEqual(reply.type, "ok", reply.body)
        values = [(m["sequence"], m["value"]) for m in reply.body["data"]["metrics"]]
        self.assertEqual(values, [(0, 0.7)], "MT shows only the current attempt")
        b.metric_acked(second, 1, 0.8, kind="FINAL")
        b.end(second)
        self.assertEqual(host.wait(60), 0, host.output())
        with host.db() as db:
            rows = db.execute("SELECT attempt, type, sequence, scalar, superseded FROM metrics "
                              "ORDER BY attempt, type, sequence").fetchall()
        self.assertEqual(rows, [(0, "PERIODICAL", 0, 0.1, 1), (0, "PERIODICAL", 1, 0.2, 1),
                                (1, "FINAL", 1, 0.8, 0), (1, "PERIODICAL", 0, 0.7, 0)])
        with open(host.summary) as f:
            trial = json.load(f)["trials"][0]
        self.assertEqual((trial["status"], trial["final_metric"]), ("SUCCEEDED", 0.8))

    def test_a_worker_that_dies_after_its_final_was_acknowledged_causes_no_rerun(self):
        self.host = host = RunHost(max_trials=1)
        endpoints = host.start("run", "--local-workers", "0")
        a = self.worker(endpoints, "a")
        job = a.next_offer(20)
        self.assertIsNotNone(job, host.output())
        a.start(job)
        a.metric_acked(job, 0, 0.5, kind="FINAL")
        # a dies before its EN; b stands by and must not get the trial again.
        b = self.worker(endpoints, "b")
        self.assertIsNone(b.next_offer(3), "the trial ran again")
        self.assertEqual(host.wait(30), 0, host.output())
        with host.db() as db:
            status, attempt = db.execute("SELECT status, attempt FROM trials").fetchone()
            events = [r[0] for r in db.execute("SELECT event FROM trial_events ORDER BY id")]
        self.assertEqual((status, attempt), ("SUCCEEDED", 0))
        self.assertNotIn("requeued", events)

    def test_an_offer_out_when_the_host_died_comes_back_as_a_new_attempt(self):
        self.host = host = RunHost(max_trials=1)
        endpoints = host.start("run", "--local-workers", "0")
        a = self.worker(endpoints, "a")
        held = a.next_offer(20)
        self.assertIsNotNone(held, host.output())
        self.assertEqual(held["attempt"], 0)

        def stored():
            with host.db() as db:
                return db.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 1
        wait_for(stored, 20, "the trial in the store")
        host.kill()  # a holds the offer, unanswered
        a.stop_taking_jobs()  # the resumed host cannot offer a anything
        host.start("resume", "--local-workers", "0", "--reattach-grace-ms", "200")
        b = self.worker(endpoints, "b")
        again = b.next_offer(20)
        self.assertIsNotNone(again, host.output())
        self.assertEqual(again["trial_id"], held["trial_id"])
        self.assertGreaterEqual(again["attempt"], 1, "the same attempt went to a second worker")
        b.start(again)
        # a starts the offer it held, late, and reports a result for it.
        a.heartbeat()
        a.start(held)
        a.metric_acked(held, 0, 0.999)

        def killed():
            # Events are best effort: the worker's heartbeats list the trial
            # until it hears the KI (the host repeats it for every one).
            a.heartbeat()
            a.poll_events(100)
            return any(k["trial_id"] == held["trial_id"] and k["attempt"] == 0 for k in a.kills)
        wait_for(killed, 20, "KI superseded for the old attempt")
        self.assertEqual(a.kills[0]["reason"], "superseded")
        b.metric_acked(again, 0, 0.5)
        b.metric_acked(again, 1, 0.6, kind="FINAL")
        b.end(again)
        self.assertEqual(host.wait(30), 0, host.output())
        with host.db() as db:
            started = db.execute("SELECT worker_id, attempt FROM trial_events "
                                 "WHERE event = 'started'").fetchall()
            current = db.execute("SELECT type, sequence, scalar FROM metrics WHERE superseded = 0 "
                                 "ORDER BY type, sequence").fetchall()
        self.assertEqual(started, [("b", again["attempt"])],
                         "one worker ran the trial, with a new attempt")
        self.assertEqual(current, [("FINAL", 1, 0.6), ("PERIODICAL", 0, 0.5)],
                         "the old attempt's result is not the trial's")

    def test_a_host_killed_right_after_an_offer_had_stored_the_offered_attempt(self):
        # The failpoint kills the host just after its first offer left, in the
        # loop turn that created the trial: the offer must not be ahead of
        # the store (its database or its offer journal), or a resume reuses
        # the trial id for other parameters.
        self.host = host = RunHost(max_trials=1)
        endpoints = host.start("run", "--local-workers", "0",
                               env={"TUNEHOST_FAILPOINT": "kill-after-offers:1"})
        a = self.worker(endpoints, "a")
        held = a.next_offer(20)  # None when the host died before it was delivered
        self.assertEqual(host.wait(20), -signal.SIGKILL, host.output())
        # The offer left before the turn's commit: its trial is in the store's
        # offer journal (a commit may have followed before the kill).
        with host.db() as db:
            rows = db.execute("SELECT trial_id, attempt, parameters FROM trials").fetchall()
        rows = rows or host.journaled_trials()
        self.assertEqual(len(rows), 1, "the offered trial is neither stored nor journaled")
        stored_id, stored_attempt, stored_params = rows[0]
        if held is not None:
            self.assertEqual((held["trial_id"], held["attempt"]), (stored_id, stored_attempt))
            self.assertEqual(held["parameters"], msgpack.unpackb(stored_params, raw=False))
        a.stop_taking_jobs()
        host.start("resume", "--local-workers", "0", "--reattach-grace-ms", "200")
        b = self.worker(endpoints, "b")
        again = b.next_offer(20)
        self.assertIsNotNone(again, host.output())
        self.assertEqual(again["trial_id"], stored_id)
        self.assertGreater(again["attempt"], stored_attempt, "an attempt that was out ran again")
        self.assertEqual(again["parameters"], msgpack.unpackb(stored_params, raw=False))
        b.start(again)
        b.metric_acked(again, 0, 0.5, kind="FINAL")
        b.end(again)
        self.assertEqual(host.wait(30), 0, host.output())
        with host.db() as db:
            self.assertEqual(db.execute("SELECT COUNT(*) FROM trials").fetchone()[0], 1)

    def test_a_prefetched_offer_leaves_before_the_ended_trial_is_committed_and_loses_nothing(self):
        # prefetch 1: the second trial is made and committed with the first,
        # so when the first ends its worker is offered the second at once,
        # before the loop turn's commit of that end. The failpoint kills the
        # host right after that offer: the end was not stored, the FINAL was
        # (it was acknowledged), so the resumed host ends the first trial
        # SUCCEEDED without running it again, and the offer that was out
        # comes back as a new attempt.
        self.host = host = RunHost(max_trials=3, prefetch=1)
        endpoints = host.start("run", "--local-workers", "0",
                               env={"TUNEHOST_FAILPOINT": "kill-after-offers:2"})
        a = self.worker(endpoints, "a")
        first = a.next_offer(20)
        self.assertIsNotNone(first, host.output())
        made = []

        def made_ahead():
            # The first trial is offered as soon as a says hello; the one
            # made ahead follows from the tuner a moment later.
            with host.db() as db:
                made[:] = db.execute("SELECT trial_id, attempt FROM trials "
                                     "ORDER BY sequence_id").fetchall()
            return len(made) == 2
        wait_for(made_ahead, 20, "one trial made ahead of the offered one")
        a.start(first)
        a.metric_acked(first, 0, 0.25, kind="FINAL")
        a.end(first)
        held = a.next_offer(20)  # None when the host died before it was delivered
        self.assertEqual(host.wait(20), -signal.SIGKILL, host.output())
        if held is not None:
            self.assertEqual((held["trial_id"], held["attempt"]), made[1])
        with host.db() as db:
            status, ended = db.execute("SELECT status, ended FROM trials WHERE trial_id = ?",
                                       (first["trial_id"],)).fetchone()
        self.assertEqual((status, ended), (None, 0), "the end is committed after the offer")
        a.stop_taking_jobs()
        host.start("resume", "--local-workers", "0", "--reattach-grace-ms", "200")
        b = self.worker(endpoints, "b")
        ran = []
        while True:
            job = b.next_offer(20)
            if job is None:
                break
            ran.append((job["trial_id"], job["attempt"]))
            b.start(job)
            b.metric_acked(job, 0, 0.5, kind="FINAL")
            b.end(job)
            if len(ran) == 2:
                break
        self.assertEqual(host.wait(30), 0, host.output())
        self.assertEqual(len(ran), 2, host.output())
        self.assertNotIn(first["trial_id"], [t for t, _ in ran], "the ended trial ran again")
        self.assertEqual(ran[0][0], made[1][0])
        self.assertGreater(ran[0][1], made[1][1], "the attempt that was out ran again")
        with open(host.summary) as f:
            trials = json.load(f)["trials"]
        by_id = {t["trial_id"]: t for t in trials}
        self.assertEqual(len(trials), 3)
        self.assertEqual((by_id[first["trial_id"]]["status"],
                          by_id[first["trial_id"]]["final_metric"]), ("SUCCEEDED", 0.25))
        self.assertEqual(sorted(t["status"] for t in trials), ["SUCCEEDED"] * 3)

    def test_client_trials_keep_a_run_from_done_and_count_against_the_budget(self):
        self.host = host = RunHost(max_trials=3)
        endpoints = host.start("run", "--local-workers", "0")
        reply = host.request("GE", {"count": 2})
        self.assertEqual(reply.type, "ok", reply.body)
        trials = reply.body["data"]["trials"]
        self.assertEqual(len(trials), 2)
        self.assertEqual({t["parameter_source"] for t in trials}, {"external"})
        w = self.worker(endpoints, "w")
        job = w.next_offer(20)
        self.assertIsNotNone(job, host.output())
        w.start(job)
        w.metric_acked(job, 0, 1.0, kind="FINAL")
        w.end(job)

        def succeeded():
            counts = host.request("JS", {}).body["data"]["counts"]
            return counts.get("SUCCEEDED") == 1
        wait_for(succeeded, 20, "the worker's trial to end")
        # Every worker trial ended; the client's still run: not DONE.
        self.assertEqual(host.request("ST", {}).body["data"]["status"], "NO_MORE_TRIAL")
        self.assertIsNone(host.proc.poll(), "the run ended while client trials ran")
        reply = host.request("GE", {"count": 4})
        self.assertEqual(reply.type, "ok", reply.body)
        self.assertEqual(reply.body["data"]["trials"], [], "the budget is used up")
        self.assertTrue(reply.body["data"]["no_more"])
        for t in trials:
            reply = host.request("EN", {"trial_id": t["trial_id"], "attempt": 0,
                                        "status": "SUCCEEDED", "error": "", "worker_id": ""})
            self.assertEqual(reply.type, "ok", reply.body)
        self.assertEqual(host.wait(30), 0, host.output())
        with host.db() as db:
            states = [r[0] for r in db.execute("SELECT state FROM trials")]
        self.assertEqual(states, ["ENDED"] * 3)
        host.log.close()


if __name__ == "__main__":
    unittest.main()
