"""tunehost's Python side: the reference worker, the function API, the trial helper.

Submodules:
- ``tunehost.protocol``: the wire codec (protocol/docs/wire-format.md).
- ``tunehost.worker``: :class:`Worker`, a protocol-v1 worker with a pluggable trial runner.
- ``tunehost.function``: :func:`run_worker` and :class:`StatusReporter`, the function API.
- ``tunehost.trial``: stdlib-only helper for trial scripts run by the C++ ``tunehost-worker``.

The names below are imported lazily, so ``import tunehost.trial`` works on an
interpreter without pyzmq or msgpack.
"""

__version__ = "0.1.0"

_LAZY = {
    "Worker": "tunehost.worker",
    "TrialHandle": "tunehost.worker",
    "TrialStopped": "tunehost.worker",
    "run_worker": "tunehost.function",
    "StatusReporter": "tunehost.function",
    "function_runner": "tunehost.function",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name):
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tunehost' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
