"""The ``rules`` decider's search: the mappings its own estimates (:mod:`hetsched.deciders.estimate`)
rank lowest, within a budget of estimates.

- When the whole space (2^n or 3^n, fewer for CPU-only tools) fits the budget, every mapping is
  estimated.
- Otherwise an iterated local search: a first-improvement descent from the best of the starting
  mappings, then, while the budget lasts, a random kick (two to four nodes, or every node of one
  tool, to other placements; in a screened binary search also, one time in five, one resident tool,
  drawn by its VRAM, evicted whole to the CPU: ``EJECT_KICK_SHARE``; and, before those, three in ten
  exchange work between the devices, a few ``gpu_now`` nodes that gain least there to the CPU and several
  CPU nodes that gain most to ``gpu_now``: ``EXCHANGE_KICK_SHARE``; in a screened three-way search, in its
  last phase (``local_search``'s ``exchange_evaluations``), such exchanges between the CPU and both GPU
  placements, either way round, ``EXCHANGE_KICK_SHARE_3W``) of the
  best mapping so far and a descent from there, kept when it is better (Lourenco, Martin, Stuetzle,
  "Iterated Local Search", Handbook of Metaheuristics, 2003).
- The descent's neighbourhood: every one-node move; every tool's nodes moved together (a tool is
  resident once, so a lone node rarely pays for it); and, when moving a node to ``gpu_now`` does
  not fit the budget, *making room*: the resident tools of least GPU benefit per MB leave
  (to ``gpu_queue`` or to the CPU) until it fits (the paper's S13 exchange, generalized).
- Screened (``screen=True``, the decider's choice for large workflows): each descent step simulates
  the current mapping once with its timings and tries only the moves of the nodes :func:`focus`
  names (its critical chain, what shared a device with it, what held the memory it waited for),
  and part of the budget (half by default) races descents from every start before the kicks: successive halving
  (Karnin, Koren, Somekh, "Almost Optimal Exploration in Multi-Armed Bandits", ICML 2013; Jamieson,
  Talwalkar, AISTATS 2016): in each of log2(starts) + 1 phases the descents still in the race share
  the phase's estimates equally, then the half with the higher estimates drop out (a descent that
  converged keeps its result and needs no more); the last one descends to convergence. The budget
  goes to the promising basin instead of being cut into equal shares that stop every descent early.
  Making room, screened, also judges evictions by the current run: first the resident tools whose
  eviction costs that run least per MB (the CPU time or load it adds beyond each node's slack, from
  the same timings), then the cards' ranking; and a tool moved to ``gpu_now`` whole makes room too.
  The cards' benefit per MB misjudges a tool that ends early (its GPU time saves nothing the run
  waits for) and one on the critical chain alike: the knapsack exchanges the descent missed.
- Late starts (round 0 of the ``rules`` decider from 17 nodes on): after the kicks, descents from
  further starts that lie in other basins (structural mappings: the greedy one, the CPU-heavy ones;
  :func:`late_starts`), then kicks from the best of all until the budget ends. Racing them with the
  other starts instead dropped the basin that wins on other workflows (successive halving judges a
  descent by its first steps); after the kicks they cost the first starts nothing.
- Polish (round 0 of the ``rules`` decider from 17 nodes on: ``local_search``'s ``polish_evaluations``): last,
  one descent from the best over every node's moves, unscreened (at convergence a one-node move off the
  critical chain can still lower the estimate); the estimates before are the same, so it can only gain.
- Anytime (:func:`resume`, the ``rules`` decider's later rounds from 17 nodes on): a search goes on from
  its best mapping with more kicks and descents of a new seed, every estimate kept; it counts the
  descents' timings too, since its kicks often land on known ground; with ``strength`` k, each kick is k
  kicks composed.

The budget counts distinct mappings estimated, never time, so the result is the same on any
machine. Deterministic for its arguments (the kicks come from ``seed``). Imports only
``hetsched.model`` and numpy; the estimates come from any :class:`Estimates` (the ``rules`` decider's
:class:`hetsched.deciders.estimate.Estimator`, or the exact model in the best-known reference's screened lane,
``hetsched.search.reference``), so both rooms share it here, below them (``hetsched.deciders.search``
re-exports it).
"""

from __future__ import annotations

import copy
import itertools
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from hetsched.model.contention import Compiled, Timings
from hetsched.model.mapping import CPU_CODE, NOW_CODE, QUEUE_CODE

Codes = tuple[int, ...]
"""Placement codes in workflow node order."""


class Estimates(Protocol):
    """What the search reads of an estimator (:class:`hetsched.deciders.estimate.Estimator` is one): the
    compiled scenario, the per-node CPU and GPU times, the VRAM budget, estimates, timings, static checks."""

    @property
    def compiled(self) -> Compiled: ...

    @property
    def budget(self) -> float: ...

    @property
    def cpu_ms(self) -> Sequence[float]: ...

    @property
    def gpu_ms(self) -> Sequence[float]: ...

    def e2e(self, place: Sequence[int]) -> float: ...

    def timings(self, place: Sequence[int]) -> Timings | None: ...

    def static_ok(self, place: Sequence[int]) -> bool: ...


@dataclass
class SearchResult:
    """What one search found."""

    best: Codes
    """The mapping with the lowest estimate."""
    e2e_ms: float
    """Its estimate (inf when nothing can run, which all-CPU rules out)."""
    seen: dict[Codes, float] = field(default_factory=dict)
    """Every mapping estimated, with its estimate (inf: cannot run)."""
    exhaustive: bool = False
    """True when every mapping was estimated."""
    budget: int = 0
    """The most mappings it could estimate (``max_evaluations``)."""
    screened: bool = False
    """True when its descents tried only the moves of the nodes :func:`focus` names."""
    state: _Search | None = field(default=None, repr=False, compare=False)
    """The search itself, for :func:`resume` (None when exhaustive)."""
    timed_out: bool = False
    """True when its ``deadline`` passed before its budget of estimates was spent (it stopped there)."""

    def spent(self) -> str:
        """What the search spent, for a decision's record."""
        how = "; descents screened by each mapping's critical chain" if self.screened else ""
        cut = "; stopped at its time budget" if self.timed_out else ""
        return f"{len(self.seen)} mappings estimated of a budget of {self.budget}{how}{cut}"

    def ranked(self, k: int) -> list[tuple[Codes, float]]:
        """The ``k`` lowest estimates found (finite only), lowest first."""
        finite = [(c, e) for c, e in self.seen.items() if math.isfinite(e)]
        finite.sort(key=lambda ce: (ce[1], ce[0]))
        return finite[:k]


EXCHANGE_KICK_SHARE = 0.3
"""In a screened binary search, the share of kicks that exchange work between the devices
(:meth:`_Search.exchange`): a few ``gpu_now`` nodes that gain least on the GPU go to the CPU and several CPU
nodes that gain most go to ``gpu_now``, together. Where the GPU is shared (the critical chain a GPU node
stretched by the others' GPU work), the better basins hold another balance of work between the devices:
on three 100-tool binary workflows whose round 0 ended 4.6-7.2% above the best known, the best-known
mapping differs from round 0's in 3-4 demotions and 8-12 promotions; every one of those moves alone is a
loss, and so are all the demotions or all the promotions without the others (the demoted work overloads
the CPU, the promoted work the GPU), while a random kick of 2-4 nodes rarely draws such a set. The other
kicks (and their shares) follow as before; three-way searches have a share of their own
(``EXCHANGE_KICK_SHARE_3W``), unscreened ones (under ``SCREEN_MIN_NODES`` nodes in the ``rules`` decider)
never make it."""
EXCHANGE_KICK_SHARE_3W = 0.3
"""In a screened three-way search, the share of kicks that exchange work between the CPU and the GPU
(:meth:`_Search.exchange`): a few GPU nodes (``gpu_now`` or ``gpu_queue``) to the CPU and several CPU nodes to
the GPU (queued, or ``gpu_now`` where their tool is resident), together. On 100-tool three-way workflows
whose round 0 ended 2-7% above the best known, the better mappings differ from round 0's in 30-60 nodes
that shift work between the devices (the CPU saturated: E2E equal to its work over its cores, the better
mapping with 6-10% less CPU work and the same GPU work), every move toward them alone a loss or neutral.
They are drawn only in the last phase of a search that has one (``local_search``'s ``exchange_evaluations``:
round 0 of the ``rules`` decider, ``hetsched.deciders.rules.SCREEN_EXCHANGE_FIRST_3W``) and in its continuations,
so the estimates before are those of the search without them; the other kicks as before, their shares the
rest."""
EXCHANGE_FEW_IN_3W = 0.5
"""The share of a three-way search's exchange kicks whose counts are the other way round: ``EXCHANGE_OUT`` CPU
nodes (the heavy ones, drawn by speedup) to the GPU and ``EXCHANGE_IN`` GPU nodes to the CPU (a queued node's
load counts against the GPU: the light queued nodes go). Where round 0's CPU is saturated, the better basin
can take one or two heavy CPU nodes onto the GPU queue and give it back its time by sending several small
queued nodes, each paying a load, to the CPU."""
EXCHANGE_OUT = (1, 3)
"""How many ``gpu_now`` nodes an exchange kick sends to the CPU (drawn uniformly in this range)..."""
EXCHANGE_IN = (2, 8)
"""...and how many CPU nodes it promotes to ``gpu_now`` (fewer when the VRAM budget does not hold them)."""
EJECT_KICK_SHARE = 0.2
"""In a screened binary search, the share of kicks that move one resident tool (drawn with probability
proportional to its VRAM) wholly to the CPU, the other kicks as before. In binary mode the GPU memory
is the only trade-off, and the exchange a descent cannot make is one large resident tool out for
several small ones in: each small one's promotion improves only once the room is free, and making room
(one tool in, residents out) goes the other way. After the eviction, the descent promotes them one by one."""


def focus(c: Compiled, place: Codes, tm: Timings) -> list[int]:
    """The nodes whose moves can shorten a recorded run, most promising first: the critical chain (the
    last sink back through the input that arrived last; longest first), then the nodes that shared a
    device with a chain node (longest overlap first), then, when a queued chain node waited for
    memory, the ``gpu_now`` nodes holding it. A move of any other node changes the E2E only through
    second-order effects, which the kicks of the iterated search leave to chance."""
    end, admitted, ready = tm.end, tm.admitted, tm.ready
    cpu_side = [p == CPU_CODE for p in place]
    v = max(c.sinks, key=lambda s: (end[s], -s))
    chain: list[int] = []
    while True:
        chain.append(v)
        preds = c.preds[v]
        if not preds:
            break
        # the input that arrived last (its end plus the PCIe copy when the edge crosses)
        best_u, best_t = preds[0], -1.0
        for u in preds:
            delay = next(d for w, d in c.succs[u] if w == v) if cpu_side[u] != cpu_side[v] else 0.0
            if end[u] + delay > best_t:
                best_u, best_t = u, end[u] + delay
        v = best_u
    # per node, its time on the device a chain node used while that chain node waited or ran (numpy:
    # O(n) per chain node in C, the sums in chain order)
    ends, admits = np.asarray(end), np.asarray(admitted)
    side = np.asarray(cpu_side)
    overlap = np.zeros(c.n)
    waited = False
    for v in chain:
        lo, hi = ready[v], end[v]  # from its inputs' arrival: a wait for memory or a load counts too
        if place[v] == QUEUE_CODE and admitted[v] > ready[v]:
            waited = True
        shared = np.minimum(hi, ends) - np.maximum(lo, admits)
        overlap += np.where((side == cpu_side[v]) & (shared > 0), shared, 0.0)
    overlap[chain] = 0.0
    order = sorted(chain, key=lambda v: (-(end[v] - admitted[v]), v))
    order += sorted((int(u) for u in np.flatnonzero(overlap > 0)), key=lambda u: (-overlap[u], u))
    if waited:
        seen = set(order)
        order += [u for u in range(c.n) if place[u] == NOW_CODE and u not in seen]
    return order


class _Search:
    def __init__(self, est: Estimates, allowed: Sequence[tuple[int, ...]], budget: int, seed: int,
                 screen: bool = False) -> None:
        self.est = est
        self.screen = screen
        self.allowed = allowed
        self.budget = budget
        self.rng = random.Random(seed)
        self.seen: dict[Codes, float] = {}
        self.fused: Callable[[Codes], tuple[float, Timings | None]] | None = getattr(est, "e2e_timings", None)
        """The estimator's E2E and timings from one simulation, when it offers that (the ``rules`` decider's
        :meth:`~hetsched.deciders.estimate.Estimator.e2e_timings`, which also keeps its timings: a descent's
        first step from a mapping not yet estimated reads both)."""
        n = len(allowed)
        self.n = n
        self.tool = est.compiled.tool_idx
        self.tool_vram = est.compiled.tool_vram
        groups: dict[int, list[int]] = {}
        for i, t in enumerate(self.tool):
            groups.setdefault(t, []).append(i)
        self.groups = [g for g in groups.values() if len(g) > 1]
        self.group_common = [sorted(set(allowed[g[0]]).intersection(*(allowed[j] for j in g[1:]))) for g in self.groups]
        """Per multi-node tool, the placements all its nodes allow (ascending)."""
        self.members = groups
        """Per tool, its nodes (ascending): what making room moves off ``gpu_now``."""
        queue = any(QUEUE_CODE in a for a in allowed)
        self.eject = screen and not queue
        """Whether :meth:`kick` may evict a resident tool whole (screened binary searches)."""
        self.room_targets = (QUEUE_CODE, CPU_CODE) if queue else (QUEUE_CODE,)
        """Where making room sends the evicted nodes: to ``gpu_queue`` where allowed, else the CPU, then to the CPU.
        Where no node may queue (binary) the first pass is the second's, with the same losses (:meth:`run_loss`
        charges the CPU's where the queue is not allowed): its candidates would all be repeats."""
        self.exchange_3w = False
        """Whether :meth:`kick` may exchange work between the CPU and the GPU in a screened three-way search
        (``EXCHANGE_KICK_SHARE_3W``): from :func:`local_search`'s exchange phase on, and in its continuations."""
        # GPU benefit per MB of each tool (cards): what making room gives up first
        benefit: dict[int, float] = {}
        for i in range(n):
            t = self.tool[i]
            saved = est.cpu_ms[i] - est.gpu_ms[i] if math.isfinite(est.gpu_ms[i]) else 0.0
            benefit[t] = benefit.get(t, 0.0) + saved
        self.per_mb = {t: b / max(self.tool_vram[t], 1e-9) for t, b in benefit.items()}
        self.by_per_mb = sorted(self.per_mb, key=lambda t: (self.per_mb[t], t))
        """Every tool by GPU benefit per MB, least first (making room's order, filtered to the residents)."""
        # a topological order (Kahn's), for run_loss's backward pass
        c = est.compiled
        left = list(c.npreds)
        self.topo = [i for i in range(n) if left[i] == 0]
        for u in self.topo:  # grows while iterating
            for w, _ in c.succs[u]:
                left[w] -= 1
                if left[w] == 0:
                    self.topo.append(w)

    @property
    def spent(self) -> bool:
        return (len(self.seen) + self.timed >= self.budget or len(self.seen) >= self.limit
                or (self.deadline is not None and time.perf_counter() >= self.deadline))

    deadline: float | None = None
    """A ``time.perf_counter`` value past which the search makes no more estimates (None: only its budget of
    estimates bounds it, and it is the same on every machine)."""

    def timed_out(self) -> bool:
        """Whether the deadline passed before the budget of estimates was spent."""
        return (self.deadline is not None and time.perf_counter() >= self.deadline
                and len(self.seen) + self.timed < self.budget)

    strength: int = 1
    """Kicks composed into each kick of :func:`_kick` (each drawn from the last one's mapping): 1 but in a
    continuation that asked for stronger ones (:func:`resume`'s ``strength``)."""

    timed: int = 0
    """Simulations with timings (a screened descent's step) that count against the budget: none in a first
    search (its budget counts estimates), each one in a resumed one (:func:`resume`), whose kicks often land
    on known ground and would otherwise cost time but nothing of the budget."""
    count_timings: bool = False

    limit: float = math.inf
    """A lower cap than ``budget`` for one descent (each start's share, with ``screen``)."""

    def value(self, codes: Codes) -> float:
        got = self.seen.get(codes)
        if got is None:
            got = self.seen[codes] = self.est.e2e(codes)
        return got

    def neighbours(self, cur: Codes, i: int) -> list[Codes]:
        """Moves of node ``i``: to each other placement, and making room when ``gpu_now`` does not fit."""
        out: list[Codes] = []
        for p in self.allowed[i]:
            if p == cur[i]:
                continue
            cand = (*cur[:i], p, *cur[i + 1 :])
            out.append(cand)
            if p == NOW_CODE and not self.est.static_ok(cand):
                out.extend(self.make_room(cand, i))
        return out

    def run_loss(self, cur: Codes, tm: Timings) -> None:
        """What evicting each resident tool would cost the current run (``tm``: ``cur``'s timings), for
        making room: per ``gpu_now`` node, the time the move adds (on the CPU its card's CPU minus GPU
        time, on ``gpu_queue`` its load; where the queue is not allowed, the CPU's) less its slack in
        the run (how much later it could end without delaying the last sink: a backward pass over the
        recorded waits and runs), summed per tool.
        Under a workload window (several instances) it is left unset: the cards' benefit per MB ranks."""
        c = self.est.compiled
        self.loss = None
        if len(tm.end) != self.n:
            return
        end, ready = tm.end, tm.ready
        cpu_side = [p == CPU_CODE for p in cur]
        latest = [math.inf] * self.n
        last = max(end[s] for s in c.sinks)
        for s in c.sinks:
            latest[s] = last
        for v in reversed(self.topo):
            lv = latest[v]
            if math.isinf(lv):  # not upstream of a sink (cannot happen in a valid workflow)
                lv = latest[v] = last
            begin = lv - (end[v] - ready[v])
            for u in c.preds[v]:
                delay = next(d for w, d in c.succs[u] if w == v) if cpu_side[u] != cpu_side[v] else 0.0
                latest[u] = min(latest[u], begin - delay)
        to_queue: dict[int, float] = {}
        to_cpu: dict[int, float] = {}
        for j in range(self.n):
            if cur[j] != NOW_CODE:
                continue
            t = self.tool[j]
            slack = max(0.0, latest[j] - end[j])
            cpu_loss = max(0.0, self.est.cpu_ms[j] - self.est.gpu_ms[j] - slack)
            to_cpu[t] = to_cpu.get(t, 0.0) + cpu_loss
            # make_room sends a node the queue does not allow to the CPU
            queue_loss = max(0.0, c.load_ms[j] - slack) if QUEUE_CODE in self.allowed[j] else cpu_loss
            to_queue[t] = to_queue.get(t, 0.0) + queue_loss
        self.loss = {QUEUE_CODE: to_queue, CPU_CODE: to_cpu}

    loss: dict[int, dict[int, float]] | None = None
    """Per eviction target, per resident tool of the mapping being descended from, :meth:`run_loss`."""
    _loss_of: tuple[Codes, Timings] | None = None
    """The mapping and timings :meth:`run_loss` is still to read (a descent step that never makes room
    does not pay for the backward pass)."""

    def make_room(self, cand: Codes, i: int) -> list[Codes]:
        """``cand`` (node ``i`` promoted, over budget) with resident tools moved off ``gpu_now`` until
        the set fits: once to ``gpu_queue`` where allowed, once to the CPU; the tools of least GPU
        benefit per MB first and, when screened, also those whose eviction costs the current run
        least per MB (:meth:`run_loss`)."""
        tool, vram = self.tool, self.tool_vram
        on_now = {t for t, p in zip(tool, cand, strict=True) if p == NOW_CODE}
        need = sum(vram[t] for t in on_now)
        if self._loss_of is not None:  # the current run's losses, computed when first needed
            self.run_loss(*self._loss_of)
            self._loss_of = None
        out: list[Codes] = []
        budget, allowed, members = self.est.budget, self.allowed, self.members
        for target, resident in self._room_orders(frozenset(on_now.difference((tool[i],)))):
            codes = list(cand)
            left = need
            for t in resident:
                if left <= budget:
                    break
                for j in members[t]:
                    if codes[j] == NOW_CODE:
                        codes[j] = target if target in allowed[j] else CPU_CODE
                left -= vram[t]
            if left <= budget:
                room = tuple(codes)
                if room not in out:
                    out.append(room)
        return out

    _orders: tuple[dict[int, dict[int, float]] | None, dict[frozenset[int], list[tuple[int, list[int]]]]] | None = None
    """:meth:`make_room`'s eviction orders, per set of residents, and the losses they were sorted by (the
    residents of one descent step's candidates are mostly the same set)."""

    def _room_orders(self, residents: frozenset[int]) -> list[tuple[int, list[int]]]:
        """Per pass of :meth:`make_room`, where it sends the evicted nodes and the ``residents`` in the order it
        evicts them: by :meth:`run_loss`'s loss per MB when there is one, then by the cards' benefit per MB. The
        orders of every tool, sorted once (per search; per descent step for the losses), filtered to the
        residents: the keys end in the tool, so a filtered order is the residents' own sort."""
        if self._orders is None or self._orders[0] is not self.loss or len(self._orders[1]) >= 256:
            self._orders = (self.loss, {})
        loss, kept = self._orders
        got = kept.get(residents)
        if got is None:
            by_per_mb = [t for t in self.by_per_mb if t in residents]
            by_loss = None
            if loss is not None:
                vram, per_mb = self.tool_vram, self.per_mb
                by_loss = {target: sorted(residents, key=lambda t: (loss[target].get(t, math.inf)
                                                                    / max(vram[t], 1e-9), per_mb[t], t))
                           for target in self.room_targets}
            got = kept[residents] = []
            for target in self.room_targets:
                if by_loss is not None:
                    got.append((target, by_loss[target]))
                got.append((target, by_per_mb))
        return got

    def group_moves(self, cur: Codes, among: set[int] | None = None) -> list[Codes]:
        """Every multi-node tool's nodes moved together to each placement they all allow (only tools
        with a node ``among`` these, when given)."""
        out: list[Codes] = []
        for g, common in zip(self.groups, self.group_common, strict=True):
            if among is not None and not among.intersection(g):
                continue
            for p in common:
                if all(cur[j] == p for j in g):
                    continue
                codes = list(cur)
                for j in g:
                    codes[j] = p
                out.append(tuple(codes))
                if self.screen and p == NOW_CODE and not self.est.static_ok(out[-1]):
                    out.extend(self.make_room(out[-1], g[0]))  # the tool made resident, others evicted
        return out

    def descend(self, cur: Codes) -> tuple[Codes, float]:
        if (self.screen and self.fused is not None and cur not in self.seen
                and len(self.seen) + 1 + self.timed < self.budget and len(self.seen) + 1 < self.limit):
            # its first step reads the start's timings: the E2E comes from the same simulation
            cur_e, _ = self.fused(cur)
            self.seen[cur] = cur_e
        cur_e = self.value(cur)
        improved = True
        while improved and not self.spent:
            improved = False
            tm = self.est.timings(cur) if self.screen and math.isfinite(cur_e) else None
            if tm is not None and self.count_timings:
                self.timed += 1
            self.loss, self._loss_of = None, None
            if tm is not None:
                order = focus(self.est.compiled, cur, tm)
                self._loss_of = (cur, tm)
            else:
                order = list(range(self.n))
                self.rng.shuffle(order)
            for i in order:
                for cand in self.neighbours(cur, i):
                    if self.spent:
                        break
                    e = self.value(cand)
                    if e < cur_e * (1 - 1e-12):
                        cur, cur_e, improved = cand, e, True
                        break
            for cand in self.group_moves(cur, set(order) if tm is not None else None):
                if self.spent:
                    break
                e = self.value(cand)
                if e < cur_e * (1 - 1e-12):
                    cur, cur_e, improved = cand, e, True
        return cur, cur_e

    def exchange(self, cur: Codes) -> Codes:
        """An exchange kick (``EXCHANGE_KICK_SHARE``, ``EXCHANGE_KICK_SHARE_3W``): ``EXCHANGE_OUT`` GPU nodes
        (``gpu_now``, and in three-way searches ``gpu_queue``) drawn with weight their GPU time (a queued one's
        with its load) over their CPU time go to the CPU, and ``EXCHANGE_IN`` CPU nodes that may run on the GPU,
        drawn with weight their speedup (CPU over GPU time, the cards'), go to the GPU: to ``gpu_now`` in a
        binary search, or where their tool is resident already; else to ``gpu_queue`` where allowed. The last
        promotions drawn are undone while the ``gpu_now`` set does not fit the VRAM budget."""
        k_out, k_in = self.rng.randint(*EXCHANGE_OUT), self.rng.randint(*EXCHANGE_IN)
        if self.exchange_3w and self.rng.random() < EXCHANGE_FEW_IN_3W:
            k_out, k_in = k_in, k_out  # a few heavy CPU nodes onto the GPU, several light GPU nodes off it
        codes, into = exchange_codes(self.rng, cur, self.allowed, self.tool, self.est.cpu_ms, self.est.gpu_ms,
                                     self.est.compiled.load_ms, k_out, k_in)
        while into and not self.est.static_ok(tuple(codes)):
            codes[into.pop()] = CPU_CODE
        return tuple(codes)

    def kick(self, cur: Codes) -> Codes:
        codes = list(cur)
        if self.eject and self.rng.random() < EXCHANGE_KICK_SHARE:
            # binary, screened: work exchanged between the devices, several nodes each way
            return self.exchange(cur)
        if self.exchange_3w and self.rng.random() < EXCHANGE_KICK_SHARE_3W:
            return self.exchange(cur)
        if self.eject and self.rng.random() < EJECT_KICK_SHARE:
            # binary, screened: one resident tool (drawn by its VRAM) to the CPU; the descent refills the room
            residents = sorted({self.tool[j] for j in range(self.n) if cur[j] == NOW_CODE})
            if residents:
                t = self.rng.choices(residents, weights=[self.tool_vram[r] for r in residents])[0]
                return tuple(CPU_CODE if self.tool[j] == t and p == NOW_CODE else p for j, p in enumerate(cur))
        if self.groups and self.rng.random() < 0.3:
            g = self.rng.choice(self.groups)
            common = sorted(set(self.allowed[g[0]]).intersection(*(self.allowed[j] for j in g[1:])))
            p = self.rng.choice(common)
            for j in g:
                codes[j] = p
        else:
            movable = [i for i in range(self.n) if len(self.allowed[i]) > 1]
            if not movable:
                return cur
            for i in self.rng.sample(movable, min(len(movable), self.rng.randint(2, 4))):
                codes[i] = self.rng.choice([p for p in self.allowed[i] if p != codes[i]])
        return tuple(codes)


LATE_QUEUE_RATIOS = (3.0, 12.0)
"""The CPU-heavy late starts of a three-way search: for each ratio r, every node whose CPU time is at least
r times its GPU time on ``gpu_queue`` (where it may queue), every other node on the CPU. The basins of
workflows whose best mappings keep the GPU queue short for the nodes that gain most from it (a fork-join
whose best mapping sends 13 queued nodes to the CPU, each move alone a loss)."""


def late_starts(est: Estimates, allowed: Sequence[tuple[int, ...]], three_way: bool) -> list[Codes]:
    """Structural starts in basins the rules' and the uniform mappings rarely lead to, each within the VRAM
    budget: the greedy mapping (each node on its faster device in isolation, then, while the ``gpu_now``
    tools do not fit, the tool whose move costs least per MB freed leaves ``gpu_now``: to ``gpu_queue``
    at its load where the mode and its VRAM allow, else to the CPU) and, in three-way workflows, the
    CPU-heavy mappings of ``LATE_QUEUE_RATIOS``."""
    c = est.compiled
    n = len(allowed)
    gpu = [math.isfinite(est.gpu_ms[i]) for i in range(n)]
    codes = [NOW_CODE if NOW_CODE in allowed[i] and gpu[i] and est.gpu_ms[i] < est.cpu_ms[i] else CPU_CODE
             for i in range(n)]
    members: dict[int, list[int]] = {}
    for i in range(n):
        if codes[i] == NOW_CODE:
            members.setdefault(c.tool_idx[i], []).append(i)
    queue_ok = {t: three_way and c.tool_vram[t] <= c.budget and all(QUEUE_CODE in allowed[i] for i in nodes)
                for t, nodes in members.items()}
    cost_per_mb = {t: (sum(c.load_ms[i] for i in nodes) if queue_ok[t]
                       else sum(est.cpu_ms[i] - est.gpu_ms[i] for i in nodes)) / max(c.tool_vram[t], 1e-9)
                   for t, nodes in members.items()}
    need = sum(c.tool_vram[t] for t in members)
    for t in sorted(members, key=lambda t: (cost_per_mb[t], t)):  # a tool's cost does not change as others leave
        if need <= c.budget:
            break
        for i in members[t]:
            codes[i] = QUEUE_CODE if queue_ok[t] else CPU_CODE
        need -= c.tool_vram[t]
    out = [tuple(codes)]
    if three_way:
        for r in LATE_QUEUE_RATIOS:
            out.append(tuple(QUEUE_CODE if QUEUE_CODE in allowed[i] and gpu[i] and est.cpu_ms[i] >= r * est.gpu_ms[i]
                             else CPU_CODE for i in range(n)))
    return [s for s in dict.fromkeys(out) if est.static_ok(s)]


def _race(search: _Search, ranked: list[Codes], budget: int) -> tuple[Codes, float]:
    """Successive halving over descents from ``ranked`` (the module docstring): the lowest estimate
    any of them reached within about ``budget`` estimates, and its mapping."""
    found: list[tuple[float, Codes]] = [(search.seen[c], c) for c in ranked]
    running = list(found)
    phase_budget = budget // (math.ceil(math.log2(len(running))) + 1) if len(running) > 1 else budget
    while len(running) > 1 and not search.spent:
        share = max(1, phase_budget // len(running))
        still: list[tuple[float, Codes]] = []
        for _, start in running:
            search.limit = len(search.seen) + share
            cand, e = search.descend(start)
            found.append((e, cand))
            if search.spent:  # cut off by its share (or the budget): not converged
                still.append((e, cand))
        search.limit = math.inf
        still.sort()
        running = still[: math.ceil(len(still) / 2)] if len(still) > 1 else still
    if running and not search.spent:
        cand, e = search.descend(running[0][1])
        found.append((e, cand))
    best_e, best = min(found)
    return best, best_e


def local_search(
    estimator: Estimates,
    starts: Sequence[Codes],
    allowed: Sequence[tuple[int, ...]],
    *,
    max_evaluations: int,
    seed: int = 0,
    screen: bool = False,
    race_evaluations: int | None = None,
    late_starts: Sequence[Codes] = (),
    late_evaluations: int = 0,
    exchange_evaluations: int = 0,
    polish_evaluations: int = 0,
    deadline: float | None = None,
) -> SearchResult:
    """The lowest-estimate mapping found within ``max_evaluations`` estimates (module docstring); with
    ``screen``, the descents try only the moves of the nodes :func:`focus` names, and the race of
    descents from the starts spends about ``race_evaluations`` of them (default: half), the kicks the
    rest. A fixed race makes a larger budget only lengthen the kicks: the same mapping or a lower one.
    With ``late_starts`` and ``late_evaluations``, the kicks stop ``late_evaluations`` before the budget
    ends; then a descent from each late start not yet seen, and kicks from the best until the budget
    ends: the search without them makes the same estimates first, so they can only lower the result.
    With ``exchange_evaluations`` (a screened search), after all that the kicks go on for that many more
    estimates, in a three-way search with the exchange kicks among them from then on
    (``EXCHANGE_KICK_SHARE_3W``; a binary search's kicks go on as they were, its exchanges drawn from the first
    kick on): again the same estimates first, so the result is never higher than without them.
    With ``polish_evaluations`` (a screened search), last, a descent from the best over every node's moves
    (unscreened) of at most that many more estimates (none past ``deadline``), the search screened again after it
    (for :func:`resume`).
    ``deadline`` (a ``time.perf_counter`` value; a decider given a time budget): no estimate is made after it
    (but the starts'), and the result says so (``timed_out``): the same estimates as without it, cut short."""
    budget = max(1, max_evaluations)
    race = budget // 2 if race_evaluations is None else max(1, min(race_evaluations, budget))
    search = _Search(estimator, allowed, budget, seed, screen)
    size = math.prod(len(a) for a in allowed)
    if size <= budget:
        for s in starts:
            search.value(s)
        complete = True
        for codes in itertools.product(*allowed):
            if deadline is not None and time.perf_counter() >= deadline:
                complete = False
                break
            search.value(codes)
        best = min(search.seen, key=lambda c: (search.seen[c], c))
        return SearchResult(best, search.seen[best], search.seen, exhaustive=complete, budget=budget,
                            timed_out=not complete)
    search.deadline = deadline
    for s in starts:
        if screen and search.fused is not None and s not in search.seen:
            # the race's descents read each start's timings first: its E2E from the same simulation
            search.seen[s] = search.fused(s)[0]
        search.value(s)
    ranked = sorted(dict.fromkeys(starts), key=lambda c: (search.seen[c], c))
    if screen:
        # a race of descents from every start (the uniform mappings lie in basins the best start's
        # descent rarely reaches: three-way queues), within ``race`` estimates (half the budget by default)
        best, best_e = _race(search, ranked, race)
    else:
        best, best_e = search.descend(ranked[0])
    late = [s for s in dict.fromkeys(late_starts) if s not in search.seen] if late_evaluations > 0 else []
    kicks_until = budget - late_evaluations if late else budget
    best, best_e = _kick(search, best, best_e, kicks_until)
    if late:
        # further basins: a descent from each late start (within its share of half of what is left), then
        # the kicks go on from the best of everything
        share = max(1, (budget - len(search.seen)) // (2 * len(late)))
        for s in late:
            if search.spent:
                break
            search.limit = len(search.seen) + share
            cand, e = search.descend(s)
            search.limit = math.inf
            if e < best_e * (1 - 1e-12):
                best, best_e = cand, e
        best, best_e = _kick(search, best, best_e, budget)
    if exchange_evaluations > 0 and screen:
        # more kicks from the best; three-way: exchanges between the CPU and the GPU among them from here on
        # (a screened binary search draws its exchanges from the first kick on: the same kicks, continued)
        search.exchange_3w = not search.eject
        budget += exchange_evaluations
        search.budget = budget
        best, best_e = _kick(search, best, best_e, budget)
    if polish_evaluations > 0 and screen:
        # last, a descent from the best over every node's moves (the screened descents try only the moves
        # :func:`focus` names, and at convergence one-node moves elsewhere can still lower the estimate)
        budget = max(budget, len(search.seen)) + polish_evaluations  # a descent may have ended past the budget
        search.budget = budget
        search.screen = False
        best, best_e = search.descend(best)
        search.screen = True
    return SearchResult(best, best_e, search.seen, budget=budget, screened=screen, state=search,
                        timed_out=search.timed_out())


def resume(result: SearchResult, more_evaluations: int, seed: int, deadline: float | None = None,
           strength: int = 1) -> SearchResult:
    """``result``'s search continued (anytime): its iterated local search goes on from its best mapping with
    kicks drawn from ``seed`` and descents, ``more_evaluations`` more simulations of the same model (new
    estimates and the screened descents' timings), every estimate already made kept (none is made twice).
    Its estimate is never higher than ``result``'s; ``result`` is left as it was. An exhaustive result comes
    back unchanged. ``deadline`` (a ``time.perf_counter`` value: the best-known reference's screened lane with a
    time budget, a decider given one): no estimate is made after it. With ``strength`` k > 1 each kick is k
    kicks composed (a farther jump from the best mapping: the ``rules`` decider's chunks after chunks that found
    nothing lower)."""
    if result.state is None or result.exhaustive:
        return result
    search = copy.copy(result.state)
    search.seen = dict(result.seen)
    search.rng = random.Random(seed)
    search.budget = len(search.seen) + max(0, more_evaluations)
    search.count_timings, search.timed = True, 0
    search.limit = math.inf
    search.loss, search._loss_of = None, None
    search.strength = strength
    search.deadline = deadline
    best, best_e = _kick(search, result.best, result.e2e_ms, search.budget, deadline)
    return SearchResult(best, best_e, search.seen, budget=search.budget, screened=result.screened, state=search,
                        timed_out=search.timed_out())


def _kick(search: _Search, best: Codes, best_e: float, until: int,
          deadline: float | None = None) -> tuple[Codes, float]:
    """Kicks of the best mapping and descents from there, each kept when better, until ``until`` estimates
    were made (a descent begun before may go on to the budget) or 50 kicks in a row land on known ground (or
    ``deadline``, a ``time.perf_counter`` value, passed)."""
    stale = 0
    while (not search.spent and stale < 50 and len(search.seen) < until
           and (deadline is None or time.perf_counter() < deadline)):
        before = len(search.seen)
        kicked = search.kick(best)
        for _ in range(search.strength - 1):
            kicked = search.kick(kicked)
        cand, e = search.descend(kicked)
        if e < best_e * (1 - 1e-12):
            best, best_e = cand, e
        stale = stale + 1 if len(search.seen) == before else 0  # every kick lands on known ground
    return best, best_e


__all__ = ["Codes", "Estimates", "SearchResult", "focus", "late_starts", "local_search", "resume"]


def exchange_codes(rng: random.Random, cur: Sequence[int], allowed: Sequence[Sequence[int]], tool: Sequence[int],
                   cpu_ms: Sequence[float], gpu_ms: Sequence[float], load_ms: Sequence[float], k_out: int, k_in: int,
                   admit_queued: Callable[[int], bool] | None = None) -> tuple[list[int], list[int]]:
    """The exchange kick's draw, shared by the decider's search and the search room's local search: ``k_out`` GPU
    nodes (``gpu_now`` or ``gpu_queue``, that may run on the CPU) drawn with weight their GPU time (a queued one's
    with its load) over their CPU time go to the CPU, then ``k_in`` CPU nodes that may run on the GPU, drawn with
    weight their speedup (CPU over GPU time), go to ``gpu_now`` where their tool is resident already or the queue
    is not allowed, else to ``gpu_queue`` (only where ``admit_queued(node)`` says so, when given). Returns the new
    codes and the nodes moved onto the GPU in the order drawn; making the ``gpu_now`` set fit the VRAM budget is
    the caller's (each search has its own rule)."""
    on_gpu = [i for i in range(len(cur)) if cur[i] != CPU_CODE and CPU_CODE in allowed[i]]
    on_cpu = [i for i in range(len(cur)) if cur[i] == CPU_CODE and math.isfinite(gpu_ms[i])
              and (NOW_CODE in allowed[i] or QUEUE_CODE in allowed[i])]
    out = draw_weighted(rng, on_gpu, [max(gpu_ms[i] + (load_ms[i] if cur[i] == QUEUE_CODE else 0.0), 1e-9)
                                      / max(cpu_ms[i], 1e-9) for i in on_gpu], k_out)
    into = draw_weighted(rng, on_cpu, [max(cpu_ms[i], 1e-9) / max(gpu_ms[i], 1e-9) for i in on_cpu], k_in)
    codes = list(cur)
    for i in out:
        codes[i] = CPU_CODE
    resident = {tool[j] for j in range(len(codes)) if codes[j] == NOW_CODE}
    placed: list[int] = []
    for i in into:
        now = NOW_CODE in allowed[i] and (QUEUE_CODE not in allowed[i] or tool[i] in resident)
        if now or admit_queued is None or admit_queued(i):
            codes[i] = NOW_CODE if now else QUEUE_CODE
            placed.append(i)
    return codes, placed


def draw_weighted(rng: random.Random, items: list[int], weights: list[float], k: int) -> list[int]:
    """``k`` of ``items`` (fewer when there are fewer) drawn with ``rng`` without replacement, each with
    probability proportional to its weight among those left (the exchange kicks' draw, here and in the
    search room's local search)."""
    items, weights = list(items), list(weights)
    out: list[int] = []
    while items and len(out) < k:
        j = rng.choices(range(len(items)), weights=weights)[0]
        out.append(items.pop(j))
        weights.pop(j)
    return out
