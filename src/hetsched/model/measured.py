"""What a run measured, mapping by mapping: the mapping to deploy, its spread over repeats, and
the measured noise that tells a real difference from luck. Part of the model package.

Every feasible execution of a run counts (its rounds and its what-if probes: both are real
executions on the run's executor). A mapping's figure is the **median** of its measured E2Es,
with their min and max; the **deploy** mapping is the one with the lowest median (ties: more
runs, then the first measured). On the simulator these are simulated figures; on a real executor
they are measurements, and they are what a user should deploy from, not a simulated reference.

The **measured noise** of a run is the median relative spread, (max - min) / median, of the
mappings measured at least twice: a difference between two mappings smaller than that band is
within what repeating one mapping already shows. :func:`settled` is the agentic policy's
stopping rule built on it (docs/agentic.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.model.history import RoundRecord
from hetsched.model.mapping import Mapping
from hetsched.model.trace import Trace


@dataclass(frozen=True)
class MeasuredMapping:
    """One mapping's feasible executions in a run."""

    mapping: Mapping
    """The mapping."""
    runs_ms: tuple[float, ...]
    """Its measured E2E in each feasible execution, in order, ms."""
    rounds: tuple[int, ...]
    """The round of each execution (a probe counts in the round it ran before)."""
    failed: int = 0
    """Executions of the mapping that did not run to completion (refused, failed, timed out)."""

    @property
    def median_ms(self) -> float:
        """Median measured E2E, ms."""
        return float(statistics.median(self.runs_ms))

    @property
    def min_ms(self) -> float:
        """Fastest execution, ms."""
        return min(self.runs_ms)

    @property
    def max_ms(self) -> float:
        """Slowest execution, ms."""
        return max(self.runs_ms)

    @property
    def spread(self) -> float | None:
        """(max - min) / median over its repeats; None with a single execution (no spread measured)."""
        if len(self.runs_ms) < 2 or self.median_ms <= 0:
            return None
        return (self.max_ms - self.min_ms) / self.median_ms

    def describe(self) -> str:
        """``median 101.2 ms over 4 runs (min 98.0, max 110.3, spread 12.0%)``."""
        n = len(self.runs_ms)
        failed = f"; {self.failed} execution(s) failed" if self.failed else ""
        if n == 1:
            return f"{self.median_ms:.1f} ms, measured once (no spread over repeats){failed}"
        spread = self.spread
        pct = "" if spread is None else f", spread {100 * spread:.1f}%"
        return (f"median {self.median_ms:.1f} ms over {n} runs (min {self.min_ms:.1f}, max {self.max_ms:.1f}{pct})"
                f"{failed}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: mapping, runs_ms, rounds, median_ms, min_ms, max_ms, spread."""
        return {"mapping": self.mapping.to_dict(), "runs_ms": list(self.runs_ms), "rounds": list(self.rounds),
                "median_ms": self.median_ms, "min_ms": self.min_ms, "max_ms": self.max_ms, "spread": self.spread,
                "failed": self.failed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MeasuredMapping:
        """Inverse of :meth:`to_dict` (the derived figures are recomputed)."""
        runs = tuple(float(x) for x in data["runs_ms"])
        rounds = tuple(int(x) for x in data.get("rounds", [-1] * len(runs)))
        if not runs or len(rounds) != len(runs):
            raise ValueError(f"a measured mapping needs one round per run, got {len(runs)} runs, {len(rounds)} rounds")
        return cls(Mapping(data["mapping"]), runs, rounds, int(data.get("failed", 0)))


def executions(history: Sequence[RoundRecord]) -> list[tuple[int, Trace]]:
    """Every execution of a run in order, ``(round, trace)``: each round's probes, then the round.
    A feasible trace that records some nodes but not all (a request that ran part of the workflow: a
    branch not taken) is left out: its E2E is not the workflow's (the monitor reads its nodes' times)."""
    out: list[tuple[int, Trace]] = []
    for r in history:
        out.extend((r.round, p.trace) for p in r.probes)
        out.append((r.round, r.trace))
    return [(n, t) for n, t in out if not (t.feasible and 0 < len(t.nodes) < len(t.mapping))]


def measured_mappings(runs: Iterable[tuple[int, Trace]]) -> list[MeasuredMapping]:
    """The feasible executions grouped by mapping, in the order each mapping was first measured, each
    with the count of its executions that failed."""
    times: dict[Mapping, list[float]] = {}
    rounds: dict[Mapping, list[int]] = {}
    failed: dict[Mapping, int] = {}
    for rnd, trace in runs:
        if not trace.feasible or trace.e2e_ms is None:
            failed[trace.mapping] = failed.get(trace.mapping, 0) + 1
            continue
        times.setdefault(trace.mapping, []).append(float(trace.e2e_ms))
        rounds.setdefault(trace.mapping, []).append(rnd)
    return [MeasuredMapping(m, tuple(t), tuple(rounds[m]), failed.get(m, 0)) for m, t in times.items()]


def deploy_choice(runs: Iterable[tuple[int, Trace]]) -> MeasuredMapping | None:
    """The mapping to deploy: among the mappings that never failed (all of them when each failed
    once), the lowest median measured E2E (ties: more runs, then the first measured); None when
    nothing ran to completion."""
    measured = measured_mappings(runs)
    if not measured:
        return None
    order = {m.mapping: i for i, m in enumerate(measured)}
    return min(measured, key=lambda m: (m.failed > 0, m.median_ms, -len(m.runs_ms), order[m.mapping]))


def measured_noise(measured: Iterable[MeasuredMapping]) -> float | None:
    """The run's measured noise: the median, over the mappings measured at least twice, of their
    relative spread (max - min) / median (one outlier run does not widen it for every mapping);
    None while no mapping has been repeated."""
    spreads = [s for s in (m.spread for m in measured) if s is not None]
    return float(statistics.median(spreads)) if spreads else None


SETTLE_REPEATS = 3
"""Executions a mapping needs before its place among the best counts as measured."""
STALE_AFTER = 4
"""New mappings in a row that must fail to beat the best so far by more than the noise band
before exploring stops: at least this many, and at least one per node of the workflow."""
NOISE_FLOOR = 0.02
"""The least noise band (share of the best's median): clocks and scheduling jitter are never zero."""


@dataclass(frozen=True)
class Settling:
    """Where a run stands on the agentic policy's stopping rule (:func:`settling`)."""

    best: MeasuredMapping | None
    """The best measured mapping (:func:`deploy_choice`), None before anything ran."""
    noise: float
    """The noise band, as a share of a median (the run's measured noise, at least the floor)."""
    stale: int
    """New mappings measured in a row, at the end of the run, none faster than the best so far by
    more than the noise band."""
    exploring: bool
    """True while exploring may still pay (fewer than ``stale_after`` stale new mappings)."""
    contender: MeasuredMapping | None
    """Once exploring stopped: the mapping to repeat next (the best while it has fewer than
    ``repeats`` runs, else a mapping within the noise band of the best with fewer than ``repeats``
    runs, fewest first); None when nothing needs repeating."""

    @property
    def settled(self) -> bool:
        """Exploring stopped and every mapping within the noise of the best is measured enough."""
        return self.best is not None and not self.exploring and self.contender is None

    def describe(self) -> str:
        """One line for a decision's rationale."""
        if self.best is None:
            return "nothing measured yet"
        head = (f"best measured {self.best.mapping.code()}: {self.best.describe()}; noise band "
                f"{100 * self.noise:.1f}%; {self.stale} new mappings in a row within it")
        if self.settled:
            return f"settled on the best measured mapping ({head})"
        if self.contender is not None:
            return (f"exploring stopped; repeating {self.contender.mapping.code()} "
                    f"({len(self.contender.runs_ms)} runs) to tell it from the noise ({head})")
        return head


def settling(history: Sequence[RoundRecord], repeats: int = SETTLE_REPEATS, stale_after: int = STALE_AFTER,
             noise_floor: float = NOISE_FLOOR) -> Settling:
    """The agentic policy's stopping rule on a run's history (rounds and probes, in order).

    - **Noise**: the run's measured noise (:func:`measured_noise`: the median relative spread of the
      mappings run at least twice), at least ``noise_floor``.
    - **Exploring stops** once the last ``stale_after`` mappings (at least one per node of the
      workflow) measured for the first time were each no faster than the fastest execution
      before them by more than the noise band: what exploring finds is within what repeating one
      mapping already shows.
    - **Then it verifies**: the best measured mapping (:func:`deploy_choice`, lowest median) is
      repeated until it has ``repeats`` runs, then each mapping whose median lies within the noise
      band of the best's, until it has ``repeats`` runs too (a faster one becomes the best).
    - **Settled** when nothing is left to repeat: the mapping to deploy is the best measured one.
    """
    everything = executions(history)
    runs = [(r, t) for r, t in everything if t.feasible and t.e2e_ms is not None]
    measured = measured_mappings(everything)
    best = deploy_choice(everything)
    if history:
        stale_after = max(stale_after, len(history[0].mapping))
    noise = max(measured_noise(measured) or 0.0, noise_floor)
    stale = 0
    fastest: float | None = None
    seen: set[Mapping] = set()
    for _, trace in runs:
        e2e = float(trace.e2e_ms or 0.0)
        if trace.mapping not in seen:
            seen.add(trace.mapping)
            if fastest is not None:
                stale = stale + 1 if e2e >= fastest * (1.0 - noise) else 0
        fastest = e2e if fastest is None else min(fastest, e2e)
    exploring = stale < stale_after
    contender: MeasuredMapping | None = None
    if best is not None and not exploring:
        if len(best.runs_ms) < repeats:
            contender = best
        else:
            band = best.median_ms * (1.0 + noise)
            short = [m for m in measured if m.mapping != best.mapping and m.median_ms <= band
                     and len(m.runs_ms) < repeats]
            contender = min(short, key=lambda m: len(m.runs_ms)) if short else None
    return Settling(best, noise, stale, exploring, contender)
