"""Calibration of what a ``gpu_queue`` load contends with (``machine.load_sharing``) on the local
executor's stand-in device.

Real tools (``tests/shapetools.py``): ``table`` fills a 150 MB table at load (a memory-heavy load)
and ``busy`` multiplies matrices on the device. Profiled first (1-thread CPU pool, 1-thread
stand-in device, as the executor runs), then three small workflows, each run ``--runs`` times
(interleaved) on the local executor:

- ``alone``: one queued ``table`` (its load and compute with nothing beside them);
- ``beside compute``: a queued ``table`` beside a resident (``gpu_now``) ``busy`` node;
- ``two loads``: two queued tables loading at once (both fit the budget);

plus ``compute alone`` (the resident node by itself). The model's inputs are the medians measured
alone (not the profile's cards: on a busy machine those can be off by 2x, and this calibrates what
a load contends with, not the cards); for the two mixed cases, the measured load, compute and E2E
(medians) against the model's prediction under each ``load_sharing`` setting (``none``, ``copy``,
``device``). The setting that fits the stand-in device is the one whose errors stay small in both.

Run: python benchmarks/calibrate_loads.py [--runs 9] [--profile-runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.shapetools, here and in the workers

from hetsched.exec.local import LocalExecutor
from hetsched.model import Edge, Machine, Mapping, Mode, Node, Placement, Scenario, ToolCard, Workflow
from hetsched.profiling import ProfileConfig, profile_tools
from hetsched.sim import Simulator
from hetsched.tools import register_tool

G, Q = Placement.GPU_NOW, Placement.GPU_QUEUE
def make_tools() -> tuple[Any, ...]:
    """Built on demand: a module-level numpy import would run again in each spawned worker (this
    script is their ``__main__``) before the worker limits the BLAS threads."""
    from tests.shapetools import MatMul, TableLookup

    return (TableLookup("table", table_mb=150.0, lookups=20_000), TableLookup("table2", table_mb=150.0,
                                                                              lookups=20_000),
            MatMul("busy", n=256, reps=60))
SHARING = ("none", "copy", "device")


def cases(cards: dict[str, ToolCard]) -> dict[str, tuple[Scenario, Mapping]]:
    def sc(name: str, nodes: list[tuple[str, str]]) -> Scenario:
        return Scenario(name=name, mode=Mode.THREE_WAY, cards={t: cards[t] for _, t in nodes},
                        workflow=Workflow(nodes=tuple(Node(id=n, tool=t) for n, t in nodes), edges=tuple[Edge, ...]()),
                        machine=Machine(cpu_cores=1, vram_budget_mb=1000.0, gpu_kappa=0.0, noise_cv=0.0))

    return {
        "load alone": (sc("load alone", [("load", "table")]), Mapping({"load": Q})),
        "compute alone": (sc("compute alone", [("compute", "busy")]), Mapping({"compute": G})),
        "load beside compute": (sc("beside", [("load", "table"), ("compute", "busy")]),
                                Mapping({"load": Q, "compute": G})),
        "two loads": (sc("two loads", [("load", "table"), ("load2", "table2")]), Mapping({"load": Q, "load2": Q})),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--profile-runs", type=int, default=10)
    args = ap.parse_args()
    tools = make_tools()
    for t in tools:
        register_tool(t, replace=True)
    t0 = time.monotonic()
    la0 = Path("/proc/loadavg").read_text().split()[0]
    config = ProfileConfig(runs=args.profile_runs, warmup=2, loads=3, cpu_threads=1, device_threads=1)
    cards = {r.card.name: r.card for r in profile_tools([t.name for t in tools], config)}
    rows = cases(cards)
    real: dict[str, dict[str, list[float]]] = {name: {} for name in rows}
    executors = {name: LocalExecutor(sc, device="standin", cpu_threads=1, device_threads=1)
                 for name, (sc, _) in rows.items()}
    try:
        for name, (_, m) in rows.items():
            executors[name].start()
            executors[name].run(m)  # warm
        for _ in range(args.runs):
            for name, (_, m) in rows.items():
                tr = executors[name].run(m)
                assert tr.feasible and tr.e2e_ms is not None, tr.infeasibility
                got = real[name]
                got.setdefault("e2e", []).append(tr.e2e_ms)
                for n, nt in tr.nodes.items():
                    got.setdefault(f"{n} load", []).append(nt.load_ms)
                    got.setdefault(f"{n} run", []).append(nt.end_ms - nt.start_ms)
    finally:
        for ex in executors.values():
            ex.close()
    med = {name: {k: statistics.median(v) for k, v in got.items()} for name, got in real.items()}
    # the model's inputs from the runs alone (not the profile: on a busy machine a card can be off
    # by 2x, and this calibrates what a load contends with, not the cards)
    alone = {"table": cards["table"].model_copy(update={"load_ms": med["load alone"]["load load"],
                                                         "gpu_ms": med["load alone"]["load run"]}),
             "table2": cards["table2"].model_copy(update={"load_ms": med["load alone"]["load load"],
                                                           "gpu_ms": med["load alone"]["load run"]}),
             "busy": cards["busy"].model_copy(update={"gpu_ms": med["compute alone"]["compute run"]})}
    print(f"Alone (measured, the model's inputs): load {med['load alone']['load load']:.0f} ms, the table's call "
          f"{med['load alone']['load run']:.1f} ms, the compute node {med['compute alone']['compute run']:.0f} ms.\n")
    print("| case | figure | measured ms | " + " | ".join(f"{s} (error)" for s in SHARING) + " |")
    print("|---|---|---:|" + "---:|" * len(SHARING))
    for name in ("load beside compute", "two loads"):
        sc, m = rows[name]
        sc = sc.model_copy(update={"cards": {t: alone[t] for t in sc.cards}})
        traces = {s: Simulator(sc.model_copy(update={"machine": sc.machine.model_copy(update={"load_sharing": s})}),
                               noise=False).run(m) for s in SHARING}
        figures = [("load", "load load", lambda tr: tr.nodes["load"].load_ms)]
        if "compute" in sc.workflow.node_ids:
            figures.append(("compute node", "compute run", lambda tr: tr.nodes["compute"].end_ms
                            - tr.nodes["compute"].start_ms))
        figures.append(("E2E", "e2e", lambda tr: tr.e2e_ms))
        for label, key, get in figures:
            r = med[name][key]
            cells = [f"{get(traces[s]):.0f} ({(get(traces[s]) - r) / r:+.0%})" for s in SHARING]
            print(f"| {name} | {label} | {r:.0f} | " + " | ".join(cells) + " |")
    print(f"\nload average {la0} -> {Path('/proc/loadavg').read_text().split()[0]}; {time.monotonic() - t0:.0f} s "
          f"(cards, for reference: " + ", ".join(f"{c.name} gpu {c.gpu_ms} load {c.load_ms}" for c in cards.values())
          + ")")


if __name__ == "__main__":
    main()
