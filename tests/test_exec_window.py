"""Windows of overlapping requests on the local executor (hetsched.exec.window, LocalExecutor.run_window):
real worker processes, real tools (tests/realtools.py), invariants only (no timing):

- every request sent completes, and each keeps its DAG's precedence, released no earlier than its release;
- VRAM never over budget, from the executor's own admission accounting and from the trace;
- a gpu_now tool is loaded once for the whole window (the executor's count and the tool's own load log);
- gpu_queue admissions across requests in FIFO order (the executor's own records);
- a closed loop never has more requests in flight than clients, and sends request r after r - K returned;
- a closed loop whose resident tool waits for a later request is a deadlock, refused (not a hang);
- the release plan's bad input names the parameter.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.realtools import Worker, card, read_log, scenario

from hetsched.exec.local import LocalExecutor
from hetsched.exec.window import ReleaseClock, WindowRun, instance_id, split_id, window_mapping, window_scenario
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import InfeasibleKind, InputError, Mapping, Placement
from hetsched.model.workload import Workload, percentile
from hetsched.policies import make_policy
from hetsched.store import RunStore
from hetsched.tools import register_tool, unregister_tool

C, G, Q = Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE
EPS = 1e-6


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("window") / "events.log"


@pytest.fixture(scope="module")
def tools(log: Path) -> Iterator[None]:
    made = [Worker("wprep", ms=3, mem_mb=0.5, value=1, has_gpu=False, log=str(log)),
            Worker("wembed", ms=6, mem_mb=30, value=10, log=str(log), load_ms=2),
            Worker("wsearch", ms=4, mem_mb=20, value=100, log=str(log), load_ms=2),
            Worker("wanswer", ms=6, mem_mb=40, value=1000, log=str(log), load_ms=2)]
    for t in made:
        register_tool(t, replace=True)
    yield
    for t in made:
        unregister_tool(t.name)


def flow(budget_mb: float = 80.0):
    """A -> B -> C -> E plus A -> E: a CPU source, then three GPU-capable tools."""
    cards = [card("wprep", 3, has_gpu=False), card("wembed", 6, 31), card("wsearch", 4, 21), card("wanswer", 6, 41)]
    return scenario([("A", "wprep"), ("B", "wembed"), ("C", "wsearch"), ("E", "wanswer")],
                    [("A", "B"), ("B", "C"), ("C", "E"), ("A", "E")], cards, budget_mb=budget_mb)


MAPPING = Mapping({"A": C, "B": G, "C": Q, "E": Q})


@pytest.fixture(scope="module")
def ex(tools: None) -> Iterator[LocalExecutor]:
    with LocalExecutor(flow(), device="standin") as executor:
        executor.start()
        yield executor


def check_window(run: WindowRun, mapping: Mapping, budget_mb: float) -> None:
    """Every invariant of a window that ran (raises AssertionError naming the request or node)."""
    sc = flow(budget_mb)
    wf = sc.workflow
    assert run.completed, run.trace.reason
    sent = [r for r, t in enumerate(run.release_ms) if t is not None]
    assert set(run.trace.nodes) == {instance_id(n, r) for r in sent for n in wf.node_ids}
    for r in sent:
        nodes = run.request_nodes(r)
        release = run.release_ms[r]
        assert release is not None
        for n, nt in nodes.items():
            assert nt.placement is mapping[n]
            assert nt.ready_ms >= release - EPS, f"{n}@{r} ready before its request was released"
            assert nt.ready_ms <= nt.admitted_ms + EPS <= nt.start_ms + 2 * EPS <= nt.end_ms + 3 * EPS
            for p in wf.preds(n):
                assert nt.ready_ms >= nodes[p].end_ms - EPS, f"{n}@{r} ready before its input {p}@{r} ended"
        end = run.end_ms[r]
        assert end is not None and end == max(nodes[s].end_ms for s in wf.sinks)
    assert all(x >= 0 for x in run.latency_ms) and len(run.latency_ms) == len(sent)
    # VRAM: the executor's own accounting after every admission, and the trace's timeline
    for a in run.admissions:
        assert a.held_mb <= budget_mb + EPS, f"{a.node} admitted with {a.held_mb} MB held, over {budget_mb} MB"
        assert a.held_mb >= sc.card_of(split_id(a.node)[0]).vram_mb - EPS
    assert max(p.used_mb for p in run.trace.vram_timeline) <= budget_mb + EPS
    # FIFO across requests: admitted exactly in the order they entered the queue
    queued = [instance_id(n, r) for r in sent for n in wf.node_ids if mapping[n] is Q]
    assert sorted(run.enqueued) == sorted(queued)
    assert [a.node for a in run.admissions] == list(run.enqueued)
    for a, b in itertools.pairwise(run.admissions):
        assert a.t_ms <= b.t_ms + EPS
    # resident tools: loaded once for the window
    assert run.resident_loads == dict.fromkeys(sc.gpu_now_tools(mapping), 1)


def loads_between(log: Path, tool: str, t0: float, t1: float) -> int:
    return sum(1 for t, what, name, _ in read_log(log) if name == tool and what == "load" and t0 <= t <= t1)


def test_open_loop_window_keeps_every_invariant_and_loads_the_resident_tool_once(ex: LocalExecutor,
                                                                                    log: Path) -> None:
    import time

    t0 = time.monotonic()
    run = ex.run_window(MAPPING, releases_ms=[0, 0, 3, 10, 11, 40])
    t1 = time.monotonic()
    check_window(run, MAPPING, 80.0)
    assert run.release_ms == (0.0, 0.0, 3.0, 10.0, 11.0, 40.0)
    # the tool's own log: the resident wembed was loaded once; each queued node loaded its tool once
    assert loads_between(log, "wembed", t0, t1) == 1
    assert loads_between(log, "wsearch", t0, t1) == 6
    assert loads_between(log, "wanswer", t0, t1) == 6


def test_closed_loop_never_has_more_requests_in_flight_than_clients(ex: LocalExecutor) -> None:
    clients, count = 3, 8
    run = ex.run_window(MAPPING, clients=clients, count=count)
    check_window(run, MAPPING, 80.0)
    assert run.count == count
    rel = [t for t in run.release_ms if t is not None]
    ends = [e for e in run.end_ms if e is not None]
    assert rel[:clients] == [0.0] * clients
    for r in range(clients, count):
        assert rel[r] >= ends[r - clients] - EPS, f"request {r} sent before request {r - clients} returned"
    for t in sorted(set(rel)):
        in_flight = sum(1 for a, b in zip(rel, ends, strict=True) if a <= t < b)
        assert in_flight <= clients


def test_a_tight_budget_queues_across_requests_in_fifo_order(tools: None) -> None:
    # 31 (resident) + 41 fits 80 but not beside a second 21 or 41: queued nodes of different requests wait
    mapping = Mapping({"A": C, "B": G, "C": Q, "E": Q})
    with LocalExecutor(flow(75.0), device="standin") as ex:
        run = ex.run_window(mapping, releases_ms=[0] * 5)
    check_window(run, mapping, 75.0)
    assert max(a.held_mb for a in run.admissions) <= 75.0


def test_a_closed_loop_whose_resident_tool_waits_for_a_later_request_is_refused_as_a_deadlock(tools: None) -> None:
    # B (resident wembed, 31) runs before E (queued wanswer, 41) in each request; 31 + 41 > 60, so E@0
    # waits for wembed to go, which stays for B@1, which a single client sends only after E@0 returns
    mapping = Mapping({"A": C, "B": G, "C": C, "E": Q})
    with LocalExecutor(flow(60.0), device="standin") as ex:
        closed = ex.run_window(mapping, clients=1, count=2)
        assert closed.trace.kind is InfeasibleKind.DEADLOCK, closed.trace.reason
        assert "gpu_queue" in closed.trace.reason
        # open loop: B@1 is sent anyway, wembed goes after it, and both E nodes run
        opened = ex.run_window(mapping, releases_ms=[0, 0])
    check_window(opened, mapping, 60.0)


def test_requests_past_the_horizon_are_not_sent_and_the_resident_tool_still_goes(ex: LocalExecutor) -> None:
    clock = ReleaseClock([0.0, 0.0, 1e9], horizon_ms=1e8)
    run = ex.run_window(MAPPING, clock=clock)
    assert run.release_ms[2] is None and run.end_ms[2] is None
    check_window(run, MAPPING, 80.0)
    assert run.count == 2


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(times=st.lists(st.integers(0, 30), min_size=1, max_size=5),
       placements=st.tuples(st.sampled_from([G, Q, C]), st.sampled_from([G, Q, C]), st.sampled_from([G, Q, C])))
def test_any_small_window_keeps_the_invariants(ex: LocalExecutor, times: list[int],
                                               placements: tuple[Placement, Placement, Placement]) -> None:
    mapping = Mapping({"A": C, "B": placements[0], "C": placements[1], "E": placements[2]})
    if flow().infeasibility(mapping) is not None:
        return
    run = ex.run_window(mapping, releases_ms=times)
    check_window(run, mapping, 80.0)


# ---------------------------------------------------------------------------- the Workload contract
def test_a_failing_request_ends_the_window_typed_keeping_what_finished_and_the_next_window_runs(
        tools: None, tmp_path: Path) -> None:
    flag = tmp_path / "fail"
    register_tool(Worker("wflaky", ms=3, mem_mb=1, value=5, fail_flag=str(flag)), replace=True)
    try:
        sc = scenario([("A", "wprep"), ("B", "wflaky")], [("A", "B")],
                      [card("wprep", 3, has_gpu=False), card("wflaky", 3, 2)], budget_mb=10)
        mapping = Mapping({"A": C, "B": G})
        with LocalExecutor(sc, device="standin") as ex:
            ok = ex.run_workload(mapping, Workload.trace([0.0, 0.0]))
            assert ok.feasible and ok.load is not None and ok.load.requests == 2
            flag.touch()
            bad = ex.run_workload(mapping, Workload.trace([0.0, 0.0, 500.0]))
            assert bad.kind is InfeasibleKind.TOOL_ERROR and "injected failure" in bad.reason
            assert "B@" in bad.reason, "the reason names the request's node"
            assert bad.load is None and all(r.end_ms >= r.release_ms for r in bad.requests)
            flag.unlink()
            again = ex.run_workload(mapping, Workload.trace([0.0, 0.0]))
            assert again.feasible and again.load is not None and again.load.requests == 2
    finally:
        unregister_tool("wflaky")


def test_run_workload_returns_the_window_trace_every_executor_returns(ex: LocalExecutor) -> None:
    wl = Workload.closed(2, requests=5)
    tr = ex.run_workload(MAPPING, wl)
    assert tr.feasible and tr.executor == "local", tr.reason
    assert tr.load is not None and tr.load.requests == 5 and len(tr.requests) == 5
    assert [r.request for r in tr.requests] == list(range(5))
    assert [r.release_ms for r in tr.requests] == sorted(r.release_ms for r in tr.requests)
    assert {r.client for r in tr.requests} == {0, 1}
    assert tr.e2e_ms == tr.load.p95_ms == percentile([r.latency_ms for r in tr.requests], 95)
    assert set(tr.nodes) == {"A", "B", "C", "E"}, "the p95 request's nodes, by the workflow's own ids"
    for r in tr.requests:
        assert set(r.nodes) == {"A", "B", "C", "E"}
        assert min(nt.ready_ms for nt in r.nodes.values()) >= r.release_ms - EPS
    assert tr.load.peak_vram_mb <= 80.0 + EPS


def test_a_mapping_that_cannot_serve_a_window_is_refused_before_running(tools: None) -> None:
    # wanswer (41, queued) never fits beside the resident wembed (31) in 60 MB: fine for one request
    # (wembed goes after its node), not for a window (it stays for the next request)
    mapping = Mapping({"A": C, "B": G, "C": C, "E": Q})
    with LocalExecutor(flow(60.0), device="standin") as ex:
        assert ex.run(mapping).feasible
        tr = ex.run_workload(mapping, Workload.open(5.0, requests=3))
    assert tr.kind is InfeasibleKind.NEVER_ADMISSIBLE and "under load" in tr.reason and not tr.requests


def test_rounds_of_a_policy_under_load_run_windows_for_real(ex: LocalExecutor) -> None:
    sc = flow().with_workload(Workload.open(50.0, requests=4, seed=3))
    result = run_rounds(sc, make_policy("agentic", decider="rules"), LoopConfig(rounds=2), executor=ex)
    assert len(result.rounds) == 2
    ran = [rec.trace for rec in result.rounds if rec.trace.feasible]
    assert ran, [rec.trace.reason for rec in result.rounds]
    for tr in ran:
        assert tr.executor == "local" and tr.load is not None and tr.load.requests == 4
        assert tr.e2e_ms == tr.load.p95_ms


def test_a_worker_drops_a_kept_output_after_its_last_reader_on_that_worker() -> None:
    # a window keeps every request's outputs for their successors: without the drop they pile up in memory
    from hetsched.exec.worker import _Child
    from hetsched.tools.base import Device, DeviceKind

    child = _Child(None, Device(DeviceKind.CPU, 0, 1), sample_ms=0.0)
    assert child.finish("A@0", [1, 2], keep=2, export=False) is None
    assert child.inputs([("ref", "A@0")]) == [[1, 2]]
    assert "A@0" in child.outputs
    assert child.inputs([("ref", "A@0")]) == [[1, 2]]
    assert "A@0" not in child.outputs and not child.readers
    child.finish("B@0", 5, keep=0, export=True)
    assert "B@0" not in child.outputs


def test_a_worker_process_starts_with_its_thread_budget_in_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # spawn re-imports the parent's script (numpy, torch at module level) before the worker can limit
    # threads: the limit must already be in the environment the process starts with
    import os

    from hetsched.exec.worker import THREAD_ENV
    from hetsched.exec.worker import Worker as Proc
    from hetsched.tools.base import Device, DeviceKind

    for k in THREAD_ENV:
        monkeypatch.setenv(k, "7")  # the parent's own setting (a machine-wide default, say)
    before = {k: os.environ.get(k) for k in THREAD_ENV}
    w = Proc(Device(DeviceKind.CPU, 0, 1), sample_ms=0.0)
    try:
        w.start()
        assert w.pid is not None
        env = dict(e.split("=", 1) for e in Path(f"/proc/{w.pid}/environ").read_text().split("\0") if "=" in e)
        assert {k: env.get(k) for k in THREAD_ENV} == dict.fromkeys(THREAD_ENV, "1")
    finally:
        w.close()
    assert {k: os.environ.get(k) for k in THREAD_ENV} == before, "the parent's environment is restored"


CHAIN_YAML = """
name: load_chain
mode: three_way
machine: {cpu_cores: 1, vram_budget_mb: 100}
cards:
  slow_a: {cpu_ms: 400, gpu_ms: 400, load_ms: 5, vram_mb: 2}
  slow_b: {cpu_ms: 400, gpu_ms: 400, load_ms: 5, vram_mb: 2}
nodes: [{id: A, tool: slow_a}, {id: B, tool: slow_b}]
edges: [A -> B]
"""


def test_hetsched_run_under_load_on_the_local_executor_records_the_percentiles(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    path = tmp_path / "chain.yaml"
    path.write_text(CHAIN_YAML)
    store = tmp_path / "runs.sqlite"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    proc = subprocess.run([sys.executable, "-m", "hetsched", "run", str(path), "--executor", "local", "-X",
                           'tool_modules=["tests.slowtools"]', "--policy", "all-gpu", "--rounds", "1", "--clients", "2",
                           "--requests", "4", "--store", str(store), "--trace", str(tmp_path / "t.json"), "--json"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    [rnd] = data["rounds"]
    load = rnd["load"]
    assert rnd["feasible"] and load["requests"] == 4 and len(load["latency_ms"]) == 4
    assert rnd["e2e_ms"] == load["p95_ms"] and load["p50_ms"] <= load["p95_ms"] <= load["p99_ms"]
    assert data["executor"] == "local"
    # the trace file has a lane per request of the window (Perfetto)
    events = json.loads((tmp_path / "t.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    lanes = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert {f"request {r}" for r in range(4)} <= lanes
    with RunStore(store) as st:
        [info] = st.runs()
        [stored] = st.rounds(info.id)
        assert stored.trace.load is not None and stored.trace.load.p95_ms == load["p95_ms"]


# ---------------------------------------------------------------------------- the plan (no workers)
def test_the_window_is_copies_of_the_workflow_with_request_ids(tools: None) -> None:
    sc = flow()
    w = window_scenario(sc, 3)
    assert len(w.workflow.nodes) == 12 and len(w.workflow.edges) == 12
    assert w.workflow.preds(instance_id("E", 2)) == (instance_id("C", 2), instance_id("A", 2))
    assert split_id("A@2") == ("A", 2) and split_id("x@y@10") == ("x@y", 10)
    wm = window_mapping(MAPPING, 2)
    assert wm["C@1"] is Q and len(wm) == 8
    with pytest.raises(InputError, match="not a window node id"):
        split_id("A")


def test_the_release_clock_follows_a_closed_loop_and_the_horizon() -> None:
    clock = ReleaseClock.closed(2, 4, think_ms=5.0)
    assert clock.due(0.0) == ([0, 1], [])
    assert clock.next_ms() is None  # requests 2 and 3 wait for returns
    clock.completed(1, 10.0)
    assert clock.next_ms() == 15.0
    assert clock.due(14.0) == ([], [])
    assert clock.due(15.0) == ([3], [])
    h = ReleaseClock([0.0, 5.0, 50.0, 0.0], follows=[-1, -1, -1, 2], horizon_ms=20.0)
    assert h.due(10.0) == ([0, 1], [2, 3])
    assert not h.pending and h.next_ms() is None


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_the_release_clock_sends_each_request_once_in_time_and_as_its_plan_says(data: st.DataObject) -> None:
    # a pure simulation of the executor's loop: requests take a drawn time to return
    closed = data.draw(st.booleans())
    count = data.draw(st.integers(1, 12))
    if closed:
        clients = data.draw(st.integers(1, 4))
        think = data.draw(st.floats(0, 50))
        plan = Workload.closed(clients, requests=count, think_ms=think).plan()
    else:
        plan = Workload.trace(data.draw(st.lists(st.floats(0, 500), min_size=count, max_size=count))).plan()
    horizon = data.draw(st.sampled_from([math.inf, 100.0, 300.0]))
    clock = ReleaseClock(plan.releases_ms, plan.follows, horizon)
    service = data.draw(st.lists(st.floats(1, 200), min_size=count, max_size=count))
    now, running = 0.0, {}  # request -> when it returns
    for _ in range(10 * count + 10):
        sent, _ = clock.due(now)
        for r in sent:
            running[r] = now + service[r]
        nxt = [t for t in [clock.next_ms(), *running.values()] if t is not None]
        if not nxt:
            break
        now = max(now, min(nxt))
        for r, t in list(running.items()):
            if t <= now:
                del running[r]
                clock.completed(r, t)
    assert not clock.pending and not running, "every request was either sent and returned, or skipped"
    assert set(clock.sent).isdisjoint(clock.skipped) and len(clock.sent) + len(clock.skipped) == count
    for r, t in clock.sent.items():
        assert t < horizon
        f = -1 if plan.follows is None else plan.follows[r]
        if f < 0:
            assert t == plan.releases_ms[r]
        else:
            assert f in clock.sent and t == clock.returned[f] + plan.releases_ms[r], f"{r} sent off its plan"
    for r in clock.skipped:
        f = -1 if plan.follows is None else plan.follows[r]
        assert f in clock.skipped or (f < 0 and plan.releases_ms[r] >= horizon) or \
            (f >= 0 and clock.returned[f] + plan.releases_ms[r] >= horizon)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"releases_ms": []}, "releases_ms: a window needs at least one request"),
    ({"releases_ms": [0.0, -1.0]}, "releases_ms: release times must be finite and >= 0 ms, got -1.0"),
    ({"releases_ms": [0.0, math.nan]}, "releases_ms: release times must be finite"),
    ({"releases_ms": [0.0, 1.0], "follows": [-1]}, "follows: one entry per request"),
    ({"releases_ms": [0.0, 1.0], "follows": [-1, 1]}, r"follows\[1\] = 1"),
])
def test_a_bad_release_plan_names_the_parameter(kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        ReleaseClock(**kwargs)


def test_bad_closed_loops_name_the_parameter() -> None:
    with pytest.raises(InputError, match="clients must be >= 1, got 0"):
        ReleaseClock.closed(0, 3)
    with pytest.raises(InputError, match="request count >= 1, got 0"):
        ReleaseClock.closed(2, 0)
    with pytest.raises(InputError, match="think_ms must be finite and >= 0"):
        ReleaseClock.closed(2, 3, think_ms=-1)
