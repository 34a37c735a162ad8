"""Cards that learn (hetsched.model.learned): the de-contended figures a run measured, their drift
from the cards, and the contradiction a run reports when the cards are wrong beyond their spread.

The simulator is the world here (its model is the one the de-contention inverts): with cards equal
to the truth nothing may be contradicted, noise-free the learned figures are the cards exactly, and
a world whose tool is slower than its card is caught and named with the refresh command.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.bench.generate import FAMILIES, WorkflowSpec, random_scenario
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mode, Scenario
from hetsched.model.files import bundled_scenarios, load_scenario
from hetsched.model.learned import MIN_SAMPLES, LearnedFigure, learned_cards, refresh_call, refresh_command
from hetsched.policies import make_policy
from hetsched.sim import Simulator

SPECS = st.builds(WorkflowSpec, st.sampled_from(FAMILIES), st.integers(4, 7),
                  st.sampled_from([Mode.BINARY, Mode.THREE_WAY]), st.integers(0, 10_000))


def run(scenario: Scenario, world: Scenario | None = None, rounds: int = 8, seed: int = 1, noise: bool = True):
    ex = Simulator(world or scenario, noise=noise)
    return run_rounds(scenario, make_policy("agentic"), LoopConfig(rounds=rounds, seed=seed), executor=ex)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SPECS, st.integers(0, 100))
def test_cards_equal_to_the_truth_are_never_contradicted(spec: WorkflowSpec, seed: int) -> None:
    sc = random_scenario(spec)
    learned = learned_cards(sc, run(sc, seed=seed).rounds)
    assert learned.figures  # every run measures something
    assert learned.contradicted == ()
    assert learned.refresh is None
    assert all(abs(f.drift) < 0.2 for f in learned.figures)  # noise_cv 0.03: far inside


@pytest.mark.parametrize("name", sorted(bundled_scenarios()))
def test_noise_free_learned_figures_are_the_cards(name: str) -> None:
    """The de-contention inverts the model exactly: under contention too, every learned sample is the card."""
    sc = load_scenario(name)
    learned = learned_cards(sc, run(sc, rounds=5, noise=False).rounds)
    for f in learned.figures:
        assert f.samples_ms == pytest.approx([f.card_ms] * f.n, rel=1e-6), f.describe()
        assert not f.contradicted


def test_a_stale_card_is_contradicted_and_the_refresh_names_it(tmp_path) -> None:
    sc = load_scenario("fanout")
    tool = next(t for t, c in sc.cards.items() if c.gpu_ms is not None)
    card = sc.cards[tool]
    world = sc.model_copy(update={"cards": {**sc.cards, tool: card.model_copy(
        update={"gpu_ms": card.gpu_ms * 2.0, "cpu_ms": card.cpu_ms * 2.0})}})
    learned = learned_cards(sc, run(sc, world, rounds=10).rounds)
    bad = {(f.tool, f.figure) for f in learned.contradicted}
    assert bad and all(t == tool for t, _ in bad)
    for f in learned.contradicted:
        assert f.drift == pytest.approx(1.0, abs=0.2)
    assert learned.refresh is not None and tool in learned.refresh and "--refresh" in learned.refresh
    assert learned.refresh_call is not None and f"hs.profile([{tool!r}], refresh=" in learned.refresh_call
    text = "\n".join(learned.describe())
    assert "contradict" in text and learned.refresh in text
    data = json.loads(json.dumps(learned.to_dict()))
    assert [tool, "gpu_ms"] in data["contradicted"] or [tool, "cpu_ms"] in data["contradicted"]
    # the learned scenario carries the measured figures: its model now matches the world
    fixed = learned.scenario(sc)
    for f in learned.figures:
        if f.n >= MIN_SAMPLES:
            assert getattr(fixed.cards[f.tool], f.figure) == pytest.approx(f.median_ms)
    again = learned_cards(fixed, run(fixed, world, rounds=6, seed=2).rounds)
    assert again.contradicted == ()


def test_contradiction_needs_samples_and_both_spreads() -> None:
    few = LearnedFigure("t", "cpu_ms", 10.0, None, None, (30.0, 30.0))
    assert not few.contradicted  # fewer than MIN_SAMPLES
    far = LearnedFigure("t", "cpu_ms", 10.0, None, None, (30.0, 31.0, 29.0))
    assert far.contradicted and far.drift == pytest.approx(2.0)
    near = LearnedFigure("t", "cpu_ms", 10.0, None, None, (10.5, 10.9, 10.2))
    assert not near.contradicted
    # the card's own spread covers the measurements: not a contradiction
    wide_card = LearnedFigure("t", "cpu_ms", 10.0, 8.0, 14.0, (13.5, 14.5, 14.0))
    assert not wide_card.contradicted
    # the measurements are all over the place and cover the card: not a contradiction either
    noisy = LearnedFigure("t", "cpu_ms", 10.0, None, None, (5.0, 30.0, 28.0, 29.0, 31.0, 9.0))
    assert not noisy.contradicted


def test_refresh_command_for_files_and_bundled_scenarios(tmp_path) -> None:
    path = tmp_path / "my flow.yaml"
    assert refresh_command(str(path), ["a", "b"]) == f"hetsched profile --refresh '{path}' a b"
    bundled = refresh_command(str(bundled_scenarios()["rag_tiny"]), ["embed"])
    assert bundled == "hetsched init rag_tiny -o rag_tiny.yaml && hetsched profile --refresh rag_tiny.yaml embed"
    assert refresh_command("rag_tiny").startswith("hetsched init rag_tiny -o rag_tiny.yaml")


def test_run_reports_the_drift_and_the_contradiction_in_json_and_text() -> None:
    from hetsched.cli.app import out
    from hetsched.cli.common import print_learned

    sc = load_scenario("chain")
    tool = sc.workflow.tools[0]
    card = sc.cards[tool]
    slow = {"cpu_ms": card.cpu_ms * 3.0} | ({} if card.gpu_ms is None else {"gpu_ms": card.gpu_ms * 3.0})
    world = sc.model_copy(update={"cards": {**sc.cards, tool: card.model_copy(update=slow)}})
    result = run(sc, world, rounds=8)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["cards"]["contradicted"] and all(t == tool for t, _ in data["cards"]["contradicted"])
    assert data["cards"]["refresh"] == result.learned.refresh
    for measured in (True, False):
        with out.capture() as cap:
            print_learned(result.learned, measured=measured)
        text = cap.get()
        assert "card contradicted" in text and "re-profile" in text and "--refresh" in text
        assert tool in text
    # cards equal to the truth: the one-line summary says nothing is contradicted
    fine = run(sc, rounds=4)
    with out.capture() as cap:
        print_learned(fine.learned, measured=False)
    assert "none contradicted" in cap.get() and "re-profile" not in cap.get()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SPECS, st.lists(st.floats(0.0, 3.0), min_size=1, max_size=8))
def test_noise_free_with_measured_cpu_demand_the_learned_figures_are_the_cards(spec: WorkflowSpec,
                                                                               demands: list[float]) -> None:
    """Tools that wait (cpu_demand < 1) slow only on their busy part: the de-contention follows the kernel."""
    sc = random_scenario(spec)
    cards = {t: c.model_copy(update={"cpu_demand": demands[i % len(demands)]})
             for i, (t, c) in enumerate(sc.cards.items())}
    sc = sc.model_copy(update={"cards": cards})
    sc = Scenario.model_validate(sc.model_dump())  # recompile
    learned = learned_cards(sc, run(sc, rounds=4, noise=False).rounds)
    for f in learned.figures:
        assert f.samples_ms == pytest.approx([f.card_ms] * f.n, rel=1e-6), f.describe()


def test_the_stored_run_exports_the_same_learned_cards(tmp_path) -> None:
    import hetsched as hs
    from hetsched.store import RunStore

    sc = load_scenario("fanout")
    result = hs.run(sc, "agentic", rounds=4, store=tmp_path / "runs.sqlite")
    assert result.run_id is not None
    with RunStore(tmp_path / "runs.sqlite") as st:
        exported = json.loads(json.dumps(st.export(result.run_id)))
    assert exported["cards"] == json.loads(json.dumps(result.learned.to_dict()))


@given(st.lists(st.text(alphabet="ab_9'\" -", min_size=1, max_size=12), max_size=3, unique=True),
       st.sampled_from(["my flow.yaml", "dir/it's.yml", "/abs/x.yaml"]))
def test_the_python_refresh_call_is_the_call_that_refreshes_that_file(tools: list[str], file: str) -> None:
    """``refresh_call`` is valid Python: ``hs.profile(TOOLS, refresh=FILE)`` with the user's own file, and for
    a bundled scenario the copy ``hetsched init`` writes (the package's own files are not rewritten)."""
    import ast

    for ref, want in ((file, file), ("fanout", "fanout.yaml")):
        code = refresh_call(ref, tools)
        call = ast.parse(code.split("  # ")[0], mode="eval").body
        assert isinstance(call, ast.Call) and ast.unparse(call.func) == "hs.profile"
        assert [ast.literal_eval(a) for a in call.args] == ([tools] if tools else [])
        assert {k.arg: ast.literal_eval(k.value) for k in call.keywords} == {"refresh": want}
        assert ("hetsched init fanout -o fanout.yaml" in code) == (ref == "fanout")


# ---------------------------------------------------------------------------- queued loads under cold_load_share
def cold_share_case(share: float, warm_ms: float = 10.0, cold_factor: float = 5.0) -> Scenario:
    """Three tools in a chain, every one with a measured cold load, on a machine where ``share`` of the
    queued loads find their memory cold (the model charges each load its expectation)."""
    from tests.factories import chain, make_card, make_scenario

    cards = [make_card(f"t{k}", cpu_ms=400.0, gpu_ms=20.0, load_ms=warm_ms * (k + 1),
                       load_cold_ms=warm_ms * (k + 1) * cold_factor, vram_mb=100.0) for k in range(3)]
    return make_scenario(chain(3), cards, mode=Mode.THREE_WAY, cold_load_share=share, noise_cv=0.03)


class _Round:
    """The part of a RoundRecord ``learned_cards`` reads: its probes and its trace."""

    def __init__(self, trace) -> None:
        self.probes = ()
        self.trace = trace


def queued_rounds(sc: Scenario, loads: list[list[float]]):
    """Rounds of ``sc`` with every node ``gpu_queue``, run on the simulator, whose measured loads are
    replaced by ``loads[round][node]`` (a real device's warm and cold loads, which a trace does not tell apart)."""
    import dataclasses

    from hetsched.model import Placement
    from hetsched.model.mapping import Mapping

    mapping = Mapping({n: Placement.GPU_QUEUE for n in sc.workflow.node_ids})
    base = Simulator(sc, noise=False).run(mapping)
    out = []
    for row in loads:
        nodes = {n: dataclasses.replace(nt, load_ms=row[i]) for i, (n, nt) in enumerate(base.nodes.items())}
        out.append(_Round(dataclasses.replace(base, nodes=nodes)))
    return out


def test_simulated_cold_share_loads_are_learned_against_the_expected_load() -> None:
    """The simulator charges each queued load its expectation under the share: learned against the card's
    warm ``load_ms`` every load drifted and contradicted the card, and the learned card then charged the
    cold share again on top of a figure that already held it."""
    from hetsched.model.contention import queue_load_ms

    sc = cold_share_case(0.4)
    rounds = queued_rounds(sc, [[queue_load_ms(sc.cards[t], sc.machine) for t in sc.workflow.tools]] * 4)
    learned = learned_cards(sc, rounds)
    loads = [f for f in learned.figures if f.figure == "load_ms"]
    assert len(loads) == 3
    for f in loads:
        assert f.card_ms == pytest.approx(queue_load_ms(sc.cards[f.tool], sc.machine))
        assert f.drift == pytest.approx(0.0, abs=1e-9) and not f.contradicted, f.describe()
    fixed = learned.scenario(sc)
    for f in loads:
        assert queue_load_ms(fixed.cards[f.tool], fixed.machine) == pytest.approx(f.learned_ms)
    # and with noise, on the agentic loop: nothing is contradicted, nothing drifts beyond the noise
    result = run(sc, rounds=8)
    for f in learned_cards(sc, result.rounds).figures:
        assert not f.contradicted and abs(f.drift) < 0.2, f.describe()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.floats(0.05, 1.0), st.floats(0.3, 3.0), st.floats(1.5, 12.0),
       st.lists(st.booleans(), min_size=MIN_SAMPLES, max_size=12))
def test_learned_expected_load_is_the_measured_mean_of_warm_and_cold_loads(
        share: float, world_scale: float, world_cold: float, cold: list[bool]) -> None:
    """A device whose loads are warm or cold (the trace cannot say which): the learned card's expected load
    is the measured mean, and learning again from the learned card moves nothing (no drift round after round)."""
    from hetsched.model.contention import queue_load_ms

    sc = cold_share_case(share)
    loads = [[sc.cards[t].load_ms * world_scale * (world_cold if c else 1.0) for t in sc.workflow.tools]
             for c in cold]
    rounds = queued_rounds(sc, loads)
    first = learned_cards(sc, rounds)
    fixed = first.scenario(sc)
    for k, tool in enumerate(sc.workflow.tools):
        mean = sum(row[k] for row in loads) / len(loads)
        assert queue_load_ms(fixed.cards[tool], fixed.machine) == pytest.approx(mean, rel=1e-9)
        assert fixed.cards[tool].load_cold_ms is not None
        assert fixed.cards[tool].load_cold_ms > fixed.cards[tool].load_ms  # the warm/cold ratio is the card's
    again = learned_cards(fixed, rounds)
    for f in again.figures:
        if f.figure == "load_ms":
            assert f.drift == pytest.approx(0.0, abs=1e-9), f.describe()
    twice = again.scenario(fixed)
    for tool in sc.workflow.tools:
        assert twice.cards[tool].load_ms == pytest.approx(fixed.cards[tool].load_ms, rel=1e-9)


def test_at_share_zero_the_learned_load_is_the_median_against_the_card() -> None:
    """The default machine: the learned load is the samples' median compared with the card's ``load_ms``."""
    sc = cold_share_case(0.0)
    loads = [[sc.cards[t].load_ms * f for t in sc.workflow.tools] for f in (1.0, 1.1, 5.0)]
    learned = learned_cards(sc, queued_rounds(sc, loads))
    for f in learned.figures:
        if f.figure == "load_ms":
            assert not f.by_mean and f.card_ms == sc.cards[f.tool].load_ms
            assert f.learned_ms == pytest.approx(sc.cards[f.tool].load_ms * 1.1)
            assert learned.scenario(sc).cards[f.tool].load_ms == pytest.approx(f.learned_ms)


def test_the_real_executor_table_shows_the_learned_load_the_model_charges() -> None:
    """``hetsched run``/``show-run`` on a real executor print a table per figure: a queued load under a cold
    share shows the learned mean (the figure the learned card charges), not the samples' median."""
    from hetsched.cli.app import out
    from hetsched.cli.common import print_learned

    sc = cold_share_case(0.5)
    loads = [[sc.cards[t].load_ms * f for t in sc.workflow.tools] for f in (1.0, 1.0, 1.0, 9.0)]
    learned = learned_cards(sc, queued_rounds(sc, loads))
    f = learned.get("t0", "load_ms")
    assert f is not None and f.by_mean and f.learned_ms == pytest.approx(30.0) and f.median_ms == pytest.approx(10.0)
    with out.capture() as cap:
        print_learned(learned, measured=True)
    row = next(line for line in cap.get().splitlines() if line.split()[:2] == ["t0", "load_ms"])
    assert row.split()[2:4] == [f"{f.card_ms:.4g}", "30"], row


@pytest.mark.parametrize("noise", [False, True])
def test_loads_that_reused_warm_memory_are_learned_as_the_model_charged_them(noise: bool) -> None:
    """With ``warm_reuse_ms`` the kernel charges a load that reuses memory freed just before its ``load_ms``
    (the warm floor), the rest the cold-share expectation: each sample is read against what the model
    charged that load, so the simulator's own loads teach the card's expectation (noise-free: exactly),
    where taking them as measured pulled the learned load down to the warm floor and contradicted the card."""
    from hetsched.model import Placement
    from hetsched.model.contention import queue_load_ms
    from hetsched.model.mapping import Mapping

    sc = cold_share_case(0.5).model_copy(update={"machine": cold_share_case(0.5).machine.model_copy(
        update={"warm_reuse_ms": 10_000.0})})
    sc = Scenario.model_validate(sc.model_dump())  # recompile
    mapping = Mapping({n: Placement.GPU_QUEUE for n in sc.workflow.node_ids})
    sim = Simulator(sc, noise=noise)
    traces = [sim.run(mapping, seed=s) for s in range(4)]
    charged = [nt.load_ms for nt in traces[0].nodes.values()]
    cards = [sc.cards[t] for t in sc.workflow.tools]
    if not noise:  # the chain's later loads reuse their predecessor's memory: charged the warm load_ms
        assert charged[0] == pytest.approx(queue_load_ms(cards[0], sc.machine))
        assert charged[1:] == pytest.approx([cards[1].load_ms, cards[2].load_ms])
    learned = learned_cards(sc, [_Round(t) for t in traces])
    loads = [f for f in learned.figures if f.figure == "load_ms"]
    assert len(loads) == 3
    for f in loads:
        assert f.card_ms == pytest.approx(queue_load_ms(sc.cards[f.tool], sc.machine))
        assert not f.contradicted and abs(f.drift) < (0.15 if noise else 1e-9), f.describe()
    fixed = learned.scenario(sc)
    for f in loads:
        assert queue_load_ms(fixed.cards[f.tool], fixed.machine) == pytest.approx(f.learned_ms)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.builds(WorkflowSpec, st.sampled_from(FAMILIES), st.integers(4, 7), st.just(Mode.THREE_WAY),
                 st.integers(0, 10_000)),
       st.floats(0.05, 1.0), st.sampled_from([0.0, 50.0, 500.0, 100_000.0]), st.floats(1.5, 8.0))
def test_noise_free_cold_and_warm_loads_are_learned_as_the_card_expects(spec: WorkflowSpec, share: float,
                                                                       warm_reuse_ms: float, cold: float) -> None:
    """Random workflows, every card with a cold load, any share and warm-reuse window: noise-free, every
    learned load is the card's expected load (the de-contention of loads inverts the kernel's charge)."""
    sc = random_scenario(spec)
    cards = {t: c.model_copy(update={"load_cold_ms": c.load_ms * cold}) for t, c in sc.cards.items()}
    machine = sc.machine.model_copy(update={"cold_load_share": share, "warm_reuse_ms": warm_reuse_ms})
    sc = Scenario.model_validate(sc.model_copy(update={"cards": cards, "machine": machine}).model_dump())
    learned = learned_cards(sc, run(sc, rounds=4, noise=False).rounds)
    for f in learned.figures:
        assert f.samples_ms == pytest.approx([f.card_ms] * f.n, rel=1e-6), f.describe()
        assert not f.contradicted
