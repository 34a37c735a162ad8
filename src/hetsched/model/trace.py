"""The Trace contract: what one execution of a workflow under a mapping did.

The simulator and every real executor return this same type (DESIGN.md), so policies, the
monitor and the reports run unchanged on either. Under a workload (:mod:`hetsched.model.workload`)
one ``Trace`` holds a window of requests: :class:`RequestTrace` per request and the window's
:class:`LoadMetrics`. Part of the model package.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hetsched.model.errors import UnknownReasonError
from hetsched.model.mapping import Mapping, Placement


class InfeasibleKind(StrEnum):
    """Why a mapping could not run, as a kind reports and policies can branch on."""

    OOM = "oom"
    """The ``gpu_now`` tools do not fit the VRAM budget together (or the device ran out of memory)."""
    NEVER_ADMISSIBLE = "never_admissible"
    """A ``gpu_queue`` node needs more memory than the whole budget."""
    DEADLOCK = "deadlock"
    """A queued node waits for memory held by tools that wait for it (statically or at the FIFO head)."""
    TOOL_ERROR = "tool_error"
    """A tool raised, or its worker died, during a real execution."""
    TIMEOUT = "timeout"
    """A tool ran past its time limit during a real execution."""
    UNAVAILABLE = "unavailable"
    """The executor has no device for a placement (a GPU placement without CUDA or a stand-in device)."""
    ABANDONED = "abandoned"
    """A request driven node by node was ended unfinished by the session (its handle was dropped, or
    ``close(timeout=...)`` ran out): its driver went away; no tool failed and the mapping is not at fault."""

    @property
    def label(self) -> str:
        """How reports and tables name the kind (``OOM``, ``deadlock``...)."""
        return _LABELS[self]


_LABELS = {
    InfeasibleKind.OOM: "OOM",
    InfeasibleKind.NEVER_ADMISSIBLE: "never admissible",
    InfeasibleKind.DEADLOCK: "deadlock",
    InfeasibleKind.TOOL_ERROR: "tool error",
    InfeasibleKind.TIMEOUT: "timeout",
    InfeasibleKind.UNAVAILABLE: "unavailable",
    InfeasibleKind.ABANDONED: "abandoned",
}


@dataclass(frozen=True, slots=True)
class Infeasibility:
    """The typed reason a mapping could not run: a kind, and a detail that quotes the figures."""

    kind: InfeasibleKind
    """What went wrong."""
    detail: str
    """Which nodes, tools and figures (``gpu_now tools need 1260 MB of 1100 MB (A 700 + C 560)``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", InfeasibleKind(self.kind))

    def __str__(self) -> str:
        return f"{self.kind.label}: {self.detail}" if self.detail else self.kind.label

    def to_dict(self) -> dict[str, str]:
        """``{"kind": "oom", "detail": "..."}`` for JSON."""
        return {"kind": self.kind.value, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Infeasibility:
        """Inverse of :meth:`to_dict`."""
        return cls(InfeasibleKind(data["kind"]), str(data.get("detail", "")))

    @classmethod
    def parse(cls, reason: str) -> Infeasibility:
        """Read a reason string written before reasons were typed (``"OOM: ..."``, ``"never admissible: ..."``,
        a deadlock as ``"never admissible: ... (deadlock)"``), or as a typed one prints (``"timeout: ..."``).

        A reason whose head is no kind's label raises :class:`~hetsched.model.errors.UnknownReasonError`
        naming it: before reasons were typed only the simulator refused mappings (OOM, never admissible),
        so such a reason is damage or foreign text, never a tool error to be read silently."""
        head, _, detail = reason.partition(":")
        head, detail = head.strip(), detail.strip()
        if head == "never admissible" and detail.endswith("(deadlock)"):
            return cls(InfeasibleKind.DEADLOCK, detail)
        for kind, label in _LABELS.items():
            if head == label:
                return cls(kind, detail)
        shown = reason if len(reason) <= 120 else reason[:117] + "..."
        raise UnknownReasonError(f"infeasibility reason {shown!r} names no kind of infeasibility; a reason stored "
                                 f"before reasons were typed begins with one of: {', '.join(_LABELS.values())} "
                                 "(then ': ' and its detail)")


@dataclass(frozen=True, slots=True)
class NodeTrace:
    """Timing of one node, all in ms from the start of the run."""

    node: str
    """Node id."""
    tool: str
    """Tool the node invoked."""
    placement: Placement
    """Where it ran."""
    ready_ms: float
    """When all its inputs had arrived."""
    admitted_ms: float
    """When it got its device (for ``gpu_queue``: admitted from the queue; else = ready)."""
    start_ms: float
    """When its computation started (after the load for ``gpu_queue``)."""
    end_ms: float
    """When it finished."""
    load_ms: float = 0.0
    """Load time paid on admission (``gpu_queue`` only)."""
    host: str = ""
    """The machine that ran it, for executors with several (the Ray node id); '' on one machine."""

    @property
    def wait_ms(self) -> float:
        """Time spent waiting in the queue for VRAM."""
        return self.admitted_ms - self.ready_ms

    @property
    def run_ms(self) -> float:
        """Computation time (excludes the queue wait and the load)."""
        return self.end_ms - self.start_ms


@dataclass(frozen=True, slots=True)
class VramPoint:
    """VRAM in use from ``t_ms`` until the next point."""

    t_ms: float
    """Time of the change."""
    used_mb: float
    """VRAM held from then on."""


@dataclass(frozen=True, slots=True)
class HostTrace:
    """One machine of a multi-machine execution (a Ray node): what it offered and its own VRAM use.

    Only executors that span machines fill ``Trace.hosts``; the budget check is per machine, and
    the trace's own ``vram_timeline`` / ``vram_budget_mb`` are then the sums over its hosts.
    """

    host: str
    """Machine id (the Ray node id), as in ``NodeTrace.host``."""
    address: str = ""
    """Its network address."""
    cpus: float = 0.0
    """CPU cores it offers."""
    gpus: float = 0.0
    """GPUs it offers."""
    vram_budget_mb: float = 0.0
    """VRAM admission budget of the machine (0: no GPU placements there)."""
    vram_timeline: tuple[VramPoint, ...] = ()
    """Step function of the VRAM held on this machine."""

    @property
    def peak_vram_mb(self) -> float:
        """Highest VRAM held on this machine."""
        return max((p.used_mb for p in self.vram_timeline), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"address": self.address, "cpus": self.cpus, "gpus": self.gpus, "vram_budget_mb": self.vram_budget_mb,
                "vram_timeline": [[p.t_ms, p.used_mb] for p in self.vram_timeline]}

    @classmethod
    def from_dict(cls, host: str, data: dict[str, Any]) -> HostTrace:
        """Inverse of :meth:`to_dict`."""
        return cls(host=host, address=str(data.get("address", "")), cpus=float(data.get("cpus", 0.0)),
                   gpus=float(data.get("gpus", 0.0)), vram_budget_mb=float(data.get("vram_budget_mb", 0.0)),
                   vram_timeline=tuple(VramPoint(t, u) for t, u in data.get("vram_timeline", ())))


def vram_steps(
    changes: Iterable[tuple[float, float]], start_mb: float = 0.0, eps_mb: float = 1e-6
) -> tuple[VramPoint, ...]:
    """The VRAM step function of ``(time ms, +/- MB)`` changes from ``start_mb`` at t = 0: releases
    before admissions at equal times (an admission waits for the release it uses), times before 0
    clamped to 0, sums within ``eps_mb`` of 0 taken as 0, one point per change of value."""
    used = start_mb
    points = [VramPoint(0.0, used)]
    for t, delta in sorted(changes, key=lambda e: (max(0.0, e[0]), e[1] > 0)):
        used += delta
        t = max(0.0, t)
        if abs(used) < eps_mb:
            used = 0.0
        if points[-1].t_ms == t:
            points[-1] = VramPoint(t, used)
        elif points[-1].used_mb != used:
            points.append(VramPoint(t, used))
    return tuple(points)


# ---------------------------------------------------------------------------- a window of requests
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


@dataclass(frozen=True)
class Trace:
    """One execution of a workflow under a mapping (or the reason it could not run)."""

    mapping: Mapping
    """The mapping that was executed."""
    feasible: bool
    """False when the mapping could not run (OOM, deadlock, a tool failed...); see ``infeasibility``."""
    e2e_ms: float | None
    """Makespan: the latest sink completion; None when infeasible."""
    nodes: dict[str, NodeTrace] = field(default_factory=dict)
    """Per-node timing (for an infeasible real execution: the nodes that finished before it stopped)."""
    vram_timeline: tuple[VramPoint, ...] = ()
    """Step function of VRAM in use."""
    infeasibility: Infeasibility | None = None
    """Why the mapping could not run (None when feasible)."""
    vram_budget_mb: float = 0.0
    """The budget the run was held to."""
    seed: int | None = None
    """Noise seed (None: noise-free)."""
    executor: str = "sim"
    """Which executor produced the trace (``sim``, ``local``, ``ray``)."""
    notes: tuple[str, ...] = ()
    """What the executor wants every reader to know (e.g. that GPU placements ran on a stand-in device)."""
    hosts: tuple[HostTrace, ...] = ()
    """Per machine, for executors that span several (the Ray executor); empty on one machine."""
    load: LoadMetrics | None = None
    """Under a workload (``run_workload``): the window's metrics. ``e2e_ms`` is then the window's p95
    latency and ``nodes`` the nodes of that (p95) request, times from its send; None for one request."""
    requests: tuple[RequestTrace, ...] = ()
    """Under a workload: every request (times from the window's start, as ``vram_timeline``); kept in
    memory for traces and reports, not in :meth:`to_dict` (the store keeps ``load``)."""
    phases_s: dict[str, float] = field(default_factory=dict)
    """Where a real executor's wall time went around this execution, seconds per phase in the order
    they ran (the Ray executor: ``start_s`` of its cluster on its first execution, ``warm_s``,
    ``actors_s``, ``run_s``, ``cleanup_s``, ``events_s``...); outside the E2E; empty for the simulator."""

    def __post_init__(self) -> None:
        if self.feasible == (self.infeasibility is not None):
            raise ValueError("a Trace is feasible exactly when it has no infeasibility; use Trace.refused(...)")

    def __repr__(self) -> str:  # the generated one prints every node and VRAM step
        what = f"E2E {self.e2e_ms:.1f} ms" if self.e2e_ms is not None else f"infeasible: {self.infeasibility}"
        seed = "noise-free" if self.seed is None else f"seed {self.seed}"
        return f"Trace({self.mapping!r}, {what}, {len(self.nodes)} nodes, {seed}, {self.executor})"

    @classmethod
    def refused(
        cls,
        mapping: Mapping,
        infeasibility: Infeasibility,
        *,
        vram_budget_mb: float = 0.0,
        seed: int | None = None,
        executor: str = "sim",
        nodes: dict[str, NodeTrace] | None = None,
        vram_timeline: tuple[VramPoint, ...] = (),
        notes: tuple[str, ...] = (),
        hosts: tuple[HostTrace, ...] = (),
    ) -> Trace:
        """The one way to build the trace of a mapping that could not run (or stopped part-way)."""
        return cls(
            mapping=mapping,
            feasible=False,
            e2e_ms=None,
            nodes=dict(nodes or {}),
            vram_timeline=vram_timeline,
            infeasibility=infeasibility,
            vram_budget_mb=vram_budget_mb,
            seed=seed,
            executor=executor,
            notes=notes,
            hosts=hosts,
        )

    @property
    def reason(self) -> str:
        """Why the mapping could not run, as one line (``OOM: gpu_now tools need ...``); '' when feasible."""
        return "" if self.infeasibility is None else str(self.infeasibility)

    @property
    def kind(self) -> InfeasibleKind | None:
        """The infeasibility kind (None when feasible)."""
        return None if self.infeasibility is None else self.infeasibility.kind

    @property
    def peak_vram_mb(self) -> float:
        """Highest VRAM in use during the run."""
        return max((p.used_mb for p in self.vram_timeline), default=0.0)

    def latency_ms(self, node: str) -> float:
        """Node latency as the monitor sees it: admission-to-end (load + run)."""
        nt = self.nodes[node]
        return nt.end_ms - nt.admitted_ms

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (``host`` per node and ``hosts`` appear only for multi-machine traces)."""
        data: dict[str, object] = {
            "mapping": self.mapping.to_dict(),
            "feasible": self.feasible,
            "e2e_ms": self.e2e_ms,
            "reason": self.reason,
            "infeasibility": None if self.infeasibility is None else self.infeasibility.to_dict(),
            "vram_budget_mb": self.vram_budget_mb,
            "seed": self.seed,
            "executor": self.executor,
            "notes": list(self.notes),
            "nodes": {
                k: {
                    "tool": v.tool,
                    "placement": v.placement.value,
                    "ready_ms": v.ready_ms,
                    "admitted_ms": v.admitted_ms,
                    "start_ms": v.start_ms,
                    "end_ms": v.end_ms,
                    "load_ms": v.load_ms,
                    "wait_ms": v.wait_ms,
                    **({"host": v.host} if v.host else {}),
                }
                for k, v in self.nodes.items()
            },
            "vram_timeline": [[p.t_ms, p.used_mb] for p in self.vram_timeline],
        }
        if self.hosts:
            data["hosts"] = {h.host: h.to_dict() for h in self.hosts}
        if self.load is not None:
            data["load"] = self.load.to_dict()
        if self.phases_s:
            data["phases_s"] = dict(self.phases_s)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        """Inverse of :meth:`to_dict`."""
        nodes = {
            k: NodeTrace(
                node=k,
                tool=v["tool"],
                placement=Placement(v["placement"]),
                ready_ms=v["ready_ms"],
                admitted_ms=v["admitted_ms"],
                start_ms=v["start_ms"],
                end_ms=v["end_ms"],
                load_ms=v["load_ms"],
                host=str(v.get("host", "")),
            )
            for k, v in data["nodes"].items()
        }
        infeasibility: Infeasibility | None = None
        if data.get("infeasibility"):
            infeasibility = Infeasibility.from_dict(data["infeasibility"])
        elif not data["feasible"]:  # stored before reasons were typed
            infeasibility = Infeasibility.parse(data.get("reason", ""))
        return cls(
            mapping=Mapping(data["mapping"]),
            feasible=data["feasible"],
            e2e_ms=data["e2e_ms"],
            nodes=nodes,
            vram_timeline=tuple(VramPoint(t, u) for t, u in data["vram_timeline"]),
            infeasibility=infeasibility,
            vram_budget_mb=data.get("vram_budget_mb", 0.0),
            seed=data.get("seed"),
            executor=data.get("executor", "sim"),
            notes=tuple(data.get("notes", ())),
            hosts=tuple(HostTrace.from_dict(h, d) for h, d in (data.get("hosts") or {}).items()),
            load=_load_from(data.get("load")),
            phases_s={str(k): float(v) for k, v in (data.get("phases_s") or {}).items()},
        )


def _load_from(data: dict[str, Any] | None) -> LoadMetrics | None:
    return LoadMetrics.from_dict(data) if data else None
