"""The contracts issue 8 put in place: the exec package, typed infeasibility, the loop as the one
owner of execution (probes are requests), runs that need no oracle, references for reports,
run keys, and the store's migration of schema-1 files."""

from __future__ import annotations

import json
import pickle
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow
from typer.testing import CliRunner

from hetsched.cli import app
from hetsched.exec import _REGISTRY as EXECUTORS
from hetsched.exec import Executor, executor_names, make_executor
from hetsched.loop import LoopConfig, continue_run, run_key, run_recorded, run_rounds
from hetsched.model import (
    ExecutorSpec,
    Infeasibility,
    InfeasibleKind,
    InputError,
    Mapping,
    MappingError,
    Mode,
    Placement,
    Probe,
    ProbeRequest,
    Proposal,
    ReferenceKind,
    RoundRecord,
    RunKey,
    Scenario,
    Trace,
    UnknownNameError,
)
from hetsched.model.errors import UnknownReasonError
from hetsched.model.files import load_scenario
from hetsched.monitor import Observations
from hetsched.policies import Policy, make_policy, policy_names
from hetsched.search.oracle import solve
from hetsched.search.reference import ReferenceChoice, SimPlanner, parse_reference_choice, reference
from hetsched.sim import Simulator
from hetsched.store import RunStore
from hetsched.store.codec import StoreError

DATA = Path(__file__).parent / "data"


# ---------------------------------------------------------------------------- exec
def test_make_executor_builds_the_simulator_by_name_and_spec() -> None:
    sc = load_scenario("chain")
    with make_executor("sim", sc) as ex:
        assert isinstance(ex, Executor) and ex.name == "sim"
        assert ex.run(sc.uniform(Placement.CPU), seed=3) == Simulator(sc).run(sc.uniform(Placement.CPU), seed=3)
    quiet = make_executor(ExecutorSpec("sim", {"noise": False}), sc)
    assert quiet.run(sc.uniform(Placement.CPU), seed=1).seed is None  # noise-free: no seed applies


def test_unknown_executor_and_bad_options_are_input_errors() -> None:
    sc = load_scenario("chain")
    with pytest.raises(UnknownNameError, match=r"Unknown executor: 'gpu-farm'; valid executors: sim, local, ray"):
        make_executor("gpu-farm", sc)
    with pytest.raises(InputError, match=r"executor 'sim' has no option 'workers'; accepted: noise"):
        make_executor(ExecutorSpec("sim", {"workers": 3}), sc)
    assert set(executor_names()) >= {"sim", "local", "ray"}


def test_an_executor_whose_extra_is_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXECUTORS, "farm", ("hetsched_no_such_module.farm:Farm", "farm"))
    with pytest.raises(InputError, match=r"executor 'farm' needs hetsched_no_such_module .*pip install 'hetsched\[farm\]'"):
        make_executor("farm", load_scenario("chain"))


def test_executor_spec_is_json_ready_picklable_and_hashable() -> None:
    spec = ExecutorSpec(" Local ", {"workers": 2, "device": {"threads": 1}})
    assert spec.name == "local" and spec.label == 'local[device={"threads": 1},workers=2]'
    assert pickle.loads(pickle.dumps(spec)) == spec and hash(spec) == hash(ExecutorSpec("local", spec.options))
    assert ExecutorSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    with pytest.raises(InputError, match="executor 'sim' options must be JSON-ready"):
        ExecutorSpec("sim", {"callback": object()})


# ---------------------------------------------------------------------------- typed infeasibility
@pytest.mark.parametrize(("text", "kind"), [
    ("OOM: gpu_now tools need 6350 MB of 3000 MB (a 1100 + b 5250)", InfeasibleKind.OOM),
    ("never admissible: node 'D' (llama_1b) needs 2600 MB > budget 2000 MB", InfeasibleKind.NEVER_ADMISSIBLE),
    ("never admissible: node 'B' ... until nodes that depend on it finish (deadlock)", InfeasibleKind.DEADLOCK),
    ("deadlock: node 'Q1' at the head of the gpu_queue", InfeasibleKind.DEADLOCK),
    ("timeout: node 'A' ran past 30 s", InfeasibleKind.TIMEOUT),
    ("tool error: node 'A' raised ValueError", InfeasibleKind.TOOL_ERROR),
])
def test_schema_1_reasons_parse_to_their_kind(text: str, kind: InfeasibleKind) -> None:
    parsed = Infeasibility.parse(text)
    assert parsed.kind is kind
    assert parsed.detail and parsed.detail in text


@pytest.mark.parametrize("text", ["something else entirely", "", "exploded: node 'A'", "OOMish: 5 MB",
                                  "never admissible (deadlock)"])
def test_a_stored_reason_that_names_no_kind_is_an_error_naming_it_not_a_tool_error(text: str) -> None:
    """Before reasons were typed only the simulator refused mappings: a reason whose head is no kind's
    label is damage or foreign text, and reading it as a tool error would invent a failure."""
    with pytest.raises(UnknownReasonError, match="names no kind of infeasibility") as caught:
        Infeasibility.parse(text)
    assert repr(text) in str(caught.value) and "OOM, never admissible" in str(caught.value)
    legacy = {"mapping": {"A": "cpu"}, "feasible": False, "e2e_ms": None, "reason": text, "nodes": {},
              "vram_timeline": []}
    with pytest.raises(UnknownReasonError):
        Trace.from_dict(legacy)


@given(kind=st.sampled_from(list(InfeasibleKind)), detail=st.text(max_size=40))
def test_infeasibility_round_trips_through_json_and_reads_with_its_label(kind: InfeasibleKind, detail: str) -> None:
    inf = Infeasibility(kind, detail)
    assert Infeasibility.from_dict(json.loads(json.dumps(inf.to_dict()))) == inf
    assert str(inf).startswith(kind.label)
    trace = Trace.refused(Mapping({"A": "cpu"}), inf, vram_budget_mb=100.0, executor="local")
    assert not trace.feasible and trace.kind is kind and trace.reason == str(inf)
    assert Trace.from_dict(json.loads(json.dumps(trace.to_dict()))) == trace


def test_a_trace_is_feasible_exactly_when_it_has_no_infeasibility() -> None:
    m = Mapping({"A": "cpu"})
    with pytest.raises(ValueError, match=r"use Trace\.refused"):
        Trace(mapping=m, feasible=False, e2e_ms=None)
    with pytest.raises(ValueError, match=r"use Trace\.refused"):
        Trace(mapping=m, feasible=True, e2e_ms=1.0, infeasibility=Infeasibility(InfeasibleKind.OOM, "x"))


def test_a_deadlock_reads_deadlock_in_the_run_table_not_oom(tmp_path: Path) -> None:
    sc = make_scenario(
        make_workflow([("A", "ta"), ("B", "tb")], [("A", "B")]),
        [make_card("ta", 900.0, 60.0, vram_mb=700.0), make_card("tb", 900.0, 60.0, vram_mb=700.0)],
        mode=Mode.THREE_WAY, vram_budget_mb=1000.0,
    )
    trace = Simulator(sc).run(Mapping({"A": "gpu_queue", "B": "gpu_now"}))
    assert trace.kind is InfeasibleKind.DEADLOCK and trace.reason.startswith("deadlock: ")


# ---------------------------------------------------------------------------- the loop owns execution
class Prober(Policy):
    """Asks for ``per_round`` probes of one-node moves of all-CPU (or forever when None), and
    records what the loop handed it."""

    name = "prober"

    def __init__(self, per_round: int | None = 2, bad_probe: bool = False) -> None:
        super().__init__()
        self.per_round = per_round
        self.bad_probe = bad_probe
        self.seen: list[tuple[int, int, Any]] = []

    def next_probe(self, history: Sequence[RoundRecord], probes: Sequence[Probe]) -> ProbeRequest | None:
        if self.per_round is not None and len(probes) >= self.per_round:
            return None
        sc = self.ctx.scenario
        base = sc.uniform(Placement.CPU)
        if self.bad_probe:
            return ProbeRequest("reprobe", base, Mapping({"ghost": "cpu"}), "invents a node")
        node = sc.workflow.node_ids[len(probes) % len(sc.workflow.node_ids)]
        return ProbeRequest("reprobe", base, base.moved(node, Placement.GPU_NOW), f"{node}: cpu -> gpu_now")

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        self.seen.append((len(history), len(probes), observations))
        return Proposal(self.ctx.scenario.uniform(Placement.CPU))


class CountingExecutor:
    """The simulator, counting calls (the loop's executor is the only thing that runs)."""

    name = "sim"

    def __init__(self, scenario: Scenario) -> None:
        self.sim = Simulator(scenario)
        self.calls: list[Mapping] = []

    def run(self, mapping: Mapping, seed: int | None = 0) -> Trace:
        self.calls.append(mapping)
        return self.sim.run(mapping, seed=seed)

    def close(self) -> None:
        pass

    def __enter__(self) -> CountingExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_probe_requests_are_executed_by_the_loops_executor_before_the_proposal() -> None:
    sc = load_scenario("fanout")
    ex = CountingExecutor(sc)
    policy = Prober(per_round=2)
    result = run_rounds(sc, policy, LoopConfig(rounds=3, seed=4), executor=ex)
    assert [len(r.probes) for r in result.rounds] == [2, 2, 2]
    assert len(ex.calls) == 3 * 3  # two probes and the round itself, every round
    assert [(h, p) for h, p, _ in policy.seen] == [(0, 2), (1, 2), (2, 2)]
    assert all(obs is None for _, _, obs in policy.seen)  # no monitor, no observations
    for r in result.rounds:
        assert [p.mapping for p in r.probes] == ex.calls[3 * r.round : 3 * r.round + 2]


def test_the_loop_caps_a_policy_that_never_stops_asking() -> None:
    sc = load_scenario("chain")
    result = run_rounds(sc, Prober(per_round=None), LoopConfig(rounds=2, max_probes_per_round=5))
    assert [len(r.probes) for r in result.rounds] == [5, 5]
    assert [len(r.probes) for r in run_rounds(sc, Prober(None), LoopConfig(rounds=1, max_probes_per_round=0)).rounds] \
        == [0]


def test_a_malformed_probe_request_is_a_bug_named_as_a_probe() -> None:
    with pytest.raises(MappingError, match="reprobe probe"):
        run_rounds(load_scenario("chain"), Prober(bad_probe=True), LoopConfig(rounds=1))


def test_the_agentic_policy_gets_the_loops_observations_of_the_loops_probes() -> None:
    sc = load_scenario("vram_3way")
    policy = make_policy("agentic")
    result = run_rounds(sc, policy, LoopConfig(rounds=4, seed=2))
    assert sum(len(r.probes) for r in result.rounds) > 0
    for i, r in enumerate(result.rounds):
        d = r.proposal.decision
        assert d is not None and d.probes_spent == len(r.probes)
        # what the decider read is what the passive monitor makes of the stored history and probes
        assert d.observations_text == policy.monitor.observe(result.rounds[:i], r.probes).text


# ---------------------------------------------------------------------------- no oracle in runs
def _layered(n_layers: int, width: int) -> Scenario:
    nodes = [(f"N{k}_{i}", f"t{(k * width + i) % 7}") for k in range(n_layers) for i in range(width)]
    edges = [(f"N{k - 1}_{i}", f"N{k}_{j}") for k in range(1, n_layers) for i in range(width) for j in range(width)
             if (i + j) % 2 == 0]
    cards = [make_card(f"t{k}", 200.0 + 37 * k, 20.0 + 5 * k, load_ms=40.0 + k, vram_mb=300.0 + 45 * k)
             for k in range(7)]
    return make_scenario(make_workflow(nodes, edges), cards, mode=Mode.THREE_WAY, vram_budget_mb=1500.0)


def test_runs_need_no_oracle_at_50_three_way_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    sc = _layered(10, 5)
    assert len(sc.workflow.nodes) == 50 and sc.mapping_space_size() == 3**50

    def no_solving(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run solved the oracle")

    with monkeypatch.context() as patched:
        patched.setattr("hetsched.search.reference.solve", no_solving)
        for name in policy_names():
            if name == "oracle":
                continue  # proposes the planner's reference: best-known at this size (below)
            result = run_rounds(sc, make_policy(name), LoopConfig(rounds=2, seed=1))
            assert len(result.rounds) == 2 and result.reference is None
    # the exact search is tried (auto) and refused by its time estimate: 3^50 mappings
    oracle = run_rounds(sc, make_policy("oracle"), LoopConfig(rounds=1))
    assert oracle.rounds[0].trace.feasible and "best-known" in oracle.rounds[0].proposal.rationale


def test_references_for_reports() -> None:
    small = load_scenario("vram_3way")
    exact = reference(small)
    assert exact is not None and exact.kind is ReferenceKind.ORACLE and exact.exact and exact.gap == 0.0
    assert (exact.mapping, exact.e2e_ms) == (solve(small, ranking=False).best, solve(small, ranking=False).e2e_ms)
    assert reference(small, "none") is None
    known = reference(small, ReferenceChoice.BEST_KNOWN, max_seconds=5)
    assert known is not None and known.kind is ReferenceKind.BEST_KNOWN and not known.exact
    assert known.lower_bound_ms is not None and known.lower_bound_ms <= exact.e2e_ms <= known.e2e_ms
    assert known.label.startswith("best-known (within ")
    big = reference(_layered(6, 4))
    assert big is not None and big.kind is ReferenceKind.BEST_KNOWN
    assert SimPlanner(_layered(6, 4)).infeasibility(big.mapping) is None
    with pytest.raises(InputError, match=r"reference 'best': unknown value; accepted: auto, oracle, best-known, none"):
        parse_reference_choice("best")


def test_planner_sees_fifo_deadlocks_that_the_static_check_misses() -> None:
    # Q1 (600 MB) is queued ahead of Q2 (free) while x's gpu_now node C waits on Q2: a FIFO deadlock
    cards = [make_card("x", vram_mb=700), make_card("q1", vram_mb=600), make_card("q2", vram_mb=100, cpu_ms=5.0)]
    wf = make_workflow([("A", "x"), ("Q1", "q1"), ("Q2", "q2"), ("C", "x")], [("A", "Q1"), ("A", "Q2"), ("Q2", "C")])
    sc = make_scenario(wf, cards, mode=Mode.THREE_WAY, vram_budget_mb=1000)
    m = Mapping({"A": "gpu_now", "Q1": "gpu_queue", "Q2": "gpu_queue", "C": "gpu_now"})
    planner = SimPlanner(sc)
    assert sc.infeasibility(m) is None
    found = planner.infeasibility(m)
    assert found is not None and found.kind is InfeasibleKind.DEADLOCK and planner.e2e_ms(m) is None


# ---------------------------------------------------------------------------- run keys and the CLI
def test_run_key_rounds_trip_through_the_store(tmp_path: Path) -> None:
    sc = load_scenario("fanout")
    key = run_key(sc, "ucb1", LoopConfig(rounds=3, seed=9, stop_after=2), options={"max_joint_nodes": 2},
                  executor=ExecutorSpec("sim", {"noise": True}), experiment="study")
    with RunStore(tmp_path / "s.sqlite") as st:
        run_id = st.create_run(key)
        assert st.key(run_id) == key
        assert st.find_run(key) is not None and st.find_run(RunKey(sc, "ucb1", {"max_joint_nodes": 2}, 9, 3, 2)) is None
        done = continue_run(st, run_id)
        assert len(done.rounds) in (2, 3) and done.executor == "sim"
    with pytest.raises(InputError, match="rounds must be >= 1, got 0"):
        RunKey(sc, "ucb1", rounds=0)


runner = CliRunner()


def test_cli_reference_and_executor_flags(tmp_path: Path) -> None:
    store = str(tmp_path / "s.sqlite")
    out = runner.invoke(app, ["run", "chain", "--rounds", "1", "--reference", "none", "--store", store])
    assert out.exit_code == 0 and "reference: none computed" in out.stdout and "/ oracle" not in out.stdout
    data = json.loads(runner.invoke(app, ["run", "chain", "--rounds", "1", "--json", "--reference", "best-known",
                                          "--store", store]).stdout)
    assert data["oracle"] is None and data["reference"]["kind"] == "best-known"
    with RunStore(store) as st:
        info = st.run(data["run_id"])
        assert info.reference is not None and info.reference.kind is ReferenceKind.BEST_KNOWN
    bad = runner.invoke(app, ["run", "chain", "--executor", "gpu-farm", "--store", store])
    assert bad.exit_code != 0
    bench = runner.invoke(app, ["bench", "--quick", "--reference", "none", "--out", str(tmp_path / "b")])
    assert bench.exit_code != 0


# ---------------------------------------------------------------------------- store schema 1 -> 2
def test_a_schema_1_store_is_migrated_and_reads_back_typed(tmp_path: Path) -> None:
    """tests/data/store_v1.sql: `sqlite3 .dump` of a store written by hetsched before schema 2
    (an agentic cold-start run with probes and transcripts, an all-GPU run of OOM rounds, UCB1)."""
    path = tmp_path / "v1.sqlite"
    with sqlite3.connect(path) as raw:
        raw.executescript((DATA / "store_v1.sql").read_text())
        raw.execute("PRAGMA user_version = 1")
    with RunStore(path) as st:
        runs = {i.policy: i for i in st.runs()}
        assert set(runs) == {"agentic", "all-gpu", "ucb1"}
        agentic = st.rounds(runs["agentic"].id)
        for r in agentic:
            d = r.proposal.decision
            assert d is not None and d.decider == "rules" and d.cold_start and d.observations_text
            assert d.attempts and r.proposal.info == {} and d.probes_spent == len(r.probes)
        oom = st.rounds(runs["all-gpu"].id)
        assert [r.trace.kind for r in oom] == [InfeasibleKind.OOM] * 2
        assert all(r.proposal.decision is None for r in oom)
        kinds = st._conn().execute("SELECT DISTINCT infeasible_kind FROM rounds WHERE feasible = 0").fetchall()
        assert {k[0] for k in kinds} == {"oom"}
        assert st.key(runs["ucb1"].id).executor == ExecutorSpec("sim")
        # a migrated run continues like any other
        more = continue_run(st, runs["ucb1"].id, rounds=3)
        assert len(more.rounds) == 3 and more.rounds[:2] == st.rounds(runs["ucb1"].id)[:2]


def test_a_schema_1_reason_that_names_no_kind_migrates_and_reads_as_damage_naming_it(tmp_path: Path) -> None:
    """One OOM round's reason tampered with: the migration goes on (its kind stays NULL), every other run
    reads back, and reading that run says which reason cannot be read (it was read as a tool error)."""
    path = tmp_path / "v1.sqlite"
    weird = "exploded: nobody knows"
    with sqlite3.connect(path) as raw:
        raw.executescript((DATA / "store_v1.sql").read_text())
        raw.execute("PRAGMA user_version = 1")
        run_id = raw.execute("SELECT id FROM runs WHERE policy = 'all-gpu'").fetchone()[0]
        trace = json.loads(raw.execute("SELECT trace_json FROM rounds WHERE run_id = ? AND round = 1",
                                       (run_id,)).fetchone()[0])
        trace["reason"] = weird
        raw.execute("UPDATE rounds SET reason = ?, trace_json = ? WHERE run_id = ? AND round = 1",
                    (weird, json.dumps(trace), run_id))
    with RunStore(path) as st:
        runs = {i.policy: i for i in st.runs()}
        assert set(runs) == {"agentic", "all-gpu", "ucb1"}
        assert st.rounds(runs["ucb1"].id) and st.rounds(runs["agentic"].id)
        kinds = dict(st._conn().execute("SELECT round, infeasible_kind FROM rounds WHERE run_id = ?",
                                        (run_id,)).fetchall())
        assert kinds == {0: "oom", 1: None}
        with pytest.raises(StoreError, match=r"round 1 cannot be read \(infeasibility reason 'exploded: nobody "
                                             r"knows' names no kind"):
            st.rounds(run_id)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_recorded_and_unrecorded_runs_are_the_same_rounds(tmp_path_factory: pytest.TempPathFactory,
                                                          seed: int) -> None:
    sc = load_scenario("vram_3way")
    config = LoopConfig(rounds=3, seed=seed)
    plain = run_rounds(sc, make_policy("agentic"), config).rounds
    with RunStore(tmp_path_factory.mktemp("s") / "s.sqlite") as st:
        recorded = run_recorded(run_key(sc, "agentic", config, options={"decider": "rules"}), store=st)
        stored = st.rounds(recorded.run_id or "")
    strip = [(r.mapping, r.trace, tuple(p.mapping for p in r.probes)) for r in plain]
    assert strip == [(r.mapping, r.trace, tuple(p.mapping for p in r.probes)) for r in stored]


def test_a_policy_option_it_does_not_take_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"policy 'ucb1' has no option 'c'; it takes max_joint_nodes"):
        make_policy("ucb1", c=1.5)
