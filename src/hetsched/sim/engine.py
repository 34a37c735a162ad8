"""The discrete-event simulator: executes a workflow under a mapping with DESIGN.md's contention model.

- GPU (Factor A): processor sharing. With running GPU tasks R and U = sum of their
  ``gpu_util``, each progresses at rate 1/s, s = max(1, U) * (1 + kappa * (|R| - 1)).
- CPU: P cores; a task uses ``cpu_threads``; every CPU task slows by max(1, sum threads / P).
- VRAM (Factor B): ``gpu_now`` tools are warm and resident from t = 0 until their last
  ``gpu_now`` node ends, counted once per tool; ``gpu_queue`` nodes wait in one FIFO queue
  (strict order, head-of-line), are admitted when their memory fits beside what is held, pay
  ``load_ms`` (a PCIe copy that does not share GPU compute), run, then free their memory.
- Edges carrying ``data_mb`` between a CPU node and a GPU node cost data_mb / pcie_mb_per_ms.
- Noise: one multiplicative lognormal factor (mean 1, cv ``noise_cv``) per node for its work
  and one for its load, drawn in node order from the seed whatever the mapping, so mappings
  compared under one seed see the same luck (common random numbers).

Infeasible mappings are a result (``Trace(feasible=False, reason=...)``), never an exception.
Imports only ``hetsched.model``.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from hetsched.model import Infeasibility, InfeasibleKind, Mapping, NodeTrace, Scenario, Trace, VramPoint
from hetsched.model.mapping import CPU_CODE as CPU
from hetsched.model.mapping import NOW_CODE as NOW
from hetsched.model.mapping import QUEUE_CODE as QUEUE

_ARRIVE, _LOADED = 0, 1
_EPS = 1e-7  # ms; below float noise of any latency we model, far above 1 ulp of 1e6 ms
_INF = math.inf


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A scenario flattened into index-addressed tuples for the hot loop."""

    names: tuple[str, ...]
    tools: tuple[str, ...]
    tool_idx: tuple[int, ...]
    tool_vram: tuple[float, ...]
    cpu_ms: tuple[float, ...]
    gpu_ms: tuple[float, ...]
    load_ms: tuple[float, ...]
    vram: tuple[float, ...]
    util: tuple[float, ...]
    threads: tuple[int, ...]
    npreds: tuple[int, ...]
    succs: tuple[tuple[tuple[int, float], ...], ...]
    sinks: tuple[int, ...]
    cores: int
    budget: float
    kappa: float

    @classmethod
    def of(cls, scenario: Scenario) -> _Compiled:
        wf = scenario.workflow
        names = wf.node_ids
        index = {n: i for i, n in enumerate(names)}
        tools = wf.tools
        tindex = {t: i for i, t in enumerate(tools)}
        cards = [scenario.card_of(n) for n in names]
        pcie = scenario.machine.pcie_mb_per_ms
        succs: list[list[tuple[int, float]]] = [[] for _ in names]
        npreds = [0] * len(names)
        for e in wf.edges:
            succs[index[e.src]].append((index[e.dst], e.data_mb / pcie))
            npreds[index[e.dst]] += 1
        return cls(
            names=names,
            tools=tools,
            tool_idx=tuple(tindex[wf.tool_of[n]] for n in names),
            tool_vram=tuple(scenario.cards[t].vram_mb for t in tools),
            cpu_ms=tuple(c.cpu_ms for c in cards),
            gpu_ms=tuple(c.gpu_ms if c.gpu_ms is not None else _INF for c in cards),
            load_ms=tuple(c.load_ms for c in cards),
            vram=tuple(c.vram_mb for c in cards),
            util=tuple(c.gpu_util for c in cards),
            threads=tuple(c.cpu_threads for c in cards),
            npreds=tuple(npreds),
            succs=tuple(tuple(s) for s in succs),
            sinks=tuple(index[s] for s in wf.sinks),
            cores=scenario.machine.cpu_cores,
            budget=scenario.machine.vram_budget_mb,
            kappa=scenario.machine.gpu_kappa,
        )


@dataclass(slots=True)
class _Outcome:
    """Raw result of one simulation; ``deadlock`` is set when it deadlocked."""

    e2e_ms: float
    deadlock: Infeasibility | None
    ready: list[float]
    admitted: list[float]
    start: list[float]
    end: list[float]
    load: list[float]
    vram: list[tuple[float, float]]


def lognormal_factors(n: int, cv: float, rng: random.Random) -> list[float]:
    """n multiplicative factors with mean 1 and coefficient of variation cv."""
    if cv <= 0:
        return [1.0] * n
    sigma = math.sqrt(math.log1p(cv * cv))
    mu = -0.5 * sigma * sigma
    return [rng.lognormvariate(mu, sigma) for _ in range(n)]


def _simulate(
    c: _Compiled,
    place: Sequence[int],
    work_factor: Sequence[float] | None,
    load_factor: Sequence[float] | None,
    record: bool,
) -> _Outcome:
    n = len(place)
    if work_factor is None:
        work = [c.cpu_ms[i] if place[i] == CPU else c.gpu_ms[i] for i in range(n)]
        load = [c.load_ms[i] if place[i] == QUEUE else 0.0 for i in range(n)]
    else:
        assert load_factor is not None
        work = [(c.cpu_ms[i] if place[i] == CPU else c.gpu_ms[i]) * work_factor[i] for i in range(n)]
        load = [c.load_ms[i] * load_factor[i] if place[i] == QUEUE else 0.0 for i in range(n)]

    budget, cores, kappa = c.budget, c.cores, c.kappa
    tool_idx, threads, util, vram, succs = c.tool_idx, c.threads, c.util, c.vram, c.succs
    # gpu_now residency: a tool stays resident until its last gpu_now node ends
    now_left = [0] * len(c.tools)
    for i in range(n):
        if place[i] == NOW:
            now_left[tool_idx[i]] += 1
    used = sum(c.tool_vram[t] for t, k in enumerate(now_left) if k)
    vram_tl: list[tuple[float, float]] = [(0.0, used)] if record else []

    preds_left = list(c.npreds)
    ready = [0.0] * n
    admitted = [0.0] * n
    start = [0.0] * n
    end = [_INF] * n
    heap: list[tuple[float, int, int, int]] = []
    seq = 0
    for i in range(n):
        if preds_left[i] == 0:
            heap.append((0.0, seq, _ARRIVE, i))
            seq += 1
    heapq.heapify(heap)
    cpu_run: dict[int, float] = {}
    gpu_run: dict[int, float] = {}
    threads_sum = 0
    util_sum = 0.0
    queue: deque[int] = deque()
    t = 0.0
    done = 0

    def note_vram() -> None:
        if vram_tl and vram_tl[-1][0] == t:
            vram_tl[-1] = (t, used)
        elif not vram_tl or vram_tl[-1][1] != used:
            vram_tl.append((t, used))

    while True:
        # timed events due now: arrivals (inputs complete) and finished loads
        while heap and heap[0][0] <= t + _EPS:
            _, _, kind, v = heapq.heappop(heap)
            if kind == _LOADED:
                start[v] = t
                gpu_run[v] = work[v]
                util_sum += util[v]
                continue
            ready[v] = t
            p = place[v]
            if p == CPU:
                admitted[v] = start[v] = t
                cpu_run[v] = work[v]
                threads_sum += threads[v]
            elif p == NOW:
                admitted[v] = start[v] = t
                gpu_run[v] = work[v]
                util_sum += util[v]
            else:
                queue.append(v)
        # FIFO admission: only the head may enter, when it fits beside what is held
        while queue and used + vram[queue[0]] <= budget + _EPS:
            v = queue.popleft()
            used += vram[v]
            admitted[v] = t
            if record:
                note_vram()
            if load[v] > 0:
                heapq.heappush(heap, (t + load[v], seq, _LOADED, v))
                seq += 1
            else:
                start[v] = t
                gpu_run[v] = work[v]
                util_sum += util[v]
        if done == n:
            break
        if not cpu_run and not gpu_run:
            if heap:
                t = heap[0][0]
                continue
            return _Outcome(
                _INF, _deadlock_reason(c, place, queue, used, now_left), ready, admitted, start, end, load, vram_tl
            )

        cpu_slow = threads_sum / cores if threads_sum > cores else 1.0
        k = len(gpu_run)
        gpu_slow = (util_sum if util_sum > 1.0 else 1.0) * (1.0 + kappa * (k - 1)) if k else 1.0
        dt = _INF
        if cpu_run:
            dt = min(cpu_run.values()) * cpu_slow
        if gpu_run:
            dt = min(dt, min(gpu_run.values()) * gpu_slow)
        if heap:
            dt = min(dt, heap[0][0] - t)
        t += dt
        finished: list[int] = []
        if cpu_run:
            step = dt / cpu_slow
            for v in cpu_run:
                cpu_run[v] -= step
                if cpu_run[v] <= _EPS:
                    finished.append(v)
        if gpu_run:
            step = dt / gpu_slow
            for v in gpu_run:
                gpu_run[v] -= step
                if gpu_run[v] <= _EPS:
                    finished.append(v)
        if not finished:
            continue
        finished.sort()
        for v in finished:
            end[v] = t
            done += 1
            p = place[v]
            if p == CPU:
                del cpu_run[v]
                threads_sum -= threads[v]
            else:
                del gpu_run[v]
                util_sum -= util[v]
                if p == NOW:
                    ti = tool_idx[v]
                    now_left[ti] -= 1
                    if now_left[ti] == 0:
                        used -= c.tool_vram[ti]
                else:
                    used -= vram[v]
            if not cpu_run and not gpu_run:
                threads_sum, util_sum = 0, 0.0  # drop accumulated float error
            for w, delay in succs[v]:
                crossing = (place[w] == CPU) != (p == CPU)
                arrive = t + delay if crossing else t
                if arrive > ready[w]:
                    ready[w] = arrive
                preds_left[w] -= 1
                if preds_left[w] == 0:
                    heapq.heappush(heap, (ready[w], seq, _ARRIVE, w))
                    seq += 1
        if record:
            note_vram()

    e2e = max(end[s] for s in c.sinks)
    return _Outcome(e2e, None, ready, admitted, start, end, load, vram_tl)


def _deadlock_reason(
    c: _Compiled, place: Sequence[int], queue: deque[int], used: float, now_left: list[int]
) -> Infeasibility:
    if not queue:  # cannot happen with a DAG; kept so a bug reads as a reason, not a hang
        return Infeasibility(InfeasibleKind.DEADLOCK, "stalled: no task can run and none is queued")
    head = queue[0]
    holders = [c.tools[t] for t, k in enumerate(now_left) if k]
    free = c.budget - used
    return Infeasibility(
        InfeasibleKind.DEADLOCK,
        f"node {c.names[head]!r} ({c.tools[c.tool_idx[head]]}) at the head of the gpu_queue "
        f"needs {c.vram[head]:g} MB but only {free:g} MB of {c.budget:g} MB are free and nothing running will "
        f"free more: gpu_now tools {holders} stay resident until queued work they depend on has run",
    )


class Simulator:
    """Simulated executor for one scenario: ``run(mapping, seed) -> Trace``.

    Args:
        scenario: the scenario to simulate.
        noise: apply the machine's multiplicative noise (needs a seed); False gives the
            noise-free figures that define the true oracle.
    """

    name = "sim"

    def __init__(self, scenario: Scenario, noise: bool = True) -> None:
        self.scenario = scenario
        self.noise = noise and scenario.machine.noise_cv > 0
        self._c = _Compiled.of(scenario)

    def close(self) -> None:
        """Nothing to free (the Executor contract)."""

    def __enter__(self) -> Simulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def codes(self, mapping: Mapping) -> tuple[int, ...]:
        """Placement codes in node order (``Placement.code``: 0 cpu, 1 gpu_now, 2 gpu_queue)."""
        return tuple(mapping[n].code for n in self._c.names)

    def run(self, mapping: Mapping, seed: int | None = 0) -> Trace:
        """Execute once; infeasible mappings come back with ``feasible=False`` and a reason."""
        sc = self.scenario
        mapping = sc.validate_mapping(mapping)
        budget = sc.machine.vram_budget_mb
        refused = sc.infeasibility(mapping)
        use_seed = seed if self.noise else None
        if refused is not None:
            return Trace.refused(mapping, refused, vram_budget_mb=budget, seed=use_seed, executor=self.name)
        wf = lf = None
        if self.noise:
            rng = random.Random(seed)
            n = len(self._c.names)
            wf = lognormal_factors(n, sc.machine.noise_cv, rng)
            lf = lognormal_factors(n, sc.machine.noise_cv, rng)
        out = _simulate(self._c, self.codes(mapping), wf, lf, record=True)
        if out.deadlock is not None:
            return Trace.refused(mapping, out.deadlock, vram_budget_mb=budget, seed=use_seed, executor=self.name)
        c = self._c
        nodes = {
            name: NodeTrace(
                node=name,
                tool=c.tools[c.tool_idx[i]],
                placement=mapping[name],
                ready_ms=out.ready[i],
                admitted_ms=out.admitted[i],
                start_ms=out.start[i],
                end_ms=out.end[i],
                load_ms=out.load[i],
            )
            for i, name in enumerate(c.names)
        }
        return Trace(
            mapping=mapping,
            feasible=True,
            e2e_ms=out.e2e_ms,
            nodes=nodes,
            vram_timeline=tuple(VramPoint(t, u) for t, u in out.vram),
            vram_budget_mb=budget,
            seed=use_seed,
        )

    def e2e_codes(self, codes: Sequence[int]) -> float:
        """Noise-free E2E for placement codes in node order; inf when it deadlocks.

        The caller must have checked the static feasibility (``gpu_now`` set within budget).
        This is the oracle's hot path: no trace is built.
        """
        return _simulate(self._c, codes, None, None, record=False).e2e_ms

    def infeasibility(self, mapping: Mapping) -> Infeasibility | None:
        """Why a mapping cannot run under the model, or None: the static checks, then a noise-free
        simulation for what only the FIFO order shows (a deadlock at the head of the queue)."""
        mapping = self.scenario.validate_mapping(mapping)
        static = self.scenario.infeasibility(mapping)
        if static is not None:
            return static
        return _simulate(self._c, self.codes(mapping), None, None, record=False).deadlock

    def e2e(self, mapping: Mapping) -> float | None:
        """Noise-free E2E of a mapping, None when infeasible."""
        mapping = self.scenario.validate_mapping(mapping)
        if self.scenario.infeasibility(mapping):
            return None
        e = self.e2e_codes(self.codes(mapping))
        return None if math.isinf(e) else e

