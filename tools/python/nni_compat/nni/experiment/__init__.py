"""``nni.experiment`` for NNI scripts run on tunehost, unchanged: NNI's
Python experiment API (``Experiment``, ``RunMode``, ``ExperimentConfig``,
``AlgorithmConfig``, ``LocalConfig``, the trial records) as
:mod:`tunehost.experiment` implements it. Only loaded when no real NNI is
installed (see ``nni/__init__.py``): a real NNI's own ``nni.experiment``
wins."""

from tunehost.experiment import Experiment, RunMode
from tunehost.experiment_data import TrialHyperParameters, TrialJob, TrialMetricData, TrialResult
from tunehost.nni_config import (AlgorithmConfig, CustomAlgorithmConfig, ExperimentConfig,
                                 LocalConfig, TrainingServiceConfig)

__all__ = ["Experiment", "RunMode", "ExperimentConfig", "AlgorithmConfig",
           "CustomAlgorithmConfig", "LocalConfig", "TrainingServiceConfig", "TrialJob",
           "TrialHyperParameters", "TrialMetricData", "TrialResult"]
