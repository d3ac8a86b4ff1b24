"""Helpers for end-to-end tests: real tunehost processes on loopback.

Binaries come from TUNEHOST_BIN_DIR and plugins from TUNEHOST_PLUGIN_DIR
(set by ctest). Clients speak the protocol through tunehost.protocol, the
Python implementation of protocol/docs/wire-format.md.
"""
import itertools
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

from tunehost import keys as tunehost_keys
from tunehost import protocol

BIN_DIR = os.environ.get("TUNEHOST_BIN_DIR", "build/bin")
PLUGIN_DIR = os.environ.get("TUNEHOST_PLUGIN_DIR", "build/plugins")
TUNEHOST = os.path.join(BIN_DIR, "tunehost")
WORKER = os.path.join(BIN_DIR, "tunehost-worker")
PYTHON = "/usr/bin/python3"
PYTHONPATH = os.environ.get("PYTHONPATH", "")


def free_ports(n):
    """n distinct free loopback ports (bound once to ask the kernel)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def wait_for_or_none(predicate, timeout):
    """Polls predicate until it returns something true (returned), or None
    after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return None


def wait_for(predicate, timeout, what):
    """Polls predicate until true; fails the test with `what` after timeout."""
    value = wait_for_or_none(predicate, timeout)
    if value:
        return value
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


def host_file(experiment_dir, pid, timeout=30):
    """The experiment's host.json once process `pid` wrote it (its endpoints)."""
    def read():
        try:
            with open(os.path.join(experiment_dir, "host.json")) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return data if data.get("pid") == pid else None
    return wait_for(read, timeout, "host.json of pid %d" % pid)


class Host:
    """A `tunehost serve` process with a control client and an event watcher."""

    def __init__(self, extra_args=(), heartbeat_ms=200, ack_timeout_ms=1000, plugin_dir=None,
                 keys=None):
        """`keys`: a tunehost.keys.ClientKeys for the host's control and
        events sockets (a host started with --keys in extra_args)."""
        self.keys = keys
        ports = free_ports(4)
        self.endpoints = {name: "tcp://127.0.0.1:%d" % port
                          for name, port in zip(("control", "jobs", "results", "events"), ports)}
        self.heartbeat_ms = heartbeat_ms
        self.logfile = tempfile.NamedTemporaryFile(prefix="tunehost-host-", suffix=".log",
                                                   delete=False)
        args = [TUNEHOST, "serve", "--plugins", plugin_dir or PLUGIN_DIR,
                "--heartbeat-ms", str(heartbeat_ms), "--ack-timeout-ms", str(ack_timeout_ms)]
        for name, ep in self.endpoints.items():
            args += ["--" + name, ep]
        self.proc = subprocess.Popen(list(args) + list(extra_args), stdout=self.logfile,
                                     stderr=subprocess.STDOUT)
        self.ctx = zmq.Context()
        self.control = self.ctx.socket(zmq.DEALER)
        self.control.setsockopt(zmq.LINGER, 0)
        tunehost_keys.apply(self.control, keys)
        self.control.connect(self.endpoints["control"])
        self.events = self.ctx.socket(zmq.SUB)
        self.events.setsockopt(zmq.LINGER, 0)
        self.events.setsockopt(zmq.SUBSCRIBE, b"event.")
        tunehost_keys.apply(self.events, keys)
        # PUB drops what is published before a subscriber is connected (ZeroMQ's
        # slow joiner): watch the SUB until its handshake with the host is done.
        monitor = self.events.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.events.connect(self.endpoints["events"])
        self.ids = itertools.count(1)
        self.seen_events = []
        wait_for(lambda: self._try_ping(), 20, "the host to answer PI")
        wait_for(lambda: monitor.poll(100) and recv_monitor_message(monitor), 20,
                 "the event subscriber to connect")
        self.events.disable_monitor()
        monitor.close()
        # The subscription travels right after the handshake; one more round
        # trip through the host lets its I/O thread take it in.
        self.request("PI", {})

    def _try_ping(self):
        try:
            return self.request("PI", {}, timeout=0.5)
        except TimeoutError:
            return None

    def request(self, type_code, body, timeout=10.0):
        """Sends one control request; returns (reply type, reply body)."""
        msg_id = next(self.ids)
        self.control.send(protocol.encode(type_code, body, msg_id))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.control.poll(int(left * 1000)):
                raise TimeoutError("no reply to %s within %.1f s" % (type_code, timeout))
            reply = protocol.decode(self.control.recv())
            if reply.id == msg_id:
                return reply.type, reply.body

    def send_raw(self, frames, timeout=5.0):
        """Sends raw frames on a fresh DEALER and returns the decoded reply."""
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        tunehost_keys.apply(s, self.keys)
        s.connect(self.endpoints["control"])
        try:
            s.send_multipart(frames)
            if not s.poll(int(timeout * 1000)):
                raise TimeoutError("no reply")
            return protocol.decode(s.recv())
        finally:
            s.close()

    def initialize(self, search_space, tuner="random", tuner_args=None, assessor=None,
                   assessor_args=None, concurrency=1, max_trials=0, max_duration_s=0.0):
        experiment = {
            "id": "e2e",
            "tuner": {"name": tuner, "args": tuner_args or {}},
            "assessor": ({"name": assessor, "args": assessor_args or {}} if assessor else None),
            "concurrency": concurrency,
            "max_trials": max_trials,
            "max_duration_s": float(max_duration_s),
        }
        return self.request("IN", {"search_space": search_space, "experiment": experiment})

    def status(self):
        kind, body = self.request("PI", {})
        assert kind == "ok", body
        return body["data"]["status"]

    def drain_events(self):
        while self.events.poll(0):
            topic, payload = self.events.recv_multipart()
            self.seen_events.append(protocol.decode(payload))
        return self.seen_events

    def wait_status(self, statuses, timeout):
        def check():
            self.drain_events()
            s = self.status()
            return s if s in statuses else None
        return wait_for(check, timeout, "experiment status in %s" % (statuses,))

    def events_of(self, type_code):
        return [m.body for m in self.drain_events() if m.type == type_code]

    def log(self):
        self.logfile.flush()
        with open(self.logfile.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def close(self):
        for s in (self.control, self.events):
            s.close()
        self.ctx.term()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.unlink(self.logfile.name)


def keygen(directory, name):
    """A key pair made with `tunectl keygen`; the path of its .key_secret."""
    r = subprocess.run([os.path.join(BIN_DIR, "tunectl"), "keygen", name, "--dir", directory],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return os.path.join(directory, name + ".key_secret")


def start_worker(host, command, workdir, worker_id, cwd=None, slots=1):
    args = [WORKER, "--command", command, "--workdir", workdir, "--id", worker_id,
            "--slots", str(slots), "--heartbeat-ms", str(host.heartbeat_ms),
            "--jobs", host.endpoints["jobs"], "--results", host.endpoints["results"],
            "--events", host.endpoints["events"]]
    if cwd:
        args += ["--cwd", cwd]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc, timeout=10):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
