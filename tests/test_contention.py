"""The contention kernel (``hetsched.model.contention``) against hand-computed timings, several
instances on one machine included (shared resident tools, one FIFO queue across instances)."""

from __future__ import annotations

import pytest
from tests.factories import make_card, make_scenario, make_workflow

from hetsched.model import Mode
from hetsched.model.contention import simulate
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
