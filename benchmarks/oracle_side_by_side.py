"""The exact search before and after a change, side by side: the same instances, one process each, alternating.

For each instance of ``random_scenarios.py`` (the oracle-speed benchmark's families and sizes),
a child process with ``--baseline-src`` on its path and one with this checkout's ``src`` each
solve it (``hetsched.search.oracle.solve``, one worker process, no time limit) and report their
CPU time, simulations and optimum; the two run one after the other, so both see the same machine
load. The optimum must be identical; the table gives the CPU time of each and the ratio.

Run: python benchmarks/oracle_side_by_side.py --baseline-src BASE/src [--sizes 10 12 14] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = """
import json, sys, time
sys.path.insert(0, {bench!r})
from random_scenarios import random_scenario
from hetsched.search import oracle
sc = random_scenario({n}, {mode!r}, {family!r}, {seed})
t0 = time.process_time()
res = oracle.solve(sc, max_seconds=None, workers=1)
print(json.dumps({{"cpu_s": time.process_time() - t0, "e2e_ms": res.e2e_ms, "simulated": res.simulated}}))
"""


def child(src: Path, n: int, mode: str, family: str, seed: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    code = CHILD.format(bench=str(HERE), n=n, mode=mode, family=family, seed=seed)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-src", type=Path, required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 12, 14])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--families", nargs="+", default=["chain", "fanout", "layered", "dag"])
    parser.add_argument("--mode", default="three_way")
    parser.add_argument("--src", type=Path, default=HERE.parent / "src", help="the code after (default: this checkout)")
    args = parser.parse_args()
    src = args.src
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    rows = []
    for n in args.sizes:
        for family in args.families:
            for seed in range(args.seeds):
                base = child(args.baseline_src, n, args.mode, family, seed)
                new = child(src, n, args.mode, family, seed)
                assert base["e2e_ms"] == new["e2e_ms"], (n, family, seed, base, new)
                rows.append((n, family, seed, base, new))
                print(f"  n={n} {family} {seed}: before {base['cpu_s']:.2f} s ({base['simulated']} sims), "
                      f"after {new['cpu_s']:.2f} s ({new['simulated']} sims)", flush=True)
    print()
    print("| n | instances | CPU s before: median / max | CPU s after: median / max | after / before: median "
          "| simulations before / after: median |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        sub = [r for r in rows if r[0] == n]
        b = sorted(r[3]["cpu_s"] for r in sub)
        a = sorted(r[4]["cpu_s"] for r in sub)
        ratio = statistics.median(r[4]["cpu_s"] / r[3]["cpu_s"] for r in sub)
        print(f"| {n} | {len(sub)} | {statistics.median(b):.2f} / {b[-1]:.2f} "
              f"| {statistics.median(a):.2f} / {a[-1]:.2f} | {ratio:.2f} "
              f"| {statistics.median(r[3]['simulated'] for r in sub):,.0f} / "
              f"{statistics.median(r[4]['simulated'] for r in sub):,.0f} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
