"""``tunehost.experiment.Experiment``: NNI's Python ``Experiment`` on tunehost.

::

    from tunehost.experiment import Experiment

    exp = Experiment("examples/nni-style/config.yml")
    exp.run()                      # start + wait; True when the experiment is DONE

    exp = Experiment({"searchSpace": {...}, "trialCommand": "python3 trial.py",
                      "trialConcurrency": 2, "maxTrialNumber": 20,
                      "tuner": {"name": "tpe", "classArgs": {"optimize_mode": "maximize"}}})
    exp.start()                    # `tunehost run` in the background
    exp.list_trial_jobs("RUNNING")
    exp.update_trial_concurrency(4)
    exp.stop()

    Experiment.connect("k3x9p2aa").get_status()     # a running experiment, by id or endpoint
    Experiment.resume("k3x9p2aa")                   # `tunehost resume ID`
    Experiment.view("k3x9p2aa", non_blocking=True)  # `tunehost view ID` (read-only)

The experiment runs in a ``tunehost run FILE --id ID`` process (the C++ host
with local workers); this object talks to it over the control socket
(:mod:`tunehost.control`), found through ``<workdir>/<id>/host.json``
(with the host's public key when it authenticates: then give this client's
key, ``key_file=`` or ``$TUNEHOST_KEY``, see :mod:`tunehost.keys`). Results
come back as the dataclasses below, with NNI's field names
(``nni/experiment/data.py``) plus tunehost's extra fields.
"""

import dataclasses
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
from typing import Any, List, Optional

from tunehost.control import DEFAULT_TIMEOUT_MS, ControlClient, ControlError, ControlTimeout
from tunehost.keys import KeyFileError, server_key_from_host_info, untrusted_path

__all__ = ["Experiment", "TrialJob", "TrialHyperParameters", "TrialMetricData", "TrialResult",
           "ControlError", "ControlTimeout", "KeyFileError", "parse_duration", "DEFAULT_WORKDIR"]

DEFAULT_WORKDIR = os.path.join("~", "tunehost-experiments")
TRIAL_STATUSES = ("WAITING", "RUNNING", "SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED",
                  "EARLY_STOPPED")
# Experiment statuses after which `tunehost run` exits.
FINISHED_STATUSES = ("DONE", "STOPPED", "ERROR")


# ------------------------------------------------------------------ records


@dataclasses.dataclass
class TrialHyperParameters:
    """NNI's TrialHyperParameters: the parameter record the trial ran with."""
    parameter_id: Any
    parameter_source: str
    parameters: dict
    parameter_index: int = 0


@dataclasses.dataclass
class TrialMetricData:
    """NNI's TrialMetricData. ``data`` is the metric value itself (NNI decodes
    its double-encoded JSON to the same thing). ``timestamp`` (ms) is ``None``:
    tunehost does not record when a metric arrived."""
    timestamp: Optional[int]
    trialJobId: str
    parameterId: Any
    type: str
    sequence: Optional[int]
    data: Any


@dataclasses.dataclass
class TrialResult:
    """NNI's TrialResult (``export_data``): a SUCCEEDED trial's final result."""
    parameter: dict
    value: Any
    trialJobId: str


@dataclasses.dataclass
class TrialJob:
    """NNI's TrialJob plus tunehost's fields. Times are NNI's milliseconds since
    the epoch (``None`` while unknown); ``finalMetricData`` holds the final
    result (``sequence`` and ``timestamp`` unknown: ``None``); ``logPath`` and
    ``stderrPath`` are the trial directory and its stderr.log when the trials
    ran on this machine's local workers (else empty)."""
    trialJobId: str
    status: str
    hyperParameters: List[TrialHyperParameters]
    logPath: str
    startTime: Optional[int]
    endTime: Optional[int]
    finalMetricData: List[TrialMetricData]
    stderrPath: str
    sequenceId: int
    # tunehost's TrialInfo fields (control API):
    parameters: dict = dataclasses.field(default_factory=dict)
    final: Any = None
    source: str = ""
    attempt: int = 0
    worker_id: str = ""
    intermediate_count: int = 0
    error: str = ""


def parse_duration(value):
    """NNI's duration: a number of seconds, or a string ``"<number><unit>"``
    with unit ``s``, ``m``, ``h`` or ``d`` (``"90s"``, ``"10m"``, ``"1.5h"``,
    ``"2d"``); a bare number string means seconds. Returns seconds (float)."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)\s*", str(value))
        if not m:
            raise ValueError(f"not a duration: {value!r} (use e.g. '30s', '10m', '1h', '2d')")
        seconds = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"not a duration: {value!r}")
    return seconds


# ------------------------------------------------------------------ helpers


def _new_id():
    """An NNI-style experiment id: 8 lowercase letters and digits."""
    rng = random.SystemRandom()
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def _expand(path, base):
    """The host's path rule: ``~`` is the home directory, relative is relative to base."""
    path = os.path.expanduser(str(path))
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(base, path))


def _safe_name(text):
    # tunehost-worker's rule for directory names made of ids.
    out = re.sub(r"[^A-Za-z0-9._-]", "_", text)
    return "_" + out[1:] if out.startswith(".") else out


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


def _ms(seconds):
    return None if seconds is None else int(round(seconds * 1000))


# ------------------------------------------------------------------ Experiment


class Experiment:
    """One tunehost experiment, started here or connected to.

    ``config``: path of an NNI-style YAML experiment file, or a dict of the
    same keys (camelCase, or NNI's snake_case Python names), which is written
    as JSON to a temporary ``.yml`` file (relative paths in it are resolved
    against ``base_dir``, default the current directory).

    Keywords: ``id`` (default: a new 8-character id), ``tunehost`` (binary;
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

    def __init__(self, config=None, *, id=None, tunehost=None, plugins=None, worker_bin=None,
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
        self.process = None
        self.endpoints = None
        self.log_path = None
        self.summary_path = None
        self._control = None
        self._tmpdir = None
        self._trial_root = None  # where local workers put trial directories
        self._summary = None
        if isinstance(config, dict):
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
    def host_file(self):
        """``<workdir>/<id>/host.json``, written by the host while it runs."""
        return os.path.join(self.workdir, self.id, "host.json")

    def start(self, port=None, debug=False, timeout=60.0):
        """Starts ``tunehost run FILE --id ID`` in the background and returns
        once the host is serving (its host.json names this process).

        ``port``: bind the control, jobs, results and events sockets on
        127.0.0.1 ports ``port`` … ``port+3`` (``--port-base``; default: free
        ports). ``debug``: host log level debug. The host's output goes to
        :attr:`log_path`. Raises RuntimeError when the host exits or does not
        come up within ``timeout`` seconds."""
        if self.process is not None:
            raise RuntimeError(f"experiment {self.id} was already started")
        if self.config is None and self.config_file is None:
            raise RuntimeError("an experiment without a config cannot be started: use connect, "
                               "resume or view")
        self._tmpdir = tempfile.mkdtemp(prefix=f"tunehost-experiment-{self.id}-")
        if self.config is not None:
            self.config_file = os.path.join(self._tmpdir, "config.yml")
            with open(self.config_file, "w", encoding="utf-8") as f:
                json.dump(self.config, f, indent=1)  # YAML is a superset of JSON
        self.summary_path = os.path.join(self._tmpdir, "summary.json")
        args = ["run", self.config_file, "--id", self.id, "--summary-json", self.summary_path]
        if port is not None:
            args += ["--port-base", str(int(port))]
        self._spawn(args, debug, timeout)

    def run(self, port=None, wait_completion=True, debug=False):
        """Starts the experiment and, with ``wait_completion``, waits until it
        has finished. Returns True when it ended DONE, False for STOPPED or
        ERROR (``None`` without ``wait_completion``). Ctrl-C stops it."""
        self.start(port, debug)
        if not wait_completion:
            return None
        return self.wait() == "DONE"

    def wait(self, timeout=None, poll_interval=1.0):
        """Waits until the experiment has finished; returns its final status.

        For an experiment started here: until the host process exits (the
        final status is read from its summary). For a connected one: polls
        ``ST`` every ``poll_interval`` s until DONE, STOPPED or ERROR; ``None``
        when the host stopped answering before that was seen (``tunehost
        run`` exits as soon as it is DONE). Raises TimeoutError after
        ``timeout`` seconds. Ctrl-C stops the experiment, then re-raises."""
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
        """An Experiment attached to a running host: ``experiment`` is an
        experiment id (found through ``<workdir>/<id>/host.json``) or a control
        endpoint (``tcp://…``). Raises ControlTimeout when the host does not
        answer, KeyFileError for keys that cannot be used (or none when the
        host.json says the host authenticates).

        ``key_file``/``server_key_file``: see :class:`Experiment`; by id the
        host's public key comes from host.json unless ``server_key_file`` (or
        ``$TUNEHOST_SERVER_KEY``) gives one."""
        options = dict(timeout_ms=timeout_ms, key_file=key_file, server_key_file=server_key_file)
        if re.match(r"^[a-z]+://", experiment):
            exp = cls(workdir=workdir, **options)
            exp._attach(experiment)
        else:
            exp = cls(id=experiment, workdir=workdir, **options)
            info = exp._read_host_file()
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

    @classmethod
    def resume(cls, experiment_id, port=None, wait_completion=True, debug=False, *, workdir=None,
               tunehost=None, plugins=None, worker_bin=None, timeout_ms=DEFAULT_TIMEOUT_MS,
               key_file=None, server_key_file=None):
        """Resumes a stopped experiment: ``tunehost resume ID`` in the
        background. With ``wait_completion`` (NNI's default) waits until it
        has finished. Returns the Experiment."""
        exp = cls(id=experiment_id, tunehost=tunehost, plugins=plugins, worker_bin=worker_bin,
                  workdir=workdir, timeout_ms=timeout_ms, key_file=key_file,
                  server_key_file=server_key_file)
        exp._tmpdir = tempfile.mkdtemp(prefix=f"tunehost-experiment-{experiment_id}-")
        exp.summary_path = os.path.join(exp._tmpdir, "summary.json")
        args = ["resume", experiment_id, "--summary-json", exp.summary_path]
        if workdir is not None:
            args += ["--workdir", exp.workdir]
        if port is not None:
            args += ["--port-base", str(int(port))]
        exp._spawn(args, debug, 60.0)
        if wait_completion:
            exp.wait()
        return exp

    @classmethod
    def view(cls, experiment_id, port=None, non_blocking=False, *, workdir=None, tunehost=None,
             timeout_ms=DEFAULT_TIMEOUT_MS, key_file=None, server_key_file=None):
        """Opens a stopped experiment read-only: ``tunehost view ID`` in the
        background (status VIEWED). Unless ``non_blocking``, blocks until the
        view is stopped (Ctrl-C), as NNI does. Returns the Experiment."""
        exp = cls(id=experiment_id, tunehost=tunehost, workdir=workdir, timeout_ms=timeout_ms,
                  key_file=key_file, server_key_file=server_key_file)
        exp._tmpdir = tempfile.mkdtemp(prefix=f"tunehost-experiment-{experiment_id}-")
        args = ["view", experiment_id]
        if workdir is not None:
            args += ["--workdir", exp.workdir]
        if port is not None:
            args += ["--port-base", str(int(port))]
        exp._spawn(args, False, 60.0, pass_plugins=False)
        if not non_blocking:
            try:
                exp.process.wait()
            except KeyboardInterrupt:
                exp.stop()
        return exp

    # -------------------------------------------------------------- queries

    def get_status(self):
        """The experiment status: INITIALIZED RUNNING NO_MORE_TRIAL
        TUNER_NO_MORE_TRIAL DONE STOPPING STOPPED ERROR VIEWED. Once a host
        started here has exited, its final status."""
        if self._exited():
            return self._final_status()
        return self.get_experiment_profile()["status"]

    def get_experiment_profile(self):
        """tunehost's ExperimentStatusInfo (``ST``) as a dict: experiment_id,
        status, error, start_time, elapsed_s, concurrency, max_trials,
        max_duration_s, counts, best, optimize_mode, endpoints."""
        return self._request("status")

    def list_trial_jobs(self, status=None, offset=0, limit=0):
        """The trials (``TrialJob``), by sequence id; ``status`` filters
        (WAITING RUNNING SUCCEEDED FAILED USER_CANCELED SYS_CANCELED
        EARLY_STOPPED); ``offset``/``limit`` page (limit 0: all)."""
        data = self._request("list_trials", status, offset, limit)
        return [self._trial_job(t) for t in data["trials"]]

    def get_trial_job(self, trial_job_id):
        """One trial (``TrialJob``); ControlError ``not_found`` for an unknown id."""
        return self._trial_job(self._request("get_trial", trial_job_id))

    def get_job_statistics(self):
        """NNI's job statistics: ``[{"trialJobStatus": s, "trialJobNumber": n}, …]``
        for the statuses that have trials."""
        counts = self._request("job_statistics")["counts"]
        return [{"trialJobStatus": s, "trialJobNumber": n} for s, n in counts.items()]

    def get_job_metrics(self, trial_job_id=None):
        """Every metric: ``{trial_id: [TrialMetricData…]}`` in trial order then
        metric order (one trial's only, with ``trial_job_id``)."""
        records = self._request("metrics", trial_job_id)["metrics"]
        param_ids = {}
        if records:
            if trial_job_id is not None:
                param_ids[trial_job_id] = self._request("get_trial", trial_job_id)["parameter_id"]
            else:
                for t in self._request("list_trials", None, 0, 0)["trials"]:
                    param_ids[t["trial_id"]] = t["parameter_id"]
        out = {}
        for r in records:
            out.setdefault(r["trial_id"], []).append(TrialMetricData(
                timestamp=None, trialJobId=r["trial_id"], parameterId=param_ids.get(r["trial_id"]),
                type=r["type"], sequence=r["sequence"], data=r["value"]))
        return out

    def export_data(self):
        """The SUCCEEDED trials with a final result: ``[TrialResult…]``."""
        return [TrialResult(parameter=r["parameters"], value=r["value"], trialJobId=r["trial_id"])
                for r in self._request("export")["records"]]

    # -------------------------------------------------------------- updates

    def update_trial_concurrency(self, value):
        """Most trials running at once (≥ 1). Returns the new profile."""
        return self._request("update", int(value), None, None)

    update_concurrency = update_trial_concurrency

    def update_max_trial_number(self, value):
        """The trial budget (0: unlimited). Returns the new profile."""
        return self._request("update", None, int(value), None)

    def update_max_experiment_duration(self, value):
        """The run-time budget: ``"10m"``, ``"1h"``, ``"2d"`` or seconds (0:
        unlimited). Returns the new profile."""
        return self._request("update", None, None, parse_duration(value))

    def update_search_space(self, value):
        """Replaces the search space: a dict, or the path of a JSON file."""
        if not isinstance(value, dict):
            with open(os.fspath(value), encoding="utf-8") as f:
                value = json.load(f)
        self._request("update_search_space", value)

    def kill_trial_job(self, trial_job_id):
        """Cancels a trial (it ends USER_CANCELED). ControlError ``not_found``
        for an unknown id, ``bad_state`` for a trial that has already ended."""
        self._request("kill_trial", trial_job_id)

    def import_data(self, data):
        """Imports finished results for the tuner: a list of NNI TrialResults
        or dicts ``{"parameter": {...}, "value": v, "trialJobId": id?}`` (also
        tunehost's ``parameters``/``trial_id`` names); ``value`` is a number,
        a dict with a numeric "default", or a JSON string of one. Returns the
        number of records imported."""
        records = []
        for item in data:
            if dataclasses.is_dataclass(item):
                item = dataclasses.asdict(item)
            params = item.get("parameter", item.get("parameters"))
            value = item["value"]
            if isinstance(value, str):
                value = json.loads(value)
            records.append({"parameters": params, "value": value,
                            "trial_id": item.get("trialJobId", item.get("trial_id"))})
        return self._request("import_data", records).get("imported")

    def add_trial(self, parameters):
        """Queues a trial with these parameters (NNI's customized trial);
        returns ``{"trial_id", "sequence_id"}``."""
        return self._request("add_trial", parameters)

    def wait_trials(self, trial_ids, timeout=None, poll_interval=0.2):
        """Waits until every given trial has ended (NNI's ``wait_models``);
        returns their ``TrialJob``s in the order given. Polls ``GT``; raises
        TimeoutError after ``timeout`` seconds, ControlError ``not_found`` for
        an unknown id."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = list(dict.fromkeys(trial_ids))
        done = {}
        while True:
            for trial_id in list(pending):
                job = self.get_trial_job(trial_id)
                if job.status not in ("WAITING", "RUNNING"):
                    done[trial_id] = job
                    pending.remove(trial_id)
            if not pending:
                return [done[trial_id] for trial_id in trial_ids]
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"trials {', '.join(pending)} still running after {timeout} s")
            time.sleep(poll_interval)

    # -------------------------------------------------------------- internals

    def _spawn(self, args, debug, timeout, pass_plugins=True):
        binary = _find_tunehost(self.tunehost)
        command = [binary] + args
        if pass_plugins and self.plugins:
            command += ["--plugins", os.fspath(self.plugins)]
        if pass_plugins and self.worker_bin and args[0] in ("run", "resume"):
            command += ["--worker-bin", os.fspath(self.worker_bin)]
        if debug:
            command += ["--log-level", "debug"]
        if self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix=f"tunehost-experiment-{self.id}-")
        self.log_path = os.path.join(self._tmpdir, "host.log")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            info = self._read_host_file()
            if info is not None and info.get("pid") == self.process.pid:
                break
            code = self.process.poll()
            if code is not None:
                raise RuntimeError(f"{' '.join(command)} exited with code {code} before the "
                                   f"experiment started:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                raise RuntimeError(f"{self.host_file} did not appear within {timeout:.0f} s:\n"
                                   f"{self._log_tail()}")
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

    def _read_host_file(self):
        try:
            for path in (os.path.dirname(self.host_file), self.host_file):
                problem = untrusted_path(path)
                if problem:
                    raise PermissionError(problem)
            with open(self.host_file, encoding="utf-8") as f:
                return json.load(f)
        except PermissionError:
            raise
        except (OSError, ValueError):
            return None  # not there yet, or caught half-written

    def _log_tail(self, limit=4000):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-limit:]
        except (OSError, TypeError):
            return ""

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
        if self._exited():
            raise RuntimeError(f"experiment {self.id} has ended ({self._final_status()}); its host "
                               f"exited with code {self.process.returncode}")
        return getattr(self._control, method)(*args)

    def _trial_job(self, t):
        final = t.get("final")
        params = t.get("parameters") or {}
        final_data = []
        if final is not None:
            final_data.append(TrialMetricData(timestamp=None, trialJobId=t["trial_id"],
                                              parameterId=t.get("parameter_id"), type="FINAL",
                                              sequence=None, data=final))
        log_path = stderr_path = ""
        if self._trial_root is not None and t.get("attempt") is not None:
            log_path = os.path.join(self._trial_root,
                                    f"{_safe_name(t['trial_id'])}-{t['attempt']}")
            stderr_path = os.path.join(log_path, "stderr.log")
        return TrialJob(
            trialJobId=t["trial_id"], status=t["status"],
            hyperParameters=[TrialHyperParameters(t.get("parameter_id"), t.get("source") or "",
                                                  params, 0)],
            logPath=log_path, startTime=_ms(t.get("start_time")), endTime=_ms(t.get("end_time")),
            finalMetricData=final_data, stderrPath=stderr_path, sequenceId=t["sequence_id"],
            parameters=params, final=final, source=t.get("source") or "",
            attempt=t.get("attempt") or 0, worker_id=t.get("worker_id") or "",
            intermediate_count=t.get("intermediate_count") or 0, error=t.get("error") or "")
