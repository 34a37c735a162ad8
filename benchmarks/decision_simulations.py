"""The ``rules`` decider's simulations per round, counted by purpose, for two checkouts side by side.

For each generated workflow (``hetsched.bench.generate``: families, modes, one size, seeds given on the command
line) each checkout runs, in a fresh subprocess, ``agentic`` with the ``rules`` decider on the simulator for
``--rounds`` rounds and counts, per round, the contention-model simulations its estimator ran (calls of the
kernel's ``simulate`` / ``simulate_e2e`` from ``hetsched.deciders.estimate``), by what asked for them: the
interference fit (``fit``), the cards' rescaling (``cards``), the calibrated search (``search``), round 0's
continuation (``continued``), anything else (``other``: estimates of measured mappings for the final choice);
``e2e`` are estimates, ``tim`` simulations with timings. A count, not a time: the same on any machine and under
any load, so it is the load-free evidence for a change meant to make later rounds cheaper.

Run: python benchmarks/decision_simulations.py --old /path/to/old/checkout [--new .] [--size 100]
     [--families layered random forkjoin] [--modes binary three_way] [--seeds 530] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import collections, json, sys
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mode
from hetsched.policies import make_policy
from hetsched.deciders import estimate
import hetsched.deciders.rules as R

family, n, mode, seed, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
sc = random_scenario(WorkflowSpec(family, n, Mode(mode), seed))
stack = ["other"]
counts = collections.Counter()

def tag(name, fn):
    def wrapped(*a, **k):
        stack.append(name)
        try:
            return fn(*a, **k)
        finally:
            stack.pop()
    return wrapped

sim, sim_e2e = estimate.simulate, estimate.simulate_e2e
def counted(*a, **k):
    counts[stack[-1] + ("/tim" if k.get("timings") else "/window")] += 1
    return sim(*a, **k)
def counted_e2e(*a, **k):
    counts[stack[-1] + "/e2e"] += 1
    return sim_e2e(*a, **k)
estimate.simulate, estimate.simulate_e2e = counted, counted_e2e
D = R.RulesDecider
D._search = tag("search", D._search)
D._continued = tag("continued", D._continued)
D._cards_from_latencies = tag("cards", D._cards_from_latencies)
R.fit_interference_local = tag("fit", R.fit_interference_local)
R.fit_interference = tag("fit", R.fit_interference)
decide = D.decide
per_round = []
def counting(self, ctx):
    counts.clear()
    try:
        return decide(self, ctx)
    finally:
        per_round.append(dict(counts))
D.decide = counting
run_rounds(sc, make_policy("agentic", decider="rules"), LoopConfig(rounds=rounds, seed=0))
print(json.dumps(per_round))
"""


def run(checkout: Path, family: str, n: int, mode: str, seed: int, rounds: int) -> list[dict[str, int]]:
    env = dict(os.environ, PYTHONPATH=f"{checkout / 'src'}{os.pathsep}{checkout}")
    out = subprocess.run([sys.executable, "-c", CHILD, family, str(n), mode, str(seed), str(rounds)],
                         cwd=checkout, env=env, capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, required=True, help="checkout of the code before the change")
    ap.add_argument("--new", type=Path, default=HERE.parent, help="checkout of the code after (default: this one)")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--families", nargs="+", default=["layered", "random", "forkjoin"])
    ap.add_argument("--modes", nargs="+", default=["binary", "three_way"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[530])
    ap.add_argument("--rounds", type=int, default=6, help="rounds per run (6: rounds 0..5)")
    args = ap.parse_args()
    print("| workflow | round | old simulations | new simulations | old by purpose | new by purpose |")
    print("|---|---|---|---|---|---|")
    later = {"old": 0, "new": 0}
    for family in args.families:
        for mode in args.modes:
            for seed in args.seeds:
                sides = {side: run(path, family, args.size, mode, seed, args.rounds)
                         for side, path in (("old", args.old.resolve()), ("new", args.new.resolve()))}
                name = f"{family}-{'3w' if mode == 'three_way' else 'bin'}-{args.size}-s{seed}"
                for r, (o, w) in enumerate(zip(sides["old"], sides["new"], strict=True)):
                    if r:
                        later["old"] += sum(o.values())
                        later["new"] += sum(w.values())
                    print(f"| {name} | {r} | {sum(o.values())} | {sum(w.values())} | "
                          f"{' '.join(f'{k}={v}' for k, v in sorted(o.items()))} | "
                          f"{' '.join(f'{k}={v}' for k, v in sorted(w.items()))} |")
    change = 100 * (later["new"] - later["old"]) / max(1, later["old"])
    print(f"\nlater rounds (1..{args.rounds - 1}), all workflows: {later['old']} -> {later['new']} simulations "
          f"({change:+.1f}%)")


if __name__ == "__main__":
    main()
