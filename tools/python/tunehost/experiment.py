"""``tunehost.experiment.Experiment``: NNI's Python ``Experiment`` on tunehost.

::

    from tunehost.experiment import Experiment     # or NNI's `from nni.experiment import …`

    experiment = Experiment('local')               # NNI's quickstart, as NNI writes it
    experiment.config.trial_command = 'python3 model.py'
    experiment.config.search_space = {...}
    experiment.config.tuner.name = 'TPE'
    experiment.config.tuner.class_args['optimize_mode'] = 'maximize'
    experiment.config.max_trial_number = 10
    experiment.run(8080)           # start + wait; True when it ended DONE or STOPPED
    experiment.export_data()       # still answers after it ended, until stop()
    experiment.stop()              # (also done at exit, as NNI does)

    exp = Experiment("examples/nni-style/config.yml")   # a YAML file, or a dict of its keys
    exp.start()                    # `tunehost run` in the background
    exp.list_trial_jobs("RUNNING")
    exp.update_trial_concurrency(4)

    Experiment.connect(8080)                        # by port, id or endpoint
    Experiment(None, id="k3x9p2aa").resume()        # `tunehost resume ID`
    Experiment(None, id="k3x9p2aa").view(non_blocking=True)  # `tunehost view ID`, read-only

The experiment runs in a ``tunehost run FILE --id ID`` process (the C++ host
with local workers); this object talks to it over the control socket
(:mod:`tunehost.control`), found through ``<workdir>/<id>/host.json``
(with the host's public key when it authenticates: then give this client's
key, ``key_file=`` or ``$TUNEHOST_KEY``, see :mod:`tunehost.keys`). Results
come back as the dataclasses of :mod:`tunehost.experiment_data`, with NNI's
field names (``nni/experiment/data.py``) plus tunehost's extra fields.

A port means what NNI's does, where the experiment answers: its web UI is
on 127.0.0.1 ``port`` (``http://127.0.0.1:PORT``, :attr:`Experiment.url`
with its access token), and the host binds its control, jobs, results and
events sockets on the ports after it, ``port+1`` … ``port+4``;
``Experiment.connect(port)`` finds it there. Once
``tunehost run`` has ended (it exits when the experiment is finished), the
next query, and :meth:`Experiment.run` itself, start ``tunehost view ID``
on the same ports, so the experiment stays queryable until :meth:`stop`,
as NNI's manager does after its experiment is done.
"""

import atexit
import functools
import json
import os
import random
import re
import shutil
import signal
import string
import subprocess
import tempfile
import time

from tunehost.control import DEFAULT_TIMEOUT_MS, ControlClient, ControlError, ControlTimeout
from tunehost.experiment_data import TrialHyperParameters, TrialJob, TrialMetricData, TrialResult
from tunehost.experiment_queries import ExperimentQueries, _safe_name, parse_duration
from tunehost.keys import KeyFileError, server_key_from_host_info, untrusted_path
from tunehost.nni_config import NNI_PLATFORMS, ExperimentConfig

__all__ = ["Experiment", "ExperimentConfig", "RunMode", "TrialJob", "TrialHyperParameters",
           "TrialMetricData", "TrialResult", "ControlError", "ControlTimeout", "KeyFileError",
           "parse_duration", "DEFAULT_WORKDIR"]

DEFAULT_WORKDIR = os.path.join("~", "tunehost-experiments")
TRIAL_STATUSES = ("WAITING", "RUNNING", "SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED",
                  "EARLY_STOPPED")
# Experiment statuses after which `tunehost run` exits.
FINISHED_STATUSES = ("DONE", "STOPPED", "ERROR")


class RunMode:
    """NNI's RunMode values for :meth:`Experiment.start`: ``"background"`` and
    ``"foreground"`` stop the experiment when this Python process exits (the
    host's output goes to :attr:`Experiment.log_path` either way);
    ``"detach"`` leaves it running."""
    Background = "background"
    Foreground = "foreground"
    Detach = "detach"


# ------------------------------------------------------------------ helpers


def _port_args(port):
    """The host's arguments for NNI's port: the web UI on it, the sockets on
    the four after it (none: free ports)."""
    if port is None:
        return []
    port = int(port)
    return ["--ui", f"127.0.0.1:{port}", "--port-base", str(port + 1)]


def _new_id():
    """An NNI-style experiment id: 8 lowercase letters and digits."""
    rng = random.SystemRandom()
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def _expand(path, base):
    """The host's path rule: ``~`` is the home directory, relative is relative to base."""
    path = os.path.expanduser(str(path))
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(base, path))


_SNAKE_KEYS = {"class_args": "classArgs", "class_name": "className", "code_directory": "codeDirectory"}


def _camel(key):
    if key in _SNAKE_KEYS:
        return _SNAKE_KEYS[key]
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _normalize_config(config, base_dir):
    """A dict config as the host's YAML keys: snake_case keys (NNI's Python
    names) become camelCase, except inside the search space and classArgs;
    relative paths are resolved against base_dir (NNI resolves them against the
    current directory) and trialCodeDirectory defaults to base_dir."""
    out = {}
    for key, value in config.items():
        key = _camel(key)
        if key in ("tuner", "assessor", "advisor", "trainingService") and isinstance(value, dict):
            value = {_camel(k): v for k, v in value.items()}
        out[key] = value
    out.setdefault("trialCodeDirectory", ".")
    for key in ("trialCodeDirectory", "searchSpaceFile", "experimentWorkingDirectory"):
        if isinstance(out.get(key), str):
            out[key] = _expand(out[key], base_dir)
    return out


def _working_dir_of_file(path):
    """experimentWorkingDirectory of a YAML experiment file (default
    ``~/tunehost-experiments``), resolved as the host resolves it."""
    base = os.path.dirname(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    value = None
    try:
        import yaml  # python3-yaml, when installed

        data = yaml.safe_load(text)
        if isinstance(data, dict):
            value = data.get("experimentWorkingDirectory")
    except ImportError:
        m = re.search(r"^experimentWorkingDirectory:\s*(.*?)\s*(?:#.*)?$", text, re.MULTILINE)
        if m:
            value = m.group(1).strip("'\"")
    return _expand(value if value else DEFAULT_WORKDIR, base)


def _find_tunehost(explicit):
    candidates = [explicit, os.environ.get("TUNEHOST_BIN"), shutil.which("tunehost")]
    for c in candidates:
        if c:
            return c
    raise FileNotFoundError("cannot find the tunehost binary: pass tunehost=PATH, set TUNEHOST_BIN "
                            "or put tunehost on PATH")


def _read_host_file(host_file):
    """The host's host.json as a dict; None while it is not there or is
    caught half-written. PermissionError when it or its folder could be
    written by another user."""
    try:
        for path in (os.path.dirname(host_file), host_file):
            problem = untrusted_path(path)
            if problem:
                raise PermissionError(problem)
        with open(host_file, encoding="utf-8") as f:
            return json.load(f)
    except PermissionError:
        raise
    except (OSError, ValueError):
        return None


def _log_tail(log_path, limit=4000):
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-limit:]
    except (OSError, TypeError):
        return ""


# ------------------------------------------------------------------ Experiment


class _ClassOrInstance:
    """A method that is one function when called on the class and another
    when called on an instance."""

    def __init__(self, on_class, on_instance):
        self.on_class = on_class
        self.on_instance = on_instance
        self.__doc__ = f"{on_class.__doc__}\n\n{on_instance.__doc__}"

    def __get__(self, obj, cls):
        if obj is None:
            return functools.partial(self.on_class, cls)
        return functools.partial(self.on_instance, obj)


class Experiment(ExperimentQueries):
    """One tunehost experiment, started here or connected to.

    ``config``: NNI's platform name ``'local'`` (the config is then built
    attribute by attribute: ``experiment.config.trial_command = …``, see
    :mod:`tunehost.nni_config`), an :class:`ExperimentConfig`, the path of an
    NNI-style YAML experiment file, or a dict of the same keys (camelCase, or
    NNI's snake_case Python names), which is written as JSON to a temporary
    ``.yml`` file (relative paths in it are resolved against ``base_dir``,
    default the current directory when the experiment starts). ``None``: an
    experiment to connect to, resume or view by ``id``.

    ``id`` (default: a new 8-character id). Keywords: ``tunehost`` (binary;
    default ``$TUNEHOST_BIN`` or ``tunehost`` on PATH), ``plugins`` (plugin
    directory, ``--plugins``), ``worker_bin`` (``--worker-bin``), ``workdir``
    (where ``<id>/host.json`` is looked for; default the config's
    experimentWorkingDirectory, else ``~/tunehost-experiments``),
    ``timeout_ms`` (control requests), ``key_file`` and ``server_key_file``
    (for a host that authenticates: this client's ``.key_secret`` and the
    host's public ``.key``; default ``$TUNEHOST_KEY`` and
    ``$TUNEHOST_SERVER_KEY``; a host found through host.json gives its own
    public key there, so ``key_file`` is enough).
    """

    def __init__(self, config=None, id=None, *, tunehost=None, plugins=None, worker_bin=None,
                 workdir=None, timeout_ms=DEFAULT_TIMEOUT_MS, base_dir=None, key_file=None,
                 server_key_file=None):
        self.id = id or _new_id()
        self.key_file = key_file
        self.server_key_file = server_key_file
        self.config = None
        self.config_file = None
        self.tunehost = tunehost
        self.plugins = plugins
        self.worker_bin = worker_bin
        self.timeout_ms = timeout_ms
        self.port = None
        self.process = None  # the host this object started (run, resume or view)
        self.run_process = None  # the ended `tunehost run`/`resume` once a view took over
        self.endpoints = None
        self.log_path = None
        self.summary_path = None
        self._control = None
        self._tmpdir = None
        self._trial_root = None  # where local workers put trial directories
        self._summary = None
        self._workdir_given = workdir
        self._base_dir = base_dir
        self._ended = None  # the final status once the host that ran it exited
        self._lingers = False  # a `tunehost view` takes over when the host exits
        if isinstance(config, list) or (isinstance(config, str) and config in NNI_PLATFORMS
                                        and not os.path.exists(config)):
            config = ExperimentConfig(config)
        if isinstance(config, ExperimentConfig):
            self.config = config  # read when the experiment starts
            self.workdir = _expand(workdir or DEFAULT_WORKDIR, os.getcwd())
        elif isinstance(config, dict):
            self.config = _normalize_config(config, base_dir or os.getcwd())
            wd = self.config.get("experimentWorkingDirectory")
            self.workdir = _expand(workdir or wd or DEFAULT_WORKDIR, os.getcwd())
        elif config is not None:
            self.config_file = os.path.abspath(os.fspath(config))
            self.workdir = (_expand(workdir, os.getcwd()) if workdir
                            else _working_dir_of_file(self.config_file))
        else:
            self.workdir = _expand(workdir or DEFAULT_WORKDIR, os.getcwd())

    def __repr__(self):
        return f"Experiment(id={self.id!r}, workdir={self.workdir!r})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # -------------------------------------------------------------- lifecycle

    @property
    def url(self):
        """The web UI of the host this object started or found by id, with
        its admin token (NNI's "Web portal URL"); None if it has none."""
        return (self.endpoints or {}).get("ui")

    @property
    def host_file(self):
        """``<workdir>/<id>/host.json``, written by the host while it runs."""
        return os.path.join(self.workdir, self.id, "host.json")

    def start(self, port=None, debug=False, run_mode=RunMode.Background, timeout=60.0):
        """Starts ``tunehost run FILE --id ID`` in the background and returns
        once the host is serving (its host.json names this process).

        ``port``: the web UI on 127.0.0.1 ``port`` and the control, jobs,
        results and events sockets on ``port+1`` … ``port+4`` (default: free
        ports); the UI's address is :attr:`url`. ``debug``: host log level
        debug. ``run_mode``: unless
        ``"detach"``, the experiment is stopped when this Python process
        exits, as NNI does. The host's output goes to :attr:`log_path`.
        Raises RuntimeError when the host exits or does not come up within
        ``timeout`` seconds."""
        if self.process is not None:
            raise RuntimeError(f"experiment {self.id} was already started")
        if self.config is None and self.config_file is None:
            raise RuntimeError("an experiment without a config cannot be started: use connect, "
                               "resume or view")
        self._tmpdir = tempfile.mkdtemp(prefix=f"tunehost-experiment-{self.id}-")
        if self.config is not None:
            config = self.config
            if isinstance(config, ExperimentConfig):
                # NNI resolves relative paths when the experiment starts.
                config = _normalize_config(config.to_dict(), self._base_dir or os.getcwd())
                wd = self._workdir_given or config.get("experimentWorkingDirectory")
                self.workdir = _expand(wd or DEFAULT_WORKDIR, os.getcwd())
            self.config_file = os.path.join(self._tmpdir, "config.yml")
            with open(self.config_file, "w", encoding="utf-8") as f:
                json.dump(config, f, indent=1)  # YAML is a superset of JSON
        self.summary_path = os.path.join(self._tmpdir, "summary.json")
        args = ["run", self.config_file, "--id", self.id, "--summary-json", self.summary_path]
        self._start_host(args, port, debug, run_mode, timeout)

    def run(self, port=None, wait_completion=True, debug=False):
        """Starts the experiment and, with ``wait_completion``, waits until it
        has finished: returns True when it ended DONE or STOPPED, False for
        ERROR (NNI's return values; ``None`` without ``wait_completion``).
        The experiment stays queryable until :meth:`stop` (or the end of this
        Python process). Ctrl-C stops it."""
        self.start(port, debug)
        return self._finish(wait_completion)

    def _finish(self, wait_completion):
        if not wait_completion:
            return None
        status = self.wait()
        self._linger()
        return status in ("DONE", "STOPPED")

    def _start_host(self, args, port, debug, run_mode, timeout=60.0):
        self._spawn(args + _port_args(port), debug, timeout)
        if self.url:
            print(f"tunehost: experiment {self.id}: web UI {self.url}", flush=True)
        self.port = port
        if run_mode != RunMode.Detach:
            atexit.register(self.stop)

    def _linger(self):
        """Once the host that ran the experiment has exited, `tunehost view
        ID` on the same ports, so the experiment keeps answering."""
        if not self._exited() or self._ended is not None:
            return
        self._ended = self._final_status()
        self.close()
        self.run_process = self.process
        args = ["view", self.id, "--workdir", self.workdir] + _port_args(self.port)
        self._spawn(args, False, 60.0, pass_plugins=False, log_name="view.log")

    def wait(self, timeout=None, poll_interval=1.0):
        """Waits until the experiment has finished; returns its final status.

        For an experiment started here: until the host process exits (the
        final status is read from its summary). For a connected one: polls
        ``ST`` every ``poll_interval`` s until DONE, STOPPED or ERROR; ``None``
        when the host stopped answering before that was seen (``tunehost
        run`` exits as soon as it is DONE). Raises TimeoutError after
        ``timeout`` seconds. Ctrl-C stops the experiment, then re-raises."""
        if self._ended is not None:
            return self._ended
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if self.process is not None:
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    raise TimeoutError(f"experiment {self.id} still running after {timeout} s") from None
                return self._final_status()
            while True:
                try:
                    status = self.get_status()
                except ControlTimeout:
                    return None
                if status in FINISHED_STATUSES:
                    return status
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"experiment {self.id} still {status} after {timeout} s")
                time.sleep(poll_interval)
        except KeyboardInterrupt:
            self.stop()
            raise

    def stop(self, timeout=30.0):
        """Stops the experiment (``TE``); for a host started here, waits up to
        ``timeout`` s for it to exit, then kills it (NNI waits 30 s too)."""
        atexit.unregister(self.stop)
        if self._control is not None and not self._exited():
            try:
                self._control.terminate()
            except ControlError:
                pass  # gone already, or stopping: the wait below decides
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        self.close()

    def close(self):
        """Closes the control connection (the experiment keeps running)."""
        if self._control is not None:
            self._control.close()
            self._control = None

    @classmethod
    def connect(cls, experiment, workdir=None, timeout_ms=DEFAULT_TIMEOUT_MS, *, key_file=None,
                server_key_file=None):
        """An Experiment attached to a running host: ``experiment`` is a port
        (NNI's ``connect(port)``: the web UI's port, as ``run(port)`` took;
        the control socket is on 127.0.0.1 ``port+1``), an
        experiment id (found through ``<workdir>/<id>/host.json``) or a control
        endpoint (``tcp://…``). Raises ControlTimeout when the host does not
        answer, KeyFileError for keys that cannot be used (or none when the
        host.json says the host authenticates).

        ``key_file``/``server_key_file``: see :class:`Experiment`; by id the
        host's public key comes from host.json unless ``server_key_file`` (or
        ``$TUNEHOST_SERVER_KEY``) gives one."""
        options = dict(timeout_ms=timeout_ms, key_file=key_file, server_key_file=server_key_file)
        if isinstance(experiment, int) and not isinstance(experiment, bool):
            experiment = f"tcp://127.0.0.1:{experiment + 1}"
        if re.match(r"^[a-z]+://", experiment):
            exp = cls(workdir=workdir, **options)
            exp._attach(experiment)
        else:
            exp = cls(id=experiment, workdir=workdir, **options)
            info = _read_host_file(exp.host_file)
            if info is None:
                raise FileNotFoundError(f"experiment {experiment} is not running: no {exp.host_file}")
            exp.endpoints = info
            exp._trial_root = os.path.join(exp.workdir, _safe_name(exp.id), "trials")
            exp._attach(info["control"], info)
        try:
            profile = exp.get_experiment_profile()  # fails now if the host is gone
        except BaseException:
            exp.close()
            raise
        exp.id = profile["experiment_id"]
        exp.endpoints = exp.endpoints or profile.get("endpoints")
        return exp

    def _resume_by_id(cls, experiment_id, port=None, wait_completion=True, debug=False, *,
                      workdir=None, tunehost=None, plugins=None, worker_bin=None,
                      timeout_ms=DEFAULT_TIMEOUT_MS, key_file=None, server_key_file=None):
        """``Experiment.resume(ID, …)``: resumes a stopped experiment (``tunehost
        resume ID`` in the background); with ``wait_completion`` (NNI's
        default) waits until it has finished. Returns the Experiment."""
        exp = cls(None, experiment_id, tunehost=tunehost, plugins=plugins, worker_bin=worker_bin,
                  workdir=workdir, timeout_ms=timeout_ms, key_file=key_file,
                  server_key_file=server_key_file)
        exp._resume(port, wait_completion, debug)
        return exp

    def _resume(self, port=None, wait_completion=True, debug=False):
        """``Experiment(None, id=ID).resume(port, wait_completion, debug)``
        (NNI 3): resumes this stopped experiment and returns what :meth:`run`
        returns."""
        self._tmpdir = tempfile.mkdtemp(prefix=f"tunehost-experiment-{self.id}-")
        self.summary_path = os.path.join(self._tmpdir, "summary.json")
        args = ["resume", self.id, "--summary-json", self.summary_path, "--workdir", self.workdir]
        self._start_host(args, port, debug, RunMode.Background)
        return self._finish(wait_completion)

    def _view_by_id(cls, experiment_id, port=None, non_blocking=False, *, workdir=None,
                    tunehost=None, timeout_ms=DEFAULT_TIMEOUT_MS, key_file=None,
                    server_key_file=None):
        """``Experiment.view(ID, …)``: opens a stopped experiment read-only
        (``tunehost view ID`` in the background, status VIEWED). Unless
        ``non_blocking``, blocks until the view is stopped (Ctrl-C), as NNI
        does. Returns the Experiment."""
        exp = cls(None, experiment_id, tunehost=tunehost, workdir=workdir, timeout_ms=timeout_ms,
                  key_file=key_file, server_key_file=server_key_file)
        return exp._view(port, non_blocking)

    def _view(self, port=None, non_blocking=False):
        """``Experiment(None, id=ID).view(port, non_blocking)`` (NNI 3)."""
        args = ["view", self.id, "--workdir", self.workdir] + _port_args(port)
        self._spawn(args, False, 60.0, pass_plugins=False)
        self.port = port
        if self.url:
            print(f"tunehost: experiment {self.id}: web UI {self.url}", flush=True)
        if not non_blocking:
            try:
                self.process.wait()
            except KeyboardInterrupt:
                self.stop()
        return self

    # Both spellings work: on the class with an id (tunehost's, NNI 2's) and
    # on an Experiment made with one (NNI 3's `Experiment(None, id=ID)`).
    resume = _ClassOrInstance(_resume_by_id, _resume)
    view = _ClassOrInstance(_view_by_id, _view)

    # -------------------------------------------------------------- internals

    def _spawn(self, args, debug, timeout, pass_plugins=True, log_name="host.log"):
        binary = _find_tunehost(self.tunehost)
        command = [binary] + args
        self._lingers = args[0] in ("run", "resume")
        if pass_plugins and self.plugins:
            command += ["--plugins", os.fspath(self.plugins)]
        if pass_plugins and self.worker_bin and args[0] in ("run", "resume"):
            command += ["--worker-bin", os.fspath(self.worker_bin)]
        if debug:
            command += ["--log-level", "debug"]
        if self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix=f"tunehost-experiment-{self.id}-")
        self.log_path = os.path.join(self._tmpdir, log_name)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            info = _read_host_file(self.host_file)
            if info is not None and info.get("pid") == self.process.pid:
                break
            code = self.process.poll()
            if code is not None:
                raise RuntimeError(f"{' '.join(command)} exited with code {code} before the "
                                   f"experiment started:\n{_log_tail(self.log_path)}")
            if time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                raise RuntimeError(f"{self.host_file} did not appear within {timeout:.0f} s:\n"
                                   f"{_log_tail(self.log_path)}")
            time.sleep(0.02)
        self.endpoints = info
        self._trial_root = os.path.join(self.workdir, _safe_name(self.id), "trials")
        try:
            self._attach(info["control"], info)
        except KeyFileError:
            # No usable key for the host just started: do not leave it running unreachable.
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            raise

    def _attach(self, endpoint, host_info=None):
        """A control client for endpoint; a host.json dict gives the host's
        public key (used unless a server key file is given)."""
        self.close()
        self._control = ControlClient(endpoint, self.timeout_ms, key_file=self.key_file,
                                      server_key_file=self.server_key_file,
                                      server_key=server_key_from_host_info(host_info))

    def _exited(self):
        return self.process is not None and self.process.poll() is not None

    def _final_status(self):
        """The final status of a host started here that has exited."""
        if self._summary is None and self.summary_path:
            try:
                with open(self.summary_path, encoding="utf-8") as f:
                    self._summary = json.load(f)
            except (OSError, ValueError):
                self._summary = None
        if self._summary and self._summary.get("status"):
            return self._summary["status"]
        return "DONE" if self.process.returncode == 0 else "STOPPED"

    def _request(self, method, *args):
        if self._control is None:
            raise RuntimeError(f"experiment {self.id} is not connected: start() or connect() first")
        if self._exited() and self._ended is None and self._lingers:
            self._linger()  # the experiment ended: keep answering from its store
        if self._exited():
            raise RuntimeError(f"experiment {self.id} has ended ({self._final_status()}); its host "
                               f"exited with code {self.process.returncode}")
        return getattr(self._control, method)(*args)
