"""The exact search equals plain enumeration (optimum, ties, top-k ranking), whatever the number of
processes, and says clearly when a search would not fit its time budget."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import canonical_scenario, make_card, make_scenario, make_workflow
from tests.search_scenarios import FAMILIES, random_search_scenario
from tests.test_sim import instances

from hetsched.cli.app import error_text
from hetsched.model import InputError, Mapping, Mode, Placement, Scenario
from hetsched.model.files import load_scenario
from hetsched.search import oracle as oracle_mod
from hetsched.search.oracle import SearchTooLong, estimate_seconds, solve
from hetsched.sim import Simulator

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def naive(sc: Scenario) -> dict[Mapping, float]:
    """Every well-formed mapping's noise-free E2E (feasible ones only)."""
    sim = Simulator(sc, noise=False)
    out = {}
    for m in sc.all_mappings():
        e = sim.e2e(m)
        if e is not None:
            out[m] = e
    return out


def codes(sc: Scenario, m: Mapping) -> tuple[int, ...]:
    return tuple(m[n].code for n in sc.workflow.node_ids)


def tie_break(sc: Scenario, tied: list[Mapping]) -> Mapping:
    """The documented rule, written independently: least VRAM held, fewest GPU nodes, enumeration order."""
    ids = sc.workflow.node_ids

    def key(m: Mapping) -> tuple[float, int, tuple[int, ...]]:
        held = sc.gpu_now_vram_mb(m) + sum(sc.card_of(n).vram_mb for n in ids if m[n] is Placement.GPU_QUEUE)
        return (held, sum(1 for n in ids if m[n].on_gpu), codes(sc, m))

    return min(tied, key=key)


def fresh(sc: Scenario, tag: str) -> Scenario:
    """The same scenario under another name, so the memo does not answer."""
    return sc.model_copy(update={"name": f"{sc.name}-{tag}"})


def check_against(sc: Scenario, truth: dict[Mapping, float], top: int, workers: int = 1) -> None:
    best = min(truth.values())
    tied = [m for m, e in truth.items() if e <= best * (1 + 1e-9)]
    res = solve(fresh(sc, f"t{top}w{workers}"), top=top, workers=workers)
    assert res.e2e_ms == best
    assert set(res.optimal) == set(tied)
    assert res.best == tie_break(sc, tied)
    expected = sorted((e, codes(sc, m)) for m, e in truth.items())[:top]
    assert [(r.e2e_ms, codes(sc, r.mapping)) for r in res.ranking] == expected
    assert not res.full and res.space == sc.mapping_space_size()


@SETTINGS
@given(instances(), st.sampled_from([1, 3]))
def test_bounded_search_equals_plain_enumeration(inst: tuple[Scenario, Mapping, int], top: int) -> None:
    sc = inst[0]
    check_against(sc, naive(sc), top)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(4, 7), st.integers(0, 10_000), st.sampled_from(FAMILIES), st.sampled_from(list(Mode)))
def test_bounded_search_on_random_workflows(n: int, seed: int, family: str, mode: Mode) -> None:
    sc = random_search_scenario(n, seed, family=family, mode=mode)
    check_against(sc, naive(sc), top=4)


@SETTINGS
@given(instances())
def test_full_ranking_is_every_feasible_mapping(inst: tuple[Scenario, Mapping, int]) -> None:
    sc = inst[0]
    truth = naive(sc)
    full = solve(fresh(sc, "full"), ranking=True)
    assert full.full and full.feasible == len(truth)
    assert {r.mapping: r.e2e_ms for r in full.ranking} == truth
    assert [r.e2e_ms for r in full.ranking] == sorted(truth.values())
    assert full.best == tie_break(sc, [m for m, e in truth.items() if e <= full.e2e_ms * (1 + 1e-9)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bounded_equals_full_ranking_at_nine_nodes(seed: int) -> None:
    """Larger than plain enumeration in a property test allows: the full ranking is the reference."""
    sc = random_search_scenario(9, seed, family=FAMILIES[seed % len(FAMILIES)])
    full = solve(fresh(sc, "full9"), ranking=True, max_seconds=None)
    res = solve(fresh(sc, "b9"), top=10)
    assert [(r.e2e_ms, r.mapping) for r in res.ranking] == [(r.e2e_ms, r.mapping) for r in full.ranking[:10]]
    assert res.best == full.best and set(res.optimal) == set(full.optimal)
    assert res.simulated < full.simulated


@pytest.mark.parametrize("seed", [3, 4])
def test_result_does_not_depend_on_the_number_of_processes(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oracle_mod, "WARMUP_S", 0.0)  # hand every subtree to the workers
    sc = random_search_scenario(10, seed, family="fanout")
    one = solve(fresh(sc, "w1"), top=5, workers=1)
    two = solve(fresh(sc, "w2"), top=5, workers=2)
    assert two.workers == 2 and one.workers == 1
    assert (two.best, two.e2e_ms, two.optimal, two.ranking) == (one.best, one.e2e_ms, one.optimal, one.ranking)


@pytest.mark.parametrize("kind", ["chain", "fork", "diamond"])
@pytest.mark.parametrize("mode", [Mode.BINARY, Mode.THREE_WAY])
def test_oracle_on_canonical_dags(kind: str, mode: Mode) -> None:
    sc = canonical_scenario(kind, mode=mode)
    res = solve(sc, ranking=True)
    assert res.space == (3 if mode is Mode.THREE_WAY else 2) ** len(sc.workflow.nodes)
    assert not sc.infeasibility(res.best)
    # no feasible mapping is better than the optimum, and all-cpu is always among the feasible
    assert all(r.e2e_ms >= res.e2e_ms for r in res.ranking)
    assert sc.uniform(Placement.CPU) in {r.mapping for r in res.ranking}
    assert solve(sc).best == res.best


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


def big_fanout(n: int = 40) -> Scenario:
    """A fan-out of identical light tools, heavy contention: large and hard to bound."""
    nodes = [("S", "src")] + [(f"N{i}", f"t{i % 7}") for i in range(n - 2)] + [("T", "sink")]
    edges = [("S", f"N{i}") for i in range(n - 2)] + [(f"N{i}", "T") for i in range(n - 2)]
    cards = [make_card("src", cpu_ms=5, gpu_ms=4), make_card("sink", cpu_ms=5, gpu_ms=4)]
    cards += [make_card(f"t{k}", cpu_ms=100 + 7 * k, gpu_ms=30 + 3 * k, vram_mb=400, gpu_util=0.5) for k in range(7)]
    return make_scenario(make_workflow(nodes, edges), cards, mode=Mode.THREE_WAY, name=f"bigfan{n}",
                         vram_budget_mb=1500, gpu_kappa=0.1)


def test_a_search_too_long_for_its_budget_says_so_with_an_estimate() -> None:
    sc = big_fanout()
    with pytest.raises(SearchTooLong) as err:
        solve(sc, max_seconds=0.5)
    text = str(err.value)
    assert "scenario 'bigfan40' (40 nodes, three_way:" in text and "(`max_seconds`)" in text
    assert "(--max-seconds)" in error_text(err.value)  # the CLI names the flag
    assert "best-known" in text and err.value.estimate_s > 0.5
    assert isinstance(err.value, InputError)  # the CLI turns it into exit 2 without a traceback
    assert err.value.best is not None
    e2e, mapping = err.value.best
    assert Simulator(sc, noise=False).e2e(mapping) == pytest.approx(e2e)


def test_full_ranking_refuses_a_space_it_cannot_simulate_in_time() -> None:
    sc = big_fanout(16)
    with pytest.raises(SearchTooLong, match=r"the full ranking simulates every mapping.*Without `ranking` the "
                                            r"bounded search ranks the best mappings; or raise `max_seconds`") as err:
        solve(sc, ranking=True, max_seconds=1.0)
    assert "Without --all the bounded search" in error_text(err.value)  # the CLI's words


def test_estimate_is_cheap_and_positive_and_top_must_be_positive() -> None:
    sc = random_search_scenario(12, 5, family="layered")
    est = estimate_seconds(sc, workers=1)
    assert est.seconds >= 0 and est.space == sc.mapping_space_size() and est.simulations >= 0
    with pytest.raises(InputError, match="top must be >= 1"):
        solve(load_scenario("chain"), top=0)


def test_only_cpu_tools_have_one_mapping() -> None:
    wf = make_workflow([("a", "c"), ("b", "c")], [("a", "b")])
    sc = make_scenario(wf, [make_card("c", gpu_ms=None)], mode=Mode.THREE_WAY)
    res = solve(sc, top=3)
    assert res.space == 1 and res.best == sc.uniform(Placement.CPU) and len(res.ranking) == 1


@pytest.mark.parametrize("neutral", [33, 40])
def test_many_device_neutral_nodes_are_searched_exactly(neutral: int) -> None:
    """A run of 33+ CPU-only nodes in assignment order (one choice each) used to crash the exact
    search: numpy's meshgrid takes at most 32 dimensions. The optimum is the brute force's."""
    nodes = [("g0", "gpu_a"), *[(f"c{i}", "cpu_only") for i in range(neutral)], ("g1", "gpu_b")]
    ids = [n for n, _ in nodes]
    wf = make_workflow(nodes, list(itertools.pairwise(ids)))
    cards = [make_card("gpu_a", vram_mb=600.0), make_card("gpu_b", cpu_ms=30.0, vram_mb=600.0),
             make_card("cpu_only", cpu_ms=1.0, gpu_ms=None)]
    sc = make_scenario(wf, cards, mode=Mode.THREE_WAY, vram_budget_mb=1000.0, name=f"neutral{neutral}")
    truth = naive(sc)
    assert len(truth) == 7  # both on gpu_now exceed the budget; g0 queued waits for g1 resident: deadlock
    check_against(sc, truth, top=3)


def test_a_search_that_cannot_fit_is_refused_on_its_estimate_not_after_its_budget() -> None:
    """At 50 three-way tools the search would take years: the estimate after the warm-up refuses it
    (the message says "estimated to take"), where the warm-up used to run one whole first-level
    subtree until the deadline and then report "did not finish"."""
    from hetsched.bench.generate import WorkflowSpec, random_scenario

    sc = random_scenario(WorkflowSpec("layered", 50, Mode.THREE_WAY, 0))
    with pytest.raises(SearchTooLong) as err:
        solve(sc, max_seconds=60.0, top=10)
    text = str(err.value)
    assert "is estimated to take" in text and "did not finish" not in text
    assert "`reference='best-known'`" in text and "`hetsched.reference(scenario)`" in text and "--" not in text
    assert err.value.estimate_s > 60.0
    shown = error_text(err.value)  # the CLI names the flags and the command
    assert "--reference best-known" in shown and "`hetsched reference SCENARIO`" in shown
    assert "(--max-seconds)" in shown and "raise --max-seconds" in shown


@pytest.mark.parametrize("seed", range(3))
def test_a_paused_search_resumed_or_handed_on_finds_the_same_optimum(seed: int) -> None:
    """The task pauses at once (its stack kept), then either resumes or its leftover prefixes are
    searched by fresh tasks, as the worker processes do: the same optimum as brute force."""
    sc = random_search_scenario(9, seed, family="fanout")
    best = min(naive(sc).values())
    bm = oracle_mod.BoundModel(sc)
    ev = oracle_mod.Evaluator(sc, bm)
    plan = oracle_mod._Plan(sc, bm, ev)
    coll = oracle_mod._Collector(1)
    task = oracle_mod._Task(plan, coll, math.inf)
    level1 = oracle_mod._level1(plan, math.inf)
    assert not task.run(level1, until=0.0) and task.leftover()
    parts = task.leftover()
    assert task.resume() and not task.leftover() and coll.best == best
    handed = oracle_mod._Collector(1)
    for part in parts:
        oracle_mod._Task(plan, handed, math.inf).run(part)
    assert handed.best == best


def test_auto_runs_the_exact_search_when_the_estimate_is_pessimistic(monkeypatch: pytest.MonkeyPatch) -> None:
    """An estimate a few times the budget no longer stops ``auto``: it searches and proves the optimum
    (``oracle`` still trusts the estimate and refuses at once)."""
    from hetsched.model import ReferenceKind
    from hetsched.search.reference import reference

    sc = random_search_scenario(14, 1, family="layered")  # too large for its unpruned size alone to fit 20 s
    truth = solve(fresh(sc, "truth"), max_seconds=None).e2e_ms

    def pessimistic(plan: object, parts: object, thr: float, workers: int, seed: int,
                    limit: float = math.inf) -> oracle_mod.Estimate:
        return oracle_mod.Estimate(100.0, 1e9, 1e6, sc.mapping_space_size())

    monkeypatch.setattr(oracle_mod, "_estimate", pessimistic)
    monkeypatch.setattr(oracle_mod, "WARMUP_S", 0.0)
    ref = reference(fresh(sc, "auto"), "auto", max_seconds=20.0)
    assert ref is not None and ref.kind is ReferenceKind.ORACLE and ref.e2e_ms == truth
    with pytest.raises(SearchTooLong, match="is estimated to take"):
        reference(fresh(sc, "oracle"), "oracle", max_seconds=20.0)
