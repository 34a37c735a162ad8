"""What a ``gpu_queue`` load contends with (issue 20 item 2): the machine's ``load_sharing``.

``none`` (the default) keeps every load a fixed ``load_ms``; ``copy`` makes concurrent loads share
one copy path; ``device`` makes a load a task of the device (the stand-in device's core fills the
memory), slowing and slowed by the device's compute. Hand-computed timings, the default's dump,
and the search bounds under every setting.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow
from tests.search_scenarios import FAMILIES, random_search_scenario

from hetsched.model import InputError, Machine, Mapping, Mode, Placement, Scenario
from hetsched.model.contention import simulate
from hetsched.model.files import load_scenario
from hetsched.model.mapping import NOW_CODE, QUEUE_CODE
from hetsched.search.bounds import BoundModel
from hetsched.sim import Simulator

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def sharing(sc: Scenario, how: str) -> Scenario:
    return sc.model_copy(update={"machine": sc.machine.model_copy(update={"load_sharing": how})})


def two_queued(how: str) -> list[float]:
    """Two independent queued nodes: load 100 ms, compute 10 ms, gpu_util 0.5 each, both fit."""
    sc = make_scenario(make_workflow([("a", "t"), ("b", "u")]),
                       [make_card("t", gpu_ms=10.0, load_ms=100.0, vram_mb=100.0, gpu_util=0.5),
                        make_card("u", gpu_ms=10.0, load_ms=100.0, vram_mb=100.0, gpu_util=0.5)],
                       mode=Mode.THREE_WAY, load_sharing=how)
    out = simulate(sc.compiled, (QUEUE_CODE, QUEUE_CODE), timings=True)
    assert out.load == [out.start[i] - out.admitted[i] for i in range(2)]
    return out.end


def test_loads_share_nothing_by_default_and_the_copy_path_when_asked() -> None:
    assert two_queued("none") == [110.0, 110.0]  # each load alone, then both compute (U = 1)
    assert two_queued("copy") == [210.0, 210.0]  # the two loads share the path: both loaded at 200
    # on the device, the two loads (util 1 each) share its compute: U = 2, loaded at 200 too
    assert two_queued("device") == [210.0, 210.0]


def test_a_load_on_the_device_slows_and_is_slowed_by_its_compute() -> None:
    """A resident node computing 100 ms (util 1) and a queued node loading 50 ms, then computing 10
    ms: U = 2 while both run. The load ends at 100 (the resident node is half done), the queued
    node computes 10 at half speed (ends 120), the resident node's last 40 run alone: 160."""
    sc = make_scenario(make_workflow([("r", "res"), ("q", "que")]),
                       [make_card("res", gpu_ms=100.0, load_ms=0.0, vram_mb=100.0),
                        make_card("que", gpu_ms=10.0, load_ms=50.0, vram_mb=100.0)],
                       mode=Mode.THREE_WAY, load_sharing="device")
    out = simulate(sc.compiled, (NOW_CODE, QUEUE_CODE), timings=True)
    assert out.start[1] == pytest.approx(100.0) and out.load[1] == pytest.approx(100.0)
    assert out.end[1] == pytest.approx(120.0) and out.end[0] == pytest.approx(160.0)
    # the copy path does not touch compute: load 50, then both compute (U = 2) from 50
    copy = simulate(sharing(sc, "copy").compiled, (NOW_CODE, QUEUE_CODE), timings=True)
    assert copy.start[1] == 50.0 and copy.end[1] == pytest.approx(70.0) and copy.end[0] == pytest.approx(110.0)


def test_the_setting_is_read_checked_and_dumped_only_when_set(tmp_path: Path) -> None:
    assert "load_sharing" not in Machine().model_dump()
    assert Machine(load_sharing="copy").model_dump(mode="json")["load_sharing"] == "copy"
    text = """
name: s
mode: three_way
machine: {cpu_cores: 1, vram_budget_mb: 1000, load_sharing: device}
cards: {t: {cpu_ms: 10, gpu_ms: 5, load_ms: 20, vram_mb: 10}}
nodes: [{id: a, tool: t}]
"""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert load_scenario(path).machine.load_sharing == "device"
    path.write_text(text.replace("load_sharing: device", "load_sharing: pcie"))
    with pytest.raises(InputError, match="load_sharing"):
        load_scenario(path)


scenarios = st.builds(random_search_scenario, st.integers(2, 6), st.integers(0, 10_000),
                      family=st.sampled_from(FAMILIES), mode=st.just(Mode.THREE_WAY))


@SETTINGS
@given(scenarios, st.sampled_from(["copy", "device"]))
def test_bounds_hold_and_loads_never_shrink_when_loads_share(sc: Scenario, how: str) -> None:
    sc = sharing(sc, how)
    bm = BoundModel(sc)
    rows = np.array(list(itertools.product(*[[p.code for p in sc.allowed(v)] for v in sc.workflow.node_ids])),
                    dtype=np.int8)
    sim = Simulator(sc, noise=False)
    ids = sc.workflow.node_ids
    full = bm.bound_full(rows)
    for row, lb in zip(rows.tolist(), full.lb, strict=True):
        m = Mapping(zip(ids, (Placement.of_code(c) for c in row), strict=True))
        trace = sim.run(m)
        if not trace.feasible or trace.e2e_ms is None:
            continue
        assert lb <= trace.e2e_ms + bm.slack(trace.e2e_ms)
        for n, nt in trace.nodes.items():
            if nt.placement is Placement.GPU_QUEUE:
                assert nt.load_ms >= sc.card_of(n).load_ms * (1 - 1e-9) - 1e-9
                assert math.isclose(nt.start_ms - nt.admitted_ms, nt.load_ms, abs_tol=1e-6)
