"""Round records: what the loop hands a policy (and the monitor) as history, and what it stores.

Also the executor interface every executor (simulated, local, Ray) satisfies. Part of the
model package, so the monitor, policies and loop share these types without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from hetsched.model.mapping import Mapping
from hetsched.model.trace import Trace


class Executor(Protocol):
    """Runs a workflow under a mapping once; infeasible mappings come back as a Trace, not raised."""

    name: str
    """``sim``, ``local``, ``ray``..."""

    def run(self, mapping: Mapping, seed: int | None = 0) -> Trace:
        """Execute (or refuse, with a reason) and return the trace."""
        ...


@dataclass(frozen=True)
class Proposal:
    """A policy's answer for one round: the mapping, why, and what the decider left on record."""

    mapping: Mapping
    """The mapping to execute."""
    rationale: str = ""
    """Short free-text reason (the LLM's explanation, a rule's name...)."""
    info: dict[str, Any] = field(default_factory=dict)
    """JSON-ready extras: prompt, reply, tokens, validation errors, fallback flag..."""


@dataclass(frozen=True)
class Probe:
    """A what-if execution the monitor asked for, counted as cost."""

    kind: str
    """``reprobe`` (one node moved) or ``swap`` (two nodes exchange placements)."""
    base: Mapping
    """The mapping it varies (the best measured one at the time)."""
    trace: Trace
    """What happened."""
    note: str = ""
    """Which change it measures (``C: gpu_now -> gpu_queue``)."""

    @property
    def mapping(self) -> Mapping:
        """The probed mapping."""
        return self.trace.mapping


@dataclass(frozen=True)
class RoundRecord:
    """One round: the proposal, the executed trace, the probes run after it."""

    round: int
    """Round index from 0."""
    proposal: Proposal
    """What the policy proposed."""
    trace: Trace
    """The execution of the proposal (feasible or not)."""
    probes: tuple[Probe, ...] = ()
    """What-if probes run during this round."""

    @property
    def mapping(self) -> Mapping:
        """The executed mapping."""
        return self.proposal.mapping
