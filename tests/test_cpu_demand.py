"""Measured CPU demand (issue 20 item 1): the profiler measures how many cores a tool keeps busy,
the card carries it (``cpu_demand``), and the contention kernel shares the CPU by it: a tool that
waits (a timer, a socket) neither slows its CPU siblings nor is slowed while it waits. Cards
without the field keep the arithmetic of ``cpu_threads`` bit for bit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow
from tests.search_scenarios import FAMILIES, random_search_scenario
from tests.shapetools import Spinner, Waiter

from hetsched.model import Mapping, Mode, Placement, Scenario, ToolCard
from hetsched.model.contention import simulate
from hetsched.model.mapping import CPU_CODE
from hetsched.profiling import ProfileConfig, Profiler, profile_tools
from hetsched.search.bounds import BoundModel
from hetsched.sim import Simulator
from hetsched.tools import register_tool, unregister_tool

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def with_demands(sc: Scenario, demands: dict[str, float | None]) -> Scenario:
    cards = {t: c.model_copy(update={"cpu_demand": demands.get(t, c.cpu_demand)}) for t, c in sc.cards.items()}
    return sc.model_copy(update={"cards": cards})


def fan(specs: list[tuple[float, float | None]], cores: int) -> Scenario:
    """Independent CPU nodes n0, n1, ... (cpu_ms, cpu_demand) on ``cores`` cores."""
    cards = [make_card(f"t{i}", cpu_ms=ms, gpu_ms=None, cpu_demand=d) for i, (ms, d) in enumerate(specs)]
    return make_scenario(make_workflow([(f"n{i}", f"t{i}") for i in range(len(specs))]), cards, cpu_cores=cores)


def ends(sc: Scenario) -> list[float]:
    return simulate(sc.compiled, (CPU_CODE,) * len(sc.workflow.node_ids), timings=True).end


# ---------------------------------------------------------------------------- the card
def test_the_card_field_is_optional_and_checked() -> None:
    card = make_card("t")
    assert card.cpu_demand is None and card.cores_busy == 1.0
    assert make_card("t", cpu_threads=4).cores_busy == 4.0
    assert make_card("t", cpu_threads=4, cpu_demand=0.02).cores_busy == 0.02
    assert card.amplified(3).cpu_demand is None and make_card("t", cpu_demand=0.5).amplified(3).cpu_demand == 0.5
    for bad in (-0.1, math.inf, math.nan, 5000.0):
        with pytest.raises(ValueError, match="cpu_demand"):
            make_card("t", cpu_demand=bad)


# ---------------------------------------------------------------------------- the kernel, by hand
def test_a_waiting_tool_beside_a_busy_one_on_one_core() -> None:
    """One core; a 100 ms tool of one busy core and an 80 ms tool busy 5% of the time: 1.05 cores
    demanded, s = 1.05. The busy one slows by 1.05 (105 ms while both run: it ends at 80 * 1.05 /
    1.0025... computed below); the waiting one only on its busy part: 1 + 0.05 * 0.05 = 1.0025."""
    sc = fan([(100.0, 1.0), (80.0, 0.05)], cores=1)
    a, b = ends(sc)
    assert b == pytest.approx(80.0 * 1.0025)
    # a progressed b / 1.05 while both ran, then alone at full speed
    assert a == pytest.approx(b + (100.0 - b / 1.05))
    # with today's meaning (no measured demand: one thread each) both slow by 2
    assert ends(fan([(100.0, None), (80.0, None)], cores=1)) == [180.0, 160.0]


def test_two_busy_tools_and_a_half_waiting_one_by_hand() -> None:
    """One core; a, b: 100 ms, 1 core each; c: 80 ms, 0.5 core. D = 2.5: a and b slow by 2.5, c by
    1 + 0.5 * 1.5 = 1.75 and ends at 140; a and b have 100 - 140 / 2.5 = 44 ms left, at 2x: 228."""
    a, b, c = ends(fan([(100.0, 1.0), (100.0, 1.0), (80.0, 0.5)], cores=1))
    assert c == pytest.approx(140.0)
    assert a == pytest.approx(228.0) and b == pytest.approx(228.0)


def test_demands_within_the_cores_slow_nobody() -> None:
    assert ends(fan([(100.0, 1.3), (50.0, 0.6), (30.0, 0.0)], cores=2)) == [100.0, 50.0, 30.0]


def test_a_multithreaded_demand_is_charged_in_full() -> None:
    """A tool measured at 3 cores on 2: alone it slows by 1.5, as cpu_threads 3 does."""
    threads3 = make_scenario(make_workflow([("n", "t")]), [make_card("t", gpu_ms=None, cpu_threads=3)], cpu_cores=2)
    assert ends(threads3) == ends(fan([(100.0, 3.0)], cores=2)) == [150.0]


# ---------------------------------------------------------------------------- properties
scenarios = st.builds(random_search_scenario, st.integers(2, 7), st.integers(0, 10_000),
                      family=st.sampled_from(FAMILIES), mode=st.sampled_from(list(Mode)))
demand_values = st.one_of(st.none(), st.sampled_from([0.0, 0.02, 0.3, 0.9, 1.0, 1.7, 3.0, 16.0]),
                          st.floats(0.0, 8.0, allow_nan=False))


def some_mappings(sc: Scenario, k: int = 6) -> list[Mapping]:
    sim = Simulator(sc, noise=False)
    out = [m for m in itertools.islice(sc.all_mappings(), 200) if sim.infeasibility(m) is None]
    return out[:: max(1, len(out) // k)]


@SETTINGS
@given(scenarios)
def test_cards_that_state_their_threads_as_demand_change_nothing(sc: Scenario) -> None:
    """cpu_demand = cpu_threads is today's meaning: every timing is the same float, bit for bit."""
    same = with_demands(sc, {t: float(c.cpu_threads) for t, c in sc.cards.items()})
    assert not same.compiled.waits
    for m in some_mappings(sc):
        codes = sc.compiled.codes(m)
        a = simulate(sc.compiled, codes, timings=True)
        b = simulate(same.compiled, codes, timings=True)
        assert (a.e2e_ms, a.end, a.start) == (b.e2e_ms, b.end, b.start)


@SETTINGS
@given(st.lists(st.tuples(st.floats(1.0, 500.0), demand_values), min_size=1, max_size=6),
       st.lists(st.floats(1.0, 500.0), min_size=1, max_size=3), st.integers(1, 4))
def test_tools_of_zero_demand_never_slow_their_cpu_siblings(
        busy: list[tuple[float, float | None]], waiting_ms: list[float], cores: int) -> None:
    """Adding waiting tools (demand 0) beside any CPU tools leaves every other tool's end where it
    was, and each waiting tool takes exactly its isolated time."""
    alone = ends(fan(busy, cores))
    together = ends(fan(busy + [(ms, 0.0) for ms in waiting_ms], cores))
    assert together[:len(busy)] == pytest.approx(alone, rel=1e-9)
    assert together[len(busy):] == pytest.approx(waiting_ms, rel=1e-9)


@SETTINGS
@given(st.lists(st.tuples(st.floats(1.0, 500.0), demand_values), min_size=2, max_size=6), st.integers(1, 4))
def test_every_cpu_task_takes_at_least_its_isolated_time_and_less_demand_is_never_slower(
        specs: list[tuple[float, float | None]], cores: int) -> None:
    got = ends(fan(specs, cores))
    for (ms, d), end in zip(specs, got, strict=True):
        busy = 1.0 if d is None else d
        assert end >= ms * max(1.0, busy / cores) * (1 - 1e-9)
    # lowering one tool's demand to 0 never makes any tool of the fan end later
    lowered = ends(fan([(specs[0][0], 0.0), *specs[1:]], cores))
    assert all(x <= y * (1 + 1e-9) for x, y in zip(lowered, got, strict=True))


@SETTINGS
@given(scenarios, st.data())
def test_bounds_hold_with_measured_demands(sc: Scenario, data: st.DataObject) -> None:
    """The search bounds stay lower bounds of the simulated E2E of every mapping when cards carry
    measured demands (below one core included)."""
    sc = with_demands(sc, {t: data.draw(demand_values) for t in sc.cards})
    bm = BoundModel(sc)
    rows = np.array(list(itertools.product(*[[p.code for p in sc.allowed(v)] for v in sc.workflow.node_ids])),
                    dtype=np.int8)
    sim = Simulator(sc, noise=False)
    ids = sc.workflow.node_ids
    e2e = []
    for row in rows.tolist():
        e = sim.e2e(Mapping(zip(ids, (Placement.of_code(c) for c in row), strict=True)))
        e2e.append(math.inf if e is None else e)
    full = bm.bound_full(rows)
    for lb, e in zip(full.lb, e2e, strict=True):
        if math.isfinite(e):
            assert lb <= e + bm.slack(e)


# ---------------------------------------------------------------------------- the profiler
@pytest.fixture
def shapes() -> Iterator[None]:
    made = [Waiter("waits", wait_ms=30.0, has_gpu=False), Spinner("spins", ms=30.0, has_gpu=False)]
    for t in made:
        register_tool(t, replace=True)
    yield
    for t in made:
        unregister_tool(t.name)


def test_the_profiler_measures_a_waiting_tool_near_zero_and_a_spinning_one_near_one(shapes: None) -> None:
    """A waiting thread uses no CPU time whatever the machine's load, so the sleeper's demand is tiny
    (its Python overhead); the spinner's CPU time over its wall time less the time it waited for a
    core is about one core. Only bounds that hold on a loaded machine, no wall-clock ratios."""
    config = ProfileConfig(runs=6, warmup=1, loads=1, cpu_threads=1)
    with Profiler(config) as prof:
        cards: dict[str, ToolCard] = {r.card.name: r.card for r in profile_tools(["waits", "spins"], config,
                                                                                   profiler=prof)}
    waits, spins = cards["waits"], cards["spins"]
    assert waits.cpu_demand is not None and spins.cpu_demand is not None
    assert 0.0 <= waits.cpu_demand < 0.2
    assert 0.5 < spins.cpu_demand <= 1.0  # at most the pool's one thread
    assert waits.cpu_threads == spins.cpu_threads == 1  # cpu_threads keeps its meaning (at least 1)
    assert waits.cpu_ms >= 30.0 and spins.cpu_ms >= 30.0


def test_own_core_leaves_out_waits_for_a_core_but_not_waits_for_io(shapes: None) -> None:
    """With ``own_core`` each call is timed less what its thread waited for a core: a sleeping
    tool's time stays its sleep (a timer is not a core), whatever the machine's load."""
    config = ProfileConfig(runs=4, warmup=1, loads=1, cpu_threads=1, own_core=True)
    with Profiler(config) as prof:
        [waits] = [r.card for r in profile_tools(["waits"], config, profiler=prof)]
    assert waits.cpu_ms >= 30.0
    assert "own_core" in waits.provenance.source


def test_a_runs_wait_for_a_core_is_never_more_than_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # the wait is read around the whole call and the time inside it: on a loaded machine the call's wait exceeded
    # its run's time (a full-suite run beside a CPU burner); here every read finds 1 s more wait
    import hetsched.tools.runtime as runtime_mod
    from hetsched.tools.base import Device, DeviceKind
    from hetsched.tools.runtime import ToolRuntime

    reads = iter(range(1_000_000))
    monkeypatch.setattr(runtime_mod, "runqueue_wait_seconds", lambda: float(next(reads)))
    rt = ToolRuntime(Device(DeviceKind.CPU, 0, 1))
    rt.load("k", Spinner("spins", ms=2.0))
    b = rt.bench("k", [], warmup=0, runs=5)
    assert all(0.0 <= w <= t for w, t in zip(b.waits_ms, b.times_ms, strict=True))
    assert b.waits_ms == b.times_ms  # every run waited longer than it ran: its wait is its whole time


def test_bench_reports_each_runs_wait_for_a_core() -> None:
    from hetsched.tools.base import Device, DeviceKind
    from hetsched.tools.runtime import ToolRuntime

    rt = ToolRuntime(Device(DeviceKind.CPU, 0, 1))
    rt.load("k", Spinner("spins", ms=2.0))
    b = rt.bench("k", [], warmup=0, runs=5)
    assert len(b.waits_ms) == len(b.times_ms) == 5
    assert all(0.0 <= w <= t + 1e-6 for w, t in zip(b.waits_ms, b.times_ms, strict=True))
    assert sum(b.waits_ms) <= b.wait_s * 1000.0 + 1e-6
