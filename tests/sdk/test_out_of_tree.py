"""A plugin author's path, for real: install the SDK package from this build
into a scratch prefix, build examples/plugin against it with
find_package(tunehost-sdk) + th_add_plugin(), then let the host list the plugin
and run an experiment with it.

Environment (set by tests/sdk/CMakeLists.txt): TH_BUILD_DIR, TH_SOURCE_DIR,
TH_CMAKE, TH_TUNEHOST."""

import json
import os
import subprocess
import tempfile
import textwrap
import unittest

BUILD = os.environ["TH_BUILD_DIR"]
SOURCE = os.environ["TH_SOURCE_DIR"]
CMAKE = os.environ["TH_CMAKE"]
TUNEHOST = os.environ["TH_TUNEHOST"]

# 3 optimizers x 2 layer counts (randint upper bound exclusive) = 6 configurations.
EXPERIMENT = """\
experimentName: out-of-tree
searchSpace:
  optimizer: {_type: choice, _value: [sgd, adam, rmsprop]}
  layers: {_type: randint, _value: [1, 3]}
trialCommand: >-
  /usr/bin/python3 -c "import json, os;
  p = json.loads(os.environ['TUNEHOST_PARAMETERS']);
  os.write(3, (json.dumps({'type': 'FINAL', 'value': p['layers']}) + '\\n').encode())"
trialConcurrency: 2
maxTrialNumber: 50
tuner:
  name: exhaustive
"""


def run(args, **kwargs):
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=240, **kwargs)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}")
    return proc.stdout


class OutOfTreePluginTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="tunehost-sdk-test-")
        cls.prefix = os.path.join(cls.tmp.name, "prefix")
        cls.plugin_build = os.path.join(cls.tmp.name, "build")
        run([CMAKE, "--install", BUILD, "--component", "tunehost-sdk", "--prefix", cls.prefix])
        # A clean environment for the author's build: nothing from ours leaks in.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CMAKE_", "CXXFLAGS"))}
        run([CMAKE, "-S", os.path.join(SOURCE, "examples", "plugin"), "-B", cls.plugin_build,
             "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCMAKE_PREFIX_PATH=" + cls.prefix], env=env)
        run([CMAKE, "--build", cls.plugin_build], env=env)
        cls.plugin_dir = os.path.join(cls.plugin_build, "plugins")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_installed_package_is_self_contained(self):
        for sub in ("include/tunehost/sdk/sdk.h", "include/tunehost/sdk/cpp/helper.h",
                    "lib/cmake/tunehost-sdk/tunehost-sdkConfig.cmake",
                    "lib/cmake/tunehost-sdk/tunehost-sdk-functions.cmake"):
            self.assertTrue(os.path.isfile(os.path.join(self.prefix, sub)), sub)
        for root, _, files in os.walk(os.path.join(self.prefix, "lib", "cmake")):
            for name in files:
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    text = f.read()
                self.assertNotIn(SOURCE, text, f"{name} refers to the source tree")
                self.assertNotIn(BUILD, text, f"{name} refers to the build tree")

    def test_plugin_exports_only_the_entry(self):
        out = run(["nm", "-D", "--defined-only", os.path.join(self.plugin_dir, "exhaustive.so")])
        symbols = [line.split()[-1] for line in out.splitlines() if line.strip()]
        self.assertEqual(symbols, ["th_plugin_entry"])

    def test_host_lists_the_plugin(self):
        out = run([TUNEHOST, "plugins", "--plugins", self.plugin_dir])
        self.assertRegex(out, r"tuner\s+exhaustive\s+org\.example\.exhaustive\s+1\.0\.0")
        self.assertNotIn("refused", out)

    def test_host_runs_an_experiment_with_the_plugin(self):
        with tempfile.TemporaryDirectory() as d:
            config = os.path.join(d, "experiment.yaml")
            with open(config, "w", encoding="utf-8") as f:
                f.write(EXPERIMENT)
            summary_path = os.path.join(d, "summary.json")
            run([TUNEHOST, "run", config, "--plugins", self.plugin_dir,
                 "--summary-json", summary_path, "--log-level", "warn"])
            with open(summary_path, encoding="utf-8") as f:
                summary = json.load(f)
        self.assertEqual(summary["status"], "DONE")
        trials = summary["trials"]
        # The tuner ran out after the 6 configurations, well below maxTrialNumber.
        self.assertEqual(len(trials), 6, trials)
        seen = {(t["parameters"]["optimizer"], t["parameters"]["layers"]) for t in trials}
        self.assertEqual(seen, {(o, n) for o in ("sgd", "adam", "rmsprop") for n in (1, 2)})
        for t in trials:
            self.assertEqual(t["status"], "SUCCEEDED", t)
            self.assertEqual(t["final_metric"], t["parameters"]["layers"], t)


if __name__ == "__main__":
    unittest.main()
