"""An independent check of the scale suite's agentic answers: simulated annealing on the noise-free simulator.

``hetsched bench --suite scale`` compares every policy with the reference search of
``hetsched.search.reference``. This script asks a different question of a finished scale suite:
can a long, unrelated search (simulated annealing over the noise-free simulator, one- and
two-node moves, started from the agentic policy's best mapping of rounds 0-5 and from all-CPU,
``--seconds`` per workflow) improve on what the agentic policy ran by round 5? A ratio of 1.000
means it could not; 1.018 means annealing found a mapping 1.8% faster.

Run: hetsched bench --suite scale --out OUT; python benchmarks/scale_anneal_check.py OUT [--sizes 20,50] [--seconds 45]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.bench.suites import read_suite_runs
from hetsched.model import PLACEMENTS, Mapping, Mode
from hetsched.sim import Simulator

LETTER = {p.short: p.code for p in PLACEMENTS}


def anneal(args: tuple[dict[str, object], str, float]) -> tuple[str, float, float]:
    run, code, seconds = args
    spec = WorkflowSpec(str(run["family"]), int(run["n"]), Mode(str(run["mode"])),  # type: ignore[call-overload]
                        int(str(run["scenario"]).rsplit("-s", 1)[1]))
    sc = random_scenario(spec)
    assert sc.name == run["scenario"]
    sim = Simulator(sc, noise=False)
    ids = sc.workflow.node_ids
    allowed = [tuple(p.code for p in sc.allowed(x)) for x in ids]

    def cost(c: tuple[int, ...]) -> float:
        e = sim.e2e(Mapping(zip(ids, (PLACEMENTS[k] for k in c), strict=True)))
        return math.inf if e is None else e

    start = tuple(LETTER[ch] for ch in code)
    ran = cost(start)
    best = ran
    rng = random.Random(1)
    t0 = time.time()
    starts = [start, tuple(0 for _ in ids)]
    k = 0
    while time.time() - t0 < seconds:
        cur = starts[k % 2]
        k += 1
        cur_e = cost(cur)
        temp = 0.05 * (cur_e if math.isfinite(cur_e) else 1e4)
        for _ in range(3000):
            if time.time() - t0 > seconds:
                break
            i = rng.randrange(len(ids))
            if len(allowed[i]) < 2:
                continue
            c = list(cur)
            c[i] = rng.choice([p for p in allowed[i] if p != cur[i]])
            if rng.random() < 0.3:
                j = rng.randrange(len(ids))
                c[j] = rng.choice(allowed[j])
            cand = tuple(c)
            e = cost(cand)
            if e < cur_e or (math.isfinite(e) and rng.random() < math.exp(-(e - cur_e) / max(temp, 1e-9))):
                cur, cur_e = cand, e
                best = min(best, e)
            temp *= 0.998
    return str(run["scenario"]), ran, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a scale suite's output folder (with suite.json and its run store)")
    parser.add_argument("--sizes", default="20,50")
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--label", default="agentic:rules")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    sizes = {int(x) for x in args.sizes.split(",")}
    todo = []
    for run in read_suite_runs(args.out):
        if run["label"] != args.label or run["n"] not in sizes:
            continue
        played = [r for r in run["rounds"][:6] if r["true_e2e_ms"] is not None]
        if played:
            todo.append((run, min(played, key=lambda r: r["true_e2e_ms"])["code"], args.seconds))
    print(f"| workflow | {args.label} by R5, ms | annealing ({args.seconds:g} s), ms | ratio |")
    print("|---|---|---|---|")
    with ProcessPoolExecutor(args.jobs) as pool:
        for name, ran, best in pool.map(anneal, todo):
            print(f"| {name} | {ran:.1f} | {best:.1f} | {ran / best:.4f} |", flush=True)


if __name__ == "__main__":
    main()
