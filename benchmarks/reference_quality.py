"""Best-known reference quality: its gap to the true optimum (n = 10-14) and to the lower bound (n = 20-100).

Instances: seeded random workflows of ``random_scenarios.py`` (chain, fan-out, layered and
random DAGs over the bundled library's GPU-capable cards), three-way.

- Small workflows (``--exact-sizes``, default 10 12 14): ``best_known`` with a budget of
  ``--evals`` simulations (seeded, the same on every machine) against the exact optimum of
  ``hetsched.search.oracle.solve``: the true gap (best-known / optimum - 1), how often it is exactly
  optimal, and the gap it reports against its own lower bound.
- Large workflows (``--large-sizes``, default 20 50 100): ``best_known`` with ``--seconds`` of wall
  time (what ``--reference best-known --max-seconds`` gives a user): the reported gap to the lower
  bound, and which part of the bound did the work (the bound of the empty mapping, the
  Lagrangian bound, the best-first bound search).

Run: python benchmarks/reference_quality.py [--seeds 3] [--evals 2000] [--seconds 10] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from random_scenarios import FAMILIES, random_scenario

from hetsched.search import oracle as oracle_mod
from hetsched.search.lower_bound import dual_bound_ms, root_bound_ms
from hetsched.search.reference import best_known


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--exact-sizes", type=int, nargs="*", default=[10, 12, 14])
    parser.add_argument("--large-sizes", type=int, nargs="*", default=[20, 50, 100])
    parser.add_argument("--seeds", type=int, default=3, help="instances per family and size")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES))
    parser.add_argument("--evals", type=int, default=2000, help="best-known budget in simulations (small sizes)")
    parser.add_argument("--seconds", type=float, default=10.0, help="best-known budget in seconds (large sizes)")
    parser.add_argument("--out", type=Path, help="also write every measurement as JSON")
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {platform.machine()}, {cpus} CPUs, Python {platform.python_version()}; "
          f"load average before: {os.getloadavg()[0]:.1f}")
    rows: list[dict[str, Any]] = []
    for n in args.exact_sizes:
        for family in args.families:
            for seed in range(args.seeds):
                sc = random_scenario(n, "three_way", family, seed)
                opt = oracle_mod.solve(sc, max_seconds=None).e2e_ms
                t0 = time.perf_counter()
                ref = best_known(sc, seed=seed, max_evals=args.evals, max_seconds=None)
                seconds = time.perf_counter() - t0
                assert ref.lower_bound_ms is not None
                assert ref.lower_bound_ms <= opt * (1 + 1e-9) <= ref.e2e_ms * (1 + 1e-9)
                rows.append({"n": n, "family": family, "seed": seed, "kind": "exact", "best_known_ms": ref.e2e_ms,
                             "optimum_ms": opt, "lower_ms": ref.lower_bound_ms, "seconds": seconds})
                print(f"  {sc.name}: best-known / optimum {ref.e2e_ms / opt:.4f}, reported gap "
                      f"{pct(ref.gap or 0)}, {seconds:.1f} s", flush=True)
    for n in args.large_sizes:
        for family in args.families:
            for seed in range(args.seeds):
                sc = random_scenario(n, "three_way", family, seed)
                t0 = time.perf_counter()
                ref = best_known(sc, seed=seed, max_seconds=args.seconds)
                seconds = time.perf_counter() - t0
                assert ref.lower_bound_ms is not None
                root, dual = root_bound_ms(sc), dual_bound_ms(sc)
                rows.append({"n": n, "family": family, "seed": seed, "kind": "large", "best_known_ms": ref.e2e_ms,
                             "lower_ms": ref.lower_bound_ms, "root_ms": root, "dual_ms": dual, "seconds": seconds})
                print(f"  {sc.name}: reported gap {pct(ref.gap or 0)} (bounds: empty mapping {root:.0f}, "
                      f"Lagrangian {dual:.0f}, final {ref.lower_bound_ms:.0f}; best {ref.e2e_ms:.0f}), {seconds:.1f} s",
                      flush=True)
    print()
    if args.exact_sizes:
        print(f"Best-known ({args.evals} simulations) against the exact optimum:")
        print()
        print("| n | instances | optimal | gap to optimum: median / max | reported gap to lower bound: median / max "
              "| seconds: median |")
        print("|---|---|---|---|---|---|")
        for n in args.exact_sizes:
            sub = [r for r in rows if r["kind"] == "exact" and r["n"] == n]
            true = [r["best_known_ms"] / r["optimum_ms"] - 1 for r in sub]
            rep = [r["best_known_ms"] / r["lower_ms"] - 1 for r in sub]
            hit = sum(1 for g in true if g <= 1e-9)
            print(f"| {n} | {len(sub)} | {hit}/{len(sub)} | {pct(statistics.median(true))} / {pct(max(true))} "
                  f"| {pct(statistics.median(rep))} / {pct(max(rep))} "
                  f"| {statistics.median(r['seconds'] for r in sub):.1f} |")
        print()
    if args.large_sizes:
        print(f"Best-known ({args.seconds:g} s) against its lower bound:")
        print()
        print("| n | instances | reported gap: median / max | gap with the empty-mapping bound alone: median "
              "| with the Lagrangian bound: median | seconds: median |")
        print("|---|---|---|---|---|---|")
        for n in args.large_sizes:
            sub = [r for r in rows if r["kind"] == "large" and r["n"] == n]
            rep = [r["best_known_ms"] / r["lower_ms"] - 1 for r in sub]
            root = [r["best_known_ms"] / r["root_ms"] - 1 for r in sub]
            dual = [r["best_known_ms"] / max(r["root_ms"], r["dual_ms"]) - 1 for r in sub]
            print(f"| {n} | {len(sub)} | {pct(statistics.median(rep))} / {pct(max(rep))} "
                  f"| {pct(statistics.median(root))} "
                  f"| {pct(statistics.median(dual))} | {statistics.median(r['seconds'] for r in sub):.1f} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
