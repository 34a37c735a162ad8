"""hs.Session under overlapping requests on the in-process executor: requests submitted from several
threads really run at once (the tools block on events that another request sets, so serializing them
would time out), share the resident gpu_now tools and the device's one FIFO queue, never hold VRAM over
the budget, fail alone, and a mapping change never takes a tool from a running request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import ScriptPolicy

import hetsched as hs
from hetsched.exec.inproc import InProcessExecutor
from hetsched.model import InfeasibleKind, Mapping, Proposal
from hetsched.store import RunStore

STANDIN = {"device": "standin"}
WAIT_S = 30.0  # an event not set by then means the requests did not overlap: the tool raises


def wait_for(event: threading.Event, what: str) -> None:
    if not event.wait(WAIT_S):
        raise TimeoutError(f"{what} never happened: the requests did not run at once")


def until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} never happened")
        time.sleep(0.001)




class Clients:
    """Threads each submitting one request; keeps every response or error by input."""

    def __init__(self, session: hs.Session) -> None:
        self.session = session
        self.responses: dict[int, hs.Response] = {}
        self.errors: dict[int, BaseException] = {}
        self.threads: list[threading.Thread] = []

    def submit(self, x: int) -> None:
        def run() -> None:
            try:
                self.responses[x] = self.session.submit(x)
            except BaseException as exc:  # kept for the test to assert on, never swallowed
                self.errors[x] = exc

        t = threading.Thread(target=run, name=f"client-{x}")
        t.start()
        self.threads.append(t)

    def join(self) -> None:
        for t in self.threads:
            t.join(timeout=4 * WAIT_S)
            assert not t.is_alive(), "a request never returned"


def test_overlapping_submits_run_at_once_and_are_all_recorded(tmp_path: Path) -> None:
    # request 1's tool waits for an event only request 2's tool sets: serialized requests time out
    first_in, second_in = threading.Event(), threading.Event()

    def step(x: int) -> int:
        if x == 1:
            first_in.set()
            wait_for(second_in, "request 2 running while request 1 is")
        else:
            wait_for(first_in, "request 1 running")
            second_in.set()
        return x * 10

    wf = hs.Workflow("overlap").node("A", hs.function_tool("step", step)).node(
        "B", hs.function_tool("inc", lambda x: x + 1), after="A")
    store = tmp_path / "runs.sqlite"
    with hs.Session(wf, executor_options=STANDIN, store=store, name="svc") as s:
        clients = Clients(s)
        clients.submit(1)
        wait_for(first_in, "request 1 running")
        clients.submit(2)
        clients.join()
        assert not clients.errors, clients.errors
        assert {x: r.outputs for x, r in clients.responses.items()} == {1: {"B": 11}, 2: {"B": 21}}
        assert sorted(r.round for r in clients.responses.values()) == [0, 1]
        run_id = s.run_id
    with RunStore(store) as db:
        rounds = db.rounds(run_id or "")
    assert [r.round for r in rounds] == [0, 1] and all(r.trace.feasible for r in rounds)
    with hs.Session(wf, executor_options=STANDIN, store=store, name="svc") as s:  # continues
        assert s.run_id == run_id and len(s.rounds) == 2
        assert s.submit(3).round == 2


def test_a_resident_tool_is_loaded_once_and_serves_concurrent_calls_of_every_request() -> None:
    k = 4
    barrier = threading.Barrier(k, timeout=WAIT_S)  # every request's call of the resident tool at once
    loads: list[str] = []

    def load(device: hs.Device) -> int:
        loads.append(device.label)
        return 3

    def gpu(m: int, x: int) -> int:
        barrier.wait()
        return m * x

    wf = hs.Workflow("shared").node("src", hs.function_tool("inc", lambda x: x + 1)).node(
        "A", hs.function_tool("mul", lambda m, x: m * x, gpu, load=load, cpu_ms=50, gpu_ms=1, vram_mb=100),
        after="src")
    with hs.Session(wf, policy=ScriptPolicy([{"src": "cpu", "A": "gpu_now"}]), store=False,
                    executor_options={**STANDIN, "device_threads": k}) as s:
        clients = Clients(s)
        for x in range(k):
            clients.submit(x)
        clients.join()
        assert not clients.errors, clients.errors
        assert {x: r.outputs for x, r in clients.responses.items()} == {x: {"A": 3 * (x + 1)} for x in range(k)}
        ex = s.executor
        assert isinstance(ex, InProcessExecutor)
        assert loads.count("standin") == 1 and ex.resident_loads == {"mul": 1}  # one load served all four
        for r in clients.responses.values():
            assert r.trace.vram_timeline[0].used_mb == pytest.approx(100.0)  # counted once, not per request


def test_queued_nodes_of_all_requests_are_admitted_in_fifo_order_under_the_budget() -> None:
    # Q (600 MB, gpu_queue) fits once in the 1000 MB budget: request 0's Q holds the device while
    # requests 1..3 queue behind it in a forced order; they must be admitted in that order
    n = 4
    release = {x: threading.Event() for x in range(n)}
    q_running, q_go = threading.Event(), threading.Event()
    ran: list[int] = []
    active = [0, 0]  # Q calls running now, most at once
    lock = threading.Lock()

    def gate(x: int) -> int:
        wait_for(release[x], f"request {x} released")
        return x

    def queued(x: int) -> int:
        with lock:
            active[0] += 1
            active[1] = max(active[1], active[0])
            ran.append(x)
        if x == 0:
            q_running.set()
            wait_for(q_go, "the queue to fill")
        with lock:
            active[0] -= 1
        return x

    wf = (hs.Workflow("fifo", mode="three_way", vram_budget_mb=1000.0)
          .node("S", hs.function_tool("gate", gate))
          .node("Q", hs.function_tool("big", queued, queued, cpu_ms=50, gpu_ms=1, vram_mb=600),
                after="S"))
    with hs.Session(wf, policy=ScriptPolicy([{"S": "cpu", "Q": "gpu_queue"}]), store=False,
                    executor_options={**STANDIN, "device_threads": n}) as s:
        ex = s.executor
        assert isinstance(ex, InProcessExecutor)
        clients = Clients(s)
        for x in range(n):
            clients.submit(x)
        until(lambda: s.in_flight == n, "every request in flight")
        release[0].set()
        wait_for(q_running, "request 0's queued node running")
        order = [3, 1, 2]  # the order their Q nodes become ready
        for i, x in enumerate(order):
            release[x].set()
            until(lambda i=i: sum(e == "enqueue" for e, _, _ in ex.fifo_log) == i + 2, f"request {x} queued")
        q_go.set()
        clients.join()
        assert not clients.errors, clients.errors
        assert {x: r.outputs for x, r in clients.responses.items()} == {x: {"Q": x} for x in range(n)}
        assert ran == [0, *order]  # admitted in the order they queued, across requests
        enq = [(rid, node) for e, rid, node in ex.fifo_log if e == "enqueue"]
        adm = [(rid, node) for e, rid, node in ex.fifo_log if e == "admit"]
        assert adm == enq
        assert active[1] == 1  # 600 + 600 > 1000: never two at once
        assert ex.vram_peak_mb <= 1000.0 + 1e-6
        for r in clients.responses.values():  # each trace shows the device's VRAM while it ran
            assert max(p.used_mb for p in r.trace.vram_timeline) <= 1000.0 + 1e-6
            nodes = r.trace.nodes
            assert nodes["Q"].start_ms >= nodes["S"].end_ms  # precedence within the request


def test_a_failing_request_fails_alone_and_its_resident_tool_is_not_yanked() -> None:
    # S -> A (gpu_now) -> B; request -1 fails in B after request 5 has started; request 5 still calls A
    r5_started, r_fail = threading.Event(), threading.Event()
    loads: list[str] = []
    unloads: list[str] = []
    calls: list[int] = []

    def src(x: int) -> int:
        if x == 5:
            r5_started.set()
            wait_for(r_fail, "request -1 failing")
        return x

    def gpu(h: int, x: int) -> int:
        calls.append(x)
        return x

    def check(x: int) -> int:
        if x < 0:
            wait_for(r5_started, "request 5 running")
            r_fail.set()
            raise ValueError(f"negative {x}")
        return x + 1

    spec = hs.function_tool("a", lambda h, x: x, gpu, load=lambda d: loads.append(d.label) or 1,
                            unload=lambda h: unloads.append("a"), cpu_ms=50, gpu_ms=1, vram_mb=100)
    wf = (hs.Workflow("fail").node("S", hs.function_tool("src", src)).node("A", spec, after="S")
          .node("B", hs.function_tool("check", check), after="A"))
    with hs.Session(wf, policy=ScriptPolicy([{"S": "cpu", "A": "gpu_now", "B": "cpu"}]), store=False,
                    executor_options={**STANDIN, "device_threads": 2}) as s:
        clients = Clients(s)
        clients.submit(-1)
        clients.submit(5)
        clients.join()
        assert set(clients.errors) == {-1} and isinstance(clients.errors[-1], hs.ToolError)
        assert clients.responses[5].outputs == {"B": 6}
        assert sorted(calls) == [-1, 5]  # request 5 called A after request -1 failed: still loaded
        kinds = sorted(str(r.trace.kind) for r in s.rounds)
        assert len(s.rounds) == 2 and kinds.count(str(InfeasibleKind.TOOL_ERROR)) == 1
        assert loads.count("standin") == 1 and unloads == ["a"]  # unloaded once request 5 was done with it
        assert s.submit(7).outputs == {"B": 8}
        assert loads.count("standin") == 2  # the next request loads a fresh copy


def test_a_mapping_change_waits_for_the_requests_using_a_resident_tool() -> None:
    # decision 0: A gpu_now; after a request finishes: B gpu_now, A on the CPU (a different resident set)
    go = {x: threading.Event() for x in range(3)}
    inside = {x: threading.Event() for x in range(3)}
    events: list[str] = []
    lock = threading.Lock()

    def log(what: str) -> None:
        with lock:
            events.append(what)

    def a_gpu(h: Any, x: int) -> int:
        inside[x].set()
        wait_for(go[x], f"request {x} let go")
        log(f"A gpu end {x}")
        return x

    def a_cpu(h: Any, x: int) -> int:
        log(f"A cpu {x}")
        return x

    a = hs.function_tool("a", a_cpu, a_gpu, cpu_ms=50, gpu_ms=1, vram_mb=600,
                         load=lambda d: log(f"load a {d.label}") or d.label,
                         unload=lambda h: log(f"unload a {h}"))
    b = hs.function_tool("b", lambda h, x: x + 1, lambda h, x: x + 1, cpu_ms=50, gpu_ms=1, vram_mb=600,
                         load=lambda d: log(f"load b {d.label}") or d.label)
    wf = hs.Workflow("change", mode="three_way", vram_budget_mb=1000.0).node("A", a).node("B", b, after="A")
    m1, m2 = {"A": "gpu_now", "B": "cpu"}, {"A": "cpu", "B": "gpu_now"}
    with hs.Session(wf, policy=ScriptPolicy([m1, m2]), store=False,
                    executor_options={**STANDIN, "device_threads": 3}) as s:
        ex = s.executor
        assert isinstance(ex, InProcessExecutor)
        clients = Clients(s)
        clients.submit(0)
        wait_for(inside[0], "request 0 in A")
        clients.submit(1)  # starts under the mapping in force (nothing finished yet)
        wait_for(inside[1], "request 1 in A")
        go[0].set()
        until(lambda: 0 in clients.responses or 0 in clients.errors, "request 0 finished")
        assert not clients.errors, clients.errors
        clients.submit(2)  # decided after request 0: m2, which moves A off the GPU while request 1 uses it
        until(lambda: len(ex._start_fifo) == 1, "request 2 waiting to start")
        assert not any(e.startswith(("A cpu 2", "unload a standin", "load b standin")) for e in events)
        go[1].set()
        clients.join()
        assert not clients.errors, clients.errors
        assert {x: r.mapping for x, r in clients.responses.items()} == {0: Mapping(m1), 1: Mapping(m1),
                                                                       2: Mapping(m2)}
        assert {x: r.outputs for x, r in clients.responses.items()} == {x: {"B": x + 1} for x in range(3)}
        # A stayed loaded until request 1 was done with it, and was loaded once for requests 0 and 1
        assert events.index("A gpu end 1") < events.index("unload a standin") < events.index("load b standin")
        assert events.count("load a standin") == 1
        assert ex.vram_peak_mb <= 1000.0 + 1e-6
        assert clients.responses[2].waited_ms > 0.0  # it waited for request 1 to drain, and says so


def test_node_by_node_requests_overlap_with_submits() -> None:
    entered = threading.Event()

    def a(x: int) -> int:
        entered.set()
        return x + 1

    wf = hs.Workflow("mixed").node("A", hs.function_tool("a", a))
    with hs.Session(wf, store=False, executor_options=STANDIN) as s:
        with s.begin_request() as req:  # this request stays in flight while a submit runs
            done: list[hs.Response] = []
            t = threading.Thread(target=lambda: done.append(s.submit(1)))
            t.start()
            t.join(timeout=WAIT_S)
            assert done and done[0].outputs == {"A": 2}
            assert s.in_flight == 1
            assert req.run_node("A", [5]) == 6
        assert req.round == 1 and len(s.rounds) == 2


def test_max_in_flight_and_window_are_checked() -> None:
    wf = hs.Workflow("w").node("A", hs.function_tool("a", lambda x: x))
    with pytest.raises(hs.InputError, match="max_in_flight must be >= 1"):
        hs.Session(wf, store=False, max_in_flight=0)
    with pytest.raises(hs.InputError, match="window must be >= 1"):
        hs.Session(wf, store=False, window=0)
    with pytest.raises(hs.InputError, match="max_in_flight=2 needs executor='inproc'"):
        hs.Session(wf, store=False, executor="sim", max_in_flight=2)


def test_a_window_of_finished_requests_between_decisions() -> None:
    decisions: list[int] = []

    class Counting(ScriptPolicy):
        def propose(self, history: Any, probes: Any = (), observations: Any = None) -> Proposal:
            decisions.append(len(history))
            return super().propose(history, probes, observations)

    wf = hs.Workflow("w").node("A", hs.function_tool("a", lambda x: x))
    with hs.Session(wf, policy=Counting([{"A": "cpu"}]), store=False, window=3) as s:
        for x in range(7):
            s.submit(x)
    assert decisions == [0, 3, 6]


_PLACE = st.sampled_from(["cpu", "gpu_now", "gpu_queue"])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(range(5)), budget=st.sampled_from([1000.0, 1300.0]),
       mappings=st.lists(st.fixed_dictionaries({"src": st.just("cpu"), "L": _PLACE, "R": _PLACE,
                                                "join": st.just("cpu")}), min_size=1, max_size=4))
def test_random_arrival_interleavings_keep_every_invariant(order: list[int], budget: float,
                                                           mappings: list[dict[str, str]]) -> None:
    # five requests in flight at once, their sources released in a random order, under mappings that
    # change as requests finish: outputs, precedence, the budget and the FIFO hold for every request
    release = {x: threading.Event() for x in order}

    def src(x: int) -> int:
        wait_for(release[x], f"request {x} released")
        return x + 1

    def tool(name: str) -> Any:
        return hs.function_tool(name, lambda x: 2 * x, lambda x: 2 * x, cpu_ms=20, gpu_ms=2, vram_mb=600)

    wf = (hs.Workflow("random", mode="three_way", vram_budget_mb=budget)
          .node("src", hs.function_tool("src", src)).node("L", tool("left"), after="src")
          .node("R", tool("right"), after="src")
          .node("join", hs.function_tool("add", lambda a, b: a + b), after=["L", "R"]))
    sc = wf.scenario()
    feasible = [m for m in mappings if sc.infeasibility(Mapping(m)) is None] or [dict.fromkeys(sc.workflow.node_ids, "cpu")]
    with hs.Session(wf, policy=ScriptPolicy(feasible), store=False,
                    executor_options={**STANDIN, "device_threads": 2}) as s:
        ex = s.executor
        assert isinstance(ex, InProcessExecutor)
        clients = Clients(s)
        for x in order:
            clients.submit(x)
        for x in order:
            release[x].set()
        clients.join()
        assert not clients.errors, clients.errors
        assert {x: r.outputs for x, r in clients.responses.items()} == {x: {"join": 4 * (x + 1)} for x in order}
        assert sorted(r.round for r in s.rounds) == list(range(len(order)))
        for r in clients.responses.values():
            n = r.trace.nodes
            for e in wf.scenario().workflow.edges:
                assert n[e.dst].start_ms >= n[e.src].end_ms - 1e-6  # precedence
            assert all(p.used_mb <= budget + 1e-6 for p in r.trace.vram_timeline)
        assert ex.vram_peak_mb <= budget + 1e-6
        enq = [(rid, node) for e, rid, node in ex.fifo_log if e == "enqueue"]
        adm = [(rid, node) for e, rid, node in ex.fifo_log if e == "admit"]
        assert adm == enq  # one FIFO across requests


def test_a_mapping_whose_queued_node_needs_a_resident_tools_room_runs_its_requests_alone() -> None:
    # L resident (600) then R queued (600) in 1000 MB: R fits only once L is evicted (the one-request
    # rule), which cannot serve overlapping requests (docs/simulator.md "Infeasible under load"):
    # such requests run one GPU request at a time, each as it would alone
    seq: list[tuple[str, int]] = []
    lock = threading.Lock()

    def rec(name: str) -> Callable[[int], int]:
        def fn(x: int) -> int:
            with lock:
                seq.append((name, x))
            return x

        return fn

    wf = (hs.Workflow("alone", mode="three_way", vram_budget_mb=1000.0)
          .node("L", hs.function_tool("l", rec("L"), rec("L"), cpu_ms=50, gpu_ms=1, vram_mb=600))
          .node("R", hs.function_tool("r", rec("R"), rec("R"), cpu_ms=50, gpu_ms=1, vram_mb=600), after="L"))
    with hs.Session(wf, policy=ScriptPolicy([{"L": "gpu_now", "R": "gpu_queue"}]), store=False,
                    executor_options={**STANDIN, "device_threads": 4}) as s:
        ex = s.executor
        assert isinstance(ex, InProcessExecutor)
        clients = Clients(s)
        for x in range(4):
            clients.submit(x)
        clients.join()
        assert not clients.errors, clients.errors
        assert {x: r.outputs for x, r in clients.responses.items()} == {x: {"R": x} for x in range(4)}
        assert ex.vram_peak_mb <= 1000.0 + 1e-6
    for i in range(0, len(seq), 2):  # one request at a time: each L call is followed by its own R
        assert seq[i][0] == "L" and seq[i + 1] == ("R", seq[i][1])


def test_idle_exploration_waits_until_no_request_is_in_flight() -> None:
    hold, inside = threading.Event(), threading.Event()

    def src(x: int) -> int:
        if x == 0:
            inside.set()
            wait_for(hold, "request 0 let go")
        return x + 1

    wf = (hs.Workflow("idle", mode="three_way", vram_budget_mb=2000.0)
          .node("src", hs.function_tool("src", src))
          .node("L", hs.function_tool("l", lambda x: 2 * x, lambda x: 2 * x, cpu_ms=20, gpu_ms=2, vram_mb=600),
                after="src"))
    explore = hs.Explore(mode="idle", probes_per_request=2)
    with hs.Session(wf, executor_options=STANDIN, store=False, explore=explore) as s:
        clients = Clients(s)
        clients.submit(0)
        wait_for(inside, "request 0 running")
        assert s.submit(1).outputs == {"L": 4}  # finishes while request 0 is in flight: not idle
        first = s._idle_thread
        assert first is not None
        first.join(timeout=WAIT_S)
        assert s._idle_probes == [] and s.in_flight == 1
        hold.set()
        clients.join()
        assert not clients.errors, clients.errors
        last = s._idle_thread
        assert last is not None and last is not first
        last.join(timeout=WAIT_S)  # nothing in flight now: the probes ran on the last request's inputs
        following = s.submit(2)
        assert following.outputs == {"L": 6} and 0 < following.probes <= 2
