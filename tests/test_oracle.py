"""The oracle equals naive enumeration, its pruning loses nothing, and its ranking is complete."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from tests.factories import canonical_scenario
from tests.test_sim import instances

from hetsched.model import Mapping, Mode, Placement, Scenario
from hetsched.model.files import load_scenario
from hetsched.sim import Simulator
from hetsched.sim.oracle import solve

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def naive(sc: Scenario) -> dict[Mapping, float]:
    """Every well-formed mapping's noise-free E2E (feasible ones only)."""
    sim = Simulator(sc, noise=False)
    out = {}
    for m in sc.all_mappings():
        e = sim.e2e(m)
        if e is not None:
            out[m] = e
    return out


@SETTINGS
@given(instances())
def test_oracle_equals_naive_enumeration(inst: tuple[Scenario, Mapping, int]) -> None:
    sc = inst[0]
    truth = naive(sc)
    full = solve(sc, ranking=True)
    best = min(truth.values())
    assert full.e2e_ms == pytest.approx(best, rel=1e-12)
    # ties within the documented tolerance may be broken in favour of less VRAM
    assert full.best in truth and best <= truth[full.best] <= best * (1 + 1e-9)
    assert {r.mapping for r in full.ranking} == set(truth)
    assert full.feasible == len(truth) and full.space == sc.mapping_space_size()
    assert [r.e2e_ms for r in full.ranking] == sorted(r.e2e_ms for r in full.ranking)
    assert set(full.optimal) == {m for m, e in truth.items() if e <= best * (1 + 1e-9)}


@SETTINGS
@given(instances())
def test_bounded_search_finds_the_same_optimum(inst: tuple[Scenario, Mapping, int]) -> None:
    sc = inst[0]
    full, bounded = solve(sc, ranking=True), solve(sc.model_copy(update={"name": sc.name + "-b"}), ranking=False)
    assert bounded.e2e_ms == pytest.approx(full.e2e_ms, rel=1e-12)
    assert bounded.best in full.optimal
    assert bounded.simulated <= full.simulated


@pytest.mark.parametrize("kind", ["chain", "fork", "diamond"])
@pytest.mark.parametrize("mode", [Mode.BINARY, Mode.THREE_WAY])
def test_oracle_on_canonical_dags(kind: str, mode: Mode) -> None:
    sc = canonical_scenario(kind, mode=mode)
    res = solve(sc)
    assert res.space == (3 if mode is Mode.THREE_WAY else 2) ** len(sc.workflow.nodes)
    assert not sc.infeasibility(res.best)
    # no feasible mapping is better than the optimum, and all-cpu is always among the feasible
    assert all(r.e2e_ms >= res.e2e_ms for r in res.ranking)
    assert sc.uniform(Placement.CPU) in {r.mapping for r in res.ranking}


def test_bundled_examples_show_their_story() -> None:
    fan = load_scenario("fanout")
    res = solve(fan)
    all_gpu = Simulator(fan, noise=False).e2e(fan.uniform(Placement.GPU_NOW))
    assert all_gpu is not None and res.e2e_ms < all_gpu
    moved = [n for n, p in res.best.items() if p is Placement.CPU and fan.card_of(n).has_gpu]
    assert moved, "the fan-out oracle puts a GPU-capable tool on the CPU"

    three = load_scenario("vram_3way")
    assert str(three.infeasibility(three.uniform(Placement.GPU_NOW))).startswith("OOM")
    assert not three.infeasibility(solve(three).best) and math.isfinite(solve(three).e2e_ms)


def test_fanout_light_sharing_beats_offloading() -> None:
    sc = load_scenario("fanout_light")
    res = solve(sc)
    assert res.best == sc.uniform(Placement.GPU_NOW) and len(res.optimal) == 1
    sim = Simulator(sc, noise=False)
    for node in sc.workflow.node_ids:  # every single move to the CPU is clearly worse
        moved = sim.e2e(res.best.moved(node, Placement.CPU))
        assert moved is not None and moved >= 1.1 * res.e2e_ms
    # ...although an exclusive-GPU model would offload B: its CPU time beats the summed GPU times
    b = sc.card_of("B")
    assert b.cpu_ms < sum(sc.card_of(n).gpu_ms or 0 for n in sc.workflow.node_ids)


def test_oversized_space_is_a_clear_input_error() -> None:
    from tests.factories import make_card, make_scenario, make_workflow

    from hetsched.model import InputError, Mode
    from hetsched.sim.oracle import MAX_MAPPINGS

    n = 13  # 3^13 > MAX_MAPPINGS
    wf = make_workflow([(f"N{i}", "t") for i in range(n)])
    sc = make_scenario(wf, [make_card("t")], mode=Mode.THREE_WAY)
    assert sc.mapping_space_size() > MAX_MAPPINGS
    with pytest.raises(InputError, match=r"would cover 1,594,323 mappings \(13 nodes, three_way\); the limit is"):
        solve(sc)
