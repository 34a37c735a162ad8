"""Warm start: a new session of a workflow the store has seen starts from its best feasible
measured mapping, re-checked against the new budget; one that shares tools plans with their
measured behaviour; non-adaptive policies and continued sessions are left alone."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

import hetsched as hs
from hetsched.model import Placement, Scenario
from hetsched.sim import Simulator
from hetsched.store import RunStore
from hetsched.warm import measured_cards, prior_for


def with_budget(sc: Scenario, budget: float) -> Scenario:
    return sc.model_copy(update={"machine": sc.machine.model_copy(update={"vram_budget_mb": budget})})


def test_a_new_session_starts_from_the_stores_best_feasible_mapping(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    sc = hs.load_scenario("vram_3way")
    with hs.Session(sc, executor="sim", store=store, warm_start=False) as past:
        for _ in range(6):
            past.submit(None)
        best = past.best()
    assert best is not None
    with hs.Session(sc, executor="sim", store=store) as warm:
        assert warm.prior is not None and warm.prior.mapping == best.mapping
        assert warm.mapping == best.mapping  # the first proposal
        first = warm.submit(None)
        assert first.mapping == best.mapping and "warm start" in warm.rounds[0].proposal.rationale
    # a budget the best mapping no longer fits: it is not proposed (re-checked), and nothing infeasible runs
    need = sc.gpu_now_vram_mb(best.mapping)
    tight = with_budget(sc, max(c.vram_mb for c in sc.cards.values() if c.has_gpu) if need > 0 else 1.0)
    with RunStore(store) as st:
        prior = prior_for(st, tight, executor="sim")
    if prior is not None and prior.mapping is not None:
        assert Simulator(tight, noise=False).infeasibility(prior.mapping) is None
    with hs.Session(tight, executor="sim", store=store) as s2:
        assert s2.submit(None).trace.feasible


def test_shared_tools_give_their_measured_behaviour(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    sc = hs.load_scenario("chain")
    with hs.Session(sc, executor="sim", store=store, policy="all-cpu") as past:
        for _ in range(3):
            past.submit(None)
    first = sc.workflow.nodes[0]
    other = (hs.Workflow("other", tools={t: sc.cards[t] for t in sc.workflow.tools})
             .node("X", first.tool).scenario())
    with RunStore(store) as st:
        prior = prior_for(st, other, executor="sim")
    assert prior is not None and prior.mapping is None and prior.cards
    with RunStore(store) as st:
        info = st.runs()[0]
        rounds = st.rounds(info.id)
    model = Simulator(sc, noise=False)
    ratios = [r.trace.nodes[first.id].run_ms / model.run(r.mapping, seed=0).nodes[first.id].run_ms for r in rounds]
    assert len(ratios) == 3  # all-CPU: one CPU run of the tool per request
    assert prior.cards[first.tool].cpu_ms == pytest.approx(sc.cards[first.tool].cpu_ms * statistics.median(ratios))
    assert prior.cards[first.tool].cpu_ms != sc.cards[first.tool].cpu_ms  # measured with noise
    assert measured_cards(other, []) == dict(other.cards)


def test_non_adaptive_policies_and_continued_sessions_are_not_warm_started(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    sc = hs.load_scenario("vram_3way")
    with hs.Session(sc, executor="sim", store=store) as past:
        past.submit(None)
    with hs.Session(sc, executor="sim", store=store, policy="all-cpu") as s:
        assert s.prior is None and set(s.mapping.values()) == {Placement.CPU}
    with hs.Session(sc, executor="sim", store=store, name="svc") as s:
        s.submit(None)
    with hs.Session(sc, executor="sim", store=store, name="svc") as s:
        assert s.prior is None and len(s.rounds) == 1


def test_hetsched_run_warm_start_is_recorded_and_resumed_identically(tmp_path: Path) -> None:
    import shutil

    from hetsched.loop import WARM_START_OPTION

    past = tmp_path / "past.sqlite"
    first = hs.run("vram_3way", "agentic", rounds=5, seed=1, store=past)
    best = first.best_round
    assert best is not None
    copy = tmp_path / "copy.sqlite"
    shutil.copy(past, copy)
    whole = hs.run("vram_3way", "agentic", rounds=6, seed=2, store=past, warm_start=True)
    assert whole.rounds[0].mapping == best.mapping and "warm start" in whole.rounds[0].proposal.rationale
    with RunStore(past) as st:
        assert st.key(whole.run_id or "").options[WARM_START_OPTION] == [first.run_id]

    class Stop(Exception):
        pass

    def stop_at_2(r: object) -> None:
        if getattr(r, "round", 0) == 2:
            raise Stop

    with pytest.raises(Stop):
        hs.run("vram_3way", "agentic", rounds=6, seed=2, store=copy, warm_start=True, on_round=stop_at_2)
    with RunStore(copy) as st:
        cut = next(i for i in st.runs() if i.status == "interrupted")
    resumed = hs.resume(cut.id, store=copy)
    assert [r.mapping for r in resumed.rounds] == [r.mapping for r in whole.rounds]


def test_cli_warm_start_flag(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from hetsched.cli import app
    from hetsched.cli import run as _  # noqa: F401  (registers the command)

    store = str(tmp_path / "r.sqlite")
    runner = CliRunner()
    assert runner.invoke(app, ["run", "chain", "-p", "agentic", "-r", "3", "--store", store]).exit_code == 0
    res = runner.invoke(app, ["run", "chain", "-p", "agentic", "-r", "2", "--store", store, "--warm-start",
                              "--reference", "none"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["run", "chain", "-p", "all-cpu", "--warm-start", "--store", store])
    assert res.exit_code == 2 and "--warm-start applies to adaptive policies" in res.output


@pytest.mark.parametrize(("family", "seed"), [("fanout", 1), ("layered", 3)])
def test_a_capped_session_warm_started_from_an_uncapped_run_plays_only_what_that_run_measured(
        tmp_path: Path, family: str, seed: int) -> None:
    """A serving path's recipe for a large workflow: decide once without a time budget (round 0 searches for
    seconds), then serve with ``max_decision_ms`` and ``warm_start``. With a budget already spent at every
    decision (its searches keep only their starts), the warm-started session still plays only mappings the
    uncapped run measured (the best first), never a start of a search cut short; cold, it plays those starts."""
    from hetsched.bench.generate import WorkflowSpec, random_scenario
    from hetsched.deciders.rules import SCREEN_MIN_NODES
    from hetsched.model import Mode

    sc = random_scenario(WorkflowSpec(family, SCREEN_MIN_NODES + 4, Mode.THREE_WAY, seed))
    store = tmp_path / "r.sqlite"
    with hs.Session(sc, executor="sim", store=store, warm_start=False, policy_options={"decider": "rules"}) as past:
        measured = {past.submit(None).mapping for _ in range(2)}
        best = past.best()
    assert best is not None
    capped = {"decider": "rules", "max_decision_ms": 1e-9}
    with hs.Session(sc, executor="sim", store=store, warm_start=True, name="warm", policy_options=capped) as warm:
        played = [warm.submit(None).mapping for _ in range(4)]
    assert played[0] == best.mapping
    assert all(m in measured for m in played), "a warm-started capped session played a mapping never measured"
    with hs.Session(sc, executor="sim", store=store, warm_start=False, name="cold", policy_options=capped) as cold:
        assert cold.submit(None).mapping not in measured  # what the warm start saves it from
