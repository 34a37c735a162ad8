"""Machine terms of the contention model (issue 20): cold-memory loads and cross-core interference.

- ``cold_load_share`` s with the cards' ``load_cold_ms``: every ``gpu_queue`` load is charged
  ``load_ms + s (load_cold_ms - load_ms)`` (never below ``load_ms``); with ``warm_reuse_ms`` W,
  the share of its memory freed on the device in the last W ms takes ``load_ms`` (reused warm);
- ``cross_core_slowdown`` x: while both sides run something, CPU tasks slow by
  1 + x min(1, device utilization), device tasks and loads by 1 + x min(1, cores busy / cores).

Both are 0 by default and then leave every number bit for bit as before (the field is not even
dumped); hand-computed timings; hypothesis properties: zero when off, monotone, never faster than
alone; the search bounds stay below the kernel.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow
from tests.search_scenarios import FAMILIES, random_search_scenario

from hetsched.model import Machine, Mode, Scenario, ToolCard
from hetsched.model.contention import simulate
from hetsched.model.mapping import CPU_CODE, NOW_CODE, QUEUE_CODE
from hetsched.search.bounds import BoundModel

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def machine(sc: Scenario, **fields: object) -> Scenario:
    return sc.model_copy(update={"machine": sc.machine.model_copy(update=fields)})


def with_cold_loads(sc: Scenario, factor: float) -> Scenario:
    """Every card's cold load at ``factor`` x its load_ms (what a 250 MB table measured: 4-9x)."""
    cards = {t: c.model_copy(update={"load_cold_ms": c.load_ms * factor}) for t, c in sc.cards.items()}
    return sc.model_copy(update={"cards": cards})


scenarios = st.builds(random_search_scenario, n=st.integers(1, 10), seed=st.integers(0, 10_000),
                      family=st.sampled_from(FAMILIES), mode=st.sampled_from([Mode.BINARY, Mode.THREE_WAY]))
sharings = st.sampled_from(["none", "copy", "device"])


def codes_of(sc: Scenario, seed: int) -> tuple[int, ...] | None:
    """A statically feasible placement of ``sc`` (seeded), or None."""
    c = sc.compiled
    for k in range(20):
        codes = tuple(c.allowed[i][(seed + k * (i + 1)) % len(c.allowed[i])] for i in range(c.n))
        if c.static_ok(codes):
            return codes
    return None


# ------------------------------------------------------------------ defaults: nothing changes
def test_defaults_are_off_and_dump_as_before() -> None:
    m = Machine()
    assert m.cold_load_share == 0.0 and m.cross_core_slowdown == 0.0 and m.warm_reuse_ms == 0.0
    dumped = m.model_dump(mode="json")
    assert not {"cold_load_share", "cross_core_slowdown", "warm_reuse_ms"} & set(dumped)
    assert "cross_core_slowdown" in Machine(cross_core_slowdown=0.2).model_dump(mode="json")
    card = make_card("t")
    assert card.load_cold_ms is None and "load_cold_ms" not in card.model_dump(mode="json")
    cold = make_card("t", load_cold_ms=120.0, spread={"load_cold_ms": {"p10": 100.0, "p90": 300.0}})
    assert ToolCard.model_validate(cold.model_dump(mode="json")) == cold


@pytest.mark.parametrize("field,bad", [("cold_load_share", 1.5), ("cold_load_share", -0.1),
                                       ("cross_core_slowdown", -0.01), ("cross_core_slowdown", math.inf)])
def test_out_of_range_machine_values_are_refused(field: str, bad: float) -> None:
    with pytest.raises(ValueError, match=field):
        Machine(**{field: bad})  # type: ignore[arg-type]


@SETTINGS
@given(scenarios, sharings, st.integers(0, 1000))
def test_zero_share_and_zero_interference_are_bit_for_bit_the_old_model(sc: Scenario, how: str, seed: int) -> None:
    base = machine(sc, load_sharing=how)
    codes = codes_of(base, seed)
    if codes is None:
        return
    off = machine(with_cold_loads(base, 5.0), cold_load_share=0.0, cross_core_slowdown=0.0, warm_reuse_ms=0.0)
    a = simulate(base.compiled, codes, timings=True)
    b = simulate(off.compiled, codes, timings=True)
    assert (a.e2e_ms, a.start, a.end, a.load) == (b.e2e_ms, b.start, b.end, b.load)


# ------------------------------------------------------------------ cold-memory loads
@given(st.floats(1.0, 5000.0), st.floats(0.0, 20_000.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_expected_load_is_monotone_in_the_share_and_never_below_the_warm_load(
        warm: float, cold: float, s1: float, s2: float) -> None:
    card = make_card("t", load_ms=warm, load_cold_ms=cold)
    lo, hi = sorted((s1, s2))
    assert warm <= card.expected_load_ms(lo) <= card.expected_load_ms(hi) <= max(warm, cold) + 1e-9
    assert card.expected_load_ms(0.0) == warm and make_card("u", load_ms=warm).expected_load_ms(hi) == warm
    if cold >= warm:
        assert card.expected_load_ms(1.0) == pytest.approx(cold)


def test_a_queued_load_takes_the_expected_time_of_warm_and_cold_loads() -> None:
    """load 100 ms warm, 500 ms cold, a quarter of the loads cold: 200 ms, then 10 ms of compute."""
    sc = make_scenario(make_workflow([("q", "t")]), [make_card("t", gpu_ms=10.0, load_ms=100.0, load_cold_ms=500.0)],
                       mode=Mode.THREE_WAY)
    assert simulate(sc.compiled, (QUEUE_CODE,)).e2e_ms == 110.0
    out = simulate(machine(sc, cold_load_share=0.25).compiled, (QUEUE_CODE,), timings=True)
    assert out.load == [200.0] and out.e2e_ms == 210.0
    # resident (gpu_now) tools load before the request: no load is charged, cold or warm
    assert simulate(machine(sc, cold_load_share=1.0).compiled, (NOW_CODE,)).e2e_ms == 10.0


@SETTINGS
@given(scenarios, sharings, st.integers(0, 1000), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_more_cold_loads_never_make_a_workflow_faster(sc: Scenario, how: str, seed: int, s1: float,
                                                      s2: float) -> None:
    sc = with_cold_loads(machine(sc, load_sharing=how), 4.0)
    codes = codes_of(sc, seed)
    if codes is None:
        return
    lo, hi = sorted((s1, s2))
    a = simulate(machine(sc, cold_load_share=lo).compiled, codes).e2e_ms
    b = simulate(machine(sc, cold_load_share=hi).compiled, codes).e2e_ms
    assert a <= b * (1 + 1e-9) or math.isinf(b)


def reuse_case(q_vram: float, warm_reuse_ms: float, cpu_between_ms: float | None = None) -> float:
    """A resident tool (200 MB) computes 50 ms; a queued node (load 100 ms warm, 500 ms cold, every
    load cold by default: share 1) waits for its memory (budget 300 MB) until the resident tool
    unloads at 50 ms; with ``cpu_between_ms``, a CPU node of that length sits between the two. The
    queued node's load time."""
    nodes = [("r", "res"), ("q", "que")] + ([("c", "mid")] if cpu_between_ms is not None else [])
    edges = [("r", "c"), ("c", "q")] if cpu_between_ms is not None else []
    cards = [make_card("res", gpu_ms=50.0, vram_mb=200.0),
             make_card("que", gpu_ms=10.0, load_ms=100.0, load_cold_ms=500.0, vram_mb=q_vram),
             make_card("mid", cpu_ms=cpu_between_ms or 1.0, gpu_ms=None)]
    sc = make_scenario(make_workflow(nodes, edges), cards, mode=Mode.THREE_WAY, vram_budget_mb=300.0,
                       cold_load_share=1.0, warm_reuse_ms=warm_reuse_ms)
    codes = (NOW_CODE, QUEUE_CODE) + ((CPU_CODE,) if cpu_between_ms is not None else ())
    return simulate(sc.compiled, codes, timings=True).load[1]


def test_a_load_reuses_memory_freed_just_before_it_warm() -> None:
    assert reuse_case(150.0, 0.0) == 500.0  # off: every load the expectation (here: cold)
    assert reuse_case(150.0, 2000.0) == 100.0  # the resident tool's 200 MB were freed at 50: warm
    # 300 MB needed, 200 MB freed just before: two thirds warm
    assert reuse_case(300.0, 2000.0) == pytest.approx(100.0 + 400.0 / 3)
    # freed 3000 ms before the load (a CPU node between): gone cold
    assert reuse_case(150.0, 2000.0, cpu_between_ms=3000.0) == 500.0
    assert reuse_case(150.0, 5000.0, cpu_between_ms=3000.0) == 100.0


@SETTINGS
@given(scenarios, st.integers(0, 1000), st.floats(0.0, 1.0), st.sampled_from([0.0, 50.0, 500.0, 1e5]))
def test_a_reused_load_lies_between_its_warm_and_its_cold_expectation(sc: Scenario, seed: int, share: float,
                                                                       warm_reuse_ms: float) -> None:
    sc = machine(with_cold_loads(sc, 4.0), load_sharing="none", cold_load_share=share, warm_reuse_ms=warm_reuse_ms)
    codes = codes_of(sc, seed)
    if codes is None:
        return
    out = simulate(sc.compiled, codes, timings=True)
    for i, p in enumerate(codes):
        if p == QUEUE_CODE:
            card = sc.card_of(sc.compiled.names[i])
            assert card.load_ms * (1 - 1e-9) <= out.load[i] <= card.expected_load_ms(share) * (1 + 1e-9)
    if warm_reuse_ms == 0.0:
        plain = machine(sc, warm_reuse_ms=0.0)
        assert simulate(plain.compiled, codes, timings=True).load == out.load


# ------------------------------------------------------------------ cross-core interference
def pair(x: float, util: float = 1.0, cores: int = 1, threads: int = 1) -> list[float]:
    """A CPU task and a device task, 100 ms each, started together."""
    sc = make_scenario(make_workflow([("c", "cpu_t"), ("g", "gpu_t")]),
                       [make_card("cpu_t", cpu_ms=100.0, gpu_ms=None, cpu_threads=threads),
                        make_card("gpu_t", cpu_ms=1000.0, gpu_ms=100.0, gpu_util=util)],
                       cpu_cores=cores, cross_core_slowdown=x)
    return simulate(sc.compiled, (CPU_CODE, NOW_CODE), timings=True).end


def test_each_side_slows_the_other_while_both_run() -> None:
    assert pair(0.0) == [100.0, 100.0]
    assert pair(0.2) == pytest.approx([120.0, 120.0])  # both sides fully busy: 1.2 each
    # the device half busy (util 0.5): the CPU task 1.1 (ends at 110), the device task 1.2 until
    # then (91.67 ms done), the rest alone: 118.33; the CPU task on one of 2 cores: the mirror image
    assert pair(0.2, util=0.5) == pytest.approx([110.0, 110.0 + 100.0 - 110.0 / 1.2])
    assert pair(0.2, cores=2) == pytest.approx([110.0 + 100.0 - 110.0 / 1.2, 110.0])
    # a task that waits on I/O (demand 0.01 of a core) slows the device by 0.2 x 0.01 and is slowed
    # only on its busy part
    sc = make_scenario(make_workflow([("c", "io"), ("g", "gpu_t")]),
                       [make_card("io", cpu_ms=100.0, gpu_ms=None, cpu_demand=0.01),
                        make_card("gpu_t", cpu_ms=1000.0, gpu_ms=100.0)], cpu_cores=1, cross_core_slowdown=0.2)
    io_end, dev_end = simulate(sc.compiled, (CPU_CODE, NOW_CODE), timings=True).end
    assert dev_end == pytest.approx(100.0 * 1.002) and io_end == pytest.approx(100.0 * (1 + 0.01 * 0.2))


def test_a_queued_load_is_slowed_by_a_busy_cpu_under_every_sharing() -> None:
    def run(how: str, x: float) -> float:
        sc = make_scenario(make_workflow([("c", "cpu_t"), ("q", "que")]),
                           [make_card("cpu_t", cpu_ms=1000.0, gpu_ms=None),
                            make_card("que", cpu_ms=1000.0, gpu_ms=10.0, load_ms=100.0, vram_mb=10.0)],
                           mode=Mode.THREE_WAY, cpu_cores=1, load_sharing=how, cross_core_slowdown=x)
        return simulate(sc.compiled, (CPU_CODE, QUEUE_CODE), timings=True).load[1]

    assert run("none", 0.5) == 100.0  # a timed event: 'none' means a load contends with nothing
    assert run("copy", 0.5) == pytest.approx(150.0) and run("device", 0.5) == pytest.approx(150.0)
    assert run("copy", 0.0) == run("device", 0.0) == 100.0


@SETTINGS
@given(scenarios, sharings, st.integers(0, 1000), st.floats(0.0, 2.0))
def test_no_node_runs_faster_than_alone_under_interference(sc: Scenario, how: str, seed: int, x: float) -> None:
    sc = machine(sc, load_sharing=how, cross_core_slowdown=x, gpu_kappa=0.0)
    codes = codes_of(sc, seed)
    if codes is None:
        return
    c = sc.compiled
    out = simulate(c, codes, timings=True)
    if out.deadlock:
        return
    for i, p in enumerate(codes):
        alone = c.cpu_ms[i] if p == CPU_CODE else c.gpu_ms[i]
        assert out.end[i] - out.start[i] >= alone * (1 - 1e-9)
        if p == QUEUE_CODE and how != "none":
            assert out.load[i] >= c.load_ms[i] * (1 - 1e-9)


@SETTINGS
@given(scenarios, st.integers(0, 1000), st.floats(0.0, 2.0), st.floats(0.0, 2.0))
def test_more_interference_never_makes_a_binary_workflow_faster(sc: Scenario, seed: int, x1: float,
                                                                 x2: float) -> None:
    """Without the FIFO queue (binary: cpu / gpu_now) every task starts when its inputs are ready
    and only the rates change: a larger x can only delay every event."""
    sc = sc.model_copy(update={"mode": Mode.BINARY})
    codes = codes_of(sc, seed)
    if codes is None:
        return
    lo, hi = sorted((x1, x2))
    a = simulate(machine(sc, cross_core_slowdown=lo).compiled, codes).e2e_ms
    b = simulate(machine(sc, cross_core_slowdown=hi).compiled, codes).e2e_ms
    assert a <= b * (1 + 1e-9)


@SETTINGS
@given(scenarios, sharings, st.integers(0, 1000), st.floats(0.0, 2.0), st.floats(0.0, 1.0))
def test_the_search_bounds_stay_below_the_kernel(sc: Scenario, how: str, seed: int, x: float, share: float) -> None:
    sc = machine(with_cold_loads(sc, 4.0), load_sharing=how, cross_core_slowdown=x, cold_load_share=share,
                 warm_reuse_ms=2000.0 if seed % 2 else 0.0)
    codes = codes_of(sc, seed)
    if codes is None:
        return
    e2e = simulate(sc.compiled, codes).e2e_ms
    if math.isinf(e2e):
        return
    bm = BoundModel(sc)
    assert bm.bound_full(np.array([codes], dtype=np.int8)).lb[0] <= e2e + bm.slack(e2e)
