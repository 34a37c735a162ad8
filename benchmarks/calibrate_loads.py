"""Calibration of what a ``gpu_queue`` load contends with (``machine.load_sharing``) on the local
executor's stand-in device.

Real tools (``tests/shapetools.py``): ``table`` fills a 150 MB table at load (a memory-heavy load)
and ``busy`` multiplies matrices on the device. Profiled first (1-thread CPU pool, 1-thread
stand-in device, as the executor runs), then three small workflows, each run ``--runs`` times
(interleaved) on the local executor:

- ``alone``: one queued ``table`` (its load and compute with nothing beside them);
- ``beside compute``: a queued ``table`` beside a resident (``gpu_now``) ``busy`` node;
- ``two loads``: two queued tables loading at once (both fit the budget).

For each: the measured load and the E2E (medians) against the model's prediction under each
``load_sharing`` setting (``none``, ``copy``, ``device``). The setting that predicts the stand-in
device is the one whose errors stay small in all three.

Run: python benchmarks/calibrate_loads.py [--runs 7] [--profile-runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.shapetools, here and in the workers

from tests.shapetools import MatMul, TableLookup

from hetsched.exec.local import LocalExecutor
from hetsched.model import Edge, Machine, Mapping, Mode, Node, Placement, Scenario, ToolCard, Workflow
from hetsched.profiling import ProfileConfig, profile_tools
from hetsched.sim import Simulator
from hetsched.tools import register_tool

G, Q = Placement.GPU_NOW, Placement.GPU_QUEUE
TOOLS = (TableLookup("table", table_mb=150.0, lookups=20_000), TableLookup("table2", table_mb=150.0, lookups=20_000),
         MatMul("busy", n=256, reps=12))
SHARING = ("none", "copy", "device")


def cases(cards: dict[str, ToolCard]) -> list[tuple[str, Scenario, Mapping]]:
    def sc(name: str, nodes: list[tuple[str, str]], budget: float) -> Scenario:
        return Scenario(name=name, mode=Mode.THREE_WAY, cards={t: cards[t] for _, t in nodes},
                        workflow=Workflow(nodes=tuple(Node(id=n, tool=t) for n, t in nodes), edges=tuple[Edge, ...]()),
                        machine=Machine(cpu_cores=1, vram_budget_mb=budget, gpu_kappa=0.0, noise_cv=0.0))

    alone = sc("alone", [("load", "table")], 1000.0)
    beside = sc("beside compute", [("load", "table"), ("compute", "busy")], 1000.0)
    two = sc("two loads", [("load", "table"), ("load2", "table2")], 1000.0)
    return [("alone", alone, Mapping({"load": Q})),
            ("beside compute", beside, Mapping({"load": Q, "compute": G})),
            ("two loads", two, Mapping({"load": Q, "load2": Q}))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--profile-runs", type=int, default=10)
    args = ap.parse_args()
    for t in TOOLS:
        register_tool(t, replace=True)
    t0 = time.monotonic()
    la0 = Path("/proc/loadavg").read_text().split()[0]
    config = ProfileConfig(runs=args.profile_runs, warmup=2, loads=3, cpu_threads=1, device_threads=1)
    cards = {r.card.name: r.card for r in profile_tools([t.name for t in TOOLS], config)}
    for c in cards.values():
        print(f"  {c.name}: gpu {c.gpu_ms} ms, load {c.load_ms} ms, vram {c.vram_mb} MB, util {c.gpu_util}",
              file=sys.stderr)
    rows = cases(cards)
    real: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, _, _ in rows}
    executors = {name: LocalExecutor(sc, device="standin", cpu_threads=1, device_threads=1) for name, sc, _ in rows}
    try:
        for name, _, m in rows:
            executors[name].start()
            executors[name].run(m)  # warm
        for _ in range(args.runs):
            for name, _, m in rows:
                tr = executors[name].run(m)
                assert tr.feasible and tr.e2e_ms is not None, tr.infeasibility
                real[name][0].append(tr.nodes["load"].load_ms)
                real[name][1].append(tr.e2e_ms)
    finally:
        for ex in executors.values():
            ex.close()
    print("| case | measured load ms | measured E2E ms | " + " | ".join(
        f"{s}: load / E2E (error)" for s in SHARING) + " |")
    print("|---|---:|---:|" + "---|" * len(SHARING))
    for name, sc, m in rows:
        load, e2e = statistics.median(real[name][0]), statistics.median(real[name][1])
        cells = []
        for s in SHARING:
            tr = Simulator(sc.model_copy(update={"machine": sc.machine.model_copy(update={"load_sharing": s})}),
                           noise=False).run(m)
            assert tr.e2e_ms is not None
            pl = tr.nodes["load"].load_ms
            cells.append(f"{pl:.0f} ({(pl - load) / load:+.0%}) / {tr.e2e_ms:.0f} ({(tr.e2e_ms - e2e) / e2e:+.0%})")
        print(f"| {name} | {load:.0f} | {e2e:.0f} | " + " | ".join(cells) + " |")
    print(f"\nload average {la0} -> {Path('/proc/loadavg').read_text().split()[0]}; "
          f"{time.monotonic() - t0:.0f} s; cards: " + ", ".join(
              f"{c.name} gpu {c.gpu_ms} load {c.load_ms}" for c in cards.values()))


if __name__ == "__main__":
    main()
