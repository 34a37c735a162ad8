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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from hetsched.model import (
    Infeasibility,
    InputError,
    Mapping,
    Mode,
    Placement,
    Reference,
    ReferenceKind,
    Scenario,
)
from hetsched.model.contention import Timings, simulate, simulate_e2e
from hetsched.model.descent import local_search as descent_search
from hetsched.model.descent import resume
from hetsched.model.errors import ParameterError, UnknownValueError, did_you_mean
from hetsched.search.bounds import BoundModel
from hetsched.search.local_search import Evaluator, SearchResult, local_search, start_mappings
from hetsched.search.lower_bound import dual_bound_ms, lower_bound, root_bound_ms
from hetsched.search.oracle import SearchTooLong, pool_context, process_count, solve
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
"""Trajectories the best-known search races per lane (iterated local searches from its best distinct starts): the
first round has this many times the lanes, each with ``RACE_SHARE / RACE_TRAJECTORIES`` of a lane's budget."""
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
RACE_EXCHANGE = False
"""Whether the race's trajectories draw exchange kicks on three-way workflows (``local_search``'s ``exchange``:
a few GPU nodes to the CPU and several CPU nodes onto the GPU, or the other way round). Off: measured at 40,000
simulations x 2 lanes on seven 50-tool three-way workflows (tuning seeds 140-141), on it was better on four (by
0.02-0.4%), equal on one and worse on two (fan-out s141 by 2.2%: another basin), so the race is as before."""
RACE_SCREENED_LANES = 2
"""Lanes of a race with two or more (the last ones: with two, both) whose continuation from the first round's best
runs the ``rules`` decider's search on the exact model instead of the iterated local search
(:mod:`hetsched.model.descent`: descents that try only the moves of the current run's critical chain and what
shared its devices, a kick after every descent), on three-way workflows of ``RACE_SCREENED_MIN_NODES`` nodes or
more. The plain ILS kicks after ``PATIENCE`` windows without improvement, about 20 kicks in 16,000 simulations at
50 tools; the screened search kicks after every short descent, and from the same origin with the same simulations
it ended lower in 7 of 10 seed-matched continuations on 50-tool three-way tuning workflows (fan-out by up to 1.7%,
where a 240,000-simulation ILS needed 82,000 simulations to pass the plain continuation). With both lanes screened
(2) the race was better than with none (0) on 5 of 9 tuning workflows and worse on 2 (by 0.06-0.23%), on 8 unseen
ones better on 4 and worse on 1 (by 0.10%; BENCHMARKS.md, "Both continuations screened"); one screened lane of
two (1) had been better on 6 of 12 and worse on 3 (by up to 1.4%). One lane, binary workflows and smaller ones: the
plain race whatever it says."""
RACE_SCREENED_MIN_NODES = 40
"""Fewest nodes of a three-way workflow whose race has screened lanes (``RACE_SCREENED_LANES``): a workflow *at
scale* (:func:`_at_scale`), where the best-first bound search is skipped (``BOUND_SEARCH_AT_SCALE``)."""
BOUND_SEARCH_AT_SCALE = False
"""Whether the best-first bound search runs (its probe, ``BOUND_PROBE_SHARE``) at scale. Off: at 50 tools it
raised the empty mapping's bound by under 1% in 2 s on seven fresh workflows, 16-55% below the relaxation's, and
its probe took 0.3 s of a 10 s budget that the race has instead. The lower bound is then the empty mapping's,
the Lagrangian bound's or the relaxation's, whichever is largest (a bound all the same: never above the optimum)."""
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
RELAXATION_WALL_SHARE = 0.25
"""With a time budget, the relaxation's wall-clock cap is this share of what is left of the budget (at least its
solver time, at most ``EVALS_WALL_FACTOR`` times it). Its limits are deterministic solver time, its probes included,
so a machine that gives it half a core proves the bound a quiet one does (1.2 s of CPU at 50 tools for most workflows
with the default budget) unless the cap binds; its cap was its 1 s share, which ended it before its probes even on
a quiet machine. The cap keeps the search's share on a very loaded one (at a load of 11 on two cores, half of the
budget left, 5 s, let it take 5.5 s of a 10 s budget and the search's mapping came out 1.4% worse). The repeat
after the search gets what is left of twice the share once the first call is done, so the search keeps its time
unless the first call takes more than that. The wall-clock cap stays needed: on some models CP-SAT's deterministic
time hardly moves while it works (0.12 deterministic s in 47 s of CPU on a fixed 11-node layered mapping)."""
MIN_PARALLEL_SECONDS = 1.0
"""Least budget (seconds, or ``max_evals / EVALS_PER_SECOND``) for which a race starts worker processes: below it
starting them would cost a noticeable share (the result does not depend on it)."""
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


@dataclass(frozen=True)
class _Leg:
    """One trajectory of a race: its seed, origin and budget (``deadline``: a ``time.perf_counter`` value, the
    same clock in every process on Linux and macOS; ``evals``: simulations of its own), and what its evaluator
    knows beyond the race's starts."""

    seed: int
    origin: tuple[int, ...]
    deadline: float | None
    evals: int | None
    known: tuple[tuple[tuple[int, ...], float], ...] = ()
    screened: bool = False


class _Trajectories:
    """Runs a race's trajectories, each on an evaluator of its own that knows only the race's starts (and its
    leg's ``known``): a trajectory's result depends on its leg alone, never on the process that runs it or on
    what the other trajectories simulated, so a race's result is the same with any number of processes."""

    def __init__(self, scenario: Scenario, bounds: BoundModel, known: dict[tuple[int, ...], float],
                 starts: list[tuple[int, ...]], target: float | None) -> None:
        self.scenario, self.bounds, self.target = scenario, bounds, target
        self.known, self.starts = known, starts

    def __call__(self, leg: _Leg) -> SearchResult:
        if leg.screened:
            return self._screened(leg)
        ev = Evaluator(self.scenario, self.bounds)
        ev.learn(self.known.items())
        ev.learn(leg.known)
        ev.starts = list(self.starts)
        seconds = None if leg.deadline is None else max(0.0, leg.deadline - time.perf_counter())
        return local_search(self.scenario, seed=leg.seed, origin=leg.origin, evaluator=ev, max_seconds=seconds,
                            max_evals=None if leg.evals is None else max(1, leg.evals), target_ms=self.target,
                            max_steps=None if leg.evals is None else int(RACE_STEPS_PER_SIMULATION * leg.evals) + 20,
                            exchange=RACE_EXCHANGE)


    def _screened(self, leg: _Leg) -> SearchResult:
        """A screened lane's leg: the ``rules`` decider's search (:mod:`hetsched.model.descent`) on the exact model
        from the leg's origin, its kicks and screened descents until ``leg.evals`` simulations (estimates and the
        descents' timings) are spent."""
        sc, t0 = self.scenario, time.perf_counter()
        est = _ExactEstimates(sc)
        allowed = [tuple(p.code for p in sc.allowed(n)) for n in sc.workflow.node_ids]
        first = descent_search(est, [leg.origin], allowed, max_evaluations=1, seed=leg.seed, screen=True)
        more = _SCREENED_UNBOUNDED if leg.evals is None else max(0, leg.evals - est.evaluations)
        found = resume(first, more, leg.seed, deadline=leg.deadline)
        return SearchResult(found.best, found.e2e_ms, est.evaluations, time.perf_counter() - t0,
                            ((found.e2e_ms, found.best),), False)


_SCREENED_UNBOUNDED = 1 << 40
"""A screened leg's simulations with a time budget alone (its deadline ends it)."""


class _ExactEstimates:
    """The exact model as the ``rules`` decider's search reads an estimator (:class:`hetsched.model.descent.Estimates`):
    noise-free simulations of the compiled scenario (the machine's own interference), counted."""

    def __init__(self, scenario: Scenario) -> None:
        c = self.compiled = scenario.compiled
        self.budget, self.cpu_ms, self.gpu_ms = c.budget, c.cpu_ms, c.gpu_ms
        self.evaluations = 0

    def static_ok(self, place: Sequence[int]) -> bool:
        return self.compiled.static_ok(tuple(place))

    def e2e(self, place: Sequence[int]) -> float:
        self.evaluations += 1
        return simulate_e2e(self.compiled, place) if self.static_ok(place) else math.inf

    def timings(self, place: Sequence[int]) -> Timings | None:
        self.evaluations += 1
        if not self.static_ok(place):
            return None
        out = simulate(self.compiled, place, timings=True)
        return None if out.deadlock else out


_RACE: dict[str, _Trajectories] = {}
"""A race's worker process: what runs its legs (set once by :func:`_race_init`)."""


def _race_init(run: _Trajectories) -> None:
    _RACE["run"] = run


def _race_leg(leg: _Leg) -> SearchResult:
    return _RACE["run"](leg)


def _at_scale(scenario: Scenario) -> bool:
    """A three-way workflow of ``RACE_SCREENED_MIN_NODES`` nodes or more: where the race's continuations are
    screened and the bound search is skipped (the relaxation's bound is the one that counts there)."""
    return scenario.mode is Mode.THREE_WAY and len(scenario.workflow.nodes) >= RACE_SCREENED_MIN_NODES


def race_processes(workers: int | None, max_seconds: float | None, max_evals: int | None) -> int:
    """Processes a race uses: :func:`~hetsched.search.oracle.process_count` (the CPUs, one in a worker
    process), one when the budget is too small to pay for starting them (``MIN_PARALLEL_SECONDS``)."""
    seconds = max_seconds if max_seconds is not None else (max_evals or 0) / EVALS_PER_SECOND
    return 1 if seconds < MIN_PARALLEL_SECONDS else process_count(workers)


def race(
    scenario: Scenario,
    ev: Evaluator,
    starts: list[tuple[int, ...]],
    *,
    seed: int,
    max_seconds: float | None,
    max_evals: int | None,
    lower_ms: float | None = None,
    workers: int | None = None,
    lanes: int | None = None,
) -> SearchResult:
    """Iterated local searches from the ``RACE_TRAJECTORIES`` best distinct starts per lane (the best start
    again with other seeds when there are fewer), each given ``RACE_SHARE / RACE_TRAJECTORIES`` of a lane's
    budget; then the best of them goes on from its best mapping with the rest, in every lane.

    A single search's result depends on the basin its first descent falls into: on a 50-node layered
    workflow the best start's basin stayed 5% above what the same search found from another start
    within a tenth of the budget. Never worse than the best start (each trajectory is never worse
    than its origin). With ``lower_ms`` (a proven lower bound) the race ends as soon as a mapping reaches it
    (within float tolerance): nothing better exists. On 20-node chains and diamonds the relaxation's bound is
    tight, and the trajectories spent 30-60 s of CPU on 20,000 simulations bounding moves around the optimum
    they had found.

    Each trajectory simulates on an evaluator of its own (:class:`_Trajectories`), so they can run in
    ``workers`` processes (:func:`race_processes`: by default the CPUs, one inside a worker process); the
    processes only make the result come sooner. What they search is set by ``lanes``, the trajectories that
    search side by side (with ``max_seconds``: the processes; with ``max_evals``: 1 unless given, so the result
    is the same for a seed on every machine): the first round has ``RACE_TRAJECTORIES`` trajectories per
    lane (the best distinct starts, then the best start again with other seeds), each given a tenth of a
    lane's budget, four rounds side by side, then the best one goes on in every lane, with other seeds. So
    more lanes buy more basins as well as more search from the best (with ``max(RACE_TRAJECTORIES, lanes)``
    trajectories of a fifth of a lane's budget each on two lanes, the race was behind a 240,000-simulation
    iterated local search by 1.6% on a 50-tool layered workflow where every short trajectory's first descent
    had fallen in a worse basin). A lane's budget is ``max_seconds`` of wall time, or ``max_evals`` simulations
    (``lanes`` times ``max_evals`` in all). The result's ``evaluations`` are the race's simulations in all
    processes. With ``RACE_SCREENED_LANES`` (2: with two lanes, both), two lanes or more and a three-way workflow of
    ``RACE_SCREENED_MIN_NODES`` nodes or more, the last lanes' continuations are the ``rules`` decider's screened
    search on the exact model instead (:meth:`_Trajectories._screened`), with the same budget."""
    target = None if lower_ms is None else lower_ms * (1 + _TARGET_TOLERANCE)
    t0, ev0 = time.perf_counter(), ev.evaluations
    known = {s: ev(s) for s in starts}
    ranked = sorted((e, s) for s, e in known.items() if e < math.inf)
    procs = race_processes(workers, max_seconds, max_evals)
    width = max(1, procs if max_seconds is not None else lanes or 1)
    origins = [s for _, s in ranked[:RACE_TRAJECTORIES * width]]
    origins += [origins[0]] * (RACE_TRAJECTORIES * width - len(origins))  # the best start again to four rounds
    run = _Trajectories(scenario, ev.bounds, known, start_mappings(scenario, ev), target)
    screened_lanes = RACE_SCREENED_LANES if _at_scale(scenario) else 0
    # each leg has a RACE_TRAJECTORIES-th of the first round's share, however many rounds there are
    legs = [_Leg(seed + j, o,
                 None if max_seconds is None
                 else t0 + (j // width + 1) * RACE_SHARE * max_seconds / RACE_TRAJECTORIES,
                 None if max_evals is None else int(RACE_SHARE * max_evals / RACE_TRAJECTORIES))
            for j, o in enumerate(origins)]
    pool = None
    try:
        if procs > 1:
            pool = pool_context().Pool(min(procs, len(legs)), initializer=_race_init, initargs=(run,))
        runs: list[SearchResult] = []
        for r in map(run, legs) if pool is None else pool.imap(_race_leg, legs):
            runs.append(r)
            if target is not None and r.e2e_ms <= target:  # the first in order, whatever the processes
                return replace(r, evaluations=ev.evaluations - ev0 + sum(x.evaluations for x in runs))
        win = min(range(len(runs)), key=lambda j: (runs[j].e2e_ms, runs[j].codes))
        used = ev.evaluations - ev0 + sum(r.evaluations for r in runs)
        left_e = None if max_evals is None else max_evals - -(-used // width)
        if left_e is None or left_e > 0:
            best = ((runs[win].codes, runs[win].e2e_ms),)
            deadline = None if max_seconds is None else t0 + max_seconds
            more = [_Leg(seed + RACE_TRAJECTORIES * width + win + 101 * k, runs[win].codes, deadline, left_e, best,
                         screened=width > 1 and k >= width - screened_lanes)
                    for k in range(width)]
            runs += map(run, more) if pool is None or len(more) == 1 else pool.map(_race_leg, more)
        return replace(min(runs, key=lambda r: (r.e2e_ms, r.codes)),
                       evaluations=ev.evaluations - ev0 + sum(x.evaluations for x in runs))
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


def best_known(
    scenario: Scenario,
    *,
    seed: int = 0,
    max_seconds: float | None = DEFAULT_SEARCH_SECONDS,
    max_evals: int | None = None,
    start: Mapping | None = None,
    prove: bool = False,
    workers: int | None = None,
    lanes: int | None = None,
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
    mapping the bound search proves optimal comes back as the ``oracle`` (``auto`` asks for that). ``workers``:
    processes for the race (:func:`race`; by default the CPUs available, one inside a worker process): with
    ``max_evals`` alone the result does not depend on them; with ``max_seconds`` they search side by side.
    ``lanes`` (with ``max_evals``): search as ``lanes`` processes would, each with ``max_evals`` simulations
    (:func:`race`), the same result for a seed with any number of processes: what a machine with that many
    idle cores does in ``max_evals / EVALS_PER_SECOND`` seconds.
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
                                      wall_seconds=_relaxation_wall(relax_s, left()))
    if relaxed is not None and relaxed.codes is not None:
        starts.append(relaxed.codes)
    # the best-first bound search's probe: does its share buy anything beside the relaxation?
    # (the Lagrangian bound costs 0.1-0.2 s at 50 nodes: a time budget too small for the relaxation skips it too)
    dual_ms = dual_bound_ms(scenario) if max_seconds is None or relax_s >= MIN_RELAXATION_SECONDS else 0.0
    known_lower = max(dual_ms, 0.0 if relaxed is None else relaxed.lower_ms)
    expansions = None if max_evals is None else max(4, max_evals // 100)
    bf_s = None if max_seconds is None else bound_share
    upper = min(ev(s) for s in starts) if starts else math.inf
    # at scale no bound search (BOUND_SEARCH_AT_SCALE): no expansion, the empty mapping's bound alone
    bound_search = BOUND_SEARCH_AT_SCALE or not _at_scale(scenario)
    probe = lower_bound(scenario, upper, evaluator=ev,
                        max_seconds=None if bf_s is None else BOUND_PROBE_SHARE * bf_s,
                        max_expansions=(0 if not bound_search else None if expansions is None
                                        else max(1, round(BOUND_PROBE_SHARE * expansions))))
    promising = bound_search and not probe.optimal and (
        probe.root_ms + (probe.lower_ms - probe.root_ms) / BOUND_PROBE_SHARE > known_lower)
    # what the end keeps: the bound search's rest when it is promising, else the relaxation's second round
    # when its limit stopped it (it may then prove more with the search's better upper bound), else nothing
    if promising:
        keep_s = None if bf_s is None else (1 - BOUND_PROBE_SHARE) * bf_s
    elif relaxed is not None and not relaxed.optimal:
        # the relaxation gets twice its share in wall-clock time, its first call included: the repeat has the rest
        keep_s = None if max_seconds is None else max(0.0, 2 * relax_s - relaxed.seconds)
    else:
        keep_s = 0.0
    search_s = None if max_seconds is None else max(0.0, (left() or 0.0) - (keep_s or 0.0))
    found = race(scenario, ev, [*starts, *start_mappings(scenario, ev)], seed=seed, max_seconds=search_s,
                 max_evals=max_evals, lower_ms=max(known_lower, probe.lower_ms), workers=workers,
                 lanes=lanes)
    if relaxed is not None and not relaxed.optimal and found.e2e_ms < first.e2e_ms:
        # stopped by its limit: again with the better upper bound (a smaller T to prove), half the rest
        # (all of it when the bound search is not to run)
        rest = left()
        again_s = max(0.2, 0.5 * relax_s) if rest is None else (0.5 if promising else 1.0) * relax_s
        if rest is None or min(again_s, rest) >= MIN_RELAXATION_SECONDS:
            # with a time budget, in what is left of it (it can only raise the first call's bound)
            again = relaxation_bound_ms(scenario, found.e2e_ms, max_seconds=again_s,
                                        wall_seconds=_relaxation_wall(again_s, None) if rest is None else rest)
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


def _relaxation_wall(solver_s: float, left_s: float | None) -> float:
    """The relaxation's wall-clock cap for ``solver_s`` of deterministic solver time (its rounds share twice that
    and its probes get as much again): ``EVALS_WALL_FACTOR`` times it, and with a time budget at most
    ``RELAXATION_WALL_SHARE`` of what is left of it (``left_s``), never under ``solver_s``."""
    cap = EVALS_WALL_FACTOR * solver_s
    return cap if left_s is None else min(cap, max(solver_s, RELAXATION_WALL_SHARE * left_s))


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
        workers: processes for the exact search and the best-known search's race (default: the CPUs
            available; one inside a worker process).
    """
    choice = ReferenceChoice(choice)
    check_max_seconds(max_seconds)
    if choice is ReferenceChoice.NONE:
        return None
    if scenario.workload is not None:
        return load_reference(scenario, choice, seed=seed)
    if choice is ReferenceChoice.BEST_KNOWN:
        return best_known(scenario, seed=seed, max_seconds=max_seconds, max_evals=max_evals, workers=workers)
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
        return best_known(scenario, seed=seed, max_seconds=left, max_evals=max_evals, start=start, prove=True,
                          workers=workers)
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


def improved_by(reference: Reference, scenario: Scenario, candidates: Iterable[tuple[Mapping, str]]) -> Reference:
    """The best mapping known: ``reference``, or the best of ``candidates`` when one is better under the model.

    ``candidates`` are ``(mapping, where it was found)`` pairs, typically the mappings a run executed (its rounds
    and probes). Each is judged as the reference was: its noise-free E2E, or under the scenario's workload its
    noise-free window p95 (:func:`hetsched.search.load.predict_window`). A best-known reference is replaced by the
    first candidate with the lowest value when that value is lower than the reference's (by more than a relative
    ``1e-9``): the lower bound stays (it bounds the optimum whatever mapping reaches it), ``found_by`` says where
    the mapping came from, and the mapping is reported as the oracle when it reaches the lower bound (then it is
    proven optimal). An exact reference, one no candidate beats, or an infeasible candidate changes nothing; the
    improved reference carries no measurement (measure it afterwards on a real executor). So a report never shows
    a run's mapping beating the best-known mapping it is compared with: the best known is the best anyone found.
    """
    if reference.exact:
        return reference
    judge = _judge(scenario)
    best: tuple[float, Mapping, str] | None = None
    seen: set[str] = set()
    for given, where in candidates:
        mapping = scenario.validate_mapping(given, f"the mapping of {where}")
        code = mapping.code()
        if code in seen:
            continue
        seen.add(code)
        value = judge(mapping)
        if value is not None and (best is None or value < best[0]):
            best = (value, mapping, where)
    if best is None or best[0] >= reference.e2e_ms * (1.0 - _TARGET_TOLERANCE):
        return reference
    value, mapping, where = best
    lower = reference.lower_bound_ms
    optimal = lower is not None and value <= lower * (1.0 + _TARGET_TOLERANCE)
    return replace(reference, kind=ReferenceKind.ORACLE if optimal else ReferenceKind.BEST_KNOWN,
                   mapping=mapping,
                   e2e_ms=value, lower_bound_ms=value if optimal else lower, measured=None, measured_kind="",
                   found_by=where)


def _judge(scenario: Scenario) -> Callable[[Mapping], float | None]:
    """How a reference judges a mapping: noise-free E2E, or under a workload the noise-free window p95 (None:
    the mapping cannot run)."""
    workload = scenario.workload
    if workload is None:
        return Simulator(scenario, noise=False).e2e
    from hetsched.search.load import predict_window

    def p95(mapping: Mapping) -> float | None:
        pred = predict_window(scenario, mapping, workload)
        return pred.p95_ms if pred.feasible else None

    return p95


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
    "BOUND_SEARCH_AT_SCALE",
    "BOUND_SHARE",
    "DEFAULT_SEARCH_SECONDS",
    "EVALS_PER_SECOND",
    "MIN_PARALLEL_SECONDS",
    "MIN_RELAXATION_SECONDS",
    "NO_RELAXATION_NOTE",
    "RACE_EXCHANGE",
    "RACE_SCREENED_LANES",
    "RACE_SCREENED_MIN_NODES",
    "RACE_SHARE",
    "RACE_STEPS_PER_SIMULATION",
    "RACE_TRAJECTORIES",
    "RELAXATION_SHARE",
    "ReferenceChoice",
    "SimPlanner",
    "best_known",
    "check_max_seconds",
    "improved_by",
    "lower_bound_ms",
    "parse_reference_choice",
    "race",
    "race_processes",
    "reference",
]
