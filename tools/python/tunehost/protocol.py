"""Protocol v1 codec: the Python twin of the C++ codec (protocol/src/codec*.cc).

The wire contract is protocol/docs/wire-format.md. ``encode`` writes the
canonical form (envelope and body keys in the documented order, every key
written, absent optional values as nil, floats as float64), so it is
byte-identical to the C++ encoder and to protocol/vectors/. ``decode`` applies
the same checks as the C++ decoder (§3.1) and raises :class:`ProtocolError`
with the wire error code and the dotted name of the offending field.

Decoded bodies are plain dicts holding every schema key in wire order; a key
that was missing or nil on the wire is ``None``; unknown keys are dropped.
Values typed ``map``/``any`` (search spaces, parameters, class arguments,
metrics, ``ok`` data) are the MessagePack values as Python objects.

Only the standard library and msgpack are used.
"""

import collections

import msgpack

PROTOCOL_VERSION = 1
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
# The host's default limit for a message on its results socket (§1.1).
DEFAULT_MAX_RESULT_BYTES = 128 << 10
# A control reply as a client reads it (wire-format.md §4.1): LT, MT and EX of
# a large experiment are far above the request limit.
MAX_REPLY_BYTES = 1 << 30
# Bounds on what arrives from outside (wire-format.md §3.2), the same as
# protocol/include/tunehost/protocol/limits.h.
MAX_DEPTH = 32              # containers nested in one message
MAX_ID_BYTES = 256          # identifiers: ids, names, codes
MAX_TEXT_BYTES = 64 * 1024  # free text: error, reason, message, language, version
MAX_PARAMETERS = 1024       # keys of a parameters map or a search space
MAX_REQUEST_COUNT = 1024    # GE count
MAX_SLOTS = 1024            # WH slots, HB free_slots, gpus
MAX_RUNNING = MAX_SLOTS     # WH/HB running list
MAX_CONCURRENCY = 100000    # IN/UX concurrency
MAX_IMPORT_RECORDS = 100000  # FD data
MAX_MEMORY_LIMIT_MB = 1 << 20  # PluginSpec memory_limit_mb
MAX_PLUGIN_TIMEOUT_S = 86400.0  # ExperimentSpec plugin_timeout_s

# ---------------------------------------------------------------- constants

# Control requests (client -> host).
INITIALIZE = "IN"
REQUEST_TRIAL_JOBS = "GE"
UPDATE_SEARCH_SPACE = "SS"
IMPORT_DATA = "FD"
ADD_CUSTOMIZED_TRIAL_JOB = "AD"
TERMINATE = "TE"
PING = "PI"
# Control API (wire-format.md §4.2): queries and changes of a running experiment.
GET_STATUS = "ST"
LIST_TRIALS = "LT"
GET_TRIAL = "GT"
GET_STATISTICS = "JS"
LIST_WORKERS = "LW"
GET_METRICS = "MT"
EXPORT_DATA = "EX"
UPDATE_LIMITS = "UX"
KILL_TRIAL = "KT"
# Worker -> host (ME and EN also on control).
REPORT_METRIC_DATA = "ME"
TRIAL_END = "EN"
WORKER_HELLO = "WH"
HEARTBEAT = "HB"
TRIAL_STARTED = "TS"
TRIAL_REJECTED = "TJ"
WORKER_BYE = "WB"
# Host -> worker / watchers.
NEW_TRIAL_JOB = "TR"
SEND_TRIAL_JOB_PARAMETER = "SP"
KILL_TRIAL_JOB = "KI"
METRIC_ACK = "MA"
HELLO_REQUEST = "HR"
INITIALIZED = "ID"
NO_MORE_TRIAL_JOBS = "NO"
ERROR_EVENT = "ER"
# Control replies.
OK = "ok"
ERROR = "error"

# Metric types.
PERIODICAL = "PERIODICAL"
FINAL = "FINAL"
METRIC_TYPES = (PERIODICAL, FINAL)

# Terminal trial statuses.
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
USER_CANCELED = "USER_CANCELED"
SYS_CANCELED = "SYS_CANCELED"
EARLY_STOPPED = "EARLY_STOPPED"
TERMINAL_STATUSES = (SUCCEEDED, FAILED, USER_CANCELED, SYS_CANCELED, EARLY_STOPPED)
# Trial statuses of the control API (NNI's trialJobStatus).
CONTROL_TRIAL_STATUSES = ("WAITING", "RUNNING") + TERMINAL_STATUSES

# Parameter sources of a trial.
SOURCE_ALGORITHM = "algorithm"
SOURCE_CUSTOMIZED = "customized"
SOURCE_RESUMED = "resumed"
SOURCE_EXTERNAL = "external"
PARAMETER_SOURCES = (SOURCE_ALGORITHM, SOURCE_CUSTOMIZED, SOURCE_RESUMED, SOURCE_EXTERNAL)

# Wire error codes (§4.1).
BAD_FRAME = "bad_frame"
UNSUPPORTED_VERSION = "unsupported_version"
UNKNOWN_TYPE = "unknown_type"
MISSING_FIELD = "missing_field"
BAD_FIELD = "bad_field"
TOO_LARGE = "too_large"
NOT_FOUND = "not_found"
BAD_STATE = "bad_state"
PLUGIN_ERROR = "plugin_error"
UNAVAILABLE = "unavailable"
FORBIDDEN = "forbidden"
INTERNAL = "internal"
ERROR_CODES = (BAD_FRAME, UNSUPPORTED_VERSION, UNKNOWN_TYPE, MISSING_FIELD, BAD_FIELD,
               TOO_LARGE, NOT_FOUND, BAD_STATE, PLUGIN_ERROR, UNAVAILABLE, FORBIDDEN, INTERNAL)

_UINT32_MAX = (1 << 32) - 1
_UINT64_MAX = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class ProtocolError(Exception):
    """Bad input. ``code`` is the wire error code; ``field`` the dotted field
    name (e.g. ``body.running[0].attempt``) for missing_field/bad_field, else None."""

    def __init__(self, code, message, field=None):
        super().__init__(message)
        self.code = code
        self.field = field
        # Set by decode: the envelope id when it could be read, else 0.
        self.msg_id = 0

    def __str__(self):
        return f"{self.code}: {self.args[0]}"


Message = collections.namedtuple("Message", ["v", "type", "id", "body"])

# ---------------------------------------------------------------- schema
#
# A field is (key, kind, required, arg). Kinds:
#   str (an identifier, at most MAX_ID_BYTES), text (at most MAX_TEXT_BYTES),
#   uint32, uint64 (arg: an upper bound, or None), int64, float,
#   map (arg: at most that many keys, or None), any, metric, id,
#   enum (arg: allowed strings), struct (arg: nested field list),
#   array (arg: (nested field list of each element, most items)).
# Field lists are in wire order; "required" mirrors the C++ decoder (a nil
# value counts as missing). Optional fields decode to None when absent.

Field = collections.namedtuple("Field", ["key", "kind", "required", "arg"])


def _f(key, kind, required=True, arg=None):
    return Field(key, kind, required, arg)


PLUGIN_ISOLATIONS = ("in-process", "process")
PLUGIN_SPEC = (
    _f("name", "str"),
    _f("args", "map", False),
    _f("isolation", "enum", False, PLUGIN_ISOLATIONS),
    _f("memory_limit_mb", "uint64", False, MAX_MEMORY_LIMIT_MB),
)
EXPERIMENT_SPEC = (
    _f("id", "str", False),
    _f("tuner", "struct", True, PLUGIN_SPEC),
    _f("assessor", "struct", False, PLUGIN_SPEC),
    _f("concurrency", "uint32", False, MAX_CONCURRENCY),
    _f("max_trials", "uint64", False),
    _f("max_duration_s", "float", False),
    _f("plugin_timeout_s", "float", False),
)
IMPORT_RECORD = (
    _f("parameters", "map", True, MAX_PARAMETERS),
    _f("value", "metric"),
    _f("trial_id", "str", False),
)
RESOURCES = (
    _f("gpus", "uint32", False, MAX_SLOTS),
    _f("extra", "map", False),
)
RUNNING_TRIAL = (
    _f("trial_id", "str"),
    _f("attempt", "uint32"),
    _f("last_sequence", "int64", False),
)
NEW_TRIAL_JOB_BODY = (
    _f("experiment_id", "str", False),
    _f("trial_id", "str"),
    _f("sequence_id", "uint64", False),
    _f("attempt", "uint32"),
    _f("parameter_id", "id", False),
    _f("parameter_source", "enum", True, PARAMETER_SOURCES),
    _f("parameter_index", "uint32", False),
    _f("parameters", "map", True, MAX_PARAMETERS),
    _f("lease", "uint64", False),
)

SCHEMA = collections.OrderedDict([
    (INITIALIZE, (
        _f("search_space", "map", True, MAX_PARAMETERS),
        _f("experiment", "struct", False, EXPERIMENT_SPEC),
    )),
    (REQUEST_TRIAL_JOBS, (_f("count", "uint32", True, MAX_REQUEST_COUNT),)),
    (UPDATE_SEARCH_SPACE, (_f("search_space", "map", True, MAX_PARAMETERS),)),
    (IMPORT_DATA, (_f("data", "array", True, (IMPORT_RECORD, MAX_IMPORT_RECORDS)),)),
    (ADD_CUSTOMIZED_TRIAL_JOB, (_f("parameters", "map", True, MAX_PARAMETERS),)),
    (TERMINATE, ()),
    (PING, ()),
    (GET_STATUS, ()),
    (LIST_TRIALS, (
        _f("status", "enum", False, CONTROL_TRIAL_STATUSES),
        _f("offset", "uint64", False),
        _f("limit", "uint64", False),
    )),
    (GET_TRIAL, (_f("trial_id", "str"),)),
    (GET_STATISTICS, ()),
    (GET_METRICS, (_f("trial_id", "str", False),)),
    (EXPORT_DATA, ()),
    (UPDATE_LIMITS, (
        _f("concurrency", "uint32", False, MAX_CONCURRENCY),
        _f("max_trials", "uint64", False),
        _f("max_duration_s", "float", False),
    )),
    (KILL_TRIAL, (_f("trial_id", "str"),)),
    (LIST_WORKERS, ()),
    (REPORT_METRIC_DATA, (
        _f("trial_id", "str"),
        _f("attempt", "uint32", False),
        _f("parameter_id", "id", False),
        _f("type", "enum", True, METRIC_TYPES),
        _f("sequence", "uint64"),
        _f("value", "metric"),
        _f("worker_id", "str", False),
    )),
    (TRIAL_END, (
        _f("trial_id", "str"),
        _f("attempt", "uint32", False),
        _f("status", "enum", True, TERMINAL_STATUSES),
        _f("error", "text", False),
        _f("worker_id", "str", False),
    )),
    (WORKER_HELLO, (
        _f("worker_id", "str"),
        _f("slots", "uint32", True, MAX_SLOTS),
        _f("resources", "struct", False, RESOURCES),
        _f("language", "text", False),
        _f("version", "text", False),
        _f("running", "array", False, (RUNNING_TRIAL, MAX_RUNNING)),
        _f("offers", "str", False),
        _f("acks", "str", False),
    )),
    (HEARTBEAT, (
        _f("worker_id", "str"),
        _f("free_slots", "uint32", False, MAX_SLOTS),
        _f("running", "array", False, (RUNNING_TRIAL, MAX_RUNNING)),
    )),
    (TRIAL_STARTED, (
        _f("worker_id", "str"),
        _f("trial_id", "str"),
        _f("attempt", "uint32"),
        _f("lease", "uint64", False),
    )),
    (TRIAL_REJECTED, (
        _f("worker_id", "str"),
        _f("trial_id", "str"),
        _f("attempt", "uint32"),
        _f("reason", "text", False),
        _f("lease", "uint64", False),
    )),
    (WORKER_BYE, (_f("worker_id", "str"),)),
    (NEW_TRIAL_JOB, NEW_TRIAL_JOB_BODY),
    (SEND_TRIAL_JOB_PARAMETER, NEW_TRIAL_JOB_BODY),
    (KILL_TRIAL_JOB, (
        _f("trial_id", "str"),
        _f("attempt", "uint32"),
        _f("reason", "text", False),
    )),
    (METRIC_ACK, (
        _f("trial_id", "str"),
        _f("attempt", "uint32"),
        _f("sequence", "uint64"),
        _f("span", "uint32", False),
    )),
    (HELLO_REQUEST, ()),
    (INITIALIZED, (_f("experiment_id", "str"),)),
    (NO_MORE_TRIAL_JOBS, (
        _f("requested", "uint32", False),
        _f("generated", "uint32", False),
    )),
    (ERROR_EVENT, (
        _f("code", "str"),
        _f("message", "text", False),
        _f("source", "str", False),
    )),
    (OK, (_f("data", "any", False),)),
    (ERROR, (
        _f("code", "str"),
        _f("message", "text", False),
    )),
])
TYPE_CODES = tuple(SCHEMA)

# Value checks the C++ decoder makes beyond the type, keyed by (struct, field).
# "v >= 0" is False for NaN, which C++ rejects too.
_CHECKS = {
    ("experiment", "concurrency"): (lambda v: v >= 1, "must be >= 1"),
    ("experiment", "max_duration_s"): (lambda v: v >= 0, "must be >= 0"),
    ("experiment", "plugin_timeout_s"): (lambda v: 0 < v <= MAX_PLUGIN_TIMEOUT_S,
                                         "must be > 0 and at most 86400"),
    # UX (top level): at least one trial at once; a finite time budget.
    ("concurrency",): (lambda v: v >= 1, "must be >= 1"),
    ("max_duration_s",): (lambda v: 0 <= v < float("inf"), "must be finite and >= 0"),
    # MA: a span acknowledges at least one result.
    ("span",): (lambda v: v >= 1, "must be >= 1"),
}

# ---------------------------------------------------------------- values


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return _is_int(v) or isinstance(v, float)


def metric_scalar(value):
    """The number a metric stands for: the value itself, or ``value["default"]``.
    Raises ProtocolError(bad_field) for anything else."""
    return _metric(value, "metric")


def _metric(value, name):
    if _is_number(value):
        return float(value)
    if isinstance(value, dict):
        default = value.get("default")
        if not _is_number(default):
            raise ProtocolError(BAD_FIELD, f'{name}: a metric map needs a numeric "default"', name)
        return float(default)
    raise ProtocolError(BAD_FIELD, f'{name}: a metric is a number or a map with a numeric "default"',
                        name)


def _utf8_size(text):
    # Strings decode with surrogateescape, so undecodable bytes count as one each.
    return len(text.encode("utf-8", "surrogateescape"))


def _bad(name, want):
    return ProtocolError(BAD_FIELD, f"{name}: expected {want}", name)


def _check_value(field, value, name, path, encoding):
    """Validates one present (non-None) value; returns it in canonical form."""
    kind = field.kind
    if kind in ("str", "text"):
        if not isinstance(value, str):
            raise _bad(name, "a string")
        size = _utf8_size(value)
        most = MAX_ID_BYTES if kind == "str" else MAX_TEXT_BYTES
        if size > most:
            raise ProtocolError(BAD_FIELD, f"{name}: {size} bytes is over the limit of {most} bytes",
                                name)
        return value
    if kind in ("uint32", "uint64"):
        limit = _UINT32_MAX if kind == "uint32" else _UINT64_MAX
        if not _is_int(value) or value < 0 or value > limit:
            raise _bad(name, "a non-negative integer in range")
        if field.arg is not None and value > field.arg:
            raise ProtocolError(BAD_FIELD, f"{name}: {value} is over the limit of {field.arg}",
                                name)
        out = value
    elif kind == "int64":
        if not _is_int(value) or value < _INT64_MIN or value > _INT64_MAX:
            raise _bad(name, "an integer")
        return value
    elif kind == "float":
        if not _is_number(value):
            raise _bad(name, "a number")
        out = float(value)
    elif kind == "map":
        if not isinstance(value, dict):
            raise _bad(name, "a map")
        if field.arg is not None and len(value) > field.arg:
            raise ProtocolError(BAD_FIELD, f"{name}: {len(value)} keys is over the limit of "
                                           f"{field.arg}", name)
        return value
    elif kind == "any":
        return value
    elif kind == "metric":
        _metric(value, name)
        return value
    elif kind == "id":
        if isinstance(value, str) and _utf8_size(value) > MAX_ID_BYTES:
            raise ProtocolError(BAD_FIELD, f"{name}: {_utf8_size(value)} bytes is over the limit "
                                           f"of {MAX_ID_BYTES} bytes", name)
        if isinstance(value, str) or (_is_int(value) and _INT64_MIN <= value <= _INT64_MAX):
            return value
        raise _bad(name, "an integer, a string or nil")
    elif kind == "enum":
        if not isinstance(value, str):
            raise _bad(name, "a string")
        if value not in field.arg:
            raise ProtocolError(BAD_FIELD, f'{name}: unknown value "{value}"', name)
        return value
    elif kind == "struct":
        if not isinstance(value, dict):
            raise _bad(name, "a map")
        return _check_fields(field.arg, value, name, path + (field.key,), encoding)
    elif kind == "array":
        if not isinstance(value, (list, tuple)):
            raise _bad(name, "an array")
        item_fields, most = field.arg
        if len(value) > most:
            raise ProtocolError(BAD_FIELD, f"{name}: {len(value)} items is over the limit of "
                                           f"{most}", name)
        items = []
        for i, item in enumerate(value):
            item_name = f"{name}[{i}]"
            if not isinstance(item, dict):
                raise ProtocolError(BAD_FIELD, f"{item_name}: expected a map", item_name)
            items.append(_check_fields(item_fields, item, item_name, path + (field.key,), encoding))
        return items
    else:
        raise AssertionError(kind)
    check = _CHECKS.get(path[-1:] + (field.key,))
    if check is not None and not check[0](out):
        raise ProtocolError(BAD_FIELD, f"{name}: {check[1]}", name)
    return out


def _check_fields(fields, body, prefix, path, encoding):
    """Validates a body/struct dict against `fields` in wire order (the first
    error wins, as in C++) and returns a new dict holding every key in order."""
    if encoding:
        known = {f.key for f in fields}
        for key in body:
            if key not in known:
                name = f"{prefix}.{key}"
                raise ProtocolError(BAD_FIELD, f"{name}: not a field of this message", name)
    out = {}
    for field in fields:
        name = f"{prefix}.{field.key}"
        value = body.get(field.key)
        if value is None:
            if field.required:
                raise ProtocolError(MISSING_FIELD, f"{name} is required", name)
            out[field.key] = None
            continue
        out[field.key] = _check_value(field, value, name, path, encoding)
    return out


def _depth_exceeds(obj, limit):
    # Iterative, so hostile nesting cannot hit Python's recursion limit.
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            if depth > limit:
                return True
            for k, v in value.items():
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(value, list):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in value)
    return False


# ---------------------------------------------------------------- API


def encode(type_code, body=None, msg_id=0):
    """Encodes one message canonically. `body` is a dict (None: empty); keys
    absent from it are written as nil. Raises ProtocolError for an unknown type
    or an invalid body (the same checks decode makes)."""
    fields = SCHEMA.get(type_code)
    if fields is None:
        raise ProtocolError(UNKNOWN_TYPE, f'unknown message type "{type_code}"')
    if not _is_int(msg_id) or msg_id < 0 or msg_id > _UINT64_MAX:
        raise ProtocolError(BAD_FIELD, "envelope.id: expected a non-negative integer", "envelope.id")
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise ProtocolError(BAD_FIELD, "envelope.body: expected a map", "envelope.body")
    canonical = _check_fields(fields, body, "body", (), True)
    envelope = {"v": PROTOCOL_VERSION, "type": type_code, "id": msg_id, "body": canonical}
    try:
        return msgpack.packb(envelope, use_bin_type=True, unicode_errors="surrogateescape")
    except (TypeError, ValueError, OverflowError) as e:
        raise ProtocolError(BAD_FIELD, f"body: value cannot be encoded: {e}", "body") from e


def decode(data, max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES):
    """Decodes one envelope into a Message(v, type, id, body). Raises
    ProtocolError; its ``msg_id`` attribute holds the envelope id when it could
    be read (0 otherwise), so a reply can echo it."""
    size = len(data)
    if size > max_message_bytes:
        raise ProtocolError(TOO_LARGE, f"message of {size} bytes exceeds the limit of "
                                       f"{max_message_bytes} bytes")
    try:
        root = msgpack.unpackb(bytes(data), raw=False, strict_map_key=False,
                               unicode_errors="surrogateescape")
    except msgpack.ExtraData as e:
        raise ProtocolError(BAD_FRAME, f"{len(e.extra)} trailing bytes after the message") from None
    except Exception as e:  # msgpack raises several types for malformed input
        raise ProtocolError(BAD_FRAME, f"not a MessagePack message: {e or type(e).__name__}") from None
    if _depth_exceeds(root, MAX_DEPTH):
        raise ProtocolError(BAD_FRAME, "not a MessagePack message: depth size overflow")
    if not isinstance(root, dict):
        raise ProtocolError(BAD_FRAME, "message is not a MessagePack map")
    msg_id = root.get("id")
    readable_id = msg_id if _is_int(msg_id) and msg_id >= 0 else 0
    try:
        return _decode_envelope(root, msg_id, readable_id)
    except ProtocolError as e:
        e.msg_id = readable_id
        raise


def _decode_envelope(root, msg_id, readable_id):
    v = root.get("v")
    if not _is_int(v) or v < 0:
        raise ProtocolError(UNSUPPORTED_VERSION, 'message has no protocol version "v"; this host '
                                                 f"speaks v{PROTOCOL_VERSION}")
    if v != PROTOCOL_VERSION:
        raise ProtocolError(UNSUPPORTED_VERSION, f"protocol v{v} is not supported; this host "
                                                 f"speaks v{PROTOCOL_VERSION}")
    type_code = root.get("type")
    if type_code is None:
        raise ProtocolError(MISSING_FIELD, "envelope.type is required", "envelope.type")
    if not isinstance(type_code, str):
        raise _bad("envelope.type", "a string")
    if _utf8_size(type_code) > MAX_ID_BYTES:
        raise ProtocolError(BAD_FIELD, f"envelope.type: {_utf8_size(type_code)} bytes is over the "
                                       f"limit of {MAX_ID_BYTES} bytes", "envelope.type")
    # Every envelope has exactly its four keys (§3): a nil or absent id or
    # body is refused like any required field.
    if "id" not in root:
        raise ProtocolError(MISSING_FIELD, "envelope.id is required", "envelope.id")
    if not (_is_int(msg_id) and msg_id >= 0):
        raise _bad("envelope.id", "a non-negative integer")
    fields = SCHEMA.get(type_code)
    if fields is None:
        raise ProtocolError(UNKNOWN_TYPE, f'unknown message type "{type_code}"')
    if "body" not in root:
        raise ProtocolError(MISSING_FIELD, "envelope.body is required", "envelope.body")
    body = root.get("body")
    if not isinstance(body, dict):
        raise _bad("envelope.body", "a map")
    return Message(PROTOCOL_VERSION, type_code, readable_id,
                   _check_fields(fields, body, "body", (), False))
