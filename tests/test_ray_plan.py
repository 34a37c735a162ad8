"""The Ray executor without a cluster: the resource rules and per-node checks (ray_plan), the
trace built from Ray's task events at their real resolution (ray_trace), failure classification,
the Trace.hosts extension, ``hetsched export ray`` and the CLI's Ray options.

The cluster itself is tested in tests/ray_cluster_suite.py (through tests/test_ray_cluster.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow
from typer.testing import CliRunner

from hetsched.cli import app
from hetsched.exec.ray_plan import (
    RESOURCE_STEP,
    RayHost,
    RayPlan,
    export_dict,
    export_text,
    gpu_shares,
    place,
    plan,
)
from hetsched.exec.ray_trace import RES_MS, RoundFacts, TaskEvents, build_trace, queue_inversions
from hetsched.model import (
    HostTrace,
    Infeasibility,
    InfeasibleKind,
    Mapping,
    Mode,
    Placement,
    Scenario,
    Trace,
    VramPoint,
)
from hetsched.model.files import load_scenario

ROOT = Path(__file__).resolve().parents[1]
C, G, Q = Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE


# ---------------------------------------------------------------------------- random instances
@st.composite
def instances(draw: st.DrawFn, whole_mb: bool = False) -> tuple[Scenario, Mapping]:
    """A random DAG with random cards (VRAM in whole MB when ``whole_mb``) and a well-formed three-way mapping."""
    n = draw(st.integers(1, 7))
    ids = [f"v{i}" for i in range(n)]
    n_tools = draw(st.integers(1, n))
    cards = []
    for t in range(n_tools):
        has_gpu = draw(st.booleans()) or t == 0
        vram = draw(st.integers(1, 60)) if whole_mb else draw(st.floats(0.01, 60))
        cards.append(make_card(f"t{t}", cpu_ms=10, gpu_ms=5 if has_gpu else None, vram_mb=float(vram),
                               gpu_util=draw(st.floats(0.05, 1.0)), cpu_threads=draw(st.integers(1, 4))))
    tool_of = [f"t{draw(st.integers(0, n_tools - 1))}" for _ in ids]
    edges = [(ids[i], ids[j]) for j in range(n) for i in range(j) if draw(st.integers(0, 2)) == 0]
    sc = make_scenario(make_workflow(list(zip(ids, tool_of, strict=True)), edges),
                       [c for c in cards if c.name in set(tool_of)], mode=Mode.THREE_WAY,
                       vram_budget_mb=float(draw(st.integers(10, 120))), cpu_cores=4)
    mapping = Mapping({v: draw(st.sampled_from(sc.allowed(v))) for v in ids})
    return sc, mapping


def host(i: int, vram: float = 0.0, gpus: float = 1.0, cpus: float = 4.0) -> RayHost:
    return RayHost(node_id=f"{i:02d}" + "ab" * 27, address=f"10.0.0.{i}", cpus=cpus,
                   gpus=gpus if vram else 0.0, vram_mb=vram)


# ---------------------------------------------------------------------------- resource rules
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_gpu_shares_follow_gpu_util_and_never_block_what_vram_admits(inst: tuple[Scenario, Mapping]) -> None:
    sc, m = inst
    shares = gpu_shares(sc, m)
    p = plan(sc, m)
    assert set(shares) == set(p.actors) | {n for n, u in p.tasks.items() if u.placement is Q}
    if not shares:
        return
    utils = {k: sc.cards[k].gpu_util if k in p.actors else sc.card_of(k).gpu_util for k in shares}
    total = sum(utils.values())
    # all GPU units at once fit one GPU: num_gpus never refuses what vram_mb admits
    assert sum(shares.values()) <= 1.0 + 1e-9
    for k, share in shares.items():
        assert share >= RESOURCE_STEP
        assert abs(share * 1e4 - round(share * 1e4)) < 1e-6, "a multiple of Ray's 0.0001 step"
        exact = utils[k] / max(1.0, total)
        assert exact - RESOURCE_STEP - 1e-9 <= share <= max(exact, RESOURCE_STEP) + 1e-9
        if total <= 1.0:
            assert share <= utils[k] + 1e-9


@settings(max_examples=100, deadline=None)
@given(instances())
def test_plan_has_a_task_per_cpu_and_queued_node_and_an_actor_per_resident_tool(inst: tuple[Scenario, Mapping]) -> None:
    sc, m = inst
    p = plan(sc, m)
    wf = sc.workflow
    assert set(p.tasks) == {n for n in wf.node_ids if m[n] is not G}
    assert set(p.actors) == set(sc.gpu_now_tools(m))
    for n, u in p.tasks.items():
        card = sc.card_of(n)
        opts = u.options.as_options()
        if m[n] is C:
            assert opts == {"num_cpus": card.cpu_threads, "num_gpus": 0}
        else:
            assert opts["num_cpus"] == 0 and opts["num_gpus"] > 0
            # rounded up to Ray's step, up to float error in the card's figure
            assert card.vram_mb - 1e-9 <= opts["resources"]["vram_mb"] < card.vram_mb + RESOURCE_STEP + 1e-9
    for tool, a in p.actors.items():
        assert a.nodes == tuple(n for n in wf.topo_order if wf.tool_of[n] == tool and m[n] is G)
        assert a.options.as_options()["resources"]["vram_mb"] >= sc.cards[tool].vram_mb - 1e-9


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(whole_mb=True))
def test_on_one_gpu_node_of_the_budget_the_checks_are_the_scenarios(inst: tuple[Scenario, Mapping]) -> None:
    sc, m = inst
    placed = place(sc, m, [host(1, vram=sc.machine.vram_budget_mb)])
    static = sc.infeasibility(m)
    if static is None:
        assert isinstance(placed, RayPlan), placed
        assert all(a.host == host(1).node_id for a in placed.actors.values())
    else:
        assert isinstance(placed, Infeasibility) and placed.kind is static.kind, (static, placed)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(whole_mb=True), st.lists(st.integers(5, 80), min_size=1, max_size=3))
def test_actors_are_packed_within_each_nodes_vram_whenever_any_packing_exists(inst: tuple[Scenario, Mapping],
                                                                             budgets: list[int]) -> None:
    sc, m = inst
    hosts = [host(i, vram=b) for i, b in enumerate(budgets)]
    placed = place(sc, m, hosts)
    tools = list(sc.gpu_now_tools(m))
    need = {t: sc.cards[t].vram_mb for t in tools}
    exists = any(all(sum(need[t] for t, h in zip(tools, assign, strict=True) if h == i) <= b
                     for i, b in enumerate(budgets))
                 for assign in itertools.product(range(len(budgets)), repeat=len(tools)))
    if isinstance(placed, RayPlan):
        for i, b in enumerate(budgets):
            held = sum(need[t] for t, a in placed.actors.items() if a.host == hosts[i].node_id)
            assert held <= b
        # no queued node waits forever: it fits some node beside the resident tools that wait for it
    elif placed.kind is InfeasibleKind.OOM:
        assert not exists, "a packing exists but the actors were refused"
    else:
        assert placed.kind in (InfeasibleKind.NEVER_ADMISSIBLE, InfeasibleKind.DEADLOCK, InfeasibleKind.UNAVAILABLE)


def test_refusals_name_what_the_cluster_lacks() -> None:
    wf = make_workflow([("A", "a"), ("B", "b")], [("A", "B")])
    sc = make_scenario(wf, [make_card("a", cpu_threads=8, vram_mb=10), make_card("b", vram_mb=10)],
                       mode=Mode.THREE_WAY, vram_budget_mb=30)
    too_many = place(sc, Mapping({"A": C, "B": C}), [host(1, cpus=4)])
    assert isinstance(too_many, Infeasibility) and too_many.kind is InfeasibleKind.UNAVAILABLE
    assert "8 CPUs" in too_many.detail and "offers 4" in too_many.detail
    no_gpu = place(sc, Mapping({"A": G, "B": C}), [host(1, cpus=8)])
    assert isinstance(no_gpu, Infeasibility) and no_gpu.kind is InfeasibleKind.UNAVAILABLE
    assert "vram_mb" in no_gpu.detail and "ray start" in no_gpu.detail
    small = place(sc, Mapping({"A": C, "B": Q}), [host(1, cpus=8), host(2, vram=8)])
    assert isinstance(small, Infeasibility) and small.kind is InfeasibleKind.NEVER_ADMISSIBLE and "10" in small.detail


def test_two_gpu_nodes_hold_what_one_cannot() -> None:
    wf = make_workflow([("A", "big"), ("B", "mid"), ("C", "q")], [("A", "C"), ("B", "C")])
    sc = make_scenario(wf, [make_card("big", vram_mb=24), make_card("mid", vram_mb=14), make_card("q", vram_mb=10)],
                       mode=Mode.THREE_WAY, vram_budget_mb=40)
    m = Mapping({"A": G, "B": G, "C": Q})
    head, worker = host(1, vram=30), host(2, vram=16)
    placed = place(sc, m, [head, worker])
    assert isinstance(placed, RayPlan)
    assert placed.actors["big"].host == head.node_id and placed.actors["mid"].host == worker.node_id
    assert isinstance(place(sc, m, [head]), Infeasibility)
    # a queued node that depends on nothing resident may wait for them; one that they wait for may not
    wf2 = make_workflow([("Q", "q"), ("A", "big")], [("Q", "A")])
    sc2 = make_scenario(wf2, [make_card("q", vram_mb=10), make_card("big", vram_mb=24)], mode=Mode.THREE_WAY,
                        vram_budget_mb=30)
    m2 = Mapping({"Q": Q, "A": G})
    dead = place(sc2, m2, [host(1, vram=30)])
    assert isinstance(dead, Infeasibility) and dead.kind is InfeasibleKind.DEADLOCK
    assert isinstance(place(sc2, m2, [host(1, vram=30), host(2, vram=12)]), RayPlan), "Q fits the second node"


# ---------------------------------------------------------------------------- export
def test_export_text_is_python_that_holds_the_executors_options() -> None:
    sc = load_scenario("rag_tiny")
    m = Mapping({"A": C, "B": Q, "C": C, "D": G, "E": C, "F": Q, "G": C, "H": G})
    assert sc.infeasibility(m) is None
    space: dict[str, object] = {}
    exec(compile(export_text(sc, m), "<export>", "exec"), space)  # the output is meant to be pasted as code
    data = export_dict(sc, m)
    assert space["TASKS"] == {n: t["options"] for n, t in data["tasks"].items()}
    assert space["ACTORS"] == {t: a["options"] for t, a in data["actors"].items()}
    p = plan(sc, m)
    for n, u in p.tasks.items():
        assert space["TASKS"][n] == u.options.as_options()  # type: ignore[index]
    assert set(space["ACTORS"]) == {"e5_large", "llama_1b"}  # type: ignore[arg-type]
    assert data["gpu_node_resources"]["resources"] == {"vram_mb": 30}


def test_export_cli() -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["export", "ray", "rag_tiny", "--mapping", "A=cpu,B=gpu_queue,C=cpu,D=gpu_now,E=cpu,"
                              "F=gpu_queue,G=cpu,H=gpu_now", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    ocr = load_scenario("rag_tiny").card_of("B").vram_mb
    assert ocr <= data["tasks"]["B"]["options"]["resources"]["vram_mb"] < ocr + RESOURCE_STEP + 1e-9
    assert data["actors"]["e5_large"]["nodes"] == ["D"]
    default = runner.invoke(app, ["export", "ray", "rag_tiny"])
    assert default.exit_code == 0 and "ACTORS = {" in default.output
    bad = subprocess.run([sys.executable, "-m", "hetsched", "export", "ray", "rag_tiny", "--mapping", "A=gpu_now"],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert bad.returncode == 2 and "misses nodes" in bad.stderr and "Traceback" not in bad.stderr
    all_gpu = ",".join(f"{n}={'cpu' if n in 'AC' else 'gpu_now'}" for n in "ABCDEFGH")
    over = subprocess.run([sys.executable, "-m", "hetsched", "export", "ray", "rag_tiny", "--mapping", all_gpu],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert over.returncode == 2 and "OOM" in over.stderr, over.stderr


# ---------------------------------------------------------------------------- the trace from Ray's events
@st.composite
def executions(draw: st.DrawFn) -> tuple[Scenario, Mapping, RoundFacts, dict[str, tuple[float, float, float, float]]]:
    """A random DAG executed on a shared clock: true (ready, admitted, start, end) per node, and the
    facts Ray would report: state events floored to whole ms, execution windows to the microsecond."""
    sc, m = draw(instances())
    wf = sc.workflow
    t0 = 1_700_000_000_000.0 + draw(st.floats(0, 1))  # epoch ms
    true: dict[str, tuple[float, float, float, float]] = {}
    facts = RoundFacts(t0_s=t0 / 1000.0)
    for n in wf.topo_order:
        ready = max([0.0, *(true[p][3] for p in wf.preds(n))]) + draw(st.floats(0.01, 3))
        admitted = ready + draw(st.floats(0, 5))
        exec_start = admitted + draw(st.floats(0.01, 2))
        load = draw(st.floats(0, 4)) if m[n] is Q else 0.0
        start = exec_start + load
        end = start + draw(st.floats(0.01, 20))
        true[n] = (ready, admitted, start, end)
        tid = f"task{n}"
        facts.task_ids[n] = tid
        facts.events[tid] = TaskEvents(
            task_id=tid, node_id="h1", exec_ms=(t0 + exec_start, t0 + end + 0.05),
            states_ms={"PENDING_NODE_ASSIGNMENT": math.floor(t0 + ready), "SUBMITTED_TO_WORKER": math.floor(t0 + admitted),
                       "RUNNING": math.floor(t0 + exec_start), "FINISHED": math.floor(t0 + end + 0.1)})
        facts.metas[n] = {"fn_start": (t0 + exec_start) / 1000, "run_start": (t0 + start) / 1000,
                          "run_end": (t0 + end) / 1000, "fn_end": (t0 + end + 0.05) / 1000, "load_ms": load,
                          "cold": False, "host": "h1"}
    for tool in sc.gpu_now_tools(m):
        last = max(true[n][3] for n in wf.node_ids if wf.tool_of[n] == tool and m[n] is G)
        facts.actor_release_s[tool] = (t0 + last + draw(st.floats(0.01, 2))) / 1000
    return sc, m, facts, true


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(executions())
def test_trace_from_floored_ray_events_keeps_the_invariants_within_a_millisecond(ex: tuple) -> None:
    sc, m, facts, true = ex
    hosts = [RayHost("h1", "127.0.0.1", cpus=4, gpus=1, vram_mb=1000)]
    placed = plan(sc, m)
    placed = RayPlan(m, placed.tasks, {t: type(a)(a.key, a.kind, a.tool, a.placement, a.nodes, a.options, host="h1")
                                       for t, a in placed.actors.items()})
    tr = build_trace(sc, placed, hosts, facts, None)
    assert tr.feasible and tr.executor == "ray" and set(tr.nodes) == set(sc.workflow.node_ids)
    tol = 1e-3  # epoch milliseconds in float64 resolve about 0.2 microseconds
    for n, nt in tr.nodes.items():
        ready, admitted, start, end = true[n]
        assert nt.host == "h1"
        assert ready - RES_MS - tol <= nt.ready_ms <= ready + tol, "ready: the floored event, never later than true"
        assert nt.ready_ms <= nt.admitted_ms <= nt.start_ms <= nt.end_ms
        assert admitted - tol <= nt.admitted_ms <= admitted + RES_MS + tol, "admitted: never before Ray granted it"
        assert nt.start_ms == pytest.approx(start, abs=tol) and nt.end_ms == pytest.approx(end, abs=tol)
        for p in sc.workflow.preds(n):
            assert nt.ready_ms >= tr.nodes[p].end_ms and nt.start_ms >= tr.nodes[p].end_ms
    assert tr.e2e_ms == max(tr.nodes[s].end_ms for s in sc.workflow.sinks)
    assert len(tr.hosts) == 1 and tr.hosts[0].vram_timeline == tr.vram_timeline
    assert all(p.used_mb >= -1e-9 for p in tr.vram_timeline)
    assert tr.vram_timeline[-1].used_mb == pytest.approx(0.0, abs=1e-6), "everything is released at the end"
    resident = sum(placed.actors[t].options.vram_mb for t in placed.actors)
    assert tr.vram_timeline[0].used_mb >= resident - 1e-6, "resident tools are held from t = 0"
    assert not queue_inversions(tr.nodes) or any("FIFO" in note for note in tr.notes)


def test_missing_events_fall_back_to_the_workers_clocks_and_say_so() -> None:
    wf = make_workflow([("A", "a"), ("B", "b")], [("A", "B")])
    sc = make_scenario(wf, [make_card("a"), make_card("b", vram_mb=5)], mode=Mode.THREE_WAY, vram_budget_mb=10)
    m = Mapping({"A": C, "B": Q})
    t0 = 1000.0
    facts = RoundFacts(t0_s=t0, task_ids={"A": "ta", "B": "tb"})
    facts.metas["A"] = {"fn_start": t0 + 0.001, "run_start": t0 + 0.002, "run_end": t0 + 0.010, "fn_end": t0 + 0.011,
                        "load_ms": 0.0, "cold": True, "host": "h1"}
    facts.metas["B"] = {"fn_start": t0 + 0.012, "run_start": t0 + 0.020, "run_end": t0 + 0.030, "fn_end": t0 + 0.031,
                        "load_ms": 7.0, "cold": True, "host": "h1"}
    hosts = [RayHost("h1", "127.0.0.1", cpus=2, gpus=1, vram_mb=10)]
    tr = build_trace(sc, plan(sc, m), hosts, facts, None)
    assert tr.nodes["B"].ready_ms == pytest.approx(10.0) and tr.nodes["B"].start_ms == pytest.approx(20.0)
    assert any("did not arrive" in n and "'A'" in n for n in tr.notes)
    assert any("fresh Ray worker" in n for n in tr.notes), "A's cold load is noted"
    failed = build_trace(sc, plan(sc, m), hosts, facts, Infeasibility(InfeasibleKind.TOOL_ERROR, "x"))
    assert not failed.feasible and failed.nodes and failed.hosts


def test_queue_inversions_are_pairs_admitted_against_their_ready_order() -> None:
    from hetsched.model import NodeTrace

    def nt(n: str, ready: float, admitted: float, p: Placement = Q) -> NodeTrace:
        return NodeTrace(n, "t", p, ready, admitted, admitted + 1, admitted + 2)

    nodes = {"L": nt("L", 0, 50), "S": nt("S", 10, 11), "T": nt("T", 20, 60), "U": nt("U", 5, 6, C)}
    assert queue_inversions(nodes) == [("L", "S")]
    assert queue_inversions({"A": nt("A", 0, 5), "B": nt("B", 0.5, 1)}) == [], "within the event resolution"


def test_task_events_parse_from_the_state_api_form() -> None:
    row = {"task_id": "ab", "name": "hetsched r1 x A", "node_id": "n1", "error_message": None,
           "events": [{"state": "PENDING_ARGS_AVAIL", "created_ms": 1.0}, {"state": "PENDING_NODE_ASSIGNMENT",
                                                                           "created_ms": 2.0},
                      {"state": "SUBMITTED_TO_WORKER", "created_ms": 3.0}, {"state": "FINISHED", "created_ms": 9.0}],
           "profiling_data": {"events": [{"event_name": "task:deserialize_arguments", "start_time": 4.0,
                                          "end_time": 4.1},
                                         {"event_name": "task:execute", "start_time": 4.2, "end_time": 8.5}]}}
    ev = TaskEvents.from_state(row)
    assert ev.exec_ms == (4.2, 8.5) and ev.terminal and ev.states_ms["SUBMITTED_TO_WORKER"] == 3.0 and ev.node_id == "n1"
    assert not TaskEvents.from_state({"task_id": "x", "events": []}).terminal


# ---------------------------------------------------------------------------- Trace.hosts
def test_host_traces_round_trip_and_stay_out_of_single_machine_json() -> None:
    m = Mapping({"A": "cpu"})
    plain = Trace.refused(m, Infeasibility(InfeasibleKind.OOM, "x"))
    assert "hosts" not in plain.to_dict()
    with_hosts = Trace.refused(m, Infeasibility(InfeasibleKind.TOOL_ERROR, "y"), executor="ray",
                               hosts=(HostTrace("n1", "10.0.0.1", 2, 1, 30, (VramPoint(0, 5), VramPoint(3, 0))),))
    data = json.loads(json.dumps(with_hosts.to_dict()))
    assert Trace.from_dict(data) == with_hosts
    assert with_hosts.hosts[0].peak_vram_mb == 5


def test_phase_times_round_trip_in_order_and_stay_out_of_the_simulators_json() -> None:
    """A real executor's phases (``Trace.phases_s``) survive the store's JSON, in the order they ran; a trace
    without them (the simulator's) has no key, so its JSON is as before."""
    m = Mapping({"A": "cpu"})
    plain = Trace.refused(m, Infeasibility(InfeasibleKind.OOM, "x"))
    assert "phases_s" not in plain.to_dict()
    phases = {"start_s": 12.5, "hosts_s": 0.01, "warm_s": 30.25, "actors_s": 4.0, "run_s": 0.5}
    timed = dataclasses.replace(plain, phases_s=phases)
    back = Trace.from_dict(json.loads(json.dumps(timed.to_dict())))
    assert back == timed and list(back.phases_s) == list(phases)


# ---------------------------------------------------------------------------- errors and options
def test_failures_are_classified_by_kind() -> None:
    rex = pytest.importorskip("ray.exceptions", reason="ray is not installed (pip install 'hetsched[ray]')")
    from hetsched.exec.ray import classify
    from hetsched.exec.ray_remote import DeviceUnavailable

    def task_error(cause: BaseException) -> BaseException:
        return rex.RayTaskError("f", "tb", cause)

    assert classify(task_error(ValueError("bad input")), "node 'A'").kind is InfeasibleKind.TOOL_ERROR
    assert "ValueError: bad input" in classify(task_error(ValueError("bad input")), "node 'A'").detail
    assert classify(task_error(MemoryError("x")), "n").kind is InfeasibleKind.OOM
    assert classify(task_error(RuntimeError("CUDA out of memory. Tried")), "n").kind is InfeasibleKind.OOM
    assert classify(task_error(DeviceUnavailable("no GPU")), "n").kind is InfeasibleKind.UNAVAILABLE
    assert classify(rex.WorkerCrashedError(), "n").kind is InfeasibleKind.TOOL_ERROR
    assert classify(rex.NodeDiedError("node gone"), "n").kind is InfeasibleKind.UNAVAILABLE
    missing = classify(rex.RaySystemError("System error: No module named 'hetsched.exec.ray_remote'"), "n")
    assert missing.kind is InfeasibleKind.UNAVAILABLE and "install hetsched" in missing.detail


def test_bad_options_fail_before_any_cluster_is_started() -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hetsched[ray]')")
    from hetsched.exec.ray import RayExecutor
    from hetsched.model import InputError

    sc = load_scenario("rag_tiny")
    for bad, words in ((dict(device="gpu"), "device 'gpu'"), (dict(timeout_s=0), "timeout_s"),
                       (dict(address="  "), "address is empty"), (dict(num_gpus=0), "num_gpus"),
                       (dict(memory_slack=-1), "memory_slack"), (dict(shutdown_timeout_s=0), "shutdown_timeout_s")):
        with pytest.raises(InputError, match=words):
            RayExecutor(sc, **bad)  # type: ignore[arg-type]


def test_a_ray_call_that_never_returns_is_bounded_and_its_result_or_error_comes_back() -> None:
    """What bounds ray.shutdown() and ray.nodes() (both wait without a bound while the local cluster's
    raylet or GCS does not answer; the cluster suite stops a raylet for real): a call that blocks is
    given up after its bound, and a call that returns hands back its value or its exception."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hetsched[ray]')")
    import threading

    from hetsched.exec.ray import _within

    release = threading.Event()
    try:
        with pytest.raises(TimeoutError, match=r"no answer within 0\.2 s"):
            _within(0.2, release.wait)  # blocks until released: never within the bound
    finally:
        release.set()
    assert _within(30, lambda: 42) == 42

    def boom() -> None:
        raise ValueError("from inside")

    with pytest.raises(ValueError, match="from inside"):
        _within(30, boom)


def test_a_ctrl_c_held_by_a_ray_cleanup_says_what_kill_9_leaves_of_the_ray_work(
        capfd: pytest.CaptureFixture[str]) -> None:
    """The Ray executor's held Ctrl-C (:func:`hetsched.interrupts.ctrl_c_deferred`, tested in
    test_interrupts.py) names what a ``kill -9`` of the driver leaves: Ray's own clean-up of a dead driver."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'hetsched[ray]')")
    import signal

    from hetsched.exec.ray import _ctrl_c_deferred

    with pytest.raises(KeyboardInterrupt), _ctrl_c_deferred("finishing X", 5):
        signal.raise_signal(signal.SIGINT)
    err = capfd.readouterr().err
    assert "hetsched: Ctrl-C: finishing X first (at most 5 s)" in err and "`ray stop`" in err, err


def test_cli_says_what_is_missing_without_ray_and_where_ray_address_belongs(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['ray'] = None; from hetsched.cli import main; "
            "main(['run', 'rag_tiny', '--executor', 'ray', '--rounds', '1', '--no-store'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 2 and "pip install 'hetsched[ray]'" in proc.stderr and "Traceback" not in proc.stderr
    res = CliRunner().invoke(app, ["run", "chain", "--ray-address", "127.0.0.1:1", "--rounds", "1", "--no-store"])
    assert res.exit_code == 2 and "--executor ray" in res.output
