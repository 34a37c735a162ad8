"""Calibration of cross-core interference (``machine.cross_core_slowdown``) on the local executor.

The CPU pool and the stand-in device are worker processes pinned to cores of their own, as the
executor and the profiler run them. A task on one is slowed by work on the other although they
share no core: shared caches and memory bandwidth, and on a virtual machine the host core's
hyper-thread sibling that may be the other vCPU.

Real tools (``tests/shapetools.py``): pure-Python text, a numpy matrix product, random gathers in a
120 MB table, a 120 MB table's load (page faults and a memory fill). For every victim on one side
and aggressor on the other (both directions), ``--reps`` times interleaved: the victim's timed runs
alone, then the same while the aggressor runs back to back on the other side. Each is measured per
call in the victim's CPU time and in its **own-core wall time**: the wall time less what its thread
waited for a core (Linux schedstat), so a busy machine's other processes, which take the victim's
core away for a while, stay out, while the interference (the victim's own instructions running
slower, a host that cannot run both vCPUs at full speed) stays in. (A table's load is timed whole.)

The slowdown per pair is busy / alone (medians); ``cross_core_slowdown`` x is the median of
(own-core wall slowdown - 1) over the pairs: the model then slows a CPU task by 1 + x u_dev while the device
runs (u_dev: its utilization) and a device task by 1 + x u_cpu (docs/simulator.md).

Run: python benchmarks/calibrate_cross_core.py [--reps 3] [--runs 6]
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.shapetools, here and in the workers

from hetsched.exec.devices import plan_cores
from hetsched.exec.local import DEVICE_SAMPLE_MS
from hetsched.exec.worker import Worker, tool_bytes
from hetsched.tools.base import Device, DeviceKind


def make_tools() -> dict[str, Any]:
    """Built on demand: a module-level numpy import would run again in each spawned worker."""
    from tests.shapetools import MatMul, PyText, TableLookup

    return {"text": PyText("text", words=150_000), "matmul": MatMul("matmul", n=384, reps=8),
            "gather": TableLookup("gather", table_mb=120.0, lookups=60_000),
            "load": TableLookup("load", table_mb=120.0, lookups=1)}


class Side:
    """One side (the CPU pool or the stand-in device): a worker with every tool prepared and loaded."""

    def __init__(self, worker: Worker, tools: dict[str, Any]) -> None:
        self.worker, self.tools = worker, tools
        self.blobs = {name: tool_bytes(t) for name, t in tools.items()}
        worker.start()
        reply = worker.call("prepare", tools=list(self.blobs.values()), warm=True)
        assert reply.ok, reply.detail
        for name in tools:
            if name != "load":
                assert worker.call("load", key=name, tool=self.blobs[name]).ok

    def call_ms(self, name: str, runs: int) -> tuple[float, float]:
        """(CPU ms, own-core wall ms: less what the calling thread waited for a core) per call of
        ``runs`` calls (``load``: a load and unload each, its wall time whole)."""
        w = self.worker
        if name == "load":
            cpu = wall = 0.0
            for _ in range(runs):
                c0, t0 = self.cpu_s(), time.monotonic()
                assert w.call("load", key="l", tool=self.blobs["load"]).ok
                cpu += self.cpu_s() - c0
                wall += time.monotonic() - t0
                w.call("unload", key="l")
            return cpu * 1e3 / runs, wall * 1e3 / runs
        reply = w.call("bench", key=name, inputs=[], warmup=0, runs=runs)
        assert reply.ok, reply.detail
        data = reply.data
        return data["cpu_s"] * 1e3 / runs, (data["wall_s"] - data["wait_s"]) * 1e3 / runs

    def cpu_s(self) -> float:
        """The worker process's CPU time (Linux /proc, clock ticks), s."""
        fields = Path(f"/proc/{self.worker.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def keep_busy(self, name: str, seconds: float, ms_per_call: float) -> int:
        """Start the aggressor: back-to-back calls for about ``seconds`` (returns the request id)."""
        runs = max(1, math.ceil(seconds * 1e3 / max(ms_per_call, 0.5)))
        return self.worker.submit("bench", key=name, inputs=[], warmup=0, runs=runs)

    def wait(self, req: int) -> None:
        while not any(r.req_id == req for r in self.worker.receive(timeout=1.0)):
            pass


def loadavg() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs", type=int, default=6, help="victim calls per measurement")
    args = ap.parse_args()
    plan = plan_cores(1, 1)
    if plan.shared:
        sys.exit("needs 2 cores: the CPU pool and the stand-in device each pinned to its own")
    tools = make_tools()
    cpu = Side(Worker(Device(DeviceKind.CPU, 0, 1), plan.cpu_cores, "CPU pool", sample_ms=0.0), tools)
    dev = Side(Worker(Device(DeviceKind.STANDIN, 0, 1), plan.device_cores, "stand-in device",
                      sample_ms=DEVICE_SAMPLE_MS), tools)
    sides = {"cpu": cpu, "device": dev}
    t0, la0 = time.monotonic(), loadavg()
    alone_ms = {(s, v): side.call_ms(v, 2)[1] for s, side in sides.items() for v in tools}
    victims = list(tools)
    aggressors = [a for a in tools if a != "load"]  # a loop of loads would need a command of its own
    ratios: dict[tuple[str, str, str], list[tuple[tuple[float, float], tuple[float, float]]]] = {}
    for _ in range(args.reps):
        for (s, side), v, a in itertools.product(sides.items(), victims, aggressors):
            other = dev if s == "cpu" else cpu
            alone = side.call_ms(v, args.runs)
            busy_for = alone_ms[(s, v)] * args.runs / 1e3 * 2.0 + 0.05
            req = other.keep_busy(a, busy_for, alone_ms[("device" if s == "cpu" else "cpu", a)])
            time.sleep(0.01)
            busy = side.call_ms(v, args.runs)
            other.wait(req)
            ratios.setdefault((s, v, a), []).append((alone, busy))
    for side in sides.values():
        side.worker.close()
    print(f"# Cross-core interference (`benchmarks/calibrate_cross_core.py --reps {args.reps} "
          f"--runs {args.runs}`)\n")
    print(f"CPU pool pinned to core(s) {plan.cpu_cores}, stand-in device to {plan.device_cores}; the victim's CPU and "
          f"own-core wall time per call, alone and with the aggressor busy on the other side; load average {la0} -> "
          f"{loadavg()}, {time.monotonic() - t0:.0f} s.\n")
    print("| victim side | victim | aggressor | alone: CPU / own-core wall ms | busy: CPU / own-core wall ms "
          "| slowdown (CPU) | slowdown (wall) |")
    print("|---|---|---|---:|---:|---:|---:|")
    slow = []
    for (s, v, a), vals in ratios.items():
        alone = [statistics.median(x[0][k] for x in vals) for k in (0, 1)]
        busy = [statistics.median(x[1][k] for x in vals) for k in (0, 1)]
        r = [b / a if a > 0 else float("nan") for a, b in zip(alone, busy, strict=True)]
        slow.append(r[1])
        print(f"| {s} | {v} | {a} | {alone[0]:.1f} / {alone[1]:.1f} | {busy[0]:.1f} / {busy[1]:.1f} | {r[0]:.2f}x "
              f"| {r[1]:.2f}x |")
    good = [r for r in slow if r == r]
    x = max(0.0, statistics.median(good) - 1.0) if good else 0.0
    q = statistics.quantiles(good, n=10) if len(good) > 1 else [x + 1] * 9
    print(f"\nOwn-core wall slowdown over the {len(good)} pairs: median {statistics.median(good):.2f}x "
          f"(p10 {q[0]:.2f}x, p90 {q[-1]:.2f}x): machine.cross_core_slowdown = {x:.2f}")


if __name__ == "__main__":
    main()
