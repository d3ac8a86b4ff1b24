"""One input must never stop the host (wire-format.md §1.1, §3.1, §3.2): hostile
and clumsy peers against a real `tunehost serve`, with the host's memory
(VmHWM, its peak resident set) and its log measured, and the control socket
asked throughout whether the host still answers."""
import math
import os
import resource
import socket
import subprocess
import time
import unittest

import msgpack
import zmq

import harness
from harness import wait_for
from tunehost import protocol

SPACE = {"x": {"_type": "uniform", "_value": [0, 1]}}
HUGE_SUBSCRIBER = """
import sys, time, zmq
sub = zmq.Context().socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"x" * (100 << 20))
sub.connect(sys.argv[1])
time.sleep(600)
"""
MIB = 1 << 20
RESULT_LIMIT = 128 << 10  # the results socket's default maxResultBytes


def vm_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s for pid %d" % (key, pid))


def sanitized(pid):
    """Whether the process runs under AddressSanitizer, whose allocator pads
    every block and keeps freed ones in quarantine (up to 256 MiB)."""
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class HostileInputTest(unittest.TestCase):
    def start_host(self, extra_args=(), **kwargs):
        self.host = harness.Host(extra_args=extra_args, **kwargs)
        self.addCleanup(self.host.close)
        return self.host

    def assert_answers(self, host, within_s=2.0):
        start = time.monotonic()
        kind, body = host.request("PI", {}, timeout=within_s)
        self.assertEqual(kind, "ok", body)
        return time.monotonic() - start

    def raw_request(self, host, envelope):
        return host.send_raw([msgpack.packb(envelope)])

    def test_a_huge_count_is_refused_naming_the_limit(self):
        host = self.start_host()
        kind, body = host.initialize(SPACE, concurrency=1)
        self.assertEqual(kind, "ok", body)
        for count in ((1 << 32) - 1, 1025):
            reply = self.raw_request(host, {"v": 1, "type": "GE", "id": 7,
                                            "body": {"count": count}})
            self.assertEqual(reply.type, "error")
            self.assertEqual(reply.body["code"], "bad_field")
            self.assertIn("over the limit of 1024", reply.body["message"])
        reply = self.raw_request(host, {"v": 1, "type": "UX", "id": 8,
                                        "body": {"concurrency": (1 << 32) - 1}})
        self.assertEqual(reply.body["code"], "bad_field")
        self.assert_answers(host)
        self.assertIsNone(host.proc.poll())

    def test_nil_envelope_id_or_body_is_refused(self):
        host = self.start_host()
        for envelope, field in (({"v": 1, "type": "PI", "id": None, "body": {}}, "envelope.id"),
                                ({"v": 1, "type": "PI", "body": {}}, "envelope.id"),
                                ({"v": 1, "type": "PI", "id": 3, "body": None}, "envelope.body"),
                                ({"v": 1, "type": "PI", "id": 3}, "envelope.body")):
            reply = self.raw_request(host, envelope)
            self.assertEqual(reply.type, "error", envelope)
            self.assertIn(reply.body["code"], ("bad_field", "missing_field"))
            self.assertIn(field, reply.body["message"])

    def test_a_flood_of_large_frames_leaves_memory_bounded_and_the_log_short(self):
        host = self.start_host()
        self.assert_answers(host)
        base = vm_kib(host.proc.pid, "VmRSS")
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.setsockopt(zmq.SNDHWM, 4)
        push.connect(host.endpoints["results"])
        # Over the results socket's limit (128 KiB), under twice it.
        frame = b"\x00" * (3 * RESULT_LIMIT // 2)
        flood_started = time.monotonic()
        try:
            for _ in range(6400):  # 1.2 GB
                push.send(frame)
            # Frames larger than twice the limit cost the connection.
            push.send(b"\x00" * (100 * MIB))
            push.send(frame)
            self.assert_answers(host, within_s=10)
        finally:
            push.close()
            ctx.term()
        peak = vm_kib(host.proc.pid, "VmHWM")
        # Queues are bounded (512 messages of at most 256 KiB per connection);
        # under AddressSanitizer freed frames also wait in its quarantine
        # (up to 256 MiB), which smaller frames fill sooner.
        limit = (300 + (256 if sanitized(host.proc.pid) else 0)) * 1024
        self.assertLess(peak - base, limit, "peak %d KiB over a base of %d KiB" % (peak, base))
        drops = [line for line in host.log().splitlines() if "dropped" in line]
        # The first drop, then one summary line per 10 s window the flood
        # lasted (longer on a slow or loaded machine), and the connection's.
        windows = math.ceil((time.monotonic() - flood_started) / 10)
        self.assertLessEqual(len(drops), 2 + windows, drops[:5])

    def result_sender(self, host):
        """A worker "big" on `host`: send(size) pushes an ME whose value
        holds `size` bytes of text; acked(size) also says whether its MA came
        back (the host acknowledges every result it reads, even of a trial
        it does not know), once a small one has been acknowledged (so the
        subscription has reached the host)."""
        ctx = zmq.Context()
        self.addCleanup(ctx.term)
        sub = ctx.socket(zmq.SUB)
        push = ctx.socket(zmq.PUSH)
        for sock in (sub, push):
            sock.setsockopt(zmq.LINGER, 0)
            self.addCleanup(sock.close)
        sub.setsockopt(zmq.SUBSCRIBE, b"worker.big.")
        sub.connect(host.endpoints["events"])
        push.connect(host.endpoints["results"])
        sequence = iter(range(1, 1 << 30))

        def send(size):
            seq = next(sequence)
            push.send(protocol.encode("ME", {
                "trial_id": "T1", "attempt": 0, "parameter_id": 0, "type": "PERIODICAL",
                "sequence": seq, "worker_id": "big",
                "value": {"default": 0.5, "note": "n" * size}}, seq))
            return seq

        def await_ack(seq, timeout_s):
            deadline = time.monotonic() + timeout_s
            while sub.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                msg = protocol.decode(sub.recv_multipart()[-1])
                if msg.type == "MA" and msg.body["sequence"] == seq:
                    return True
            return False

        def acked(size):
            wait_for(lambda: await_ack(send(0), 0.2), 20, "MA of a small result")
            return await_ack(send(size), 3.0)
        return send, acked

    def test_results_over_the_results_limit_are_dropped_naming_it(self):
        host = self.start_host()
        send, acked = self.result_sender(host)
        # The first drop of a quiet period is logged at once, with its reason.
        send(200 << 10)
        wait_for(lambda: any("too_large" in line and "maxResultBytes" in line
                             for line in host.log().splitlines()), 10, "the drop logged")
        self.assertFalse(acked(200 << 10))
        self.assertTrue(acked(100 << 10))
        self.assert_answers(host)
        # A larger limit takes it (and queues fewer results per connection).
        big = harness.Host(extra_args=["--max-result-bytes", str(1 << 20)])
        self.addCleanup(big.close)
        self.assertTrue(self.result_sender(big)[1](200 << 10))

    def test_garbage_is_logged_once_per_window_not_per_frame(self):
        host = self.start_host()
        self.assert_answers(host)
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(host.endpoints["results"])
        for i in range(20000):
            push.send(b"\xc1garbage %d" % i)
        # The host took them all in: a later good message, on the same
        # connection, is answered.
        self._push = push
        wait_for(lambda: self.host_saw_hello_request(host), 20, "HR for the probe")
        push.close()
        ctx.term()
        drops = [line for line in host.log().splitlines() if "dropped" in line]
        self.assertEqual(len(drops), 1, drops[:5])
        self.assertIn("results socket: dropped a message from 127.0.0.1: bad_frame", drops[0])

    def host_saw_hello_request(self, host):
        # The host answers an unknown worker's heartbeat with HR on its topic.
        if not hasattr(self, "_probe"):
            self._probe_ctx = zmq.Context()
            self._probe = self._probe_ctx.socket(zmq.SUB)
            self._probe.setsockopt(zmq.LINGER, 0)
            self._probe.setsockopt(zmq.SUBSCRIBE, b"worker.probe.")
            self._probe.connect(host.endpoints["events"])
            self.addCleanup(self._probe_ctx.term)
            self.addCleanup(self._probe.close)
        self._push.send(protocol.encode("HB", {"worker_id": "probe", "free_slots": 0,
                                               "running": []}, 2))
        return self._probe.poll(200) and self._probe.recv_multipart()

    def test_huge_and_countless_subscriptions_leave_memory_bounded(self):
        host = self.start_host()
        self.assert_answers(host)
        base = vm_kib(host.proc.pid, "VmRSS")
        # A 100 MiB subscription, from a process of its own (pyzmq cannot
        # close such a socket while it keeps reconnecting: the host drops it).
        huge = subprocess.Popen([harness.PYTHON, "-c", HUGE_SUBSCRIBER, host.endpoints["events"]])
        self.addCleanup(huge.wait)
        self.addCleanup(huge.kill)
        ctx = zmq.Context()
        many = ctx.socket(zmq.SUB)
        try:
            many.setsockopt(zmq.LINGER, 0)
            many.setsockopt(zmq.SNDHWM, 0)  # a SUB drops subscriptions over its queue
            many.connect(host.endpoints["events"])
            for i in range(20000):  # more distinct topic bytes than the host keeps
                many.setsockopt(zmq.SUBSCRIBE, b"t%06d" % i + b"-" * 250)
            wait_for(lambda: "distinct subscriptions over" in host.log(), 60,
                     "the host to drop the subscribers")
            self.assert_answers(host)
        finally:
            many.close()
            ctx.term()
        peak = vm_kib(host.proc.pid, "VmHWM")
        # About 35 MiB of topics in libzmq's trie (~32 bytes per topic byte);
        # small nodes cost several times that under ASan.
        limit = (450 if sanitized(host.proc.pid) else 200) * 1024
        self.assertLess(peak - base, limit, "peak %d KiB over a base of %d KiB" % (peak, base))
        # A normal subscriber gets events after the rebind.
        kind, body = host.initialize(SPACE, concurrency=1)
        self.assertEqual(kind, "ok", body)
        sub_ctx = zmq.Context()
        sub = sub_ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"event.")
        sub.connect(host.endpoints["events"])
        try:
            def event_seen():
                host.request("AD", {"parameters": {"x": 0.5}})
                return sub.poll(300)
            wait_for(event_seen, 30, "an event after the subscribers were dropped")
        finally:
            sub.close()
            sub_ctx.term()

    def test_idle_connections_beyond_the_soft_file_limit_do_not_silence_control(self):
        def low_soft_limit():
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard != resource.RLIM_INFINITY and hard < 1400:
            self.skipTest("hard open-file limit %d leaves no room above 1100 connections" % hard)
        original = harness.subprocess.Popen

        def popen(*args, **kwargs):
            kwargs["preexec_fn"] = low_soft_limit
            return original(*args, **kwargs)
        harness.subprocess.Popen = popen
        try:
            host = self.start_host()
        finally:
            harness.subprocess.Popen = original
        port = int(host.endpoints["results"].rsplit(":", 1)[1])
        idle = []
        self.addCleanup(lambda: [s.close() for s in idle])
        cpu_before = cpu_seconds(host.proc.pid)
        for _ in range(1100):
            s = socket.create_connection(("127.0.0.1", port))
            idle.append(s)
        worst = 0.0
        for _ in range(10):
            worst = max(worst, self.assert_answers(host, within_s=5))
            time.sleep(0.2)
        cpu = cpu_seconds(host.proc.pid) - cpu_before
        self.assertLess(worst, 1.0, "control answered in %.2f s" % worst)
        self.assertLess(cpu, 2.0, "the host burned %.1f s of CPU" % cpu)
        with open("/proc/%d/limits" % host.proc.pid) as f:
            limits = [line for line in f if line.startswith("Max open files")][0]
        self.assertGreater(int(limits.split()[3]), 1024, limits)

    def test_connections_over_the_limit_are_refused(self):
        host = self.start_host(extra_args=["--max-connections", "6"])
        self.assert_answers(host)
        ctx = zmq.Context()
        sockets = []
        try:
            for _ in range(12):
                s = ctx.socket(zmq.PUSH)
                s.setsockopt(zmq.LINGER, 0)
                s.connect(host.endpoints["results"])
                sockets.append(s)
            wait_for(lambda: "connections is the limit" in host.log(), 20,
                     "the gate to refuse a connection")
            self.assert_answers(host)
        finally:
            for s in sockets:
                s.close()
            ctx.term()


if __name__ == "__main__":
    unittest.main()
