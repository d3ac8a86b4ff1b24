"""NNI's trial API on tunehost: ``import tunehost.nni as nni`` in an NNI trial script.

An NNI trial script runs unchanged under ``tunehost-worker`` once its
``import nni`` becomes ``import tunehost.nni as nni``::

    import tunehost.nni as nni

    params = nni.get_next_parameter()
    for epoch in range(10):
        nni.report_intermediate_result(evaluate(epoch, params["lr"]))
    nni.report_final_result({"default": accuracy, "loss": loss})

The names and return values are NNI's (``nni/trial.py``); the transport is
tunehost's trial interface (tools/worker/README.md): parameters and ids come
from the ``TUNEHOST_*`` environment variables, results go out as JSON lines on
the metric pipe ``$TUNEHOST_METRIC_FD`` through :mod:`tunehost.trial`.

Without ``TUNEHOST_METRIC_FD`` (the script run by hand) this module behaves
like NNI's standalone mode (``nni/runtime/platform/standalone.py``):
``get_next_parameter()`` warns (``RuntimeWarning``) and returns ``{}`` (or the
``TUNEHOST_PARAMETERS`` map when that variable is set, so a configuration can
be tried by hand); trial and experiment ids are ``"STANDALONE"``, the sequence
id ``0``; results are logged to stdout as ``[time] Intermediate result: V
(Index N)`` and ``[time] Final result: V``.

Differences from NNI (documented in tools/python/README.md):
- Reporting before ``get_next_parameter()`` is allowed (NNI asserts): the
  parameters travel in the environment, so nothing is missing.
- NaN and infinity are refused with ``ValueError`` (they are not JSON and the
  worker would drop the line); NNI sends them and lets the tuner choke.
- numpy/torch scalars (anything with ``.item()``) are converted to Python
  numbers, as NNI's json_tricks does; other non-JSON values raise ``TypeError``.
- ``get_sequence_id()`` / ``get_trial_id()`` / ``get_experiment_id()`` read
  the environment at each call (NNI reads it once at import).

Only the standard library is used, like :mod:`tunehost.trial`.
"""

import json
import logging
import os
import sys
import threading
import warnings

from tunehost import trial as _trial

__all__ = [
    "get_next_parameter",
    "get_next_parameters",
    "get_current_parameter",
    "report_intermediate_result",
    "report_final_result",
    "get_experiment_id",
    "get_trial_id",
    "get_sequence_id",
]

STANDALONE = "STANDALONE"

_lock = threading.Lock()
_params = None  # the parameters returned by the last get_next_parameter()
_intermediate_seq = 0  # NNI's per-process PERIODICAL counter, shown in standalone mode
_logger = logging.getLogger("tunehost.nni")


def _standalone():
    """True when the script was not started by tunehost-worker (no metric pipe)."""
    return not os.environ.get("TUNEHOST_METRIC_FD")


def get_next_parameter():
    """The trial's hyperparameters: the dict the tuner generated.

    NNI asks each trial to call this once; calling it again returns the same
    parameters (a tunehost trial has exactly one parameter set)."""
    global _params
    if _standalone():
        warnings.warn("Running tunehost.nni trial code without tunehost-worker "
                      "(TUNEHOST_METRIC_FD is not set): parameters come from TUNEHOST_PARAMETERS "
                      "if set, else {}; results are printed to stdout", RuntimeWarning, stacklevel=2)
    params = _trial.get_parameters()
    with _lock:
        _params = params
    return params


def get_next_parameters():
    """Alias of :func:`get_next_parameter` (NNI has both)."""
    return get_next_parameter()


def get_current_parameter(tag=None):
    """The parameters returned by :func:`get_next_parameter` (``None`` before
    it was called); with ``tag``, the value of that key (``KeyError`` if absent)."""
    with _lock:
        params = _params
    if params is None:
        return None
    if tag is None:
        return params
    return params[tag]


def get_experiment_id():
    """The experiment id; ``"STANDALONE"`` outside a worker."""
    return _trial.get_experiment_id() or STANDALONE


def get_trial_id():
    """The trial id (NNI's trial job id); ``"STANDALONE"`` outside a worker."""
    return _trial.get_trial_id() or STANDALONE


def get_sequence_id():
    """The trial's number in the experiment (NNI's "Trial No."), an int; 0 outside a worker."""
    seq = _trial.get_sequence_id()
    return 0 if seq is None else seq


def report_intermediate_result(metric):
    """Reports an intermediate (PERIODICAL) result: a number, or a dict with a
    numeric ``"default"`` (the number tuners and assessors see; other keys are
    stored and shown)."""
    global _intermediate_seq
    value = _plain(metric)
    if not _standalone():
        _trial.report_intermediate(value)  # the worker numbers the results itself
        return
    _check(value)
    with _lock:
        index = _intermediate_seq
        _intermediate_seq += 1
    _log_standalone("Intermediate result: %s  (Index %s)", _json(value), index)


def report_final_result(metric):
    """Reports the final result (FINAL): a number, or a dict with a numeric ``"default"``."""
    value = _plain(metric)
    if _standalone():
        _check(value)
        _log_standalone("Final result: %s", _json(value))
        return
    _trial.report_final(value)


# ---------------------------------------------------------------- internals


def _plain(value):
    """``value`` with numpy/torch scalars (objects with ``.item()``) replaced
    by Python numbers, recursively in dicts and lists; NNI's json_tricks
    encoder does the same for numpy scalars."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            converted = item()
        except (TypeError, ValueError):  # a multi-element array: leave it to the checks
            return value
        if isinstance(converted, (bool, int, float, str)):
            return converted
    return value


def _check(value):
    """The checks :mod:`tunehost.trial` makes before it writes, for standalone
    mode, so a script that works by hand also works under the worker."""
    _trial._check(value)
    _json(value)


def _json(value):
    return json.dumps(value, allow_nan=False)


def _log_standalone(fmt, *args):
    # NNI's standalone mode logs results at INFO through a stdout handler on
    # its "nni" logger, formatted "[%Y-%m-%d %H:%M:%S] message".
    if not getattr(_log_standalone, "ready", False):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
        _logger.addHandler(handler)
        _logger.setLevel(logging.INFO)
        _logger.propagate = False
        _log_standalone.ready = True
    _logger.info(fmt, *args)
    for h in _logger.handlers:
        h.flush()
