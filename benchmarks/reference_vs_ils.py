"""The best-known reference against a 60-second iterated local search, side by side, on fresh workflows.

Issue 17 asks that ``--reference best-known`` / ``auto`` (``hetsched.search.reference.best_known``
with its default budget, ``DEFAULT_SEARCH_SECONDS``) be at least as good as a 60 s iterated
local search on 50-node three-way workflows. For each workflow of ``hetsched.bench.generate``
(every family, seeds given on the command line: pick them after the code is written), this
runs, one after the other (so both see the same machine load):

- *reference*: ``best_known(sc, seed=0)`` with the default budget (10 s): its E2E, its lower bound
  (a race of local searches from its best starts, then the best trajectory goes on), in a child process
  of its own, as ``hetsched reference`` runs it (the one-time imports, 1-1.5 s for OR-Tools, count in its
  budget; its CPU seconds are the child's, its race's worker processes included);
- *ILS 60 s*: ``local_search(sc, seed=1, max_seconds=60)``: one trajectory of the same local search from
  its best start, another seed, six times the time.

The ratio reference / ILS (below 1: the reference is better) and the reported gap to the lower
bound are printed per workflow, then the median and the worst, per family and over all.

Time budgets depend on the machine's load (the load average is printed before and after, and the
CPU seconds each search got). ``--evals N`` makes the comparison independent of the machine: the
reference gets ``best_known(max_evals=N)`` and the ILS ``--ils-evals`` (default 6 N) simulations.

``--jobs N`` gives the reference's race N processes (default: the CPUs, as ``hetsched reference`` does; its
CPU seconds count its worker processes too: ``reference_cpu_s`` is the child's, once it has ended).
With ``--evals``, ``--lanes L`` makes the reference search as L processes would, each with N simulations
(``best_known(max_evals=N, lanes=L)``: L times the simulations, the same result on every machine): what an
idle L-core machine buys in N / 5,000 seconds. ``--ils-cache FILE`` keeps each ILS result (by workflow and
budget) in a JSON file and reuses it, so several references can be compared with one ILS.

``--old DIR`` adds, per workflow and just before this checkout's reference, the reference of the checkout
in DIR (another worktree, e.g. the session's start) in a child process with the same budget, so both
references see the same load and are compared with the same ILS (this checkout's): before -> after, side by
side. A workflow then costs about 2 x 10 s + 60 s (80 s; 4 families x 2 seeds: 11 minutes).

Run: python benchmarks/reference_vs_ils.py [--n 50] [--seeds 41 42] [--ils-seconds 60] [--evals N]
[--lanes L] [--jobs N] [--ils-cache FILE.json] [--old DIR] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hetsched.bench.generate import FAMILIES, WorkflowSpec, random_scenario
from hetsched.model import Mode
from hetsched.search.local_search import local_search
from hetsched.search.reference import DEFAULT_SEARCH_SECONDS

_OLD_CHILD = """
import json, sys, time
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.model import Mode
from hetsched.search.reference import best_known
family, n, seed, seconds, evals = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
lanes, jobs = int(sys.argv[6]) or None, int(sys.argv[7]) or None
sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY, seed))
t0 = time.process_time()
ref = (best_known(sc, seed=0, max_seconds=None, max_evals=evals, lanes=lanes, workers=jobs) if evals
       else best_known(sc, seed=0, max_seconds=seconds, workers=jobs))
print(json.dumps({"e2e_ms": ref.e2e_ms, "lower_ms": ref.lower_bound_ms, "cpu_s": time.process_time() - t0}))
"""


def old_reference(checkout: Path, family: str, n: int, seed: int, seconds: float, evals: int | None,
                  lanes: int | None = None, jobs: int | None = None) -> dict[str, Any]:
    """``best_known`` of the checkout in ``checkout`` (its ``src`` first on the path), in a child process, with the
    same ``lanes`` and processes as this checkout's; ``cpu_s`` is the child's CPU with its race's worker processes
    (and its imports), as the new side counts them."""
    env = {**os.environ, "PYTHONPATH": f"{checkout / 'src'}{os.pathsep}{checkout}"}
    c0 = _children_cpu_s()
    out = subprocess.run([sys.executable, "-c", _OLD_CHILD, family, str(n), str(seed), str(seconds), str(evals or 0),
                          str(lanes or 0), str(jobs or 0)],
                         env=env, check=True, capture_output=True, text=True, cwd=checkout)
    result = dict(json.loads(out.stdout.strip().splitlines()[-1]))
    result["cpu_s"] = _children_cpu_s() - c0  # the child's own process_time misses its worker processes
    return result


class _Ref:
    """A reference a child process found: its E2E, its lower bound and its gap (as ``Reference.gap``)."""

    def __init__(self, e2e_ms: float, lower_bound_ms: float | None) -> None:
        self.e2e_ms, self.lower_bound_ms = e2e_ms, lower_bound_ms
        self.gap = None if not lower_bound_ms else max(0.0, e2e_ms / lower_bound_ms - 1)


def _children_cpu_s() -> float:
    """CPU seconds of this process's finished children (the race's worker processes)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--seeds", type=int, nargs="+", default=[41])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES))
    parser.add_argument("--ils-seconds", type=float, default=60.0)
    parser.add_argument("--reference-seconds", type=float, default=DEFAULT_SEARCH_SECONDS)
    parser.add_argument("--evals", type=int, help="budgets in simulations instead of seconds (reference: N)")
    parser.add_argument("--ils-evals", type=int, help="the ILS's simulations with --evals (default 6 N)")
    parser.add_argument("--old", type=Path, help="another checkout whose reference runs beside this one's")
    parser.add_argument("--jobs", type=int, help="processes for the reference's race (default: the CPUs)")
    parser.add_argument("--lanes", type=int, help="with --evals: the reference searches as this many processes would")
    parser.add_argument("--ils-cache", type=Path, help="JSON file of ILS results to reuse and extend")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    ils_cache: dict[str, Any] = (json.loads(args.ils_cache.read_text())
                                 if args.ils_cache and args.ils_cache.exists() else {})
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {platform.machine()}, {cpus} CPUs, Python {platform.python_version()}; "
          f"load average before: {os.getloadavg()[0]:.1f}")
    rows: list[dict[str, Any]] = []
    for seed in args.seeds:
        for family in args.families:
            sc = random_scenario(WorkflowSpec(family, args.n, Mode.THREE_WAY, seed))
            old = (old_reference(args.old.resolve(), family, args.n, seed, args.reference_seconds, args.evals,
                                 args.lanes, args.jobs) if args.old else None)
            # this checkout's reference in a child process too: each side pays the one-time imports (OR-Tools
            # imports pandas: 1-1.5 s) in its budget as `hetsched reference` does, and its CPU counts its race's
            # worker processes once the child has ended (in this process it had missed some of them)
            new = old_reference(Path(__file__).resolve().parents[1], family, args.n, seed, args.reference_seconds,
                                args.evals, args.lanes, args.jobs)
            ref = _Ref(new["e2e_ms"], new["lower_ms"])
            ref_cpu = new["cpu_s"]
            key = f"{sc.name}|" + (f"evals {args.ils_evals or 6 * args.evals}" if args.evals
                                   else f"seconds {args.ils_seconds:g}")
            if key not in ils_cache:
                t0 = time.process_time()
                if args.evals:
                    ils = local_search(sc, seed=1, max_evals=args.ils_evals or 6 * args.evals)
                else:
                    ils = local_search(sc, seed=1, max_seconds=args.ils_seconds)
                ils_cache[key] = {"e2e_ms": ils.e2e_ms, "cpu_s": time.process_time() - t0,
                                  "evaluations": ils.evaluations}
                if args.ils_cache:
                    args.ils_cache.write_text(json.dumps(ils_cache, indent=1))
            ils_ms, ils_cpu = ils_cache[key]["e2e_ms"], ils_cache[key]["cpu_s"]
            row = {"workflow": sc.name, "family": family, "reference_ms": ref.e2e_ms, "lower_ms": ref.lower_bound_ms,
                   "ils_ms": ils_ms, "ratio": ref.e2e_ms / ils_ms, "gap": ref.gap,
                   "reference_cpu_s": ref_cpu, "ils_cpu_s": ils_cpu, "ils_evaluations": ils_cache[key]["evaluations"]}
            if old is not None:
                row.update(old_reference_ms=old["e2e_ms"], old_lower_ms=old["lower_ms"], old_cpu_s=old["cpu_s"],
                           old_ratio=old["e2e_ms"] / ils_ms)
            rows.append(row)
            before = "" if old is None else (f"old reference {old['e2e_ms']:.1f} ms ({old['cpu_s']:.1f} s CPU, "
                                             f"ratio {row['old_ratio']:.4f}) -> ")
            print(f"  {sc.name}: {before}reference {ref.e2e_ms:.1f} ms ({ref_cpu:.1f} s CPU, gap to its lower bound "
                  f"{100 * (ref.gap or 0):.1f}%), ILS {ils_ms:.1f} ms ({ils_cpu:.1f} s CPU): "
                  f"ratio {row['ratio']:.4f}", flush=True)
    lanes = "" if not args.lanes else f" x {args.lanes} lanes"
    budget = (f"reference {args.evals} simulations{lanes}, ILS {args.ils_evals or 6 * args.evals}" if args.evals
              else f"reference {args.reference_seconds:g} s, ILS {args.ils_seconds:g} s")
    print()
    print(f"budgets: {budget}; seeds {' '.join(map(str, args.seeds))}"
          + ("" if args.old is None else f"; old reference from {args.old}"))
    print("| n | family | workflows | reference / ILS: median / worst | reference better / equal / worse "
          "| reference gap to its lower bound: median / max |")
    print("|---|---|---|---|---|---|")

    def summary(ratios: list[float]) -> tuple[str, str]:
        ratios = sorted(ratios)
        better = sum(1 for r in ratios if r < 1 - 1e-9)
        worse = sum(1 for r in ratios if r > 1 + 1e-9)
        return (f"{statistics.median(ratios):.4f} / {ratios[-1]:.4f}",
                f"{better} / {len(ratios) - better - worse} / {worse}")

    for family in [*args.families, "all"]:
        part = [r for r in rows if family in ("all", r["family"])]
        gaps = sorted(r["gap"] or 0.0 for r in part)
        ratio, counts = summary([r["ratio"] for r in part])
        if args.old is not None:
            old_ratio, old_counts = summary([r["old_ratio"] for r in part])
            ratio, counts = f"{old_ratio} -> {ratio}", f"{old_counts} -> {counts}"
        print(f"| {args.n} | {family} | {len(part)} | {ratio} | {counts} "
              f"| {100 * statistics.median(gaps):.1f}% / {100 * gaps[-1]:.1f}% |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
