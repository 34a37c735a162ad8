"""The Ray executor on a real two-node Ray cluster, on loopback.

Runs only inside the loopback-only namespace that tests/test_ray_cluster.py makes (``unshare``;
see tests/raycluster.py): there the session starts a head node with a GPU, ``vram_mb`` 30 and no
CPUs, and a worker node with 2 CPUs, a GPU and ``vram_mb`` 16 (``ray start --block``, temp dir
in the test's folder), runs the tests against it, and stops both nodes, by process id.

What it checks: the bundled tiny real tools (rag_tiny) under several mappings keep every trace
invariant; GPU placements ran on nodes with a GPU and ``vram_mb``, CPU ones where CPUs were
requested; no node's ``vram_mb`` was ever oversubscribed and Ray's admission really held
queued nodes back; actors are packed across GPU nodes; outputs flow along edges; a tool error,
a dead worker, a dead actor, memory over the card, a timeout and a dead node end the round with
their typed reason and the next round runs (after a crashed worker, without waiting for the task
events that died with it); stored rounds survive a failed one; Ray admits
queued nodes out of FIFO order where the simulator does not; a window of overlapping requests
shares one resident actor and keeps every invariant per request; ``hetsched run --executor ray``
starts and stops its own local cluster (and exits, its cluster stopped by force, when that
cluster's raylet stops answering during Ray's teardown), and ``--ray-address`` uses this one;
a Ctrl-C mid-round (SIGINT to the CLI, or a KeyboardInterrupt in a program) loses no recorded round
and leaves no process or resident actor alive, and so does a second one during the first one's
cleanup or during ``close()`` (the cleanup still finishes); an actor made just before a Ctrl-C is
killed by the round's cleanup.
"""

from __future__ import annotations

import _thread
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.raycluster import NS_DIR, NS_ENV, ROOT, Cluster, loopback_up, only_loopback, start_cluster
from tests.raytools import Spin, card, check_ray_trace, expected_outputs, scenario

from hetsched.exec.ray import RayExecutor
from hetsched.exec.ray_trace import queue_inversions
from hetsched.exec.window import instance_id, split_id, window_scenario
from hetsched.export import trace_events
from hetsched.loop import LoopConfig, load_result, run_key, run_recorded
from hetsched.model import ExecutorSpec, InfeasibleKind, Mapping, Placement, Scenario
from hetsched.model.files import load_scenario
from hetsched.model.workload import Workload
from hetsched.search.oracle import solve
from hetsched.sim import Simulator
from hetsched.store import RunStore
from hetsched.tools import register_tool, unregister_tool

# not collected by a plain `pytest` run (its name does not start with test_); run explicitly, outside
# the namespace, it skips
pytestmark = pytest.mark.skipif(os.environ.get(NS_ENV) != "1",
                                reason="runs inside the loopback namespace that tests/test_ray_cluster.py makes")

C, G, Q = "cpu", "gpu_now", "gpu_queue"
HEAD_VRAM, WORKER_VRAM = 30, 16


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The two-node cluster, both nodes joined; stopped at the end, and nothing of it may outlive the session."""
    loopback_up()
    assert only_loopback(), "the suite must run where only loopback exists"
    folder = Path(NS_DIR) / "cluster"
    c = start_cluster(folder, head={"num_cpus": 0, "num_gpus": 1, "resources": {"vram_mb": HEAD_VRAM}},
                      workers=[{"num_cpus": 2, "num_gpus": 1, "resources": {"vram_mb": WORKER_VRAM}}])
    try:
        # every test, whichever runs first (HETSCHED_RAY_SUITE_K selects some), finds both nodes joined
        c.wait_joined(timeout_s=180)
    except BaseException:
        c.stop()
        raise
    yield c
    c.stop()
    deadline = time.monotonic() + 30
    while c.pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not c.pids(), f"Ray processes outlived their nodes: {c.pids()}"


TOOLS = {
    "prep": Spin("prep", ms=20, mem_mb=0.5, value=1, has_gpu=False),
    "embed": Spin("embed", ms=60, mem_mb=6, value=10),
    "big": Spin("big", ms=150, mem_mb=20, value=100),
    "mid": Spin("mid", ms=150, mem_mb=10, value=1000),
    "fan": Spin("fan", ms=250, mem_mb=10, value=10000),
    "join": Spin("join", ms=10, mem_mb=0.5, value=100000, has_gpu=False),
}
CARDS = [card("prep", 20, has_gpu=False), card("embed", 60, 6), card("big", 150, 24, gpu_util=0.8),
         card("mid", 150, 14, gpu_util=0.5), card("fan", 250, 11), card("join", 10, has_gpu=False)]


@pytest.fixture(scope="session")
def tools() -> Iterator[dict[str, Spin]]:
    for t in TOOLS.values():
        register_tool(t, replace=True)
    yield TOOLS
    for name in TOOLS:
        unregister_tool(name)


def wide() -> Scenario:
    """prep -> embed -> (big, mid, 4 x fan) -> join, plus a skip edge prep -> join."""
    fans = [f"F{i}" for i in range(4)]
    nodes = [("A", "prep"), ("B", "embed"), ("X", "big"), ("Y", "mid"), *[(f, "fan") for f in fans], ("J", "join")]
    edges = [("A", "B"), ("B", "X"), ("B", "Y"), *[("B", f) for f in fans], ("X", "J"), ("Y", "J"),
             *[(f, "J") for f in fans], ("A", "J")]
    return scenario(nodes, edges, CARDS, budget_mb=40, name="wide")


@pytest.fixture(scope="session")
def wide_ex(cluster: Cluster, tools: dict[str, Spin]) -> Iterator[RayExecutor]:
    """An executor on the cluster (connected by address; both nodes have joined: see ``cluster``)."""
    ex = RayExecutor(wide(), address=cluster.address, timeout_s=60)
    assert len(ex.refresh_hosts()) == 2, "both nodes joined before the session's first test"
    yield ex
    ex.close()


def hosts_by_kind(ex: RayExecutor) -> tuple[str, str]:
    head = next(h for h in ex.hosts if h.cpus == 0)
    worker = next(h for h in ex.hosts if h.cpus > 0)
    return head.node_id, worker.node_id


# ---------------------------------------------------------------------------- real tiny tools
def test_rag_tiny_runs_under_several_mappings_and_keeps_every_invariant(cluster: Cluster, wide_ex: RayExecutor,
                                                                        tmp_path: Path) -> None:
    sc = load_scenario("rag_tiny")
    with RayExecutor(sc, address=cluster.address) as ex:
        _, worker = hosts_by_kind(ex)
        oracle = solve(sc).best
        # the oracle's mapping has resident tools; with some of its cpu nodes queued instead it has all three
        cpu_nodes = [n for n in sc.workflow.topo_order if oracle[n] is Placement.CPU and sc.card_of(n).has_gpu]
        queued = Mapping({**oracle.to_dict(), **{n: Q for n in cpu_nodes[-2:]}})
        assert sc.infeasibility(queued) is None
        mappings = [sc.uniform(Placement.CPU), queued]
        traces = []
        for m in mappings:
            tr = ex.run(m)
            check_ray_trace(sc, tr)
            for nt in tr.nodes.values():
                if not nt.placement.on_gpu:
                    assert nt.host == worker, f"{nt.node} (cpu) ran where no CPU was offered"
            assert set(ex.last_outputs) == set(sc.workflow.sinks)
            traces.append(tr)
        assert {Placement.GPU_NOW, Placement.GPU_QUEUE} <= {nt.placement for nt in traces[1].nodes.values()}
        refused = ex.run(sc.uniform(Placement.GPU_NOW))
        assert refused.kind is InfeasibleKind.OOM and not refused.nodes
        # the --trace output: one process per round and device, slices for every node
        events = trace_events([(f"round {i}", t) for i, t in enumerate(traces)])
        json.dumps(events)
        slices = [e for e in events if e["ph"] == "X" and e.get("cat") in ("cpu", "gpu_now", "gpu_queue")]
        assert len(slices) == 2 * len(sc.workflow.node_ids)
        names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
        assert any("127.0.0.1" in n for n in names), f"processes are named by Ray node: {names}"


# ---------------------------------------------------------------------------- admission and placement
def test_vram_admission_holds_on_each_gpu_node_and_really_holds_nodes_back(wide_ex: RayExecutor) -> None:
    sc = wide_ex.scenario
    head, worker = hosts_by_kind(wide_ex)
    m = Mapping({"A": C, "B": Q, "X": Q, "Y": Q, "F0": Q, "F1": Q, "F2": Q, "F3": Q, "J": C})
    tr = wide_ex.run(m)
    check_ray_trace(sc, tr)
    queued = [nt for nt in tr.nodes.values() if nt.placement is Placement.GPU_QUEUE]
    # X needs 24 MB: only the head (30) holds it
    assert tr.nodes["X"].host == head
    # without vram_mb the six parallel queue nodes (24+14+4x11 = 82 MB) would all start at once
    waited = [nt for nt in queued if nt.admitted_ms - nt.ready_ms > 50.0]
    assert waited, "Ray's vram_mb admission held some queued node back"
    for host, budget in ((head, HEAD_VRAM), (worker, WORKER_VRAM)):
        mine = [nt for nt in queued if nt.host == host]
        for nt in mine:
            at = nt.admitted_ms + 1e-3
            held = sum(sc.card_of(o.node).vram_mb for o in mine if o.admitted_ms <= at < o.end_ms)
            assert held <= budget, f"queued nodes hold {held} MB on a {budget} MB node at {at} ms"
    assert wide_ex.last_outputs == {"J": expected_outputs(sc, {t: s.value for t, s in TOOLS.items()})["J"]}


def test_gpu_now_actors_are_packed_across_gpu_nodes_and_released_at_their_last_node(wide_ex: RayExecutor) -> None:
    sc = wide_ex.scenario
    head, worker = hosts_by_kind(wide_ex)
    # big (24) and mid (14) resident together: 38 MB fit neither node alone, so one goes to each
    m = Mapping({"A": C, "B": C, "X": G, "Y": G, "F0": C, "F1": Q, "F2": C, "F3": Q, "J": C})
    tr = wide_ex.run(m)
    check_ray_trace(sc, tr)
    assert tr.nodes["X"].host == head and tr.nodes["Y"].host == worker
    worker_trace = next(h for h in tr.hosts if h.host == worker)
    assert worker_trace.vram_timeline[0].used_mb >= 14, "mid is resident on the worker from the start"
    # residency ends after the last node of the tool (the executor kills the actor then)
    release = next(p.t_ms for p in worker_trace.vram_timeline[1:] if p.used_mb < worker_trace.vram_timeline[0].used_mb)
    assert release >= tr.nodes["Y"].end_ms - 1e-6
    assert wide_ex.last_outputs == {"J": expected_outputs(sc, {t: s.value for t, s in TOOLS.items()})["J"]}


def _resident_actor_states() -> dict[str, str]:
    """Every resident-tool actor the cluster has had (Ray's state API): actor id -> state."""
    from ray.util.state import list_actors

    rows = list_actors(filters=[("class_name", "=", "ResidentTool")], limit=10_000, raise_on_missing_output=False)
    return {a.actor_id: a.state for a in rows}


def _vram_free_everywhere(within_s: float = 30.0) -> bool:
    """Whether every node's vram_mb is all free again (Ray's resource view lags a little: waits for it)."""
    import ray

    deadline = time.monotonic() + within_s
    while True:
        total, free = ray.cluster_resources().get("vram_mb", 0.0), ray.available_resources().get("vram_mb", 0.0)
        if abs(total - free) < 1e-6 or time.monotonic() >= deadline:
            return abs(total - free) < 1e-6
        time.sleep(0.2)


def test_resident_actors_are_kept_across_rounds_hold_nothing_between_them_and_go_with_the_executor(
        cluster: Cluster, wide_ex: RayExecutor) -> None:
    """One actor per resident tool and Ray node serves every round that makes the tool resident there
    (no new process, no new import); between rounds, and in a round that maps the tool elsewhere, it
    holds no weights and no vram_mb; closing the executor kills it."""
    import ray

    sc = wide_ex.scenario
    head, worker = hosts_by_kind(wide_ex)
    now = Mapping({"A": C, "B": C, "X": G, "Y": G, "F0": C, "F1": Q, "F2": C, "F3": Q, "J": C})
    # X (24 MB) queued fits only the head's 30 MB: never admitted if big's kept actor still held its 24 MB there
    queued = Mapping({"A": C, "B": Q, "X": Q, "Y": Q, "F0": C, "F1": C, "F2": C, "F3": C, "J": C})
    before = _resident_actor_states()
    with RayExecutor(sc, address=cluster.address, timeout_s=60) as ex:
        for m in (now, now, queued, now):
            tr = ex.run(m)
            check_ray_trace(sc, tr)
            assert ex.last_outputs == {"J": expected_outputs(sc, {t: s.value for t, s in TOOLS.items()})["J"]}
            assert _vram_free_everywhere(), "a round left vram_mb held after it ended"
            kept = ex.kept_actors()
            assert set(kept) == {(head, "big"), (worker, "mid")}, kept
            for actor in kept.values():
                assert ray.get(actor.resident.remote(), timeout=60) == [], "a kept actor holds its tool between rounds"
        assert tr.nodes["X"].host == head and tr.nodes["Y"].host == worker
        assert ex.resident_actors_started == {"big": 1, "mid": 1}, ex.resident_actors_started
        mine = {a: st for a, st in _resident_actor_states().items() if a not in before}
        assert len(mine) == 2 and set(mine.values()) == {"ALIVE"}, mine
    # close() killed them: none of this executor's actors is left alive (the cluster keeps running)
    deadline = time.monotonic() + 60
    while any(st != "DEAD" for a, st in _resident_actor_states().items() if a in mine) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = {a: st for a, st in _resident_actor_states().items() if a in mine and st != "DEAD"}
    assert not left, f"resident actors outlived their executor: {left}"
    assert len(wide_ex.refresh_hosts()) == 2, "the cluster is untouched"


def test_a_queued_node_larger_than_every_gpu_node_is_refused_before_running(wide_ex: RayExecutor) -> None:
    sc = scenario([("A", "prep"), ("B", "big")], [("A", "B")],
                  [card("prep", 20, has_gpu=False), card("big", 150, 35)], budget_mb=40)
    with RayExecutor(sc, address=wide_ex.address) as ex:
        tr = ex.run(Mapping({"A": C, "B": Q}))
        assert tr.kind is InfeasibleKind.NEVER_ADMISSIBLE and "35" in tr.reason and not tr.nodes
        assert ex.run(Mapping({"A": C, "B": C})).feasible


# ---------------------------------------------------------------------------- windows of requests
def test_a_window_of_overlapping_requests_shares_one_resident_actor_and_keeps_every_invariant(
        wide_ex: RayExecutor) -> None:
    sc = scenario([("A", "prep"), ("B", "embed"), ("C", "mid"), ("D", "join")], [("A", "B"), ("B", "C"), ("C", "D")],
                  CARDS, budget_mb=40, name="window")
    m = Mapping({"A": C, "B": G, "C": Q, "D": C})
    with RayExecutor(sc, address=wide_ex.address) as ex:
        loaded = ex.run_workload(m, Workload.closed(2, requests=3))
        runs = [(ex.run_window(m, releases_ms=[0, 0, 30, 60]), None), (ex.run_window(m, clients=2, count=5), 2)]
    # the Workload contract: the window's trace with its metrics and every request
    assert loaded.feasible and loaded.executor == "ray", loaded.reason
    assert loaded.load is not None and loaded.load.requests == 3 and len(loaded.requests) == 3
    assert loaded.e2e_ms == loaded.load.p95_ms and set(loaded.nodes) == {"A", "B", "C", "D"}
    assert {"warm_s", "actors_s", "run_s", "events_s"} <= set(loaded.phases_s), loaded.phases_s  # kept by a window
    for run, clients in runs:
        assert run.completed, run.trace.reason
        count = len(run.end_ms)
        # the composite trace keeps every Ray invariant: precedence, each node's VRAM within its budget
        check_ray_trace(window_scenario(sc, count), run.trace)
        assert run.resident_loads == {"embed": 1}, "one actor, loaded once, serves every request"
        # queued nodes: FIFO across requests, never over the cluster's budget, from the driver's own records
        assert sorted(run.enqueued) == sorted(instance_id("C", r) for r in range(count))
        assert [a.node for a in run.admissions] == list(run.enqueued)
        assert all(a.held_mb <= HEAD_VRAM + WORKER_VRAM + 1e-6 for a in run.admissions)
        embed_hosts = {nt.host for cid, nt in run.trace.nodes.items() if split_id(cid)[0] == "B"}
        assert len(embed_hosts) == 1
        rel = [t for t in run.release_ms if t is not None]
        ends = [e for e in run.end_ms if e is not None]
        assert len(rel) == len(ends) == count and len(run.latency_ms) == count
        for r in range(count):
            nodes = run.request_nodes(r)
            assert nodes["A"].ready_ms >= rel[r] - 1.0, f"request {r} started before its release"
            assert ends[r] == nodes["D"].end_ms
        if clients is not None:
            for r in range(clients, count):
                assert rel[r] >= ends[r - clients] - 1e-6, f"request {r} sent before request {r - clients} returned"
    # outputs flowed along each request's edges (the last window's sinks)
    want = expected_outputs(sc, {t: s.value for t, s in TOOLS.items()})["D"]
    assert ex.last_outputs == {instance_id("D", r): want for r in range(5)}


# ---------------------------------------------------------------------------- failures
def flaky(tmp_path: Path, **flags: str) -> Scenario:
    register_tool(Spin("flaky", ms=30, mem_mb=2, value=7, **flags), replace=True)
    return scenario([("A", "prep"), ("B", "flaky"), ("C", "join")], [("A", "B"), ("B", "C")],
                    [card("prep", 20, has_gpu=False), card("flaky", 30, 4), card("join", 10, has_gpu=False)],
                    budget_mb=30, name="flaky")


@pytest.mark.parametrize(("flag", "placement", "kind", "words"), [
    ("fail_flag", C, InfeasibleKind.TOOL_ERROR, "injected failure"),
    ("crash_flag", C, InfeasibleKind.TOOL_ERROR, "died"),
    ("crash_flag", G, InfeasibleKind.TOOL_ERROR, "died"),
    ("fail_flag", Q, InfeasibleKind.TOOL_ERROR, "injected failure"),
])
def test_a_failure_ends_the_round_typed_and_the_next_round_runs(cluster: Cluster, tools: dict[str, Spin],
                                                                 tmp_path: Path, flag: str, placement: str,
                                                                 kind: InfeasibleKind, words: str) -> None:
    trigger = tmp_path / "trigger.once"
    sc = flaky(tmp_path, **{flag: str(trigger)})
    try:
        # the default event_timeout_s (15 s): a worker that dies takes with it the task events it had not sent yet
        # (A's, when A ran in that worker), and the executor must not wait for them
        with RayExecutor(sc, address=cluster.address, timeout_s=60) as ex:
            _, worker = hosts_by_kind(ex)
            m = Mapping({"A": C, "B": placement, "C": C})
            trigger.touch()
            bad = ex.run(m)
            assert bad.kind is kind and words in bad.reason, bad.reason
            assert not ex.kept_actors(), "a failed round keeps none of its resident actors"
            # what finished before the failure is kept, with its times and host
            assert set(bad.nodes) == {"A"}
            a = bad.nodes["A"]
            assert a.host == worker and 0.0 <= a.ready_ms <= a.admitted_ms <= a.start_ms <= a.end_ms
            good = ex.run(m)
            assert good.feasible, good.reason
            assert ex.last_outputs == {"C": 100000 + 7 + 1}
        # the events that arrived are in the trace (A's times come from them: no fallback note names A), or they
        # died with the crashed worker: the executor says so and did not wait out event_timeout_s for them
        assert not any("event_timeout_s" in n for n in bad.notes), bad.notes
        fell_back = any("did not arrive" in n and "'A'" in n for n in bad.notes)
        lost = any("died with the Ray worker" in n and "'A'" in n for n in bad.notes)
        assert (lost or not fell_back) and (flag == "crash_flag" or not lost), bad.notes
    finally:
        unregister_tool("flaky")


def test_memory_over_the_card_is_an_oom_and_a_timeout_is_a_timeout(cluster: Cluster, tools: dict[str, Spin],
                                                                   tmp_path: Path) -> None:
    register_tool(Spin("hog", ms=30, mem_mb=1, run_mem_mb=300, value=1), replace=True)
    slow = tmp_path / "slow.once"
    register_tool(Spin("sleepy", ms=10, mem_mb=1, value=1, slow_flag=str(slow), slow_s=120), replace=True)
    sc = scenario([("A", "hog"), ("B", "sleepy")], [("A", "B")], [card("hog", 30, 4), card("sleepy", 10, 4)],
                  budget_mb=30, name="hog")
    try:
        # 20 s: far below the sleepy tool's 120 s, far above what a worker's start takes on a loaded machine
        with RayExecutor(sc, address=cluster.address, timeout_s=20) as ex:
            oom = ex.run(Mapping({"A": Q, "B": C}))
            assert oom.kind is InfeasibleKind.OOM and "over its card" in oom.reason, oom.reason
            slow.touch()
            # B sleeps 120 s: only the 20 s limit can end it. Queued, B is the round's only GPU node, so its limit
            # is its own 20 s (a node's limit is the sum of those of every node of its class, CPU or GPU: on the
            # CPU beside A it would wait 40 s)
            late = ex.run(Mapping({"A": C, "B": Q}))
            assert late.kind is InfeasibleKind.TIMEOUT and "'B'" in late.reason and "within 20 s" in late.reason, \
                late.reason
            again = ex.run(Mapping({"A": C, "B": Q}))
            assert again.feasible, again.reason
    finally:
        unregister_tool("hog")
        unregister_tool("sleepy")


def test_a_failed_round_is_recorded_and_the_run_goes_on(cluster: Cluster, tools: dict[str, Spin],
                                                        tmp_path: Path) -> None:
    trigger = tmp_path / "fail.once"
    sc = flaky(tmp_path, fail_flag=str(trigger))
    try:
        trigger.touch()
        with RayExecutor(sc, address=cluster.address, timeout_s=60) as ex, RunStore(tmp_path / "runs.sqlite") as st:
            key = run_key(sc, "all-gpu", LoopConfig(rounds=3, seed=1),
                          executor=ExecutorSpec("ray", {"address": cluster.address, "timeout_s": 60}))
            result = run_recorded(key, store=st, executor=ex)
            stored = load_result(st, result.run_id or "")
        kinds = [r.trace.kind for r in stored.rounds]
        assert kinds == [InfeasibleKind.TOOL_ERROR, None, None], kinds
        assert all(r.trace.executor == "ray" for r in stored.rounds)
        assert stored.rounds[1].trace.nodes["B"].host, "stored traces keep the Ray node of every node"
    finally:
        unregister_tool("flaky")


# ---------------------------------------------------------------------------- queue semantics
def test_ray_admits_queued_nodes_out_of_fifo_order_where_the_simulator_does_not(cluster: Cluster,
                                                                               tools: dict[str, Spin],
                                                                               tmp_path: Path) -> None:
    # R holds 10 of the head's 30 MB, so L (25 MB, ready first) must wait for R, while S (8 MB, ready
    # after A) fits at once. R's call ends only once S's has (a flag file, not durations: on a loaded
    # machine A's worker may start later than R's 600 card-ms), so S finishes before L can be
    # admitted exactly when the executor lets S pass L (R then still spins 300 ms: margin for the
    # clocks); a FIFO executor would keep R waiting (60 s)
    done = str(tmp_path / "small.done")
    register_tool(Spin("res", ms=300, mem_mb=10, value=1, wait_flag=done, wait_s=60), replace=True)
    register_tool(Spin("large", ms=50, mem_mb=25, value=2), replace=True)
    register_tool(Spin("small", ms=50, mem_mb=8, value=3, done_flag=done), replace=True)
    sc = scenario([("R", "res"), ("L", "large"), ("A", "prep"), ("S", "small"), ("J", "join")],
                  [("A", "S"), ("R", "J"), ("L", "J"), ("S", "J")],
                  [card("res", 600, 10), card("large", 50, 25), card("small", 50, 8), card("prep", 20, has_gpu=False),
                   card("join", 10, has_gpu=False)], budget_mb=30, name="fifo")
    m = Mapping({"R": G, "L": Q, "A": C, "S": Q, "J": C})
    try:
        sim = Simulator(sc, noise=False).run(m)
        assert sim.feasible and not queue_inversions(sim.nodes)
        assert sim.nodes["S"].admitted_ms >= sim.nodes["L"].admitted_ms, "FIFO: S waits behind L"
        with RayExecutor(sc, address=cluster.address) as ex:
            tr = ex.run(m)
        check_ray_trace(sc, tr)
        assert ("L", "S") in queue_inversions(tr.nodes)
        assert any("FIFO" in n for n in tr.notes)
        assert tr.nodes["S"].end_ms < tr.nodes["L"].admitted_ms
    finally:
        for name in ("res", "large", "small"):
            unregister_tool(name)


# ---------------------------------------------------------------------------- the CLI
def _cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, "-m", "hetsched", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT, env=env or dict(os.environ), check=False)
    except subprocess.TimeoutExpired as exc:  # say what the CLI had printed, not only that it was late
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise AssertionError(f"hetsched {' '.join(args[:6])} ... ran past {timeout:g} s; its stderr:\n"
                             f"{said[-3000:]}") from None


LIGHT_YAML = """
name: light
mode: three_way
machine: {cpu_cores: 1, vram_budget_mb: 30}
cards:
  lightcpu: {cpu_ms: 20, gpu_ms: null, load_ms: 0, vram_mb: 0, has_gpu: false}
  lightgpu: {cpu_ms: 300, gpu_ms: 30, load_ms: 5, vram_mb: 4}
nodes: [{id: A, tool: lightcpu}, {id: B, tool: lightgpu}]
edges: [A -> B]
"""
"""The scenario of the CLI tests and of the killed driver (tests/raylight.py's tools): the oracle maps A to the
CPU and B to ``gpu_now``."""


def test_cli_ray_address_runs_on_this_cluster(cluster: Cluster, wide_ex: RayExecutor, tmp_path: Path) -> None:
    head, worker = hosts_by_kind(wide_ex)
    store = tmp_path / "runs.sqlite"
    path = tmp_path / "light.yaml"
    path.write_text(LIGHT_YAML)
    proc = _cli(["run", str(path), "--executor", "ray", "--ray-address", cluster.address, "-X",
                 'tool_modules=["tests.raylight"]', "--policy", "all-cpu", "--rounds", "1", "--json", "--store",
                 str(store)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["executor"] == "ray" and out["rounds"][0]["feasible"]
    with RunStore(store) as st:
        trace = load_result(st, out["run_id"]).rounds[0].trace
    assert {nt.host for nt in trace.nodes.values()} == {worker}
    assert {h.host for h in trace.hosts} == {head, worker}
    assert len(wide_ex.refresh_hosts()) == 2, "the CLI left the cluster it connected to running"


def test_cli_without_an_address_starts_and_stops_its_own_local_cluster(cluster: Cluster, wide_ex: RayExecutor,
                                                                       tmp_path: Path) -> None:
    local = Path(NS_DIR) / "local-ray"
    out_trace, store = tmp_path / "trace.json", tmp_path / "runs.sqlite"
    path = tmp_path / "light.yaml"
    path.write_text(LIGHT_YAML)
    proc = _cli(["run", str(path), "--executor", "ray", "--policy", "oracle", "--rounds", "1", "--json",
                 "--store", str(store), "--trace", str(out_trace), "-X", f"temp_dir={local}", "-X",
                 'tool_modules=["tests.raylight"]'])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["executor"] == "ray" and out["rounds"][0]["feasible"], out
    phases = out["executor_phases_s"]
    print("phases of the CLI's Ray executor (s):", json.dumps({k: round(v, 2) for k, v in phases.items()}))
    with RunStore(store) as st:
        trace = load_result(st, out["run_id"]).rounds[0].trace
    # where the time went is named: the first round carries the cluster's start, the run's sums its close
    assert list(trace.phases_s) == ["start_s", "hosts_s", "warm_s", "actors_s", "run_s", "cleanup_s", "events_s"]
    assert out["rounds"][0]["phases_s"] == trace.phases_s and all(v >= 0 for v in trace.phases_s.values())
    assert phases["executions"] >= 1 and phases["close_s"] > 0 and phases["start_s"] == trace.phases_s["start_s"]
    assert len(trace.hosts) == 1 and trace.hosts[0].vram_budget_mb == 30, "one local node with the scenario's budget"
    assert any(nt.placement is Placement.GPU_NOW for nt in trace.nodes.values())
    events = json.loads(out_trace.read_text())["traceEvents"]
    assert {e["args"]["name"].rsplit(" · ", 1)[-1] for e in events if e["name"] == "process_name"} == {"CPU", "GPU"}
    # the CLI stopped them before it exited (SIGTERM, then SIGKILL from its watchdog); a loaded machine
    # may take a moment to tear a killed process down, so allow for that, never for one left running
    left = _outliving(str(local).encode())
    assert not left, f"processes of the local cluster outlived the run: {left}"
    assert len(wide_ex.refresh_hosts()) == 2, "the test cluster is untouched"


def one_node_yaml(tool: str) -> str:
    """A one-node three-way scenario of ``tool`` (a test tool registered by name) on a 30 MB node."""
    return f"""
name: {tool}
mode: three_way
machine: {{cpu_cores: 1, vram_budget_mb: 30}}
cards:
  {tool}: {{cpu_ms: 30, gpu_ms: 30, load_ms: 5, vram_mb: 4}}
nodes: [{{id: A, tool: {tool}}}]
edges: []
"""


CRASHY_YAML = one_node_yaml("crashy")


def test_cli_json_stdout_stays_json_when_an_actor_dies(cluster: Cluster, tmp_path: Path) -> None:
    path, flag = tmp_path / "crashy.yaml", tmp_path / "crash.once"
    path.write_text(CRASHY_YAML)
    flag.touch()  # the gpu_now actor's process dies in round 0; Ray's raylet then tells the driver
    env = {**os.environ, "HETSCHED_TEST_CRASH_FLAG": str(flag)}
    proc = _cli(["run", str(path), "--executor", "ray", "--ray-address", cluster.address, "-X",
                 'tool_modules=["tests.raycrash"]', "-X", "timeout_s=60", "--policy", "all-gpu", "--rounds", "2",
                 "--json", "--no-store", "--reference", "none"], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # one JSON object and nothing else, whatever Ray logged
    assert out["rounds"][0]["infeasible_kind"] == "tool_error" and out["rounds"][1]["feasible"], out


def test_kill_9_of_a_driver_that_started_its_own_cluster_leaves_no_process(cluster: Cluster, wide_ex: RayExecutor,
                                                                            tmp_path: Path) -> None:
    """Also: the workers of a cluster the executor starts run at the driver's priority (Ray's default, nice
    15, starved them for minutes on a loaded machine)."""
    local = Path(NS_DIR) / "killed-ray"
    path = tmp_path / "light.yaml"
    path.write_text(LIGHT_YAML)
    code = ("import os, sys, time\n"
            "import ray\n"
            "from hetsched.exec.ray import RayExecutor\n"
            "from hetsched.model import Placement\n"
            "from hetsched.model.files import load_scenario\n"
            f"sc = load_scenario({str(path)!r})\n"
            f"ex = RayExecutor(sc, temp_dir={str(local)!r}, tool_modules=['tests.raylight'])\n"
            "trace = ex.run(sc.uniform(Placement.CPU))\n"
            "assert trace.feasible, trace.reason\n"
            "worker_nice = ray.get(ray.remote(num_cpus=0)(lambda: os.nice(0)).remote())\n"
            "print('ready', os.nice(0), worker_nice, flush=True)\n"
            "time.sleep(600)\n")
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert driver.stdout is not None and driver.stderr is not None
        said = driver.stdout.readline().split()
        if not said or said[0] != "ready":
            driver.kill()
            raise AssertionError(f"the driver did not start its cluster: {driver.stderr.read()[-3000:]}")
        assert said[1] == said[2], f"the local cluster's workers run at nice {said[2]}, the driver at nice {said[1]}"
        marker = str(local).encode()
        assert [p for p in Path("/proc").iterdir() if p.name.isdigit() and marker in _cmdline(p)], "no local cluster"
        driver.kill()  # SIGKILL: no ray.shutdown, no atexit
        driver.wait(timeout=30)
        left = _outliving(marker)
        assert not left, f"processes of the killed driver's cluster outlived it: {left}"
    finally:
        driver.kill()
        driver.wait(timeout=30)
    assert len(wide_ex.refresh_hosts()) == 2, "the test cluster is untouched"


FREEZER_YAML = """
name: freezer
mode: three_way
machine: {cpu_cores: 1, vram_budget_mb: 30}
cards:
  freezer: {cpu_ms: 30, gpu_ms: null, load_ms: 0, vram_mb: 0, has_gpu: false}
nodes: [{id: A, tool: freezer}]
edges: []
"""


def test_cli_exits_when_the_raylet_of_its_own_cluster_stops_answering(cluster: Cluster, wide_ex: RayExecutor,
                                                                      tmp_path: Path) -> None:
    """Ray's own teardown (``ray.shutdown()``) waits without a bound on a raylet or GCS that does not
    answer (seen once at load ~6: the run recorded, stdout empty, no exit after 400 s). Here the round's
    tool stops (SIGSTOP) its local cluster's raylet after its call: the CLI still prints its result and
    exits 0, says on stderr that the teardown was forced, and leaves no process of that cluster."""
    local = Path(NS_DIR) / "frozen-ray"
    path, flag, store = tmp_path / "freezer.yaml", tmp_path / "freeze.once", tmp_path / "runs.sqlite"
    path.write_text(FREEZER_YAML)
    flag.touch()
    env = {**os.environ, "HETSCHED_TEST_FREEZE_FLAG": str(flag)}
    proc = _cli(["run", str(path), "--executor", "ray", "-X", f"temp_dir={local}", "-X", 'tool_modules=["tests.rayfreeze"]',
                 "-X", "shutdown_timeout_s=5", "--policy", "all-cpu", "--rounds", "1", "--json", "--store", str(store),
                 "--reference", "none"], env=env)
    assert not flag.exists(), f"the freezer tool never ran: {proc.stderr[-3000:]}"
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["rounds"][0]["feasible"], out
    with RunStore(store) as st:
        assert st.run(out["run_id"]).status == "finished"
        assert len(st.rounds(out["run_id"])) == 1
    assert "shutdown did not finish within 5 s" in proc.stderr and "stopped by force" in proc.stderr, proc.stderr
    left = _outliving(str(local).encode())
    assert not left, f"processes of the local cluster outlived the run: {left}"
    assert len(wide_ex.refresh_hosts()) == 2, "the test cluster is untouched"


def _outliving(marker: bytes, within_s: float = 60.0) -> list[str]:
    """The processes whose command line holds ``marker`` (zombies aside) that are still there after
    ``within_s`` (returns as soon as there are none): pid and the start of the command line."""
    deadline = time.monotonic() + within_s
    while True:
        left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and marker in _cmdline(p) and not _zombie(p)]
        if not left or time.monotonic() >= deadline:
            return [f"{p.name}: {_cmdline(p)[:80]!r}" for p in left]
        time.sleep(0.5)


def _zombie(p: Path) -> bool:
    try:
        return (p / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


# ---------------------------------------------------------------------------- Ctrl-C mid-round
HOLDER_YAML = one_node_yaml("holder")


def _wait_for(what: str, ok: Callable[[], bool], proc: subprocess.Popen[str] | None = None,
              within_s: float = 300.0) -> None:
    """Wait until ``ok()`` (a safety limit only: fails, saying what, past ``within_s`` or when ``proc`` exits)."""
    deadline = time.monotonic() + within_s
    while not ok():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the CLI exited ({proc.returncode}) before {what}")
        assert time.monotonic() < deadline, f"no {what} within {within_s:g} s"
        time.sleep(0.05)


def _local_dir(tmp_path: Path, where: str) -> Path:
    """The temp dir of the local cluster an interrupted CLI run of this test starts (short: Ray's socket
    paths must stay under 107 bytes)."""
    return Path(NS_DIR) / f"int{zlib.crc32(str(tmp_path).encode()):08x}-{where}"


def _interrupted_cli(cluster: Cluster, tmp_path: Path, where: str, interrupt: Callable[[subprocess.Popen[str]], None],
                     module: str = "hetsched", env: dict[str, str] | None = None) -> tuple[int, str, list[str]]:
    """``hetsched run holder.yaml --executor ray`` (40 rounds, stored in ``tmp_path/runs.sqlite``; ``module``
    runs it) in its own process group, as in a user's terminal, which Ctrl-C signals: once round 0's line
    is out and a later round's held call is known to run, ``interrupt(proc)`` (it sends the SIGINTs);
    then its exit status, stderr and stdout lines."""
    local = _local_dir(tmp_path, where)
    path, hold, store = tmp_path / "holder.yaml", tmp_path / "hold", tmp_path / "runs.sqlite"
    started = Path(f"{hold}.started")
    path.write_text(HOLDER_YAML)
    env = {**os.environ, **(env or {}), "HETSCHED_TEST_HOLD_FLAG": str(hold), "PYTHONUNBUFFERED": "1"}
    on = ["-X", f"temp_dir={local}"] if where == "own-cluster" else ["--ray-address", cluster.address]
    errors = tmp_path / "stderr.log"
    with errors.open("w") as sink:  # a user's terminal: its own process group, which Ctrl-C signals
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "run", str(path), "--executor", "ray", *on, "-X",
             'tool_modules=["tests.rayhold"]', "-X", "timeout_s=600", "--policy", "all-gpu", "--rounds", "40",
             "--store", str(store), "--reference", "none"],
            stdout=subprocess.PIPE, stderr=sink, text=True, cwd=ROOT, env=env, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")) if proc.stdout else None,
                              daemon=True)
    reader.start()
    try:
        # a round is printed after it is stored: once round 0's line is out, later calls hold mid-round
        _wait_for("round 0's line", lambda: any(ln.startswith("round 0/40:") for ln in list(lines)), proc)
        hold.touch()
        _wait_for("held call", started.exists, proc)
        interrupt(proc)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        hold.unlink(missing_ok=True)
    reader.join(timeout=60)
    return proc.returncode, errors.read_text(), lines


def _check_interrupted_run(cluster: Cluster, wide_ex: RayExecutor, tmp_path: Path, where: str, before: dict[str, str],
                           code: int, stderr: str, lines: list[str]) -> None:
    """What an interrupted ``hetsched run`` (:func:`_interrupted_cli`) must leave: exit 130 without a
    traceback, every round printed before stored and whole (the run ``interrupted``), the interrupted one
    absent; on its own local cluster no process of that cluster, on ``--ray-address`` no resident actor of
    its job alive and every ``vram_mb`` free; the test cluster untouched."""
    assert code == 130, f"exit {code}; stderr:\n{stderr[-3000:]}"
    assert "Traceback" not in stderr, stderr[-5000:]
    said = re.search(r"interrupted: run (\w+) keeps its (\d+) stored rounds", stderr)
    assert said, stderr[-3000:]
    run_id, kept = said.group(1), int(said.group(2))
    printed = [int(m.group(1)) for ln in lines if (m := re.match(r"round (\d+)/40:", ln))]
    assert kept >= 1 and printed == list(range(kept)), (kept, printed)
    with RunStore(tmp_path / "runs.sqlite") as st:
        info, rounds = st.run(run_id), st.rounds(run_id)
    assert info.status == "interrupted", (info.status, info.status_reason)
    # every round finished before the Ctrl-C is there, whole; the interrupted one (round `kept`) is not
    assert [r.round for r in rounds] == list(range(kept))
    assert all(r.trace.feasible and r.mapping["A"] is Placement.GPU_NOW for r in rounds), [r.trace.reason for r in rounds]
    if where == "own-cluster":
        left = _outliving(str(_local_dir(tmp_path, where)).encode())
        assert not left, f"processes of the interrupted run's local cluster outlived it: {left}"
    else:
        mine = _new_actor_states_once_dead(before)
        assert mine and all(st == "DEAD" for st in mine.values()), f"the interrupted run's actors: {mine}"
        assert _vram_free_everywhere(), "the interrupted run left vram_mb held"
    assert len(wide_ex.refresh_hosts()) == 2, "the test cluster is untouched"


@pytest.mark.parametrize("where", ["own-cluster", "ray-address"])
def test_ctrl_c_mid_round_keeps_every_recorded_round_and_leaves_no_actor_or_process(
        cluster: Cluster, wide_ex: RayExecutor, tmp_path: Path, where: str) -> None:
    """A user's Ctrl-C (SIGINT to the CLI's process group) while a round's resident tool runs, after
    rounds were recorded: exit 130 without a traceback, every round printed before is stored (the run
    ``interrupted``), the interrupted round is not, and nothing of the run is left: on its own local
    cluster no process of that cluster, on ``--ray-address`` no resident actor of its job alive."""
    before = _resident_actor_states()
    code, stderr, lines = _interrupted_cli(cluster, tmp_path, where, lambda proc: os.killpg(proc.pid, signal.SIGINT))
    _check_interrupted_run(cluster, wide_ex, tmp_path, where, before, code, stderr, lines)


@pytest.mark.parametrize("where", ["own-cluster", "ray-address"])
def test_a_second_ctrl_c_during_the_cleanup_of_the_first_still_ends_cleanly(
        cluster: Cluster, wide_ex: RayExecutor, tmp_path: Path, where: str) -> None:
    """A user presses Ctrl-C twice: the second SIGINT reaches the CLI while the interrupted round's cleanup
    runs (``tests/raysecond.py`` holds that cleanup until the test has sent it and the CLI has answered).
    The cleanup is finished first, the CLI says so in one line (what it finishes, how to leave at once),
    and the run ends as after one Ctrl-C (:func:`_check_interrupted_run`)."""
    flag = tmp_path / "cleanup"
    errors = tmp_path / "stderr.log"
    said = "hetsched: Ctrl-C: stopping the round's Ray tasks and actors first"

    def twice(proc: subprocess.Popen[str]) -> None:
        os.killpg(proc.pid, signal.SIGINT)
        _wait_for("the interrupted round's cleanup", Path(f"{flag}.cleanup").exists, proc)
        os.killpg(proc.pid, signal.SIGINT)
        _wait_for("the CLI's answer to the second Ctrl-C", lambda: said in errors.read_text(), proc)
        Path(f"{flag}.second").touch()

    before = _resident_actor_states()
    code, stderr, lines = _interrupted_cli(cluster, tmp_path, where, twice, module="tests.raysecond",
                                           env={"HETSCHED_TEST_CLEANUP_FLAG": str(flag)})
    line = next(ln for ln in stderr.splitlines() if said in ln)
    assert "kill -9" in line and ("watchdog" if where == "own-cluster" else "ray stop") in line, line
    _check_interrupted_run(cluster, wide_ex, tmp_path, where, before, code, stderr, lines)


def _new_actor_states_once_dead(before: dict[str, str], within_s: float = 60.0) -> dict[str, str]:
    """The states of the resident-tool actors not in ``before``, once all are dead (Ray reports a killed
    actor dead a moment later), or as they are after ``within_s`` (a safety limit: the caller asserts)."""
    deadline = time.monotonic() + within_s
    while True:
        mine = {a: st for a, st in _resident_actor_states().items() if a not in before}
        if all(st == "DEAD" for st in mine.values()) or time.monotonic() >= deadline:
            return mine
        time.sleep(0.5)


def _ctrl_c_once_it_holds(started: Path, interrupted: threading.Event) -> None:
    """Start a thread that, once a held call says it runs (``started`` exists), sets ``interrupted`` and
    raises ``KeyboardInterrupt`` in the main thread, as SIGINT does."""

    def ctrl_c() -> None:
        deadline = time.monotonic() + 300  # a safety limit: the round's own limit is 600 s
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if started.exists():
            interrupted.set()
            _thread.interrupt_main()

    threading.Thread(target=ctrl_c, daemon=True).start()


@pytest.fixture
def held(tools: dict[str, Spin], tmp_path: Path) -> Iterator[tuple[Scenario, Path]]:
    """A scenario of two independent nodes, A (the ``held`` tool: its call holds while the returned flag
    file exists, after touching ``<flag>.started``) and B (``mid``), and that flag's path (not created)."""
    from tests.rayhold import Hold

    hold = tmp_path / "hold"
    register_tool(Hold("held", ms=30, mem_mb=2, value=1, hold_flag=str(hold)), replace=True)
    yield scenario([("A", "held"), ("B", "mid")], [], [card("held", 30, 4), card("mid", 150, 4)], budget_mb=30,
                   name="interrupted"), hold
    hold.unlink(missing_ok=True)
    unregister_tool("held")


def test_keyboard_interrupt_in_a_round_then_close_leaves_no_kept_actor_alive(
        cluster: Cluster, wide_ex: RayExecutor, held: tuple[Scenario, Path]) -> None:
    """A program's ``KeyboardInterrupt`` raised (as by Ctrl-C, in the main thread) while a round runs,
    after a round that kept two resident actors: the interrupted round kills the actor it used, and
    the executor's ``close()`` (leaving its ``with`` block) kills the other one, kept from the round
    before and unused by the interrupted one; Ray then reports every actor of the executor dead."""
    sc, hold = held
    started = Path(f"{hold}.started")
    before = _resident_actor_states()
    interrupted = threading.Event()
    seen: dict[str, Any] = {}
    with pytest.raises(KeyboardInterrupt), RayExecutor(sc, address=cluster.address, timeout_s=600) as ex:
        seen["ex"] = ex
        tr = ex.run(Mapping({"A": G, "B": G}))
        check_ray_trace(sc, tr)
        seen["kept"] = {tool: actor._actor_id.hex() for (_, tool), actor in ex.kept_actors().items()}
        assert set(seen["kept"]) == {"held", "mid"}, seen["kept"]
        hold.touch()
        _ctrl_c_once_it_holds(started, interrupted)
        ex.run(Mapping({"A": G, "B": C}))  # B's kept actor is not this round's
    assert interrupted.is_set(), "A never held: the round was not interrupted"
    mine = _new_actor_states_once_dead(before)
    assert set(mine) == set(seen["kept"].values()), (mine, seen["kept"])
    assert all(st == "DEAD" for st in mine.values()), f"actors left alive after the interrupt and close(): {mine}"
    ex = seen["ex"]
    assert ex.kept_actors() == {}
    assert ex.resident_actors_started == {"held": 1, "mid": 1}, ex.resident_actors_started
    assert _vram_free_everywhere(), "the interrupted round left vram_mb held"


def test_a_second_ctrl_c_as_the_interrupted_rounds_cleanup_starts_waits_until_it_is_done(
        cluster: Cluster, held: tuple[Scenario, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in a round (as in the test above), then a second one (a real SIGINT) the moment the round's
    cleanup starts: the cleanup still runs to its end before the second ``KeyboardInterrupt`` is raised, so
    right after it, with the executor still open, the interrupted round's actor is dead and kept no longer,
    the other kept one is still kept, and every ``vram_mb`` is free."""
    from hetsched.exec import ray as ray_exec

    sc, hold = held
    started = Path(f"{hold}.started")
    seconds: list[str] = []
    cleanup = ray_exec._Round.cleanup

    def second_ctrl_c_first(self: Any) -> None:
        if self.interrupted and not seconds:
            seconds.append(self.tag)
            signal.raise_signal(signal.SIGINT)  # its handler runs before this call returns
        cleanup(self)

    monkeypatch.setattr(ray_exec._Round, "cleanup", second_ctrl_c_first)
    with RayExecutor(sc, address=cluster.address, timeout_s=600) as ex:
        check_ray_trace(sc, ex.run(Mapping({"A": G, "B": G})))
        kept = {tool: actor._actor_id.hex() for (_, tool), actor in ex.kept_actors().items()}
        hold.touch()
        _ctrl_c_once_it_holds(started, threading.Event())
        with pytest.raises(KeyboardInterrupt):
            ex.run(Mapping({"A": G, "B": C}))
        assert seconds, "the round's cleanup never started after an interrupt"
        assert {tool for _, tool in ex.kept_actors()} == {"mid"}, "the interrupted round's actor is still kept"
        states = _new_actor_states_once_dead({a: st for a, st in _resident_actor_states().items()
                                              if a != kept["held"]})
        assert states == {kept["held"]: "DEAD"}, f"the interrupted round's actor after the cleanup: {states}"
        assert _vram_free_everywhere(), "the interrupted round's cleanup was cut short: vram_mb is held"


def test_a_ctrl_c_as_close_starts_is_raised_once_close_has_killed_every_kept_actor(
        cluster: Cluster, wide_ex: RayExecutor, tools: dict[str, Spin], monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C (a real SIGINT) the moment ``close()`` starts to kill the kept resident actors: ``close()``
    finishes first (every actor dead, none kept), then raises the ``KeyboardInterrupt``; closing again does
    nothing more."""
    sent: list[bool] = []
    drop = RayExecutor.drop_resident_actors

    def ctrl_c_first(self: RayExecutor) -> None:
        if not sent:
            sent.append(True)
            signal.raise_signal(signal.SIGINT)
        drop(self)

    monkeypatch.setattr(RayExecutor, "drop_resident_actors", ctrl_c_first)
    sc = wide()
    before = _resident_actor_states()
    ex = RayExecutor(sc, address=cluster.address, timeout_s=60)
    try:
        check_ray_trace(sc, ex.run(Mapping({"A": C, "B": C, "X": G, "Y": G, "F0": C, "F1": C, "F2": C, "F3": C,
                                            "J": C})))
        assert len(ex.kept_actors()) == 2
        with pytest.raises(KeyboardInterrupt):
            ex.close()
        assert sent and ex.kept_actors() == {}
        mine = _new_actor_states_once_dead(before)
        assert len(mine) == 2 and all(st == "DEAD" for st in mine.values()), f"kept actors after close(): {mine}"
    finally:
        ex.close()
    assert len(sent) == 1 and len(wide_ex.refresh_hosts()) == 2, "the cluster is untouched"


def test_a_ctrl_c_right_after_a_resident_actor_is_made_finds_it_registered_and_kills_it(
        cluster: Cluster, tools: dict[str, Spin], monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C (a real SIGINT) right after Ray has been asked for a resident actor and before anything
    else: the actor is in the tables the round's cleanup walks, so it is killed, although the interrupt's
    traceback (kept here) still holds the frame that made it (a handle alive, which would keep it running)."""
    sc = wide()
    before = _resident_actor_states()
    made: list[str] = []

    class CtrlCOnceMade:
        """The executor's actor class, with a Ctrl-C right after each actor is made."""

        def __init__(self, real: Any) -> None:
            self.real = real

        def options(self, **kwargs: Any) -> Any:
            chosen = self.real.options(**kwargs)

            class Made:
                def remote(self, *args: Any, **kw: Any) -> Any:
                    actor = chosen.remote(*args, **kw)
                    made.append(actor._actor_id.hex())
                    signal.raise_signal(signal.SIGINT)
                    return actor

            return Made()

    with RayExecutor(sc, address=cluster.address, timeout_s=60) as ex:
        monkeypatch.setattr(ex, "_actor", CtrlCOnceMade(ex._actor))
        with pytest.raises(KeyboardInterrupt) as caught:
            ex.run(Mapping({"A": C, "B": C, "X": G, "Y": C, "F0": C, "F1": C, "F2": C, "F3": C, "J": C}))
        assert made and ex.kept_actors() == {}, (made, ex.kept_actors())
        mine = _new_actor_states_once_dead(before)
        assert caught.traceback, "the traceback is kept until here"
        assert mine == {made[0]: "DEAD"}, f"an actor made as Ctrl-C came: {mine}"
        assert _vram_free_everywhere()


# ---------------------------------------------------------------------------- hs.Session on Ray
def test_a_session_request_reaches_the_sources_and_returns_the_sinks(wide_ex: RayExecutor) -> None:
    """A request's value reaches the source task, the sink's output comes back (Spin: value + inputs)."""
    import hetsched as hs

    with hs.Session(wide(), executor=wide_ex, policy="all-cpu", store=False) as s:  # the caller's executor
        with_input = s.submit(5)
        without = s.submit()
    assert with_input.trace.feasible and without.trace.feasible
    # A = 1 + 5 feeds B, and A and B feed every later node: the 5 reaches J along 7 paths
    assert without.outputs == {"J": 141167}
    assert with_input.outputs == {"J": 141167 + 7 * 5}


# ---------------------------------------------------------------------------- last: a node dies
def test_a_dead_node_ends_the_round_and_later_rounds_are_refused_as_unavailable(cluster: Cluster,
                                                                                wide_ex: RayExecutor,
                                                                                tmp_path: Path) -> None:
    slow, started = tmp_path / "slow", tmp_path / "started"
    register_tool(Spin("sleepy", ms=10, mem_mb=1, value=1, slow_flag=str(slow), slow_s=120, start_flag=str(started)),
                  replace=True)
    sc = scenario([("A", "sleepy")], [], [card("sleepy", 10, 4)], budget_mb=30, name="dies")
    try:
        with RayExecutor(sc, address=cluster.address, timeout_s=100) as ex:
            slow.touch()
            killed_while_running = threading.Event()

            def kill_once_a_runs() -> None:
                # A's call has begun on the worker node (its flag, not a guess at how long a worker
                # takes to start on a loaded machine); it then sleeps 120 s there
                deadline = time.monotonic() + 90
                while not started.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if started.exists():
                    killed_while_running.set()
                cluster.kill("worker1")  # the whole node, abruptly, while A sleeps on it

            killer = threading.Thread(target=kill_once_a_runs)
            killer.start()
            tr = ex.run(Mapping({"A": C}))
            killer.join()
            slow.unlink()
            assert killed_while_running.is_set(), f"A never started on the worker node: {tr.reason}"
            # the node's death, not the round's 100 s limit (a TIMEOUT), ended the round
            assert not tr.feasible and tr.kind in (InfeasibleKind.TOOL_ERROR, InfeasibleKind.UNAVAILABLE), tr.reason
            cluster.processes.pop("worker1").wait(timeout=30)
            # Ray declares the node dead after its missed health checks (tests/test_ray_cluster.py sets
            # them); a loaded machine stretches that, so wait for it rather than for a fixed time
            deadline = time.monotonic() + 180
            while len(ex.refresh_hosts()) > 1 and time.monotonic() < deadline:
                time.sleep(0.5)
            assert len(ex.hosts) == 1, f"Ray still lists the killed node after 180 s: {ex.hosts}"
            after = ex.run(Mapping({"A": C}))
            assert after.kind is InfeasibleKind.UNAVAILABLE and "CPU" in after.reason, after.reason
            assert ex.run(Mapping({"A": Q})).feasible, "the head still runs GPU placements"
    finally:
        unregister_tool("sleepy")
