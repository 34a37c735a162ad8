"""Simulations per second of the contention model, two checkouts side by side in one run.

For 10-, 50- and 100-node seeded random workflows (``random_scenarios.py``, layered and fan-out
families, three-way) it measures, in a fresh subprocess per checkout and size:

- ``trace``: the simulator executor with noise and the full ``Trace`` (``Simulator.run``);
- ``codes``: the noise-free E2E of placement codes (``Simulator.e2e_codes``, the search's hot path);
- ``estimate``: the decider's estimator (``Estimator.e2e``).

Each measurement cycles over the same seeded feasible mappings for about ``--seconds`` seconds.
Checkouts alternate (old, new, old, new, ...) ``--repeats`` times so a shared machine's load hits
both alike; the table gives the best repeat of each and the ratio new / old.

Run: python benchmarks/kernel_speed.py --old /path/to/old/checkout [--new .] [--sizes 10 50 100]
     [--repeats 3] [--seconds 1.0] [--out FILE.json]
(an old checkout: ``git worktree add --detach /tmp/base eed74ed``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, random, sys, time
sys.path.insert(0, sys.argv[1])
from random_scenarios import random_scenario
from hetsched.model import Mapping, Placement
from hetsched.sim import Simulator
try:
    from hetsched.deciders.estimate import Estimator
except ImportError:
    from hetsched.deciders.estimate import Estimator

n, seconds = int(sys.argv[2]), float(sys.argv[3])
out = {}
for family in ("layered", "fanout"):
    sc = random_scenario(n, "three_way", family, seed=1)
    sim = Simulator(sc, noise=True)
    quiet = Simulator(sc, noise=False)
    est = Estimator(sc, sc.machine.gpu_kappa)
    rng = random.Random(7)
    ids = sc.workflow.node_ids
    maps = []
    while len(maps) < 32:
        m = Mapping((v, rng.choice(sc.allowed(v))) for v in ids)
        if sc.infeasibility(m) is None:
            maps.append(m)
    codes = [tuple(m[v].code for v in ids) for m in maps]

    def rate(fn, items):
        k = 0
        t0 = time.perf_counter()
        while True:
            for it in items:
                fn(it)
            k += len(items)
            dt = time.perf_counter() - t0
            if dt >= seconds:
                return k / dt

    out[family] = {
        "trace": rate(lambda m: sim.run(m, seed=3), maps),
        "codes": rate(quiet.e2e_codes, codes),
        "estimate": rate(est.e2e, codes),
    }
print(json.dumps(out))
"""


def measure(checkout: Path, n: int, seconds: float) -> dict[str, dict[str, float]]:
    env = dict(os.environ, PYTHONPATH=f"{checkout / 'src'}")
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(HERE), str(n), str(seconds)],
        env=env, capture_output=True, text=True, check=True, cwd=checkout,
    )
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, required=True, help="checkout of the code before the change")
    ap.add_argument("--new", type=Path, default=HERE.parent, help="checkout of the code after (default: this one)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 100])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    best: dict[tuple[str, int, str, str], float] = {}
    for _ in range(args.repeats):
        for n in args.sizes:
            for side, path in (("old", args.old), ("new", args.new)):
                got = measure(path.resolve(), n, args.seconds)
                for family, rates in got.items():
                    for what, r in rates.items():
                        key = (side, n, family, what)
                        best[key] = max(best.get(key, 0.0), r)
    rows: list[dict[str, Any]] = []
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"best of {args.repeats} alternating repeats, {args.seconds:g} s each")
    print("| n | family | measure | old sims/s | new sims/s | new / old |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        for family in ("layered", "fanout"):
            for what in ("trace", "codes", "estimate"):
                old, new = best[("old", n, family, what)], best[("new", n, family, what)]
                rows.append({"n": n, "family": family, "measure": what, "old": old, "new": new})
                print(f"| {n} | {family} | {what} | {old:,.0f} | {new:,.0f} | {new / old:.2f}x |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
