"""Helper for trial scripts run by the C++ ``tunehost-worker`` (stdlib only).

The worker runs the trial command with its parameters and ids in environment
variables and reads results as JSON lines from an inherited pipe
(tools/worker/README.md, "The trial interface")::

    from tunehost import trial

    params = trial.get_parameters()
    for epoch in range(10):
        trial.report_intermediate(score(epoch, params["lr"]))
    trial.report_final({"default": best, "loss": loss})

Run by hand (no ``TUNEHOST_METRIC_FD``), the results are printed to stdout
and a one-time warning goes to stderr, so the script still works.

This module needs neither pyzmq nor msgpack: copying ``tunehost/trial.py``
next to a script and importing it as ``trial`` works too.
"""

import json
import os
import sys
import threading

__all__ = ["get_parameters", "get_trial_id", "get_experiment_id", "get_sequence_id", "get_attempt",
           "get_parameter_id", "get_parameter_file", "get_trial_dir", "report_intermediate", "report_final"]

_lock = threading.Lock()
_warned = False


def get_parameters():
    """The trial's parameters (``TUNEHOST_PARAMETERS``, a JSON map); ``{}`` if unset."""
    text = os.environ.get("TUNEHOST_PARAMETERS")
    if not text:
        return {}
    return json.loads(text)


def get_experiment_id():
    """``TUNEHOST_EXPERIMENT_ID``, or ``None`` outside a worker."""
    return os.environ.get("TUNEHOST_EXPERIMENT_ID")


def get_trial_id():
    """``TUNEHOST_TRIAL_ID``, or ``None`` outside a worker."""
    return os.environ.get("TUNEHOST_TRIAL_ID")


def get_sequence_id():
    """The trial's number in the experiment (``TUNEHOST_SEQUENCE_ID``) as int, or ``None``."""
    return _int_env("TUNEHOST_SEQUENCE_ID")


def get_attempt():
    """The attempt number (``TUNEHOST_ATTEMPT``) as int, or ``None``."""
    return _int_env("TUNEHOST_ATTEMPT")


def get_parameter_id():
    """The parameter id (``TUNEHOST_PARAMETER_ID``, JSON): int, str or ``None``."""
    text = os.environ.get("TUNEHOST_PARAMETER_ID")
    return json.loads(text) if text else None


def get_parameter_file():
    """Path of the trial's ``parameter.json`` (``TUNEHOST_PARAMETER_FILE``), or ``None``."""
    return os.environ.get("TUNEHOST_PARAMETER_FILE")


def get_trial_dir():
    """The trial directory (``TUNEHOST_TRIAL_DIR``), or ``None``."""
    return os.environ.get("TUNEHOST_TRIAL_DIR")


def report_intermediate(value):
    """Reports a PERIODICAL result: a number, or a dict with a numeric ``"default"``."""
    _write("PERIODICAL", value)


def report_final(value):
    """Reports the FINAL result: a number, or a dict with a numeric ``"default"``."""
    _write("FINAL", value)


def _int_env(name):
    text = os.environ.get(name)
    return int(text) if text else None


def _check(value):
    def is_number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if is_number(value):
        return
    if isinstance(value, dict) and is_number(value.get("default")):
        return
    raise TypeError('a result is a number or a dict with a numeric "default", got ' + type(value).__name__)


def _write(kind, value):
    global _warned
    _check(value)
    line = (json.dumps({"type": kind, "value": value}, allow_nan=False) + "\n").encode("utf-8")
    fd_text = os.environ.get("TUNEHOST_METRIC_FD")
    with _lock:
        if not fd_text:
            if not _warned:
                _warned = True
                print("tunehost.trial: TUNEHOST_METRIC_FD is not set (not run by tunehost-worker); "
                      "printing results to stdout", file=sys.stderr, flush=True)
            sys.stdout.write(line.decode("utf-8"))
            sys.stdout.flush()
            return
        fd = int(fd_text)
        # One write per line: lines up to PIPE_BUF bytes stay whole even if
        # several processes of the trial share the pipe.
        view = memoryview(line)
        while view:
            written = os.write(fd, view)
            view = view[written:]
