"""Agentic-policy rounds on very large workflows (1,000-10,000 nodes): time and peak memory per run.

Each (checkout, n) runs in its own subprocess: a generated layered three-way workflow
(``hetsched.bench.generate``, seed 0) and ``--rounds`` rounds of ``agentic`` with the ``rules``
decider on the simulator, timed from the policy's creation to the last round; peak memory is the
subprocess's maximum resident set (``ru_maxrss``). With ``--old`` the same sizes run on another
checkout too, alternating, each under ``--timeout`` seconds (a run past it is reported as such).

Run: python benchmarks/agentic_scale.py [--sizes 1000 2000 5000 10000] [--rounds 2]
     [--old /path/to/old/checkout] [--timeout 400]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, resource, sys, time
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mode
from hetsched.policies import make_policy

n, rounds = int(sys.argv[1]), int(sys.argv[2])
sc = random_scenario(WorkflowSpec("layered", n, Mode.THREE_WAY, 0))
t0 = time.perf_counter()
policy = make_policy("agentic", decider="rules")
result = run_rounds(sc, policy, LoopConfig(rounds=rounds, seed=0))
wall = time.perf_counter() - t0
best = min(r.trace.e2e_ms for r in result.rounds if r.trace.feasible)
print(json.dumps({"s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rounds": len(result.rounds), "best_e2e_ms": best}))
"""


def measure(checkout: Path, n: int, rounds: int, timeout: float) -> dict[str, float] | None:
    env = dict(os.environ, PYTHONPATH=f"{checkout / 'src'}")
    try:
        res = subprocess.run([sys.executable, "-c", CHILD, str(n), str(rounds)], env=env, capture_output=True,
                             text=True, check=True, timeout=timeout, cwd=checkout)
    except subprocess.TimeoutExpired:
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000, 10000])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old", type=Path, help="checkout of the code before the change (optional)")
    ap.add_argument("--timeout", type=float, default=400.0)
    args = ap.parse_args()
    sides = [("new", HERE.parent)] + ([("old", args.old)] if args.old else [])
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"{args.rounds} agentic:rules rounds, layered three-way, seed 0")
    print("| n | checkout | wall s | s per round | peak RSS MB | best E2E ms |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        for side, path in sides:
            got = measure(path.resolve(), n, args.rounds, args.timeout)
            if got is None:
                print(f"| {n} | {side} | > {args.timeout:g} (stopped) | - | - | - |", flush=True)
                continue
            print(f"| {n} | {side} | {got['s']:.1f} | {got['s'] / got['rounds']:.1f} | {got['rss_mb']:.0f} "
                  f"| {got['best_e2e_ms']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
