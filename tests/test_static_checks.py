"""The static checks (the monitor's incremental ones, ``hetsched.monitor.static``, and the scenario's):
their near-linear versions (issue 19: 10,000-node agentic rounds) give exactly the results of the
straightforward quadratic algorithms they replaced.

Each old algorithm is kept here, verbatim in substance, as the oracle; hypothesis draws small
random inputs (ties, zero-length spans and mixed devices included) and compares bit for bit.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.bench.generate import FAMILIES, WorkflowSpec, random_scenario
from hetsched.model import Infeasibility, InfeasibleKind, Mapping, Mode, Placement, Scenario
from hetsched.model.mapping import NOW_CODE, QUEUE_CODE
from hetsched.model.trace import NodeTrace
from hetsched.monitor import monitor as monitor_mod
from hetsched.monitor.static import Around, Change, StaticCheck


def old_concurrency(trace: Any) -> dict[str, float]:
    """The n x n overlap matrix the monitor used before (the oracle)."""
    names = list(trace.nodes)
    nts = list(trace.nodes.values())
    admitted = np.array([nt.admitted_ms for nt in nts])
    end = np.array([nt.end_ms for nt in nts])
    gpu = np.array([nt.placement.on_gpu for nt in nts])
    overlap = np.minimum.outer(end, end) - np.maximum.outer(admitted, admitted)
    np.maximum(overlap, 0.0, out=overlap)
    overlap[gpu[:, None] != gpu[None, :]] = 0.0
    np.fill_diagonal(overlap, 0.0)
    totals = np.cumsum(overlap, axis=1)[:, -1] if len(names) else np.zeros(0)
    span = end - admitted
    return {n: (float(totals[k]) / float(span[k]) if span[k] > 0 else 0.0) for k, n in enumerate(names)}


# times on a coarse grid make ties (equal starts/ends, touching spans) common; a fine part makes sums inexact
_time = st.one_of(st.integers(0, 20).map(float), st.floats(0.0, 20.0, allow_nan=False, allow_infinity=False))


@st.composite
def _traces(draw: Any) -> Any:
    n = draw(st.integers(0, 40))
    nodes = {}
    for k in range(n):
        a = draw(_time)
        length = draw(st.one_of(st.just(0.0), _time))
        placement = draw(st.sampled_from(list(Placement)))
        nodes[f"n{k}"] = NodeTrace(f"n{k}", "t", placement, a, a, a, a + length)
    return SimpleNamespace(nodes=nodes)


@settings(max_examples=300, deadline=None)
@given(_traces(), st.integers(1, 5))
def test_concurrency_equals_the_full_overlap_matrix(trace: Any, block: int) -> None:
    old = monitor_mod._CONCURRENCY_BLOCK
    monitor_mod._CONCURRENCY_BLOCK = block  # small blocks: many blocks, each with its own column window
    try:
        got = monitor_mod._concurrency(trace)
    finally:
        monitor_mod._CONCURRENCY_BLOCK = old
    want = old_concurrency(trace)
    assert list(got) == list(want)
    assert got == want  # bit for bit
    assert monitor_mod._concurrency(trace) == want  # the default block size


def old_queue_deadlock(sc: Scenario, mapping: Mapping) -> Infeasibility | None:
    """``Scenario.queue_deadlock`` as it was: every queued node against every gpu_now tool's bit mask."""
    wf = sc.workflow
    budget = sc.machine.vram_budget_mb
    queued = [i for i, q in enumerate(wf.node_ids) if mapping[q] is Placement.GPU_QUEUE]
    if not queued:
        return None
    masks = sc.descendant_masks
    ids = wf.node_ids
    now_tools: dict[str, int] = {}
    for i, n in enumerate(ids):
        if mapping[n] is Placement.GPU_NOW:
            now_tools[wf.tool_of[n]] = now_tools.get(wf.tool_of[n], 0) | (1 << i)
    resident = 0
    for nodes in now_tools.values():
        resident |= nodes
    for i in queued:
        if not masks[i] & resident:
            continue
        q = ids[i]
        holders = [t for t, nodes in now_tools.items() if nodes & masks[i]]
        held = sum(sc.cards[t].vram_mb for t in holders)
        need = sc.card_of(q).vram_mb
        if holders and need + held > budget:
            return Infeasibility(
                InfeasibleKind.DEADLOCK,
                f"node {q!r} ({sc.card_of(q).name}) needs {need:g} MB but gpu_now tools "
                f"{holders} hold {held:g} MB of {budget:g} MB until nodes that depend on it finish",
            )
    return None


@st.composite
def _scenarios_and_mappings(draw: Any) -> tuple[Scenario, Mapping]:
    family = draw(st.sampled_from(FAMILIES))
    sc = random_scenario(WorkflowSpec(family, draw(st.integers(1, 30)), Mode.THREE_WAY, draw(st.integers(0, 10**6))))
    # a budget anywhere from "nothing fits" to "everything fits" makes deadlocks common and rare
    total = sum(c.vram_mb for c in sc.cards.values())
    budget = draw(st.floats(0.05, 1.2)) * total
    sc = sc.model_copy(update={"machine": sc.machine.model_copy(update={"vram_budget_mb": budget})})
    ids = sc.workflow.node_ids
    mapping = Mapping(zip(ids, [draw(st.sampled_from(list(c))) for c in sc.choices], strict=True))
    return sc, mapping


@settings(max_examples=300, deadline=None)
@given(_scenarios_and_mappings())
def test_queue_deadlock_equals_the_per_node_mask_scan(drawn: tuple[Scenario, Mapping]) -> None:
    sc, mapping = drawn
    got, want = sc.queue_deadlock(mapping), old_queue_deadlock(sc, mapping)
    assert (got is None) == (want is None)
    if want is not None:
        assert got is not None and (got.kind, str(got)) == (want.kind, str(want))


def old_kind(a: Around, changes: tuple[Change, ...]) -> InfeasibleKind | None:
    """``Around._kind`` as it was: every queued node's memory below it, per variant (the oracle)."""
    ck = a.check
    codes = a.codes
    budget, tol = ck.budget, ck.tolerance
    delta: dict[int, int] = {}
    now_mask = a.now_mask
    changed: dict[int, int] = {}
    for i, new in changes:
        old = codes[i]
        changed[i] = new
        if old == new:
            continue
        t = ck.tool[i]
        if old == NOW_CODE:
            delta[t] = delta.get(t, 0) - 1
            now_mask &= ~(1 << i)
        if new == NOW_CODE:
            delta[t] = delta.get(t, 0) + 1
            now_mask |= 1 << i
    need = a.need
    for t, d in delta.items():
        before, after = a.count[t] > 0, a.count[t] + d > 0
        if before != after:
            need += ck.tool_vram[t] if after else -ck.tool_vram[t]
    if abs(need - budget) <= tol:
        return a._exact(changes)
    if need > budget:
        return InfeasibleKind.OOM
    queued = [q for q in a.queued if q not in changed]
    queued += [i for i, new in changed.items() if new == QUEUE_CODE]
    for q in queued:
        if ck.node_vram[q] > budget:
            return InfeasibleKind.NEVER_ADMISSIBLE
    moved_tools = list(delta)
    for q in queued:
        held = a.held(q)
        below_old = a.now_mask & ck.desc[q]
        below_new = now_mask & ck.desc[q]
        if below_old != below_new:
            for t in moved_tools:
                nodes = ck.tool_nodes[t]
                was, now = bool(nodes & below_old), bool(nodes & below_new)
                if was != now:
                    held += ck.tool_vram[t] if now else -ck.tool_vram[t]
        total = ck.node_vram[q] + held
        if abs(total - budget) <= tol:
            return a._exact(changes)
        if total > budget:
            return InfeasibleKind.DEADLOCK
    return None


@settings(max_examples=1000, deadline=None)
@given(_scenarios_and_mappings(), st.data())
def test_incremental_check_equals_the_per_queued_node_scan(drawn: tuple[Scenario, Mapping], data: Any) -> None:
    sc, mapping = drawn
    check = StaticCheck(sc)
    base = check.codes(mapping)
    around = check.around(base)
    n = len(base)
    choices = [[p.code for p in c] for c in sc.choices]
    # one-node moves, two-node swaps and a few larger variants (the monitor asks for the first two)
    for _ in range(data.draw(st.integers(1, 8))):
        k = data.draw(st.integers(1, min(3, n)))
        nodes = data.draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k, unique=True))
        # half the time a gpu_now move below a queued node: the variant most likely to deadlock
        now_first = data.draw(st.booleans())
        changes = tuple((i, NOW_CODE if now_first and NOW_CODE in choices[i] else data.draw(st.sampled_from(choices[i])))
                        for i in nodes)
        assert around.kind(changes) == old_kind(around, changes)
        assert around.kind(changes) == old_kind(check.around(base), changes)  # remembered verdicts too
