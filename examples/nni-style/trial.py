"""An NNI trial script, unchanged but for its import.

With NNI this file would start with ``import nni``; on tunehost it starts with
``import tunehost.nni as nni`` and everything else stays as NNI's trial API
documentation writes it: get the parameters, report one intermediate result
per epoch, report the final result.

The "training" is a cheap synthetic objective (no data, no framework): a
validation accuracy that rises with each epoch towards a ceiling set by the
hyperparameters, with deterministic per-trial noise. Run it by hand
(``python3 trial.py``) to try it outside an experiment: like NNI's standalone
mode, it gets default parameters and prints its results.
"""
import logging
import math
import random
import time

import tunehost.nni as nni

logger = logging.getLogger("nni-style-example")

DEFAULTS = {"lr": 0.01, "momentum": 0.9, "hidden_size": 64, "batch_size": 32,
            "activation": "relu"}
EPOCHS = 10


def ceiling(p):
    """The best accuracy these hyperparameters can reach (in (0, 1))."""
    score = math.exp(-((math.log10(p["lr"]) + 2.2) ** 2) / 2.0)   # best near lr = 0.006
    score *= 1.0 - 0.3 * (p["momentum"] - 0.9) ** 2                 # best near 0.9
    score *= {32: 0.90, 64: 0.96, 128: 1.0, 256: 0.98}[p["hidden_size"]]
    score *= {16: 0.97, 32: 1.0, 64: 0.98}[p["batch_size"]]
    score *= {"relu": 1.0, "tanh": 0.97, "sigmoid": 0.9}[p["activation"]]
    return 0.1 + 0.88 * score


def main(params):
    rng = random.Random(nni.get_sequence_id())
    top = ceiling(params)
    accuracy = 0.0
    for epoch in range(EPOCHS):
        time.sleep(0.02)  # "train one epoch"
        # Learning is faster with a larger learning rate (up to a point).
        speed = 0.25 + 2.0 * min(params["lr"], 0.05)
        accuracy = top * (1.0 - math.exp(-speed * (epoch + 1))) + rng.uniform(-0.01, 0.01)
        nni.report_intermediate_result(accuracy)
        logger.debug("epoch %d: accuracy %.4f", epoch, accuracy)
    nni.report_final_result({"default": accuracy, "ceiling": top})


if __name__ == "__main__":
    try:
        params = dict(DEFAULTS)
        params.update(nni.get_next_parameter())
        main(params)
    except Exception:
        logger.exception("trial failed")
        raise
