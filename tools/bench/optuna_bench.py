#!/usr/bin/python3
"""Optuna side of the algorithm benchmark (see tools/bench/algo_bench.cc).

Same modes and JSON lines as tunehost-algo-bench:
  --cost        median time of study.ask(fixed_distributions) after H trials
                added with create_trial/add_trials
  --quality     simple regret after N sequential trials on the test functions
  --self-check  assert every test function's value at its known minimizer;
                with --probes FILE also check the C++ probe points

Samplers: "tpe" = TPESampler(seed=s) with defaults, "random" = RandomSampler(seed=s),
"cmaes" = CmaEsSampler(seed=s) with defaults (needs python3-cmaes).
Run with Debian's /usr/bin/python3 (python3-optuna 3.1).
"""

import argparse
import json
import math
import statistics
import sys
import time

# ---------------------------------------------------------------------------
# Test functions. Keep these equivalent to algo_bench.cc (same formulas,
# constants and summation order); algorithms.py cross-checks them.

PI = 3.14159265358979323846
E = 2.71828182845904523536


def branin(x):
    a, b, c, r, s, t = 1.0, 5.1 / (4.0 * PI * PI), 5.0 / PI, 6.0, 10.0, 1.0 / (8.0 * PI)
    u = x[1] - b * x[0] * x[0] + c * x[0] - r
    return a * u * u + s * (1.0 - t) * math.cos(x[0]) + s


_H_ALPHA = [1.0, 1.2, 3.0, 3.2]
_H_A = [[10, 3, 17, 3.5, 1.7, 8],
        [0.05, 10, 17, 0.1, 8, 14],
        [3, 3.5, 1.7, 10, 17, 8],
        [17, 8, 0.05, 10, 0.1, 14]]
_H_P = [[1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381]]


def hartmann6(x):
    outer = 0.0
    for i in range(4):
        inner = 0.0
        for j in range(6):
            d = x[j] - 1e-4 * _H_P[i][j]
            inner += _H_A[i][j] * d * d
        outer += _H_ALPHA[i] * math.exp(-inner)
    return -outer


def rosenbrock(x):
    total = 0.0
    for i in range(len(x) - 1):
        a = x[i + 1] - x[i] * x[i]
        b = 1.0 - x[i]
        total += 100.0 * a * a + b * b
    return total


def ackley(x):
    a, b, c = 20.0, 0.2, 2.0 * PI
    d = float(len(x))
    s1 = 0.0
    s2 = 0.0
    for v in x:
        s1 += v * v
        s2 += math.cos(c * v)
    return -a * math.exp(-b * math.sqrt(s1 / d)) - math.exp(s2 / d) + a + E


# name -> (function, bounds, known minimum, a minimizer)
FUNCTIONS = {
    "branin": (branin, [(-5.0, 10.0), (0.0, 15.0)], 10.0 / (8.0 * PI), [PI, 2.275]),
    "hartmann6": (hartmann6, [(0.0, 1.0)] * 6, -3.32236801141551,
                  [0.20168952, 0.15001069, 0.47687398, 0.27533243, 0.31165162, 0.65730054]),
    "rosenbrock4": (rosenbrock, [(-5.0, 10.0)] * 4, 0.0, [1.0] * 4),
    "ackley5": (ackley, [(-32.768, 32.768)] * 5, 0.0, [0.0] * 5),
}


def self_check(probes_file=None):
    failures = 0
    for name, (f, _, minimum, xstar) in FUNCTIONS.items():
        at = f(xstar)
        ok = abs(at - minimum) < 1e-6
        # A minimum, not just the right number: no nearby point is lower.
        for i in range(len(xstar)):
            for step in (-1e-3, 1e-3):
                x = list(xstar)
                x[i] += step
                if f(x) < at - 1e-9:
                    ok = False
        print(f"self-check {name:<12} f(x*) = {at:.12g}, known min {minimum:.12g}: "
              f"{'ok' if ok else 'FAILED'}", file=sys.stderr)
        failures += not ok
    if probes_file:
        checked = 0
        with open(probes_file) as fh:
            for line in fh:
                rec = json.loads(line)
                if rec.get("mode") != "probe":
                    continue
                mine = FUNCTIONS[rec["function"]][0](rec["x"])
                if abs(mine - rec["f"]) > 1e-12 * max(1.0, abs(mine)):
                    print(f"self-check MISMATCH {rec['function']} at {rec['x']}: "
                          f"C++ {rec['f']!r}, Python {mine!r}", file=sys.stderr)
                    failures += 1
                checked += 1
        print(f"self-check: {checked} C++ probe points agree with Python "
              f"(|diff| <= 1e-12 relative)" if failures == 0 else
              f"self-check: {checked} probe points checked, mismatches found", file=sys.stderr)
        if checked == 0:
            failures += 1
    return 0 if failures == 0 else 1


# ---------------------------------------------------------------------------

def make_sampler(optuna, name, seed):
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":  # needs python3-cmaes
        return optuna.samplers.CmaEsSampler(seed=seed)
    raise SystemExit(f"unknown sampler {name}")


def emit(**rec):
    print(json.dumps(rec), flush=True)


CHOICES = ["relu", "tanh", "sigmoid", "gelu"]


def cost_spaces(optuna):
    D = optuna.distributions
    return {
        "cont6": {f"x{i}": D.FloatDistribution(-5.0, 5.0) for i in range(6)},
        "mixed": {
            "lr0": D.FloatDistribution(1e-4, 1.0, log=True),
            "lr1": D.FloatDistribution(1e-4, 1.0, log=True),
            "n0": D.IntDistribution(1, 100),
            "n1": D.IntDistribution(1, 100),
            "act": D.CategoricalDistribution(CHOICES),
            "u": D.FloatDistribution(0.0, 1.0),
        },
    }


def cost_objective(params):
    """Same as CostObjective in algo_bench.cc: sum of squares + choice index."""
    total = 0.0
    for v in params.values():
        if isinstance(v, str):
            total += CHOICES.index(v)
        else:
            total += float(v) * float(v)
    return total


def random_params(rng, dists):
    import optuna
    out = {}
    for name, d in dists.items():
        if isinstance(d, optuna.distributions.CategoricalDistribution):
            out[name] = d.choices[rng.randrange(len(d.choices))]
        elif isinstance(d, optuna.distributions.IntDistribution):
            out[name] = rng.randint(d.low, d.high)
        elif d.log:
            out[name] = math.exp(rng.uniform(math.log(d.low), math.log(d.high)))
        else:
            out[name] = rng.uniform(d.low, d.high)
    return out


def run_cost(optuna, samplers, spaces, histories, k, k_large, large_from):
    import random as pyrandom
    for sampler_name in samplers:
        for space_name, dists in cost_spaces(optuna).items():
            if space_name not in spaces:
                continue
            for h in histories:
                rng = pyrandom.Random(12345 + h)
                study = optuna.create_study(direction="minimize",
                                            sampler=make_sampler(optuna, sampler_name, 1))
                t0 = time.perf_counter()
                trials = []
                for _ in range(h):
                    params = random_params(rng, dists)
                    trials.append(optuna.trial.create_trial(
                        params=params, distributions=dists, value=cost_objective(params)))
                study.add_trials(trials)
                import_ms = (time.perf_counter() - t0) * 1e3
                kk = k_large if h >= large_from else k
                times, cpu = [], []
                for _ in range(kk):
                    # thread_time: the ask's own CPU cost, robust to a busy machine.
                    cpu_start = time.thread_time()
                    start = time.perf_counter()
                    trial = study.ask(dists)
                    times.append(time.perf_counter() - start)
                    cpu.append(time.thread_time() - cpu_start)
                    study.tell(trial, cost_objective(trial.params))
                med = statistics.median(times)
                emit(mode="cost", impl="optuna", tuner=sampler_name, space=space_name,
                     history=h, k=kk, median_ms=med * 1e3, median_us=med * 1e6,
                     mean_us=statistics.fmean(times) * 1e6,
                     cpu_median_us=statistics.median(cpu) * 1e6, import_ms=import_ms,
                     times_us=[round(t * 1e6, 1) for t in times])


def run_quality(optuna, samplers, functions, seeds, n_trials):
    for sampler_name in samplers:
        for fname in functions:
            f, bounds, minimum, _ = FUNCTIONS[fname]

            def objective(trial):
                x = [trial.suggest_float(f"x{i}", lo, hi) for i, (lo, hi) in enumerate(bounds)]
                return f(x)

            for seed in range(seeds):
                study = optuna.create_study(direction="minimize",
                                            sampler=make_sampler(optuna, sampler_name, seed))
                t0 = time.perf_counter()
                study.optimize(objective, n_trials=n_trials)
                best = study.best_value
                emit(mode="quality", impl="optuna", tuner=sampler_name, function=fname, seed=seed,
                     trials=len(study.trials), best=best, regret=best - minimum,
                     seconds=time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--cost", action="store_true")
    mode.add_argument("--quality", action="store_true")
    mode.add_argument("--self-check", action="store_true")
    ap.add_argument("--probes", help="JSON lines from tunehost-algo-bench --self-check")
    ap.add_argument("--samplers", default="tpe,random")
    ap.add_argument("--spaces", default="cont6,mixed")
    ap.add_argument("--histories", default="100,500,1000,2000,5000")
    ap.add_argument("--k", type=int, default=20, help="timed asks per history")
    ap.add_argument("--k-large", type=int, default=None,
                    help="timed asks for histories >= --large-from (default: --k)")
    ap.add_argument("--large-from", type=int, default=2000)
    ap.add_argument("--functions", default=",".join(FUNCTIONS))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=100)
    args = ap.parse_args()

    if args.self_check:
        return self_check(args.probes)

    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Optuna 3.1 warns that ask(fixed_distributions) is experimental; not news.
    import warnings
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    samplers = [s for s in args.samplers.split(",") if s]
    if args.cost:
        run_cost(optuna, samplers, args.spaces.split(","),
                 [int(h) for h in args.histories.split(",") if h], args.k,
                 args.k_large if args.k_large is not None else args.k, args.large_from)
    else:
        run_quality(optuna, samplers, [f for f in args.functions.split(",") if f],
                    args.seeds, args.trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
