"""The Workload contract: a workflow under load. An arrival process (closed loop, open loop, or a
trace of arrival times), how many requests (a count or a duration), a seed, and an optional
latency target; plus what a run under load measured (:class:`RequestTrace` per request,
:class:`LoadMetrics` over the window) and how one executor's trace carries it (``Trace.load``,
``Trace.requests``).

- **closed**: ``clients`` clients, each sending its next request ``think_ms`` after its last one
  returned; all clients send their first request at t = 0. Request r belongs to client
  r mod clients and follows request r - clients.
- **open**: Poisson arrivals at ``rate_per_s`` (exponential gaps drawn from ``seed``), whatever
  the requests in flight.
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
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hetsched.model.limits import MAX_MS, MAX_SEED
from hetsched.model.trace import NodeTrace, VramPoint

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
    def trace(cls, times_ms: Iterable[float] | None = None, *, file: str | Path | None = None,
              requests: int | None = None, duration_s: float | None = None, slo_ms: float | None = None) -> Workload:
        """Arrivals at the given times (ms), or at those read from ``file`` (one number a line, ``#``
        comments; or a YAML/JSON list)."""
        if (times_ms is None) == (file is None):
            raise ValueError("give times_ms or file, one of the two")
        if file is not None:
            from hetsched.model.files import read_arrivals

            return cls(arrivals=Arrivals.TRACE, times_ms=read_arrivals(Path(file)), file=str(file),
                       requests=requests, duration_s=duration_s, slo_ms=slo_ms)
        return cls(arrivals=Arrivals.TRACE, times_ms=tuple(times_ms or ()), requests=requests,
                   duration_s=duration_s, slo_ms=slo_ms)

    def with_slo(self, slo_ms: float | None) -> Workload:
        """The same workload with another latency target."""
        return Workload.model_validate({**self.model_dump(), "slo_ms": slo_ms})

    # ------------------------------------------------------------------ what it means
    def describe(self) -> str:
        """One line: ``closed loop, 4 clients, 100 requests``."""
        if self.arrivals is Arrivals.CLOSED:
            what = f"closed loop, {self.clients} clients" + (f", think {self.think_ms:g} ms" if self.think_ms else "")
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
                    raise ValueError(
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
            t = 0.0
            limit = self.requests if self.requests is not None else MAX_LOAD_REQUESTS + 1
            while len(times) < limit:
                t += rng.expovariate(1.0 / mean_gap)
                if t >= horizon:
                    break
                times.append(t)
            if len(times) > MAX_LOAD_REQUESTS:
                raise ValueError(f"workload: {self.rate_per_s:g}/s over {self.duration_s:g} s sends more than "
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
@dataclass(frozen=True, slots=True)
class RequestTrace:
    """One request of a window: when it was sent and what each of its nodes did (times in ms
    from the start of the window, as every node of every request shares one clock)."""

    request: int
    """Index in send order (0 = first sent)."""
    release_ms: float
    """When it was sent."""
    nodes: dict[str, NodeTrace]
    """Per node of the workflow."""
    client: int = -1
    """Its client (closed loop), -1 otherwise."""

    @property
    def end_ms(self) -> float:
        """When its last node ended."""
        return max((n.end_ms for n in self.nodes.values()), default=self.release_ms)

    @property
    def latency_ms(self) -> float:
        """Response time: last node's end minus the send time."""
        return self.end_ms - self.release_ms

    @property
    def queue_wait_ms(self) -> float:
        """Time its nodes waited for the device (VRAM admission of ``gpu_queue`` nodes), summed."""
        return sum(n.wait_ms for n in self.nodes.values())

    def shifted(self) -> dict[str, NodeTrace]:
        """Its nodes with times from its own send time (what a one-request ``Trace`` holds)."""
        d = self.release_ms
        return {k: NodeTrace(node=v.node, tool=v.tool, placement=v.placement, ready_ms=v.ready_ms - d,
                             admitted_ms=v.admitted_ms - d, start_ms=v.start_ms - d, end_ms=v.end_ms - d,
                             load_ms=v.load_ms, host=v.host) for k, v in self.nodes.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (node times as ``[ready, admitted, start, end, load]``)."""
        return {"request": self.request, "client": self.client, "release_ms": self.release_ms,
                "nodes": {k: [v.tool, v.placement.value, v.ready_ms, v.admitted_ms, v.start_ms, v.end_ms, v.load_ms,
                              v.host] for k, v in self.nodes.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestTrace:
        """Inverse of :meth:`to_dict`."""
        from hetsched.model.mapping import Placement

        nodes = {k: NodeTrace(node=k, tool=v[0], placement=Placement(v[1]), ready_ms=v[2], admitted_ms=v[3],
                              start_ms=v[4], end_ms=v[5], load_ms=v[6], host=str(v[7]) if len(v) > 7 else "")
                 for k, v in data["nodes"].items()}
        return cls(int(data["request"]), float(data["release_ms"]), nodes, int(data.get("client", -1)))


@dataclass(frozen=True, slots=True)
class LoadSample:
    """One bucket of the utilization-over-time series (averages over the bucket)."""

    t_ms: float
    """Start of the bucket, ms (the requests' clock)."""
    in_flight: float
    """Requests sent and not yet returned."""
    cpu_util: float
    """Share of the CPU cores busy (threads of running CPU tasks / cores, at most 1)."""
    gpu_util: float
    """Share of the GPU's compute asked for (sum of running GPU tasks' ``gpu_util``, at most 1)."""
    vram_mb: float
    """VRAM held."""


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (the smallest value with at least p% of the values at or under
    it): always one of the values, so the p95 of a window is one request's latency."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True)
class LoadMetrics:
    """What a window of requests measured: throughput, latency percentiles, SLO attainment,
    queueing, and VRAM and device utilization over time. Built by :func:`load_metrics`."""

    requests: int
    """Requests sent (all run to completion)."""
    window_ms: float
    """From the first send to the last response."""
    throughput_per_s: float
    """Requests completed per second of the window."""
    latency_ms: tuple[float, ...]
    """Per request, in send order."""
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    slo_ms: float | None
    """The latency target (None: none given)."""
    slo_attainment: float | None
    """Share of requests with latency at or under ``slo_ms`` (None without a target)."""
    queue_wait_mean_ms: float
    """Per request, time its nodes waited for VRAM admission (summed), mean over requests."""
    queue_wait_p95_ms: float
    in_flight_mean: float
    """Time-average of requests in flight over the window (Little's L = throughput x mean latency)."""
    in_flight_max: int
    peak_vram_mb: float
    mean_vram_mb: float
    """Time-average VRAM held over the window."""
    cpu_util_mean: float
    """Time-average share of the CPU cores busy."""
    gpu_util_mean: float
    """Time-average share of the GPU's compute asked for."""
    timeline: tuple[LoadSample, ...] = field(default=())
    """Utilization over time, :data:`TIMELINE_BUCKETS` buckets over the window."""

    def describe(self) -> str:
        """``200 requests, 41.3/s, p50 120.0 / p95 310.2 / p99 402.9 ms, SLO 300 ms: 93.5%``."""
        text = (f"{self.requests} requests, {self.throughput_per_s:.3g}/s, p50 {self.p50_ms:.1f} / "
                f"p95 {self.p95_ms:.1f} / p99 {self.p99_ms:.1f} ms")
        if self.slo_ms is not None and self.slo_attainment is not None:
            text += f", SLO {self.slo_ms:g} ms: {100 * self.slo_attainment:.1f}%"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``timeline`` as ``[t_ms, in_flight, cpu_util, gpu_util, vram_mb]`` rows)."""
        return {"requests": self.requests, "window_ms": self.window_ms, "throughput_per_s": self.throughput_per_s,
                "mean_ms": self.mean_ms, "p50_ms": self.p50_ms, "p95_ms": self.p95_ms, "p99_ms": self.p99_ms,
                "max_ms": self.max_ms, "slo_ms": self.slo_ms, "slo_attainment": self.slo_attainment,
                "queue_wait_mean_ms": self.queue_wait_mean_ms, "queue_wait_p95_ms": self.queue_wait_p95_ms,
                "in_flight_mean": self.in_flight_mean, "in_flight_max": self.in_flight_max,
                "peak_vram_mb": self.peak_vram_mb, "mean_vram_mb": self.mean_vram_mb,
                "cpu_util_mean": self.cpu_util_mean, "gpu_util_mean": self.gpu_util_mean,
                "latency_ms": list(self.latency_ms),
                "timeline": [[s.t_ms, s.in_flight, s.cpu_util, s.gpu_util, s.vram_mb] for s in self.timeline]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoadMetrics:
        """Inverse of :meth:`to_dict`."""
        plain = {k: v for k, v in data.items() if k not in ("latency_ms", "timeline")}
        return cls(**plain, latency_ms=tuple(data.get("latency_ms", ())),
                   timeline=tuple(LoadSample(*row) for row in data.get("timeline", ())))


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
    mean = (lambda k: totals[k] / window if window > 0 else 0.0)
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


__all__ = [
    "MAX_CLIENTS",
    "MAX_LOAD_REQUESTS",
    "ArrivalPlan",
    "Arrivals",
    "LoadMetrics",
    "LoadSample",
    "RequestTrace",
    "Workload",
    "load_metrics",
    "percentile",
]
