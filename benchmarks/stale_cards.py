"""Stale cards: how the agentic deciders do when the cards and the machine block are wrong.

The world is a generated workflow (``hetsched.bench.generate``, 4-8 nodes, both modes); the
policy is handed the same workflow with every card's cpu_ms, gpu_ms and load_ms multiplied by
its own lognormal factor (sigma ``--spread``, default 0.3: about +-30%) and the GPU interference
declared as 0.10 whatever the world's is. The executor runs the world. This is the case the
``rules`` decider's calibration and its use of measurements exist for: its model starts wrong,
and only the rounds and the monitor's probes can tell it so. Ratios are the noise-free E2E of
the world over its exact oracle.

Run: python benchmarks/stale_cards.py [--count 100] [--spread 0.3] [--jobs 2]
"""

from __future__ import annotations

import argparse
import math
import platform
import random
from concurrent.futures import ProcessPoolExecutor

from hetsched.bench.generate import SMALL_SIZES, WorkflowSpec, random_scenario, specs
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mode, Scenario
from hetsched.policies import make_policy
from hetsched.search.oracle import solve
from hetsched.sim import Simulator

DECIDERS = ("rules", "argmin")
ROUNDS = 10
BY = 5


def stale(world: Scenario, seed: int, spread: float) -> Scenario:
    """``world`` with every card's latencies off by a lognormal factor and kappa declared 0.10."""
    rng = random.Random(f"stale:{seed}")
    cards = {}
    for name, card in world.cards.items():
        update = {"cpu_ms": card.cpu_ms * math.exp(rng.gauss(0, spread))}
        if card.gpu_ms is not None:
            update["gpu_ms"] = card.gpu_ms * math.exp(rng.gauss(0, spread))
            update["load_ms"] = card.load_ms * math.exp(rng.gauss(0, spread))
        cards[name] = card.model_copy(update=update)
    machine = world.machine.model_copy(update={"gpu_kappa": 0.1})
    return world.model_copy(update={"cards": cards, "machine": machine})


def job(args: tuple[WorkflowSpec, float]) -> tuple[WorkflowSpec, dict[str, tuple[float, float]]]:
    spec, spread = args
    world = random_scenario(spec)
    seen = stale(world, spec.seed, spread)
    oracle = solve(world, ranking=False).e2e_ms
    exact = Simulator(world, noise=False)
    out = {}
    for decider in DECIDERS:
        result = run_rounds(seen, make_policy("agentic", decider=decider), LoopConfig(rounds=ROUNDS, seed=0),
                            executor=Simulator(world))
        ratios = [math.inf if (e := exact.e2e(r.mapping)) is None else e / oracle for r in result.rounds]
        out[decider] = (min(ratios[: BY + 1]), min(ratios))
    return spec, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100, help="workflows per mode")
    parser.add_argument("--spread", type=float, default=0.3)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    todo = [(s, args.spread) for s in specs(SMALL_SIZES, args.count)]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(job, todo))
    print(f"# stale cards (spread {args.spread}, kappa declared 0.10), {args.count} workflows per mode, "
          f"{ROUNDS} rounds; Python {platform.python_version()}")
    print(f"| decider | mode | within 1% by R{BY} | within 1% by R{ROUNDS - 1} | worst at R{BY} | median at R{BY} |")
    print("|---|---|---|---|---|---|")
    for decider in DECIDERS:
        for mode in (Mode.BINARY, Mode.THREE_WAY):
            rows = [o[decider] for s, o in results if s.mode is mode]
            by = sum(1 for r in rows if r[0] <= 1.01)
            last = sum(1 for r in rows if r[1] <= 1.01)
            at = sorted(r[0] for r in rows)
            print(f"| {decider} | {mode.value} | {by}/{len(rows)} | {last}/{len(rows)} | {at[-1]:.3f} | "
                  f"{at[len(at) // 2]:.3f} |")


if __name__ == "__main__":
    main()
