"""The searches under load (hetsched.search.load) and HEFT-load, checked against independent paths:
the single-request oracle (branch-and-bound), the window simulator executor, brute force."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.search_scenarios import FAMILIES, random_search_scenario

from hetsched.model import InputError, Mode
from hetsched.model.workload import Workload, load_infeasibility
from hetsched.policies.heft import heft_cf_schedule
from hetsched.policies.heft_load import copies_in_flight, heft_load_gpu_order
from hetsched.search import load as load_mod
from hetsched.search.load import (
    LoadObjective,
    WindowEvaluator,
    load_optimum,
    max_rate_per_s,
    parse_objective,
    predict_window,
)
from hetsched.search.oracle import solve
from hetsched.sim import Simulator

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
shapes = st.tuples(st.integers(3, 6), st.integers(0, 10_000), st.sampled_from(FAMILIES), st.sampled_from(list(Mode)))


@SETTINGS
@given(shapes)
def test_one_request_window_optimum_is_the_single_request_oracle(shape: tuple[int, int, str, Mode]) -> None:
    n, seed, family, mode = shape
    sc = random_search_scenario(n, seed, family=family, mode=mode)
    one = Workload.closed(1, requests=1)
    got = load_optimum(sc, one)
    exact = solve(sc, max_seconds=None)
    assert got is not None and got.exact
    assert got.value == pytest.approx(exact.e2e_ms, rel=1e-9)


@SETTINGS
@given(shapes, st.integers(2, 5))
def test_loaded_optimum_beats_every_mapping_and_matches_the_simulator(shape: tuple[int, int, str, Mode],
                                                                       clients: int) -> None:
    n, seed, family, mode = shape
    sc = random_search_scenario(n, seed, family=family, mode=mode)
    wl = Workload.closed(clients, requests=3 * clients)
    best = load_optimum(sc, wl)
    ev = WindowEvaluator(sc, wl)
    from hetsched.search.load import _all_codes  # the enumeration it claims to have done

    feasible = [p for p in map(ev, _all_codes(sc)) if p.feasible]
    if best is None:
        assert not feasible
        return
    assert best.value == min(p.p95_ms for p in feasible)
    assert load_infeasibility(sc, best.mapping, wl) is None
    # the executor path (noise-free window trace) agrees with the search's own reading of the kernel
    trace = Simulator(sc, noise=False).run_workload(best.mapping, wl)
    assert trace.feasible and trace.load is not None
    assert trace.load.p95_ms == pytest.approx(best.value, rel=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_local_search_under_load_is_feasible_and_never_better_than_exact(seed: int,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    sc = random_search_scenario(6, seed, family=FAMILIES[seed % len(FAMILIES)], mode=Mode.THREE_WAY)
    wl = Workload.closed(3, requests=9)
    exact = load_optimum(sc, wl)
    monkeypatch.setattr(load_mod, "EXHAUSTIVE_MAX", 0)
    local = load_optimum(sc, wl, max_evals=200)
    assert exact is not None and local is not None and not local.exact
    assert local.value >= exact.value
    assert local.prediction.feasible and local.evaluations <= 200 + 3 * len(sc.workflow.node_ids)


@pytest.mark.parametrize("seed", [3, 4])
def test_max_rate_meets_its_target_and_the_throughput_objective_ranks_by_it(seed: int) -> None:
    sc = random_search_scenario(4, seed, family="fanout", mode=Mode.BINARY)
    lone = load_optimum(sc, Workload.closed(1, requests=1))
    assert lone is not None
    target = 3.0 * lone.value
    wl = Workload.open(1.0, requests=30, slo_ms=target)
    best = load_optimum(sc, wl, LoadObjective.THROUGHPUT)
    assert best is not None
    rate = best.value
    assert rate > 0
    at = predict_window(sc, best.mapping, Workload.open(rate, requests=load_mod.RATE_REQUESTS, seed=wl.seed))
    assert at.p95_ms <= target
    # no other mapping sustains a higher rate under the same target
    ev = WindowEvaluator(sc, wl)
    from hetsched.search.load import _all_codes

    for codes in _all_codes(sc):
        p = ev(codes)
        if p.feasible:
            assert max_rate_per_s(sc, p.mapping, target, seed=wl.seed) <= rate


def test_objective_names_and_the_throughput_target_are_checked() -> None:
    assert parse_objective(" P95 ") is LoadObjective.P95
    with pytest.raises(InputError, match="accepted: p95, throughput"):
        parse_objective("latency")
    sc = random_search_scenario(3, 0, family="chain", mode=Mode.BINARY)
    with pytest.raises(InputError, match="p95 target"):
        load_optimum(sc, Workload.open(2.0, requests=5), LoadObjective.THROUGHPUT)


@SETTINGS
@given(shapes)
def test_heft_load_is_heft_cf_for_one_copy(shape: tuple[int, int, str, Mode]) -> None:
    n, seed, family, mode = shape
    sc = random_search_scenario(n, seed, family=family, mode=mode)
    from hetsched.policies.heft import GPU_PROC

    assert heft_load_gpu_order(sc, 1) == [s.task for s in heft_cf_schedule(sc).on(GPU_PROC)]


@SETTINGS
@given(shapes, st.integers(2, 6))
def test_heft_load_proposes_a_mapping_the_window_can_serve(shape: tuple[int, int, str, Mode], clients: int) -> None:
    import hetsched as hs

    n, seed, family, mode = shape
    sc = random_search_scenario(n, seed, family=family, mode=mode)
    wl = Workload.closed(clients, requests=2 * clients)
    res = hs.run(sc, "heft-load", rounds=1, store=False, workload=wl)
    mapping = res.rounds[0].proposal.mapping
    assert load_infeasibility(sc, mapping, wl) is None
    assert sc.infeasibility(mapping) is None
    assert res.rounds[0].proposal.info["heft_load"]["copies"] == clients


def test_copies_in_flight_follow_the_arrival_process() -> None:
    sc = random_search_scenario(4, 1, family="chain", mode=Mode.BINARY)
    cp = sc.isolated_critical_path_ms()
    assert copies_in_flight(sc, None) == 1
    assert copies_in_flight(sc, Workload.closed(7, requests=7)) == 7
    assert copies_in_flight(sc, Workload.closed(99, requests=99)) == 16
    rate = 3000.0 / cp  # 3 requests per critical path
    assert copies_in_flight(sc, Workload.open(rate, requests=5)) == 3
    assert copies_in_flight(sc, Workload.trace([0.0, cp / 2, cp])) == math.ceil(2 / cp * cp)


def test_a_run_under_load_is_compared_with_the_loaded_optimum() -> None:
    import hetsched as hs

    sc = random_search_scenario(4, 7, family="fanout", mode=Mode.THREE_WAY)
    wl = Workload.closed(4, requests=12)
    res = hs.run(sc, "all-cpu", rounds=1, store=False, workload=wl, reference="auto")
    best = load_optimum(sc, wl)
    assert best is not None and res.reference is not None
    assert res.reference.exact and res.reference.e2e_ms == best.value
    assert res.reference.mapping == best.mapping
    # every round's E2E (a window's p95, noise included) is compared with a window's p95, never with one request's
    lone = solve(sc, max_seconds=None).e2e_ms
    assert res.reference.e2e_ms >= lone
    local = hs.run(sc.with_workload(wl), "all-cpu", rounds=1, store=False, reference="best-known")
    assert local.reference is not None and not local.reference.exact


@SETTINGS
@given(shapes, st.integers(2, 5))
def test_the_rules_estimator_under_load_reads_a_windows_p95(shape: tuple[int, int, str, Mode], clients: int) -> None:
    from hetsched.deciders.estimate import ESTIMATE_WINDOW_REQUESTS, Estimator

    n, seed, family, mode = shape
    sc = random_search_scenario(n, seed, family=family, mode=mode)
    wl = Workload.closed(clients, requests=ESTIMATE_WINDOW_REQUESTS)
    est = Estimator(sc.with_workload(wl), interference=sc.machine.gpu_kappa)
    one = Estimator(sc, interference=sc.machine.gpu_kappa)
    ev = WindowEvaluator(sc, wl)
    from hetsched.search.load import _all_codes

    for codes in list(_all_codes(sc))[:20]:
        p = ev(codes)
        got = est.e2e(codes)
        if p.feasible:  # noise-free, cards as given: the estimate is the window's p95 the search sees
            assert got == pytest.approx(p.p95_ms, rel=1e-9)
            assert got >= one.e2e(codes) * (1 - 1e-9)
        else:
            assert math.isinf(got) or not p.feasible
