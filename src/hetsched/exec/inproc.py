"""The in-process executor: runs a workflow's real tools in this process (threads), with the same
placement semantics and the same :class:`~hetsched.model.Trace` as the other executors.

It is what an online :class:`~hetsched.session.Session` uses by default, because a request's
inputs and outputs are the application's own Python objects (nothing is pickled) and a node can
be driven from outside, one at a time, by another runtime (LangGraph):

- ``cpu`` nodes run the tool's CPU implementation (loaded once per tool and kept);
- ``gpu_now`` tools are *resident*: loaded on the device before the first request that places
  them ``gpu_now`` (outside the E2E) and kept loaded across requests while the next request's
  mapping keeps them ``gpu_now``; a request whose mapping moves a tool off ``gpu_now`` unloads it
  before its own admissions, and :meth:`InProcessExecutor.close` unloads the rest. A resident tool
  counts against the budget for as long as it is loaded. Once its last node of a request has run
  it may be evicted: a ``gpu_queue`` node at the head of the FIFO that does not fit unloads it
  (where the model releases it); a node of it run again after an eviction loads it through the
  FIFO. A request that fails unloads its resident tools (their state may be damaged);
- ``gpu_queue`` nodes wait in one FIFO queue until their card's ``vram_mb`` fits beside what is
  held (the budget), then load, run and unload (their load is inside the E2E).

Requests overlap: :meth:`InProcessExecutor.run_request` and :meth:`InProcessExecutor.begin` may be
called from several threads, and every request in flight shares one device state (the model under
load, docs/simulator.md "Under load"): the CPU pool (``max_threads`` nodes running at once), the
resident tools (one load serves every request; concurrent calls run at once, up to
``device_threads`` on the stand-in device), the one FIFO queue of every request's queued nodes, and
the budget, never exceeded at any instant across requests (:attr:`InProcessExecutor.vram_peak_mb`;
each trace's VRAM timeline is the device's while that request ran, every request counted). A
request with GPU nodes starts in arrival order, once the GPU requests in flight place the same
tools ``gpu_now`` (so a tool is never unloaded or moved under a running request; a tool moved off
``gpu_now`` is unloaded when no request in flight places it there) and, when it must load one,
once it fits beside what is held and no queued node waits. A request whose queued node does not
fit beside its resident tools runs with no other GPU request in flight (the one-request rules,
eviction included); under load a resident tool is never evicted. A failed request's resident
tools are unloaded once no request in flight uses them, and no request starts on them meanwhile.
:meth:`InProcessExecutor.run_window` / ``run_workload`` run a workload's window of requests this
way (a thread per request, released as the arrival plan says; the resident tools loaded before the
window and held to its end), as the local and Ray executors do.

The device is CUDA when torch sees one (``device="auto"``), else the stand-in device: the GPU
implementation runs on CPU threads of this process, and every trace says so. Independent nodes
run in parallel threads. A tool that raises ends the request as a ``tool_error`` trace naming
the node (``torch``'s out-of-memory as ``oom``); the exception itself is kept for the caller.
Unlike the local executor, a hanging tool cannot be interrupted in-process: use
``executor="local"`` for isolation and time limits.

Imports the model, the tool API and registry; never policies or the loop.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from collections.abc import Mapping as MappingABC
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from hetsched.exec.base import ClosingExecutor
from hetsched.exec.window import ReleaseClock, WindowRun, instance_id, request_ends, run_workload, window_mapping
from hetsched.model import (
    HetschedError,
    Infeasibility,
    InfeasibleKind,
    InputError,
    Mapping,
    NodeTrace,
    Placement,
    Scenario,
    Trace,
)
from hetsched.model.trace import vram_steps
from hetsched.model.workload import Workload
from hetsched.tools.base import Device, DeviceKind, Tool, check_size
from hetsched.tools.registry import import_tool_modules

_EPS_MB = 1e-6
FIFO_LOG_SIZE = 10_000
"""Events of the device queue kept in :attr:`InProcessExecutor.fifo_log`."""
STANDIN_NOTE = ("GPU placements ran on the in-process stand-in device (CPU threads of this process, not a GPU): "
                "their times are real measurements of CPU cores")
"""What every trace that used the in-process stand-in device says."""


class ToolError(HetschedError):
    """A tool raised while running a node of a request (the request failed; the session did not).

    The original exception is ``__cause__`` (and :attr:`error`)."""

    def __init__(self, message: str, *, node: str = "", tool: str = "", error: BaseException | None = None,
                 trace: Trace | None = None, round: int | None = None) -> None:
        super().__init__(message)
        self.node, self.tool, self.error = node, tool, error
        self.trace = trace
        """The refused trace of the request (kind ``tool_error`` or ``oom``), when known."""
        self.round = round
        """The round the failed request was recorded as, when recorded."""


def _kind_of(exc: BaseException) -> InfeasibleKind:
    return InfeasibleKind.OOM if "OutOfMemory" in type(exc).__name__ else InfeasibleKind.TOOL_ERROR


@dataclass
class RequestResult:
    """One executed request: its trace, the sink nodes' outputs, and the failure (if any)."""

    trace: Trace
    """The measured trace (refused when a node failed)."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """Output of every sink node that ran, by node id."""
    error: ToolError | None = None
    """What failed, with the tool's own exception as its cause; None when the request ran."""
    start_wait_ms: float = 0.0
    """Time the request waited to start on the device (behind other requests: a change of the resident
    tools waiting for the requests using them, a request that runs alone, VRAM to load a tool), ms."""


class InProcessExecutor(ClosingExecutor):
    """Runs rounds of a scenario with real tools in this process (see the module docstring).

    Args:
        scenario: the scenario.
        tools: implementations by tool name (:func:`~hetsched.tools.functions.function_tool` or Tool
            objects); a tool not given is looked up in the registry (``hetsched.tools.get_tool``).
        device: ``auto`` (CUDA when torch sees a GPU, else the stand-in device), ``cuda``/``cuda:N``,
            ``standin``, or ``none`` (GPU placements are refused).
        size: size preset of registry tools (default ``tiny``).
        tool_modules: modules to import first (they register tools).
        max_threads: most nodes running at once.
        device_threads: GPU-placed calls running at once on the stand-in device (default 1, as the
            local executor's stand-in device and the cards profiled on it); CUDA is not limited.
    """

    name = "inproc"

    def __init__(
        self,
        scenario: Scenario,
        *,
        tools: MappingABC[str, Tool] | None = None,
        device: str = "auto",
        size: str = "tiny",
        tool_modules: Sequence[str] = (),
        max_threads: int = 32,
        device_threads: int = 1,
    ) -> None:
        from hetsched.tools.registry import get_tool, tool_names

        self.scenario = scenario
        import_tool_modules(list(tool_modules))
        given = dict(tools or {})
        for name in scenario.workflow.tools:
            if name in given:
                continue
            try:
                given[name] = get_tool(name, check_size(size))
            except InputError:
                raise InputError(
                    f"scenario {scenario.name!r}: tool {name!r} has no implementation to run; give it to the "
                    f"session (hetsched.function_tool) or register it (hetsched.register_tool); registered tools: "
                    f"{', '.join(tool_names())}") from None
        for name in scenario.workflow.tools:
            if scenario.cards[name].has_gpu and not given[name].has_gpu:
                raise InputError(f"scenario {scenario.name!r}: the card of {name!r} says has_gpu, but the tool has "
                                 "no GPU implementation; set has_gpu: false on the card")
        self.tools: dict[str, Tool] = given
        """The implementation of every tool the scenario uses."""
        self._device_choice = device
        self._device: Device | None = None
        self._device_resolved = False
        self._cpu = Device(DeviceKind.CPU, 0, 1)
        self._cpu_handles: dict[str, Any] = {}
        self._cpu_lock = threading.Lock()
        if device_threads < 1:
            raise InputError(f"executor 'inproc': device_threads must be >= 1, got {device_threads}")
        self._device_slots = threading.BoundedSemaphore(device_threads)
        self._prepared: set[str] = set()
        self._prepare_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, max_threads), thread_name_prefix="hetsched-node")
        self._closed = False
        self.resident: dict[str, Any] = {}
        """Device handles of the resident ``gpu_now`` tools, by tool (kept across requests)."""
        self.resident_loads: dict[str, int] = {}
        """How many times each ``gpu_now`` tool was loaded as a resident tool (since the executor opened)."""
        self.fifo_log: deque[tuple[str, int, str]] = deque(maxlen=FIFO_LOG_SIZE)
        """The device queue's last events, in order: ``("enqueue" | "admit", request id, node)``."""
        self.vram_peak_mb = 0.0
        """The most VRAM the executor's accounting ever held (every request, resident tools included), MB."""
        # the device's state, shared by every request in flight (guarded by _dev)
        self._dev = threading.Condition()
        self._start_fifo: deque[object] = deque()  # GPU requests waiting to start, in arrival order
        self._node_fifo: deque[object] = deque()  # queued nodes of every request, in the order they got ready
        self._held_mb = 0.0
        self._log: list[tuple[float, float]] = [(time.monotonic(), 0.0)]  # (when, MB held after the change)
        self._loading: set[str] = set()
        self._damaged: set[str] = set()
        self._users: dict[str, int] = {}  # gpu_now tool -> requests in flight placing it gpu_now
        self._inflight: list[Request] = []
        self._ids = 0

    # ------------------------------------------------------------------ devices
    @property
    def device(self) -> Device | None:
        """Where GPU placements run (None: nowhere); resolved (and torch imported) at first need."""
        if not self._device_resolved:
            from hetsched.exec.devices import resolve_device

            self._device = resolve_device(self._device_choice, 1)
            self._device_resolved = True
        return self._device

    def describe(self) -> list[str]:
        """What the executor runs on, one line each (for the CLI)."""
        dev = self.device
        where = "none (refused)" if dev is None else (
            "the stand-in device (CPU threads of this process)" if dev.kind is DeviceKind.STANDIN else dev.label)
        return ["tools run in this process (threads)", f"GPU placements: {where}"]

    def close(self) -> None:
        """Unload the resident gpu_now tools and the CPU handles, and stop the threads (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        for name in list(self.resident):
            with contextlib.suppress(Exception):  # closing must free the rest whatever one tool does
                self.tools[name].unload(self.resident.pop(name))
        with self._cpu_lock:
            for name, handle in self._cpu_handles.items():
                with contextlib.suppress(Exception):  # closing must free the rest whatever one tool does
                    self.tools[name].unload(handle)
            self._cpu_handles.clear()

    def prepare(self, tool: str) -> None:
        """The tool's one-time, untimed set-up (``Tool.prepare``: a checkpoint, a data file), once per executor."""
        with self._prepare_lock:
            if tool not in self._prepared:
                self.tools[tool].prepare()
                self._prepared.add(tool)

    @contextlib.contextmanager
    def on_device(self) -> Iterator[None]:
        """Hold one of the stand-in device's threads while a GPU-placed call runs (CUDA: no limit)."""
        dev = self.device
        if dev is None or dev.kind is not DeviceKind.STANDIN:
            yield
            return
        with self._device_slots:
            yield

    def cpu_handle(self, tool: str) -> Any:
        """The tool's CPU handle (loaded at first use and kept)."""
        self.prepare(tool)
        with self._cpu_lock:
            if tool not in self._cpu_handles:
                self._cpu_handles[tool] = self.tools[tool].load(self._cpu)
            return self._cpu_handles[tool]

    # ------------------------------------------------------------------ the device's state (callers hold _dev)
    def _next_id(self) -> int:
        with self._dev:
            self._ids += 1
            return self._ids - 1

    def _change(self, delta_mb: float) -> None:
        """Change the VRAM held by ``delta_mb`` now (logged for the traces' VRAM timelines)."""
        self._held_mb += delta_mb
        if abs(self._held_mb) < _EPS_MB:
            self._held_mb = 0.0
        self._log.append((time.monotonic(), self._held_mb))
        self.vram_peak_mb = max(self.vram_peak_mb, self._held_mb)

    def _vram_since(self, t0: float, end: float) -> tuple[float, list[tuple[float, float]]]:
        """VRAM held at ``t0`` and its changes (when, +/- MB) up to ``end``."""
        before = [h for t, h in self._log if t <= t0]
        start_mb = before[-1] if before else 0.0
        changes: list[tuple[float, float]] = []
        held = start_mb
        for t, h in self._log:
            if t0 < t <= end:
                changes.append((t, h - held))
                held = h
        return start_mb, changes

    def _trim_log(self) -> None:
        """Forget VRAM changes no request in flight can still need (the last one before them is kept)."""
        cutoff = min((r.t0 for r in self._inflight), default=time.monotonic())
        keep = max((i for i, (t, _) in enumerate(self._log) if t <= cutoff), default=0)
        if keep:
            del self._log[:keep]

    def _unload(self, tool: str) -> None:
        handle = self.resident.pop(tool)
        try:
            self.tools[tool].unload(handle)
        finally:
            self._change(-self.scenario.cards[tool].vram_mb)

    def _drop_unused(self, keep: Sequence[str] | set[str]) -> None:
        """Unload the resident tools outside ``keep`` that no request in flight places gpu_now."""
        for tool in [t for t in self.resident if t not in keep and not self._users.get(t) and t not in self._loading]:
            self._unload(tool)

    def _evict_one(self, keep: Sequence[str] | set[str] = ()) -> bool:
        """Unload one resident tool no request in flight still calls (each of its nodes has run, no
        call in flight), outside ``keep``; False when there is none."""
        for tool in list(self.resident):
            if tool in keep or tool in self._loading:
                continue
            if any(r._now_pending.get(tool) or r._now_inflight.get(tool) for r in self._inflight):
                continue
            self._unload(tool)
            return True
        return False

    def _alone(self, request: Request) -> bool:
        """True when no other GPU request is in flight."""
        return all(r is request or not r.gpu for r in self._inflight)

    def _may_join(self, request: Request) -> bool:
        """Whether a GPU request may start beside the GPU requests in flight: they all place the same
        tools gpu_now (so no tool is moved off under a running request, and every queued node fits
        beside what is resident), none runs alone, none of its tools waits to be unloaded."""
        if any(t in self._damaged for t in request.now_tools):
            return False
        others = [r for r in self._inflight if r.gpu]
        if not others:
            return True
        if request.alone:
            return False
        mine = set(request.now_tools)
        return all(not r.alone and set(r.now_tools) == mine for r in others)

    # ------------------------------------------------------------------ requests
    def begin(self, mapping: Mapping, seed: int | None = 0) -> Request:
        """Start a request under ``mapping`` (validated; statically infeasible ones are refused by
        :meth:`Request.start`); drive it with :meth:`Request.run_node` and end it with :meth:`Request.finish`."""
        if self._closed:
            raise InputError("the in-process executor is closed")
        return Request(self, self.scenario.validate_mapping(mapping), seed)

    def run_request(self, mapping: Mapping, inputs: MappingABC[str, Any] | None = None,
                    seed: int | None = 0) -> RequestResult:
        """Run the whole DAG once: source node ``s`` gets ``[inputs[s]]`` (``[]`` when absent), every
        other node its predecessors' outputs in edge order; returns the trace and the sinks' outputs."""
        return self._drive(self.begin(mapping, seed), inputs)

    def _drive(self, req: Request, inputs: MappingABC[str, Any] | None) -> RequestResult:
        """Run a begun request's DAG to its end (:meth:`run_request`)."""
        if not req.start():
            return RequestResult(req.finish(), start_wait_ms=req.start_wait_ms)
        wf = self.scenario.workflow
        outputs: dict[str, Any] = {}
        left = {n: len(wf.preds(n)) for n in wf.node_ids}
        running: dict[Future[Any], str] = {}
        error: ToolError | None = None

        def launch(node: str, args: list[Any]) -> None:
            running[self._pool.submit(req.run_node, node, args)] = node

        for s in wf.sources:
            launch(s, [inputs[s]] if inputs is not None and s in inputs else [])
        while running:
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in done:
                node = running.pop(fut)
                exc = fut.exception()
                if exc is not None:
                    if error is None:
                        error = exc if isinstance(exc, ToolError) else ToolError(str(exc), node=node, error=exc)
                    continue
                outputs[node] = fut.result()
                if error is not None:
                    continue
                for s in wf.succs(node):
                    left[s] -= 1
                    if left[s] == 0:
                        launch(s, [outputs[p] for p in wf.preds(s)])
        trace = req.finish()
        if error is not None:
            error.trace = trace
            return RequestResult(trace, {}, error, start_wait_ms=req.start_wait_ms)
        return RequestResult(trace, {s: outputs[s] for s in wf.sinks if s in outputs}, start_wait_ms=req.start_wait_ms)

    def run(self, mapping: Mapping, seed: int | None = 0) -> Trace:
        """Execute one round (sources get no inputs); infeasible or failed rounds come back refused."""
        return self.run_request(mapping, None, seed).trace

    # ------------------------------------------------------------------ a window of requests under load
    def run_window(self, mapping: Mapping, *, releases_ms: Sequence[float] | None = None, clients: int | None = None,
                   count: int | None = None, think_ms: float = 0.0, clock: ReleaseClock | None = None,
                   inputs: MappingABC[str, Any] | None = None) -> WindowRun:
        """Run a window of overlapping requests for real under one mapping (:mod:`hetsched.exec.window`),
        as the local executor's ``run_window`` does: released at ``releases_ms`` (open loop), by
        ``clients`` clients sending ``count`` requests in all (closed loop, ``think_ms`` after the last
        returned), or as ``clock`` says. Each request runs in its own thread with the executor's
        overlapping-request rules; the resident tools are loaded before the window (outside every
        request's latency) and held until its end. A request that fails makes the window's trace
        refused (the others run to their end). ``inputs``: every request's source inputs."""
        mapping = self.scenario.validate_mapping(mapping)
        clock = ReleaseClock.of(clock, releases_ms, clients, count, think_ms)
        sc, budget = self.scenario, self.scenario.machine.vram_budget_mb
        none: tuple[float | None, ...] = (None,) * clock.count
        composite = window_mapping(mapping, clock.count)

        def refused(why: Infeasibility) -> WindowRun:
            return WindowRun(trace=Trace.refused(composite, why, vram_budget_mb=budget, executor=self.name),
                             release_ms=none, end_ms=none, budget_mb=budget)

        loads_before = dict(self.resident_loads)
        hold = self.begin(mapping, None)  # loads the resident tools before the window and holds them
        hold._holder = True
        if hold.alone and clock.count > 1:
            return refused(Infeasibility(InfeasibleKind.NEVER_ADMISSIBLE, "under load: a gpu_queue node does not "
                                         f"fit beside gpu_now tools {list(hold.now_tools)}, which serve every "
                                         "request for the whole window"))
        if not hold.start():
            hold.finish()
            return refused(hold.failure or Infeasibility(InfeasibleKind.TOOL_ERROR, "the window could not start"))
        if hold.alone:  # one request, which runs alone: its tools are loaded, the request needs the device to itself
            hold.finish()
        given = dict(inputs or {})
        cond = threading.Condition()
        results: dict[int, tuple[Request | None, RequestResult]] = {}
        returned: list[tuple[int, float]] = []
        zero = time.monotonic()
        first_event = len(self.fifo_log)

        def one(r: int) -> None:
            req: Request | None = None
            try:
                req = self.begin(mapping, r)
                res = self._drive(req, {s: given[s] for s in sc.workflow.sources if s in given})
            except BaseException as exc:  # the request could not be driven: its failure, kept (never a hang)
                why = Infeasibility(InfeasibleKind.TOOL_ERROR, f"request {r} raised {type(exc).__name__}: {exc}")
                if req is not None:
                    req.fail(why.detail)
                    res = RequestResult(req.finish())
                else:
                    res = RequestResult(Trace.refused(mapping, why, vram_budget_mb=budget, executor=self.name))
            with cond:
                results[r] = (req, res)
                returned.append((r, (time.monotonic() - zero) * 1000.0))
                cond.notify_all()

        threads: list[threading.Thread] = []
        try:
            with cond:
                while True:
                    for r, end_ms in returned:
                        clock.completed(r, end_ms)
                    returned.clear()
                    now_ms = (time.monotonic() - zero) * 1000.0
                    due, _ = clock.due(now_ms)
                    for r in due:
                        t = threading.Thread(target=one, args=(r,), name=f"hetsched-request-{r}", daemon=True)
                        t.start()
                        threads.append(t)
                    if not clock.pending and len(results) == len(threads):
                        break
                    nxt = clock.next_ms()
                    cond.wait(1.0 if nxt is None else max(0.0, (nxt - now_ms) / 1000.0))
            for t in threads:
                t.join()
        finally:
            hold.finish()
        with self._dev:
            start_mb, changes = self._vram_since(zero, time.monotonic())
        nodes: dict[str, NodeTrace] = {}
        failure: Infeasibility | None = None
        used_device = False
        for r in sorted(results):
            req, res = results[r]
            if failure is None and not res.trace.feasible:
                failure = res.trace.infeasibility
            if req is None:
                continue
            used_device = used_device or req._used_device
            off = (req.t0 - zero) * 1000.0
            for n, nt in res.trace.nodes.items():
                cid = instance_id(n, r)
                nodes[cid] = NodeTrace(node=cid, tool=nt.tool, placement=nt.placement, ready_ms=nt.ready_ms + off,
                                       admitted_ms=nt.admitted_ms + off, start_ms=nt.start_ms + off,
                                       end_ms=nt.end_ms + off, load_ms=nt.load_ms)
        notes = (STANDIN_NOTE,) if used_device and self.device is not None and \
            self.device.kind is DeviceKind.STANDIN else ()
        timeline = vram_steps([((t - zero) * 1000.0, d) for t, d in changes], start_mb, _EPS_MB)
        if failure is not None or not nodes:
            trace = Trace.refused(composite, failure or Infeasibility(InfeasibleKind.TOOL_ERROR, "no request ran"),
                                  vram_budget_mb=budget, executor=self.name, nodes=nodes, vram_timeline=timeline,
                                  notes=notes)
        else:
            trace = Trace(mapping=composite, feasible=True, e2e_ms=max(nt.end_ms for nt in nodes.values()),
                          nodes=nodes, vram_timeline=timeline, vram_budget_mb=budget, executor=self.name, notes=notes)
        index = {req.id: r for r, (req, _) in results.items() if req is not None}
        events = list(self.fifo_log)[first_event:] if len(self.fifo_log) < FIFO_LOG_SIZE else []
        enqueued = tuple(instance_id(node, index[rid]) for e, rid, node in events if e == "enqueue" and rid in index)
        loads = {t: n - loads_before.get(t, 0) for t, n in self.resident_loads.items() if n > loads_before.get(t, 0)}
        return WindowRun(trace=trace, release_ms=tuple(clock.sent.get(r) for r in range(clock.count)),
                         end_ms=tuple(request_ends(sc, nodes, clock.count)), enqueued=enqueued,
                         resident_loads=loads, budget_mb=budget)

    def run_workload(self, mapping: Mapping, workload: Workload, seed: int | None = 0) -> Trace:
        """Run ``workload``'s window of requests for real under one mapping (:meth:`run_window`) and
        return the window's ``Trace`` (``load``, ``requests``; ``e2e_ms`` the p95 latency), as every
        executor builds it. ``seed`` is unused: times are real. A mapping that cannot serve a window
        is refused before anything runs."""
        return run_workload(self, mapping, workload)


class Request:
    """One request in flight on an :class:`InProcessExecutor` (see :meth:`InProcessExecutor.begin`)."""

    def __init__(self, ex: InProcessExecutor, mapping: Mapping, seed: int | None) -> None:
        self.ex, self.mapping, self.seed = ex, mapping, seed
        sc = ex.scenario
        self.sc, self.wf = sc, sc.workflow
        self.budget = sc.machine.vram_budget_mb
        self.now_tools = sc.gpu_now_tools(mapping)
        self.id = ex._next_id()
        """This request's number on the executor (in order of :meth:`InProcessExecutor.begin`)."""
        self.gpu = any(mapping[n].on_gpu for n in self.wf.node_ids)
        """True when a node of the request is placed on the GPU (it then shares the device's state)."""
        now_mb = sum(sc.cards[t].vram_mb for t in self.now_tools)
        queued_mb = max((sc.cards[self.wf.tool_of[n]].vram_mb for n in self.wf.node_ids
                         if mapping[n] is Placement.GPU_QUEUE), default=0.0)
        self.alone = self.gpu and queued_mb > 0 and now_mb + queued_mb > self.budget + _EPS_MB
        """True when a queued node does not fit beside the request's resident tools: the request runs
        with no other GPU request in flight (``load_infeasibility``'s rule), under the one-request rules."""
        # a gpu_now tool may be evicted (only) once each of its nodes has run once and no call of it is
        # in flight; a node run again after an eviction (a loop, a fan-out) loads it through the FIFO
        self._now_pending = {t: set() for t in self.now_tools}  # type: dict[str, set[str]]
        for n in self.wf.node_ids:
            if mapping[n] is Placement.GPU_NOW:
                self._now_pending[self.wf.tool_of[n]].add(n)
        self._now_inflight = {t: 0 for t in self.now_tools}
        self._now_handles = ex.resident  # shared with the executor: resident across requests
        self._registered = False
        self._holder = False  # holds the resident tools for a window (runs no node; not a failure)
        self._nodes: dict[str, NodeTrace] = {}
        self._nodes_lock = threading.Lock()
        self.failure: Infeasibility | None = None
        """Why the request failed (the first failure), or None."""
        self.setup_ms = 0.0
        """Time spent loading the gpu_now tools before t = 0 (waiting for them to fit included), ms."""
        self.start_wait_ms = 0.0
        """Of :attr:`setup_ms`, the time spent waiting for this request's turn on the device, ms."""
        self.t0 = time.monotonic()
        self._started = False
        self._finished: Trace | None = None
        self._used_device = False

    def _ms(self, t: float) -> float:
        return (t - self.t0) * 1000.0

    def _fail(self, kind: InfeasibleKind, detail: str) -> None:
        with self.ex._dev:
            if self.failure is None:
                self.failure = Infeasibility(kind, detail)
            self.ex._dev.notify_all()

    def start(self) -> bool:
        """Static check, then load the CPU handles and the gpu_now tools (outside the E2E); t = 0 is set
        after. False when the request cannot run (:attr:`failure` says why).

        Requests overlap (see the module docstring): a request with GPU nodes starts in arrival order
        once the GPU requests in flight place the same tools ``gpu_now`` (or none is in flight), and,
        when it must load a tool, once that tool fits beside what is held."""
        if self._started:
            return self.failure is None
        self._started = True
        static = self.sc.infeasibility(self.mapping)
        if static is not None:
            self.failure = static
            return False
        gpu_nodes = [n for n in self.wf.node_ids if self.mapping[n].on_gpu]
        begin = time.monotonic()
        if gpu_nodes and self.ex.device is None:
            self.failure = Infeasibility(InfeasibleKind.UNAVAILABLE, f"nodes {gpu_nodes} are placed on the GPU, but "
                                         "this executor has no GPU device (device=none)")
            return False
        ex = self.ex
        try:
            with ex._dev:  # moved off gpu_now and used by no request in flight: unloaded before anything loads
                ex._drop_unused(keep=self.now_tools)
            for n in self.wf.node_ids:
                if self.mapping[n] is Placement.CPU:
                    ex.cpu_handle(self.wf.tool_of[n])
            for tool in {*self.now_tools, *(self.wf.tool_of[n] for n in gpu_nodes)}:
                ex.prepare(tool)
            if not self.gpu:
                with ex._dev:
                    ex._inflight.append(self)
                    self._registered = True
            else:
                self._used_device = bool(self.now_tools)
                mine = self._enter_device()
                self._load_resident(mine)
        except Exception as exc:  # a tool's load failing is the request's failure, typed
            if self.failure is None:
                self.failure = Infeasibility(_kind_of(exc), f"loading the tools failed: {type(exc).__name__}: {exc}")
            return False
        self.t0 = time.monotonic()
        self.setup_ms = (self.t0 - begin) * 1000.0
        return True

    def _enter_device(self) -> list[str]:
        """Wait for this request's turn on the device (arrival order) and register it; returns the
        resident tools it must load itself (their VRAM reserved)."""
        ex = self.ex
        ticket = object()
        cards = self.sc.cards
        missing: list[str] = []
        need = 0.0
        begin = time.monotonic()
        with ex._dev:
            ex._start_fifo.append(ticket)
            try:
                while True:
                    if ex._start_fifo[0] is ticket and ex._may_join(self):
                        ex._drop_unused(keep=self.now_tools)
                        missing = [t for t in self.now_tools if t not in ex.resident and t not in ex._loading]
                        need = sum(cards[t].vram_mb for t in missing)
                        if not need:
                            break
                        if not ex._node_fifo:
                            if ex._held_mb + need <= self.budget + _EPS_MB:
                                break
                            if ex._evict_one(keep=self.now_tools):
                                continue
                    ex._dev.wait(0.5)
            except BaseException:
                ex._start_fifo.remove(ticket)
                ex._dev.notify_all()
                raise
            ex._start_fifo.popleft()
            self.start_wait_ms = (time.monotonic() - begin) * 1000.0
            if need:
                ex._change(need)
                ex._loading.update(missing)
            for t in self.now_tools:
                ex._users[t] = ex._users.get(t, 0) + 1
            ex._inflight.append(self)
            self._registered = True
            ex._dev.notify_all()
        return missing

    def _load_resident(self, mine: list[str]) -> None:
        """Load the resident tools this request reserved, and wait for those another request loads."""
        ex = self.ex
        assert ex.device is not None
        for i, tool in enumerate(mine):
            try:
                handle = ex.tools[tool].load(ex.device)
            except BaseException:
                with ex._dev:
                    for t in mine[i:]:
                        ex._loading.discard(t)
                        ex._change(-self.sc.cards[t].vram_mb)
                    ex._dev.notify_all()
                raise
            with ex._dev:
                ex.resident[tool] = handle
                ex._loading.discard(tool)
                ex.resident_loads[tool] = ex.resident_loads.get(tool, 0) + 1
                ex._dev.notify_all()
        with ex._dev:
            while any(t in ex._loading for t in self.now_tools):
                ex._dev.wait(0.5)
            lost = [t for t in self.now_tools if t not in ex.resident]
        if lost:
            raise HetschedError(f"gpu_now tools {lost} failed to load in another request")

    def run_node(self, node: str, inputs: Sequence[Any]) -> Any:
        """Run one node's tool at its placement in this request (thread-safe); return its output.

        A tool that raises fails the request and raises :class:`ToolError` (its exception as cause)."""
        if node not in self.wf.tool_of:
            raise InputError(f"node {node!r} is not in workflow {self.sc.name!r}; nodes: {list(self.wf.node_ids)}")
        if not self.start():
            raise ToolError(f"the request cannot run: {self.failure}", node=node, tool=self.wf.tool_of[node])
        if self._finished is not None:
            raise InputError(f"node {node!r}: the request has finished")
        tool_name = self.wf.tool_of[node]
        tool = self.ex.tools[tool_name]
        p = self.mapping[node]
        label = f"node {node!r} ({tool_name}, {p.value})"
        ready = time.monotonic()
        load_ms = 0.0
        try:
            if p is Placement.CPU:
                admitted = start = time.monotonic()
                out = tool.run(self.ex.cpu_handle(tool_name), inputs)
                end = time.monotonic()
            elif p is Placement.GPU_NOW and self._now_enter(tool_name):
                self._used_device = True
                admitted = start = time.monotonic()
                try:
                    with self.ex.on_device():
                        out = tool.run(self._now_handles[tool_name], inputs)
                    end = time.monotonic()
                finally:
                    self._now_leave(tool_name, node)
            else:  # gpu_queue (or a gpu_now tool already released: loaded again through the FIFO)
                self._used_device = True
                need = self.sc.cards[tool_name].vram_mb
                self.ex.prepare(tool_name)
                admitted = self._admit(need, node, label)
                try:
                    assert self.ex.device is not None
                    handle = tool.load(self.ex.device)
                    start = time.monotonic()
                    load_ms = (start - admitted) * 1000.0
                    try:
                        with self.ex.on_device():
                            out = tool.run(handle, inputs)
                        end = time.monotonic()
                    finally:
                        tool.unload(handle)
                finally:
                    self._release(need)
        except ToolError:
            raise
        except Exception as exc:
            self._fail(_kind_of(exc), f"{label} raised {type(exc).__name__}: {exc}")
            raise ToolError(f"{label} raised {type(exc).__name__}: {exc}", node=node, tool=tool_name,
                            error=exc) from exc
        self._record(NodeTrace(node=node, tool=tool_name, placement=p, ready_ms=self._ms(ready),
                               admitted_ms=self._ms(admitted), start_ms=self._ms(start), end_ms=self._ms(end),
                               load_ms=load_ms))
        return out

    def _record(self, nt: NodeTrace) -> None:
        with self._nodes_lock:
            old = self._nodes.get(nt.node)
            if old is not None:  # a node run again in one request (a loop): one span, first start to last end
                nt = NodeTrace(node=nt.node, tool=nt.tool, placement=nt.placement, ready_ms=old.ready_ms,
                               admitted_ms=old.admitted_ms, start_ms=old.start_ms, end_ms=max(old.end_ms, nt.end_ms),
                               load_ms=old.load_ms + nt.load_ms)
            self._nodes[nt.node] = nt

    def _now_enter(self, tool: str) -> bool:
        """Start a call of a resident gpu_now tool; False when it was already released (queue it instead)."""
        with self.ex._dev:
            if tool not in self._now_handles or tool in self.ex._loading:
                return False
            self._now_inflight[tool] += 1
            return True

    def _now_leave(self, tool: str, node: str) -> None:
        with self.ex._dev:
            self._now_inflight[tool] -= 1
            self._now_pending[tool].discard(node)
            self.ex._dev.notify_all()  # it may have become evictable for a queued node

    def _admit(self, need: float, node: str, label: str) -> float:
        """Wait in the device's one FIFO queue (every request's queued nodes) until ``need`` fits."""
        ex = self.ex
        ticket = object()
        with ex._dev:
            ex._node_fifo.append(ticket)
            ex.fifo_log.append(("enqueue", self.id, node))
            try:
                while ex._node_fifo[0] is not ticket or ex._held_mb + need > self.budget + _EPS_MB:
                    if self.failure is not None:
                        raise ToolError(f"{label}: the request failed while it waited in the gpu_queue: "
                                        f"{self.failure}", node=node)
                    # a request alone on the device follows the one-request rule: a resident tool whose
                    # nodes have run makes room (where the model releases it); under load it stays
                    if ex._node_fifo[0] is ticket and ex._alone(self) and ex._evict_one():
                        continue
                    ex._dev.wait(0.5)
            except BaseException:
                ex._node_fifo.remove(ticket)
                ex._dev.notify_all()
                raise
            ex._node_fifo.popleft()
            ex._change(need)
            ex.fifo_log.append(("admit", self.id, node))
            ex._dev.notify_all()
            return time.monotonic()

    def _release(self, need: float) -> None:
        with self.ex._dev:
            self.ex._change(-need)
            self.ex._dev.notify_all()

    def fail(self, reason: str, kind: InfeasibleKind = InfeasibleKind.TOOL_ERROR) -> None:
        """Mark the request failed: by default a tool error outside :meth:`run_node` (e.g. in the caller's own
        code); ``InfeasibleKind.ABANDONED`` when its driver went away (the session ends it)."""
        self._fail(kind, reason)

    def finish(self) -> Trace:
        """End the request and return its trace (idempotent). Its gpu_now tools stay resident for the
        next requests, unless the request failed (then they are unloaded once no request in flight
        uses them: their state may be damaged)."""
        if self._finished is not None:
            return self._finished
        ex = self.ex
        end = time.monotonic()
        with ex._dev:
            if self._registered:
                self._registered = False
                ex._inflight.remove(self)
                for t in self.now_tools:
                    ex._users[t] -= 1
                if self.failure is not None or (not self._nodes and not self._holder):
                    ex._damaged.update(t for t in self.now_tools if t in ex.resident)
            for tool in [t for t in ex._damaged if not ex._users.get(t)]:
                ex._damaged.discard(tool)
                if tool not in ex.resident:
                    continue
                try:
                    ex._unload(tool)
                except Exception as exc:  # recorded as the request's failure
                    if self.failure is None:
                        self.failure = Infeasibility(InfeasibleKind.TOOL_ERROR,
                                                     f"unloading {tool} failed: {type(exc).__name__}: {exc}")
            start_mb, changes = ex._vram_since(self.t0, end)
            ex._trim_log()
            ex._dev.notify_all()
        notes = (STANDIN_NOTE,) if self._used_device and ex.device is not None and \
            ex.device.kind is DeviceKind.STANDIN else ()
        timeline = vram_steps([(self._ms(t), d) for t, d in changes], start_mb, _EPS_MB) if self._nodes else ()
        if self.failure is not None or not self._nodes:
            why = self.failure or Infeasibility(InfeasibleKind.TOOL_ERROR, "no node ran in the request")
            trace = Trace.refused(self.mapping, why, vram_budget_mb=self.budget, seed=self.seed,
                                  executor=ex.name, nodes=dict(self._nodes), vram_timeline=timeline,
                                  notes=notes)
        else:
            # every node precedes a sink, so this is the sinks' end; in a request driven node by node
            # (branches not taken) it is the end of the last node that ran
            ends = [nt.end_ms for nt in self._nodes.values()]
            trace = Trace(mapping=self.mapping, feasible=True, e2e_ms=max(ends), nodes=dict(self._nodes),
                          vram_timeline=timeline, vram_budget_mb=self.budget, seed=self.seed,
                          executor=ex.name, notes=notes)
        self._finished = trace
        return trace
