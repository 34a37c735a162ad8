"""Simulations per second of the contention model, two checkouts side by side in one run.

For 10-, 50- and 100-node seeded random workflows (``random_scenarios.py``, layered and fan-out
families, three-way) it measures, in a fresh subprocess per checkout and size:

- ``trace``: the simulator executor with noise and the full ``Trace`` (``Simulator.run``);
- ``codes``: the noise-free E2E of placement codes (``Simulator.e2e_codes``, the search's hot path);
- ``estimate``: the decider's estimator (``Estimator.e2e``, as the ``rules`` decider calls it; in
  a checkout before the deciders room, ``hetsched.llm.estimate``: ``eed74ed`` is the last with the
  estimator's own virtual-clock loop, before it ran the one kernel).

Each measurement cycles over the same seeded feasible mappings for about ``--seconds`` seconds of
the chosen clock: ``process`` (default: the child's CPU time, what a simulation costs, steadier on a
shared machine) or ``wall``. Checkouts alternate (old, new, old, new, ...) ``--repeats`` times so a
shared machine's load hits both alike; the table gives the best repeat of each and the ratio new / old.

Run: python benchmarks/kernel_speed.py --old /path/to/old/checkout [--new .] [--sizes 10 50 100]
     [--repeats 3] [--seconds 1.0] [--measures trace codes estimate] [--clock process|wall]
     [--old-pure] [--out FILE.json]
The machine line says which contention kernel each side ran (``native``: the mypyc build, ``python``).
(an old checkout: ``mkdir /tmp/base && git archive eed74ed src | tar -x -C /tmp/base``).
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
MEASURES = ("trace", "codes", "estimate")

CHILD = r"""
import json, random, sys, time
sys.path.insert(0, sys.argv[1])
from random_scenarios import random_scenario
from hetsched.model import Mapping, Placement
from hetsched.sim import Simulator
try:
    from hetsched.deciders.estimate import Estimator
except ImportError:  # before the deciders room (eed74ed: the old virtual-clock estimator)
    from hetsched.llm.estimate import Estimator

n, seconds, measures = int(sys.argv[2]), float(sys.argv[3]), sys.argv[4].split(",")
clock = time.process_time if sys.argv[5] == "process" else time.perf_counter
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
        t0 = clock()
        while True:
            for it in items:
                fn(it)
            k += len(items)
            dt = clock() - t0
            if dt >= seconds:
                return k / dt

    runs = {"trace": (lambda m: sim.run(m, seed=3), maps), "codes": (quiet.e2e_codes, codes),
            "estimate": (est.e2e, codes)}
    out[family] = {what: rate(*runs[what]) for what in measures}
from hetsched.model import contention
print(json.dumps({"rates": out, "kernel": getattr(contention, "KERNEL", "python")}))
"""


def measure(checkout: Path, n: int, seconds: float, measures: list[str], clock: str,
            pure: bool = False) -> dict[str, Any]:
    """``{"rates": {family: {measure: simulations a second}}, "kernel": "native" | "python"}`` of one checkout,
    in a child process (``pure``: with ``HETSCHED_PURE_PYTHON=1``, the kernel's Python source)."""
    env = dict(os.environ, PYTHONPATH=f"{checkout / 'src'}")
    env.pop("HETSCHED_PURE_PYTHON", None)
    if pure:
        env["HETSCHED_PURE_PYTHON"] = "1"
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(HERE), str(n), str(seconds), ",".join(measures), clock],
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
    ap.add_argument("--measures", nargs="+", choices=MEASURES, default=list(MEASURES))
    ap.add_argument("--clock", choices=("process", "wall"), default="process",
                    help="process: the child's CPU time (default); wall: elapsed time")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--old-pure", action="store_true",
                    help="run the old side with HETSCHED_PURE_PYTHON=1 (with --old . : the compiled kernel "
                         "against its Python source, the same code)")
    args = ap.parse_args()
    best: dict[tuple[str, int, str, str], float] = {}
    kernels: dict[str, str] = {}
    for _ in range(args.repeats):
        for n in args.sizes:
            for side, path in (("old", args.old), ("new", args.new)):
                got = measure(path.resolve(), n, args.seconds, args.measures, args.clock,
                              pure=args.old_pure and side == "old")
                kernels[side] = got["kernel"]
                for family, rates in got["rates"].items():
                    for what, r in rates.items():
                        key = (side, n, family, what)
                        best[key] = max(best.get(key, 0.0), r)
    rows: list[dict[str, Any]] = []
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"best of {args.repeats} alternating repeats, {args.seconds:g} s of {args.clock} time each; "
          f"contention kernel: old {kernels['old']}, new {kernels['new']}")
    print("| n | family | measure | old sims/s | new sims/s | new / old |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        for family in ("layered", "fanout"):
            for what in args.measures:
                old, new = best[("old", n, family, what)], best[("new", n, family, what)]
                rows.append({"n": n, "family": family, "measure": what, "old": old, "new": new})
                print(f"| {n} | {family} | {what} | {old:,.0f} | {new:,.0f} | {new / old:.2f}x |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
