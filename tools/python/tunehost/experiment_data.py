"""NNI's experiment records (``nni/experiment/data.py``) as tunehost returns them.

Field names are NNI's; tunehost's extra fields follow them. Times are
milliseconds since the epoch, as NNI's REST API gives them.
"""

import dataclasses
from typing import Any, List, Optional

__all__ = ["TrialHyperParameters", "TrialMetricData", "TrialResult", "TrialJob"]


@dataclasses.dataclass
class TrialHyperParameters:
    """NNI's TrialHyperParameters: the parameter record the trial ran with."""
    parameter_id: Any
    parameter_source: str
    parameters: dict
    parameter_index: int = 0


@dataclasses.dataclass
class TrialMetricData:
    """NNI's TrialMetricData. ``data`` is the metric value itself (NNI decodes
    its double-encoded JSON to the same thing). ``timestamp``: when the host
    accepted it (ms since the epoch), read from the experiment's store when
    it is on this machine, else ``None``."""
    timestamp: Optional[int]
    trialJobId: str
    parameterId: Any
    type: str
    sequence: Optional[int]
    data: Any


@dataclasses.dataclass
class TrialResult:
    """NNI's TrialResult (``export_data``): a SUCCEEDED trial's final result."""
    parameter: dict
    value: Any
    trialJobId: str


@dataclasses.dataclass
class TrialJob:
    """NNI's TrialJob plus tunehost's fields. Times are NNI's milliseconds since
    the epoch (``None`` while unknown); ``finalMetricData`` holds the final
    result (``sequence`` and ``timestamp`` unknown: ``None``); ``logPath`` and
    ``stderrPath`` are the trial directory and its stderr.log when the trials
    ran on this machine's local workers (else empty)."""
    trialJobId: str
    status: str
    hyperParameters: List[TrialHyperParameters]
    logPath: str
    startTime: Optional[int]
    endTime: Optional[int]
    finalMetricData: List[TrialMetricData]
    stderrPath: str
    sequenceId: int
    # tunehost's TrialInfo fields (control API):
    parameters: dict = dataclasses.field(default_factory=dict)
    final: Any = None
    source: str = ""
    attempt: int = 0
    worker_id: str = ""
    intermediate_count: int = 0
    error: str = ""
