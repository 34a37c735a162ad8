"""Reading the monitor's JSON observation records: what was measured, and the best of it.

Deciders receive the monitor's output as JSON records (``DecisionContext.observations``), so
they see exactly what the monitor exposes (which is what the ablation varies) without
importing the monitor. Imports only ``hetsched.model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.model import Mapping, Placement, Scenario


@dataclass(frozen=True)
class Measured:
    """One executed mapping and its measured E2E."""

    mapping: Mapping
    """The mapping."""
    mean_e2e_ms: float
    """Mean measured E2E."""
    runs: int
    """Number of runs."""


def measured(records: Sequence[dict[str, Any]]) -> list[Measured]:
    """Every mapping that ran to completion, in the order the monitor listed them."""
    return [
        Measured(Mapping(r["mapping"]), float(r["mean_e2e_ms"]), int(r["runs"]))
        for r in records
        if r.get("kind") == "execution"
    ]


def best_measured(records: Sequence[dict[str, Any]]) -> Measured | None:
    """The measured mapping with the lowest mean E2E (ties: listed first); None when nothing ran."""
    got = measured(records)
    return min(got, key=lambda m: m.mean_e2e_ms) if got else None


def last_round(records: Sequence[dict[str, Any]]) -> Mapping | None:
    """The mapping executed in the previous round (None in round 0)."""
    for r in records:
        if r.get("kind") == "last_round":
            return Mapping(r["mapping"])
    return None


def fallback_mapping(scenario: Scenario, records: Sequence[dict[str, Any]]) -> tuple[Mapping, str]:
    """The mapping used when a decider gives none: the best measured feasible one, else all-CPU."""
    best = best_measured(records)
    if best is not None:
        return best.mapping, f"fell back to the best measured feasible mapping ({best.mean_e2e_ms:.1f} ms)"
    return scenario.uniform(Placement.CPU), "nothing measured yet: fell back to all-CPU (always feasible)"
