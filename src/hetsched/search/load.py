"""Searches under load: the model's noise-free answer to "where should each tool run at this load".

A window of requests (:class:`~hetsched.model.workload.Workload`) is simulated on the one
contention kernel (:func:`hetsched.model.contention.simulate` with several instances), noise-free,
and judged by a :class:`LoadObjective`:

- ``p95``: the lowest p95 latency at the given workload (what a round under load measures);
- ``throughput``: the highest sustained request rate whose p95 latency meets a target: for each
  mapping, the largest open-loop (Poisson) rate at which the simulated p95 stays at or under the
  target, found by doubling then bisection on the rate.

:func:`load_optimum` enumerates every mapping that can serve the window when the space is small
(``3^n`` up to :data:`EXHAUSTIVE_MAX`) and otherwise runs a deterministic local search (one-node
moves from the single-request optimum, the all-CPU and all-GPU mappings), labelled best-known.
Imports the model and the search room's single-request reference.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from hetsched.model import InputError, Mapping, Placement, Scenario
from hetsched.model.contention import simulate
from hetsched.model.mapping import NOW_CODE, QUEUE_CODE
from hetsched.model.workload import Workload, load_infeasibility, percentile

EXHAUSTIVE_MAX = 6561
"""Most mappings (3^8) :func:`load_optimum` enumerates; beyond, it searches locally."""
DEFAULT_MAX_EVALS = 4000
"""Window simulations a local search under load may spend (machine-independent budget)."""
RATE_STEPS = 14
"""Bisection steps of :func:`max_rate_per_s` (the rate is found to within 2^-14 of its bracket)."""
RATE_REQUESTS = 60
"""Requests in each open-loop window :func:`max_rate_per_s` simulates."""


class LoadObjective(StrEnum):
    """What a placement under load minimizes (``--objective``)."""

    P95 = "p95"
    """The lowest p95 latency at the given workload."""
    THROUGHPUT = "throughput"
    """The highest request rate whose p95 latency meets a target (``p95_target_ms``)."""


def parse_objective(text: str) -> LoadObjective:
    """A :class:`LoadObjective` from its name; a clear error otherwise."""
    try:
        return LoadObjective(text.strip().lower())
    except ValueError:
        accepted = ", ".join(o.value for o in LoadObjective)
        raise InputError(f"objective {text!r}: unknown; accepted: {accepted}") from None


@dataclass(frozen=True, slots=True)
class WindowPrediction:
    """The noise-free model's figures for one mapping under one workload."""

    mapping: Mapping
    p50_ms: float
    p95_ms: float
    p99_ms: float
    throughput_per_s: float
    requests: int
    feasible: bool = True
    reason: str = ""
    """Why the mapping cannot serve the window (when not ``feasible``)."""


@dataclass(frozen=True, slots=True)
class LoadReference:
    """The best mapping under load the model knows, and how it was found."""

    objective: LoadObjective
    mapping: Mapping
    value: float
    """p95 ms (``p95``) or the sustained rate per second (``throughput``)."""
    prediction: WindowPrediction
    """The mapping's figures at the workload searched."""
    exact: bool
    """True when every mapping was evaluated (else a best-known local optimum)."""
    evaluations: int
    seconds: float


def _codes(scenario: Scenario, mapping: Mapping) -> tuple[int, ...]:
    return tuple(mapping[n].code for n in scenario.workflow.node_ids)


def _mapping(scenario: Scenario, codes: Sequence[int]) -> Mapping:
    return Mapping(zip(scenario.workflow.node_ids, (Placement.of_code(c) for c in codes), strict=True))


class WindowEvaluator:
    """Noise-free window figures of code tuples under one workload, memoized, counting simulations."""

    def __init__(self, scenario: Scenario, workload: Workload) -> None:
        self.scenario = scenario
        self.workload = workload
        self.compiled = scenario.compiled
        self.plan = workload.plan(scenario.isolated_critical_path_ms())
        self.evaluations = 0
        self._cache: dict[tuple[int, ...], WindowPrediction] = {}

    def infeasible(self, codes: tuple[int, ...]) -> str:
        """Why ``codes`` cannot serve the window ('' when it can, as far as the static checks go)."""
        c = self.compiled
        if any(p != 0 and math.isinf(c.gpu_ms[i]) for i, p in enumerate(codes)):
            return "a tool without a GPU implementation on the GPU"
        if not c.static_ok(codes):
            return "over the VRAM budget"
        why = load_infeasibility(self.scenario, _mapping(self.scenario, codes), self.workload)
        return "" if why is None else why.detail

    def __call__(self, codes: tuple[int, ...]) -> WindowPrediction:
        hit = self._cache.get(codes)
        if hit is not None:
            return hit
        mapping = _mapping(self.scenario, codes)
        why = self.infeasible(codes)
        if why:
            pred = WindowPrediction(mapping, math.inf, math.inf, math.inf, 0.0, len(self.plan), False, why)
        else:
            plan = self.plan
            out = simulate(self.compiled, codes, releases=plan.releases_ms, follows=plan.follows,
                           horizon_ms=plan.horizon_ms, timings=True)
            self.evaluations += 1
            if out.deadlock:
                pred = WindowPrediction(mapping, math.inf, math.inf, math.inf, 0.0, len(plan), False,
                                        "the FIFO queue deadlocks")
            else:
                rel = out.released or list(plan.releases_ms)
                lat = [e for e in out.instance_e2e_ms if not math.isnan(e)]
                sent = [(r, e) for r, e in zip(rel, out.instance_e2e_ms, strict=True) if not math.isnan(e)]
                t0 = min(r for r, _ in sent)
                t1 = max(r + e for r, e in sent)
                window_s = (t1 - t0) / 1000.0
                pred = WindowPrediction(mapping, percentile(lat, 50), percentile(lat, 95), percentile(lat, 99),
                                        len(lat) / window_s if window_s > 0 else math.inf, len(lat))
        self._cache[codes] = pred
        return pred


def predict_window(scenario: Scenario, mapping: Mapping, workload: Workload) -> WindowPrediction:
    """The noise-free model's p50/p95/p99 and throughput of ``mapping`` under ``workload``."""
    return WindowEvaluator(scenario, workload)(_codes(scenario, scenario.validate_mapping(mapping)))


def max_rate_per_s(scenario: Scenario, mapping: Mapping, p95_target_ms: float, *, seed: int = 0,
                   requests: int = RATE_REQUESTS) -> float:
    """The highest open-loop (Poisson) rate at which ``mapping``'s simulated p95 meets the target
    (0 when even a lone request misses it or the mapping cannot run)."""
    codes = _codes(scenario, scenario.validate_mapping(mapping))

    def ok(rate: float) -> bool:
        p = WindowEvaluator(scenario, Workload.open(rate, requests=requests, seed=seed))(codes)
        return p.feasible and p.p95_ms <= p95_target_ms

    lone = WindowEvaluator(scenario, Workload.closed(1, requests=1))(codes)
    if not lone.feasible or lone.p95_ms > p95_target_ms:
        return 0.0
    lo, hi = 0.0, max(1000.0 / max(lone.p95_ms, 1e-9), 1e-3)
    while ok(hi) and hi < 1e6:
        lo, hi = hi, hi * 2
    for _ in range(RATE_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _all_codes(scenario: Scenario) -> Iterable[tuple[int, ...]]:
    c = scenario.compiled
    gpu = (NOW_CODE,) if scenario.mode.value == "binary" else (NOW_CODE, QUEUE_CODE)
    choices: list[tuple[int, ...]] = [(0,) if math.isinf(c.gpu_ms[i]) else (0, *gpu) for i in range(c.n)]
    return itertools.product(*choices)


def _space(scenario: Scenario) -> int:
    return math.prod(1 if math.isinf(g) else (2 if scenario.mode.value == "binary" else 3)
                     for g in scenario.compiled.gpu_ms)


def load_optimum(
    scenario: Scenario,
    workload: Workload,
    objective: LoadObjective | str = LoadObjective.P95,
    *,
    p95_target_ms: float | None = None,
    starts: Sequence[Mapping] = (),
    max_evals: int = DEFAULT_MAX_EVALS,
    seed: int = 0,
) -> LoadReference | None:
    """The best mapping under ``workload`` for ``objective`` (None when no mapping can serve it).

    ``throughput`` needs ``p95_target_ms`` (default: the workload's ``slo_ms``) and ranks mappings
    by :func:`max_rate_per_s`; ties (and ``p95``) break on the p95 at ``workload``, then on the
    mapping's codes, so the answer is the same on every machine.
    """
    objective = LoadObjective(objective)
    target = p95_target_ms if p95_target_ms is not None else workload.slo_ms
    if objective is LoadObjective.THROUGHPUT and target is None:
        raise InputError("objective throughput needs a p95 target (p95_target_ms, or the workload's slo_ms)")
    t0 = time.perf_counter()
    ev = WindowEvaluator(scenario, workload)
    rates: dict[tuple[int, ...], float] = {}

    def key(codes: tuple[int, ...]) -> tuple[float, float, tuple[int, ...]]:
        pred = ev(codes)
        if not pred.feasible:
            return (math.inf, math.inf, codes)
        if objective is LoadObjective.P95:
            return (pred.p95_ms, 0.0, codes)
        if codes not in rates:
            rates[codes] = max_rate_per_s(scenario, pred.mapping, float(target or 0.0), seed=workload.seed)
        return (-rates[codes], pred.p95_ms, codes)

    exact = _space(scenario) <= EXHAUSTIVE_MAX
    best = min(_all_codes(scenario), key=key) if exact else _local(scenario, key, starts, max_evals, ev)
    pred = ev(best)
    if not pred.feasible:
        return None
    value = pred.p95_ms if objective is LoadObjective.P95 else rates[best]
    return LoadReference(objective, pred.mapping, value, pred, exact, ev.evaluations, time.perf_counter() - t0)


def _local(scenario: Scenario, key, starts: Sequence[Mapping], max_evals: int,  # type: ignore[no-untyped-def]
           ev: WindowEvaluator) -> tuple[int, ...]:
    """First-improvement descent over one-node moves from each start, within ``max_evals`` simulations."""
    c = scenario.compiled
    options = [(0,) if math.isinf(c.gpu_ms[i]) else
               ((0, NOW_CODE) if scenario.mode.value == "binary" else (0, NOW_CODE, QUEUE_CODE)) for i in range(c.n)]
    seeds = [_codes(scenario, scenario.validate_mapping(m)) for m in starts]
    seeds += [tuple(0 for _ in range(c.n)), tuple(o[1] if len(o) > 1 else 0 for o in options)]
    best = seeds[0]
    for cur in seeds:
        cur_k = key(cur)
        improved = True
        while improved and ev.evaluations < max_evals:
            improved = False
            for i in range(c.n):
                for p in options[i]:
                    if p == cur[i]:
                        continue
                    cand = (*cur[:i], p, *cur[i + 1:])
                    k = key(cand)
                    if k < cur_k:
                        cur, cur_k, improved = cand, k, True
                        break
                if improved or ev.evaluations >= max_evals:
                    break
        if cur_k < key(best):
            best = cur
    return best


__all__ = [
    "DEFAULT_MAX_EVALS",
    "EXHAUSTIVE_MAX",
    "LoadObjective",
    "LoadReference",
    "WindowEvaluator",
    "WindowPrediction",
    "load_optimum",
    "max_rate_per_s",
    "parse_objective",
    "predict_window",
]
