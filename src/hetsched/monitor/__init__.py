"""The runtime monitor (PAPER.md's Algorithm 1): observe, never decide.

Passive: turns executed rounds and probes into :class:`Observation` records and prompt text,
and names the next what-if probe worth running as a request the loop executes. The record
types live in ``hetsched.model.observations`` (the store and deciders read them too). Imports
only ``hetsched.model``; policies import the monitor, never the other way round.
"""

from hetsched.model.observations import (
    OBSERVATION_TYPES,
    Budget,
    Execution,
    Infeasible,
    LastRound,
    LoadWindow,
    NodeLatency,
    Observation,
    ProbeResult,
    Unmeasured,
    render,
    to_json,
)
from hetsched.monitor.config import MECHANISMS, MonitorConfig
from hetsched.monitor.monitor import Candidate, Monitor, Observations, critical_path

__all__ = [
    "MECHANISMS",
    "OBSERVATION_TYPES",
    "Budget",
    "Candidate",
    "Execution",
    "Infeasible",
    "LastRound",
    "LoadWindow",
    "Monitor",
    "MonitorConfig",
    "NodeLatency",
    "Observation",
    "Observations",
    "ProbeResult",
    "Unmeasured",
    "critical_path",
    "render",
    "to_json",
]
