"""`python3 -m tunehost.worker --function ...` as a real process against a fake host."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

from fake_host import FakeHost

TRAIN = textwrap.dedent("""
    def train(config, reporter):
        for step in range(2):
            reporter(loss=config["lr"] * (step + 1))
        reporter(loss=0.01, done=True)
""")


class CliTest(unittest.TestCase):
    def setUp(self):
        self.host = FakeHost()
        self.tmp = tempfile.TemporaryDirectory()
        self.proc = None

    def tearDown(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.host.close()
        self.tmp.cleanup()

    def start(self, function_spec, cwd=None):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(
            __import__("tunehost").__file__)), env.get("PYTHONPATH", "")] if p)
        ep = self.host.endpoints
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tunehost.worker", "--function", function_spec, "--id", "cli-worker",
             "--jobs", ep["jobs"], "--results", ep["results"], "--events", ep["events"],
             "--slots", "1", "--heartbeat-ms", "200", "--ack-timeout-ms", "500", "--log-level", "warning"],
            cwd=cwd or self.tmp.name, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def run_one_trial(self):
        hello = self.host.expect("WH")
        self.assertEqual(hello.body["worker_id"], "cli-worker")
        self.assertEqual(hello.body["language"], "python")
        self.host.wait_subscribed("cli-worker")
        self.host.offer("t1", parameters={"lr": 0.5})
        self.host.expect("TS")
        values = []
        for seq, kind in ((0, "PERIODICAL"), (1, "PERIODICAL"), (2, "FINAL")):
            me = self.host.expect("ME", skip=("HB", "ME"),
                                  where=lambda b, s=seq, k=kind: b["sequence"] == s and b["type"] == k)
            values.append(me.body["value"]["default"])
            self.host.ack(me)
        self.assertEqual(values, [0.5, 1.0, 0.01])
        end = self.host.expect("EN", skip=("HB", "ME"))
        self.assertEqual(end.body["status"], "SUCCEEDED")
        self.proc.send_signal(signal.SIGTERM)
        self.host.expect("WB", skip=("HB",))
        out, err = self.proc.communicate(timeout=10)
        self.assertEqual(self.proc.returncode, 0, err.decode())

    def test_module_callable(self):
        with open(os.path.join(self.tmp.name, "cli_train_mod.py"), "w") as f:
            f.write(TRAIN)
        self.start("cli_train_mod:train")
        self.run_one_trial()

    def test_file_path_callable(self):
        path = os.path.join(self.tmp.name, "my_train.py")
        with open(path, "w") as f:
            f.write(TRAIN)
        self.start(f"{path}:train", cwd="/")
        self.run_one_trial()

    def test_bad_function_exits_2(self):
        self.start("no_such_module_xyz:train")
        out, err = self.proc.communicate(timeout=10)
        self.assertEqual(self.proc.returncode, 2)
        self.assertIn(b"no_such_module_xyz", err)


if __name__ == "__main__":
    unittest.main()
