"""The runtime monitor (Algorithm 1): running averages, feasibility, probes, hints, budgets, and
the design rule that it never recommends a mapping nor scores one that did not run."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.factories import canonical_scenario, decision_info, make_card, make_scenario, make_workflow

from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import (
    Infeasibility,
    InfeasibleKind,
    Mapping,
    Mode,
    NodeTrace,
    Placement,
    Probe,
    Proposal,
    RoundRecord,
    Scenario,
    Trace,
)
from hetsched.model.files import load_scenario
from hetsched.model.scenario import cold_reason
from hetsched.monitor import (
    MECHANISMS,
    OBSERVATION_TYPES,
    Monitor,
    MonitorConfig,
    Observations,
    critical_path,
)
from hetsched.policies import make_policy
from hetsched.sim import Simulator

ADVICE = re.compile(
    r"\b(recommend\w*|suggest\w*|should|advis\w*|optimal|best choice|try|predict\w*|estimat\w*|expected|"
    r"you must|prefer\w*)\b",
    re.IGNORECASE,
)


class Runner:
    """A probe runner over the simulator that records what it was asked to run."""

    def __init__(self, scenario: Scenario, noise: bool = True) -> None:
        self.sim = Simulator(scenario, noise=noise)
        self.calls: list[tuple[str, Mapping, Mapping, str]] = []

    def __call__(self, kind: str, base: Mapping, mapping: Mapping, note: str) -> Probe:
        self.calls.append((kind, base, mapping, note))
        return Probe(kind, base, self.sim.run(mapping, seed=len(self.calls)), note)


def probe_and_observe(mon: Monitor, history: Sequence[RoundRecord], runner: Runner | None = None) -> Observations:
    """What the loop does each round: execute the monitor's probe requests one at a time (through
    ``runner``), then have the monitor observe the history and the round's probes."""
    probes: list[Probe] = []
    if runner is not None:
        while (request := mon.next_probe(history, probes)) is not None:
            probes.append(runner(request.kind, request.base, request.mapping, request.note))
    return mon.observe(history, probes)


def record(scenario: Scenario, r: int, mapping: Mapping, probes: Sequence[Probe] = (), noise: bool = True) -> RoundRecord:
    trace = Simulator(scenario, noise=noise).run(mapping, seed=1000 + r)
    return RoundRecord(r, Proposal(mapping), trace, tuple(probes))


# ---------------------------------------------------------------- the design rule
def test_output_types_have_no_place_for_a_recommendation() -> None:
    banned = ("recommend", "suggest", "score", "predict", "estimate", "best", "choice", "advice")
    for cls in OBSERVATION_TYPES:
        for f in dataclasses.fields(cls):
            assert not any(b in f.name.lower() for b in banned), (cls.__name__, f.name)
    assert {f.name for f in dataclasses.fields(Observations)} == {
        "round", "records", "text", "probes", "probes_spent_run"
    }


def _agentic_runs() -> list[tuple[Scenario, list[RoundRecord]]]:
    runs = []
    for name in ("chain", "fanout", "vram_3way"):
        sc = load_scenario(name)
        for decider, cold in (("rules", False), ("rules", True), ("argmin", False)):
            res = run_rounds(sc, make_policy("agentic", decider=decider, cold_start=cold), LoopConfig(rounds=8, seed=3))
            runs.append((sc, res.rounds))
    return runs


AGENTIC_RUNS = _agentic_runs()


@pytest.mark.parametrize(("scenario", "rounds"), AGENTIC_RUNS)
def test_every_figure_belongs_to_a_mapping_that_ran(scenario: Scenario, rounds: list[RoundRecord]) -> None:
    order = scenario.workflow.node_ids
    assert any(rec.probes for rec in rounds)  # runs with probes, warm and cold start
    for rec in rounds:
        executed: set[Mapping] = set()
        for earlier in rounds[: rec.round]:
            executed.add(earlier.mapping)
            executed.update(p.mapping for p in earlier.probes)
        executed.update(p.mapping for p in rec.probes)  # this round's probes ran before the decision
        codes = {m.code(order) for m in executed}
        for obs in decision_info(rec)["observations"]:
            if obs["kind"] in ("execution", "probe", "last_round"):
                assert Mapping(obs["mapping"]) in executed, obs
            if obs["kind"] == "probe":
                assert Mapping(obs["base"]) in executed, obs
            if obs["kind"] == "infeasible" and obs["source"] == "budget check":
                m = Mapping(obs["mapping"])
                assert scenario.infeasibility(m) and m not in executed
        # the text the decider was given this round, as the policy stored it
        monitor_text = decision_info(rec)["observations_text"]
        listed = re.findall(r"^- ([CGQ]+): mean E2E", monitor_text, flags=re.MULTILINE)
        probed = re.findall(r"^- (?:reprobe|swap) ([CGQ]+) \(", monitor_text, flags=re.MULTILINE)
        assert len(probed) == len(rec.probes)
        assert bool(listed) == (rec.round > 0 or bool(rec.probes))  # the code check below is not vacuous
        for code in listed + probed:
            assert code in codes
        assert not ADVICE.search(monitor_text), ADVICE.search(monitor_text)
        if decision_info(rec)["cold_start"]:
            assert "budget check" not in monitor_text and " card " not in monitor_text


def test_text_of_a_full_round_has_no_advice_and_lists_probes() -> None:
    sc = load_scenario("vram_3way")
    history = [record(sc, 0, Mapping({"A": "gpu_now", "B": "gpu_now", "C": "cpu", "D": "gpu_queue"}))]
    obs = probe_and_observe(Monitor(sc), history, Runner(sc))
    assert len(obs.probes) == 2
    assert "What-if probes executed this round" in obs.text
    assert "Never measured" in obs.text
    assert not ADVICE.search(obs.text)


# ---------------------------------------------------------------- running averages (exact)
def _two_node_scenario() -> Scenario:
    return make_scenario(
        make_workflow([("A", "ta"), ("B", "tb")]),
        [make_card("ta", 400.0, 40.0, load_ms=30.0), make_card("tb", 300.0, 30.0)],
        mode=Mode.THREE_WAY,
    )


def _trace(sc: Scenario, spans: dict[str, tuple[str, float, float, float]]) -> Trace:
    """Hand trace: node -> (placement, admitted, start, end); ready = 0."""
    nodes = {
        n: NodeTrace(n, sc.workflow.tool_of[n], Placement(p), 0.0, adm, start, end, start - adm)
        for n, (p, adm, start, end) in spans.items()
    }
    mapping = Mapping({n: spans[n][0] for n in sc.workflow.node_ids})
    e2e = max(nt.end_ms for nt in nodes.values())
    return Trace(mapping, True, e2e, nodes)


def test_running_averages_exact() -> None:
    sc = _two_node_scenario()
    t1 = _trace(sc, {"A": ("gpu_now", 0.0, 0.0, 100.0), "B": ("gpu_now", 0.0, 0.0, 50.0)})
    t2 = _trace(sc, {"A": ("gpu_now", 0.0, 0.0, 80.0), "B": ("cpu", 0.0, 0.0, 200.0)})
    t3 = _trace(sc, {"A": ("gpu_queue", 20.0, 50.0, 90.0), "B": ("cpu", 0.0, 0.0, 210.0)})
    history = [RoundRecord(i, Proposal(t.mapping), t) for i, t in enumerate((t1, t2, t3))]
    obs = Monitor(sc).observe(history)
    lat = {(r.node, r.placement): r for r in obs.records if r.kind == "latency"}
    a = lat[("A", "gpu_now")]
    assert (a.runs, a.mean_ms, a.min_ms, a.max_ms, a.isolated_ms) == (2, 90.0, 80.0, 100.0, 40.0)
    assert a.mean_concurrent == pytest.approx((0.5 + 0.0) / 2)  # B overlapped half of A's first run
    assert lat[("B", "gpu_now")].mean_concurrent == pytest.approx(1.0)
    b = lat[("B", "cpu")]
    assert (b.runs, b.mean_ms, b.isolated_ms) == (2, 205.0, 300.0)
    q = lat[("A", "gpu_queue")]
    # latency is admission to end (load included); the wait is admission - ready
    assert (q.mean_ms, q.mean_wait_ms, q.isolated_ms) == (70.0, 20.0, 70.0)
    hints = {(r.node, r.placement) for r in obs.records if r.kind == "unmeasured"}
    assert hints == {("A", "cpu"), ("B", "gpu_queue")}
    execs = {r.code: r for r in obs.records if r.kind == "execution"}
    assert execs["GG"].mean_e2e_ms == 100.0 and execs["GC"].runs == 1


def test_cold_start_hides_the_card_figure() -> None:
    sc = _two_node_scenario()
    t1 = _trace(sc, {"A": ("gpu_now", 0.0, 0.0, 100.0), "B": ("gpu_now", 0.0, 0.0, 50.0)})
    obs = Monitor(sc, cards_visible=False).observe([RoundRecord(0, Proposal(t1.mapping), t1)])
    assert all(r.isolated_ms is None for r in obs.records if r.kind == "latency")
    assert "card" not in obs.text


def test_cold_start_lists_no_budget_check_and_cuts_reasons_to_their_kind() -> None:
    sc = load_scenario("vram_3way")
    good = Mapping({"A": "gpu_now", "B": "gpu_now", "C": "cpu", "D": "gpu_queue"})
    oom = sc.uniform(Placement.GPU_NOW)  # ran once (an earlier policy's round): 6350 MB of 3000 MB
    history = [record(sc, 0, oom), record(sc, 1, good)]
    assert "whisper_small 1100" in history[0].trace.reason
    warm = probe_and_observe(Monitor(sc), history, Runner(sc))
    cold = probe_and_observe(Monitor(sc, cards_visible=False), history, Runner(sc))
    assert [p.mapping for p in cold.probes] == [p.mapping for p in warm.probes]  # same probes either way
    assert any(r.kind == "infeasible" and r.source == "budget check" for r in warm.records)
    assert "[budget check" in warm.text and "whisper_small 1100" in warm.text
    infeasible = [r for r in cold.records if r.kind == "infeasible"]
    assert [(r.code, r.source, r.reason) for r in infeasible] == [
        ("GGGG", "round", "OOM: the gpu_now tools did not fit the VRAM budget")
    ]
    assert "budget check" not in cold.text and not re.search(r"\b(1100|1300|1350|2600|6350)\b", cold.text)
    head = Infeasibility.parse("never admissible: node 'D' (llama_1b) needs 2600 MB but only 400 MB of 3000 MB are free")
    assert cold_reason(head) == "never admissible: a gpu_queue node could never get the VRAM it needs"
    stalled = Infeasibility(InfeasibleKind.TOOL_ERROR, "x 12 MB")
    assert cold_reason(stalled) == "tool error: details withheld in cold start (they may quote the tool cards)"
    assert cold_reason(None) == ""


def test_critical_path_follows_the_latest_predecessor() -> None:
    sc = make_scenario(
        make_workflow([("A", "t"), ("B", "t"), ("C", "t")], [("A", "C"), ("B", "C")]), [make_card("t")]
    )
    t = _trace(sc, {"A": ("cpu", 0.0, 0.0, 10.0), "B": ("cpu", 0.0, 0.0, 30.0), "C": ("cpu", 30.0, 30.0, 40.0)})
    assert critical_path(t, sc) == ("B", "C")


def test_a_partial_trace_is_per_node_evidence_and_never_e2e_evidence() -> None:
    # A -> B, A -> C (a router: each request takes one branch); C never ran in the first two rounds
    sc = make_scenario(make_workflow([("A", "ta"), ("B", "tb"), ("C", "tc")], [("A", "B"), ("A", "C")]),
                       [make_card("ta", 100.0, 10.0), make_card("tb", 200.0, 20.0), make_card("tc", 300.0, 30.0)],
                       mode=Mode.THREE_WAY)
    full = Mapping({"A": "gpu_now", "B": "cpu", "C": "cpu"})

    def partial(a_end: float, b_end: float) -> Trace:
        nodes = {"A": NodeTrace("A", "ta", Placement.GPU_NOW, 0.0, 0.0, 0.0, a_end, 0.0),
                 "B": NodeTrace("B", "tb", Placement.CPU, a_end, a_end, a_end, b_end, 0.0)}
        return Trace(full, True, b_end, nodes)

    history = [RoundRecord(0, Proposal(full), partial(10.0, 200.0)),
               RoundRecord(1, Proposal(full), partial(12.0, 222.0))]
    assert critical_path(history[0].trace, sc) == ("A", "B")
    mon = Monitor(sc)
    assert mon.next_probe(history, []) is not None  # ranks probes around the partial rounds
    obs = mon.observe(history)
    lat = {(r.node, r.placement): r for r in obs.records if r.kind == "latency"}
    assert (lat[("A", "gpu_now")].runs, lat[("A", "gpu_now")].mean_ms) == (2, 11.0)
    assert (lat[("B", "cpu")].runs, lat[("B", "cpu")].mean_ms) == (2, 200.0)
    assert not any(n == "C" for n, _ in lat)
    assert not [r for r in obs.records if r.kind == "execution"]  # no E2E of the workflow was measured
    done = record(sc, 2, full)  # a complete request: the only E2E evidence
    obs = Monitor(sc).observe([*history, done])
    assert [(r.code, r.runs, r.mean_e2e_ms) for r in obs.records if r.kind == "execution"] == [
        ("GCC", 1, done.trace.e2e_ms)]


# ---------------------------------------------------------------- probe order (documented)
def test_probe_order_on_the_three_way_example() -> None:
    """Base GGCQ: moves of the critical-path nodes by measured latency (D, C, A), then B; the
    failed C -> gpu_now opens its swaps (demote then exchange, shortest partner first); the
    failed D -> gpu_now has no swap that fits."""
    sc = load_scenario("vram_3way")
    base = Mapping({"A": "gpu_now", "B": "gpu_now", "C": "cpu", "D": "gpu_queue"})
    history = [record(sc, 0, base, noise=False)]
    plan = Monitor(sc).plan(history)
    got = [(c.kind, c.mapping.code()) for c in plan]
    assert got == [
        ("reprobe", "GGCC"),
        ("swap", "GQGQ"),
        ("swap", "GCGQ"),
        ("swap", "QGGQ"),
        ("swap", "CGGQ"),
        ("reprobe", "GGQQ"),
        ("reprobe", "CGCQ"),
        ("reprobe", "QGCQ"),
        ("reprobe", "GCCQ"),
        ("reprobe", "GQCQ"),
    ]
    assert all(c.base == base for c in plan)
    obs = Monitor(sc).observe(history)
    static = {r.code: r.reason for r in obs.records if r.kind == "infeasible"}
    assert static["GGCG"].startswith("OOM") and static["GGGQ"].startswith("OOM")


def test_swap_found_after_a_reprobe_fails_s13_style() -> None:
    """A and C fit together, B does not fit beside them: the move C -> gpu_now fails, and the
    swap that demotes B to gpu_queue is executed next (PAPER.md's S13 C<->B)."""
    sc = make_scenario(
        make_workflow([("A", "ta"), ("B", "tb"), ("C", "tc")], [("A", "B"), ("A", "C")]),
        [make_card("ta", 800.0, 40.0, vram_mb=600.0), make_card("tb", 900.0, 60.0, load_ms=100.0, vram_mb=400.0),
         make_card("tc", 700.0, 50.0, load_ms=500.0, vram_mb=498.0)],
        mode=Mode.THREE_WAY, vram_budget_mb=1100.0,
    )
    base = Mapping({"A": "gpu_now", "B": "gpu_now", "C": "cpu"})
    mon = Monitor(sc, MonitorConfig(probes_per_round=8))
    runner = Runner(sc, noise=False)
    probe_and_observe(mon, [record(sc, 0, base, noise=False)], runner)
    kinds = [(k, m.to_dict()) for k, _, m, _ in runner.calls]
    swap = ("swap", {"A": "gpu_now", "B": "gpu_queue", "C": "gpu_now"})
    assert swap in kinds
    assert str(sc.infeasibility(base.moved("C", Placement.GPU_NOW))).startswith("OOM")


# ---------------------------------------------------------------- switches and budgets
def _history(sc: Scenario) -> list[RoundRecord]:
    good = Mapping({"A": "gpu_now", "B": "gpu_now", "C": "cpu", "D": "gpu_queue"})
    return [record(sc, 0, sc.uniform(Placement.CPU)), record(sc, 1, good)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_each_mechanism_can_be_switched_off(mechanism: str) -> None:
    sc = load_scenario("vram_3way")
    runner = Runner(sc)
    obs = probe_and_observe(Monitor(sc, MonitorConfig().without(mechanism)), _history(sc), runner)
    kinds = {r.kind for r in obs.records}
    probe_kinds = {c[0] for c in runner.calls}
    full_runner = Runner(sc)
    full = probe_and_observe(Monitor(sc, MonitorConfig(probes_per_round=20, probes_per_run=20)), _history(sc), full_runner)
    assert {"latency", "infeasible", "unmeasured"} <= {r.kind for r in full.records}
    assert {"reprobe", "swap"} <= {c[0] for c in full_runner.calls}
    gone = {"running_averages": "latency", "feasibility": "infeasible", "hints": "unmeasured"}
    if mechanism in gone:
        assert gone[mechanism] not in kinds
    else:
        assert mechanism not in probe_kinds and obs.probes


def test_no_monitor_leaves_only_the_round_outcomes() -> None:
    sc = load_scenario("vram_3way")
    runner = Runner(sc)
    obs = probe_and_observe(Monitor(sc, MonitorConfig.off()), _history(sc), runner)
    assert {r.kind for r in obs.records} == {"last_round", "execution"}
    assert runner.calls == []


def test_budgets_hold_over_a_run_and_convergence_follows() -> None:
    sc = load_scenario("vram_3way")
    pol = make_policy("agentic", monitor={"probes_per_round": 1, "probes_per_run": 3})
    res = run_rounds(sc, pol, LoopConfig(rounds=6, seed=0))
    assert [len(r.probes) for r in res.rounds] == [0, 1, 1, 1, 0, 0]
    assert pol.monitor.pending_probes(res.rounds) == 0  # type: ignore[attr-defined]
    assert pol.converged(res.rounds)


def test_bad_config_is_refused_with_the_value() -> None:
    with pytest.raises(ValueError, match="probes_per_round must be >= 0, got -1"):
        MonitorConfig(probes_per_round=-1)
    with pytest.raises(ValueError, match="unknown monitor mechanism 'ucb'"):
        MonitorConfig().without("ucb")
    with pytest.raises(ValueError, match=r"unknown monitor option\(s\) \['budget'\]"):
        MonitorConfig.from_dict({"budget": 3})


# ---------------------------------------------------------------- properties over random histories
@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["chain", "fork", "diamond"]),
    mode=st.sampled_from([Mode.BINARY, Mode.THREE_WAY]),
    picks=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=5),
    per_round=st.integers(min_value=0, max_value=3),
    per_run=st.integers(min_value=0, max_value=7),
    budget=st.sampled_from([700.0, 1500.0, 4000.0]),
)
def test_probe_invariants(
    kind: str, mode: Mode, picks: list[int], per_round: int, per_run: int, budget: float
) -> None:
    sc = canonical_scenario(kind, mode=mode, vram_budget_mb=budget)
    space = list(sc.all_mappings())
    mon = Monitor(sc, MonitorConfig(probes_per_round=per_round, probes_per_run=per_run))
    runner = Runner(sc)
    history: list[RoundRecord] = []
    for r, pick in enumerate(picks):
        before = len(runner.calls)
        executed = {h.mapping for h in history} | {p.mapping for h in history for p in h.probes}
        means: dict[Mapping, list[float]] = {}
        for h in history:
            for t in [p.trace for p in h.probes] + [h.trace]:
                if t.feasible and t.e2e_ms is not None:
                    means.setdefault(t.mapping, []).append(t.e2e_ms)
        obs = probe_and_observe(mon, history, runner)
        calls = runner.calls[before:]
        assert len(calls) <= per_round
        for k, base, mapping, _ in calls:
            assert not sc.infeasibility(mapping)
            assert mapping not in executed
            executed.add(mapping)
            assert len(mapping.differs_at(base)) == (1 if k == "reprobe" else 2)
            if means:
                lowest = min(sum(v) / len(v) for v in means.values())
                assert sum(means[base]) / len(means[base]) == lowest
            probe_trace = obs.probes[[c[2] for c in calls].index(mapping)].trace
            if probe_trace.feasible and probe_trace.e2e_ms is not None:
                means.setdefault(mapping, []).append(probe_trace.e2e_ms)
        history.append(record(sc, r, space[pick % len(space)], obs.probes))
    assert len(runner.calls) <= per_run
    assert 0 <= mon.pending_probes(history) <= max(0, per_run - len(runner.calls))
