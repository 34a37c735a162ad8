"""References for reports, and the planner the loop hands policies: the model's noise-free view.

- :func:`reference`: the mapping a report compares against: the exact oracle
  (:mod:`hetsched.sim.oracle`) when the space is small enough, else a labelled best-known
  mapping from :func:`best_known` with a lower bound, or none.
- :func:`best_known`: a seeded, anytime local search over the noise-free simulator for
  workflows too large for the exact search.
- :class:`SimPlanner`: the :class:`~hetsched.model.Planner` built on the noise-free simulator
  (feasibility including FIFO deadlocks, predicted E2E, the reference).

Runs never need any of this: the loop builds a planner, but nothing is solved unless a policy
or a report asks. Imports the model and the simulator.
"""

from __future__ import annotations

import math
import random
import time
from enum import StrEnum

from hetsched.model import (
    Infeasibility,
    InputError,
    Mapping,
    Reference,
    ReferenceKind,
    Scenario,
)
from hetsched.sim.engine import Simulator
from hetsched.sim.oracle import solve

AUTO_EXACT_MAX_MAPPINGS = 200_000
"""``--reference auto`` solves exactly up to this many mappings, else searches for a best-known one."""
DEFAULT_SEARCH_SECONDS = 10.0
"""Time budget of the best-known search by default."""


class ReferenceChoice(StrEnum):
    """What ``--reference`` asks for."""

    AUTO = "auto"
    """The oracle when the space is small enough, else best-known."""
    ORACLE = "oracle"
    """The exact oracle (an error when the space is too large)."""
    BEST_KNOWN = "best-known"
    """The bounded search, even when the oracle would be affordable."""
    NONE = "none"
    """No reference (nothing is solved)."""


def parse_reference_choice(text: str) -> ReferenceChoice:
    """``auto``, ``oracle``, ``best-known`` or ``none`` (clear error otherwise)."""
    try:
        return ReferenceChoice(text.strip().lower())
    except ValueError:
        accepted = ", ".join(c.value for c in ReferenceChoice)
        raise InputError(f"--reference: unknown value {text!r}; accepted: {accepted}") from None


def lower_bound_ms(scenario: Scenario) -> float:
    """A lower bound on the E2E of every mapping under the model: the isolated critical path
    (every node at its faster isolated latency, no contention, no transfers, no load)."""
    return scenario.isolated_critical_path_ms()


def best_known(scenario: Scenario, *, seed: int = 0, max_seconds: float = DEFAULT_SEARCH_SECONDS) -> Reference:
    """The best mapping a seeded local search finds within ``max_seconds`` (anytime).

    Starts from all-CPU (always feasible) and the uniform GPU mappings that can run, then
    applies improving one-node moves in a seeded random order until none improves or time runs
    out. Deterministic for a seed when it finishes within the budget.
    """
    t0 = time.perf_counter()
    sim = Simulator(scenario, noise=False)
    rng = random.Random(seed)
    ids = scenario.workflow.node_ids

    def cost(m: Mapping) -> float:
        e = sim.e2e(m)
        return math.inf if e is None else e

    starts = [scenario.uniform(p) for p in scenario.placements]
    best = min(starts, key=cost)
    best_e = cost(best)
    moves = [(n, p) for n in ids for p in scenario.allowed(n)]
    improved = True
    while improved and time.perf_counter() - t0 < max_seconds:
        improved = False
        rng.shuffle(moves)
        for node, place in moves:
            if best[node] is place:
                continue
            cand = best.moved(node, place)
            e = cost(cand)
            if e < best_e * (1 - 1e-12):
                best, best_e, improved = cand, e, True
            if time.perf_counter() - t0 >= max_seconds:
                break
    return Reference(ReferenceKind.BEST_KNOWN, best, best_e, lower_bound_ms(scenario), time.perf_counter() - t0)


def reference(
    scenario: Scenario,
    choice: ReferenceChoice | str = ReferenceChoice.AUTO,
    *,
    max_seconds: float = DEFAULT_SEARCH_SECONDS,
    seed: int = 0,
) -> Reference | None:
    """The reference a report compares against (see :class:`ReferenceChoice`)."""
    choice = ReferenceChoice(choice)
    if choice is ReferenceChoice.NONE:
        return None
    exact = choice is ReferenceChoice.ORACLE or (
        choice is ReferenceChoice.AUTO and scenario.mapping_space_size() <= AUTO_EXACT_MAX_MAPPINGS
    )
    if exact:
        t0 = time.perf_counter()
        res = solve(scenario, ranking=False)
        return Reference(ReferenceKind.ORACLE, res.best, res.e2e_ms, res.e2e_ms, time.perf_counter() - t0)
    return best_known(scenario, seed=seed, max_seconds=max_seconds)


class SimPlanner:
    """The model's noise-free predictions for one scenario (:class:`~hetsched.model.Planner`)."""

    def __init__(self, scenario: Scenario, choice: ReferenceChoice | str = ReferenceChoice.AUTO) -> None:
        self.scenario = scenario
        self.choice = ReferenceChoice(choice)
        self._sim = Simulator(scenario, noise=False)
        self._reference: Reference | None = None

    def infeasibility(self, mapping: Mapping) -> Infeasibility | None:
        """Static checks, then a noise-free simulation (FIFO deadlocks)."""
        return self._sim.infeasibility(mapping)

    def e2e_ms(self, mapping: Mapping) -> float | None:
        """Noise-free E2E (None when it cannot run)."""
        return self._sim.e2e(mapping)

    def reference(self) -> Reference:
        """The reference for the scenario (computed once; ``none`` falls back to ``auto``)."""
        if self._reference is None:
            choice = ReferenceChoice.AUTO if self.choice is ReferenceChoice.NONE else self.choice
            ref = reference(self.scenario, choice)
            assert ref is not None
            self._reference = ref
        return self._reference


__all__ = [
    "AUTO_EXACT_MAX_MAPPINGS",
    "ReferenceChoice",
    "SimPlanner",
    "best_known",
    "lower_bound_ms",
    "parse_reference_choice",
    "reference",
]

