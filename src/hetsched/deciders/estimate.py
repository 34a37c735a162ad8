"""The ``rules`` decider's own model of a mapping's E2E: the cards read through the contention
model DESIGN.md documents, with the GPU interference fitted to what was measured.

A decider may not run anything, and ``hetsched.deciders`` may not import the simulator: this is the
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
- Under a workload (``scenario.workload``), a round's E2E is a window's p95 latency, so
  :meth:`Estimator.e2e` estimates that: the first :data:`ESTIMATE_WINDOW_REQUESTS` requests of the
  workload's arrival plan simulated together, their nearest-rank p95 (per-node ``latencies`` and
  ``timings`` stay one request's, what the cards describe).

Deterministic, noise-free. Imports only ``hetsched.model``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hetsched.model import Scenario
from hetsched.model.contention import Compiled, Timings, simulate, simulate_e2e
from hetsched.model.workload import percentile

_INF = math.inf

ESTIMATE_WINDOW_REQUESTS = 24
"""Requests of a workload's window the estimator simulates for a p95 (the window's first ones)."""

INTERFERENCE_GRID: tuple[float, ...] = (0.0, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0)
"""Interference values :func:`fit_interference` tries (per extra concurrent GPU task)."""


class Estimator:
    """E2E estimates for one scenario, under an assumed GPU interference (see the module docstring).

    A reading of the contention model (:func:`hetsched.model.contention.simulate`) with the
    decider's own interference and, after calibration, its own rescaled cards."""

    def __init__(self, scenario: Scenario, interference: float = 0.0) -> None:
        if interference < 0:
            raise ValueError(f"interference must be >= 0, got {interference}")
        self.scenario = scenario
        self.interference = interference
        self.compiled: Compiled = scenario.compiled
        c = self.compiled
        self.n = c.n
        self.budget = c.budget
        self.cpu_ms: Sequence[float] = c.cpu_ms
        self.gpu_ms: Sequence[float] = c.gpu_ms
        self.evaluations = 0
        """How many estimates this estimator has made (the search's cost)."""
        self.window: tuple[tuple[float, ...], tuple[int, ...] | None, float] | None = None
        """Under a workload: the releases, follows and horizon of the window :meth:`e2e` simulates."""
        wl = scenario.workload
        if wl is not None and len(wl.plan_size_hint()) > 1:
            plan = wl.plan(scenario.isolated_critical_path_ms())
            take = min(len(plan), ESTIMATE_WINDOW_REQUESTS)
            follows = None if plan.follows is None else plan.follows[:take]
            self.window = (plan.releases_ms[:take], follows, plan.horizon_ms)

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
        self.evaluations += 1
        if not self.compiled.static_ok(place):
            return None
        out = simulate(self.compiled, place, kappa=self.interference, cpu_ms=self.cpu_ms, gpu_ms=self.gpu_ms,
                       timings=True)
        if out.deadlock:
            return None
        return [e - a for a, e in zip(out.admitted, out.end, strict=True)]

    def timings(self, place: Sequence[int]) -> Timings | None:
        """The estimate's per-node timings (ready, admitted, start, end), None when the mapping cannot
        run; counted as an estimate."""
        self.evaluations += 1
        if not self.compiled.static_ok(place):
            return None
        out = simulate(self.compiled, place, kappa=self.interference, cpu_ms=self.cpu_ms, gpu_ms=self.gpu_ms,
                       timings=True)
        return None if out.deadlock else out

    def static_ok(self, place: Sequence[int]) -> bool:
        """The ``gpu_now`` set fits the budget and every queued node fits it alone."""
        return self.compiled.static_ok(place)

    def e2e(self, place: Sequence[int]) -> float:
        """Estimated E2E of placement codes in node order (inf: cannot run)."""
        self.evaluations += 1
        if not self.compiled.static_ok(place):
            return _INF
        if self.window is None:
            return simulate_e2e(self.compiled, place, kappa=self.interference, cpu_ms=self.cpu_ms, gpu_ms=self.gpu_ms)
        releases, follows, horizon = self.window
        out = simulate(self.compiled, place, kappa=self.interference, cpu_ms=self.cpu_ms, gpu_ms=self.gpu_ms,
                       releases=releases, follows=follows, horizon_ms=horizon)
        if out.deadlock:
            return _INF
        return percentile([e for e in out.instance_e2e_ms if not math.isnan(e)], 95)


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
