"""How often a run beats the best-known search, and what the bench's reference becomes: the best mapping known.

A best-known reference (``--reference best-known``, or ``auto`` where the exact search does not fit) is a
bounded search's best; a policy's runs can play a better mapping. Since session 38 the bench makes that
mapping the reference (``hetsched.search.reference.improved_by``), so no report shows a policy beating its
own reference. This measures how often that happens and by how much, on freshly generated three-way
workflows (``hetsched.bench.generate``, the families given, seeds picked after the code): it runs the scale
suite (``hetsched.bench.suites.run_suite``: the best-known search with ``--max-seconds``, then each policy's
runs) into a temporary folder, and prints per workflow the search's E2E (read before the runs), the
reference after them, and the ratio of each policy's best mapping played to each: below 1 against the
search, never below 1 against the reference.

Run: python benchmarks/best_known_of_runs.py [--sizes 50 100] [--families layered random fanout forkjoin]
[--seeds 7] [--rounds 6] [--max-seconds 10] [--policies agentic greedy-mem]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.bench.spec import parse_spec
from hetsched.bench.suites import SuiteConfig, ratios, reference_job, run_suite
from hetsched.model import Mode
from hetsched.model.contention import KERNEL
from hetsched.search.reference import ReferenceChoice
from hetsched.store import RunStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 100])
    ap.add_argument("--families", nargs="+", default=["layered", "random", "fanout", "forkjoin"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[7])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--max-seconds", type=float, default=10.0)
    ap.add_argument("--policies", nargs="+", default=["agentic", "greedy-mem"])
    args = ap.parse_args()
    specs = tuple(parse_spec(p) for p in args.policies)
    workflows = tuple(WorkflowSpec(f, n, Mode.THREE_WAY, s) for n in args.sizes for s in args.seeds
                      for f in args.families)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, kernel "
          f"{KERNEL}; load average before: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scale"
        t0 = time.perf_counter()
        cfg = SuiteConfig(suite="scale", specs=specs, workflows=workflows, rounds=args.rounds, out=out, jobs=1,
                          reference=ReferenceChoice.BEST_KNOWN, reference_seconds=args.max_seconds)
        searched: dict[str, dict[str, Any]] = {}
        for w in workflows:  # the search's references first (the suite reuses them, then runs the policies)
            searched[w.name] = reference_job((w, ReferenceChoice.BEST_KNOWN.value, args.max_seconds,
                                              str(cfg.store_path)))
        result = run_suite(cfg)
        seconds = time.perf_counter() - t0
        with RunStore(cfg.store_path, read_only=True) as store:
            final = {w.name: store.stored_reference(random_scenario(w), ReferenceChoice.BEST_KNOWN.value)
                     for w in workflows}
    labels = [s.label for s in specs]
    print(f"best-known search {args.max_seconds:g} s a workflow; {args.rounds} rounds a run; seeds "
          f"{' '.join(map(str, args.seeds))}")
    print("| workflow | search ms | reference ms (after the runs) | " +
          " | ".join(f"{lb}: best / search, best / reference" for lb in labels) + " |")
    print("|---|---|---|" + "---|" * len(labels))
    improved = 0
    by_label: dict[str, list[float]] = {lb: [] for lb in labels}
    for w in workflows:
        before = searched[w.name]["e2e_ms"]
        ref = final[w.name]
        assert ref is not None
        improved += ref.e2e_ms < before
        cells = []
        for lb in labels:
            runs = [r for r in result.runs if r["scenario"] == w.name and r["label"] == lb]
            best = min(min(ratios(r, before)) for r in runs)
            by_label[lb].append(best)
            cells.append(f"{best:.4f}, {min(min(ratios(r, ref.e2e_ms)) for r in runs):.4f}")
        note = f" (found by {ref.found_by.split(' (')[0]}...)" if ref.found_by else ""
        print(f"| {w.name} | {before:,.1f} | {ref.e2e_ms:,.1f}{note} | " + " | ".join(cells) + " |")
    print(f"references improved by a run: {improved} of {len(workflows)}; " + "; ".join(
        f"{lb} below the search on {sum(v < 1 for v in vals)} of {len(vals)}" for lb, vals in by_label.items()))
    print(f"{seconds:.0f} s; load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
