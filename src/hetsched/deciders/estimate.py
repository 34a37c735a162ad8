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

FEASIBLE_KEPT = 4096
"""Static checks an estimator keeps (and its copies with it) before it starts afresh."""

TIMINGS_KEPT = 512
"""Simulations with timings an estimator keeps (each copy its own: they depend on the interference and the
cards) before it starts afresh: a screened descent simulates its current mapping with timings at every step,
and the kicks of a resumed search (the ``rules`` decider's later rounds) often land on mappings whose descent
was simulated already."""

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
        """How many simulations this estimator has made (the search's cost; timings it kept are not simulated again)."""
        self.timed: dict[tuple[int, ...], Timings | None] = {}
        """:meth:`timings`' answers for this interference and these cards (a copy starts with none)."""
        self.feasible: dict[tuple[int, ...], bool] = {}
        """:meth:`static_ok`'s answers (they depend on neither the interference nor the rescaling, so the
        copies share them): a search checks a candidate when it makes it and again when it estimates it."""
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
        other.timed = {}
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
        out = self.timings(place)
        return None if out is None else [e - a for a, e in zip(out.admitted, out.end, strict=True)]

    def e2e_latencies(self, place: Sequence[int]) -> tuple[float, list[float] | None]:
        """:meth:`e2e` and :meth:`latencies` of one mapping, from one simulation when there is no workload
        window (with one, the E2E is the window's p95 and the latencies one request's: two)."""
        out = self.timings(place)
        lat = None if out is None else [e - a for a, e in zip(out.admitted, out.end, strict=True)]
        if self.window is not None:
            return self.e2e(place), lat
        return (_INF if out is None else out.e2e_ms), lat

    def timings(self, place: Sequence[int]) -> Timings | None:
        """The estimate's per-node timings (ready, admitted, start, end), None when the mapping cannot
        run; counted as an estimate when it simulates (the last :data:`TIMINGS_KEPT` are kept: the same
        object comes back for the same mapping, which its readers must not change)."""
        key = tuple(place)
        if key in self.timed:
            return self.timed[key]
        self.evaluations += 1
        out: Timings | None = None
        if self.static_ok(key):
            out = simulate(self.compiled, key, kappa=self.interference, cpu_ms=self.cpu_ms, gpu_ms=self.gpu_ms,
                           timings=True)
            if out.deadlock:
                out = None
        if len(self.timed) >= TIMINGS_KEPT:
            self.timed.clear()
        self.timed[key] = out
        return out

    def e2e_timings(self, place: Sequence[int]) -> tuple[float, Timings | None]:
        """:meth:`e2e` and :meth:`timings` of one mapping, from one simulation when there is no workload
        window (the E2E is then the timings' own, bit for bit: the kernel's one loop; with a window the E2E
        is the window's p95 and the timings one request's: two). A screened descent's first step, from a
        mapping it has not estimated yet, needs both."""
        out = self.timings(place)
        if self.window is not None:
            return self.e2e(place), out
        return (_INF if out is None else out.e2e_ms), out

    def static_ok(self, place: Sequence[int]) -> bool:
        """The ``gpu_now`` set fits the budget and every queued node fits it alone (``Compiled.static_ok``)."""
        key = tuple(place)
        got = self.feasible.get(key)
        if got is None:
            if len(self.feasible) >= FEASIBLE_KEPT:
                self.feasible.clear()
            got = self.feasible[key] = self.compiled.static_ok(key)
        return got

    def e2e(self, place: Sequence[int]) -> float:
        """Estimated E2E of placement codes in node order (inf: cannot run)."""
        self.evaluations += 1
        if not self.static_ok(place):
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


LOCAL_FIT_PROBE = 0.05
"""The second interference :func:`fit_interference_local` tries, this far above its start (below it at
the grid's top): the secant that gives the first slope of each mapping's E2E."""
LOCAL_FIT_STEPS = 4
"""The most Gauss-Newton steps :func:`fit_interference_local` takes after its two first points."""


def fit_interference_local(
    estimator: Estimator,
    measured: Sequence[tuple[tuple[int, ...], float]],
    start: float,
    prior: float = 0.0,
    step: float = 0.005,
    memo: dict[tuple[float, tuple[int, ...]], float] | None = None,
    slopes: dict[tuple[int, ...], float] | None = None,
    latencies: dict[tuple[float, tuple[int, ...]], list[float] | None] | None = None,
    timed: dict[tuple[float, tuple[int, ...]], Timings | None] | None = None,
) -> tuple[float, float]:
    """:func:`fit_interference`'s least squares of log ratios, solved from ``start`` in a handful of
    estimates per mapping instead of a grid's (the fit of large workflows, where each estimate
    simulates the whole workflow). Every interference tried is a multiple of ``step`` in [0, the
    grid's top] (or ``prior``). Each mapping's log ratio is close to linear in the interference, so
    Gauss-Newton steps solve it: the first from ``start`` with the slopes ``slopes`` holds for every
    measured mapping (a previous fit's), else through ``start`` and a probe :data:`LOCAL_FIT_PROBE`
    above it; each next one through the lowest error so far and its nearest neighbour tried; at most
    :data:`LOCAL_FIT_STEPS` steps, until a step lands on an interference already tried (a step that
    does is halved first). Returns the lowest error tried (ties: the interference closest to
    ``prior``) and that error; measurements that cannot tell interferences apart (nothing ran two
    GPU tasks at once: flat) give ``prior``, as the full fit does. When ``start`` cannot run, the
    full fit answers. ``memo`` keeps estimates across calls; ``slopes``, when given, receives each
    mapping's slope at the answer for the next call; ``latencies``, when given, receives the per-node
    latencies of each estimate (:meth:`Estimator.e2e_latencies`: the next calibration pass reads them
    at the answer); ``timed``, when given with ``latencies``, the timings of the same simulations (the search
    that follows the fit starts from the measured mappings at the answer and reads their timings)."""
    if not measured:
        return prior, 0.0
    cache: dict[tuple[float, tuple[int, ...]], float] = {} if memo is None else memo
    top = max(INTERFERENCE_GRID[-1], prior)

    def snap(k: float) -> float:
        return min(top, max(0.0, round(round(k / step) * step, 6)))

    tried: dict[float, tuple[float, list[float]]] = {}

    def probe(k: float) -> float:
        est = estimator.with_interference(k)
        logs: list[float] = []
        for codes, e2e in measured:
            got = cache.get((k, codes))
            if got is None:
                if latencies is None:
                    got = est.e2e(codes)
                else:
                    got, latencies[(k, codes)] = est.e2e_latencies(codes)
                    if timed is not None:
                        timed[(k, codes)] = est.timed.get(tuple(codes))
                cache[(k, codes)] = got
            if not math.isfinite(got) or got <= 0 or e2e <= 0:
                tried[k] = (math.inf, [])
                return math.inf
            logs.append(math.log(got / e2e))
        err = round(math.sqrt(sum(x * x for x in logs) / len(logs)), 9)
        tried[k] = (err, logs)
        return err

    def secant() -> tuple[float, list[float]] | None:
        """The lowest error tried and the slopes through it and its nearest neighbour tried."""
        finite = sorted((e, k) for k, (e, _logs) in tried.items() if math.isfinite(e))
        if len(finite) < 2:
            return None
        a = finite[0][1]
        b = min((abs(k - a), k) for _e, k in finite[1:])[1]
        return a, [(y - x) / (b - a) for x, y in zip(tried[a][1], tried[b][1], strict=True)]

    k0 = snap(start)
    if not math.isfinite(probe(k0)):  # the start cannot run: the full fit, its answer on the lattice
        k, err = fit_interference(estimator, measured, prior=prior, memo=memo)
        if k != prior and math.isfinite(err) and math.isfinite(probe(snap(k))):
            return snap(k), tried[snap(k)][0]
        return k, err
    hinted = slopes is not None and all(codes in slopes for codes, _ in measured)
    if not hinted:
        probe(snap(k0 + LOCAL_FIT_PROBE) if k0 + LOCAL_FIT_PROBE <= top else snap(k0 - LOCAL_FIT_PROBE))
    flat = False
    for _ in range(LOCAL_FIT_STEPS):
        got = secant()
        if got is None:
            if not hinted or len(tried) > 1:
                break
            got = k0, [slopes[codes] for codes, _ in measured]  # type: ignore[index]
        a, slope = got
        ss = sum(x * x for x in slope)
        if ss <= 1e-18:
            flat = True
            break
        k = snap(a - sum(r * x for r, x in zip(tried[a][1], slope, strict=True)) / ss)
        while k in tried and k != a:  # the step lands where it has been: halve it (on the lattice)
            half = snap((a + k) / 2)
            k = a if half == k else half
        if k == a:
            break
        probe(k)
    if flat and prior not in tried:
        probe(prior)
    best = min((e, abs(k - prior), k) for k, (e, _logs) in tried.items())
    if slopes is not None and (got := secant()) is not None:
        slopes.update(zip((codes for codes, _ in measured), got[1], strict=True))
    return best[2], best[0]


__all__ = ["INTERFERENCE_GRID", "Estimator", "fit_interference", "fit_interference_local"]
