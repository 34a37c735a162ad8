"""The ``rules`` decider's time budget (``max_decision_ms``) and the search deadline beneath it.

No test reads a clock's value: a deadline already passed (``time.perf_counter() - 1``) or one that cannot pass
during a test (a billion seconds away) pins down what the search does at either end, whatever the load.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.bench.generate import FAMILIES, WorkflowSpec, random_scenario
from hetsched.cli import main
from hetsched.deciders.base import DeciderConfigError, check_mapping
from hetsched.deciders.estimate import Estimator
from hetsched.deciders.rules import SCREEN_MIN_NODES, RulesDecider
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mode
from hetsched.model.descent import local_search, resume
from hetsched.policies import make_policy
from hetsched.policies.decider_registry import make_decider
from hetsched.store import RunStore

FAR = 1e9
"""Seconds to a deadline no test reaches."""


def _search_inputs(family: str, n: int, three_way: bool, seed: int):  # type: ignore[no-untyped-def]
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    est = Estimator(sc, sc.machine.gpu_kappa)
    allowed = sc.compiled.allowed
    starts = [tuple(a[0] for a in allowed), tuple(a[-1] for a in allowed)]
    return est, allowed, starts


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(6, SCREEN_MIN_NODES + 8), three_way=st.booleans(),
       seed=st.integers(0, 10_000), screen=st.booleans())
def test_a_deadline_that_never_passes_changes_nothing_and_a_passed_one_keeps_only_the_starts(
        family: str, n: int, three_way: bool, seed: int, screen: bool) -> None:
    est, allowed, starts = _search_inputs(family, n, three_way, seed)
    kw = dict(max_evaluations=400, seed=seed, screen=screen)
    plain = local_search(est, starts, allowed, **kw)  # type: ignore[arg-type]
    far = local_search(est, starts, allowed, deadline=time.perf_counter() + FAR, **kw)  # type: ignore[arg-type]
    assert (far.best, far.e2e_ms, list(far.seen.items())) == (plain.best, plain.e2e_ms, list(plain.seen.items()))
    assert not far.timed_out and "time budget" not in far.spent()
    cut = local_search(est, starts, allowed, deadline=time.perf_counter() - 1.0, **kw)  # type: ignore[arg-type]
    # the starts are always estimated, so a decision always has a mapping; nothing else is
    assert set(cut.seen) == set(starts) and cut.e2e_ms == min(plain.seen[s] for s in starts)
    assert cut.timed_out and not cut.exhaustive and cut.spent().endswith("stopped at its time budget")
    # a continuation with a deadline passed adds nothing, and never ends worse
    more = resume(plain, 200, seed + 1, deadline=time.perf_counter() - 1.0)
    assert more.seen == plain.seen and more.e2e_ms == plain.e2e_ms
    assert more.timed_out or more is plain  # an exhaustive result comes back as it was


def test_a_decision_with_a_budget_already_spent_is_still_a_valid_mapping_and_says_it_stopped() -> None:
    """The smallest budget: every decision's searches stop at once. Each round still proposes a mapping that
    passes validation, and its record says the search stopped at its time budget."""
    sc = random_scenario(WorkflowSpec("layered", SCREEN_MIN_NODES + 13, Mode.THREE_WAY, 7))
    res = run_rounds(sc, make_policy("agentic", decider="rules", max_decision_ms=1e-9), LoopConfig(rounds=3, seed=0))
    assert len(res.rounds) == 3
    for rec in res.rounds:
        assert check_mapping(sc, rec.mapping) == ""
        assert "stopped at its time budget" in rec.proposal.decision.attempts[-1].reasoning  # type: ignore[union-attr]


def test_round_0_with_a_budget_it_never_reaches_is_round_0_without_one() -> None:
    """A time budget is a cap: while it does not pass, round 0's search is the same, estimate for estimate."""
    sc = random_scenario(WorkflowSpec("forkjoin", SCREEN_MIN_NODES + 3, Mode.THREE_WAY, 11))
    plain = run_rounds(sc, make_policy("agentic", decider="rules"), LoopConfig(rounds=1, seed=0))
    capped = run_rounds(sc, make_policy("agentic", decider="rules", max_decision_ms=FAR * 1000.0),
                        LoopConfig(rounds=1, seed=0))
    assert capped.rounds[0].mapping == plain.rounds[0].mapping
    reasoning = capped.rounds[0].proposal.decision.attempts[-1].reasoning  # type: ignore[union-attr]
    assert "time budget" not in reasoning


@pytest.mark.parametrize("bad", [0.0, -5.0, math.nan, math.inf])
def test_a_budget_that_is_not_a_positive_number_of_ms_is_refused_with_the_value(bad: float) -> None:
    with pytest.raises(ValueError, match=r"max_decision_ms must be a positive number of milliseconds, got"):
        RulesDecider(max_decision_ms=bad)


def test_the_decider_registry_names_the_budget_among_the_rules_options() -> None:
    with pytest.raises(DeciderConfigError, match=r"max_decision_ms"):
        make_decider("rules", max_decision_s=1.0)
    assert make_decider("rules", max_decision_ms=50.0).max_decision_ms == 50.0  # type: ignore[attr-defined]


def test_the_cli_caps_a_run_and_records_the_budget_with_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``hetsched run --max-decision-ms``: the smallest budget stops every decision's searches (the stored
    decisions say so), and the budget is one of the run's recorded options, so ``--resume`` keeps it."""
    store = tmp_path / "runs.sqlite"
    with pytest.raises(SystemExit) as exc:
        main(["run", "S13", "-p", "agentic", "--max-decision-ms", "1e-9", "-r", "2", "--store", str(store),
              "--reference", "none", "--json"])
    assert exc.value.code == 0
    data = json.loads(capsys.readouterr().out)
    with RunStore(store) as db:
        (info,) = db.runs()
        assert info.options["max_decision_ms"] == 1e-9
        rounds = db.rounds(data["run_id"])
    assert len(rounds) == 2
    assert all("stopped at its time budget" in r.proposal.decision.attempts[-1].reasoning  # type: ignore[union-attr]
               for r in rounds)


@pytest.mark.parametrize("args, expected", [
    (["-p", "agentic", "--max-decision-ms", "inf"], "--max-decision-ms must be a positive number of milliseconds"),
    (["-p", "agentic", "--max-decision-ms", "0"], "--max-decision-ms must be a positive number of milliseconds"),
    (["-p", "agentic", "--max-decision-ms", "nan"], "got nan"),
    (["-p", "agentic", "--max-decision-ms", "-5"], "got -5"),
    (["-p", "agentic", "--max-decision-ms", "abc"], "got 'abc', not a number"),
    (["-p", "agentic", "--decider", "argmin", "--max-decision-ms", "5"], "decider 'argmin' has no such budget"),
    (["-p", "heft", "--max-decision-ms", "5"], "--max-decision-ms applies only to --policy agentic"),
])
def test_the_cli_refuses_a_budget_it_cannot_apply_naming_it(
        capsys: pytest.CaptureFixture[str], args: list[str], expected: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "chain", *args, "-r", "1", "--no-store"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
