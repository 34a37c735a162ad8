"""The best-known reference against a 60-second iterated local search, side by side, on fresh workflows.

Issue 17 asks that ``--reference best-known`` / ``auto`` (``hetsched.search.reference.best_known``
with its default budget, ``DEFAULT_SEARCH_SECONDS``) be at least as good as a 60 s iterated
local search on 50-node three-way workflows. For each workflow of ``hetsched.bench.generate``
(every family, seeds given on the command line: pick them after the code is written), this
runs, in one process one after the other (so both see the same machine load):

- *reference*: ``best_known(sc, seed=0)`` with the default budget (10 s): its E2E, its lower bound
  (a race of local searches from its best starts, then the best trajectory goes on);
- *ILS 60 s*: ``local_search(sc, seed=1, max_seconds=60)``: one trajectory of the same local search from
  its best start, another seed, six times the time.

The ratio reference / ILS (below 1: the reference is better) and the reported gap to the lower
bound are printed per workflow, then the median and the worst, per family and over all.

Time budgets depend on the machine's load (the load average is printed before and after, and the
CPU seconds each search got). ``--evals N`` makes the comparison independent of the machine: the
reference gets ``best_known(max_evals=N)`` and the ILS ``--ils-evals`` (default 6 N) simulations.

Run: python benchmarks/reference_vs_ils.py [--n 50] [--seeds 41 42] [--ils-seconds 60] [--evals N]
[--out FILE.json]
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
    parser.add_argument("--evals", type=int, help="budgets in simulations instead of seconds (reference: N)")
    parser.add_argument("--ils-evals", type=int, help="the ILS's simulations with --evals (default 6 N)")
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
            if args.evals:
                ref = best_known(sc, seed=0, max_seconds=None, max_evals=args.evals)
            else:
                ref = best_known(sc, seed=0, max_seconds=args.reference_seconds)
            ref_cpu = time.process_time() - t0
            t0 = time.process_time()
            if args.evals:
                ils = local_search(sc, seed=1, max_evals=args.ils_evals or 6 * args.evals)
            else:
                ils = local_search(sc, seed=1, max_seconds=args.ils_seconds)
            ils_cpu = time.process_time() - t0
            row = {"workflow": sc.name, "family": family, "reference_ms": ref.e2e_ms, "lower_ms": ref.lower_bound_ms,
                   "ils_ms": ils.e2e_ms, "ratio": ref.e2e_ms / ils.e2e_ms, "gap": ref.gap,
                   "reference_cpu_s": ref_cpu, "ils_cpu_s": ils_cpu, "ils_evaluations": ils.evaluations}
            rows.append(row)
            print(f"  {sc.name}: reference {ref.e2e_ms:.1f} ms ({ref_cpu:.1f} s CPU, gap to its lower bound "
                  f"{100 * (ref.gap or 0):.1f}%), ILS {ils.e2e_ms:.1f} ms ({ils_cpu:.1f} s CPU): "
                  f"ratio {row['ratio']:.4f}", flush=True)
    budget = (f"reference {args.evals} simulations, ILS {args.ils_evals or 6 * args.evals}" if args.evals
              else f"reference {args.reference_seconds:g} s, ILS {args.ils_seconds:g} s")
    print()
    print(f"budgets: {budget}; seeds {' '.join(map(str, args.seeds))}")
    print("| n | family | workflows | reference / ILS: median / worst | reference better / equal / worse "
          "| reference gap to its lower bound: median / max |")
    print("|---|---|---|---|---|---|")
    for family in [*args.families, "all"]:
        part = [r for r in rows if family in ("all", r["family"])]
        ratios = sorted(r["ratio"] for r in part)
        gaps = sorted(r["gap"] or 0.0 for r in part)
        better = sum(1 for r in ratios if r < 1 - 1e-9)
        worse = sum(1 for r in ratios if r > 1 + 1e-9)
        print(f"| {args.n} | {family} | {len(part)} | {statistics.median(ratios):.4f} / {ratios[-1]:.4f} "
              f"| {better} / {len(part) - better - worse} / {worse} "
              f"| {100 * statistics.median(gaps):.1f}% / {100 * gaps[-1]:.1f}% |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
