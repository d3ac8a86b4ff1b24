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

    def test_sdk_configures_alone_and_installs_the_same_package(self):
        # cmake -S sdk: no host dependencies (no ZeroMQ, SQLite, spdlog, ...).
        alone_build = os.path.join(self.tmp.name, "sdk-alone")
        alone_prefix = os.path.join(self.tmp.name, "sdk-alone-prefix")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CMAKE_", "CXXFLAGS"))}
        out = run([CMAKE, "-S", os.path.join(SOURCE, "sdk"), "-B", alone_build], env=env)
        self.assertNotIn("ZeroMQ", out)
        with open(os.path.join(alone_build, "CMakeCache.txt"), encoding="utf-8") as f:
            cache = f.read()
        for host_dependency in ("cppzmq_DIR", "spdlog_DIR", "yaml-cpp_DIR", "SQLite3"):
            self.assertNotIn(host_dependency, cache)
        run([CMAKE, "--install", alone_build, "--prefix", alone_prefix])

        def files(root):
            return sorted(os.path.relpath(os.path.join(d, f), root)
                          for d, _, names in os.walk(root) for f in names)
        self.assertEqual(files(alone_prefix), files(self.prefix))
        build = os.path.join(self.tmp.name, "build-against-alone")
        run([CMAKE, "-S", os.path.join(SOURCE, "examples", "plugin"), "-B", build,
             "-DCMAKE_PREFIX_PATH=" + alone_prefix], env=env)
        run([CMAKE, "--build", build], env=env)
        self.assertTrue(os.path.isfile(os.path.join(build, "plugins", "exhaustive.so")))

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


C_EXPERIMENT = """\
searchSpace:
  optimizer: {_type: choice, _value: [sgd, adam, {lr: 0.1}]}
  layers: {_type: randint, _value: [1, 4]}
  dropout: {_type: uniform, _value: [0.1, 0.5]}
  width: {_type: quniform, _value: [16, 256, 16]}
  lr: {_type: loguniform, _value: [0.0001, 0.1]}
  batch: {_type: qloguniform, _value: [8, 512, 8]}
trialCommand: >-
  /usr/bin/python3 -c "import json, os;
  p = json.loads(os.environ['TUNEHOST_PARAMETERS']);
  os.write(3, (json.dumps({'type': 'FINAL', 'value': p['dropout']}) + '\\n').encode())"
trialConcurrency: 2
maxTrialNumber: 40
tuner:
  name: crandom
  classArgs: {seed: 7, optimize_mode: maximize}
"""


class CPluginTest(unittest.TestCase):
    """examples/c-plugin: a tuner in C with Debian's msgpack-c, built against
    the installed SDK package the way a C author builds one."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="tunehost-c-plugin-test-")
        prefix = os.path.join(cls.tmp.name, "prefix")
        build = os.path.join(cls.tmp.name, "build")
        run([CMAKE, "--install", BUILD, "--component", "tunehost-sdk", "--prefix", prefix])
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CMAKE_", "CFLAGS"))}
        run([CMAKE, "-S", os.path.join(SOURCE, "examples", "c-plugin"), "-B", build,
             "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCMAKE_PREFIX_PATH=" + prefix], env=env)
        run([CMAKE, "--build", build], env=env)
        cls.plugin_dir = os.path.join(build, "plugins")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_experiment(self, text, check=True):
        with tempfile.TemporaryDirectory() as d:
            config = os.path.join(d, "experiment.yaml")
            with open(config, "w", encoding="utf-8") as f:
                f.write(text + "experimentWorkingDirectory: %s\n" % d)
            summary_path = os.path.join(d, "summary.json")
            proc = subprocess.run([TUNEHOST, "run", config, "--plugins", self.plugin_dir,
                                   "--summary-json", summary_path, "--log-level", "warn"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=240)
            if not check:
                return proc, None
            self.assertEqual(proc.returncode, 0, proc.stdout)
            with open(summary_path, encoding="utf-8") as f:
                return proc, json.load(f)

    def test_plugin_exports_only_the_entry_and_loads(self):
        out = run(["nm", "-D", "--defined-only", os.path.join(self.plugin_dir, "crandom.so")])
        self.assertEqual([line.split()[-1] for line in out.splitlines() if line.strip()],
                         ["th_plugin_entry"])
        out = run([TUNEHOST, "plugins", "--plugins", self.plugin_dir])
        self.assertRegex(out, r"tuner\s+crandom\s+org\.example\.crandom\s+1\.0\.0")
        self.assertNotIn("refused", out)

    def test_every_parameter_follows_its_type(self):
        _, summary = self.run_experiment(C_EXPERIMENT)
        self.assertEqual(summary["status"], "DONE")
        trials = summary["trials"]
        self.assertEqual(len(trials), 40)
        for t in trials:
            self.assertEqual(t["status"], "SUCCEEDED", t)
            p = t["parameters"]
            self.assertIn(p["optimizer"], ["sgd", "adam", {"lr": 0.1}])
            self.assertIn(p["layers"], [1, 2, 3])
            self.assertTrue(0.1 <= p["dropout"] <= 0.5, p)
            self.assertTrue(16 <= p["width"] <= 256 and p["width"] % 16 == 0, p)
            self.assertTrue(0.0001 <= p["lr"] <= 0.1, p)
            self.assertTrue(8 <= p["batch"] <= 512 and p["batch"] % 8 == 0, p)
            self.assertEqual(t["final_metric"], p["dropout"])
        self.assertEqual(len({t["parameters"]["dropout"] for t in trials}), 40)
        self.assertEqual({t["parameters"]["layers"] for t in trials}, {1, 2, 3})
        # The seed makes the run repeatable.
        _, again = self.run_experiment(C_EXPERIMENT)
        self.assertEqual(sorted(t["parameters"]["lr"] for t in again["trials"]),
                         sorted(t["parameters"]["lr"] for t in trials))

    def test_what_it_cannot_do_is_refused_by_name(self):
        space = C_EXPERIMENT.replace("{_type: uniform, _value: [0.1, 0.5]}",
                                     "{_type: normal, _value: [0.3, 0.1]}")
        # Refused when the experiment is configured: nothing runs, exit 2.
        proc, _ = self.run_experiment(space, check=False)
        self.assertEqual(proc.returncode, 2, proc.stdout)
        self.assertIn("tuner crandom: dropout: crandom supports choice, randint", proc.stdout)
        args = C_EXPERIMENT.replace("{seed: 7, optimize_mode: maximize}", "{seed: -1}")
        proc, _ = self.run_experiment(args, check=False)
        self.assertEqual(proc.returncode, 2, proc.stdout)
        self.assertIn("classArgs: crandom takes seed", proc.stdout)


if __name__ == "__main__":
    unittest.main()
