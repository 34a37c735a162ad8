"""Exact search speed: the bounded branch-and-bound against plain full enumeration, side by side.

Instances: seeded random workflows of ``random_scenarios.py`` (chain, fan-out, layered and random
DAGs over the bundled library's GPU-capable cards, VRAM budget between the largest tool and the
sum), three-way unless ``--mode binary``. For each instance:

- *bounded*: ``hetsched.search.oracle.solve`` (the optimum, ``top=1``) with the default worker
  processes: wall time, and the wall time it would take on idle cores (this process's CPU time
  plus the workers' CPU time divided among them; other jobs on a shared machine inflate the
  measured wall time); CPU time of a one-process run; simulations; peak memory of a third,
  traced one-process run (tracemalloc, numpy included).
- *plain*: every mapping enumerated with ``itertools.product``, the ``gpu_now`` budget checked and
  the rest simulated, as the old ``ranking=True`` did. For spaces larger than ``--plain-max``
  it is timed on a seeded random sample of mappings of that size and extrapolated to the whole
  space (the printed rows say so).

Ratios (plain / bounded) are taken per instance from timings made in the same run. Both results
are checked to agree on the optimum where plain enumeration ran in full.

``--generator bench`` draws the instances from ``hetsched.bench.generate`` instead (its seven
families: chain, parallel, fanout, forkjoin, diamond, layered, random; ``--first-seed`` picks
seeds not seen before); ``--no-plain`` and ``--no-memory`` skip the plain enumeration and the
traced run (at 16 nodes they cost more than the search).

Run: python benchmarks/oracle_speed.py [--sizes 10 12 14] [--seeds 5] [--families ...] [--out FILE.json]
     python benchmarks/oracle_speed.py --generator bench --sizes 16 --seeds 2 --first-seed 500 --no-plain --no-memory
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import random
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from random_scenarios import FAMILIES, random_scenario

from hetsched.bench.generate import FAMILIES as BENCH_FAMILIES
from hetsched.bench.generate import WorkflowSpec
from hetsched.bench.generate import random_scenario as generate
from hetsched.model import Mode, Scenario
from hetsched.search import oracle as oracle_mod
from hetsched.search.local_search import Evaluator
from hetsched.sim import Simulator


def plain(sc: Scenario, limit: int, seed: int) -> dict[str, Any]:
    """Plain enumeration: seconds for the whole space (measured, or extrapolated from a sample)."""
    sim = Simulator(sc, noise=False)
    ev = Evaluator(sc)
    choices = [[p.code for p in sc.allowed(v)] for v in sc.workflow.node_ids]
    space = sc.mapping_space_size()
    full = space <= limit
    if full:
        mappings: Any = itertools.product(*choices)
        count = space
    else:
        rng = random.Random(seed)
        mappings = [tuple(rng.choice(c) for c in choices) for _ in range(limit)]
        count = limit
    best = math.inf
    t0 = time.process_time()
    for codes in mappings:
        if not ev.static_ok(codes):
            continue
        e = sim.e2e_codes(codes)
        if e < best:
            best = e
    seconds = time.process_time() - t0
    return {"seconds": seconds * space / count, "full": full, "best": best if full else None}


def bounded(sc: Scenario, memory: bool = True) -> dict[str, Any]:
    oracle_mod._CACHE.clear()
    t0, p0, k0 = time.perf_counter(), time.process_time(), children_cpu()
    res = oracle_mod.solve(sc, max_seconds=None)
    wall = time.perf_counter() - t0
    parent, children = time.process_time() - p0, children_cpu() - k0
    oracle_mod._CACHE.clear()
    c0 = time.process_time()
    one = oracle_mod.solve(sc, max_seconds=None, workers=1)
    cpu = time.process_time() - c0
    assert one.best == res.best and one.e2e_ms == res.e2e_ms
    oracle_mod._CACHE.clear()
    peak = math.nan
    if memory:
        tracemalloc.start()  # a third run: tracing slows numpy down several times
        oracle_mod.solve(sc, max_seconds=None, workers=1)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    # what the parallel run needs from two idle cores: this process's CPU, then the workers' CPU shared
    idle_wall = parent + children / max(1, res.workers)
    return {"wall_s": wall, "idle_wall_s": idle_wall, "cpu_s": cpu, "workers": res.workers,
            "simulated": one.simulated, "peak_mib": peak / 2**20, "e2e_ms": res.e2e_ms}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 12, 14])
    parser.add_argument("--seeds", type=int, default=5, help="instances per family and size")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES))
    parser.add_argument("--mode", default="three_way", choices=[m.value for m in Mode])
    parser.add_argument("--plain-max", type=int, default=60_000,
                        help="enumerate spaces up to this size in full, else time a sample of this size")
    parser.add_argument("--out", type=Path, help="also write every measurement as JSON")
    parser.add_argument("--generator", choices=["random", "bench"], default="random",
                        help="random: benchmarks/random_scenarios.py; bench: hetsched.bench.generate")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--no-plain", action="store_true", help="skip plain enumeration")
    parser.add_argument("--no-memory", action="store_true", help="skip the traced run (peak memory)")
    args = parser.parse_args()
    if args.generator == "bench" and args.families == list(FAMILIES):
        args.families = list(BENCH_FAMILIES)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {cpus} CPUs, "
          f"Python {platform.python_version()}; load average before: {os.getloadavg()[0]:.1f}")
    rows: list[dict[str, Any]] = []
    for n in args.sizes:
        for family in args.families:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                if args.generator == "bench":
                    sc = generate(WorkflowSpec(family, n, Mode(args.mode), seed))
                else:
                    sc = random_scenario(n, args.mode, family, seed)
                b = bounded(sc, memory=not args.no_memory)
                p = ({"seconds": math.nan, "full": False, "best": None} if args.no_plain
                     else plain(sc, args.plain_max, seed))
                if p["full"]:
                    assert p["best"] == b["e2e_ms"], (sc.name, p["best"], b["e2e_ms"])
                row = {"n": n, "family": family, "seed": seed, "space": sc.mapping_space_size(), **b,
                       "plain_cpu_s": p["seconds"], "plain_measured": "full" if p["full"] else "sample"}
                rows.append(row)
                print(f"  {sc.name}: bounded {b['wall_s']:.2f} s wall ({b['workers']} proc; "
                      f"{b['idle_wall_s']:.2f} s on idle cores), {b['cpu_s']:.2f} s CPU "
                      f"alone, {b['simulated']} sims, {b['peak_mib']:.1f} MiB; plain {p['seconds']:.1f} s CPU "
                      f"({'full' if p['full'] else 'extrapolated'})", flush=True)
    print()
    print("| n | instances | space | bounded wall s: median / p90 / max | on idle cores: median / p90 / max "
          "| bounded CPU s (1 process): median / max | simulations: median / max | peak MiB: max "
          "| plain CPU s: median | plain / bounded (CPU): min / median |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        sub = [r for r in rows if r["n"] == n]
        wall = sorted(r["wall_s"] for r in sub)
        idle = sorted(r["idle_wall_s"] for r in sub)
        cpu = sorted(r["cpu_s"] for r in sub)
        sims = sorted(r["simulated"] for r in sub)
        ratio = sorted(r["plain_cpu_s"] / r["cpu_s"] for r in sub)
        how = "full" if all(r["plain_measured"] == "full" for r in sub) else "extrapolated"
        k90 = min(len(wall) - 1, math.ceil(0.9 * len(wall)) - 1)
        print(f"| {n} | {len(sub)} | {sub[0]['space']:,} | {statistics.median(wall):.2f} / {wall[k90]:.2f} / "
              f"{wall[-1]:.2f} | {statistics.median(idle):.2f} / {idle[k90]:.2f} / {idle[-1]:.2f} "
              f"| {statistics.median(cpu):.2f} / {cpu[-1]:.2f} | {statistics.median(sims):,.0f} / {sims[-1]:,} "
              f"| {max(r['peak_mib'] for r in sub):.1f} | {statistics.median(r['plain_cpu_s'] for r in sub):,.0f} "
              f"({how}) | {ratio[0]:,.0f}x / {statistics.median(ratio):,.0f}x |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
