"""A window of overlapping requests on a real executor: the composite workflow they run as, when
each request is released, and what came back (one trace with a lane per request, per-request
latencies, the executor's own admission records).

A window of N requests of a workflow runs as one composite workflow: N copies of the DAG whose
node ids are ``{node}@{r}`` (r = 0.., the request's index in release order), with no edge between
copies. Every real executor runs it with its ordinary placement rules, so under one mapping:

- the CPU pool and the device are shared by every request in flight;
- a ``gpu_now`` tool is loaded once, before the window (outside every request's latency), and
  stays resident until its last ``gpu_now`` node of any request ends (the kernel's rule,
  :mod:`hetsched.model.contention`); concurrent calls to it share it as the executor's
  docstring says (the local executor: concurrently, one thread per call in the device worker);
- ``gpu_queue`` nodes of every request wait in the one FIFO queue, in the order they became ready.

Requests are released by a :class:`ReleaseClock`: as a workload's arrival plan says
(:meth:`hetsched.model.workload.Workload.plan`): at given times (open loop: a trace of arrival
times, or Poisson draws) or by K clients each sending its next request when its last returns
(closed loop). A request's latency is the end of its last sink minus its release;
:func:`workload_trace` turns a window into the one ``Trace`` every executor returns under load
(``requests``, ``load``: :func:`hetsched.model.workload.window_trace`).

Imports only the model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hetsched.model import Infeasibility, InfeasibleKind, InputError, Mapping, NodeTrace, Scenario, Trace
from hetsched.model.trace import RequestTrace
from hetsched.model.workflow import Edge, Node, Workflow
from hetsched.model.workload import ArrivalPlan, Workload, load_infeasibility, window_trace

SEP = "@"
"""Separates a node id from its request index in a window's composite node ids (``A@3``)."""


def instance_id(node: str, request: int) -> str:
    """The composite id of ``node`` of request ``request`` (``A@3``)."""
    return f"{node}{SEP}{request}"


def split_id(node: str) -> tuple[str, int]:
    """``("A", 3)`` for ``A@3`` (the last ``@`` separates: node ids may hold one)."""
    base, _, r = node.rpartition(SEP)
    if not base or not r.isdigit():
        raise InputError(f"{node!r} is not a window node id (NODE{SEP}REQUEST)")
    return base, int(r)


def window_scenario(scenario: Scenario, count: int) -> Scenario:
    """``count`` copies of the scenario's workflow as one (node ``n`` of request r is ``n@r``);
    the cards, machine and mode are the scenario's."""
    if count < 1:
        raise InputError(f"a window needs at least one request, got {count}")
    wf = scenario.workflow
    nodes = tuple(Node(id=instance_id(n.id, r), tool=n.tool) for r in range(count) for n in wf.nodes)
    edges = tuple(Edge(src=instance_id(e.src, r), dst=instance_id(e.dst, r), data_mb=e.data_mb)
                  for r in range(count) for e in wf.edges)
    # a new Scenario, not model_copy: a copy would inherit the cached per-node tables of the original
    return Scenario(name=scenario.name, description=scenario.description, shows=scenario.shows, mode=scenario.mode,
                    workflow=Workflow(nodes=nodes, edges=edges), cards=scenario.cards, machine=scenario.machine,
                    source=scenario.source)


def window_mapping(mapping: Mapping, count: int) -> Mapping:
    """The mapping of every copy: node ``n@r`` where ``mapping`` places ``n``."""
    return Mapping((instance_id(n, r), p) for r in range(count) for n, p in mapping.items())


class ReleaseClock:
    """When each request of a window is released (ms from the window's zero), as a workload's
    arrival plan says (:meth:`hetsched.model.workload.Workload.plan`).

    Request r is released at ``releases_ms[r]``; where ``follows`` is given and ``follows[r] >= 0``,
    ``releases_ms[r]`` after request ``follows[r]`` returned (a closed loop's think time). A request
    whose release falls at or after ``horizon_ms`` is not sent, nor is one that follows a request
    not sent. Build one with :meth:`at` (open loop, times given) or :meth:`closed` (K clients).
    """

    def __init__(self, releases_ms: Sequence[float], follows: Sequence[int] | None = None,
                 horizon_ms: float = math.inf) -> None:
        times = [float(t) for t in releases_ms]
        if not times:
            raise InputError("releases_ms: a window needs at least one request")
        bad = [t for t in times if not math.isfinite(t) or t < 0]
        if bad:
            raise InputError(f"releases_ms: release times must be finite and >= 0 ms, got {bad[0]!r}")
        if follows is not None:
            if len(follows) != len(times):
                raise InputError(f"follows: one entry per request ({len(times)}), got {len(follows)}")
            for r, f in enumerate(follows):
                if not -1 <= f < r:
                    raise InputError(f"follows[{r}] = {f}: a request follows an earlier one (0..{r - 1}) or none (-1)")
        self.releases_ms = tuple(times)
        self.follows = None if follows is None else tuple(int(f) for f in follows)
        self.horizon_ms = float(horizon_ms)
        self.count = len(times)
        """Requests in the plan (those not sent included)."""
        self.sent: dict[int, float] = {}
        """Request -> when it was released, ms."""
        self.returned: dict[int, float] = {}
        """Request -> when it returned, ms."""
        self.skipped: set[int] = set()
        """Requests not sent (their release fell past the horizon)."""
        self._children: dict[int, list[int]] = {}
        for r, f in enumerate(self.follows or ()):
            if f >= 0:
                self._children.setdefault(f, []).append(r)
        # undecided requests whose release time is known (the others wait for the one they follow)
        self._known: dict[int, float] = {r: times[r] for r in range(self.count)
                                         if self.follows is None or self.follows[r] < 0}

    @classmethod
    def of(cls, clock: ReleaseClock | None, releases_ms: Sequence[float] | None, clients: int | None,
           count: int | None, think_ms: float) -> ReleaseClock:
        """The clock an executor's ``run_window`` arguments name: ``clock`` itself when given, else an
        open loop at ``releases_ms`` or a closed loop of ``clients`` (exactly one of the two)."""
        if clock is not None:
            return clock
        if (releases_ms is None) == (clients is None):
            raise InputError("run_window: give releases_ms (open loop) or clients and count (closed loop)")
        return (cls.at(releases_ms) if releases_ms is not None
                else cls.closed(int(clients or 0), int(count or 0), think_ms))

    @classmethod
    def at(cls, times_ms: Sequence[float]) -> ReleaseClock:
        """Open loop: request r released at the r-th smallest of ``times_ms``."""
        return cls(sorted(float(t) for t in times_ms))

    @classmethod
    def closed(cls, clients: int, count: int, think_ms: float = 0.0) -> ReleaseClock:
        """Closed loop: ``clients`` clients send ``count`` requests in all; request r (client r mod K)
        is sent ``think_ms`` after request r - K returned, the first K at 0."""
        if clients < 1:
            raise InputError(f"clients must be >= 1, got {clients}")
        if count < 1:
            raise InputError(f"a closed loop needs a request count >= 1, got {count}")
        if not math.isfinite(think_ms) or think_ms < 0:
            raise InputError(f"think_ms must be finite and >= 0, got {think_ms}")
        return cls([0.0 if r < clients else think_ms for r in range(count)],
                   [r - clients if r >= clients else -1 for r in range(count)])

    @property
    def pending(self) -> bool:
        """Requests neither sent nor skipped."""
        return len(self.sent) + len(self.skipped) < self.count

    def next_ms(self) -> float | None:
        """The next scheduled release (None when every pending one waits for a return, or none is left)."""
        return min(self._known.values(), default=None)

    def _skip(self, r: int, skip: list[int]) -> None:
        """Request r is not sent, nor is any request that follows it."""
        todo = [r]
        while todo:
            q = todo.pop()
            self._known.pop(q, None)
            self.skipped.add(q)
            skip.append(q)
            todo.extend(self._children.get(q, ()))

    def due(self, now_ms: float) -> tuple[list[int], list[int]]:
        """Requests released by ``now_ms`` (in release order, each at its scheduled time), and those
        found past the horizon (not sent: neither they nor the requests that follow them)."""
        out: list[int] = []
        skip: list[int] = []
        for r, t in sorted(self._known.items(), key=lambda rt: (rt[1], rt[0])):
            if r not in self._known:
                continue
            if t >= self.horizon_ms:
                self._skip(r, skip)
            elif t <= now_ms:
                del self._known[r]
                self.sent[r] = t
                out.append(r)
        return out, skip

    def completed(self, request: int, now_ms: float) -> None:
        """Request ``request`` returned at ``now_ms``: the requests that follow it are now scheduled."""
        self.returned[request] = now_ms
        for r in self._children.get(request, ()):
            if r not in self.skipped and r not in self.sent:
                self._known[r] = now_ms + self.releases_ms[r]


@dataclass(frozen=True)
class Admission:
    """One ``gpu_queue`` admission, from the executor's own accounting."""

    t_ms: float
    """When it was admitted (ms from the window's zero)."""
    node: str
    """The composite node id."""
    held_mb: float
    """VRAM the executor's accounting held right after admitting it (resident tools included), MB."""


@dataclass(frozen=True)
class WindowRun:
    """What a window of requests did on a real executor."""

    trace: Trace
    """One trace of the whole window (composite node ids ``n@r``: a lane per request)."""
    release_ms: tuple[float | None, ...]
    """Per request of the plan, when it was released, ms from the window's zero (None: not sent)."""
    end_ms: tuple[float | None, ...]
    """Per request, when its last sink ended (None when it did not finish)."""
    enqueued: tuple[str, ...] = ()
    """``gpu_queue`` nodes in the order they entered the FIFO queue (executors that keep one)."""
    admissions: tuple[Admission, ...] = ()
    """``gpu_queue`` admissions in order, with what was held (executors that keep their own accounting)."""
    resident_loads: dict[str, int] = field(default_factory=dict)
    """``gpu_now`` tool -> how many times the executor loaded it during the window."""
    budget_mb: float = 0.0
    """The VRAM budget the window ran under."""

    @property
    def count(self) -> int:
        """Requests sent."""
        return sum(1 for r in self.release_ms if r is not None)

    @property
    def completed(self) -> bool:
        """True when every request sent finished (the trace is feasible)."""
        return self.trace.feasible and all(e is not None for r, e in zip(self.release_ms, self.end_ms, strict=True)
                                           if r is not None)

    @property
    def latency_ms(self) -> tuple[float, ...]:
        """Per finished request, its end minus its release, ms (plan order)."""
        pairs = zip(self.release_ms, self.end_ms, strict=True)
        return tuple(e - r for r, e in pairs if e is not None and r is not None)

    @property
    def duration_ms(self) -> float:
        """From the window's zero to the last request's end, ms."""
        return max((e for e in self.end_ms if e is not None), default=0.0)

    def request_nodes(self, request: int) -> dict[str, NodeTrace]:
        """Node traces of one request, by its own node ids (times from the window's zero)."""
        out: dict[str, NodeTrace] = {}
        for cid, nt in self.trace.nodes.items():
            base, r = split_id(cid)
            if r == request:
                out[base] = nt
        return out


def request_ends(scenario: Scenario, nodes: dict[str, NodeTrace], count: int) -> list[float | None]:
    """Per request, the end of its last sink in composite node traces (None when one is missing)."""
    sinks = scenario.workflow.sinks
    out: list[float | None] = []
    for r in range(count):
        ends = [nodes[instance_id(s, r)].end_ms for s in sinks if instance_id(s, r) in nodes]
        out.append(max(ends) if len(ends) == len(sinks) else None)
    return out


def workload_trace(run: WindowRun, scenario: Scenario, mapping: Mapping, workload: Workload, plan: ArrivalPlan,
                   executor: str) -> Trace:
    """The window's :class:`Trace` as every executor returns it (:func:`hetsched.model.workload.window_trace`):
    ``requests`` in send order (node ids the workflow's own, times from the window's zero), ``load``
    its metrics, ``vram_timeline`` the executor's own accounting, ``e2e_ms`` the p95 latency. A window
    that failed comes back refused with its typed reason, the requests that finished kept in ``requests``."""
    order = sorted((t, r) for r, t in enumerate(run.release_ms) if t is not None)
    requests = []
    for k, (t, r) in enumerate(order):
        if run.end_ms[r] is None:
            continue
        requests.append(RequestTrace(request=k, release_ms=t, nodes=run.request_nodes(r), client=plan.clients[r]))
    tr = run.trace
    if not tr.feasible or not requests or len(requests) < len(order):
        why = tr.infeasibility or Infeasibility(InfeasibleKind.TOOL_ERROR, "no request of the window finished")
        refused = Trace.refused(mapping, why, vram_budget_mb=tr.vram_budget_mb, executor=executor,
                                vram_timeline=tr.vram_timeline, notes=tr.notes, hosts=tr.hosts)
        return dataclasses.replace(refused, requests=tuple(requests), phases_s=tr.phases_s)
    out = window_trace(mapping, requests, scenario, workload, vram_timeline=tr.vram_timeline,
                       vram_budget_mb=tr.vram_budget_mb, executor=executor, notes=tr.notes)
    return dataclasses.replace(out, hosts=tr.hosts, phases_s=tr.phases_s)


class WindowRunner(Protocol):
    """A real executor that runs a window of requests (the local and Ray executors)."""

    name: str
    scenario: Scenario

    def run_window(self, mapping: Mapping, *, clock: ReleaseClock) -> WindowRun: ...


def run_workload(executor: WindowRunner, mapping: Mapping, workload: Workload) -> Trace:
    """``workload``'s window of requests run for real on ``executor`` under one mapping, as the
    window's ``Trace`` (``load``: its metrics, ``requests``: every request; ``e2e_ms`` the p95
    latency). A mapping that cannot serve a window (a queued node that does not fit beside the
    resident tools, which serve every request) is refused before anything runs."""
    sc = executor.scenario
    mapping = sc.validate_mapping(mapping)
    refused = sc.infeasibility(mapping) or load_infeasibility(sc, mapping, workload)
    if refused is not None:
        return Trace.refused(mapping, refused, vram_budget_mb=sc.machine.vram_budget_mb, executor=executor.name)
    plan = workload.plan(sc.isolated_critical_path_ms())
    run = executor.run_window(mapping, clock=ReleaseClock(plan.releases_ms, plan.follows, plan.horizon_ms))
    return workload_trace(run, sc, mapping, workload, plan, executor.name)


__all__ = ["SEP", "Admission", "ReleaseClock", "WindowRun", "WindowRunner", "instance_id", "request_ends",
           "run_workload", "split_id", "window_mapping", "window_scenario", "workload_trace"]
