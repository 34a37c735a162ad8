"""The Workload contract: a workflow under load. An arrival process (closed loop, open loop, or a
trace of arrival times), how many requests (a count or a duration), a seed, and an optional
latency target; plus how a window's measurements are computed (:func:`load_metrics`) and carried
(:func:`window_trace`: ``Trace.load``, ``Trace.requests``; the record types :class:`RequestTrace`
and :class:`LoadMetrics` live beside ``Trace`` in :mod:`hetsched.model.trace`).

- **closed**: ``clients`` clients, each sending its next request ``think_ms`` after its last one
  returned; all clients send their first request at t = 0. Request r belongs to client
  r mod clients and follows request r - clients.
- **open**: Poisson arrivals at ``rate_per_s`` (the first at t = 0, then exponential gaps drawn
  from ``seed``), whatever the requests in flight.
- **trace**: the arrival times given (``times_ms``, or a file of them), sorted.

The window ends after ``requests`` requests, or with the last request sent before
``duration_s`` (every request sent is run to completion). Every executor that runs a workload
(``run_workload(mapping, workload, seed) -> Trace``) fills ``Trace.requests`` and computes
``Trace.load`` with :func:`load_metrics`, so figures are comparable across executors.

Part of the model package; imports pydantic and the rest of the model (never the scenario at
run time: the scenario holds a workload).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hetsched.model.errors import InputError
from hetsched.model.limits import MAX_MS, MAX_SEED
from hetsched.model.mapping import Mapping, Placement
from hetsched.model.trace import (
    Infeasibility,
    InfeasibleKind,
    LoadMetrics,
    LoadSample,
    RequestTrace,
    Trace,
    VramPoint,
)

if TYPE_CHECKING:
    from hetsched.model.scenario import Scenario

MAX_CLIENTS = 10_000
"""Most clients of a closed loop."""
MAX_LOAD_REQUESTS = 100_000
"""Most requests in one window (a count, or what a duration may send)."""
MAX_RATE_PER_S = 1e6
"""Highest open-loop arrival rate, requests per second."""
MAX_DURATION_S = 86_400.0
"""Longest window, seconds (one day)."""
TIMELINE_BUCKETS = 50
"""Buckets of the utilization-over-time series in :class:`LoadMetrics`."""


class Arrivals(StrEnum):
    """How requests arrive."""

    CLOSED = "closed"
    """K clients, each sending its next request when its last one returns (plus think time)."""
    OPEN = "open"
    """Poisson arrivals at a rate, whatever is in flight."""
    TRACE = "trace"
    """Arrival times given (a list, or a file of them)."""


class Workload(BaseModel):
    """A workflow under load: an arrival process, how many requests, a seed and an optional SLO.

    Build it with :meth:`closed`, :meth:`open` or :meth:`trace` (or the fields, as the scenario
    format's ``workload:`` section does); bad values raise naming the field, the value and the
    accepted range.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    arrivals: Arrivals
    """``closed``, ``open`` or ``trace``."""
    clients: int | None = Field(default=None, ge=1, le=MAX_CLIENTS)
    """closed: K, the clients sending requests."""
    think_ms: float = Field(default=0.0, ge=0, le=MAX_MS, allow_inf_nan=False)
    """closed: time a client waits after a response before its next request, ms."""
    rate_per_s: float | None = Field(default=None, gt=0, le=MAX_RATE_PER_S, allow_inf_nan=False)
    """open: mean arrival rate, requests per second (Poisson)."""
    times_ms: tuple[float, ...] = ()
    """trace: arrival times, ms from the start of the window (sorted when read)."""
    file: str = ""
    """trace: the file the arrival times were read from ('' when given inline); for messages."""
    requests: int | None = Field(default=None, ge=1, le=MAX_LOAD_REQUESTS)
    """Requests in the window (closed/open: this or ``duration_s``; trace: the first N, default all)."""
    duration_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S, allow_inf_nan=False)
    """Length of the window: requests sent before it ends are run to completion, s."""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    """Seed of the arrival process (open loop's gaps); noise comes from the run's seed."""
    slo_ms: float | None = Field(default=None, gt=0, le=MAX_MS, allow_inf_nan=False)
    """Latency target for SLO attainment (share of requests at or under it), ms; None: not reported."""

    @model_validator(mode="after")
    def _consistent(self) -> Workload:
        kind = self.arrivals
        given = {k for k in ("clients", "rate_per_s", "times_ms", "file") if getattr(self, k)}
        if self.think_ms:
            given.add("think_ms")
        own = {Arrivals.CLOSED: {"clients", "think_ms"}, Arrivals.OPEN: {"rate_per_s"},
               Arrivals.TRACE: {"times_ms", "file"}}[kind]
        stray = sorted(given - own)
        if stray:
            raise ValueError(f"{', '.join(stray)} do not apply to {kind.value} arrivals; "
                             f"{kind.value} takes {', '.join(sorted(own))}")
        if kind is Arrivals.CLOSED and self.clients is None:
            raise ValueError("closed arrivals need clients (1 to 10,000)")
        if kind is Arrivals.OPEN and self.rate_per_s is None:
            raise ValueError(f"open arrivals need rate_per_s (> 0, at most {MAX_RATE_PER_S:g})")
        if kind is Arrivals.TRACE:
            if not self.times_ms:
                raise ValueError("trace arrivals need times_ms (a list of arrival times, ms) or a file of them")
            if len(self.times_ms) > MAX_LOAD_REQUESTS:
                raise ValueError(f"times_ms holds {len(self.times_ms):,} arrivals; at most {MAX_LOAD_REQUESTS:,}")
            for i, t in enumerate(self.times_ms):
                if not (isinstance(t, int | float) and math.isfinite(t) and 0 <= t <= MAX_DURATION_S * 1000):
                    raise ValueError(f"times_ms[{i}] = {t!r}; arrival times are ms from the start, "
                                     f"0 to {MAX_DURATION_S * 1000:g}")
            if list(self.times_ms) != sorted(self.times_ms):
                object.__setattr__(self, "times_ms", tuple(sorted(self.times_ms)))
        elif self.requests is None and self.duration_s is None:
            raise ValueError("give requests (a count) or duration_s (seconds) for the window")
        if self.requests is not None and self.duration_s is not None:
            raise ValueError(f"give requests ({self.requests}) or duration_s ({self.duration_s:g}), not both")
        return self

    # ------------------------------------------------------------------ builders
    @classmethod
    def closed(cls, clients: int, *, requests: int | None = None, duration_s: float | None = None,
               think_ms: float = 0.0, seed: int = 0, slo_ms: float | None = None) -> Workload:
        """Closed loop: ``clients`` clients, each sending its next request ``think_ms`` after its last returned."""
        return cls(arrivals=Arrivals.CLOSED, clients=clients, think_ms=think_ms, requests=requests,
                   duration_s=duration_s, seed=seed, slo_ms=slo_ms)

    @classmethod
    def open(cls, rate_per_s: float, *, requests: int | None = None, duration_s: float | None = None,
             seed: int = 0, slo_ms: float | None = None) -> Workload:
        """Open loop: Poisson arrivals at ``rate_per_s``."""
        return cls(arrivals=Arrivals.OPEN, rate_per_s=rate_per_s, requests=requests, duration_s=duration_s,
                   seed=seed, slo_ms=slo_ms)

    @classmethod
    def trace(cls, times_ms: Iterable[float], *, requests: int | None = None, duration_s: float | None = None,
              slo_ms: float | None = None, file: str = "") -> Workload:
        """Arrivals at the given times, ms from the start (from a file: ``hs.read_arrivals(path)``,
        one number a line or a YAML/JSON list; ``file`` only names it in messages)."""
        return cls(arrivals=Arrivals.TRACE, times_ms=tuple(times_ms), requests=requests, duration_s=duration_s,
                   slo_ms=slo_ms, file=file)

    def with_slo(self, slo_ms: float | None) -> Workload:
        """The same workload with another latency target."""
        return Workload.model_validate({**self.model_dump(), "slo_ms": slo_ms})

    # ------------------------------------------------------------------ what it means
    def describe(self) -> str:
        """One line: ``closed loop, 4 clients, 100 requests``."""
        if self.arrivals is Arrivals.CLOSED:
            plural = "" if self.clients == 1 else "s"
            what = f"closed loop, {self.clients} client{plural}"
            if self.think_ms:
                what += f", think {self.think_ms:g} ms"
        elif self.arrivals is Arrivals.OPEN:
            what = f"open loop, Poisson {self.rate_per_s:g}/s"
        else:
            what = f"trace of {len(self.times_ms)} arrivals" + (f" ({self.file})" if self.file else "")
        if self.requests is not None:
            what += f", {self.requests} requests"
        if self.duration_s is not None:
            what += f", {self.duration_s:g} s"
        if self.slo_ms is not None:
            what += f", SLO {self.slo_ms:g} ms"
        return what

    def plan_size_hint(self) -> range:
        """At most how many requests the window sends, without drawing it (a range of that length)."""
        if self.requests is not None:
            n = self.requests if self.arrivals is not Arrivals.TRACE else min(self.requests, len(self.times_ms))
            return range(n)
        if self.arrivals is Arrivals.TRACE:
            return range(len(self.times_ms))
        return range(2)  # a duration: more than one, as far as the rules are concerned

    def plan(self, min_latency_ms: float = 0.0) -> ArrivalPlan:
        """When each request is sent (what the kernel's ``simulate`` and the real executors take).

        ``min_latency_ms`` (a lower bound on one request's latency, e.g. the scenario's isolated
        critical path) bounds how many requests a closed loop can send in ``duration_s``.
        """
        horizon = math.inf if self.duration_s is None else self.duration_s * 1000.0
        if self.arrivals is Arrivals.CLOSED:
            k = int(self.clients or 1)
            if self.requests is not None:
                n = self.requests
            else:
                per_client = horizon / max(min_latency_ms + self.think_ms, 1e-9)
                n = k * (int(per_client) + 1)
                if n > MAX_LOAD_REQUESTS:
                    raise InputError(
                        f"workload: {k} clients over {self.duration_s:g} s may send {n:,} requests (a request takes "
                        f"at least {min_latency_ms:g} ms, think {self.think_ms:g} ms); at most {MAX_LOAD_REQUESTS:,}: "
                        "give a shorter duration_s or a request count")
            releases = tuple(0.0 if r < k else self.think_ms for r in range(n))
            follows = tuple(r - k if r >= k else -1 for r in range(n))
            return ArrivalPlan(releases, follows, horizon, tuple(r % k for r in range(n)))
        if self.arrivals is Arrivals.OPEN:
            rng = random.Random(self.seed)
            mean_gap = 1000.0 / float(self.rate_per_s or 1.0)
            times: list[float] = []
            t = 0.0  # the first request at t = 0, then exponential gaps
            limit = self.requests if self.requests is not None else MAX_LOAD_REQUESTS + 1
            while len(times) < limit and t < horizon:
                times.append(t)
                t += rng.expovariate(1.0 / mean_gap)
            if len(times) > MAX_LOAD_REQUESTS:
                raise InputError(f"workload: {self.rate_per_s:g}/s over {self.duration_s:g} s sends more than "
                                 f"{MAX_LOAD_REQUESTS:,} requests; give a shorter duration_s or a request count")
            return ArrivalPlan(tuple(times), None, math.inf, tuple(-1 for _ in times))
        chosen = [t for t in self.times_ms if t < horizon]
        if self.requests is not None:
            chosen = chosen[: self.requests]
        return ArrivalPlan(tuple(float(t) for t in chosen), None, math.inf, tuple(-1 for _ in chosen))


@dataclass(frozen=True, slots=True)
class ArrivalPlan:
    """When each request of a window is sent: ``releases_ms[r]`` from the start, or, where
    ``follows`` is given and ``follows[r] >= 0``, ``releases_ms[r]`` after request ``follows[r]``
    returns (a closed loop's think time). A request whose send time falls at or after
    ``horizon_ms`` is not sent (a closed loop run for a duration)."""

    releases_ms: tuple[float, ...]
    follows: tuple[int, ...] | None
    horizon_ms: float
    clients: tuple[int, ...]
    """Client of each request (-1: open loop or trace)."""

    def __len__(self) -> int:
        return len(self.releases_ms)


# ---------------------------------------------------------------------------- what a window measured
def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (the smallest value with at least p% of the values at or under
    it): always one of the values, so the p95 of a window is one request's latency."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def load_metrics(
    requests: Sequence[RequestTrace],
    scenario: Scenario,
    vram_timeline: Sequence[VramPoint] = (),
    slo_ms: float | None = None,
    buckets: int = TIMELINE_BUCKETS,
) -> LoadMetrics:
    """The metrics of a window from its requests' node traces (absolute times) and the VRAM held
    (a step function from the window's start); the scenario's cards give each task's threads and
    ``gpu_util``, its machine the cores. Executors call this, so every executor's figures agree."""
    if not requests:
        raise ValueError("a window needs at least one request")
    lat = [r.latency_ms for r in requests]
    t0 = min(r.release_ms for r in requests)
    t1 = max(r.end_ms for r in requests)
    window = max(t1 - t0, 0.0)
    waits = [r.queue_wait_ms for r in requests]
    cores = scenario.machine.cpu_cores
    # piecewise-constant signals: (time, d in flight, d cpu threads, d gpu util)
    changes: list[tuple[float, int, float, float]] = []
    for r in requests:
        changes.append((r.release_ms, 1, 0.0, 0.0))
        changes.append((r.end_ms, -1, 0.0, 0.0))
        for n in r.nodes.values():
            card = scenario.cards.get(n.tool)
            if card is None or n.end_ms <= n.start_ms:
                continue
            if n.placement.on_gpu:
                changes.append((n.start_ms, 0, 0.0, card.gpu_util))
                changes.append((n.end_ms, 0, 0.0, -card.gpu_util))
            else:
                changes.append((n.start_ms, 0, float(card.cpu_threads), 0.0))
                changes.append((n.end_ms, 0, -float(card.cpu_threads), 0.0))
    for p in vram_timeline:  # VRAM held: a level, not a delta (kind 2 sorts after the deltas at one instant)
        changes.append((p.t_ms, 2, p.used_mb, 0.0))
    changes.sort(key=lambda c: (c[0], c[1]))  # ends (-1) before sends (+1) at one instant
    width = window / buckets if window > 0 and buckets > 0 else 0.0
    sums = [[0.0, 0.0, 0.0, 0.0] for _ in range(buckets if width > 0 else 0)]
    totals = [0.0, 0.0, 0.0, 0.0]
    in_flight = max_flight = 0
    threads = util = vram_now = 0.0
    ci = 0
    t = t0
    while True:
        while ci < len(changes) and changes[ci][0] <= t:
            _, kind, a_val, b_val = changes[ci]
            if kind == 2:
                vram_now = a_val
            else:
                in_flight += kind
                threads += a_val
                util += b_val
            ci += 1
        max_flight = max(max_flight, in_flight)
        if t >= t1:
            break
        nxt = min(changes[ci][0], t1) if ci < len(changes) else t1
        values = (float(in_flight), min(1.0, max(0.0, threads) / cores), min(1.0, max(0.0, util)), vram_now)
        seg = nxt - t
        for k in range(4):
            totals[k] += values[k] * seg
        a = t
        while sums and a < nxt:  # spread the segment over the buckets it covers
            idx = min(int((a - t0) / width), len(sums) - 1)
            b_end = t0 + (idx + 1) * width if idx < len(sums) - 1 else t1
            piece = min(nxt, b_end) - a
            if piece <= 0:
                break
            row = sums[idx]
            for k in range(4):
                row[k] += values[k] * piece
            a += piece
        t = nxt
    timeline = tuple(LoadSample(t0 + i * width, *(s / width for s in row)) for i, row in enumerate(sums))
    peak = max((p.used_mb for p in vram_timeline), default=0.0)

    def mean(k: int) -> float:
        return totals[k] / window if window > 0 else 0.0

    return LoadMetrics(
        requests=len(requests),
        window_ms=window,
        throughput_per_s=len(requests) / (window / 1000.0) if window > 0 else math.inf,
        latency_ms=tuple(lat),
        mean_ms=sum(lat) / len(lat),
        p50_ms=percentile(lat, 50),
        p95_ms=percentile(lat, 95),
        p99_ms=percentile(lat, 99),
        max_ms=max(lat),
        slo_ms=slo_ms,
        slo_attainment=None if slo_ms is None else sum(1 for x in lat if x <= slo_ms) / len(lat),
        queue_wait_mean_ms=sum(waits) / len(waits),
        queue_wait_p95_ms=percentile(waits, 95),
        in_flight_mean=mean(0),
        in_flight_max=max_flight,
        peak_vram_mb=peak,
        mean_vram_mb=mean(3),
        cpu_util_mean=mean(1),
        gpu_util_mean=mean(2),
        timeline=timeline,
    )


def load_infeasibility(scenario: Scenario, mapping: Mapping, workload: Workload) -> Infeasibility | None:
    """Why a mapping that can serve one request cannot serve a window of them, or None.

    Under load, ``gpu_now`` tools serve every request and stay resident for the whole window, so
    each ``gpu_queue`` node must fit beside all of them (for one request a queued node may wait for
    the resident tools to be freed after their last node; across a window that wait lasts until the
    last request, or forever in a closed loop). A window of one request keeps the one-request rule."""
    if len(workload.plan_size_hint()) <= 1:
        return None
    budget = scenario.machine.vram_budget_mb
    tools = scenario.gpu_now_tools(mapping)
    held = sum(scenario.cards[t].vram_mb for t in tools)
    for n in scenario.workflow.node_ids:
        if mapping[n] is Placement.GPU_QUEUE:
            card = scenario.card_of(n)
            if card.vram_mb + held > budget:
                return Infeasibility(
                    InfeasibleKind.NEVER_ADMISSIBLE,
                    f"under load: node {n!r} ({card.name}) needs {card.vram_mb:g} MB beside gpu_now tools "
                    f"{list(tools)} holding {held:g} MB of {budget:g} MB for the whole window (they serve every "
                    "request)")
    return None


def window_trace(
    mapping: Mapping,
    requests: Sequence[RequestTrace],
    scenario: Scenario,
    workload: Workload,
    *,
    vram_timeline: Sequence[VramPoint] = (),
    vram_budget_mb: float = 0.0,
    seed: int | None = None,
    executor: str = "sim",
    notes: tuple[str, ...] = (),
) -> Trace:
    """The one ``Trace`` of a window of requests, built the same way by every executor: ``load``
    (:func:`load_metrics`), ``requests``, the window's VRAM timeline, and, so that everything that
    reads one request's trace (policies, the monitor, reports) reads the window's p95, ``e2e_ms`` =
    the p95 latency and ``nodes`` = that request's nodes with times from its send."""
    metrics = load_metrics(requests, scenario, vram_timeline, workload.slo_ms)
    p95 = next(r for r in requests if r.latency_ms == metrics.p95_ms)
    return Trace(mapping=mapping, feasible=True, e2e_ms=metrics.p95_ms, nodes=p95.shifted(),
                 vram_timeline=tuple(vram_timeline), vram_budget_mb=vram_budget_mb, seed=seed, executor=executor,
                 notes=notes, load=metrics, requests=tuple(requests))


__all__ = [
    "MAX_CLIENTS",
    "MAX_LOAD_REQUESTS",
    "ArrivalPlan",
    "Arrivals",
    "LoadMetrics",
    "LoadSample",
    "RequestTrace",
    "Workload",
    "load_infeasibility",
    "load_metrics",
    "percentile",
    "window_trace",
]
