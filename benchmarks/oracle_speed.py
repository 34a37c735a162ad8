"""Oracle speed: mappings per second of the exhaustive search, n = 4, 8, 10, binary and three-way.

Workflows are random layered DAGs over the bundled library's GPU-capable tools (seeded), with a
budget that holds about half the tools at once, so the VRAM prefix pruning has work to do.
``full`` simulates every feasible mapping (the ranking); ``bounded`` (the oracle policy's mode)
skips mappings whose isolated critical path cannot beat the best found. Mappings/s counts the
whole space searched (2^n or 3^n) over the wall time, so pruning counts as speed.

Run: python benchmarks/oracle_speed.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import itertools
import platform
import random
import time

from hetsched.model import Edge, Machine, Mode, Node, Scenario, Workflow
from hetsched.model.files import bundled_library_path, load_tool_library
from hetsched.policies import oracle as oracle_mod


def random_scenario(n: int, mode: Mode, seed: int) -> Scenario:
    rng = random.Random(seed)
    lib = load_tool_library(bundled_library_path())
    gpu_tools = sorted(t for t, c in lib.items() if c.has_gpu and c.amplification == 1)
    tools = rng.sample(gpu_tools, n) if n <= len(gpu_tools) else [rng.choice(gpu_tools) for _ in range(n)]
    ids = [f"N{i}" for i in range(n)]
    layers: list[list[str]] = []
    for node in ids:
        if not layers or rng.random() < 0.45:
            layers.append([])
        layers[-1].append(node)
    edges = []
    for prev, cur in itertools.pairwise(layers):
        for node in cur:
            for src in rng.sample(prev, k=min(len(prev), rng.randint(1, 2))):
                edges.append(Edge(src=src, dst=node))
    budget = 0.5 * sum(lib[t].vram_mb for t in set(tools))
    return Scenario(
        name=f"rand{n}-{mode.value}-{seed}",
        mode=mode,
        workflow=Workflow(nodes=tuple(Node(id=i, tool=t) for i, t in zip(ids, tools, strict=True)), edges=tuple(edges)),
        cards={t: lib[t] for t in set(tools)},
        machine=Machine(vram_budget_mb=budget, cpu_cores=16),
    )


def measure(sc: Scenario, ranking: bool, repeat: int) -> tuple[float, int, int]:
    best = float("inf")
    result = None
    for _ in range(repeat):
        oracle_mod._CACHE.clear()
        t0 = time.perf_counter()
        result = oracle_mod.solve(sc, ranking=ranking)
        best = min(best, time.perf_counter() - t0)
    assert result is not None
    return best, result.space, result.simulated


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(
        "| n | mode | space | full: s | full: simulated | full: mappings/s | full: simulations/s "
        "| bounded: s | bounded: simulated | bounded: mappings/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode in (Mode.BINARY, Mode.THREE_WAY):
        for n in (4, 8, 10):
            sc = random_scenario(n, mode, seed=n)
            full_s, space, full_sim = measure(sc, True, args.repeat)
            bounded_s, _, simulated = measure(sc, False, args.repeat)
            print(
                f"| {n} | {mode.value} | {space} | {full_s:.3f} | {full_sim} | {space / full_s:,.0f} "
                f"| {full_sim / full_s:,.0f} | "
                f"{bounded_s:.3f} | {simulated} | {space / bounded_s:,.0f} |"
            )


if __name__ == "__main__":
    main()
