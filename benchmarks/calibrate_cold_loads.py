"""Calibration of cold-memory loads (``machine.cold_load_share``, the cards' ``load_cold_ms``) on the
local executor's stand-in device.

A memory-heavy load (``tests/shapetools.py``'s table of ``--table-mb`` MB, filled at load) costs what
its pages cost. The profiler's ``load_ms`` comes from loads back to back, each reusing the memory
the previous one just freed; a load after the device sat idle (``ProfileConfig.cold_loads``:
``load_cold_ms``) finds that memory gone cold where the machine reclaims freed memory: a virtual
machine with free page reporting (virtio-balloon) hands it back to its host about 2 s after the
free, and touching it again costs the host's page faults. On bare metal the two figures agree.

Steps: profile the table with ``cold_loads`` (warm and cold figures), then run a one-node workflow
(the table as ``gpu_queue``) ``--rounds`` times on the local executor for each gap between rounds
in ``--gaps-s`` (nothing runs during a gap), interleaved. Each measured load counts as cold when it
is nearer (in ratio) the cold figure than the warm one, i.e. above their geometric mean. The share
of cold loads at the gap your requests arrive with is the machine's ``cold_load_share``; the
simulator then charges every load ``load_ms + share x (load_cold_ms - load_ms)``.

Run: python benchmarks/calibrate_cold_loads.py [--rounds 8] [--gaps-s 0,0.5,1,3] [--table-mb 250]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.shapetools, here and in the workers

from hetsched.exec.local import LocalExecutor
from hetsched.model import Machine, Mapping, Mode, Node, Placement, Scenario, ToolCard, Workflow
from hetsched.profiling import ProfileConfig, profile_tools
from hetsched.tools import register_tool


def make_tool(table_mb: float) -> Any:
    """Built on demand: a module-level numpy import would run again in each spawned worker."""
    from tests.shapetools import TableLookup

    return TableLookup("cold_table", table_mb=table_mb, lookups=20_000)


def loadavg() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--rounds", type=int, default=8, help="rounds per gap (interleaved)")
    ap.add_argument("--gaps-s", default="0,0.5,1,3", help="idle seconds before each round, comma-separated")
    ap.add_argument("--table-mb", type=float, default=250.0)
    ap.add_argument("--cold-loads", type=int, default=3)
    ap.add_argument("--cold-pause-s", type=float, default=3.0)
    args = ap.parse_args()
    gaps = [float(g) for g in args.gaps_s.split(",")]
    tool = make_tool(args.table_mb)
    register_tool(tool, replace=True)
    t0, la0 = time.monotonic(), loadavg()
    config = ProfileConfig(runs=10, warmup=2, loads=3, cold_loads=args.cold_loads, cold_pause_s=args.cold_pause_s,
                           cpu_threads=1, device_threads=1)
    (prof,) = profile_tools([tool.name], config)
    card: ToolCard = prof.card
    warm, cold = card.load_ms, card.load_cold_ms or card.load_ms
    cut = math.sqrt(warm * cold)
    print(f"profiled: load_ms {warm:.1f} (samples {', '.join(f'{x:.0f}' for x in prof.load_samples_ms)}), "
          f"load_cold_ms {cold:.1f} (samples {', '.join(f'{x:.0f}' for x in prof.cold_load_samples_ms)}) "
          f"after {args.cold_pause_s:g} s idle; a load counts as cold above {cut:.1f} ms", file=sys.stderr)
    sc = Scenario(name="cold", mode=Mode.THREE_WAY, cards={tool.name: card},
                  workflow=Workflow(nodes=(Node(id="load", tool=tool.name),), edges=()),
                  machine=Machine(cpu_cores=1, vram_budget_mb=10 * args.table_mb + 100, gpu_kappa=0.0, noise_cv=0.0))
    mapping = Mapping({"load": Placement.GPU_QUEUE})
    measured: dict[float, list[float]] = {g: [] for g in gaps}
    with LocalExecutor(sc, device="standin", cpu_threads=1, device_threads=1) as ex:
        ex.start()
        ex.run(mapping)
        for _ in range(args.rounds):
            for g in gaps:
                time.sleep(g)
                trace = ex.run(mapping)
                if trace.feasible:
                    measured[g].append(trace.nodes["load"].load_ms)
    print(f"# Cold-memory loads on the stand-in device (`benchmarks/calibrate_cold_loads.py`)\n\n"
          f"{args.table_mb:g} MB table; card: load_ms {warm:.1f} ms (back to back), load_cold_ms {cold:.1f} ms "
          f"(after {args.cold_pause_s:g} s idle: {cold / warm:.1f}x); load average {la0} -> {loadavg()}, "
          f"{time.monotonic() - t0:.0f} s.\n")
    print("| idle before the round | rounds | median load | load / load_ms | cold loads (share) |")
    print("|---:|---:|---:|---:|---:|")
    for g, vals in measured.items():
        if not vals:
            continue
        share = sum(v > cut for v in vals) / len(vals)
        med = statistics.median(vals)
        print(f"| {g:g} s | {len(vals)} | {med:.1f} ms | {med / warm:.2f}x | {share:.2f} |")
    print("\nSet `machine.cold_load_share` to the share at the gap the requests come with (0: every load as "
          "the profiler's back-to-back loads).")


if __name__ == "__main__":
    main()
