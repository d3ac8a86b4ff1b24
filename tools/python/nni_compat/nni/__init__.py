"""``import nni`` for NNI trial scripts run by tunehost, unchanged.

tunehost-worker puts the directory holding this package on a trial's
``PYTHONPATH`` (before ``tools/python``), so an NNI trial script's own
``import nni`` finds NNI's trial API (:mod:`tunehost.nni`: the same names and
return values, results to tunehost).

A real NNI the user installed is not shadowed. When another ``nni`` package
is found on ``sys.path`` (this directory left out), that package is loaded
instead, whole (its NAS, compression and other modules work as installed);
inside a tunehost trial (``TUNEHOST_TRIAL_ID`` set) its trial API functions
(``get_next_parameter``, ``report_final_result``, ...) are then replaced by
tunehost's, since NNI's would report to an NNI manager that is not there.
``TUNEHOST_NNI=real`` leaves a real NNI untouched; ``TUNEHOST_NNI=tunehost``
uses tunehost's API even when a real NNI is installed.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _real_nni():
    """The spec of an installed NNI, or None. This package is left out under
    any spelling of its path (a symlink, a second entry): loading it again
    as "the real one" would recurse."""
    me = os.path.realpath(__file__)
    here = os.path.dirname(os.path.dirname(me))
    others = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("nni", others)
    if spec is None or spec.origin is None or os.path.realpath(spec.origin) == me:
        return None
    return spec


def _load():
    choice = os.environ.get("TUNEHOST_NNI", "")
    spec = None if choice == "tunehost" else _real_nni()
    if spec is None:
        from tunehost import nni as api
        module = sys.modules[__name__]
        for name in api.__all__:
            setattr(module, name, getattr(api, name))
        module.__all__ = list(api.__all__)
        return
    real = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = real  # what `import nni` returns (importlib re-reads it)
    spec.loader.exec_module(real)
    if choice != "real" and os.environ.get("TUNEHOST_TRIAL_ID"):
        from tunehost import nni as api
        for name in api.__all__:
            setattr(real, name, getattr(api, name))


_load()
del _load
