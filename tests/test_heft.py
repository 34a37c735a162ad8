"""HEFT: the paper's canonical example exactly, schedule invariants, and HEFT-CF's mapping."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.factories import canonical_scenario, chain, fork, make_card, make_scenario

from hetsched.model import Mode, Placement
from hetsched.policies import PolicyContext, make_policy
from hetsched.policies.heft import GPU_PROC, HeftSchedule, cpu_slots, heft, heft_cf_schedule

# Topcuoglu, Hariri, Wu 2002, Fig. 2: costs (task: P0 P1 P2) and edge communication costs
CANON_COSTS = {
    0: (14, 16, 9), 1: (13, 19, 18), 2: (11, 13, 19), 3: (13, 8, 17), 4: (12, 13, 10),
    5: (13, 16, 9), 6: (7, 15, 11), 7: (5, 11, 14), 8: (18, 12, 20), 9: (21, 7, 16),
}  # fmt: skip
CANON_EDGES = {
    (0, 1): 18, (0, 2): 12, (0, 3): 9, (0, 4): 11, (0, 5): 14, (1, 7): 19, (1, 8): 16, (2, 6): 23,
    (3, 7): 27, (3, 8): 23, (4, 8): 13, (5, 7): 15, (6, 9): 17, (7, 9): 11, (8, 9): 13,
}  # fmt: skip


def canonical() -> HeftSchedule[int]:
    return heft(
        {t: [float(c) for c in row] for t, row in CANON_COSTS.items()}, {e: float(c) for e, c in CANON_EDGES.items()}
    )


def test_canonical_schedule_exact() -> None:
    s = canonical()
    per_proc = {p: [(x.task, x.start, x.finish) for x in s.on(p)] for p in range(3)}
    assert per_proc == {
        2: [(0, 0, 9), (2, 9, 28), (4, 28, 38), (6, 38, 49)],
        1: [(3, 18, 26), (5, 26, 42), (8, 56, 68), (9, 73, 80)],
        0: [(1, 27, 40), (7, 57, 62)],
    }
    assert s.makespan == 80


def test_canonical_ranks_and_order() -> None:
    s = canonical()
    # the paper's Table 1 ranks (n1..n10 = T0..T9); T2 and T3 tie at 80 and go in index order
    expected = {0: 108.0, 1: 77.0, 2: 80.0, 3: 80.0, 4: 69.0, 5: 63.333, 6: 42.667, 7: 35.667, 8: 44.333, 9: 14.667}
    assert {t: round(r, 3) for t, r in s.rank_u.items()} == expected
    assert s.order == (0, 2, 3, 1, 4, 5, 8, 6, 7, 9)


def test_insertion_uses_an_earlier_gap() -> None:
    # b can start on p1 only at 11, once a's data has crossed; c (independent, short) goes
    # into p1's idle gap 0-11 rather than after b: the insertion policy, not append-only
    s = heft(
        {"a": [1.0, math.inf], "b": [math.inf, 5.0], "c": [math.inf, 2.0]},
        {("a", "b"): 10.0},
    )
    assert (s.slots["b"].start, s.slots["b"].finish) == (11.0, 16.0)
    assert (s.slots["c"].proc, s.slots["c"].start, s.slots["c"].finish) == (1, 0.0, 2.0)


@pytest.mark.parametrize(
    ("comp", "edges", "match"),
    [
        ({"a": [1.0, 2.0], "b": [1.0]}, {}, "task 'b' has 1 costs, expected 2"),
        ({"a": [-1.0]}, {}, "costs must be >= 0"),
        ({"a": [math.inf, math.inf]}, {}, "no processor can run task 'a'"),
        ({"a": [1.0]}, {("a", "z"): 1.0}, "names a task that has no cost row"),
        ({"a": [1.0], "b": [1.0]}, {("a", "b"): 1.0, ("b", "a"): 1.0}, "cycle"),
    ],
)
def test_bad_input_is_named(comp: dict[str, list[float]], edges: dict[tuple[str, str], float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        heft(comp, edges)


@st.composite
def instances(draw: st.DrawFn) -> tuple[dict[int, list[float]], dict[tuple[int, int], float], list[list[float]]]:
    n = draw(st.integers(1, 9))
    p = draw(st.integers(1, 4))
    cost = st.floats(0.0, 50.0, allow_nan=False)
    comp = {t: draw(st.lists(cost, min_size=p, max_size=p)) for t in range(n)}
    edges = {(u, v): draw(cost) for u in range(n) for v in range(u + 1, n) if draw(st.booleans())}
    link = [[0.0 if a == b else draw(st.floats(0.0, 2.0)) for b in range(p)] for a in range(p)]
    return comp, edges, link


@settings(max_examples=150, deadline=None)
@given(instances())
def test_schedule_invariants(
    inst: tuple[dict[int, list[float]], dict[tuple[int, int], float], list[list[float]]],
) -> None:
    comp, edges, link = inst
    s = heft(comp, edges, link)
    assert set(s.slots) == set(comp)
    for t, slot in s.slots.items():
        assert slot.start >= 0
        assert slot.finish - slot.start == pytest.approx(comp[t][slot.proc])  # runs at its cost there
    for (u, v), vol in edges.items():  # no task starts before its inputs have arrived
        su, sv = s.slots[u], s.slots[v]
        delay = 0.0 if su.proc == sv.proc else vol * link[su.proc][sv.proc]
        assert sv.start >= su.finish + delay - 1e-9
    for p in range(len(link)):  # a processor runs one task at a time
        busy = s.on(p)
        for a, b in itertools.pairwise(busy):
            assert b.start >= a.finish - 1e-9
    order = {t: i for i, t in enumerate(s.order)}
    assert all(order[u] < order[v] for u, v in edges)  # the priority list respects precedence


# ---------------------------------------------------------------------------- HEFT-CF
def test_cpu_slots_follow_the_widest_tool() -> None:
    cards = [make_card("t0", cpu_threads=4), make_card("t1", cpu_threads=2), make_card("t2")]
    assert cpu_slots(make_scenario(chain(3), cards, cpu_cores=16)) == 4
    assert cpu_slots(make_scenario(chain(3), cards, cpu_cores=3)) == 1


def test_heft_cf_uses_isolated_costs_and_pcie() -> None:
    # S is fast on the GPU; a kid on a CPU would first wait 10 ms for S's 120 MB to cross
    # PCIe, so even one after the other on the GPU the kids finish earlier there
    cards = [make_card("t0", 100, 10), *[make_card(f"t{i}", 12, 5) for i in (1, 2)]]
    wf = fork(2).model_copy(update={"edges": tuple(e.model_copy(update={"data_mb": 120.0}) for e in fork(2).edges)})
    sc = make_scenario(wf, cards, cpu_cores=4, pcie_mb_per_ms=12.0)
    s = heft_cf_schedule(sc)
    assert s.slots["S"].proc == GPU_PROC
    # K0 goes first on the GPU (10-15); K1 is better on the GPU queue (15-20) than on a CPU (20-32)
    assert [(x.task, x.start, x.finish) for x in s.on(GPU_PROC)] == [("S", 0, 10), ("K0", 10, 15), ("K1", 15, 20)]
    pol = make_policy("heft-cf")
    pol.reset(PolicyContext(scenario=sc))
    m = pol.propose([]).mapping
    assert m.to_dict() == {"S": "gpu_now", "K0": "gpu_now", "K1": "gpu_now"}


def test_heft_cf_never_exceeds_the_budget() -> None:
    # HEFT wants all three on the GPU; only two tools fit 1000 MB
    sc = canonical_scenario("chain", mode=Mode.THREE_WAY, vram_budget_mb=1000.0)
    heavy = {t: c.model_copy(update={"vram_mb": 450.0, "cpu_ms": 500.0, "gpu_ms": 10.0}) for t, c in sc.cards.items()}
    sc = sc.model_copy(update={"cards": heavy})
    pol = make_policy("heft-cf")
    pol.reset(PolicyContext(scenario=sc))
    prop = pol.propose([])
    assert sc.gpu_now_vram_mb(prop.mapping) <= 1000.0
    assert prop.mapping.to_dict() == {"N0": "gpu_now", "N1": "gpu_now", "N2": "gpu_queue"}
    assert sc.infeasibility(prop.mapping) is None
    binary = sc.model_copy(update={"mode": Mode.BINARY})
    pol.reset(PolicyContext(scenario=binary))
    assert pol.propose([]).mapping["N2"] is Placement.CPU
