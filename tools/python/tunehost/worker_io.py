"""The Python worker's I/O thread (``tunehost-io``, see :mod:`tunehost.worker`):
the results ``PUSH`` and events ``SUB`` it owns, the heartbeat timer and the
unacknowledged ``ME`` table; wire-format.md §5."""

import collections
import logging
import os
import queue
import time

import zmq

from tunehost import protocol

log = logging.getLogger("tunehost.worker")

# The topic every worker subscribes to besides its own (wire-format.md §5.2).
BROADCAST_TOPIC = b"worker.*"


class IoLoop:
    """The I/O thread's state: owned by that thread alone."""

    def __init__(self, worker, push, sub):
        self.w = worker
        self.push = push
        self.sub = sub
        self.next_id = 1
        self.backlog = collections.deque()  # encoded messages the PUSH could not take yet
        self.unacked = {}  # (trial_id, attempt, sequence) -> [pending, resend deadline]

    def send(self, type_code, body):
        try:
            data = protocol.encode(type_code, body, self.next_id)
        except protocol.ProtocolError as e:
            log.error("cannot encode %s, not sent: %s", type_code, e)
            return
        self.next_id += 1
        if not self.backlog:
            try:
                self.push.send(data, zmq.NOBLOCK)
                return
            except zmq.Again:
                pass
        self.backlog.append(data)

    def flush_backlog(self):
        while self.backlog:
            try:
                self.push.send(self.backlog[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            self.backlog.popleft()

    def send_hello(self):
        w = self.w
        self.send("WH", {"worker_id": w.worker_id, "slots": w.slots, "resources": w.resources,
                         "language": w.language, "version": w.version, "running": w.running_trials(),
                         "offers": "addressed", "acks": "spans"})

    def send_heartbeat(self):
        w = self.w
        with w._lock:
            free = max(0, w.slots - len(w._trials))
        self.send("HB", {"worker_id": w.worker_id, "free_slots": free, "running": w.running_trials()})

    def loop(self):
        w = self.w
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        poller.register(w._wake_r, zmq.POLLIN)
        poller.register(w._stop_r, zmq.POLLIN)
        next_heartbeat = time.monotonic() + w.heartbeat_interval
        while True:
            poller.register(self.push, zmq.POLLOUT if self.backlog else 0)
            due = min([next_heartbeat] + [entry[1] for entry in self.unacked.values()])
            timeout_ms = max(0, int((due - time.monotonic()) * 1000) + 1)
            ready = dict(poller.poll(timeout_ms))
            if w._wake_r in ready:
                try:
                    while os.read(w._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            self.run_commands()
            if self.sub in ready:
                self.read_events()
            now = time.monotonic()
            if now >= next_heartbeat:
                if not self.backlog:
                    self.send_heartbeat()
                next_heartbeat += w.heartbeat_interval
                if next_heartbeat <= now:
                    next_heartbeat = now + w.heartbeat_interval
            if not self.backlog:
                for entry in self.unacked.values():
                    if entry[1] <= now:
                        log.debug("resending ME %s", entry[0].key)
                        self.send("ME", entry[0].body)
                        entry[1] = now + w.ack_timeout
            self.flush_backlog()
            if w._stop_r in ready:
                self.shutdown()
                return

    def run_commands(self):
        w = self.w
        while True:
            try:
                command = w._commands.get_nowait()
            except queue.Empty:
                return
            kind = command[0]
            if kind == "send":
                self.send(command[1], command[2])
            elif kind == "started":
                handle = command[1]
                self.send("TS", {"worker_id": w.worker_id, "trial_id": handle.trial_id,
                                 "attempt": handle.attempt, "lease": handle.job.get("lease")})
                handle._announced = True
            elif kind == "metric":
                pending = command[1]
                if pending.done.is_set():
                    continue  # stopped before it could be sent
                self.send("ME", pending.body)
                self.unacked[pending.key] = [pending, time.monotonic() + w.ack_timeout]
            elif kind == "end":
                _, handle, status, error = command
                for key in [k for k, e in self.unacked.items() if e[0].handle is handle]:
                    del self.unacked[key]
                # The slot is free before EN leaves, so an offer sent on seeing EN is accepted.
                with w._lock:
                    w._trials.pop(handle.key, None)
                    w._runner_threads.pop(handle.key, None)
                if status is None:
                    continue  # left behind by a worker that stops: no EN
                self.send("EN", {"trial_id": handle.trial_id, "attempt": handle.attempt,
                                 "status": status, "error": error, "worker_id": w.worker_id})

    def read_events(self):
        while True:
            try:
                frames = self.sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.on_event(frames)

    def on_event(self, frames):
        w = self.w
        if len(frames) != 2:
            log.warning("dropped events message with %d frames", len(frames))
            return
        topic, data = frames
        if topic != w._topic and topic != BROADCAST_TOPIC:
            return  # a prefix match for another worker's longer id
        try:
            msg = protocol.decode(data, w.max_message_bytes)
        except protocol.ProtocolError as e:
            log.warning("dropped undecodable message on events (%d bytes): %s", len(data), e)
            return
        body = msg.body
        if msg.type == "MA":
            # A span acknowledges `span` consecutive sequences from `sequence` on
            # (nil: that sequence alone; wire-format.md §5.2).
            trial_id, attempt, first = body.get("trial_id"), body.get("attempt"), body.get("sequence")
            span = body.get("span") or 1
            if span == 1:
                entries = [self.unacked.pop((trial_id, attempt, first), None)]
            else:
                keys = [k for k in self.unacked
                        if k[0] == trial_id and k[1] == attempt and 0 <= k[2] - first < span]
                entries = [self.unacked.pop(k) for k in keys]
            for entry in entries:
                if entry is None:
                    continue  # a duplicate MA, or for a result already settled
                pending = entry[0]
                with w._lock:
                    pending.delivered = True
                    pending.handle._pending.discard(pending)
                    pending.done.set()
        elif msg.type == "KI":
            key = (body.get("trial_id"), body.get("attempt"))
            reason = body.get("reason") or ""
            with w._lock:
                handle = w._trials.get(key)
                stopped = handle is not None and w._stop_trial_locked(handle, reason or "killed")
            if not stopped:
                log.debug("ignored KI for %s (not running here)", key)
                return
            log.info("trial %s attempt %s stopped by host (%s)", key[0], key[1], reason)
            for k in [k for k, e in self.unacked.items() if e[0].handle is handle]:
                del self.unacked[k]
        elif msg.type == "HR":
            log.info("host asked for hello")
            self.send_hello()
        elif msg.type == "TR":
            w._on_offer(body)  # an addressed offer (wire-format.md §5.2)
        else:
            log.warning("dropped unexpected message type %r on events", msg.type)

    def shutdown(self):
        self.run_commands()
        self.send("WB", {"worker_id": self.w.worker_id})
        # Lingering on close delivers what the PUSH holds; the backlog is handed over here.
        deadline = time.monotonic() + 2.0
        while self.backlog and time.monotonic() < deadline:
            self.flush_backlog()
            if self.backlog:
                self.push.poll(50, zmq.POLLOUT)
