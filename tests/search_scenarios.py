"""Seeded random scenarios for the search tests: random cards, shared tools, four DAG families.

Unlike the bundled library, the cards here span every regime the model has (CPU-faster tools,
tiny and full GPU shares, oversubscribed CPUs, loads longer than the work, tools larger than
the budget's free part), so the bounds and searches are tested where they are weakest.
"""

from __future__ import annotations

import itertools
import random

from tests.factories import make_card, make_scenario, make_workflow

from hetsched.model import Mode, Scenario

FAMILIES = ("chain", "fanout", "layered", "dag")


def _edges(ids: list[str], family: str, rng: random.Random) -> list[tuple[str, str]]:
    n = len(ids)
    if n == 1:
        return []
    if family == "chain":
        return list(itertools.pairwise(ids))
    if family == "fanout":
        if n <= 2:
            return [(ids[0], ids[-1])] if n == 2 else []
        mid = ids[1:-1]
        return [(ids[0], m) for m in mid] + [(m, ids[-1]) for m in mid]
    if family == "layered":
        layers: list[list[str]] = [[ids[0]]]
        for node in ids[1:]:
            if rng.random() < 0.4:
                layers.append([])
            layers[-1].append(node)
        out = []
        for prev, cur in itertools.pairwise(layers):
            for node in cur:
                for src in rng.sample(prev, k=min(len(prev), rng.randint(1, 2))):
                    out.append((src, node))
        return out
    out = [(ids[i], ids[j]) for j in range(1, n) for i in range(j) if rng.random() < min(0.5, 2.5 / n)]
    return out


def random_search_scenario(n: int, seed: int, *, family: str | None = None, mode: Mode = Mode.THREE_WAY,
                           cpu_only_share: float = 0.1) -> Scenario:
    """One scenario with n nodes; the same arguments always give the same scenario."""
    rng = random.Random(f"{n}/{seed}/{family}/{mode}")
    family = family or rng.choice(FAMILIES)
    n_tools = max(1, rng.randint((n + 1) // 2, n))
    cards = []
    for t in range(n_tools):
        cpu_ms = rng.lognormvariate(4.5, 1.2)
        has_gpu = t == 0 or rng.random() >= cpu_only_share
        cards.append(make_card(
            f"t{t}",
            cpu_ms=cpu_ms,
            gpu_ms=cpu_ms / rng.choice([0.5, 1.5, 4.0, 12.0, 25.0]) if has_gpu else None,
            load_ms=rng.choice([0.0, rng.uniform(10, 600), rng.uniform(500, 3000)]),
            vram_mb=rng.uniform(50, 4000),
            gpu_util=rng.choice([0.1, 0.3, 0.6, 0.9, 1.0]),
            cpu_threads=rng.choice([1, 2, 4, 8, 16]),
        ))
    ids = [f"v{i}" for i in range(n)]
    tool_of = [f"t{rng.randrange(n_tools)}" for _ in ids]
    edges = [(s, d, rng.choice([0.0, 0.0, 5.0, 60.0])) for s, d in _edges(ids, family, rng)]
    used = sorted(set(tool_of))
    vram = {c.name: c.vram_mb for c in cards}
    largest = max(vram[t] for t in used)
    total = sum(vram[t] for t in used)
    return make_scenario(
        make_workflow(list(zip(ids, tool_of, strict=True)), edges),
        [c for c in cards if c.name in used],
        mode=mode,
        name=f"{family}{n}-{seed}",
        cpu_cores=rng.choice([2, 4, 8, 16]),
        vram_budget_mb=largest + rng.uniform(0.05, 0.8) * (total - largest) + 1.0,
        gpu_kappa=rng.choice([0.0, 0.1, 0.3]),
    )
