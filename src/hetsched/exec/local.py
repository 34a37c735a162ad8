"""The local executor: runs a workflow under a mapping for real on this machine and returns the
same :class:`~hetsched.model.Trace` as the simulator, from real clocks.

- Tools are real (``hetsched.tools``): CPU nodes run in the CPU pool, a worker process with
  ``cpu_threads`` threads (default: the scenario's ``machine.cpu_cores``, at most the cores
  available); GPU nodes run in a device worker process on CUDA, or, without CUDA, on the
  stand-in device (a worker process with its own thread budget whose weights are really
  allocated and whose memory is really measured; every trace that used it says so).
- ``gpu_now`` tools are loaded before the round starts (outside the E2E) and stay resident until
  their last node ends; ``gpu_queue`` nodes wait in one FIFO queue until their card's memory fits
  beside what is held, then load, run and unload (their load is inside the E2E). Admission uses
  the cards' ``vram_mb``; the device's measured memory is watched against the budget (plus
  a slack, see :meth:`LocalExecutor.memory_limit_mb`), and going over ends the round as an OOM.
- Outputs flow along the DAG's edges: a node's inputs are its predecessors' outputs; an output
  stays on its device for successors there and is copied (pickled) to the other device.
- A tool that raises, a CUDA OOM, a worker that dies or a node past its time limit ends the round
  as ``Trace.refused(...)`` with its typed reason and the nodes that finished; the executor frees
  what the round held (unloads, or restarts a worker that cannot be interrupted) and the next
  round runs normally.

Under load (:meth:`LocalExecutor.run_window`, :mod:`hetsched.exec.window`) a window of
overlapping requests runs as one round of the composite workflow (``{node}@{request}``): requests
are released by their arrival plan (open loop: at their times; closed loop: when the request they
follow returns), share both workers, the ``gpu_now`` tools (loaded once before the window, resident
until their last node of any request; concurrent calls to one run concurrently on the device
worker's threads, time-sharing its cores) and the one FIFO queue.

The VRAM timeline is the admission accounting: resident ``gpu_now`` tools from t = 0 until
their last node ends, each admitted queued node from its admission until its end (the queue
does not admit anything new before the unload has really happened).

Imports the model, the tool registry and the worker processes; never policies or the loop.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing.connection as mpc
import pickle
import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.exec.base import ClosingExecutor
from hetsched.exec.devices import CorePlan, available_cores, describe_cpu, describe_device, plan_cores, resolve_device
from hetsched.exec.toolset import default_size, node_timeout_s, scenario_tools
from hetsched.exec.window import (
    Admission,
    ReleaseClock,
    WindowRun,
    instance_id,
    request_ends,
    run_workload,
    split_id,
    window_mapping,
    window_scenario,
)
from hetsched.exec.worker import Reply, Worker, WorkerError, tool_bytes
from hetsched.model import (
    Infeasibility,
    InfeasibleKind,
    InputError,
    Mapping,
    NodeTrace,
    Placement,
    Scenario,
    Trace,
    VramPoint,
)
from hetsched.model.trace import vram_steps
from hetsched.model.workload import Workload
from hetsched.tools.base import Device, DeviceKind, Tool, check_size
from hetsched.tools.registry import import_tool_modules

_EPS_MB = 1e-6
DEVICE_SAMPLE_MS = 5.0
"""How often the device worker samples its memory for the watch, ms (each sample costs ~0.1 ms)."""
MEMORY_SLACK_FLOOR_MB = 16.0
"""The least slack of the measured-memory watch, MB (see :meth:`LocalExecutor.memory_limit_mb`)."""
PREPARE_TIMEOUT_S = 900.0
"""Time limit of a tool's one-time preparation in a fresh worker (imports, downloads), seconds."""
CONTROL_TIMEOUT_S = 60.0
"""Time limit of the executor's own requests to a worker (round start and end, memory figures), seconds."""


@dataclass(frozen=True)
class _Task:
    """A request in flight: which node, on which worker, until when."""

    node: str
    worker: str
    deadline: float
    kind: str  # run | queue_run | unload


class LocalExecutor(ClosingExecutor):
    """Runs rounds of a scenario for real on this machine (see the module docstring).

    Args:
        scenario: the scenario; each of its tools must be registered (``hetsched.tools``).
        device: where GPU placements run: ``auto`` (CUDA when torch sees a GPU, else the stand-in
            device), ``cuda``/``cuda:N``, ``standin``, or ``none`` (GPU placements are refused).
        size: tool size preset (``tiny``/``full``); default: the cards' ``provenance.preset``,
            else full on CUDA and tiny elsewhere.
        cpu_threads: threads of the CPU pool (default: ``machine.cpu_cores``, at most the cores
            available).
        device_threads: threads of the stand-in device (default 1).
        timeout_s: time limit of every node; default: ``timeout_factor`` x its card latency
            (load included for ``gpu_queue``), at least ``min_timeout_s``.
        memory_slack: how far (share of the budget, at least ``MEMORY_SLACK_FLOOR_MB``) the device's
            measured memory may exceed the budget before the round is an OOM.
        check_memory: watch the device's measured memory at all.
        tool_modules: modules to import first (they register the user's tools).
        pin: pin the CPU pool and the stand-in device to separate cores when there are enough.
    """

    name = "local"

    def __init__(
        self,
        scenario: Scenario,
        *,
        device: str = "auto",
        size: str | None = None,
        cpu_threads: int | None = None,
        device_threads: int | None = None,
        timeout_s: float | None = None,
        timeout_factor: float = 10.0,
        min_timeout_s: float = 30.0,
        memory_slack: float = 0.25,
        check_memory: bool = True,
        tool_modules: Sequence[str] = (),
        pin: bool = True,
    ) -> None:
        if timeout_s is not None and timeout_s <= 0:
            raise InputError(f"executor 'local': timeout_s must be > 0, got {timeout_s}")
        if memory_slack < 0:
            raise InputError(f"executor 'local': memory_slack must be >= 0, got {memory_slack}")
        self.scenario = scenario
        import_tool_modules(list(tool_modules))
        self._asked_cpu = cpu_threads
        threads = cpu_threads if cpu_threads is not None else min(scenario.machine.cpu_cores, len(available_cores()))
        self.plan: CorePlan = plan_cores(threads, device_threads, pin=pin)
        """How the CPU pool and the stand-in device share the cores."""
        self.device: Device | None = resolve_device(device, self.plan.device_threads)
        """Where GPU placements run (None: nowhere)."""
        cuda = self.device is not None and self.device.kind is DeviceKind.CUDA
        self.size = check_size(size) if size is not None else default_size(scenario, cuda)
        """The tools' size preset."""
        self.timeout_s, self.timeout_factor, self.min_timeout_s = timeout_s, timeout_factor, min_timeout_s
        self.memory_slack, self.check_memory = memory_slack, check_memory
        self.tools: dict[str, Tool] = scenario_tools(scenario, self.size)
        """The scenario's tools, by name."""
        self._bytes = {name: tool_bytes(tool) for name, tool in self.tools.items()}
        cpu_cores = self.plan.cpu_cores
        # the CPU pool's memory is nobody's budget: no sampler thread competes with its tools
        self.cpu = Worker(Device(DeviceKind.CPU, 0, self.plan.cpu_threads), cpu_cores, "CPU pool", sample_ms=0.0)
        """The CPU pool's worker process (started on first use)."""
        self.gpu: Worker | None = None
        """The device's worker process (None without a device; started on first use)."""
        if self.device is not None:
            cores = self.plan.device_cores if self.device.kind is DeviceKind.STANDIN else None
            label = "stand-in device" if self.device.kind is DeviceKind.STANDIN else self.device.label
            self.gpu = Worker(self.device, cores, label, sample_ms=DEVICE_SAMPLE_MS)
        self._unprepared: dict[tuple[str, str], str] = {}
        self._cold: set[tuple[str, str]] = set()  # (worker, tool) whose warm-up ran past its time limit
        self._cpu_loaded: set[str] = set()
        self.last_outputs: dict[str, Any] = {}
        """Outputs of the sink nodes of the last round that finished."""
        self.last_t0: float | None = None
        """``time.monotonic()`` at the start (t = 0) of the last round that started."""
        self.last_measured_peak_mb: float | None = None
        """Peak device memory measured during the last round that used the device (above its idle level), MB."""
        self._finalizer = weakref.finalize(self, _close_workers, [self.cpu, self.gpu])

    # ------------------------------------------------------------------ description
    def describe(self) -> list[str]:
        """What the executor runs on, one line each (for the CLI)."""
        lines = [f"CPU pool: {describe_cpu(self.plan.cpu_threads, self.plan)}",
                 f"GPU placements: {describe_device(self.device, self.plan)}",
                 f"tools: size preset {self.size}"]
        asked = self._asked_cpu or self.scenario.machine.cpu_cores
        if asked > self.plan.cpu_threads:
            lines.append(f"the scenario's machine has {asked} CPU cores; this machine gives the CPU pool "
                         f"{self.plan.cpu_threads}")
        return lines

    def _notes(self, used_device: bool) -> tuple[str, ...]:
        notes: list[str] = []
        asked = self._asked_cpu or self.scenario.machine.cpu_cores
        if asked > self.plan.cpu_threads:
            notes.append(f"the scenario's machine has {asked} CPU cores; the CPU pool here has {self.plan.cpu_threads}")
        kind = self.device.kind.value if used_device and self.device is not None else None
        measured = (kind, self.size)
        other = sorted(t for t, c in self.scenario.cards.items()
                       if c.has_gpu and kind is not None and (c.provenance.device, c.provenance.preset) != measured)
        if other:
            notes.append(f"the cards of {other} were not measured with this executor's tools and device ({self.size} "
                         f"on {kind}): the simulator's predictions from them describe something else")
        if used_device and self.device is not None and self.device.kind is DeviceKind.STANDIN:
            notes.append("GPU placements ran on a stand-in device (a worker process on CPU cores, not a GPU): its "
                         "times and memory are real measurements of CPU cores and host memory")
            if self.plan.shared:
                notes.append(f"the stand-in device shares CPU cores with the CPU pool ({self.plan.available} cores "
                             f"available, {self.plan.cpu_threads} + {self.plan.device_threads} asked)")
        return tuple(notes)

    def memory_limit_mb(self) -> float:
        """Measured device memory beyond which a round is an OOM: the budget plus
        max(``memory_slack`` x budget, ``MEMORY_SLACK_FLOOR_MB``). The slack covers what no card
        holds: transient allocations, and the per-thread caches math libraries keep (MKL buffers on
        the CPU, cuBLAS workspaces on a GPU), which grow when a new thread first runs a tool."""
        budget = self.scenario.machine.vram_budget_mb
        return budget + max(self.memory_slack * budget, MEMORY_SLACK_FLOOR_MB)

    # ------------------------------------------------------------------ life cycle
    def close(self) -> None:
        """Stop both worker processes (idempotent)."""
        self._finalizer()

    def start(self) -> None:
        """Start (and prepare) the worker processes now instead of at the first round."""
        self._ensure(self.cpu)
        if self.gpu is not None:
            self._ensure(self.gpu)

    def _ensure(self, worker: Worker) -> None:
        """Start ``worker`` if it is not running and prepare its tools, one call each, each bounded:
        ``prepare`` (imports, one-time set-up) by ``PREPARE_TIMEOUT_S``, the warm-up call (load, run
        once, unload) by the tool's time limit. A tool whose warm-up ran past it is not warmed again
        (the round that runs it meets the node's own time limit); the worker is killed and the
        WorkerError (kind ``timeout``) refuses this round. A worker that dies raises WorkerError
        (kind ``tool_error``, saying the signal or exit code), and that tool is not warmed up again
        either."""
        if worker.alive:
            return
        worker.start()
        if worker is self.cpu:
            self._cpu_loaded.clear()
            names = list(self._bytes)
        else:
            names = [n for n in self._bytes if self.tools[n].has_gpu]
        for name in names:
            self._prepare_one(worker, name)

    def _prepare_one(self, worker: Worker, name: str) -> None:
        doing = f"preparing tool {name!r} on the {worker.label}"
        try:
            reply = worker.call("prepare", timeout=PREPARE_TIMEOUT_S, tools=[self._bytes[name]], warm=False)
        except WorkerError as exc:
            raise WorkerError(f"{doing}: {exc}", exc.kind) from None
        if not reply.ok:
            worker.kill()
            raise WorkerError(f"{doing} failed: {reply.detail}")
        why = reply.data.get("failed", {}).get(name)
        if why is not None:
            self._unprepared[(worker.label, name)] = why
            return
        if (worker.label, name) in self._cold:
            return
        limit = self.warm_timeout_s(name, worker is self.cpu)
        try:
            worker.call("warm", timeout=limit, tool=self._bytes[name])
        except WorkerError as exc:
            # not warmed up again: a tool that hangs or kills its worker must not keep every round
            # from starting; the round that runs it meets the same fault as a typed node failure
            self._cold.add((worker.label, name))
            if exc.kind is InfeasibleKind.TIMEOUT:
                raise WorkerError(f"warming up tool {name!r} on the {worker.label} (one load and call before the "
                                  f"first round) ran past its time limit of {limit:g} s; the worker was restarted and "
                                  "the tool is not warmed up again", InfeasibleKind.TIMEOUT) from None
            raise WorkerError(f"warming up tool {name!r} on the {worker.label}: {exc}; the tool is not warmed up "
                              "again", exc.kind) from None

    def warm_timeout_s(self, tool: str, cpu: bool) -> float:
        """Time limit of a tool's warm-up call (one load and one call), seconds: its node time limit on
        the CPU, or as a ``gpu_queue`` node (load included) on the device."""
        return self.timeout_of_tool(tool, Placement.CPU if cpu else Placement.GPU_QUEUE)

    def timeout_of_tool(self, tool: str, placement: Placement) -> float:
        """Time limit of a node running ``tool`` on ``placement``, seconds."""
        return node_timeout_s(self.scenario.cards[tool], placement, self.timeout_s, self.timeout_factor,
                              self.min_timeout_s)

    def pids(self) -> list[int]:
        """Process ids of the running workers (for tests and diagnostics)."""
        return [w.pid for w in (self.cpu, self.gpu) if w is not None and w.alive and w.pid is not None]

    # ------------------------------------------------------------------ one round
    def timeout_of(self, node: str, placement: Placement) -> float:
        """Time limit of one node, seconds (:func:`~hetsched.exec.toolset.node_timeout_s`)."""
        return node_timeout_s(self.scenario.card_of(node), placement, self.timeout_s, self.timeout_factor,
                              self.min_timeout_s)

    def run(self, mapping: Mapping, seed: int | None = 0, inputs: dict[str, Any] | None = None) -> Trace:
        """Execute one round for real; infeasible or failed rounds come back refused, with a typed reason.

        ``inputs`` (a request's, ``hs.Session``): source node -> the value its tool receives as its one
        input (pickled to its worker); the sink nodes' outputs are in :attr:`last_outputs` after a
        round that ran."""
        self.last_outputs = {}
        mapping = self.scenario.validate_mapping(mapping)
        refused = self._refusal(mapping)
        if refused is not None:
            return refused
        return _Round(self, mapping, inputs).execute()

    def run_window(self, mapping: Mapping, *, releases_ms: Sequence[float] | None = None, clients: int | None = None,
                   count: int | None = None, think_ms: float = 0.0, clock: ReleaseClock | None = None,
                   inputs: dict[str, Any] | None = None) -> WindowRun:
        """Run a window of overlapping requests for real under one mapping (:mod:`hetsched.exec.window`).

        Requests are released at ``releases_ms`` (open loop, ms from the window's zero), or by
        ``clients`` clients sending ``count`` requests in all, each its next one ``think_ms`` after
        its last returned (closed loop), or as ``clock`` says (a workload's arrival plan). They
        share the CPU pool and the device; each ``gpu_now`` tool is loaded once, before the window,
        and serves every request (concurrent calls run concurrently, one worker thread each, sharing
        the device's threads); ``gpu_queue`` nodes of every request wait in the one FIFO queue. A
        request that fails ends the window (refused trace; the requests that finished keep their
        times). ``inputs``: every request's source inputs.
        """
        self.last_outputs = {}
        mapping = self.scenario.validate_mapping(mapping)
        clock = ReleaseClock.of(clock, releases_ms, clients, count, think_ms)
        refused = self._refusal(mapping)
        if refused is not None:
            return WindowRun(trace=refused, release_ms=(None,) * clock.count, end_ms=(None,) * clock.count,
                             budget_mb=self.scenario.machine.vram_budget_mb)
        window = _Window(self, mapping, clock, inputs)
        trace = window.execute()
        ends = request_ends(self.scenario, trace.nodes, clock.count)
        return WindowRun(trace=trace, release_ms=tuple(clock.sent.get(r) for r in range(clock.count)),
                         end_ms=tuple(ends),
                         enqueued=tuple(window.enqueued), admissions=tuple(window.admissions),
                         resident_loads=dict(window.resident_loads), budget_mb=window.budget)

    def run_workload(self, mapping: Mapping, workload: Workload, seed: int | None = 0) -> Trace:
        """Run ``workload``'s window of requests for real under one mapping (:meth:`run_window`) and
        return the window's ``Trace`` (``load``: its metrics, ``requests``: every request; ``e2e_ms``
        the p95 latency), built as every executor builds it. ``seed`` is unused: times are real.
        A mapping that cannot serve a window (a queued node that does not fit beside the resident
        tools, which serve every request) is refused before anything runs."""
        return run_workload(self, mapping, workload)

    def _refusal(self, mapping: Mapping) -> Trace | None:
        """The refused trace of a validated mapping that cannot run here (static checks, no device,
        a worker that cannot start, a tool that cannot be prepared); None when it can run."""
        sc = self.scenario
        budget = sc.machine.vram_budget_mb
        gpu_nodes = [n for n in sc.workflow.node_ids if mapping[n].on_gpu]

        def refuse(kind: InfeasibleKind, detail: str) -> Trace:
            return Trace.refused(mapping, Infeasibility(kind, detail), vram_budget_mb=budget, executor=self.name,
                                 notes=self._notes(False))

        static = sc.infeasibility(mapping)
        if static is not None:
            return Trace.refused(mapping, static, vram_budget_mb=budget, executor=self.name)
        if gpu_nodes and self.gpu is None:
            return refuse(InfeasibleKind.UNAVAILABLE,
                          f"nodes {gpu_nodes} are placed on the GPU, but this executor has no GPU device "
                          "(device=none, or no CUDA and the stand-in device is off); use device=auto or "
                          "device=standin, or place them on the cpu")
        try:
            if any(not mapping[n].on_gpu for n in sc.workflow.node_ids):
                self._ensure(self.cpu)
            if gpu_nodes and self.gpu is not None:
                self._ensure(self.gpu)
        except WorkerError as exc:
            return refuse(exc.kind, str(exc))
        for n in sc.workflow.node_ids:
            worker = self.gpu if mapping[n].on_gpu else self.cpu
            why = self._unprepared.get((worker.label, sc.workflow.tool_of[n])) if worker is not None else None
            if why is not None:
                return refuse(InfeasibleKind.TOOL_ERROR, f"node {n!r}: tool {sc.workflow.tool_of[n]!r} could not be "
                              f"prepared on the {worker.label}: {why}")  # type: ignore[union-attr]
        return None


def _close_workers(workers: list[Worker | None]) -> None:
    for w in workers:
        if w is not None:
            w.close()


class _Round:
    """One execution of a mapping: the warm phase, the event loop, the cleanup."""

    def __init__(self, ex: LocalExecutor, mapping: Mapping, inputs: dict[str, Any] | None = None,
                 scenario: Scenario | None = None) -> None:
        self.ex, self.mapping = ex, mapping
        self.given = {n: pickle.dumps(v) for n, v in (inputs or {}).items()}  # a source's request input
        sc = scenario if scenario is not None else ex.scenario
        self.sc, self.wf = sc, sc.workflow
        self.budget = sc.machine.vram_budget_mb
        self.workers: dict[str, Worker] = {"cpu": ex.cpu}
        if ex.gpu is not None:
            self.workers["gpu"] = ex.gpu
        self.where = {n: ("gpu" if mapping[n].on_gpu else "cpu") for n in self.wf.node_ids}
        # how many successors on the same worker read a node's output there (it is dropped after the last)
        self.keep = {n: sum(1 for s in self.wf.succs(n) if self.where[s] == self.where[n]) for n in self.wf.node_ids}
        self.export = {n: not self.wf.succs(n) or any(self.where[s] != self.where[n] for s in self.wf.succs(n))
                       for n in self.wf.node_ids}
        self.preds_left = {n: len(self.wf.preds(n)) for n in self.wf.node_ids}
        self.now_tools = sc.gpu_now_tools(mapping)
        self.now_left = {t: 0 for t in self.now_tools}
        for n in self.wf.node_ids:
            if mapping[n] is Placement.GPU_NOW:
                self.now_left[self.wf.tool_of[n]] += 1
        self.t0 = 0.0
        self.ready: dict[str, float] = {}
        self.admitted: dict[str, float] = {}
        self.start: dict[str, float] = {}
        self.end: dict[str, float] = {}
        self.load: dict[str, float] = {}
        self.blobs: dict[str, bytes] = {}
        self.inflight: dict[tuple[str, int], _Task] = {}
        self.fifo: deque[str] = deque()
        self.held_mb = 0.0
        self.vram_events: list[tuple[float, float]] = []
        self.failure: Infeasibility | None = None
        self.broken: set[str] = set()  # workers to restart (cannot be interrupted, or died)
        self.measured_peak: float | None = None
        self.touched_device = False
        self.enqueued: list[str] = []  # gpu_queue nodes in the order they entered the FIFO
        self.admissions: list[Admission] = []  # the accounting's own record of every admission
        self.resident_loads: dict[str, int] = {}  # gpu_now tool -> loads in this round
        self.expected = len(self.wf.node_ids)  # nodes the round runs (a window leaves out requests not sent)

    # -- helpers
    def timeout_of(self, node: str) -> float:
        """Time limit of one node of this round, seconds."""
        ex = self.ex
        return node_timeout_s(self.sc.card_of(node), self.mapping[node], ex.timeout_s, ex.timeout_factor,
                              ex.min_timeout_s)

    def rel_ms(self, t: float) -> float:
        return (t - self.t0) * 1000.0

    def vram(self, tool: str) -> float:
        return self.sc.cards[tool].vram_mb

    def fail(self, kind: InfeasibleKind, detail: str) -> None:
        if self.failure is None:
            self.failure = Infeasibility(kind, detail)

    def running(self) -> list[str]:
        return [t.node for t in self.inflight.values() if t.kind != "unload"]

    def label(self, node: str) -> str:
        return f"node {node!r} ({self.wf.tool_of[node]}, {self.mapping[node].value})"

    # -- warm phase
    def warm(self) -> bool:
        ex = self.ex
        cpu_tools = list(dict.fromkeys(self.wf.tool_of[n] for n in self.wf.node_ids if self.where[n] == "cpu"))
        for tool in cpu_tools:
            if tool in ex._cpu_loaded:
                continue
            reply = ex.cpu.call("load", timeout=ex.timeout_of_tool(tool, Placement.CPU), key=tool, tool=ex._bytes[tool])
            if not reply.ok:
                self.fail(_kind(reply), f"loading {tool} on the CPU pool failed: {reply.detail}")
                return False
            ex._cpu_loaded.add(tool)
        if ex.cpu.alive:
            ex.cpu.call("round_start", timeout=CONTROL_TIMEOUT_S, limit_mb=None, rebase=False)
        self.held_mb = sum(self.vram(t) for t in self.now_tools)
        gpu = self.workers.get("gpu")
        if gpu is None or not gpu.alive or not any(self.mapping[n].on_gpu for n in self.wf.node_ids):
            return True
        limit = ex.memory_limit_mb() if ex.check_memory else None
        self.touched_device = True
        gpu.call("round_start", timeout=CONTROL_TIMEOUT_S, limit_mb=None, rebase=True)
        for tool in self.now_tools:
            reply = gpu.call("load", timeout=ex.timeout_of_tool(tool, Placement.GPU_NOW), key=f"now:{tool}",
                             tool=ex._bytes[tool])
            if not reply.ok:
                self.fail(_kind(reply), f"loading gpu_now tool {tool} on the {gpu.label} failed: {reply.detail}")
                return False
            self.resident_loads[tool] = self.resident_loads.get(tool, 0) + 1
        if limit is not None and self.now_tools:
            used = float(gpu.call("stats", timeout=CONTROL_TIMEOUT_S).data["in_use_mb"])
            if used > limit + _EPS_MB:
                self.fail(InfeasibleKind.OOM, f"the gpu_now tools {list(self.now_tools)} measure {used:.1f} MB on the "
                          f"{gpu.label} after loading, over the {self.budget:g} MB budget (limit {limit:.1f} MB with "
                          "slack): their cards under-state their memory")
                return False
        gpu.call("round_start", timeout=CONTROL_TIMEOUT_S, limit_mb=limit, rebase=False)
        return True

    # -- dispatch
    def inputs_for(self, node: str) -> list[tuple[str, Any]]:
        if node in self.given and not self.wf.preds(node):
            return [("val", self.given[node])]
        specs: list[tuple[str, Any]] = []
        for p in self.wf.preds(node):
            if self.where[p] == self.where[node] and self.keep[p]:
                specs.append(("ref", p))
            else:
                specs.append(("val", self.blobs[p]))
        return specs

    def submit(self, worker: str, task_node: str, kind: str, **args: Any) -> None:
        w = self.workers[worker]
        node = task_node
        try:
            req = w.submit(kind, **args)
        except WorkerError as exc:
            self.broken.add(worker)
            self.fail(InfeasibleKind.TOOL_ERROR, f"{self.label(node)}: {exc}")
            return
        timeout = self.timeout_of(node) if kind != "unload" else 60.0
        self.inflight[(worker, req)] = _Task(node, worker, time.monotonic() + timeout, kind)

    def dispatch(self, node: str, now: float) -> None:
        self.ready[node] = now
        tool = self.wf.tool_of[node]
        p = self.mapping[node]
        if p is Placement.GPU_QUEUE:
            self.fifo.append(node)
            self.enqueued.append(node)
            self.admit(now)
            return
        self.admitted[node] = now
        key = tool if p is Placement.CPU else f"now:{tool}"
        self.submit(self.where[node], node, "run", key=key, node=node, inputs=self.inputs_for(node),
                    keep=self.keep[node], export=self.export[node])

    def admit(self, now: float) -> None:
        while self.fifo and self.failure is None:
            head = self.fifo[0]
            need = self.sc.card_of(head).vram_mb
            if self.held_mb + need > self.budget + _EPS_MB:
                return
            self.fifo.popleft()
            self.held_mb += need
            self.admissions.append(Admission(self.rel_ms(now), head, self.held_mb))
            self.admitted[head] = now
            self.vram_events.append((self.rel_ms(now), need))
            tool = self.wf.tool_of[head]
            self.submit("gpu", head, "queue_run", key=f"q:{head}", tool=self.ex._bytes[tool], node=head,
                        inputs=self.inputs_for(head), keep=self.keep[head], export=self.export[head])

    # -- replies
    def on_reply(self, worker: str, reply: Reply) -> None:
        if reply.req_id is None:
            if reply.kind == "oom":
                used, limit = reply.data.get("used_mb", 0.0), reply.data.get("limit_mb") or self.budget
                self.broken.add(worker)
                self.fail(InfeasibleKind.OOM, f"measured {self.workers[worker].label} memory reached {used:.1f} MB, "
                          f"over the {self.budget:g} MB budget (limit {limit:.1f} MB with slack) while nodes "
                          f"{sorted(self.running())} ran: the cards under-state their memory")
            elif reply.kind == "died":
                self.broken.add(worker)
                lost = sorted(t.node for t in self.inflight.values() if t.worker == worker)
                for key in [k for k, t in self.inflight.items() if t.worker == worker]:
                    del self.inflight[key]
                self.fail(InfeasibleKind.TOOL_ERROR, f"{reply.detail} while running nodes {lost}")
            return
        task = self.inflight.pop((worker, reply.req_id), None)
        if task is None:
            return
        now = time.monotonic()
        node = task.node
        if task.kind == "unload":
            tool = self.wf.tool_of[node]
            self.held_mb -= self.vram(tool)
            if not reply.ok:
                self.fail(InfeasibleKind.TOOL_ERROR, f"unloading {tool} failed: {reply.detail}")
            self.admit(now)
            return
        if not reply.ok:
            where = self.workers[worker].label
            self.fail(_kind(reply), f"{self.label(node)} failed on the {where}: {reply.detail}")
            if task.kind == "queue_run":
                self.held_mb -= self.sc.card_of(node).vram_mb  # its command unloads whatever it loaded
            return
        data = reply.data
        self.start[node], self.end[node] = data["start"], data["end"]
        if task.kind == "queue_run":
            self.load[node] = data["load_ms"]
        if data.get("output") is not None:
            self.blobs[node] = data["output"]
        tool = self.wf.tool_of[node]
        p = self.mapping[node]
        if p is Placement.GPU_NOW:
            self.now_left[tool] -= 1
            if self.now_left[tool] == 0:
                self.unload_resident(tool, node, data["end"])
        elif p is Placement.GPU_QUEUE:
            need = self.sc.card_of(node).vram_mb
            self.held_mb -= need
            self.vram_events.append((self.rel_ms(data["end"]), -need))
        if self.failure is not None:
            return
        for s in self.wf.succs(node):
            self.preds_left[s] -= 1
            if self.preds_left[s] == 0:
                self.dispatch(s, now)
        self.node_done(node, now)
        self.admit(now)

    def node_done(self, node: str, now: float) -> None:
        """A node ended and its successors were dispatched (a window releases requests here)."""

    def unload_resident(self, tool: str, node: str, when: float) -> None:
        """A resident tool's last ``gpu_now`` node (``node``) has ended at ``when``: unload it."""
        self.vram_events.append((self.rel_ms(when), -self.vram(tool)))
        self.submit("gpu", node, "unload", key=f"now:{tool}")

    def receive(self, timeout: float) -> None:
        # a started worker that died still answers once: a "died" reply, from the end of its pipe
        live = {name: w for name, w in self.workers.items() if w.started or w.inbox}
        if not any(w.inbox for w in live.values()):
            conns = [w.connection for w in live.values() if w.connection is not None]
            if not conns:
                time.sleep(timeout)  # nothing to hear from: wait for the next release
                return
            mpc.wait(conns, timeout=timeout)
        for name, w in live.items():
            for reply in w.receive():
                self.on_reply(name, reply)

    def check_deadlines(self) -> None:
        now = time.monotonic()
        for key, task in list(self.inflight.items()):
            if now > task.deadline:
                del self.inflight[key]
                self.broken.add(task.worker)
                limit = self.timeout_of(task.node)
                what = f"unloading {self.wf.tool_of[task.node]}" if task.kind == "unload" else self.label(task.node)
                self.fail(InfeasibleKind.TIMEOUT, f"{what} ran past its time limit of {limit:g} s on the "
                          f"{self.workers[task.worker].label}")
                for other in [k for k, t in self.inflight.items() if t.worker == task.worker]:
                    del self.inflight[other]  # that worker is restarted: nothing more comes from it

    def wait_step(self) -> None:
        deadline = min((t.deadline for t in self.inflight.values()), default=time.monotonic() + 1.0)
        deadline = min(deadline, self.next_release())
        self.receive(max(0.0, min(1.0, deadline - time.monotonic())))
        self.check_deadlines()
        self.release_due()

    # -- releases (one request here; a window releases several over time)
    def begin(self) -> None:
        """Dispatch what starts at t = 0: the sources."""
        for n in self.wf.sources:
            self.dispatch(n, self.t0)

    def next_release(self) -> float:
        """``time.monotonic()`` of the next scheduled release (inf: none)."""
        return math.inf

    def release_due(self) -> None:
        """Dispatch the requests whose release time has come."""

    def waiting(self) -> bool:
        """True while nothing runs but a scheduled release will bring work."""
        return False

    # -- the round
    def execute(self) -> Trace:
        ex = self.ex
        try:
            try:
                warmed = self.warm()
            except WorkerError as exc:  # a worker died or stopped answering while loading
                self.broken |= {name for name, w in self.workers.items() if w.started and not w.alive}
                self.fail(exc.kind, f"before the round started: {exc}")
                warmed = False
            if warmed:
                self.t0 = ex.last_t0 = time.monotonic()
                self.begin()
                while self.failure is None and len(self.end) < self.expected:
                    if not self.inflight and not self.waiting():
                        self.deadlock()
                        break
                    self.wait_step()
            # drain: nothing new starts; what runs finishes (or times out), unloads are acknowledged
            while self.inflight:
                for name in list(self.broken):
                    for key in [k for k, t in self.inflight.items() if t.worker == name]:
                        del self.inflight[key]
                if self.inflight:
                    self.wait_step()
        except BaseException:
            # Ctrl-C (or a bug) mid-round: stop the workers now; a later round starts them again
            for w in self.workers.values():
                w.kill()
            ex._cpu_loaded.clear()
            raise
        self.cleanup()
        return self.trace()

    def deadlock(self) -> None:
        head = self.fifo[0] if self.fifo else None
        if head is None:
            self.fail(InfeasibleKind.DEADLOCK, "stalled: no node can run and none is queued")
            return
        holders = [t for t, k in self.now_left.items() if k > 0]
        need = self.sc.card_of(head).vram_mb
        self.fail(InfeasibleKind.DEADLOCK, f"{self.label(head)} at the head of the gpu_queue needs {need:g} MB but "
                  f"only {self.budget - self.held_mb:g} MB of {self.budget:g} MB are free and nothing running will "
                  f"free more: gpu_now tools {holders} stay resident until queued work they depend on has run")

    def cleanup(self) -> None:
        ex = self.ex
        for name in self.broken:
            self.workers[name].kill()  # restarted (and prepared again) by the next round that needs it
            if name == "cpu":
                ex._cpu_loaded.clear()
        gpu = self.workers.get("gpu")
        with contextlib.suppress(WorkerError):
            if gpu is not None and gpu.alive:
                gpu.call("unload_all", timeout=120)
                self.measured_peak = float(gpu.call("round_end", timeout=60).data.get("peak_mb", 0.0))
                gpu.inbox = [r for r in gpu.inbox if r.req_id is not None]  # a late oom event belongs to this round
        with contextlib.suppress(WorkerError):
            if ex.cpu.alive:
                ex.cpu.call("round_end", timeout=60)
                ex.cpu.inbox = [r for r in ex.cpu.inbox if r.req_id is not None]

    def trace(self) -> Trace:
        ex = self.ex
        nodes = {
            n: NodeTrace(node=n, tool=self.wf.tool_of[n], placement=self.mapping[n],
                         ready_ms=self.rel_ms(self.ready[n]), admitted_ms=self.rel_ms(self.admitted[n]),
                         start_ms=self.rel_ms(self.start[n]), end_ms=self.rel_ms(self.end[n]),
                         load_ms=self.load.get(n, 0.0))
            for n in self.wf.node_ids if n in self.end
        }
        timeline = self.timeline()
        used_device = self.touched_device
        notes = list(ex._notes(used_device))
        ex.last_measured_peak_mb = self.measured_peak if used_device else None
        if self.failure is not None:
            return Trace.refused(self.mapping, self.failure, vram_budget_mb=self.budget, executor=ex.name,
                                 nodes=nodes, vram_timeline=timeline, notes=tuple(notes))
        ex.last_outputs = {s: pickle.loads(self.blobs[s]) for s in self.wf.sinks if s in self.blobs}
        e2e_ms = max(nodes[s].end_ms for s in self.wf.sinks if s in nodes)
        return Trace(mapping=self.mapping, feasible=True, e2e_ms=e2e_ms,
                     nodes=nodes, vram_timeline=timeline, vram_budget_mb=self.budget, executor=ex.name,
                     notes=tuple(notes))

    def timeline(self) -> tuple[VramPoint, ...]:
        return vram_steps(self.vram_events, sum(self.vram(t) for t in self.now_tools), _EPS_MB)


class _Window(_Round):
    """A window of requests (:meth:`LocalExecutor.run_window`): one round of the composite workflow
    whose requests' sources are dispatched when the release clock says."""

    def __init__(self, ex: LocalExecutor, mapping: Mapping, clock: ReleaseClock,
                 inputs: dict[str, Any] | None = None) -> None:
        self.base = ex.scenario.workflow
        self.clock = clock
        given = {instance_id(n, r): v for r in range(clock.count) for n, v in (inputs or {}).items()}
        super().__init__(ex, window_mapping(mapping, clock.count), given, window_scenario(ex.scenario, clock.count))
        self.sinks_left = [len(self.base.sinks)] * clock.count
        self.base_sinks = set(self.base.sinks)

    def begin(self) -> None:
        self.release_due()

    def next_release(self) -> float:
        t = self.clock.next_ms()
        return math.inf if t is None else self.t0 + t / 1000.0

    def waiting(self) -> bool:
        return self.clock.next_ms() is not None

    def release_due(self) -> None:
        if self.failure is not None:
            return
        now = time.monotonic()
        sent, skipped = self.clock.due(self.rel_ms(now))
        for r in skipped:
            self.leave_out(r, now)
        for r in sent:
            for n in self.base.sources:
                self.dispatch(instance_id(n, r), now)

    def leave_out(self, request: int, now: float) -> None:
        """A request that is not sent: the round no longer waits for its nodes, and a resident tool
        whose other nodes have all run is unloaded now."""
        self.expected -= len(self.base.node_ids)
        for n in self.base.node_ids:
            node = instance_id(n, request)
            if self.mapping[node] is Placement.GPU_NOW:
                tool = self.wf.tool_of[node]
                self.now_left[tool] -= 1
                if self.now_left[tool] == 0:
                    self.unload_resident(tool, node, now)

    def node_done(self, node: str, now: float) -> None:
        base, r = split_id(node)
        if base in self.base_sinks:
            self.sinks_left[r] -= 1
            if self.sinks_left[r] == 0:
                self.clock.completed(r, self.rel_ms(now))  # a request that follows it may be sent now
                self.release_due()


def _kind(reply: Reply) -> InfeasibleKind:
    return InfeasibleKind.OOM if reply.kind == "oom" else InfeasibleKind.TOOL_ERROR
