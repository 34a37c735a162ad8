"""The ``rules`` decider's later rounds reuse the simulations they already made (issue 17, session 34): the
estimator keeps its timings, a screened descent's first step takes its start's E2E and timings from one
simulation, and the search after the calibration reads the fit's timings of the measured mappings. Each is
a pure speed change: the same estimates in the same order, the same decisions, fewer simulations."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.bench.generate import FAMILIES, WorkflowSpec, random_scenario
from hetsched.deciders import estimate
from hetsched.deciders.estimate import INTERFERENCE_GRID, Estimator
from hetsched.deciders.rules import SCREEN_MIN_NODES, _Compiled
from hetsched.deciders.search import local_search, resume
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mode
from hetsched.model.contention import Compiled, Timings
from hetsched.model.workload import Workload
from hetsched.policies import make_policy


class _Plain:
    """An estimator as the search read one before: no ``e2e_timings``, nothing kept; counts its simulations."""

    def __init__(self, est: Estimator) -> None:
        self.inner = est
        self.compiled: Compiled = est.compiled
        self.budget = est.budget
        self.cpu_ms = est.cpu_ms
        self.gpu_ms = est.gpu_ms
        self.evaluations = 0

    def e2e(self, place: Sequence[int]) -> float:
        self.evaluations += 1
        return self.inner.with_interference(self.inner.interference).e2e(place)

    def timings(self, place: Sequence[int]) -> Timings | None:
        self.evaluations += 1
        return self.inner.with_interference(self.inner.interference).timings(place)  # a copy keeps nothing

    def static_ok(self, place: Sequence[int]) -> bool:
        return self.inner.static_ok(place)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(1, 24), three_way=st.booleans(),
       kappa=st.sampled_from(INTERFERENCE_GRID), picks=st.lists(st.integers(0, 2**30), min_size=1, max_size=6),
       under_load=st.booleans())
def test_kept_timings_are_a_fresh_simulations(family: str, n: int, three_way: bool, kappa: float,
                                              picks: list[int], under_load: bool) -> None:
    """What an estimator keeps is what a fresh one computes: ``timings`` (asked twice, the second from the
    memo, not simulated again), ``e2e_timings`` is exactly ``(e2e, timings)`` (with a workload window too), and
    a copy under another interference or other cards starts with nothing kept."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, picks[0]))
    if under_load:
        sc = sc.with_workload(Workload.closed(2, requests=4))
    est = Estimator(sc, kappa)
    for pick in picks:
        rng = random.Random(pick)
        codes = tuple(rng.choice(a) for a in sc.compiled.allowed)
        fresh = Estimator(sc, kappa)
        first = est.timings(codes)
        before = est.evaluations
        assert est.timings(codes) is first and est.evaluations == before  # kept: no simulation
        assert first == fresh.timings(codes)
        assert est.e2e_timings(codes) == (fresh.e2e(codes), fresh.timings(codes))
        other = est.with_interference(kappa + 0.1)
        assert other.timed == {} and other.timings(codes) == Estimator(sc, kappa + 0.1).timings(codes)
        scaled = est.rescaled([1.5] * sc.compiled.n, [0.5] * sc.compiled.n)
        assert scaled.timed == {}


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(SCREEN_MIN_NODES, 30), three_way=st.booleans(),
       seed=st.integers(0, 10_000))
def test_screened_search_reusing_its_simulations_makes_the_same_estimates_with_fewer(
    family: str, n: int, three_way: bool, seed: int
) -> None:
    """The screened search (a race, kicks, a resumed chunk) on the decider's estimator makes every estimate the
    search on a plain estimator makes, in the same order, and ends the same, with fewer simulations: the starts'
    and the kicked mappings' E2Es come from their descents' timings, and kept timings are not simulated again."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    c = sc.compiled
    starts = [tuple(0 for _ in range(n))] + [u for p in (1, 2) if c.static_ok(u := tuple(
        p if p in a else 0 for a in c.allowed))]
    est = Estimator(sc, sc.machine.gpu_kappa)
    plain = _Plain(Estimator(sc, sc.machine.gpu_kappa))
    a = local_search(est, starts, c.allowed, max_evaluations=300, seed=seed, screen=True)
    b = local_search(plain, starts, c.allowed, max_evaluations=300, seed=seed, screen=True)
    assert list(a.seen.items()) == list(b.seen.items()) and (a.best, a.e2e_ms) == (b.best, b.e2e_ms)
    ra, rb = resume(a, 120, seed + 1), resume(b, 120, seed + 1)
    assert list(ra.seen.items()) == list(rb.seen.items()) and (ra.best, ra.e2e_ms) == (rb.best, rb.e2e_ms)
    assert est.evaluations < plain.evaluations


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the decider's kernel simulations (with and without timings)."""
    count = [0]
    sim, sim_e2e = estimate.simulate, estimate.simulate_e2e

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        count[0] += 1
        return sim(*args, **kwargs)

    def counted_e2e(*args, **kwargs):  # type: ignore[no-untyped-def]
        count[0] += 1
        return sim_e2e(*args, **kwargs)

    monkeypatch.setattr(estimate, "simulate", counted)
    monkeypatch.setattr(estimate, "simulate_e2e", counted_e2e)
    return count


@pytest.mark.parametrize(("family", "three_way", "seed"), [("layered", True, 3), ("random", False, 8)])
def test_later_rounds_read_the_fits_timings_and_decide_the_same(
    monkeypatch: pytest.MonkeyPatch, family: str, three_way: bool, seed: int
) -> None:
    """The later rounds' search starts from the measured mappings, whose timings at the fitted interference the
    fit simulated already: with them (and the kept timings) the decisions, their rationales and reasoning are
    those of a decider that simulates everything afresh, with fewer simulations."""
    sc = random_scenario(WorkflowSpec(family, 24, Mode.THREE_WAY if three_way else Mode.BINARY, seed))

    def run() -> tuple[list[tuple[object, ...]], int]:
        count = _counting(monkeypatch)
        res = run_rounds(sc, make_policy("agentic", decider="rules"), LoopConfig(rounds=4, seed=1))
        out = []
        for rec in res.rounds:
            d = rec.proposal.decision
            assert d is not None
            out.append((rec.proposal.mapping, rec.proposal.rationale, d.attempts[-1].reasoning))
        return out, count[0]

    reused, fewer = run()
    monkeypatch.setattr(_Compiled, "timings_memo", lambda self, factors: {})  # the fit's timings not kept
    monkeypatch.setattr(Estimator, "e2e_timings", property(lambda self: None))  # no fused first steps

    def afresh(self: Estimator, place: Sequence[int]) -> Timings | None:
        self.timed.clear()
        return keep(self, place)

    keep = Estimator.timings
    monkeypatch.setattr(Estimator, "timings", afresh)  # nothing kept
    plain, more = run()
    assert reused == plain
    assert fewer < more
