"""A proven lower bound on the optimal noise-free E2E, for workflows too large to solve exactly.

The bound of the empty mapping (:class:`~hetsched.search.bounds.BoundModel`: critical path with
every node at its fastest, work on each device, VRAM x time) holds for every mapping but is weak.
This module raises it by best-first branch-and-bound on the bounds alone: it keeps a frontier of
prefixes (partial mappings in topological order), repeatedly expands the prefixes whose bound is
smallest, drops every child whose bound reaches the best E2E known (``upper_ms``: nothing better
can lie below it), and simulates complete mappings when they reach the front (which may improve
the best known mapping). The optimum lies in some frontier subtree or is the best known mapping,
so at every moment ``min(upper, smallest frontier bound)`` is a lower bound on it; when the
frontier empties, the best known mapping is optimal.

The search stops when its budget (seconds, or expansions for a result that does not depend on
the machine) ends or the frontier would exceed ``max_cells`` prefix positions (memory stays bounded).
Imports the model, the bounds and the local search's evaluator.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from hetsched.model import Scenario
from hetsched.search.bounds import BoundModel, Rows
from hetsched.search.local_search import Evaluator

MAX_FRONTIER_CELLS = 1 << 23
"""Largest frontier the bound search keeps, in prefixes x their length (about 75 MB)."""
_CHUNK_ROWS = 1 << 15
DUAL_CELLS = 1 << 23
"""Largest grid points x nodes of the Lagrangian bound (a coarser grid for long workflows)."""


@dataclass(frozen=True)
class LowerBound:
    """What the bound search proved."""

    lower_ms: float
    """A lower bound on the optimal E2E."""
    upper_ms: float
    """The best E2E known at the end (the input's, or better if the search simulated one)."""
    best: tuple[int, ...] | None
    """Codes (node order) of a mapping better than the input's upper bound, if the search found one."""
    optimal: bool
    """True when the frontier emptied: ``upper_ms`` is the optimum (within float tolerance)."""
    root_ms: float
    """The bound of the empty mapping (before any search)."""
    expansions: int
    """Batches of prefixes expanded."""
    seconds: float
    """Wall time."""


def lower_bound(
    scenario: Scenario,
    upper_ms: float,
    *,
    max_seconds: float | None = 2.0,
    max_expansions: int | None = None,
    max_cells: int = MAX_FRONTIER_CELLS,
    evaluator: Evaluator | None = None,
) -> LowerBound:
    """Raise the lower bound on the optimum by best-first search (see the module docstring).

    Args:
        scenario: the scenario.
        upper_ms: the E2E of the best mapping known (prunes the search; inf if none).
        max_seconds: time budget (ignored when ``max_expansions`` is given).
        max_expansions: budget in expanded batches: the same result on every machine.
        max_cells: the largest frontier kept, in prefixes x their length.
        evaluator: reuse an evaluator (its bound model and memo).
    """
    t0 = time.perf_counter()
    ev = evaluator or Evaluator(scenario)
    bm = ev.bounds
    root = bm.root()
    root_ms = float(root.lb[0])
    cuts = bm.levels()
    nxt = dict(itertools.pairwise(cuts))
    upper = upper_ms
    best: tuple[int, ...] | None = None
    frontier: dict[int, Rows] = {0: root}
    expansions = 0

    def out_of_budget() -> bool:
        if max_expansions is not None:
            return expansions >= max_expansions
        return max_seconds is not None and time.perf_counter() - t0 >= max_seconds

    def alive(rows: Rows) -> Rows:
        keep = rows.lb < upper - bm.slack(upper)
        return rows if bool(keep.all()) else rows.take(keep)

    optimal = False
    while True:
        frontier = {d: r for d, r in frontier.items() if len(r)}
        if not frontier:
            optimal = True
            break
        depth = min(frontier, key=lambda d: float(frontier[d].lb.min()))
        rows = frontier[depth]
        if out_of_budget():
            break
        if depth == bm.n:  # complete mappings at the front: simulate the smallest
            k = min(len(rows), 64)
            pick = np.argpartition(rows.lb, k - 1)[:k] if k < len(rows) else np.arange(len(rows))
            pick = pick[np.argsort(rows.lb[pick], kind="stable")]
            codes = bm.to_nodes(rows.codes[:, pick]).tolist()
            dead = bm.deadlocked(rows.codes[:, pick])
            for i, c in enumerate(codes):
                if dead[i]:
                    continue
                e = ev(tuple(c))
                if e < upper:
                    upper, best = e, tuple(c)
            rest = np.ones(len(rows), dtype=bool)
            rest[pick] = False
            frontier[depth] = rows.take(rest)
            expansions += 1
        else:
            stop = nxt[depth]
            chunk = max(1, bm.batch_rows(_CHUNK_ROWS) // bm.branching(depth, stop))
            if len(rows) > chunk:
                pick = np.argpartition(rows.lb, chunk - 1)[:chunk]
                rest = np.ones(len(rows), dtype=bool)
                rest[pick] = False
                taken, frontier[depth] = rows.take(pick), rows.take(rest)
            else:
                taken, frontier[depth] = rows, rows.take(np.zeros(0, dtype=np.intp))
            kids = bm.expand(taken, stop)
            kids = alive(kids.take(bm.fits(kids.vram_now)))
            if stop in frontier and len(frontier[stop]):
                frontier[stop] = Rows.concat([frontier[stop], kids])
            else:
                frontier[stop] = kids
            expansions += 1
        frontier = {d: alive(r) for d, r in frontier.items()}
        if sum(len(r) * max(1, d) for d, r in frontier.items()) > max_cells:
            break
    bound = upper if optimal else min([upper, *(float(r.lb.min()) for r in frontier.values() if len(r))])
    bound = max(bound, min(root_ms, upper))
    return LowerBound(
        lower_ms=bound,
        upper_ms=upper,
        best=best,
        optimal=optimal,
        root_ms=root_ms,
        expansions=expansions,
        seconds=time.perf_counter() - t0,
    )


def dual_bound_ms(scenario: Scenario, steps: int = 8, max_big: int = 6) -> float:
    """A Lagrangian lower bound on the optimum that sees the VRAM budget (no search).

    For every feasible mapping m, E2E(m) is at least each of: its critical path CP(m) (isolated
    times), its GPU work Wg(m), its CPU work Wc(m) and its VRAM x time over the budget M(m)
    (:mod:`hetsched.search.bounds`), hence at least any convex combination of them; and its
    ``gpu_now`` tools fit: sum(vram) - budget <= 0. So for weights w in the simplex and lambda >= 0,
    OPT >= min over all mappings of [w . (CP, Wg, Wc, M) + lambda (sum of gpu_now VRAM - budget)].
    A tool held by several nodes is charged vram / (its node count) per ``gpu_now`` node (at most
    its true charge), its memory-time likewise, so every term but CP splits per node; CP is a
    maximum over paths, and min over m of a max over paths is at least the max over paths of the
    min over m, which is a longest-path problem with per-node weights.

    A Lagrangian relaxes the budget as if tools could be split; for the largest tools that
    split is far from the truth, so up to ``max_big`` of the tools larger than a quarter of the
    budget are decided exactly: the bound is the smallest, over every set of them that fits, of
    the best value over a grid of weights (``steps`` per unit) and lambdas with only those large
    tools allowed on ``gpu_now`` (already paid for) and the rest of the budget relaxed.
    """
    bm = BoundModel(scenario)
    budget = bm.budget_mb
    tools = len(bm.tool_vram)
    used = sorted({bm.tool[p] for p in range(bm.n) if 1 in bm.allowed[p]}, key=lambda t: (-bm.tool_vram[t], t))
    big = [t for t in used if bm.tool_vram[t] > budget / 4][:max_big]
    best = math.inf
    for mask in range(1 << len(big)):
        chosen = [t for i, t in enumerate(big) if mask >> i & 1]
        held = float(sum(bm.tool_vram[t] for t in chosen))
        if held > budget:
            continue
        barred = np.zeros(tools, dtype=bool)
        barred[[t for t in big if t not in chosen]] = True
        paid = np.zeros(tools, dtype=bool)
        paid[chosen] = True
        best = min(best, _dual(bm, steps, barred, paid, budget - held))
    return float(max(0.0, best))


def _dual(bm: BoundModel, steps: int, barred: np.ndarray, paid: np.ndarray, budget_left: float) -> float:
    """The Lagrangian bound with ``barred`` tools kept off gpu_now and ``paid`` tools free on it."""
    n = bm.n
    count = np.bincount(np.array(bm.tool), minlength=len(bm.tool_vram))
    inf = math.inf
    d = np.full((n, 3), inf)
    g = np.zeros((n, 3))
    c = np.zeros((n, 3))
    mem = np.zeros((n, 3))
    pen = np.zeros((n, 3))
    budget = bm.budget_mb
    for p in range(n):
        t = bm.tool[p]
        share = bm.tool_vram[t] / count[t]
        for code in bm.allowed[p]:
            if code == 1 and barred[t]:
                continue
            d[p, code] = bm.dur[p, code]
            g[p, code] = bm.gpu_w[p] if code else 0.0
            c[p, code] = bm.cpu_w[p] if code == 0 else 0.0
            if code == 1:
                mem[p, code] = share * bm.gpu_ms[p] / budget
            elif code == 2:
                mem[p, code] = bm.queue_mem[p] / budget
            pen[p, code] = share if code == 1 and not paid[t] else 0.0
    while steps > 2 and math.comb(steps + 3, 3) * 13 * n > DUAL_CELLS:  # memory is grid x nodes x 3
        steps -= 1
    grid = [(a, b_, c_, steps - a - b_ - c_) for a in range(steps + 1) for b_ in range(steps + 1 - a)
            for c_ in range(steps + 1 - a - b_)]
    w = np.array(grid, dtype=np.float64) / steps  # (G, 4)
    finite = np.isfinite(d)
    scale = float(d[finite].max()) / max(1.0, float(bm.tool_vram.max(initial=1.0)))
    lambdas = np.concatenate([[0.0], scale * np.geomspace(1e-3, 10.0, 12)])
    w = np.repeat(w, len(lambdas), axis=0)
    lam = np.tile(lambdas, len(grid))
    base = (w[:, 1, None, None] * g[None] + w[:, 2, None, None] * c[None] + w[:, 3, None, None] * mem[None]
            + lam[:, None, None] * pen[None])
    off = np.where(finite[None], base, inf).min(axis=2)  # (G, n): cheapest code, no critical-path term
    on = np.where(finite[None], base + w[:, 0, None, None] * np.where(finite, d, 0.0)[None], inf).min(axis=2)
    gain = on - off
    longest = np.zeros_like(gain)
    for p in range(n):  # positions are in topological order
        before = [longest[:, u] for u, _ in bm.preds[p]]
        longest[:, p] = gain[:, p] + (np.max(before, axis=0) if before else 0.0)
    value = off.sum(axis=1) + longest.max(axis=1) - lam * budget_left
    return float(value.max())


def root_bound_ms(scenario: Scenario) -> float:
    """The bound of the empty mapping: holds for every mapping, costs no search."""
    return float(BoundModel(scenario).root().lb[0])


__all__ = ["MAX_FRONTIER_CELLS", "LowerBound", "dual_bound_ms", "lower_bound", "root_bound_ms"]
