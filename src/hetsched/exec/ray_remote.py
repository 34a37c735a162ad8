"""What runs inside Ray's worker processes: one DAG node as a task (:func:`run_node`) and one
``gpu_now`` tool as an actor (:class:`ResidentTool`). The Ray executor wraps them with
``ray.remote`` and sends them the tools; Ray's workers import this module (hetsched must be
installed on every node of the cluster).

- A ``cpu`` node runs its tool on the CPU with the card's threads. A worker process keeps the
  tools it has loaded (Ray reuses worker processes), so only a cold worker pays the load, and
  its ``load_ms`` is reported apart from the run.
- A ``gpu_queue`` node loads its tool on the node's device, runs it and unloads it, inside the
  task that holds its ``vram_mb``.
- A ``gpu_now`` actor loads its tool once, before the round, and serves every node of the tool,
  concurrently on its threads, until the executor kills it after the last one.

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


class ResidentTool:
    """A ``gpu_now`` tool as a Ray actor: :meth:`load` before the round, then :meth:`run` per node."""

    def __init__(self, spec: NodeSpec, box: Sequence[Any]) -> None:
        self.spec = spec
        self.tool = _tool(spec.tool_key, box)
        self.device = gpu_device(spec.device, spec.threads)
        self.runtime = ToolRuntime(self.device)
        self.sampler: PeakSampler | None = None

    def load(self) -> dict[str, Any]:
        """Load the tool (prepared first, untimed); the meta carries ``load_ms`` and the memory it took."""
        fn_start = time.time()
        self.runtime.prepare(self.tool)
        self.sampler = _watch(self.runtime, self.spec)
        loaded = self.runtime.load("now", self.tool)
        meta = _meta(self.spec, self.device, fn_start, loaded.t_start, loaded.t_start, loaded.load_ms, True,
                     self._peak())
        meta["mem_mb"] = loaded.mem_mb
        return meta

    def _peak(self) -> float | None:
        return self.runtime.meter.peak_mb() if self.spec.mem_limit_mb is not None else None

    def run(self, spec: NodeSpec, *inputs: Any) -> tuple[Any, dict[str, Any]]:
        """One ``gpu_now`` node on the resident tool: ``(output, meta)``."""
        fn_start = time.time()
        t0 = time.time()
        ran = self.runtime.run("now", inputs)
        t1 = t0 + (ran.t_end - ran.t_start)
        return to_host(ran.output), _meta(spec, self.device, fn_start, t0, t1, 0.0, False, self._peak())
