"""Reading the monitor's observation records: what was measured, and the best of it.

Deciders receive the monitor's typed records (``DecisionContext.observations``: the
:mod:`hetsched.model.observations` dataclasses), so they see exactly what the monitor exposes
(which is what the ablation varies) without importing the monitor, and read fields, never keys.
:class:`Evidence` reads every record a deterministic decider can use in one pass, with mappings
as placement codes (building a :class:`~hetsched.model.Mapping` per record costs O(n) each and
there are O(n) records at scale); the functions below it are the simple views the ``argmin``
decider and the fallback use. Imports only ``hetsched.model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hetsched.model import Mapping, Placement, Scenario
from hetsched.model.mapping import PLACEMENTS
from hetsched.model.observations import Execution, LastRound, NodeLatency, Observation, Pairs
from hetsched.model.observations import Infeasible as InfeasibleRecord

Codes = tuple[int, ...]
"""A mapping as placement codes in workflow node order (``Placement.code``)."""

_OF_LETTER = {p.short: p.code for p in PLACEMENTS}
_LETTERS = frozenset(_OF_LETTER)


@dataclass(frozen=True)
class Measured:
    """One executed mapping and its measured E2E."""

    mapping: Mapping
    """The mapping."""
    mean_e2e_ms: float
    """Mean measured E2E."""
    runs: int
    """Number of runs."""


@dataclass(frozen=True)
class MeasuredCodes:
    """One executed mapping, as codes, with what was measured of it."""

    codes: Codes
    """Placement codes in node order."""
    mean_e2e_ms: float
    """Mean measured E2E over its runs."""
    runs: int
    """Number of runs (rounds and probes)."""
    last_round: int
    """The latest round it ran in (as the round's mapping or as a probe)."""
    listed: int
    """Its position in the monitor's records (ties go to the first listed)."""


@dataclass
class Evidence:
    """Everything measured so far, as a decider reads it from the monitor's records."""

    order: tuple[str, ...]
    """Workflow node order (the order of every code)."""
    measured: dict[Codes, MeasuredCodes] = field(default_factory=dict)
    """Every mapping that ran to completion."""
    infeasible: dict[Codes, str] = field(default_factory=dict)
    """Mappings that could not run (executed, or ruled out by the budget check), with the reason."""
    last: Codes | None = None
    """The previous round's mapping (None in round 0)."""
    last_feasible: bool = True
    """Whether the previous round's mapping ran."""
    latency: dict[tuple[str, str], NodeLatency] = field(default_factory=dict)
    """(node, placement) -> the running-average record (mean latency under contention...)."""

    @classmethod
    def read(cls, scenario: Scenario, records: Sequence[Observation]) -> Evidence:
        """Read the records once (mappings as codes)."""
        ev = cls(scenario.workflow.node_ids)
        for r in records:
            if isinstance(r, Execution):
                codes = ev.codes(r.code, r.mapping)
                last = max(r.rounds or (0,))
                ev.measured[codes] = MeasuredCodes(codes, r.mean_e2e_ms, r.runs, last, len(ev.measured))
            elif isinstance(r, InfeasibleRecord):
                ev.infeasible.setdefault(ev.codes(r.code, r.mapping), r.reason)
            elif isinstance(r, LastRound):
                ev.last = ev.codes(r.code, r.mapping)
                ev.last_feasible = r.feasible
            elif isinstance(r, NodeLatency):
                ev.latency[(r.node, r.placement)] = r
        return ev

    def codes(self, code: str, mapping: Pairs) -> Codes:
        """A record's mapping as codes: from its letter code when it has one, else from its pairs."""
        if len(code) == len(self.order) and _LETTERS.issuperset(code):  # one pass in C per record
            return tuple(map(_OF_LETTER.__getitem__, code))
        by_node = dict(mapping)
        return tuple(Placement(by_node[n]).code for n in self.order)

    def mapping(self, codes: Codes) -> Mapping:
        """The mapping of codes."""
        return Mapping(zip(self.order, (PLACEMENTS[c] for c in codes), strict=True))

    @property
    def best(self) -> MeasuredCodes | None:
        """The measured mapping with the lowest mean E2E (ties: listed first); None when nothing ran."""
        if not self.measured:
            return None
        return min(self.measured.values(), key=lambda m: (m.mean_e2e_ms, m.listed))


def measured(records: Sequence[Observation]) -> list[Measured]:
    """Every mapping that ran to completion, in the order the monitor listed them."""
    return [Measured(Mapping(dict(r.mapping)), r.mean_e2e_ms, r.runs) for r in records if isinstance(r, Execution)]


def best_measured(records: Sequence[Observation]) -> Measured | None:
    """The measured mapping with the lowest mean E2E (ties: listed first); None when nothing ran."""
    best: Execution | None = None
    for r in records:
        if isinstance(r, Execution) and (best is None or r.mean_e2e_ms < best.mean_e2e_ms):
            best = r
    if best is None:
        return None
    return Measured(Mapping(dict(best.mapping)), best.mean_e2e_ms, best.runs)


def last_round(records: Sequence[Observation]) -> Mapping | None:
    """The mapping executed in the previous round (None in round 0)."""
    for r in records:
        if isinstance(r, LastRound):
            return Mapping(dict(r.mapping))
    return None


def fallback_mapping(scenario: Scenario, records: Sequence[Observation]) -> tuple[Mapping, str]:
    """The mapping used when a decider gives none: the best measured feasible one, else all-CPU."""
    best = best_measured(records)
    if best is not None:
        return best.mapping, f"fell back to the best measured feasible mapping ({best.mean_e2e_ms:.1f} ms)"
    return scenario.uniform(Placement.CPU), "nothing measured yet: fell back to all-CPU (always feasible)"


def measured_infeasible(records: Sequence[Observation]) -> dict[Mapping, tuple[int, str]]:
    """Mappings the observations say were executed and could not run: ``mapping -> (round, reason)``.

    Read from the monitor's records: ``Infeasible`` records of a round or a probe (not the
    ``budget check`` ones, which were never executed) and an infeasible ``LastRound``.
    """
    found: dict[Mapping, tuple[int, str]] = {}
    for r in records:
        ran: InfeasibleRecord | LastRound | None = None
        if isinstance(r, InfeasibleRecord):
            ran = r if r.source in ("round", "probe") else None  # a budget check never ran
        elif isinstance(r, LastRound):
            ran = None if r.feasible else r
        if ran is not None:
            found.setdefault(Mapping(dict(ran.mapping)), (ran.round, ran.reason))
    return found
