"""A seeded generator of random workflows: the unseen scenarios deciders and policies are judged on.

Nothing in hetsched is tuned on what this module draws, and the bundled scenarios S1-S13 are
not among its outputs: ``hetsched bench --suite random`` and ``--suite scale`` use it to check
that decisions generalize (docs/bench.md). One call, :func:`random_scenario`, draws a complete
:class:`~hetsched.model.Scenario` from a seed, a DAG family, a size and a mode:

- **DAG families** (:data:`FAMILIES`): ``chain``; ``parallel`` (independent tools, the paper's
  S5-S10 fan-outs); ``fanout`` (one source feeding every other node); ``forkjoin`` (a source,
  parallel branches, one join); ``diamond`` (diamonds in series); ``layered`` (random layers,
  each node fed by one to three nodes of the layer above, sometimes by an earlier layer);
  ``random`` (each node fed by each earlier node with probability about 1.5 / its index).
- **Cards**, drawn "around" the bundled tool library (``src/hetsched/data/tools.yaml``): each
  node takes one of the library's base tools at random (CPU-only tools included, at the
  library's share), amplified by a k drawn from 1-15 (the library's ``_xK`` variants), and
  every figure (cpu_ms, gpu_ms, load_ms, vram_mb) multiplied by its own lognormal factor of
  spread :data:`FIGURE_SPREAD` (about +-30%); ``gpu_util`` jittered too. So speedups, queue
  speedups, memory and GPU shares keep the library's realistic ranges without copying a card.
  A node reuses an earlier node's tool with probability :data:`TOOL_REUSE` (a tool may appear
  in several nodes, and is resident once).
- **Machine**: 4, 8 or 16 CPU cores; a GPU interference (``gpu_kappa``) drawn uniformly in
  :data:`KAPPA_RANGE` around the calibrated default 0.10 (docs/simulator.md); the default noise;
  a VRAM budget drawn uniformly between the largest GPU-capable tool and the sum of all of them
  (both modes), so every tool fits alone and not every set fits together.
- **Edges** carry data (1-40 MB, crossing PCIe when the ends sit on different devices) with
  probability :data:`EDGE_DATA_SHARE`.

Same arguments, same scenario, in any process (``random.Random`` seeded with a string).

Lives in ``bench`` because it is evaluation tooling that builds model objects: it imports only
the model (and the bundled library through ``model.files``); tests and ``benchmarks/`` import
it from here (docs/architecture.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hetsched.model import Edge, InputError, Machine, Mode, Node, Scenario, ToolCard, Workflow
from hetsched.model.files import bundled_library_path, load_tool_library

FAMILIES: tuple[str, ...] = ("chain", "parallel", "fanout", "forkjoin", "diamond", "layered", "random")
"""DAG families, in the order suites cycle through them."""
SMALL_SIZES: tuple[int, ...] = (4, 5, 6, 7, 8)
"""Node counts of the small random workflows (exact oracle affordable)."""
AMPLIFICATIONS: tuple[tuple[int, int], ...] = ((1, 4), (2, 2), (4, 2), (8, 2), (12, 1), (15, 1))
"""(k, weight): how often a tool is amplified k times (the library's ``_xK`` variants run 2-15)."""
FIGURE_SPREAD = 0.3
"""Sigma of the lognormal factor applied to each card figure (about +-30% around the library's)."""
UTIL_SPREAD = 0.15
"""Sigma of the lognormal factor applied to ``gpu_util`` (then clipped to [0.1, 1])."""
TOOL_REUSE = 0.15
"""Probability that a node reuses the tool of an earlier node."""
EDGE_DATA_SHARE = 0.25
"""Probability that an edge carries data (1-40 MB)."""
CORES: tuple[int, ...] = (4, 8, 16)
"""CPU core counts drawn for the machine."""
KAPPA_RANGE: tuple[float, float] = (0.02, 0.3)
"""Range of the GPU interference drawn for the machine (uniform)."""


@dataclass(frozen=True)
class WorkflowSpec:
    """What to draw: a family, a size, a mode and a seed (the scenario is a function of these)."""

    family: str
    """One of :data:`FAMILIES`."""
    n: int
    """Number of nodes."""
    mode: Mode
    """Binary or three-way."""
    seed: int
    """Seed of the draw."""

    @property
    def name(self) -> str:
        """``rand-layered-3w-n20-s4``: family, mode, size, seed."""
        tag = "3w" if self.mode is Mode.THREE_WAY else "bin"
        return f"rand-{self.family}-{tag}-n{self.n}-s{self.seed}"


def _base_library() -> dict[str, ToolCard]:
    lib = load_tool_library(bundled_library_path())
    return {name: card for name, card in lib.items() if card.base is None}


_LIBRARY: dict[str, ToolCard] | None = None


def base_tools() -> dict[str, ToolCard]:
    """The bundled library's base (non-amplified) cards, by name: what generated cards are drawn around."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = _base_library()
    return _LIBRARY


def _edges(family: str, n: int, rng: random.Random) -> list[tuple[int, int]]:
    """Edges (src, dst) over node indices 0..n-1 for one family; every edge goes from lower to higher index."""
    if family == "chain":
        return [(i, i + 1) for i in range(n - 1)]
    if family == "parallel":
        return []
    if family == "fanout":
        return [(0, i) for i in range(1, n)]
    if family == "forkjoin":
        if n < 3:
            return [(i, i + 1) for i in range(n - 1)]
        return [(0, i) for i in range(1, n - 1)] + [(i, n - 1) for i in range(1, n - 1)]
    if family == "diamond":
        edges: list[tuple[int, int]] = []
        head, i = 0, 1
        while i + 2 <= n - 1:
            a, b, join = i, i + 1, i + 2
            edges += [(head, a), (head, b), (a, join), (b, join)]
            head, i = join, i + 3
        while i < n:  # leftovers continue the chain
            edges.append((head, i))
            head, i = i, i + 1
        return edges
    if family == "layered":
        layers = max(2, round(math.sqrt(n)))
        cuts = sorted(rng.sample(range(1, n), min(layers - 1, n - 1)))
        bounds = [0, *cuts, n]
        groups = [list(range(bounds[k], bounds[k + 1])) for k in range(len(bounds) - 1)]
        edges = []
        for k in range(1, len(groups)):
            above = groups[k - 1]
            earlier = [v for g in groups[: k - 1] for v in g]
            for v in groups[k]:
                for u in rng.sample(above, min(len(above), rng.randint(1, 3))):
                    edges.append((u, v))
                if earlier and rng.random() < 0.2:
                    edges.append((rng.choice(earlier), v))
        return sorted(set(edges))
    if family == "random":
        edges = []
        for v in range(1, n):
            p = min(1.0, 1.5 / v)
            preds = [u for u in range(v) if rng.random() < p]
            if not preds and rng.random() < 0.8:
                preds = [rng.randrange(v)]
            edges += [(u, v) for u in preds]
        return edges
    raise InputError(f"unknown workflow family {family!r}; accepted: {', '.join(FAMILIES)}")


def _jitter(value: float, sigma: float, rng: random.Random) -> float:
    return value * math.exp(rng.gauss(0.0, sigma))


def _draw_card(name: str, rng: random.Random) -> ToolCard:
    lib = base_tools()
    base = lib[rng.choice(sorted(lib))]
    k = rng.choices([a for a, _ in AMPLIFICATIONS], weights=[w for _, w in AMPLIFICATIONS])[0]
    cpu_ms = round(_jitter(base.cpu_ms * k, FIGURE_SPREAD, rng), 3)
    gpu_ms = None if base.gpu_ms is None else round(_jitter(base.gpu_ms * k, FIGURE_SPREAD, rng), 3)
    has_gpu = gpu_ms is not None
    return ToolCard(
        name=name,
        description=f"random tool drawn around {base.name} x{k}",
        cpu_ms=max(cpu_ms, 0.1),
        gpu_ms=None if gpu_ms is None else max(gpu_ms, 0.1),
        load_ms=round(_jitter(base.load_ms, FIGURE_SPREAD, rng), 3) if has_gpu else 0.0,
        vram_mb=round(_jitter(base.vram_mb, FIGURE_SPREAD, rng), 1) if has_gpu else 0.0,
        gpu_util=min(1.0, max(0.1, round(_jitter(base.gpu_util, UTIL_SPREAD, rng), 3))),
        cpu_threads=base.cpu_threads,
        has_gpu=has_gpu,
        amplification=k,
        base=base.name,
    )


def random_scenario(spec: WorkflowSpec) -> Scenario:
    """The scenario drawn for ``spec`` (deterministic: the same spec gives the same scenario)."""
    if spec.family not in FAMILIES:
        raise InputError(f"unknown workflow family {spec.family!r}; accepted: {', '.join(FAMILIES)}")
    if spec.n < 1:
        raise InputError(f"a workflow needs at least one node, got n={spec.n}")
    rng = random.Random(f"hetsched-random:{spec.family}:{spec.n}:{spec.mode.value}:{spec.seed}")
    width = len(str(spec.n - 1))
    ids = [f"N{i:0{width}d}" for i in range(spec.n)]
    cards: dict[str, ToolCard] = {}
    tool_of: list[str] = []
    for _ in range(spec.n):
        if cards and rng.random() < TOOL_REUSE:
            tool_of.append(rng.choice(sorted(cards)))
            continue
        name = f"t{len(cards):0{width}d}"
        cards[name] = _draw_card(name, rng)
        tool_of.append(name)
    edges = _edges(spec.family, spec.n, rng)
    data = [round(rng.uniform(1.0, 40.0), 1) if rng.random() < EDGE_DATA_SHARE else 0.0 for _ in edges]
    gpu_vram = [c.vram_mb for c in cards.values() if c.has_gpu]
    if gpu_vram:
        lo, hi = max(gpu_vram), sum(gpu_vram)
        budget = round(lo + rng.random() * (hi - lo), 1)
    else:
        budget = Machine().vram_budget_mb
    machine = Machine(
        name="random",
        cpu_cores=rng.choice(CORES),
        vram_budget_mb=max(budget, 1.0),
        gpu_kappa=round(rng.uniform(*KAPPA_RANGE), 3),
    )
    workflow = Workflow(
        nodes=tuple(Node(id=ids[i], tool=tool_of[i]) for i in range(spec.n)),
        edges=tuple(Edge(src=ids[u], dst=ids[v], data_mb=d) for (u, v), d in zip(edges, data, strict=True)),
    )
    return Scenario(
        name=spec.name,
        description=f"random {spec.family} workflow of {spec.n} nodes (seed {spec.seed})",
        mode=spec.mode,
        workflow=workflow,
        cards=cards,
        machine=machine,
    )


def specs(
    sizes: Sequence[int],
    count: int,
    *,
    modes: Sequence[Mode] = (Mode.BINARY, Mode.THREE_WAY),
    families: Sequence[str] = FAMILIES,
    seed: int = 0,
) -> Iterator[WorkflowSpec]:
    """``count`` specs per mode, cycling through ``families`` and ``sizes`` (seeds from ``seed`` up)."""
    for mode in modes:
        for i in range(count):
            yield WorkflowSpec(families[i % len(families)], sizes[(i // len(families)) % len(sizes)], mode, seed + i)


__all__ = [
    "FAMILIES",
    "SMALL_SIZES",
    "WorkflowSpec",
    "base_tools",
    "random_scenario",
    "specs",
]
