"""The contention model, written once: a scenario compiled into index arrays, and the one event
simulation on it that every number hetsched prints comes from.

- GPU (Factor A): processor sharing. With running GPU tasks R and U = sum of their
  ``gpu_util``, each progresses at rate 1/s, s = max(1, U) * (1 + kappa * (|R| - 1)).
- CPU: P cores; a task keeps d cores busy (its card's measured ``cpu_demand``, else ``cpu_threads``);
  with s = max(1, sum d / P), a task with d >= 1 slows by s and one with d < 1 (it waits part of
  the time: I/O, a remote call) only on its busy part: 1 + d (s - 1). Without cards of d < 1 every
  CPU task slows by s, the arithmetic of cards that only give ``cpu_threads``.
- VRAM (Factor B): ``gpu_now`` tools are warm and resident from t = 0 until their last
  ``gpu_now`` node ends, counted once per tool; ``gpu_queue`` nodes wait in one FIFO queue
  (strict order, head-of-line), are admitted when their memory fits beside what is held, pay
  ``load_ms``, run, then free their memory. What a load contends with is the machine's
  ``load_sharing``: ``none`` (nothing: a timed event of ``load_ms``, the default), ``copy``
  (concurrent loads share one copy path, each at 1/n), ``device`` (a load is a task of
  ``gpu_util`` 1 under the GPU sharing: the stand-in device). A load takes its card's expected
  time under the machine's ``cold_load_share`` (:func:`queue_load_ms`: that share of the loads
  at ``load_cold_ms``; 0, the default: ``load_ms``). With ``warm_reuse_ms`` W, the
  share of its memory freed on the device (queued nodes' ends, resident tools' unloads) in the W ms
  before its admission is reused warm at ``load_ms``, the rest at that expectation.
- Cross-core interference (``machine.cross_core_slowdown`` x, 0 by default: skipped): while both
  the CPU and the device run something, CPU tasks slow by 1 + x min(1, device utilization) and
  device tasks and loads by 1 + x min(1, cores busy / cores), on top of the sharing above.
- Edges carrying ``data_mb`` between a CPU node and a GPU node cost data_mb / pcie_mb_per_ms.

Each device keeps its running tasks' remaining isolated work in ascending order, stored as work
left + the device's progress offset (a virtual clock: the isolated work each of its running tasks
has done since the device last emptied). Every task of a device loses the same step an event, so
an event advances a device with one addition to its offset instead of a subtraction per running
task (wide fork-joins run a few dozen at once), the order holds, the first task sets the device's
next finish and the finished ones leave from the front. A task running alone keeps its own work
left (a chain's arithmetic is a subtraction an event, as before the offset); the per-task CPU steps
(tasks that wait part of the time, under oversubscribed cores) fold the offset in first. Against a
subtraction per task, the offset moves an E2E by a few ulps (``tests/test_contention.py`` bounds
it). :func:`simulate_e2e` is the same loop returning the E2E alone (no :class:`Timings` built).

:func:`simulate` runs one or several instances of the workflow on one machine: instance r is
released at ``releases[r]``, the instances share the resident ``gpu_now`` tools and the one FIFO
queue (admission in arrival order across instances); with ``follows``, instance r is released
``releases[r]`` after instance ``follows[r]`` ends (a closed loop's clients: docs/simulator.md,
"Under load"), and not at all past ``horizon_ms``. Its callers add what they need on top: the
simulator executor (:mod:`hetsched.sim`) noise factors and the ``Trace``, the decider's estimator
a fitted interference and rescaled cards, the searches nothing (the noise-free E2E).

The machine is one GPU with one VRAM budget today; the budget and the GPU's running set are
per-device state in :func:`simulate`, kept apart from the node tables so a machine with several
GPUs, each with its own budget, adds a device index per placement without touching the compile.

**The compiled kernel.** ``setup.py`` compiles a copy of this module with mypyc at install time
(``hetsched.model._contention_native``: the same code in C, the same IEEE double arithmetic, so the same
results bit for bit) and stamps it with the SHA-256 of this file. At import, this module takes the copy's
functions and classes in place of its own when the stamp matches its text (:data:`KERNEL` says which one
runs, :data:`KERNEL_NOTE` why): an edited source, a pure-Python install or ``HETSCHED_PURE_PYTHON=1``
runs this Python.

Imports only the rest of ``hetsched.model``.
"""

from __future__ import annotations

import hashlib
import heapq
import importlib
import math
import os
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache
from itertools import compress
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, cast

from hetsched.model.mapping import CPU_CODE as CPU
from hetsched.model.mapping import NOW_CODE as NOW
from hetsched.model.mapping import PLACEMENTS, Mapping
from hetsched.model.mapping import QUEUE_CODE as QUEUE

if TYPE_CHECKING:
    from hetsched.model.card import ToolCard
    from hetsched.model.machine import Machine
    from hetsched.model.scenario import Scenario

EPS = 1e-7
"""ms; work and events within it count as done (below float noise of any latency we model, far above
1 ulp of 1e6 ms)."""
_INF = math.inf
_ARRIVE, _LOADED = 0, 1
_SHARING = {"none": 0, "copy": 1, "device": 2}
_COPY, _DEVICE = 1, 2
LOAD_UTIL = 1.0
"""The device share of a load under ``load_sharing: device`` (one thread filling memory)."""

Codes = tuple[int, ...]
"""A mapping as placement codes in workflow node order (``Placement.code``: 0 cpu, 1 gpu_now, 2 gpu_queue)."""


@dataclass(frozen=True, slots=True)
class Compiled:
    """A scenario flattened into index-addressed tuples (node i is ``names[i]``, workflow node order).

    Built once per scenario (``Scenario.compiled``) and shared by the simulator executor, the
    decider's estimator, the monitor's planning, the bounds and the searches.
    """

    names: tuple[str, ...]
    index: dict[str, int]
    tools: tuple[str, ...]
    tool_idx: tuple[int, ...]
    tool_vram: tuple[float, ...]
    cpu_ms: tuple[float, ...]
    gpu_ms: tuple[float, ...]
    """GPU time per node; inf for a tool without a GPU implementation."""
    load_ms: tuple[float, ...]
    vram: tuple[float, ...]
    util: tuple[float, ...]
    threads: tuple[int, ...]
    demand: tuple[float, ...]
    """Cores a CPU run keeps busy (``ToolCard.cores_busy``: measured ``cpu_demand``, else ``cpu_threads``)."""
    waits: bool
    """Some node's demand is below one core: the CPU slowdown is per task (see the module docstring)."""
    npreds: tuple[int, ...]
    succs: tuple[tuple[tuple[int, float], ...], ...]
    """Per node, (successor, transfer ms when the edge crosses between CPU and GPU)."""
    preds: tuple[tuple[int, ...], ...]
    sinks: tuple[int, ...]
    sources: tuple[int, ...]
    """Nodes without inputs, ascending."""
    allowed: tuple[tuple[int, ...], ...]
    """Placement codes each node may take (the scenario's mode and the tool's GPU support)."""
    cores: int
    budget: float
    kappa: float
    load_sharing: int = 0
    """What a load contends with: 0 nothing, 1 the other loads (copy path), 2 the device's compute."""
    cross: float = 0.0
    """Cross-core interference (``machine.cross_core_slowdown``): 0 leaves the arithmetic untouched."""
    warm_ms: float = 0.0
    """``machine.warm_reuse_ms``: memory freed on the device this recently is reused warm by a load
    (0: off, ``load_ms`` is each load's fixed expected time)."""
    load_cold_ms: tuple[float, ...] = ()
    """With ``warm_ms``: per node, a load's expected time when none of its memory is reused warm
    (``ToolCard.expected_load_ms``; ``load_ms`` then holds the warm floor, the card's ``load_ms``)."""
    window: bool = False
    """The scenario runs windows of several requests (its workload): the ``gpu_now`` tools stay
    resident for the whole window, so every queued node must fit beside all of them."""

    @classmethod
    def of(cls, scenario: Scenario) -> Compiled:
        wf = scenario.workflow
        names = wf.node_ids
        index = {n: i for i, n in enumerate(names)}
        tools = wf.tools
        tindex = {t: i for i, t in enumerate(tools)}
        cards = [scenario.card_of(n) for n in names]
        warm_ms = scenario.machine.warm_reuse_ms
        pcie = scenario.machine.pcie_mb_per_ms
        expected_load = tuple(queue_load_ms(c, scenario.machine) for c in cards)
        succs: list[list[tuple[int, float]]] = [[] for _ in names]
        preds: list[list[int]] = [[] for _ in names]
        for e in wf.edges:
            succs[index[e.src]].append((index[e.dst], e.data_mb / pcie))
            preds[index[e.dst]].append(index[e.src])
        return cls(
            names=names,
            index=index,
            tools=tools,
            tool_idx=tuple(tindex[wf.tool_of[n]] for n in names),
            tool_vram=tuple(scenario.cards[t].vram_mb for t in tools),
            cpu_ms=tuple(c.cpu_ms for c in cards),
            gpu_ms=tuple(c.gpu_ms if c.gpu_ms is not None else _INF for c in cards),
            load_ms=tuple(c.load_ms for c in cards) if warm_ms else expected_load,
            vram=tuple(c.vram_mb for c in cards),
            util=tuple(c.gpu_util for c in cards),
            threads=tuple(c.cpu_threads for c in cards),
            demand=tuple(c.cores_busy for c in cards),
            waits=any(c.cores_busy < 1.0 for c in cards),
            npreds=tuple(len(p) for p in preds),
            succs=tuple(tuple(s) for s in succs),
            preds=tuple(tuple(p) for p in preds),
            sinks=tuple(index[s] for s in wf.sinks),
            sources=tuple(i for i, p in enumerate(preds) if not p),
            allowed=tuple(tuple(p.code for p in scenario.allowed(n)) for n in names),
            cores=scenario.machine.cpu_cores,
            budget=scenario.machine.vram_budget_mb,
            kappa=scenario.machine.gpu_kappa,
            load_sharing=_SHARING[scenario.machine.load_sharing],
            cross=scenario.machine.cross_core_slowdown,
            warm_ms=warm_ms,
            load_cold_ms=expected_load if warm_ms else (),
            window=scenario.workload is not None and len(scenario.workload.plan_size_hint()) > 1,
        )

    @property
    def n(self) -> int:
        """Number of nodes."""
        return len(self.names)

    def codes(self, mapping: Mapping) -> Codes:
        """Placement codes of a mapping in node order."""
        return tuple(mapping[n].code for n in self.names)

    def mapping(self, codes: Sequence[int]) -> Mapping:
        """The mapping of placement codes (node order)."""
        return Mapping(zip(self.names, (PLACEMENTS[c] for c in codes), strict=True))

    def static_ok(self, codes: Sequence[int]) -> bool:
        """The one static check on codes, ``Scenario.infeasibility``'s budget checks with its sums in
        the same order: the ``gpu_now`` tools fit the budget together at t = 0 and every queued node
        fits it alone (what only the FIFO order shows is left to :func:`simulate`); under a workload,
        every queued node fits beside the ``gpu_now`` tools."""
        need = 0.0
        seen: set[int] = set()
        tool, budget = self.tool_idx, self.budget
        for i, p in enumerate(codes):
            if p == NOW:
                t = tool[i]
                if t not in seen:
                    seen.add(t)
                    need += self.tool_vram[t]
            elif p == QUEUE and self.vram[i] > budget:
                return False
        if self.window:  # under load (model.workload.load_infeasibility): each queued node beside the residents
            vram = self.vram
            return need + max((vram[i] for i, p in enumerate(codes) if p == QUEUE), default=0.0) <= budget
        return need <= budget

    def __reduce__(self) -> tuple[type[Compiled], tuple[object, ...]]:
        """Pickled by its fields in order: the compiled kernel's frozen class refuses the attribute
        assignments of the default pickle (a compiled scenario is sent to worker processes)."""
        return type(self), tuple(getattr(self, f.name) for f in fields(self))


@dataclass(slots=True)
class Timings:
    """What one :func:`simulate` call found. Per-node lists are empty unless ``timings`` was asked;
    with several instances node ``r * n + i`` is node i of instance r."""

    e2e_ms: float
    """End of the last sink minus its release, the largest over the instances; inf on a deadlock."""
    instance_e2e_ms: list[float]
    """Per instance, the end of its last sink minus its release (inf when it never finished)."""
    head: int = -1
    """On a deadlock, the node at the head of the queue that never fits (-1: none)."""
    used_mb: float = 0.0
    """On a deadlock, the memory held when it stalled."""
    now_left: list[int] = field(default_factory=list)
    """On a deadlock, per tool, its ``gpu_now`` nodes still to finish (a tool with any is resident)."""
    ready: list[float] = field(default_factory=list)
    admitted: list[float] = field(default_factory=list)
    start: list[float] = field(default_factory=list)
    end: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    vram: list[tuple[float, float]] = field(default_factory=list)
    """(time, MB held) at each change, when ``record`` was asked."""
    released: list[float] = field(default_factory=list)
    """With ``follows``: when each instance was released (inf: never, past the horizon; its
    ``instance_e2e_ms`` is then nan)."""

    @property
    def deadlock(self) -> bool:
        return math.isinf(self.e2e_ms)


def simulate(
    c: Compiled,
    place: Sequence[int],
    *,
    kappa: float | None = None,
    cpu_ms: Sequence[float] | None = None,
    gpu_ms: Sequence[float] | None = None,
    work_factor: Sequence[float] | None = None,
    load_factor: Sequence[float] | None = None,
    releases: Sequence[float] = (0.0,),
    follows: Sequence[int] | None = None,
    horizon_ms: float = _INF,
    timings: bool = False,
    record: bool = False,
) -> Timings:
    """Simulate placement codes (node order) under the contention model.

    Args:
        c: the compiled scenario.
        place: one placement code per node, the same for every instance.
        kappa: GPU interference (default: the machine's ``gpu_kappa``).
        cpu_ms, gpu_ms: per-node times in place of the cards' (a decider's rescaled cards).
        work_factor, load_factor: per-node multiplicative factors on the work and the load (the
            simulator's noise); one per node of every instance (length ``n * len(releases)``).
        releases: release time of each instance (one instance at 0 by default); with ``follows``,
            for an instance that follows another, its delay after that one ends.
        follows: per instance, the instance whose end releases it (-1: released at ``releases[r]``);
            an instance follows one of lower index.
        horizon_ms: an instance that ``follows`` would release at or after this time is not released
            (nor are those that follow it).
        timings: fill the per-node lists (ready, admitted, start, end, load).
        record: fill the VRAM timeline (implies ``timings``).

    The caller checks the static feasibility first (:meth:`Compiled.static_ok`); a FIFO queue that
    never moves comes back as ``e2e_ms = inf`` with the head of the queue named.
    """
    return cast(Timings, _simulate(c, place, kappa, cpu_ms, gpu_ms, work_factor, load_factor, releases, follows,
                                   horizon_ms, timings, record, False))


def simulate_e2e(
    c: Compiled,
    place: Sequence[int],
    *,
    kappa: float | None = None,
    cpu_ms: Sequence[float] | None = None,
    gpu_ms: Sequence[float] | None = None,
) -> float:
    """``simulate(c, place, kappa=, cpu_ms=, gpu_ms=).e2e_ms`` (one instance, noise-free), the same
    loop without building the :class:`Timings`: the estimators' and searches' hot path."""
    return cast(float, _simulate(c, place, kappa, cpu_ms, gpu_ms, None, None, (0.0,), None, _INF, False, False, True))


def _simulate(
    c: Compiled,
    place: Sequence[int],
    kappa: float | None,
    cpu_ms: Sequence[float] | None,
    gpu_ms: Sequence[float] | None,
    work_factor: Sequence[float] | None,
    load_factor: Sequence[float] | None,
    releases: Sequence[float],
    follows: Sequence[int] | None,
    horizon_ms: float,
    timings: bool,
    record: bool,
    e2e_only: bool,
) -> Timings | float:
    """:func:`simulate`'s event loop; with ``e2e_only`` (one instance, no ``follows``, no timings)
    it returns the E2E alone."""
    n1 = len(c.names)
    copies = len(releases)
    n = n1 * copies
    kap = c.kappa if kappa is None else kappa
    cpu_t = c.cpu_ms if cpu_ms is None else cpu_ms
    gpu_t = c.gpu_ms if gpu_ms is None else gpu_ms
    if copies == 1:
        pl: Sequence[int] = place
        tool, threads, util, vram, succs, loads = c.tool_idx, c.demand, c.util, c.vram, c.succs, c.load_ms
        npreds: Sequence[int] = c.npreds
    else:
        pl = list(place) * copies
        tool, threads, util, vram = c.tool_idx * copies, c.demand * copies, c.util * copies, c.vram * copies
        loads = c.load_ms * copies
        cpu_t, gpu_t = list(cpu_t) * copies, list(gpu_t) * copies
        succs = _copied_succs(c.succs, n1, copies)
        npreds = c.npreds * copies
    if work_factor is None:
        work_cpu, work_gpu = cpu_t, gpu_t
    else:
        work_cpu = [a * f for a, f in zip(cpu_t, work_factor, strict=True)]
        work_gpu = [a * f for a, f in zip(gpu_t, work_factor, strict=True)]
    if load_factor is None:
        load_of: Sequence[float] = loads
    else:
        load_of = [a * f for a, f in zip(loads, load_factor, strict=True)]
    warm_ms = c.warm_ms
    load_now: list[float] = []
    freed: deque[list[float]] = deque()  # [when, MB of it still unclaimed], oldest first
    if warm_ms:  # loads reuse memory freed within warm_ms warm (machine.warm_reuse_ms): each load's time is set
        cold = c.load_cold_ms * copies  # at its admission, between its warm floor and its cold expectation
        cold_of = cold if load_factor is None else [a * f for a, f in zip(cold, load_factor, strict=True)]
        load_now = list(load_of)  # each load's time, set at its admission
    timings = timings or record
    cores = float(c.cores)  # (as a float: the same quotients and comparisons, without an int operand each event)
    room = c.budget + EPS  # what the held memory may reach (admission)
    tool_vram = c.tool_vram
    # gpu_now residency: a tool stays resident until its last gpu_now node (of any instance) ends
    now_left = [0] * len(c.tools)
    for ti in compress(tool, map(NOW.__eq__, pl)):
        now_left[ti] += 1
    used = sum(compress(tool_vram, now_left))
    vram_tl: list[tuple[float, float]] = [(0.0, used)] if record else []

    preds_left = list(npreds)
    ready = [0.0] * n
    end = [_INF] * n
    admitted = [0.0] * n if timings else []
    start = [0.0] * n if timings else []
    events: list[tuple[float, int, int, int]] = []  # (time, seq, arrive / loaded, node)
    seq = 0
    # instances released by another's end (a closed loop): nodes left per instance, who follows whom
    released: list[float] = list(releases) if follows is None else [_INF] * copies
    left_of: list[int] = []
    followers: list[list[int]] = []
    if follows is not None:
        left_of = [n1] * copies
        followers = [[] for _ in range(copies)]
        for r, f in enumerate(follows):
            if f >= 0:
                followers[f].append(r)
            else:
                released[r] = releases[r]
    # arrivals at exactly the current time (the releases at 0, then those the finishes make): in the
    # heap they would come last among its events at that time, so they are taken after those and
    # before any later ones, without the heap
    now_due: deque[int] = deque()
    sources = c.sources
    for r, rel in enumerate(released):
        if rel == _INF:
            continue
        for i in sources:
            v = r * n1 + i
            ready[v] = rel
            if rel == 0.0:
                now_due.append(v)
            else:
                events.append((rel, seq, _ARRIVE, v))
                seq += 1
    heapq.heapify(events)
    heappop, heappush = heapq.heappop, heapq.heappush
    # running tasks per device: their nodes and remaining isolated work, two lists in step kept in
    # ascending order of the work left. The work is stored as work left + the device's offset (the
    # isolated work each of its running tasks has done since it last emptied): every task of a
    # device loses the same step an event, which the offset takes in one addition, so the order
    # holds; the first task sets the next event, the finished ones are a prefix, a newcomer goes in
    # by bisection at its work + the offset. A task alone keeps its own work left (offset 0, the
    # arithmetic of a subtraction an event); the per-task CPU steps (waits) fold the offset in first.
    cpu_v: list[int] = []
    cpu_w: list[float] = []
    cpu_off = 0.0
    gpu_v: list[int] = []
    gpu_w: list[float] = []
    gpu_off = 0.0
    threads_sum = 0.0  # cores demanded by the running CPU tasks (integer-valued without measured demands)
    util_sum = 0.0
    waits = c.waits
    queue: deque[int] = deque()
    sharing = c.load_sharing
    device_loads = sharing == _DEVICE
    cross = c.cross
    plain = not (cross or waits or sharing)
    share = _gpu_shares(kap, n) if plain else ()  # share[k]: the GPU sharing's 1 + kappa (k - 1) of k running tasks
    load_run: dict[int, float] = {}  # loads in progress when they share (node -> remaining load ms)
    t = 0.0
    done = 0
    per_task = False  # this event's CPU steps are per task (set with the rates, only off the plain path)
    closed = follows is not None

    while True:
        # timed events due now, in (time, push order): arrivals (inputs complete) and finished loads
        while True:
            if now_due and not (events and events[0][0] <= t):
                kind, v = _ARRIVE, now_due.popleft()
            elif events and events[0][0] <= t + EPS:
                _, _, kind, v = heappop(events)
            else:
                break
            if kind == _LOADED:
                if timings:
                    start[v] = t
                wk = work_gpu[v] + gpu_off
                i = bisect_right(gpu_w, wk)
                gpu_w.insert(i, wk)
                gpu_v.insert(i, v)
                util_sum += util[v]
                continue
            ready[v] = t
            p = pl[v]
            if p == CPU:
                if timings:
                    admitted[v] = start[v] = t
                wk = work_cpu[v] + cpu_off
                i = bisect_right(cpu_w, wk)
                cpu_w.insert(i, wk)
                cpu_v.insert(i, v)
                threads_sum += threads[v]
            elif p == NOW:
                if timings:
                    admitted[v] = start[v] = t
                wk = work_gpu[v] + gpu_off
                i = bisect_right(gpu_w, wk)
                gpu_w.insert(i, wk)
                gpu_v.insert(i, v)
                util_sum += util[v]
            else:
                queue.append(v)
        # FIFO admission: only the head may enter, when it fits beside what is held
        while queue and used + vram[queue[0]] <= room:
            v = queue.popleft()
            used += vram[v]
            if timings:
                admitted[v] = t
                if record:
                    if vram_tl[-1][0] == t:
                        vram_tl[-1] = (t, used)
                    elif vram_tl[-1][1] != used:
                        vram_tl.append((t, used))
            if warm_ms:
                lv = load_now[v] = _warm_load(freed, t - warm_ms, vram[v], load_of[v], cold_of[v])
            else:
                lv = load_of[v]
            if lv > 0.0:
                if sharing:
                    load_run[v] = lv
                    if device_loads:
                        util_sum += LOAD_UTIL
                else:
                    heappush(events, (t + lv, seq, _LOADED, v))
                    seq += 1
            else:
                if timings:
                    start[v] = t
                wk = work_gpu[v] + gpu_off
                i = bisect_right(gpu_w, wk)
                gpu_w.insert(i, wk)
                gpu_v.insert(i, v)
                util_sum += util[v]
        if not cpu_v and not gpu_v and not load_run:
            if events:
                t = events[0][0]
                continue
            # nothing runs, nothing arrives, the queue head never fits: deadlock
            if e2e_only:
                return _INF
            return Timings(_INF, [_INF] * copies, queue[0] if queue else -1, used, now_left, ready, admitted,
                           start, end, _loads(pl, load_now if warm_ms else load_of) if timings else [], vram_tl)
        # the rates: a device's slowdown from its running set, and the time to the next event
        if plain:  # the same arithmetic, fewer steps: no cross-core interference, per-task slowdown or shared loads
            dt = events[0][0] - t if events else _INF
            if cpu_v:
                cpu_slow = threads_sum / cores if threads_sum > cores else 1.0
                due = (cpu_w[0] - cpu_off) * cpu_slow
                if due < dt:
                    dt = due
            if gpu_v:
                gpu_slow = (util_sum if util_sum > 1.0 else 1.0) * share[len(gpu_v)]
                due = (gpu_w[0] - gpu_off) * gpu_slow
                if due < dt:
                    dt = due
        else:
            dt = _INF
            crossed = cross and cpu_v and (gpu_v or load_run)
            if crossed:  # cross-core interference: while both sides run, each slows the other
                cpu_x, dev_x = _cross(cross, threads_sum / cores,
                                      util_sum if device_loads else util_sum + len(load_run))
            if cpu_v:
                cpu_slow = threads_sum / cores if threads_sum > cores else 1.0
                if crossed:
                    cpu_slow *= cpu_x
                per_task = waits and cpu_slow > 1.0
                if per_task:  # a task waiting part of the time slows only on its busy part: per-task steps,
                    if cpu_off:  # on the work left itself (the offset folded in)
                        cpu_w = [w - cpu_off for w in cpu_w]
                        cpu_off = 0.0
                    dt = _per_task_dt(cpu_v, cpu_w, threads, cpu_slow)
                else:
                    dt = (cpu_w[0] - cpu_off) * cpu_slow
            if gpu_v or load_run:
                k = len(gpu_v) + len(load_run) if device_loads else len(gpu_v)
                gpu_slow = (util_sum if util_sum > 1.0 else 1.0) * (1.0 + kap * (k - 1)) if k else 1.0
                if crossed:
                    gpu_slow *= dev_x
                if gpu_v:
                    due = (gpu_w[0] - gpu_off) * gpu_slow
                    if due < dt:
                        dt = due
                if load_run:
                    load_slow = gpu_slow if device_loads else float(len(load_run))
                    if crossed and not device_loads:
                        load_slow *= dev_x
                    dt = min(dt, min(load_run.values()) * load_slow)
            if events:
                due = events[0][0] - t
                if due < dt:
                    dt = due
        t += dt
        finished: list[int] = []
        if cpu_v:
            if per_task:  # per-task steps may reorder the work left: sort it again
                cpu_v, cpu_w = _per_task_step(cpu_v, cpu_w, threads, cpu_slow, dt)
            elif len(cpu_w) == 1:  # alone: its own work left, the offset folded in (none when it ran alone)
                cpu_w[0] -= cpu_off + dt / cpu_slow
                cpu_off = 0.0
            else:  # every task loses the same step: the device's offset takes it, one addition
                cpu_off += dt / cpu_slow
            while cpu_w[0] - cpu_off <= EPS:  # finished: a prefix of the order
                finished.append(cpu_v.pop(0))
                del cpu_w[0]
                if not cpu_w:
                    cpu_off = 0.0
                    break
        if gpu_v:
            if len(gpu_w) == 1:
                gpu_w[0] -= gpu_off + dt / gpu_slow
                gpu_off = 0.0
            else:
                gpu_off += dt / gpu_slow
            while gpu_w[0] - gpu_off <= EPS:  # finished: a prefix of the order
                finished.append(gpu_v.pop(0))
                del gpu_w[0]
                if not gpu_w:
                    gpu_off = 0.0
                    break
        if load_run:
            step = dt / load_slow
            loaded = []
            for v in load_run:
                lw = load_run[v] - step
                load_run[v] = lw
                if lw <= EPS:
                    loaded.append(v)
            for v in sorted(loaded):  # loaded: compute starts under the GPU sharing
                del load_run[v]
                if device_loads:
                    util_sum -= LOAD_UTIL
                if timings:
                    start[v] = t
                wk = work_gpu[v] + gpu_off
                i = bisect_right(gpu_w, wk)
                gpu_w.insert(i, wk)
                gpu_v.insert(i, v)
                util_sum += util[v]
        if not finished:
            continue
        finished.sort()
        for v in finished:
            end[v] = t
            done += 1
            p = pl[v]
            if p == CPU:
                threads_sum -= threads[v]
            else:
                util_sum -= util[v]
                if p == NOW:
                    ti = tool[v]
                    now_left[ti] -= 1
                    if now_left[ti] == 0:
                        used -= tool_vram[ti]
                        if warm_ms:
                            freed.append([t, tool_vram[ti]])
                else:
                    used -= vram[v]
                    if warm_ms:
                        freed.append([t, vram[v]])
            if closed:
                r = v // n1
                left_of[r] -= 1
                if left_of[r] == 0:  # instance r returned: release those that follow it
                    todo = []
                    for f in followers[r]:
                        todo.append((f, t + releases[f]))
                    while todo:
                        f, rel = todo.pop()
                        if rel < horizon_ms:
                            released[f] = rel
                            for i in sources:
                                w = f * n1 + i
                                ready[w] = rel
                                if rel == t:
                                    now_due.append(w)
                                else:
                                    heappush(events, (rel, seq, _ARRIVE, w))
                                    seq += 1
                            continue
                        # past the horizon: never sent; its resident tools stop waiting for it
                        done += n1
                        base = f * n1
                        for i in range(n1):
                            if pl[base + i] == NOW:
                                ti = tool[base + i]
                                now_left[ti] -= 1
                                if now_left[ti] == 0:
                                    used -= tool_vram[ti]
                        todo.extend((g, _INF) for g in followers[f])
            on_cpu = p == CPU
            for w, delay in succs[v]:
                arrive = t + delay if delay and (pl[w] == CPU) != on_cpu else t  # data crossing PCIe (t + 0 is t)
                if arrive > ready[w]:
                    ready[w] = arrive
                preds_left[w] -= 1
                if preds_left[w] == 0:
                    if ready[w] == t:
                        now_due.append(w)
                    else:
                        heappush(events, (ready[w], seq, _ARRIVE, w))
                        seq += 1
        if not cpu_v and not gpu_v and not load_run:
            threads_sum, util_sum = 0.0, 0.0  # drop accumulated float error
        if record:
            if vram_tl[-1][0] == t:
                vram_tl[-1] = (t, used)
            elif vram_tl[-1][1] != used:
                vram_tl.append((t, used))
        if done == n:
            break

    loads_ms = (_loads(pl, load_now if warm_ms else load_of) if not sharing else
                _load_spans(pl, start, admitted)) if timings else []
    if e2e_only:
        return max(map(end.__getitem__, c.sinks)) - releases[0]
    if follows is None:
        per = [max(map(end.__getitem__, c.sinks)) - releases[0]] if copies == 1 else \
            _per_instance(end, n1, c.sinks, releases)
        if not timings:
            return Timings(max(per), per)
        return Timings(max(per), per, ready=ready, admitted=admitted, start=start, end=end,
                       load=loads_ms, vram=vram_tl)
    per = _per_instance(end, n1, c.sinks, released)
    worst = max(x for x in per if x == x)
    if not timings:
        return Timings(worst, per, released=released)
    return Timings(worst, per, ready=ready, admitted=admitted, start=start, end=end,
                   load=loads_ms, vram=vram_tl, released=released)


@lru_cache(maxsize=16, typed=True)
def _gpu_shares(kap: float, n: int) -> tuple[float, ...]:
    """Per number k of running GPU tasks up to ``n``, the sharing's factor 1 + ``kap`` (k - 1) (the same
    operations as computing it at each event; k = 0 unused), kept for the few kappas a session uses."""
    return tuple(1.0 + kap * (k - 1) for k in range(n + 1))


def _slowed(demand: float, cpu_slow: float) -> float:
    """The CPU slowdown of a task demanding ``demand`` cores when the cores are oversubscribed by
    ``cpu_slow`` (> 1): all of it from one core up, only its busy part below."""
    return cpu_slow if demand >= 1.0 else 1.0 + demand * (cpu_slow - 1.0)


def _cross(x: float, cpu_busy: float, dev_busy: float) -> tuple[float, float]:
    """The slowdowns of cross-core interference ``x`` while both sides run something: (CPU tasks'
    1 + x min(1, ``dev_busy``: the device's utilization, with the loads when they share no compute),
    the device's tasks' and loads' 1 + x min(1, ``cpu_busy``: the cores the CPU tasks keep busy over
    the machine's))."""
    return 1.0 + x * min(1.0, dev_busy), 1.0 + x * min(1.0, cpu_busy)


def _warm_load(freed: deque[list[float]], since: float, need_mb: float, warm_ms: float, cold_ms: float) -> float:
    """A load's time when it may reuse memory freed on the device since ``since`` (``freed``: [when, MB
    unclaimed], oldest first; what it reuses is claimed): ``warm_ms`` for the share of its ``need_mb``
    found there, ``cold_ms`` for the rest. Frees older than ``since`` have gone cold and are dropped."""
    while freed and freed[0][0] < since:
        freed.popleft()
    if need_mb <= 0.0:
        return warm_ms
    took = 0.0
    while freed and took < need_mb:
        unclaimed = freed[0][1]
        use = min(unclaimed, need_mb - took)
        took += use
        if use >= unclaimed:
            freed.popleft()
        else:
            freed[0][1] = unclaimed - use
    return warm_ms + (cold_ms - warm_ms) * (1.0 - took / need_mb)


def queue_load_ms(card: ToolCard, machine: Machine) -> float:
    """The load time the kernel charges a ``gpu_queue`` node of ``card`` on ``machine`` when no memory
    freed on the device recently is reused (with ``warm_reuse_ms`` 0, every load; otherwise a load's
    time falls from this to ``card.load_ms`` with the share of its memory reused warm): the card's
    expected load under the machine's ``cold_load_share`` (:meth:`ToolCard.expected_load_ms`; the
    card's ``load_ms`` at share 0 or without ``load_cold_ms``). The one home of that figure: the
    compiled tables take it, and so do the callers that reason about a load outside :func:`simulate`
    (the ``rules`` decider's VRAM packing, the ``greedy-mem`` baseline, the monitor's isolated figure)."""
    return card.expected_load_ms(machine.cold_load_share)


def queue_speedup(card: ToolCard, machine: Machine) -> float | None:
    """cpu_ms / (gpu_ms + :func:`queue_load_ms`): the single-shot speedup of a ``gpu_queue`` node of
    ``card`` on ``machine``, with the load the kernel charges it (None without a GPU implementation).
    The one home of that figure: ``hetsched show``, the LLM's prompt and the ``greedy-mem`` baseline
    take it (a card alone cannot give it: the load depends on the machine's ``cold_load_share``)."""
    return None if card.gpu_ms is None else card.cpu_ms / (card.gpu_ms + queue_load_ms(card, machine))


def cpu_slowdown(demand: float, cores_asked: float) -> float:
    """The kernel's CPU slowdown of a task demanding ``demand`` cores while the running CPU tasks
    together demand ``cores_asked`` times the machine's cores (no slowdown up to 1), for callers
    that reason about one task outside :func:`simulate` (the rules decider's ratio test)."""
    return _slowed(demand, cores_asked) if cores_asked > 1.0 else 1.0


def _per_task_dt(nodes: list[int], work: list[float], demand: Sequence[float], cpu_slow: float) -> float:
    """Time to the first CPU finish when each task slows by its own :func:`_slowed`."""
    return min(w * _slowed(demand[v], cpu_slow) for v, w in zip(nodes, work, strict=True))


def _per_task_step(nodes: list[int], work: list[float], demand: Sequence[float], cpu_slow: float,
                   dt: float) -> tuple[list[int], list[float]]:
    """The CPU tasks after ``dt`` ms when each slows by its own :func:`_slowed`, sorted again by work
    left (their steps differ, so the order may change)."""
    left = sorted(zip([w - dt / _slowed(demand[v], cpu_slow) for v, w in zip(nodes, work, strict=True)],
                      nodes, strict=True))
    return [v for _, v in left], [w for w, _ in left]


def _copied_succs(succs: tuple[tuple[tuple[int, float], ...], ...], n1: int,
                  copies: int) -> tuple[tuple[tuple[int, float], ...], ...]:
    """The successor table of ``copies`` instances of an ``n1``-node workflow (node ``r * n1 + i``)."""
    return tuple(tuple((w + r * n1, d) for w, d in s) for r in range(copies) for s in succs)


def _per_instance(end: list[float], n1: int, sinks: tuple[int, ...], released: Sequence[float]) -> list[float]:
    """Per instance, its last sink's end minus its release (nan: never released)."""
    return [max(end[r * n1 + s] for s in sinks) - rel if rel < _INF else math.nan for r, rel in enumerate(released)]


def _load_spans(place: Sequence[int], start: list[float], admitted: list[float]) -> list[float]:
    """Per node, admission to start for queued nodes (their load, however it was shared), else 0."""
    return [start[i] - admitted[i] if p == QUEUE else 0.0 for i, p in enumerate(place)]


def _loads(place: Sequence[int], load_of: Sequence[float]) -> list[float]:
    return [load_of[i] if p == QUEUE else 0.0 for i, p in enumerate(place)]


def _native_kernel() -> tuple[ModuleType | None, str]:
    """The compiled copy of this module and why it runs, or None and why this Python runs instead."""
    if os.environ.get("HETSCHED_PURE_PYTHON", "") not in ("", "0"):
        return None, "HETSCHED_PURE_PYTHON is set"
    try:
        native = importlib.import_module("hetsched.model._contention_native")
    except ImportError:
        return None, "not compiled (a pure-Python install)"
    try:
        digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    except OSError as err:
        return None, f"cannot read {__file__} to check the compiled copy: {err}"
    if getattr(native, "SOURCE_SHA256", None) != digest:
        return None, "compiled from another version of contention.py: reinstall (pip install -e .) to rebuild it"
    return native, f"compiled with mypyc ({Path(native.__file__ or '').name})"


KERNEL = "python"
"""Which contention kernel runs: ``"native"`` (the mypyc build of this module) or ``"python"``."""
KERNEL_NOTE = "this module's Python"
"""Why :data:`KERNEL` runs (for run records and benchmarks)."""

if __name__ == "hetsched.model.contention":  # not in the compiled copy itself
    _native, KERNEL_NOTE = _native_kernel()
    if _native is not None:
        globals().update({name: obj for name, obj in vars(_native).items()  # the choice itself stays here
                          if getattr(obj, "__module__", None) == _native.__name__ and name != "_native_kernel"})
        KERNEL = "native"

__all__ = [
    "EPS", "KERNEL", "KERNEL_NOTE", "Codes", "Compiled", "Timings", "cpu_slowdown", "queue_load_ms", "queue_speedup",
    "simulate", "simulate_e2e",
]
