"""A small client for the host's control socket (wire-format.md §4).

:class:`ControlClient` sends one request at a time on a ``DEALER`` socket and
waits for the reply with the same envelope id; replies to earlier requests
that arrive late (after a timeout) are recognised by their id and dropped.

- No reply within the timeout raises :class:`ControlTimeout`
  (``no answer from EP within N ms (hint)``). The socket is then replaced, so a
  request queued for a host that is not there is never delivered later.
- An ``error`` reply raises :class:`ControlError` carrying the wire ``code``
  (``not_found``, ``bad_state``, ``bad_field``, ``forbidden`` for a request
  this client's key may not make, …) and the host's message.
- An ``ok`` reply returns its ``data``.

Requests are encoded by :mod:`tunehost.protocol`, which checks them first: a
body the host would refuse raises :class:`tunehost.protocol.ProtocolError`
(with the same code) and is not sent. Needs python3-zmq and python3-msgpack.

A host started with ``--keys DIR`` wants CURVE keys (:mod:`tunehost.keys`):
``key_file`` (this client's ``.key_secret``, default ``$TUNEHOST_KEY``) and
``server_key_file`` (the host's public ``.key``, default
``$TUNEHOST_SERVER_KEY``) or ``server_key`` (the host's Z85 public key, as
host.json gives it). A host that does not know the key never answers, so a
timeout with keys says so.
"""

import threading
import time

import zmq

from tunehost import keys as _keys
from tunehost import protocol

__all__ = ["ControlClient", "ControlError", "ControlTimeout", "DEFAULT_TIMEOUT_MS", "FORBIDDEN",
           "KeyFileError"]

FORBIDDEN = protocol.FORBIDDEN
KeyFileError = _keys.KeyFileError

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


KEY_HINT = "does the host know this client's key, and is the server key the host's?"
NO_KEY_HINT = ("is the host running? If it wants a key, give key_file and server_key_file, or "
               "$TUNEHOST_KEY and $TUNEHOST_SERVER_KEY")


class ControlTimeout(ControlError, TimeoutError):
    """No reply within the timeout (``code`` is ``"timeout"``). The message
    ends with a hint: with keys, whether the host knows this client's key (a
    refused CURVE handshake looks like silence); without, whether the host
    wants one."""

    def __init__(self, endpoint, timeout_ms, request=None, with_keys=False):
        message = (f"no answer from {endpoint} within {timeout_ms} ms "
                   f"({KEY_HINT if with_keys else NO_KEY_HINT})")
        ControlError.__init__(self, "timeout", message, request)
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms
        self.with_keys = with_keys


def encode_request(type_code, body=None, msg_id=0):
    """Encodes a control request (:func:`tunehost.protocol.encode`)."""
    return protocol.encode(type_code, body, msg_id)


class ControlClient:
    """Requests on a host's control endpoint. Thread-safe (one request at a time).

    ``key_file`` / ``server_key_file`` (``None``: ``$TUNEHOST_KEY`` /
    ``$TUNEHOST_SERVER_KEY``; ``""``: none) and ``server_key`` (the host's Z85
    public key, used without a server key file) make it a CURVE client; a
    key that cannot be used raises :class:`tunehost.keys.KeyFileError` here."""

    def __init__(self, endpoint, timeout_ms=DEFAULT_TIMEOUT_MS, *, key_file=None,
                 server_key_file=None, server_key=None):
        self.endpoint = endpoint
        self.timeout_ms = int(timeout_ms)
        key_file, server_key_file = _keys.default_key_files(key_file, server_key_file)
        self.keys = _keys.load_keys(key_file, server_key_file,
                                    None if server_key_file else server_key)
        self._ctx = zmq.Context()
        self._lock = threading.Lock()
        self._next_id = 1
        self._socket = None
        self._open()

    def _open(self):
        s = self._ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        _keys.apply(s, self.keys)
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
                raise ControlTimeout(self.endpoint, timeout_ms, type_code, self.keys is not None)
            data = self._socket.recv()
            try:
                reply = protocol.decode(data, protocol.MAX_REPLY_BYTES)
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
