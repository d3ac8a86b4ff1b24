"""The control API's queries and changes of :class:`tunehost.experiment.Experiment`
(NNI's ``Experiment`` methods: ``get_status``, ``list_trial_jobs``,
``update_trial_concurrency``, ``import_data`` …), each one request on the
control socket (wire-format.md §4.2), with NNI's field names
(:mod:`tunehost.experiment_data`).
"""

import dataclasses
import json
import os
import re
import sqlite3
import time
import urllib.parse

from tunehost.experiment_data import TrialHyperParameters, TrialJob, TrialMetricData, TrialResult

__all__ = ["ExperimentQueries", "parse_duration"]


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


def _safe_name(text):
    # tunehost-worker's rule for directory names made of ids.
    out = re.sub(r"[^A-Za-z0-9._-]", "_", text)
    return "_" + out[1:] if out.startswith(".") else out



def _ms(seconds):
    return None if seconds is None else int(round(seconds * 1000))



class ExperimentQueries:
    """The queries and changes of an experiment. The class that uses it
    (:class:`tunehost.experiment.Experiment`) provides ``id``, ``workdir``,
    ``_request(method, *args)`` (one control request), ``_ended``,
    ``_exited()``, ``_final_status()`` and ``_trial_root``."""

    def get_status(self):
        """The experiment status: INITIALIZED RUNNING NO_MORE_TRIAL
        TUNER_NO_MORE_TRIAL DONE STOPPING STOPPED ERROR VIEWED. Once a host
        started here has exited, its final status (also while a view keeps
        the ended experiment queryable)."""
        if self._ended is not None:
            return self._ended
        if self._exited():
            return self._final_status()
        return self.get_experiment_profile()["status"]

    def get_experiment_profile(self):
        """tunehost's ExperimentStatusInfo (``ST``) as a dict: experiment_id,
        status, error, start_time, elapsed_s, concurrency, max_trials,
        max_duration_s, counts, best, optimize_mode, endpoints."""
        profile = self._request("status")
        if self._ended is not None:
            profile["status"] = self._ended  # not the view's VIEWED
        return profile

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
        times = self._metric_times() if records else {}
        out = {}
        for r in records:
            out.setdefault(r["trial_id"], []).append(TrialMetricData(
                timestamp=times.get((r["trial_id"], r["type"], r["sequence"])),
                trialJobId=r["trial_id"], parameterId=param_ids.get(r["trial_id"]),
                type=r["type"], sequence=r["sequence"], data=r["value"]))
        return out

    def _metric_times(self):
        """When the host accepted each metric, in ms since the epoch, from the
        experiment's store (``metrics.at``) when it is on this machine:
        ``{(trial_id, type, sequence): ms}``; empty without a readable store
        (``tunehost serve``, another machine)."""
        path = os.path.join(self.workdir, _safe_name(self.id), "store.db")
        if not os.path.exists(path):
            return {}
        try:
            db = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True, timeout=5)
            try:
                rows = db.execute("SELECT trial_id, type, sequence, at FROM metrics "
                                  "WHERE superseded = 0 ORDER BY attempt").fetchall()
            finally:
                db.close()
        except sqlite3.Error:
            return {}
        return {(t, kind, seq): _ms(at) for t, kind, seq, at in rows}

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
