"""What a run measured (hetsched.model.measured): the mapping to deploy with its spread, the
measured noise, and the agentic policy's stopping rule, checked as properties over random
histories; the measured reference (hetsched.exec.measure) and its round trip through JSON.

Unit tests on made-up traces (a trace is data here); tests/test_local_exec.py runs the stopping
rule and the measured reference on the real local executor.
"""

from __future__ import annotations

import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.exec.measure import measure_reference
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
    Trace,
)
from hetsched.model.measured import (
    MeasuredMapping,
    deploy_choice,
    executions,
    measured_mappings,
    measured_noise,
    settling,
)

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
