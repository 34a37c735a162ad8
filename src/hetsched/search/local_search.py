"""The best-known search: iterated local search with large-neighbourhood moves over the noise-free simulator.

Used for workflows too large for the exact search (:mod:`hetsched.search.oracle`), and by the exact
search itself for its first incumbent. Anytime: it returns the best mapping found when its budget
ends, which is either a time budget (``max_seconds``) or a number of simulations (``max_evals``;
then the result is the same for a seed on every machine), or sooner when ``STALL_STEPS`` steps in
a row simulate nothing new (it has converged: every move it tries is known).

One iteration:

1. **Descent.** Single-node moves (each node to each other placement; a seeded sample of
   ``MAX_NEIGHBOURS`` of them on long workflows), tool moves (every node
   of one tool to one placement: ``gpu_now`` residency is per tool, so these cross VRAM cliffs
   that single moves cannot) and residency swaps (one tool made resident while resident tools
   leave for the queue or the CPU until the ``gpu_now`` set fits: with the budget full, neither
   adding a tool nor removing one first is an improvement). Each neighbourhood is bounded at once with
   :class:`~hetsched.search.bounds.BoundModel`; a neighbour whose lower bound cannot beat the current
   mapping is never simulated, the others are simulated in order of their bound and the first
   improvement is taken.
2. **Window re-optimization (large neighbourhood).** A window of up to ``WINDOW`` nodes (a node and
   its DAG neighbours, the nodes of one tool, a sample of the nodes that end last, or a run of
   consecutive nodes in topological order), or of up to ``WINDOW - 1`` whole tools (one not resident
   and resident ones), is re-optimized with the rest fixed: every combination is bounded, and
   the survivors are simulated in bound order until the bound reaches the best value or
   ``WINDOW_SIMULATIONS`` have been simulated (the first improvement is taken).
3. **Kick.** After ``PATIENCE`` windows without improvement, restart from the best mapping with a
   tool made resident, one tool moved or a few random nodes moved, then resident tools moved out
   at random until the ``gpu_now`` set fits. With ``exchange`` (three-way workflows; off by default and
   in the best-known race, ``hetsched.search.reference.RACE_EXCHANGE``), ``EXCHANGE_KICK_SHARE`` of the
   kicks exchange work between the CPU and the GPU instead: a few nodes one way and several the other,
   drawn by their speedup (:meth:`_Search.exchange`).

Starts: all-CPU (always feasible), all ``gpu_now`` and all ``gpu_queue`` where they can run, and
a greedy start (each node on its faster isolated device, then ``gpu_now`` tools moved to the
queue by the least load per MB freed until the budget holds). The search descends from the best
of them; with ``descend_starts`` then from each other start it was given and the greedy one as well
(with a move order of their own, so the search from the best start is unchanged until a kick starts
from a better basin): their basins can be percents apart (a 50-tool fork-join: the greedy start's
1.6% below the best start's, a basin a 400,000-simulation search from the best start never reached),
and a descent costs a few thousand simulations. With an ``origin`` the search is one trajectory of the
best-known reference's race (:func:`hetsched.search.reference.race`): it descends from that mapping
whatever the other starts are worth.

Imports the model, the simulator and the bounds.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from hetsched.model import Placement, Scenario
from hetsched.model.contention import queue_load_ms, simulate, simulate_e2e
from hetsched.model.descent import exchange_codes
from hetsched.model.mapping import CPU_CODE as CPU
from hetsched.model.mapping import NOW_CODE as NOW
from hetsched.model.mapping import QUEUE_CODE as QUEUE
from hetsched.search.bounds import BoundModel

WINDOW = 6
"""Largest number of nodes a window move re-optimizes exactly (3^6 = 729 combinations)."""
PATIENCE = 12
"""Windows without improvement before a kick."""
MAX_NEIGHBOURS = 1024
"""Single-node moves bounded per descent step; longer workflows get a seeded random sample of them."""
WINDOW_SIMULATIONS = 60
"""Most simulations one window move spends (its combinations simulated in order of their bound):
on long workflows a full window of six nodes simulated up to 300 of its 728 neighbours, so the
windows took nearly the whole budget and left a handful of kicks; past the first few dozen in
bound order an improvement is rare. The last window, which proves a workflow of up to ``WINDOW``
free nodes optimal, is never capped."""
STALL_STEPS = 1000
"""Search steps (bounded neighbourhoods) in a row that simulate nothing new before the search stops: it has
converged, every move it tries is already known (a small workflow, a large ``max_evals``), and would
otherwise keep bounding cached moves until its budget ends."""
EXCHANGE_KICK_SHARE = 0.3
"""With ``exchange`` (three-way workflows; ``hetsched.search.reference.RACE_EXCHANGE``), the share of kicks that
exchange work between the CPU and the GPU (:meth:`_Search.exchange`), as the ``rules`` decider's search does in its last
phase (``hetsched.deciders.search.EXCHANGE_KICK_SHARE_3W``; the move is the same, reimplemented here: the searches
may not import the deciders). The other kicks as before, their shares the rest."""
EXCHANGE_FEW = (1, 3)
"""How many nodes an exchange kick moves one way (drawn uniformly in this range)..."""
EXCHANGE_MANY = (2, 8)
"""...and how many the other way: in half of them ``EXCHANGE_FEW`` GPU nodes go to the CPU and ``EXCHANGE_MANY``
CPU nodes onto the GPU, in the other half the counts are the other way round."""
_STARTS_SEED = 0x5EED  # the start descents' own move order (``descend_starts``)
_IMPROVE = 1e-9  # relative: a move must beat the current E2E by more than this
_CACHE_MAX = 200_000


@dataclass(frozen=True)
class SearchResult:
    """What one local search found."""

    codes: tuple[int, ...]
    """Best mapping found, as placement codes in workflow node order."""
    e2e_ms: float
    """Its noise-free E2E."""
    evaluations: int
    """Simulations run."""
    seconds: float
    """Wall time spent."""
    elite: tuple[tuple[float, tuple[int, ...]], ...]
    """The best distinct feasible mappings seen, (E2E, codes) in increasing order (up to ``keep``)."""
    proven_optimal: bool
    """True when the search stopped because it proved its best optimal (a workflow small enough to
    be one window, solved exactly from the best); False when it stopped on its budget."""


class Evaluator:
    """Noise-free E2E of code tuples (inf when the mapping cannot run), memoized, counting simulations."""

    def __init__(self, scenario: Scenario, bounds: BoundModel | None = None) -> None:
        self.scenario = scenario
        self.compiled = scenario.compiled
        self.bounds = bounds or BoundModel(scenario)
        self._cache: dict[tuple[int, ...], float] = {}
        self.evaluations = 0
        self.sim_seconds = 0.0
        self.starts: list[tuple[int, ...]] | None = None
        """The search's own starts (:func:`start_mappings`), once computed."""

    def static_ok(self, codes: Sequence[int]) -> bool:
        """``Scenario.infeasibility``'s budget checks (:meth:`Compiled.static_ok`); deadlocks are left
        to the simulation."""
        return self.compiled.static_ok(codes)

    def __call__(self, codes: tuple[int, ...], *, checked: bool = False) -> float:
        """E2E of ``codes`` (inf when it cannot run); ``checked``: the caller has already made
        sure the budget checks pass."""
        hit = self._cache.get(codes)
        if hit is not None:
            return hit
        if not checked and not self.static_ok(codes):
            e = math.inf
        else:
            t0 = time.perf_counter()
            e = simulate_e2e(self.compiled, codes)
            self.sim_seconds += time.perf_counter() - t0
            self.evaluations += 1
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[codes] = e
        return e

    def cached(self, codes: tuple[int, ...]) -> bool:
        """Whether the E2E of ``codes`` is known without a simulation."""
        return codes in self._cache

    def learn(self, known: Iterable[tuple[tuple[int, ...], float]]) -> None:
        """Take these (codes, E2E) as known, counting no simulation (what another evaluator simulated)."""
        for codes, e in known:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[codes] = e


class _Budget(Exception):
    """The search budget is spent."""


class _Search:
    def __init__(
        self,
        scenario: Scenario,
        ev: Evaluator,
        rng: random.Random,
        deadline: float,
        max_evals: int | None,
        keep: int,
        descend_starts: bool = False,
        origin: tuple[int, ...] | None = None,
        target_ms: float = -math.inf,
        max_steps: int | None = None,
        exchange: bool = False,
    ) -> None:
        self.sc = scenario
        self.exchange_kicks = exchange and any(QUEUE in a for a in ev.compiled.allowed)
        self.target_ms = target_ms
        self.descend_starts = descend_starts
        self.origin = origin
        self.ev = ev
        self.bm = ev.bounds
        self.rng = rng
        self.deadline = deadline
        self.max_evals = max_evals
        self.keep = keep
        c = ev.compiled  # the kernel's compile: allowed codes, edges, tools
        self.ids = c.names
        self.n = c.n
        self.allowed = list(c.allowed)
        self.nbrs = [sorted({*c.preds[i], *(w for w, _ in c.succs[i])}) for i in range(self.n)]
        self.topo = [c.index[v] for v in scenario.workflow.topo_order]
        by_tool: dict[int, list[int]] = {}
        for i in range(self.n):
            by_tool.setdefault(c.tool_idx[i], []).append(i)
        self.tool_nodes = [nodes for nodes in by_tool.values() if len(self.allowed[nodes[0]]) > 1 and len(nodes) > 1]
        self.gpu_tools = [nodes for nodes in by_tool.values() if NOW in self.allowed[nodes[0]]]
        """Nodes of each tool that may be resident (``gpu_now``), by tool."""
        self.tool_vram = [c.tool_vram[c.tool_idx[nodes[0]]] for nodes in self.gpu_tools]
        self.budget = c.budget
        self.best: tuple[int, ...] = tuple(CPU for _ in self.ids)
        self.best_e = math.inf
        self.elite: dict[tuple[int, ...], float] = {}
        self.nprng = np.random.default_rng(rng.getrandbits(64))
        moves = [(i, c) for i in range(self.n) for c in self.allowed[i]]
        self._mv_nodes = np.array([i for i, _ in moves], dtype=np.intp)
        self._mv_codes = np.array([c for _, c in moves], dtype=np.int8)
        self.steps = 0
        self._new_at = (0, ev.evaluations)
        """(step, simulations) when the last new simulation was seen."""
        self._tail_of: tuple[int, ...] | None = None
        self._tail: list[int] = []
        self.max_steps = 0 if max_evals is None else 2 * (max_evals - ev.evaluations) + 20
        if max_steps is not None and max_evals is not None:
            self.max_steps = min(self.max_steps, max_steps)

    # ------------------------------------------------------------------ evaluation
    def check(self) -> None:
        if self.ev.evaluations != self._new_at[1]:
            self._new_at = (self.steps, self.ev.evaluations)
        elif self.steps - self._new_at[0] >= STALL_STEPS:
            raise _Budget
        if self.max_evals is not None and (self.ev.evaluations >= self.max_evals or self.steps >= self.max_steps):
            raise _Budget
        if time.perf_counter() >= self.deadline or self.best_e <= self.target_ms:
            raise _Budget

    def cost(self, codes: tuple[int, ...]) -> float:
        if not self.ev.cached(codes):
            self.check()
        e = self.ev(codes)
        if e < math.inf:
            self._note(codes, e)
        return e

    def _note(self, codes: tuple[int, ...], e: float) -> None:
        if e < self.best_e or (e == self.best_e and codes < self.best):
            self.best, self.best_e = codes, e
        if self.keep > 1 or not self.elite:
            self.elite[codes] = e
            if len(self.elite) > 4 * self.keep + 64:
                kept = sorted(self.elite.items(), key=lambda kv: (kv[1], kv[0]))[: self.keep]
                self.elite = dict(kept)
        elif e <= min(self.elite.values()):
            self.elite = {codes: e}

    def first_improvement(
        self, cur: tuple[int, ...], cur_e: float, cands: NDArray[np.int8], max_sims: int | None = None
    ) -> tuple[tuple[int, ...], float] | None:
        """Simulate candidates (rows of codes in node order) in order of their bound while the
        bound can beat ``cur_e`` (and, with ``max_sims``, at most that many not simulated before);
        return the first that improves."""
        if not len(cands):
            return None
        self.steps += 1  # bounding work counts too, so a search whose moves are all cached still ends
        self.check()
        rows = self.bm.bound_full(cands)
        lb = rows.lb
        fits = self.bm.fits(rows.vram_now)
        limit = cur_e * (1 - _IMPROVE)
        order = np.argsort(lb, kind="stable")
        for k in order.tolist():
            if lb[k] - self.bm.slack(lb[k]) >= limit:
                break
            if not fits[k]:
                continue
            codes = tuple(cands[k].tolist())
            if max_sims is not None:
                if max_sims <= 0:
                    break
                if not self.ev.cached(codes):
                    max_sims -= 1
            e = self.cost(codes)
            if e < limit:
                return codes, e
        return None

    # ------------------------------------------------------------------ moves
    def neighbours(self, cur: tuple[int, ...]) -> NDArray[np.int8]:
        """Single-node moves and tool moves from ``cur``, in a seeded random order."""
        base = np.array(cur, dtype=np.int8)
        keep = np.flatnonzero(self._mv_codes != base[self._mv_nodes])
        if len(keep) > MAX_NEIGHBOURS:  # a seeded sample on long workflows
            keep = np.sort(keep[self.nprng.permutation(len(keep))][:MAX_NEIGHBOURS])
        nodes, codes = self._mv_nodes[keep], self._mv_codes[keep]
        single = np.repeat(base[None, :], len(nodes), axis=0)
        single[np.arange(len(nodes)), nodes] = codes
        blocks = [single]
        for group in self.tool_nodes[:MAX_NEIGHBOURS]:
            for c in self.allowed[group[0]]:
                if int((base[group] != c).sum()) > 1:
                    row = base.copy()
                    row[group] = c
                    blocks.append(row[None, :])
        swaps = self.swaps(base)
        if len(swaps):
            blocks.append(swaps)
        out = np.concatenate(blocks, axis=0)
        return out[self.nprng.permutation(len(out))]

    def _evicted_to(self, nodes: list[int], to: int) -> int:
        """Where the nodes of an evicted resident tool go: ``to`` when each of them may take it, else the CPU."""
        if to == QUEUE and (QUEUE not in self.allowed[nodes[0]] or self.ev.compiled.vram[nodes[0]] > self.budget):
            return CPU
        return to

    def swaps(self, base: NDArray[np.int8]) -> NDArray[np.int8]:
        """Residency swaps: one tool made resident (all its nodes ``gpu_now``) while resident tools
        leave for the queue or the CPU until the ``gpu_now`` set fits the budget again (the one
        resident that frees enough with the least memory, else the largest first). A single move
        cannot cross this: with the budget full, adding a tool is infeasible and removing one
        first is worse, so the descent alone never reaches a better resident set."""
        is_now = [bool((base[nodes] == NOW).any()) for nodes in self.gpu_tools]
        resident = [k for k, r in enumerate(is_now) if r]
        if not resident:
            return np.empty((0, self.n), dtype=np.int8)
        used = sum(self.tool_vram[k] for k in resident)
        by_size = sorted(resident, key=lambda j: -self.tool_vram[j])
        rows: list[NDArray[np.int8]] = []
        for k, nodes in enumerate(self.gpu_tools):
            if is_now[k]:
                continue
            need = used + self.tool_vram[k] - self.budget
            if need <= 0 or self.tool_vram[k] > self.budget:
                continue
            fit = [j for j in resident if self.tool_vram[j] >= need]
            if fit:
                out = [min(fit, key=lambda j: self.tool_vram[j])]
            else:
                out, freed = [], 0.0
                for j in by_size:
                    out.append(j)
                    freed += self.tool_vram[j]
                    if freed >= need:
                        break
            for to in (QUEUE, CPU):
                row = base.copy()
                row[nodes] = NOW
                for j in out:
                    gn = [i for i in self.gpu_tools[j] if base[i] == NOW]
                    row[gn] = self._evicted_to(gn, to)
                rows.append(row)
        if not rows:
            return np.empty((0, self.n), dtype=np.int8)
        return np.stack(rows)

    def descend(self, cur: tuple[int, ...], cur_e: float) -> tuple[tuple[int, ...], float]:
        while True:
            step = self.first_improvement(cur, cur_e, self.neighbours(cur))
            if step is None:
                return cur, cur_e
            cur, cur_e = step

    def window(self, cur: tuple[int, ...]) -> list[list[int]]:
        """Groups of nodes to re-optimize together (each group takes one placement): single nodes
        (DAG neighbours, one tool's nodes, the nodes that end last, a run in topological order)
        or whole tools (:meth:`residency_window`)."""
        kind = self.rng.random()
        if kind >= 0.8 and self.gpu_tools:
            return self.residency_window(cur)
        return [[i] for i in self.node_window(cur, kind / 0.8)]

    def node_window(self, cur: tuple[int, ...], kind: float) -> list[int]:
        free = [i for i in range(self.n) if len(self.allowed[i]) > 1]
        if not free:
            return []
        if kind < 0.4:
            seed_node = self.rng.choice(free)
            pool = [seed_node]
            frontier = list(self.nbrs[seed_node])
            while frontier and len(pool) < WINDOW:
                j = frontier.pop(self.rng.randrange(len(frontier)))
                if j not in pool and len(self.allowed[j]) > 1:
                    pool.append(j)
                    frontier.extend(k for k in self.nbrs[j] if k not in pool)
            return pool
        if kind < 0.6 and self.tool_nodes:
            nodes = list(self.rng.choice(self.tool_nodes))
            self.rng.shuffle(nodes)
            return nodes[:WINDOW]
        if kind < 0.8:
            return self.tail_window(cur, free)
        topo_free = [i for i in self.topo if len(self.allowed[i]) > 1]
        start = self.rng.randrange(max(1, len(topo_free) - WINDOW + 1))
        return topo_free[start : start + WINDOW]

    def tail_window(self, cur: tuple[int, ...], free: list[int]) -> list[int]:
        """A random ``WINDOW`` of the free nodes that end last under ``cur``: on wide workflows the
        E2E is set by what finishes last on each device, and these nodes are seldom DAG neighbours."""
        if self._tail_of != cur:
            end = simulate(self.ev.compiled, cur, timings=True).end
            self._tail_of = cur
            self._tail = sorted(free, key=lambda i: -end[i])[: 3 * WINDOW]
        return self.rng.sample(self._tail, k=min(WINDOW, len(self._tail)))

    def residency_window(self, cur: tuple[int, ...]) -> list[list[int]]:
        """One tool not resident and up to ``WINDOW - 2`` resident ones (others when fewer), each
        re-placed as a whole: the exchanges of the ``gpu_now`` set under a full budget, where one
        tool coming in needs several going out and each of those a place of its own."""
        resident = [k for k, nodes in enumerate(self.gpu_tools) if any(cur[i] == NOW for i in nodes)]
        outside = [k for k in range(len(self.gpu_tools)) if k not in resident]
        picked = [self.rng.choice(outside)] if outside else []
        pool = resident if len(resident) >= WINDOW - 1 else resident + [k for k in outside if k not in picked]
        picked += self.rng.sample(pool, k=min(len(pool), WINDOW - 1 - len(picked)))
        return [list(self.gpu_tools[k]) for k in picked]

    def solve_window(
        self, cur: tuple[int, ...], cur_e: float, groups: list[list[int]], max_sims: int | None = None
    ) -> tuple[tuple[int, ...], float] | None:
        """The first improvement among every placement of the groups (each group's nodes together)
        with the rest as in ``cur``."""
        if not groups:
            return None
        grids = np.meshgrid(*[np.array(self.allowed[g[0]], dtype=np.int8) for g in groups], indexing="ij")
        combos = np.stack([g.reshape(-1) for g in grids], axis=1)
        base = np.array(cur, dtype=np.int8)
        full = np.repeat(base[None, :], combos.shape[0], axis=0)
        for k, g in enumerate(groups):
            full[:, g] = combos[:, k : k + 1]
        full = full[(full != base).any(axis=1)]
        return self.first_improvement(cur, cur_e, full[self.nprng.permutation(len(full))], max_sims)

    def kick(self, cur: tuple[int, ...]) -> tuple[int, ...]:
        """A perturbation of ``cur``: a tool made resident (``gpu_now``), a tool moved, or a few random
        nodes moved; then resident tools leave at random until the ``gpu_now`` set fits (a kick
        that breaks the budget would be wasted)."""
        if self.exchange_kicks and self.rng.random() < EXCHANGE_KICK_SHARE:
            return self.exchange(cur)
        lst = list(cur)
        r = self.rng.random()
        keep = -1
        outside = [k for k, nodes in enumerate(self.gpu_tools) if any(lst[i] != NOW for i in nodes)]
        if outside and r < 0.3:
            keep = self.rng.choice(outside)
            for i in self.gpu_tools[keep]:
                lst[i] = NOW
        elif self.tool_nodes and r < 0.45:
            nodes = self.rng.choice(self.tool_nodes)
            c = self.rng.choice(self.allowed[nodes[0]])
            for i in nodes:
                lst[i] = c
        else:
            free = [i for i in range(self.n) if len(self.allowed[i]) > 1]
            for i in self.rng.sample(free, k=min(len(free), self.rng.randint(2, max(2, min(8, self.n // 6 + 2))))):
                lst[i] = self.rng.choice([c for c in self.allowed[i] if c != lst[i]])
        self.evict(lst, keep)
        return tuple(lst)

    def exchange(self, cur: tuple[int, ...]) -> tuple[int, ...]:
        """An exchange kick (``EXCHANGE_KICK_SHARE``): GPU nodes (``gpu_now`` or ``gpu_queue``) drawn with weight
        their GPU time (a queued one's with its load) over their CPU time go to the CPU, and CPU nodes that may run
        on the GPU, drawn with weight their speedup, go to the GPU (``gpu_now`` where their tool is resident or
        the queue is not allowed, else ``gpu_queue``); few one way and several the other (``EXCHANGE_FEW``,
        ``EXCHANGE_MANY``, either way round); then resident tools leave at random until the ``gpu_now`` set fits.
        Where the CPU is saturated (E2E its work over its cores), the better basins shift work between the
        devices in several nodes at once, each move alone a loss; a random kick rarely draws such a set."""
        c = self.ev.compiled
        k_out, k_in = self.rng.randint(*EXCHANGE_FEW), self.rng.randint(*EXCHANGE_MANY)
        if self.rng.random() < 0.5:
            k_out, k_in = k_in, k_out
        lst, _ = exchange_codes(self.rng, cur, self.allowed, c.tool_idx, c.cpu_ms, c.gpu_ms, c.load_ms, k_out, k_in,
                                admit_queued=lambda i: c.vram[i] <= self.budget)  # a queued node must fit alone
        self.evict(lst, -1)
        return tuple(lst)

    def evict(self, lst: list[int], keep: int) -> None:
        """Move random resident tools (not ``keep``) to the queue or the CPU until the ``gpu_now`` set fits."""
        resident = [k for k, nodes in enumerate(self.gpu_tools) if any(lst[i] == NOW for i in nodes)]
        used = sum(self.tool_vram[k] for k in resident)
        others = [k for k in resident if k != keep]
        while used > self.budget and others:
            k = others.pop(self.rng.randrange(len(others)))
            nodes = [i for i in self.gpu_tools[k] if lst[i] == NOW]
            to = self._evicted_to(nodes, self.rng.choice((QUEUE, CPU)))
            for i in nodes:
                lst[i] = to
            used -= self.tool_vram[k]

    # ------------------------------------------------------------------ starts
    def starts(self) -> list[tuple[int, ...]]:
        if self.ev.starts is None:  # the same for every search sharing the evaluator (a race's trajectories)
            uni = [tuple(c if c in a else CPU for a in self.allowed) for c in (CPU, NOW, QUEUE)]
            self.ev.starts = list(dict.fromkeys([*uni, self.greedy()]))
        return list(self.ev.starts)

    def greedy(self) -> tuple[int, ...]:
        """Each node on its faster isolated device; then tools leave gpu_now for the queue (or the CPU)
        by the least added time per MB freed until the gpu_now set fits."""
        sc = self.sc
        codes = []
        for v in self.ids:
            card = sc.card_of(v)
            codes.append(NOW if card.gpu_ms is not None and card.gpu_ms < card.cpu_ms else CPU)
        budget = sc.machine.vram_budget_mb
        wf = sc.workflow
        queue_ok = Placement.GPU_QUEUE in sc.placements  # the mode's placements (members, not codes)
        while True:
            tools = {wf.tool_of[v] for i, v in enumerate(self.ids) if codes[i] == NOW}
            need = sum(sc.cards[t].vram_mb for t in tools)
            if need <= budget or not tools:
                break

            def penalty(t: str) -> float:
                card = sc.cards[t]
                k = sum(1 for i, v in enumerate(self.ids) if codes[i] == NOW and wf.tool_of[v] == t)
                if queue_ok and card.vram_mb <= budget:
                    extra = queue_load_ms(card, sc.machine)  # the load the kernel charges a queued node
                else:
                    extra = card.cpu_ms - (card.gpu_ms or 0.0)
                return k * extra / max(card.vram_mb, 1e-9)

            worst = min(sorted(tools), key=penalty)
            card = sc.cards[worst]
            to = QUEUE if queue_ok and card.vram_mb <= budget else CPU
            for i, v in enumerate(self.ids):
                if codes[i] == NOW and wf.tool_of[v] == worst:
                    codes[i] = to
        return tuple(codes)

    # ------------------------------------------------------------------ driver
    def run(self, starts: Iterable[tuple[int, ...]]) -> bool:
        """Search until the budget ends (True) or nothing is left to try (False)."""
        try:
            first = self.starts()
            self.ev(first[0])  # all-CPU always runs: there is a result whatever the budget
            self._note(first[0], self.ev(first[0]))
            given = [tuple(s) for s in starts]
            if self.origin is not None and self.ev(self.origin) < math.inf:  # runs whatever the budget, too
                self._note(self.origin, self.ev(self.origin))
            for s in [*given, *first[1:]] if self.origin is None else []:
                self.cost(s)
            if self.n == 0 or not any(len(a) > 1 for a in self.allowed):
                return False
            origin = self.best if self.origin is None or self.ev(self.origin) == math.inf else self.origin
            cur, cur_e = self.descend(origin, self.ev(origin))
            if self.descend_starts:
                # each other start's basin, with a generator of its own so that the search from the best
                # start goes on as without them; it kicks from whichever local optimum is the best
                main_rng, self.nprng = self.nprng, np.random.default_rng(_STARTS_SEED)
                for s in sorted(dict.fromkeys([*given, self.greedy()]), key=lambda s: (self.ev(s), s)):
                    if s != origin and self.ev(s) < math.inf:
                        self.descend(s, self.ev(s))
                self.nprng = main_rng
            stale = 0
            seen_windows: set[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]] = set()
            while True:
                nodes = self.window(cur)
                key = (cur, tuple(sorted(tuple(g) for g in nodes)))
                if key in seen_windows:
                    stale += 1
                else:
                    seen_windows.add(key)
                    step = self.solve_window(cur, cur_e, nodes, WINDOW_SIMULATIONS)
                    if step is not None:
                        cur, cur_e = self.descend(*step)
                        stale = 0
                        continue
                    stale += 1
                if stale >= PATIENCE:
                    free = [i for i in range(self.n) if len(self.allowed[i]) > 1]
                    if len(free) <= WINDOW:  # the whole workflow is one window: solve it from the best
                        step = self.solve_window(self.best, self.best_e, [[i] for i in free])
                        if step is None:
                            return False  # nothing beats the best: it is optimal
                        cur, cur_e = self.descend(*step)
                        stale = 0
                        continue
                    kicked = self.kick(self.best)
                    e = self.cost(kicked)
                    if e < math.inf:
                        cur, cur_e = self.descend(kicked, e)
                    else:
                        cur, cur_e = self.best, self.best_e
                    stale = 0
        except _Budget:
            return True


def local_search(
    scenario: Scenario,
    *,
    seed: int = 0,
    max_seconds: float | None = None,
    max_evals: int | None = None,
    starts: Iterable[Sequence[int]] = (),
    keep: int = 1,
    evaluator: Evaluator | None = None,
    descend_starts: bool = False,
    origin: Sequence[int] | None = None,
    target_ms: float | None = None,
    max_steps: int | None = None,
    exchange: bool = False,
) -> SearchResult:
    """Iterated local search for the lowest noise-free E2E (see the module docstring).

    Args:
        scenario: the scenario.
        seed: seeds the move order, the windows and the kicks.
        max_seconds: time budget; with ``max_evals`` too, the search stops at whichever ends first.
        max_evals: budget in simulations; alone (``max_seconds=None``) it makes the result
            independent of the machine's speed.
        starts: extra start mappings (codes in node order), e.g. a previous best.
        keep: how many distinct best mappings to return in ``elite``.
        evaluator: reuse an evaluator (and its memo) across calls.
        descend_starts: after the best start's descent, descend from each other start given and
            the greedy start too (each to its local optimum); the kicks then start from the best
            found. By default only the best start is descended.
        origin: one trajectory of a race (:func:`hetsched.search.reference.best_known`): descend from this
            mapping and kick from the best found since, trying no other start (all-CPU aside, which always
            runs), so trajectories from different origins explore different basins; ``starts`` and
            ``descend_starts`` do not apply.
        target_ms: stop as soon as a mapping this good is found (a proven lower bound: nothing better exists,
            and a converged search on a small workflow would otherwise keep bounding known moves to its budget).
        max_steps: with ``max_evals``, at most this many search steps (bounded neighbourhoods) as well (by
            default twice the simulations): on small workflows a step bounds a neighbourhood of mostly known
            mappings and costs tens of simulations' time.
        exchange: on three-way workflows, ``EXCHANGE_KICK_SHARE`` of the kicks exchange work between the CPU
            and the GPU (:meth:`_Search.exchange`); off by default (the exact search's incumbent, a plain ILS).
    """
    t0 = time.perf_counter()
    if max_evals is None and max_seconds is None:
        raise ValueError("local_search needs max_seconds or max_evals")
    ev = evaluator or Evaluator(scenario)
    deadline = t0 + (max_seconds if max_seconds is not None else math.inf)
    budget = None if max_evals is None else ev.evaluations + max_evals
    given = [tuple(int(c) for c in s) for s in starts]
    if origin is not None and (descend_starts or given):
        raise ValueError("local_search: origin excludes starts and descend_starts")
    search = _Search(scenario, ev, random.Random(seed), deadline, budget, keep, descend_starts,
                     None if origin is None else tuple(int(c) for c in origin),
                     -math.inf if target_ms is None else target_ms, max_steps, exchange)
    on_budget = search.run(given)
    elite = sorted(((e, c) for c, e in search.elite.items()), key=lambda x: (x[0], x[1]))[:keep]
    return SearchResult(
        search.best, search.best_e, ev.evaluations, time.perf_counter() - t0, tuple(elite), not on_budget
    )


def start_mappings(scenario: Scenario, evaluator: Evaluator | None = None) -> list[tuple[int, ...]]:
    """The search's own starts (codes in node order): all-CPU, all ``gpu_now`` and all ``gpu_queue`` where
    they can run, and the greedy start (see the module docstring), without duplicates."""
    ev = evaluator or Evaluator(scenario)
    return _Search(scenario, ev, random.Random(0), math.inf, None, 1).starts()


__all__ = ["EXCHANGE_FEW", "EXCHANGE_KICK_SHARE", "EXCHANGE_MANY",
           "MAX_NEIGHBOURS", "PATIENCE", "STALL_STEPS", "WINDOW", "WINDOW_SIMULATIONS", "Evaluator", "SearchResult",
           "local_search", "start_mappings"]
