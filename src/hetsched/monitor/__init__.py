"""The runtime monitor (PAPER.md's Algorithm 1): observe, never decide.

Turns executed rounds (and the bounded what-if probes it runs through the loop's executor)
into :class:`Observation` records and prompt text. Imports only ``hetsched.model``; policies
import the monitor, never the other way round.
"""

from hetsched.monitor.config import MECHANISMS, MonitorConfig
from hetsched.monitor.monitor import Candidate, Monitor, Observations, ProbeRunner, critical_path
from hetsched.monitor.observations import (
    OBSERVATION_TYPES,
    Budget,
    Execution,
    Infeasible,
    LastRound,
    NodeLatency,
    Observation,
    ProbeResult,
    Unmeasured,
    render,
    to_json,
)

__all__ = [
    "MECHANISMS",
    "OBSERVATION_TYPES",
    "Budget",
    "Candidate",
    "Execution",
    "Infeasible",
    "LastRound",
    "Monitor",
    "MonitorConfig",
    "NodeLatency",
    "Observation",
    "Observations",
    "ProbeResult",
    "ProbeRunner",
    "Unmeasured",
    "critical_path",
    "render",
    "to_json",
]
