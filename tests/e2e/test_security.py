"""Authentication and roles (wire-format.md §9), end to end: real key pairs
made with `tunectl keygen`, a real host with `--keys`, real workers and
clients over TCP on loopback and, shaped like two machines, between network
namespaces (ip netns + veth, made by the test).

- no key, or a key the host does not know: nothing gets through;
- a viewer key reads but cannot stop or steer (`forbidden`);
- a worker key cannot use the control socket;
- a result forged by another worker is refused;
- the experiment finishes correctly throughout;
- a bind beyond loopback needs keys (or --insecure);
- the experiment's files are private whatever the umask.
"""
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import textwrap
import unittest

import zmq

import harness
from fake_worker import FakeWorker
from harness import keygen, wait_for
from test_integrity import RunHost
from tunehost import keys as tunehost_keys
from tunehost import protocol

TUNECTL = os.path.join(harness.BIN_DIR, "tunectl")


class Keys:
    """A host keys directory made with `tunectl keygen`: the host's pair, two
    worker keys, a viewer and an admin; and a key the host does not know."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tunehost-keys-")
        self.host = os.path.join(self.dir, "host")
        keygen(self.host, "server")
        self.server_public = os.path.join(self.host, "server.key")
        self.secret = {}
        for role, name in (("workers", "w1"), ("workers", "w2"), ("viewers", "dash"),
                           ("admins", "alice")):
            self.secret[name] = keygen(os.path.join(self.host, role), name)
        self.secret["mallory"] = keygen(os.path.join(self.dir, "elsewhere"), "mallory")

    def client(self, name):
        return tunehost_keys.load_keys(self.secret[name], self.server_public)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def ask(endpoint, type_code, body, keys, timeout=2.0):
    """One request from a fresh DEALER with `keys` (None: no key); the reply
    envelope, or None when nothing answers within `timeout`."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    tunehost_keys.apply(s, keys)
    s.connect(endpoint)
    try:
        s.send(protocol.encode(type_code, body, 7))
        if not s.poll(int(timeout * 1000)):
            return None
        return protocol.decode(s.recv())
    finally:
        s.close()
        ctx.term()


EXPERIMENT = {"id": "sec", "tuner": {"name": "random", "args": {"seed": 1}}, "assessor": None,
              "concurrency": 1, "max_trials": 3, "max_duration_s": 0.0}
SPACE = {"x": {"_type": "uniform", "_value": [0, 1]}}


class RolesTest(unittest.TestCase):
    def setUp(self):
        self.keys = Keys()
        self.addCleanup(self.keys.close)
        self.host = harness.Host(extra_args=["--keys", self.keys.host],
                                 keys=self.keys.client("alice"))
        self.addCleanup(self.host.close)
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            w.close()

    def worker(self, name, worker_id):
        w = FakeWorker(self.host.endpoints, worker_id, keys=self.keys.client(name))
        self.workers.append(w)
        w.hello()
        return w

    def test_each_key_gets_exactly_its_role_and_forged_results_are_refused(self):
        control = self.host.endpoints["control"]
        # No key, and a key the host does not know: no answer at all.
        self.assertIsNone(ask(control, "PI", {}, None, timeout=1.0))
        self.assertIsNone(ask(control, "PI", {}, self.keys.client("mallory"), timeout=1.0))
        wait_for(lambda: "unknown key" in self.host.log(), 10, "the refusal in the log")
        wait_for(lambda: "handshake failed" in self.host.log(), 10, "the keyless peer in the log")
        # A viewer reads, and is told what it may not do.
        viewer = self.keys.client("dash")
        reply = ask(control, "PI", {}, viewer)
        self.assertEqual(reply.type, "ok", reply.body)
        reply = ask(control, "TE", {}, viewer)
        self.assertEqual(reply.type, "error")
        self.assertEqual(reply.body["code"], "forbidden")
        self.assertIn("TE needs the admin role", reply.body["message"])
        self.assertIn("'dash' has the viewer role", reply.body["message"])
        # A worker key may not use the control socket at all.
        reply = ask(control, "PI", {}, self.keys.client("w1"))
        self.assertEqual((reply.type, reply.body["code"]), ("error", "forbidden"), reply.body)
        self.assertIn("PI needs the viewer or admin role; key 'w1' has the worker role",
                      reply.body["message"])
        # The admin starts the experiment.
        kind, body = self.host.request("IN", {"search_space": SPACE, "experiment": EXPERIMENT})
        self.assertEqual(kind, "ok", body)
        reply = ask(control, "TE", {}, viewer)
        self.assertEqual(reply.body["code"], "forbidden", "a viewer stopped the experiment")
        self.assertEqual(ask(control, "ST", {}, viewer).body["data"]["status"], "RUNNING")

        a = self.worker("w1", "a")
        job = a.next_offer(20)
        self.assertIsNotNone(job, self.host.log())
        a.start(job)
        # w2's key forges results for the trial a runs: claiming a's id, and
        # as itself. Neither may count.
        b = self.worker("w2", "b")
        for as_worker in ("a", None):
            for _ in range(3):
                b.metric(job, 0, 1e9, kind="FINAL", as_worker=as_worker)
        b.end(job, status="FAILED")
        # A key the host does not know cannot even announce itself.
        m = FakeWorker(self.host.endpoints, "a", keys=self.keys.client("mallory"))
        self.workers.append(m)
        m.metric(job, 0, 1e9, kind="FINAL")
        wait_for(lambda: "belongs to key 'worker:w1'" in self.host.log(), 10,
                 "the refusal of the forgery that claimed a's id")
        reply = ask(control, "MT", {"trial_id": job["trial_id"]}, viewer)
        self.assertEqual(reply.body["data"]["metrics"], [], "a forged result was stored")
        trial = ask(control, "GT", {"trial_id": job["trial_id"]}, viewer).body["data"]
        self.assertEqual(trial["status"], "RUNNING", "a forged end ended the trial")
        # LW: which key each worker speaks with.
        workers = ask(control, "LW", {}, viewer).body["data"]["workers"]
        self.assertEqual({w["worker_id"]: w["key"] for w in workers},
                         {"a": "worker:w1", "b": "worker:w2"})
        # The experiment goes on and finishes with a's results only.
        a.metric_acked(job, 0, 0.5, kind="FINAL")
        a.end(job)
        b.stop_taking_jobs()
        for _ in range(2):
            nxt = a.next_offer(20)
            self.assertIsNotNone(nxt, self.host.log())
            a.start(nxt)
            a.metric_acked(nxt, 0, 0.25, kind="FINAL")
            a.end(nxt)
        self.host.wait_status({"DONE"}, 30)
        values = [m["value"] for m in ask(control, "MT", {}, viewer).body["data"]["metrics"]]
        self.assertEqual(sorted(values), [0.25, 0.25, 0.5])
        exported = ask(control, "EX", {}, viewer).body["data"]["records"]
        self.assertEqual(len(exported), 3)


class BindRuleTest(unittest.TestCase):
    def serve(self, control, *extra):
        ports = harness.free_ports(3)
        args = [harness.TUNEHOST, "serve", "--plugins", harness.PLUGIN_DIR, "--control", control]
        for name, port in zip(("jobs", "results", "events"), ports):
            args += ["--" + name, "tcp://127.0.0.1:%d" % port]
        return subprocess.Popen(args + list(extra), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def test_a_bind_beyond_loopback_needs_keys_or_insecure(self):
        port = harness.free_ports(1)[0]
        proc = self.serve("tcp://0.0.0.0:%d" % port)
        out, _ = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 2, out)
        self.assertIn("refusing to bind tcp://0.0.0.0:%d without keys" % port, out)
        self.assertIn("--insecure", out)
        proc = self.serve("tcp://0.0.0.0:%d" % port, "--insecure")
        try:
            reply = wait_for(lambda: ask("tcp://127.0.0.1:%d" % port, "PI", {}, None, 0.5), 20,
                             "the insecure host to answer")
            self.assertEqual(reply.type, "ok")
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        self.assertIn("not loopback and the host has no keys (--insecure)", out)
        # tunehost run: --bind beyond loopback, same rule.
        tmp = tempfile.mkdtemp(prefix="tunehost-bind-")
        self.addCleanup(shutil.rmtree, tmp, True)
        config = os.path.join(tmp, "exp.yaml")
        with open(config, "w") as f:
            json.dump({"searchSpace": SPACE, "trialCommand": "true", "trialConcurrency": 1,
                       "maxTrialNumber": 1, "experimentWorkingDirectory": tmp,
                       "tuner": {"name": "random"}}, f)
        r = subprocess.run([harness.TUNEHOST, "run", config, "--bind", "0.0.0.0",
                            "--plugins", harness.PLUGIN_DIR], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("refusing to bind tcp://0.0.0.0:", r.stderr)
        self.assertEqual(os.listdir(tmp), ["exp.yaml"], "a refused run left an experiment")


# A trial that takes a moment and reports one FINAL result.
TRIAL = "sleep 0.3; echo '{\"type\": \"FINAL\", \"value\": 0.5}' >&$TUNEHOST_METRIC_FD"


class RunWithKeysTest(unittest.TestCase):
    def setUp(self):
        self.keys = Keys()
        self.addCleanup(self.keys.close)
        self.tmp = tempfile.mkdtemp(prefix="tunehost-runkeys-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.workdir = os.path.join(self.tmp, "wd")
        self.config = os.path.join(self.tmp, "exp.yaml")
        with open(self.config, "w") as f:
            f.write(textwrap.dedent("""\
                searchSpace: {x: {_type: uniform, _value: [0, 1]}}
                trialCommand: %s
                trialCodeDirectory: %s
                trialConcurrency: 2
                maxTrialNumber: 24
                experimentWorkingDirectory: %s
                tuner: {name: random, classArgs: {seed: 2}}
                tunehost: {heartbeatIntervalMs: 200, ackTimeoutMs: 1000}
                """ % (json.dumps(TRIAL), self.tmp, self.workdir)))
        self.dir = os.path.join(self.workdir, "sec")

    def tunectl(self, *args, key=None):
        env = dict(os.environ)
        env.pop("TUNEHOST_KEY", None)
        env.pop("TUNEHOST_SERVER_KEY", None)
        cmd = [TUNECTL, "--experiment", "sec", "--workdir", self.workdir]
        if key:
            cmd += ["--key", self.keys.secret[key]]
        return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60,
                              env=env)

    def test_local_and_attached_workers_tunectl_roles_private_files_and_resume(self):
        # 24 trials of 0.3 s keep the local worker busy for 7 s at least: the
        # attached worker (slow to start in a sanitizer build) joins before
        # the experiment can end.
        # umask 0: the files must be private anyway.
        proc = subprocess.Popen(
            [harness.TUNEHOST, "run", self.config, "--id", "sec", "--keys", self.keys.host,
             "--plugins", harness.PLUGIN_DIR, "--local-workers", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            preexec_fn=lambda: os.umask(0))
        info = harness.host_file(self.dir, proc.pid)
        self.assertIn("server_key", info)
        # One more worker, attached with its own key, as on another machine.
        attached = subprocess.Popen(
            [harness.WORKER, "--command", TRIAL, "--id", "attached", "--heartbeat-ms", "200",
             "--workdir", os.path.join(self.tmp, "w"), "--key", self.keys.secret["w1"],
             "--server-key", self.keys.server_public, "--jobs", info["jobs"],
             "--results", info["results"], "--events", info["events"]],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: attached.poll() is None and attached.kill())
        for name in ("", "store.db", "lock", "host.json", "local-worker.key_secret"):
            path = os.path.join(self.dir, name)
            want = 0o700 if name == "" else 0o600
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), want, path)

        r = self.tunectl("status", "--json", key="dash")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.tunectl("stop", key="dash")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("forbidden: TE needs the admin role", r.stderr)
        r = self.tunectl("status")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("the host authenticates: give this client's key", r.stderr)

        def both_workers():
            r = self.tunectl("workers", "--json", key="alice")
            keys = {w["key"] for w in json.loads(r.stdout)["workers"]} if r.returncode == 0 else set()
            return keys == {"worker:local", "worker:w1"}
        wait_for(both_workers, 30, "the local and the attached worker")

        # The host dies; the resume finds its keys in the store.
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        resumed = subprocess.run(
            [harness.TUNEHOST, "resume", "sec", "--workdir", self.workdir, "--plugins",
             harness.PLUGIN_DIR, "--local-workers", "1", "--reattach-grace-ms", "1000"],
            capture_output=True, text=True, timeout=180)
        self.assertEqual(resumed.returncode, 0, resumed.stdout + resumed.stderr)
        self.assertIn("experiment sec DONE", resumed.stdout)
        self.assertIn("keys from", resumed.stdout + resumed.stderr)


class TrustedFilesTest(unittest.TestCase):
    """Files that say who may connect, or where to connect, are trusted only
    when others cannot change them (wire-format.md §9); an exported
    $TUNEHOST_KEY does not get in the way of a host without keys."""

    def test_files_others_may_change_are_refused_and_a_cluster_key_does_not_stop_tunectl(self):
        keys = Keys()
        self.addCleanup(keys.close)
        os.chmod(os.path.join(keys.host, "admins"), 0o777)
        r = subprocess.run([harness.TUNEHOST, "serve", "--keys", keys.host, "--control",
                            "tcp://127.0.0.1:%d" % harness.free_ports(1)[0]],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("admins has permissions 0777: others may change it", r.stderr)
        # A planted experiment: tunectl does not connect where it says.
        workdir = tempfile.mkdtemp(prefix="tunehost-planted-")
        self.addCleanup(shutil.rmtree, workdir, True)
        planted = os.path.join(workdir, "x")
        os.mkdir(planted)
        with open(os.path.join(planted, "host.json"), "w") as f:
            json.dump({"control": "tcp://127.0.0.1:1"}, f)
        os.chmod(planted, 0o777)
        r = subprocess.run([TUNECTL, "--experiment", "x", "--workdir", workdir, "ping"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("cannot be trusted", r.stderr)
        # $TUNEHOST_KEY exported for a cluster's host; this one has no keys.
        host = harness.Host()
        self.addCleanup(host.close)
        env = dict(os.environ, TUNEHOST_KEY=keys.secret["alice"])
        env.pop("TUNEHOST_SERVER_KEY", None)
        r = subprocess.run([TUNECTL, "--control", host.endpoints["control"], "ping"],
                           capture_output=True, text=True, timeout=30, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = subprocess.run([TUNECTL, "--control", host.endpoints["control"], "--key",
                            keys.secret["alice"], "ping"], capture_output=True, text=True,
                           timeout=30, env=env)
        self.assertEqual(r.returncode, 2, "an explicit --key without the host's key")
        self.assertIn("--key needs the host's public key", r.stderr)


class ResumeWithKeysTest(unittest.TestCase):
    """After a host restart, only the key whose worker ran a trial takes it
    back: the tie of worker id to key is in the store (wire-format.md §9)."""

    def test_another_key_cannot_take_a_restored_trial(self):
        keys = Keys()
        self.addCleanup(keys.close)
        host = RunHost(max_trials=1, exp_id="sec", control_keys=keys.client("alice"))
        self.addCleanup(host.close)
        workers = []
        self.addCleanup(lambda: [w.close() for w in workers])

        def worker(worker_id, key):
            w = FakeWorker(endpoints, worker_id, keys=keys.client(key))
            workers.append(w)
            return w
        endpoints = host.start("run", "--local-workers", "0", "--keys", keys.host)
        a = worker("a", "w1")
        a.hello()
        job = a.next_offer(20)
        self.assertIsNotNone(job, host.output())
        a.start(job)
        a.metric_acked(job, 0, 0.1)

        def stored():
            with host.db() as db:
                return db.execute("SELECT state, worker_key FROM trials").fetchall() == [
                    ("RUNNING", "worker:w1")]
        wait_for(stored, 20, "the running trial and its worker's key in the store")
        host.kill()
        host.start("resume", "--local-workers", "0", "--reattach-grace-ms", "20000")
        # w2's key claims a's id, then names the trial under an id of its own.
        running = [{"trial_id": job["trial_id"], "attempt": job["attempt"], "last_sequence": 0}]
        for thief_id in ("a", "b"):
            thief = worker(thief_id, "w2")
            thief.running = running
            thief.hello()
            thief.metric(job, 1, 1e9, kind="FINAL")
            thief.end(job)
            thief.running = running  # and keeps naming the trial in its heartbeats
        b = workers[-1]

        def b_told_superseded():
            # Events are best effort: b's heartbeats list the trial until it
            # hears the KI (the host repeats it for every one).
            b.heartbeat()
            b.poll_events(100)
            return any(k["trial_id"] == job["trial_id"] for k in b.kills)
        wait_for(b_told_superseded, 20, "KI for b's claim")
        trial = host.request("GT", {"trial_id": job["trial_id"]}).body["data"]
        self.assertNotEqual(trial["status"], "SUCCEEDED", "another key ended the trial")
        metrics = host.request("MT", {"trial_id": job["trial_id"]}).body["data"]["metrics"]
        self.assertNotIn(1e9, [m["value"] for m in metrics], "another key's result counted")
        # The worker that ran it comes back and finishes it.
        a.hello()
        a.metric_acked(job, 1, 0.5, kind="FINAL")
        a.end(job)
        self.assertEqual(host.wait(60), 0, host.output())
        with host.db() as db:
            finals = db.execute("SELECT scalar FROM metrics WHERE type = 'FINAL'").fetchall()
            started = db.execute("SELECT DISTINCT worker_id FROM trial_events WHERE event IN "
                                 "('started', 'reattached')").fetchall()
        self.assertEqual(finals, [(0.5,)])
        self.assertEqual(started, [("a",)])


def _can_make_namespaces():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = "thprobe%d" % os.getpid()
    ok = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ok


class TwoMachinesTest(unittest.TestCase):
    """The host in this namespace, a worker and an intruder in another one,
    joined by a veth pair: what crosses a network, shaped like two machines."""

    def setUp(self):
        if not _can_make_namespaces():
            self.skipTest("needs root and iproute2 (ip netns)")
        n = os.getpid() % 200 + 20
        self.ns = "thsec%d" % os.getpid()
        self.veth = "thv%d" % os.getpid()
        self.host_ip, self.peer_ip = "10.231.%d.1" % n, "10.231.%d.2" % n

        def ip(*args, ns=None):
            cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip"] + list(args)
            subprocess.run(cmd, check=True, capture_output=True)
        ip("netns", "add", self.ns)
        self.addCleanup(subprocess.run, ["ip", "netns", "del", self.ns], capture_output=True)
        ip("link", "add", self.veth + "a", "type", "veth", "peer", "name", self.veth + "b")
        self.addCleanup(subprocess.run, ["ip", "link", "del", self.veth + "a"],
                        capture_output=True)
        ip("link", "set", self.veth + "b", "netns", self.ns)
        ip("addr", "add", self.host_ip + "/24", "dev", self.veth + "a")
        ip("link", "set", self.veth + "a", "up")
        ip("addr", "add", self.peer_ip + "/24", "dev", self.veth + "b", ns=self.ns)
        ip("link", "set", self.veth + "b", "up", ns=self.ns)
        ip("link", "set", "lo", "up", ns=self.ns)
        self.keys = Keys()
        self.addCleanup(self.keys.close)

    def in_ns(self, args, **kwargs):
        return subprocess.Popen(["ip", "netns", "exec", self.ns] + list(args), **kwargs)

    def test_a_worker_on_the_other_machine_runs_the_experiment_an_intruder_cannot(self):
        ports = harness.free_ports(4)
        eps = {name: "tcp://%s:%d" % (self.host_ip, port)
               for name, port in zip(("control", "jobs", "results", "events"), ports)}
        log = tempfile.NamedTemporaryFile(prefix="tunehost-2m-", suffix=".log", delete=False)
        self.addCleanup(os.unlink, log.name)
        args = [harness.TUNEHOST, "serve", "--plugins", harness.PLUGIN_DIR,
                "--heartbeat-ms", "200"]
        for name, ep in eps.items():
            args += ["--" + name, ep]
        # Without keys the host refuses this address.
        r = subprocess.run(args, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        host = subprocess.Popen(args + ["--keys", self.keys.host], stdout=log,
                                stderr=subprocess.STDOUT)
        self.addCleanup(harness.stop, host)
        admin = self.keys.client("alice")
        wait_for(lambda: ask(eps["control"], "PI", {}, admin, 0.5), 20, "the host")
        reply = ask(eps["control"], "IN", {"search_space": SPACE,
                                           "experiment": dict(EXPERIMENT, max_trials=4)}, admin)
        self.assertEqual(reply.type, "ok", reply.body)
        # An intruder on the other machine, with no key and with an unknown key.
        probe = ("import sys, zmq\n"
                 "sys.path.insert(0, %r)\n"
                 "from tunehost import keys, protocol\n"
                 "k = keys.load_keys(sys.argv[1], sys.argv[2]) if len(sys.argv) > 2 else None\n"
                 "s = zmq.Context().socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 0)\n"
                 "keys.apply(s, k); s.connect(%r)\n"
                 "s.send(protocol.encode('TE', {}, 1))\n"
                 "print('answered' if s.poll(2000) else 'silence')\n"
                 % (os.path.join(os.path.dirname(harness.__file__), "..", "..", "tools",
                                 "python"), eps["control"]))
        for extra in ([], [self.keys.secret["mallory"], self.keys.server_public]):
            p = self.in_ns(["/usr/bin/python3", "-c", probe] + extra, stdout=subprocess.PIPE,
                           text=True)
            out, _ = p.communicate(timeout=30)
            self.assertEqual(out.strip(), "silence", extra)
        worker = self.in_ns(
            [harness.WORKER, "--command", TRIAL, "--id", "far", "--heartbeat-ms", "200",
             "--workdir", tempfile.mkdtemp(prefix="tunehost-far-"),
             "--key", self.keys.secret["w1"], "--server-key", self.keys.server_public,
             "--jobs", eps["jobs"], "--results", eps["results"], "--events", eps["events"]],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(harness.stop, worker)

        def done():
            reply = ask(eps["control"], "ST", {}, admin, 1.0)
            return reply is not None and reply.body["data"]["status"] == "DONE" and reply
        st = wait_for(done, 60, "the experiment to finish")
        self.assertEqual(st.body["data"]["counts"], {"SUCCEEDED": 4})
        workers = ask(eps["control"], "LW", {}, admin).body["data"]["workers"]
        self.assertEqual([(w["worker_id"], w["key"]) for w in workers], [("far", "worker:w1")])


if __name__ == "__main__":
    unittest.main()
