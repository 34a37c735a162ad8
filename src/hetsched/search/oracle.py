"""The oracle: the best feasible mapping by noise-free simulated E2E, by exact branch-and-bound.

PAPER.md's oracle enumerates every feasible mapping and measures each; ours evaluates mappings
with the noise-free simulator, so it is the true optimum of the model (noise cannot crown a
lucky mapping), and it does not simulate what provably cannot win:

1. A seeded local search (:mod:`hetsched.search.local_search`) finds a good first incumbent;
   a search estimated after the warm-up to need more than a second runs a longer one
   (``MORE_INCUMBENT_PER_NODE``) first.
2. Nodes are assigned in topological order, a few at a time (a *level*). Each batch of prefixes
   is extended by every combination of the level's placements at once with numpy, and every child
   whose lower bound (:mod:`hetsched.search.bounds`: critical path, admission, GPU/CPU work, VRAM x
   time, sibling contention) cannot beat the current threshold, or whose ``gpu_now`` set is over
   the budget, is dropped. Survivors
   are explored depth first, lowest bound first, with an explicit stack: memory is bounded by
   ``MAX_ROWS`` rows per level whatever the size of the space, and nothing recurses.
3. Complete mappings that survive (and are not a sure queue deadlock) are simulated in order of
   their bound until the bound passes the threshold.
4. The subtrees under the first level are independent tasks; when the search runs longer than
   ``WARMUP_S`` the rest go to worker processes that share the threshold. The result does not
   depend on the number of workers, only how fast it comes.

The threshold is the k-th best E2E found (``top`` = k, 1 for the optimum), and never below the
best E2E plus the tie tolerance, so every mapping that ties the optimum is simulated. Ties
(equal E2E within 1e-9 relative) go to the mapping that holds the least VRAM, then the fewest
GPU nodes, then the first in enumeration order (codes compared in node order); ``optimal`` lists
them all. ``ranking=True`` instead simulates every mapping whose ``gpu_now`` set fits (the full
ranking: only for small spaces).

Time, not the size of the space, limits the search: after the warm-up, a Knuth-style estimate
of the rest (random probes down the bounded search tree with the threshold found so far, priced
with a measured cost per row and per simulation) is compared with ``max_seconds``; a search
estimated, or found while running, to need more raises :class:`SearchTooLong` with the estimate
and what to do instead.

Evaluation side: reports, the ``oracle`` policy's planner and the ``oracle`` command use it;
runs never need it. Imports the model, the simulator, the bounds and the local search.
"""

from __future__ import annotations

import bisect
import itertools
import math
import multiprocessing as mp
import os
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from hetsched.model import InputError, Mapping, Placement, Scenario
from hetsched.model.mapping import CPU_CODE as CPU
from hetsched.model.mapping import QUEUE_CODE as QUEUE
from hetsched.search.bounds import BoundModel, Rows
from hetsched.search.local_search import Evaluator, local_search

_TIE_REL = 1e-9
DEFAULT_MAX_SECONDS = 60.0
"""Time the exact search may take by default (``--max-seconds``)."""
MAX_ROWS = 1 << 16
"""Rows (prefixes) bounded in one numpy batch; memory per level is proportional to it."""
LEVEL_BRANCH = 243
"""Largest number of children per prefix in one level (five three-way nodes)."""
FIRST_LEVEL_MIN = 64
"""Smallest number of first-level subtrees (the units handed to worker processes)."""
EXACT_MAX_NODES = 1000
"""Longest workflow the exact search takes on: beyond it, setting the search up (an incumbent, the
estimate's probes through every level) alone outlasts any budget, so it is refused at once."""
WARMUP_S = 0.25
"""A search runs this long in this process first (easy ones end there); then, if its time estimate
fits the budget, it continues in worker processes."""
MORE_INCUMBENT_PER_NODE = 30
"""Simulations per node of the second incumbent search, run when the rest of a search is
estimated to take more than ``MORE_INCUMBENT_AFTER_S``."""
MORE_INCUMBENT_AFTER_S = 1.0
_PROBES = 64
_MIN_PROBES = 8


def _incumbent_evals(n: int) -> int:
    """Simulations the first incumbent search may spend (the bounded search does the rest)."""
    return 30 + 3 * n


_ALTERNATIVE = ("For a best-known mapping with a lower bound use `hetsched.reference(scenario)` (or "
                "`reference='best-known'` in a run or bench), or raise `max_seconds`")
"""What a search refused on its estimate and one that ran out of time both suggest."""


class SearchTooLong(InputError):
    """The exact search is estimated (or was found) to need more than its time budget."""

    def __init__(self, message: str, *, estimate_s: float, best: tuple[float, Mapping] | None = None) -> None:
        super().__init__(message)
        self.estimate_s = estimate_s
        """Estimated seconds for the whole search."""
        self.best = best
        """The best (E2E, mapping) found before giving up, if any."""


@dataclass(frozen=True)
class Ranked:
    """One feasible mapping and its noise-free E2E."""

    mapping: Mapping
    """The mapping."""
    e2e_ms: float
    """Noise-free E2E."""


@dataclass(frozen=True)
class OracleResult:
    """The optimum and the best-ranked feasible mappings."""

    best: Mapping
    """The optimal mapping (ties broken as the module says)."""
    e2e_ms: float
    """Its noise-free E2E."""
    optimal: tuple[Mapping, ...]
    """Every mapping within the tie tolerance of the optimum."""
    ranking: tuple[Ranked, ...]
    """The ``top`` best feasible mappings by (E2E, codes); every feasible one with ``ranking=True``."""
    space: int
    """Size of the well-formed mapping space (2^n or 3^n, less CPU-only tools)."""
    feasible: int
    """Feasible mappings found (every one only with ``ranking=True``; else the ranked ones)."""
    simulated: int
    """Mappings actually simulated (the incumbent search's included)."""
    pruned: int
    """Mappings never simulated: dropped by a bound or the VRAM check (``space - simulated``, at least 0)."""
    seconds: float = 0.0
    """Wall time of the search."""
    workers: int = 1
    """Processes that searched (1: this one only)."""
    full: bool = False
    """True when ``ranking`` holds every feasible mapping (``ranking=True``)."""
    estimate_s: float | None = None
    """The time estimated before the search (None when the space was too small to need one)."""

    def __repr__(self) -> str:  # the generated one prints the whole ranking (62,736 characters at n = 10)
        return (f"OracleResult(best={self.best!r}, e2e_ms={self.e2e_ms:.1f}, {len(self.optimal)} optimal, "
                f"ranking of {len(self.ranking):,}, space {self.space:,}, {self.simulated:,} simulated)")


@dataclass
class _Stats:
    simulated: int = 0
    resolved: float = 0.0
    timed_out: bool = False


class _Collector:
    """The best mappings found so far and the pruning threshold they imply (``top`` None: keep all)."""

    def __init__(self, top: int | None) -> None:
        self.top = top
        self.found: dict[tuple[int, ...], float] = {}
        self._es: list[float] = []
        self.best = math.inf
        self.thr = math.inf

    def add(self, codes: tuple[int, ...], e: float) -> None:
        if codes in self.found or e > self.thr:
            return
        self.found[codes] = e
        self.best = min(self.best, e)
        if self.top is None:
            return
        bisect.insort(self._es, e)
        del self._es[self.top :]
        kth = self._es[-1] if len(self._es) >= self.top else math.inf
        self.thr = max(kth, self.best * (1 + _TIE_REL))
        if len(self.found) > 4 * self.top + 4096:
            self.found = {c: v for c, v in self.found.items() if v <= self.thr}

    def items(self) -> list[tuple[float, tuple[int, ...]]]:
        return [(e, c) for c, e in self.found.items() if e <= self.thr]


class _Plan:
    """Level boundaries of a scenario's bounded search and the machinery shared by every task."""

    def __init__(self, scenario: Scenario, bm: BoundModel, ev: Evaluator) -> None:
        self.sc = scenario
        self.bm = bm
        self.ev = ev
        cuts = bm.levels(FIRST_LEVEL_MIN, LEVEL_BRANCH)
        self.cuts = cuts
        self.next_cut = dict(itertools.pairwise(cuts))

    def leaves_below(self, depth: int) -> float:
        """Complete mappings below a prefix of this depth (inf past float range)."""
        return math.prod(float(len(a)) for a in self.bm.allowed[depth:])


class _Task:
    """Depth-first bounded search below some prefixes, resumable: its explicit stack survives a pause."""

    def __init__(self, plan: _Plan, coll: _Collector, deadline: float, shared: Any = None) -> None:
        self.plan = plan
        self.bm = plan.bm
        self.coll = coll
        self.deadline = deadline
        self.shared = shared
        self.stats = _Stats()
        self._reads = 0
        self.stack: list[tuple[Rows, int]] = []

    def threshold(self) -> float:
        thr = self.coll.thr
        if self.shared is not None:
            self._reads += 1
            other = self.shared.value
            if other < thr:
                thr = other
            elif thr < other:
                with self.shared.get_lock():
                    if thr < self.shared.value:
                        self.shared.value = thr
        return thr

    def keep(self, rows: Rows, thr: float) -> Rows:
        bm = self.bm
        mask = (rows.lb <= thr + bm.slack(thr)) & bm.fits(rows.vram_now)
        below = self.plan.leaves_below(rows.depth)
        self.stats.resolved += (len(rows) - int(mask.sum())) * below
        return rows.take(mask)

    def run(self, rows: Rows, until: float | None = None) -> bool:
        """Search every completion of ``rows`` (all of one depth, a level boundary or complete);
        see :meth:`resume`."""
        if len(rows):
            self.stack.append((rows, 0))
        return self.resume(until)

    def resume(self, until: float | None = None) -> bool:
        """Continue the search: True when nothing is left, False when paused at ``until`` (wall
        clock; :meth:`leftover` is what remains) or stopped at the deadline (``stats.timed_out``)."""
        bm = self.bm
        stack = self.stack
        while stack:
            now = time.time()
            if now > self.deadline:
                self.stats.timed_out = True
                return False
            if until is not None and now > until:
                return False
            cur, pos = stack[-1]
            if pos >= len(cur):
                stack.pop()
                continue
            if cur.depth == bm.n:
                stack[-1] = (cur, len(cur))
                self.leaves(self.keep(cur.take(np.arange(pos, len(cur))), self.threshold()), until)
                continue
            stop = self.plan.next_cut[cur.depth]
            chunk = max(1, bm.batch_rows(MAX_ROWS) // bm.branching(cur.depth, stop))
            part = cur.take(np.arange(pos, min(pos + chunk, len(cur))))
            stack[-1] = (cur, pos + chunk)
            thr = self.threshold()
            part = self.keep(part, thr)
            if not len(part):
                continue
            kids = self.keep(bm.expand(part, stop), thr)
            if stop == bm.n:
                self.leaves(kids, until)
            elif len(kids):
                stack.append((kids.take(np.argsort(kids.lb, kind="stable")), 0))
        return not self.stats.timed_out

    def leftover(self) -> list[Rows]:
        """The prefixes a paused search has not settled (each part of one depth)."""
        return [cur.take(np.arange(pos, len(cur))) for cur, pos in self.stack if pos < len(cur)]

    def leaves(self, rows: Rows, until: float | None = None) -> None:
        """Simulate complete mappings in bound order while their bound can beat the threshold; a
        pause at ``until`` puts the rest back on the stack."""
        bm = self.bm
        if len(rows):
            dead = bm.deadlocked(rows.codes)
            if dead.any():
                self.stats.resolved += int(dead.sum())
                rows = rows.take(~dead)
        order = np.argsort(rows.lb, kind="stable")
        lbs = rows.lb[order]
        nodes = bm.to_nodes(rows.codes[:, order]).tolist()
        border = bm.borderline(rows.vram_now[order])
        ev = self.plan.ev
        thr = self.threshold()
        for i, lb in enumerate(lbs.tolist()):
            if i % 32 == 31:
                thr = self.threshold()
                now = time.time()
                if now > self.deadline:
                    self.stats.timed_out = True
                    return
                if until is not None and now > until:
                    self.stack.append((rows.take(order[i:]), 0))
                    return
            if lb > thr + bm.slack(thr):
                self.stats.resolved += len(lbs) - i
                return
            codes = tuple(nodes[i])
            self.stats.resolved += 1
            if border[i] and not ev.static_ok(codes):
                continue
            before = ev.evaluations
            e = ev(codes, checked=True)
            self.stats.simulated += ev.evaluations - before
            if e < math.inf:
                self.coll.add(codes, e)
                thr = min(thr, self.coll.thr)


def _level1(plan: _Plan, thr: float) -> Rows:
    bm = plan.bm
    root = bm.root()
    if plan.cuts[1] == 0:  # pragma: no cover - cuts always advance
        return root
    rows = bm.expand(root, plan.cuts[1])
    mask = (rows.lb <= thr + bm.slack(thr)) & bm.fits(rows.vram_now)
    rows = rows.take(mask)
    return rows.take(np.argsort(rows.lb, kind="stable"))


# ---------------------------------------------------------------------------- workers
_WORKER: dict[str, Any] = {}


def _worker_init(scenario: Scenario, top: int, seeds: list[tuple[float, tuple[int, ...]]], deadline: float,
                 shared: Any) -> None:
    bm = BoundModel(scenario)
    ev = Evaluator(scenario, bm)
    plan = _Plan(scenario, bm, ev)
    coll = _Collector(top)
    for e, c in seeds:
        coll.add(c, e)
    _WORKER.update(plan=plan, coll=coll, deadline=deadline, shared=shared)


def _worker_task(codes: list[list[int]]) -> tuple[list[tuple[float, tuple[int, ...]]], int, float, bool]:
    plan: _Plan = _WORKER["plan"]
    coll: _Collector = _WORKER["coll"]
    task = _Task(plan, coll, _WORKER["deadline"], _WORKER["shared"])
    bm = plan.bm
    root = bm.root()
    rows = bm.extend(root.take(np.zeros(len(codes), dtype=np.intp)), np.array(codes, dtype=np.int8).T.copy())
    task.run(rows)
    return coll.items(), task.stats.simulated, task.stats.resolved, task.stats.timed_out


def default_workers() -> int:
    """Processes the search may use by default: the CPUs this process may run on, or 1 inside a
    worker process (a bench's pool already uses the CPUs, and a daemonic worker may not start more)."""
    if mp.parent_process() is not None:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def process_count(workers: int | None) -> int:
    """Processes a search gets: ``workers``, by default :func:`default_workers`; 1 in a daemonic process (a
    pool's worker, which may not have children). The exact search and the best-known search's race
    (:func:`hetsched.search.reference.race`) both use it."""
    if mp.current_process().daemon:
        return 1
    return workers or default_workers()


def pool_context() -> Any:
    """fork where it is safe (a single-threaded process on a platform that has it), else spawn."""
    if "fork" in mp.get_all_start_methods() and threading.active_count() == 1:
        return mp.get_context("fork")
    return mp.get_context("spawn")


# ---------------------------------------------------------------------------- estimate
@dataclass
class Estimate:
    """What a bounded search is expected to cost (from random probes down its tree)."""

    seconds: float
    """Estimated wall time with the given workers."""
    rows: float
    """Estimated prefixes bounded."""
    simulations: float
    """Estimated simulations."""
    space: int
    """Size of the mapping space."""
    detail: dict[str, float] = field(default_factory=dict)
    """Costs the estimate used (seconds per row, per simulation)."""


def _calibrate_row_cost(plan: _Plan, parts: list[Rows]) -> float:
    """Seconds per child row and new position of one full-size expansion of the shallowest open prefixes."""
    bm = plan.bm
    open_parts = [r for r in parts if r.depth < bm.n and len(r)]
    if not open_parts:
        return 2e-7
    rows = min(open_parts, key=lambda r: r.depth)
    d1 = rows.depth
    stop = plan.next_cut[d1]
    per = bm.branching(d1, stop)
    parents = rows.take(np.arange(min(len(rows), max(1, bm.batch_rows(MAX_ROWS) // per))))
    t0 = time.perf_counter()
    kids = bm.expand(parents, stop)
    kids.take(np.argsort(kids.lb, kind="stable"))
    dt = time.perf_counter() - t0
    return dt / max(1, len(kids)) / max(1, stop - d1)


def _estimate(plan: _Plan, parts: list[Rows], thr: float, workers: int, seed: int,
              limit: float = math.inf) -> Estimate:
    """Knuth's estimator over the open prefixes ``parts`` (each of one depth): each probe picks
    one of them uniformly and walks down the bounded tree through one random surviving child per
    level; the product of the survivor counts along the way, times the number of open prefixes,
    estimates how many prefixes the search bounds at each level (unbiased). Probes stop early
    once the answer to "does it fit ``limit``?" is clear (at least ``_MIN_PROBES``, then at most
    a tenth of it)."""
    t0 = time.perf_counter()
    bm = plan.bm
    rng = random.Random(seed)
    row_cost = _calibrate_row_cost(plan, parts)
    ev = plan.ev
    sim_cost = ev.sim_seconds / ev.evaluations if ev.evaluations else 1e-4
    total_rows = 0.0
    total_sims = 0.0
    cost = 0.0
    parts = [r for r in parts if len(r)]
    sizes = [len(r) for r in parts]
    n1 = sum(sizes)
    space = bm.scenario.mapping_space_size()
    detail = {"row_s": row_cost, "sim_s": sim_cost}
    if all(r.depth == bm.n for r in parts):  # only complete mappings are open (or nothing is)
        return Estimate(n1 * sim_cost / max(1, workers), float(n1), float(n1), space, detail)
    ends = list(itertools.accumulate(sizes))
    probes = 0
    while probes < _PROBES:
        probes += 1
        k = rng.randrange(n1)
        which = bisect.bisect_right(ends, k)
        src = parts[which]
        row = src.take(np.array([k - (ends[which] - sizes[which])]))
        weight = float(n1)
        depth = src.depth
        if depth == bm.n:
            total_sims += weight
            cost += weight * sim_cost
        while depth < bm.n:
            stop = plan.next_cut[depth]
            per = bm.branching(depth, stop)
            cost += weight * per * (stop - depth) * row_cost
            total_rows += weight * per
            kids = bm.expand(row, stop)
            mask = (kids.lb <= thr + bm.slack(thr)) & bm.fits(kids.vram_now)
            alive = int(mask.sum())
            if not alive:
                break
            weight *= alive
            if stop == bm.n:
                total_sims += weight
                cost += weight * sim_cost
                break
            idx = np.flatnonzero(mask)
            row = kids.take(np.array([idx[rng.randrange(alive)]]))
            depth = stop
        if probes >= _MIN_PROBES:
            running = cost / probes / max(1, workers)
            if running > 20 * limit or time.perf_counter() - t0 > 0.1 * limit:
                break
    detail["probes"] = float(probes)
    return Estimate(cost / probes / max(1, workers), total_rows / probes, total_sims / probes, space, detail)


# ---------------------------------------------------------------------------- public API
def _to_mapping(scenario: Scenario, codes: Sequence[int]) -> Mapping:
    return Mapping(zip(scenario.workflow.node_ids, (Placement.of_code(c) for c in codes), strict=True))


def _tie_key(scenario: Scenario, codes: tuple[int, ...]) -> tuple[float, int, tuple[int, ...]]:
    m = _to_mapping(scenario, codes)
    held = scenario.gpu_now_vram_mb(m) + sum(
        scenario.card_of(n).vram_mb for n, c in zip(scenario.workflow.node_ids, codes, strict=True) if c == QUEUE
    )
    return (held, sum(1 for c in codes if c != CPU), codes)


_CACHE: dict[tuple[str, bool, int], OracleResult] = {}
_CACHE_MAX = 64


def _describe(scenario: Scenario) -> str:
    return (f"scenario {scenario.name!r} ({len(scenario.workflow.nodes)} nodes, {scenario.mode.value}: "
            f"{space_text(scenario)} mappings)")


def space_text(scenario: Scenario) -> str:
    """The size of the mapping space: exact while readable, else as powers (3^10000 has 4,772 digits)."""
    sizes = [len(c) for c in scenario.choices]
    twos, threes = sizes.count(2), sizes.count(3)
    digits = twos * math.log10(2) + threes * math.log10(3)
    if digits < 15:
        return f"{2**twos * 3**threes:,}"
    powers = " x ".join(f"{b}^{e}" for b, e in ((2, twos), (3, threes)) if e)
    return f"{powers} (about 10^{int(digits)})"


def solve(
    scenario: Scenario,
    ranking: bool = False,
    *,
    top: int = 1,
    max_seconds: float | None = DEFAULT_MAX_SECONDS,
    workers: int | None = None,
    seed: int = 0,
    refuse_factor: float = 1.0,
) -> OracleResult:
    """The exact optimum (and the ``top`` best mappings) by bounded search; memoized.

    Args:
        scenario: the scenario.
        ranking: simulate every mapping whose ``gpu_now`` set fits and rank them all (small spaces).
        top: how many of the best mappings to rank (the bounded search proves all of them).
        max_seconds: time budget; None for no limit. A search estimated or found to need more
            raises :class:`SearchTooLong`.
        workers: processes to use (default: the CPUs available); the result does not depend on it.
        seed: seeds the incumbent search and the estimate's probes (not the result).
        refuse_factor: refuse at once (:class:`SearchTooLong`) when the estimate exceeds this
            multiple of ``max_seconds``; between 1 and it, the search runs and stops at its
            deadline. 1 (the ``oracle`` command) trusts the estimate; ``auto`` references try
            (:data:`hetsched.search.reference.AUTO_REFUSE_FACTOR`): Knuth's estimate is often
            pessimistic, since the threshold keeps falling as the search finds better mappings.
    """
    if top < 1:
        raise InputError(f"top must be >= 1, got {top}")
    if len(scenario.workflow.nodes) > EXACT_MAX_NODES and scenario.mapping_space_size() > 1:
        raise SearchTooLong(
            f"{_describe(scenario)}: the exact search takes on at most {EXACT_MAX_NODES:,} nodes (beyond, setting "
            "it up alone outlasts any budget). Use `reference='best-known'` for a best-known mapping with a lower "
            "bound",
            estimate_s=math.inf,
        )
    text = scenario.model_dump_json(exclude={"source"})
    key = (text, ranking, 0 if ranking else top)
    hit = _CACHE.get(key) or _CACHE.get((text, True, 0))
    if hit is not None:
        return hit if ranking else _trim(hit, top)
    limit = math.inf if max_seconds is None else float(max_seconds)
    procs = process_count(workers)
    result = _full(scenario, limit) if ranking else _bounded(scenario, top, limit, procs, seed, refuse_factor)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = result
    return result


def _trim(res: OracleResult, top: int) -> OracleResult:
    """A full ranking seen as the answer of a bounded search for ``top``."""
    if not res.full:
        return res
    return replace(res, ranking=res.ranking[:top], feasible=min(top, len(res.ranking)), full=False)


def _result(scenario: Scenario, items: list[tuple[float, tuple[int, ...]]], top: int | None, simulated: int,
            seconds: float, workers: int, full: bool, estimate: float | None) -> OracleResult:
    if not items:  # all-cpu is always feasible, so this means a bug, not bad input
        raise RuntimeError(f"scenario {scenario.name!r}: no feasible mapping found")
    best_e = min(e for e, _ in items)
    tied = sorted((c for e, c in items if e <= best_e * (1 + _TIE_REL)), key=lambda c: _tie_key(scenario, c))
    ranked = sorted(items)
    if top is not None:
        ranked = ranked[:top]
    space = scenario.mapping_space_size()
    return OracleResult(
        best=_to_mapping(scenario, tied[0]),
        e2e_ms=best_e,
        optimal=tuple(_to_mapping(scenario, c) for c in tied),
        ranking=tuple(Ranked(_to_mapping(scenario, c), e) for e, c in ranked),
        space=space,
        feasible=len(items) if full else len(ranked),
        simulated=simulated,
        pruned=max(0, space - simulated),
        seconds=seconds,
        workers=workers,
        full=full,
        estimate_s=estimate,
    )


def _full(scenario: Scenario, limit: float) -> OracleResult:
    """Every mapping whose gpu_now set fits, simulated and ranked."""
    t0 = time.perf_counter()
    bm = BoundModel(scenario)
    ev = Evaluator(scenario, bm)
    sample = local_search(scenario, max_evals=min(50, scenario.mapping_space_size()), evaluator=ev)
    per_sim = ev.sim_seconds / max(1, ev.evaluations)
    space = scenario.mapping_space_size()
    estimate = _as_float(space) * per_sim
    if estimate > limit:
        raise SearchTooLong(
            f"{_describe(scenario)}: the full ranking simulates every mapping, about {_fmt_s(estimate)}; "
            f"the limit is {_fmt_s(limit)} (`max_seconds`). Without `ranking` the bounded search ranks the best "
            "mappings; or raise `max_seconds`",
            estimate_s=estimate,
            best=(sample.e2e_ms, _to_mapping(scenario, sample.codes)),
        )
    del sample
    plan = _Plan(scenario, bm, ev)
    coll = _Collector(None)
    task = _Task(plan, coll, time.time() + limit)
    task.run(_level1(plan, math.inf))
    if task.stats.timed_out:
        raise SearchTooLong(f"{_describe(scenario)}: the full ranking did not finish in {_fmt_s(limit)}",
                            estimate_s=estimate)
    return _result(scenario, coll.items(), None, ev.evaluations, time.perf_counter() - t0, 1, True, estimate)


def _fmt_s(seconds: float) -> str:
    if seconds == math.inf:
        return "no limit"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds < 365 * 86400:
        return f"{seconds / 86400:.0f} days"
    years = seconds / (365.25 * 86400)
    return f"{years:,.0f} years" if years < 1e6 else f"{years:.1e} years"


def _as_float(count: int) -> float:
    """A mapping count as a float (inf past float range: 3^647 and up)."""
    return float(count) if count < 2**1000 else math.inf


def _fmt_n(count: float) -> str:
    """1,234,567 or 1.2e+19 (also for counts past float range)."""
    if count < 1e9:
        return f"{count:,.0f}"
    if isinstance(count, int) or count == math.inf:
        if count == math.inf:
            return "inf"
        exp = math.log10(count)
        return f"{10 ** (exp - math.floor(exp)):.1f}e+{math.floor(exp)}"
    return f"{count:.1e}"


def _estimate_rest(plan: _Plan, rest: list[Rows], coll: _Collector, workers: int, seed: int, limit: float,
                   t0: float) -> Estimate | None:
    """Knuth's estimate of the rest of a search; None when even an unpruned search of the rest is
    short (under ``MORE_INCUMBENT_AFTER_S`` and within ``limit``): nothing to decide then."""
    bm = plan.bm
    elapsed = time.perf_counter() - t0
    ev = plan.ev
    sim_s = ev.sim_seconds / max(1, ev.evaluations)
    worst = sum(len(r) * plan.leaves_below(r.depth) for r in rest) * (sim_s + 2e-6 * bm.n) / workers
    if worst <= MORE_INCUMBENT_AFTER_S and elapsed + worst <= limit:
        return None
    return _estimate(plan, rest, coll.thr, workers, seed, limit)


def _check_fits(plan: _Plan, est: Estimate | None, coll: _Collector, workers: int, limit: float,
                t0: float, inc: Any, refuse_factor: float) -> float | None:
    """The estimated total time of a search (None without an estimate); raise when it exceeds
    ``refuse_factor`` times the limit."""
    if est is None:
        return None
    total = time.perf_counter() - t0 + est.seconds
    if total > refuse_factor * limit:
        best = min(coll.items(), default=(inc.e2e_ms, inc.codes))
        raise SearchTooLong(
            f"{_describe(plan.sc)}: the exact search is estimated to take {_fmt_s(total)} on "
            f"{workers} process(es) (about {_fmt_n(est.rows)} prefixes bounded and {_fmt_n(est.simulations)} "
            f"simulations); the limit is {_fmt_s(limit)} (`max_seconds`). {_ALTERNATIVE}",
            estimate_s=total,
            best=(best[0], _to_mapping(plan.sc, best[1])),
        )
    return total


def _bounded(scenario: Scenario, top: int, limit: float, workers: int, seed: int,
             refuse_factor: float = 1.0) -> OracleResult:
    t0 = time.perf_counter()
    deadline_wall = time.time() + limit
    bm = BoundModel(scenario)
    ev = Evaluator(scenario, bm)
    plan = _Plan(scenario, bm, ev)
    space = scenario.mapping_space_size()
    inc = local_search(scenario, seed=seed, max_evals=min(_incumbent_evals(bm.n), space), keep=top, evaluator=ev,
                       max_seconds=None if limit == math.inf else limit / 4)
    coll = _Collector(top)
    for e, c in inc.elite:
        coll.add(c, e)
    level1 = _level1(plan, coll.thr)
    estimate: float | None = None
    task = _Task(plan, coll, deadline_wall)
    # warm-up in this process: easy searches end here; the others improve the threshold first
    warm = min(WARMUP_S, limit / 4)
    done = task.run(level1, until=time.time() + warm)
    rest: list[Rows] = []
    if not done and not task.stats.timed_out:
        rest = task.leftover()
        est = _estimate_rest(plan, rest, coll, workers, seed, refuse_factor * limit, t0)
        if est is not None and MORE_INCUMBENT_AFTER_S < est.seconds < 100 * refuse_factor * limit:  # not hopeless
            # a long search: a longer incumbent search (cheap beside it) from the best so far lowers
            # the threshold the rest is pruned with (a sixth of the simulations on a 16-node fan-out)
            best_codes = [c for _, c in sorted(coll.items())[:1]]
            more = local_search(scenario, seed=seed + 1, max_evals=min(MORE_INCUMBENT_PER_NODE * bm.n, space),
                                keep=top, evaluator=ev, starts=best_codes,
                                max_seconds=None if limit == math.inf else limit / 10)
            for e, c in more.elite:
                coll.add(c, e)
            est = _estimate_rest(plan, rest, coll, workers, seed, refuse_factor * limit, t0)
        estimate = _check_fits(plan, est, coll, workers, limit, t0, inc, refuse_factor)
        if workers <= 1 or sum(len(r) for r in rest) < 2:
            task.resume()
            rest = []
        else:
            task.stack.clear()
    simulated = ev.evaluations
    items: list[tuple[float, tuple[int, ...]]] = coll.items()
    timed_out = task.stats.timed_out
    resolved = task.stats.resolved
    used_workers = 1
    if rest and not timed_out:
        open_rows = sum(len(r) for r in rest)
        used_workers = min(workers, open_rows)
        ctx = pool_context()
        shared = ctx.Value("d", coll.thr)
        seeds = sorted(coll.items())[: top + 1]
        per_task = max(1, open_rows // (used_workers * 16))
        chunks = [r.codes[:, j : j + per_task].T.tolist() for r in rest for j in range(0, len(r), per_task)]
        with ctx.Pool(used_workers, initializer=_worker_init,
                      initargs=(scenario, top, seeds, deadline_wall, shared)) as pool:
            for found, sims, res, late in pool.imap_unordered(_worker_task, chunks):
                items.extend(found)
                simulated += sims
                resolved += res
                timed_out = timed_out or late
    if timed_out:
        share = resolved / _as_float(space)
        settled = f"; it had settled {100 * share:.1f}% of the mappings" if 0 <= share <= 1 else ""
        best = min(items) if items else (inc.e2e_ms, inc.codes)
        raise SearchTooLong(
            f"{_describe(scenario)}: the exact search did not finish in {_fmt_s(limit)} (`max_seconds`)"
            + settled
            + ("" if estimate is None else f" (estimated {_fmt_s(estimate)} beforehand)")
            + f". {_ALTERNATIVE}",
            estimate_s=limit / share if 0 < share <= 1 else math.inf,
            best=(best[0], _to_mapping(scenario, best[1])),
        )
    dedup: dict[tuple[int, ...], float] = {}
    for e, c in items:
        dedup[c] = e
    final = _Collector(top)
    for c, e in sorted(dedup.items(), key=lambda kv: (kv[1], kv[0])):
        final.add(c, e)
    return _result(scenario, final.items(), top, simulated, time.perf_counter() - t0, used_workers, False,
                   estimate)


def estimate_seconds(scenario: Scenario, *, workers: int | None = None, seed: int = 0) -> Estimate:
    """How long :func:`solve` is expected to take for the optimum (a short incumbent search, then
    random probes down the bounded search tree)."""
    bm = BoundModel(scenario)
    ev = Evaluator(scenario, bm)
    plan = _Plan(scenario, bm, ev)
    space = scenario.mapping_space_size()
    inc = local_search(scenario, seed=seed, max_evals=min(_incumbent_evals(bm.n), space), evaluator=ev)
    coll = _Collector(1)
    coll.add(inc.codes, inc.e2e_ms)
    level1 = _level1(plan, coll.thr)
    return _estimate(plan, [level1], coll.thr, workers or default_workers(), seed)


__all__ = [
    "DEFAULT_MAX_SECONDS",
    "EXACT_MAX_NODES",
    "Estimate",
    "OracleResult",
    "Ranked",
    "SearchTooLong",
    "default_workers",
    "estimate_seconds",
    "pool_context",
    "process_count",
    "solve",
    "space_text",
]
