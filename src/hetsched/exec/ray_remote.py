"""What runs inside Ray's worker processes: one DAG node as a task (:func:`run_node`) and one
``gpu_now`` tool as an actor (:class:`ResidentTool`). The Ray executor wraps them with
``ray.remote`` and sends them the tools; Ray's workers import this module (hetsched must be
installed on every node of the cluster).

- A ``cpu`` node runs its tool on the CPU with the card's threads. A worker process keeps the
  tools it has loaded (Ray reuses worker processes), so only a cold worker pays the load, and
  its ``load_ms`` is reported apart from the run.
- A ``gpu_queue`` node loads its tool on the node's device, runs it and unloads it, inside the
  task that holds its ``vram_mb``.
- A ``gpu_now`` actor loads its tool before the round, once its lease (:func:`hold`: the task that
  holds the tool's GPU share and ``vram_mb``) is granted, serves every node of the tool concurrently
  on its threads, and unloads it after the last one, before the lease returns. The executor keeps
  the actor (its process, imports and set-up, never the weights) for later rounds.

The device of a GPU placement is the GPU Ray assigned the task (CUDA) where the node has one
and torch sees it, else the stand-in device: this worker process, on CPU threads, with its
weights really allocated and its memory really measured (the meta says which). GPU units watch
their measured memory and report its peak above their idle level, so the executor can compare
it with the card Ray admitted them by.

Every call returns ``(output, meta)``: the tool's output (moved to host memory, for successors
on any node) and a small dict of the worker's own clocks (``time.time()``, the clock Ray stamps
its task events with) that splits Ray's execution window into load and run.

Imports the tool API and runtime and the device helpers; ray only inside functions.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.tools.base import Device, DeviceKind, Tool
from hetsched.tools.runtime import PeakSampler, ToolRuntime, apply_thread_budget, to_host


class DeviceUnavailable(RuntimeError):
    """A GPU placement asked for CUDA on a Ray node where torch sees no GPU."""


@dataclass(frozen=True)
class NodeSpec:
    """What a task or an actor call needs to know about its DAG node."""

    node: str
    """The DAG node id."""
    placement: str
    """``cpu``, ``gpu_queue`` or ``gpu_now``."""
    tool_key: str
    """Digest of the pickled tool: the per-process cache key."""
    device: str = "auto"
    """GPU placements: ``auto`` (CUDA where present, else the stand-in device), ``cuda`` or ``standin``."""
    threads: int = 1
    """CPU threads: the card's for ``cpu``, the device's host threads for GPU placements."""
    mem_limit_mb: float | None = None
    """Measured memory above which a GPU unit reports itself over its card (None: not watched)."""
    sample_ms: float = 2.0
    """How often the stand-in device's memory is sampled, ms."""
    standin_extra_mb: float = 0.0
    """Added to ``mem_limit_mb`` on the stand-in device, whose meter (the worker process's malloc)
    also counts Ray's own allocations in that process."""

    def limit_on(self, device: Device) -> float | None:
        """The memory limit on ``device`` (None: not watched)."""
        if self.mem_limit_mb is None:
            return None
        return self.mem_limit_mb + (self.standin_extra_mb if device.kind is DeviceKind.STANDIN else 0.0)


_LOCK = threading.Lock()
_TOOLS: dict[str, Tool] = {}
_CPU_RUNTIMES: dict[int, ToolRuntime] = {}
_GPU_RUNTIMES: dict[tuple[str, int], ToolRuntime] = {}


def _tool(key: str, box: Sequence[Any]) -> Tool:
    """The tool for ``key``, from this process's cache or the object store (``box`` holds its ref)."""
    with _LOCK:
        tool = _TOOLS.get(key)
    if tool is None:
        item = box[0]
        if not isinstance(item, Tool):
            import ray

            item = ray.get(item)
        tool = item
        with _LOCK:
            _TOOLS[key] = tool
    return tool


def _cpu_runtime(threads: int) -> ToolRuntime:
    with _LOCK:
        runtime = _CPU_RUNTIMES.get(threads)
        if runtime is None:
            runtime = _CPU_RUNTIMES[threads] = ToolRuntime(Device(DeviceKind.CPU, 0, threads))
    return runtime


def _gpu_runtime(device: Device) -> ToolRuntime:
    with _LOCK:
        runtime = _GPU_RUNTIMES.get((device.label, device.threads))
        if runtime is None:
            runtime = _GPU_RUNTIMES[(device.label, device.threads)] = ToolRuntime(device)
    return runtime


def _host_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


def _cuda_here() -> bool:
    """Whether this worker was given a GPU that torch can use (cheap checks first: no torch import
    on a node without NVIDIA devices)."""
    import ray

    if not ray.get_gpu_ids():
        return False
    if sys.platform.startswith("linux") and not os.path.exists("/dev/nvidiactl"):
        return False
    from hetsched.exec.devices import cuda_device_count

    return cuda_device_count() > 0


def gpu_device(choice: str, threads: int) -> Device:
    """The device a GPU placement runs on in this worker."""
    if choice == "standin":
        return Device(DeviceKind.STANDIN, 0, threads)
    cuda = _cuda_here()
    if choice == "cuda" and not cuda:
        raise DeviceUnavailable("device=cuda, but this Ray node gives the task no GPU that torch can use")
    # Ray sets CUDA_VISIBLE_DEVICES to the GPU it assigned, so index 0 is that GPU
    return Device(DeviceKind.CUDA, 0, threads) if cuda else Device(DeviceKind.STANDIN, 0, threads)


def _watch(runtime: ToolRuntime, spec: NodeSpec) -> PeakSampler | None:
    """Start sampling the device's memory from its current level (GPU units only)."""
    if spec.mem_limit_mb is None:
        return None
    runtime.meter.rebase()
    if runtime.device.kind is DeviceKind.CUDA:
        return None  # the CUDA allocator keeps an exact peak
    sampler = PeakSampler(runtime.meter, spec.sample_ms)
    sampler.start()
    return sampler


def _meta(spec: NodeSpec, device: Device, fn_start: float, run_start: float, run_end: float, load_ms: float,
          cold: bool, peak_mb: float | None) -> dict[str, Any]:
    return {"node": spec.node, "pid": os.getpid(), "host": _host_id(), "device": device.label,
            "fn_start": fn_start, "run_start": run_start, "run_end": run_end, "fn_end": time.time(),
            "load_ms": load_ms, "cold": cold, "peak_mb": peak_mb, "limit_mb": spec.limit_on(device)}


def run_node(spec: NodeSpec, box: Sequence[Any], *inputs: Any) -> tuple[Any, dict[str, Any]]:
    """One ``cpu`` or ``gpu_queue`` node as a Ray task: ``(output, meta)``."""
    fn_start = time.time()
    tool = _tool(spec.tool_key, box)
    if spec.placement == "cpu":
        runtime = _cpu_runtime(spec.threads)
        apply_thread_budget(spec.threads)
        load_ms, cold = 0.0, not runtime.loaded(spec.tool_key)
        if cold:
            runtime.prepare(tool)
            load_ms = runtime.load(spec.tool_key, tool).load_ms
        t0 = time.time()
        ran = runtime.run(spec.tool_key, inputs)
        t1 = t0 + (ran.t_end - ran.t_start)
        return to_host(ran.output), _meta(spec, runtime.device, fn_start, t0, t1, load_ms, cold, None)
    device = gpu_device(spec.device, spec.threads)
    runtime = _gpu_runtime(device)
    apply_thread_budget(device.threads)
    runtime.prepare(tool)  # imports and one-time set-up: untimed, as in the profiler (the warm phase did it)
    sampler = _watch(runtime, spec)
    key = f"q:{spec.node}"
    try:
        loaded = runtime.load(key, tool)
        t0 = time.time()
        ran = runtime.run(key, inputs)
        t1 = t0 + (ran.t_end - ran.t_start)
        output = to_host(ran.output)
    finally:
        runtime.unload(key)
        peak = runtime.meter.peak_mb() if spec.mem_limit_mb is not None else None
        if sampler is not None:
            sampler.stop()
    return output, _meta(spec, device, fn_start, t0, t1, loaded.load_ms, True, peak)


@dataclass(frozen=True)
class WarmItem:
    """A tool a warm-up task prepares (and, for a ``cpu`` placement, loads into the worker's cache)."""

    tool_key: str
    """Cache key of the tool."""
    box: list[Any]
    """The box holding its object-store ref."""
    cpu_threads: int = 0
    """Load it for the CPU with these threads (0: prepare only)."""


def warm(items: Sequence[WarmItem], hold_s: float) -> dict[str, Any]:
    """Prepare the round's tools in this worker (imports, one-time set-up) and load its ``cpu`` tools,
    then hold the worker ``hold_s`` so that warm-up tasks sent at once land in distinct workers.
    Run before a round, outside its E2E, so that the round's tasks find warm workers."""
    t0 = time.time()
    for item in items:
        tool = _tool(item.tool_key, item.box)
        if item.cpu_threads:
            runtime = _cpu_runtime(item.cpu_threads)
            apply_thread_budget(item.cpu_threads)
            runtime.prepare(tool)
            if not runtime.loaded(item.tool_key):
                runtime.load(item.tool_key, tool)
        else:
            _cpu_runtime(1).prepare(tool)
    time.sleep(max(0.0, hold_s - (time.time() - t0)))
    return {"pid": os.getpid(), "host": _host_id(), "s": time.time() - t0}


class DeviceMoved(RuntimeError):
    """A kept resident actor's lease was given another GPU than the one its process is bound to."""


class _Residency:
    """One round's residency of a kept actor's tool: set when it has loaded, and when it is released."""

    def __init__(self) -> None:
        self.loaded = threading.Event()
        self.released = threading.Event()
        self.meta: dict[str, Any] | None = None
        self.error: BaseException | None = None


def _wait(event: threading.Event) -> None:
    """Wait for ``event`` without a bound: the executor bounds a round (its time limits, then it kills the
    actor), and a lease must never return while its tool is still resident, however long the round."""
    while not event.wait(60.0):
        pass


class ResidentTool:
    """A ``gpu_now`` tool as a Ray actor that the executor keeps across rounds.

    The actor itself holds no GPU share and no ``vram_mb``: it is a process with the tool's libraries
    imported and prepared. Each round, a lease (:func:`hold`, a Ray task that asks for the round's GPU
    share and the card's ``vram_mb``) loads the tool here once Ray has granted those, and ends when
    the executor releases the tool after its last node: the tool is unloaded first, then Ray frees
    the lease's ``vram_mb``. Residency is therefore per round, as in the model: between rounds, or in
    a round that maps the tool elsewhere, the process holds no weights.

    The process binds itself to the GPU of its first lease (``CUDA_VISIBLE_DEVICES``, as Ray sets it
    for a task given that GPU); the executor keeps such actors only on Ray nodes with one GPU, where
    every lease gets the same one (elsewhere :class:`DeviceMoved`)."""

    def __init__(self, spec: NodeSpec, box: Sequence[Any]) -> None:
        self.spec = spec
        self.tool = _tool(spec.tool_key, box)
        self.device: Device | None = None
        self.runtime: ToolRuntime | None = None
        self.gpu_ids: tuple[str, ...] | None = None
        self.sampler: PeakSampler | None = None
        self._lock = threading.Lock()
        self._rounds: dict[str, _Residency] = {}

    def ping(self) -> int:
        """This actor's process id (the executor checks that a kept actor is alive)."""
        return os.getpid()

    def resident(self) -> list[str]:
        """What this process holds loaded now (empty between rounds and after a release)."""
        return list(self.runtime.keys()) if self.runtime is not None else []

    def _residency(self, token: str) -> _Residency:
        with self._lock:
            return self._rounds.setdefault(token, _Residency())

    def _bind(self, gpu_ids: Sequence[str]) -> ToolRuntime:
        """The runtime of this process's device, bound at the first lease."""
        ids = tuple(str(i) for i in gpu_ids)
        if self.runtime is not None and self.device is not None:
            if self.device.kind is DeviceKind.CUDA and ids != self.gpu_ids:
                raise DeviceMoved(f"this actor's process uses GPU {self.gpu_ids}, its lease was given {ids}")
            return self.runtime
        if self.spec.device == "standin":
            device = Device(DeviceKind.STANDIN, 0, self.spec.threads)
        else:
            cuda = bool(ids) and not (sys.platform.startswith("linux") and not os.path.exists("/dev/nvidiactl"))
            if cuda:
                # the actor asked Ray for no GPU; see the lease's GPU as Ray would show it to a task given it
                # (before torch initializes CUDA in this process, which the first load does)
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
                from hetsched.exec.devices import cuda_device_count

                cuda = cuda_device_count() > 0
            if self.spec.device == "cuda" and not cuda:
                raise DeviceUnavailable("device=cuda, but this Ray node gives the task no GPU that torch can use")
            device = Device(DeviceKind.CUDA, 0, self.spec.threads) if cuda else Device(DeviceKind.STANDIN, 0,
                                                                                        self.spec.threads)
        self.device, self.gpu_ids = device, ids
        self.runtime = ToolRuntime(device)
        return self.runtime

    def load(self, token: str, gpu_ids: Sequence[str] = ()) -> dict[str, Any]:
        """Load the tool for round ``token`` (prepared first, untimed): called by the round's lease once
        Ray has granted it; the meta carries ``load_ms`` and the memory the load took."""
        state = self._residency(token)
        try:
            fn_start = time.time()
            runtime = self._bind(gpu_ids)
            assert self.device is not None
            runtime.unload("now")  # nothing of an earlier round stays resident (a release unloaded it already)
            runtime.prepare(self.tool)
            apply_thread_budget(self.device.threads)
            self.sampler = _watch(runtime, self.spec)  # this round's peak, from the level before its load
            loaded = runtime.load("now", self.tool)
            meta = _meta(self.spec, self.device, fn_start, loaded.t_start, loaded.t_start, loaded.load_ms, True,
                         self._peak())
            meta["mem_mb"] = loaded.mem_mb
        except BaseException as exc:  # handed to the executor by loaded()
            state.error = exc
            state.loaded.set()
            raise
        state.meta = meta
        state.loaded.set()
        return meta

    def loaded(self, token: str) -> dict[str, Any]:
        """Wait until round ``token``'s lease has loaded the tool: its meta (or the load's exception)."""
        state = self._residency(token)
        _wait(state.loaded)
        if state.error is not None:
            raise state.error
        assert state.meta is not None
        return state.meta

    def held(self, token: str) -> None:
        """Return once round ``token`` has released the tool (its lease waits here)."""
        _wait(self._residency(token).released)

    def release(self, token: str) -> float:
        """Unload the tool (its last node of round ``token`` has ended), then end the round's lease;
        returns the unload time, ms."""
        with self._lock:
            state = self._rounds.pop(token, None)
        try:
            if self.sampler is not None:
                self.sampler.stop()
                self.sampler = None
            return self.runtime.unload("now") if self.runtime is not None else 0.0
        finally:
            if state is not None:
                state.released.set()

    def _peak(self) -> float | None:
        if self.runtime is None or self.spec.mem_limit_mb is None:
            return None
        return self.runtime.meter.peak_mb()

    def run(self, spec: NodeSpec, *inputs: Any) -> tuple[Any, dict[str, Any]]:
        """One ``gpu_now`` node on the resident tool: ``(output, meta)``."""
        if self.runtime is None or self.device is None or not self.runtime.loaded("now"):
            raise RuntimeError(f"{spec.node}: the resident tool is not loaded")
        fn_start = time.time()
        t0 = time.time()
        ran = self.runtime.run("now", inputs)
        t1 = t0 + (ran.t_end - ran.t_start)
        return to_host(ran.output), _meta(spec, self.device, fn_start, t0, t1, 0.0, False, self._peak())


def hold(host: Any, token: str) -> dict[str, Any]:
    """A round's lease on a kept resident actor (``host``): a Ray task that asks for the tool's GPU share
    and ``vram_mb``; once Ray grants them it has the actor load the tool, and it holds them until the
    executor releases the tool (the actor unloads it first). Ray frees the ``vram_mb`` when it returns."""
    import ray

    ids = [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
    ray.get(host.load.remote(token, ids))
    ray.get(host.held.remote(token))
    return {"pid": os.getpid(), "host": _host_id(), "gpu_ids": ids}
