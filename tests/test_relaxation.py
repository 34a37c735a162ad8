"""The relaxation bound (CP-SAT, the optional ``[search]`` extra) never exceeds the optimum, and
without OR-Tools the reference falls back to the other bounds and says so in its label."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tests.search_scenarios import FAMILIES, random_search_scenario
from tests.test_oracle import naive
from tests.test_sim import instances

from hetsched.bench.generate import FAMILIES as GEN_FAMILIES
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.model import Machine, Mode, Node, ReferenceKind, Scenario, ToolCard, Workflow
from hetsched.model.contention import simulate
from hetsched.model.mapping import CPU_CODE, NOW_CODE, QUEUE_CODE
from hetsched.search import reference as reference_mod
from hetsched.search import relaxation
from hetsched.search.lower_bound import dual_bound_ms
from hetsched.search.reference import best_known
from hetsched.search.relaxation import relaxation_bound_ms

needs_ortools = pytest.mark.skipif(not relaxation.available(),
                                   reason="OR-Tools (the [search] extra: pip install 'hetsched[search]') is not installed")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
scenarios = st.one_of(
    instances().map(lambda inst: inst[0]),
    st.builds(random_search_scenario, st.integers(2, 6), st.integers(0, 10_000), family=st.sampled_from(FAMILIES),
              mode=st.sampled_from(list(Mode))),
    st.builds(lambda fam, n, mode, seed: random_scenario(WorkflowSpec(fam, n, mode, seed)),
              st.sampled_from(GEN_FAMILIES), st.integers(2, 7), st.sampled_from(list(Mode)), st.integers(0, 10_000)),
)


@needs_ortools
@SETTINGS
@given(scenarios, st.floats(1.0, 3.0))
def test_relaxation_bound_never_exceeds_the_optimum(sc: Scenario, loose: float) -> None:
    """Whatever feasible E2E sets the time unit (the optimum itself or a looser one)."""
    opt = min(naive(sc).values())
    got = relaxation_bound_ms(sc, opt * loose, max_seconds=2.0)
    assert got is not None
    assert 0.0 <= got.lower_ms <= opt * (1 + 1e-9) + 1e-6


@st.composite
def stressed(draw: st.DrawFn) -> Scenario:
    """A scenario of ``scenarios`` under what the relaxation's contention terms lean on: measured CPU
    demands (some below one core, some above), every ``load_sharing``, interference up to 1, a
    budget from tight to loose, wide sibling groups (the generator's parallel and fan-out), and
    the opt-in machine terms (cold and warm-reused loads, cross-core interference)."""
    sc = draw(st.one_of(scenarios, st.builds(
        lambda fam, n, seed: random_scenario(WorkflowSpec(fam, n, Mode.THREE_WAY, seed)),
        st.sampled_from(["parallel", "fanout", "forkjoin"]), st.integers(3, 7), st.integers(0, 10_000))))
    demands = st.one_of(st.none(), st.sampled_from([0.0, 0.3, 1.0, 2.5]), st.floats(0.0, 6.0))
    cold = st.one_of(st.none(), st.floats(0.0, 3.0))
    cards = {name: card.model_copy(update={
        "cpu_demand": draw(demands),
        "load_cold_ms": None if (f := draw(cold)) is None else card.load_ms * (1.0 + f),
    }) for name, card in sc.cards.items()}
    largest = max((c.vram_mb for c in cards.values() if c.gpu_ms is not None), default=100.0)
    total = sum(c.vram_mb for c in cards.values() if c.gpu_ms is not None)
    budget = max(1.0, draw(st.floats(0.6, 1.2)) * max(largest, draw(st.floats(0.0, 1.0)) * total))
    machine = sc.machine.model_copy(update={
        "load_sharing": draw(st.sampled_from(["none", "copy", "device"])),
        "gpu_kappa": draw(st.sampled_from([0.0, 0.1, 0.3, 1.0])),
        "vram_budget_mb": budget,
        "cpu_cores": draw(st.integers(1, 8)),
        "cold_load_share": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "warm_reuse_ms": draw(st.sampled_from([0.0, 50.0, 5000.0])),
        "cross_core_slowdown": draw(st.sampled_from([0.0, 0.3])),
    })
    return Scenario(name=sc.name, mode=sc.mode, workflow=sc.workflow, cards=cards, machine=machine)


@needs_ortools
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(stressed(), st.floats(1.0, 3.0))
def test_relaxation_bound_never_exceeds_the_optimum_under_contention(sc: Scenario, loose: float) -> None:
    """The sibling-contention, VRAM-cumulative and interference terms hold for every model setting."""
    feasible = naive(sc)
    assume(feasible)
    opt = min(feasible.values())
    got = relaxation_bound_ms(sc, opt * loose, max_seconds=2.0)
    assert got is not None
    assert 0.0 <= got.lower_ms <= opt * (1 + 1e-9) + 1e-6, (got.lower_ms, opt)


@needs_ortools
@pytest.mark.parametrize("family", ["layered", "diamond", "fanout"])
def test_relaxation_is_tighter_than_the_lagrangian_bound_at_fifty_nodes(family: str) -> None:
    """Solved to optimality, the relaxation's value is min over mappings of max(its terms); the
    Lagrangian bound is a weighted relaxation of the same terms, so it is no larger."""
    sc = random_scenario(WorkflowSpec(family, 50, Mode.THREE_WAY, 7))
    upper = best_known(sc, max_evals=300, max_seconds=None).e2e_ms
    got = relaxation_bound_ms(sc, upper, max_seconds=20.0)
    assert got is not None and got.optimal
    assert dual_bound_ms(sc) * (1 - 1e-6) <= got.lower_ms <= upper


def test_without_ortools_the_reference_keeps_the_other_bounds_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relaxation, "available", lambda: False)
    monkeypatch.setattr(reference_mod, "relaxation_available", lambda: False)
    sc = random_search_scenario(30, 3, family="layered", mode=Mode.THREE_WAY)
    assert relaxation_bound_ms(sc, 1000.0) is None
    ref = best_known(sc, max_evals=200, max_seconds=None)
    assert ref.kind is ReferenceKind.BEST_KNOWN and ref.gap is not None and ref.gap > 0
    assert ref.label.endswith(f"of the lower bound; {reference_mod.NO_RELAXATION_NOTE})")


@SETTINGS
@given(stressed(), st.data())
def test_the_queue_admits_each_fifo_line_in_its_order(sc: Scenario, data: st.DataObject) -> None:
    """What the relaxation's FIFO constraints assume, checked on the simulator itself: along each
    line of ``_fifo_lines``, the nodes a mapping puts on ``gpu_queue`` are admitted in line order."""
    c = sc.compiled
    codes = tuple(data.draw(st.sampled_from(c.allowed[i])) for i in range(c.n))
    assume(c.static_ok(codes))
    got = simulate(c, codes, timings=True)
    assume(not got.deadlock)
    for line in relaxation._fifo_lines(c):
        admitted = [got.admitted[q] for q in line if codes[q] == QUEUE_CODE]
        assert admitted == sorted(admitted), (line, admitted)


@needs_ortools
@pytest.mark.parametrize("family", ["diamond", "random", "fanout"])
def test_the_second_round_never_proves_less_than_the_first(family: str) -> None:
    """The strong round is told the first round's bound, so the strong terms cannot cost the bound
    the first round (the model before them) proves in the same limit, solved or not."""
    sc = random_scenario(WorkflowSpec(family, 40, Mode.THREE_WAY, 11))
    upper = best_known(sc, max_evals=200, max_seconds=None).e2e_ms
    first = relaxation._solve(sc, upper, False, 0.3, 600.0, 0, None)
    got = relaxation_bound_ms(sc, upper, max_seconds=0.3, wall_seconds=600.0)
    assert got is not None
    assert got.lower_ms >= first.lower_ms


@needs_ortools
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(stressed(), st.builds(
    lambda fam, n, seed: random_scenario(WorkflowSpec(fam, n, Mode.THREE_WAY, seed)),
    st.sampled_from(GEN_FAMILIES), st.integers(8, 16), st.integers(0, 49))), st.data(), st.floats(1.0, 2.0),
    st.booleans())
def test_the_relaxation_never_exceeds_the_e2e_of_a_mapping_it_is_fixed_to(sc: Scenario, data: st.DataObject,
                                                                          loose: float, strong: bool) -> None:
    """Every constraint holds for the simulated schedule of every feasible mapping, so the relaxation
    with its placements fixed to one mapping proves at most that mapping's simulated E2E: a check of
    each term on one schedule at a time, cheap enough for workflows too large to solve exactly."""
    c = sc.compiled
    codes = tuple(data.draw(st.sampled_from(c.allowed[i])) for i in range(c.n))
    assume(c.static_ok(codes))
    e2e = simulate(c, codes).e2e_ms
    assume(e2e < float("inf"))
    upper = e2e * loose
    # a wall-clock cap too: on some models CP-SAT's deterministic time hardly moves (a fixed 11-node layered
    # workflow: 40,000 literals made and refuted one at a time, 0.12 deterministic s in 47 s of CPU; this
    # test took 340 s at a load of 12); a proven bound holds wherever it stops, so the property stays the same
    got = relaxation._solve(sc, upper, strong, 2.0, 5.0, 0, None, fixed=codes)
    proven_ms = got.lower_ms
    assert proven_ms <= e2e * (1 + 1e-9) + 1e-6, (proven_ms, e2e, codes)


@needs_ortools
def test_the_second_round_gets_what_the_first_left_of_the_two_rounds_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two rounds share ``2 * max_seconds`` of deterministic time: a first round that stops
    early leaves the rest of its limit to its repeat with the memory exclusion, and what both
    leave to the second (which needs more at 50-100 nodes), never more in all; a first round that
    runs out of its limit is not repeated. A second round that stops unsolved is followed by the
    probes, in ``max_seconds`` of their own, half of it at most per probe."""
    probes = [pytest.approx(0.5), pytest.approx(0.5)]
    for solved, expected in ((True, [1.0, pytest.approx(0.7), pytest.approx(1.4), *probes]),
                             (False, [1.0, pytest.approx(1.7), *probes])):
        limits: list[float] = []

        def fake(scenario: Scenario, upper_ms: float, strong: bool, max_seconds: float, *args: object,
                 solved: bool = solved, limits: list[float] = limits, **kwargs: object) -> relaxation._Round:
            limits.append(max_seconds)
            return relaxation._Round(100.0, solved and not strong, None, seconds=0.3 if not strong else max_seconds)

        monkeypatch.setattr(relaxation, "_solve", fake)
        sc = random_search_scenario(5, 3, family="layered", mode=Mode.THREE_WAY)
        got = relaxation_bound_ms(sc, 1000.0, max_seconds=1.0, wall_seconds=600.0)
        assert got is not None
        assert limits == expected


def _turns_scenario(big: int, vram_share: float) -> Scenario:
    """``big`` independent nodes of their own tools, each far too slow on the CPU and each holding
    ``vram_share`` of the budget (over half: no two fit together)."""
    cards = {f"t{k}": ToolCard(name=f"t{k}", cpu_ms=1e6, gpu_ms=100.0 + 10 * k, load_ms=50.0,
                               vram_mb=1000.0 * vram_share, gpu_util=0.3, has_gpu=True) for k in range(big)}
    workflow = Workflow(nodes=tuple(Node(id=f"n{k}", tool=f"t{k}") for k in range(big)), edges=())
    machine = Machine(name="turns", cpu_cores=4, vram_budget_mb=1000.0, gpu_kappa=0.0)
    return Scenario(name=f"turns-{big}", mode=Mode.THREE_WAY, workflow=workflow, cards=cards, machine=machine)


@needs_ortools
@pytest.mark.parametrize("big", [2, 3, 4])
def test_tools_that_do_not_fit_together_hold_the_memory_in_turn(big: int) -> None:
    """No two of the tools fit: whichever is resident, the others are queued after it leaves, each
    loading and running alone, so the optimum is the sum of their holding times. The VRAM x time
    term alone sees only 0.6 of it (each holds 0.6 of the budget); the memory exclusion term sees
    it all, in the first round already (the second's cumulative VRAM sees it too, at more cost),
    and the bound still never exceeds the optimum (exact search)."""
    sc = _turns_scenario(big, 0.6)
    opt = min(naive(sc).values())
    upper = opt * 1.5
    first = relaxation._solve(sc, upper, False, 2.0, 600.0, 0, None)  # the small round has no cumulative VRAM
    assert first.lower_ms >= opt * 0.99, (first.proven, opt)
    got = relaxation_bound_ms(sc, upper, max_seconds=2.0)
    assert got is not None
    assert opt * 0.99 <= got.lower_ms <= opt * (1 + 1e-9) + 1e-6, (got.lower_ms, opt)



@needs_ortools
@pytest.mark.parametrize("family", ["parallel", "layered"])
def test_the_bound_does_not_move_with_the_upper_bound_it_is_handed(family: str) -> None:
    """The time unit is 2^-20 of the power of two at or above the upper bound, so two upper bounds
    within one power of two build the same coefficients: a solved relaxation proves the same bound
    (a unit of ``upper_ms / 2^20`` rounded every duration differently for every better mapping)."""
    sc = random_scenario(WorkflowSpec(family, 30, Mode.THREE_WAY, 5))
    upper = best_known(sc, max_evals=300, max_seconds=None).e2e_ms
    power = 2.0 ** math.ceil(math.log2(upper))
    other = min(upper * 1.3, power)  # a looser upper bound (still feasible) in the same power of two
    assert relaxation._unit_ms(other) == relaxation._unit_ms(upper) == power / 2**20
    got = [relaxation_bound_ms(sc, value, max_seconds=2.0, wall_seconds=600.0) for value in (upper, other)]
    assert got[0] is not None and got[1] is not None
    assert got[0].optimal and got[1].optimal
    assert got[0].lower_ms == got[1].lower_ms
    assert 0.0 < got[0].lower_ms <= upper


def _heavy_pair_scenario() -> Scenario:
    """Two heavy GPU sources (1,000 ms, ``gpu_util`` 1) and six light ones (``gpu_util`` 0.1, longer
    GPU work, 1 ms on the CPU): the light ones are among the siblings still computing at every level
    of the heavy ones' work, so lines built on the k smallest utilisations see 0.2 where the two
    heavy ones put 2 on the GPU."""
    cards = {"heavy": ToolCard(name="heavy", cpu_ms=1e6, gpu_ms=1000.0, load_ms=50.0, vram_mb=100.0, gpu_util=1.0,
                               has_gpu=True),
             "light": ToolCard(name="light", cpu_ms=1.0, gpu_ms=2000.0, load_ms=50.0, vram_mb=100.0, gpu_util=0.1,
                               has_gpu=True)}
    nodes = tuple(Node(id=f"h{k}", tool="heavy") for k in range(2)) + tuple(Node(id=f"l{k}", tool="light")
                                                                          for k in range(6))
    machine = Machine(name="pair", cpu_cores=8, vram_budget_mb=1000.0, gpu_kappa=0.3)
    return Scenario(name="heavy-pair", mode=Mode.THREE_WAY, workflow=Workflow(nodes=nodes, edges=()), cards=cards,
                    machine=machine)


@needs_ortools
def test_the_sibling_slowdown_is_the_product_of_the_utilisation_and_the_interference() -> None:
    """Two heavy ``gpu_now`` siblings run side by side at ``max(1, U) (1 + kappa (k - 1))`` = 2 x 1.3:
    each ends at 2,600 ms. The secant lines alone bound the kappa part by the two smallest
    utilisations of the siblings still computing (the light ones, on the CPU: 0.2), 2.3 in all; the
    product of ``max(1, U)`` and the count sees 2.6, and the bound stays below the simulated E2E."""
    sc = _heavy_pair_scenario()
    c = sc.compiled
    codes = tuple(NOW_CODE if c.names[i].startswith("h") else CPU_CODE for i in range(c.n))
    e2e = simulate(c, codes).e2e_ms
    assert e2e == pytest.approx(2600.0)
    got = relaxation._solve(sc, e2e * 1.2, True, 2.0, 600.0, 0, None, fixed=codes)
    assert e2e * 0.99 <= got.lower_ms <= e2e * (1 + 1e-9) + 1e-6, (got.lower_ms, e2e)


@needs_ortools
@SETTINGS
@given(stressed(), st.floats(1.0, 3.0), st.floats(0.5, 0.999))
def test_a_probe_never_caps_the_optimum_away(sc: Scenario, loose: float, start: float) -> None:
    """A probe proves ``T > cap`` when its model has no solution with every time at most the cap:
    a cap at the optimum's image never is infeasible, and probes climbing from a share ``start`` of
    the optimum (a valid bound; every cap a proof or a solved model) end at most at the optimum
    (exact search). The climb starts there, not at one unit: from one unit it took ~550 probes (one
    unit at a time up to 50, then 2% steps: ~470 at six nodes, 2-3 s each) through caps far below any bound, the same proofs the
    relaxation's LP already gives, and most of this file's time."""
    opt = min(naive(sc).values())
    upper = opt * loose
    u = relaxation._unit_ms(upper)
    at = relaxation._solve(sc, upper, True, 2.0, 600.0, 0, None, cap_units=math.ceil(opt / u))
    assert not at.infeasible
    assert at.found is not None and at.found <= math.ceil(opt / u)
    assert at.lower_ms <= opt * (1 + 1e-9) + 1e-6
    floor = float(max(1, math.floor(start * opt / u)))
    climbed = relaxation._probe(sc, upper, relaxation._Round(floor, False, None), None, 2.0, math.inf)
    assert (climbed.proven - 1.0) * u <= opt * (1 + 1e-9) + 1e-6, (climbed, opt)


@needs_ortools
def test_probes_raise_the_bound_where_the_second_round_stops_unsolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a 30-node parallel workflow the whole model stops at 0.2 s unsolved (its LP bound, 3,846
    ms); the probes, in their own deterministic time, prove caps above it and solve the capped
    model: the relaxation's optimum, 3,908 ms, and still below a mapping's E2E; the same twice for the same
    deterministic limit."""
    sc = random_scenario(WorkflowSpec("parallel", 30, Mode.THREE_WAY, 4))
    upper = best_known(sc, max_evals=300, max_seconds=None).e2e_ms
    got = relaxation_bound_ms(sc, upper, max_seconds=0.2, wall_seconds=600.0)
    # deterministic limits alone (the wall-clock cap far off): the same bound and solution again, probes included
    again = relaxation_bound_ms(sc, upper, max_seconds=0.2, wall_seconds=600.0)
    assert got is not None and again is not None
    assert (again.lower_ms, again.optimal, again.codes) == (got.lower_ms, got.optimal, got.codes)
    monkeypatch.setattr(relaxation, "_PROBE_SHARE", 0.0)
    without = relaxation_bound_ms(sc, upper, max_seconds=0.2, wall_seconds=600.0)
    assert got is not None and without is not None
    assert not without.optimal
    assert got.optimal
    assert got.lower_ms > without.lower_ms * 1.01, (got.lower_ms, without.lower_ms)
    assert got.lower_ms <= upper


@needs_ortools
def test_the_relaxations_first_round_leaves_the_whole_model_half_of_the_wall_clock_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first (small) round may take at most ``_FIRST_ROUND_WALL_SHARE`` of the wall-clock cap, so the whole
    model gets a round when the cap binds (at 50 tools on a loaded machine the first round had taken all of it,
    unsolved); every round stays within the cap, and the bound is still at most the optimum."""
    walls: list[float] = []
    real = relaxation._solve

    def spy(*args: object, **kwargs: object) -> object:
        walls.append(args[4])  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(relaxation, "_solve", spy)
    sc = random_search_scenario(6, 31, family="layered", mode=Mode.THREE_WAY)
    opt = min(e for e in naive(sc).values() if e < math.inf)
    cap = 3.0
    got = relaxation_bound_ms(sc, 1.5 * opt, max_seconds=1.0, wall_seconds=cap)
    assert got is not None and got.lower_ms <= opt * (1 + 1e-9)
    assert walls and walls[0] <= relaxation._FIRST_ROUND_WALL_SHARE * cap < cap
    assert all(w <= cap for w in walls)
