"""The run store: exact round trips, nothing lost on interrupt, resume equals an uninterrupted
run, concurrent writers, schema versions, secrets, and the ``runs`` / ``show-run`` /
``run --resume`` commands. Every store is a real SQLite file under tmp_path."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hetsched.cli import app
from hetsched.loop import LoopConfig, continue_run, ensure_run, load_result, run_key, run_recorded, run_rounds
from hetsched.model import (
    Attempt,
    DecisionRecord,
    Infeasibility,
    InfeasibleKind,
    InputError,
    Mapping,
    NodeTrace,
    Placement,
    Probe,
    ProbeRequest,
    Proposal,
    RoundRecord,
    RunKey,
    Trace,
    VramPoint,
)
from hetsched.model.files import load_scenario
from hetsched.policies import _REGISTRY, Policy, make_policy, policy_names
from hetsched.store import (
    NotJsonReady,
    RunStore,
    StoreError,
    UnknownRunError,
    default_store_path,
    public_options,
    schema,
)


# ---------------------------------------------------------------------------- a policy to resume
class Walker(Policy):
    """Test policy whose every decision depends on the history: it proposes the best measured
    mapping so far, asks the loop to probe one neighbour of it per round, and leaves a
    decider-style record (with a rejected first attempt every third round and a fallback every
    fifth) with observations."""

    name = "walker"
    adaptive = True
    interrupt_at: int | None = None  # class-level switch so CLI-built instances can be told to stop

    def _best(self, history: Sequence[RoundRecord]) -> Mapping:
        measured = [(x.trace.e2e_ms, x.mapping) for x in history if x.trace.feasible and x.trace.e2e_ms]
        measured += [(p.trace.e2e_ms, p.mapping) for x in history for p in x.probes
                     if p.trace.feasible and p.trace.e2e_ms]
        return min(measured, key=lambda t: t[0])[1] if measured else self.ctx.scenario.uniform(Placement.CPU)

    def next_probe(self, history: Sequence[RoundRecord], probes: Sequence[Probe]) -> ProbeRequest | None:
        if probes:
            return None
        r = len(history)
        sc = self.ctx.scenario
        best = self._best(history)
        nodes = sc.workflow.node_ids
        node = nodes[(r + self.ctx.seed) % len(nodes)]
        allowed = sc.allowed(node)
        target = allowed[(allowed.index(best[node]) + 1) % len(allowed)]
        if target == best[node]:
            return None
        return ProbeRequest("reprobe", best, best.moved(node, target), f"{node}: {best[node].value} -> {target.value}")

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Any = None
    ) -> Proposal:
        r = len(history)
        if Walker.interrupt_at is not None and r == Walker.interrupt_at:
            raise KeyboardInterrupt
        best = self._best(history)
        node = self.ctx.scenario.workflow.node_ids[(r + self.ctx.seed) % len(self.ctx.scenario.workflow.node_ids)]
        probe = probes[0] if probes else None
        attempts: list[Attempt] = []
        if r % 3 == 0:
            attempts.append(Attempt(1, f"round {r} [bold]prompt[/]", "{not json", "", 120 + r, 7, 12.5,
                                    "reply is not JSON"))
        attempts.append(Attempt(len(attempts) + 1, f"round {r} prompt", json.dumps(best.to_dict()), "best measured",
                                130 + r, None, 10.0 + r, ""))
        return Proposal(
            best,
            rationale=f"best measured after {r} rounds",
            decision=DecisionRecord(
                decider="scripted",
                attempts=tuple(attempts),
                fallback=r % 5 == 4,
                fallback_reason="validation failed twice" if r % 5 == 4 else "",
                observations=({"kind": "latency", "node": node,
                               "probe_e2e_ms": probe.trace.e2e_ms if probe else None},),
                observations_text=f"round {r}: [red]observed[/]",
                probes_spent=len(probes),
            ),
            info={"walker_round": r},
        )

    def converged(self, history: Sequence[RoundRecord]) -> bool:
        return len(history) >= 6


@pytest.fixture
def walker_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``walker`` buildable by name (``make_policy``), as a resumed run needs."""
    monkeypatch.setitem(_REGISTRY, "walker", f"{__name__}:Walker")
    monkeypatch.setattr(Walker, "interrupt_at", None)


class Interrupt(Exception):
    """Raised by the failing recorder below (like a crash inside the loop)."""


def interrupting_recorder(at_round: int, exc: BaseException) -> Any:
    def record(r: RoundRecord) -> None:
        if r.round == at_round:
            raise exc

    return record


# ---------------------------------------------------------------------------- round trips
def test_recorded_run_reads_back_equal(tmp_path: Path, walker_registered: None) -> None:
    sc = load_scenario("vram_3way")
    with RunStore(tmp_path / "s.sqlite") as st:
        result = run_recorded(run_key(sc, "walker", LoopConfig(rounds=7, seed=3)), Walker(), store=st)
        assert result.run_id is not None
        stored = st.load(result.run_id)
        assert stored.rounds == result.rounds
        assert stored.scenario == sc
        info = stored.info
        assert (info.status, info.rounds_done, info.rounds_planned, info.seed, info.policy) == (
            "finished", 7, 7, 3, "walker")
        assert info.reference is None  # a run needs no oracle; reports store their reference
        feasible = [r.trace.e2e_ms for r in result.rounds if r.trace.feasible and r.trace.e2e_ms is not None]
        assert info.best_e2e_ms == min(feasible)
        # the normalized tables carry the contract fields for SQL queries
        entries = st.transcript(result.run_id)
        assert len(entries) == sum(len(r.proposal.decision.attempts) for r in result.rounds if r.proposal.decision)
        assert [e.error for _, e in entries if e.error] == ["reply is not JSON"] * 3  # rounds 0, 3, 6
        raw = sqlite3.connect(st.path)
        assert raw.execute("SELECT COUNT(*) FROM validation_errors").fetchone()[0] == 3
        assert raw.execute("SELECT round FROM fallbacks").fetchall() == [(4,)]
        assert raw.execute("SELECT SUM(prompt_tokens) FROM rounds").fetchone()[0] == sum(
            e.prompt_tokens or 0 for _, e in entries)
        assert raw.execute("SELECT COUNT(*) FROM probes").fetchone()[0] == sum(len(r.probes) for r in result.rounds)
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert load_result(st, result.run_id).rounds == result.rounds


finite = st.floats(min_value=0, max_value=1e7, allow_nan=False, allow_infinity=False)
json_leaf = st.none() | st.booleans() | st.integers(-10**9, 10**9) | finite | st.text(max_size=20)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
NODES = ("A", "B", "C")


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    mapping = Mapping({n: draw(st.sampled_from(list(Placement))) for n in NODES})
    feasible = draw(st.booleans())
    nodes = {}
    if feasible:
        for n in NODES:
            t = sorted(draw(st.lists(finite, min_size=4, max_size=4)))
            nodes[n] = NodeTrace(node=n, tool=draw(st.text(min_size=1, max_size=10)), placement=mapping[n],
                                 ready_ms=t[0], admitted_ms=t[1], start_ms=t[2], end_ms=t[3], load_ms=draw(finite))
    timeline = tuple(VramPoint(t, u) for t, u in draw(st.lists(st.tuples(finite, finite), max_size=5)))
    infeasibility = None if feasible else Infeasibility(draw(st.sampled_from(list(InfeasibleKind))),
                                                        draw(st.text(max_size=60)))
    return Trace(mapping=mapping, feasible=feasible, e2e_ms=draw(finite) if feasible else None, nodes=nodes,
                 vram_timeline=timeline, infeasibility=infeasibility,
                 vram_budget_mb=draw(finite), seed=draw(st.none() | st.integers(0, 2**31 - 1)),
                 executor=draw(st.sampled_from(["sim", "local"])),
                 notes=tuple(draw(st.lists(st.text(max_size=20), max_size=2))))


@st.composite
def attempts(draw: st.DrawFn) -> Attempt:
    return Attempt(
        attempt=draw(st.integers(1, 5)), prompt=draw(st.text(max_size=200)), reply=draw(st.text(max_size=100)),
        reasoning=draw(st.text(max_size=50)), prompt_tokens=draw(st.none() | st.integers(0, 10**6)),
        completion_tokens=draw(st.none() | st.integers(0, 10**6)), latency_ms=draw(st.none() | finite),
        error=draw(st.text(max_size=40)),
    )


@st.composite
def decision_records(draw: st.DrawFn) -> DecisionRecord:
    return DecisionRecord(
        decider=draw(st.text(min_size=1, max_size=10)), model=draw(st.none() | st.text(max_size=10)),
        attempts=tuple(draw(st.lists(attempts(), max_size=3))), fallback=draw(st.booleans()),
        fallback_reason=draw(st.text(max_size=40)),
        observations=tuple(draw(st.lists(st.dictionaries(st.text(max_size=6), json_value, max_size=3), max_size=3))),
        observations_text=draw(st.text(max_size=80)), probes_spent=draw(st.integers(0, 9)),
        cold_start=draw(st.booleans()),
    )


@st.composite
def round_records(draw: st.DrawFn) -> RoundRecord:
    trace = draw(traces())
    info: dict[str, Any] = draw(st.dictionaries(st.text(max_size=8), json_value, max_size=4))
    decision = draw(st.none() | decision_records())
    probes = tuple(Probe(kind=draw(st.sampled_from(["reprobe", "swap"])), base=draw(traces()).mapping,
                         trace=draw(traces()), note=draw(st.text(max_size=30)))
                   for _ in range(draw(st.integers(0, 2))))
    return RoundRecord(round=0, proposal=Proposal(trace.mapping, draw(st.text(max_size=50)), decision, info),
                       trace=trace, probes=probes)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=round_records())
def test_round_record_round_trip(tmp_path_factory: pytest.TempPathFactory, record: RoundRecord) -> None:
    path = tmp_path_factory.getbasetemp() / "roundtrip.sqlite"
    with RunStore(path) as store:
        run_id = store.create_run(RunKey(load_scenario("chain"), "walker", rounds=1))
        store.record_round(run_id, record)
        assert store.rounds(run_id) == [record]


# ---------------------------------------------------------------------------- interrupt and resume
@pytest.mark.parametrize("scenario", ["vram_3way", "fanout"])
@pytest.mark.parametrize("how", ["policy", "recorder", "crash"])
def test_interrupted_run_loses_nothing_and_resumes_to_the_same_rounds(
    tmp_path: Path, walker_registered: None, scenario: str, how: str
) -> None:
    sc = load_scenario(scenario)
    config = LoopConfig(rounds=9, seed=5)
    reference = run_rounds(sc, Walker(), config).rounds
    k = 4
    with RunStore(tmp_path / "s.sqlite") as st:
        if how == "policy":  # Ctrl-C while the policy decides round k: rounds 0..k-1 are stored
            Walker.interrupt_at = k
            with pytest.raises(KeyboardInterrupt):
                run_recorded(run_key(sc, "walker", config), Walker(), store=st)
            Walker.interrupt_at = None
            stored_rounds, reason = k, "KeyboardInterrupt"
        else:  # a recorder after the store fails at round k: round k itself is already stored
            exc: BaseException = KeyboardInterrupt() if how == "recorder" else Interrupt("disk full")
            with pytest.raises(type(exc)):
                run_recorded(run_key(sc, "walker", config), Walker(), store=st, recorder=interrupting_recorder(k, exc))
            stored_rounds = k + 1
            reason = "KeyboardInterrupt" if how == "recorder" else "Interrupt: disk full"
        (info,) = st.runs()
        assert (info.status, info.status_reason, info.rounds_done) == ("interrupted", reason, stored_rounds)
        assert st.rounds(info.id) == reference[:stored_rounds]
        # the policy is rebuilt from its stored name and options
        resumed = continue_run(st, info.id)
        assert resumed.rounds == reference
        assert st.rounds(info.id) == reference
        assert st.run(info.id).status == "finished"


def test_resume_at_the_early_stop_round_stops_like_the_uninterrupted_run(
    tmp_path: Path, walker_registered: None
) -> None:
    sc = load_scenario("chain")
    # Walker converges after 6 rounds; stop_after=1 makes the loop stop once it says so
    config = LoopConfig(rounds=12, seed=1, stop_after=1)
    reference = run_rounds(sc, Walker(), config).rounds
    assert len(reference) == 6
    with RunStore(tmp_path / "s.sqlite") as st:
        with pytest.raises(KeyboardInterrupt):  # interrupted after storing the last round, before the stop check
            run_recorded(run_key(sc, "walker", config), Walker(), store=st,
                         recorder=interrupting_recorder(5, KeyboardInterrupt()))
        run_id = st.runs()[0].id
        assert continue_run(st, run_id).rounds == reference
        info = st.run(run_id)
        assert (info.status, info.status_reason, info.rounds_done) == ("finished", "converged after 6 rounds", 6)


@pytest.mark.parametrize("name", policy_names())
def test_every_registered_policy_resumes_to_the_same_rounds(tmp_path: Path, name: str) -> None:
    """Catches a policy that keeps decisive state outside (context, history)."""
    sc = load_scenario("vram_3way")
    config = LoopConfig(rounds=8, seed=2)
    try:
        reference = run_rounds(sc, make_policy(name), config).rounds
    except ImportError as exc:  # an optional extra is missing
        pytest.skip(f"policy {name} needs an optional dependency: {exc}")
    with RunStore(tmp_path / "s.sqlite") as st:
        with pytest.raises(KeyboardInterrupt):
            run_recorded(run_key(sc, name, config), make_policy(name), store=st,
                         recorder=interrupting_recorder(2, KeyboardInterrupt()))
        run_id = st.runs()[0].id
        assert decisions(continue_run(st, run_id).rounds) == decisions(reference)


def decisions(rounds: Sequence[RoundRecord]) -> list[RoundRecord]:
    """Rounds without the one thing a replay cannot reproduce: decider wall-clock latency."""
    out = []
    for r in rounds:
        d = r.proposal.decision
        if d is not None:
            d = replace(d, attempts=tuple(replace(a, latency_ms=None) for a in d.attempts))
        out.append(RoundRecord(r.round, replace(r.proposal, decision=d), r.trace, r.probes))
    return out


def test_ensure_run_skips_finished_work_and_resumes_interrupted(tmp_path: Path, walker_registered: None) -> None:
    sc = load_scenario("fanout")
    config = LoopConfig(rounds=5, seed=0)
    with RunStore(tmp_path / "s.sqlite") as st:
        first_id, how = ensure_run(st, run_key(sc, "walker", config, experiment="bench-1"))
        assert how == "ran"
        assert ensure_run(st, run_key(sc, "walker", config, experiment="bench-1")) == (first_id, "reused")
        assert len(st.runs()) == 1
        first = load_result(st, first_id)
        # another experiment, seed or scenario content is another run
        other, _ = ensure_run(st, run_key(sc, "walker", LoopConfig(rounds=5, seed=1), experiment="bench-1"))
        changed = sc.model_copy(update={"machine": sc.machine.model_copy(update={"cpu_cores": 3})})
        moved, _ = ensure_run(st, run_key(changed, "walker", config, experiment="bench-1"))
        assert len({first_id, other, moved}) == 3
        # an interrupted one is continued, not restarted
        Walker.interrupt_at = 2
        with pytest.raises(KeyboardInterrupt):
            ensure_run(st, run_key(sc, "walker", config, experiment="bench-2"))
        Walker.interrupt_at = None
        resumed_id, how = ensure_run(st, run_key(sc, "walker", config, experiment="bench-2"))
        assert how == "resumed"
        assert load_result(st, resumed_id).rounds == first.rounds
        assert len(st.runs(experiment="bench-2")) == 1


def test_resume_checks(tmp_path: Path, walker_registered: None) -> None:
    sc = load_scenario("chain")
    with RunStore(tmp_path / "s.sqlite") as st:
        done = run_recorded(run_key(sc, "walker", LoopConfig(rounds=3)), Walker(), store=st)
        assert done.run_id is not None
        with pytest.raises(InputError, match="cannot continue it with 'all-gpu'"):
            continue_run(st, done.run_id, policy=make_policy("all-gpu"))
        with pytest.raises(InputError, match="already has 3 rounds; rounds must be >= 3, got 2"):
            continue_run(st, done.run_id, rounds=2)
        longer = continue_run(st, done.run_id, rounds=5)  # extending a finished run
        assert [r.round for r in longer.rounds] == [0, 1, 2, 3, 4] and st.run(done.run_id).rounds_planned == 5
        with pytest.raises(UnknownRunError, match="no run 'ffffffff' in run store"):
            continue_run(st, "ffffffff")
        with pytest.raises(StoreError, match="round 0 is already stored"):
            st.record_round(done.run_id, done.rounds[0])


def test_running_run_of_a_live_process_is_not_taken_over_and_a_dead_one_is_stale(tmp_path: Path) -> None:
    sc = load_scenario("chain")
    with RunStore(tmp_path / "s.sqlite") as st:
        run_id = st.create_run(RunKey(sc, "all-gpu", rounds=2))
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            st._conn().execute("UPDATE runs SET pid = ? WHERE id = ?", (sleeper.pid, run_id))
            assert st.run(run_id).live_elsewhere and not st.run(run_id).stale
            with pytest.raises(StoreError, match=f"being driven by process {sleeper.pid}"):
                continue_run(st, run_id)
        finally:
            sleeper.kill()
            sleeper.wait()
        assert st.run(run_id).stale  # its process is gone: safe to resume
        assert len(continue_run(st, run_id).rounds) == 2


# ---------------------------------------------------------------------------- concurrency
WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from hetsched.loop import LoopConfig, run_key, run_recorded
    from hetsched.model.files import load_scenario
    from hetsched.policies import make_policy
    from hetsched.store import RunStore
    path, tag, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    while not go.exists():
        time.sleep(0.005)
    store = RunStore(path, timeout_s=60)
    sc = load_scenario("fanout")
    for seed in range(4):
        for policy in ("all-cpu", "oracle"):
            run_recorded(run_key(sc, policy, LoopConfig(rounds=15, seed=seed), experiment=tag), make_policy(policy),
                         store=store)
    print("ok")
    """
)


def test_two_processes_write_one_store(tmp_path: Path) -> None:
    path, go = tmp_path / "shared.sqlite", tmp_path / "go"
    RunStore(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag, str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for tag in ("p1", "p2")]
    go.touch()
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0 and stdout.strip() == "ok", stderr
    sc = load_scenario("fanout")
    with RunStore(path) as st:
        runs = st.runs()
        assert len(runs) == 16 and {r.status for r in runs} == {"finished"}
        for tag in ("p1", "p2"):
            assert len(st.runs(experiment=tag)) == 8
        for info in runs:
            reference = run_rounds(sc, make_policy(info.policy), LoopConfig(rounds=15, seed=info.seed)).rounds
            assert st.rounds(info.id) == reference
        assert st._conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# ---------------------------------------------------------------------------- schema and files
def test_newer_schema_is_refused_and_foreign_files_are_named(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    RunStore(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match=rf"has schema version 99, but this hetsched .* knows versions up to "
                                         rf"{schema.SCHEMA_VERSION}"):
        RunStore(path)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as raw:
        raw.execute("CREATE TABLE customers (id INTEGER)")
    with pytest.raises(StoreError, match=r"not a hetsched run store \(it has tables \['customers'\]\)"):
        RunStore(other)
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a database " * 100)
    with pytest.raises(StoreError, match="cannot be opened as a hetsched run store"):
        RunStore(text)
    with pytest.raises(StoreError, match="does not exist"):
        RunStore(tmp_path / "missing.sqlite", create=False)
    with pytest.raises(StoreError, match="is a directory"):
        RunStore(tmp_path)


def test_older_schema_is_migrated_in_place_or_refused_without_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.sqlite"
    with RunStore(path) as st:
        run_id = run_recorded(run_key(load_scenario("chain"), "all-gpu", LoopConfig(rounds=2)), store=st).run_id
        assert run_id is not None
        before = st.rounds(run_id)
    now = schema.SCHEMA_VERSION
    monkeypatch.setattr(schema, "SCHEMA_VERSION", now + 1)
    monkeypatch.setitem(schema.MIGRATIONS, now, lambda conn: conn.execute("ALTER TABLE runs ADD COLUMN label TEXT"))
    with RunStore(path) as st:
        assert st.rounds(run_id) == before
        raw = st._conn()
        assert raw.execute("PRAGMA user_version").fetchone()[0] == now + 1
        assert "label" in [r[1] for r in raw.execute("PRAGMA table_info(runs)")]
    monkeypatch.setattr(schema, "SCHEMA_VERSION", now + 3)
    with pytest.raises(StoreError, match=rf"has schema version {now + 1}; this hetsched .* uses {now + 3} and has "
                                         rf"no migration from {now + 1}"):
        RunStore(path)


def test_default_location_and_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HETSCHED_STORE", str(tmp_path / "x.sqlite"))
    assert default_store_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("HETSCHED_STORE")
    path = default_store_path()
    assert path.name == "runs.sqlite" and "hetsched" in path.parts  # computed only, never created here


def test_secrets_are_never_written(tmp_path: Path) -> None:
    options = {"decider": "openai", "api_key": "sk-SECRET-1", "max_tokens": 512, "prompt_tokens_limit": 9,
               "server": {"base_url": "http://127.0.0.1:8080/v1", "OPENAI_API_KEY": "sk-SECRET-2", "auth-token": "t"}}
    assert public_options(options) == {"decider": "openai", "max_tokens": 512, "prompt_tokens_limit": 9,
                                       "server": {"base_url": "http://127.0.0.1:8080/v1"}}
    path = tmp_path / "s.sqlite"
    with RunStore(path) as st:
        run_id = st.create_run(RunKey(load_scenario("chain"), "agentic", options=options))
        assert st.run(run_id).options == public_options(options)
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())  # the file, its -wal and -shm
    assert b"sk-SECRET" not in data


def test_non_json_info_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    sc = load_scenario("chain")
    trace = Trace.refused(sc.uniform(Placement.CPU), Infeasibility(InfeasibleKind.TOOL_ERROR, "x"))
    bad = RoundRecord(round=0, proposal=Proposal(trace.mapping, "", info={"decider": object()}), trace=trace)
    with RunStore(tmp_path / "s.sqlite") as st:
        run_id = st.create_run(RunKey(sc, "all-cpu", rounds=1))
        with pytest.raises(NotJsonReady, match=r"round 0 Proposal.info: cannot store a object"):
            st.record_round(run_id, bad)
        assert st.run(run_id).rounds_done == 0


# ---------------------------------------------------------------------------- CLI
runner = CliRunner()


def cli(*args: str, code: int = 0) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, (result.stdout, result.stderr)
    return result


@pytest.fixture
def cli_commands() -> None:
    from hetsched.cli import inspect, run, runs  # noqa: F401  (registers commands)


def test_cli_records_lists_and_shows(tmp_path: Path, cli_commands: None, walker_registered: None) -> None:
    path = tmp_path / "hetsched-store" / "runs.sqlite"  # HETSCHED_STORE from conftest
    out = cli("run", "vram_3way", "--policy", "walker", "--rounds", "7", "--seed", "2").stdout
    run_id = out.split()[1]
    assert out.startswith(f"run {run_id} recorded in {path}")
    listed = json.loads(cli("runs", "--json").stdout)
    assert [(r["id"], r["rounds_done"], r["rounds_planned"], r["status"]) for r in listed] == [
        (run_id, 7, 7, "finished")]
    table = cli("runs").stdout
    assert run_id in table and "vram_3way" in table and "7/7" in table and "finished" in table
    shown = cli("show-run", run_id[:4]).stdout
    assert f"run {run_id}" in shown and "rejected: reply is not JSON" in shown
    assert "fallback: validation failed twice" in shown and "round 0 [bold]prompt[/]" in shown  # markup escaped
    assert "probe 0 reprobe" in shown
    exported = json.loads(cli("show-run", run_id, "--json").stdout)
    with RunStore(path) as st:
        assert [r["round"] for r in exported["rounds"]] == list(range(7))
        assert exported["rounds"][3]["info"] == st.rounds(run_id)[3].proposal.info == {"walker_round": 3}
        assert exported["rounds"][3]["decision"]["transcript"][0]["error"] == "reply is not JSON"
    assert json.loads(cli("run", "chain", "--rounds", "1", "--json").stdout)["rounds"]  # stdout stays pure JSON
    cli("run", "chain", "--rounds", "1", "--no-store")
    assert len(json.loads(cli("runs", "--json").stdout)) == 2
    other = tmp_path / "elsewhere.sqlite"
    cli("run", "chain", "--rounds", "1", "--store", str(other))
    assert len(json.loads(cli("runs", "--json", "--store", str(other)).stdout)) == 1
    assert len(json.loads(cli("runs", "--json", "--policy", "walker").stdout)) == 1


def hetsched(*args: str) -> subprocess.CompletedProcess[str]:
    """The real console entry point (its error boundary turns HetschedError into exit 2)."""
    return subprocess.run([sys.executable, "-m", "hetsched", *args], capture_output=True, text=True, timeout=120)


def test_cli_unknown_run_and_missing_store(tmp_path: Path, cli_commands: None) -> None:
    assert "no runs yet" in cli("runs").stdout
    assert json.loads(cli("runs", "--json").stdout) == []
    proc = hetsched("show-run", "abcd")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    cli("run", "chain", "--rounds", "1")
    for args in (("show-run", "zzzz"), ("run", "--resume", "zzzz")):
        proc = hetsched(*args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: no run 'zzzz' in run store") and "Traceback" not in proc.stderr
    assert "--status 'done' is not a run status" in cli("runs", "--status", "done", code=2).stderr
    assert "missing SCENARIO" in cli("run", code=2).stderr


def test_cli_interrupt_then_resume_equals_uninterrupted(
    tmp_path: Path, cli_commands: None, walker_registered: None
) -> None:
    sc = load_scenario("fanout")
    reference = run_rounds(sc, Walker(), LoopConfig(rounds=8, seed=4)).rounds
    Walker.interrupt_at = 3
    result = cli("run", "fanout", "--policy", "walker", "--rounds", "8", "--seed", "4", code=130)
    Walker.interrupt_at = None
    run_id = result.stdout.split()[1]
    assert f"keeps its 3 stored rounds; continue it with: hetsched run --resume {run_id}" in result.stderr
    (listed,) = json.loads(cli("runs", "--json").stdout)
    assert (listed["status"], listed["rounds_done"]) == ("interrupted", 3)
    assert "drop --policy" in cli("run", "--resume", run_id, "--policy", "all-gpu", code=2).stderr
    assert "drop SCENARIO" in cli("run", "fanout", "--resume", run_id, code=2).stderr
    assert "--no-store" in cli("run", "--resume", run_id, "--no-store", code=2).stderr
    out = cli("run", "--resume", run_id).stdout
    assert out.startswith(f"continuing run {run_id} (3 of 8 rounds stored)")
    exported = json.loads(cli("show-run", run_id, "--json").stdout)
    assert exported["run"]["status"] == "finished"
    with RunStore(tmp_path / "hetsched-store" / "runs.sqlite") as st:
        assert st.rounds(run_id) == reference
    assert "already finished; nothing to run" in cli("run", "--resume", run_id).stdout


# ---------------------------------------------------------------------------- schema 3 -> 4
def _as_schema_3(path: Path) -> None:
    """Turn a current store back into the schema-3 layout (what hetsched wrote before 4)."""
    with sqlite3.connect(path) as raw:
        raw.execute("ALTER TABLE rounds DROP COLUMN decision_ms")
        raw.execute("DROP TABLE scenario_references")
        raw.execute("DELETE FROM meta WHERE key = 'schema_version'")
        raw.execute("PRAGMA user_version = 3")


def test_a_schema_3_store_reads_back_and_is_migrated_with_decision_times_and_references(tmp_path: Path) -> None:
    from hetsched.bench.runner import ensure_reference
    from hetsched.search.reference import ReferenceChoice

    path = tmp_path / "v3.sqlite"
    sc = load_scenario("chain")
    with RunStore(path) as st:
        run_id = run_recorded(run_key(sc, "ucb1", LoopConfig(rounds=2)), store=st).run_id
        assert run_id is not None
        before = st.rounds(run_id)
        assert all(r.decision_ms is not None and r.decision_ms >= 0 for r in before)
        assert st.outcomes(run_id) == [r.outcome for r in before]
    _as_schema_3(path)
    with RunStore(path, read_only=True) as ro:  # migrated in memory only
        assert [r.decision_ms for r in ro.rounds(run_id)] == [None, None] and ro.stored_reference(sc, "auto") is None
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 3
    with RunStore(path) as st:
        assert st.rounds(run_id) == before  # decision time is a clock reading, not part of equality
        assert [o.decision_ms for o in st.outcomes(run_id)] == [None, None]
        ref, how = ensure_reference(st, sc, ReferenceChoice.AUTO)
        assert how == "computed" and ref.exact
        again, how = ensure_reference(st, sc, ReferenceChoice.AUTO)
        assert how == "reused" and again == ref
        row = st._conn().execute("SELECT kind, label, choice, scenario_name FROM scenario_references").fetchone()
        assert tuple(row) == ("oracle", "oracle", "auto", sc.name)
        assert ensure_reference(st, sc, ReferenceChoice.BEST_KNOWN)[1] == "computed"  # another choice, another row
        more = continue_run(st, run_id, rounds=3)
        assert more.rounds[:2] == before and more.rounds[2].decision_ms is not None
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION


# ---------------------------------------------------------------------------- schema 4 -> 5
OLD_ABANDONED = ("the request was abandoned: its handle was garbage-collected before finish() (the driver dropped it, "
                 "e.g. its code raised outside a with block or its asyncio task was cancelled)")
"""What a session wrote, as a ``tool_error`` detail, for a dropped handle before schema 5."""


def test_a_schema_4_store_reads_its_abandoned_requests_as_abandoned(tmp_path: Path) -> None:
    """Real SQLite: a store written before the ``abandoned`` kind (rounds of a dropped handle and of
    ``close(timeout=...)`` recorded as ``tool_error``) reads back with the new kind, in memory when opened
    read-only and in the file otherwise; a request its driver failed stays a ``tool_error``."""
    import gc

    import hetsched as hs

    path = tmp_path / "v4.sqlite"
    wf = hs.Workflow("one").node("A", hs.function_tool("inc", lambda x: x + 1))
    s = hs.Session(wf, store=path, name="app", executor_options={"device": "standin"}, warm_start=False)
    failed = s.begin_request(thread_bound=False)
    failed.fail("the caller's code broke")
    failed.finish()
    s.begin_request(thread_bound=False).run_node("A", [1])  # dropped
    gc.collect()
    held = s.begin_request(thread_bound=False)  # held, never finished: close(timeout=0) ends it
    s.close(timeout=0)
    with RunStore(path) as st:
        (run,) = st.runs()
        now = st.rounds(run.id)
    kinds = [r.trace.kind for r in now]
    assert kinds == [InfeasibleKind.TOOL_ERROR, InfeasibleKind.ABANDONED, InfeasibleKind.ABANDONED], kinds
    assert held.round == 2
    with sqlite3.connect(path) as raw:  # back to what schema 4 wrote
        for rnd, trace_json in raw.execute("SELECT round, trace_json FROM rounds WHERE round > 0").fetchall():
            trace = json.loads(trace_json)
            detail = trace["infeasibility"]["detail"]
            detail = OLD_ABANDONED if detail.startswith("its handle") else detail
            trace.update(infeasibility={"kind": "tool_error", "detail": detail}, reason=f"tool error: {detail}")
            raw.execute("UPDATE rounds SET infeasible_kind = 'tool_error', reason = ?, trace_json = ? WHERE round = ?",
                        (trace["reason"], json.dumps(trace), rnd))
        raw.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
        raw.execute("PRAGMA user_version = 4")
    with RunStore(path, read_only=True) as ro:  # migrated in memory only
        assert ro.rounds(run.id) == now
        assert [o.kind for o in ro.outcomes(run.id)] == ["tool_error", "abandoned", "abandoned"]
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 4
    with RunStore(path) as st:
        assert st.rounds(run.id) == now
        rows = st._conn().execute("SELECT infeasible_kind, reason FROM rounds ORDER BY round").fetchall()
    assert [k for k, _ in rows] == ["tool_error", "abandoned", "abandoned"]
    assert [r for _, r in rows] == [r.trace.reason for r in now]
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION


def test_round_outcomes_are_the_summary_of_the_rounds(tmp_path: Path) -> None:
    sc = load_scenario("vram_3way")
    with RunStore(tmp_path / "s.sqlite") as st:
        result = run_recorded(run_key(sc, "agentic", LoopConfig(rounds=4, seed=3), options={"decider": "rules"}),
                              store=st)
        assert result.run_id is not None
        outcomes = st.outcomes(result.run_id)
        exported = st.export(result.run_id)["rounds"]
    assert outcomes == [r.outcome for r in result.rounds]
    assert [o.to_dict() for o in outcomes] == result.to_dict()["rounds"]
    assert any(o.probes for o in outcomes) and [o.probes for o in outcomes] == [len(r.probes) for r in result.rounds]
    for o, full in zip(outcomes, exported, strict=True):
        summary = o.to_dict()
        assert {k: full[k] for k in summary if k != "probes"} == {k: v for k, v in summary.items() if k != "probes"}
        assert len(full["probes"]) == o.probes
