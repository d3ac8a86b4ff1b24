"""Workers where the compute is (tunectl launch), end to end.

- SlurmTest: a real one-node Slurm (slurmctld + slurmd + munged from
  Debian's slurm-wlm and munge, configured by slurm_up.sh in a temporary
  directory) runs every worker of an experiment as a job array; one array
  task is cancelled (scancel) while it runs a trial, and the trial is offered
  again and nothing is lost.
- KubernetesManifestTest: `tunectl launch k8s --dry-run` prints a Secret and
  an Indexed Job; checked field by field (no cluster is reachable here).
- GpuTest: NNI's trialGpuNumber / gpuIndices for local workers, with fake GPU
  indices: every trial gets its own GPUs in CUDA_VISIBLE_DEVICES.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import harness  # noqa: E402
from harness import keygen, wait_for  # noqa: E402

TUNECTL = os.path.join(harness.BIN_DIR, "tunectl")


class Experiment:
    """`tunehost run` of a file in a temp dir, with keys, workers attached."""

    def __init__(self, exp_id, yaml_text, local_workers="0"):
        """`yaml_text` names the temp dir @TMP@ and the working dir @WD@;
        local_workers None: tunehost run's default."""
        self.tmp = tempfile.mkdtemp(prefix="tunehost-cluster-")
        self.id = exp_id
        self.keys = os.path.join(self.tmp, "keys")
        keygen(self.keys, "server")
        self.admin = keygen(os.path.join(self.keys, "admins"), "admin")
        self.worker_key = keygen(os.path.join(self.keys, "workers"), "cluster")
        self.workdir = os.path.join(self.tmp, "wd")
        self.config = os.path.join(self.tmp, "exp.yaml")
        with open(self.config, "w") as f:
            f.write(yaml_text.replace("@TMP@", self.tmp).replace("@WD@", self.workdir))
        self.log = open(os.path.join(self.tmp, "host.log"), "w")
        self.proc = subprocess.Popen(
            [harness.TUNEHOST, "run", self.config, "--id", exp_id, "--keys", self.keys,
             "--plugins", harness.PLUGIN_DIR, "--summary-json",
             os.path.join(self.tmp, "summary.json")] +
            (["--local-workers", local_workers] if local_workers is not None else []),
            stdout=self.log, stderr=subprocess.STDOUT)
        self.dir = os.path.join(self.workdir, exp_id)
        harness.host_file(self.dir, self.proc.pid)

    def tunectl(self, *args, check=True):
        r = subprocess.run([TUNECTL, "--experiment", self.id, "--workdir", self.workdir,
                            "--key", self.admin] + list(args),
                           capture_output=True, text=True, timeout=120)
        if check:
            assert r.returncode == 0, r.stdout + r.stderr
        return r

    def json(self, *args):
        return json.loads(self.tunectl("--json", *args).stdout)

    def wait(self, timeout):
        code = self.proc.wait(timeout)
        self.log.close()
        with open(os.path.join(self.tmp, "summary.json")) as f:
            return code, json.load(f)

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


# Reports a result a second for 4 s, then its FINAL.
SLOW_TRIAL = ("for i in 1 2 3 4; do echo \"{\\\"value\\\": $i}\" >&$TUNEHOST_METRIC_FD; "
              "sleep 1; done; echo '{\"type\": \"FINAL\", \"value\": 0.5}' >&$TUNEHOST_METRIC_FD")


def _slurm_available():
    return os.geteuid() == 0 and all(shutil.which(b) for b in
                                     ("slurmctld", "slurmd", "munged", "sbatch", "scancel"))


class SlurmTest(unittest.TestCase):
    def setUp(self):
        if not _slurm_available():
            self.skipTest("needs root and Debian's slurm-wlm and munge (tools/setup-debian.sh "
                          "--test installs them)")
        lab = tempfile.mkdtemp(prefix="slurm.", dir="/tmp")
        up = subprocess.run(["bash", os.path.join(HERE, "slurm_up.sh"), lab],
                            capture_output=True, text=True, timeout=120)
        self.assertEqual(up.returncode, 0, up.stderr)
        self.env = dict(os.environ)
        for line in up.stdout.splitlines():
            key, value = line.replace("export ", "", 1).split("=", 1)
            self.env[key] = value
        self.addCleanup(self.slurm_down)
        self.lab = lab

    def slurm_down(self):
        subprocess.run(["bash", os.path.join(HERE, "slurm_down.sh"), "--rm", self.lab],
                       capture_output=True, timeout=120)

    def test_a_job_array_runs_the_experiment_and_a_cancelled_task_loses_nothing(self):
        exp = Experiment("slurm", textwrap.dedent("""\
            searchSpace: {x: {_type: uniform, _value: [0, 1]}}
            trialCommand: @CMD@
            trialCodeDirectory: @TMP@
            trialConcurrency: 3
            maxTrialNumber: 6
            experimentWorkingDirectory: @WD@
            tuner: {name: random, classArgs: {seed: 4}}
            tunehost: {heartbeatIntervalMs: 300, ackTimeoutMs: 2000}
            """).replace("@CMD@", json.dumps(SLOW_TRIAL)))
        self.addCleanup(exp.close)
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("SLURM")})
        r = exp.tunectl("--json", "launch", "slurm", "--workers", "3", "--worker-key",
                        exp.worker_key, "--worker-bin", harness.WORKER, "--max-idle-ms", "3000",
                        "--script-dir", os.path.join(exp.tmp, "slurm"))
        job = json.loads(r.stdout)["job"]
        self.assertTrue(job.isdigit(), r.stdout)

        def slurm_workers():
            workers = exp.json("workers")["workers"]
            jobs = {w["extra"].get("slurm_job") for w in workers}
            return len(workers) == 3 and all(j and j.startswith(job + "_") for j in jobs) and workers
        workers = wait_for(slurm_workers, 60, "three workers from the Slurm array")
        self.assertEqual({w["key"] for w in workers}, {"worker:cluster"})
        # Cancel the array task whose worker runs a trial, mid-trial.
        def busy():
            return [w for w in exp.json("workers")["workers"] if w["running"]]
        victim = wait_for(busy, 60, "a worker running a trial")[0]
        trial = victim["running"][0]
        task = victim["extra"]["slurm_job"]
        subprocess.run(["scancel", task], check=True, env=self.env, timeout=30)

        def offered_again():
            t = exp.json("trial", trial)
            return t["attempt"] >= 1 and t
        wait_for(offered_again, 60, "trial %s offered again after scancel %s" % (trial, task))
        try:
            code, summary = exp.wait(180)
        except subprocess.TimeoutExpired:
            self.fail("the experiment did not finish:\n" + exp.output()[-6000:] +
                      exp.tunectl("workers").stdout + exp.tunectl("trials").stdout)
        self.assertEqual(code, 0, exp.output())
        self.assertEqual(summary["status"], "DONE")
        self.assertEqual(len(summary["trials"]), 6, "a trial was lost")
        self.assertEqual({t["status"] for t in summary["trials"]}, {"SUCCEEDED"})
        retried = [t for t in summary["trials"] if t["trial_id"] == trial][0]
        self.assertGreaterEqual(retried["attempts"], 2)


class KubernetesManifestTest(unittest.TestCase):
    def test_dry_run_prints_an_indexed_job_and_a_secret_for_the_keys(self):
        import yaml  # python3-yaml
        exp = Experiment("k8s", textwrap.dedent("""\
            searchSpace: {x: {_type: uniform, _value: [0, 1]}}
            trialCommand: python3 train.py --lr $LR
            trialCodeDirectory: @TMP@
            trialConcurrency: 2
            maxTrialNumber: 2
            experimentWorkingDirectory: @WD@
            tuner: {name: random}
            """))
        self.addCleanup(exp.close)
        r = exp.tunectl("launch", "k8s", "--workers", "5", "--slots", "2", "--image",
                        "registry.example/tunehost-trial:1", "--worker-key", exp.worker_key,
                        "--gpus-per-worker", "2", "--host", "head.example", "--namespace", "hpo",
                        "--dry-run")
        docs = [d for d in yaml.safe_load_all(r.stdout) if d]
        self.assertEqual([d["kind"] for d in docs], ["Secret", "Job"])
        secret, job = docs
        self.assertEqual(secret["metadata"]["namespace"], "hpo")
        with open(exp.worker_key) as f:
            self.assertEqual(secret["stringData"]["worker.key_secret"].strip(), f.read().strip())
        self.assertIn("public-key", secret["stringData"]["server.key"])
        self.assertNotIn("secret-key", secret["stringData"]["server.key"])
        spec = job["spec"]
        self.assertEqual((spec["completionMode"], spec["completions"], spec["parallelism"]),
                         ("Indexed", 5, 5))
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        self.assertEqual(container["image"], "registry.example/tunehost-trial:1")
        self.assertEqual(container["command"], ["tunehost-worker"])
        args = container["args"]
        opt = {args[i]: args[i + 1] for i in range(0, len(args) - 1, 2)}
        info = json.load(open(os.path.join(exp.dir, "host.json")))
        for name in ("jobs", "results", "events"):
            port = info[name].rsplit(":", 1)[1]
            self.assertEqual(opt["--" + name], "tcp://head.example:" + port)
        self.assertEqual(opt["--command"], "python3 train.py --lr $LR")
        self.assertEqual(opt["--slots"], "2")
        self.assertEqual(opt["--id"], "$(POD_NAME)")
        self.assertEqual(opt["--gpu-indices"], "0,1")
        self.assertEqual(opt["--key"], "/etc/tunehost/keys/worker.key_secret")
        self.assertEqual(opt["--server-key"], "/etc/tunehost/keys/server.key")
        self.assertEqual(container["resources"]["limits"]["nvidia.com/gpu"], 2)
        self.assertEqual(container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
                         "metadata.name")
        (mount,) = container["volumeMounts"]
        (volume,) = pod["volumes"]
        self.assertEqual((mount["name"], mount["mountPath"], mount["readOnly"]),
                         ("keys", "/etc/tunehost/keys", True))
        self.assertEqual(volume["secret"]["secretName"], secret["metadata"]["name"])
        self.assertEqual(volume["secret"]["defaultMode"], 0o400)
        # No kubectl here: applying fails clearly.
        r = exp.tunectl("launch", "k8s", "--image", "x", "--worker-key", exp.worker_key,
                        check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("kubectl", r.stderr)


class GpuTest(unittest.TestCase):
    def test_every_trial_gets_its_own_gpus_like_nnis_local_training_service(self):
        trial = ("echo \"$TUNEHOST_TRIAL_ID $CUDA_VISIBLE_DEVICES $(date +%s.%N) start\" >> "
                 "@TMP@/gpus.log; sleep 0.5; echo \"$TUNEHOST_TRIAL_ID - $(date +%s.%N) end\" "
                 ">> @TMP@/gpus.log; echo '{\"type\": \"FINAL\", \"value\": 1}' "
                 ">&$TUNEHOST_METRIC_FD")
        exp = Experiment("gpu", textwrap.dedent("""\
            searchSpace: {x: {_type: uniform, _value: [0, 1]}}
            trialCommand: @CMD@
            trialCodeDirectory: @TMP@
            trialConcurrency: 4
            trialGpuNumber: 2
            maxTrialNumber: 8
            experimentWorkingDirectory: @WD@
            tuner: {name: random}
            trainingService: {platform: local, gpuIndices: "4,5,6,7,9", useActiveGpu: false}
            """).replace("@CMD@", json.dumps(trial)), local_workers=None)
        self.addCleanup(exp.close)
        code, summary = exp.wait(120)
        self.assertEqual(code, 0, exp.output())
        self.assertEqual([t["status"] for t in summary["trials"]], ["SUCCEEDED"] * 8)
        self.assertIn("2 x ", exp.output(), "five GPUs, two per trial: two local workers")
        events = []
        with open(os.path.join(exp.tmp, "gpus.log")) as f:
            for line in f:
                trial_id, gpus, at, kind = line.split()
                events.append((float(at), kind, trial_id, gpus))
        starts = {t: g for _, k, t, g in events if k == "start"}
        self.assertEqual(len(starts), 8)
        for gpus in starts.values():
            self.assertEqual(len(gpus.split(",")), 2, gpus)
            self.assertTrue(set(gpus.split(",")) <= {"4", "5", "6", "7", "9"}, gpus)
        held = {}
        for _, kind, trial_id, _ in sorted(events):
            if kind == "start":
                mine = set(starts[trial_id].split(","))
                for other, theirs in held.items():
                    self.assertFalse(mine & theirs, "%s and %s share a GPU" % (trial_id, other))
                held[trial_id] = mine
            else:
                held.pop(trial_id, None)


if __name__ == "__main__":
    unittest.main()
