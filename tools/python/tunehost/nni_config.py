"""NNI's Python experiment config (``nni.experiment.ExperimentConfig``) on tunehost.

NNI's quickstart builds its config attribute by attribute::

    experiment = Experiment('local')
    experiment.config.trial_command = 'python3 model.py'
    experiment.config.search_space = search_space
    experiment.config.tuner.name = 'TPE'
    experiment.config.tuner.class_args['optimize_mode'] = 'maximize'

These classes take the same attribute names (NNI's ``experiment_config.py``,
``algorithm.py`` and ``training_services/local.py``) and turn into the YAML
keys ``tunehost run`` reads (:meth:`ExperimentConfig.to_dict`). A name NNI
does not have is refused when it is set (``AttributeError`` naming the
closest one), so a typo cannot be silently ignored; values are checked by the
host when the experiment starts, as for a YAML file.

As in NNI, a config made for a platform (``ExperimentConfig('local')``) holds
empty ``tuner``, ``assessor`` and ``advisor`` entries so that
``config.tuner.name = …`` works; an entry whose ``name`` stays unset is left
out. tunehost runs trials on its local workers (or on workers that attach
to its endpoints): the only platform it accepts is ``local``.
"""

import difflib
import os

__all__ = ["ExperimentConfig", "AlgorithmConfig", "CustomAlgorithmConfig", "LocalConfig",
           "TrainingServiceConfig"]

# NNI's training-service names (nni/experiment/config/training_services).
NNI_PLATFORMS = ("local", "remote", "openpai", "pai", "aml", "dlc", "kubeflow",
                 "frameworkcontroller", "adl")


def _key(name):
    # NNI's ConfigBase matches keyword names ignoring case and underscores.
    return name.replace("_", "").lower()


def _camel(name):
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class _Config:
    """Attributes from a fixed list of NNI field names, with defaults."""

    _fields = {}  # snake_case name -> default (a callable for a fresh mutable default)

    def __init__(self, **kwargs):
        for name, default in self._fields.items():
            object.__setattr__(self, name, default() if callable(default) else default)
        by_key = {_key(name): name for name in self._fields}
        for given, value in kwargs.items():
            name = by_key.get(_key(given))
            if name is None:
                self._unknown(given)
            setattr(self, name, value)

    def __setattr__(self, name, value):
        if name not in self._fields:
            self._unknown(name)
        object.__setattr__(self, name, self._convert(name, value))

    def _convert(self, name, value):
        return value

    def _unknown(self, name):
        close = difflib.get_close_matches(name, list(self._fields), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise AttributeError(f"{type(self).__name__} has no field {name!r}{hint} (NNI's fields: "
                             f"{', '.join(self._fields)})")

    def __repr__(self):
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields
                           if getattr(self, n) is not None)
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other):
        return type(self) is type(other) and all(
            getattr(self, n) == getattr(other, n) for n in self._fields)

    def to_dict(self):
        """The fields that are set, under the YAML (camelCase) names."""
        out = {}
        for name in self._fields:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, _Config):
                value = value.to_dict()
            elif isinstance(value, os.PathLike):
                value = os.fspath(value)
            out[_camel(name)] = value
        return out


class AlgorithmConfig(_Config):
    """A built-in tuner, assessor or advisor: NNI's AlgorithmConfig."""
    _fields = {"name": None, "class_args": dict}


class CustomAlgorithmConfig(_Config):
    """NNI's CustomAlgorithmConfig (a Python class). tunehost loads algorithms
    as plugins, so the host refuses ``className`` when the experiment starts,
    naming the built-ins."""
    _fields = {"class_name": None, "code_directory": None, "class_args": dict}


class _AnyAlgorithm(_Config):
    # What ExperimentConfig('local') puts in tuner/assessor/advisor: either kind.
    _fields = {"name": None, "class_name": None, "code_directory": None, "class_args": dict}

    def to_dict(self):
        return super().to_dict() if (self.name or self.class_name) else None


class TrainingServiceConfig(_Config):
    """Base of NNI's training-service configs."""
    _fields = {"platform": None}


class LocalConfig(TrainingServiceConfig):
    """NNI's LocalConfig (``platform: local``)."""
    _fields = {"platform": "local", "use_active_gpu": None, "max_trial_number_per_gpu": None,
               "gpu_indices": None, "reuse_mode": None, "trial_command": None,
               "trial_code_directory": None, "trial_gpu_number": None, "nni_manager_ip": None,
               "debug": None}


def _training_service(value):
    if isinstance(value, str):
        if value != "local":
            raise ValueError(
                f"training service {value!r} is not supported by tunehost: trials run on its "
                "local workers ('local'), or on workers that attach to the host's endpoints from "
                "any machine (`tunehost run --local-workers 0`, `tunehost-worker`)")
        return LocalConfig()
    if isinstance(value, list):
        if len(value) != 1:
            raise ValueError("tunehost has no hybrid training service: give one platform, 'local'")
        return _training_service(value[0])
    if isinstance(value, dict):
        return _training_service(value.get("platform", "local")).__class__(**value)
    return value


def _algorithm(value):
    if isinstance(value, dict):
        return _AnyAlgorithm(**value)
    return value


class ExperimentConfig(_Config):
    """NNI's ExperimentConfig: ``ExperimentConfig('local')`` or
    ``ExperimentConfig(trial_command=…, training_service=LocalConfig(), …)``
    (keywords in NNI's snake_case or the YAML's camelCase)."""

    _fields = {
        "experiment_type": None, "experiment_name": None, "search_space_file": None,
        "search_space": None, "trial_command": None, "trial_code_directory": ".",
        "trial_concurrency": None, "trial_gpu_number": None, "max_experiment_duration": None,
        "max_trial_number": None, "max_trial_duration": None, "nni_manager_ip": None,
        "use_annotation": None, "debug": None, "log_level": None,
        "experiment_working_directory": None, "tuner_gpu_indices": None, "tuner": None,
        "assessor": None, "advisor": None, "training_service": None, "shared_storage": None,
    }

    def __init__(self, training_service_platform=None, **kwargs):
        super().__init__(**kwargs)
        if training_service_platform is not None:
            if self.training_service is not None:
                raise ValueError("give the platform or training_service=, not both")
            self.training_service = training_service_platform
            for kind in ("tuner", "assessor", "advisor"):
                if getattr(self, kind) is None:
                    setattr(self, kind, _AnyAlgorithm())

    def _convert(self, name, value):
        if name == "training_service":
            return None if value is None else _training_service(value)
        if name in ("tuner", "assessor", "advisor"):
            return _algorithm(value)
        return value

    def to_dict(self):
        out = super().to_dict()
        for kind in ("tuner", "assessor", "advisor"):
            if out.get(kind) is None:
                out.pop(kind, None)
        return out
