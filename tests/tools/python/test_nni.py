"""tunehost.nni, NNI's trial API over the tunehost-worker metric pipe, and the
NNI-style example experiment (examples/nni-style) run by `tunehost run`."""

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest

import tunehost

PYTHONPATH = os.path.dirname(os.path.dirname(tunehost.__file__))
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

# An NNI trial script, with `import nni` replaced as the README says.
SCRIPT = textwrap.dedent("""
    import json, sys
    import tunehost.nni as nni

    class Scalar:  # stands in for a numpy/torch scalar
        def __init__(self, v):
            self.v = v
        def item(self):
            return self.v

    before = nni.get_current_parameter()
    params = nni.get_next_parameter()
    print(json.dumps({
        "before": before,
        "params": params,
        "current": nni.get_current_parameter(),
        "current_lr": nni.get_current_parameter("lr"),
        "again": nni.get_next_parameters(),
        "trial_id": nni.get_trial_id(),
        "experiment_id": nni.get_experiment_id(),
        "sequence_id": nni.get_sequence_id(),
        "heavy_modules": sorted(m for m in ("zmq", "msgpack") if m in sys.modules),
    }), flush=True)
    nni.report_intermediate_result(0.5)
    nni.report_intermediate_result({"default": 0.6, "loss": 1.25})
    nni.report_intermediate_result(Scalar(0.25))
    for bad in ("text", {"loss": 1.0}, True, None, float("nan"), float("inf"), {"default": float("nan")}):
        try:
            nni.report_intermediate_result(bad)
        except (TypeError, ValueError):
            pass
        else:
            sys.exit("accepted " + repr(bad))
    nni.report_final_result({"default": Scalar(0.9), "loss": 0.1})
""")

EXPECTED_BYTES = (
    b'{"type": "PERIODICAL", "value": 0.5}\n'
    b'{"type": "PERIODICAL", "value": {"default": 0.6, "loss": 1.25}}\n'
    b'{"type": "PERIODICAL", "value": 0.25}\n'
    b'{"type": "FINAL", "value": {"default": 0.9, "loss": 0.1}}\n'
)


def base_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TUNEHOST_") and not k.startswith("NNI_")}
    env["PYTHONPATH"] = PYTHONPATH
    return env


def run_script(env, pass_fds=()):
    return subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, pass_fds=pass_fds,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


class NniWorkerModeTest(unittest.TestCase):
    """Under tunehost-worker: parameters and ids from the environment, results
    as JSON lines on the metric pipe."""

    def test_trial_api_writes_json_lines_to_the_metric_pipe(self):
        read_fd, write_fd = os.pipe()
        env = base_env()
        env.update({
            "TUNEHOST_EXPERIMENT_ID": "exp7",
            "TUNEHOST_TRIAL_ID": "Ab3dE",
            "TUNEHOST_SEQUENCE_ID": "4",
            "TUNEHOST_ATTEMPT": "0",
            "TUNEHOST_PARAMETER_ID": "4",
            "TUNEHOST_PARAMETERS": '{"lr":0.01,"layers":3,"act":"relu"}',
            "TUNEHOST_METRIC_FD": str(write_fd),
            "NNI_PLATFORM": "tunehost",
        })
        try:
            proc = run_script(env, pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()  # EOF once the script exits
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err.decode())
        self.assertEqual(data, EXPECTED_BYTES)
        params = {"lr": 0.01, "layers": 3, "act": "relu"}
        self.assertEqual(json.loads(out.decode().splitlines()[0]), {
            "before": None,
            "params": params,
            "current": params,
            "current_lr": 0.01,
            "again": params,
            "trial_id": "Ab3dE",
            "experiment_id": "exp7",
            "sequence_id": 4,
            "heavy_modules": [],
        })
        self.assertEqual(out.decode().splitlines()[1:], [])  # nothing printed: results went to the pipe
        self.assertEqual(err, b"")  # no standalone warning

    def test_many_results_arrive_whole_and_in_order(self):
        # More than a pipe buffer (64 KiB) of results while the reader keeps
        # reading: every line arrives whole, in order, the FINAL last.
        read_fd, write_fd = os.pipe()
        env = base_env()
        env.update({"TUNEHOST_METRIC_FD": str(write_fd), "TUNEHOST_PARAMETERS": "{}"})
        code = ("import tunehost.nni as nni\n"
                "for i in range(1000):\n"
                "    nni.report_intermediate_result({'default': i, 'pad': 'x' * 100})\n"
                "nni.report_final_result(-1)\n")
        try:
            proc = subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=(write_fd,),
                                    stderr=subprocess.PIPE)
        finally:
            os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            lines = pipe.read().split(b"\n")
        _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err.decode())
        self.assertEqual(lines[-1], b"")
        records = [json.loads(line) for line in lines[:-1]]
        self.assertEqual([r["value"]["default"] for r in records[:-1]], list(range(1000)))
        self.assertEqual(records[-1], {"type": "FINAL", "value": -1})


class NniStandaloneTest(unittest.TestCase):
    """Run by hand (no TUNEHOST_METRIC_FD): NNI's standalone mode."""

    def test_standalone_mode_logs_results_to_stdout(self):
        code = textwrap.dedent("""
            import json, warnings
            import tunehost.nni as nni
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                params = nni.get_next_parameter()
            print(json.dumps({"params": params, "current": nni.get_current_parameter(),
                              "trial_id": nni.get_trial_id(), "experiment_id": nni.get_experiment_id(),
                              "sequence_id": nni.get_sequence_id(),
                              "warnings": [w.category.__name__ for w in caught]}), flush=True)
            nni.report_intermediate_result(0.5)
            nni.report_intermediate_result({"default": 0.6, "loss": 1.25})
            try:
                nni.report_intermediate_result("bad")
            except TypeError:
                pass
            nni.report_final_result({"default": 0.9, "loss": 0.1})
        """)
        proc = subprocess.run([sys.executable, "-c", code], env=base_env(), capture_output=True,
                              timeout=30)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        lines = proc.stdout.decode().splitlines()
        self.assertEqual(json.loads(lines[0]), {
            "params": {}, "current": {}, "trial_id": "STANDALONE", "experiment_id": "STANDALONE",
            "sequence_id": 0, "warnings": ["RuntimeWarning"]})
        stamp = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] "
        self.assertEqual(len(lines), 4, lines)
        # NNI's standalone.py messages; the refused value does not use an index.
        self.assertRegex(lines[1], "^" + stamp + re.escape("Intermediate result: 0.5  (Index 0)") + "$")
        self.assertRegex(lines[2], "^" + stamp + re.escape(
            'Intermediate result: {"default": 0.6, "loss": 1.25}  (Index 1)') + "$")
        self.assertRegex(lines[3], "^" + stamp + re.escape(
            'Final result: {"default": 0.9, "loss": 0.1}') + "$")
        self.assertEqual(proc.stderr, b"")

    def test_standalone_takes_parameters_from_the_environment_when_set(self):
        env = base_env()
        env["TUNEHOST_PARAMETERS"] = '{"lr": 0.5}'
        code = ("import json, warnings\nwarnings.simplefilter('ignore')\n"
                "import tunehost.nni as nni\nprint(json.dumps(nni.get_next_parameter()))\n")
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=30)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        self.assertEqual(json.loads(proc.stdout), {"lr": 0.5})


def _binaries():
    """(tunehost, plugin dir) from TUNEHOST_BIN_DIR/TUNEHOST_PLUGIN_DIR (set by
    the ctest that runs the example). Without them the example test is
    skipped, unless TUNEHOST_TEST_REQUIRE_BINARIES is set (then it fails)."""
    bin_dir = os.environ.get("TUNEHOST_BIN_DIR")
    plugin_dir = os.environ.get("TUNEHOST_PLUGIN_DIR")
    tunehost_bin = os.path.join(bin_dir, "tunehost") if bin_dir else None
    if tunehost_bin and os.path.exists(tunehost_bin) and plugin_dir:
        return tunehost_bin, plugin_dir
    if os.environ.get("TUNEHOST_TEST_REQUIRE_BINARIES"):
        raise AssertionError(f"tunehost binary not found (TUNEHOST_BIN_DIR={bin_dir!r})")
    raise unittest.SkipTest("TUNEHOST_BIN_DIR/TUNEHOST_PLUGIN_DIR not set (run through ctest)")


class NniStyleExampleTest(unittest.TestCase):
    """examples/nni-style/config.yml, unchanged, through `tunehost run`."""

    def test_example_runs_every_trial(self):
        tunehost_bin, plugin_dir = _binaries()
        config = os.path.join(ROOT, "examples", "nni-style", "config.yml")
        with open(config, encoding="utf-8") as f:
            max_trials = int(re.search(r"^maxTrialNumber:\s*(\d+)", f.read(), re.MULTILINE).group(1))
        with tempfile.TemporaryDirectory(prefix="tunehost-nni-example-") as tmp:
            summary_file = os.path.join(tmp, "summary.json")
            env = base_env()
            env.pop("PYTHONPATH")  # the config's trialCommand finds the package itself
            env["HOME"] = tmp  # the default ~/tunehost-experiments lands in tmp
            # Run from an unrelated directory: the config's paths are relative to it.
            proc = subprocess.run([tunehost_bin, "run", config, "--plugins", plugin_dir,
                                   "--summary-json", summary_file],
                                  cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            with open(summary_file, encoding="utf-8") as f:
                summary = json.load(f)
            self.assertTrue(os.path.isdir(os.path.join(tmp, "tunehost-experiments",
                                                       summary["experiment_id"])))
        self.assertEqual(summary["status"], "DONE")
        self.assertEqual(summary["name"], "nni-style-example")
        trials = summary["trials"]
        self.assertEqual(len(trials), max_trials)
        self.assertEqual(sorted(t["sequence_id"] for t in trials), list(range(max_trials)))
        # The medianstop assessor may stop trials that fall behind the median
        # (one whose FINAL arrived just before the stop keeps it); every other
        # trial succeeds with the final result trial.py reports.
        statuses = {t["status"] for t in trials}
        self.assertLessEqual(statuses, {"SUCCEEDED", "EARLY_STOPPED"}, trials)
        succeeded = [t for t in trials if t["status"] == "SUCCEEDED"]
        self.assertGreaterEqual(len(succeeded), max_trials // 2)
        for t in succeeded:
            self.assertEqual(set(t["final_result"]), {"default", "ceiling"})
            self.assertEqual(t["final_metric"], t["final_result"]["default"])
            self.assertGreater(t["final_metric"], 0.0)
            self.assertLess(t["final_metric"], 1.0)
            self.assertEqual(set(t["parameters"]),
                             {"lr", "momentum", "hidden_size", "batch_size", "activation"})


if __name__ == "__main__":
    unittest.main()
