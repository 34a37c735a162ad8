"""The profiler: one tool at a time, alone on its device, in the same worker processes (threads,
pinning, memory meters) the local executor uses, so the cards describe what the executor runs.

Per tool (PAPER.md: 30 isolated runs, median):

- CPU: load on the CPU pool, ``warmup`` calls, then ``runs`` timed calls: ``cpu_ms`` (median,
  p10, p90), ``cpu_demand`` (process CPU time / wall time over the runs: the cores it keeps busy on
  average, near 0 for a tool that waits on a socket or a timer, since a waiting thread uses no CPU
  time whatever the machine's load; the wall time excludes what the calling thread waited for a
  core, from Linux's schedstat, so other processes of a shared machine do not read as idle cores)
  and ``cpu_threads`` (that demand rounded, at least 1).
- GPU (CUDA, else the stand-in device): load, warm-up, ``runs`` timed calls: ``gpu_ms``. The
  timed runs alternate between the two devices in blocks (one device busy at a time), so a slow
  spell of a shared machine hits both figures alike.
- ``load_ms``: ``loads`` fresh loads, each followed by one call: load time + (first call - warm
  median), i.e. the weights-to-device copy plus first-call initialization. The loads run back to
  back, each on the memory the previous one just freed.
- ``load_cold_ms`` (with ``cold_loads``): the same, each load after the device sat idle
  ``cold_pause_s``, so its memory has gone cold (a virtual machine that returns freed memory to
  its host does so about 2 s after the free: the load pays the host's page faults).
- ``vram_mb``: a pass of its own (so its fine sampling does not slow the timed runs): a fresh load
  and two calls, the device's peak memory above its idle level, sampled every 0.5 ms
  (``torch.cuda.max_memory_allocated`` on CUDA, exact).
- ``gpu_util``: NVML's utilization on CUDA when ``pynvml`` is installed; on the stand-in device its
  CPU time / (wall x threads), the wall again without the time spent waiting for a core; else 1.0
  (and the profile says it was not measured).

Cards of tools named ``NAME_xK`` are derived from NAME's card (``base`` + ``amplification``).
Each measured card is handed to the caller at once, so an interrupted profile keeps them.

Imports the model, the tools and the worker processes of ``hetsched.exec``.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import re
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hetsched.exec.devices import CorePlan, available_cores, describe_cpu, describe_device, plan_cores, resolve_device
from hetsched.exec.local import DEVICE_SAMPLE_MS
from hetsched.exec.worker import Worker, WorkerError, tool_bytes
from hetsched.model import InputError, Provenance, Spread, ToolCard
from hetsched.tools.base import Device, DeviceKind, Tool, check_size
from hetsched.tools.registry import get_tool, import_tool_modules

_AMPLIFIED = re.compile(r"^(?P<base>.+)_x(?P<k>[1-9][0-9]*)$")
MEMORY_SAMPLE_MS = 0.5
"""Memory sampling period of the profiler's memory pass, ms."""
BLOCK = 5
"""Timed runs per device before the profiler switches to the other device."""


@dataclass(frozen=True)
class ProfileConfig:
    """How to profile."""

    size: str = "tiny"
    """Size preset of the tools (``tiny``, ``full``)."""
    runs: int = 30
    """Timed runs per device (the paper's 30)."""
    warmup: int = 3
    """Untimed calls before the timed runs."""
    loads: int = 3
    """Fresh loads measured for ``load_ms`` (median)."""
    device: str = "auto"
    """Where the GPU figures are measured: auto (CUDA, else the stand-in device), cuda, cuda:N, standin."""
    cpu_threads: int | None = None
    """Threads of the CPU pool (default: every core available)."""
    device_threads: int | None = None
    """Threads of the stand-in device (default 1)."""
    pin: bool = True
    """Pin the CPU pool and the stand-in device to separate cores when there are enough."""
    tool_modules: tuple[str, ...] = ()
    """Modules to import first (they register the user's tools)."""
    cold_loads: int = 0
    """Loads measured after the device sat idle ``cold_pause_s`` (``load_cold_ms``, median; 0:
    not measured, the card has none)."""
    cold_pause_s: float = 3.0
    """Idle time before each cold load, s."""
    own_core: bool = False
    """Time each call as if it had its core: leave out what the calling thread waited for a core
    during it (Linux schedstat). On a busy machine a tool run back to back waits behind other
    processes far more than the same tool inside a workflow (measured: 5x for a short pure-Python
    tool at load average 14 on 2 cores), so the cards carry the machine's load at profiling time
    and go stale with it; with ``own_core`` they describe the tool. Exact for single-threaded
    tools; a multi-threaded tool's other threads' waits stay in. Off by default (the figures are
    the wall times the executor sees)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", check_size(self.size))
        for name in ("runs", "loads"):
            if getattr(self, name) < 1:
                raise InputError(f"profile: {name} must be >= 1, got {getattr(self, name)}")
        if self.cold_loads < 0:
            raise InputError(f"profile: cold_loads must be >= 0, got {self.cold_loads}")
        if not 0.0 <= self.cold_pause_s <= 600.0:
            raise InputError(f"profile: cold_pause_s must be from 0 to 600 s, got {self.cold_pause_s}")
        if self.warmup < 0:
            raise InputError(f"profile: warmup must be >= 0, got {self.warmup}")
        if str(self.device).strip().lower() == "none":
            raise InputError("profile: device 'none' cannot measure the GPU figures; use auto, cuda or standin")


@dataclass(frozen=True)
class ToolProfile:
    """What was measured for one tool, and its card."""

    card: ToolCard
    """The tool card (the base tool's, for an amplified name)."""
    cpu_times_ms: tuple[float, ...]
    """Timed CPU runs."""
    gpu_times_ms: tuple[float, ...] = ()
    """Timed device runs (empty without a GPU implementation)."""
    load_samples_ms: tuple[float, ...] = ()
    """Each fresh load plus its first-call initialization."""
    notes: tuple[str, ...] = ()
    """Figures that were not measured, and why."""
    derived: dict[str, ToolCard] = field(default_factory=dict)
    """Amplified cards asked for (``NAME_xK``), derived from ``card``."""
    cold_load_samples_ms: tuple[float, ...] = ()
    """The same for each load after the device sat idle (``ProfileConfig.cold_loads``)."""


def _percentiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, p10, p90) by linear interpolation between order statistics."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=10, method="inclusive")
    return statistics.median(xs), q[0], q[-1]


def cpu_demand(cpu_s: float, wall_s: float) -> float:
    """Cores kept busy on average: process CPU time over the wall time it was measured in (>= 0)."""
    return max(0.0, cpu_s) / max(wall_s, 1e-9)


def _versions() -> str:
    parts = []
    for dist in ("torch", "transformers", "faiss-cpu", "hetsched"):
        try:
            parts.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(parts)


def _round(x: float, digits: int = 3) -> float:
    return float(f"{x:.{digits}g}") if abs(x) < 1 else round(x, digits)


class Profiler:
    """Profiles tools in the CPU pool and on the device; a context manager that stops its workers."""

    def __init__(self, config: ProfileConfig = ProfileConfig()) -> None:
        self.config = config
        import_tool_modules(list(config.tool_modules))
        cpu = config.cpu_threads if config.cpu_threads is not None else len(available_cores())
        self.plan: CorePlan = plan_cores(cpu, config.device_threads, pin=config.pin)
        """How the CPU pool and the stand-in device share the cores."""
        device = resolve_device(config.device, self.plan.device_threads)
        assert device is not None  # ProfileConfig refuses 'none'
        self.device: Device = device
        """Where the GPU figures are measured."""
        # clocks are taken under the executor's conditions: no sampler in the CPU pool, the device's
        # memory watch at its usual rate; a separate pass samples finely for the memory peak
        self.cpu = Worker(Device(DeviceKind.CPU, 0, self.plan.cpu_threads), self.plan.cpu_cores, "CPU pool",
                          sample_ms=0.0)
        cores = self.plan.device_cores if device.kind is DeviceKind.STANDIN else None
        label = "stand-in device" if device.kind is DeviceKind.STANDIN else device.label
        self.gpu = Worker(device, cores, label, sample_ms=DEVICE_SAMPLE_MS)
        self.today = dt.date.today().isoformat()

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes."""
        self.cpu.close()
        self.gpu.close()

    # ------------------------------------------------------------------ descriptions
    @property
    def cpu_text(self) -> str:
        """The CPU pool, in words."""
        return describe_cpu(self.plan.cpu_threads, self.plan)

    @property
    def gpu_text(self) -> str:
        """The device the GPU figures come from, in words."""
        return describe_device(self.device, self.plan)

    @property
    def real_gpu(self) -> bool:
        """True when the GPU figures are real GPU measurements (CUDA), False on the stand-in device."""
        return self.device.kind is DeviceKind.CUDA

    def provenance(self) -> Provenance:
        """The provenance every card of this profile carries."""
        c = self.config
        meter = self.gpu.meter or ("cuda allocator" if self.real_gpu else "malloc")
        source = (f"hetsched profile: median of {c.runs} isolated runs after {c.warmup} warm-up call(s); load_ms: "
                  f"median of {c.loads} fresh loads incl. first-call init; vram_mb: peak device memory by {meter}")
        if c.cold_loads:
            source += (f"; load_cold_ms: median of {c.cold_loads} loads each after {c.cold_pause_s:g} s idle "
                       "(memory gone cold)")
        if c.own_core:
            source += "; each call timed less what its thread waited for a core (own_core)"
        if not self.real_gpu:
            source += ("; GPU figures (gpu_ms, load_ms, vram_mb, gpu_util) measured on the stand-in device "
                       "(CPU cores), NOT on a GPU")
        return Provenance(
            hardware=f"CPU: {self.cpu_text} | GPU: {self.gpu_text}",
            runs=c.runs, date=self.today, source=source, device=self.device.kind.value, preset=c.size,
            cpu=self.cpu_text, gpu=self.gpu_text, software=_versions(),
        )

    # ------------------------------------------------------------------ measuring
    def _start(self, worker: Worker, tool: Tool) -> None:
        if not worker.alive:
            worker.start()
        reply = worker.call("prepare", tools=[tool_bytes(tool)], warm=True)
        if not reply.ok:
            raise InputError(f"tool {tool.name!r} failed while preparing on the {worker.label}: {reply.detail}")

    def _checked(self, reply: Any, tool: Tool, worker: Worker, what: str) -> dict[str, Any]:
        if not reply.ok:
            raise InputError(f"tool {tool.name!r} failed on the {worker.label} while {what}: {reply.detail}")
        data: dict[str, Any] = reply.data
        return data

    def _load(self, worker: Worker, tool: Tool, key: str) -> dict[str, Any]:
        worker.call("rebase")
        return self._checked(worker.call("load", key=key, tool=tool_bytes(tool)), tool, worker, "loading")

    def _runs(self, worker: Worker, tool: Tool, key: str, warmup: int, runs: int) -> dict[str, Any]:
        return self._checked(worker.call("bench", key=key, inputs=[], warmup=warmup, runs=runs), tool, worker,
                             "running")

    def _memory_pass(self, tool: Tool) -> float:
        """Peak device memory over a load and two calls, sampled every MEMORY_SAMPLE_MS (CUDA: exact)."""
        self.gpu.call("sampling", sample_ms=MEMORY_SAMPLE_MS)
        try:
            self._load(self.gpu, tool, "m")
            try:
                return float(self._runs(self.gpu, tool, "m", 0, 2)["peak_mb"])
            finally:
                self.gpu.call("unload", key="m")
        finally:
            self.gpu.call("sampling", sample_ms=DEVICE_SAMPLE_MS)

    def profile(self, tool: Tool) -> ToolProfile:
        """Measure one tool on the CPU pool and, when it has a GPU implementation, on the device.

        The timed runs alternate between the two devices in blocks of ``BLOCK`` (one device busy at
        a time), so a slow spell of a shared machine hits both figures alike instead of one."""
        c = self.config
        workers = [self.cpu] + ([self.gpu] if tool.has_gpu else [])
        for w in workers:
            self._start(w, tool)
            self._load(w, tool, "p")
        try:
            times: dict[str, list[float]] = {w.label: [] for w in workers}
            cpu_s = {w.label: 0.0 for w in workers}
            wall_s = {w.label: 0.0 for w in workers}  # less the time the tool waited for a core
            extra: dict[str, list[float]] = {w.label: [] for w in workers}
            for w in workers:
                if c.warmup:
                    self._runs(w, tool, "p", c.warmup, 0)
            done = 0
            while done < c.runs:
                n = min(BLOCK, c.runs - done)
                for w in workers:
                    r = self._runs(w, tool, "p", 0, n)
                    if c.own_core:
                        times[w.label] += [max(t - q, 1e-3) for t, q in zip(r["times_ms"], r["waits_ms"], strict=True)]
                    else:
                        times[w.label] += r["times_ms"]
                    cpu_s[w.label] += r["cpu_s"]
                    wall_s[w.label] += max(r["wall_s"] - r.get("wait_s", 0.0), 1e-9)
                    if "gpu_util" in r["extra"]:
                        extra[w.label].append(r["extra"]["gpu_util"])
                done += n
        finally:
            for w in workers:
                w.call("unload", key="p")
        cpu_times = times[self.cpu.label]
        cpu_med, cpu_p10, cpu_p90 = _percentiles(cpu_times)
        demand = min(float(self.plan.cpu_threads), cpu_demand(cpu_s[self.cpu.label], wall_s[self.cpu.label]))
        threads = max(1, round(demand))
        spread = {"cpu_ms": Spread(p10=_round(cpu_p10), p90=_round(cpu_p90))}
        fields: dict[str, Any] = {"cpu_ms": _round(cpu_med), "cpu_threads": threads, "cpu_demand": _round(demand),
                                  "has_gpu": tool.has_gpu}
        notes: list[str] = []
        gpu_times: tuple[float, ...] = ()
        loads: list[float] = []
        cold: list[float] = []
        if tool.has_gpu:
            g = self.gpu.label
            gpu_times = tuple(times[g])
            med, p10, p90 = _percentiles(gpu_times)
            loads = [self._timed_load(tool, med) for _ in range(c.loads)]
            util = statistics.mean(extra[g]) if extra[g] else None
            if util is None and self.device.kind is DeviceKind.STANDIN:
                util = cpu_s[g] / max(wall_s[g] * self.device.threads, 1e-9)
            if util is None:
                notes.append("gpu_util not measured (install pynvml for NVML); set to 1.0")
                util = 1.0
            peak = self._memory_pass(tool)
            for _ in range(c.cold_loads):
                time.sleep(c.cold_pause_s)  # nothing runs on the device: the memory it freed goes cold
                cold.append(self._timed_load(tool, med))
            lmed, lp10, lp90 = _percentiles(loads)
            fields.update(gpu_ms=_round(med), load_ms=_round(lmed), vram_mb=round(max(peak, 0.0), 2),
                          gpu_util=round(min(1.0, max(0.01, util)), 2))
            spread.update(gpu_ms=Spread(p10=_round(p10), p90=_round(p90)),
                          load_ms=Spread(p10=_round(lp10), p90=_round(lp90)))
            if cold:
                cmed, cp10, cp90 = _percentiles(cold)
                fields.update(load_cold_ms=_round(cmed))
                spread.update(load_cold_ms=Spread(p10=_round(cp10), p90=_round(cp90)))
        card = ToolCard(name=tool.name, description=tool.description, provenance=self.provenance(), spread=spread,
                        **fields)
        return ToolProfile(card=card, cpu_times_ms=tuple(cpu_times), gpu_times_ms=gpu_times,
                           load_samples_ms=tuple(loads), notes=tuple(notes), cold_load_samples_ms=tuple(cold))

    def _timed_load(self, tool: Tool, warm_ms: float) -> float:
        """One fresh load on the device and its first call: the load time plus the first call's
        initialization (first call - ``warm_ms``), ms."""
        loaded = self._load(self.gpu, tool, "l")
        try:
            first = self._runs(self.gpu, tool, "l", 0, 1)
        finally:
            self.gpu.call("unload", key="l")
        return float(loaded["load_ms"]) + max(0.0, first["first_ms"] - warm_ms)


def plan_names(names: Sequence[str]) -> dict[str, list[str]]:
    """Base tool -> the names asked for it (``bert_base_x12`` asks for bert_base), in order."""
    plan: dict[str, list[str]] = {}
    for name in names:
        m = _AMPLIFIED.match(name)  # register_tool refuses _xK names, so these are always amplified
        base = m["base"] if m else name
        plan.setdefault(base, [])
        if base != name:
            plan[base].append(name)
    return plan


Progress = Callable[[str, int, int], None]
"""``progress(tool, done, total)`` before each tool and once at the end."""


def profile_tools(names: Sequence[str], config: ProfileConfig = ProfileConfig(), *,
                  skip: Sequence[str] = (), progress: Progress | None = None,
                  profiler: Profiler | None = None) -> Iterator[ToolProfile]:
    """Profile each named tool (``NAME_xK``: NAME, then derive the amplified card), yielding each
    profile as soon as it is measured. ``skip`` lists base tools already profiled."""
    plan = plan_names(names)
    todo = [b for b in plan if b not in skip]
    tools = [get_tool(b, config.size) for b in todo]  # unknown names fail before anything runs
    own = profiler is None
    prof = profiler or Profiler(config)
    try:
        for i, tool in enumerate(tools):
            if progress is not None:
                progress(tool.name, i, len(tools))
            try:
                result = prof.profile(tool)
            except WorkerError as exc:
                raise InputError(f"profiling {tool.name!r}: {exc}") from None
            derived = {}
            for name in plan[tool.name]:
                k = int(_AMPLIFIED.match(name)["k"])  # type: ignore[index]
                derived[name] = result.card.amplified(k, name=name)
            yield ToolProfile(result.card, result.cpu_times_ms, result.gpu_times_ms, result.load_samples_ms,
                              result.notes, derived, result.cold_load_samples_ms)
        if progress is not None:
            progress("", len(tools), len(tools))
    finally:
        if own:
            prof.close()


# ---------------------------------------------------------------------------- the card file
def card_entry(card: ToolCard, defaults: Provenance | None = None) -> dict[str, Any]:
    """A card as written in a tool library: defaults and the name omitted, and its provenance only
    when it differs from the file's ``defaults``."""
    data = card.model_dump(mode="json", exclude_defaults=True)
    data.pop("name", None)
    if defaults is not None and card.provenance == defaults:
        data.pop("provenance", None)
    return data


def write_library(path: Path | str, cards: Sequence[ToolCard], derived: dict[str, tuple[str, int]] | None = None,
                  header: Sequence[str] = ()) -> Path:
    """Write a tool library file (atomically): ``header`` as comments, the provenance of the last
    card as the file's defaults, the cards, then derived ``NAME_xK`` entries (``name -> (base, k)``)."""
    from hetsched.tools.torch_model import atomic_write

    path = Path(path)
    doc: dict[str, Any] = {}
    defaults = cards[-1].provenance if cards else None
    if defaults is not None:
        doc.update({k: v for k, v in defaults.model_dump(mode="json").items() if v not in ("", None)})
    tools: dict[str, Any] = {c.name: card_entry(c, defaults) for c in cards}
    for name, (base, k) in (derived or {}).items():
        tools[name] = {"base": base, "amplification": k}
    doc["tools"] = tools
    text = "".join(f"# {line}\n" if line else "#\n" for line in header)
    text += yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120)
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))
    return path
