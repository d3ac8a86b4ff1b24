"""A fake tunehost host made of real ZeroMQ sockets, for worker tests.

It binds the three worker-facing sockets on tcp://127.0.0.1 random ports:
jobs PUSH, results PULL and events XPUB (an XPUB is a PUB that also reports
subscriptions, so a test can wait until the worker's SUB is subscribed
instead of sleeping past ZeroMQ's slow-joiner window).

With ``server_secret`` (Z85 bytes) the three sockets are CURVE servers, as
those of a host started with ``--keys``; ``ctx`` then lets the caller run a
ZAP authenticator on the same context to choose which client keys get in.
"""

import time

import zmq

from tunehost import protocol

DEFAULT_TIMEOUT = 5.0


class FakeHost:
    def __init__(self, server_secret=None, ctx=None):
        self._own_ctx = ctx is None
        self.ctx = zmq.Context() if ctx is None else ctx
        self.jobs = self.ctx.socket(zmq.PUSH)
        self.jobs.setsockopt(zmq.SNDTIMEO, int(DEFAULT_TIMEOUT * 1000))
        self.results = self.ctx.socket(zmq.PULL)
        self.events = self.ctx.socket(zmq.XPUB)
        self.events.setsockopt(zmq.XPUB_VERBOSE, 1)
        for s in (self.jobs, self.results, self.events):
            s.setsockopt(zmq.LINGER, 0)
            if server_secret is not None:
                s.setsockopt(zmq.CURVE_SERVER, 1)
                s.setsockopt(zmq.CURVE_SECRETKEY, server_secret)
        base = "tcp://127.0.0.1"
        self.endpoints = {
            "jobs": f"{base}:{self.jobs.bind_to_random_port(base)}",
            "results": f"{base}:{self.results.bind_to_random_port(base)}",
            "events": f"{base}:{self.events.bind_to_random_port(base)}",
        }
        self.subscriptions = set()
        self.received = []  # every message read from results, in order
        self._next_id = 1

    def close(self):
        for s in (self.jobs, self.results, self.events):
            s.close(0)
        if self._own_ctx:
            self.ctx.term()

    # ----- host -> worker -----

    def _id(self):
        self._next_id += 1
        return self._next_id - 1

    def offer(self, trial_id, attempt=0, parameters=None, sequence_id=0, parameter_id=7,
              experiment_id="exp1", source="algorithm", lease=None):
        body = {"experiment_id": experiment_id, "trial_id": trial_id, "sequence_id": sequence_id,
                "attempt": attempt, "parameter_id": parameter_id, "parameter_source": source,
                "parameter_index": 0,
                "parameters": parameters if parameters is not None else {"x": 1.5},
                "lease": lease}
        self.jobs.send(protocol.encode("TR", body, self._id()))
        return body

    def send_raw_job(self, data):
        self.jobs.send(data)

    def event(self, worker_id, type_code, body):
        self.events.send_multipart([f"worker.{worker_id}.".encode(), protocol.encode(type_code, body, self._id())])

    def raw_event(self, frames):
        self.events.send_multipart(frames)

    def ack(self, me):
        b = me.body
        self.event(b["worker_id"], "MA", {"trial_id": b["trial_id"], "attempt": b["attempt"],
                                          "sequence": b["sequence"]})

    def kill(self, worker_id, trial_id, attempt=0, reason="user"):
        self.event(worker_id, "KI", {"trial_id": trial_id, "attempt": attempt, "reason": reason})

    # ----- waiting -----

    def wait_subscribed(self, worker_id, timeout=DEFAULT_TIMEOUT):
        """Returns once the worker's SUB subscribed to its own topic and to worker.*."""
        wanted = {f"worker.{worker_id}.".encode(), b"worker.*"}
        deadline = time.monotonic() + timeout
        while not wanted <= self.subscriptions:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.events.poll(int(remaining * 1000) + 1):
                raise AssertionError(f"worker {worker_id} did not subscribe; saw {self.subscriptions}")
            frame = self.events.recv()
            if frame[:1] == b"\x01":
                self.subscriptions.add(frame[1:])

    def next_message(self, timeout=DEFAULT_TIMEOUT):
        """The next message on results, or None when none arrived in time."""
        if not self.results.poll(int(timeout * 1000)):
            return None
        msg = protocol.decode(self.results.recv())
        self.received.append(msg)
        return msg

    def expect(self, type_code, timeout=DEFAULT_TIMEOUT, skip=("HB",), where=None):
        """Waits for the next message of type_code.

        Messages whose type is in ``skip`` (and, for ``where``, messages of
        type_code failing the predicate) are passed over; any other message
        fails the test, so nothing unexpected slips by.
        """
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            msg = self.next_message(max(0.0, remaining)) if remaining > 0 else None
            if msg is None:
                raise AssertionError(f"no {type_code} within {timeout}s")
            if msg.type == type_code and (where is None or where(msg.body)):
                return msg
            if msg.type in skip or (msg.type == type_code and where is not None):
                continue
            raise AssertionError(f"expected {type_code}, got {msg.type} {msg.body}")
