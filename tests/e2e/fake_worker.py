"""A worker played by a test, message by message (wire-format.md §5).

Unlike tunehost-worker it does only what the test tells it: it can hold an
offer without answering, report results of any attempt, or go silent as a
worker that died. Every acknowledgement it receives is recorded.
"""
import time

import zmq

from tunehost import keys as tunehost_keys
from tunehost import protocol


class FakeWorker:
    def __init__(self, endpoints, worker_id, slots=1, keys=None):
        self.id = worker_id
        self.slots = slots
        self.ctx = zmq.Context()
        self.jobs = self.ctx.socket(zmq.PULL)
        self.jobs.setsockopt(zmq.RCVHWM, 1)
        self.results = self.ctx.socket(zmq.PUSH)
        self.events = self.ctx.socket(zmq.SUB)
        for s in (self.jobs, self.results, self.events):
            s.setsockopt(zmq.LINGER, 0)
            tunehost_keys.apply(s, keys)  # a tunehost.keys.ClientKeys or None
        self.events.setsockopt(zmq.SUBSCRIBE, ("worker.%s." % worker_id).encode())
        self.jobs.connect(endpoints["jobs"])
        self.results.connect(endpoints["results"])
        self.events.connect(endpoints["events"])
        self.msg_id = 0
        self.acks = set()     # (trial_id, attempt, sequence)
        self.kills = []       # KillTrialJob bodies
        self.hello_requests = 0
        self.running = []     # RunningTrial dicts announced in WH/HB

    def send(self, type_code, body):
        self.msg_id += 1
        self.results.send(protocol.encode(type_code, body, self.msg_id))

    def hello(self):
        self.send("WH", {"worker_id": self.id, "slots": self.slots,
                         "resources": {"gpus": 0, "extra": {}}, "language": "python-test",
                         "version": "1", "running": self.running})

    def heartbeat(self):
        free = max(0, self.slots - len(self.running))
        self.send("HB", {"worker_id": self.id, "free_slots": free, "running": self.running})

    def poll_events(self, timeout_ms=0):
        while self.events.poll(timeout_ms):
            timeout_ms = 0
            _, payload = self.events.recv_multipart()
            m = protocol.decode(payload)
            if m.type == "MA":
                self.acks.add((m.body["trial_id"], m.body["attempt"], m.body["sequence"]))
            elif m.type == "KI":
                self.kills.append(m.body)
            elif m.type == "HR":
                self.hello_requests += 1
                self.hello()

    def next_offer(self, timeout_s, heartbeat_s=0.1):
        """Waits for one TR, heartbeating meanwhile; returns its body or None."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.heartbeat()
            self.poll_events()
            if self.jobs.poll(int(heartbeat_s * 1000)):
                return protocol.decode(self.jobs.recv()).body
        return None

    def start(self, job, lease="echo"):
        """TS for `job`, echoing its lease (`lease`: another value to send
        instead, for the tests)."""
        self.send("TS", {"worker_id": self.id, "trial_id": job["trial_id"],
                         "attempt": job["attempt"],
                         "lease": job.get("lease") if lease == "echo" else lease})
        self.running.append({"trial_id": job["trial_id"], "attempt": job["attempt"],
                             "last_sequence": -1})

    def metric(self, job, sequence, value, kind="PERIODICAL", as_worker=None):
        """`as_worker`: the worker_id to claim (a forgery, for the tests)."""
        self.send("ME", {"trial_id": job["trial_id"], "attempt": job["attempt"],
                         "parameter_id": job["parameter_id"], "type": kind,
                         "sequence": sequence, "value": value,
                         "worker_id": as_worker or self.id})

    def metric_acked(self, job, sequence, value, kind="PERIODICAL", timeout_s=20):
        """Sends a result until the host acknowledges it (§5.3 item 4)."""
        key = (job["trial_id"], job["attempt"], sequence)
        deadline = time.monotonic() + timeout_s
        while key not in self.acks:
            if time.monotonic() > deadline:
                raise AssertionError("no MA for %s" % (key,))
            self.metric(job, sequence, value, kind)
            self.poll_events(200)
        return key

    def end(self, job, status="SUCCEEDED", error=""):
        self.send("EN", {"trial_id": job["trial_id"], "attempt": job["attempt"],
                         "status": status, "error": error, "worker_id": self.id})
        self.running = [r for r in self.running
                        if (r["trial_id"], r["attempt"]) != (job["trial_id"], job["attempt"])]

    def stop_taking_jobs(self):
        """Disconnects the jobs socket, as a worker that died or hangs does
        for the host's PUSH (a stopped process's kernel buffers still fill)."""
        self.jobs.close()

    def close(self):
        for s in (self.jobs, self.results, self.events):
            if not s.closed:
                s.close()
        self.ctx.term()
