"""The tool runtime: load, run and unload tools on one device inside the current process, with
real clocks and real memory measurements. The local executor's worker processes and the
profiler use it, and so can any other executor (a Ray actor holds one ``ToolRuntime``).

Memory meters (what "device memory in use" means on each device):

- ``cuda``: the PyTorch CUDA caching allocator's ``memory_allocated`` and
  ``max_memory_allocated`` for the device (the CUDA context itself, a few hundred MB per
  process, is not counted); NVML, when ``pynvml`` is installed, adds the process's total use
  and the GPU utilization.
- ``standin`` and ``cpu``: bytes the process has allocated through the C allocator, from
  glibc's ``mallinfo2()`` (arena bytes in use + mmapped blocks): torch, numpy and faiss
  buffers all come from it, freed memory counts as freed (unlike RSS, which keeps heap that
  glibc has not returned). Peaks are sampled by a thread every ``sample_ms`` (1 ms while
  profiling), so a peak shorter than that can be missed. Without glibc (macOS, musl) the
  meter falls back to the resident set size (RSS), which over-states memory after frees.

Imports the tool API only; torch is imported only for a cuda device or when a tool needs it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hetsched.tools.base import Device, DeviceKind, Tool

MB = 1e6
"""Bytes per MB (cards count MB as 10^6 bytes)."""


# ---------------------------------------------------------------------------- memory meters
class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2() -> Any:
    """glibc's mallinfo2, or None where it does not exist."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


def _rss_bytes() -> float:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


class MemoryMeter:
    """Device memory in use (MB above a baseline) and its peak since the last reset."""

    kind: str = "none"
    """How memory is measured (``cuda allocator``, ``malloc (mallinfo2)``, ``RSS``)."""

    def __init__(self) -> None:
        self._baseline = 0.0
        self._peak = 0.0

    def _raw_mb(self) -> float:
        raise NotImplementedError

    def in_use_mb(self) -> float:
        """Memory in use above the baseline, MB."""
        used = self._raw_mb() - self._baseline
        if used > self._peak:
            self._peak = used
        return used

    def rebase(self) -> float:
        """Take what is in use now as the zero (between rounds, when the device holds nothing); returns it."""
        self._baseline = self._raw_mb()
        self._peak = 0.0
        return self._baseline

    def reset_peak(self) -> None:
        """Start a new peak from what is in use now."""
        self._peak = max(0.0, self._raw_mb() - self._baseline)

    def peak_mb(self) -> float:
        """Highest use above the baseline since the last reset (sampled), MB."""
        self.in_use_mb()
        return self._peak


class HostMeter(MemoryMeter):
    """Memory the process has allocated through malloc (glibc ``mallinfo2``), else its RSS."""

    def __init__(self) -> None:
        super().__init__()
        self._fn = _mallinfo2()
        self.kind = "malloc (mallinfo2)" if self._fn is not None else "RSS"

    def _raw_mb(self) -> float:
        if self._fn is not None:
            m = self._fn()
            return (m.uordblks + m.hblkhd) / MB
        return _rss_bytes() / MB


class CudaMeter(MemoryMeter):
    """The PyTorch CUDA allocator's counters for one device (exact peaks, no sampling needed)."""

    kind = "cuda allocator"

    def __init__(self, index: int) -> None:
        super().__init__()
        import torch

        self._torch = torch
        self._index = index

    def _raw_mb(self) -> float:
        return float(self._torch.cuda.memory_allocated(self._index)) / MB

    def rebase(self) -> float:
        self._torch.cuda.synchronize(self._index)
        self._torch.cuda.empty_cache()
        self._baseline = self._raw_mb()
        self._torch.cuda.reset_peak_memory_stats(self._index)
        return self._baseline

    def reset_peak(self) -> None:
        self._torch.cuda.reset_peak_memory_stats(self._index)

    def peak_mb(self) -> float:
        return max(0.0, float(self._torch.cuda.max_memory_allocated(self._index)) / MB - self._baseline)


def meter_for(device: Device) -> MemoryMeter:
    """The memory meter of a device."""
    if device.kind is DeviceKind.CUDA:
        return CudaMeter(device.index)
    return HostMeter()


class PeakSampler:
    """Samples a meter every ``sample_ms`` in a daemon thread, so short peaks between reads count,
    and calls ``on_over(used_mb)`` once when use exceeds ``limit_mb`` (the OOM watch)."""

    def __init__(self, meter: MemoryMeter, sample_ms: float = 1.0) -> None:
        self.meter = meter
        self.sample_s = sample_ms / 1000.0
        self.limit_mb: float | None = None
        self.on_over: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start sampling (nothing when ``sample_ms`` is 0: the meter is then read only when asked)."""
        if self.sample_s <= 0:
            return
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="hetsched-mem-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.sample_s):
            used = self.meter.in_use_mb()
            limit, cb = self.limit_mb, self.on_over
            if limit is not None and cb is not None and used > limit:
                self.limit_mb = None  # report once per watch
                cb(used)


# ---------------------------------------------------------------------------- threads and devices
def apply_thread_budget(threads: int) -> None:
    """Limit the math libraries of this process to ``threads`` threads (env before import, torch after)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ[var] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    faiss = sys.modules.get("faiss")
    if faiss is not None:
        faiss.omp_set_num_threads(threads)


def to_host(obj: Any) -> Any:
    """``obj`` with every torch tensor moved to host memory (what leaves a CUDA device)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu() if obj.device.type != "cpu" else obj.detach()
    if isinstance(obj, list | tuple):
        return type(obj)(to_host(x) for x in obj)
    if isinstance(obj, dict):
        return {k: to_host(v) for k, v in obj.items()}
    return obj


def synchronize(device: Device) -> None:
    """Wait for the device's queued work (CUDA kernels are asynchronous), so clocks measure it."""
    if device.kind is DeviceKind.CUDA:
        import torch

        torch.cuda.synchronize(device.index)


def runqueue_wait_seconds() -> float:
    """Time the calling thread has spent ready to run but waiting for a core (Linux schedstat; 0
    elsewhere): what other processes on a shared machine took from it."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu_seconds() -> float:
    """CPU time of this whole process (all threads, ns resolution), seconds."""
    return time.process_time()


# ---------------------------------------------------------------------------- the runtime
@dataclass(frozen=True)
class Loaded:
    """What a load took: its clocks and the device memory it added."""

    load_ms: float
    """Wall time of ``tool.load`` (synchronized), ms."""
    mem_mb: float
    """Device memory in use after the load minus before, MB."""
    t_start: float
    """``time.monotonic()`` when the load started."""
    t_end: float
    """``time.monotonic()`` when it ended."""


@dataclass(frozen=True)
class Ran:
    """One call: its output and its clocks (``time.monotonic()``, seconds)."""

    output: Any
    """What the tool returned."""
    t_start: float
    """When ``tool.run`` started."""
    t_end: float
    """When it returned (device synchronized)."""


@dataclass(frozen=True)
class Benchmark:
    """An isolated profile of one loaded tool: warm-up, then timed runs."""

    first_ms: float
    """The first call after the load (first-call init included), ms."""
    times_ms: tuple[float, ...]
    """The timed runs after warm-up, ms."""
    cpu_s: float
    """Process CPU time spent during the timed runs, s."""
    wall_s: float
    """Wall time of the timed runs, s."""
    peak_mb: float
    """Peak device memory above the baseline during load and runs, MB."""
    wait_s: float = 0.0
    """Of ``wall_s``, the time the calling thread waited for a core (other processes ran), s."""
    waits_ms: tuple[float, ...] = ()
    """Per timed run, the time the calling thread waited for a core during it, ms (at most the run's time)."""
    extra: dict[str, float] = field(default_factory=dict)
    """Device-specific figures (``gpu_util`` from NVML...)."""

    @property
    def median_ms(self) -> float:
        """Median run time (0 without timed runs)."""
        return statistics.median(self.times_ms) if self.times_ms else 0.0


class ToolRuntime:
    """Loads, runs and unloads tools on one device in this process, thread-safely.

    Handles are kept by key (a tool may be loaded under several keys, e.g. one per queued node).
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        """The device the tools run on."""
        self.meter = meter_for(device)
        """How its memory is measured."""
        self._handles: dict[str, tuple[Tool, Any]] = {}
        self._lock = threading.Lock()
        self._prepared: set[tuple[str, str]] = set()
        if device.kind is DeviceKind.CUDA:
            import torch

            torch.cuda.set_device(device.index)
        apply_thread_budget(device.threads)

    def prepare(self, tool: Tool) -> None:
        """Import the tool's libraries and run its one-time set-up (untimed; once per tool and size)."""
        ident = (tool.name, tool.size)
        if ident in self._prepared:
            return
        for mod in tool.requires:
            importlib.import_module(mod)
        apply_thread_budget(self.device.threads)
        tool.prepare()
        self._prepared.add(ident)

    def loaded(self, key: str) -> bool:
        """Whether a handle is held under ``key``."""
        with self._lock:
            return key in self._handles

    def keys(self) -> tuple[str, ...]:
        """Keys of the handles held."""
        with self._lock:
            return tuple(self._handles)

    def load(self, key: str, tool: Tool) -> Loaded:
        """Load ``tool`` under ``key`` (prepared first, untimed); the clocks cover ``tool.load`` only."""
        self.prepare(tool)
        before = self.meter.in_use_mb()
        t0 = time.monotonic()
        handle = tool.load(self.device)
        synchronize(self.device)
        t1 = time.monotonic()
        with self._lock:
            self._handles[key] = (tool, handle)
        return Loaded(load_ms=(t1 - t0) * 1000.0, mem_mb=self.meter.in_use_mb() - before, t_start=t0, t_end=t1)

    def run(self, key: str, inputs: Sequence[Any]) -> Ran:
        """One call of the tool held under ``key``."""
        with self._lock:
            tool, handle = self._handles[key]
        t0 = time.monotonic()
        out = tool.run(handle, inputs)
        synchronize(self.device)
        return Ran(out, t0, time.monotonic())

    def unload(self, key: str) -> float:
        """Unload the handle held under ``key`` (absent: nothing); returns the unload wall time, ms."""
        with self._lock:
            entry = self._handles.pop(key, None)
        if entry is None:
            return 0.0
        tool, handle = entry
        t0 = time.monotonic()
        tool.unload(handle)
        del handle, entry  # reference counting frees the weights now; a full gc.collect() costs ~0.5 s
        if self.device.kind is DeviceKind.CUDA:
            import torch

            torch.cuda.synchronize(self.device.index)
            torch.cuda.empty_cache()
        return (time.monotonic() - t0) * 1000.0

    def unload_all(self) -> None:
        """Unload every handle."""
        for key in self.keys():
            self.unload(key)

    def bench(self, key: str, inputs: Sequence[Any], warmup: int, runs: int) -> Benchmark:
        """``warmup`` untimed calls, then ``runs`` timed calls of the loaded tool, alone on the device.
        ``first_ms`` is the first of all these calls (first-call initialization included)."""
        first_ms: float | None = None
        for _ in range(warmup):
            r = self.run(key, inputs)
            first_ms = (r.t_end - r.t_start) * 1000.0 if first_ms is None else first_ms
        times: list[float] = []
        waits: list[float] = []
        c0, q0, w0 = cpu_seconds(), runqueue_wait_seconds(), time.monotonic()
        for _ in range(runs):
            q1 = runqueue_wait_seconds()
            r = self.run(key, inputs)
            times.append((r.t_end - r.t_start) * 1000.0)
            # the wait is read around the whole call, the time inside it: what falls in the timed window is at
            # most the window (a loaded machine made the call's wait exceed its run's time)
            waits.append(min(max(0.0, (runqueue_wait_seconds() - q1) * 1000.0), times[-1]))
        wall = time.monotonic() - w0
        if first_ms is None:
            first_ms = times[0] if times else 0.0
        return Benchmark(first_ms=first_ms, times_ms=tuple(times), cpu_s=cpu_seconds() - c0, wall_s=wall,
                         peak_mb=self.meter.peak_mb(), wait_s=runqueue_wait_seconds() - q0, waits_ms=tuple(waits))
