"""End-to-end tests: real tunehost, real workers, real plugins, real sockets."""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TERMINAL = {"SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED", "EARLY_STOPPED"}

SPACE = {
    "x": {"_type": "uniform", "_value": [0, 1]},
    "k": {"_type": "randint", "_value": [0, 4]},
}


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(text))
    return path


class RunCase(unittest.TestCase):
    """What the `tunehost run` tests share: experiments written, run and read back."""

    def run_experiment(self, yaml_text, timeout=180):
        tmp = tempfile.mkdtemp(prefix="tunehost-run-")
        config = write(os.path.join(tmp, "experiment.yaml"), yaml_text)
        summary = os.path.join(tmp, "summary.json")
        proc = subprocess.run(
            [harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR,
             "--summary-json", summary],
            cwd=tmp, capture_output=True, text=True, timeout=timeout)
        with open(summary, encoding="utf-8") as f:
            return proc, json.load(f)

    @staticmethod
    def example_config(prefix):
        """The example experiment's text, its trial code where it is and its
        working directory in a new temporary directory."""
        with open(os.path.join(ROOT, "examples", "quadratic", "experiment.yaml")) as f:
            text = f.read()
        tmp = tempfile.mkdtemp(prefix=prefix)
        return text.replace("trialCodeDirectory: .",
                            "trialCodeDirectory: %s\nexperimentWorkingDirectory: %s"
                            % (os.path.join(ROOT, "examples", "quadratic"), tmp))

    def run_example_with_tuner(self, prefix, tuner):
        """The example experiment with `tuner` (YAML text of the tuner's map)
        instead of its own: every trial ends, inside the space, some succeed."""
        text = self.example_config(prefix)
        start = text.index("tuner:")
        end = text.index("assessor:")
        text = text[:start] + "tuner:\n" + tuner + "\n" + text[end:]
        proc, summary = self.run_experiment(text)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(summary["status"], "DONE")
        trials = summary["trials"]
        self.assertEqual(len(trials), 24)
        for t in trials:
            self.assertIn(t["status"], TERMINAL)
            p = t["parameters"]
            self.assertTrue(-5 <= p["x"] <= 5, p)
            self.assertTrue(0.0001 <= p["lr"] <= 0.1, p)
            self.assertIn(p["layers"], range(1, 6))
            self.assertIn(p["optimizer"], ("sgd", "adam"))
        self.assertTrue(any(t["status"] == "SUCCEEDED" for t in trials))
        return summary

    def quick_trial(self, tmp, periodic=0):
        """A trial that reports `periodic` intermediate values and a FINAL
        computed from its parameters (x, k, TRIAL_BUDGET when present)."""
        write(os.path.join(tmp, "trial.py"), """
            import json, os
            p = json.loads(os.environ["TUNEHOST_PARAMETERS"])
            out = os.fdopen(int(os.environ["TUNEHOST_METRIC_FD"]), "w", buffering=1)
            x = float(p.get("x", 0)) + float(p.get("k", 0))
            for step in range(%d):
                out.write(json.dumps({"value": x * (step + 1) / 10.0}) + "\\n")
            budget = float(p.get("TRIAL_BUDGET", 1))
            out.write(json.dumps({"type": "FINAL", "value": x + budget / 100.0}) + "\\n")
            """ % periodic)

    def algorithm_experiment(self, tuner, concurrency, max_trials, space, assessor="",
                             periodic=0):
        tmp = tempfile.mkdtemp(prefix="tunehost-algo-")
        self.quick_trial(tmp, periodic)
        return self.run_experiment("""
            searchSpace: %s
            trialCommand: %s trial.py
            trialCodeDirectory: %s
            experimentWorkingDirectory: %s
            trialConcurrency: %d
            maxTrialNumber: %d
            tuner: %s
            %s
            """ % (json.dumps(space), sys.executable, tmp, tmp, concurrency, max_trials,
                   json.dumps(tuner), assessor))

    def nni_script_experiment(self, env=None):
        """An NNI trial script with its own `import nni`, run as NNI's docs
        write one; returns (proc, summary)."""
        tmp = tempfile.mkdtemp(prefix="tunehost-nni-import-")
        write(os.path.join(tmp, "trial.py"), """
            import nni

            params = nni.get_next_parameter()
            for epoch in range(3):
                nni.report_intermediate_result(params["x"] * (epoch + 1))
            try:
                from nni.compression import PRUNER  # one of a real NNI's other modules
            except ImportError:
                PRUNER = None
            nni.report_final_result({"default": params["x"] * 10, "where": nni.__file__,
                                     "pruner": PRUNER})
            """)
        config = write(os.path.join(tmp, "config.yml"), """
            searchSpace: {x: {_type: uniform, _value: [0, 1]}}
            trialCommand: %s trial.py
            trialCodeDirectory: .
            trialConcurrency: 2
            maxTrialNumber: 4
            experimentWorkingDirectory: wd
            tuner: {name: TPE, classArgs: {optimize_mode: maximize}}
            """ % sys.executable)
        summary = os.path.join(tmp, "summary.json")
        full_env = dict(os.environ)
        # What a user has: not the test's PYTHONPATH to tools/python.
        full_env.pop("PYTHONPATH", None)
        full_env.update(env or {})
        proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR,
                               "--summary-json", summary],
                              cwd=tmp, capture_output=True, text=True, timeout=180, env=full_env)
        with open(summary, encoding="utf-8") as f:
            return proc, json.load(f)

    def failing_experiment(self, extra=""):
        tmp = tempfile.mkdtemp(prefix="tunehost-failing-")
        write(os.path.join(tmp, "trial.py"), """
            import sys
            print("loading data", file=sys.stderr)
            import a_module_that_is_not_there
            """)
        return self.run_experiment("""
            searchSpace: {x: {_type: uniform, _value: [0, 1]}}
            trialCommand: %s trial.py
            trialCodeDirectory: %s
            experimentWorkingDirectory: %s
            trialConcurrency: 1
            maxTrialNumber: 4
            tuner: {name: random}
            %s
            """ % (sys.executable, tmp, tmp, extra))

    def multi_objective_run(self, tuner_yaml, require_infeasible=True):
        # A trial reports a map: the metric ("default"), two objectives and a
        # constraint value (<= 0 is feasible). The summary's front must be
        # exactly the feasible trials no other feasible trial dominates.
        # require_infeasible: the run must hold an infeasible trial (a tuner
        # that learns the constraint may keep every trial feasible).
        # Returns (tmp, summary, trials, expected front).
        tmp = tempfile.mkdtemp(prefix="tunehost-pareto-")
        write(os.path.join(tmp, "trial.py"), """
            import nni

            p = nni.get_next_parameter()
            f1 = p["x"]
            f2 = (1 - p["x"]) ** 2 + p["y"]
            nni.report_final_result({"default": f1, "f1": f1, "f2": f2, "c": 0.2 - p["x"]})
            """)
        proc, summary = self.run_experiment("""
            searchSpace: {x: {_type: uniform, _value: [0, 1]}, y: {_type: uniform, _value: [0, 1]}}
            trialCommand: %s trial.py
            trialCodeDirectory: %s
            experimentWorkingDirectory: %s
            trialConcurrency: 3
            maxTrialNumber: 24
            tuner: %s
            """ % (sys.executable, tmp, tmp, tuner_yaml))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(summary["status"], "DONE")
        trials = summary["trials"]
        self.assertEqual(len(trials), 24)
        self.assertTrue(all(t["status"] == "SUCCEEDED" for t in trials), trials)
        self.assertEqual(summary["objectives"], {"f1": "minimize", "f2": "minimize"})
        self.assertEqual(summary["constraints"], ["c"])
        feasible = [t for t in trials if t["final_result"]["c"] <= 0]
        self.assertTrue(feasible, trials)
        if require_infeasible:
            self.assertLess(len(feasible), len(trials), trials)

        def dominates(a, b):
            ra, rb = a["final_result"], b["final_result"]
            return (ra["f1"] <= rb["f1"] and ra["f2"] <= rb["f2"]
                    and (ra["f1"] < rb["f1"] or ra["f2"] < rb["f2"]))

        expected = [t["trial_id"] for t in feasible
                    if not any(dominates(o, t) for o in feasible)]
        self.assertTrue(expected)
        self.assertEqual(summary["pareto_front"], expected)
        self.assertEqual(summary["best"], expected)
        self.assertIn("Pareto front: %d trial(s)" % len(expected), proc.stdout)
        return tmp, summary, trials, expected


class RunCommandTest(RunCase):
    """`tunehost run EXPERIMENT.yaml`: the README's first command, end to end."""

    def test_example_experiment_finishes_every_trial(self):
        text = self.example_config("tunehost-example-")
        proc, summary = self.run_experiment(text)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(summary["status"], "DONE")
        trials = summary["trials"]
        self.assertEqual(len(trials), 24)
        self.assertEqual(sorted(t["sequence_id"] for t in trials), list(range(24)))
        self.assertEqual(len({t["trial_id"] for t in trials}), 24)
        for t in trials:
            self.assertIn(t["status"], TERMINAL)
        succeeded = [t for t in trials if t["status"] == "SUCCEEDED"]
        self.assertTrue(succeeded)
        for t in succeeded:
            self.assertIsNotNone(t["final_metric"])
            self.assertGreaterEqual(t["final_metric"], 0.0)
            self.assertLessEqual(t["final_metric"], 1.0)
        best = max(t["final_metric"] for t in succeeded)
        self.assertIn("%.4f" % best, proc.stdout)

    def test_nni_v1_config_runs_as_written(self):
        # NNI's older format, keys as its examples had them: converted with
        # the mapping NNI's converter applies, and said so once.
        tmp = tempfile.mkdtemp(prefix="tunehost-v1-")
        self.quick_trial(tmp)
        write(os.path.join(tmp, "search_space.json"),
              json.dumps({"x": {"_type": "uniform", "_value": [0, 1]}}))
        config = write(os.path.join(tmp, "config.yml"), """
            authorName: default
            experimentName: example_v1
            trialConcurrency: 2
            maxExecDuration: 1h
            maxTrialNum: 5
            #choice: local, remote, pai
            trainingServicePlatform: local
            searchSpacePath: search_space.json
            useAnnotation: false
            logDir: %s
            tuner:
              builtinTunerName: TPE
              classArgs:
                optimize_mode: maximize
            trial:
              command: %s trial.py
              codeDir: .
              gpuNum: 0
            """ % (os.path.join(tmp, "wd"), sys.executable))
        summary = os.path.join(tmp, "summary.json")
        proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR,
                               "--summary-json", summary],
                              cwd=tmp, capture_output=True, text=True, timeout=180)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("trainingServicePlatform: NNI's v1 config format", proc.stderr)
        with open(summary, encoding="utf-8") as f:
            result = json.load(f)
        self.assertEqual(result["status"], "DONE")
        self.assertEqual(len(result["trials"]), 5)
        self.assertTrue(all(t["status"] == "SUCCEEDED" for t in result["trials"]))
        self.assertEqual(os.listdir(os.path.join(tmp, "wd")), [result["experiment_id"]])

    def test_a_missing_algorithm_is_refused_before_anything_is_written(self):
        tmp = tempfile.mkdtemp(prefix="tunehost-noplugin-")
        config = write(os.path.join(tmp, "config.yml"), """
            searchSpace: {x: {_type: uniform, _value: [0, 1]}}
            trialCommand: "true"
            trialConcurrency: 1
            experimentWorkingDirectory: %s
            tuner: {name: SMAC}
            assessor: {name: Nope}
            """ % os.path.join(tmp, "wd"))
        proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertRegex(proc.stderr, r"tuner\.name: no tuner plugin named 'SMAC' in .*"
                                      r"\(available: [^)]*\btpe\b[^)]*\): NNI's SMAC .* is not "
                                      r"shipped with tunehost; the closest built-in is tpe")
        self.assertRegex(proc.stderr, r"assessor\.name: no assessor plugin named 'Nope' in .*"
                                      r"\(available: [^)]*\bmedianstop\b[^)]*\)")
        self.assertFalse(os.path.exists(os.path.join(tmp, "wd")), "nothing is created")

    def test_several_plugin_directories_load_together_the_first_wins(self):
        tmp = tempfile.mkdtemp(prefix="tunehost-plugin-dirs-")
        first, second = os.path.join(tmp, "first"), os.path.join(tmp, "second")
        os.makedirs(first)
        os.makedirs(second)
        shutil.copy(os.path.join(harness.PLUGIN_DIR, "random.so"), first)
        for name in ("random.so", "tpe.so", "medianstop.so"):
            shutil.copy(os.path.join(harness.PLUGIN_DIR, name), second)
        dirs = first + ":" + second
        listed = subprocess.run([harness.TUNEHOST, "plugins", "--plugins", dirs],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        files = {line.split()[1]: line.split()[-1] for line in listed.stdout.splitlines()
                 if line.startswith(("tuner", "assessor"))}
        self.assertEqual(files, {"random": os.path.join(first, "random.so"),
                                 "tpe": os.path.join(second, "tpe.so"),
                                 "medianstop": os.path.join(second, "medianstop.so")})
        self.assertRegex(listed.stdout, r"refused:\n.*second/random\.so: duplicate tuner id "
                                        r"org\.tunehost\.random, already loaded from "
                                        r".*first/random\.so")
        config = write(os.path.join(tmp, "config.yml"), """
            searchSpace: {x: {_type: uniform, _value: [0, 1]}}
            trialCommand: "true"
            trialConcurrency: 1
            maxTrialNumber: 2
            experimentWorkingDirectory: %s
            tuner: {name: tpe}
            assessor: {name: medianstop}
            """ % os.path.join(tmp, "wd"))
        proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", dirs],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("plugins      %s (3 loaded, 1 refused)" % dirs, proc.stdout)
        proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", first],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("no tuner plugin named 'tpe' in %s (available: random)" % first,
                      proc.stderr)

    def test_an_nni_trial_script_runs_with_its_own_import(self):
        proc, summary = self.nni_script_experiment()
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(len(summary["trials"]), 4)
        for t in summary["trials"]:
            self.assertEqual(t["status"], "SUCCEEDED", t)
            self.assertAlmostEqual(t["final_metric"], t["parameters"]["x"] * 10)
            self.assertIn("nni_compat", t["final_result"]["where"])

    def test_a_real_nni_is_not_shadowed(self):
        # A user's own NNI (a stand-in package here): it is the `nni` the
        # trial imports, with its other modules; inside a tunehost trial its
        # trial API reports to tunehost. TUNEHOST_NNI=real leaves it alone.
        site = tempfile.mkdtemp(prefix="tunehost-real-nni-")
        os.mkdir(os.path.join(site, "nni"))
        write(os.path.join(site, "nni", "__init__.py"), """
            MARK = "the user's NNI"
            def get_next_parameter():
                return {"x": -1.0}
            def report_intermediate_result(metric):
                pass
            def report_final_result(metric):
                print("REAL NNI would report", metric)
            """)
        write(os.path.join(site, "nni", "compression.py"), "PRUNER = 1\n")
        proc, summary = self.nni_script_experiment({"PYTHONPATH": site})
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        for t in summary["trials"]:
            self.assertEqual(t["status"], "SUCCEEDED", t)
            self.assertGreaterEqual(t["parameters"]["x"], 0)
            self.assertAlmostEqual(t["final_metric"], t["parameters"]["x"] * 10)
            self.assertEqual(t["final_result"]["where"], os.path.join(site, "nni", "__init__.py"))
            self.assertEqual(t["final_result"]["pruner"], 1)
        proc, summary = self.nni_script_experiment({"PYTHONPATH": site, "TUNEHOST_NNI": "real"})
        # The user's NNI reports nowhere: trials succeed without a metric.
        for t in summary["trials"]:
            self.assertIsNone(t["final_metric"], t)

    def test_failing_trials_say_why_and_a_run_of_failures_exits_nonzero(self):
        proc, summary = self.failing_experiment()
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn("every trial failed (4)", proc.stderr)
        self.assertEqual([t["status"] for t in summary["trials"]], ["FAILED"] * 4)
        # Each failure's last stderr lines under its line, live...
        self.assertEqual(proc.stdout.count(
            "      | ModuleNotFoundError: No module named 'a_module_that_is_not_there'"), 4,
            proc.stdout)
        # ...and the last one's at the end, with where its logs are.
        self.assertRegex(proc.stdout, r"4 trial\(s\) FAILED; the last, T00003: exit code 1\n"
                                      r"  \| loading data\n(  \| .*\n)*  \| ModuleNotFoundError")
        self.assertRegex(proc.stdout, r"its logs: .*/trials/T00003-\*")

    def test_consecutive_failures_stop_the_experiment_when_asked(self):
        proc, summary = self.failing_experiment("tunehost: {maxConsecutiveFailures: 2}")
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertEqual(summary["status"], "ERROR")
        self.assertEqual(len(summary["trials"]), 2)
        self.assertIn("2 trials in a row failed", summary["error"])
        self.assertIn("T00001: exit code 1", summary["error"])

    def test_max_result_bytes_reaches_the_local_workers(self):
        # A FINAL of about 200 KiB: over the default results limit (the local
        # worker skips it, the trial ends without a result), within 1 MiB.
        tmp = tempfile.mkdtemp(prefix="tunehost-bigresult-")
        write(os.path.join(tmp, "trial.py"), """
            import json, os
            out = os.fdopen(int(os.environ["TUNEHOST_METRIC_FD"]), "w", buffering=1)
            value = {"default": 0.5, **{"k%d" % i: float(i) for i in range(12000)}}
            out.write(json.dumps({"type": "FINAL", "value": value}) + "\\n")
            """)

        def run(extra):
            return self.run_experiment("""
                searchSpace: {x: {_type: uniform, _value: [0, 1]}}
                trialCommand: %s trial.py
                trialCodeDirectory: %s
                experimentWorkingDirectory: %s
                trialConcurrency: 1
                maxTrialNumber: 1
                tuner: {name: random}
                %s
                """ % (sys.executable, tmp, tmp, extra))
        proc, summary = run("")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIsNone(summary["trials"][0]["final_metric"])
        proc, summary = run("tunehost: {maxResultBytes: 1048576}")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(summary["trials"][0]["final_metric"], 0.5)

    def test_bad_config_names_the_key_and_exits_2(self):
        tmp = tempfile.mkdtemp(prefix="tunehost-bad-")
        config = write(os.path.join(tmp, "experiment.yaml"), """
            searchSpace: {x: {_type: uniform, _value: [0, 1]}}
            trialConcurrency: 1
            tuner: {name: random}
            """)
        proc = subprocess.run([harness.TUNEHOST, "run", config, "--plugins", harness.PLUGIN_DIR],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("trialCommand", proc.stderr + proc.stdout)


class AlgorithmRunTest(RunCase):
    """Each algorithm through `tunehost run`: the plugin, the host and real
    workers together, as NNI names and configures it."""

    def test_the_example_runs_with_the_cmaes_tuner(self):
        self.run_example_with_tuner(
            "tunehost-cmaes-",
            "  name: cmaes\n  classArgs: {seed: 7, popsize: 4, optimize_mode: maximize}")

    def test_the_example_runs_with_nnis_gptuner_as_nni_names_it(self):
        # NNI's builtin name and arguments: the gp tuner runs them.
        self.run_example_with_tuner(
            "tunehost-gp-",
            "  name: GPTuner\n  classArgs: {optimize_mode: maximize, utility: ei, kappa: 5.0, "
            "xi: 0.0, nu: 2.5, alpha: 1e-6, cold_start_num: 5, selection_num_warm_up: 5000, "
            "selection_num_starting_points: 20}")

    def test_medianstop_stops_a_bad_trial(self):
        tmp = tempfile.mkdtemp(prefix="tunehost-medianstop-")
        write(os.path.join(tmp, "trial.py"), """
            import json, os, time
            p = json.loads(os.environ["TUNEHOST_PARAMETERS"])
            out = os.fdopen(int(os.environ["TUNEHOST_METRIC_FD"]), "w", buffering=1)
            for step in range(8):
                out.write(json.dumps({"value": p["x"]}) + "\\n")
                out.flush()
                time.sleep(0.15)
            out.write(json.dumps({"type": "FINAL", "value": p["x"]}) + "\\n")
            """)
        proc, summary = self.run_experiment("""
            searchSpace:
              x: {_type: uniform, _value: [0, 1]}
            trialCommand: %s trial.py
            trialCodeDirectory: %s
            experimentWorkingDirectory: %s
            trialConcurrency: 1
            maxTrialNumber: 10
            tuner: {name: random, classArgs: {seed: 3}}
            assessor: {name: medianstop, classArgs: {optimize_mode: maximize, start_step: 2}}
            """ % (sys.executable, tmp, tmp))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        statuses = collections.Counter(t["status"] for t in summary["trials"])
        self.assertEqual(sum(statuses.values()), 10)
        self.assertGreaterEqual(statuses["EARLY_STOPPED"], 1, statuses)
        finished = [t for t in summary["trials"] if t["status"] == "SUCCEEDED"]
        for t in summary["trials"]:
            if t["status"] != "EARLY_STOPPED":
                continue
            # Stopped only when worse than the median of what succeeded before it.
            before = [f["final_metric"] for f in finished if f["sequence_id"] < t["sequence_id"]]
            self.assertTrue(before)
            before.sort()
            self.assertLess(t["parameters"]["x"], before[(len(before) - 1) // 2])

    def test_exhausted_grid_finishes_the_experiment(self):
        # NNI's exhausted grid never reaches DONE; here the experiment ends
        # after exactly the grid's 6 configurations although 50 were allowed.
        # The tuner is named as NNI names it (GridSearch): configs run unchanged.
        space = {"k": {"_type": "choice", "_value": [1, 2, 3]},
                 "x": {"_type": "quniform", "_value": [0, 1, 1]}}
        proc, summary = self.algorithm_experiment({"name": "GridSearch"}, 2, 50, space)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(summary["status"], "DONE")
        configs = sorted((t["parameters"]["k"], t["parameters"]["x"]) for t in summary["trials"])
        self.assertEqual(configs, [(k, x) for k in (1, 2, 3) for x in (0.0, 1.0)])
        self.assertTrue(all(t["status"] == "SUCCEEDED" for t in summary["trials"]))

    def test_evolution_credits_keep_every_slot_and_the_run_completes(self):
        # population 2 < concurrency 3: the tuner answers "no more" and later
        # serves the kept ids through send_trial; every trial still runs.
        proc, summary = self.algorithm_experiment(
            {"name": "evolution", "classArgs": {"population_size": 2, "seed": 1,
                                                "optimize_mode": "maximize"}},
            3, 12, SPACE)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(summary["status"], "DONE")
        self.assertEqual(len(summary["trials"]), 12)
        self.assertTrue(all(t["status"] == "SUCCEEDED" for t in summary["trials"]))

    def test_pbt_hands_checkpoints_from_step_to_step_as_nni_names_it(self):
        # NNI's PBTTuner by its NNI name, and a trial script as NNI's PBT
        # example writes one: load the model from load_checkpoint_dir (none in
        # step 0), train one step, save to save_checkpoint_dir. The "model"
        # is the number of steps it has been trained and the best x it saw.
        tmp = tempfile.mkdtemp(prefix="tunehost-pbt-")
        ckpt = os.path.join(tmp, "ckpt")
        write(os.path.join(tmp, "trial.py"), """
            import json, os
            import nni

            params = nni.get_next_parameter()
            model = {"steps": 0, "trail": []}
            load = os.path.join(params["load_checkpoint_dir"], "model.json")
            if os.path.exists(load):
                with open(load) as f:
                    model = json.load(f)
            model["steps"] += 1
            model["trail"].append(params["save_checkpoint_dir"])
            os.makedirs(params["save_checkpoint_dir"], exist_ok=True)
            with open(os.path.join(params["save_checkpoint_dir"], "model.json"), "w") as f:
                json.dump(model, f)
            nni.report_final_result(model["steps"] - (params["x"] - 0.7) ** 2)
            """)
        proc, summary = self.run_experiment("""
            searchSpace: {x: {_type: uniform, _value: [0, 1]}}
            trialCommand: %s trial.py
            trialCodeDirectory: %s
            experimentWorkingDirectory: %s
            trialConcurrency: 3
            maxTrialNumber: 12
            tuner: {name: PBTTuner, classArgs: {optimize_mode: maximize, population_size: 4,
                                                all_checkpoint_dir: %s}}
            """ % (sys.executable, tmp, tmp, ckpt))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(summary["status"], "DONE")
        trials = summary["trials"]
        self.assertEqual(len(trials), 12)
        self.assertTrue(all(t["status"] == "SUCCEEDED" for t in trials), trials)
        by_step = {}
        for t in trials:
            p = t["parameters"]
            step = int(os.path.basename(p["save_checkpoint_dir"]))
            by_step.setdefault(step, []).append(p)
            self.assertTrue(0 <= p["x"] <= 1, p)
        self.assertEqual(sorted(by_step), [0, 1, 2])
        for step, ps in by_step.items():
            self.assertEqual(len(ps), 4, ps)  # the whole population, each step
            self.assertEqual(len({p["save_checkpoint_dir"] for p in ps}), 4)
        for p in by_step[2]:
            # Every step-2 model was trained three times: it continued a
            # checkpoint saved in step 1, which continued one of step 0.
            with open(os.path.join(p["save_checkpoint_dir"], "model.json")) as f:
                model = json.load(f)
            self.assertEqual(model["steps"], 3, model)
            self.assertEqual([int(os.path.basename(d)) for d in model["trail"]], [0, 1, 2])
            self.assertTrue(all(d.startswith(ckpt + os.sep) for d in model["trail"]), model)
        # Exploit: in each new step the worst member (of four, fraction 0.2:
        # one) continues another member's checkpoint.
        for step in (1, 2):
            moved = [p for p in by_step[step] if os.path.dirname(p["load_checkpoint_dir"])
                     != os.path.dirname(p["save_checkpoint_dir"])]
            self.assertEqual(len(moved), 1, by_step[step])

    def test_motpe_tpe_with_objectives_gives_the_feasible_pareto_front(self):
        # NNI's name for tpe, with objectives and a constraint: MOTPE.
        self.multi_objective_run(
            "{name: TPE, classArgs: {objectives: {f1: minimize, f2: minimize}, constraints: [c],"
            " seed: 4, tpe_args: {n_startup_jobs: 6}}}", require_infeasible=False)

    def test_constraints_alone_make_the_best_feasible_trial_the_front(self):
        # tpe with a constraint and no objectives: the metric in optimize_mode
        # ranks the feasible trials; an infeasible one (smaller x) is never
        # shown as the best.
        tmp = tempfile.mkdtemp(prefix="tunehost-constrained-")
        write(os.path.join(tmp, "trial.py"), """
            import nni

            p = nni.get_next_parameter()
            nni.report_final_result({"default": p["x"], "c": 0.5 - p["x"]})
            """)
        proc, summary = self.run_experiment("""
            searchSpace: {x: {_type: uniform, _value: [0, 1]}}
            trialCommand: %s trial.py
            trialCodeDirectory: %s
            experimentWorkingDirectory: %s
            trialConcurrency: 2
            maxTrialNumber: 12
            tuner: {name: tpe, classArgs: {optimize_mode: minimize, constraints: [c], seed: 3,
                                           tpe_args: {n_startup_jobs: 12}}}
            """ % (sys.executable, tmp, tmp))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        trials = summary["trials"]
        feasible = [t for t in trials if t["final_result"]["c"] <= 0]
        self.assertTrue(0 < len(feasible) < len(trials), trials)
        best = min(feasible, key=lambda t: t["final_result"]["default"])
        self.assertEqual(summary["objectives"], {"default": "minimize"})
        self.assertEqual(summary["pareto_front"], [best["trial_id"]])
        self.assertEqual(summary["best"], [best["trial_id"]])

    def test_nsga2_two_objectives_and_a_constraint_give_the_feasible_pareto_front(self):
        tmp, summary, trials, expected = self.multi_objective_run(
            "{name: nsga2, classArgs: {objectives: {f1: minimize, f2: minimize},"
            " constraints: [c], population_size: 6, seed: 4}}")
        # The stored experiment, viewed: the same front, rebuilt from the store.
        view = subprocess.run([harness.TUNEHOST, "view", summary["experiment_id"], "--workdir",
                               tmp, "--once"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(view.returncode, 0, view.stdout + view.stderr)
        self.assertIn("Pareto front: %d trial(s)" % len(expected), view.stdout)
        listed = [line.split()[1] for line in view.stdout.splitlines()
                  if line.startswith("  ") and line.split()[1:2] and line.split()[1].startswith("T")]
        self.assertEqual(sorted(listed), sorted(expected), view.stdout)
        # A view that serves the store answers tunectl's status with the front
        # its engine rebuilt (wire-format.md §4.2, ST pareto_front).
        viewer = subprocess.Popen([harness.TUNEHOST, "view", summary["experiment_id"],
                                   "--workdir", tmp],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tunectl = [os.path.join(harness.BIN_DIR, "tunectl"), "--experiment",
                   summary["experiment_id"], "--workdir", tmp]
        try:
            replies = []

            def answered():
                r = subprocess.run(tunectl + ["--json", "status"], capture_output=True,
                                   text=True, timeout=30)
                if r.returncode == 0 and json.loads(r.stdout)["status"] == "VIEWED":
                    replies.append(json.loads(r.stdout))
                return bool(replies)
            harness.wait_for(answered, 30, "tunectl status through the view")
            front = replies[0]["pareto_front"]
            self.assertEqual(sorted(t["trial_id"] for t in front), sorted(expected))
            by_id = {t["trial_id"]: t for t in trials}
            for t in front:
                self.assertEqual(t["result"], by_id[t["trial_id"]]["final_result"])
            text = subprocess.run(tunectl + ["status"], capture_output=True, text=True,
                                  timeout=30)
            self.assertEqual(text.returncode, 0, text.stderr)
            self.assertIn("pareto front   %d trial(s)" % len(expected), text.stdout)
            self.assertIn("objectives     f1 (minimize), f2 (minimize)", text.stdout)
            self.assertIn("constraints    c <= 0", text.stdout)
            self.assertNotIn("optimize mode", text.stdout)
            self.assertEqual(replies[0]["objectives"], {"f1": "minimize", "f2": "minimize"})
            self.assertEqual(replies[0]["constraints"], ["c"])
        finally:
            harness.stop(viewer)

    def test_hyperband_trials_get_their_budget_and_the_best_are_promoted(self):
        proc, summary = self.algorithm_experiment(
            {"name": "hyperband", "classArgs": {"R": 9, "eta": 3, "seed": 2, "exec_mode": "serial"}},
            2, 13,
            {"x": {"_type": "uniform", "_value": [0, 1]}})
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(summary["status"], "DONE")
        trials = sorted(summary["trials"], key=lambda t: t["sequence_id"])
        self.assertEqual(len(trials), 13)
        budgets = [t["parameters"]["TRIAL_BUDGET"] for t in trials]
        # Bracket s=2 of R=9, eta=3: 9 configurations at budget 1, the best 3
        # again at budget 3, the best one at budget 9.
        self.assertEqual(budgets, [1] * 9 + [3] * 3 + [9])
        first = sorted(trials[:9], key=lambda t: -t["final_metric"])
        self.assertEqual(sorted(t["parameters"]["x"] for t in trials[9:12]),
                         sorted(t["parameters"]["x"] for t in first[:3]))
        self.assertEqual(trials[12]["parameters"]["x"], first[0]["parameters"]["x"])

    def test_tpe_with_curvefitting_assessor_runs_to_done(self):
        proc, summary = self.algorithm_experiment(
            {"name": "tpe", "classArgs": {"seed": 4, "optimize_mode": "maximize",
                                          "tpe_args": {"n_startup_jobs": 4}}},
            2, 10, SPACE,
            assessor="assessor: {name: curvefitting, classArgs: {start_step: 3, seed: 1}}",
            periodic=5)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(summary["status"], "DONE")
        self.assertEqual(len(summary["trials"]), 10)
        for t in summary["trials"]:
            self.assertIn(t["status"], TERMINAL)


if __name__ == "__main__":
    unittest.main()
