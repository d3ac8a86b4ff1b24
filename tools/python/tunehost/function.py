"""The function API: a plain Python function becomes a tunehost trial.

Ray Tune's FunctionRunner/StatusReporter semantics over ZeroMQ::

    import tunehost

    def train(config, reporter):
        for epoch in range(10):
            loss = step(config["lr"])
            reporter(loss=loss)            # blocks until the host has the result
        reporter(loss=loss, done=True)     # FINAL

    tunehost.run_worker(train, slots=2)

or from a shell: ``python3 -m tunehost.worker --function mymodule:train --slots 2``.

Each accepted trial runs ``train(config, reporter)`` on its own thread, where
``config`` is a copy of the trial's parameters and ``reporter`` a
:class:`StatusReporter`:

- ``reporter(**metrics)`` / ``reporter.report(value)`` sends a PERIODICAL
  result and blocks until the host acknowledged it (``MA``): results are never
  dropped and never pile up.
- ``reporter(done=True, **metrics)`` / ``reporter.report(value, final=True)``
  sends the FINAL result.
- Once the host stopped the trial (``KI``), the next reporter call raises
  :class:`tunehost.TrialStopped`; let it propagate and the trial ends
  ``USER_CANCELED`` (``EARLY_STOPPED`` if the assessor stopped it).
- An exception from ``train`` ends the trial ``FAILED`` with the traceback.
- If ``train`` returns a value (a number, a Metric map, or a metrics dict)
  and sent no FINAL, that value is the FINAL. If it returns ``None`` without a
  FINAL, its last reported result is sent once more as the FINAL (with the
  FINAL's own sequence, not as another PERIODICAL). The trial then ends
  ``SUCCEEDED``.

Metrics given as keywords become one Metric (wire-format §5.1) by this rule:
if there is a ``default`` keyword, it is the value the tuner sees; otherwise
exactly one keyword must have a number value (int, float or another
``numbers.Real`` such as a NumPy scalar; not bool), and it
becomes ``default``. The result is a map ``{"default": x, <all keywords>}``,
so ``reporter(loss=0.3, phase="warmup")`` sends
``{"default": 0.3, "loss": 0.3, "phase": "warmup"}``. Zero or several numeric
keywords without ``default`` raise ``ValueError``.
"""

import argparse
import importlib
import importlib.util
import logging
import numbers
import os
import signal
import sys
import threading
import time

from tunehost.keys import ENV_KEY, ENV_SERVER_KEY, KeyFileError
from tunehost.worker import (DEFAULT_EVENTS, DEFAULT_JOBS, DEFAULT_RESULTS, FINAL, PERIODICAL, TrialStopped,
                             Worker, check_metric)

__all__ = ["StatusReporter", "TrialStopped", "function_runner", "run_worker", "metric_from_keywords", "main"]

log = logging.getLogger("tunehost.function")


def _is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _plain(v):
    """NumPy-style scalars (numbers.Real but not int/float) as int or float, so they can be sent."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or type(v) in (int, float):
        return v
    return int(v) if isinstance(v, numbers.Integral) else float(v)


def metric_from_keywords(metrics):
    """Turns ``reporter(**metrics)`` keywords into one Metric (rule in the module docstring)."""
    if not metrics:
        raise ValueError("report at least one metric")
    if "default" in metrics:
        default = metrics["default"]
        if not _is_number(default):
            raise ValueError(f'metric "default" must be a number, got {type(default).__name__}')
    else:
        numeric = [k for k, v in metrics.items() if _is_number(v)]
        if len(numeric) != 1:
            raise ValueError(
                "metrics without a 'default' keyword need exactly one numeric metric (it becomes 'default'); "
                f"got {len(numeric)}: {', '.join(numeric) or 'none'}")
        default = metrics[numeric[0]]
    value = {"default": _plain(default)}
    value.update((k, _plain(v)) for k, v in metrics.items() if k != "default")
    return value


def _as_metric(value):
    """A value given to report() or returned by train: a Metric, or a metrics dict."""
    if isinstance(value, dict):
        if "default" not in value:
            return metric_from_keywords(value)
        return {k: _plain(v) for k, v in value.items()}
    return _plain(value)


class StatusReporter:
    """What a trial function reports through (``train(config, reporter)``).

    Attributes: ``trial_id``, ``experiment_id``, ``parameter_id``,
    ``sequence_id``, ``attempt``, ``parameters``, ``worker_id``;
    ``iteration`` (results delivered so far), ``time_this_iter_s`` (time the
    function spent between the end of the previous report call, or its start,
    and the latest report call: waiting for the host is not counted),
    ``time_total_s`` (since the function started, at the latest report),
    ``last_result`` (the latest Metric sent) and ``should_stop``.
    """

    def __init__(self, handle):
        self._handle = handle
        self.trial_id = handle.trial_id
        self.experiment_id = handle.experiment_id
        self.parameter_id = handle.parameter_id
        self.sequence_id = handle.sequence_id
        self.attempt = handle.attempt
        self.parameters = handle.parameters
        self.worker_id = handle.worker_id
        self.iteration = 0
        self.time_this_iter_s = 0.0
        self.time_total_s = 0.0
        self.last_result = None
        self.done = False
        self._final_sent = False
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._iter_start = self._start

    @property
    def should_stop(self):
        """True once the host stopped the trial: the next report raises TrialStopped."""
        return self._handle.stopped

    def __call__(self, **metrics):
        """Reports keyword metrics; ``done=True`` makes it the FINAL result.

        ``reporter(done=True)`` alone makes the last reported result the FINAL
        (or just ends reporting if nothing was reported).
        """
        done = bool(metrics.pop("done", False))
        if not metrics and done:
            if self.last_result is None:
                if self._handle.stopped:
                    raise TrialStopped(f"trial {self.trial_id} was stopped")
                self.done = True
                return None
            return self.report(self.last_result, final=True)
        return self.report(metric_from_keywords(metrics), final=done)

    def report(self, value, final=False):
        """Sends one result (a number or a map with numeric ``default``) and
        blocks until the host acknowledged it. Returns its sequence."""
        with self._lock:
            if self.done:
                raise RuntimeError(f"trial {self.trial_id} already reported its final result")
            value = _as_metric(value)
            check_metric(value)
            now = time.monotonic()
            this_iter = now - self._iter_start
            sequence = self._handle.report(FINAL if final else PERIODICAL, value)
            self.iteration += 1
            self.time_this_iter_s = this_iter
            self.time_total_s = now - self._start
            self.last_result = value
            if final:
                self.done = True
                self._final_sent = True
            self._iter_start = time.monotonic()
            return sequence


def function_runner(train):
    """Wraps ``train(config, reporter)`` into a :class:`tunehost.Worker` runner."""
    if not callable(train):
        raise TypeError("train must be callable")

    def run(handle):
        reporter = StatusReporter(handle)
        returned = train(dict(handle.parameters), reporter)
        if handle.stopped or reporter.done:
            return None
        if returned is not None:
            reporter.report(returned, final=True)
        elif reporter.last_result is not None:
            reporter.report(reporter.last_result, final=True)
        return None

    run.__name__ = f"function_runner({getattr(train, '__name__', 'train')})"
    return run


def run_worker(train, slots=1, **worker_options):
    """Serves trials with ``train(config, reporter)`` until SIGINT/SIGTERM.

    ``worker_options`` are :class:`tunehost.Worker` keywords: ``worker_id``,
    ``jobs``, ``results``, ``events`` (endpoints), ``gpus``, ``extra``,
    ``heartbeat_interval``, ``ack_timeout``, ``max_message_bytes``, ``max_result_bytes``,
    ``stop_grace``, ``key_file``, ``server_key_file``. Signal handlers are
    installed only when called from the main thread.
    """
    worker = Worker(function_runner(train), slots=slots, **worker_options)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: worker.request_stop())
    try:
        worker.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return worker


def load_callable(spec):
    """``module:callable`` or ``path/to/file.py:callable`` -> the callable."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--function wants module:callable, got {spec!r}")
    if module_name.endswith(".py") or os.sep in module_name:
        path = os.path.abspath(module_name)
        name = os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules.setdefault(name, module)
        module_spec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    target = module
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{spec} is not callable")
    return target


def _extra(item):
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--extra wants KEY=VALUE, got {item!r}")
    return key, value


def _positive_ms(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"wants a positive number of milliseconds, got {text!r}")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m tunehost.worker",
        description="Run a tunehost worker whose trials call a Python function train(config, reporter).")
    parser.add_argument("--function", required=True, metavar="MODULE:CALLABLE",
                        help="the trial function, e.g. mymodule:train or path/to/file.py:train")
    parser.add_argument("--slots", type=int, default=1, help="trials run at once (default 1)")
    parser.add_argument("--id", dest="worker_id", default=None, help="worker id (default <hostname>-<pid>-<random>)")
    parser.add_argument("--host", default=None,
                        help="host address for the three default endpoints (default 127.0.0.1)")
    parser.add_argument("--jobs", default=None, help=f"jobs endpoint (default {DEFAULT_JOBS})")
    parser.add_argument("--results", default=None, help=f"results endpoint (default {DEFAULT_RESULTS})")
    parser.add_argument("--events", default=None, help=f"events endpoint (default {DEFAULT_EVENTS})")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs announced in WH (default 0)")
    parser.add_argument("--extra", type=_extra, action="append", default=None, metavar="KEY=VALUE",
                        help="free-form resources announced in WH (repeatable; default host=<hostname>)")
    # Flag names and units are the C++ tunehost-worker's, so the two workers are interchangeable.
    parser.add_argument("--heartbeat-ms", type=_positive_ms, default=1000, help="HB interval (default 1000)")
    parser.add_argument("--ack-timeout-ms", type=_positive_ms, default=1000,
                        help="resend interval of an unacknowledged ME (default 1000)")
    parser.add_argument("--stop-grace-ms", type=_positive_ms, default=5000,
                        help="wait on shutdown for stopped trials to end (default 5000)")
    # Paths only: a key never goes on a command line. "" (the flag given empty) means none.
    parser.add_argument("--key", dest="key_file", default=os.environ.get(ENV_KEY, ""), metavar="FILE",
                        help="this worker's key pair (a .key_secret file, mode 0600) for a host that "
                             f"authenticates (default ${ENV_KEY})")
    parser.add_argument("--server-key", dest="server_key_file", default=os.environ.get(ENV_SERVER_KEY, ""),
                        metavar="FILE", help=f"the host's public key (a .key file; default ${ENV_SERVER_KEY})")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)

    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        train = load_callable(args.function)
    except Exception as e:
        parser.exit(2, f"cannot load {args.function}: {e}\n")
    host = args.host or "127.0.0.1"
    options = dict(
        worker_id=args.worker_id,
        jobs=args.jobs or f"tcp://{host}:5651",
        results=args.results or f"tcp://{host}:5652",
        events=args.events or f"tcp://{host}:5653",
        gpus=args.gpus,
        extra=dict(args.extra) if args.extra is not None else None,
        heartbeat_interval=args.heartbeat_ms / 1000.0,
        ack_timeout=args.ack_timeout_ms / 1000.0,
        stop_grace=args.stop_grace_ms / 1000.0,
        key_file=args.key_file,
        server_key_file=args.server_key_file,
    )
    try:
        run_worker(train, slots=args.slots, **options)
    except KeyFileError as e:
        log.error("%s", e)
        return 2
    except Exception as e:
        log.error("worker failed: %s", e)
        return 2
    return 0
