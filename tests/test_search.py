"""The searches' building blocks: the vectorized bounds never exceed what the simulator measures, the
best-known search is feasible, seeded and never better than the optimum, the lower bounds never
exceed the optimum, and ``reference`` picks, labels and limits what it computes as documented."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow
from tests.search_scenarios import FAMILIES, random_search_scenario
from tests.test_oracle import big_fanout, naive
from tests.test_sim import instances

from hetsched.cli import main
from hetsched.model import InfeasibleKind, InputError, Mapping, Mode, Placement, ReferenceKind, Scenario
from hetsched.model.files import load_scenario
from hetsched.search.bounds import BoundModel
from hetsched.search.local_search import local_search
from hetsched.search.lower_bound import dual_bound_ms, lower_bound, root_bound_ms
from hetsched.search.oracle import SearchTooLong, solve
from hetsched.search.reference import SimPlanner, best_known, lower_bound_ms, reference
from hetsched.sim import Simulator

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
scenarios = st.one_of(
    instances().map(lambda inst: inst[0]),
    st.builds(random_search_scenario, st.integers(2, 6), st.integers(0, 10_000), family=st.sampled_from(FAMILIES),
              mode=st.sampled_from(list(Mode))),
)


def every_mapping(sc: Scenario) -> np.ndarray:
    return np.array(list(itertools.product(*[[p.code for p in sc.allowed(v)] for v in sc.workflow.node_ids])),
                    dtype=np.int8)


def exact_e2e(sc: Scenario, rows: np.ndarray) -> np.ndarray:
    """inf where the mapping cannot run (static checks or a deadlock in the simulation)."""
    sim = Simulator(sc, noise=False)
    ids = sc.workflow.node_ids
    out = []
    for row in rows.tolist():
        e = sim.e2e(Mapping(zip(ids, (Placement.of_code(c) for c in row), strict=True)))
        out.append(math.inf if e is None else e)
    return np.array(out)


@SETTINGS
@given(scenarios)
def test_bounds_never_exceed_the_simulated_e2e_of_any_completion(sc: Scenario) -> None:
    bm = BoundModel(sc)
    rows = every_mapping(sc)
    e2e = exact_e2e(sc, rows)
    full = bm.bound_full(rows)
    ok = np.isfinite(e2e)
    slack = np.array([bm.slack(e) for e in e2e[ok]])
    assert (full.lb[ok] <= e2e[ok] + slack).all()
    # a gpu_now set over the budget is never let through
    over = full.vram_now > sc.machine.vram_budget_mb * (1 + 1e-9) + 1e-9
    assert not (over & ok).any()
    # every prefix's bound holds for the best of its completions
    pos = bm.to_positions(rows)
    for depth in range(1, bm.n):
        prefix = bm.extend(bm.root().take(np.zeros(len(rows), dtype=np.intp)), pos[:depth].copy())
        best: dict[tuple[int, ...], float] = {}
        keys = [tuple(k) for k in pos[:depth].T.tolist()]
        for key, e in zip(keys, e2e, strict=True):
            best[key] = min(best.get(key, math.inf), e)
        for key, lb in zip(keys, prefix.lb, strict=True):
            assert lb <= best[key] + bm.slack(best[key])


@SETTINGS
@given(scenarios)
def test_deadlock_filter_flags_only_mappings_the_model_refuses(sc: Scenario) -> None:
    bm = BoundModel(sc)
    rows = every_mapping(sc)
    dead = bm.deadlocked(bm.to_positions(rows))
    ids = sc.workflow.node_ids
    for row in rows[dead].tolist():
        m = Mapping(zip(ids, (Placement.of_code(c) for c in row), strict=True))
        reason = sc.infeasibility(m)
        assert reason is not None and reason.kind in (
            InfeasibleKind.DEADLOCK, InfeasibleKind.OOM, InfeasibleKind.NEVER_ADMISSIBLE)


@SETTINGS
@given(scenarios)
def test_lower_bounds_never_exceed_the_optimum(sc: Scenario) -> None:
    opt = min(naive(sc).values())
    slack = 1e-9 * opt + 1e-4
    assert root_bound_ms(sc) <= opt + slack
    assert dual_bound_ms(sc) <= opt + slack
    assert lower_bound_ms(sc) <= opt + slack
    found = local_search(sc, seed=1, max_evals=20)
    proved = lower_bound(sc, found.e2e_ms, max_expansions=6)
    assert proved.lower_ms <= opt + slack <= proved.upper_ms + slack + opt * 1e-9
    if proved.optimal:
        assert proved.upper_ms == pytest.approx(opt, rel=1e-9)


@SETTINGS
@given(scenarios, st.integers(0, 3))
def test_local_search_is_feasible_seeded_and_no_better_than_the_optimum(sc: Scenario, seed: int) -> None:
    a = local_search(sc, seed=seed, max_evals=60)
    b = local_search(sc, seed=seed, max_evals=60)
    assert (a.codes, a.e2e_ms, a.evaluations) == (b.codes, b.e2e_ms, b.evaluations)
    assert a.evaluations <= 60 or a.evaluations <= 4  # the starts are always evaluated
    m = Mapping(zip(sc.workflow.node_ids, (Placement.of_code(c) for c in a.codes), strict=True))
    assert Simulator(sc, noise=False).e2e(m) == a.e2e_ms
    truth = naive(sc)
    assert a.e2e_ms >= min(truth.values())
    assert a.e2e_ms <= truth[sc.uniform(Placement.CPU)]  # all-CPU is a start
    if a.proven_optimal:
        assert a.e2e_ms == min(truth.values())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(FAMILIES), st.integers(0, 3), st.integers(40, 400),
       st.booleans(), st.sampled_from(list(Mode)))
def test_local_search_on_longer_workflows_keeps_its_budget_its_seed_and_its_starts(
        sc_seed: int, family: str, seed: int, evals: int, descend_starts: bool, mode: Mode) -> None:
    """Past six nodes each window is re-optimized with at most ``WINDOW_SIMULATIONS`` simulations:
    the search never returns a mapping worse than a start it was given (or all-CPU), spends at
    most its budget, stays within the VRAM budget and repeats itself for a seed, descending from the
    best start only or (the best-known reference's way) from each start."""
    sc = random_search_scenario(14, sc_seed, family=family, mode=mode)
    rng = np.random.default_rng(sc_seed)
    ids = sc.workflow.node_ids
    start = tuple(int(rng.choice([p.code for p in sc.allowed(v)])) for v in ids)
    cpu = tuple(Placement.CPU.code for _ in ids)
    sim = Simulator(sc, noise=False)
    given_e = [e for e in (sim.e2e(Mapping(zip(ids, (Placement.of_code(c) for c in s), strict=True)))
                           for s in (start, cpu)) if e is not None]
    a = local_search(sc, seed=seed, max_evals=evals, starts=[start], descend_starts=descend_starts)
    b = local_search(sc, seed=seed, max_evals=evals, starts=[start], descend_starts=descend_starts)
    assert (a.codes, a.e2e_ms, a.evaluations) == (b.codes, b.e2e_ms, b.evaluations)
    assert a.evaluations <= evals
    assert a.e2e_ms <= min(given_e)
    assert sc.compiled.static_ok(a.codes)
    assert sim.e2e(Mapping(zip(ids, (Placement.of_code(c) for c in a.codes), strict=True))) == a.e2e_ms


@pytest.mark.parametrize("seed", range(6))
def test_best_known_reaches_the_optimum_on_ten_node_workflows(seed: int) -> None:
    """What the benchmark measures at scale, as a floor: with a modest budget the best-known
    search finds the exact optimum on small random workflows, or comes within 5% of it."""
    sc = random_search_scenario(10, seed, family=FAMILIES[seed % 4])
    opt = solve(sc, max_seconds=None).e2e_ms
    found = local_search(sc, seed=seed, max_evals=400)
    assert opt <= found.e2e_ms <= 1.05 * opt


def test_local_search_exchanges_resident_tools_under_a_full_budget() -> None:
    """The VRAM cliff: tool A (900 of 1000 MB) belongs on the GPU and eight small tools on the
    CPU, but the greedy start makes the eight resident and fills the budget. A alone cannot join
    (out of memory), and moving the small tools out one by one does not lower the E2E until all
    have left, so no single-node move, tool move, window of six nodes or small kick crosses it; a
    residency swap (A in, the residents out) does. Checked against every mapping."""
    cards = [make_card("A", cpu_ms=3000.0, gpu_ms=500.0, vram_mb=900.0, gpu_util=0.5)]
    cards += [make_card(f"B{k}", cpu_ms=800.0, gpu_ms=100.0, vram_mb=125.0, gpu_util=0.1) for k in range(8)]
    wf = make_workflow([("a", "A")] + [(f"b{k}", f"B{k}") for k in range(8)])
    sc = make_scenario(wf, cards, Mode.BINARY, cpu_cores=4, vram_budget_mb=1000.0)
    opt = float(exact_e2e(sc, every_mapping(sc)).min())
    for seed in range(3):
        found = local_search(sc, seed=seed, max_evals=300)
        assert found.e2e_ms == opt == 1600.0
        assert found.codes == (Placement.GPU_NOW.code,) + (Placement.CPU.code,) * 8


def test_best_known_reference_states_its_gap_and_is_seeded(monkeypatch: pytest.MonkeyPatch) -> None:
    import hetsched.search.reference as ref_mod

    real = ref_mod.relaxation_bound_ms

    def unhurried(scenario: Scenario, upper_ms: float, *, max_seconds: float, wall_seconds: float | None) -> object:
        return real(scenario, upper_ms, max_seconds=max_seconds, wall_seconds=600.0)

    # the same result for a seed with a budget in simulations alone, as long as the relaxation's wall-clock cap
    # (EVALS_WALL_FACTOR times its solver time) does not bind: lifted here so that no load can make it bind
    monkeypatch.setattr(ref_mod, "relaxation_bound_ms", unhurried)
    sc = random_search_scenario(8, 11, family="layered")
    ref = best_known(sc, seed=3, max_seconds=None, max_evals=300)
    again = best_known(sc, seed=3, max_seconds=None, max_evals=300)
    assert (ref.mapping, ref.e2e_ms, ref.lower_bound_ms) == (again.mapping, again.e2e_ms, again.lower_bound_ms)
    opt = solve(sc, max_seconds=None).e2e_ms
    assert ref.kind is ReferenceKind.BEST_KNOWN and not ref.exact
    assert ref.lower_bound_ms is not None and ref.lower_bound_ms <= opt * (1 + 1e-9) <= ref.e2e_ms * (1 + 1e-9)
    assert ref.label.startswith("best-known (within ") and ref.label.endswith("% of the lower bound)")
    assert Simulator(sc, noise=False).e2e(ref.mapping) == pytest.approx(ref.e2e_ms)


def test_a_budget_in_simulations_gives_the_relaxation_a_generous_wall_clock_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # with max_evals the result must not depend on the machine's load: the relaxation's wall-clock cap (its
    # default, four times its solver time, bound at a load of 15-20 on two cores) is EVALS_WALL_FACTOR times it
    import hetsched.search.reference as ref_mod

    real = ref_mod.relaxation_bound_ms
    caps: list[tuple[float, float | None]] = []

    def spy(scenario: Scenario, upper_ms: float, *, max_seconds: float, wall_seconds: float | None) -> object:
        caps.append((max_seconds, wall_seconds))
        return real(scenario, upper_ms, max_seconds=max_seconds, wall_seconds=wall_seconds)

    monkeypatch.setattr(ref_mod, "relaxation_bound_ms", spy)
    best_known(random_search_scenario(8, 11, family="layered"), seed=3, max_seconds=None, max_evals=300)
    assert caps, "the relaxation was not asked"
    assert all(wall is not None and wall >= ref_mod.EVALS_WALL_FACTOR * solver for solver, wall in caps)
    assert ref_mod.EVALS_WALL_FACTOR >= 25


def test_a_time_budget_gives_the_relaxation_its_solver_time_and_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    # with a time budget the relaxation's first call is limited by its deterministic solver time, its probes
    # included: its wall-clock cap is at least its rounds' shared limit (twice its own), so a machine that gives it
    # half a core proves what a quiet one does (its cap was its 1 s share of the default 10 s budget: that ended the
    # rounds before the probes, and under load before the second round had proved much)
    import hetsched.search.reference as ref_mod

    real = ref_mod.relaxation_bound_ms
    caps: list[tuple[float, float | None]] = []

    def spy(scenario: Scenario, upper_ms: float, *, max_seconds: float, wall_seconds: float | None) -> object:
        caps.append((max_seconds, wall_seconds))
        return real(scenario, upper_ms, max_seconds=max_seconds, wall_seconds=wall_seconds)

    monkeypatch.setattr(ref_mod, "relaxation_bound_ms", spy)
    budget = 2.0
    best_known(random_search_scenario(8, 11, family="layered"), seed=3, max_seconds=budget, workers=1)
    assert caps, "the relaxation was not asked"
    solver, wall = caps[0]
    assert solver == pytest.approx(ref_mod.RELAXATION_SHARE * ref_mod.BOUND_SHARE * budget)
    assert wall is not None and wall >= 2 * solver
    # the default budget too, with a tenth of it gone to the first search at most
    solver = ref_mod.RELAXATION_SHARE * ref_mod.BOUND_SHARE * ref_mod.DEFAULT_SEARCH_SECONDS
    assert ref_mod._relaxation_wall(solver, 0.9 * ref_mod.DEFAULT_SEARCH_SECONDS) >= 2 * solver


def test_auto_is_exact_when_it_fits_and_best_known_with_a_bound_when_not() -> None:
    small = random_search_scenario(7, 2, family="dag")
    ref = reference(small)
    assert ref is not None and ref.kind is ReferenceKind.ORACLE and ref.gap == 0.0
    assert ref.e2e_ms == solve(small).e2e_ms == ref.lower_bound_ms
    big = big_fanout(40)
    ref = reference(big, "auto", max_seconds=2.0)
    assert ref is not None and ref.kind is ReferenceKind.BEST_KNOWN
    assert ref.lower_bound_ms is not None and 0 < ref.lower_bound_ms <= ref.e2e_ms
    assert ref.gap is not None and ref.gap >= 0
    assert Simulator(big, noise=False).e2e(ref.mapping) == pytest.approx(ref.e2e_ms)
    with pytest.raises(SearchTooLong):
        reference(big, "oracle", max_seconds=1.0)
    assert reference(big, "none") is None
    with pytest.raises(InputError, match=r"^max_seconds must be > 0 seconds, got 0$"):
        reference(small, max_seconds=0)


def test_planner_reference_is_computed_once_with_its_budget() -> None:
    planner = SimPlanner(big_fanout(30), "best-known", max_seconds=1.0)
    first = planner.reference()
    assert first is planner.reference() and first.kind is ReferenceKind.BEST_KNOWN


def write_scenario_file(sc: Scenario, path: Path) -> None:
    """A scenario in the file format (docs/formats.md)."""
    m = sc.machine
    data = {
        "name": sc.name,
        "mode": sc.mode.value,
        "machine": {"cpu_cores": m.cpu_cores, "vram_budget_mb": m.vram_budget_mb, "gpu_kappa": m.gpu_kappa,
                    "noise_cv": m.noise_cv},
        "cards": {t: c.model_dump(include={"cpu_ms", "gpu_ms", "load_ms", "vram_mb", "gpu_util", "cpu_threads",
                                           "has_gpu"}) for t, c in sc.cards.items()},
        "nodes": [{"id": n.id, "tool": n.tool} for n in sc.workflow.nodes],
        "edges": [f"{e.src} -> {e.dst}" for e in sc.workflow.edges],
    }
    path.write_text(yaml.safe_dump(data))


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Exit status and output of ``hetsched ARGS`` through the console entry point (its error boundary)."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out + out.err


def test_oracle_command_ranks_the_top_and_refuses_what_does_not_fit(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, text = cli(capsys, "oracle", "S13", "--top", "3", "--json")
    data = json.loads(text)
    assert code == 0 and data["search"] == "bounded" and len(data["ranking"]) == 3
    assert data["ranking"][0]["e2e_ms"] == data["e2e_ms"] and data["feasible"] is None
    code, text = cli(capsys, "oracle", "S13", "--all", "--top", "1000", "--json")
    full = json.loads(text)
    assert code == 0 and full["search"] == "full" and len(full["ranking"]) == full["feasible"] > 3
    assert [r["e2e_ms"] for r in full["ranking"][:3]] == [r["e2e_ms"] for r in data["ranking"]]
    path = tmp_path / "big.yaml"
    write_scenario_file(big_fanout(40), path)
    code, text = cli(capsys, "oracle", str(path), "--max-seconds", "0.5")
    assert code == 2 and "Traceback" not in text
    assert "--max-seconds" in text and ("estimated to take" in text or "did not finish in 0.5 s" in text)
    code, text = cli(capsys, "oracle", "S13", "--max-seconds", "0")
    assert code == 2 and "--max-seconds must be > 0 seconds" in text


def test_run_reports_a_best_known_reference_with_its_gap(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = cli(capsys, "run", "S5", "--policy", "all-gpu", "--rounds", "1", "--no-store", "--reference", "best-known",
                     "--max-seconds", "1")
    assert code == 0, text
    assert "best-known (within " in text and "% of the lower bound)" in text
    code, text = cli(capsys, "run", "S5", "--policy", "all-gpu", "--rounds", "1", "--no-store", "--max-seconds", "0")
    assert code == 2 and "--max-seconds must be > 0" in text


def test_reference_command_prints_the_oracle_or_a_labelled_best_known(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, text = cli(capsys, "reference", "S13", "--json")
    data = json.loads(text)
    assert code == 0 and data["kind"] == "oracle" and data["gap"] == 0.0 and data["e2e_ms"] == solve(
        load_scenario("S13")).e2e_ms
    path = tmp_path / "big.yaml"
    write_scenario_file(big_fanout(40), path)
    code, text = cli(capsys, "reference", str(path), "--kind", "best-known", "--max-seconds", "1")
    assert code == 0 and "best-known (within " in text and "lower bound" in text
    code, text = cli(capsys, "oracle", str(path), "--max-seconds", "1")
    assert code == 2 and "hetsched reference" in text and "Traceback" not in text
    code, text = cli(capsys, "reference", "S13", "--kind", "none")
    assert code == 2 and "accepted: auto, oracle, best-known" in text


def test_local_search_greedy_start_queues_by_the_load_the_model_charges() -> None:
    """The greedy start sends to the queue the tool whose loads cost least per MB freed, by the load
    the kernel charges (``queue_load_ms``: under ``cold_load_share`` 1, A's 5 s cold load, three
    times queued), not the card's warm ``load_ms`` (A's 10 ms, which would queue A's three nodes).
    Three simulations: all-CPU, all-queue and the greedy start, so the result is the greedy start."""
    cards = [make_card("A", cpu_ms=20_000.0, gpu_ms=100.0, load_ms=10.0, load_cold_ms=5000.0, vram_mb=600.0),
             make_card("B", cpu_ms=20_000.0, gpu_ms=100.0, load_ms=100.0, vram_mb=600.0)]
    wf = make_workflow([("a1", "A"), ("a2", "A"), ("a3", "A"), ("b", "B")], [("a1", "a2"), ("a2", "a3")])
    sc = make_scenario(wf, cards, Mode.THREE_WAY, vram_budget_mb=1000.0, cold_load_share=1.0)
    found = local_search(sc, seed=0, max_evals=3)
    assert found.codes == (Placement.GPU_NOW.code,) * 3 + (Placement.GPU_QUEUE.code,)


def test_local_search_stops_once_every_move_it_tries_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    """A converged search (a small workflow, a budget far larger than its mappings) stops after
    ``STALL_STEPS`` bounded neighbourhoods in a row that simulate nothing new instead of bounding
    cached moves until its budget ends (two million steps at this budget). Counted with spies on
    the simulator and the bounds: never more than ``STALL_STEPS`` bound calls since the last new
    simulation, and the result is still the best of everything simulated."""
    import hetsched.search.local_search as ls

    sc = random_search_scenario(9, 4, family="dag", mode=Mode.BINARY)
    calls = {"since_sim": 0, "most": 0}
    real_sim, real_bound = ls.simulate_e2e, BoundModel.bound_full

    def sim(*args: object, **kwargs: object) -> object:
        calls["since_sim"] = 0
        return real_sim(*args, **kwargs)  # type: ignore[arg-type]

    def bound(self: BoundModel, rows: np.ndarray) -> object:
        calls["since_sim"] += 1
        calls["most"] = max(calls["most"], calls["since_sim"])
        if calls["since_sim"] > 3 * ls.STALL_STEPS:
            raise AssertionError("the search kept bounding known moves")
        return real_bound(self, rows)

    monkeypatch.setattr(ls, "simulate_e2e", sim)
    monkeypatch.setattr(BoundModel, "bound_full", bound)
    found = local_search(sc, seed=0, max_evals=1_000_000)
    assert calls["most"] <= ls.STALL_STEPS + 1
    assert found.evaluations <= 2 ** 9 and not found.proven_optimal
    truth = exact_e2e(sc, every_mapping(sc))
    assert math.isclose(found.e2e_ms, float(truth.min()), rel_tol=1e-9)


def test_best_known_by_simulations_gives_the_relaxation_the_default_budgets_share(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``best_known(max_evals=N)`` counts N simulations as N / EVALS_PER_SECOND seconds when it shares the
    budget with the relaxation: at the simulations the default budget buys, the relaxation gets the
    deterministic time it gets by default (it had 5 s at 50,000 simulations, five times as much)."""
    import hetsched.search.reference as ref_mod

    seen: list[float] = []

    class Stop(Exception):
        pass

    def spy(scenario: Scenario, upper_ms: float, *, max_seconds: float, wall_seconds: float | None) -> None:
        seen.append(max_seconds)
        raise Stop

    monkeypatch.setattr(ref_mod, "relaxation_bound_ms", spy)
    sc = random_search_scenario(12, 5, family="layered")
    default_evals = int(ref_mod.DEFAULT_SEARCH_SECONDS * ref_mod.EVALS_PER_SECOND)
    for kwargs in ({"max_seconds": ref_mod.DEFAULT_SEARCH_SECONDS}, {"max_seconds": None, "max_evals": default_evals}):
        with pytest.raises(Stop):
            best_known(sc, seed=0, **kwargs)  # type: ignore[arg-type]
    assert seen[0] == seen[1] == pytest.approx(
        ref_mod.RELAXATION_SHARE * ref_mod.BOUND_SHARE * ref_mod.DEFAULT_SEARCH_SECONDS)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(FAMILIES), st.sampled_from(list(Mode)))
def test_descend_starts_descends_from_each_start_given_and_the_greedy_one(sc_seed: int, family: str,
                                                                         mode: Mode) -> None:
    """The search descends from its best start first; with ``descend_starts`` it then explores the basin of
    every other start it was given and of the greedy start (a descent begins at each feasible one), and
    ends no worse than any of them.

    Each search ends (as when its budget runs out) at the first descent after those this test checks: what
    follows (windows and kicks until the budget ends or no new mapping is simulated in ``STALL_STEPS``
    steps, about 95% of a search's time here) is the same with or without ``descend_starts`` and is
    checked by the other local-search tests; its best can only fall, so the full search ends no worse
    than this one."""
    import random

    import hetsched.search.local_search as ls

    sc = random_search_scenario(12, sc_seed, family=family, mode=mode)
    rng = random.Random(sc_seed)
    given = [tuple(rng.choice(a) for a in sc.compiled.allowed) for _ in range(3)]
    ev = ls.Evaluator(sc)
    greedy = ls._Search(sc, ev, random.Random(0), math.inf, None, 1).greedy()
    feasible = {s for s in [*given, greedy] if ev(s) < math.inf}
    every = [*given, *ls._Search(sc, ev, random.Random(0), math.inf, None, 1).starts()]
    best_start = min((s for s in every if ev(s) < math.inf), key=lambda s: (ev(s), s))
    real = ls._Search.descend
    for descend_starts in (False, True):
        began: list[tuple[int, ...]] = []
        checked = len(feasible | {best_start}) if descend_starts else 1

        def spy(self: ls._Search, cur: tuple[int, ...], cur_e: float, began: list[tuple[int, ...]] = began,
                checked: int = checked) -> tuple[tuple[int, ...], float]:
            if len(began) == checked:
                raise ls._Budget  # every descent checked has begun (and ended: this one starts after)
            began.append(cur)
            return real(self, cur, cur_e)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ls._Search, "descend", spy)
            # each start's descent begins within the first ~300 simulations at 12 tools (most within 50)
            found = local_search(sc, seed=1, max_evals=400, starts=given, descend_starts=descend_starts)
        assert found.e2e_ms <= min((ev(s) for s in feasible), default=math.inf)
        assert began[0] == best_start
        if descend_starts:
            assert set(began[1: len(feasible | {best_start})]) == feasible - {best_start}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(FAMILIES))
def test_best_known_is_never_worse_than_its_greedy_start_or_a_given_incumbent(sc_seed: int, family: str) -> None:
    """The best-known reference (its search descends from every start) returns a feasible mapping within
    the VRAM budget, never worse than the greedy start or an incumbent it was handed, the same for a seed."""
    import random

    import hetsched.search.local_search as ls

    sc = random_search_scenario(12, sc_seed, family=family)
    ev = ls.Evaluator(sc)
    greedy = ls._Search(sc, ev, random.Random(0), math.inf, None, 1).greedy()
    rng = random.Random(sc_seed)
    incumbent = tuple(rng.choice(a) for a in sc.compiled.allowed)
    if ev(incumbent) == math.inf:
        incumbent = tuple(Placement.CPU.code for _ in incumbent)
    start = Mapping(zip(sc.workflow.node_ids, (Placement.of_code(c) for c in incumbent), strict=True))
    ref = best_known(sc, seed=2, max_seconds=None, max_evals=400, start=start)
    again = best_known(sc, seed=2, max_seconds=None, max_evals=400, start=start)
    assert (ref.mapping, ref.e2e_ms) == (again.mapping, again.e2e_ms)
    codes = tuple(ref.mapping[v].code for v in sc.workflow.node_ids)
    assert sc.compiled.static_ok(codes)
    assert ref.e2e_ms <= min(ev(incumbent), ev(greedy)) * (1 + 1e-12)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(FAMILIES), st.sampled_from(list(Mode)), st.integers(0, 3),
       st.integers(1, 400))
def test_a_search_from_an_origin_begins_there_and_never_ends_worse(sc_seed: int, family: str, mode: Mode,
                                                                   seed: int, evals: int) -> None:
    """One trajectory of the best-known race (``origin``): its first descent begins at the origin, even where
    another start is better; it ends within the VRAM budget, no worse than the origin, the same for a seed; an
    origin with other starts is refused."""
    import random

    import hetsched.search.local_search as ls

    sc = random_search_scenario(12, sc_seed, family=family, mode=mode)
    rng = random.Random(sc_seed)
    origin = tuple(rng.choice(a) for a in sc.compiled.allowed)
    cpu = tuple(Placement.CPU.code for _ in origin)
    if ls.Evaluator(sc)(origin) == math.inf:
        origin = cpu
    real, began = ls._Search.descend, []

    def spy(self: ls._Search, cur: tuple[int, ...], cur_e: float) -> tuple[tuple[int, ...], float]:
        began.append(cur)
        return real(self, cur, cur_e)

    ev = ls.Evaluator(sc)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ls._Search, "descend", spy)
        a = local_search(sc, seed=seed, max_evals=evals, origin=origin, evaluator=ev)
    b = local_search(sc, seed=seed, max_evals=evals, origin=origin)
    assert (a.codes, a.e2e_ms, a.evaluations) == (b.codes, b.e2e_ms, b.evaluations)
    if any(len(x) > 1 for x in sc.compiled.allowed):
        assert began[0] == origin
    assert a.evaluations <= evals + 2  # all-CPU and the origin are simulated whatever the budget
    assert a.e2e_ms <= ev(origin)
    assert sc.compiled.static_ok(a.codes)
    sim = Simulator(sc, noise=False)
    assert sim.e2e(Mapping(zip(sc.workflow.node_ids, (Placement.of_code(c) for c in a.codes), strict=True))) == a.e2e_ms
    with pytest.raises(ValueError, match="origin"):
        local_search(sc, seed=seed, max_evals=evals, origin=origin, starts=[cpu])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(FAMILIES), st.sampled_from(list(Mode)), st.integers(0, 3),
       st.integers(1, 1_500))
def test_the_best_known_race_is_never_worse_than_a_start_and_repeats_itself(sc_seed: int, family: str, mode: Mode,
                                                                             seed: int, evals: int) -> None:
    """The race of trajectories from the best distinct starts ends no worse than the best feasible start it was
    given (a random mapping, all-CPU, all-gpu_now, all-queue, greedy), within the VRAM budget, within its budget
    of simulations (each trajectory simulates at least one mapping), the same for a seed."""
    import random

    import hetsched.search.local_search as ls
    from hetsched.search.reference import RACE_TRAJECTORIES, race

    sc = random_search_scenario(14, sc_seed, family=family, mode=mode)
    rng = random.Random(sc_seed)
    starts = [tuple(rng.choice(a) for a in sc.compiled.allowed), *ls.start_mappings(sc)]
    ev = ls.Evaluator(sc)
    found = race(sc, ev, starts, seed=seed, max_seconds=None, max_evals=evals)
    again = race(sc, ls.Evaluator(sc), starts, seed=seed, max_seconds=None, max_evals=evals)
    assert (found.codes, found.e2e_ms) == (again.codes, again.e2e_ms)
    assert found.e2e_ms <= min(ev(s) for s in starts)
    assert ev.evaluations <= found.evaluations <= max(evals, len(starts)) + len(starts) + RACE_TRAJECTORIES + 1
    assert sc.compiled.static_ok(found.codes)
    sim = Simulator(sc, noise=False)
    mapping = Mapping(zip(sc.workflow.node_ids, (Placement.of_code(c) for c in found.codes), strict=True))
    assert sim.e2e(mapping) == found.e2e_ms


def count_pools(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the worker pools the race starts (``{"n": pools}``), the pools still started as before."""
    import hetsched.search.reference as ref_mod

    pools = {"n": 0}
    real = ref_mod.pool_context

    def counted() -> object:
        pools["n"] += 1
        return real()

    monkeypatch.setattr(ref_mod, "pool_context", counted)
    return pools


@pytest.mark.parametrize(("sc_seed", "family", "mode", "lanes", "evals"),
                         [(31, "fanout", Mode.THREE_WAY, 1, 900), (32, "forkjoin", Mode.THREE_WAY, 2, 700),
                          (33, "layered", Mode.BINARY, 3, 500), (34, "random", Mode.THREE_WAY, 5, 400)])
def test_the_race_finds_the_same_mapping_with_any_number_of_processes(
        monkeypatch: pytest.MonkeyPatch, sc_seed: int, family: str, mode: Mode, lanes: int, evals: int) -> None:
    """With a budget in simulations the race's trajectories (each on an evaluator of its own) run in worker
    processes, and the result is the same for a seed with one, two or three of them: the same mapping, E2E and
    simulations in all, at most ``lanes`` budgets of them; never worse than the best start and within the
    VRAM budget."""
    import hetsched.search.local_search as ls
    import hetsched.search.reference as ref_mod

    sc = random_search_scenario(16, sc_seed, family=family, mode=mode)
    starts = ls.start_mappings(sc)
    monkeypatch.setattr(ref_mod, "MIN_PARALLEL_SECONDS", 0.0)  # worker processes whatever the budget
    pools = count_pools(monkeypatch)
    found = [ref_mod.race(sc, ls.Evaluator(sc), starts, seed=1, max_seconds=None, max_evals=evals, workers=w,
                          lanes=lanes) for w in (1, 2, 3)]
    assert pools["n"] == 2  # the workers ran the trajectories
    assert len({(f.codes, f.e2e_ms, f.evaluations) for f in found}) == 1
    ev = ls.Evaluator(sc)
    assert found[0].e2e_ms <= min(ev(s) for s in starts)
    assert found[0].evaluations <= lanes * evals + len(starts) + 2 * max(lanes, ref_mod.RACE_TRAJECTORIES)
    assert sc.infeasibility(Mapping(zip(sc.workflow.node_ids, (Placement.of_code(c) for c in found[0].codes),
                                        strict=True))) is None


@pytest.mark.parametrize(("sc_seed", "family", "lanes"), [(36, "fanout", 1), (37, "layered", 2), (38, "random", 3)])
def test_each_lane_of_the_race_runs_a_first_round_of_its_own(monkeypatch: pytest.MonkeyPatch, sc_seed: int,
                                                            family: str, lanes: int) -> None:
    """The race's first round has ``RACE_TRAJECTORIES`` trajectories per lane, each given ``RACE_SHARE /
    RACE_TRAJECTORIES`` of a lane's budget (as on one lane), from the best distinct starts, the best start
    again with other seeds beyond them; then every lane goes on from the best of them with the rest."""
    import hetsched.search.local_search as ls
    import hetsched.search.reference as ref_mod

    sc = random_search_scenario(18, sc_seed, family=family, mode=Mode.THREE_WAY)
    rng = np.random.default_rng(sc_seed)
    starts = list(dict.fromkeys([*ls.start_mappings(sc), *(tuple(int(rng.choice(a)) for a in sc.compiled.allowed)
                                                           for _ in range(6))]))
    ev = ls.Evaluator(sc)
    ranked = [s for e, s in sorted((ev(s), s) for s in starts) if e < math.inf]
    legs: list[tuple[int, tuple[int, ...], int | None, tuple[int, ...], float]] = []
    real = ref_mod._Trajectories.__call__

    def spied(self: object, leg: object) -> ls.SearchResult:
        found = real(self, leg)  # type: ignore[arg-type]
        legs.append((leg.seed, leg.origin, leg.evals, found.codes, found.e2e_ms))  # type: ignore[attr-defined]
        return found

    monkeypatch.setattr(ref_mod._Trajectories, "__call__", spied)
    evals = 2_000
    found = ref_mod.race(sc, ls.Evaluator(sc), starts, seed=3, max_seconds=None, max_evals=evals, workers=1,
                         lanes=lanes)
    count = ref_mod.RACE_TRAJECTORIES * lanes
    first, rest = legs[:count], legs[count:]
    assert [seed for seed, *_ in first] == [3 + j for j in range(count)]
    assert all(budget == int(ref_mod.RACE_SHARE * evals / ref_mod.RACE_TRAJECTORIES) for _, _, budget, _, _ in first)
    origins = [origin for _, origin, *_ in first]
    assert origins == ranked[:count] + [ranked[0]] * (count - len(ranked[:count]))
    best_e, best = min((e, c) for *_, c, e in first)
    assert len(rest) == lanes and all(origin == best for _, origin, *_ in rest)
    assert found.e2e_ms <= best_e


def test_best_known_is_the_same_with_any_number_of_processes_and_uses_them_with_a_time_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``best_known(max_evals=N)`` gives the same reference with one worker process or two; with a time budget
    two workers search side by side and the mapping is still feasible and no worse than the best start. A race inside a worker process (a bench job)
    keeps to one process, as the exact search does, and so does a budget too small to pay for starting them."""
    import multiprocessing as mproc

    import hetsched.search.local_search as ls
    import hetsched.search.reference as ref_mod

    sc = random_search_scenario(20, 35, family="fanout", mode=Mode.THREE_WAY)
    monkeypatch.setattr(ref_mod, "MIN_PARALLEL_SECONDS", 0.0)
    one = best_known(sc, seed=2, max_seconds=None, max_evals=1_500, workers=1)
    two = best_known(sc, seed=2, max_seconds=None, max_evals=1_500, workers=2)
    assert (one.mapping, one.e2e_ms, one.lower_bound_ms) == (two.mapping, two.e2e_ms, two.lower_bound_ms)
    pools = count_pools(monkeypatch)
    timed = best_known(sc, seed=2, max_seconds=1.5, workers=2)
    assert pools["n"] == 1
    assert sc.infeasibility(timed.mapping) is None
    ev = ls.Evaluator(sc)
    assert timed.e2e_ms <= min(ev(s) for s in ls.start_mappings(sc)) * (1 + 1e-9)
    monkeypatch.setattr(ref_mod, "MIN_PARALLEL_SECONDS", 1.0)
    assert ref_mod.race_processes(4, 0.5, None) == 1 and ref_mod.race_processes(4, None, 4_000) == 1
    assert ref_mod.race_processes(4, 10.0, None) == 4
    with mproc.get_context("spawn").Pool(1) as pool:  # a pool's worker: one process, as for the oracle
        assert pool.apply(ref_mod.race_processes, (4, 10.0, None)) == 1


@pytest.mark.parametrize(("sc_seed", "relaxation_bound"), [(21, "optimum"), (21, "none"), (23, "optimum"),
                                                         (24, "half")])
def test_best_known_runs_the_bound_search_past_its_probe_only_when_it_may_pass_the_other_bounds(
        monkeypatch: pytest.MonkeyPatch, sc_seed: int, relaxation_bound: str) -> None:
    """The best-first bound search first runs as a probe (``BOUND_PROBE_SHARE`` of its expansions); it runs
    again, with all of them and the search's upper bound, only when the probe's progress over the empty
    mapping's bound, extrapolated to its whole share, would pass the relaxation's and the Lagrangian bounds
    (else its share goes to the search). Without those (both report nothing) it always runs again. Either way
    the reported lower bound is the largest of them and at most the optimum."""
    import hetsched.search.reference as ref_mod
    from hetsched.search.relaxation import RelaxationBound

    sc = random_search_scenario(9, sc_seed, family="layered")
    opt = solve(sc, max_seconds=None).e2e_ms
    relaxed = {"optimum": opt, "half": 0.5 * opt, "none": None}[relaxation_bound]
    calls: list[tuple[int | None, object]] = []
    real = ref_mod.lower_bound

    def spy(*args: object, **kwargs: object) -> object:
        out = real(*args, **kwargs)  # type: ignore[arg-type]
        calls.append((kwargs.get("max_expansions"), out))  # type: ignore[arg-type]
        return out

    def relaxation(scenario: Scenario, upper_ms: float, *, max_seconds: float,
                   wall_seconds: float | None) -> RelaxationBound | None:
        return None if relaxed is None else RelaxationBound(relaxed, True, 0.0)

    monkeypatch.setattr(ref_mod, "lower_bound", spy)
    monkeypatch.setattr(ref_mod, "relaxation_bound_ms", relaxation)
    if relaxed is None:
        monkeypatch.setattr(ref_mod, "dual_bound_ms", lambda scenario: 0.0)
    ref = best_known(sc, seed=0, max_seconds=None, max_evals=3_000)
    (probe_budget, probe), *rest = calls
    assert probe_budget == round(ref_mod.BOUND_PROBE_SHARE * 30)
    others = max(relaxed or 0.0, 0.0 if relaxed is None else dual_bound_ms(sc))
    promising = not probe.optimal and (  # type: ignore[attr-defined]
        probe.root_ms + (probe.lower_ms - probe.root_ms) / ref_mod.BOUND_PROBE_SHARE > others)  # type: ignore[attr-defined]
    assert [budget for budget, _ in rest] == ([30] if promising else [])
    if relaxed is None:
        assert promising or probe.optimal  # type: ignore[attr-defined]
    assert ref.lower_bound_ms is not None and ref.lower_bound_ms <= opt * (1 + 1e-9) <= ref.e2e_ms * (1 + 1e-9)
    assert ref.lower_bound_ms >= max(others, *(b.lower_ms for _, b in calls)) - 1e-9  # type: ignore[attr-defined]


def test_best_known_with_a_budget_too_small_for_the_relaxation_skips_it_and_stays_sound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A time budget whose relaxation share is under ``MIN_RELAXATION_SECONDS`` (building its model alone costs
    more) runs neither the relaxation nor the Lagrangian bound: the caller's budget is not overrun by a fixed
    floor. The mapping is still feasible and the lower bound (the bound search's) at most the optimum."""
    import hetsched.search.reference as ref_mod

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("called on a budget too small for it")

    monkeypatch.setattr(ref_mod, "relaxation_bound_ms", forbidden)
    monkeypatch.setattr(ref_mod, "dual_bound_ms", forbidden)
    sc = random_search_scenario(9, 22, family="fanout")
    tiny = 0.9 * ref_mod.MIN_RELAXATION_SECONDS / (ref_mod.RELAXATION_SHARE * ref_mod.BOUND_SHARE)
    ref = best_known(sc, seed=0, max_seconds=tiny)
    opt = solve(sc, max_seconds=None).e2e_ms
    assert sc.infeasibility(ref.mapping) is None
    assert ref.lower_bound_ms is not None and ref.lower_bound_ms <= opt * (1 + 1e-9) <= ref.e2e_ms * (1 + 1e-9)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(FAMILIES), st.integers(0, 3))
def test_the_race_ends_once_it_reaches_a_proven_lower_bound_and_keeps_its_steps(sc_seed: int, family: str,
                                                                                 seed: int) -> None:
    """Told a proven lower bound (here the optimum), the race stops as soon as a trajectory reaches it: the
    optimum, with no more simulations than the race without it, the same for a seed. A trajectory given
    ``max_steps`` bounds at most that many neighbourhoods (plus the one that finds the budget spent)."""
    import hetsched.search.local_search as ls
    from hetsched.search.reference import race

    sc = random_search_scenario(9, sc_seed, family=family, mode=Mode.THREE_WAY)
    opt = solve(sc, max_seconds=None).e2e_ms
    starts = ls.start_mappings(sc)
    plain_ev, told_ev = ls.Evaluator(sc), ls.Evaluator(sc)
    plain = race(sc, plain_ev, starts, seed=seed, max_seconds=None, max_evals=3_000)
    told = race(sc, told_ev, starts, seed=seed, max_seconds=None, max_evals=3_000, lower_ms=opt)
    again = race(sc, ls.Evaluator(sc), starts, seed=seed, max_seconds=None, max_evals=3_000, lower_ms=opt)
    assert (told.codes, told.e2e_ms) == (again.codes, again.e2e_ms)
    if plain.e2e_ms <= opt * (1 + 1e-9):  # the race finds the optimum at this budget: told, it stops there
        assert told.e2e_ms == pytest.approx(opt, rel=1e-9)
        assert told.evaluations <= plain.evaluations
    steps = {"n": 0}
    real = BoundModel.bound_full

    def count(self: BoundModel, rows: np.ndarray) -> object:
        steps["n"] += 1
        return real(self, rows)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(BoundModel, "bound_full", count)
        local_search(sc, seed=seed, max_evals=100_000, max_steps=40)
    assert steps["n"] <= 41


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(FAMILIES), st.integers(3, 24), st.integers(0, 50))
def test_an_exchange_kick_moves_work_between_the_devices_within_the_vram_budget(sc_seed: int, family: str, n: int,
                                                                              seed: int) -> None:
    """An exchange kick (three-way, ``local_search(exchange=True)``) from a feasible mapping sends GPU nodes
    (``gpu_now`` or queued) to the CPU and CPU nodes onto the GPU, each to a placement it allows, evicts
    resident tools whole (to the queue or the CPU) only to make the ``gpu_now`` set fit, and ends within the
    VRAM budget."""
    import random

    import hetsched.search.local_search as ls

    sc = random_search_scenario(n, sc_seed, family=family, mode=Mode.THREE_WAY)
    ev = ls.Evaluator(sc)
    search = ls._Search(sc, ev, random.Random(seed), math.inf, None, 1, exchange=True)
    c = sc.compiled
    rng = random.Random(seed)
    cur = next((m for m in (tuple(rng.choice(a) for a in c.allowed) for _ in range(50)) if c.static_ok(m)),
               ls.start_mappings(sc, ev)[0])
    kicked = search.exchange(cur)
    assert c.static_ok(kicked)
    resident_before = {c.tool_idx[i] for i in range(c.n) if cur[i] == ls.NOW}
    for i, (a, b) in enumerate(zip(cur, kicked, strict=True)):
        assert b in c.allowed[i]
        if a != b and not (a == ls.NOW and c.tool_idx[i] in resident_before and b in (ls.QUEUE, ls.CPU)):
            assert (a == ls.CPU) != (b == ls.CPU)  # across the devices (an eviction aside)


@pytest.mark.parametrize(("mode", "drawn"), [(Mode.THREE_WAY, True), (Mode.BINARY, False)])
def test_the_race_draws_exchange_kicks_when_asked_on_three_way_workflows_only(monkeypatch: pytest.MonkeyPatch, mode: Mode,
                                                                    drawn: bool) -> None:
    """With ``RACE_EXCHANGE`` the best-known race's trajectories kick with exchanges between the CPU and the GPU
    on three-way workflows; without it (the default), a plain ``local_search`` (the exact search's incumbent, the
    ILS) and binary workflows never draw them."""
    import hetsched.search.local_search as ls
    import hetsched.search.reference as ref_mod

    calls = {"n": 0}
    real = ls._Search.exchange

    def spied(self: ls._Search, cur: tuple[int, ...]) -> tuple[int, ...]:
        calls["n"] += 1
        return real(self, cur)

    monkeypatch.setattr(ls._Search, "exchange", spied)
    monkeypatch.setattr(ls, "PATIENCE", 1)
    sc = random_search_scenario(24, 41, family="layered", mode=mode)
    local_search(sc, seed=0, max_evals=3_000)
    ev = ls.Evaluator(sc)
    ref_mod.race(sc, ev, ls.start_mappings(sc, ev), seed=0, max_seconds=None, max_evals=3_000, workers=1)
    assert calls["n"] == 0
    monkeypatch.setattr(ref_mod, "RACE_EXCHANGE", True)
    ev = ls.Evaluator(sc)
    ref_mod.race(sc, ev, ls.start_mappings(sc, ev), seed=0, max_seconds=None, max_evals=3_000, workers=1)
    assert (calls["n"] > 0) == drawn


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(FAMILIES), st.sampled_from(list(Mode)), st.integers(0, 2**31))
def test_the_screened_lanes_exact_estimates_are_the_simulators(sc_seed: int, family: str, mode: Mode,
                                                               draw: int) -> None:
    """The screened lane reads the exact model as the ``rules`` decider's search reads its estimator: the same
    estimates and timings as the decider's ``Estimator`` under the machine's interference, and the E2E the
    noise-free simulator gives (inf where it cannot run), each counted."""
    import random

    from hetsched.deciders.estimate import Estimator
    from hetsched.search.reference import _ExactEstimates

    sc = random_search_scenario(12, sc_seed, family=family, mode=mode)
    exact, est = _ExactEstimates(sc), Estimator(sc, sc.machine.gpu_kappa)
    rng = random.Random(draw)
    rows = np.array([[rng.choice(a) for a in sc.compiled.allowed] for _ in range(6)], dtype=np.int8)
    for row, want in zip(rows.tolist(), exact_e2e(sc, rows), strict=True):
        assert exact.e2e(row) == est.e2e(row) == want
        got, ref = exact.timings(row), est.timings(row)
        assert (got is None) == (ref is None) == (want == math.inf)
        if got is not None and ref is not None:
            assert (got.e2e_ms, got.end, got.admitted) == (ref.e2e_ms, ref.end, ref.admitted)
    # the decider's estimator keeps its timings (a row drawn twice is simulated once): it counts simulations
    assert exact.evaluations == 12 and est.evaluations == 6 + len({tuple(r) for r in rows.tolist()})


@pytest.mark.parametrize(("sc_seed", "family", "mode", "lanes"),
                         [(51, "fanout", Mode.THREE_WAY, 1), (52, "forkjoin", Mode.THREE_WAY, 2),
                          (53, "layered", Mode.BINARY, 2), (54, "random", Mode.THREE_WAY, 3),
                          (55, "random", Mode.THREE_WAY, 3)])
def test_a_race_of_two_lanes_or_more_goes_on_in_its_last_lanes_with_the_screened_search(
        monkeypatch: pytest.MonkeyPatch, sc_seed: int, family: str, mode: Mode, lanes: int) -> None:
    """By default (``RACE_SCREENED_LANES = 2``), with two lanes or more and a three-way workflow of
    ``RACE_SCREENED_MIN_NODES`` nodes or more, the last two lanes' continuations (both of two) run the ``rules``
    decider's screened search on the exact model from the first round's best, any other lane the iterated local
    search; with 0 no leg is screened; one lane, a binary workflow and a smaller one are unchanged. The screened
    legs end no worse than their origin, within their simulations, on a feasible mapping whose E2E is the
    simulator's, the same for a seed with one process or two, and the race never worse than its first round."""
    import hetsched.search.local_search as ls
    import hetsched.search.reference as ref_mod

    legs: list[tuple[bool, tuple[int, ...], int | None, ls.SearchResult, float]] = []
    real = ref_mod._Trajectories.__call__

    def spied(self: ref_mod._Trajectories, leg: ref_mod._Leg) -> ls.SearchResult:
        found = real(self, leg)
        legs.append((leg.screened, leg.origin, leg.evals, found, ls.Evaluator(self.scenario)(leg.origin)))
        return found

    monkeypatch.setattr(ref_mod._Trajectories, "__call__", spied)
    monkeypatch.setattr(ref_mod, "MIN_PARALLEL_SECONDS", 0.0)
    monkeypatch.setattr(ref_mod, "RACE_SCREENED_MIN_NODES", 22 if sc_seed != 54 else 23)  # s54: one node short
    sc = random_search_scenario(22, sc_seed, family=family, mode=mode)
    evals = 1_500
    with monkeypatch.context() as off:
        off.setattr(ref_mod, "RACE_SCREENED_LANES", 0)
        ref_mod.race(sc, ls.Evaluator(sc), ls.start_mappings(sc), seed=4, max_seconds=None, max_evals=evals,
                     workers=1, lanes=lanes)
    assert legs and not any(leg[0] for leg in legs)  # none with 0
    legs.clear()
    assert ref_mod.RACE_SCREENED_LANES == 2
    found = [ref_mod.race(sc, ls.Evaluator(sc), ls.start_mappings(sc), seed=4, max_seconds=None,
                          max_evals=evals, workers=w, lanes=lanes) for w in (1, 2)]
    assert len({(f.codes, f.e2e_ms, f.evaluations) for f in found}) == 1
    first = legs[: lanes * ref_mod.RACE_TRAJECTORIES + lanes]  # the run in this process (the spy sees it)
    screened = [leg for leg in first if leg[0]]
    expected = min(2, lanes) if lanes > 1 and mode is Mode.THREE_WAY and sc_seed != 54 else 0
    assert len(screened) == expected
    assert all(leg[0] == (k >= len(first) - expected) for k, leg in enumerate(first))  # the last lanes only
    sim = Simulator(sc, noise=False)
    for _, _, budget, got, origin_e in screened:
        assert got.e2e_ms <= origin_e
        assert budget is not None and got.evaluations <= budget + len(sc.workflow.nodes) * 3
        mapping = Mapping(zip(sc.workflow.node_ids, (Placement.of_code(c) for c in got.codes), strict=True))
        assert sc.infeasibility(mapping) is None and sim.e2e(mapping) == got.e2e_ms
    assert found[0].e2e_ms <= min(leg[3].e2e_ms for leg in first[: lanes * ref_mod.RACE_TRAJECTORIES])


def test_a_time_budget_ends_a_race_whose_legs_are_screened(monkeypatch: pytest.MonkeyPatch) -> None:
    """Screened legs (the continuations at scale) have no simulation budget under ``max_seconds``: only their
    deadline ends them. Two processes, a one-second budget on a workflow at scale: the reference comes back (a leg
    without its deadline would run forever), feasible, its E2E the simulator's and its bound below it."""
    import hetsched.search.reference as ref_mod

    monkeypatch.setattr(ref_mod, "MIN_PARALLEL_SECONDS", 0.0)  # worker processes whatever the budget
    sc = big_fanout(ref_mod.RACE_SCREENED_MIN_NODES)
    assert ref_mod._at_scale(sc)
    ref = best_known(sc, seed=4, max_seconds=1.0, workers=2)
    assert sc.infeasibility(ref.mapping) is None
    assert Simulator(sc, noise=False).e2e(ref.mapping) == pytest.approx(ref.e2e_ms)
    assert ref.lower_bound_ms is not None and 0 < ref.lower_bound_ms <= ref.e2e_ms


def test_a_screened_search_resumed_past_its_deadline_kicks_no_more() -> None:
    """``resume``'s ``deadline`` (the screened lane's time budget): past it no kick starts, the result is the one
    resumed; without it the search goes on as the decider's does."""
    from hetsched.model.descent import local_search as descent_search
    from hetsched.model.descent import resume
    from hetsched.search.reference import _ExactEstimates

    sc = random_search_scenario(20, 61, family="fanout", mode=Mode.THREE_WAY)
    allowed = [tuple(p.code for p in sc.allowed(n)) for n in sc.workflow.node_ids]
    first = descent_search(_ExactEstimates(sc), [tuple(0 for _ in allowed)], allowed, max_evaluations=200, seed=1,
                           screen=True)
    late = resume(first, 2_000, seed=2, deadline=0.0)
    assert (late.best, late.e2e_ms, len(late.seen)) == (first.best, first.e2e_ms, len(first.seen))
    assert len(resume(first, 2_000, seed=2).seen) > len(first.seen)


@pytest.mark.parametrize(("sc_seed", "family", "timed"), [(81, "layered", False), (82, "forkjoin", True),
                                                          (83, "random", False)])
def test_best_known_at_scale_skips_the_bound_search_and_its_bound_is_still_a_bound(
        monkeypatch: pytest.MonkeyPatch, sc_seed: int, family: str, timed: bool) -> None:
    """At scale (``BOUND_SEARCH_AT_SCALE`` off) the best-first bound search expands nothing, neither as a probe
    nor after the race: the lower bound is the largest of the empty mapping's, the Lagrangian and the
    relaxation's bounds, at most the optimum; the mapping is feasible. With it on the probe runs as before."""
    import hetsched.search.reference as ref_mod

    calls: list[object] = []
    real = ref_mod.lower_bound

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(kwargs.get("max_expansions"))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ref_mod, "lower_bound", spy)
    monkeypatch.setattr(ref_mod, "RACE_SCREENED_MIN_NODES", 8)
    sc = random_search_scenario(8, sc_seed, family=family, mode=Mode.THREE_WAY)
    opt = solve(sc, max_seconds=None).e2e_ms
    kwargs: dict[str, object] = ({"max_seconds": 1.0, "workers": 1} if timed
                                 else {"max_seconds": None, "max_evals": 2_000})
    ref = best_known(sc, seed=0, **kwargs)  # type: ignore[arg-type]
    assert calls == [0]
    assert sc.infeasibility(ref.mapping) is None
    assert ref.lower_bound_ms is not None and ref.lower_bound_ms <= opt * (1 + 1e-9) <= ref.e2e_ms * (1 + 1e-9)
    assert ref.lower_bound_ms >= root_bound_ms(sc) - 1e-9
    calls.clear()
    monkeypatch.setattr(ref_mod, "BOUND_SEARCH_AT_SCALE", True)
    best_known(sc, seed=0, max_seconds=None, max_evals=2_000)
    assert calls and calls[0] == round(ref_mod.BOUND_PROBE_SHARE * 20)
