"""The ``rules`` decider's own model of a mapping's E2E: the cards read through the contention
model DESIGN.md documents, with the GPU interference fitted to what was measured.

A decider may not run anything, and ``hetsched.llm`` may not import the simulator: this is the
decider's reading of the cards, the way the paper's LLM reads them ("concurrent tools share
the GPU"), made explicit:

- GPU: processor sharing. With running GPU tasks R and U = the sum of their cards' ``gpu_util``,
  each progresses at rate 1/s, s = max(1, U) * (1 + k * (|R| - 1)). The interference k starts
  at what the machine block declares (``gpu_kappa``, the user's description of their GPU) and
  is then fitted to the measured E2Es (:func:`fit_interference`), so on a real GPU, or with a
  wrong declaration, it takes whatever sharing costs there.
- CPU: P cores; a task uses its card's ``cpu_threads``; every CPU task slows by max(1, sum / P).
- VRAM: ``gpu_now`` tools resident from the start until their last node ends; ``gpu_queue``
  nodes admitted in FIFO order when they fit, paying ``load_ms``; a queue that can never move
  is a deadlock (E2E = inf), as are mappings the scenario's static check rejects.
- Edges with data cost data_mb / pcie_mb_per_ms when they cross between CPU and GPU.

Deterministic, noise-free. Imports only ``hetsched.model``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence

from hetsched.model import Scenario
from hetsched.model.mapping import CPU_CODE, NOW_CODE, QUEUE_CODE

_EPS = 1e-7
_INF = math.inf

INTERFERENCE_GRID: tuple[float, ...] = (0.0, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0)
"""Interference values :func:`fit_interference` tries (per extra concurrent GPU task)."""


class Estimator:
    """E2E estimates for one scenario, under an assumed GPU interference (see the module docstring)."""

    def __init__(self, scenario: Scenario, interference: float = 0.0) -> None:
        if interference < 0:
            raise ValueError(f"interference must be >= 0, got {interference}")
        self.scenario = scenario
        self.interference = interference
        wf = scenario.workflow
        names = wf.node_ids
        index = {n: i for i, n in enumerate(names)}
        tools = wf.tools
        tindex = {t: i for i, t in enumerate(tools)}
        cards = [scenario.card_of(n) for n in names]
        pcie = scenario.machine.pcie_mb_per_ms
        self.n = len(names)
        self.tool = [tindex[wf.tool_of[n]] for n in names]
        self.tool_vram = [scenario.cards[t].vram_mb for t in tools]
        self.cpu_ms = [c.cpu_ms for c in cards]
        self.gpu_ms = [c.gpu_ms if c.gpu_ms is not None else _INF for c in cards]
        self.load_ms = [c.load_ms for c in cards]
        self.vram = [c.vram_mb for c in cards]
        self.util = [c.gpu_util for c in cards]
        self.threads = [c.cpu_threads for c in cards]
        succs: list[list[tuple[int, float]]] = [[] for _ in names]
        npreds = [0] * len(names)
        for e in wf.edges:
            succs[index[e.src]].append((index[e.dst], e.data_mb / pcie))
            npreds[index[e.dst]] += 1
        self.succs = succs
        self.npreds = npreds
        self.sinks = [index[s] for s in wf.sinks]
        self.cores = scenario.machine.cpu_cores
        self.budget = scenario.machine.vram_budget_mb
        self.evaluations = 0
        """How many estimates this estimator has made (the search's cost)."""

    def with_interference(self, interference: float) -> Estimator:
        """A copy under another interference (the compiled tables are shared)."""
        other = object.__new__(Estimator)
        other.__dict__.update(self.__dict__)
        other.interference = interference
        other.evaluations = 0
        return other

    def rescaled(self, cpu: Sequence[float], gpu: Sequence[float]) -> Estimator:
        """A copy whose per-node CPU and GPU times are multiplied by ``cpu[i]`` and ``gpu[i]`` (the
        calibration of cards that measurements contradict)."""
        other = self.with_interference(self.interference)
        other.cpu_ms = [c * f for c, f in zip(self.cpu_ms, cpu, strict=True)]
        other.gpu_ms = [g * f for g, f in zip(self.gpu_ms, gpu, strict=True)]
        return other

    def latencies(self, place: Sequence[int]) -> list[float] | None:
        """Per node, the estimated latency as the monitor measures it (admission to end, the load
        included for ``gpu_queue``); None when the mapping cannot run."""
        admitted: list[float] = [0.0] * self.n
        end: list[float] = [0.0] * self.n
        if not math.isfinite(self.e2e(place, admitted, end)):
            return None
        return [e - a for a, e in zip(admitted, end, strict=True)]

    def static_ok(self, place: Sequence[int]) -> bool:
        """The ``gpu_now`` set fits the budget and every queued node fits it alone."""
        need = 0.0
        seen: set[int] = set()
        for i, p in enumerate(place):
            if p == NOW_CODE and self.tool[i] not in seen:
                seen.add(self.tool[i])
                need += self.tool_vram[self.tool[i]]
            elif p == QUEUE_CODE and self.vram[i] > self.budget + _EPS:
                return False
        return need <= self.budget + _EPS

    def e2e(self, place: Sequence[int], admitted: list[float] | None = None, ends: list[float] | None = None) -> float:
        """Estimated E2E of placement codes in node order (inf: cannot run).

        Every task on a device progresses at the same rate, so each device keeps a virtual clock
        (work done per task so far) and a heap of its tasks' virtual finish times: an event costs
        O(log n) instead of a pass over the running tasks.
        """
        self.evaluations += 1
        if not self.static_ok(place):
            return _INF
        n = self.n
        cpu_ms, gpu_ms, load_ms = self.cpu_ms, self.gpu_ms, self.load_ms
        budget, cores, kappa = self.budget, self.cores, self.interference
        tool, threads, util, vram, succs = self.tool, self.threads, self.util, self.vram, self.succs
        now_left = [0] * len(self.tool_vram)
        for i in range(n):
            if place[i] == NOW_CODE:
                now_left[tool[i]] += 1
        used = sum(v for v, k in zip(self.tool_vram, now_left, strict=True) if k)
        preds_left = list(self.npreds)
        ready = [0.0] * n
        end = [_INF] * n
        events: list[tuple[float, int, int, int]] = []  # (time, seq, 0 arrive / 1 loaded, node)
        seq = 0
        for i in range(n):
            if preds_left[i] == 0:
                events.append((0.0, seq, 0, i))
                seq += 1
        heapq.heapify(events)
        cpu: list[tuple[float, int]] = []  # (virtual finish, node)
        gpu: list[tuple[float, int]] = []
        v_cpu = v_gpu = 0.0
        threads_sum = 0
        util_sum = 0.0
        queue: deque[int] = deque()
        t = 0.0
        done = 0
        while True:
            while events and events[0][0] <= t + _EPS:
                _, _, kind, v = heapq.heappop(events)
                if kind == 1:
                    heapq.heappush(gpu, (v_gpu + gpu_ms[v], v))
                    util_sum += util[v]
                    continue
                p = place[v]
                if admitted is not None and p != QUEUE_CODE:
                    admitted[v] = t
                if p == CPU_CODE:
                    heapq.heappush(cpu, (v_cpu + cpu_ms[v], v))
                    threads_sum += threads[v]
                elif p == NOW_CODE:
                    heapq.heappush(gpu, (v_gpu + gpu_ms[v], v))
                    util_sum += util[v]
                else:
                    queue.append(v)
            while queue and used + vram[queue[0]] <= budget + _EPS:
                v = queue.popleft()
                used += vram[v]
                if admitted is not None:
                    admitted[v] = t
                if load_ms[v] > 0:
                    heapq.heappush(events, (t + load_ms[v], seq, 1, v))
                    seq += 1
                else:
                    heapq.heappush(gpu, (v_gpu + gpu_ms[v], v))
                    util_sum += util[v]
            if done == n:
                break
            if not cpu and not gpu:
                if events:
                    t = events[0][0]
                    continue
                return _INF  # nothing runs, nothing arrives, the queue head never fits: deadlock
            cpu_slow = threads_sum / cores if threads_sum > cores else 1.0
            k = len(gpu)
            gpu_slow = (util_sum if util_sum > 1.0 else 1.0) * (1.0 + kappa * (k - 1)) if k else 1.0
            dt = _INF
            if cpu:
                dt = (cpu[0][0] - v_cpu) * cpu_slow
            if gpu:
                dt = min(dt, (gpu[0][0] - v_gpu) * gpu_slow)
            if events:
                dt = min(dt, events[0][0] - t)
            t += dt
            v_cpu += dt / cpu_slow
            v_gpu += dt / gpu_slow
            finished: list[int] = []
            while cpu and cpu[0][0] - v_cpu <= _EPS:
                v = heapq.heappop(cpu)[1]
                threads_sum -= threads[v]
                finished.append(v)
            while gpu and gpu[0][0] - v_gpu <= _EPS:
                v = heapq.heappop(gpu)[1]
                util_sum -= util[v]
                finished.append(v)
            if not finished:
                continue
            if not cpu and not gpu:
                threads_sum, util_sum = 0, 0.0  # drop accumulated float error
            finished.sort()
            for v in finished:
                end[v] = t
                done += 1
                p = place[v]
                if p == NOW_CODE:
                    ti = tool[v]
                    now_left[ti] -= 1
                    if now_left[ti] == 0:
                        used -= self.tool_vram[ti]
                elif p == QUEUE_CODE:
                    used -= vram[v]
                for w, delay in succs[v]:
                    crossing = (place[w] == CPU_CODE) != (p == CPU_CODE)
                    arrive = t + delay if crossing else t
                    if arrive > ready[w]:
                        ready[w] = arrive
                    preds_left[w] -= 1
                    if preds_left[w] == 0:
                        heapq.heappush(events, (ready[w], seq, 0, w))
                        seq += 1
        if ends is not None:
            ends[:] = end
        return max(end[s] for s in self.sinks)


def fit_interference(
    estimator: Estimator,
    measured: Sequence[tuple[tuple[int, ...], float]],
    prior: float = 0.0,
    memo: dict[tuple[float, tuple[int, ...]], float] | None = None,
) -> tuple[float, float]:
    """The interference whose estimates best match the measured E2Es (least squares of log
    ratios) and that error (RMS of log ratios): the best of :data:`INTERFERENCE_GRID` and
    ``prior``, refined by a golden-section search between its grid neighbours. Values the
    measurements cannot tell apart (nothing ran two GPU tasks at once) go to the one closest to
    ``prior``. ``memo`` keeps estimates across calls (the grid's recur round after round)."""
    if not measured:
        return prior, 0.0
    cache: dict[tuple[float, tuple[int, ...]], float] = {} if memo is None else memo

    def error(k: float) -> float:
        est = estimator.with_interference(k)
        err = 0.0
        for codes, e2e in measured:
            got = cache.get((k, codes))
            if got is None:
                got = cache[(k, codes)] = est.e2e(codes)
            if not math.isfinite(got) or got <= 0 or e2e <= 0:
                return math.inf
            err += math.log(got / e2e) ** 2
        return math.sqrt(err / len(measured))

    grid = sorted({*INTERFERENCE_GRID, prior})
    scored = [(round(error(k), 9), abs(k - prior), k) for k in grid]
    best = min(scored)
    if not math.isfinite(best[0]):
        return prior, math.inf
    at = grid.index(best[2])
    lo, hi = grid[max(0, at - 1)], grid[min(len(grid) - 1, at + 1)]
    # golden-section refinement inside the bracket (the error is smooth in k between grid points)
    ratio = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = error(c), error(d)
    for _ in range(8):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = error(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = error(d)
    k = round((a + b) / 2, 4)
    refined = (round(error(k), 9), abs(k - prior), k)
    best = min(best, refined)
    return best[2], best[0]


__all__ = ["INTERFERENCE_GRID", "Estimator", "fit_interference"]
