"""Seeded random scenarios for the search benchmarks (``oracle_speed.py``, ``reference_quality.py``).

Families: ``chain``, ``fanout`` (one source, parallel middle nodes, one sink), ``layered`` (random
layers, each node fed by one or two nodes of the layer before) and ``dag`` (random forward edges).
Tools are drawn from the bundled library's GPU-capable cards (base and amplified variants, with
repeats when n exceeds them, so several nodes may share a tool); edges carry 0-40 MB; the VRAM
budget lies between the largest tool and the sum of all tools (drawn uniformly between 15% and
70% of the way), so ``gpu_now`` cannot hold everything and the queue matters. The same
(n, mode, family, seed) always gives the same scenario.

Benchmark helper only; not part of the package.
"""

from __future__ import annotations

import itertools
import random

from hetsched.model import Edge, Machine, Mode, Node, Scenario, ToolCard, Workflow
from hetsched.model.files import bundled_library_path, load_tool_library

FAMILIES = ("chain", "fanout", "layered", "dag")


def _library() -> dict[str, ToolCard]:
    lib = load_tool_library(bundled_library_path())
    return {t: c for t, c in sorted(lib.items()) if c.has_gpu}


def _edges(ids: list[str], family: str, rng: random.Random) -> list[tuple[str, str]]:
    n = len(ids)
    if n == 1:
        return []
    if family == "chain":
        return list(itertools.pairwise(ids))
    if family == "fanout":
        if n == 2:
            return [(ids[0], ids[1])]
        mid = ids[1:-1]
        return [(ids[0], m) for m in mid] + [(m, ids[-1]) for m in mid]
    if family == "layered":
        layers: list[list[str]] = []
        for node in ids:
            if not layers or (rng.random() < 0.4 and len(layers[-1]) >= 1):
                layers.append([])
            layers[-1].append(node)
        edges = []
        for prev, cur in itertools.pairwise(layers):
            for node in cur:
                for src in rng.sample(prev, k=min(len(prev), rng.randint(1, 2))):
                    edges.append((src, node))
        return edges
    if family == "dag":
        p = min(0.5, 2.5 / n)
        edges = [(ids[i], ids[j]) for j in range(1, n) for i in range(j) if rng.random() < p]
        fed = {d for _, d in edges}
        for j in range(1, n):  # one component: every later node has an input
            if ids[j] not in fed:
                edges.append((ids[rng.randrange(j)], ids[j]))
        return edges
    raise ValueError(f"unknown family {family!r}; accepted: {', '.join(FAMILIES)}")


def random_scenario(n: int, mode: Mode | str = Mode.THREE_WAY, family: str = "layered", seed: int = 0) -> Scenario:
    """One seeded random scenario with n nodes (see the module docstring)."""
    rng = random.Random(f"{n}-{mode}-{family}-{seed}")
    lib = _library()
    names = list(lib)
    tools = rng.sample(names, n) if n <= len(names) // 2 else [rng.choice(names) for _ in range(n)]
    ids = [f"N{i}" for i in range(n)]
    edges = [Edge(src=s, dst=d, data_mb=rng.choice([0.0, 0.0, 2.0, 10.0, 40.0])) for s, d in _edges(ids, family, rng)]
    used = sorted(set(tools))
    vram = [lib[t].vram_mb for t in used]
    budget = max(vram) + rng.uniform(0.15, 0.7) * (sum(vram) - max(vram))
    return Scenario(
        name=f"{family}{n}-{Mode(mode).value}-{seed}",
        mode=Mode(mode),
        workflow=Workflow(nodes=tuple(Node(id=i, tool=t) for i, t in zip(ids, tools, strict=True)), edges=tuple(edges)),
        cards={t: lib[t] for t in used},
        machine=Machine(vram_budget_mb=round(max(budget, 1.0)), cpu_cores=rng.choice([8, 16]), noise_cv=0.03),
    )
