"""What a run measured, mapping by mapping: the mapping to deploy, its spread over repeats, and
the measured noise that tells a real difference from luck. Part of the model package.

Every feasible execution of a run counts (its rounds and its what-if probes: both are real
executions on the run's executor). A mapping's figure is the **median** of its measured E2Es,
with their min and max; the **deploy** mapping is the one with the lowest median (ties: more
runs, then the first measured). On the simulator these are simulated figures; on a real executor
they are measurements, and they are what a user should deploy from, not a simulated reference.

The **measured noise** of a run is the median relative spread, (max - min) / median, of the
mappings measured at least twice: a difference between two mappings smaller than that band is
within what repeating one mapping already shows. :func:`settling` is the agentic policy's
stopping rule built on it (docs/agentic.md); given the model's ranking of mappings (predicted E2E,
lowest first), it also tries, before settling, the mappings the model ranks within the noise band
of its best prediction that never ran: on noisy hardware the model cannot tell them apart, only a
measurement can.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
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
MODEL_TRIES = 4
"""How many of the model's best-ranked mappings within the noise band of its best prediction must
have run before the run settles (those that never ran are tried once each, then repeated like any
mapping measured within the noise of the best)."""

Ranked = Sequence[tuple[Mapping, float]]
"""A model's ranking: (mapping, predicted E2E in ms), lowest prediction first, feasible mappings only."""


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
    trial: Mapping | None = None
    """Once exploring stopped and the best has its repeats: a mapping the model ranks within the
    noise band of its best prediction (among its ``MODEL_TRIES`` best) that never ran, to try before
    settling (it comes before the repeats of ``contender``); None when none is left or no ranking was given."""
    trial_ms: float | None = None
    """The model's predicted E2E of ``trial``, ms."""
    trial_rank: int = 0
    """``trial``'s place in the model's ranking (1: its best prediction)."""
    best_predicted_ms: float | None = None
    """The model's best prediction, ms (None without a ranking)."""
    trials_left: int = 0
    """Once exploring stopped: how many more of the model's mappings may be tried (``tries`` less the
    trials made since exploring stopped)."""

    @property
    def settled(self) -> bool:
        """Exploring stopped, the model's close mappings ran, and every mapping within the noise of
        the best is measured enough."""
        return self.best is not None and not self.exploring and self.contender is None and self.trial is None

    @property
    def next_mapping(self) -> Mapping | None:
        """Once exploring stopped: the mapping to run next (the trial, the contender, else the best)."""
        if self.exploring or self.best is None:
            return None
        if self.trial is not None:
            return self.trial
        return (self.contender or self.best).mapping

    def describe(self) -> str:
        """One line for a decision's rationale."""
        if self.best is None:
            return "nothing measured yet"
        head = (f"best measured {self.best.mapping.code()}: {self.best.describe()}; noise band "
                f"{100 * self.noise:.1f}%; {self.stale} new mappings in a row within it")
        if self.settled:
            return f"settled on the best measured mapping ({head})"
        if self.trial is not None:
            return (f"exploring stopped; trying {self.trial.code()}, the model's #{self.trial_rank} (predicted "
                    f"{self.trial_ms or 0.0:.1f} ms, within the noise band of its best "
                    f"{self.best_predicted_ms or 0.0:.1f} ms) before settling on a measurement ({head})")
        if self.contender is not None:
            return (f"exploring stopped; repeating {self.contender.mapping.code()} "
                    f"({len(self.contender.runs_ms)} runs) to tell it from the noise ({head})")
        return head


def settling(history: Sequence[RoundRecord], repeats: int = SETTLE_REPEATS, stale_after: int = STALE_AFTER,
             noise_floor: float = NOISE_FLOOR, ranked: Ranked | Callable[[], Ranked] | None = None,
             tries: int = MODEL_TRIES) -> Settling:
    """The agentic policy's stopping rule on a run's history (rounds and probes, in order).

    - **Noise**: the run's measured noise (:func:`measured_noise`: the median relative spread of the
      mappings run at least twice), at least ``noise_floor``.
    - **Exploring stops** once the last ``stale_after`` mappings (at least one per node of the
      workflow) measured for the first time were each no faster than the fastest execution
      before them by more than the noise band: what exploring finds is within what repeating one
      mapping already shows.
    - **Then it verifies**: the best measured mapping (:func:`deploy_choice`, lowest median) is
      repeated until it has ``repeats`` runs; then, given the model's ``ranked`` mappings (or a
      callable returning them, called only once exploring stopped), each of the model's ``tries``
      best-ranked mappings predicted within the noise band of its best prediction that never ran is
      tried once (best-ranked first), at most ``tries`` trials in all since exploring stopped (the
      ranking moves as the cards learn; the trials are the new mappings measured past the stale count,
      and one measuring faster than the noise band reopens exploring); then each mapping whose median
      lies within the noise band of the best's is repeated until it has ``repeats`` runs too (a faster one
      becomes the best).
    - **Settled** when nothing is left to try or repeat: the mapping to deploy is the best measured one.
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
    trial: tuple[Mapping, float, int] | None = None
    best_predicted: float | None = None
    trials_left = 0
    if best is not None and not exploring:
        if len(best.runs_ms) < repeats:
            contender = best
        else:
            trials_left = max(0, tries - (stale - stale_after))  # the new mappings past the stale count: trials
            if ranked is not None and trials_left:
                ranking = ranked() if callable(ranked) else ranked
                if ranking:
                    best_predicted = min(e2e for _, e2e in ranking)
                    close = [(m, e2e, i + 1) for i, (m, e2e) in enumerate(ranking)
                             if e2e <= best_predicted * (1.0 + noise)][:tries]
                    ran = {t.mapping for _, t in everything}
                    trial = next(((m, e2e, k) for m, e2e, k in close if m not in ran), None)
            band = best.median_ms * (1.0 + noise)
            short = [m for m in measured if m.mapping != best.mapping and m.median_ms <= band
                     and len(m.runs_ms) < repeats]
            contender = min(short, key=lambda m: len(m.runs_ms)) if short and trial is None else None
    if trial is None:
        return Settling(best, noise, stale, exploring, contender, best_predicted_ms=best_predicted,
                        trials_left=trials_left)
    return Settling(best, noise, stale, exploring, None, trial[0], trial[1], trial[2], best_predicted, trials_left)
