"""CurveZMQ keys on the Python side (tunehost.keys): key files, the control
client, Experiment.connect, the Worker and `python3 -m tunehost.worker`
against pure-pyzmq CURVE servers whose ZAP handler (zmq.auth's
ThreadAuthenticator) lets in only the keys of an "allowed" directory, as a
host started with --keys does. No tunehost binary is needed.

Waits are polls with deadlines; the only fixed waits are the ones that check
that something does NOT arrive, and each is followed by a check that the same
server does hear a peer with a good key.
"""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest
from unittest import mock

import msgpack
import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

import tunehost
from fake_host import FakeHost
from tunehost import keys
from tunehost.control import KEY_HINT, NO_KEY_HINT, ControlClient, ControlError, ControlTimeout
from tunehost.experiment import Experiment
from tunehost import protocol
from tunehost.function import function_runner
from tunehost.keys import ClientKeys, KeyFileError
from tunehost.worker import Worker

PYTHONPATH = os.path.dirname(os.path.dirname(tunehost.__file__))
WAIT = 5.0
# How long a test listens for a message that must not come (a refused
# handshake is retried every ~100 ms by ZeroMQ, so this is many chances).
SILENCE = 1.0

logging.getLogger("zmq.auth").setLevel(logging.CRITICAL)
logging.getLogger("tunehost").setLevel(logging.CRITICAL)


def _no_key_env():
    """os.environ without TUNEHOST_KEY and TUNEHOST_SERVER_KEY, for the test's duration."""
    env = {k: v for k, v in os.environ.items() if k not in (keys.ENV_KEY, keys.ENV_SERVER_KEY)}
    return mock.patch.dict(os.environ, env, clear=True)


class KeyFiles:
    """server, alice and mallory key pairs (secrets 0600) in a temporary
    directory, and an allowed/ directory holding alice's public key only."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.allowed = os.path.join(self.dir, "allowed")
        os.mkdir(self.allowed)
        for name in ("server", "alice", "mallory"):
            zmq.auth.create_certificates(self.dir, name)
            os.chmod(self.secret(name), 0o600)  # pyzmq writes it with the umask
        shutil.copy(self.public("alice"), self.allowed)

    def public(self, name):
        return os.path.join(self.dir, name + ".key")

    def secret(self, name):
        return os.path.join(self.dir, name + ".key_secret")

    def keys_of(self, name):
        return zmq.auth.load_certificate(self.secret(name))

    def cleanup(self):
        self.tmp.cleanup()


class CurveServerContext:
    """A context with a ZAP handler that allows only the keys in key_files.allowed."""

    def __init__(self, key_files):
        self.ctx = zmq.Context()
        self.auth = ThreadAuthenticator(self.ctx)
        self.auth.start()
        self.auth.configure_curve(domain="*", location=key_files.allowed)
        self.server_public, self.server_secret = key_files.keys_of("server")

    def close(self):
        self.auth.stop()
        self.ctx.term()


class CurveRouter:
    """A control ROUTER that is a CURVE server; a thread answers each request
    with script(envelope) -> [(type, body, id)] and records the ZAP user id
    (the client's public key) of each request it got."""

    def __init__(self, server, script):
        self.router = server.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.CURVE_SERVER, 1)
        self.router.setsockopt(zmq.CURVE_SECRETKEY, server.server_secret)
        self.endpoint = "tcp://127.0.0.1:%d" % self.router.bind_to_random_port("tcp://127.0.0.1")
        self.script = script
        self.requests = []  # (envelope, client public key)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            if not self.router.poll(50):
                continue
            peer, frame = self.router.recv_multipart(copy=False)
            envelope = msgpack.unpackb(frame.bytes, raw=False)
            self.requests.append((envelope, frame.get("User-Id")))
            for type_code, body, msg_id in self.script(envelope):
                self.router.send_multipart([peer.bytes, protocol.encode(type_code, body, msg_id)])

    def close(self):
        self.stop.set()
        self.thread.join()
        self.router.close()


def pong(envelope):
    if envelope["type"] == "TE":
        return [("error", {"code": "forbidden", "message": "a viewer key may not stop the experiment"},
                 envelope["id"])]
    return [("ok", {"data": {"pong": envelope["type"]}}, envelope["id"])]


class KeyTestCase(unittest.TestCase):
    def setUp(self):
        env = _no_key_env()
        env.start()
        self.addCleanup(env.stop)
        self.keys = KeyFiles()
        self.addCleanup(self.keys.cleanup)


# ------------------------------------------------------------------ key files


class KeyFileTest(KeyTestCase):
    def test_reads_what_pyzmq_writes(self):
        public, secret = keys.read_key_file(self.keys.secret("alice"), need_secret=True)
        self.assertEqual((public, secret), self.keys.keys_of("alice"))
        self.assertEqual(keys.read_key_file(self.keys.public("server")),
                         (self.keys.keys_of("server")[0], None))

    def test_load_keys(self):
        self.assertIsNone(keys.load_keys(None, None))
        self.assertIsNone(keys.load_keys("", ""))
        k = keys.load_keys(self.keys.secret("alice"), self.keys.public("server"))
        self.assertEqual(k, ClientKeys(*self.keys.keys_of("alice"), self.keys.keys_of("server")[0]))
        self.assertNotIn(k.secret.decode(), repr(k))  # a secret never reaches a log
        self.assertIn(k.public.decode(), repr(k))

    def test_secret_readable_by_others_is_refused(self):
        for mode in (0o644, 0o640, 0o602):
            os.chmod(self.keys.secret("alice"), mode)
            with self.assertRaises(KeyFileError) as cm:
                keys.load_keys(self.keys.secret("alice"), self.keys.public("server"))
            self.assertIn(self.keys.secret("alice"), str(cm.exception))
            self.assertIn("chmod 600", str(cm.exception))
            self.assertIn("%04o" % mode, str(cm.exception))
        os.chmod(self.keys.secret("alice"), 0o400)
        self.assertIsNotNone(keys.load_keys(self.keys.secret("alice"), self.keys.public("server")))

    def test_public_key_given_as_own_key_is_refused(self):
        with self.assertRaises(KeyFileError) as cm:
            keys.load_keys(self.keys.public("alice"), self.keys.public("server"))
        self.assertIn("give the .key_secret file, not the public .key", str(cm.exception))
        self.assertIn(self.keys.public("alice"), str(cm.exception))

    def test_one_without_the_other_is_refused(self):
        with self.assertRaises(KeyFileError) as cm:
            keys.load_keys(self.keys.secret("alice"), None)
        self.assertIn("TUNEHOST_SERVER_KEY", str(cm.exception))
        self.assertIn("server_key_file", str(cm.exception))
        with self.assertRaises(KeyFileError) as cm:
            keys.load_keys(None, self.keys.public("server"))
        self.assertIn("TUNEHOST_KEY", str(cm.exception))
        self.assertIn("key_file", str(cm.exception))

    def test_missing_and_broken_files_are_named(self):
        missing = os.path.join(self.keys.dir, "nope.key_secret")
        with self.assertRaises(KeyFileError) as cm:
            keys.load_keys(missing, self.keys.public("server"))
        self.assertIn(missing, str(cm.exception))
        with self.assertRaises(KeyFileError) as cm:
            keys.load_keys(self.keys.secret("alice"), os.path.join(self.keys.dir, "nope.key"))
        self.assertIn("nope.key", str(cm.exception))
        broken = os.path.join(self.keys.dir, "broken.key")
        with open(broken, "w") as f:
            f.write('curve\n    public-key = "tooshort"\n')
        with self.assertRaises(KeyFileError) as cm:
            keys.read_key_file(broken)
        self.assertIn("no valid public-key", str(cm.exception))
        # alice's public key with mallory's secret: not a pair.
        mixed = os.path.join(self.keys.dir, "mixed.key_secret")
        with open(mixed, "w") as f:
            f.write('curve\n    public-key = "%s"\n    secret-key = "%s"\n'
                    % (self.keys.keys_of("alice")[0].decode(), self.keys.keys_of("mallory")[1].decode()))
        os.chmod(mixed, 0o600)
        with self.assertRaises(KeyFileError) as cm:
            keys.read_key_file(mixed, need_secret=True)
        self.assertIn("does not belong", str(cm.exception))

    def test_env_defaults_and_empty_override(self):
        env = {keys.ENV_KEY: self.keys.secret("alice"), keys.ENV_SERVER_KEY: self.keys.public("server")}
        with mock.patch.dict(os.environ, env):
            self.assertEqual(keys.default_key_files(), (env[keys.ENV_KEY], env[keys.ENV_SERVER_KEY]))
            self.assertEqual(keys.default_key_files("", ""), (None, None))
            self.assertEqual(keys.resolve_keys().public, self.keys.keys_of("alice")[0])

    def test_a_key_from_the_environment_is_left_out_for_a_host_without_keys(self):
        # $TUNEHOST_KEY exported for a cluster's host must not get in the way
        # of a local host without keys; an explicit key without a server key
        # is still a mistake.
        with mock.patch.dict(os.environ, {keys.ENV_KEY: self.keys.secret("alice")}):
            os.environ.pop(keys.ENV_SERVER_KEY, None)
            self.assertIsNone(keys.resolve_keys(host_info={"control": "tcp://127.0.0.1:1"}))
            with self.assertRaises(KeyFileError):
                keys.resolve_keys(key_file=self.keys.secret("alice"))

    def test_files_others_may_change_are_not_trusted(self):
        path = os.path.join(self.keys.dir, "host.json")
        with open(path, "w") as f:
            f.write("{}")
        os.chmod(path, 0o600)
        self.assertIsNone(keys.untrusted_path(path))
        os.chmod(path, 0o620)
        self.assertIn("permissions 0620", keys.untrusted_path(path))
        if os.geteuid() == 0:
            os.chown(path, 65534, 65534)
            self.assertIn("belongs to user id 65534", keys.untrusted_path(path))

    def test_server_key_from_host_info(self):
        server_public = self.keys.keys_of("server")[0]
        self.assertEqual(keys.server_key_from_host_info({"server_key": server_public.decode()}),
                         server_public)
        self.assertIsNone(keys.server_key_from_host_info({"control": "tcp://x:1"}))
        self.assertIsNone(keys.server_key_from_host_info(None))
        with self.assertRaises(KeyFileError):
            keys.server_key_from_host_info({"server_key": "not a key"})
        # host.json gives the server key; the own key is still required.
        info = {"server_key": server_public.decode()}
        with self.assertRaises(KeyFileError) as cm:
            keys.resolve_keys(host_info=info)
        self.assertIn("TUNEHOST_KEY", str(cm.exception))
        k = keys.resolve_keys(key_file=self.keys.secret("alice"), host_info=info)
        self.assertEqual(k.server, server_public)
        # A server key file wins over host.json.
        k = keys.resolve_keys(self.keys.secret("alice"), self.keys.public("mallory"), host_info=info)
        self.assertEqual(k.server, self.keys.keys_of("mallory")[0])

    def test_z85(self):
        self.assertTrue(keys.is_z85_key(self.keys.keys_of("alice")[0]))
        self.assertTrue(keys.is_z85_key(self.keys.keys_of("alice")[1].decode()))
        self.assertFalse(keys.is_z85_key("0" * 39))
        self.assertFalse(keys.is_z85_key("0" * 39 + "~"))
        self.assertFalse(keys.is_z85_key("#" * 40))  # 5 characters above 2^32
        self.assertFalse(keys.is_z85_key(None))

    def test_import_has_no_side_effects(self):
        code = ("import sys, os, tunehost.keys as k; "
                "assert 'zmq' not in sys.modules, 'zmq imported'; "
                "assert k.load_keys(None, None) is None; print('ok')")
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=PYTHONPATH),
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.stdout.strip(), "ok", out.stderr)

    def test_apply_sets_the_three_options(self):
        ctx = zmq.Context()
        self.addCleanup(ctx.term)
        s = ctx.socket(zmq.DEALER)
        self.addCleanup(s.close, 0)
        keys.apply(s, None)
        self.assertEqual(s.getsockopt(zmq.MECHANISM), zmq.NULL)
        k = keys.load_keys(self.keys.secret("alice"), self.keys.public("server"))
        keys.apply(s, k)
        # pyzmq 24 cannot read the key options back; the sockets tests below
        # show which keys were set.
        self.assertEqual(s.getsockopt(zmq.MECHANISM), zmq.CURVE)
        self.assertEqual(s.getsockopt(zmq.CURVE_SERVER), 0)


# ------------------------------------------------------------------ control client


class ControlKeysTest(KeyTestCase):
    def setUp(self):
        super().setUp()
        self.server = CurveServerContext(self.keys)
        self.addCleanup(self.server.close)
        self.router = CurveRouter(self.server, pong)
        self.addCleanup(self.router.close)

    def client(self, timeout_ms=3000, **options):
        c = ControlClient(self.router.endpoint, timeout_ms=timeout_ms, **options)
        self.addCleanup(c.close)
        return c

    def test_known_key_gets_answers_and_forbidden_is_an_error(self):
        c = self.client(key_file=self.keys.secret("alice"), server_key_file=self.keys.public("server"))
        self.assertEqual(c.ping(), {"pong": "PI"})
        self.assertEqual(c.status(), {"pong": "ST"})
        with self.assertRaises(ControlError) as cm:
            c.terminate()
        self.assertNotIsInstance(cm.exception, ControlTimeout)
        self.assertEqual(cm.exception.code, protocol.FORBIDDEN)
        self.assertEqual(cm.exception.request, "TE")
        self.assertIn("viewer", cm.exception.message)
        alice = self.keys.keys_of("alice")[0].decode()
        self.assertEqual([(e["type"], who) for e, who in self.router.requests],
                         [("PI", alice), ("ST", alice), ("TE", alice)])

    def test_server_key_as_text_from_host_json(self):
        c = self.client(key_file=self.keys.secret("alice"),
                        server_key=self.keys.keys_of("server")[0].decode())
        self.assertEqual(c.ping(), {"pong": "PI"})

    def test_no_keys_times_out_with_a_hint(self):
        c = self.client(timeout_ms=SILENCE * 1000)
        with self.assertRaises(ControlTimeout) as cm:
            c.ping()
        self.assertIn(NO_KEY_HINT, str(cm.exception))
        self.assertIn("If it wants a key", str(cm.exception))
        self.assertEqual(self.router.requests, [])
        self.test_known_key_gets_answers_and_forbidden_is_an_error()  # the server does answer

    def test_unknown_key_times_out_naming_the_key(self):
        c = self.client(timeout_ms=SILENCE * 1000, key_file=self.keys.secret("mallory"),
                        server_key_file=self.keys.public("server"))
        with self.assertRaises(ControlTimeout) as cm:
            c.ping()
        self.assertIn(KEY_HINT, str(cm.exception))
        self.assertIn("does the host know this client's key", str(cm.exception))
        self.assertTrue(cm.exception.with_keys)
        self.assertEqual(self.router.requests, [])
        self.test_known_key_gets_answers_and_forbidden_is_an_error()

    def test_wrong_server_key_times_out(self):
        c = self.client(timeout_ms=SILENCE * 1000, key_file=self.keys.secret("alice"),
                        server_key_file=self.keys.public("mallory"))
        with self.assertRaises(ControlTimeout) as cm:
            c.ping()
        self.assertIn(KEY_HINT, str(cm.exception))
        self.assertEqual(self.router.requests, [])

    def test_env_vars_are_the_defaults(self):
        env = {keys.ENV_KEY: self.keys.secret("alice"), keys.ENV_SERVER_KEY: self.keys.public("server")}
        with mock.patch.dict(os.environ, env):
            self.assertEqual(self.client().ping(), {"pong": "PI"})
            # "" turns the environment's keys off.
            c = self.client(timeout_ms=SILENCE * 1000, key_file="", server_key_file="")
            self.assertIsNone(c.keys)
            with self.assertRaises(ControlTimeout):
                c.ping()
        self.assertEqual(len(self.router.requests), 1)

    def test_bad_keys_fail_before_connecting(self):
        with self.assertRaises(KeyFileError) as cm:
            ControlClient(self.router.endpoint, key_file=self.keys.secret("alice"))
        self.assertIn("TUNEHOST_SERVER_KEY", str(cm.exception))
        os.chmod(self.keys.secret("alice"), 0o644)
        with self.assertRaises(KeyFileError) as cm:
            ControlClient(self.router.endpoint, key_file=self.keys.secret("alice"),
                          server_key_file=self.keys.public("server"))
        self.assertIn("chmod 600", str(cm.exception))


# ------------------------------------------------------------------ Experiment


class ExperimentKeysTest(KeyTestCase):
    def setUp(self):
        super().setUp()
        self.server = CurveServerContext(self.keys)
        self.addCleanup(self.server.close)

        def script(envelope):
            if envelope["type"] == "ST":
                return [("ok", {"data": {"experiment_id": "keyedexp", "status": "RUNNING",
                                         "endpoints": {"control": self.router.endpoint}}},
                         envelope["id"])]
            return pong(envelope)

        self.router = CurveRouter(self.server, script)
        self.addCleanup(self.router.close)
        self.workdir = os.path.join(self.keys.dir, "work")
        os.makedirs(os.path.join(self.workdir, "keyedexp"))
        os.chmod(os.path.join(self.workdir, "keyedexp"), 0o700)  # as the host makes it

    def write_host_json(self, server_key=True):
        info = {"experiment_id": "keyedexp", "pid": os.getpid(), "control": self.router.endpoint}
        if server_key:
            info["server_key"] = self.keys.keys_of("server")[0].decode()
        with open(os.path.join(self.workdir, "keyedexp", "host.json"), "w") as f:
            json.dump(info, f)

    def connect(self, target="keyedexp", **options):
        exp = Experiment.connect(target, workdir=self.workdir, timeout_ms=3000, **options)
        self.addCleanup(exp.close)
        return exp

    def test_connect_by_id_takes_the_server_key_from_host_json(self):
        self.write_host_json()
        exp = self.connect(key_file=self.keys.secret("alice"))
        self.assertEqual(exp.get_status(), "RUNNING")
        self.assertEqual(exp.id, "keyedexp")
        with self.assertRaises(ControlError) as cm:
            exp._control.terminate()
        self.assertEqual(cm.exception.code, "forbidden")
        self.assertEqual({who for _, who in self.router.requests}, {self.keys.keys_of("alice")[0].decode()})

    def test_connect_by_id_with_the_key_from_the_environment(self):
        self.write_host_json()
        with mock.patch.dict(os.environ, {keys.ENV_KEY: self.keys.secret("alice")}):
            self.assertEqual(self.connect().get_status(), "RUNNING")

    def test_connect_by_id_refuses_a_host_json_others_could_have_planted(self):
        self.write_host_json()
        os.chmod(os.path.join(self.workdir, "keyedexp"), 0o777)
        with self.assertRaises(PermissionError) as cm:
            Experiment.connect("keyedexp", workdir=self.workdir, timeout_ms=500,
                               key_file=self.keys.secret("alice"))
        self.assertIn("cannot be trusted", str(cm.exception))
        self.assertEqual(self.router.requests, [])

    def test_connect_by_id_without_own_key_asks_for_one(self):
        self.write_host_json()
        with self.assertRaises(KeyFileError) as cm:
            Experiment.connect("keyedexp", workdir=self.workdir, timeout_ms=500)
        self.assertIn("TUNEHOST_KEY", str(cm.exception))
        self.assertIn("key_file=", str(cm.exception))
        self.assertEqual(self.router.requests, [])

    def test_connect_by_id_with_an_unknown_key_times_out_with_the_hint(self):
        self.write_host_json()
        with self.assertRaises(ControlTimeout) as cm:
            Experiment.connect("keyedexp", workdir=self.workdir, timeout_ms=SILENCE * 1000,
                               key_file=self.keys.secret("mallory"))
        self.assertIn(KEY_HINT, str(cm.exception))

    def test_connect_by_endpoint_with_key_files(self):
        exp = self.connect(self.router.endpoint, key_file=self.keys.secret("alice"),
                           server_key_file=self.keys.public("server"))
        self.assertEqual(exp.get_status(), "RUNNING")

    def test_server_key_file_wins_over_host_json(self):
        self.write_host_json(server_key=False)
        exp = self.connect(key_file=self.keys.secret("alice"), server_key_file=self.keys.public("server"))
        self.assertEqual(exp.get_status(), "RUNNING")
        self.write_host_json()
        with self.assertRaises(ControlTimeout):
            Experiment.connect("keyedexp", workdir=self.workdir, timeout_ms=SILENCE * 1000,
                               key_file=self.keys.secret("alice"),
                               server_key_file=self.keys.public("mallory"))


# ------------------------------------------------------------------ worker


def train(config, reporter):
    reporter(loss=config["x"], done=True)


class WorkerKeysBase(KeyTestCase):
    """A CURVE fake host (jobs PUSH, results PULL, events XPUB) that lets in alice only."""

    def setUp(self):
        super().setUp()
        self.server = CurveServerContext(self.keys)
        self.host = FakeHost(server_secret=self.server.server_secret, ctx=self.server.ctx)
        # Cleanups run last-in first-out: workers, then the host, then the context.
        self.addCleanup(self.server.close)
        self.addCleanup(self.host.close)

    def worker(self, worker_id, **options):
        w = Worker(function_runner(train), worker_id=worker_id, jobs=self.host.endpoints["jobs"],
                   results=self.host.endpoints["results"], events=self.host.endpoints["events"],
                   heartbeat_interval=0.2, ack_timeout=0.3, stop_grace=0.5, **options)
        w.start()
        self.addCleanup(w.stop, 0.5)
        return w

    def run_trial(self, worker_id):
        """A whole trial through all three sockets: TR on jobs, TS ME EN on
        results, MA on events."""
        hello = self.host.expect("WH")
        self.assertEqual(hello.body["worker_id"], worker_id)
        self.host.wait_subscribed(worker_id)
        self.host.offer("t1", parameters={"x": 0.25})
        self.assertEqual(self.host.expect("TS").body["worker_id"], worker_id)
        me = self.host.expect("ME")
        self.assertEqual(me.body["value"]["default"], 0.25)
        self.host.ack(me)
        end = self.host.expect("EN", skip=("HB", "ME"))
        self.assertEqual(end.body["status"], "SUCCEEDED")


class WorkerKeysTest(WorkerKeysBase):
    def test_worker_with_keys_runs_a_trial(self):
        w = self.worker("alice-worker", key_file=self.keys.secret("alice"),
                        server_key_file=self.keys.public("server"))
        self.assertEqual(w.keys.public, self.keys.keys_of("alice")[0])
        self.run_trial("alice-worker")

    def test_worker_keys_from_the_environment(self):
        env = {keys.ENV_KEY: self.keys.secret("alice"), keys.ENV_SERVER_KEY: self.keys.public("server")}
        with mock.patch.dict(os.environ, env):
            self.worker("env-worker")
        self.run_trial("env-worker")

    def test_workers_without_a_known_key_are_never_heard(self):
        self.worker("no-key-worker")
        self.worker("mallory-worker", key_file=self.keys.secret("mallory"),
                    server_key_file=self.keys.public("server"))
        self.worker("wrong-server-worker", key_file=self.keys.secret("alice"),
                    server_key_file=self.keys.public("mallory"))
        self.assertIsNone(self.host.next_message(timeout=SILENCE))
        # The same host hears a worker with a known key, and only that one.
        self.worker("alice-worker", key_file=self.keys.secret("alice"),
                    server_key_file=self.keys.public("server"))
        self.run_trial("alice-worker")
        self.assertEqual({m.body.get("worker_id") for m in self.host.received}, {"alice-worker"})
        self.assertFalse(any(b"no-key" in t or b"mallory" in t or b"wrong-server" in t
                             for t in self.host.subscriptions))

    def test_bad_keys_fail_when_the_worker_is_made(self):
        with self.assertRaises(KeyFileError) as cm:
            Worker(function_runner(train), key_file=self.keys.secret("alice"))
        self.assertIn("TUNEHOST_SERVER_KEY", str(cm.exception))
        with self.assertRaises(KeyFileError) as cm:
            Worker(function_runner(train), key_file=self.keys.public("alice"),
                   server_key_file=self.keys.public("server"))
        self.assertIn("give the .key_secret file, not the public .key", str(cm.exception))


TRAIN_MODULE = textwrap.dedent("""
    def train(config, reporter):
        reporter(loss=config["x"], done=True)
""")


class WorkerCliKeysTest(WorkerKeysBase):
    """`python3 -m tunehost.worker --key FILE --server-key FILE` as a process."""

    def start_cli(self, worker_id, *flags, env=None):
        with open(os.path.join(self.keys.dir, "cli_keys_train.py"), "w") as f:
            f.write(TRAIN_MODULE)
        full_env = {k: v for k, v in os.environ.items()}
        full_env["PYTHONPATH"] = PYTHONPATH
        full_env.update(env or {})
        ep = self.host.endpoints
        proc = subprocess.Popen(
            [sys.executable, "-m", "tunehost.worker", "--function", "cli_keys_train:train",
             "--id", worker_id, "--jobs", ep["jobs"], "--results", ep["results"],
             "--events", ep["events"], "--heartbeat-ms", "200", "--ack-timeout-ms", "300",
             "--stop-grace-ms", "500", "--log-level", "warning", *flags],
            cwd=self.keys.dir, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        def stop():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()

        self.addCleanup(stop)
        return proc

    def finish(self, proc):
        proc.send_signal(signal.SIGTERM)
        self.host.expect("WB", skip=("HB",))
        _, err = proc.communicate(timeout=10)
        self.assertEqual(proc.returncode, 0, err.decode())

    def test_key_flags(self):
        proc = self.start_cli("cli-alice", "--key", self.keys.secret("alice"),
                              "--server-key", self.keys.public("server"))
        self.run_trial("cli-alice")
        self.finish(proc)

    def test_key_env_vars(self):
        proc = self.start_cli("cli-env", env={keys.ENV_KEY: self.keys.secret("alice"),
                                              keys.ENV_SERVER_KEY: self.keys.public("server")})
        self.run_trial("cli-env")
        self.finish(proc)

    def test_unknown_key_flag_is_never_heard(self):
        self.start_cli("cli-mallory", "--key", self.keys.secret("mallory"),
                       "--server-key", self.keys.public("server"))
        self.assertIsNone(self.host.next_message(timeout=SILENCE))
        proc = self.start_cli("cli-alice", "--key", self.keys.secret("alice"),
                              "--server-key", self.keys.public("server"))
        self.run_trial("cli-alice")
        self.finish(proc)
        self.assertEqual({m.body.get("worker_id") for m in self.host.received}, {"cli-alice"})

    def test_bad_key_files_exit_2(self):
        os.chmod(self.keys.secret("alice"), 0o644)
        proc = self.start_cli("cli-bad", "--key", self.keys.secret("alice"),
                              "--server-key", self.keys.public("server"))
        _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 2, err.decode())
        self.assertIn(b"chmod 600", err)
        self.assertIn(self.keys.secret("alice").encode(), err)
        proc = self.start_cli("cli-half", "--key", self.keys.secret("mallory"))
        _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 2, err.decode())
        self.assertIn(b"--server-key", err)


if __name__ == "__main__":
    unittest.main()
