"""What a run measured (hetsched.model.measured): the mapping to deploy with its spread, the
measured noise, and the agentic policy's stopping rule, checked as properties over random
histories; the measured reference (hetsched.exec.measure) and its round trip through JSON.

Unit tests on made-up traces (a trace is data here); tests/test_local_exec.py runs the stopping
rule and the measured reference on the real local executor.
"""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.exec.measure import measure_reference
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import (
    Infeasibility,
    InfeasibleKind,
    Mapping,
    Placement,
    Probe,
    Proposal,
    Reference,
    ReferenceKind,
    RoundRecord,
    Scenario,
    Trace,
)
from hetsched.model.measured import (
    MODEL_TRIES,
    MeasuredMapping,
    deploy_choice,
    executions,
    measured_mappings,
    measured_noise,
    settling,
)
from hetsched.model.scenario import Mode
from hetsched.policies import make_policy
from hetsched.policies.agentic import Agentic
from hetsched.sim import Simulator

MAPPINGS = [Mapping({"A": a, "B": b}) for a in (Placement.CPU, Placement.GPU_NOW)
            for b in (Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE)]


def ran(mapping: Mapping, e2e_ms: float | None) -> Trace:
    if e2e_ms is None:
        return Trace.refused(mapping, Infeasibility(InfeasibleKind.TOOL_ERROR, "injected"), executor="local")
    return Trace(mapping=mapping, feasible=True, e2e_ms=e2e_ms, executor="local")


def history(rounds: list[tuple[int, float | None, list[tuple[int, float | None]]]]) -> list[RoundRecord]:
    """Rounds of (mapping index, E2E or None, probes as (mapping index, E2E or None))."""
    out = []
    for i, (m, e2e, probes) in enumerate(rounds):
        ps = tuple(Probe("reprobe", MAPPINGS[m], ran(MAPPINGS[pm], pe)) for pm, pe in probes)
        out.append(RoundRecord(i, Proposal(MAPPINGS[m]), ran(MAPPINGS[m], e2e), ps))
    return out


E2E = st.one_of(st.none(), st.floats(10.0, 200.0, allow_nan=False))
ROUNDS = st.lists(st.tuples(st.integers(0, len(MAPPINGS) - 1), E2E,
                            st.lists(st.tuples(st.integers(0, len(MAPPINGS) - 1), E2E), max_size=2)),
                  max_size=14)


@settings(max_examples=200, deadline=None)
@given(ROUNDS)
def test_the_deploy_mapping_has_the_lowest_median_of_what_ran(rounds: list) -> None:
    h = history(rounds)
    runs = executions(h)
    feasible = [(r, t) for r, t in runs if t.feasible]
    best = deploy_choice(runs)
    if not feasible:
        assert best is None
        return
    assert best is not None
    clean = [m for m in measured_mappings(runs) if not m.failed]
    for m in measured_mappings(runs):
        assert m.failed == sum(1 for _, t in runs if not t.feasible and t.mapping == m.mapping)
        if m in clean or not clean:  # a mapping that failed is deployed only when every mapping failed once
            assert best.median_ms <= m.median_ms
        times = [t.e2e_ms for _, t in feasible if t.mapping == m.mapping]
        assert list(m.runs_ms) == times and m.median_ms == statistics.median(times)
        assert m.min_ms <= m.median_ms <= m.max_ms
        assert (m.spread is None) == (len(times) < 2)
    assert sum(len(m.runs_ms) for m in measured_mappings(runs)) == len(feasible)
    assert MeasuredMapping.from_dict(best.to_dict()) == best


@settings(max_examples=300, deadline=None)
@given(ROUNDS)
def test_the_stopping_rule_settles_only_within_the_measured_noise(rounds: list) -> None:
    h = history(rounds)
    state = settling(h)
    measured = measured_mappings(executions(h))
    assert state.noise >= 0.02 and state.noise >= (measured_noise(measured) or 0.0)
    assert state.exploring == (state.stale < 4)
    if state.exploring:
        assert state.contender is None and not state.settled
    if state.contender is not None:
        assert state.best is not None and len(state.contender.runs_ms) < 3
        assert state.contender.median_ms <= state.best.median_ms * (1 + state.noise) + 1e-9
    if state.settled:
        best = state.best
        assert best is not None and len(best.runs_ms) >= 3 and best == deploy_choice(executions(h))
        close = [m for m in measured if m.median_ms <= best.median_ms * (1 + state.noise)]
        assert all(len(m.runs_ms) >= 3 for m in close)  # every remaining difference is measured, or noise


def test_exploring_stops_when_new_mappings_stop_beating_the_best_then_the_close_ones_are_repeated() -> None:
    # round 0 runs mapping 0 at 100 ms; each later round tries a new mapping, none faster
    rounds: list = [(0, 100.0, [])] + [(i, 100.0 + 40 * i, []) for i in range(1, 4)]
    assert settling(history(rounds)).exploring  # 3 stale new mappings: not yet
    rounds.append((4, 101.0, []))  # the 4th, within the 2% noise floor of the best: stale too
    state = settling(history(rounds))
    assert not state.exploring and state.best is not None and state.best.mapping == MAPPINGS[0]
    assert state.contender is not None and state.contender.mapping == MAPPINGS[0]  # repeat the best first
    rounds += [(0, 100.0, []), (0, 100.0, [])]
    state = settling(history(rounds))
    assert state.contender is not None and state.contender.mapping == MAPPINGS[4]  # 101 ms: within the noise
    rounds += [(4, 130.0, []), (4, 131.0, [])]  # repeated, it is clearly slower
    state = settling(history(rounds))
    assert state.settled and state.best is not None and state.best.mapping == MAPPINGS[0]
    # a mapping that really is faster unsettles the run: it is the best, and is repeated
    rounds.append((5, 50.0, []))
    state = settling(history(rounds))
    assert not state.settled and state.best is not None and state.best.mapping == MAPPINGS[5]


class Counting:
    """An executor double that returns given E2Es for one mapping (a unit test of the bookkeeping)."""

    name = "local"

    def __init__(self, e2e: list[float | None]) -> None:
        self.e2e, self.calls = list(e2e), 0

    def run(self, mapping: Mapping, seed: int | None = 0) -> Trace:
        self.calls += 1
        return ran(mapping, self.e2e.pop(0))

    def close(self) -> None:
        pass

    def __enter__(self) -> Counting:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_the_measured_reference_counts_the_runs_own_executions_and_falls_back_to_the_best_measured() -> None:
    ref = Reference(ReferenceKind.ORACLE, MAPPINGS[1], 50.0, 50.0)
    h = history([(1, 80.0, []), (2, 60.0, [])])
    ex = Counting([90.0, 85.0])
    measured = measure_reference(ex, ref, h)  # type: ignore[arg-type]
    assert ex.calls == 2 and measured.measured is not None and measured.measured_kind == "reference mapping"
    assert measured.measured.runs_ms == (80.0, 90.0, 85.0) and measured.compare_ms == 85.0
    assert measured.compare_name == "oracle (measured)"
    assert Reference.from_dict(measured.to_dict()) == measured
    # the reference mapping cannot run on the executor: the best measured mapping, labelled so
    failed = measure_reference(Counting([None]), ref, history([(2, 60.0, []), (3, 70.0, [])]))  # type: ignore[arg-type]
    assert failed.measured is not None and failed.measured_kind == "best measured"
    assert failed.measured.mapping == MAPPINGS[2] and failed.compare_name == "best measured"
    assert Reference.from_dict(failed.to_dict()) == failed
    sim = Counting([])
    sim.name = "sim"
    assert measure_reference(sim, ref, h) is ref and sim.calls == 0  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- the model's close mappings
def test_before_settling_the_model_ranked_close_mappings_that_never_ran_are_tried() -> None:
    rounds: list = [(0, 100.0, [])] + [(i, 100.0 + 40 * i, []) for i in range(1, 5)] + [(0, 100.0, []), (0, 100.0, [])]
    # the model: mapping 5 (never ran) predicted best, 0 next, 3 within the 2% band too, 4 far
    ranked = [(MAPPINGS[5], 98.0), (MAPPINGS[0], 99.0), (MAPPINGS[3], 99.5), (MAPPINGS[4], 150.0)]
    plain = settling(history(rounds))
    assert plain.best is not None and plain.best.mapping == MAPPINGS[0] and plain.trial is None
    state = settling(history(rounds), ranked=ranked)
    assert not state.exploring and not state.settled
    assert state.trial == MAPPINGS[5] and state.trial_rank == 1 and state.trial_ms == 98.0
    assert state.best_predicted_ms == 98.0 and state.next_mapping == MAPPINGS[5]
    assert "trying" in state.describe() and "model's #1" in state.describe()
    assert settling(history(rounds), ranked=ranked, tries=0).trial is None  # switched off
    rounds.append((5, 120.0, []))  # tried: slower; mapping 3 ran already (140 ms), mapping 4 is outside the band
    state = settling(history(rounds), ranked=lambda: ranked)
    assert state.trial is None and state.settled and state.best is not None and state.best.mapping == MAPPINGS[0]
    # a trial that measures faster than the noise band becomes the best and reopens exploring (the
    # model was right where measuring had stopped: more may be found), as any faster new mapping does
    rounds[-1] = (5, 90.0, [])
    state = settling(history(rounds), ranked=ranked)
    assert state.best is not None and state.best.mapping == MAPPINGS[5] and state.exploring
    assert state.best == deploy_choice(executions(history(rounds)))


@settings(max_examples=200, deadline=None)
@given(ROUNDS, st.lists(st.tuples(st.integers(0, len(MAPPINGS) - 1), st.floats(10.0, 200.0)), max_size=6))
def test_a_run_settles_only_once_the_models_close_mappings_ran(rounds: list, predictions: list) -> None:
    ranked = sorted({MAPPINGS[i]: e for i, e in predictions}.items(), key=lambda x: x[1])
    h = history(rounds)
    state = settling(h, ranked=ranked)
    ran = {t.mapping for _, t in executions(h)}
    if state.trial is not None:
        assert state.trial not in ran and not state.exploring and state.contender is None
        assert state.trial_ms is not None and state.best_predicted_ms is not None
        assert state.trial_ms <= state.best_predicted_ms * (1 + state.noise) + 1e-9
    if state.settled and ranked and state.trials_left:
        best = ranked[0][1]
        close = [m for m, e in ranked if e <= best * (1 + state.noise)][:MODEL_TRIES]
        assert all(m in ran for m in close)
    assert state.best == settling(h).best  # the model never changes what is deployed: the best measured


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 6), st.lists(st.floats(0.0, 0.5), min_size=30, max_size=30), st.randoms(use_true_random=False))
def test_the_model_tries_are_capped_however_the_ranking_moves(tries: int, slower: list, rnd: Any) -> None:
    """Each round the model ranks a mapping never run as its best (its ranking moves as the cards learn): the
    run still makes at most ``tries`` trials once exploring stopped (none measures faster)."""
    space = [Mapping({"A": a, "B": b, "C": c}) for a in Placement for b in Placement for c in Placement]
    rnd.shuffle(space)
    rounds: list[RoundRecord] = []
    first_new_after_stop: int | None = None
    for i, extra in enumerate(slower):
        ran_maps = {r.mapping for r in rounds}
        fresh = [m for m in space if m not in ran_maps]
        state = settling(rounds, ranked=lambda fresh=fresh: [(fresh[0], 90.0)] if fresh else [], tries=tries)
        if state.settled:
            break
        nxt = state.next_mapping
        if nxt is None:  # exploring: the decider's pick, a new mapping never faster than the first
            nxt = fresh[0] if fresh else space[0]
        elif first_new_after_stop is None and nxt not in ran_maps:
            first_new_after_stop = i
        e2e = 100.0 * (1.0 + extra) if rounds else 100.0
        rounds.append(RoundRecord(i, Proposal(nxt), Trace(mapping=nxt, feasible=True, e2e_ms=e2e, executor="local"),
                                  ()))
    if first_new_after_stop is not None:
        after = {r.mapping for r in rounds[first_new_after_stop:]} - {r.mapping for r in rounds[:first_new_after_stop]}
        assert len(after) <= tries


class RealDouble:
    """The simulator standing in for a real executor (named ``local``: the loop treats its rounds as
    measurements, so the stopping rule is on), running a world whose figures differ from the cards."""

    name = "local"

    def __init__(self, world: Scenario) -> None:
        self.sim = Simulator(world)

    def run(self, mapping: Mapping, seed: int | None = 0) -> Trace:
        return self.sim.run(mapping, seed)

    def close(self) -> None:
        pass

    def __enter__(self) -> RealDouble:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["chain", "parallel", "fanout", "forkjoin", "layered"]), st.integers(5, 7),
       st.sampled_from([Mode.BINARY, Mode.THREE_WAY]), st.integers(0, 1000))
def test_agentic_on_a_noisy_real_executor_tries_the_models_close_mappings_then_settles_on_the_best_measured(
        family: str, n: int, mode: Mode, seed: int) -> None:
    noisy_real_run(family, n, mode, seed)


@pytest.mark.parametrize(("family", "seed"), [("fanout", 2), ("layered", 1)])
def test_the_models_close_mappings_are_tried_on_workflows_where_the_monitor_left_them(family: str, seed: int) -> None:
    assert noisy_real_run(family, 6, Mode.THREE_WAY, seed) >= 1


def noisy_real_run(family: str, n: int, mode: Mode, seed: int) -> int:
    """One agentic run on the real-executor double (noise 6%, cards off by up to 25%), its invariants
    checked; returns how many rounds tried a mapping the model ranked close that had never run."""
    world = random_scenario(WorkflowSpec(family, n, mode, seed))
    world = world.model_copy(update={"machine": world.machine.model_copy(update={"noise_cv": 0.06})})
    rng = random.Random(seed)
    cards = {t: c.model_copy(update={"cpu_ms": c.cpu_ms * rng.uniform(0.8, 1.25)}) for t, c in world.cards.items()}
    sc = world.model_copy(update={"cards": cards})
    pol = make_policy("agentic")
    result = run_rounds(sc, pol, LoopConfig(rounds=24, seed=seed), executor=RealDouble(world))  # type: ignore[arg-type]
    assert isinstance(pol, Agentic)
    tried = 0
    for i, r in enumerate(result.rounds):
        state = pol.settling(result.rounds[:i])  # what the policy saw before round i
        assert state is not None
        if state.exploring:
            continue
        assert r.mapping == state.next_mapping and not r.probes, (i, r.proposal.rationale)
        if state.trial is not None:
            tried += 1
            assert r.mapping not in {t.mapping for _, t in executions(result.rounds[:i])}
            assert "trying" in r.proposal.rationale
    final = pol.settling(result.rounds)
    assert final is not None and final.best == deploy_choice(executions(result.rounds)) == result.deploy
    if final.settled and final.trials_left:
        ran = {t.mapping for _, t in executions(result.rounds)}
        ranking = pol.ranking(result.rounds)
        close = [m for m, e in ranking if e <= ranking[0][1] * (1 + final.noise)][:4]
        assert all(m in ran for m in close)
    return tried
