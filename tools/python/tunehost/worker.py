"""The Python reference worker: protocol v1, wire-format.md §5.

A :class:`Worker` connects to a tunehost host, answers trial offers and runs
each accepted trial through a pluggable *runner*: a callable that gets a
:class:`TrialHandle` and returns when the trial is over. The function API
(``tunehost.function``) is one such runner; anything else (a subprocess, a
remote call) can be plugged in the same way.

Threads and socket ownership
----------------------------
ZeroMQ sockets are not thread-safe, so every socket has exactly one owner:

- **I/O thread** (``tunehost-io``) owns the results ``PUSH`` and the events
  ``SUB``. It sends every message the worker emits (``WH HB TS TJ ME EN WB``),
  so their order on the wire is the order they were posted; it reads ``KI``,
  ``MA`` (with spans, §5.2), ``HR`` and addressed offers (``TR`` on its own topic, §5.2, answered
  like those of the jobs thread); it keeps the heartbeat timer and the table of
  unacknowledged ``ME`` messages it resends every ``ack_timeout``.
- **jobs thread** (``tunehost-jobs``) owns the jobs ``PULL`` (``ZMQ_RCVHWM``
  1) and does nothing else, so every ``TR`` is answered at once no matter what
  trials do (§5.3.3). It decides ``TS``/``TJ`` from the slot count, posts the
  answer to the I/O thread and, for ``TS``, starts the trial's runner thread.
- **runner threads** (``tunehost-trial-<id>``), one per trial, call the runner.
  A report posts the ``ME`` to the I/O thread and blocks on a
  ``threading.Event`` until the matching ``MA`` (or a ``KI``) arrives.

Other threads reach the I/O thread only through a ``queue.SimpleQueue`` of
commands plus a self-pipe whose read end is in the I/O thread's ``zmq.Poller``
(so a post wakes it immediately). A second pipe, written once by
:meth:`Worker.stop`, wakes both socket-owning threads for shutdown. Trial
state shared between threads is guarded by one ``threading.Lock``.

A trial holds its slot from the moment it is accepted until its ``EN`` has
been sent; it is listed in ``running`` (``WH``/``HB``) from its ``TS`` until
its ``EN``, both decided on the I/O thread, so no heartbeat can leave out a
trial that has not ended.

Authentication
--------------
For a host started with ``--keys DIR``, ``key_file`` (this worker's
``.key_secret``, default ``$TUNEHOST_KEY``) and ``server_key_file`` (the
host's public ``.key``, default ``$TUNEHOST_SERVER_KEY``) make all three
sockets CURVE clients (:mod:`tunehost.keys`). They are read when the Worker is
made, so a bad key fails there. A host that does not know the key never
answers: the worker then just hears nothing.
"""

import logging
import os
import queue
import secrets
import socket
import threading
import time
import traceback

import zmq

from tunehost import __version__, protocol
from tunehost import keys as _keys
from tunehost.worker_io import BROADCAST_TOPIC, IoLoop

log = logging.getLogger("tunehost.worker")

DEFAULT_JOBS = "tcp://127.0.0.1:5651"
DEFAULT_RESULTS = "tcp://127.0.0.1:5652"
DEFAULT_EVENTS = "tcp://127.0.0.1:5653"

PERIODICAL = "PERIODICAL"
FINAL = "FINAL"

SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
USER_CANCELED = "USER_CANCELED"
SYS_CANCELED = "SYS_CANCELED"
EARLY_STOPPED = "EARLY_STOPPED"
TERMINAL_STATUSES = (SUCCEEDED, FAILED, USER_CANCELED, SYS_CANCELED, EARLY_STOPPED)

REJECT_NO_SLOT = "no free slot"
REJECT_SHUTTING_DOWN = "worker shutting down"

# Stop reason of trials the worker itself stops on shutdown. Like tunehost-worker,
# it sends no EN for them, only WB: they did not end, and the host offers them
# again (wire-format.md §5.3 item 8).
STOP_SHUTDOWN = "worker_shutdown"


class TrialStopped(Exception):
    """Raised by a report call once the trial has been stopped.

    The host stopped the trial (``KI``) or the worker is shutting down. Like
    Ray Tune's ``StopIteration``, it lets the trial function end cleanly: let
    it propagate (or return). The trial then ends ``USER_CANCELED``, or
    ``EARLY_STOPPED`` when the host's reason was ``assessor``.
    """


def where_am_i(environ=None):
    """What tunehost-worker reports as ``resources.extra``: the host name and,
    under Slurm or a Kubernetes Indexed Job, the job (for ``tunectl workers``)."""
    env = os.environ if environ is None else environ
    extra = {"host": socket.gethostname()}
    array_job, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        extra["slurm_job"] = f"{array_job}_{task}"[:128]
    elif env.get("SLURM_JOB_ID"):
        extra["slurm_job"] = env["SLURM_JOB_ID"][:128]
    if env.get("JOB_COMPLETION_INDEX"):
        extra["k8s_pod"] = env.get("HOSTNAME", "")[:128]
        extra["k8s_index"] = env["JOB_COMPLETION_INDEX"][:128]
    return extra


def default_worker_id():
    """``<hostname>-<pid>-<random>``, unique per process (wire-format §5.1)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def check_metric(value):
    """Raises TypeError unless ``value`` is a Metric (wire-format §5.1).

    A Metric is a number, or a map with string keys and a numeric ``default``.
    Checked before sending because the host drops a bad ``ME`` without an ``MA``.
    """

    def is_number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if is_number(value):
        return
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("metric map keys must be strings")
        if "default" not in value:
            raise TypeError('metric map needs a numeric "default" key')
        if not is_number(value["default"]):
            raise TypeError(f'metric "default" must be a number, got {type(value["default"]).__name__}')
        return
    raise TypeError(f'a metric is a number or a map with a numeric "default", got {type(value).__name__}')


class TrialHandle:
    """One accepted trial attempt, as its runner sees it.

    Read-only attributes: ``job`` (the ``TR`` body), ``experiment_id``,
    ``trial_id``, ``sequence_id``, ``attempt``, ``parameter_id``,
    ``parameter_source``, ``parameters``, ``worker_id``.
    """

    def __init__(self, worker, job):
        self._worker = worker
        self.job = job
        self.experiment_id = job.get("experiment_id")
        self.trial_id = job.get("trial_id")
        self.sequence_id = job.get("sequence_id")
        self.attempt = job.get("attempt")
        self.parameter_id = job.get("parameter_id")
        self.parameter_source = job.get("parameter_source")
        parameters = job.get("parameters")
        self.parameters = parameters if isinstance(parameters, dict) else {}
        self.worker_id = worker.worker_id
        # Guarded by the worker's lock.
        self._last_sequence = -1
        self._final_sent = False
        self._stop_reason = None
        self._pending = set()
        # Touched by the I/O thread only.
        self._announced = False

    @property
    def key(self):
        return (self.trial_id, self.attempt)

    @property
    def last_sequence(self):
        """Sequence of the last PERIODICAL sent, -1 if none."""
        with self._worker._lock:
            return self._last_sequence

    @property
    def final_sent(self):
        with self._worker._lock:
            return self._final_sent

    @property
    def stop_reason(self):
        """``None`` while the trial may run; else the ``KI`` reason (or ``worker_shutdown``)."""
        with self._worker._lock:
            return self._stop_reason

    @property
    def stopped(self):
        return self.stop_reason is not None

    def report(self, kind, value):
        """Sends one result and blocks until the host acknowledged it.

        ``kind`` is ``"PERIODICAL"`` or ``"FINAL"``; ``value`` a Metric.
        Returns the result's sequence. Raises :class:`TrialStopped` if the
        trial was stopped before or while waiting, ``TypeError`` for a bad
        value and ``RuntimeError`` for a result after the FINAL.
        """
        return self._worker._report(self, kind, value)


class _Pending:
    """One ``ME`` awaiting its ``MA``."""

    __slots__ = ("handle", "sequence", "body", "done", "delivered")

    def __init__(self, handle, sequence, body):
        self.handle = handle
        self.sequence = sequence
        self.body = body
        self.done = threading.Event()
        self.delivered = False

    @property
    def key(self):
        return (self.handle.trial_id, self.handle.attempt, self.sequence)


class Worker:
    """A protocol-v1 worker.

    ``runner(handle)`` runs one trial on the trial's own thread and returns
    when it is over. Its outcome becomes the ``EN``: returning ``None`` means
    ``SUCCEEDED``, returning ``(status, error)`` reports that status, raising
    means ``FAILED`` with the traceback as error. A stopped trial (``KI``)
    ends ``USER_CANCELED`` (``EARLY_STOPPED`` for reason ``assessor``)
    whatever the runner does.

    Use :meth:`start` / :meth:`stop` (or the context manager), or :meth:`run`
    to block until :meth:`request_stop` or a signal.

    ``key_file`` / ``server_key_file``: this worker's ``.key_secret`` (mode
    0600) and the host's public ``.key`` for a host that authenticates
    (``None``: ``$TUNEHOST_KEY`` / ``$TUNEHOST_SERVER_KEY``; ``""``: none).
    Both or neither; :class:`tunehost.keys.KeyFileError` otherwise, or for a
    key file that cannot be used.

    ``max_result_bytes``: the host's limit for a message on its results
    socket (its ``--max-result-bytes``); reporting a larger result raises
    ``ValueError`` (the host would drop it, and the worker resend it for ever).
    """

    def __init__(self, runner, slots=1, worker_id=None, jobs=DEFAULT_JOBS, results=DEFAULT_RESULTS,
                 events=DEFAULT_EVENTS, gpus=0, extra=None, heartbeat_interval=1.0, ack_timeout=1.0,
                 max_message_bytes=1 << 20, stop_grace=5.0, language="python", version=__version__,
                 key_file=None, server_key_file=None,
                 max_result_bytes=protocol.DEFAULT_MAX_RESULT_BYTES):
        if not callable(runner):
            raise TypeError("runner must be callable")
        if int(slots) < 1:
            raise ValueError("slots must be at least 1")
        if heartbeat_interval <= 0 or ack_timeout <= 0:
            raise ValueError("heartbeat_interval and ack_timeout must be positive")
        self.runner = runner
        self.slots = int(slots)
        self.worker_id = worker_id or default_worker_id()
        self.jobs_endpoint = jobs
        self.results_endpoint = results
        self.events_endpoint = events
        self.resources = {"gpus": int(gpus),
                          "extra": dict(extra) if extra is not None else where_am_i()}
        self.heartbeat_interval = float(heartbeat_interval)
        self.ack_timeout = float(ack_timeout)
        self.max_message_bytes = int(max_message_bytes)
        self.max_result_bytes = int(max_result_bytes)
        self.stop_grace = float(stop_grace)
        self.language = language
        self.version = version
        self._topic = f"worker.{self.worker_id}.".encode()
        self.keys = _keys.load_keys(*_keys.default_key_files(key_file, server_key_file))

        self._lock = threading.Lock()
        self._trials = {}  # (trial_id, attempt) -> TrialHandle; guarded by _lock
        self._runner_threads = {}  # key -> Thread; guarded by _lock
        self._stopping = False
        self._closed = False
        self._commands = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        self._stop_r, self._stop_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        self._hello_sent = threading.Event()
        self._jobs_ready = threading.Event()
        self._jobs_error = None
        self._stop_requested = threading.Event()
        self._stopped = threading.Event()
        self._io_error = None
        self._ctx = None
        self._io_thread = None
        self._jobs_thread = None
        self._started = False

    # ----- lifecycle -----

    def start(self):
        """Connects, sends ``WH`` and starts serving offers. Returns once ``WH`` is sent."""
        if self._started:
            raise RuntimeError("worker already started")
        self._started = True
        self._ctx = zmq.Context()
        # The jobs PULL connects first, so the host's first offer after WH finds it.
        self._jobs_thread = threading.Thread(target=self._jobs_main, name="tunehost-jobs", daemon=True)
        self._jobs_thread.start()
        self._jobs_ready.wait()
        if self._jobs_error is None:
            self._io_thread = threading.Thread(target=self._io_main, name="tunehost-io", daemon=True)
            self._io_thread.start()
            self._hello_sent.wait()
        error = self._jobs_error or self._io_error
        if error is not None:
            os.write(self._stop_w, b"x")
            for thread in (self._jobs_thread, self._io_thread):
                if thread is not None:
                    thread.join()
            with self._lock:
                self._closed = True
                for fd in (self._wake_r, self._wake_w, self._stop_r, self._stop_w):
                    os.close(fd)
            self._ctx.term()
            self._stopped.set()
            raise error
        log.info("worker %s started: %d slot(s), jobs %s, results %s, events %s%s", self.worker_id,
                 self.slots, self.jobs_endpoint, self.results_endpoint, self.events_endpoint,
                 ", CURVE keys" if self.keys is not None else "")
        return self

    def request_stop(self):
        """Asks :meth:`run` to return; safe from signal handlers and any thread."""
        self._stop_requested.set()

    def run(self):
        """Starts (if needed) and blocks until :meth:`request_stop`, then stops."""
        if not self._started:
            self.start()
        try:
            while not self._stop_requested.wait(0.5):
                pass
        finally:
            self.stop()

    def stop(self, grace=None):
        """Stops the worker: new offers get ``TJ``, running trials are stopped
        (their next report raises :class:`TrialStopped`) and given ``grace``
        seconds (default ``stop_grace``) to return, then ``WB``. No ``EN`` is
        sent for them: they did not end, and the host offers them again
        (wire-format.md §5.3 item 8). Idempotent."""
        if not self._started:
            return
        grace = self.stop_grace if grace is None else float(grace)
        with self._lock:
            if self._closed or self._stopping:
                first = False
            else:
                first = self._stopping = True
        if not first:
            self._stopped.wait()
            return
        with self._lock:
            for handle in self._trials.values():
                self._stop_trial_locked(handle, STOP_SHUTDOWN)
            threads = list(self._runner_threads.values())
        deadline = time.monotonic() + grace
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        # Wait for the I/O thread to send the EN of every trial that ended.
        while time.monotonic() < deadline:
            with self._lock:
                if not any(not t.is_alive() for t in self._runner_threads.values()):
                    break
            time.sleep(0.01)
        os.write(self._stop_w, b"x")
        self._jobs_thread.join()
        self._io_thread.join()
        with self._lock:
            self._closed = True
            abandoned = [h.trial_id for h in self._trials.values()]
            for fd in (self._wake_r, self._wake_w, self._stop_r, self._stop_w):
                os.close(fd)
        if abandoned:
            log.warning("abandoned trials still running at shutdown: %s", ", ".join(abandoned))
        self._ctx.term()
        self._stopped.set()
        log.info("worker %s stopped", self.worker_id)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ----- state shared with runner threads -----

    def running_trials(self):
        """The trials a WH/HB lists now: announced (TS sent) and not ended."""
        with self._lock:
            return [{"trial_id": h.trial_id, "attempt": h.attempt, "last_sequence": h._last_sequence}
                    for h in self._trials.values() if h._announced]

    def _stop_trial_locked(self, handle, reason):
        if handle._stop_reason is not None:
            return False
        handle._stop_reason = reason
        for pending in handle._pending:
            pending.done.set()
        handle._pending.clear()
        return True

    def _post(self, command):
        with self._lock:
            if self._closed:
                return
            self._commands.put(command)
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass  # the pipe is full, so the I/O thread will wake anyway

    def _report(self, handle, kind, value):
        if kind not in (PERIODICAL, FINAL):
            raise ValueError(f'result type must be "PERIODICAL" or "FINAL", got {kind!r}')
        check_metric(value)
        try:
            protocol.metric_scalar(value)
        except (protocol.ProtocolError, TypeError, ValueError) as e:
            raise TypeError(f"bad metric value: {e}") from None
        if isinstance(value, dict):
            value = dict(value)  # the caller may reuse its dict; resends must not change
        body = {"trial_id": handle.trial_id, "attempt": handle.attempt,
                "parameter_id": handle.parameter_id, "type": kind, "sequence": 0,
                "value": value, "worker_id": self.worker_id}
        # Encoded once here so a value MessagePack cannot hold fails in the
        # caller, not later on the I/O thread.
        try:
            size = len(protocol.encode("ME", body))
        except protocol.ProtocolError as e:
            raise TypeError(f"metric value cannot be sent: {e}") from None
        # Room for the sequence and envelope id, written later and larger.
        if size + 16 > self.max_result_bytes:
            raise ValueError(f"result of {size} bytes is over the host's results limit of "
                             f"{self.max_result_bytes} bytes (the host's --max-result-bytes "
                             f"or maxResultBytes, and this worker's max_result_bytes)")
        with self._lock:
            if handle._stop_reason is not None:
                raise TrialStopped(f"trial {handle.trial_id} was stopped ({handle._stop_reason})")
            if handle._final_sent:
                raise RuntimeError(f"trial {handle.trial_id} already reported its FINAL result")
            sequence = handle._last_sequence + 1
            if kind == PERIODICAL:
                handle._last_sequence = sequence
            else:
                handle._final_sent = True
            body["sequence"] = sequence
            pending = _Pending(handle, sequence, body)
            handle._pending.add(pending)
        self._post(("metric", pending))
        pending.done.wait()
        if pending.delivered:
            return sequence
        raise TrialStopped(f"trial {handle.trial_id} was stopped ({handle.stop_reason})")

    # ----- jobs thread -----

    def _jobs_main(self):
        pull = self._ctx.socket(zmq.PULL)
        try:
            pull.setsockopt(zmq.RCVHWM, 1)
            pull.setsockopt(zmq.LINGER, 0)
            pull.setsockopt(zmq.MAXMSGSIZE, 64 * self.max_message_bytes)
            _keys.apply(pull, self.keys)
            pull.connect(self.jobs_endpoint)
        except Exception as e:
            self._jobs_error = e
            pull.close(0)
            self._jobs_ready.set()
            return
        self._jobs_ready.set()
        try:
            # Offers are answered only after WH (set even if the I/O thread failed).
            self._hello_sent.wait()
            poller = zmq.Poller()
            poller.register(pull, zmq.POLLIN)
            poller.register(self._stop_r, zmq.POLLIN)
            while True:
                ready = dict(poller.poll())
                if self._stop_r in ready:
                    return
                if pull in ready:
                    try:
                        data = pull.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        continue
                    self._on_job(data)
        except Exception:
            log.exception("jobs thread failed")
        finally:
            pull.close(0)

    def _on_job(self, data):
        try:
            msg = protocol.decode(data, self.max_message_bytes)
        except protocol.ProtocolError as e:
            log.warning("dropped undecodable message on jobs (%d bytes): %s", len(data), e)
            return
        if msg.type != "TR":
            log.warning("dropped unexpected message type %r on jobs", msg.type)
            return
        self._on_offer(msg.body)

    def _on_offer(self, job):
        """Answers one offer at once (wire-format.md §5.3 item 3). Offers come
        from the jobs socket (jobs thread) or, addressed to this worker, from
        its events topic (I/O thread, §5.2)."""
        trial_id, attempt = job.get("trial_id"), job.get("attempt")
        if not isinstance(trial_id, str) or not isinstance(attempt, int):
            log.warning("dropped TR without a valid trial_id/attempt")
            return
        # TS and TJ echo the offer's lease (wire-format.md §5.3 item 3).
        reply = {"worker_id": self.worker_id, "trial_id": trial_id, "attempt": attempt,
                 "lease": job.get("lease")}
        key = (trial_id, attempt)
        start = None
        with self._lock:
            if key in self._trials:
                # The host lost our TS; answer again without running the trial twice.
                log.info("repeated offer for running trial %s attempt %d: TS again", trial_id, attempt)
                self._post_locked(("send", "TS", reply))
                return
            if self._stopping:
                reason = REJECT_SHUTTING_DOWN
            elif len(self._trials) >= self.slots:
                reason = REJECT_NO_SLOT
            else:
                reason = None
                start = TrialHandle(self, job)
                self._trials[key] = start
                thread = threading.Thread(target=self._run_trial, args=(start,),
                                          name=f"tunehost-trial-{trial_id}", daemon=True)
                self._runner_threads[key] = thread
                self._post_locked(("started", start))
                # Started under the lock so stop() never sees an unstarted thread.
                thread.start()
        if start is None:
            log.info("rejected trial %s attempt %d: %s", trial_id, attempt, reason)
            self._post(("send", "TJ", dict(reply, reason=reason)))
            return
        log.info("accepted trial %s attempt %d", trial_id, attempt)

    def _post_locked(self, command):
        self._commands.put(command)
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass

    # ----- runner threads -----

    def _run_trial(self, handle):
        status, error = SUCCEEDED, ""
        try:
            outcome = self.runner(handle)
            if outcome is not None:
                status, error = outcome
                if status not in TERMINAL_STATUSES:
                    raise ValueError(f"runner returned unknown status {status!r}")
                error = "" if error is None else str(error)
        except TrialStopped:
            pass
        except BaseException:
            status, error = FAILED, traceback.format_exc()
        reason = handle.stop_reason
        if reason == STOP_SHUTDOWN:
            log.info("trial %s attempt %d left to the host to offer again", handle.trial_id,
                     handle.attempt)
            self._post(("end", handle, None, None))
            return
        if reason is not None:
            status = EARLY_STOPPED if reason == "assessor" else USER_CANCELED
            error = ""
        log.info("trial %s attempt %d ended: %s", handle.trial_id, handle.attempt, status)
        self._post(("end", handle, status, error))

    # ----- I/O thread -----

    def _io_main(self):
        push = sub = None
        try:
            push = self._ctx.socket(zmq.PUSH)
            push.setsockopt(zmq.LINGER, 2000)
            _keys.apply(push, self.keys)
            push.connect(self.results_endpoint)
            sub = self._ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.MAXMSGSIZE, 64 * self.max_message_bytes)
            sub.setsockopt(zmq.SUBSCRIBE, self._topic)
            sub.setsockopt(zmq.SUBSCRIBE, BROADCAST_TOPIC)
            _keys.apply(sub, self.keys)
            sub.connect(self.events_endpoint)
        except Exception as e:
            self._io_error = e
            for s in (push, sub):
                if s is not None:
                    s.close(0)
            self._hello_sent.set()
            return
        io = IoLoop(self, push, sub)
        try:
            io.send_hello()
            self._hello_sent.set()
            io.loop()
        except Exception:
            log.exception("I/O thread failed")
        finally:
            self._hello_sent.set()
            push.close()
            sub.close(0)


if __name__ == "__main__":
    # `python3 -m tunehost.worker` runs the function-API worker, which is
    # `python3 -m tunehost` (tunehost/__main__.py). Run through runpy so this
    # module imports nothing above it (the runner imports the worker, never
    # the other way), and the classes in use are tunehost.worker's, not
    # copies defined in __main__.
    import runpy

    runpy.run_module("tunehost", run_name="__main__", alter_sys=True)
