"""The model: tool cards, workflow DAG, placements, mapping, machine, scenario, trace, the
contracts that cross rooms (history, decisions, observations, run keys, planning), file formats.

Bottom of the import graph: imports nothing else of hetsched.
"""

from hetsched.model.card import Category, Provenance, Spread, ToolCard
from hetsched.model.errors import HetschedError, InputError, MappingError, OutputError, UnknownNameError
from hetsched.model.history import (
    Attempt,
    DecisionRecord,
    Probe,
    ProbeRequest,
    Proposal,
    RoundOutcome,
    RoundRecord,
)
from hetsched.model.machine import Machine
from hetsched.model.mapping import BINARY, PLACEMENTS, THREE_WAY, Mapping, Placement, parse_placement
from hetsched.model.planning import Planner, Reference, ReferenceKind
from hetsched.model.run import SIM, ExecutorSpec, LoopConfig, RunKey
from hetsched.model.scenario import Mode, Scenario
from hetsched.model.trace import HostTrace, Infeasibility, InfeasibleKind, NodeTrace, Trace, VramPoint
from hetsched.model.workflow import Edge, Node, Workflow

__all__ = [
    "BINARY",
    "PLACEMENTS",
    "SIM",
    "THREE_WAY",
    "Attempt",
    "Category",
    "DecisionRecord",
    "Edge",
    "ExecutorSpec",
    "HetschedError",
    "HostTrace",
    "Infeasibility",
    "InfeasibleKind",
    "InputError",
    "LoopConfig",
    "Machine",
    "Mapping",
    "MappingError",
    "Mode",
    "Node",
    "NodeTrace",
    "OutputError",
    "Placement",
    "Planner",
    "Probe",
    "ProbeRequest",
    "Proposal",
    "Provenance",
    "Reference",
    "ReferenceKind",
    "RoundOutcome",
    "RoundRecord",
    "RunKey",
    "Scenario",
    "Spread",
    "ToolCard",
    "Trace",
    "UnknownNameError",
    "VramPoint",
    "Workflow",
    "parse_placement",
]
