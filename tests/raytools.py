"""Small real tools and helpers for the Ray executor tests: pure Python and numpy, so Ray's worker
processes run them in milliseconds without the [tools] extra.

``Spin`` holds real memory while loaded (and optionally more while it runs) and keeps a core busy
for its run time; its output is its value plus the sum of its inputs, so tests can check that
outputs flowed along the edges. Failures are switched on by flag files, so a test can make one
round fail and the next succeed: ``fail_flag`` raises, ``crash_flag`` kills the worker process,
``slow_flag`` sleeps, ``freeze_flag`` stops (SIGSTOP) the raylet that started the worker after the
call's work, so the round's result still reaches the driver and the cluster's teardown meets a raylet
that does not answer; a flag named ``*.once`` is removed by the run it triggers. ``wait_flag`` and
``done_flag`` order tools without trusting their durations (a loaded machine stretches those): a
tool with ``wait_flag`` waits until that file exists (at most ``wait_s``), one with ``done_flag``
creates it when its call ends, one with ``start_flag`` when its call begins (a test waits for it
instead of guessing how long a worker takes to start).

The Ray executor ships this module to its workers by value (it is not installed), so nothing
here may need more than numpy and hetsched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hetsched.model import Edge, Machine, Mode, Node, Placement, Scenario, ToolCard, Trace, Workflow
from hetsched.tools.base import Device, Tool

MB = 1_000_000
EPS_MS = 1e-6


def spin(ms: float) -> None:
    """Keep one core busy for ``ms`` milliseconds."""
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        x += 1


def _flag(path: str) -> bool:
    """Whether a flag file is set (a ``*.once`` flag is consumed)."""
    if not path or not os.path.exists(path):
        return False
    if path.endswith(".once"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    return True


class Spin(Tool):
    """``mem_mb`` of real memory while loaded (``run_mem_mb`` more while running); each call spins
    ``ms`` and returns ``value`` plus the sum of its integer inputs."""

    requires = ("numpy",)

    def __init__(self, name: str, ms: float = 10.0, mem_mb: float = 1.0, value: int = 1, *, has_gpu: bool = True,
                 run_mem_mb: float = 0.0, fail_flag: str = "", crash_flag: str = "", slow_flag: str = "",
                 slow_s: float = 60.0, wait_flag: str = "", wait_s: float = 120.0, done_flag: str = "",
                 start_flag: str = "", freeze_flag: str = "") -> None:
        super().__init__("tiny")
        self.name, self.ms, self.mem_mb, self.value, self.has_gpu = name, ms, mem_mb, value, has_gpu
        self.run_mem_mb, self.fail_flag, self.crash_flag = run_mem_mb, fail_flag, crash_flag
        self.slow_flag, self.slow_s = slow_flag, slow_s
        self.wait_flag, self.wait_s, self.done_flag, self.start_flag = wait_flag, wait_s, done_flag, start_flag
        self.freeze_flag = freeze_flag
        self.description = f"test tool: {ms:g} ms of CPU, {mem_mb:g} MB"

    def load(self, device: Device) -> Any:
        return {"weights": np.ones(int(self.mem_mb * MB) // 8, dtype=np.float64), "device": device.label}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        if self.start_flag:
            Path(self.start_flag).touch()
        if _flag(self.fail_flag):
            raise RuntimeError(f"{self.name}: injected failure")
        if _flag(self.crash_flag):
            os._exit(3)  # the worker process dies, as on a segfault
        if _flag(self.slow_flag):
            time.sleep(self.slow_s)
        if self.wait_flag:
            deadline = time.monotonic() + self.wait_s
            while not os.path.exists(self.wait_flag) and time.monotonic() < deadline:
                time.sleep(0.01)
        scratch = np.ones(int(self.run_mem_mb * MB) // 8) if self.run_mem_mb else None
        spin(self.ms)
        del scratch
        if self.done_flag:
            Path(self.done_flag).touch()
        if _flag(self.freeze_flag):
            freeze_raylet()
        return int(self.value + sum(int(x) for x in inputs if isinstance(x, int | np.integer)))


def freeze_raylet() -> None:
    """SIGSTOP the raylet that started this Ray worker (its parent process); refuses anything else."""
    parent = os.getppid()
    argv0 = Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")[0]
    if os.path.basename(argv0) != b"raylet":
        raise RuntimeError(f"the worker's parent {parent} is {argv0!r}, not a raylet")
    os.kill(parent, signal.SIGSTOP)


def card(name: str, ms: float = 10.0, vram_mb: float = 1.0, load_ms: float = 5.0, has_gpu: bool = True,
         gpu_util: float = 1.0, cpu_threads: int = 1) -> ToolCard:
    """A card for a test tool (GPU figures equal to the CPU's: the stand-in device is CPU cores)."""
    return ToolCard(name=name, cpu_ms=ms, gpu_ms=ms if has_gpu else None, load_ms=load_ms if has_gpu else 0.0,
                    vram_mb=vram_mb if has_gpu else 0.0, has_gpu=has_gpu, gpu_util=gpu_util,
                    cpu_threads=cpu_threads)


def scenario(nodes: Sequence[tuple[str, str]], edges: Sequence[tuple[str, str]], cards: Sequence[ToolCard], *,
             budget_mb: float = 100.0, mode: Mode = Mode.THREE_WAY, name: str = "raytest",
             cpu_cores: int = 2) -> Scenario:
    """A scenario over test tools."""
    wf = Workflow(nodes=tuple(Node(id=i, tool=t) for i, t in nodes),
                  edges=tuple(Edge(src=a, dst=b) for a, b in edges))
    return Scenario(name=name, mode=mode, workflow=wf, cards={c.name: c for c in cards},
                    machine=Machine(cpu_cores=cpu_cores, vram_budget_mb=budget_mb, noise_cv=0.0, gpu_kappa=0.0))


def expected_outputs(sc: Scenario, values: dict[str, int]) -> dict[str, int]:
    """What each node outputs when every tool returns its value plus the sum of its inputs."""
    out: dict[str, int] = {}
    for n in sc.workflow.topo_order:
        out[n] = values[sc.workflow.tool_of[n]] + sum(out[p] for p in sc.workflow.preds(n))
    return out


# ---------------------------------------------------------------------------- invariants
def step_at(timeline: Sequence[Any], t: float) -> float:
    """A VRAM step function at time t."""
    used = 0.0
    for p in timeline:
        if p.t_ms <= t + EPS_MS:
            used = p.used_mb
    return used


def check_ray_trace(sc: Scenario, trace: Trace) -> None:
    """The invariants every feasible Ray trace keeps (AssertionError names the node or host):
    every node ran, times in order, no node ready or started before its inputs ended, E2E the last
    sink's end, every host's VRAM within its own budget at every change, the total the sum of the
    hosts', GPU units on hosts with a GPU and vram_mb, CPU nodes on hosts with enough CPUs."""
    assert trace.feasible, trace.reason
    assert trace.executor == "ray"
    wf = sc.workflow
    assert set(trace.nodes) == set(wf.node_ids)
    hosts = {h.host: h for h in trace.hosts}
    assert hosts, "a Ray trace lists the cluster's nodes"
    for n, nt in trace.nodes.items():
        assert -EPS_MS <= nt.ready_ms <= nt.admitted_ms + EPS_MS, f"{n}: ready {nt.ready_ms} > admitted {nt.admitted_ms}"
        assert nt.admitted_ms <= nt.start_ms + EPS_MS <= nt.end_ms + 2 * EPS_MS, f"{n}: {nt}"
        for p in wf.preds(n):
            assert nt.ready_ms >= trace.nodes[p].end_ms - EPS_MS, f"{n} ready before its input {p} ended"
            assert nt.start_ms >= trace.nodes[p].end_ms - EPS_MS, f"{n} started before its input {p} ended"
        assert nt.host in hosts, f"{n} ran on {nt.host!r}, which is not a node of the cluster"
        h = hosts[nt.host]
        if nt.placement.on_gpu:
            assert h.gpus > 0 and h.vram_budget_mb > 0, f"{n} ({nt.placement.value}) ran on {h.address} without a GPU"
        else:
            assert h.cpus >= sc.card_of(n).cpu_threads, f"{n} (cpu) ran on {h.address} with {h.cpus} CPUs"
        if nt.placement is Placement.GPU_QUEUE:
            assert nt.load_ms > 0, f"{n} is queued: it loads its tool inside the task"
        if nt.placement is Placement.GPU_NOW:
            assert nt.load_ms == 0.0, f"{n} runs on a resident tool"
    assert trace.e2e_ms == max(trace.nodes[s].end_ms for s in wf.sinks)
    times = sorted({p.t_ms for h in trace.hosts for p in h.vram_timeline} | {p.t_ms for p in trace.vram_timeline})
    for t in times:
        per_host = {h.host: step_at(h.vram_timeline, t) for h in trace.hosts}
        for hid, used in per_host.items():
            assert used <= hosts[hid].vram_budget_mb + EPS_MS, (
                f"VRAM {used} MB over node {hosts[hid].address}'s {hosts[hid].vram_budget_mb} MB at {t} ms")
        assert abs(step_at(trace.vram_timeline, t) - sum(per_host.values())) < 1e-6
    # the queued nodes' VRAM intervals (admission..end) on each host are inside its timeline
    for nt in trace.nodes.values():
        if nt.placement is Placement.GPU_QUEUE:
            need = sc.card_of(nt.node).vram_mb
            mid = (nt.admitted_ms + nt.end_ms) / 2
            assert step_at(hosts[nt.host].vram_timeline, mid) >= need - 1e-3, f"{nt.node} holds no VRAM while running"
