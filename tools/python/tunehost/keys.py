"""CurveZMQ keys for a client of a host that authenticates (``tunehost --keys DIR``).

A host started with ``--keys DIR`` makes its four sockets CURVE servers. Every
peer (worker, control client) is then a CURVE client: before ``connect()`` it
sets on each socket the host's public key and its own key pair. Keys are
ZeroMQ's Z85 text (40 characters) in the certificate files czmq, pyzmq's
``zmq.auth`` and ``tunectl keygen`` write:

- ``NAME.key``: ``public-key = "..."``; may be shared (the host's is the
  *server key* of its clients).
- ``NAME.key_secret``: ``public-key`` and ``secret-key``; readable by its owner
  only (mode 0600), as ssh wants of a private key.

Keys travel as file paths, never as text on a command line or in a log (the
host's public key in ``host.json`` is the exception: it is not a secret).
``$TUNEHOST_KEY`` (this peer's ``.key_secret``) and ``$TUNEHOST_SERVER_KEY``
(the host's ``.key``) are the defaults of the ``key_file`` / ``--key`` and
``server_key_file`` / ``--server-key`` options.

A CURVE handshake the host refuses (a key it does not know) is silent: the
client just gets no answer. Only the standard library is imported here;
pyzmq is needed to check a key pair and to apply keys to a socket.
"""

import dataclasses
import os
import stat

__all__ = ["ClientKeys", "KeyFileError", "ENV_KEY", "ENV_SERVER_KEY", "read_key_file", "load_keys",
           "resolve_keys", "server_key_from_host_info", "default_key_files", "apply", "is_z85_key",
           "untrusted_path"]

ENV_KEY = "TUNEHOST_KEY"
ENV_SERVER_KEY = "TUNEHOST_SERVER_KEY"

_Z85_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(_Z85_CHARS)}
_KEY_CHARS = 40
_MAX_KEY_FILE_BYTES = 64 * 1024

NEED_OWN_KEY = ("the host authenticates: give this client's key (a .key_secret file) with "
                f"key_file=FILE / --key FILE or ${ENV_KEY}")
NEED_SERVER_KEY = ("a client key needs the host's public key: give server_key_file=FILE / "
                   f"--server-key FILE or ${ENV_SERVER_KEY} (or find the host through a "
                   "host.json that has its server_key)")


class KeyFileError(ValueError):
    """A key file or key option that cannot be used (the message names the file)."""


@dataclasses.dataclass(frozen=True)
class ClientKeys:
    """One client's CURVE keys: its own pair and the host's public key, Z85 bytes.
    The secret key is left out of ``repr`` so it never reaches a log."""
    public: bytes
    secret: bytes = dataclasses.field(repr=False)
    server: bytes


def is_z85_key(text):
    """True for 40 characters of Z85 that decode to 32 bytes."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            return False
    if not isinstance(text, str) or len(text) != _KEY_CHARS:
        return False
    for start in range(0, _KEY_CHARS, 5):
        value = 0
        for c in text[start:start + 5]:
            digit = _Z85_VALUE.get(c)
            if digit is None:
                return False
            value = value * 85 + digit
        if value >= 1 << 32:
            return False
    return True


def _value_of(line, key):
    """The quoted value of ``key = "..."`` on a certificate line, else None."""
    stripped = line.strip()
    if not stripped.startswith(key):
        return None
    rest = stripped[len(key):].lstrip()
    if not rest.startswith("="):
        return None
    rest = rest[1:].strip()
    if len(rest) >= 2 and rest[0] == rest[-1] and rest[0] in "\"'":
        return rest[1:-1]
    return rest


def read_key_file(path, need_secret=False):
    """Reads a certificate file; returns ``(public, secret_or_None)`` as Z85 bytes.

    With ``need_secret`` (a peer's own key) a file without a secret key, with a
    public key that does not belong to its secret key, or that its group or
    others may read or write is refused. Every error is a :class:`KeyFileError`
    naming the file."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise KeyFileError(f"key file {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"key file {path} is not a certificate")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(_MAX_KEY_FILE_BYTES + 1)
    except OSError as e:
        raise KeyFileError(f"key file {path}: {e.strerror}") from None
    public = secret = None
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        value = _value_of(line, "public-key")
        if value is not None:
            public = value
        value = _value_of(line, "secret-key")
        if value is not None:
            secret = value
    if not is_z85_key(public):
        raise KeyFileError(f"key file {path} has no valid public-key (40 characters of Z85)")
    if secret is not None and not is_z85_key(secret):
        raise KeyFileError(f"key file {path} has an invalid secret-key")
    if need_secret:
        if secret is None:
            raise KeyFileError(f"key file {path} has no secret-key (give the .key_secret file, "
                               "not the public .key)")
        import zmq  # only here: reading a public key needs no pyzmq

        if zmq.curve_public(secret.encode("ascii")) != public.encode("ascii"):
            raise KeyFileError(f"key file {path}: its public-key does not belong to its secret-key")
        if st.st_mode & 0o077:
            raise KeyFileError(f"key file {path} has permissions {stat.S_IMODE(st.st_mode):04o}: a "
                               "secret key must be readable by its owner only (chmod 600)")
    return public.encode("ascii"), None if secret is None else secret.encode("ascii")


def default_key_files(key_file=None, server_key_file=None, environ=None):
    """``(key_file, server_key_file)`` with ``None`` replaced by ``$TUNEHOST_KEY``
    and ``$TUNEHOST_SERVER_KEY`` (an empty string means: none, whatever the
    environment says)."""
    environ = os.environ if environ is None else environ
    if key_file is None:
        key_file = environ.get(ENV_KEY) or None
    if server_key_file is None:
        server_key_file = environ.get(ENV_SERVER_KEY) or None
    return (os.fspath(key_file) if key_file else None,
            os.fspath(server_key_file) if server_key_file else None)


def server_key_from_host_info(info):
    """The host's public key from a host.json dict (``"server_key"``), as Z85
    bytes; ``None`` when the host does not authenticate. KeyFileError for a
    value that is not a key."""
    if not isinstance(info, dict):
        return None
    value = info.get("server_key")
    if value in (None, ""):
        return None
    if not is_z85_key(value):
        raise KeyFileError("host.json has a server_key that is not a CURVE public key")
    return value.encode("ascii") if isinstance(value, str) else bytes(value)


def load_keys(key_file, server_key_file, server_key=None):
    """This client's keys, from explicit arguments only (no environment).

    ``key_file``: its ``.key_secret`` (mode 0600); ``server_key_file``: the
    host's public ``.key``; ``server_key``: the host's public key as Z85 text
    (from host.json), used when there is no ``server_key_file``. Returns
    ``None`` when there is neither a key file nor a server key (no
    authentication), else a :class:`ClientKeys`. One without the other, or a
    file that cannot be used, raises :class:`KeyFileError`."""
    server = None
    if server_key_file:
        server, _ = read_key_file(server_key_file)
    elif server_key:
        if not is_z85_key(server_key):
            raise KeyFileError("the server key is not a CURVE public key (40 characters of Z85)")
        server = server_key.encode("ascii") if isinstance(server_key, str) else bytes(server_key)
    if server is None:
        if key_file:
            raise KeyFileError(NEED_SERVER_KEY)
        return None
    if not key_file:
        raise KeyFileError(NEED_OWN_KEY)
    public, secret = read_key_file(key_file, need_secret=True)
    return ClientKeys(public=public, secret=secret, server=server)


def resolve_keys(key_file=None, server_key_file=None, host_info=None, environ=None):
    """:func:`load_keys` with the defaults applied: ``None`` file arguments
    come from ``$TUNEHOST_KEY`` / ``$TUNEHOST_SERVER_KEY``, and a host.json
    dict (``host_info``) gives the server key when no server key file does.
    A key from ``$TUNEHOST_KEY`` is used only with a host that authenticates
    (one exported for a cluster's host does not get in the way of a local,
    keyless one)."""
    key_from_environment = key_file is None
    key_file, server_key_file = default_key_files(key_file, server_key_file, environ)
    server_key = None if server_key_file else server_key_from_host_info(host_info)
    if key_from_environment and not server_key_file and server_key is None:
        key_file = None
    return load_keys(key_file, server_key_file, server_key)


def untrusted_path(path):
    """Why ``path`` (a host.json, an experiment folder) cannot be trusted to say
    where to connect, or ``None``: as ssh checks its files, it must belong to
    this user (or root) and be writable by nobody else."""
    st = os.stat(path)
    if st.st_uid not in (os.geteuid(), 0):
        return f"{path} belongs to user id {st.st_uid}, not to you: refusing to trust it"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"{path} has permissions {stat.S_IMODE(st.st_mode):04o}: others may change it, "
                "so it cannot be trusted (chmod go-w)")
    return None


def apply(socket, keys):
    """Makes ``socket`` a CURVE client of the host (call before connect());
    nothing when ``keys`` is None."""
    if keys is None:
        return
    import zmq

    socket.setsockopt(zmq.CURVE_SERVERKEY, keys.server)
    socket.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
    socket.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
