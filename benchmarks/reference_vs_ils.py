"""The best-known reference against a 60-second iterated local search, side by side, on fresh workflows.

Issue 17 asks that ``--reference best-known`` / ``auto`` (``hetsched.search.reference.best_known``
with its default budget, ``DEFAULT_SEARCH_SECONDS``) be at least as good as a 60 s iterated
local search on 50-node three-way workflows. For each workflow of ``hetsched.bench.generate``
(every family, seeds given on the command line: pick them after the code is written), this
runs, in one process one after the other (so both see the same machine load):

- *reference*: ``best_known(sc, seed=0)`` with the default budget (10 s): its E2E, its lower bound;
- *ILS 60 s*: ``local_search(sc, seed=1, max_seconds=60)``: the same search algorithm, another seed,
  six times the time.

The ratio reference / ILS (below 1: the reference is better) and the reported gap to the lower
bound are printed per workflow, then the median and the worst.

Run: python benchmarks/reference_vs_ils.py [--n 50] [--seeds 41 42] [--ils-seconds 60] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from hetsched.bench.generate import FAMILIES, WorkflowSpec, random_scenario
from hetsched.model import Mode
from hetsched.search.local_search import local_search
from hetsched.search.reference import DEFAULT_SEARCH_SECONDS, best_known


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--seeds", type=int, nargs="+", default=[41])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES))
    parser.add_argument("--ils-seconds", type=float, default=60.0)
    parser.add_argument("--reference-seconds", type=float, default=DEFAULT_SEARCH_SECONDS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {platform.machine()}, {cpus} CPUs, Python {platform.python_version()}; "
          f"load average before: {os.getloadavg()[0]:.1f}")
    rows: list[dict[str, Any]] = []
    for seed in args.seeds:
        for family in args.families:
            sc = random_scenario(WorkflowSpec(family, args.n, Mode.THREE_WAY, seed))
            t0 = time.process_time()
            ref = best_known(sc, seed=0, max_seconds=args.reference_seconds)
            ref_cpu = time.process_time() - t0
            t0 = time.process_time()
            ils = local_search(sc, seed=1, max_seconds=args.ils_seconds)
            ils_cpu = time.process_time() - t0
            row = {"workflow": sc.name, "reference_ms": ref.e2e_ms, "lower_ms": ref.lower_bound_ms,
                   "ils_ms": ils.e2e_ms, "ratio": ref.e2e_ms / ils.e2e_ms, "gap": ref.gap,
                   "reference_cpu_s": ref_cpu, "ils_cpu_s": ils_cpu}
            rows.append(row)
            print(f"  {sc.name}: reference {ref.e2e_ms:.1f} ms ({ref_cpu:.1f} s CPU, gap to its lower bound "
                  f"{100 * (ref.gap or 0):.1f}%), ILS {ils.e2e_ms:.1f} ms ({ils_cpu:.1f} s CPU): "
                  f"ratio {row['ratio']:.4f}", flush=True)
    ratios = sorted(r["ratio"] for r in rows)
    gaps = sorted(r["gap"] or 0.0 for r in rows)
    print()
    print("| n | workflows | reference / ILS: median / worst | reference better / equal / worse "
          "| reference gap to its lower bound: median / max |")
    print("|---|---|---|---|---|")
    better = sum(1 for r in ratios if r < 1 - 1e-9)
    worse = sum(1 for r in ratios if r > 1 + 1e-9)
    print(f"| {args.n} | {len(rows)} | {statistics.median(ratios):.4f} / {ratios[-1]:.4f} "
          f"| {better} / {len(rows) - better - worse} / {worse} "
          f"| {100 * statistics.median(gaps):.1f}% / {100 * gaps[-1]:.1f}% |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
