"""The contention kernel (``hetsched.model.contention``) against hand-computed timings, several
instances on one machine included (shared resident tools, one FIFO queue across instances)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow

from hetsched.model import Mode
from hetsched.model.contention import simulate, simulate_e2e
from hetsched.model.mapping import CPU_CODE, NOW_CODE, QUEUE_CODE


def test_two_instances_share_the_cpu_from_the_second_release() -> None:
    """One 100 ms CPU node, one core; instances released at 0 and 50 ms. Alone 0-50 (50 done), then
    both at half speed: the first ends at 150, the second has 50 left and ends alone at 200."""
    sc = make_scenario(make_workflow([("a", "t")]), [make_card("t", cpu_ms=100.0)], cpu_cores=1)
    out = simulate(sc.compiled, (CPU_CODE,), releases=(0.0, 50.0), timings=True)
    assert out.end == [150.0, 200.0]
    assert out.instance_e2e_ms == [150.0, 150.0] and out.e2e_ms == 150.0
    assert out.ready == [0.0, 50.0]


def test_one_instance_is_the_plain_simulation() -> None:
    sc = make_scenario(make_workflow([("a", "t"), ("b", "t")], [("a", "b")]), [make_card("t", cpu_ms=40.0)])
    one = simulate(sc.compiled, (CPU_CODE, CPU_CODE))
    assert one.e2e_ms == 80.0 and one.instance_e2e_ms == [80.0]


def test_resident_tools_are_shared_across_instances() -> None:
    """A gpu_now tool of 600 MB under a 1,000 MB budget: two instances hold it once, not twice."""
    sc = make_scenario(make_workflow([("a", "t")]), [make_card("t", gpu_ms=10.0, vram_mb=600.0)],
                       vram_budget_mb=1000.0)
    out = simulate(sc.compiled, (NOW_CODE,), releases=(0.0, 100.0), record=True)
    assert out.instance_e2e_ms == [10.0, 10.0]
    assert max(mb for _, mb in out.vram) == 600.0


def test_the_queue_admits_across_instances_in_arrival_order() -> None:
    """Queued node of 600 MB (load 5, compute 10) under 1,000 MB: the second instance's node, released
    at 1 ms, waits until the first frees its memory at 15 ms, then loads and runs: ends at 30."""
    sc = make_scenario(make_workflow([("a", "t")]),
                       [make_card("t", gpu_ms=10.0, load_ms=5.0, vram_mb=600.0)],
                       mode=Mode.THREE_WAY, vram_budget_mb=1000.0)
    out = simulate(sc.compiled, (QUEUE_CODE,), releases=(0.0, 1.0), timings=True)
    assert out.admitted == [0.0, 15.0] and out.start == [5.0, 20.0] and out.end == [15.0, 30.0]
    assert out.instance_e2e_ms == [15.0, 29.0]


def test_noise_factors_cover_every_instance() -> None:
    sc = make_scenario(make_workflow([("a", "t")]), [make_card("t", cpu_ms=100.0)], cpu_cores=2)
    out = simulate(sc.compiled, (CPU_CODE,), releases=(0.0, 0.0), work_factor=[1.0, 2.0], load_factor=[1.0, 1.0])
    assert out.instance_e2e_ms == [100.0, 200.0]
    with pytest.raises(ValueError):
        simulate(sc.compiled, (CPU_CODE,), releases=(0.0, 0.0), work_factor=[1.0], load_factor=[1.0])


def test_tasks_ending_together_all_end_and_their_successor_starts_then() -> None:
    """Source a (10 ms) feeds b, c (30 ms) and d (60 ms) on one core, then e (10 ms) after all three:
    b, c, d share the core at 1/3 each, so b and c end together at 10 + 90 = 100; d, 30 ms left,
    ends alone at 130; e runs 130-140."""
    wf = make_workflow([("a", "s"), ("b", "m"), ("c", "m"), ("d", "l"), ("e", "s")],
                       [("a", "b"), ("a", "c"), ("a", "d"), ("b", "e"), ("c", "e"), ("d", "e")])
    cards = [make_card("s", cpu_ms=10.0), make_card("m", cpu_ms=30.0), make_card("l", cpu_ms=60.0)]
    sc = make_scenario(wf, cards, cpu_cores=1)
    out = simulate(sc.compiled, (CPU_CODE,) * 5, timings=True)
    assert out.end == [10.0, 100.0, 100.0, 130.0, 140.0]
    assert out.start[4] == 130.0 and out.e2e_ms == 140.0
    assert simulate_e2e(sc.compiled, (CPU_CODE,) * 5) == 140.0


@st.composite
def _scenarios(draw: st.DrawFn) -> tuple[object, tuple[int, ...], float]:
    """Small random DAGs (edges forward in node order) on a random machine, a random three-way
    mapping and interference."""
    n = draw(st.integers(1, 7))
    nodes = [(f"n{i}", f"t{draw(st.integers(0, 3))}") for i in range(n)]
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=12))
    edges = [(f"n{a}", f"n{b}", draw(st.sampled_from([0.0, 5.0]))) for a, b in sorted({p for p in pairs if p[0] < p[1]})]
    ms = st.sampled_from([10.0, 20.0, 35.0, 50.0])
    cards = [make_card(f"t{k}", cpu_ms=draw(ms), gpu_ms=draw(ms), load_ms=draw(st.sampled_from([0.0, 5.0, 20.0])),
                       vram_mb=draw(st.sampled_from([300.0, 600.0])), gpu_util=draw(st.sampled_from([0.5, 1.0])),
                       cpu_threads=draw(st.integers(1, 3))) for k in range(4)]
    sc = make_scenario(make_workflow(nodes, edges), cards, mode=Mode.THREE_WAY, cpu_cores=draw(st.integers(1, 4)),
                       vram_budget_mb=draw(st.sampled_from([700.0, 1300.0, 5000.0])),
                       load_sharing=draw(st.sampled_from(["none", "copy", "device"])))
    codes = tuple(draw(st.sampled_from(sc.compiled.allowed[i])) for i in range(n))
    return sc, codes, draw(st.sampled_from([0.0, 0.1, 0.5]))


@settings(max_examples=100, deadline=None)
@given(case=_scenarios())
def test_the_e2e_entry_is_the_full_simulation_e2e(case: tuple[object, tuple[int, ...], float]) -> None:
    """``simulate_e2e`` (the estimators' and searches' path, no Timings built) returns exactly the
    E2E the full simulation reports, per-node timings asked or not, deadlocks (inf) included; and
    every node ends no earlier than it starts, its inputs' ends no later than its start."""
    sc, codes, kappa = case
    c = sc.compiled  # type: ignore[attr-defined]
    if not c.static_ok(codes):
        return
    full = simulate(c, codes, kappa=kappa, timings=True)
    assert simulate_e2e(c, codes, kappa=kappa) == simulate(c, codes, kappa=kappa).e2e_ms == full.e2e_ms
    if full.deadlock:
        return
    for i in range(c.n):
        assert full.start[i] <= full.end[i]
        assert all(full.end[p] <= full.start[i] for p in c.preds[i])
    assert full.e2e_ms == max(full.end[s] for s in c.sinks)
