"""The lower bound's gap to the best known mapping, before and after a change, side by side.

Issue 17 asks for a lower bound that brings the median gap (best-known E2E / lower bound - 1)
at 50 tools under 10%. For each workflow of ``hetsched.bench.generate`` (every family, three-way,
sizes and seeds from the command line: pick the seeds after the code is written):

1. the best-known E2E (the upper bound both sides are measured against) is the best of
   ``best_known(sc, seed=0, max_evals=EVALS)`` and two more seeded local searches of EVALS
   simulations, run with the *baseline* code (deterministic: the same on every machine), cached
   in ``--uppers`` so a re-run reuses it;
2. a child process with ``--baseline-src`` on its path and one with this checkout's ``src`` each
   compute the search-free bound the reference starts from: the largest of the bound of the empty
   mapping, the Lagrangian bound and the CP-SAT relaxation (``relaxation_bound_ms`` with a
   deterministic limit of ``--relax-seconds``, the reference's share of its default 10 s budget,
   and a generous wall-clock cap so the machine's load does not change the bound), with the
   relaxation's CPU seconds; the two run one after the other, so both see the same machine load.

With ``--exact`` (small sizes) the upper bound is the optimum itself
(``hetsched.search.oracle.solve``), so the gap is the bound's alone. The table gives per size the
median and worst gap before and after, and the relaxation's CPU time. The best-first bound
search of the reference is left out (its bound depends on the time it gets); ``--reference``
adds, per side, the gap ``best_known`` itself reports with its default budget (wall-clock:
machine-dependent), which is the combined figure a user sees, and how it splits: its lower bound
against the best E2E any side found, its E2E (after / before: what the search lost or gained), the
wall seconds its relaxation calls took and its own seconds. ``--ceiling`` adds, with this
checkout's code, the relaxation with its placements fixed to one good mapping (a 3,000-simulation
local search's, seed 0) against that mapping's E2E: how far the bound is below a good mapping's
own E2E even when the placements are known. What the relaxation loses to mapping choice (it picks
placements whose contention it underestimates) is the rest of the gap. A per-family table closes the output:
the gap after, the relaxation's own mapping (its best solution's placements) simulated against its bound (how
much contention the relaxation misses for the mapping it picks) and, with ``--ceiling``, the fixed-placement gap.

The best-known E2E of ``--evals`` simulations is itself above the optimum, so part of each gap is
the upper side's. ``--strong-evals N`` separates it: for each size, the workflows whose gap
after is at or above the lower middle one (``statistics.median_low``) get a stronger upper bound
(the same three searches with N simulations each, baseline code, cached in ``--uppers`` under
``NAME@N``; the lower of the two is kept), and the table adds the median gap after against it.
Lowering the gap of a workflow below the lower middle one cannot move the median (it stays among
the lowest), so this median is the one every workflow's stronger search would give.

Run: python benchmarks/lower_bound_gap.py --baseline-src BASE/src [--sizes 20 50 100] [--seeds 300 301]
     [--uppers FILE.json] [--out FILE.json] [--reference] [--exact] [--ceiling] [--strong-evals 30000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import json_cache  # benchmarks/json_cache.py: a cache file several runs may share

HERE = Path(__file__).resolve().parent
UPPER = """
import json
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.model import Mode
from hetsched.search.local_search import local_search
from hetsched.search.reference import best_known
sc = random_scenario(WorkflowSpec({family!r}, {n}, Mode.THREE_WAY, {seed}))
best = best_known(sc, seed=0, max_evals={evals}, max_seconds=None).e2e_ms
for seed in (1, 2):
    best = min(best, local_search(sc, seed=seed, max_evals={evals}).e2e_ms)
print(json.dumps({{"e2e_ms": best}}))
"""
EXACT = """
import json
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.model import Mode
from hetsched.search.oracle import solve
sc = random_scenario(WorkflowSpec({family!r}, {n}, Mode.THREE_WAY, {seed}))
print(json.dumps({{"e2e_ms": solve(sc, max_seconds=None, workers=1).e2e_ms}}))
"""
BOUND = """
import json, time
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.model import Mode
from hetsched.search.lower_bound import dual_bound_ms, root_bound_ms
from hetsched.search.relaxation import relaxation_bound_ms
sc = random_scenario(WorkflowSpec({family!r}, {n}, Mode.THREE_WAY, {seed}))
t0 = time.process_time()
got = relaxation_bound_ms(sc, {upper!r}, max_seconds={relax_s!r}, wall_seconds=600.0)
cpu = time.process_time() - t0
out = {{"relax_ms": got.lower_ms, "optimal": got.optimal, "relax_cpu_s": cpu,
        "lower_ms": max(got.lower_ms, root_bound_ms(sc), dual_bound_ms(sc))}}
if got.codes is not None:  # the relaxation's own mapping, simulated: what its optimum leaves out for it
    from hetsched.search.local_search import Evaluator
    out["own_ms"] = Evaluator(sc)(got.codes)
if {reference!r}:
    from hetsched.search import reference
    spent = []  # wall seconds of each relaxation call inside the reference (its time split)
    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return relaxation_bound_ms(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t)
    reference.relaxation_bound_ms = timed
    ref = reference.best_known(sc, seed=0)
    out.update(reference_gap=ref.gap, reference_e2e_ms=ref.e2e_ms, reference_lower_ms=ref.lower_bound_ms,
               reference_s=ref.seconds, reference_relax_s=sum(spent), reference_relax_calls=len(spent))
print(json.dumps(out))
"""
CEILING = """
import json
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.model import Mode
from hetsched.search import relaxation
from hetsched.search.local_search import local_search
sc = random_scenario(WorkflowSpec({family!r}, {n}, Mode.THREE_WAY, {seed}))
found = local_search(sc, seed=0, max_evals={evals})
upper = found.e2e_ms * 1.001
got = relaxation._solve(sc, upper, True, {relax_s!r}, 600.0, 0, None, fixed=found.codes)
print(json.dumps({{"mapping_ms": found.e2e_ms, "fixed_ms": got.lower_ms}}))
"""


def child(src: Path, code: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def median_worst(values: list[float]) -> str:
    return f"{100 * statistics.median(values):.1f}% / {100 * max(values):.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-src", type=Path, required=True)
    parser.add_argument("--src", type=Path, default=HERE.parent / "src", help="the code after (default: this checkout)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 50, 100])
    parser.add_argument("--seeds", type=int, nargs="+", default=[300, 301])
    parser.add_argument("--families", nargs="+",
                        default=["chain", "parallel", "fanout", "forkjoin", "diamond", "layered", "random"])
    parser.add_argument("--evals", type=int, default=3000, help="the best-known search's budget in simulations")
    parser.add_argument("--relax-seconds", type=float, default=1.0)
    parser.add_argument("--uppers", type=Path, help="cache of the best-known E2E per workflow (read and written)")
    parser.add_argument("--reference", action="store_true", help="also run best_known with its default budget")
    parser.add_argument("--exact", action="store_true",
                        help="the upper bound is the optimum (exact search, no time limit): small sizes only")
    parser.add_argument("--ceiling", action="store_true",
                        help="also bound one good mapping with its placements fixed (this checkout's code)")
    parser.add_argument("--strong-evals", type=int, default=0,
                        help="also the median gap against a best-known search of this many simulations, "
                             "run on the workflows that decide the median (see the module docstring)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {platform.machine()}, {cpus} CPUs, Python {platform.python_version()}; "
          f"load average before: {os.getloadavg()[0]:.1f}")
    uppers: dict[str, float] = json_cache.load(args.uppers)
    rows: list[dict[str, Any]] = []
    for n in args.sizes:
        for seed in args.seeds:
            for family in args.families:
                name = f"{family}-n{n}-s{seed}"
                if name not in uppers:
                    code = EXACT if args.exact else UPPER
                    uppers[name] = child(args.baseline_src, code.format(family=family, n=n, seed=seed,
                                                                        evals=args.evals))["e2e_ms"]
                    if args.uppers:
                        json_cache.store(args.uppers, {name: uppers[name]})
                upper = uppers[name]
                sides = {}
                for side, src in (("before", args.baseline_src), ("after", args.src)):
                    sides[side] = child(src, BOUND.format(family=family, n=n, seed=seed, upper=upper,
                                                          relax_s=args.relax_seconds, reference=args.reference))
                row = {"workflow": name, "n": n, "upper_ms": upper, **{
                    f"{side}_{k}": v for side, got in sides.items() for k, v in got.items()}}
                for side in sides:
                    row[f"{side}_gap"] = upper / row[f"{side}_lower_ms"] - 1.0
                if args.reference:  # the references' bounds against the best E2E anyone found
                    common = min(upper, *(row[f"{side}_reference_e2e_ms"] for side in sides))
                    for side in sides:
                        row[f"{side}_reference_bound_gap"] = common / row[f"{side}_reference_lower_ms"] - 1.0
                if args.ceiling:
                    got = child(args.src, CEILING.format(family=family, n=n, seed=seed, evals=args.evals,
                                                         relax_s=args.relax_seconds))
                    row["ceiling_gap"] = got["mapping_ms"] / got["fixed_ms"] - 1.0 if got["fixed_ms"] > 0 else None
                rows.append(row)
                print(f"  {name}: best known {upper:.1f} ms; gap {100 * row['before_gap']:.1f}% -> "
                      f"{100 * row['after_gap']:.1f}%; relaxation CPU {row['before_relax_cpu_s']:.2f} -> "
                      f"{row['after_relax_cpu_s']:.2f} s (solved: {row['before_optimal']} -> {row['after_optimal']})"
                      + (f"; reported gap {100 * (row['before_reference_gap'] or 0):.1f}% -> "
                         f"{100 * (row['after_reference_gap'] or 0):.1f}% (its bound against the best found "
                         f"{100 * row['before_reference_bound_gap']:.1f}% -> "
                         f"{100 * row['after_reference_bound_gap']:.1f}%), its E2E "
                         f"{row['before_reference_e2e_ms']:.1f} -> {row['after_reference_e2e_ms']:.1f} ms, its "
                         f"relaxation {row['before_reference_relax_s']:.2f} -> {row['after_reference_relax_s']:.2f} s "
                         f"of {row['before_reference_s']:.1f} -> {row['after_reference_s']:.1f} s"
                         if args.reference else "")
                      + (f"; with its placements fixed, a good mapping's gap {_pct(row['ceiling_gap'])}"
                         if args.ceiling else ""), flush=True)
    print()
    print("| n | workflows | gap before: median / worst | gap after: median / worst "
          "| relaxation CPU s before: median / max | after: median / max | solved before / after |"
          + (" reported gap before / after: median | its bound against the best found, before / after: "
             "median / worst | its E2E after / before: median / worst | its relaxation wall s before / after: "
             "median / max | its seconds before / after: median |" if args.reference else "")
          + (" fixed to a good mapping: median / worst |" if args.ceiling else ""))
    print("|---|---|---|---|---|---|---|" + ("---|" * 5 if args.reference else "") + ("---|" if args.ceiling else ""))
    for n in args.sizes:
        part = [r for r in rows if r["n"] == n]
        cpu_b = [r["before_relax_cpu_s"] for r in part]
        cpu_a = [r["after_relax_cpu_s"] for r in part]
        line = (f"| {n} | {len(part)} | {median_worst([r['before_gap'] for r in part])} "
                f"| {median_worst([r['after_gap'] for r in part])} "
                f"| {statistics.median(cpu_b):.2f} / {max(cpu_b):.2f} "
                f"| {statistics.median(cpu_a):.2f} / {max(cpu_a):.2f} "
                f"| {sum(r['before_optimal'] for r in part)} / {sum(r['after_optimal'] for r in part)} |")
        if args.reference:
            line += (f" {100 * statistics.median([r['before_reference_gap'] or 0 for r in part]):.1f}% / "
                     f"{100 * statistics.median([r['after_reference_gap'] or 0 for r in part]):.1f}% "
                     f"| {median_worst([r['before_reference_bound_gap'] for r in part])} / "
                     f"{median_worst([r['after_reference_bound_gap'] for r in part])} ")
            ratios = [r["after_reference_e2e_ms"] / r["before_reference_e2e_ms"] for r in part]
            rb = [r["before_reference_relax_s"] for r in part]
            ra = [r["after_reference_relax_s"] for r in part]
            line += (f"| {statistics.median(ratios):.4f} / {max(ratios):.4f} "
                     f"| {statistics.median(rb):.2f} / {max(rb):.2f} -> {statistics.median(ra):.2f} / {max(ra):.2f} "
                     f"| {statistics.median([r['before_reference_s'] for r in part]):.1f} / "
                     f"{statistics.median([r['after_reference_s'] for r in part]):.1f} |")
        if args.ceiling:
            fixed = [r["ceiling_gap"] for r in part if r["ceiling_gap"] is not None]
            line += f" {median_worst(fixed)} |" if fixed else " - |"
        print(line)
    print()
    print("per family (this checkout): the gap, and where it comes from: the relaxation's own mapping simulated "
          "against its bound (the contention the relaxation misses for the mapping it picks)"
          + (", and a good mapping against the relaxation with its placements fixed" if args.ceiling else ""))
    print("| n | family | workflows | gap after: median / worst | its own mapping / its bound: median / worst |"
          + (" fixed to a good mapping: median / worst |" if args.ceiling else ""))
    print("|---|---|---|---|---|" + ("---|" if args.ceiling else ""))
    for n in args.sizes:
        for family in args.families:
            part = [r for r in rows if r["n"] == n and r["workflow"].startswith(f"{family}-")]
            if not part:
                continue
            own = [r["after_own_ms"] / r["after_relax_ms"] - 1.0 for r in part
                   if r.get("after_own_ms") is not None and r["after_relax_ms"] > 0]
            line = (f"| {n} | {family} | {len(part)} | {median_worst([r['after_gap'] for r in part])} "
                    f"| {median_worst(own) if own else '-'} |")
            if args.ceiling:
                fixed = [r["ceiling_gap"] for r in part if r["ceiling_gap"] is not None]
                line += f" {median_worst(fixed)} |" if fixed else " - |"
            print(line)
    if args.strong_evals and not args.exact:
        print()
        print(f"against a best-known search of {args.strong_evals:,} simulations (the workflows whose gap after "
              "is at or above the lower middle one; the others keep theirs):")
        for n in args.sizes:
            part = [r for r in rows if r["n"] == n]
            middle = statistics.median_low([r["after_gap"] for r in part])
            gaps = []
            for r in part:
                upper = r["upper_ms"]
                if r["after_gap"] >= middle:
                    key = f"{r['workflow']}@{args.strong_evals}"
                    if key not in uppers:
                        family, size, seed = r["workflow"].rsplit("-", 2)
                        uppers[key] = child(args.baseline_src, UPPER.format(
                            family=family, n=int(size[1:]), seed=int(seed[1:]), evals=args.strong_evals))["e2e_ms"]
                        if args.uppers:
                            json_cache.store(args.uppers, {key: uppers[key]})
                    upper = min(upper, uppers[key])
                    print(f"  {r['workflow']}: best known {r['upper_ms']:.1f} -> {upper:.1f} ms; gap after "
                          f"{100 * r['after_gap']:.1f}% -> {100 * (upper / r['after_lower_ms'] - 1):.1f}%", flush=True)
                r["strong_upper_ms"] = upper
                gaps.append(upper / r["after_lower_ms"] - 1.0)
            before = statistics.median([r["after_gap"] for r in part])
            print(f"| {n} | median gap after: {100 * before:.1f}% against the best known of {args.evals:,} "
                  f"simulations, {100 * statistics.median(gaps):.1f}% against {args.strong_evals:,} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
