#!/usr/bin/python3
"""Fault soak: an experiment on many workers while everything around it breaks.

A `tunehost run` experiment (tpe in a runner process of its own) runs on N
tunehost-worker processes started here, each writing what the host
acknowledged to an ack log (--ack-log). Meanwhile a seeded chaos loop

  - SIGKILLs workers (and starts replacements),
  - SIGSTOPs workers past their liveness and lets them go on (their stale
    results must be refused, not mixed in),
  - SIGKILLs the host and resumes it (timing how long until it answers and
    until the next trial ends),
  - SIGKILLs the isolated tuner's runner process,
  - floods every socket with garbage.

At the end (the experiment DONE) it compares every worker's ack log, the
trials' start log and the store, and prints one table:

  trials, lost, ended twice, run twice with the same attempt,
  acknowledged but missing, mixed metrics  (all must be 0),
  peak host RSS, time to recover.

Exit status 0 only when every integrity count is 0. Everything (logs, store,
ack logs) stays in the directory printed at the start.

Usage: soak.py [--minutes M] [--workers N] [--build DIR] [--seed S] [--dir D] [--in-process]
"""
import argparse
import collections
import glob
import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import msgpack
import zmq

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
from tunehost import protocol  # noqa: E402

# A trial: logs its start, reports four results and a FINAL a moment apart.
TRIAL = textwrap.dedent("""\
    echo "$TUNEHOST_TRIAL_ID $TUNEHOST_ATTEMPT $$" >> "$1"
    for i in 0 1 2 3; do
      echo "{\\"value\\": $TUNEHOST_ATTEMPT.$i}" >&"$TUNEHOST_METRIC_FD"
      sleep 0.2
    done
    echo "{\\"type\\": \\"FINAL\\", \\"value\\": $TUNEHOST_ATTEMPT.9}" >&"$TUNEHOST_METRIC_FD"
    """)


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.dir = args.dir or tempfile.mkdtemp(prefix="tunehost-soak-")
        os.makedirs(self.dir, exist_ok=True)
        self.bin = os.path.join(args.build, "bin")
        self.workdir = os.path.join(self.dir, "wd")
        self.exp_dir = os.path.join(self.workdir, "soak")
        self.acks_dir = os.path.join(self.dir, "acks")
        os.makedirs(self.acks_dir, exist_ok=True)
        self.starts = os.path.join(self.dir, "starts.log")
        self.actions = open(os.path.join(self.dir, "actions.log"), "a")
        self.host = None
        self.host_log = open(os.path.join(self.dir, "host.log"), "a")
        self.workers = {}  # id -> Popen
        self.stopped = {}  # id -> time to SIGCONT
        self.next_worker = 0
        self.peak_rss_kib = 0
        self.recoveries = []  # (seconds to answer, seconds to the next trial end)
        self.counts = collections.Counter()
        self.ctx = zmq.Context()

    # --- setup ---

    def write_experiment(self):
        trial = os.path.join(self.dir, "trial.sh")
        with open(trial, "w") as f:
            f.write(TRIAL)
        # The workers run it (they are started here, not by tunehost run).
        self.trial_command = "sh %s %s" % (trial, self.starts)
        config = {
            "experimentName": "soak",
            "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]},
                            "lr": {"_type": "loguniform", "_value": [0.0001, 0.1]},
                            "k": {"_type": "choice", "_value": [1, 2, 4, 8]}},
            "trialCommand": self.trial_command,
            "trialCodeDirectory": self.dir,
            "experimentWorkingDirectory": self.workdir,
            "trialConcurrency": self.args.workers,
            "maxExperimentDuration": "%ds" % int(self.args.minutes * 60),
            "tuner": {"name": "tpe",
                      "classArgs": {"seed": self.args.seed, "optimize_mode": "maximize"}},
            "tunehost": {"heartbeatIntervalMs": 200, "ackTimeoutMs": 1000},
        }
        if not self.args.in_process:
            config["tuner"].update({"isolation": "process", "memoryLimitMb": 1024})
        self.config = os.path.join(self.dir, "experiment.yaml")
        with open(self.config, "w") as f:
            json.dump(config, f, indent=1)

    def start_host(self, command):
        if command == "run":
            args = [os.path.join(self.bin, "tunehost"), "run", self.config, "--id", "soak"]
        else:
            args = [os.path.join(self.bin, "tunehost"), "resume", "soak", "--workdir",
                    self.workdir, "--reattach-grace-ms", "3000"]
        args += ["--local-workers", "0", "--plugins", os.path.join(self.args.build, "plugins"),
                 "--summary-json", os.path.join(self.dir, "summary.json")]
        self.host = subprocess.Popen(args, stdout=self.host_log, stderr=subprocess.STDOUT)
        self.endpoints = self.wait_host_file()

    def wait_host_file(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(os.path.join(self.exp_dir, "host.json")) as f:
                    data = json.load(f)
                if data["pid"] == self.host.pid:
                    return data
            except (OSError, ValueError, KeyError):
                pass
            if self.host.poll() is not None:
                raise RuntimeError("the host exited (%s); see %s/host.log"
                                   % (self.host.returncode, self.dir))
            time.sleep(0.05)
        raise RuntimeError("no host.json within %d s" % timeout)

    def start_worker(self):
        worker_id = "w%04d" % self.next_worker
        self.next_worker += 1
        proc = subprocess.Popen(
            [os.path.join(self.bin, "tunehost-worker"), "--command", self.trial_command,
             "--id", worker_id, "--heartbeat-ms", "200", "--ack-timeout-ms", "500",
             "--kill-grace-ms", "1000", "--workdir", os.path.join(self.dir, "trials"),
             "--ack-log", os.path.join(self.acks_dir, worker_id + ".log"),
             "--jobs", self.endpoints["jobs"], "--results", self.endpoints["results"],
             "--events", self.endpoints["events"], "--log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "workers.log"), "a"))
        self.workers[worker_id] = proc
        return worker_id

    # --- control ---

    def request(self, type_code, body, timeout=2.0):
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoints["control"])
        try:
            sock.send(protocol.encode(type_code, body, 1))
            if not sock.poll(int(timeout * 1000)):
                return None
            reply = protocol.decode(sock.recv())
            return reply.body.get("data") if reply.type == "ok" else None
        finally:
            sock.close()

    def ended_count(self):
        st = self.request("ST", {})
        if st is None:
            return None
        return sum(n for s, n in st["counts"].items() if s not in ("WAITING", "RUNNING"))

    def sample_rss(self):
        if self.host is None or self.host.poll() is not None:
            return
        try:
            with open("/proc/%d/status" % self.host.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        self.peak_rss_kib = max(self.peak_rss_kib, int(line.split()[1]))
        except OSError:
            pass

    def act(self, what, detail=""):
        self.counts[what] += 1
        self.actions.write("%.3f %s %s\n" % (time.time(), what, detail))
        self.actions.flush()

    # --- chaos ---

    def kill_worker(self):
        worker_id = self.rng.choice(sorted(self.workers))
        proc = self.workers.pop(worker_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.stopped.pop(worker_id, None)
        self.act("kill_worker", worker_id)
        self.start_worker()

    def stop_worker(self):
        candidates = sorted(set(self.workers) - set(self.stopped))
        if not candidates:
            return
        worker_id = self.rng.choice(candidates)
        self.workers[worker_id].send_signal(signal.SIGSTOP)
        # Longer than the liveness (3 x 200 ms): its trials are offered again.
        self.stopped[worker_id] = time.monotonic() + self.rng.uniform(1.0, 3.0)
        self.act("stop_worker", worker_id)

    def continue_workers(self, now):
        for worker_id, when in list(self.stopped.items()):
            if now >= when:
                self.workers[worker_id].send_signal(signal.SIGCONT)
                del self.stopped[worker_id]

    def kill_host(self):
        self.sample_rss()
        before = self.ended_count() or 0
        self.host.send_signal(signal.SIGKILL)
        self.host.wait()
        killed = time.monotonic()
        self.act("kill_host", "pid %d" % self.host.pid)
        time.sleep(self.rng.uniform(0, 1.5))
        self.start_host("resume")
        answered = None
        while time.monotonic() - killed < 60:
            n = self.ended_count()
            if n is not None:
                answered = answered or time.monotonic() - killed
                if n > before:
                    self.recoveries.append((answered, time.monotonic() - killed))
                    return
            time.sleep(0.05)
        self.recoveries.append((answered or 60.0, 60.0))

    def runner_pids(self):
        pids = []
        for path in glob.glob("/proc/[0-9]*/stat"):
            try:
                with open(path) as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.find("(") + 1:stat.rfind(")")]
            ppid = int(stat[stat.rfind(")") + 2:].split()[1])
            if ppid == self.host.pid and name.startswith("tunehost-plugin"):
                pids.append(int(path.split("/")[2]))
        return pids

    def crash_plugin(self):
        for pid in self.runner_pids():
            os.kill(pid, signal.SIGSEGV)
            self.act("crash_plugin", "runner pid %d" % pid)

    def flood(self):
        garbage = [os.urandom(self.rng.randint(1, 300)) for _ in range(50)]
        # Forged results for real trials from a worker that does not run
        # them, for an attempt no trial reaches (a forgery of the current
        # attempt is refused by the lease rule of wire-format.md §5.3, tested
        # in engine_test and test_integrity).
        garbage += [msgpack.packb({"v": 1, "type": "ME", "id": 1, "body": {
            "trial_id": "T%05d" % self.rng.randint(0, 999), "attempt": 99,
            "type": "FINAL", "sequence": 0, "value": 1e9, "worker_id": "intruder"}})] * 20
        garbage += [b"\x00" * (3 << 19)] * 3  # over the limit, under twice it
        push = self.ctx.socket(zmq.PUSH)
        dealer = self.ctx.socket(zmq.DEALER)
        sub = self.ctx.socket(zmq.SUB)
        for s in (push, dealer, sub):
            s.setsockopt(zmq.LINGER, 0)
        push.connect(self.endpoints["results"])
        dealer.connect(self.endpoints["control"])
        sub.connect(self.endpoints["events"])
        for g in garbage:
            push.send(g, zmq.NOBLOCK)
            dealer.send(g, zmq.NOBLOCK)
        for i in range(200):
            sub.setsockopt(zmq.SUBSCRIBE, b"junk-%d-" % i + os.urandom(8).hex().encode())
        for name in ("control", "jobs", "results", "events"):
            port = int(self.endpoints[name].rsplit(":", 1)[1])
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
                    raw.sendall(os.urandom(512))
            except OSError:
                pass
        time.sleep(0.2)
        for s in (push, dealer, sub):
            s.close()
        self.act("flood", "%d frames" % (2 * len(garbage)))

    # --- the run ---

    def run(self):
        log("soak in %s: %d workers, %.1f minutes, seed %d"
            % (self.dir, self.args.workers, self.args.minutes, self.args.seed))
        self.write_experiment()
        self.start_host("run")
        for _ in range(self.args.workers):
            self.start_worker()
        end = time.monotonic() + self.args.minutes * 60
        chaos_until = end - min(30.0, self.args.minutes * 60 / 3)
        actions = [(self.kill_worker, 5), (self.stop_worker, 4), (self.kill_host, 1),
                   (self.flood, 2)]
        if not self.args.in_process:
            actions.append((self.crash_plugin, 2))
        # Every kind of fault once first, so even a short soak has them all.
        first = [self.kill_worker, self.stop_worker, self.flood, self.kill_host]
        if not self.args.in_process:
            first.insert(3, self.crash_plugin)
        next_action = time.monotonic() + 3
        next_sample = 0
        while True:
            now = time.monotonic()
            self.continue_workers(now)
            if now >= next_sample:
                self.sample_rss()
                next_sample = now + 1
            if self.host.poll() is not None:
                break  # DONE (or it failed: the checks say)
            if now < chaos_until and now >= next_action:
                fn = (first.pop(0) if first else
                      self.rng.choices([a for a, _ in actions], [w for _, w in actions])[0])
                try:
                    fn()
                except Exception as e:  # one failed action must not end the soak
                    self.act("action_failed", "%s: %r" % (fn.__name__, e))
                next_action = time.monotonic() + self.rng.uniform(0.5, 3.0)
            time.sleep(0.05)
        for worker_id in list(self.stopped):
            self.workers[worker_id].send_signal(signal.SIGCONT)
        log("host exited with %s; stopping the workers" % self.host.returncode)
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.ctx.term()
        return self.check()

    # --- the checks ---

    def check(self):
        db = sqlite3.connect("file:%s?mode=ro" % os.path.join(self.exp_dir, "store.db"), uri=True)
        status = db.execute("SELECT value FROM meta WHERE key = 'status'").fetchone()[0]
        trials = {row[0]: row for row in db.execute(
            "SELECT trial_id, state, status, attempt, source FROM trials")}
        by_status = collections.Counter(row[2] or row[1] for row in trials.values())
        lost = sorted(t for t, row in trials.items() if row[1] != "ENDED")
        ends = collections.Counter(t for (t,) in db.execute(
            "SELECT trial_id FROM trial_events WHERE event = 'ended'"))
        ended_twice = sorted(t for t, n in ends.items() if n > 1)
        # A (trial, attempt) started by more than one process.
        pids = collections.defaultdict(set)
        with open(self.starts) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:
                    pids[(parts[0], int(parts[1]))].add(parts[2])
        run_twice = sorted(k for k, v in pids.items() if len(v) > 1)
        # When each attempt stopped being current (requeued to a later one).
        superseded_at = {}
        for trial_id, attempt, at in db.execute(
                "SELECT trial_id, attempt, at FROM trial_events WHERE event = 'requeued'"):
            for a in range(attempt):
                superseded_at.setdefault((trial_id, a), at)
        rows = {}
        columns = {row[1] for row in db.execute("PRAGMA table_info(metrics)")}
        superseded_column = "superseded" if "superseded" in columns else "0"  # schema 1 had none
        for trial_id, attempt, kind, seq, scalar, superseded in db.execute(
                "SELECT trial_id, attempt, type, sequence, scalar, %s FROM metrics"
                % superseded_column):
            rows[(trial_id, attempt, kind, seq)] = (scalar, superseded)
        missing = []
        acks = 0
        for path in glob.glob(os.path.join(self.acks_dir, "*.log")):
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) != 7:
                        continue  # a line cut by a SIGKILL mid-write cannot be, but be safe
                    trial_id, attempt, seq, kind, value, _, when = parts
                    acks += 1
                    key = (trial_id, int(attempt), kind, int(seq))
                    # Results of an attempt already superseded are acknowledged
                    # and dropped by design (wire-format.md §5.3).
                    gone = superseded_at.get(key[:2])
                    if gone is not None and float(when) >= gone:
                        continue
                    row = rows.get(key)
                    if row is None or abs(row[0] - float(value)) > 1e-9:
                        missing.append((key, value, row))
        current_rows = collections.defaultdict(set)  # trial -> attempts of rows not superseded
        for (trial_id, attempt, _, _), (_, superseded) in rows.items():
            if not superseded:
                current_rows[trial_id].add(attempt)
        mixed = []
        for trial_id, row in trials.items():
            if row[4] == "external":
                continue
            attempts = current_rows.get(trial_id, set())
            if attempts - {row[3]}:
                mixed.append((trial_id, sorted(attempts), row[3]))
        answer = [r[0] for r in self.recoveries]
        resumed = [r[1] for r in self.recoveries]
        table = [
            ("experiment status", status, "DONE"),
            ("trials", "%d (%s)" % (len(trials), ", ".join(
                "%s %d" % kv for kv in sorted(by_status.items()))), ""),
            ("acknowledged results checked", str(acks), ""),
            ("lost (not ended at DONE)", str(len(lost)), "0"),
            ("ended twice", str(len(ended_twice)), "0"),
            ("run twice with the same attempt", str(len(run_twice)), "0"),
            ("acknowledged but missing or different", str(len(missing)), "0"),
            ("mixed metrics (rows of another attempt)", str(len(mixed)), "0"),
            ("peak host RSS", "%.1f MiB" % (self.peak_rss_kib / 1024), ""),
            ("time to recover after a host kill: answers / next trial end",
             "%s / %s" % (Seconds(answer), Seconds(resumed)), ""),
            ("chaos", ", ".join("%s %d" % kv for kv in sorted(self.counts.items())), ""),
        ]
        print()
        print("| soak (%d workers, %.1f min, seed %d) | result | must be |"
              % (self.args.workers, self.args.minutes, self.args.seed))
        print("|---|---|---|")
        for name, value, want in table:
            print("| %s | %s | %s |" % (name, value, want))
        ok = (status == "DONE" and not lost and not ended_twice and not run_twice and
              not missing and not mixed)
        for label, items in (("lost", lost), ("ended twice", ended_twice),
                             ("run twice", run_twice), ("missing", missing), ("mixed", mixed)):
            for item in items[:10]:
                print("%s: %s" % (label, item))
        print("\nverdict: %s (everything is in %s)" % ("PASS" if ok else "FAIL", self.dir))
        return 0 if ok else 1


def Seconds(values):
    if not values:
        return "-"
    return "max %.2f s, median %.2f s (%d)" % (max(values), statistics.median(values), len(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", help="where to keep everything (default: a new temp dir)")
    parser.add_argument("--in-process", action="store_true",
                        help="the tuner in the host process (no plugin crashes)")
    parser.add_argument("--check-only", action="store_true",
                        help="only compare the logs and the store already in --dir")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    if args.check_only:
        if not args.dir:
            parser.error("--check-only needs --dir")
        sys.exit(Soak(args).check())
    sys.exit(Soak(args).run())


if __name__ == "__main__":
    main()
