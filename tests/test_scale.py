"""Scale and generalization (issue 11): the random workflow generator, the monitor's incremental
planning (same answers as the plain definition), the probe budget rule, the rules decider's
model and its use of evidence, the feasibility guards, and the scale / random bench suites.

Instances are small (CI time); the full studies are ``hetsched bench --suite scale|random``."""

from __future__ import annotations

import itertools
import math
import random
import zlib
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow, run_cli

from hetsched.bench.generate import FAMILIES, KAPPA_RANGE, WorkflowSpec, base_tools, random_scenario
from hetsched.bench.spec import PolicySpec
from hetsched.bench.suites import (
    SuiteConfig,
    random_table,
    random_workflows,
    read_suite_runs,
    run_suite,
    scale_tables,
    scale_workflows,
    write_suite_report,
)
from hetsched.cli import main
from hetsched.deciders.estimate import (
    INTERFERENCE_GRID,
    LOCAL_FIT_STEPS,
    Estimator,
    fit_interference,
    fit_interference_local,
)
from hetsched.deciders.evidence import Evidence
from hetsched.deciders.rules import (
    CONTINUE_STRONGER_KICKS,
    SCREEN_CONTINUE_LATER,
    SCREEN_EVALUATIONS_FIRST,
    SCREEN_EVALUATIONS_LATER,
    SCREEN_EXCHANGE_FIRST_3W,
    SCREEN_KICKS_FIRST,
    SCREEN_LATE_FIRST,
    SCREEN_MIN_NODES,
    SCREEN_MORE_KICKS_FIRST_BIN,
    SCREEN_NODES_PER_EVALUATION_ROOT,
    SCREEN_POLISH_FIRST_SHARE,
    RulesDecider,
)
from hetsched.deciders.search import (
    EXCHANGE_IN,
    EXCHANGE_OUT,
    LATE_QUEUE_RATIOS,
    SearchResult,
    _race,
    _Search,
    focus,
    late_starts,
    local_search,
    resume,
)
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import (
    InputError,
    Mapping,
    Mode,
    Placement,
    Probe,
    Proposal,
    RoundRecord,
    Scenario,
    Trace,
)
from hetsched.model.mapping import CPU_CODE, NOW_CODE, PLACEMENTS, QUEUE_CODE
from hetsched.model.workload import Workload
from hetsched.monitor import Monitor, MonitorConfig, critical_path
from hetsched.monitor.static import StaticCheck
from hetsched.policies import make_policy
from hetsched.policies.greedy_mem import GreedyMem, greedy_placements
from hetsched.search.oracle import solve
from hetsched.sim import Simulator
from hetsched.store import RunStore

C, G, Q = Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE


def spec_strategy(max_n: int = 12) -> st.SearchStrategy[WorkflowSpec]:
    return st.builds(
        WorkflowSpec,
        family=st.sampled_from(FAMILIES),
        n=st.integers(1, max_n),
        mode=st.sampled_from([Mode.BINARY, Mode.THREE_WAY]),
        seed=st.integers(0, 10_000),
    )


# ---------------------------------------------------------------------------- the generator
@settings(max_examples=60, deadline=None)
@given(spec_strategy(30))
def test_generated_workflows_follow_their_spec(spec: WorkflowSpec) -> None:
    sc = random_scenario(spec)
    assert sc == random_scenario(spec)  # deterministic
    wf = sc.workflow
    assert len(wf.nodes) == spec.n and sc.mode is spec.mode
    if spec.family == "chain":
        assert len(wf.edges) == spec.n - 1 and len(wf.sinks) == 1
    if spec.family == "parallel":
        assert not wf.edges
    if spec.family == "fanout" and spec.n > 1:
        assert wf.sources == (wf.node_ids[0],) and len(wf.sinks) == spec.n - 1
    gpu = [c.vram_mb for c in sc.cards.values() if c.has_gpu]
    if gpu:  # every tool fits alone; the budget never exceeds what all of them need together
        assert max(gpu) - 0.05 <= sc.machine.vram_budget_mb <= sum(gpu) + 0.05
    assert KAPPA_RANGE[0] <= sc.machine.gpu_kappa <= KAPPA_RANGE[1]
    library = base_tools()
    for card in sc.cards.values():  # drawn around a library tool, amplified like the library's _xK
        base = library[card.base or ""]
        assert card.has_gpu == base.has_gpu and card.cpu_threads == base.cpu_threads
        ratio = card.cpu_ms / (base.cpu_ms * card.amplification)
        assert 0.2 < ratio < 5


def test_generator_covers_every_family_and_refuses_bad_specs() -> None:
    names = {random_scenario(WorkflowSpec(f, 8, Mode.THREE_WAY, 1)).name for f in FAMILIES}
    assert len(names) == len(FAMILIES)
    assert random_scenario(WorkflowSpec("layered", 8, Mode.THREE_WAY, 1)) != random_scenario(
        WorkflowSpec("layered", 8, Mode.THREE_WAY, 2))
    with pytest.raises(InputError, match="unknown workflow family 'tree'; accepted: chain"):
        random_scenario(WorkflowSpec("tree", 5, Mode.BINARY, 0))
    with pytest.raises(InputError, match="at least one node"):
        random_scenario(WorkflowSpec("chain", 0, Mode.BINARY, 0))


# ---------------------------------------------------------------------------- incremental static checks
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_strategy(24), st.integers(0, 2**31))
def test_incremental_check_agrees_with_the_scenario(spec: WorkflowSpec, seed: int) -> None:
    sc = random_scenario(spec)
    check = StaticCheck(sc)
    rng = random.Random(seed)
    allowed = [tuple(p.code for p in sc.allowed(n)) for n in sc.workflow.node_ids]
    for _ in range(8):
        base = tuple(rng.choice(a) for a in allowed)
        around = check.around(base)
        for _ in range(12):
            idx = rng.sample(range(spec.n), min(spec.n, rng.choice([1, 2])))
            changes = tuple((i, rng.choice(allowed[i])) for i in idx)
            codes = list(base)
            for i, c in changes:
                codes[i] = c
            reason = sc.infeasibility(check.mapping(codes))
            assert around.kind(changes) == (None if reason is None else reason.kind)


# ---------------------------------------------------------------------------- the monitor's plan
def _reference_plan(sc: Scenario, history: Sequence[RoundRecord], cfg: MonitorConfig) -> list[tuple[str, str]]:
    """The documented probe ranking (docs/agentic.md), written plainly with Mappings and
    Scenario.infeasibility, as the monitor computed it before it went incremental."""
    order = sc.workflow.node_ids
    topo = {n: i for i, n in enumerate(sc.workflow.topo_order)}
    runs: list[tuple[Trace, bool]] = []
    for h in history:
        runs += [(p.trace, True) for p in h.probes] + [(h.trace, False)]
    measured: dict[Mapping, list[Trace]] = {}
    for t, _ in runs:
        if t.feasible:
            measured.setdefault(t.mapping, []).append(t)
    if measured:
        base = min(measured, key=lambda m: sum(t.e2e_ms or 0.0 for t in measured[m]) / len(measured[m]))
        base_trace: Trace | None = measured[base][-1]
    else:
        base = next(t.mapping for t, probe in reversed(runs) if not probe)
        base_trace = None
    executed = {t.mapping: t for t, _ in runs}
    pairs = {(n, nt.placement) for t, _ in runs if t.feasible for n, nt in t.nodes.items()}
    crit = set(critical_path(base_trace, sc)) if base_trace is not None else set()

    def lat(n: str) -> float:
        return base_trace.latency_ms(n) if base_trace is not None else 0.0

    moves = [(n, p) for n in order for p in sc.allowed(n) if p is not base[n]]
    moves.sort(key=lambda np: (np in pairs, np[0] not in crit, -lat(np[0]), topo[np[0]], np[1].code))
    out: list[tuple[str, str]] = []
    seen: set[Mapping] = set()
    for node, target in moves:
        m = base.moved(node, target)
        if m in executed:
            reason = executed[m].infeasibility
        else:
            reason = sc.infeasibility(m)
            if reason is None and cfg.reprobe and m not in seen:
                seen.add(m)
                out.append(("reprobe", m.code(order)))
        if reason is None or not cfg.swap or base_trace is None or reason.kind.value in ("never_admissible", "deadlock"):
            continue
        partners = sorted((m2 for m2 in order if m2 != node and base[m2] is target), key=lambda m2: (lat(m2), topo[m2]))
        for p2 in partners:
            variants = []
            if target is G and base[node] is not Q and Q in sc.allowed(p2):
                variants.append(base.moved(node, target).moved(p2, Q))
            if base[node] in sc.allowed(p2):
                variants.append(base.moved(node, target).moved(p2, base[node]))
            for s in variants:
                if s in executed or s in seen or sc.infeasibility(s) is not None:
                    continue
                seen.add(s)
                out.append(("swap", s.code(order)))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_strategy(9), st.lists(st.integers(0, 2**31), min_size=1, max_size=4), st.booleans())
def test_incremental_plan_equals_the_documented_ranking(spec: WorkflowSpec, picks: list[int], probe: bool) -> None:
    sc = random_scenario(spec)
    sim = Simulator(sc)
    allowed = [sc.allowed(n) for n in sc.workflow.node_ids]
    history: list[RoundRecord] = []
    mon = Monitor(sc)
    for r, pick in enumerate(picks):
        rng = random.Random(pick)
        m = Mapping((n, rng.choice(a)) for n, a in zip(sc.workflow.node_ids, allowed, strict=True))
        probes: tuple[Probe, ...] = ()
        if probe and history:
            request = mon.next_probe(history, ())
            if request is not None:
                probes = (Probe(request.kind, request.base, sim.run(request.mapping, seed=r), request.note),)
        history.append(RoundRecord(r, Proposal(m), sim.run(m, seed=100 + r), probes))
        got = [(c.kind, c.mapping.code()) for c in Monitor(sc).plan(history)]
        assert got == _reference_plan(sc, history, MonitorConfig())
        assert [(c.kind, c.mapping.code()) for c in mon.plan(history)] == got  # the cached monitor too


def test_round_probe_budget_scales_with_the_workflow() -> None:
    cfg = MonitorConfig()
    assert [cfg.round_budget(n) for n in (4, 10, 20, 21, 50, 100)] == [2, 2, 2, 3, 5, 10]
    assert [cfg.run_budget(n) for n in (4, 100)] == [12, 300]
    assert MonitorConfig(probes_per_round=1).round_budget(100) == 1
    sc = random_scenario(WorkflowSpec("layered", 30, Mode.THREE_WAY, 2))
    result = run_rounds(sc, make_policy("agentic", decider="argmin"), LoopConfig(rounds=4, seed=0))
    spent = [len(r.probes) for r in result.rounds]
    assert spent[0] == 0 and all(k <= 3 for k in spent) and max(spent) == 3
    for rec in result.rounds:
        budget = [o for o in rec.proposal.decision.observations if o["kind"] == "budget"]  # type: ignore[union-attr]
        assert budget and budget[0]["per_round"] == 3 and budget[0]["per_run"] == 90
        checks = [o for o in rec.proposal.decision.observations  # type: ignore[union-attr]
                  if o["kind"] == "infeasible" and o["source"] == "budget check"]
        assert len(checks) <= MonitorConfig().max_budget_checks


# ---------------------------------------------------------------------------- the rules decider's model
def test_interference_is_fitted_from_measurements_not_read() -> None:
    """The machine block declares 0.1; the world's GPU interferes at 0.23: the fit finds 0.23."""
    wf = make_workflow([(n, f"t{n}") for n in "ABCD"])
    cards = [make_card(f"t{n}", 300.0 + 40 * i, 40.0 + 9 * i, gpu_util=0.5 + 0.1 * i) for i, n in enumerate("ABCD")]
    sc = make_scenario(wf, cards, gpu_kappa=0.1)
    world = make_scenario(wf, cards, gpu_kappa=0.23)
    sim = Simulator(world, noise=False)
    measured = []
    for code in ("GGGG", "GGGC", "GCGC", "CGGG"):
        codes = tuple(PLACEMENTS.index(Placement.of_letter(ch)) for ch in code)
        e2e = sim.e2e(Mapping(zip("ABCD", (Placement.of_letter(ch) for ch in code), strict=True)))
        assert e2e is not None
        measured.append((codes, e2e))
    kappa, rms = fit_interference(Estimator(sc, 0.0), measured, prior=0.1)
    assert kappa == pytest.approx(0.23, abs=0.005) and rms < 1e-3
    assert fit_interference(Estimator(sc, 0.0), [], prior=0.1) == (0.1, 0.0)
    # nothing ran two GPU tasks at once: the measurements cannot tell, the prior stands
    alone = [(tuple(PLACEMENTS.index(Placement.of_letter(ch)) for ch in "GCCC"), measured[0][1])]
    assert fit_interference(Estimator(sc, 0.0), alone, prior=0.1)[0] == 0.1


def _four_tools(world_kappa: float) -> tuple[Scenario, list[tuple[tuple[int, ...], float]]]:
    """Four GPU tools in parallel, the machine block declaring 0.1, and what four mappings measure in a
    world whose GPU interferes at ``world_kappa`` (noise-free)."""
    wf = make_workflow([(n, f"t{n}") for n in "ABCD"])
    cards = [make_card(f"t{n}", 300.0 + 40 * i, 40.0 + 9 * i, gpu_util=0.5 + 0.1 * i) for i, n in enumerate("ABCD")]
    sim = Simulator(make_scenario(wf, cards, gpu_kappa=world_kappa), noise=False)
    measured = []
    for code in ("GGGG", "GGGC", "GCGC", "CGGG"):
        e2e = sim.e2e(Mapping(zip("ABCD", (Placement.of_letter(ch) for ch in code), strict=True)))
        assert e2e is not None
        measured.append((tuple(PLACEMENTS.index(Placement.of_letter(ch)) for ch in code), e2e))
    return make_scenario(wf, cards, gpu_kappa=0.1), measured


@pytest.mark.parametrize("start", [0.0, 0.1, 0.5, 1.0])
def test_local_fit_finds_the_interference_from_any_start_in_a_few_estimates(start: float) -> None:
    """The large workflows' fit: from wherever it starts it finds the world's 0.23 within a lattice
    step, trying at most its probe, its steps and the prior per measured mapping."""
    sc, measured = _four_tools(0.23)
    memo: dict[tuple[float, tuple[int, ...]], float] = {}
    kappa, rms = fit_interference_local(Estimator(sc, 0.0), measured, start, prior=0.1, step=0.005, memo=memo)
    assert kappa == pytest.approx(0.23, abs=0.005) and rms < 2e-3
    assert len(memo) <= (3 + LOCAL_FIT_STEPS) * len(measured)
    assert fit_interference_local(Estimator(sc, 0.0), [], start, prior=0.1) == (0.1, 0.0)
    # nothing ran two GPU tasks at once: the measurements cannot tell, the prior stands (as in the full fit)
    alone = [(tuple(PLACEMENTS.index(Placement.of_letter(ch)) for ch in "GCCC"), measured[0][1])]
    assert fit_interference_local(Estimator(sc, 0.0), alone, start, prior=0.1)[0] == 0.1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=spec_strategy(10), world=st.sampled_from(INTERFERENCE_GRID), start=st.floats(0.0, 1.0),
       picks=st.lists(st.integers(0, 2**30), min_size=1, max_size=3))
def test_local_fit_never_ends_worse_than_its_start_and_stays_on_its_lattice(
    spec: WorkflowSpec, world: float, start: float, picks: list[int]
) -> None:
    """On unseen workflows and measurements: the answer is a lattice point in [0, the grid's top] (or
    the prior), its error is the one the full definition gives there, and no larger than at the
    (snapped) start."""
    sc = random_scenario(spec)
    c = sc.compiled
    world_sim = Simulator(sc.model_copy(update={"machine": sc.machine.model_copy(update={"gpu_kappa": world})}),
                          noise=False)
    measured = []
    for pick in picks:
        rng = random.Random(pick)
        codes = tuple(rng.choice(a) for a in c.allowed)
        e2e = world_sim.e2e(c.mapping(codes)) if c.static_ok(codes) else None
        if e2e is not None and math.isfinite(e2e) and e2e > 0:
            measured.append((codes, e2e))
    if not measured:
        return
    est, prior, step = Estimator(sc, 0.0), sc.machine.gpu_kappa, 0.005

    def error(k: float) -> float:
        e = est.with_interference(k)
        return math.sqrt(sum(math.log(e.e2e(codes) / m) ** 2 for codes, m in measured) / len(measured))

    kappa, rms = fit_interference_local(est, measured, start, prior=prior, step=step)
    assert kappa == prior or (0.0 <= kappa <= INTERFERENCE_GRID[-1] and round(kappa / step, 6) % 1 == 0)
    assert rms == pytest.approx(error(kappa), abs=1e-8)
    snapped = min(INTERFERENCE_GRID[-1], max(0.0, round(round(start / step) * step, 6)))
    assert rms <= error(snapped) + 1e-8


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=spec_strategy(12), kappa=st.sampled_from(INTERFERENCE_GRID), picks=st.lists(st.integers(0, 2**30),
       min_size=1, max_size=4), under_load=st.booleans())
def test_one_simulation_gives_the_estimate_and_the_latencies(
    spec: WorkflowSpec, kappa: float, picks: list[int], under_load: bool
) -> None:
    """What the large workflows' fit keeps for the next calibration pass: ``e2e_latencies`` is exactly
    ``(e2e, latencies)``, with a workload window too (where the E2E is the window's p95)."""
    sc = random_scenario(spec)
    if under_load:
        sc = sc.with_workload(Workload.closed(2, requests=4))
    est = Estimator(sc, kappa)
    assert (est.window is not None) == under_load
    for pick in picks:
        rng = random.Random(pick)
        codes = tuple(rng.choice(a) for a in sc.compiled.allowed)
        assert est.e2e_latencies(codes) == (est.e2e(codes), est.latencies(codes))


def test_search_is_exhaustive_when_the_space_fits_and_deterministic_otherwise() -> None:
    sc = random_scenario(WorkflowSpec("diamond", 8, Mode.THREE_WAY, 5))
    est = Estimator(sc, sc.machine.gpu_kappa)
    allowed = [tuple(p.code for p in sc.allowed(n)) for n in sc.workflow.node_ids]
    start = tuple(0 for _ in allowed)
    full = local_search(est, [start], allowed, max_evaluations=10**5)
    assert full.exhaustive and full.e2e_ms == pytest.approx(solve(sc, ranking=False).e2e_ms, rel=1e-9)
    assert math.prod(len(a) for a in allowed) > 300
    a = local_search(est, [start], allowed, max_evaluations=300, seed=7)
    b = local_search(est, [start], allowed, max_evaluations=300, seed=7)
    assert not a.exhaustive and (a.best, a.e2e_ms) == (b.best, b.e2e_ms) and len(a.seen) <= 300 + len(allowed) * 3
    assert a.e2e_ms <= min(a.seen.values()) and a.e2e_ms >= full.e2e_ms


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 30), three_way=st.booleans(),
       seed=st.integers(0, 10_000))
def test_screened_search_stays_in_budget_and_is_seeded(family: str, n: int, three_way: bool, seed: int) -> None:
    """The large-workflow search: its focus is a set of the workflow's nodes that holds the sink that
    ends last; within its budget it returns the lowest estimate it saw, no worse than any start, the
    same for the same seed, and says what it spent."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    est = Estimator(sc, sc.machine.gpu_kappa)
    c = sc.compiled
    starts = [tuple(0 for _ in range(n))] + [u for p in (1, 2) if c.static_ok(u := tuple(
        p if p in a else 0 for a in c.allowed))]
    tm = est.timings(starts[0])
    assert tm is not None
    order = focus(c, starts[0], tm)
    assert len(set(order)) == len(order) and set(order) <= set(range(n))
    last = max(tm.end[s] for s in c.sinks)
    assert any(tm.end[s] == last for s in order if s in c.sinks)
    budget = 60
    a = local_search(est, starts, c.allowed, max_evaluations=budget, seed=3, screen=True)
    b = local_search(est, starts, c.allowed, max_evaluations=budget, seed=3, screen=True)
    assert (a.best, a.e2e_ms, list(a.seen)) == (b.best, b.e2e_ms, list(b.seen))
    assert len(a.seen) <= budget and a.screened and a.budget == budget
    # the lowest it saw, up to the 1e-12 a descent needs to call a move an improvement
    assert min(a.seen.values()) <= a.e2e_ms <= min(a.seen.values()) * (1 + 1e-12)
    assert a.e2e_ms <= min(a.seen[s] for s in starts)
    assert a.spent().startswith(f"{len(a.seen)} mappings estimated of a budget of {budget}")
    # with a budget every descent converges in (each start's share of the race's first phase at least
    # what its descent alone costs), the race is no worse than any start's own descent
    own = {s: _fresh_descent(est, c.allowed, s) for s in starts}
    phases = math.ceil(math.log2(len(starts))) + 1
    ample = phases * len(starts) * max(len(seen) for seen in own.values())
    search = _Search(est, c.allowed, ample, 3, screen=True)
    ranked = sorted(starts, key=lambda s: (search.value(s), s))
    assert _race(search, ranked, ample)[1] <= min(min(seen.values()) for seen in own.values()) * (1 + 1e-12)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 26), three_way=st.booleans(),
       seed=st.integers(0, 10_000), race=st.integers(20, 120), extra=st.integers(1, 300))
def test_screened_search_with_a_fixed_race_only_gains_from_more_kicks(
        family: str, n: int, three_way: bool, seed: int, race: int, extra: int) -> None:
    """Round 0's larger budget goes to the kicks, the race's share fixed: the search then repeats the
    smaller budget's estimates and goes on, so it never returns a higher estimate; both answers fit
    the VRAM budget (a screened search never proposes a ``gpu_now`` set over it) and stay in budget."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    small, large = 2 * race, 2 * race + extra
    a = local_search(est, comp.starts, comp.allowed, max_evaluations=small, seed=5, screen=True,
                     race_evaluations=race)
    b = local_search(est, comp.starts, comp.allowed, max_evaluations=large, seed=5, screen=True,
                     race_evaluations=race)
    assert b.e2e_ms <= a.e2e_ms and len(a.seen) <= small and len(b.seen) <= large
    assert list(b.seen)[: len(a.seen)] == list(a.seen)  # the same estimates first, in the same order
    for found in (a, b):
        assert sc.compiled.static_ok(found.best) and math.isfinite(found.e2e_ms)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 30), seed=st.integers(0, 10_000))
def test_screened_binary_kicks_evict_a_resident_tool_whole(family: str, n: int, seed: int) -> None:
    """A screened binary search's kicks include the eviction of one resident tool, every one of its
    ``gpu_now`` nodes to the CPU and nothing else moved (the room a descent refills with several small
    tools); a three-way or an unscreened search (tables under 17 tools) never makes that kick."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.BINARY, seed))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    cur = local_search(est, comp.starts, comp.allowed, max_evaluations=60, seed=1, screen=True).best
    tool = sc.compiled.tool_idx
    resident = {tool[j] for j, p in enumerate(cur) if p == NOW_CODE}
    search = _Search(est, comp.allowed, 10**6, seed, screen=True)
    assert search.eject
    evictions = 0
    for _ in range(200):
        kicked = search.kick(cur)
        moved = [j for j in range(n) if kicked[j] != cur[j]]
        if moved and {tool[j] for j in moved} <= resident and all(kicked[j] == CPU_CODE for j in moved):
            t = tool[moved[0]]
            if moved == [j for j in range(n) if tool[j] == t and cur[j] == NOW_CODE]:
                evictions += 1
    assert evictions > 0 or not resident
    three_way = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY, seed))
    allowed = RulesDecider()._compile(three_way).allowed
    assert not _Search(Estimator(three_way), allowed, 100, seed, screen=True).eject
    assert not _Search(est, comp.allowed, 100, seed, screen=False).eject


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 32), seed=st.integers(0, 10_000))
def test_screened_binary_kicks_exchange_work_between_the_devices(family: str, n: int, seed: int) -> None:
    """A screened binary search's kicks include exchanges: up to ``EXCHANGE_OUT`` ``gpu_now`` nodes to the CPU
    and up to ``EXCHANGE_IN`` CPU nodes to ``gpu_now`` in one kick, more nodes than any other kick moves (2-4
    nodes, or one tool's), both ways at once when the mapping has nodes on both sides; every kick's mapping
    fits the VRAM budget when an exchange made it, only allowed placements; the same seed draws the same kicks."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.BINARY, seed))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    cur = local_search(est, comp.starts, comp.allowed, max_evaluations=60, seed=1, screen=True).best
    tool = sc.compiled.tool_idx
    movable_up = [j for j in range(n) if cur[j] == CPU_CODE and NOW_CODE in comp.allowed[j]
                  and math.isfinite(est.gpu_ms[j])]
    movable_down = [j for j in range(n) if cur[j] == NOW_CODE and CPU_CODE in comp.allowed[j]]
    search, twin = (_Search(est, comp.allowed, 10**6, seed, screen=True) for _ in range(2))
    wide = 0
    for _ in range(300):
        kicked = search.exchange(cur)
        assert kicked == twin.exchange(cur)
        down = [j for j in range(n) if cur[j] == NOW_CODE and kicked[j] == CPU_CODE]
        up = [j for j in range(n) if cur[j] == CPU_CODE and kicked[j] == NOW_CODE]
        assert len(down) + len(up) == sum(1 for j in range(n) if kicked[j] != cur[j])
        assert len(down) <= EXCHANGE_OUT[1] and len(up) <= EXCHANGE_IN[1]
        assert sc.compiled.static_ok(kicked) or not up
        assert all(p in a for p, a in zip(kicked, comp.allowed, strict=True))
        assert set(up) <= set(movable_up) and set(down) <= set(movable_down)
        if down and len(up) >= 2:
            wide += 1
    # the kicks as the search draws them: exchanges among them (nodes both ways, several tools; a share of
    # EXCHANGE_KICK_SHARE of the kicks is drawn as above, so where a tenth of those exchanges is that wide,
    # 300 kicks without one would be a one-in-ten-thousand event)
    mixed = 0
    for _ in range(300):
        kicked = search.kick(cur)
        moved = [j for j in range(n) if kicked[j] != cur[j]]
        down = [j for j in moved if cur[j] == NOW_CODE and kicked[j] == CPU_CODE]
        up = [j for j in moved if cur[j] == CPU_CODE and kicked[j] == NOW_CODE]
        if down and len(up) >= 2 and len({tool[j] for j in moved}) > 1:
            mixed += 1
    if len(movable_up) >= 4 and movable_down:
        assert wide > 0
    if wide >= 30:
        assert mixed > 0
    three_way = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY, seed))
    comp3 = RulesDecider()._compile(three_way)
    other = _Search(Estimator(three_way), comp3.allowed, 100, seed, screen=False)
    for _ in range(100):  # unscreened kicks are as before: at most 4 nodes or one tool's
        kicked = other.kick(comp3.rules)
        moved = [j for j in range(n) if kicked[j] != comp3.rules[j]]
        assert len(moved) <= 4 or len({three_way.compiled.tool_idx[j] for j in moved}) == 1


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 32), seed=st.integers(0, 10_000))
def test_screened_three_way_kicks_exchange_work_between_the_cpu_and_the_gpu(family: str, n: int, seed: int) -> None:
    """A screened three-way search's kicks include exchanges between the CPU and the GPU: GPU nodes
    (``gpu_now`` or ``gpu_queue``) to the CPU and CPU nodes to the GPU in one kick, either way round (up to
    ``EXCHANGE_OUT`` one way and ``EXCHANGE_IN`` the other), no node moved between ``gpu_now`` and ``gpu_queue``;
    a promoted node goes to ``gpu_now`` exactly where its tool stays resident (or the queue is not allowed),
    else it queues; every kick is a valid mapping (the ``gpu_now`` set fits the VRAM budget, every queued node
    fits alone, placements allowed); the same seed draws the same kicks. The binary-only eviction kick stays off."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY, seed))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    cur = local_search(est, comp.starts, comp.allowed, max_evaluations=60, seed=1, screen=True).best
    tool = sc.compiled.tool_idx
    found = local_search(est, comp.starts, comp.allowed, max_evaluations=60, seed=1, screen=True,
                         exchange_evaluations=20)
    assert found.state is not None and found.state.exchange_3w  # its exchange phase, and the continuations
    movable_up = [j for j in range(n) if cur[j] == CPU_CODE and math.isfinite(est.gpu_ms[j])
                  and set(comp.allowed[j]) - {CPU_CODE}]
    movable_down = [j for j in range(n) if cur[j] != CPU_CODE and CPU_CODE in comp.allowed[j]]
    search, twin = (_Search(est, comp.allowed, 10**6, seed, screen=True) for _ in range(2))
    assert not search.exchange_3w and not search.eject  # until a search's exchange phase
    search.exchange_3w = twin.exchange_3w = True
    many_in = many_out = 0
    for _ in range(300):
        kicked = search.exchange(cur)
        assert kicked == twin.exchange(cur)
        down = [j for j in range(n) if cur[j] != CPU_CODE and kicked[j] == CPU_CODE]
        up = [j for j in range(n) if cur[j] == CPU_CODE and kicked[j] != CPU_CODE]
        assert len(down) + len(up) == sum(1 for j in range(n) if kicked[j] != cur[j])
        assert max(len(down), len(up)) <= max(EXCHANGE_OUT[1], EXCHANGE_IN[1])
        assert min(len(down), len(up)) <= EXCHANGE_OUT[1]
        assert sc.compiled.static_ok(kicked)
        assert all(p in a for p, a in zip(kicked, comp.allowed, strict=True))
        assert set(up) <= set(movable_up) and set(down) <= set(movable_down)
        resident = {tool[j] for j in range(n) if kicked[j] == NOW_CODE and j not in up}
        for j in up:
            queue_ok = QUEUE_CODE in comp.allowed[j]
            assert (kicked[j] == NOW_CODE) == (not queue_ok or tool[j] in resident)
        many_in += len(up) > EXCHANGE_OUT[1]
        many_out += len(down) > EXCHANGE_OUT[1]
    mixed = 0
    for _ in range(300):  # the kicks as the search draws them: exchanges among them, wider than the others
        kicked = search.kick(cur)
        moved = [j for j in range(n) if kicked[j] != cur[j]]
        if len(moved) > 4 and len({tool[j] for j in moved}) > 1 and CPU_CODE in {kicked[j] for j in moved} \
                and {kicked[j] for j in moved} - {CPU_CODE}:
            mixed += 1
    if len(movable_up) > EXCHANGE_OUT[1] and len(movable_down) > EXCHANGE_OUT[1]:
        assert mixed > 0 and many_in > 0 and many_out > 0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 26), three_way=st.booleans(),
       seed=st.integers(0, 10_000), kicks=st.integers(40, 200), extra=st.integers(1, 300))
def test_screened_search_with_an_exchange_phase_only_gains(family: str, n: int, three_way: bool, seed: int,
                                                           kicks: int, extra: int) -> None:
    """The last phase (``extra`` more estimates of kicks; three-way: exchanges among them from there on, binary: the
    kicks as before, exchanges among them from the first) makes first the estimates the search without it makes,
    in the same order, so it never ends higher; it stays within its budget, returns a valid mapping and is the
    same for the same seed."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    plain = local_search(est, comp.starts, comp.allowed, max_evaluations=kicks, seed=3, screen=True)
    more = local_search(est, comp.starts, comp.allowed, max_evaluations=kicks, seed=3, screen=True,
                        exchange_evaluations=extra)
    again = local_search(est, comp.starts, comp.allowed, max_evaluations=kicks, seed=3, screen=True,
                         exchange_evaluations=extra)
    assert more.e2e_ms <= plain.e2e_ms
    assert list(more.seen)[: len(plain.seen)] == list(plain.seen)  # the same estimates first, in the same order
    assert all(more.seen[c] == e for c, e in plain.seen.items())
    assert sc.compiled.static_ok(more.best) and more.seen[more.best] == more.e2e_ms
    assert len(more.seen) <= kicks + extra + n * 3  # a descent begun may end past the budget by one step
    assert (again.best, again.e2e_ms, list(again.seen)) == (more.best, more.e2e_ms, list(more.seen))
    assert more.state is not None and more.state.exchange_3w == three_way  # binary: no three-way exchanges


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(30, 60), three_way=st.booleans(),
       seed=st.integers(0, 10_000), kicks=st.integers(40, 200))
def test_screened_search_polished_ends_in_a_full_neighbourhood_optimum(family: str, n: int, three_way: bool,
                                                                       seed: int, kicks: int) -> None:
    """The polish after the last phase (``polish_evaluations``: a descent from the best over every node's moves,
    unscreened) makes first the estimates the search without it makes, in the same order, so it never ends
    higher; given room enough it ends where no one-node move (making room included) and no tool's move lowers
    the estimate, which the screened descents alone do not promise; with a small budget it stays within it; it
    is the same for the same seed, and leaves the search screened for its continuations."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)

    def search(polish: int) -> SearchResult:
        return local_search(est, comp.starts, comp.allowed, max_evaluations=kicks, seed=3, screen=True,
                            exchange_evaluations=20, polish_evaluations=polish)

    plain, polished, again, short = search(0), search(10**6), search(10**6), search(5)
    assert polished.e2e_ms <= plain.e2e_ms and short.e2e_ms <= plain.e2e_ms
    assert list(polished.seen)[: len(plain.seen)] == list(plain.seen)
    assert list(short.seen)[: len(plain.seen)] == list(plain.seen)
    assert len(short.seen) <= len(plain.seen) + 5
    assert sc.compiled.static_ok(polished.best) and polished.seen[polished.best] == polished.e2e_ms
    assert (again.best, again.e2e_ms, list(again.seen)) == (polished.best, polished.e2e_ms, list(polished.seen))
    assert polished.state is not None and polished.state.screen
    probe = _Search(est, comp.allowed, 10**9, 0, screen=False)
    best = polished.best
    moves = [cand for i in range(n) for cand in probe.neighbours(best, i)] + list(probe.group_moves(best, None))
    assert all(est.e2e(cand) >= polished.e2e_ms * (1 - 1e-12) for cand in moves)


MORE_KICKS = 1000
"""The last phase's length in the test below (``SCREEN_MORE_KICKS_FIRST_BIN`` is 5,000)."""


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 24), seed=st.integers(0, 10_000))
def test_binary_round_0_with_more_kicks_is_never_worse_fits_and_repeats(family: str, n: int, seed: int) -> None:
    """Round 0 of a binary workflow (the decider's own search, as it runs it) with its last phase of more kicks
    (``SCREEN_MORE_KICKS_FIRST_BIN``) never ends above round 0 without it (the same estimates first); its
    mapping fits the VRAM budget, uses allowed placements only and is the same for a fresh decider. The phase
    runs ``MORE_KICKS`` estimates here, not the shipped 5,000: the same code (its kicks and exchange kicks from
    the best mapping, then descents) for any length, and round 0 estimates 7,400 times, not 11,400 (twice; the
    shipped length runs in the 100-tool round-0 tests below)."""
    import hetsched.deciders.rules as rules

    sc = random_scenario(WorkflowSpec(family, n, Mode.BINARY, seed))

    def round_0(more: int) -> tuple[tuple[int, ...], float, list[tuple[int, ...]]]:
        old, polish = rules.SCREEN_MORE_KICKS_FIRST_BIN, rules.SCREEN_POLISH_FIRST_SHARE
        rules.SCREEN_MORE_KICKS_FIRST_BIN, rules.SCREEN_POLISH_FIRST_SHARE = more, 0.0  # the polish comes after
        try:
            d = RulesDecider()
            comp = d._compile(sc)
            res = d._search(sc, comp, sc.machine.gpu_kappa, comp.starts)
        finally:
            rules.SCREEN_MORE_KICKS_FIRST_BIN, rules.SCREEN_POLISH_FIRST_SHARE = old, polish
        return res.best, res.e2e_ms, list(res.seen)

    without = round_0(0)
    best, e2e, seen = round_0(MORE_KICKS)
    assert e2e <= without[1]
    size = math.prod(len(a) for a in sc.compiled.allowed)
    if len(seen) < size:  # not exhaustive (every mapping estimated: the optimum, in another order)
        assert seen[: len(without[2])] == without[2] and len(seen) > len(without[2])
    assert sc.compiled.static_ok(best) and all(p in a for p, a in zip(best, sc.compiled.allowed, strict=True))
    assert round_0(MORE_KICKS) == (best, e2e, seen)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), three_way=st.booleans(), seed=st.integers(0, 10_000))
def test_round_0s_longer_last_phase_is_never_worse_fits_and_repeats(family: str, three_way: bool, seed: int) -> None:
    """Round 0's last phase at 100 tools is longer than session 29's (three-way: 8,000 estimates, not 5,000, capped at
    1.3 x 10^8 / n^2, not 10^8; binary: 5,000 and 10^8, not 2,500 and 7.5 x 10^7): round 0 makes session 29's
    estimates first, in the same order, then more, so it never ends higher; its mapping fits the VRAM budget and is
    the same for a fresh decider."""
    import hetsched.deciders.rules as rules

    sc = random_scenario(WorkflowSpec(family, 100, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    names = ("SCREEN_EXCHANGE_FIRST_3W", "SEARCH_ESTIMATES_FIRST_3W_NODES_SQUARED") if three_way \
        else ("SCREEN_MORE_KICKS_FIRST_BIN", "SEARCH_ESTIMATES_FIRST_BIN_NODES_SQUARED")

    def round_0(values: tuple[int, int] | None) -> tuple[tuple[int, ...], float, list[tuple[int, ...]]]:
        kept = tuple(getattr(rules, name) for name in names)
        polish = rules.SCREEN_POLISH_FIRST_SHARE
        try:
            for name, value in zip(names, values or kept, strict=True):
                setattr(rules, name, value)
            rules.SCREEN_POLISH_FIRST_SHARE = 0.0  # the polish comes after (its own test)
            d = RulesDecider()
            comp = d._compile(sc)
            res = d._search(sc, comp, sc.machine.gpu_kappa, comp.starts)
        finally:
            for name, value in zip(names, kept, strict=True):
                setattr(rules, name, value)
            rules.SCREEN_POLISH_FIRST_SHARE = polish
        return res.best, res.e2e_ms, list(res.seen)

    before = round_0((5000, 100_000_000) if three_way else (2500, 75_000_000))
    best, e2e, seen = round_0(None)
    assert e2e <= before[1]
    assert seen[: len(before[2])] == before[2] and len(seen) > len(before[2])
    assert sc.compiled.static_ok(best) and all(p in a for p, a in zip(best, sc.compiled.allowed, strict=True))
    assert round_0(None) == (best, e2e, seen)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 30), three_way=st.booleans(),
       seed=st.integers(0, 10_000))
def test_continuation_kicks_grow_after_chunks_that_found_nothing(family: str, n: int, three_way: bool,
                                                                 seed: int) -> None:
    """The later rounds' continuation of round 0's search: each chunk's kicks compose one kick more per chunk in a
    row before it that found nothing lower (up to ``CONTINUE_STRONGER_KICKS`` more); the chain's estimate never
    rises, every chunk keeps the estimates before it and adds at most ``SCREEN_CONTINUE_LATER`` simulations, its
    best fits the VRAM budget, and a fresh decider replays the same chain."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    d = RulesDecider()
    comp = d._compile(sc)
    d._continued(sc, comp, 6)
    chain = comp.chain
    assert len(chain) == 7
    for k in range(1, len(chain)):
        prev, res = chain[k - 1], chain[k]
        assert res.e2e_ms <= prev.e2e_ms and list(res.seen)[: len(prev.seen)] == list(prev.seen)
        assert len(res.seen) <= len(prev.seen) + SCREEN_CONTINUE_LATER
        assert sc.compiled.static_ok(res.best)
        stale = 0
        while stale + 1 < k and chain[k - 1 - stale].e2e_ms >= chain[k - 2 - stale].e2e_ms:
            stale += 1
        if not res.exhaustive:  # every mapping estimated in round 0: nothing to continue
            assert res.state is not None and res.state.strength == 1 + min(stale, CONTINUE_STRONGER_KICKS)
    fresh = RulesDecider()
    comp2 = fresh._compile(sc)
    fresh._continued(sc, comp2, 6)
    assert [(r.best, r.e2e_ms, list(r.seen)) for r in comp2.chain] == [(r.best, r.e2e_ms, list(r.seen)) for r in chain]


@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 26), three_way=st.booleans(),
       seed=st.integers(0, 10_000), more=st.integers(1, 300), strength=st.integers(2, 4))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_resume_with_stronger_kicks_never_ends_worse_and_repeats(family: str, n: int, three_way: bool, seed: int,
                                                                    more: int, strength: int) -> None:
    """``resume`` with ``strength`` k (each kick k kicks composed) never ends above the search it resumed, keeps its
    estimates first and adds at most ``more``, fits the VRAM budget, repeats for the same seed and leaves the
    resumed result as it was."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    start = local_search(est, comp.starts, comp.allowed, max_evaluations=120, seed=5, screen=True,
                         race_evaluations=60)
    before = (start.best, start.e2e_ms, list(start.seen))
    one = resume(start, more, seed=9, strength=strength)
    again = resume(start, more, seed=9, strength=strength)
    assert (start.best, start.e2e_ms, list(start.seen)) == before
    assert (one.best, one.e2e_ms, list(one.seen)) == (again.best, again.e2e_ms, list(again.seen))
    assert one.e2e_ms <= start.e2e_ms and list(one.seen)[: len(start.seen)] == list(start.seen)
    assert len(one.seen) <= len(start.seen) + more
    assert sc.compiled.static_ok(one.best) and one.e2e_ms == one.seen[one.best] == est.e2e(one.best)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 30), three_way=st.booleans(),
       seed=st.integers(0, 10_000))
def test_late_starts_fit_the_vram_budget_and_follow_their_rules(family: str, n: int, three_way: bool,
                                                                 seed: int) -> None:
    """The late starts are valid mappings (the ``gpu_now`` set fits the VRAM budget, each queued node fits
    alone, every placement allowed): the greedy one keeps each node on its faster device in isolation
    except the ``gpu_now`` nodes whose tools left whole; in three-way workflows the CPU-heavy ones queue
    exactly the nodes whose CPU time is at least the ratio times their GPU time."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    est = Estimator(sc, sc.machine.gpu_kappa)
    c = sc.compiled
    got = late_starts(est, c.allowed, three_way)
    assert got and len(set(got)) == len(got)
    for codes in got:
        assert sc.compiled.static_ok(codes) and all(p in a for p, a in zip(codes, c.allowed, strict=True))
    greedy = got[0]
    for i, p in enumerate(greedy):
        faster_on_gpu = math.isfinite(est.gpu_ms[i]) and est.gpu_ms[i] < est.cpu_ms[i] and NOW_CODE in c.allowed[i]
        if not faster_on_gpu:
            assert p == CPU_CODE
        elif p != NOW_CODE:  # its tool left gpu_now whole
            assert all(greedy[j] != NOW_CODE for j in range(n) if c.tool_idx[j] == c.tool_idx[i])
    if three_way:
        for r in LATE_QUEUE_RATIOS:
            heavy = tuple(QUEUE_CODE if QUEUE_CODE in a and math.isfinite(est.gpu_ms[i])
                          and est.cpu_ms[i] >= r * est.gpu_ms[i] else CPU_CODE for i, a in enumerate(c.allowed))
            assert heavy in got or not sc.compiled.static_ok(heavy) or heavy == greedy
    else:
        assert got == [greedy]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 26), three_way=st.booleans(),
       seed=st.integers(0, 10_000), kicks=st.integers(40, 200), late=st.integers(1, 300))
def test_screened_search_with_late_starts_only_gains(family: str, n: int, three_way: bool, seed: int,
                                                      kicks: int, late: int) -> None:
    """Round 0's late starts come after the kicks: the search makes the same estimates first, in the same
    order, as the search that stops there, so it never returns a higher estimate; it stays in budget,
    within VRAM, no worse than any start, and the same for the same seed."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    extra = late_starts(comp.estimator, comp.allowed, three_way)
    race = kicks // 2
    a = local_search(est, comp.starts, comp.allowed, max_evaluations=kicks, seed=5, screen=True,
                     race_evaluations=race)
    b = local_search(est, comp.starts, comp.allowed, max_evaluations=kicks + late, seed=5, screen=True,
                     race_evaluations=race, late_starts=extra, late_evaluations=late)
    again = local_search(est, comp.starts, comp.allowed, max_evaluations=kicks + late, seed=5, screen=True,
                         race_evaluations=race, late_starts=extra, late_evaluations=late)
    assert (b.best, b.e2e_ms, list(b.seen)) == (again.best, again.e2e_ms, list(again.seen))
    assert list(b.seen)[: len(a.seen)] == list(a.seen)  # the same estimates first, in the same order
    assert b.e2e_ms <= a.e2e_ms and len(a.seen) <= kicks and len(b.seen) <= kicks + late
    assert b.e2e_ms <= min(b.seen[s] for s in comp.starts)
    assert sc.compiled.static_ok(b.best) and math.isfinite(b.e2e_ms)
    assert min(b.seen.values()) <= b.e2e_ms <= min(b.seen.values()) * (1 + 1e-12)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 26), three_way=st.booleans(),
       seed=st.integers(0, 10_000), more=st.integers(1, 300))
def test_a_resumed_search_never_ends_worse_than_its_start(family: str, n: int, three_way: bool, seed: int,
                                                           more: int) -> None:
    """``resume`` (the later rounds' anytime search) goes on from a search's best mapping: its estimate is never
    higher than the one it started from, and a second resume never higher than the first; it keeps every
    estimate already made (first, in order) and adds at most ``more``; its best fits the VRAM and is estimated
    right; the same seed gives the same search, and the result it resumed is left as it was."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    start = local_search(est, comp.starts, comp.allowed, max_evaluations=120, seed=5, screen=True,
                         race_evaluations=60)
    before = (start.best, start.e2e_ms, list(start.seen.items()))
    one = resume(start, more, seed=9)
    again = resume(start, more, seed=9)
    two = resume(one, more, seed=10)
    assert (start.best, start.e2e_ms, list(start.seen.items())) == before
    assert (one.best, one.e2e_ms, list(one.seen)) == (again.best, again.e2e_ms, list(again.seen))
    assert two.e2e_ms <= one.e2e_ms <= start.e2e_ms
    for prev, res in ((start, one), (one, two)):
        assert list(res.seen)[: len(prev.seen)] == list(prev.seen)
        assert len(prev.seen) <= len(res.seen) <= len(prev.seen) + more
        assert sc.compiled.static_ok(res.best) and res.e2e_ms == res.seen[res.best] == est.e2e(res.best)
        assert min(res.seen.values()) <= res.e2e_ms <= min(res.seen.values()) * (1 + 1e-12)
    small = random_scenario(WorkflowSpec(family, 4, Mode.BINARY, seed))
    whole = local_search(Estimator(small), [RulesDecider()._compile(small).rules], RulesDecider()._compile(small).allowed,
                         max_evaluations=10_000)
    assert whole.exhaustive and resume(whole, more, seed=1) is whole


def test_later_rounds_continue_round_0s_search_and_replay() -> None:
    """From ``SCREEN_MIN_NODES`` nodes on each later round continues round 0's search by a chunk (its estimate
    never rises from chunk to chunk, every estimate kept), says so, and offers what it found, re-scored on
    the calibrated model; a decider built afresh (a resumed run) replays the chain and decides the same."""
    sc = random_scenario(WorkflowSpec("diamond", SCREEN_MIN_NODES + 5, Mode.THREE_WAY, 102))
    policy = make_policy("agentic")
    first = run_rounds(sc, policy, LoopConfig(rounds=4, seed=2))
    decider = policy.decider  # type: ignore[attr-defined]
    chain = decider._compile(sc).chain
    comp = decider._compile(sc)
    assert len(chain) == 4 and chain[0] is decider._search(sc, comp, sc.machine.gpu_kappa, comp.starts)
    for prev, res in itertools.pairwise(chain):
        assert res.e2e_ms <= prev.e2e_ms and list(res.seen)[: len(prev.seen)] == list(prev.seen)
        assert len(res.seen) <= len(prev.seen) + SCREEN_CONTINUE_LATER
    for k, rec in enumerate(first.rounds[1:], start=1):
        reasoning = rec.proposal.decision.attempts[-1].reasoning  # type: ignore[union-attr]
        assert f"round 0's search continued ({k} chunk(s) of {SCREEN_CONTINUE_LATER} estimates)" in reasoning
    part = run_rounds(sc, make_policy("agentic"), LoopConfig(rounds=2, seed=2))
    resumed = run_rounds(sc, make_policy("agentic"), LoopConfig(rounds=4, seed=2), history=part.rounds)
    assert [r.mapping for r in resumed.rounds] == [r.mapping for r in first.rounds]


def test_late_starts_reach_a_basin_the_first_starts_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    """On this fork-join (three-way, 50 tools) round 0's search with the late starts ends lower than the same
    search spending those estimates on more kicks: the best mappings queue few nodes and run the rest
    on the CPU, a basin the rules' and the uniform mappings do not lead to. Under 17 nodes there are none
    (the bundled and random suites' searches are unchanged)."""
    import hetsched.deciders.rules as rules

    monkeypatch.setattr(rules, "SCREEN_POLISH_FIRST_SHARE", 0.0)  # the polish comes after (its own test)
    sc = random_scenario(WorkflowSpec("forkjoin", 50, Mode.THREE_WAY, 13))
    d = RulesDecider()
    comp = d._compile(sc)
    assert comp.late
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    with_late = d._search(sc, comp, sc.machine.gpu_kappa, comp.starts)
    seed = zlib.crc32(f"{sc.name}:{sc.machine.gpu_kappa}:{comp.starts[-1]}".encode())  # the decider's
    race = SCREEN_EVALUATIONS_FIRST // 2
    first = local_search(est, comp.starts, comp.allowed, max_evaluations=SCREEN_EVALUATIONS_FIRST + SCREEN_KICKS_FIRST,
                         seed=seed, screen=True, race_evaluations=race)
    kicks = local_search(est, comp.starts, comp.allowed, max_evaluations=with_late.budget, seed=seed, screen=True,
                         race_evaluations=race)
    assert list(with_late.seen)[: len(first.seen)] == list(first.seen)
    assert with_late.e2e_ms < kicks.e2e_ms <= first.e2e_ms and sc.compiled.static_ok(with_late.best)
    small = random_scenario(WorkflowSpec("forkjoin", SCREEN_MIN_NODES - 1, Mode.THREE_WAY, 13))
    assert RulesDecider()._compile(small).late == []


def test_screened_race_gives_the_leading_descent_the_budget_equal_shares_cut_off() -> None:
    """Successive halving: with many starts and a budget that equal shares would spread too thin for
    any descent to converge, the descents that lead keep going; the result is no worse than the converged
    descent from the start that leads at the outset (equal shares stopped 0.5% above it here)."""
    sc = random_scenario(WorkflowSpec("layered", 40, Mode.THREE_WAY, 9))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    own = {s: _fresh_descent(est, comp.allowed, s) for s in comp.starts}
    lead = min(comp.starts, key=lambda s: (est.e2e(s), s))
    budget = 2 * (len(own[lead]) + 2 * len(comp.starts))
    assert budget // (2 * len(comp.starts)) < len(own[lead])  # equal shares would cut the leader off
    found = local_search(est, comp.starts, comp.allowed, max_evaluations=budget, seed=0, screen=True)
    assert found.e2e_ms <= min(own[lead].values()) * (1 + 1e-12) and len(found.seen) <= budget


def _fresh_descent(est: Estimator, allowed: Sequence[tuple[int, ...]], start: tuple[int, ...]) -> dict[
        tuple[int, ...], float]:
    search = _Search(est, allowed, 10**6, 0, screen=True)
    search.descend(start)
    return search.seen


def test_three_way_search_also_starts_from_the_rules_mapping_queued() -> None:
    """From ``SCREEN_MIN_NODES`` nodes on, three-way searches also start from the rules' CPU/GPU split with
    every GPU node on ``gpu_queue`` (then promote what is worth its memory): on this fan-out every other
    start's descent stops 10% higher, and round 0 finds the queued basin. Smaller workflows keep their
    starts (the rules' and the uniform mappings), and binary ones have no queue."""
    sc = random_scenario(WorkflowSpec("fanout", 30, Mode.THREE_WAY, 14))
    d = RulesDecider()
    comp = d._compile(sc)
    queued = tuple(2 if c == 1 and 2 in a else c for c, a in zip(comp.rules, comp.allowed, strict=True))
    assert comp.starts[1] == queued and sc.compiled.static_ok(queued)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    basin = min(_fresh_descent(est, comp.allowed, queued).values())
    assert all(min(_fresh_descent(est, comp.allowed, s).values()) > 1.1 * basin for s in comp.starts if s != queued)
    assert d._search(sc, comp, sc.machine.gpu_kappa, comp.starts).e2e_ms <= basin
    small = random_scenario(WorkflowSpec("fanout", SCREEN_MIN_NODES - 1, Mode.THREE_WAY, 14))
    assert len(RulesDecider()._compile(small).starts) <= 1 + len(small.placements)
    binary = random_scenario(WorkflowSpec("fanout", 30, Mode.BINARY, 14))
    assert len(RulesDecider()._compile(binary).starts) <= 1 + len(binary.placements)


def test_rules_decider_on_a_large_workflow_spends_a_fixed_budget_and_replays() -> None:
    """From ``SCREEN_MIN_NODES`` nodes on a decision estimates a fixed number of mappings (round 0 more,
    later rounds fewer), says so in its reasoning, and a resumed run makes the same decisions."""
    sc = random_scenario(WorkflowSpec("random", SCREEN_MIN_NODES + 3, Mode.THREE_WAY, 21))
    first = run_rounds(sc, make_policy("agentic"), LoopConfig(rounds=3, seed=1))
    part = run_rounds(sc, make_policy("agentic"), LoopConfig(rounds=1, seed=1))
    resumed = run_rounds(sc, make_policy("agentic"), LoopConfig(rounds=3, seed=1), history=part.rounds)
    assert [r.mapping for r in resumed.rounds] == [r.mapping for r in first.rounds]
    spent = [r.proposal.decision.attempts[-1].reasoning for r in first.rounds]  # type: ignore[union-attr]
    first = max(SCREEN_EVALUATIONS_FIRST, round(((SCREEN_MIN_NODES + 3) / SCREEN_NODES_PER_EVALUATION_ROOT) ** 2))
    # three-way: round 0's exchange phase after the late starts (binary workflows have none)
    total = first + SCREEN_KICKS_FIRST + SCREEN_LATE_FIRST + SCREEN_EXCHANGE_FIRST_3W
    total += round(SCREEN_POLISH_FIRST_SHARE * total)  # and at most this many more for the polish
    assert f"of a budget of {total}; descents screened" in spent[0]
    binary = random_scenario(WorkflowSpec("random", SCREEN_MIN_NODES + 3, Mode.BINARY, 21))
    once = run_rounds(binary, make_policy("agentic"), LoopConfig(rounds=1, seed=1)).rounds[0]
    reasoning = once.proposal.decision.attempts[-1].reasoning  # type: ignore[union-attr]
    # binary: round 0's last phase, more kicks (SCREEN_MORE_KICKS_FIRST_BIN)
    total_bin = first + SCREEN_KICKS_FIRST + SCREEN_LATE_FIRST + SCREEN_MORE_KICKS_FIRST_BIN
    total_bin += round(SCREEN_POLISH_FIRST_SHARE * total_bin)
    assert f"of a budget of {total_bin}; descents screened" in reasoning
    assert all(f"of a budget of {SCREEN_EVALUATIONS_LATER}; descents screened" in s for s in spent[1:])


def _run_best_by(sc: Scenario, rounds: int, policy: str = "agentic", **options: object) -> list[float]:
    result = run_rounds(sc, make_policy(policy, **options), LoopConfig(rounds=rounds, seed=0))
    sim = Simulator(sc, noise=False)
    return [math.inf if (e := sim.e2e(r.mapping)) is None else e for r in result.rounds]


@pytest.mark.parametrize("mode", [Mode.BINARY, Mode.THREE_WAY])
def test_rules_decider_generalizes_to_unseen_small_workflows(mode: Mode) -> None:
    """The issue's target on a CI-size sample (the full 200-workflow table: --suite random)."""
    for i in range(10):
        spec = WorkflowSpec(FAMILIES[i % len(FAMILIES)], 4 + i % 5, mode, 1000 + i)
        sc = random_scenario(spec)
        e2e = _run_best_by(sc, 6)
        assert min(e2e) <= 1.01 * solve(sc, ranking=False).e2e_ms, spec.name


def _stale(sc: Scenario, cards: dict[str, dict[str, float]]) -> Scenario:
    return sc.model_copy(update={"cards": {k: c.model_copy(update=cards.get(k, {})) for k, c in sc.cards.items()}})


def test_rules_decider_escapes_its_first_mapping_when_measurements_disagree_with_the_cards() -> None:
    """The cards say tool tb is 5x faster on the GPU; in the world it is slower there. Round 0
    follows the cards; the measurements (round 0, the monitor's probes) show the CPU is better,
    and the decider moves there and stays."""
    wf = make_workflow([("A", "ta"), ("B", "tb"), ("C", "tc")], [("A", "B"), ("A", "C")])
    world = make_scenario(wf, [make_card("ta", 400.0, 40.0), make_card("tb", 300.0, 400.0, gpu_util=1.0),
                               make_card("tc", 500.0, 50.0)], vram_budget_mb=4000.0, gpu_kappa=0.1, noise_cv=0.02)
    seen = _stale(world, {"tb": {"gpu_ms": 60.0}})
    result = run_rounds(seen, make_policy("agentic"), LoopConfig(rounds=6, seed=0), executor=Simulator(world))
    assert result.rounds[0].mapping["B"] is G  # the cards' answer
    assert all(r.mapping["B"] is C for r in result.rounds[2:])  # the evidence's answer, kept
    exact = Simulator(world, noise=False)
    assert exact.e2e(result.rounds[-1].mapping) == pytest.approx(solve(world, ranking=False).e2e_ms)
    # the running averages showed B's GPU time far above its card: the decider rescaled that card
    reasoning = result.rounds[1].proposal.decision.attempts[-1].reasoning  # type: ignore[union-attr]
    factor = float(reasoning.split("B gpu x")[1].split(";")[0].split()[0])
    assert factor > 2.0


def test_rules_decider_uses_its_model_to_pick_among_noisy_ties_and_replays() -> None:
    sc = random_scenario(WorkflowSpec("layered", 12, Mode.THREE_WAY, 4))
    first = run_rounds(sc, make_policy("agentic"), LoopConfig(rounds=5, seed=3))
    again = run_rounds(sc, make_policy("agentic"), LoopConfig(rounds=5, seed=3))
    assert [r.mapping for r in first.rounds] == [r.mapping for r in again.rounds]
    part = run_rounds(sc, make_policy("agentic"), LoopConfig(rounds=2, seed=3))
    resumed = run_rounds(sc, make_policy("agentic"), LoopConfig(rounds=5, seed=3), history=part.rounds)
    assert [r.mapping for r in resumed.rounds] == [r.mapping for r in first.rounds]
    for rec in first.rounds[1:]:  # each later decision states its calibration and what it chose
        reasoning = rec.proposal.decision.attempts[-1].reasoning  # type: ignore[union-attr]
        assert reasoning.startswith("calibration: interference ")


def test_evidence_reads_codes_and_falls_back_to_mappings() -> None:
    from hetsched.model.observations import Execution, LastRound

    sc = random_scenario(WorkflowSpec("chain", 3, Mode.THREE_WAY, 0))
    ids = sc.workflow.node_ids
    cpu = tuple((n, "cpu") for n in ids)
    mixed = ((ids[0], "gpu_now"), (ids[1], "cpu"), (ids[2], "gpu_queue"))
    records = [
        Execution(cpu, "CCC", runs=2, mean_e2e_ms=10.0, min_e2e_ms=9.5, max_e2e_ms=10.5, rounds=(0, 2), probe_runs=0),
        Execution(mixed, "", runs=1, mean_e2e_ms=9.0, min_e2e_ms=9.0, max_e2e_ms=9.0, rounds=(1,), probe_runs=0),
        LastRound(2, cpu, "CCC", feasible=True, e2e_ms=10.0, reason=""),
    ]
    ev = Evidence.read(sc, records)
    assert ev.best is not None and ev.best.codes == (1, 0, 2) and ev.last == (0, 0, 0)
    assert ev.measured[(0, 0, 0)].last_round == 2 and ev.mapping((1, 0, 2))[ids[2]] is Q


# ---------------------------------------------------------------------------- the guards
def _deadlocking_greedy() -> Scenario:
    """A -> B; greedy keeps B (most time saved) resident, then queues A, which waits forever for
    the memory B holds until A has run."""
    wf = make_workflow([("A", "ta"), ("B", "tb")], [("A", "B")])
    cards = [make_card("ta", 500.0, 20.0, load_ms=10.0, vram_mb=500.0), make_card("tb", 1000.0, 10.0, vram_mb=800.0)]
    return make_scenario(wf, cards, mode=Mode.THREE_WAY, vram_budget_mb=1000.0)


def test_greedy_guard_fixes_a_deadlock_and_keeps_feasible_answers() -> None:
    sc = _deadlocking_greedy()
    plain, _ = greedy_placements(sc)
    assert plain == {"ta": Q, "tb": G}
    assert str(sc.infeasibility(Mapping({"A": Q, "B": G}))).startswith("deadlock")
    guarded, notes = greedy_placements(sc, sc.infeasibility)
    assert guarded == {"ta": C, "tb": G}
    assert any("gpu_queue deadlock (guard): cpu" in n for n in notes)
    pol = GreedyMem()
    result = run_rounds(sc, pol, LoopConfig(rounds=2, seed=0))
    assert all(r.trace.feasible and r.mapping == Mapping({"A": C, "B": G}) for r in result.rounds)
    vram = random_scenario(WorkflowSpec("chain", 4, Mode.THREE_WAY, 9))
    plain_map = greedy_placements(vram)[0]
    if Simulator(vram, noise=False).infeasibility(Mapping(
            (n, plain_map[vram.workflow.tool_of[n]]) for n in vram.workflow.node_ids)) is None:
        assert greedy_placements(vram, vram.infeasibility)[0] == plain_map  # a sound answer is left alone


# ---------------------------------------------------------------------------- the suites
def _small_suite(tmp_path: Path, suite: str) -> SuiteConfig:
    specs = (PolicySpec("greedy-mem"), PolicySpec("agentic", {"decider": "rules"}))
    workflows = scale_workflows(sizes=(5, 8), instances=1) if suite == "scale" else random_workflows(3, sizes=(4, 5))
    return SuiteConfig(suite=suite, specs=specs, workflows=workflows, rounds=3, out=tmp_path / suite, jobs=1)


def test_scale_suite_writes_tables_and_figures_and_resumes(tmp_path: Path) -> None:
    config = _small_suite(tmp_path, "scale")
    first = run_suite(config)
    assert first.counts == {"reused": 0, "resumed": 0, "ran": 8}
    with RunStore(config.store_path, read_only=True) as store:
        infos = store.runs(experiment="bench-scale")
        assert len(infos) == 8 and all(i.rounds_done == 3 and i.status == "finished" for i in infos)
        rounds = store.rounds(infos[0].id)
        assert [r.outcome for r in rounds] == store.outcomes(infos[0].id)  # the cheap read equals the full one
        assert all(r.decision_ms is not None and r.decision_ms >= 0 for r in rounds)
        kinds = store._read("SELECT kind, choice FROM scenario_references")
    assert {(k["kind"], k["choice"]) for k in kinds} == {("oracle", "auto")}  # 5 and 8 nodes: solved exactly
    assert len(kinds) == 4
    paths = write_suite_report(first)
    assert {"scale_ratio", "scale_time"} <= set(paths) and all(p.stat().st_size > 0 for p in paths.values())
    tables = {t.key: t for t in scale_tables(first)}
    assert set(tables) == {"scale_ratio", "scale_rounds", "scale_probes", "scale_time"}
    for t in tables.values():
        assert [row[0] for row in t.rows] == ["greedy-mem", "agentic:rules"] and t.columns[1:] == ["n=5", "n=8"]
    ratios = [float(c) for row in tables["scale_ratio"].rows for c in row[1:]]
    assert all(r >= 1 - 1e-9 for r in ratios)  # against the exact oracle nothing does better
    assert tables["scale_probes"].rows[0][1:] == ["0", "0"]
    again = run_suite(config)
    assert again.counts == {"reused": 8, "resumed": 0, "ran": 0}
    assert [r["rounds"] for r in again.runs] == [r["rounds"] for r in first.runs]
    assert again.references == {k: {**v, "how": "reused"} for k, v in first.references.items()}
    assert read_suite_runs(config.out) == again.runs  # what benchmarks/scale_anneal_check.py reads


def test_suite_refuses_an_old_runs_jsonl_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _small_suite(tmp_path, "random")
    config.out.mkdir()
    (config.out / "runs.jsonl").write_text('{"key": "x"}\n')
    with pytest.raises(InputError, match=r"runs.jsonl from an older hetsched.*Move them away"):
        run_suite(config)
    assert not config.store_path.exists()
    code, out, err = run_cli(capsys, "bench", "--suite", "random", "--quick", "--out", str(config.out))
    assert code == 2 and "runs.jsonl from an older hetsched" in err and "Traceback" not in out + err
    assert not config.store_path.exists()


def test_random_suite_table(tmp_path: Path) -> None:
    config = _small_suite(tmp_path, "random")
    result = run_suite(config)
    table = random_table(result)
    assert table.columns[1].startswith("binary: within 1% by R5")
    rules = next(row for row in table.rows if row[0] == "agentic:rules")
    assert rules[1].startswith("3/3") and rules[4].startswith("3/3")
    assert (write_suite_report(result)["tables"] / "random_runs.csv").read_text().count("\n") == 13


def test_cli_suite_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for args, message in (
        (["--suite", "huge"], "--suite 'huge': unknown suite; accepted: paper, scale, random"),
        (["--suite", "scale", "--scenario", "S1"], "--tools, --executor and -X apply to --suite paper only"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(["bench", *args])
        assert exc.value.code == 2
        assert message in capsys.readouterr().err


def test_screened_making_room_evicts_what_the_current_run_needs_least() -> None:
    """Making room judged by the run (issue 17's knapsack exchanges): promoting ``y`` needs 50 MB more;
    tool ``a`` has the least GPU benefit per MB but is on the critical chain, ``b`` is worth more per MB
    on its card yet ends early, with slack for its CPU time. The screened search's loss of an eviction
    is its added time beyond the node's slack (none for ``b``; for ``a`` its 900 ms less its wait for ``y``), so its first room
    evicts ``b`` and the descent ends with ``a`` and ``y`` resident; the cards' ranking would evict
    ``a`` (kept as a second candidate, and the only one unscreened). (The 20 ms: the edges' copies.)"""
    wf = make_workflow([("s", "src"), ("a", "ta"), ("b", "tb"), ("y", "ty"), ("k", "snk")],
                       [("s", "a"), ("s", "b"), ("s", "y"), ("a", "k"), ("b", "k"), ("y", "k")])
    cards = [make_card("src", 1.0, None, 0.0, 0.0), make_card("snk", 1.0, None, 0.0, 0.0),
             make_card("ta", 1000.0, 100.0, 0.0, 1000.0), make_card("tb", 100.0, 10.0, 0.0, 50.0),
             make_card("ty", 500.0, 20.0, 0.0, 100.0)]
    sc = make_scenario(wf, cards, vram_budget_mb=1100.0)
    est = Estimator(sc, 0.0)
    c = sc.compiled
    cpu, now = Placement.CPU.code, Placement.GPU_NOW.code
    a, b, y = (c.index[x] for x in "aby")
    cur = tuple(now if i in (a, b) else cpu for i in range(c.n))
    search = _Search(est, c.allowed, 100, 0, screen=True)
    tm = est.timings(cur)
    assert tm is not None
    search.run_loss(cur, tm)
    assert search.loss is not None
    # b's 90 ms more on the CPU fit in its slack; a's 900 ms less the time it waits for y (on the CPU)
    slack_a = tm.end[y] - tm.end[a]
    assert search.loss[cpu][c.tool_idx[b]] == 0.0
    assert 900.0 - slack_a - 20.0 <= search.loss[cpu][c.tool_idx[a]] <= 900.0 - slack_a + 20.0
    assert search.per_mb[c.tool_idx[a]] < search.per_mb[c.tool_idx[b]]
    promoted = tuple(now if i == y else p for i, p in enumerate(cur))
    rooms = search.make_room(promoted, y)
    assert rooms[0][b] == cpu and rooms[0][a] == now and rooms[0][y] == now
    assert any(r[a] == cpu and r[b] == now for r in rooms[1:])
    plain = _Search(est, c.allowed, 100, 0)  # unscreened: no run, the cards' ranking alone
    assert [r[a] for r in plain.make_room(promoted, y)] == [cpu]
    best, best_e = search.descend(cur)
    assert best[a] == best[y] == now and best[b] == cpu and best_e < est.e2e(cur)
