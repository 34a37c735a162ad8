"""Workloads (``hetsched.model.workload``) and the simulator under load: arrival plans, the kernel's
closed loop, the window's trace and metrics, and the invariants that must hold whatever the load
(VRAM within budget, each request's precedence, FIFO admission across requests, one request =
today's run, determinism, Little's law)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tests.factories import canonical_scenario, make_card, make_scenario, make_workflow

import hetsched as hs
from hetsched.model import InfeasibleKind, InputError, Mode, Placement, Scenario
from hetsched.model.contention import EPS, simulate
from hetsched.model.files import load_scenario
from hetsched.model.mapping import CPU_CODE, NOW_CODE
from hetsched.model.workload import Arrivals, LoadMetrics, Workload, percentile
from hetsched.sim import Simulator

# ---------------------------------------------------------------------------- the contract


def test_closed_loop_plan_chains_each_client() -> None:
    plan = Workload.closed(3, requests=7, think_ms=5).plan()
    assert plan.follows == (-1, -1, -1, 0, 1, 2, 3)
    assert plan.releases_ms == (0.0, 0.0, 0.0, 5.0, 5.0, 5.0, 5.0)
    assert plan.clients == (0, 1, 2, 0, 1, 2, 0)


def test_open_loop_plan_is_poisson_from_the_seed() -> None:
    a = Workload.open(50, requests=2000, seed=4).plan()
    assert a == Workload.open(50, requests=2000, seed=4).plan()
    assert a != Workload.open(50, requests=2000, seed=5).plan()
    gaps = [y - x for x, y in itertools.pairwise(a.releases_ms)]
    assert a.releases_ms[0] == 0.0 and all(g >= 0 for g in gaps)
    assert sum(gaps) / len(gaps) == pytest.approx(20.0, rel=0.08)  # mean gap 1000/50 ms


def test_duration_bounds_the_sends() -> None:
    plan = Workload.open(100, duration_s=2, seed=1).plan()
    assert plan.releases_ms and max(plan.releases_ms) < 2000.0
    assert Workload.trace([30, 10, 2500], duration_s=2).plan().releases_ms == (10.0, 30.0)


@pytest.mark.parametrize(("kw", "fragments"), [
    ({"arrivals": "closed", "requests": 3}, ["closed arrivals need clients"]),
    ({"arrivals": "closed", "clients": 0, "requests": 3}, ["clients", "greater than or equal to 1"]),
    ({"arrivals": "open", "rate_per_s": 5}, ["requests", "duration_s"]),
    ({"arrivals": "open", "rate_per_s": -1, "requests": 3}, ["rate_per_s", "greater than 0"]),
    ({"arrivals": "open", "rate_per_s": 5, "requests": 3, "duration_s": 1}, ["not both"]),
    ({"arrivals": "open", "rate_per_s": 5, "clients": 2, "requests": 3}, ["clients", "do not apply to open"]),
    ({"arrivals": "trace"}, ["times_ms"]),
    ({"arrivals": "trace", "times_ms": (1.0, -2.0)}, ["times_ms[1]", "-2"]),
    ({"arrivals": "closed", "clients": 2, "requests": 3, "slo_ms": 0}, ["slo_ms", "greater than 0"]),
])
def test_bad_workloads_name_field_value_and_range(kw: dict[str, object], fragments: list[str]) -> None:
    with pytest.raises(ValidationError) as info:
        Workload(**kw)  # type: ignore[arg-type]
    for f in fragments:
        assert f in str(info.value), (f, str(info.value))


SCENARIO = """\
name: wl
machine: {{cpu_cores: 2, vram_budget_mb: 1000}}
cards:
  emb: {{cpu_ms: 100, gpu_ms: 10, vram_mb: 400}}
nodes: {{A: emb}}
workload: {workload}
"""


@pytest.mark.parametrize(("workload", "fragments"), [
    ("{arrivals: closd, clients: 2, requests: 3}", ["workload.arrivals = 'closd'", "closed, open, trace"]),
    ("{arrivals: closed, clients: 0, requests: 3}", ["workload.clients = 0", "greater than or equal to 1"]),
    ("{arrivals: closed, clients: '2', requests: 3}", ["workload.clients = '2'", "valid integer"]),
    ("{arrivals: closed, clients: 2, requests: 3, thinks_ms: 1}", ["workload.thinks_ms", "unknown key",
                                                                    "think_ms"]),
    ("{arrivals: open, rate_per_s: 5}", ["workload", "requests", "duration_s"]),
    ("{arrivals: trace, file: missing.txt}", ["missing.txt", "not found"]),
    ("{arrivals: trace, file: arr.txt}", ["arr.txt", "line 2", "'ten'", "not a number"]),
    ("[1, 2]", ["workload must be a mapping"]),
])
def test_bad_workload_sections_name_file_field_value(tmp_path: Path, workload: str, fragments: list[str]) -> None:
    (tmp_path / "arr.txt").write_text("0\nten\n")
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(workload=workload))
    with pytest.raises(InputError) as info:
        load_scenario(path)
    message = str(info.value)
    assert str(path) in message or "arr.txt" in message or "missing.txt" in message
    for f in fragments:
        assert f in message, (f, message)


def test_workload_section_and_arrival_file_are_read(tmp_path: Path) -> None:
    (tmp_path / "arr.txt").write_text("# ms\n30\n0\n12.5\n")
    (tmp_path / "arr.csv").write_text("user,time_ms\nann,30\nbob,0\ncid,12.5\n")  # the column its header names
    for name in ("arr.txt", "arr.csv"):
        path = tmp_path / "s.yaml"
        path.write_text(SCENARIO.format(workload=f"{{arrivals: trace, file: {name}, slo_ms: 150}}"))
        wl = load_scenario(path).workload
        assert wl is not None and wl.arrivals is Arrivals.TRACE
        assert wl.times_ms == (0.0, 12.5, 30.0) and wl.slo_ms == 150.0 and wl.file == name


def test_a_scenario_without_workload_serializes_as_before() -> None:
    sc = load_scenario("S13")
    assert "workload" not in sc.model_dump(mode="json")
    loaded = sc.with_workload(hs.Workload.closed(2, requests=4))
    back = Scenario.model_validate_json(loaded.model_dump_json())
    assert back.workload == loaded.workload


def test_percentile_is_nearest_rank() -> None:
    xs = [float(i) for i in range(1, 101)]
    assert (percentile(xs, 50), percentile(xs, 95), percentile(xs, 99)) == (50.0, 95.0, 99.0)
    assert percentile([7.0], 99) == 7.0 and math.isnan(percentile([], 50))


# ---------------------------------------------------------------------------- the kernel's closed loop


def test_closed_loop_releases_after_the_followed_request_returns() -> None:
    """One 100 ms CPU node; one client, three requests, think 20 ms: sent at 0, 120, 240."""
    sc = make_scenario(make_workflow([("a", "t")]), [make_card("t", cpu_ms=100.0)], cpu_cores=1)
    out = simulate(sc.compiled, (CPU_CODE,), releases=(0.0, 20.0, 20.0), follows=(-1, 0, 1), timings=True)
    assert out.released == [0.0, 120.0, 240.0]
    assert out.end == [100.0, 220.0, 340.0]
    assert out.instance_e2e_ms == [100.0, 100.0, 100.0]


def test_horizon_stops_sending_and_frees_resident_tools() -> None:
    """The third request would be sent at 200 >= horizon 150: not sent, and the gpu_now tool it would
    have used is freed when the second one ends."""
    sc = make_scenario(make_workflow([("a", "t")]), [make_card("t", gpu_ms=100.0, vram_mb=500.0)],
                       vram_budget_mb=1000.0)
    out = simulate(sc.compiled, (NOW_CODE,), releases=(0.0, 0.0, 0.0), follows=(-1, 0, 1), horizon_ms=150.0,
                   record=True)
    assert out.released[:2] == [0.0, 100.0] and math.isinf(out.released[2])
    assert math.isnan(out.instance_e2e_ms[2]) and out.e2e_ms == 100.0
    assert out.vram[-1] == (200.0, 0.0)


# ---------------------------------------------------------------------------- the simulator under load


def _scenarios(load_sharing: str = "none") -> list[Scenario]:
    return [canonical_scenario(kind, Mode.THREE_WAY, noise_cv=0.05, cpu_cores=2, load_sharing=load_sharing)
            for kind in ("chain", "fork", "diamond")]


def _mappings(sc: Scenario) -> list[hs.Mapping]:
    return [m for m in sc.all_mappings() if sc.infeasibility(m) is None]


WORKLOADS = [Workload.closed(3, requests=12, think_ms=15), Workload.open(20, requests=15, seed=2),
             Workload.trace([0, 0, 0, 5, 400]), Workload.closed(2, duration_s=1.5)]


def _check_invariants(sc: Scenario, trace: hs.Trace) -> None:
    budget = sc.machine.vram_budget_mb
    assert all(p.used_mb <= budget + 1e-6 for p in trace.vram_timeline)
    wf = sc.workflow
    for req in trace.requests:
        for node, nt in req.nodes.items():
            assert nt.ready_ms >= req.release_ms - EPS
            assert nt.ready_ms <= nt.admitted_ms + EPS <= nt.start_ms + 2 * EPS <= nt.end_ms + 3 * EPS
            for p in wf.preds(node):
                assert req.nodes[p].end_ms <= nt.ready_ms + EPS  # precedence within the request
    # FIFO across requests: queued nodes are admitted in the order they became ready
    queued = sorted((nt.ready_ms, nt.admitted_ms) for req in trace.requests for nt in req.nodes.values()
                    if nt.placement is Placement.GPU_QUEUE)
    admitted = [a for _, a in queued]
    assert all(b >= a - EPS for a, b in itertools.pairwise(admitted))
    m = trace.load
    assert m is not None and m.requests == len(trace.requests)
    assert m.p50_ms <= m.p95_ms <= m.p99_ms <= m.max_ms
    assert trace.e2e_ms == m.p95_ms == max(n.end_ms for n in trace.nodes.values())


@pytest.mark.parametrize("sharing", ["none", "copy", "device"])
@pytest.mark.parametrize("wl", WORKLOADS, ids=lambda w: w.describe())
def test_invariants_under_load_on_every_feasible_mapping(wl: Workload, sharing: str) -> None:
    for sc in _scenarios(sharing):
        sim = Simulator(sc)
        for m in _mappings(sc):
            trace = sim.run_workload(m, wl, seed=7)
            if not trace.feasible:
                assert trace.kind is not None
                continue
            _check_invariants(sc, trace)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(["chain", "fork", "diamond"]), clients=st.integers(1, 4), n=st.integers(1, 12),
       think=st.floats(0, 200), budget=st.sampled_from([900.0, 1500.0, 4000.0]), pick=st.integers(0, 10_000),
       seed=st.integers(0, 2**32))
def test_invariants_hold_for_any_closed_loop(kind: str, clients: int, n: int, think: float, budget: float,
                                             pick: int, seed: int) -> None:
    sc = canonical_scenario(kind, Mode.THREE_WAY, vram_budget_mb=budget, noise_cv=0.1)
    maps = _mappings(sc)
    if not maps:
        return
    trace = Simulator(sc).run_workload(maps[pick % len(maps)], Workload.closed(clients, requests=n, think_ms=think),
                                       seed=seed)
    if trace.feasible:
        _check_invariants(sc, trace)
        assert [r.release_ms for r in trace.requests] == sorted(r.release_ms for r in trace.requests)
        by_client: dict[int, list[float]] = {}
        for r in trace.requests:  # a client never has two requests in flight
            if by_client.get(r.client):
                assert r.release_ms >= by_client[r.client][-1] + think - 1e-6
            by_client.setdefault(r.client, []).append(r.end_ms)


@pytest.mark.parametrize("wl", [Workload.closed(1, requests=1), Workload.open(3, requests=1),
                                Workload.trace([0.0])], ids=["closed", "open", "trace"])
@pytest.mark.parametrize("sharing", ["none", "device"])
def test_one_request_is_todays_run(wl: Workload, sharing: str) -> None:
    for sc in _scenarios(sharing):
        sim = Simulator(sc)
        for m in _mappings(sc):
            one, window = sim.run(m, seed=11), sim.run_workload(m, wl, seed=11)
            assert window.feasible == one.feasible
            if one.feasible:
                assert window.e2e_ms == one.e2e_ms
                assert window.nodes == one.nodes
                assert window.vram_timeline == one.vram_timeline


def test_a_window_is_deterministic_for_its_seeds() -> None:
    sc = _scenarios()[1]
    sim, m = Simulator(sc), _mappings(sc)[-1]
    wl = Workload.open(30, requests=20, seed=3)
    a, b = sim.run_workload(m, wl, seed=5), sim.run_workload(m, wl, seed=5)
    assert a.load == b.load and a.requests == b.requests
    assert sim.run_workload(m, wl, seed=6).load != a.load


def test_open_loop_below_saturation_meets_littles_law() -> None:
    """One 50 ms CPU node on 8 cores, 10 requests/s: the system keeps up, so throughput is the
    arrival rate and the mean number in flight is throughput x mean latency (Little's law)."""
    sc = make_scenario(make_workflow([("a", "t")]), [make_card("t", cpu_ms=50.0)], cpu_cores=8)
    trace = Simulator(sc).run_workload(sc.uniform(Placement.CPU), Workload.open(10, requests=2000, seed=1), seed=0)
    m = trace.load
    assert m is not None
    assert m.throughput_per_s == pytest.approx(10.0, rel=0.05)
    assert m.in_flight_mean == pytest.approx(m.throughput_per_s * m.mean_ms / 1000.0, rel=1e-6)
    assert m.p50_ms == pytest.approx(50.0)  # 10/s x 50 ms = 0.5 in flight on 8 cores: no contention
    assert 0 < m.cpu_util_mean < 0.2 and m.gpu_util_mean == 0.0


def test_more_clients_raise_latency_and_the_slo_counts_it() -> None:
    sc = make_scenario(make_workflow([("a", "t")]), [make_card("t", cpu_ms=100.0, gpu_ms=20.0, vram_mb=100.0)],
                       cpu_cores=1)
    sim = Simulator(sc)
    m1 = sim.run_workload(sc.uniform(Placement.GPU_NOW), Workload.closed(1, requests=20, slo_ms=50), 0).load
    m4 = sim.run_workload(sc.uniform(Placement.GPU_NOW), Workload.closed(4, requests=20, slo_ms=50), 0).load
    assert m1 is not None and m4 is not None
    assert m1.p95_ms == pytest.approx(20.0) and m1.slo_attainment == 1.0
    assert m4.p95_ms == pytest.approx(80.0) and m4.slo_attainment == 0.0  # processor-shared: 4 x 20 ms
    assert m4.throughput_per_s == pytest.approx(m1.throughput_per_s)  # one GPU: the same work rate
    assert m4.in_flight_max == 4 and m1.in_flight_max == 1
    assert m4.peak_vram_mb == 100.0  # the resident model is loaded once for every request


def test_metrics_round_trip_through_the_trace_json() -> None:
    sc = _scenarios()[0]
    trace = Simulator(sc).run_workload(_mappings(sc)[0], Workload.closed(2, requests=6, slo_ms=500), seed=1)
    back = hs.Trace.from_dict(trace.to_dict())
    assert back.load == trace.load and isinstance(back.load, LoadMetrics)
    assert len(back.load.timeline) == 50


def test_api_run_with_a_workload_records_metrics_in_the_store(tmp_path: Path) -> None:
    from hetsched.store import RunStore

    store = tmp_path / "runs.sqlite"
    result = hs.run("S5", "all-gpu", rounds=2, store=store, reference="none",
                    workload=hs.Workload.closed(3, requests=9, slo_ms=2000))
    assert all(r.trace.load is not None and r.trace.load.requests == 9 for r in result.rounds)
    with RunStore(store) as st:
        rounds = st.rounds(str(result.run_id))
        assert st.scenario(str(result.run_id)).workload == hs.Workload.closed(3, requests=9, slo_ms=2000)
    assert [r.trace.load for r in rounds] == [r.trace.load for r in result.rounds]


def test_a_queued_node_must_fit_beside_the_resident_tools_under_load() -> None:
    """900 MB resident (gpu_now) + a 700 MB queued node under 1,500 MB: one request runs (the queued
    node waits for the resident tool to be freed), a window cannot (the tool serves every request)."""
    sc = make_scenario(make_workflow([("a", "big"), ("b", "q")], [("a", "b")]),
                       [make_card("big", gpu_ms=10.0, vram_mb=900.0), make_card("q", gpu_ms=10.0, vram_mb=700.0)],
                       mode=Mode.THREE_WAY, vram_budget_mb=1500.0)
    m = hs.Mapping({"a": Placement.GPU_NOW, "b": Placement.GPU_QUEUE})
    sim = Simulator(sc)
    assert sim.run_workload(m, Workload.closed(1, requests=1), seed=0).feasible
    refused = sim.run_workload(m, Workload.closed(2, requests=4), seed=0)
    assert not refused.feasible and refused.kind is InfeasibleKind.NEVER_ADMISSIBLE
    assert "under load" in refused.reason and "'b'" in refused.reason and "900 MB" in refused.reason


@pytest.mark.parametrize("placement", [Placement.CPU, Placement.GPU_NOW])
def test_learned_cards_de_contend_a_window_with_every_request(placement: Placement) -> None:
    """Noise-free windows of overlapping requests: the learned figures are the cards' own (the
    other requests' tasks are the contention, and they are in the window's trace)."""
    from hetsched.model.learned import learned_cards

    sc = canonical_scenario("fork", Mode.THREE_WAY, noise_cv=0.0, cpu_cores=2, vram_budget_mb=10_000.0)
    result = hs.run(sc, "all-cpu" if placement is Placement.CPU else "all-gpu", rounds=1, store=False,
                    reference="none", workload=Workload.closed(3, requests=6))
    figures = learned_cards(result.scenario, result.rounds).figures
    assert figures
    for f in figures:
        assert abs(f.drift) < 1e-6, f.describe()


def test_utilization_over_time_follows_the_requests() -> None:
    """One 100 ms CPU node (2 threads) on 4 cores; requests at 0 and 300 ms: busy 0-100 and 300-400,
    idle between. Window 400 ms: half the time one request in flight, half the cores busy then."""
    sc = make_scenario(make_workflow([("a", "t")]), [make_card("t", cpu_ms=100.0, cpu_threads=2)], cpu_cores=4)
    m = Simulator(sc).run_workload(sc.uniform(Placement.CPU), Workload.trace([0.0, 300.0]), seed=0).load
    assert m is not None
    assert m.window_ms == 400.0 and m.throughput_per_s == 5.0
    assert m.in_flight_mean == pytest.approx(0.5) and m.in_flight_max == 1
    assert m.cpu_util_mean == pytest.approx(0.25) and m.gpu_util_mean == 0.0
    assert len(m.timeline) == 50 and m.timeline[0].t_ms == 0.0 and m.timeline[-1].t_ms == pytest.approx(392.0)
    flight = [s.in_flight for s in m.timeline]
    assert flight[:12] == pytest.approx([1.0] * 12) and flight[13:37] == pytest.approx([0.0] * 24)
    assert flight[38:] == pytest.approx([1.0] * 12)
    assert [s.cpu_util for s in m.timeline[:12]] == pytest.approx([0.5] * 12)


def test_the_monitor_reports_each_mappings_windows() -> None:
    """An agentic run under load: the observations carry a load record per measured mapping (means of
    its windows) and the prompt text says that E2E is the window's p95."""
    from hetsched.loop import LoopConfig, run_rounds
    from hetsched.monitor import Monitor
    from hetsched.policies import make_policy

    sc = load_scenario("S5").with_workload(Workload.closed(3, requests=9, slo_ms=800))
    result = run_rounds(sc, make_policy("agentic", decider="rules"), LoopConfig(rounds=3, seed=1))
    obs = Monitor(sc).observe(result.rounds)
    windows = {r.code: r for r in obs.records if r.kind == "load"}
    execs = {r.code: r for r in obs.records if r.kind == "execution"}
    assert windows and set(windows) == set(execs)
    for code, w in windows.items():
        assert w.requests == 9 and w.runs == execs[code].runs
        assert w.p95_ms == pytest.approx(execs[code].mean_e2e_ms)  # a window's E2E is its p95
        assert w.p50_ms <= w.p95_ms <= w.p99_ms and w.slo_ms == 800 and w.slo_attainment is not None
    assert "each run is a window of 9 requests; E2E above = the window's p95 latency" in obs.text
    assert "within 800 ms" in obs.text
    one = Monitor(load_scenario("S5")).observe(run_rounds(load_scenario("S5"), make_policy("all-gpu"),
                                                          LoopConfig(rounds=1)).rounds)
    assert not [r for r in one.records if r.kind == "load"] and "Under load" not in one.text


def test_run_window_refuses_on_an_executor_of_single_requests() -> None:
    from hetsched.exec import WorkloadExecutor, run_window
    from hetsched.exec.base import ClosingExecutor

    class OneAtATime(ClosingExecutor):  # a unit-test double: the Executor contract without run_workload
        name = "one"

        def run(self, mapping: hs.Mapping, seed: int | None = 0) -> hs.Trace:
            raise AssertionError("a window must not run request by request")

    sc = _scenarios()[0]
    m = _mappings(sc)[0]
    refused = run_window(OneAtATime(), m, Workload.closed(2, requests=4), seed=3)
    assert not refused.feasible and refused.kind is InfeasibleKind.UNAVAILABLE and "'one'" in refused.reason
    assert isinstance(Simulator(sc), WorkloadExecutor) and not isinstance(OneAtATime(), WorkloadExecutor)
    assert run_window(Simulator(sc), m, Workload.closed(2, requests=4), seed=3).load is not None


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["chain", "fork", "diamond"]),
       times=st.lists(st.floats(0, 3000, allow_nan=False), min_size=1, max_size=10),
       budget=st.sampled_from([900.0, 1500.0, 4000.0]), pick=st.integers(0, 10_000), seed=st.integers(0, 2**32))
def test_invariants_hold_for_any_trace_of_arrivals(kind: str, times: list[float], budget: float, pick: int,
                                                   seed: int) -> None:
    sc = canonical_scenario(kind, Mode.THREE_WAY, vram_budget_mb=budget, noise_cv=0.1)
    maps = _mappings(sc)
    if not maps:
        return
    trace = Simulator(sc).run_workload(maps[pick % len(maps)], Workload.trace(times), seed=seed)
    if trace.feasible:
        _check_invariants(sc, trace)
        assert [r.release_ms for r in trace.requests] == sorted(times)  # sent exactly when they arrive


def test_a_scenario_with_a_workload_refuses_what_a_window_cannot_serve_statically() -> None:
    """Scenario.infeasibility and the compiled static check know the workload, so policies, deciders
    and the monitor never propose (and the loop never runs) a mapping its windows cannot serve."""
    from hetsched.monitor.static import StaticCheck

    sc = load_scenario("S13")
    single_opt = hs.Mapping({"A": "gpu_now", "B": "gpu_queue", "C": "gpu_now", "D": "cpu"})
    assert sc.infeasibility(single_opt) is None and sc.compiled.static_ok(sc.compiled.codes(single_opt))
    loaded = sc.with_workload(Workload.closed(4, requests=20))
    why = loaded.infeasibility(single_opt)
    assert why is not None and why.kind is InfeasibleKind.NEVER_ADMISSIBLE and "under load" in str(why)
    assert not loaded.compiled.static_ok(loaded.compiled.codes(single_opt))
    one = sc.with_workload(Workload.closed(1, requests=1))  # a window of one request keeps today's rule
    assert one.infeasibility(single_opt) is None and one.compiled.static_ok(one.compiled.codes(single_opt))
    check = StaticCheck(loaded)
    base = loaded.compiled.codes(loaded.uniform(Placement.CPU))
    around = check.around(base)
    for m in loaded.all_mappings():  # the compiled check, the monitor's and the scenario's agree on every mapping
        codes = loaded.compiled.codes(m)
        why = loaded.infeasibility(m)
        if why is None or why.kind is not InfeasibleKind.DEADLOCK:  # static_ok leaves deadlocks to simulate()
            assert loaded.compiled.static_ok(codes) == (why is None)
        changes = tuple((i, c) for i, c in enumerate(codes) if c != base[i])
        assert around.kind(changes) == (None if why is None else why.kind)
    result = hs.run(loaded, "agentic", rounds=6, store=False, reference="none")
    assert all(r.trace.feasible for r in result.rounds)  # nothing it cannot serve is proposed


@pytest.mark.parametrize("seed", range(6))
def test_a_closed_loop_keeps_every_client_busy_until_the_window_ends(seed: int) -> None:
    """Noisy requests can be faster than the isolated figures the plan sizes a duration with: the
    simulator plans more until no client would have sent another request before the end."""
    sc = make_scenario(make_workflow([("a", "t")]), [make_card("t", cpu_ms=100.0, gpu_ms=None)], cpu_cores=8,
                       noise_cv=1.0)
    trace = Simulator(sc).run_workload(sc.uniform(Placement.CPU), Workload.closed(2, duration_s=2, think_ms=5),
                                       seed=seed)
    last: dict[int, float] = {}
    for r in trace.requests:
        assert r.release_ms < 2000.0
        last[r.client] = max(last.get(r.client, 0.0), r.end_ms)
    assert sorted(last) == [0, 1] and all(end + 5.0 >= 2000.0 for end in last.values())
