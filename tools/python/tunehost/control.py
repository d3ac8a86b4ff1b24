"""A small client for the host's control socket (wire-format.md §4).

:class:`ControlClient` sends one request at a time on a ``DEALER`` socket and
waits for the reply with the same envelope id; replies to earlier requests
that arrive late (after a timeout) are recognised by their id and dropped.

- No reply within the timeout raises :class:`ControlTimeout`
  (``no answer from EP within N ms``). The socket is then replaced, so a
  request queued for a host that is not there is never delivered later.
- An ``error`` reply raises :class:`ControlError` carrying the wire ``code``
  (``not_found``, ``bad_state``, ``bad_field``, …) and the host's message.
- An ``ok`` reply returns its ``data``.

Requests are encoded by :mod:`tunehost.protocol`, which checks them first: a
body the host would refuse raises :class:`tunehost.protocol.ProtocolError`
(with the same code) and is not sent. Needs python3-zmq and python3-msgpack.
"""

import threading
import time

import zmq

from tunehost import protocol

__all__ = ["ControlClient", "ControlError", "ControlTimeout", "DEFAULT_TIMEOUT_MS"]

DEFAULT_TIMEOUT_MS = 10000

class ControlError(Exception):
    """The host answered ``error`` (or the reply was unusable). ``code`` is the
    wire error code, ``message`` the host's text, ``request`` the request type."""

    def __init__(self, code, message, request=None):
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.request = request

    def __str__(self):
        where = f"{self.request}: " if self.request else ""
        return f"{where}{self.code}: {self.message}"


class ControlTimeout(ControlError, TimeoutError):
    """No reply within the timeout (``code`` is ``"timeout"``)."""

    def __init__(self, endpoint, timeout_ms, request=None):
        ControlError.__init__(self, "timeout", f"no answer from {endpoint} within {timeout_ms} ms",
                              request)
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms


def encode_request(type_code, body=None, msg_id=0):
    """Encodes a control request (:func:`tunehost.protocol.encode`)."""
    return protocol.encode(type_code, body, msg_id)


class ControlClient:
    """Requests on a host's control endpoint. Thread-safe (one request at a time)."""

    def __init__(self, endpoint, timeout_ms=DEFAULT_TIMEOUT_MS):
        self.endpoint = endpoint
        self.timeout_ms = int(timeout_ms)
        self._ctx = zmq.Context()
        self._lock = threading.Lock()
        self._next_id = 1
        self._socket = None
        self._open()

    def _open(self):
        s = self._ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(self.endpoint)
        self._socket = s

    def close(self):
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None
                self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, type_code, body=None, timeout_ms=None):
        """Sends one request; returns the ``ok`` reply's ``data``. Raises
        ControlTimeout, ControlError, or protocol.ProtocolError for a body
        that cannot be encoded (nothing is sent then)."""
        timeout_ms = self.timeout_ms if timeout_ms is None else int(timeout_ms)
        with self._lock:
            if self._socket is None:
                raise ControlError("closed", "the control client is closed", type_code)
            msg_id = self._next_id
            self._next_id += 1
            frame = encode_request(type_code, body, msg_id)
            self._socket.send(frame)
            reply = self._await_reply(msg_id, type_code, timeout_ms)
        if reply.type == protocol.ERROR:
            raise ControlError(reply.body["code"], reply.body.get("message") or "", type_code)
        if reply.type != protocol.OK:
            raise ControlError(protocol.BAD_FRAME, f'unexpected reply type "{reply.type}"', type_code)
        data = reply.body.get("data")
        return {} if data is None else data

    def _await_reply(self, msg_id, type_code, timeout_ms):
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not self._socket.poll(left_ms):
                # Drop the socket: its queued request must not reach a host
                # that comes up later, and a late reply must not confuse us.
                self._socket.close()
                self._open()
                raise ControlTimeout(self.endpoint, timeout_ms, type_code)
            data = self._socket.recv()
            try:
                reply = protocol.decode(data)
            except protocol.ProtocolError as e:
                if e.msg_id not in (0, msg_id):
                    continue  # a broken late reply to an earlier request
                raise ControlError(e.code, f"undecodable reply: {e}", type_code) from None
            if reply.id == msg_id:
                return reply
            # A reply to an earlier request that timed out: ignore it.

    # ------------------------------------------------------------ requests

    def ping(self):
        return self.request("PI")

    def status(self):
        """ExperimentStatusInfo (``ST``)."""
        return self.request("ST")

    def list_trials(self, status=None, offset=0, limit=0):
        """``LT``: ``{"total": n, "trials": [TrialInfo…]}``."""
        return self.request("LT", {"status": status, "offset": offset, "limit": limit})

    def get_trial(self, trial_id):
        return self.request("GT", {"trial_id": trial_id})

    def job_statistics(self):
        return self.request("JS")

    def metrics(self, trial_id=None):
        return self.request("MT", {"trial_id": trial_id})

    def export(self):
        return self.request("EX")

    def update(self, concurrency=None, max_trials=None, max_duration_s=None):
        return self.request("UX", {"concurrency": concurrency, "max_trials": max_trials,
                                   "max_duration_s": max_duration_s})

    def kill_trial(self, trial_id):
        return self.request("KT", {"trial_id": trial_id})

    def update_search_space(self, search_space):
        return self.request("SS", {"search_space": search_space})

    def import_data(self, records):
        return self.request("FD", {"data": records})

    def add_trial(self, parameters):
        return self.request("AD", {"parameters": parameters})

    def terminate(self, timeout_ms=None):
        return self.request("TE", timeout_ms=timeout_ms)
