#!/usr/bin/python3
"""The algorithm suite: tunehost's tuners and Optuna's samplers on the
problems of tools/bench/problems.py, each half reported on its own.

tunehost's tuners run as real plugins behind the SDK's C ABI, driven through
`tunehost-algo-bench --serve` (one child per worker process); Optuna's run in
process. Both see the same objective functions, the same noise and the same
number of sequential trials. The simple regret of a run is the noise-free
value of the configuration with the best observed value, less the optimum.

Usage (Debian's /usr/bin/python3, with python3-optuna; python3-sklearn for
the two tabular problems, which are skipped without it):
  suite.py [--build DIR] [--seeds 20] [--trials 100] [--jobs 2] [--half tuning]
           [--problems a,b] [--methods th:tpe,optuna:tpe,...] [--out FILE.jsonl]
  suite.py --report FILE.jsonl        print the report of a finished run again
  suite.py --self-check [--build DIR] every optimum where the problem says it
                                      is, and a few trials of each problem through
                                      both sides
"""

import argparse
import json
import math
import multiprocessing
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import problems as P  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# label -> what runs. "th:" are tunehost plugins (labels of tunehost-algo-bench),
# "optuna:" Optuna 3.1 samplers with their defaults.
DEFAULT_METHODS = ["th:tpe", "th:cmaes", "th:random",
                   "optuna:tpe", "optuna:mvtpe", "optuna:cmaes"]
TITLES = {"th:tpe": "tunehost tpe", "th:tpe-nni": "tunehost tpe (per-parameter)",
          "th:cmaes": "tunehost cmaes", "th:gp": "tunehost gp", "th:random": "tunehost random",
          "th:anneal": "tunehost anneal", "th:evolution": "tunehost evolution",
          "optuna:tpe": "Optuna TPE", "optuna:mvtpe": "Optuna multivariate TPE",
          "optuna:cmaes": "Optuna CMA-ES", "optuna:random": "Optuna random"}
# CMA-ES (both sides) only where it is meant to be used: continuous spaces.
CONTINUOUS_ONLY = {"th:cmaes", "optuna:cmaes"}


def note(msg):
    print(f"[suite] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# NNI search space -> Optuna, define by run. Names of nested parameters carry
# their path ("model/svm/C") so each branch has its own distributions.

def suggest(trial, space, prefix=""):
    out = {}
    for key, spec in space.items():
        name, t, v = prefix + key, spec["_type"], spec["_value"]
        if t == "choice":
            if any(isinstance(c, dict) for c in v):
                chosen = trial.suggest_categorical(name, [c["_name"] for c in v])
                branch = next(c for c in v if c["_name"] == chosen)
                inner = {k: s for k, s in branch.items() if k != "_name"}
                out[key] = dict({"_name": chosen}, **suggest(trial, inner, f"{name}/{chosen}/"))
            else:
                out[key] = trial.suggest_categorical(name, v)
        elif t == "uniform":
            out[key] = trial.suggest_float(name, v[0], v[1])
        elif t == "loguniform":
            out[key] = trial.suggest_float(name, v[0], v[1], log=True)
        elif t == "randint":  # NNI: [lower, upper)
            out[key] = trial.suggest_int(name, v[0], v[1] - 1)
        elif t == "quniform":  # NNI: clip(round(x / q) * q, low, high), as an ordered index
            lo, hi, q = v
            k = trial.suggest_int(name, math.ceil(lo / q - 1e-9), math.floor(hi / q + 1e-9))
            out[key] = min(hi, max(lo, k * q))
        elif t == "qloguniform":  # Optuna has no quantized log scale: round what it samples
            lo, hi, q = v
            x = trial.suggest_float(name, lo, hi, log=True)
            out[key] = min(hi, max(lo, round(x / q) * q))
        else:
            raise ValueError(f"{name}: the suite does not use {t}")
    return out


def optuna_sampler(optuna, kind, seed):
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if kind == "mvtpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
    if kind == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise SystemExit(f"unknown Optuna sampler {kind}")


def outside(space, params, prefix=""):
    """Why params is not a configuration of the NNI space, or None."""
    if set(params) - {"_name"} != set(space):
        return f"{prefix}keys {sorted(params)} != {sorted(space)}"
    for key, spec in space.items():
        t, v, x = spec["_type"], spec["_value"], params[key]
        if t == "choice":
            if any(isinstance(c, dict) for c in v):
                branch = next((c for c in v if isinstance(x, dict) and c["_name"] == x.get("_name")),
                              None)
                if branch is None:
                    return f"{prefix}{key}: {x!r} names no branch"
                why = outside({k: b for k, b in branch.items() if k != "_name"}, x,
                              f"{prefix}{key}/{branch['_name']}/")
                if why:
                    return why
            elif x not in v:
                return f"{prefix}{key}: {x!r} is not a choice"
        elif t == "randint":
            if x != int(x) or not v[0] <= x < v[1]:
                return f"{prefix}{key}: {x!r} not an integer in [{v[0]}, {v[1]})"
        elif not v[0] <= x <= v[1]:
            return f"{prefix}{key}: {x!r} not in [{v[0]}, {v[1]}]"
        elif t.startswith("q") and abs(x / v[2] - round(x / v[2])) > 1e-6 and x not in v[:2]:
            return f"{prefix}{key}: {x!r} not a multiple of {v[2]}"
    return None


class FakeTrial:
    """The part of optuna.Trial that suggest() calls, answering each range's
    upper end and each last choice (so the self-check needs no Optuna)."""

    def __init__(self):
        self.names = []

    def _name(self, name):
        if name in self.names:
            raise RuntimeError(f"parameter name {name} suggested twice")
        self.names.append(name)

    def suggest_categorical(self, name, choices):
        self._name(name)
        return choices[-1]

    def suggest_float(self, name, low, high, log=False):
        self._name(name)
        return high

    def suggest_int(self, name, low, high):
        self._name(name)
        return high


# ---------------------------------------------------------------------------
# One run.

class Tracker:
    """Noise, incumbent and regret, the same for both sides."""

    def __init__(self, problem, seed, check=False):
        self.problem = problem
        self.check = check  # every configuration must lie in the space (--self-check)
        self.rng = random.Random(f"{problem.name}:{seed}")
        self.best_seen = math.inf
        self.best_true = math.inf

    def evaluate(self, params):
        if self.check:
            where = outside(self.problem.space, params)
            if where:
                raise RuntimeError(f"{params} is outside the space: {where}")
        true = float(self.problem.f(params))
        seen = true + (self.rng.gauss(0.0, self.problem.noise) if self.problem.noise else 0.0)
        if seen < self.best_seen:
            self.best_seen, self.best_true = seen, true
        return seen


class Serve:
    """A tunehost-algo-bench --serve child of this process."""

    def __init__(self, build, defines):
        cmd = [os.path.join(build, "bin", "tunehost-algo-bench"), "--serve", "--plugins",
               os.path.join(build, "plugins")]
        for d in defines:
            cmd += ["--define", d]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"tunehost-algo-bench --serve exited ({self.proc.wait()})")
        answer = answer.rstrip("\n")
        if answer.startswith("error: "):
            raise RuntimeError(answer[len("error: "):])
        return answer


_serve = None
_defines = []  # --define: further tunehost labels (label=plugin:class_args members)


def run_tunehost(build, label, problem, seed, trials, tracker):
    global _serve
    if _serve is None:
        _serve = Serve(build, _defines)
    _serve.ask(f"new {label} {seed} {json.dumps(problem.space)}")
    for i in range(trials):
        answer = _serve.ask(f"next {i}")
        if answer == "none":
            return i
        seen = tracker.evaluate(json.loads(answer))
        _serve.ask(f"report {i} {seen!r}")
    return trials


def run_optuna(kind, problem, seed, trials, tracker):
    import optuna
    import warnings
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    study = optuna.create_study(sampler=optuna_sampler(optuna, kind, seed))
    for _ in range(trials):
        trial = study.ask()
        study.tell(trial, tracker.evaluate(suggest(trial, problem.space)))
    return trials


def run_one(task, check=False):
    build, method, name, seed, trials = task
    problem = next(p for p in P.all_problems() if p.name == name)
    tracker = Tracker(problem, seed, check)
    t0 = time.monotonic()
    side, label = method.split(":", 1)
    try:
        if side == "th":
            done = run_tunehost(build, label, problem, seed, trials, tracker)
        else:
            done = run_optuna(label, problem, seed, trials, tracker)
    except RuntimeError as e:  # e.g. a tuner that refuses the space
        return {"method": method, "problem": name, "seed": seed, "error": str(e)}
    return {"method": method, "problem": name, "seed": seed, "trials": done,
            "regret": tracker.best_true - problem.minimum(),
            "seconds": time.monotonic() - t0}


# ---------------------------------------------------------------------------
# Statistics and the report.

def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def bootstrap_ci(xs, stat, n=2000):
    """95% percentile bootstrap interval of stat(xs), fixed generator."""
    rng = random.Random(0)
    vals = sorted(stat([rng.choice(xs) for _ in xs]) for _ in range(n))
    return vals[int(0.025 * n)], vals[int(0.975 * n) - 1]


def fmt(v):
    if v is None:
        return "–"
    if v == 0:
        return "0"
    return f"{v:.3g}" if abs(v) >= 1e-3 else f"{v:.1e}"


def not_worse(a, b):
    return a <= b * (1.0 + 1e-9) + 1e-12


def ratio_text(a, b):
    if b <= 1e-12:
        return "tie (0)" if a <= 1e-12 else "∞"
    return f"×{a / b:.2f}"


def summarize(records):
    by = {}
    for r in records:
        if "regret" in r:
            by.setdefault((r["method"], r["problem"]), []).append(r["regret"])
    stats = {}
    for key, xs in by.items():
        stats[key] = {"n": len(xs), "median": median(xs), "mean": sum(xs) / len(xs),
                      "median_ci": bootstrap_ci(xs, median),
                      "mean_ci": bootstrap_ci(xs, lambda v: sum(v) / len(v))}
    return stats


def ci(s, which):
    if s is None:
        return "–"
    lo, hi = s[which + "_ci"]
    return f"{fmt(s[which])} [{fmt(lo)}, {fmt(hi)}]"


def targets(stats, plist):
    """The three quality targets of the suite on the problems plist."""
    rows, worse, mv_losses, mv_total, wins = [], [], [], 0, 0
    counted = 0
    for p in plist:
        a, b = stats.get(("th:tpe", p.name)), stats.get(("optuna:tpe", p.name))
        if a is None or b is None:
            continue
        counted += 1
        wins += not_worse(a["median"], b["median"])
        if b["median"] > 1e-12 and a["median"] > 1.5 * b["median"] or \
           b["median"] <= 1e-12 < a["median"]:
            worse.append(f"{p.name} {ratio_text(a['median'], b['median'])}")
        m = stats.get(("optuna:mvtpe", p.name))
        if p.kind in ("mixed", "conditional") and m is not None:
            mv_total += 1
            if not not_worse(a["median"], m["median"]):
                mv_losses.append(f"{p.name} {ratio_text(a['median'], m['median'])}")
    share = wins / counted if counted else 0.0
    rows.append(["tpe median ≤ Optuna TPE's on ≥ 80% of problems",
                 f"{wins}/{counted} ({100 * share:.0f}%)", "met" if counted and share >= 0.8
                 else "NOT MET"])
    rows.append(["tpe never worse than ×1.5 Optuna TPE's median",
                 ", ".join(worse) if worse else "none worse", "met" if counted and not worse
                 else "NOT MET"])
    rows.append(["tpe median ≤ Optuna multivariate TPE's on mixed and conditional",
                 f"{mv_total - len(mv_losses)}/{mv_total}" + (
                     f" (worse: {', '.join(mv_losses)})" if mv_losses else ""),
                 "met" if mv_total and not mv_losses else "NOT MET"])
    return rows


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def report(records, meta):
    stats = summarize(records)
    methods = [m for m in meta["methods"] if any(k[0] == m for k in stats)]
    plist = [p for p in P.all_problems() if p.name in meta["problems"]]
    errors = sorted({(r["method"], r["problem"], r["error"]) for r in records if "error" in r})
    out = [f"## The suite: {len(plist)} problems, {meta['seeds']} seeds, {meta['trials']} "
           "sequential trials", "",
           "Simple regret (noise-free value of the best observed configuration − optimum) "
           "over the seeds, with 95% percentile-bootstrap intervals; lower is better; "
           "×r = tunehost tpe's median / the other's. "
           "Problems and halves: `tools/bench/problems.py`; defaults may be tuned on the "
           "tuning half only. tunehost tuners are the plugins (class_args optimize_mode "
           "minimize, seed s); Optuna 3.1 samplers with their defaults (multivariate TPE: "
           "`multivariate=True, group=True`).", ""]
    for half in (P.TUNING, P.HELD_OUT):
        hp = [p for p in plist if p.half == half]
        if not hp:
            continue
        medians, means = [], []
        for p in hp:
            a = stats.get(("th:tpe", p.name))
            row = [p.name, p.kind]
            for ref in ("optuna:tpe", "optuna:mvtpe"):
                b = stats.get((ref, p.name))
                row.append("–" if a is None or b is None else ratio_text(a["median"], b["median"]))
            medians.append(row + [ci(stats.get((m, p.name)), "median") for m in methods])
            means.append([p.name, p.kind] + [ci(stats.get((m, p.name)), "mean") for m in methods])
        titles = [TITLES.get(m, m) for m in methods]
        out += [f"### {half} half ({len(hp)} problems): median regret [95% CI]", ""]
        out += table(["problem", "kind", "tpe / Optuna TPE", "tpe / Optuna mv-TPE"] + titles,
                     medians) + [""]
        out += [f"### {half} half: mean regret [95% CI]", ""]
        out += table(["problem", "kind"] + titles, means) + [""]
    out += ["### Targets (tunehost tpe against Optuna, same run)", ""]
    rows = []
    for half in (P.TUNING, P.HELD_OUT, "all"):
        hp = plist if half == "all" else [p for p in plist if p.half == half]
        for t in targets(stats, hp):
            rows.append([half] + t)
    out += table(["problems", "target", "measured", "verdict"], rows) + [""]
    if errors:
        out += ["Runs that did not happen (the tuner refused the space or is not built):", ""]
        grouped = {}
        for m, p, e in errors:
            grouped.setdefault((m, e), []).append(p)
        for (m, e), ps in sorted(grouped.items()):
            out.append(f"- {TITLES.get(m, m)}: {e} ({', '.join(ps)})")
        out.append("")
    secs = {}
    for r in records:
        if "seconds" in r:
            secs[r["method"]] = secs.get(r["method"], 0.0) + r["seconds"]
    out += ["Time spent per method (s, all runs): " + ", ".join(
        f"{TITLES.get(m, m)} {s:.0f}" for m, s in sorted(secs.items())), ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------

def self_check(build):
    """Each optimum is where the problem says; a few trials of each problem
    go through both sides (tunehost random; Optuna when it is installed)."""
    failures = 0
    have_optuna = _has("optuna")
    for p in P.all_problems():
        if any(not _has(m) for m in p.needs):
            note(f"self-check {p.name}: skipped ({', '.join(p.needs)} missing)")
            continue
        if p.at is not None:
            at = p.f(p.at)
            ok = abs(at - p.minimum()) < 1e-6
            if p.kind == "continuous":  # a minimum, not only the right number
                for k in p.at:
                    for step in (-1e-3, 1e-3):
                        q = dict(p.at, **{k: p.at[k] + step})
                        ok = ok and p.f(q) >= at - 1e-9
            if not ok:
                note(f"self-check {p.name}: f(at) = {at!r}, optimum {p.minimum()!r}: FAILED")
                failures += 1
        try:
            params = suggest(FakeTrial(), p.space)
            where = outside(p.space, params)
            if where or not math.isfinite(p.f(params)):
                raise RuntimeError(where or "not finite")
        except (RuntimeError, KeyError, ValueError) as e:
            note(f"self-check {p.name}: the space through suggest(): {e}: FAILED")
            failures += 1
        for method in ["th:random", "th:tpe"] + (["optuna:random"] if have_optuna else []):
            r = run_one((build, method, p.name, 0, 25 if method == "th:tpe" else 5), check=True)
            if "error" in r or not r["regret"] >= -1e-9:
                note(f"self-check {p.name} through {method}: {r}: FAILED")
                failures += 1
    note(f"self-check: {'ok' if failures == 0 else f'{failures} FAILED'}")
    return 0 if failures == 0 else 1


def merged(paths):
    """Records and meta of --out files; a later file's runs replace an
    earlier one's of the same method, problem and seed."""
    meta, records = None, {}
    for path in paths:
        with open(path) as fh:
            lines = [json.loads(line) for line in fh if line.strip()]
        m = lines[0]
        if meta is None:
            meta = dict(m, methods=list(m["methods"]), problems=list(m["problems"]))
        elif (m["seeds"], m["trials"]) != (meta["seeds"], meta["trials"]):
            raise SystemExit(f"{path}: {m['seeds']} seeds x {m['trials']} trials, the first "
                             f"file {meta['seeds']} x {meta['trials']}: not comparable")
        meta["methods"] += [x for x in m["methods"] if x not in meta["methods"]]
        meta["problems"] += [x for x in m["problems"] if x not in meta["problems"]]
        for r in lines[1:]:
            records[(r["method"], r["problem"], r["seed"])] = r
    return list(records.values()), meta


def _has(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--half", choices=[P.TUNING, P.HELD_OUT])
    ap.add_argument("--problems", help="comma-separated names (default: all)")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--define", action="append", default=[], metavar="LABEL=PLUGIN:MEMBERS",
                    help="a further tunehost label with its own class_args, e.g. "
                         "'tpe-g10=tpe:\"tpe_args\":{\"gamma\":0.1}' (then --methods th:tpe-g10)")
    ap.add_argument("--out", help="write every run's record here (JSON lines)")
    ap.add_argument("--report", metavar="FILE", nargs="+",
                    help="print the report of recorded runs (several: merged, e.g. Optuna's "
                         "runs once and tunehost's again after a change)")
    ap.add_argument("--self-check", action="store_true")
    args = ap.parse_args(argv)
    build = os.path.abspath(args.build)
    if args.self_check:
        return self_check(build)
    if args.report:
        print(report(*merged(args.report)))
        return 0

    methods = args.methods.split(",")
    _defines.extend(args.define)  # inherited by the pool's forked workers
    plist = P.all_problems()
    if args.problems:
        wanted = args.problems.split(",")
        unknown = set(wanted) - {p.name for p in plist}
        if unknown:
            raise SystemExit(f"unknown problems: {', '.join(sorted(unknown))}")
        plist = [p for p in plist if p.name in wanted]
    if args.half:
        plist = [p for p in plist if p.half == args.half]
    for p in list(plist):
        missing = [m for m in p.needs if not _has(m)]
        if missing:
            note(f"skipping {p.name}: needs {', '.join(missing)} (apt-get install -y "
                 f"python3-{'sklearn' if 'sklearn' in missing else missing[0]})")
            plist.remove(p)
        else:
            p.minimum()  # trains and caches a table before the workers start
    if any(m.startswith("optuna:") for m in methods) and not _has("optuna"):
        raise SystemExit("Optuna is missing: apt-get install -y python3-optuna python3-cmaes")

    tasks = [(build, m, p.name, s, args.trials) for m in methods for p in plist
             for s in range(args.seeds) if not (m in CONTINUOUS_ONLY and p.kind != "continuous")]
    tasks.sort(key=lambda t: not t[1].startswith("optuna"))  # the slow ones first
    meta = {"seeds": args.seeds, "trials": args.trials, "methods": methods,
            "problems": [p.name for p in plist]}
    records = []
    out = open(args.out, "w") if args.out else None
    if out:
        out.write(json.dumps(meta) + "\n")
    t0 = time.monotonic()
    with multiprocessing.Pool(args.jobs) as pool:
        for i, r in enumerate(pool.imap_unordered(run_one, tasks), 1):
            records.append(r)
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()
            if i % 100 == 0 or i == len(tasks):
                note(f"{i}/{len(tasks)} runs, {time.monotonic() - t0:.0f} s")
    if out:
        out.close()
    print(report(records, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
