#!/usr/bin/env python3
"""A stdlib-only trial for the tunehost example experiment.

It plays a small training run: a score that improves with each "epoch" towards
a ceiling set by the hyperparameters, reported as intermediate results, then a
final result. It talks to tunehost-worker through the documented trial
interface (tools/worker/README.md): parameters in TUNEHOST_PARAMETERS, one
JSON line per result on the file descriptor TUNEHOST_METRIC_FD.
"""
import json
import math
import os
import time

params = json.loads(os.environ.get("TUNEHOST_PARAMETERS", "{}"))
fd = os.environ.get("TUNEHOST_METRIC_FD")
channel = os.fdopen(int(fd), "w", buffering=1) if fd else None


def report(kind, value):
    line = json.dumps({"type": kind, "value": value})
    if channel:
        channel.write(line + "\n")
        channel.flush()
    else:
        print(line)


x = float(params.get("x", 0.0))
lr = float(params.get("lr", 0.01))
layers = int(params.get("layers", 1))
optimizer = params.get("optimizer", "sgd")

# Best at x = 1.5, lr = 0.01, 3 layers, adam; in [0, 1].
ceiling = math.exp(-((x - 1.5) ** 2) / 8.0)
ceiling *= math.exp(-(math.log10(lr) + 2.0) ** 2 / 4.0)
ceiling *= 1.0 - 0.05 * abs(layers - 3)
ceiling *= 1.0 if optimizer == "adam" else 0.9

score = 0.0
for epoch in range(8):
    time.sleep(0.05)
    score = ceiling * (1.0 - math.exp(-(epoch + 1) / 2.5))
    report("PERIODICAL", score)

report("FINAL", {"default": score, "ceiling": ceiling})
