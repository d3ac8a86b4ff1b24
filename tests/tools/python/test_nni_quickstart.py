"""NNI's Python experiment API on tunehost: NNI's HPO quickstart (the
statements of its main.py, unchanged, in nni_quickstart/) run with its own
`from nni.experiment import Experiment`, and what a quickstart user does
next: query after run(), connect(port), view and resume by id."""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

import tunehost
from tunehost.experiment import Experiment
from tunehost.nni_config import AlgorithmConfig, ExperimentConfig, LocalConfig

from test_experiment import binaries

PYTHON_DIR = os.path.dirname(os.path.dirname(tunehost.__file__))
NNI_COMPAT = os.path.join(PYTHON_DIR, "nni_compat")
QUICKSTART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nni_quickstart")
PYTHON = "/usr/bin/python3"


def free_port_base():
    """A port p with p … p+4 free on loopback (the web UI, then four sockets)."""
    for _ in range(50):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
        probe.close()
        held = []
        try:
            for p in range(base, base + 5):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise AssertionError("no five consecutive free ports")


def processes_of(experiment_id):
    """Pids of live processes whose command line names the experiment."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % entry) as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if not zombie and experiment_id.encode() in argv:
            pids.append(int(entry))
    return pids


class ConfigTest(unittest.TestCase):
    """tunehost.nni_config: NNI's attribute-style config, no host needed."""

    def test_attributes_become_the_yaml_keys(self):
        config = ExperimentConfig("local")
        config.trial_command = "python3 model.py"
        config.trial_code_directory = pathlib.Path("/srv/code")
        config.search_space = {"x": {"_type": "uniform", "_value": [0, 1]}}
        config.tuner.name = "TPE"
        config.tuner.class_args["optimize_mode"] = "maximize"
        config.max_experiment_duration = "1h"
        config.training_service.use_active_gpu = True
        self.assertEqual(config.to_dict(), {
            "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
            "trialCommand": "python3 model.py",
            "trialCodeDirectory": "/srv/code",
            "maxExperimentDuration": "1h",
            "tuner": {"name": "TPE", "classArgs": {"optimize_mode": "maximize"}},
            "trainingService": {"platform": "local", "useActiveGpu": True},
        })  # the unnamed assessor and advisor are left out

    def test_nnis_keyword_spellings_and_objects(self):
        config = ExperimentConfig(trialCommand="true", max_trial_number=3,
                                  tuner=AlgorithmConfig(name="random", class_args={"seed": 1}),
                                  assessor={"name": "Medianstop"},
                                  training_service=LocalConfig(gpu_indices=[0]))
        out = config.to_dict()
        self.assertEqual(out["trialCommand"], "true")
        self.assertEqual(out["maxTrialNumber"], 3)
        self.assertEqual(out["tuner"], {"name": "random", "classArgs": {"seed": 1}})
        self.assertEqual(out["assessor"], {"name": "Medianstop", "classArgs": {}})
        self.assertEqual(out["trainingService"], {"platform": "local", "gpuIndices": [0]})

    def test_a_misspelt_field_is_refused_with_the_right_one(self):
        config = ExperimentConfig("local")
        with self.assertRaises(AttributeError) as cm:
            config.trial_concurency = 4
        self.assertIn("'trial_concurrency'", str(cm.exception))
        with self.assertRaises(AttributeError):
            config.tuner.nmae = "TPE"
        with self.assertRaises(AttributeError):
            ExperimentConfig(max_trials=3)

    def test_only_the_local_platform(self):
        for platform in ("remote", "openpai", ["local", "remote"]):
            with self.assertRaises(ValueError) as cm:
                Experiment(platform)
            self.assertIn("tunehost", str(cm.exception))
        self.assertIsInstance(Experiment("local").config, ExperimentConfig)
        self.assertIsInstance(Experiment(["local"]).config, ExperimentConfig)


class QuickstartTest(unittest.TestCase):
    def setUp(self):
        self.tunehost, self.plugins, _ = binaries()
        self.tmp = tempfile.mkdtemp(prefix="tunehost-nni-quickstart-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.code = os.path.join(self.tmp, "code")
        shutil.copytree(QUICKSTART, self.code)
        self.home = os.path.join(self.tmp, "home")
        os.mkdir(self.home)
        self.workdir = os.path.join(self.home, "tunehost-experiments")
        self.experiments = []

    def tearDown(self):
        for exp in self.experiments:
            if exp.process is not None and exp.process.poll() is None:
                exp.process.kill()
                exp.process.wait()
            exp.close()

    def run_script(self, name):
        # NNI's quickstart runs `python model.py`; Debian 12 has python3 only
        # (NNI's tutorial says so too): a `python` on PATH, not an edit.
        bin_dir = os.path.join(self.tmp, "bin")
        os.makedirs(bin_dir, exist_ok=True)
        if not os.path.exists(os.path.join(bin_dir, "python")):
            os.symlink(PYTHON, os.path.join(bin_dir, "python"))
        env = dict(os.environ, HOME=self.home, TUNEHOST_BIN=self.tunehost,
                   PATH=bin_dir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
                   PYTHONPATH=NNI_COMPAT + os.pathsep + PYTHON_DIR)
        return subprocess.run([PYTHON, name], cwd=self.code, env=env, capture_output=True,
                              text=True, timeout=240)

    def only_experiment(self):
        ids = os.listdir(self.workdir)
        self.assertEqual(len(ids), 1, ids)
        return ids[0]

    def viewed(self, experiment_id):
        out = subprocess.run([self.tunehost, "view", experiment_id, "--once", "--workdir",
                              self.workdir], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout

    def test_the_quickstart_runs_as_written(self):
        out = self.run_script("main.py")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        experiment_id = self.only_experiment()
        summary = self.viewed(experiment_id)
        self.assertIn(": DONE", summary)
        self.assertIn("10 trial(s) ended, SUCCEEDED 10", summary)
        self.assertEqual(processes_of(experiment_id), [])
        self.assertFalse(os.path.exists(os.path.join(self.workdir, experiment_id, "host.json")))

    def test_without_stop_the_experiment_ends_with_the_script(self):
        # NNI: "stop is automatically invoked when Python exits".
        with open(os.path.join(self.code, "main.py")) as f:
            text = f.read()
        self.assertIn("\nexperiment.stop()\n", text)
        with open(os.path.join(self.code, "no_stop.py"), "w") as f:
            f.write(text.replace("\nexperiment.stop()\n", "\n"))
        out = self.run_script("no_stop.py")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        experiment_id = self.only_experiment()
        self.assertEqual(processes_of(experiment_id), [])
        self.assertIn("10 trial(s) ended, SUCCEEDED 10", self.viewed(experiment_id))

    def new_experiment(self, trials, concurrency, model_sleep=0.0):
        exp = Experiment("local", tunehost=self.tunehost, plugins=self.plugins)
        exp.config.trial_command = "sleep %s && %s model.py" % (model_sleep, PYTHON)
        exp.config.trial_code_directory = self.code
        exp.config.search_space = {"lr": {"_type": "loguniform", "_value": [0.0001, 0.1]},
                                   "momentum": {"_type": "uniform", "_value": [0, 1]}}
        exp.config.tuner.name = "Random"
        exp.config.max_trial_number = trials
        exp.config.trial_concurrency = concurrency
        exp.config.experiment_working_directory = self.workdir
        self.experiments.append(exp)
        return exp

    def test_after_run_it_answers_until_stop(self):
        exp = self.new_experiment(trials=4, concurrency=2)
        port = free_port_base()
        started_ms = time.time() * 1000
        self.assertTrue(exp.run(port))
        self.assertEqual(exp.port, port)
        self.assertEqual(exp.get_status(), "DONE")
        # NNI's web portal is on the port (the sockets on the four after it).
        self.assertTrue(exp.url.startswith("http://127.0.0.1:%d/?token=" % port), exp.url)
        base, _, token = exp.url.partition("/?token=")
        request = urllib.request.Request(base + "/api/trials",
                                         headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(request, timeout=10) as reply:
            self.assertEqual(json.load(reply)["total"], 4)
        results = exp.export_data()
        self.assertEqual(len(results), 4)
        metrics = exp.get_job_metrics()
        self.assertEqual(sorted(metrics), sorted(r.trialJobId for r in results))
        for trial_id, records in metrics.items():
            self.assertEqual([m.type for m in records], ["PERIODICAL"] * 5 + ["FINAL"])
            stamps = [m.timestamp for m in records]  # when the host accepted each
            self.assertEqual(stamps, sorted(stamps))
            self.assertTrue(started_ms - 1000 <= stamps[0] <= time.time() * 1000, stamps)
        self.assertEqual({j.status for j in exp.list_trial_jobs()}, {"SUCCEEDED"})
        other = Experiment.connect(port)  # NNI's connect(port)
        self.assertEqual(other.get_experiment_profile()["experiment_id"], exp.id)
        self.assertEqual(len(other.export_data()), 4)
        other.close()
        self.assertEqual(len(processes_of(exp.id)), 1)  # the view that answers
        exp.stop()
        self.assertEqual(processes_of(exp.id), [])
        with self.assertRaises(RuntimeError):
            exp.export_data()

        # NNI 3's view by id, then tunehost's and NNI 2's spelling.
        view = Experiment(None, id=exp.id, workdir=self.workdir, tunehost=self.tunehost)
        self.experiments.append(view)
        self.assertIs(view.view(port, non_blocking=True), view)
        self.assertEqual(view.get_status(), "VIEWED")
        self.assertEqual(len(view.list_trial_jobs()), 4)
        view.stop()
        again = Experiment.view(exp.id, non_blocking=True, workdir=self.workdir,
                                tunehost=self.tunehost)
        self.experiments.append(again)
        self.assertEqual(len(again.export_data()), 4)
        again.stop()
        self.assertEqual(processes_of(exp.id), [])

    def test_a_stopped_experiment_resumes_by_id(self):
        exp = self.new_experiment(trials=5, concurrency=1, model_sleep=0.3)
        self.assertIsNone(exp.run(wait_completion=False))
        deadline = time.monotonic() + 60
        while len(exp.export_data()) < 2:
            self.assertLess(time.monotonic(), deadline, "two trials did not succeed")
            time.sleep(0.05)
        exp.stop()
        viewer = Experiment.view(exp.id, non_blocking=True, workdir=self.workdir,
                                 tunehost=self.tunehost)
        self.experiments.append(viewer)
        first = {r.trialJobId: r.value for r in viewer.export_data()}
        self.assertGreaterEqual(len(first), 2)
        viewer.stop()

        resumed = Experiment(None, id=exp.id, workdir=self.workdir, tunehost=self.tunehost,
                             plugins=self.plugins)
        self.experiments.append(resumed)
        self.assertTrue(resumed.resume(free_port_base()))
        self.assertEqual(resumed.get_status(), "DONE")
        after = {r.trialJobId: r.value for r in resumed.export_data()}
        self.assertEqual(len(after), 5)
        for trial_id, value in first.items():
            self.assertEqual(after[trial_id], value)  # nothing re-run, nothing lost
        resumed.stop()
        self.assertEqual(processes_of(exp.id), [])


if __name__ == "__main__":
    unittest.main()
