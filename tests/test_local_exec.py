"""The local executor on real executions: trace invariants (precedence, VRAM never over budget, a
waiting queue node holds nothing), outputs along edges, the typed failures (tool error, OOM from
the allocator and from measured memory, timeout, unavailable device) that end a round and let the
run go on, worker processes that never leak, and interrupt-then-resume from the CLI.

The tools are the small real tools of tests/realtools.py (pure Python and numpy), so these tests
need no [tools] extra; tests/test_real_tools.py runs the built-in torch tools.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests import realtools
from tests.realtools import Worker, card, check_trace, read_log, scenario

from hetsched.exec import make_executor
from hetsched.exec.local import LocalExecutor
from hetsched.loop import LoopConfig, load_result, run_key, run_recorded, run_rounds
from hetsched.model import ExecutorSpec, InfeasibleKind, InputError, Mapping, Mode, Placement, Trace
from hetsched.model.measured import deploy_choice, executions, measured_mappings, settling
from hetsched.policies import make_policy
from hetsched.policies.agentic import Agentic
from hetsched.store import RunStore
from hetsched.tools import register_tool, unregister_tool

ROOT = Path(__file__).resolve().parents[1]
C, G, Q = Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE


def children() -> set[int]:
    """Live child processes of this process (from /proc), but multiprocessing's resource tracker."""
    me = os.getpid()
    kids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if b"resource_tracker" not in cmd:  # multiprocessing's one shared helper, not a worker
                kids.add(int(entry.name))
    return kids


def _no_new_children(before: set[int]) -> None:
    deadline = time.monotonic() + 10
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not children() - before, f"worker processes left running: {children() - before}"


@pytest.fixture(autouse=True, scope="module")
def no_leaked_processes_in_the_module() -> Iterator[None]:
    """The module ends with no worker process left (its shared executor included)."""
    before = children()
    yield
    _no_new_children(before)


@pytest.fixture(autouse=True)
def no_leaked_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test ends with no worker process left over from it (but the module's shared executor)."""
    if "shared" in request.fixturenames:
        yield
        return
    before = children()
    yield
    _no_new_children(before)


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[dict[str, Worker]]:
    """Register the test tools (an event log under tmp_path); unregister them afterwards."""
    log = str(tmp_path / "events.log")
    made = {
        "prep": Worker("prep", ms=5, mem_mb=0.5, value=1, has_gpu=False, log=log),
        "embed": Worker("embed", ms=15, mem_mb=30, value=10, log=log, load_ms=5),
        "search": Worker("search", ms=10, mem_mb=20, value=100, log=log, load_ms=5),
        "rank": Worker("rank", ms=10, mem_mb=25, value=1000, log=log, load_ms=5),
        "answer": Worker("answer", ms=20, mem_mb=40, value=10000, log=log, load_ms=5),
    }
    for t in made.values():
        register_tool(t, replace=True)
    yield made
    for name in made:
        unregister_tool(name)


def rag(budget_mb: float = 70.0, mode: Mode = Mode.THREE_WAY):
    """prep -> embed -> search -> rank -> answer, plus embed -> answer (a DAG with a skip edge)."""
    cards = [card("prep", 5, has_gpu=False), card("embed", 15, 31), card("search", 10, 21), card("rank", 10, 26),
             card("answer", 20, 41)]
    return scenario([("A", "prep"), ("B", "embed"), ("C", "search"), ("D", "rank"), ("E", "answer")],
                    [("A", "B"), ("B", "C"), ("C", "D"), ("D", "E"), ("B", "E")], cards, budget_mb=budget_mb, mode=mode)


def m(**placements: Placement) -> Mapping:
    return Mapping(placements)


# ---------------------------------------------------------------------------- invariants
def test_traces_keep_every_invariant_and_outputs_flow_along_edges(tools: dict[str, Worker], tmp_path: Path) -> None:
    sc = rag()
    mappings = [
        sc.uniform(C),
        m(A=C, B=G, C=G, D=C, E=C),                # resident tools, released at their last node
        m(A=C, B=Q, C=Q, D=Q, E=Q),                # a queue that must wait: 41 + 26 > 70 at times
        m(A=C, B=G, C=Q, D=Q, E=Q),                # queued nodes beside a resident tool
    ]
    with LocalExecutor(sc) as ex:
        for mapping in mappings:
            trace = ex.run(mapping)
            check_trace(sc, trace)
            # A=1, B=10+1, C=100+11, D=1000+111, E=10000+(1111+11): every output reached its successors
            assert ex.last_outputs == {"E": 10000 + 1111 + 11}
            if any(p.on_gpu for p in mapping.values()):
                assert any("stand-in device" in n for n in trace.notes)
                assert ex.last_measured_peak_mb is not None
                assert ex.last_measured_peak_mb <= ex.memory_limit_mb()
            else:
                assert trace.notes == ()
            check_device_log(sc, trace, ex, tmp_path / "events.log")
            (tmp_path / "events.log").unlink(missing_ok=True)


def check_device_log(sc, trace: Trace, ex: LocalExecutor, log: Path) -> None:
    """What the stand-in device really loaded: never more than the budget at once, and a queued
    node's weights arrive only after it was admitted."""
    events = [e for e in read_log(log) if e[3] == "standin" and not e[2].startswith("warm")]
    held: dict[str, int] = {}
    budget = sc.machine.vram_budget_mb
    for _, what, tool, _ in sorted(events):
        held[tool] = held.get(tool, 0) + (1 if what == "load" else -1)
        real = sum(sc.cards[name].vram_mb for name, k in held.items() for _ in range(k))
        assert real <= budget, f"the device held {real} MB at once (budget {budget})"
    assert ex.last_t0 is not None
    for n, nt in trace.nodes.items():
        if nt.placement is Placement.GPU_QUEUE:
            loads = [t for t, what, tool, _ in events if what == "load" and tool == nt.tool]
            admitted = ex.last_t0 + nt.admitted_ms / 1000.0
            assert any(t >= admitted - 1e-6 for t in loads), f"{n}: loaded before it was admitted"
            assert all(not (ex.last_t0 + nt.ready_ms / 1000 <= t < admitted - 1e-6) for t in loads), (
                f"{n}: its weights were loaded while it waited in the queue")


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[LocalExecutor, object]]:
    """One executor for the property test (its workers start once)."""
    made = [Worker(n, ms=ms, mem_mb=mb, value=v, load_ms=3) for n, ms, mb, v in
            (("embed", 8, 30, 10), ("search", 5, 20, 100), ("rank", 5, 25, 1000), ("answer", 10, 40, 10000))]
    made.append(Worker("prep", ms=3, mem_mb=0.5, value=1, has_gpu=False))
    for t in made:
        register_tool(t, replace=True)
    sc = rag()
    ex = LocalExecutor(sc)
    try:
        yield ex, sc
    finally:
        ex.close()
        for t in made:
            unregister_tool(t.name)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from([C, G, Q]), min_size=4, max_size=4))
def test_any_mapping_runs_or_is_refused_with_a_typed_reason(shared: tuple[LocalExecutor, object],
                                                            places: list[Placement]) -> None:
    ex, sc = shared
    mapping = Mapping({"A": C, **dict(zip("BCDE", places, strict=True))})
    trace = ex.run(mapping)
    static = sc.infeasibility(mapping)  # type: ignore[attr-defined]
    if static is not None:
        assert not trace.feasible and trace.infeasibility == static and not trace.nodes
    else:
        check_trace(sc, trace)  # type: ignore[arg-type]
        assert ex.last_outputs == {"E": 10000 + 1111 + 11}


# ---------------------------------------------------------------------------- failures end a round, not the run
def test_tool_failure_and_timeout_mid_run_lose_no_recorded_round(tmp_path: Path) -> None:
    fail_flag, slow_flag = tmp_path / "fail", tmp_path / "slow"
    made = [Worker("prep", ms=2, mem_mb=0.5, value=1, has_gpu=False),
            Worker("embed", ms=5, mem_mb=5, value=10, fail_flag=str(fail_flag)),
            Worker("search", ms=5, mem_mb=5, value=100, slow_flag=str(slow_flag), slow_s=30)]
    for t in made:
        register_tool(t, replace=True)
    sc = scenario([("A", "prep"), ("B", "embed"), ("C", "search")], [("A", "B"), ("B", "C")],
                  [card("prep", 2, has_gpu=False), card("embed", 5, 6), card("search", 5, 6)])

    def inject(record) -> None:  # between rounds: round 1 fails, round 3 times out, others run
        fail_flag.unlink(missing_ok=True)
        slow_flag.unlink(missing_ok=True)
        if record.round == 0:
            fail_flag.touch()
        if record.round == 2:
            slow_flag.touch()

    try:
        with RunStore(tmp_path / "runs.sqlite") as store, \
                LocalExecutor(sc, timeout_s=2.0, min_timeout_s=0.1) as ex:
            key = run_key(sc, "all-gpu", LoopConfig(rounds=5),
                          executor=ExecutorSpec("local", {"timeout_s": 2.0, "min_timeout_s": 0.1}))
            result = run_recorded(key, store=store, executor=ex, recorder=inject)
            stored = load_result(store, result.run_id or "")
        kinds = [r.trace.kind for r in stored.rounds]
        assert kinds == [None, InfeasibleKind.TOOL_ERROR, None, InfeasibleKind.TIMEOUT, None]
        failed, slow = stored.rounds[1].trace, stored.rounds[3].trace
        assert "node 'B' (embed, gpu_now)" in failed.reason and "injected failure" in failed.reason
        assert set(failed.nodes) == {"A"}  # what finished before the failure is kept
        assert "node 'C' (search, gpu_now) ran past its time limit of 2 s" in slow.reason
        assert set(slow.nodes) == {"A", "B"}
        assert all(r.trace.feasible and r.trace.e2e_ms for r in stored.rounds if r.round in (0, 2, 4))
        assert [r.round for r in stored.rounds] == [0, 1, 2, 3, 4]
    finally:
        for t in made:
            unregister_tool(t.name)


def test_allocator_oom_and_measured_memory_over_budget_are_oom(tmp_path: Path) -> None:
    register_tool(realtools.Oom(), replace=True)
    # the card says 5 MB; the tool really allocates 60 MB: the memory watch catches it
    register_tool(Worker("liar", ms=300, mem_mb=60), replace=True)
    register_tool(Worker("honest", ms=5, mem_mb=5), replace=True)
    try:
        sc = scenario([("A", "honest"), ("C", "oom_tool")], [("A", "C")], [card("honest", 5, 6), card("oom_tool", 5, 1)],
                      budget_mb=40)
        with LocalExecutor(sc) as ex:
            trace = ex.run(m(A=G, C=G))
            assert trace.kind is InfeasibleKind.OOM and "node 'C' (oom_tool, gpu_now)" in trace.reason
            assert "MemoryError: cannot allocate 64 GB" in trace.reason and set(trace.nodes) == {"A"}
        sc = scenario([("A", "honest"), ("B", "liar")], [("A", "B")], [card("honest", 5, 6), card("liar", 300, 5)],
                      budget_mb=40)
        with LocalExecutor(sc) as ex:
            trace = ex.run(m(A=C, B=G))
            assert trace.kind is InfeasibleKind.OOM and "measure" in trace.reason and "40 MB budget" in trace.reason
            trace = ex.run(m(A=G, B=C))  # the run goes on: the device was freed
            assert trace.feasible, trace.reason
            assert ex.last_measured_peak_mb is not None and ex.last_measured_peak_mb < 40
    finally:
        for name in ("oom_tool", "liar", "honest"):
            unregister_tool(name)


def test_a_worker_that_dies_mid_round_is_a_tool_error_and_is_restarted(tmp_path: Path) -> None:
    flag = tmp_path / "crash"
    made = [Worker("steady", ms=5, mem_mb=1, value=1), Worker("crasher", ms=5, mem_mb=1, value=2, crash_flag=str(flag))]
    for t in made:
        register_tool(t, replace=True)
    try:
        sc = scenario([("A", "steady"), ("B", "crasher")], [("A", "B")], [card("steady", 5, 2), card("crasher", 5, 2)])
        with LocalExecutor(sc) as ex:
            check_trace(sc, ex.run(m(A=C, B=G)))
            old = ex.gpu.pid if ex.gpu is not None else None
            flag.touch()
            trace = ex.run(m(A=C, B=G))
            assert trace.kind is InfeasibleKind.TOOL_ERROR and "stand-in device worker process died" in trace.reason
            assert "(killed by SIGKILL (signal 9))" in trace.reason  # how it died, never "exit code None"
            assert "['B']" in trace.reason and set(trace.nodes) == {"A"}
            flag.unlink()
            check_trace(sc, ex.run(m(A=C, B=G)))  # a fresh device worker took over
            assert ex.gpu is not None and ex.gpu.pid != old
    finally:
        for t in made:
            unregister_tool(t.name)


def bounded(fn: Callable[[], Trace], limit_s: float = 300.0) -> Trace:
    """``fn()``, or a failure when it has not returned within ``limit_s`` (a hang, not a slow machine:
    the rounds it runs take a few seconds)."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(fn)
        try:
            return future.result(timeout=limit_s)
        except FutureTimeout:
            raise AssertionError(f"the round did not end within {limit_s:g} s: the executor hangs") from None


def test_a_tool_that_hangs_on_its_first_call_is_a_timeout_and_later_rounds_run(tmp_path: Path) -> None:
    flag = tmp_path / "hang"
    made = [Worker("steady", ms=5, mem_mb=1, value=1, has_gpu=False),
            Worker("sleeper", ms=5, mem_mb=1, value=2, slow_flag=str(flag), slow_s=3600)]
    for t in made:
        register_tool(t, replace=True)
    try:
        sc = scenario([("A", "steady"), ("B", "sleeper")], [("A", "B")],
                      [card("steady", 5, has_gpu=False), card("sleeper", 5, 2)])
        flag.touch()  # the warm-up call before the first round hangs
        for device_node in (C, G):
            ex = LocalExecutor(sc, timeout_s=1.0)
            try:
                # each worker that prepares the tool meets the hang in its warm-up once (the CPU pool
                # prepares every tool): a timeout naming the warm-up, then the tool is not warmed again
                warmups: list[str] = []
                for _ in range(3):
                    trace = bounded(lambda: ex.run(m(A=C, B=device_node)))  # noqa: B023
                    assert trace.kind is InfeasibleKind.TIMEOUT, trace.reason
                    if "warming up" not in trace.reason:
                        break
                    assert "warming up tool 'sleeper'" in trace.reason and "time limit of 1 s" in trace.reason
                    warmups.append(trace.reason)
                assert len(warmups) == (1 if device_node is C else 2), warmups
                # the next round meets the hang in the node itself: a timeout too, with what finished kept
                assert "node 'B' (sleeper" in trace.reason and "time limit of 1 s" in trace.reason, trace.reason
                assert set(trace.nodes) == {"A"}
                flag.unlink()
                check_trace(sc, bounded(lambda: ex.run(m(A=C, B=device_node))))  # noqa: B023
                flag.touch()
            finally:
                ex.close()
    finally:
        for t in made:
            unregister_tool(t.name)


def test_a_segfault_while_warming_up_is_a_tool_error_naming_the_signal(tmp_path: Path) -> None:
    flag = tmp_path / "crash"
    made = [Worker("steady", ms=5, mem_mb=1, value=1, has_gpu=False),
            Worker("segv", ms=5, mem_mb=1, value=2, crash_flag=str(flag), crash="segv")]
    for t in made:
        register_tool(t, replace=True)
    try:
        sc = scenario([("A", "steady"), ("B", "segv")], [("A", "B")],
                      [card("steady", 5, has_gpu=False), card("segv", 5, 2)])
        with LocalExecutor(sc) as ex:
            flag.touch()
            # the CPU pool prepares every tool, the device its GPU tools: each dies once in its warm-up
            for where in ("CPU pool", "stand-in device"):
                trace = ex.run(m(A=C, B=G))
                assert trace.kind is InfeasibleKind.TOOL_ERROR, trace.reason
                assert f"warming up tool 'segv' on the {where}" in trace.reason
                assert f"the {where} worker process died (killed by SIGSEGV (signal 11))" in trace.reason
            # not warmed up again: the round that runs it meets the crash, typed, with what finished kept
            trace = ex.run(m(A=C, B=G))
            assert trace.kind is InfeasibleKind.TOOL_ERROR and "killed by SIGSEGV" in trace.reason, trace.reason
            assert "while running nodes ['B']" in trace.reason and set(trace.nodes) == {"A"}
            flag.unlink()
            check_trace(sc, ex.run(m(A=C, B=G)))  # fresh workers took over
            check_trace(sc, ex.run(m(A=C, B=C)))
    finally:
        for t in made:
            unregister_tool(t.name)


def test_gpu_placement_without_a_device_is_unavailable(tools: dict[str, Worker]) -> None:
    sc = rag()
    with LocalExecutor(sc, device="none") as ex:
        trace = ex.run(m(A=C, B=G, C=C, D=C, E=C))
        assert trace.kind is InfeasibleKind.UNAVAILABLE
        assert "['B']" in trace.reason and "device" in trace.reason
        assert ex.gpu is None
        check_trace(sc, ex.run(sc.uniform(C)))  # CPU mappings still run


def test_bad_options_and_unknown_tools_are_input_errors(tools: dict[str, Worker]) -> None:
    sc = rag()
    with pytest.raises(InputError, match="device 'tpu' is not known; accepted: auto, cuda, standin, none"):
        make_executor("local", sc, device="tpu")
    with pytest.raises(InputError, match=r"cuda.*standin"):
        make_executor("local", sc, device="cuda")  # no CUDA here
    with pytest.raises(InputError, match="executor 'local' has no option 'nonsense'; accepted: device"):
        make_executor("local", sc, nonsense=1)
    unregister_tool("rank")
    with pytest.raises(InputError, match=r"tool 'rank' has no implementation to run; registered tools: .*embed"):
        LocalExecutor(sc)


def test_executor_spec_options_reach_the_executor(tools: dict[str, Worker]) -> None:
    sc = rag()
    with make_executor(ExecutorSpec("local", {"device": "none", "cpu_threads": 1, "timeout_s": 9}), sc) as ex:
        assert isinstance(ex, LocalExecutor)
        assert ex.device is None and ex.plan.cpu_threads == 1 and ex.timeout_of("A", C) == 9


# ---------------------------------------------------------------------------- the loop, the CLI, resume
def test_policies_run_through_the_loop_on_the_local_executor(tools: dict[str, Worker]) -> None:
    sc = rag()
    with LocalExecutor(sc) as ex:
        for name, opts in (("all-gpu", {}), ("agentic", {"decider": "rules"}), ("oracle", {})):
            result = run_rounds(sc, make_policy(name, **opts), LoopConfig(rounds=2), executor=ex)
            assert result.executor == "local" and len(result.rounds) == 2
            for r in result.rounds:
                for trace in (r.trace, *(p.trace for p in r.probes)):
                    assert trace.executor == "local"
                    if trace.feasible:
                        check_trace(sc, trace)


def test_agentic_on_the_local_executor_stops_exploring_within_the_measured_noise(tools: dict[str, Worker]) -> None:
    sc = rag()
    pol = make_policy("agentic", decider="rules")
    assert isinstance(pol, Agentic)
    with LocalExecutor(sc) as ex:
        result = run_rounds(sc, pol, LoopConfig(rounds=14), executor=ex)
    stopped = 0
    for i, r in enumerate(result.rounds):
        state = pol.settling(result.rounds[:i])  # what the policy saw before round i
        assert state is not None and state.best == settling(result.rounds[:i]).best
        if state.exploring:
            continue
        stopped += 1
        # the best to repeat, a mapping the model ranks within the noise that never ran, or a close one to repeat
        assert r.mapping == state.next_mapping, (i, r.proposal.rationale)
        if state.trial is not None:
            assert r.mapping not in {t.mapping for _, t in executions(result.rounds[:i])}
        assert not r.probes  # no more what-if probes once exploring stopped
        assert ("settled" if state.settled else "exploring stopped") in r.proposal.rationale
    deploy = result.deploy
    assert deploy is not None and deploy == deploy_choice(executions(result.rounds))
    clean = [m for m in measured_mappings(executions(result.rounds)) if not m.failed]
    assert all(deploy.median_ms <= m.median_ms for m in clean)
    # on the simulator the rule is off unless asked for: its rounds are the policy's as before
    plain = run_rounds(sc, make_policy("agentic", decider="rules"), LoopConfig(rounds=6))
    assert not any("settled" in r.proposal.rationale or "exploring stopped" in r.proposal.rationale
                   for r in plain.rounds)


def test_a_real_run_measures_its_reference_and_ends_with_the_mapping_to_deploy(tmp_path: Path) -> None:
    path = tmp_path / "quick.yaml"
    path.write_text(SCENARIO_YAML.replace("400", "20"))
    store = tmp_path / "runs.sqlite"
    base = ["run", str(path), "--executor", "local", "-X", 'tool_modules=["tests.slowtools"]', "--policy", "all-cpu",
            "--rounds", "2", "--store", str(store)]
    proc = cli(*base, "--json")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    data = json.loads(out)
    measured = data["reference"]["measured"]
    assert measured["kind"] in ("reference mapping", "best measured") and len(measured["runs_ms"]) >= 1
    if measured["kind"] == "reference mapping":
        assert measured["mapping"] == data["reference"]["mapping"] and len(measured["runs_ms"]) == 3
    deploy = data["deploy"]
    assert deploy["mapping"] == {"A": "cpu", "B": "cpu"} and deploy["runs_ms"] == [r["e2e_ms"] for r in data["rounds"]]
    assert deploy["median_ms"] == statistics.median(deploy["runs_ms"]) and deploy["spread"] is not None
    with RunStore(store) as st:
        [info] = st.runs()
        assert info.reference is not None and info.reference.measured is not None  # stored with the run
        assert st.export(info.id)["deploy"] == deploy
    proc = cli(*base, env={"COLUMNS": "250"})
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "(simulated from the cards, not measured)" in out and "deploy: A:cpu B:cpu" in out
    assert "/ oracle (measured)" in out or "/ best measured" in out


SCENARIO_YAML = """
name: slow_chain
mode: three_way
machine: {cpu_cores: 1, vram_budget_mb: 100}
cards:
  slow_a: {cpu_ms: 400, gpu_ms: 400, load_ms: 5, vram_mb: 2}
  slow_b: {cpu_ms: 400, gpu_ms: 400, load_ms: 5, vram_mb: 2}
nodes: [{id: A, tool: slow_a}, {id: B, tool: slow_b}]
edges: [A -> B]
"""


def cli(*args: str, env: dict[str, str] | None = None, **kw: object) -> subprocess.Popen:
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.Popen([sys.executable, "-m", "hetsched", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]


def test_ctrl_c_during_a_real_run_then_resume_gives_the_remaining_rounds(tmp_path: Path) -> None:
    path = tmp_path / "slow.yaml"
    path.write_text(SCENARIO_YAML)
    store = tmp_path / "runs.sqlite"
    module = "tests.slowtools"
    # planned rounds the run cannot finish before the interrupt (800 ms each), however late the test
    # process gets to look: it is still running when the SIGINT lands, by construction, not by timing
    args = ["run", str(path), "--executor", "local", "-X", f'tool_modules=["{module}"]', "--policy", "all-gpu",
            "--rounds", "1000", "--store", str(store), "--reference", "none"]
    proc = cli(*args, start_new_session=True)  # its own process group, as a terminal's Ctrl-C reaches it
    deadline = time.monotonic() + 120
    done = 0
    while done < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        if store.exists():
            with sqlite3.connect(store) as db:
                try:
                    done = db.execute("select count(*) from rounds").fetchone()[0]
                except sqlite3.OperationalError:
                    done = 0
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: to the CLI and to its workers
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "continue it with: hetsched run --resume" in err
    with pytest.raises(ProcessLookupError):  # nothing of that process group is left
        for _ in range(50):
            os.killpg(proc.pid, 0)
            time.sleep(0.1)
    with RunStore(store) as st:
        [info] = st.runs()
        kept = st.rounds(info.id)
        assert info.status == "interrupted" and 2 <= len(kept) < 1000
    planned = len(kept) + 2  # the rest of the run, made shorter on resume
    proc = cli("run", "--resume", info.id, "--rounds", str(planned), "--store", str(store), "--reference", "none")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert "stand-in device" in out
    with RunStore(store) as st:
        rounds = st.rounds(info.id)
        assert st.run(info.id).status == "finished"
        assert [r.round for r in rounds] == list(range(planned))
        assert rounds[: len(kept)] == kept  # the stored rounds are untouched
        assert all(r.trace.feasible and r.trace.executor == "local" for r in rounds)


def test_a_cli_run_with_a_tool_that_hangs_ends_with_typed_timeouts(tmp_path: Path) -> None:
    path = tmp_path / "hang.yaml"
    path.write_text(SCENARIO_YAML.replace("slow_", "hang_").replace("400", "5"))
    flag, store = tmp_path / "hang", tmp_path / "runs.sqlite"
    flag.touch()
    args = ["run", str(path), "--executor", "local", "-X", 'tool_modules=["tests.hangtools"]', "-X", "timeout_s=1",
            "--policy", "all-cpu", "--rounds", "2", "--store", str(store), "--reference", "none"]
    hang = {"HETSCHED_TEST_HANG_FLAG": str(flag)}

    def finish(proc: subprocess.Popen) -> str:
        try:
            _, err = proc.communicate(timeout=300)  # before the fix: the warm-up call waited for ever
        finally:
            proc.kill()
        return str(err)

    proc = cli(*args, env=hang)
    err = finish(proc)
    assert proc.returncode == 3 and "all 2 rounds were infeasible (timeout)" in err, err
    with RunStore(store) as st:
        [info] = st.runs()
        rounds = st.rounds(info.id)
        assert [r.trace.kind for r in rounds] == [InfeasibleKind.TIMEOUT] * 2
        assert "warming up tool 'hang_a'" in rounds[0].trace.reason
    # --resume builds a fresh executor, which warms up again: bounded too
    proc = cli("run", "--resume", info.id, "--rounds", "3", "--store", str(store), "--reference", "none", env=hang)
    err = finish(proc)
    assert proc.returncode == 3, err
    flag.unlink()
    proc = cli("run", "--resume", info.id, "--rounds", "4", "--store", str(store), "--reference", "none", env=hang)
    err = finish(proc)
    assert proc.returncode == 0, err
    with RunStore(store) as st:
        rounds = st.rounds(info.id)
        assert [r.trace.kind for r in rounds] == [InfeasibleKind.TIMEOUT] * 3 + [None]
        assert "warming up tool 'hang_a'" in rounds[2].trace.reason


def test_bench_accepts_the_local_executor(tmp_path: Path) -> None:
    path = tmp_path / "slow.yaml"
    path.write_text(SCENARIO_YAML.replace("400", "20"))
    proc = cli("bench", "--executor", "local", "-X", 'tool_modules=["tests.slowtools"]', "--scenario", str(path),
               "-p", "all-cpu", "-p", "all-gpu", "--rounds", "2", "--out", str(tmp_path / "out"), "--no-progress")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "executor local" in err and "2 runs" in out
    with RunStore(tmp_path / "out" / "runs.sqlite") as st:
        infos = st.runs()
        assert len(infos) == 2 and {i.executor.name for i in infos} == {"local"}
        for info in infos:
            assert all(r.trace.executor == "local" and r.trace.feasible for r in st.rounds(info.id))
    # the report says which figures were measured and which are simulated from the cards
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "Measured on local: the mapping to deploy, against the best measured mapping" in report
    assert "Measured and simulated (a real executor)" in report
    assert "E2E of the best-found mapping / oracle E2E (noise-free; 1.000 = oracle) [simulated from the cards]" in report
    assert "oracle E2E ms (simulated)" in report
    proc = cli("bench", "--executor", "local", "--jobs", "2", "--scenario", str(path))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "one run at a time" in err
