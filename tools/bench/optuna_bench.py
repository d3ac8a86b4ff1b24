#!/usr/bin/python3
"""Optuna side of the algorithm benchmark's cost section (see
tools/bench/algo_bench.cc; quality is tools/bench/suite.py's).

  --cost        median time of study.ask(fixed_distributions) after H trials
                added with create_trial/add_trials (JSON lines, as
                tunehost-algo-bench --cost)

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


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cost", action="store_true", required=True)
    ap.add_argument("--samplers", default="tpe,random")
    ap.add_argument("--spaces", default="cont6,mixed")
    ap.add_argument("--histories", default="100,500,1000,2000,5000")
    ap.add_argument("--k", type=int, default=20, help="timed asks per history")
    ap.add_argument("--k-large", type=int, default=None,
                    help="timed asks for histories >= --large-from (default: --k)")
    ap.add_argument("--large-from", type=int, default=2000)
    args = ap.parse_args()

    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Optuna 3.1 warns that ask(fixed_distributions) is experimental; not news.
    import warnings
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    samplers = [s for s in args.samplers.split(",") if s]
    run_cost(optuna, samplers, args.spaces.split(","),
             [int(h) for h in args.histories.split(",") if h], args.k,
             args.k_large if args.k_large is not None else args.k, args.large_from)
    return 0


if __name__ == "__main__":
    sys.exit(main())
