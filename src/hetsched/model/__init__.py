"""The model: tool cards, workflow DAG, placements, mapping, machine, scenario, trace, file formats.

Bottom of the import graph: imports nothing else of hetsched.
"""

from hetsched.model.card import Category, Provenance, Spread, ToolCard
from hetsched.model.errors import HetschedError, InputError, MappingError, UnknownNameError
from hetsched.model.history import Executor, Probe, Proposal, RoundRecord
from hetsched.model.machine import Machine
from hetsched.model.mapping import BINARY, THREE_WAY, Mapping, Placement, parse_placement
from hetsched.model.scenario import Mode, Scenario
from hetsched.model.trace import NodeTrace, Trace, VramPoint
from hetsched.model.workflow import Edge, Node, Workflow

__all__ = [
    "BINARY",
    "THREE_WAY",
    "Category",
    "Edge",
    "Executor",
    "HetschedError",
    "InputError",
    "Machine",
    "Mapping",
    "MappingError",
    "Mode",
    "Node",
    "NodeTrace",
    "Placement",
    "Probe",
    "Proposal",
    "Provenance",
    "RoundRecord",
    "Scenario",
    "Spread",
    "ToolCard",
    "Trace",
    "UnknownNameError",
    "VramPoint",
    "Workflow",
    "parse_placement",
]
