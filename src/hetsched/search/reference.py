"""References for reports, and the planner the loop hands policies: the model's noise-free view.

- :func:`reference`: the mapping a report compares against: the exact oracle
  (:mod:`hetsched.search.oracle`) when its search is estimated to fit the time budget, else a
  labelled best-known mapping from :func:`best_known` with a proven lower bound, or none.
- :func:`best_known`: the best mapping a race of iterated local searches from several starts
  (:func:`race`, :mod:`hetsched.search.local_search`) finds in the budget, and a lower bound on the optimum
  (:mod:`hetsched.search.lower_bound`), so the report can say how far from optimal it may be.
- :class:`SimPlanner`: the :class:`~hetsched.model.Planner` built on the noise-free simulator
  (feasibility including FIFO deadlocks, predicted E2E, the reference).

Runs never need any of this: the loop builds a planner, but nothing is solved unless a policy
or a report asks. Imports the model and the simulator's searches.
"""

from __future__ import annotations

import math
import time
from enum import StrEnum

from hetsched.model import (
    Infeasibility,
    InputError,
    Mapping,
    Placement,
    Reference,
    ReferenceKind,
    Scenario,
)
from hetsched.model.errors import ParameterError, UnknownValueError, did_you_mean
from hetsched.search.local_search import Evaluator, SearchResult, local_search, start_mappings
from hetsched.search.lower_bound import dual_bound_ms, lower_bound, root_bound_ms
from hetsched.search.oracle import SearchTooLong, solve
from hetsched.search.relaxation import available as relaxation_available
from hetsched.search.relaxation import relaxation_bound_ms
from hetsched.sim.engine import Simulator

DEFAULT_SEARCH_SECONDS = 10.0
"""Time budget of a reference by default (``--max-seconds``): the exact search must be estimated
to fit it, and the best-known search uses it all."""
AUTO_REFUSE_FACTOR = 10.0
"""``auto`` gives up on the exact search at once only when its estimate exceeds this multiple of
the budget; below it, the search runs until the budget ends (the estimate is often pessimistic:
the threshold keeps falling as the search finds better mappings), so a mapping the search can
prove optimal in the budget is reported as the oracle."""
BOUND_SHARE = 0.2
"""Share of a best-known budget spent raising the lower bound (the rest searches mappings)."""
RELAXATION_SHARE = 0.5
"""Share of the lower bound's time given to the relaxation (:mod:`hetsched.search.relaxation`)
when OR-Tools is installed; the best-first bound search has the rest."""
EVALS_PER_SECOND = 5000
"""Simulations a ``max_evals`` budget counts as one second when it shares the budget with the lower
bound (about what one idle core simulates a second at 50 nodes): ``max_evals=50_000`` gives the
relaxation the deterministic time the default 10 s budget gives it."""
RACE_TRAJECTORIES = 4
"""Trajectories the best-known search races (iterated local searches from its best distinct starts)."""
RACE_SHARE = 0.4
"""Share of the best-known search's budget its race's first round splits among the trajectories; the best
trajectory then goes on with the rest."""
BOUND_PROBE_SHARE = 0.125
"""Share of the best-first bound search's time (or expansions) it gets first, as a probe, before the race: it
gets the rest of its share at the end only when its progress over the bound of the empty mapping, extrapolated
linearly to its whole share, would pass the relaxation's and the Lagrangian bounds; otherwise its share goes to
the search. At 50 nodes the bound search raised the empty mapping's bound by under 1% in 2 s on seven fresh
workflows, 16-55% below the relaxation's, so its share bought nothing; at 20 nodes it can pass it."""
MIN_RELAXATION_SECONDS = 0.1
"""Least time budget the relaxation is given: building its model alone takes 0.05-0.1 s at 50-100 nodes, so
a time budget whose share is below this skips it, and the Lagrangian bound (0.1-0.2 s at 50 nodes) with it: the
lower bound is then the bound search's, at least the empty mapping's."""
_TARGET_TOLERANCE = 1e-9
RACE_STEPS_PER_SIMULATION = 0.25
"""With ``max_evals``, the race's trajectories take at most this many search steps (bounded neighbourhoods) per
simulation of their budget, so the budget holds in time too: a step bounds a whole neighbourhood, and on 20-node
diamonds most of a converged search's neighbours are known, so its steps (two per simulation allowed before)
took 60 s of CPU for 20,000 simulations (1.5 s at 50 nodes, where a step simulates ~20: it never binds there)."""
EVALS_WALL_FACTOR = 25.0
"""With ``max_evals`` (no time budget), the relaxation's wall-clock cap is this many times its deterministic solver
time, so its bound, and with it the result, is the same for a seed on every machine unless a process gets under
1/25 of a core: the relaxation's default cap (four times) bound at a load of 15-20 on two cores, and two identical
calls gave lower bounds 163 and 179 ms."""
NO_RELAXATION_NOTE = "without the relaxation bound: pip install 'hetsched[search]'"
"""What a best-known label adds when OR-Tools is missing (its bound is then the weaker one)."""


class ReferenceChoice(StrEnum):
    """What ``--reference`` asks for."""

    AUTO = "auto"
    """The oracle when its search is estimated to fit the time budget, else best-known."""
    ORACLE = "oracle"
    """The exact oracle (an error when it would not fit the time budget)."""
    BEST_KNOWN = "best-known"
    """The best-known search with a lower bound, even when the oracle would be affordable."""
    NONE = "none"
    """No reference (nothing is solved)."""


def parse_reference_choice(text: str) -> ReferenceChoice:
    """``auto``, ``oracle``, ``best-known`` or ``none`` (clear error otherwise)."""
    try:
        return ReferenceChoice(text.strip().lower())
    except ValueError:
        accepted = ", ".join(c.value for c in ReferenceChoice)
        raise UnknownValueError("reference", f"{text!r}: unknown value; accepted: {accepted}"
                                + did_you_mean(text, [c.value for c in ReferenceChoice])) from None


def check_max_seconds(value: float | None, param: str = "max_seconds") -> float | None:
    """A positive time budget or None (clear error otherwise, naming ``param``)."""
    if value is not None and not value > 0:
        raise ParameterError(param, f"must be > 0 seconds, got {value}")
    return value


def lower_bound_ms(scenario: Scenario) -> float:
    """A lower bound on the E2E of every feasible mapping under the model, without search: the
    larger of the bound of the empty mapping (critical path, device work, VRAM x time) and the
    Lagrangian bound that sees the VRAM budget (:func:`~hetsched.search.lower_bound.dual_bound_ms`)."""
    return max(root_bound_ms(scenario), dual_bound_ms(scenario))


def _codes(scenario: Scenario, mapping: Mapping) -> tuple[int, ...]:
    return tuple(mapping[n].code for n in scenario.workflow.node_ids)


def _mapping(scenario: Scenario, codes: tuple[int, ...]) -> Mapping:
    return Mapping(zip(scenario.workflow.node_ids, (Placement.of_code(c) for c in codes), strict=True))


def race(
    scenario: Scenario,
    ev: Evaluator,
    starts: list[tuple[int, ...]],
    *,
    seed: int,
    max_seconds: float | None,
    max_evals: int | None,
    lower_ms: float | None = None,
) -> SearchResult:
    """Iterated local searches from the ``RACE_TRAJECTORIES`` best distinct starts (the best start again
    with other seeds when there are fewer), each given ``RACE_SHARE / RACE_TRAJECTORIES`` of the budget;
    then the best of them goes on from its best mapping with the rest.

    A single search's result depends on the basin its first descent falls into: on a 50-node layered
    workflow the best start's basin stayed 5% above what the same search found from another start
    within a tenth of the budget. Never worse than the best start (each trajectory is never worse
    than its origin); the same result for a seed with ``max_evals`` alone. With ``lower_ms`` (a proven lower
    bound) the race ends as soon as a mapping reaches it (within float tolerance): nothing better exists. On
    20-node chains and diamonds the relaxation's bound is tight, and the trajectories spent 30-60 s of CPU
    on 20,000 simulations bounding moves around the optimum they had found."""
    target = None if lower_ms is None else lower_ms * (1 + _TARGET_TOLERANCE)
    t0, ev0 = time.perf_counter(), ev.evaluations
    known = {s: ev(s) for s in starts}
    ranked = sorted((e, s) for s, e in known.items() if e < math.inf)
    origins = [s for _, s in ranked[:RACE_TRAJECTORIES]]
    origins += [origins[0]] * (RACE_TRAJECTORIES - len(origins))
    share = RACE_SHARE / len(origins)

    def trajectory(seed: int, origin: tuple[int, ...], seconds: float | None, evals: int | None) -> SearchResult:
        return local_search(scenario, seed=seed, origin=origin, evaluator=ev,
                            max_seconds=None if max_seconds is None else seconds,
                            max_evals=None if max_evals is None else max(1, evals or 0), target_ms=target,
                            max_steps=None if evals is None else int(RACE_STEPS_PER_SIMULATION * evals) + 20)

    runs: list[SearchResult] = []
    for j, o in enumerate(origins):
        runs.append(trajectory(seed + j, o, None if max_seconds is None else share * max_seconds,
                               None if max_evals is None else int(share * max_evals)))
        if target is not None and runs[-1].e2e_ms <= target:
            return runs[-1]
    win = min(range(len(runs)), key=lambda j: (runs[j].e2e_ms, runs[j].codes))
    left_s = None if max_seconds is None else max(0.0, max_seconds - (time.perf_counter() - t0))
    left_e = None if max_evals is None else max_evals - (ev.evaluations - ev0)
    if left_e is None or left_e > 0:
        runs.append(trajectory(seed + len(origins) + win, runs[win].codes, left_s, left_e))
    return min(runs, key=lambda r: (r.e2e_ms, r.codes))


def best_known(
    scenario: Scenario,
    *,
    seed: int = 0,
    max_seconds: float | None = DEFAULT_SEARCH_SECONDS,
    max_evals: int | None = None,
    start: Mapping | None = None,
    prove: bool = False,
) -> Reference:
    """The best mapping a seeded race of iterated local searches finds (:func:`race`), and a lower bound
    on the optimum.

    Spends ``1 - BOUND_SHARE`` of ``max_seconds`` searching mappings and the rest raising the lower bound
    (which may find a better mapping too; the best-first bound search's share goes to the search when its
    probe shows it cannot pass the other bounds: ``BOUND_PROBE_SHARE``). With ``max_evals`` the budget is
    ``max_evals`` simulations for the search, ``max(4, max_evals // 100)`` expanded batches for the bound and
    deterministic solver time for the relaxation as if the budget were ``max_evals / EVALS_PER_SECOND``
    seconds, so the result is the same for a seed on every machine (unless the relaxation's wall-clock cap,
    ``EVALS_WALL_FACTOR`` times its solver time, binds on an overloaded one: its bound, and the race's stop when
    a mapping reaches the bound, then differ). The lower bound is the largest of the bound search's, the Lagrangian
    bound and, with OR-Tools installed, the relaxation's (:mod:`hetsched.search.relaxation`, given
    ``RELAXATION_SHARE`` of the bound's time first); without OR-Tools the label says so. With ``prove``, a
    mapping the bound search proves optimal comes back as the ``oracle`` (``auto`` asks for that).
    """
    t0 = time.perf_counter()
    if max_seconds is None and max_evals is None:
        raise InputError("best_known needs max_seconds or max_evals")

    def left() -> float | None:
        return None if max_seconds is None else max(0.0, max_seconds - (time.perf_counter() - t0))

    ev = Evaluator(scenario)
    starts = [] if start is None else [_codes(scenario, scenario.validate_mapping(start))]
    # a short search for an upper bound, then the relaxation: its bound, and its solution as a start
    # (its limit is deterministic solver time, so with max_evals the result is the same everywhere)
    bound_share = BOUND_SHARE * (max_seconds if max_seconds is not None else (max_evals or 0) / EVALS_PER_SECOND)
    first = local_search(scenario, seed=seed, max_evals=30 + 3 * len(scenario.workflow.nodes), starts=starts,
                         evaluator=ev, max_seconds=None if max_seconds is None else 0.1 * max_seconds)
    starts.append(first.codes)
    relax_s = RELAXATION_SHARE * bound_share
    relaxed = None
    if max_seconds is None:
        relax_s = max(0.2, relax_s)
    if max_seconds is None or relax_s >= MIN_RELAXATION_SECONDS:
        relaxed = relaxation_bound_ms(scenario, first.e2e_ms, max_seconds=relax_s,
                                      wall_seconds=EVALS_WALL_FACTOR * relax_s if max_seconds is None else relax_s)
    if relaxed is not None and relaxed.codes is not None:
        starts.append(relaxed.codes)
    # the best-first bound search's probe: does its share buy anything beside the relaxation?
    # (the Lagrangian bound costs 0.1-0.2 s at 50 nodes: a time budget too small for the relaxation skips it too)
    dual_ms = dual_bound_ms(scenario) if max_seconds is None or relax_s >= MIN_RELAXATION_SECONDS else 0.0
    known_lower = max(dual_ms, 0.0 if relaxed is None else relaxed.lower_ms)
    expansions = None if max_evals is None else max(4, max_evals // 100)
    bf_s = None if max_seconds is None else bound_share
    upper = min(ev(s) for s in starts) if starts else math.inf
    probe = lower_bound(scenario, upper, evaluator=ev,
                        max_seconds=None if bf_s is None else BOUND_PROBE_SHARE * bf_s,
                        max_expansions=None if expansions is None else max(1, round(BOUND_PROBE_SHARE * expansions)))
    promising = not probe.optimal and (
        probe.root_ms + (probe.lower_ms - probe.root_ms) / BOUND_PROBE_SHARE > known_lower)
    # what the end keeps: the bound search's rest when it is promising, else the relaxation's second round
    # when its limit stopped it (it may then prove more with the search's better upper bound), else nothing
    if promising:
        keep_s = None if bf_s is None else (1 - BOUND_PROBE_SHARE) * bf_s
    elif relaxed is not None and not relaxed.optimal:
        keep_s = relax_s
    else:
        keep_s = 0.0
    search_s = None if max_seconds is None else max(0.0, (left() or 0.0) - (keep_s or 0.0))
    found = race(scenario, ev, [*starts, *start_mappings(scenario, ev)], seed=seed, max_seconds=search_s,
                 max_evals=max_evals, lower_ms=max(known_lower, probe.lower_ms))
    if relaxed is not None and not relaxed.optimal and found.e2e_ms < first.e2e_ms:
        # stopped by its limit: again with the better upper bound (a smaller T to prove), half the rest
        # (all of it when the bound search is not to run)
        rest = left()
        again_s = max(0.2, 0.5 * relax_s) if rest is None else (0.5 if promising else 1.0) * rest
        if rest is None or again_s >= MIN_RELAXATION_SECONDS:
            again = relaxation_bound_ms(scenario, found.e2e_ms, max_seconds=again_s,
                                        wall_seconds=EVALS_WALL_FACTOR * again_s if rest is None else again_s)
            if again is not None and again.lower_ms > relaxed.lower_ms:
                relaxed = again
    proved = probe
    if promising:
        proved = lower_bound(scenario, found.e2e_ms, max_seconds=left(), max_expansions=expansions, evaluator=ev)
    codes, e2e = found.codes, found.e2e_ms
    for bound in (probe, proved):
        if bound.best is not None and bound.upper_ms < e2e:
            codes, e2e = bound.best, bound.upper_ms
    lower = min(e2e, max(probe.lower_ms, proved.lower_ms, known_lower,
                         0.0 if relaxed is None else relaxed.lower_ms))
    optimal = proved.optimal or probe.optimal
    kind = ReferenceKind.ORACLE if prove and (optimal or lower >= e2e) else ReferenceKind.BEST_KNOWN
    note = "" if kind is ReferenceKind.ORACLE or relaxed is not None or relaxation_available() else NO_RELAXATION_NOTE
    return Reference(kind, _mapping(scenario, codes), e2e, lower, time.perf_counter() - t0, bound_note=note)


def reference(
    scenario: Scenario,
    choice: ReferenceChoice | str = ReferenceChoice.AUTO,
    *,
    max_seconds: float | None = DEFAULT_SEARCH_SECONDS,
    seed: int = 0,
    max_evals: int | None = None,
    workers: int | None = None,
) -> Reference | None:
    """The reference a report compares against (see :class:`ReferenceChoice`).

    Args:
        scenario: the scenario.
        choice: auto, oracle, best-known or none.
        max_seconds: time budget. ``oracle`` raises :class:`~hetsched.search.oracle.SearchTooLong`
            when the exact search is estimated (or found) to need more (None: no limit);
            ``auto`` then falls back to best-known, starting from the best mapping the exact
            search had seen, with the time left (at least a quarter of the budget);
            ``best-known`` uses it all. With ``max_evals`` and no ``max_seconds``, ``auto``
            still gives the exact search ``DEFAULT_SEARCH_SECONDS``.
        seed: seeds the searches.
        max_evals: best-known budget in simulations instead of seconds (machine-independent).
        workers: processes for the exact search (default: the CPUs available).
    """
    choice = ReferenceChoice(choice)
    check_max_seconds(max_seconds)
    if choice is ReferenceChoice.NONE:
        return None
    if scenario.workload is not None:
        return load_reference(scenario, choice, seed=seed)
    if choice is ReferenceChoice.BEST_KNOWN:
        return best_known(scenario, seed=seed, max_seconds=max_seconds, max_evals=max_evals)
    t0 = time.perf_counter()
    exact_s = max_seconds if max_seconds is not None or choice is ReferenceChoice.ORACLE else DEFAULT_SEARCH_SECONDS
    try:
        factor = AUTO_REFUSE_FACTOR if choice is ReferenceChoice.AUTO else 1.0
        res = solve(scenario, max_seconds=exact_s, workers=workers, seed=seed, refuse_factor=factor)
    except SearchTooLong as exc:
        if choice is ReferenceChoice.ORACLE:
            raise
        left = None if max_seconds is None else max(0.25 * max_seconds, max_seconds - (time.perf_counter() - t0))
        start = None if exc.best is None else exc.best[1]
        return best_known(scenario, seed=seed, max_seconds=left, max_evals=max_evals, start=start, prove=True)
    return Reference(ReferenceKind.ORACLE, res.best, res.e2e_ms, res.e2e_ms, time.perf_counter() - t0)


def load_reference(scenario: Scenario, choice: ReferenceChoice | str = ReferenceChoice.AUTO, *,
                   seed: int = 0) -> Reference | None:
    """Under the scenario's workload, the reference is the loaded optimum (the lowest noise-free
    window p95, :func:`hetsched.search.load.load_optimum`), so a run's rounds (each a window's
    p95) are compared with a window too: the oracle when every mapping was enumerated, else a
    best-known mapping (no lower bound is known under load). ``oracle`` on a space too large to
    enumerate is an error naming the alternative."""
    from hetsched.search.load import EXHAUSTIVE_MAX, load_optimum

    choice = ReferenceChoice(choice)
    workload = scenario.workload
    if workload is None:
        raise InputError("load_reference needs a scenario with a workload")
    t0 = time.perf_counter()
    found = load_optimum(scenario, workload, seed=seed)
    if found is None:
        return None
    if choice is ReferenceChoice.ORACLE and not found.exact:
        raise InputError(f"reference oracle under load: the scenario has more than {EXHAUSTIVE_MAX:,} mappings to "
                         "simulate as windows; ask for best-known (a local search under load) or auto")
    exact = found.exact and choice is not ReferenceChoice.BEST_KNOWN
    return Reference(ReferenceKind.ORACLE if exact else ReferenceKind.BEST_KNOWN, found.mapping, found.value,
                     found.value if exact else None, time.perf_counter() - t0)


class SimPlanner:
    """The model's noise-free predictions for one scenario (:class:`~hetsched.model.Planner`)."""

    def __init__(
        self,
        scenario: Scenario,
        choice: ReferenceChoice | str = ReferenceChoice.AUTO,
        *,
        max_seconds: float | None = DEFAULT_SEARCH_SECONDS,
        seed: int = 0,
    ) -> None:
        self.scenario = scenario
        self.choice = ReferenceChoice(choice)
        self.max_seconds = check_max_seconds(max_seconds)
        self.seed = seed
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
            ref = reference(self.scenario, choice, max_seconds=self.max_seconds, seed=self.seed)
            assert ref is not None
            self._reference = ref
        return self._reference


__all__ = [
    "AUTO_REFUSE_FACTOR",
    "BOUND_PROBE_SHARE",
    "BOUND_SHARE",
    "DEFAULT_SEARCH_SECONDS",
    "EVALS_PER_SECOND",
    "MIN_RELAXATION_SECONDS",
    "NO_RELAXATION_NOTE",
    "RACE_SHARE",
    "RACE_STEPS_PER_SIMULATION",
    "RACE_TRAJECTORIES",
    "RELAXATION_SHARE",
    "ReferenceChoice",
    "SimPlanner",
    "best_known",
    "check_max_seconds",
    "lower_bound_ms",
    "parse_reference_choice",
    "race",
    "reference",
]
