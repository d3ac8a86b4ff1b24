"""Per-trial host cost as an experiment grows, through the real binaries.

Experiments of trials that do no work (`trialCommand: "true"`, random tuner)
run through `tunehost run` (local workers, the SQLite store, the live
progress on stdout) and through `tunehost serve` (no store, `tunehost-worker`
processes attached to its endpoints, the experiment started with `IN`),
while a client polls `ST` every 200 ms as users' dashboards do. For each size
it prints:

- host CPU per trial (user + system time of the host process, all threads),
  over the whole run and over its last 10% of trials (the marginal cost at
  that size), and the ratio of the latter to the smallest size's whole-run
  cost (target: 100k/1k <= 1.2);
- host RSS per finished trial (VmRSS at the end minus at the start, over the
  trials) and store bytes on disk per trial (store, WAL, offer journal);
- `tunectl status` and `tunectl trials --limit 20` latency near the end, and
  one full `tunectl trials --json` (every trial), as a user runs them.

Usage: /usr/bin/python3 tools/bench/scale.py --build DIR [--sizes 1000,10000,100000]
       [--workers 16] [--modes run,serve] [--poll-ms 200]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))

from tunehost.control import ControlClient, ControlError  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
SPACE = {"x": {"_type": "uniform", "_value": [0, 1]}}


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def rss_bytes(pid):
    """Resident bytes; 0 once the process has exited (a zombie has none)."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def exited(pid):
    """Whether the (unreaped) process has exited."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ended_of(status):
    counts = status.get("counts", {})
    return sum(counts.get(k, 0) for k in
               ("SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED", "EARLY_STOPPED"))


def timed(cmd, repeat=3):
    """Median wall seconds of a command (output discarded) and its last output size."""
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
        size = len(out.stdout)
    times.sort()
    return times[len(times) // 2], size


class Watch:
    """Polls a host's ST like a user's dashboard and samples its CPU and memory."""

    def __init__(self, pid, control, n, tunectl, poll_s):
        self.pid, self.control, self.n = pid, control, n
        self.tunectl, self.poll_s = tunectl, poll_s
        self.samples = []  # (ended, cpu seconds)
        self.rss_start = rss_bytes(pid)
        self.rss_end = self.rss_start
        self.latency = {}
        self.started = time.monotonic()
        self.measuring_s = 0.0  # spent in tunectl calls: not experiment time
        self.done_s = None

    def run(self, done_statuses, timeout_s):
        """Polls until the experiment is done; a `run` host exits at DONE,
        which may come between two polls (its CPU time stays readable until
        it is reaped)."""
        deadline = time.monotonic() + timeout_s
        with ControlClient(self.control, timeout_ms=2000) as client:
            while time.monotonic() < deadline:
                try:
                    st = client.status()
                except ControlError:
                    st = None
                cpu = cpu_seconds(self.pid)
                if st is None:
                    if exited(self.pid):
                        self.samples.append((self.n, cpu))
                        self.done_s = time.monotonic() - self.started - self.measuring_s
                        return
                    continue
                ended = ended_of(st)
                self.samples.append((ended, cpu))
                self.rss_end = rss_bytes(self.pid) or self.rss_end
                if not self.latency and ended >= 0.8 * self.n:
                    # While trials run, before the last 10% whose CPU is measured.
                    self.measure_latency()
                if st["status"] in done_statuses and ended >= self.n:
                    self.samples.append((ended, cpu_seconds(self.pid)))
                    self.done_s = time.monotonic() - self.started - self.measuring_s
                    return
                time.sleep(self.poll_s)
        raise RuntimeError(f"experiment of {self.n} trials did not finish in {timeout_s} s")

    def measure_latency(self, prefix="", timeout_ms=10000):
        """`tunectl status`, `tunectl trials --limit 20` and one full
        `tunectl --json trials`, as a user runs them. Keys get `prefix`."""
        base = [self.tunectl, "--control", self.control, "--timeout-ms", str(timeout_ms)]
        t0 = time.monotonic()
        try:
            self.latency[prefix + "status_ms"] = timed(base + ["status"])[0] * 1000
            self.latency[prefix + "trials20_ms"] = (
                timed(base + ["trials", "--limit", "20"])[0] * 1000)
            t, size = timed(base + ["--json", "trials"], repeat=1)
            self.latency[prefix + "trials_all_ms"] = t * 1000
            self.latency[prefix + "trials_all_bytes"] = size
        except subprocess.CalledProcessError:
            pass  # a `run` host finished first: the row shows "-"
        self.measuring_s += time.monotonic() - t0

    def report(self):
        ended, cpu = self.samples[-1]
        # The last 10% of trials: the marginal cost at this size.
        mark = next(s for s in self.samples if s[0] >= 0.9 * ended)
        tail_trials = ended - mark[0]
        return {
            "trials": ended,
            "cpu_per_trial_us": cpu / ended * 1e6,
            "tail_cpu_per_trial_us": (cpu - mark[1]) / tail_trials * 1e6 if tail_trials else None,
            "rss_start_mb": self.rss_start / 2**20,
            "rss_end_mb": self.rss_end / 2**20,
            "rss_per_trial_b": (self.rss_end - self.rss_start) / ended,
            "wall_s": self.done_s,
            **self.latency,
        }


def run_mode(build, n, workers, poll_s, work):
    exp_dir = os.path.join(work, f"run-{n}")
    os.makedirs(exp_dir)
    config = {
        "experimentName": f"scale-{n}",
        "searchSpace": SPACE,
        "trialCommand": "true",
        "trialCodeDirectory": exp_dir,
        "trialConcurrency": workers,
        "maxTrialNumber": n,
        "experimentWorkingDirectory": os.path.join(exp_dir, "experiments"),
        "tuner": {"name": "random", "classArgs": {"seed": 1}},
        "trainingService": {"platform": "local"},
    }
    yaml_path = os.path.join(exp_dir, "experiment.yaml")
    with open(yaml_path, "w") as f:
        json.dump(config, f)  # JSON is YAML
    eid = f"scale{n}"
    out = open(os.path.join(exp_dir, "stdout.log"), "w")
    host = subprocess.Popen(
        [os.path.join(build, "bin", "tunehost"), "run", yaml_path, "--id", eid,
         "--plugins", os.path.join(build, "plugins"),
         "--worker-bin", os.path.join(build, "bin", "tunehost-worker"), "--log-level", "warn"],
        stdout=out, stderr=subprocess.STDOUT)
    host_json = os.path.join(exp_dir, "experiments", eid, "host.json")
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(host_json):
            if host.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tunehost run did not start (see {out.name})")
            time.sleep(0.05)
        time.sleep(0.05)
        with open(host_json) as f:
            control = json.load(f)["control"]
        watch = Watch(host.pid, control, n, os.path.join(build, "bin", "tunectl"), poll_s)
        watch.run({"DONE"}, timeout_s=3600)
        if host.wait(timeout=120) != 0:
            raise RuntimeError(f"tunehost run exited {host.returncode} (see {out.name})")
    finally:
        if host.poll() is None:
            host.send_signal(signal.SIGINT)
            host.wait(timeout=60)
        out.close()
    result = watch.report()
    store = os.path.join(exp_dir, "experiments", eid)
    # Bytes on disk: the offer journal (store.db-offers) is a 1 MiB file of
    # which only the pages written hold blocks.
    size = sum(os.stat(os.path.join(store, f)).st_blocks * 512 for f in os.listdir(store)
               if f.startswith("store.db"))
    result["store_per_trial_b"] = size / result["trials"]
    return result


def serve_mode(build, n, workers, poll_s, work):
    ports = {k: free_port() for k in ("control", "jobs", "results", "events")}
    eps = {k: f"tcp://127.0.0.1:{p}" for k, p in ports.items()}
    log = open(os.path.join(work, f"serve-{n}.log"), "w")
    host = subprocess.Popen(
        [os.path.join(build, "bin", "tunehost"), "serve", "--plugins",
         os.path.join(build, "plugins"), "--control", eps["control"], "--jobs", eps["jobs"],
         "--results", eps["results"], "--events", eps["events"], "--log-level", "warn"],
        stdout=log, stderr=subprocess.STDOUT)
    procs = []
    try:
        with ControlClient(eps["control"], timeout_ms=10000) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.ping()
                    break
                except Exception:
                    if time.monotonic() > deadline or host.poll() is not None:
                        raise
            for i in range(workers):
                wdir = os.path.join(work, f"serve-{n}-w{i}")
                procs.append(subprocess.Popen(
                    [os.path.join(build, "bin", "tunehost-worker"), "--command", "true",
                     "--jobs", eps["jobs"], "--results", eps["results"], "--events",
                     eps["events"], "--id", f"w{i}", "--workdir", wdir, "--log-level", "warn"],
                    stdout=subprocess.DEVNULL, stderr=log))
            client.request("IN", {"search_space": SPACE, "experiment": {
                "id": f"serve{n}", "tuner": {"name": "random", "args": {"seed": 1}},
                "assessor": None, "concurrency": workers, "max_trials": n,
                "max_duration_s": 0.0}})
        watch = Watch(host.pid, eps["control"], n, os.path.join(build, "bin", "tunectl"), poll_s)
        watch.run({"DONE"}, timeout_s=3600)
        watch.measure_latency("idle_", 60000)  # a serve host keeps serving after DONE
        return watch.report()
    finally:
        for p in procs:
            p.terminate()
        host.terminate()
        for p in procs + [host]:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()


def fmt(v, spec="{:.1f}"):
    return "-" if v is None else spec.format(v)


def both(r, key, spec="{:.1f}"):
    """Busy figure, and the idle one when measured: "72.7 / 3.1"."""
    busy = fmt(r.get(key), spec)
    return busy if f"idle_{key}" not in r else f"{busy} / {fmt(r.get('idle_' + key), spec)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--modes", default="run,serve")
    ap.add_argument("--poll-ms", type=int, default=200)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    sizes = [int(s) for s in args.sizes.split(",")]
    work = tempfile.mkdtemp(prefix="tunehost-scale-")
    results = {}
    try:
        for mode in args.modes.split(","):
            fn = {"run": run_mode, "serve": serve_mode}[mode]
            for n in sizes:
                print(f"scale: {mode} {n} trials ...", file=sys.stderr, flush=True)
                results[f"{mode}/{n}"] = fn(args.build, n, args.workers, args.poll_ms / 1000,
                                            work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    print(f"| mode | trials | wall s | host CPU µs/trial (all / last 10%) | "
          f"last 10% vs {sizes[0]} | RSS MB end | RSS B/trial | store B/trial | "
          f"tunectl status ms | trials --limit 20 ms | all trials ms (MB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    latency = ("wall s: from the start of the experiment to DONE. tunectl latency: while "
               "trials run, at 80% (busy host) / after DONE (serve only: idle host)")
    verdicts = []
    for mode in args.modes.split(","):
        base = results[f"{mode}/{sizes[0]}"]["cpu_per_trial_us"]
        for n in sizes:
            r = results[f"{mode}/{n}"]
            ratio = r["tail_cpu_per_trial_us"] / base if r["tail_cpu_per_trial_us"] else None
            print(f"| {mode} | {r['trials']} | {r['wall_s']:.0f} | "
                  f"{r['cpu_per_trial_us']:.0f} / {fmt(r['tail_cpu_per_trial_us'], '{:.0f}')} | "
                  f"{fmt(ratio, '×{:.2f}')} | {r['rss_end_mb']:.1f} | "
                  f"{r['rss_per_trial_b']:.0f} | "
                  f"{fmt(r.get('store_per_trial_b'), '{:.0f}')} | "
                  f"{both(r, 'status_ms')} | {both(r, 'trials20_ms')} | "
                  f"{both(r, 'trials_all_ms', '{:.0f}')} "
                  f"({max(r.get('trials_all_bytes', 0), r.get('idle_trials_all_bytes', 0)) / 2**20:.1f}) |")
            if n == sizes[-1] and n != sizes[0]:
                verdicts.append((mode, n, ratio))
    print(f"\n{latency}")
    for mode, n, ratio in verdicts:
        met = ratio is not None and ratio <= 1.2
        print(f"target 3 ({mode}): per-trial host cost at {n} vs {sizes[0]} trials "
              f"{fmt(ratio, '×{:.2f}')} (<= ×1.2): {'met' if met else 'NOT MET'}")


if __name__ == "__main__":
    main()
