"""The oracle: the best feasible mapping by noise-free simulated E2E, by exhaustive search.

PAPER.md's oracle enumerates every feasible mapping and measures each; ours evaluates each
with the noise-free simulator, so it is the true optimum of the model (noise cannot crown a
lucky mapping). The search walks the 2^n / 3^n space depth first and prunes a prefix as soon
as its ``gpu_now`` set no longer fits the budget. With ``ranking=False`` it also skips every
mapping whose critical-path lower bound (isolated times, no contention) cannot beat the best
found, which keeps n = 10 three-way interactive.

Ties (equal E2E within 1e-9 relative) go to the mapping that holds the least VRAM, then the
fewest GPU nodes, then the first in enumeration order; ``optimal`` lists them all.

Evaluation side: reports and the ``oracle`` policy's planner use it; runs never need it.
Imports the model and the simulator, which defines the oracle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hetsched.model import InputError, Mapping, Placement, Scenario
from hetsched.model.mapping import CPU_CODE as CPU
from hetsched.model.mapping import NOW_CODE as NOW
from hetsched.model.mapping import QUEUE_CODE as QUEUE
from hetsched.sim.engine import Simulator

_TIE_REL = 1e-9
MAX_MAPPINGS = 1_000_000
"""Largest mapping space the exhaustive search takes on (2^19 binary, 3^12 three-way fit;
3^12 = 531,441 takes about 10 s here). Larger scenarios get an InputError, not a hang or a
MemoryError."""


@dataclass(frozen=True)
class Ranked:
    """One feasible mapping and its noise-free E2E."""

    mapping: Mapping
    """The mapping."""
    e2e_ms: float
    """Noise-free E2E."""


@dataclass(frozen=True)
class OracleResult:
    """The optimum and, when asked for, every feasible mapping ranked."""

    best: Mapping
    """The optimal mapping (ties broken as the module says)."""
    e2e_ms: float
    """Its noise-free E2E."""
    optimal: tuple[Mapping, ...]
    """Every mapping within the tie tolerance of the optimum (evaluated ones)."""
    ranking: tuple[Ranked, ...]
    """Feasible mappings by E2E (complete only when solved with ``ranking=True``)."""
    space: int
    """Size of the well-formed mapping space (2^n or 3^n, less CPU-only tools)."""
    feasible: int
    """Feasible mappings found (complete only with ``ranking=True``)."""
    simulated: int
    """Mappings actually simulated."""
    pruned: int
    """Mappings skipped by the VRAM prefix check or the lower bound."""

    def __repr__(self) -> str:  # the generated one prints the whole ranking (62,736 characters at n = 10)
        return (f"OracleResult(best={self.best!r}, e2e_ms={self.e2e_ms:.1f}, {len(self.optimal)} optimal, "
                f"ranking of {len(self.ranking):,}, space {self.space:,}, {self.simulated:,} simulated)")


def _candidates(scenario: Scenario) -> list[tuple[int, ...]]:
    """Every placement-code tuple whose gpu_now set fits the budget (DFS with prefix pruning)."""
    wf = scenario.workflow
    ids = wf.node_ids
    budget = scenario.machine.vram_budget_mb
    codes_per_node = [tuple(p.code for p in scenario.allowed(n)) for n in ids]
    tool = [wf.tool_of[n] for n in ids]
    vram = [scenario.cards[t].vram_mb for t in tool]
    out: list[tuple[int, ...]] = []
    prefix: list[int] = []
    resident: dict[str, int] = {}

    def walk(i: int, used: float) -> None:
        if i == len(ids):
            out.append(tuple(prefix))
            return
        for code in codes_per_node[i]:
            add = 0.0
            if code == NOW and tool[i] not in resident:
                add = vram[i]
                if used + add > budget:
                    continue
            if code == QUEUE and vram[i] > budget:
                continue
            prefix.append(code)
            if code == NOW:
                resident[tool[i]] = resident.get(tool[i], 0) + 1
            walk(i + 1, used + add)
            if code == NOW:
                resident[tool[i]] -= 1
                if resident[tool[i]] == 0:
                    del resident[tool[i]]
            prefix.pop()

    walk(0, 0.0)
    return out


def _lower_bounds(scenario: Scenario, candidates: Sequence[tuple[int, ...]]) -> list[float]:
    """Critical path of isolated durations (+ load, + crossing transfers) per candidate."""
    wf = scenario.workflow
    ids = wf.node_ids
    index = {n: i for i, n in enumerate(ids)}
    order = [index[n] for n in wf.topo_order]
    cards = [scenario.card_of(n) for n in ids]
    iso = [
        (c.cpu_ms, c.gpu_ms if c.gpu_ms is not None else math.inf, (c.gpu_ms or math.inf) + c.load_ms) for c in cards
    ]
    pcie = scenario.machine.pcie_mb_per_ms
    preds = [[(index[e.src], e.data_mb / pcie) for e in wf.edges if e.dst == n] for n in ids]
    sinks = [index[s] for s in wf.sinks]
    bounds = []
    for codes in candidates:
        finish = [0.0] * len(ids)
        for v in order:
            start = 0.0
            on_cpu = codes[v] == CPU
            for u, delay in preds[v]:
                t = finish[u] + (delay if (codes[u] == CPU) != on_cpu else 0.0)
                if t > start:
                    start = t
            finish[v] = start + iso[v][codes[v]]
        bounds.append(max(finish[s] for s in sinks))
    return bounds


def _tie_key(scenario: Scenario, codes: tuple[int, ...]) -> tuple[float, int, tuple[int, ...]]:
    m = _to_mapping(scenario, codes)
    held = scenario.gpu_now_vram_mb(m) + sum(
        scenario.card_of(n).vram_mb for n, c in zip(scenario.workflow.node_ids, codes, strict=True) if c == QUEUE
    )
    return (held, sum(1 for c in codes if c != CPU), codes)


def _to_mapping(scenario: Scenario, codes: Sequence[int]) -> Mapping:
    return Mapping(zip(scenario.workflow.node_ids, (Placement.of_code(c) for c in codes), strict=True))


_CACHE: dict[tuple[str, bool], OracleResult] = {}
_CACHE_MAX = 64


def solve(scenario: Scenario, ranking: bool = True) -> OracleResult:
    """Exhaustive search for the optimum (and the full ranking when ``ranking``); memoized.

    Raises :class:`~hetsched.model.InputError` when the mapping space exceeds :data:`MAX_MAPPINGS`.
    """
    space = scenario.mapping_space_size()
    if space > MAX_MAPPINGS:
        raise InputError(
            f"scenario {scenario.name!r}: the oracle's exhaustive search would cover {space:,} mappings "
            f"({len(scenario.workflow.nodes)} nodes, {scenario.mode.value}); the limit is {MAX_MAPPINGS:,}. "
            "Split the workflow, or mark tools without a GPU implementation (has_gpu: false) to shrink the space"
        )
    key = (scenario.model_dump_json(exclude={"source"}), ranking)
    hit = _CACHE.get(key) or (None if ranking else _CACHE.get((key[0], True)))
    if hit is not None:
        return hit
    result = _search(scenario, ranking)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = result
    return result


def _search(scenario: Scenario, ranking: bool) -> OracleResult:
    sim = Simulator(scenario, noise=False)
    candidates = _candidates(scenario)
    space = scenario.mapping_space_size()
    results: list[tuple[float, tuple[int, ...]]] = []
    simulated = 0
    if ranking:
        for codes in candidates:
            simulated += 1
            e = sim.e2e_codes(codes)
            if not math.isinf(e):
                results.append((e, codes))
    else:
        bounds = _lower_bounds(scenario, candidates)
        best = math.inf
        for lb, codes in sorted(zip(bounds, candidates, strict=True)):
            if lb > best * (1 + _TIE_REL):
                break
            simulated += 1
            e = sim.e2e_codes(codes)
            if math.isinf(e):
                continue
            results.append((e, codes))
            best = min(best, e)
    if not results:  # all-cpu is always feasible, so this means a bug, not bad input
        raise RuntimeError(f"scenario {scenario.name!r}: no feasible mapping found")
    best_e = min(e for e, _ in results)
    tied = [codes for e, codes in results if e <= best_e * (1 + _TIE_REL)]
    tied.sort(key=lambda c: _tie_key(scenario, c))
    rank_order = sorted(results, key=lambda r: (r[0], r[1]))
    return OracleResult(
        best=_to_mapping(scenario, tied[0]),
        e2e_ms=best_e,
        optimal=tuple(_to_mapping(scenario, c) for c in tied),
        ranking=tuple(Ranked(_to_mapping(scenario, c), e) for e, c in rank_order) if ranking else (),
        space=space,
        feasible=len(results) if ranking else 0,
        simulated=simulated,
        pruned=space - simulated,
    )

