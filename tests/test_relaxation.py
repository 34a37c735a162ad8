"""The relaxation bound (CP-SAT, the optional ``[search]`` extra) never exceeds the optimum, and
without OR-Tools the reference falls back to the other bounds and says so in its label."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.search_scenarios import FAMILIES, random_search_scenario
from tests.test_oracle import naive
from tests.test_sim import instances

from hetsched.bench.generate import FAMILIES as GEN_FAMILIES
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.model import Mode, ReferenceKind, Scenario
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
