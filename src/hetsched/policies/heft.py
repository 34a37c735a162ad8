"""HEFT, the general list scheduler, and HEFT-CF, the paper's contention-free baseline policy.

``heft()`` is Heterogeneous Earliest Finish Time (Topcuoglu, Hariri, Wu, "Performance-effective
and low-complexity task scheduling for heterogeneous computing", IEEE TPDS 13(3), 2002,
doi:10.1109/71.993206) over a task x processor cost table with communication costs:

1. Upward rank (eq. 8 of the paper): rank_u(i) = w_mean(i) + max over successors j of
   (c_mean(i, j) + rank_u(j)), with w_mean the mean of task i's costs over the processors
   that can run it and c_mean the mean communication cost of the edge.
2. Tasks in decreasing rank_u (ties within 1e-9 relative: earlier in a deterministic
   topological order first, so equal ranks never break precedence).
3. Each task goes to the processor with the earliest finish time, using the insertion-based
   policy: the earliest idle gap on that processor, after the task's data have arrived, that
   is long enough to hold it (exact ties: the lowest processor index).

``HeftCf`` (name ``heft-cf``) is HEFT on contention-free isolated costs from the tool cards,
turned into a mapping: it ignores GPU sharing (Factor A), as the paper's HEFT-CF does, and the
VRAM budget, which is then enforced with the same allocation fallback the StarPU baseline
uses, feasibility guard included (see :func:`hetsched.policies.starpu_dmda.allocate_gpu_nodes`
and docs/baselines.md).

Imports the model and the StarPU module's allocation fallback only; never runs anything.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Sequence
from collections.abc import Mapping as AbcMapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import networkx as nx

from hetsched.model import Placement, Probe, Proposal, RoundRecord, Scenario
from hetsched.monitor import Observations
from hetsched.policies.base import Policy, PolicyContext
from hetsched.policies.guard import model_check
from hetsched.policies.starpu_dmda import allocate_gpu_nodes

T = TypeVar("T", bound=Hashable)

RANK_TIE_REL = 1e-9
"""Upward ranks closer than this (relative) count as equal and are ordered topologically."""


@dataclass(frozen=True)
class Slot(Generic[T]):
    """One task's place in a schedule."""

    task: T
    """The task."""
    proc: int
    """Processor index (column of the cost table)."""
    start: float
    """Start time."""
    finish: float
    """Finish time."""


@dataclass(frozen=True)
class HeftSchedule(Generic[T]):
    """HEFT's result: a full schedule plus the ranks and the priority order that produced it."""

    slots: dict[T, Slot[T]]
    """Per task: processor, start, finish."""
    order: tuple[T, ...]
    """Tasks in the order HEFT scheduled them (decreasing upward rank)."""
    rank_u: dict[T, float]
    """Upward rank of every task."""
    n_procs: int
    """Number of processors."""

    @property
    def makespan(self) -> float:
        """Latest finish time (0 for an empty schedule)."""
        return max((s.finish for s in self.slots.values()), default=0.0)

    def on(self, proc: int) -> list[Slot[T]]:
        """Slots of one processor, by start time."""
        return sorted((s for s in self.slots.values() if s.proc == proc), key=lambda s: (s.start, s.finish))


def heft(
    comp: AbcMapping[T, Sequence[float]],
    edges: AbcMapping[tuple[T, T], float] | None = None,
    link: Sequence[Sequence[float]] | None = None,
    mean_comm: AbcMapping[tuple[T, T], float] | None = None,
) -> HeftSchedule[T]:
    """Schedule a DAG with HEFT (Topcuoglu et al. 2002) and return the whole schedule.

    Args:
        comp: task -> its cost on each processor (same length for every task; ``math.inf``
            where a processor cannot run the task). Task order is the tie-break of last resort.
        edges: (src, dst) -> data volume on the edge (0 for a pure precedence).
        link: link[p][q] = time per unit of data sent from processor p to q; the diagonal is
            ignored (a task's data stays on its processor for free). Default: 1 for every
            p != q, so ``edges`` holds communication costs directly (the paper's example).
        mean_comm: (src, dst) -> the mean communication cost used in the upward rank.
            Default: volume x the mean of link[p][q] over ordered pairs p != q.

    Raises:
        ValueError: on a cost row of the wrong length, a negative or NaN cost, a task no
            processor can run, an edge naming an unknown task, or a cycle.
    """
    edges = dict(edges or {})
    tasks = list(comp)
    if not tasks:
        return HeftSchedule({}, (), {}, 0)
    n_procs = len(next(iter(comp.values())))
    if n_procs < 1:
        raise ValueError("heft: the cost table has no processor column; give at least one")
    for t in tasks:
        row = comp[t]
        if len(row) != n_procs:
            raise ValueError(f"heft: task {t!r} has {len(row)} costs, expected {n_procs} (one per processor)")
        if any(math.isnan(w) or w < 0 for w in row):
            raise ValueError(f"heft: task {t!r} has costs {list(row)}; costs must be >= 0 or inf")
        if all(math.isinf(w) for w in row):
            raise ValueError(f"heft: no processor can run task {t!r} (every cost is inf)")
    for (u, v), volume in edges.items():
        if u not in comp or v not in comp:
            raise ValueError(f"heft: edge {u!r}->{v!r} names a task that has no cost row")
        if math.isnan(volume) or volume < 0:
            raise ValueError(f"heft: edge {u!r}->{v!r} has data {volume}; it must be >= 0")
    if link is None:
        link = [[0.0 if p == q else 1.0 for q in range(n_procs)] for p in range(n_procs)]
    if len(link) != n_procs or any(len(row) != n_procs for row in link):
        raise ValueError(f"heft: link must be a {n_procs} x {n_procs} table (one row and column per processor)")

    graph: nx.DiGraph = nx.DiGraph()
    graph.add_nodes_from(tasks)
    graph.add_edges_from(edges)
    if not nx.is_directed_acyclic_graph(graph):
        raise ValueError(f"heft: the task graph has a cycle {nx.find_cycle(graph)}; HEFT needs a DAG")
    index = {t: i for i, t in enumerate(tasks)}
    topo = list(nx.lexicographical_topological_sort(graph, key=index.__getitem__))
    topo_pos = {t: i for i, t in enumerate(topo)}
    preds: dict[T, list[T]] = {t: [] for t in tasks}
    succs: dict[T, list[T]] = {t: [] for t in tasks}
    for u, v in edges:
        preds[v].append(u)
        succs[u].append(v)

    if mean_comm is None:
        pairs = [link[p][q] for p in range(n_procs) for q in range(n_procs) if p != q]
        mean_link = sum(pairs) / len(pairs) if pairs else 0.0
        mean_comm = {e: vol * mean_link for e, vol in edges.items()}

    # 1. upward ranks, sinks first
    rank: dict[T, float] = {}
    for t in reversed(topo):
        finite = [w for w in comp[t] if not math.isinf(w)]
        w_mean = sum(finite) / len(finite)
        tail = max((mean_comm[(t, s)] + rank[s] for s in succs[t]), default=0.0)
        rank[t] = w_mean + tail

    # 2. priority list: decreasing rank, near-equal ranks in topological order
    def _cmp(a: T, b: T) -> int:
        ra, rb = rank[a], rank[b]
        if abs(ra - rb) > RANK_TIE_REL * max(1.0, abs(ra), abs(rb)):
            return -1 if ra > rb else 1
        return topo_pos[a] - topo_pos[b]

    order = sorted(tasks, key=functools.cmp_to_key(_cmp))

    # 3. insertion-based earliest finish time
    busy: list[list[tuple[float, float]]] = [[] for _ in range(n_procs)]
    slots: dict[T, Slot[T]] = {}
    for t in order:
        best: tuple[float, float, int] | None = None  # (finish, start, proc)
        for p in range(n_procs):
            w = comp[t][p]
            if math.isinf(w):
                continue
            ready = 0.0
            for u in preds[t]:
                su = slots.get(u)
                if su is None:  # only reachable through a bug in the ordering above
                    raise RuntimeError(f"heft: {t!r} ordered before its predecessor {u!r}")
                arrive = su.finish if su.proc == p else su.finish + edges[(u, t)] * link[su.proc][p]
                ready = max(ready, arrive)
            start = _earliest_gap(busy[p], ready, w)
            finish = start + w
            if best is None or finish < best[0]:
                best = (finish, start, p)
        assert best is not None  # every task has a finite cost somewhere (checked above)
        finish, start, p = best
        slots[t] = Slot(t, p, start, finish)
        busy[p].append((start, finish))
        busy[p].sort()
    return HeftSchedule(slots=slots, order=tuple(order), rank_u=rank, n_procs=n_procs)


def _earliest_gap(busy: Sequence[tuple[float, float]], ready: float, w: float) -> float:
    """Start of the earliest idle interval of length ``w`` at or after ``ready`` (insertion policy)."""
    prev_end = 0.0
    for s, f in busy:
        start = max(ready, prev_end)
        if start + w <= s:
            return start
        prev_end = max(prev_end, f)
    return max(ready, prev_end)


# ---------------------------------------------------------------------------- HEFT-CF
GPU_PROC = 0
"""Processor index of the GPU in HEFT-CF's cost table; CPU slots follow."""


def cpu_slots(scenario: Scenario) -> int:
    """CPU processors HEFT-CF sees: floor(cores / the widest tool's cpu_threads), at least 1.

    HEFT runs one task per processor at its isolated cost. A slot as wide as the most
    multi-threaded tool can hold any tool without oversubscribing the cores, which is the
    regime in which the card's ``cpu_ms`` holds (the simulator slows CPU tasks only when
    their threads exceed the cores).
    """
    widest = max(scenario.card_of(n).cpu_threads for n in scenario.workflow.node_ids)
    return max(1, scenario.machine.cpu_cores // widest)


def heft_cf_schedule(scenario: Scenario) -> HeftSchedule[str]:
    """HEFT on the cards' contention-free costs: processor 0 is the GPU (``gpu_ms``, warm),
    processors 1..k are CPU slots (``cpu_ms``); CPU<->GPU edges cost data_mb / pcie_mb_per_ms."""
    k = cpu_slots(scenario)
    wf = scenario.workflow
    comp: dict[str, tuple[float, ...]] = {}
    for n in wf.node_ids:
        card = scenario.card_of(n)
        gpu = card.gpu_ms if card.gpu_ms is not None else math.inf
        comp[n] = (gpu, *([card.cpu_ms] * k))
    per_mb = 1.0 / scenario.machine.pcie_mb_per_ms
    link = [[0.0 if (p == GPU_PROC) == (q == GPU_PROC) else per_mb for q in range(k + 1)] for p in range(k + 1)]
    edges = {(e.src, e.dst): e.data_mb for e in wf.edges}
    return heft(comp, edges, link)


class HeftCf(Policy):
    """HEFT on contention-free isolated costs (the paper's HEFT-CF), as a placement mapping.

    The GPU is one processor, the CPU is :func:`cpu_slots` processors. Nodes HEFT puts on
    the GPU get ``gpu_now`` while their tools fit the VRAM budget, taken in the order the GPU
    would start them; the rest fall back as StarPU's allocator would (``gpu_queue`` in
    three-way scenarios when the node can ever be admitted, else ``cpu``). The proposal never
    holds a ``gpu_now`` set over the budget. Non-adaptive: the same mapping every round.
    """

    name = "heft-cf"

    def __init__(self) -> None:
        super().__init__()
        self._proposal: Proposal | None = None

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._proposal = None

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        if self._proposal is None:  # a cache: a function of the scenario only
            sc = self.ctx.scenario
            sched = heft_cf_schedule(sc)
            gpu_order = [s.task for s in sched.on(GPU_PROC)]
            mapping, notes = allocate_gpu_nodes(sc, gpu_order, model_check(sc, self.ctx.planner))
            demoted = [n for n in gpu_order if mapping[n] is not Placement.GPU_NOW]
            rationale = f"HEFT on isolated costs, predicted makespan {sched.makespan:.1f} ms"
            if demoted:
                rationale += f"; VRAM fallback for {', '.join(demoted)}"
            info = {
                "heft": {
                    "makespan_ms": sched.makespan,
                    "cpu_slots": sched.n_procs - 1,
                    "schedule": {
                        n: {
                            "proc": "gpu" if s.proc == GPU_PROC else f"cpu{s.proc - 1}",
                            "start_ms": s.start,
                            "finish_ms": s.finish,
                            "rank_u": sched.rank_u[n],
                        }
                        for n, s in sched.slots.items()
                    },
                },
                "vram_fallback": notes,
            }
            self._proposal = Proposal(mapping, rationale=rationale, info=info)
        return self._proposal

    def converged(self, history: Sequence[RoundRecord]) -> bool:
        return True
