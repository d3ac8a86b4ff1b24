"""tunehost.trial, the stdlib-only helper for trial scripts run by tunehost-worker."""

import json
import os
import subprocess
import sys
import textwrap
import unittest

import tunehost

PYTHONPATH = os.path.dirname(os.path.dirname(tunehost.__file__))

SCRIPT = textwrap.dedent("""
    import json, sys
    from tunehost import trial
    print(json.dumps({
        "parameters": trial.get_parameters(),
        "trial_id": trial.get_trial_id(),
        "experiment_id": trial.get_experiment_id(),
        "sequence_id": trial.get_sequence_id(),
        "attempt": trial.get_attempt(),
        "parameter_id": trial.get_parameter_id(),
        "trial_dir": trial.get_trial_dir(),
        "parameter_file": trial.get_parameter_file(),
        "heavy_modules": sorted(m for m in ("zmq", "msgpack") if m in sys.modules),
    }))
    trial.report_intermediate(0.5)
    trial.report_intermediate({"default": 0.6, "loss": 1.25})
    for bad in ("text", {"loss": 1.0}, True, float("nan")):
        try:
            trial.report_intermediate(bad)
        except (TypeError, ValueError):
            pass
        else:
            sys.exit("accepted " + repr(bad))
    trial.report_final({"default": 0.9, "loss": 0.1})
""")

EXPECTED_LINES = [
    {"type": "PERIODICAL", "value": 0.5},
    {"type": "PERIODICAL", "value": {"default": 0.6, "loss": 1.25}},
    {"type": "FINAL", "value": {"default": 0.9, "loss": 0.1}},
]


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEHOST_")}
    env["PYTHONPATH"] = PYTHONPATH
    return env


class TrialHelperTest(unittest.TestCase):
    def test_writes_json_lines_to_metric_fd(self):
        read_fd, write_fd = os.pipe()
        env = base_env()
        env.update({
            "TUNEHOST_EXPERIMENT_ID": "exp9",
            "TUNEHOST_TRIAL_ID": "trial-a",
            "TUNEHOST_SEQUENCE_ID": "12",
            "TUNEHOST_ATTEMPT": "2",
            "TUNEHOST_PARAMETER_ID": '"h-3"',
            "TUNEHOST_PARAMETERS": '{"lr":0.01,"layers":3,"opt":"adam"}',
            "TUNEHOST_PARAMETER_FILE": "/tmp/x/parameter.json",
            "TUNEHOST_TRIAL_DIR": "/tmp/x",
            "TUNEHOST_METRIC_FD": str(write_fd),
        })
        try:
            proc = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, pass_fds=(write_fd,),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        finally:
            os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()  # EOF once the script exits
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err.decode())
        self.assertTrue(data.endswith(b"\n"))
        lines = data.decode().splitlines()
        self.assertEqual([json.loads(line) for line in lines], EXPECTED_LINES)
        info = json.loads(out.decode().splitlines()[0])
        self.assertEqual(info, {
            "parameters": {"lr": 0.01, "layers": 3, "opt": "adam"},
            "trial_id": "trial-a",
            "experiment_id": "exp9",
            "sequence_id": 12,
            "attempt": 2,
            "parameter_id": "h-3",
            "trial_dir": "/tmp/x",
            "parameter_file": "/tmp/x/parameter.json",
            "heavy_modules": [],
        })
        self.assertEqual(err, b"")

    def test_without_metric_fd_prints_to_stdout_with_one_warning(self):
        proc = subprocess.run([sys.executable, "-c", SCRIPT], env=base_env(), capture_output=True, timeout=30)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        lines = proc.stdout.decode().splitlines()
        info = json.loads(lines[0])
        self.assertEqual(info["parameters"], {})
        self.assertIsNone(info["trial_id"])
        self.assertIsNone(info["sequence_id"])
        self.assertEqual([json.loads(line) for line in lines[1:]], EXPECTED_LINES)
        self.assertEqual(proc.stderr.decode().count("TUNEHOST_METRIC_FD is not set"), 1)


if __name__ == "__main__":
    unittest.main()
