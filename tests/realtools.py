"""Small real tools for the executor and profiler tests: pure Python and numpy, so they run in the
worker processes without the [tools] extra, in milliseconds.

They are real tools (real memory, real work, real clocks), not mocks: ``Worker`` allocates its
memory at load and spins the CPU for its run time; ``Adder`` turns its inputs into an output so
tests can check that outputs flow along the edges. Failure and slowness are switched on by flag
files, so a test can inject them between rounds of a run. Every load and unload is appended to
an event log (when ``log`` is set), so tests can check what the device really held and when.

Imported by the tests and, through pickling, by the executor's worker processes (``tests`` is on
their sys.path).
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hetsched.model import Edge, Machine, Mode, Node, Scenario, ToolCard, Workflow
from hetsched.tools.base import Device, Tool

MB = 1_000_000


def spin(ms: float) -> None:
    """Keep one core busy for ``ms`` milliseconds."""
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        x += 1


class Worker(Tool):
    """Holds ``mem_mb`` of real memory while loaded; each call spins ``ms`` milliseconds and returns
    ``value`` plus the sum of its numeric inputs (so data flow is checkable)."""

    requires = ("numpy",)

    def __init__(self, name: str, ms: float = 10.0, mem_mb: float = 1.0, value: int = 1, *, has_gpu: bool = True,
                 load_ms: float = 0.0, log: str = "", fail_flag: str = "", slow_flag: str = "",
                 slow_s: float = 5.0, run_mem_mb: float = 0.0, crash_flag: str = "", crash: str = "kill") -> None:
        super().__init__("tiny")
        self.name, self.ms, self.mem_mb, self.value = name, ms, mem_mb, value
        self.has_gpu, self.load_delay_ms, self.log = has_gpu, load_ms, log
        self.fail_flag, self.slow_flag, self.slow_s, self.run_mem_mb = fail_flag, slow_flag, slow_s, run_mem_mb
        self.crash_flag, self.crash = crash_flag, crash
        self.description = f"test tool: {ms:g} ms of CPU, {mem_mb:g} MB"

    def _event(self, what: str, device: Device) -> None:
        if self.log:
            with open(self.log, "a", encoding="utf-8") as f:
                f.write(f"{time.monotonic():.9f} {what} {self.name} {device.label} {os.getpid()}\n")

    def load(self, device: Device) -> Any:
        spin(self.load_delay_ms)
        weights = np.ones(int(self.mem_mb * MB) // 8, dtype=np.float64)  # touched: really resident
        self._event("load", device)
        return {"weights": weights, "device": device}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        if self.crash_flag and os.path.exists(self.crash_flag):
            if self.crash == "segv":  # a real segmentation fault: read address 0
                import ctypes

                ctypes.string_at(0)
            os.kill(os.getpid(), signal.SIGKILL)  # the worker process dies mid-call
        if self.fail_flag and os.path.exists(self.fail_flag):
            raise RuntimeError(f"{self.name}: injected failure")
        if self.slow_flag and os.path.exists(self.slow_flag):
            time.sleep(self.slow_s)
        scratch = np.ones(int(self.run_mem_mb * MB) // 8) if self.run_mem_mb else None
        spin(self.ms)
        del scratch
        total = self.value + sum(int(x) for x in inputs if isinstance(x, int | np.integer))
        return int(total)

    def unload(self, handle: Any) -> None:
        self._event("unload", handle["device"])
        handle.clear()


class Oom(Tool):
    """Raises MemoryError when it runs (what an allocator does when the device is full)."""

    name = "oom_tool"

    def load(self, device: Device) -> Any:
        return {}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        raise MemoryError("cannot allocate 64 GB")


def card(name: str, ms: float = 10.0, vram_mb: float = 1.0, load_ms: float = 5.0, has_gpu: bool = True) -> ToolCard:
    """A card for a test tool (GPU figures equal to the CPU's: the stand-in device is CPU cores)."""
    return ToolCard(name=name, cpu_ms=ms, gpu_ms=ms if has_gpu else None, load_ms=load_ms if has_gpu else 0.0,
                    vram_mb=vram_mb if has_gpu else 0.0, has_gpu=has_gpu)


def scenario(nodes: Sequence[tuple[str, str]], edges: Sequence[tuple[str, str]], cards: Sequence[ToolCard], *,
             budget_mb: float = 100.0, mode: Mode = Mode.THREE_WAY, name: str = "realtest") -> Scenario:
    """A scenario over test tools (cards given; one CPU core for the CPU pool)."""
    wf = Workflow(nodes=tuple(Node(id=i, tool=t) for i, t in nodes),
                  edges=tuple(Edge(src=a, dst=b) for a, b in edges))
    return Scenario(name=name, mode=mode, workflow=wf, cards={c.name: c for c in cards},
                    machine=Machine(cpu_cores=1, vram_budget_mb=budget_mb, noise_cv=0.0, gpu_kappa=0.0))


def read_log(path: Path) -> list[tuple[float, str, str, str]]:
    """The event log: (monotonic time, load|unload, tool, device label)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        t, what, tool, dev, _ = line.split()
        out.append((float(t), what, tool, dev))
    return out


# ---------------------------------------------------------------------------- trace invariants
EPS_MS = 1e-6


def used_at(scenario: Scenario, trace: Any, t: float) -> float:
    """VRAM the admission accounting holds at time t, rebuilt from the node traces alone: each gpu_now
    tool from 0 until its last gpu_now node ends, each gpu_queue node from admission until its end."""
    from hetsched.model import Placement

    held = 0.0
    last_end: dict[str, float] = {}
    for nt in trace.nodes.values():
        if nt.placement is Placement.GPU_NOW:
            last_end[nt.tool] = max(last_end.get(nt.tool, 0.0), nt.end_ms)
        elif nt.placement is Placement.GPU_QUEUE and nt.admitted_ms <= t < nt.end_ms:
            held += scenario.cards[nt.tool].vram_mb
    held += sum(scenario.cards[tool].vram_mb for tool, end in last_end.items() if t < end)
    return held


def timeline_at(trace: Any, t: float) -> float:
    """The trace's VRAM timeline (a step function) at time t."""
    used = 0.0
    for p in trace.vram_timeline:
        if p.t_ms <= t + EPS_MS:
            used = p.used_mb
    return used


def check_trace(scenario: Scenario, trace: Any) -> None:
    """Every invariant a feasible real trace must keep (raises AssertionError naming the node)."""
    from hetsched.model import Placement

    assert trace.feasible, trace.reason
    assert trace.executor == "local"
    wf = scenario.workflow
    assert set(trace.nodes) == set(wf.node_ids)
    budget = scenario.machine.vram_budget_mb
    for n, nt in trace.nodes.items():
        assert -EPS_MS <= nt.ready_ms <= nt.admitted_ms + EPS_MS, f"{n}: ready {nt.ready_ms} admitted {nt.admitted_ms}"
        assert nt.admitted_ms <= nt.start_ms + EPS_MS <= nt.end_ms + 2 * EPS_MS, f"{n}: {nt}"
        if nt.placement is not Placement.GPU_QUEUE:
            assert nt.admitted_ms == nt.ready_ms, f"{n}: only gpu_queue nodes wait for admission"
            assert nt.load_ms == 0.0
        else:
            assert nt.start_ms - nt.admitted_ms >= nt.load_ms - 1e-3, f"{n}: starts before its load could end"
        for p in wf.preds(n):
            assert nt.ready_ms >= trace.nodes[p].end_ms - EPS_MS, f"{n} ready before its input {p} ended"
            assert nt.start_ms >= trace.nodes[p].end_ms - EPS_MS, f"{n} started before its input {p} ended"
    assert trace.e2e_ms == max(trace.nodes[s].end_ms for s in wf.sinks)
    # the VRAM timeline is the admission accounting, never over budget
    assert trace.vram_timeline and trace.vram_timeline[0].t_ms == 0.0
    times = sorted({p.t_ms for p in trace.vram_timeline} | {x for nt in trace.nodes.values()
                                                             for x in (nt.ready_ms, nt.admitted_ms, nt.end_ms)})
    for t in times:
        used = timeline_at(trace, t)
        assert used <= budget + EPS_MS, f"VRAM {used} MB over the {budget} MB budget at {t} ms"
        assert abs(used - used_at(scenario, trace, t)) < 1e-6, f"timeline {used} != accounting at {t} ms"
    # the queue is FIFO: admissions keep the order in which nodes became ready. The dispatcher stamps
    # a node's ready and admission times with the same clock reading when it admits it at once, so
    # when every GPU tool fits the budget together no queued node may wait at all (exact, not timed:
    # a release is only seen when its reply is processed, so a wait cannot be judged by wall time)
    queued = sorted((nt for nt in trace.nodes.values() if nt.placement is Placement.GPU_QUEUE),
                    key=lambda nt: (nt.ready_ms, nt.admitted_ms))
    for a, b in itertools.pairwise(queued):
        assert a.admitted_ms <= b.admitted_ms, f"{b.node} admitted before {a.node}, which was ready first"
    resident = {nt.tool for nt in trace.nodes.values() if nt.placement is Placement.GPU_NOW}
    if sum(scenario.cards[t].vram_mb for t in resident) + sum(scenario.cards[nt.tool].vram_mb for nt in queued) <= budget:
        for nt in queued:
            assert nt.admitted_ms == nt.ready_ms, f"{nt.node} waited although every GPU tool fits the budget"
