"""hs.Session: real requests as rounds (inputs in, sink outputs out, recorded), the guarantees its
docstring promises (never an infeasible mapping, bounded exploration, typed tool errors, queued
threads, continuation after kill -9), node-by-node driving, and the in-process executor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import ScriptPolicy

import hetsched as hs
from hetsched.model import Infeasibility, InfeasibleKind, Mapping, Placement
from hetsched.store import RunStore

STANDIN = {"device": "standin"}


def double(x: int) -> int:
    return 2 * x


def add(a: int, b: int) -> int:
    return a + b


def gpu_double(x: int) -> int:
    return 2 * x


def diamond(budget: float = 1000.0) -> hs.Workflow:
    """src -> (left, right) -> join: left/right can go on the GPU; the sink adds their outputs."""
    left = hs.function_tool("left", double, gpu_double, cpu_ms=20, gpu_ms=2, vram_mb=600, load_ms=5)
    right = hs.function_tool("right", double, gpu_double, cpu_ms=20, gpu_ms=2, vram_mb=600, load_ms=5)
    return (hs.Workflow("diamond", mode="three_way", vram_budget_mb=budget)
            .node("src", hs.function_tool("inc", lambda x: x + 1, cpu_ms=1))
            .node("L", left, after="src").node("R", right, after="src")
            .node("join", hs.function_tool("add", add, cpu_ms=1), after=["L", "R"]))


def test_submit_runs_a_real_request_and_records_it(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    with hs.Session(diamond(), executor_options=STANDIN, store=store, name="svc") as s:
        for x in range(4):
            resp = s.submit(x)
            assert resp.outputs == {"join": 4 * (x + 1)}  # inputs reached the source, the sink's output came back
            assert resp.round == x and resp.trace.feasible and resp.e2e_ms is not None
            assert set(resp.trace.nodes) == {"src", "L", "R", "join"}
        run_id = s.run_id
    with RunStore(store) as st:
        rounds = st.rounds(run_id or "")
    assert [r.round for r in rounds] == [0, 1, 2, 3]
    assert all(r.trace.feasible for r in rounds)


def test_no_request_runs_an_infeasible_mapping() -> None:
    # both GPU tools resident need 1200 MB of a 1000 MB budget: all-gpu cannot run
    with hs.Session(diamond(1000), policy="all-gpu", executor_options=STANDIN, store=False) as s:
        resp = s.submit(1)
        assert resp.outputs == {"join": 8}
        assert resp.fallback and "cannot run" in resp.fallback
        assert s.scenario.infeasibility(resp.mapping) is None
        for _ in range(3):
            assert s.submit(2).trace.feasible


def test_a_tool_that_raises_fails_that_request_only(tmp_path: Path) -> None:
    def boom(x: int) -> int:
        if x < 0:
            raise ValueError(f"negative input {x}")
        return x

    wf = hs.Workflow("fragile").node("A", hs.function_tool("boom", boom)).node(
        "B", hs.function_tool("dbl", double), after="A")
    with hs.Session(wf, store=tmp_path / "s.sqlite", executor_options=STANDIN) as s:
        with pytest.raises(hs.ToolError) as info:
            s.submit(-1)
        err = info.value
        assert err.node == "A" and err.tool == "boom" and isinstance(err.__cause__, ValueError)
        assert err.round == 0 and err.trace is not None and err.trace.kind is InfeasibleKind.TOOL_ERROR
        assert "negative input -1" in err.trace.reason
        assert s.submit(5).outputs == {"B": 10}  # the session goes on
        run_id = s.run_id
    with RunStore(tmp_path / "s.sqlite") as st:
        rounds = st.rounds(run_id or "")
    assert [r.trace.feasible for r in rounds] == [False, True]
    assert rounds[0].trace.kind is InfeasibleKind.TOOL_ERROR


def test_max_in_flight_1_queues_threads_one_request_at_a_time() -> None:
    active = [0]
    peak = [0]
    lock = threading.Lock()

    def enter(x: int) -> int:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.002)
        return x

    def leave(x: int) -> int:
        with lock:
            active[0] -= 1
        return x

    wf = hs.Workflow("q").node("A", hs.function_tool("enter", enter)).node(
        "B", hs.function_tool("leave", leave), after="A")
    results: list[hs.Response] = []
    with hs.Session(wf, store=False, executor_options=STANDIN, max_in_flight=1) as s:
        def client(i: int) -> None:
            results.append(s.submit(i))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(r.round for r in results) == list(range(8))
        assert sorted(r.outputs["B"] for r in results) == list(range(8))  # each caller got its own output
        assert len(s.rounds) == 8
    assert peak[0] == 1  # never two requests in flight at once


def test_exploration_is_off_by_default_and_bounded_when_sampled() -> None:
    with hs.Session(diamond(2000), executor_options=STANDIN, store=False) as s:
        for x in range(3):
            assert s.submit(x).probes == 0
        assert all(not r.probes for r in s.rounds)
    explore = hs.Explore(mode="sampled", share=1.0, probes_per_request=2)
    with hs.Session(diamond(2000), executor_options=STANDIN, store=False, explore=explore) as s:
        responses = [s.submit(x) for x in range(3)]
        assert all(r.probes <= 2 for r in responses)
        assert any(r.probes > 0 for r in responses)
        assert all((r.probe_ms > 0) == (r.probes > 0) for r in responses)
        for r in s.rounds:  # no probe ran a mapping the static check refuses
            assert all(p.trace.feasible or p.trace.kind is not InfeasibleKind.OOM for p in r.probes)
    with pytest.raises(hs.InputError, match="explore mode 'sometimes'"):
        hs.Explore(mode="sometimes")


def test_node_by_node_driving_records_one_round() -> None:
    with hs.Session(diamond(700), policy="all-gpu", executor_options=STANDIN, store=False) as s:
        with s.begin_request() as req:
            a = req.run_node("src", [1])
            outs: dict[str, int] = {}

            def branch(node: str) -> None:
                outs[node] = req.run_node(node, [a])

            threads = [threading.Thread(target=branch, args=(n,)) for n in ("L", "R")]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            req.run_node("join", [outs["L"], outs["R"]])
            with pytest.raises(hs.InputError, match="not in workflow"):
                req.run_node("nope", [])
        rec = s.rounds[-1]
        assert rec.trace.feasible and set(rec.trace.nodes) == {"src", "L", "R", "join"}
        # the guard replaced all-gpu (1200 MB resident > 700 MB); queued nodes never overlap above the budget
        assert max(p.used_mb for p in rec.trace.vram_timeline) <= 700


def test_gpu_queue_admission_is_fifo_under_the_budget() -> None:
    wf = diamond(700)
    sc = wf.scenario()
    from hetsched.exec.inproc import InProcessExecutor
    from hetsched.model import Mapping

    m = Mapping({"src": Placement.CPU, "L": Placement.GPU_QUEUE, "R": Placement.GPU_QUEUE, "join": Placement.CPU})
    with InProcessExecutor(sc, tools=wf.implementations, device="standin") as ex:
        result = ex.run_request(m, {"src": 3})
    assert result.outputs == {"join": 16}
    t = result.trace
    left, right = t.nodes["L"], t.nodes["R"]
    first, second = sorted((left, right), key=lambda n: n.admitted_ms)
    assert second.admitted_ms >= first.end_ms  # 600 + 600 > 700: the second waited for the first
    assert max(p.used_mb for p in t.vram_timeline) <= 700


def test_resume_restores_every_loop_setting(tmp_path: Path) -> None:
    from hetsched.loop import continue_run

    config = hs.LoopConfig(rounds=6, seed=5, stop_after=0, max_probes_per_round=1)
    changed = {f.name for f in fields(hs.LoopConfig) if getattr(config, f.name) != f.default}
    assert changed == {f.name for f in fields(hs.LoopConfig)} - {"stop_after"}  # non-defaults, or not tested
    key = hs.RunKey(hs.load_scenario("vram_3way"), "agentic", {"decider": "rules"}, config=config)
    with RunStore(tmp_path / "r.sqlite") as st:
        run_id = st.create_run(key)
        stored = st.key(run_id)
        assert stored.config == config  # every field, a future one included
        result = continue_run(st, run_id)
    assert all(len(r.probes) <= 1 for r in result.rounds)


def test_a_new_process_continues_the_session_after_kill_9(tmp_path: Path) -> None:
    store = tmp_path / "svc.sqlite"
    script = tmp_path / "svc.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        import hetsched as hs

        def inc(x):
            return x + 1

        wf = hs.Workflow("svc").node("A", hs.function_tool("inc", inc))
        s = hs.Session(wf, store={str(store)!r}, name="svc", executor_options={{"device": "standin"}})
        for x in range(3):
            s.submit(x)
        print("ready", s.run_id, flush=True)
        time.sleep(600)
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("ready"), line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    run_id = line.split()[1]

    def inc(x: int) -> int:
        return x + 1

    wf = hs.Workflow("svc").node("A", hs.function_tool("inc", inc))
    with hs.Session(wf, store=store, name="svc", executor_options=STANDIN) as s:
        assert s.run_id == run_id and len(s.rounds) == 3
        assert s.submit(10).round == 3


def test_in_process_failure_kinds() -> None:
    class OutOfMemoryError(RuntimeError):
        pass

    def oom(x: int) -> int:
        raise OutOfMemoryError("CUDA out of memory")

    wf = hs.Workflow("oom").node("A", hs.function_tool("big", double, oom, vram_mb=10))
    with hs.Session(wf, policy="all-gpu", store=False, executor_options=STANDIN) as s, \
            pytest.raises(hs.ToolError) as info:
        s.submit(1)
    assert info.value.trace is not None and info.value.trace.kind is InfeasibleKind.OOM
    assert Infeasibility(InfeasibleKind.OOM, "x").kind.label == "OOM"


def test_a_gpu_now_node_called_concurrently_and_again_in_one_request() -> None:
    # a LangGraph Send fan-out runs N copies of one node at once; a loop runs it again after that
    loads: list[str] = []

    def load(device: hs.Device) -> int:
        loads.append(device.label)
        return 3

    spec = hs.function_tool("mul", lambda m, x: m * x, lambda m, x: m * x, load=load, cpu_ms=50, gpu_ms=1,
                            vram_mb=100)
    wf = hs.Workflow("fan").node("A", spec)
    with hs.Session(wf, policy="all-gpu", store=False, executor_options=STANDIN) as s:
        with s.begin_request() as req:
            assert req.mapping["A"] is Placement.GPU_NOW
            results: list[int] = []
            threads = [threading.Thread(target=lambda i=i: results.append(req.run_node("A", [i]))) for i in range(5)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(results) == [0, 3, 6, 9, 12]
            assert req.run_node("A", [10]) == 30  # after all its nodes ran: still resident, nothing needed its VRAM
        rec = s.rounds[-1]
        assert rec.trace.feasible and set(rec.trace.nodes) == {"A"}
        assert loads.count("standin") == 1




_PLACEMENTS = st.sampled_from(["cpu", "gpu_now", "gpu_queue"])


def counting_tool(name: str, events: list[tuple[str, str]]) -> Any:
    """A 600 MB GPU-capable function tool that logs each device load and unload into ``events``."""
    def load(device: hs.Device) -> str:
        if device.label != "cpu":  # the device loads only (CPU handles are loaded once and kept)
            events.append(("load", name))
        return device.label

    def unload(handle: str) -> None:
        if handle != "cpu":
            events.append(("unload", name))

    return hs.function_tool(name, lambda h, x: 2 * x, lambda h, x: 2 * x, cpu_ms=20, gpu_ms=2, vram_mb=600,
                            load=load, unload=unload)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.fixed_dictionaries({"src": st.just("cpu"), "L": _PLACEMENTS, "R": _PLACEMENTS,
                                       "join": st.just("cpu")}), min_size=1, max_size=6))
def test_gpu_now_tools_stay_resident_across_requests_while_the_mapping_keeps_them(
        mappings: list[dict[str, str]]) -> None:
    # a serving session: a gpu_now tool is loaded once and kept while the next request keeps it
    # gpu_now, unloaded when a mapping moves it off (before that request runs) and on close
    events: list[tuple[str, str]] = []

    def spec(name: str) -> Any:
        return counting_tool(name, events)

    wf = (hs.Workflow("resident", mode="three_way", vram_budget_mb=1000.0)
          .node("src", hs.function_tool("inc", lambda x: x + 1, cpu_ms=1))
          .node("L", spec("left"), after="src").node("R", spec("right"), after="src")
          .node("join", hs.function_tool("add", add, cpu_ms=1), after=["L", "R"]))
    held: set[str] = set()  # the gpu_now tools resident between requests
    stretches = 0  # loads a resident tool needs: one per stretch of requests keeping it gpu_now (no eviction)
    mappings = [m for m in mappings if wf.scenario().infeasibility(Mapping(m)) is None]
    with hs.Session(wf, policy=ScriptPolicy(mappings or [{}]), store=False, executor_options=STANDIN) as s:
        for x, m in enumerate(mappings):
            now = {"left" if n == "L" else "right" for n in ("L", "R") if m[n] == "gpu_now"}
            queued = sum(m[n] == "gpu_queue" for n in ("L", "R"))
            before = len(events)
            resp = s.submit(x)
            assert resp.mapping == Mapping(m) and resp.outputs == {"join": 4 * (x + 1)}
            mine = events[before:]
            after = set(s.executor.resident)  # type: ignore[attr-defined]
            evicted = now - after  # made room for a queued node once their nodes had run
            assert after <= now
            loads = [t for e, t in mine if e == "load"]
            assert len(loads) == len(now - held) + queued  # resident ones were not loaded again
            assert len(mine) - len(loads) == len(held - now) + queued + len(evicted)
            first_load = next((i for i, (e, _) in enumerate(mine) if e == "load"), len(mine))
            assert all(mine.index(("unload", t)) < first_load for t in held - now)  # moved off gpu_now: unloaded before anything loads
            # VRAM never over the budget: the recorded timeline counts the resident tools
            assert resp.trace.vram_timeline[0].used_mb == pytest.approx(600.0 * len(now))
            assert all(p.used_mb <= 1000.0 + 1e-6 for p in resp.trace.vram_timeline)
            stretches += len(now - held)
            held = after
        assert len([t for e, t in events if e == "load"]) >= stretches
    assert sorted(t for e, t in events if e == "unload") == sorted(t for e, t in events if e == "load")  # close()
    assert not s.executor.resident  # type: ignore[attr-defined]


def test_the_same_mapping_loads_a_gpu_now_tool_once_and_a_change_unloads_it() -> None:
    events: list[tuple[str, str]] = []

    def load(device: hs.Device) -> str:
        events.append(("load", device.label))
        return device.label

    spec = hs.function_tool("mul", lambda h, x: 3 * x, lambda h, x: 3 * x, load=load,
                            unload=lambda h: events.append(("unload", h)), cpu_ms=50, gpu_ms=1, vram_mb=100)
    wf = hs.Workflow("serve").node("A", spec)
    script = ScriptPolicy([{"A": "gpu_now"}] * 4 + [{"A": "cpu"}])
    with hs.Session(wf, policy=script, store=False, executor_options=STANDIN) as s:
        for x in range(4):
            assert s.submit(x).outputs == {"A": 3 * x}
        assert events == [("load", "standin")]  # one load for four requests under the same mapping
        assert s.submit(5).outputs == {"A": 15}
        assert events == [("load", "standin"), ("unload", "standin"), ("load", "cpu")]  # moved off: unloaded first
    assert events[-1] == ("unload", "cpu")


def test_a_resident_tool_is_evicted_for_a_queued_node_and_reloaded_through_the_fifo() -> None:
    # budget 1000: L resident (600) must leave room for R queued (600) once L's node has run
    events: list[tuple[str, str]] = []

    def spec(name: str) -> Any:
        return counting_tool(name, events)

    wf = (hs.Workflow("evict", mode="three_way", vram_budget_mb=1000.0)
          .node("L", spec("left")).node("R", spec("right"), after="L"))
    m = {"L": "gpu_now", "R": "gpu_queue"}
    with hs.Session(wf, policy=ScriptPolicy([m]), store=False, executor_options=STANDIN) as s:
        for x in range(3):
            resp = s.submit(x)
            assert resp.outputs == {"R": 4 * x}
            assert max(p.used_mb for p in resp.trace.vram_timeline) <= 1000.0 + 1e-6
    assert events.count(("load", "left")) == 3 and events.count(("unload", "left")) == 3
    assert events.index(("unload", "left")) < events.index(("load", "right"))


def test_a_branch_not_taken_leaves_the_session_deciding() -> None:
    with hs.Session(diamond(2000), executor_options=STANDIN, store=False) as s:
        with s.begin_request() as req:  # R is never run (a conditional branch not taken)
            a = req.run_node("src", [1])
            left = req.run_node("L", [a])
            req.run_node("join", [left, 0])
        assert set(s.rounds[-1].trace.nodes) == {"src", "L", "join"}  # recorded as it ran
        assert s.submit(1).outputs == {"join": 8}  # the next decision reads it without error


def test_tools_are_prepared_once_before_their_first_load() -> None:
    from hetsched.exec.inproc import InProcessExecutor
    from hetsched.tools import FunctionTool

    prepared: list[str] = []
    tool = FunctionTool("p", lambda d: "h", lambda h, xs: h, prepare=lambda: prepared.append("p"), has_gpu=False)
    wf = hs.Workflow("prep").node("A", hs.ToolSpec(tool, hs.ToolCard(name="p", cpu_ms=1, has_gpu=False)))
    with InProcessExecutor(wf.scenario(), tools=wf.implementations, device="standin") as ex:
        for _ in range(3):
            assert ex.run(wf.scenario().uniform(Placement.CPU)).feasible
    assert prepared == ["p"]


def test_idle_exploration_runs_between_requests_and_is_reported() -> None:
    explore = hs.Explore(mode="idle", probes_per_request=2)
    with hs.Session(diamond(2000), executor_options=STANDIN, store=False, explore=explore) as s:
        first = s.submit(1)
        assert first.probes == 0 and first.probe_ms == 0.0  # the request itself never pays for probes
        thread = s._idle_thread
        assert thread is not None
        thread.join(timeout=60)  # the session is idle: the probes run now, on the last request's inputs
        second = s.submit(2)
        assert second.outputs == {"join": 12} and second.probe_ms == 0.0
        assert 0 < second.probes <= 2 and len(s.rounds[1].probes) == second.probes
        assert second.waited_ms >= 0.0


def test_inputs_need_the_in_process_executor(tmp_path: Path) -> None:
    with hs.Session(diamond(), executor="sim", store=False) as s:
        assert s.submit(None).outputs == {}  # the simulator runs no tools
    sc = hs.load_scenario("chain")
    from hetsched.sim import Simulator

    class Named(Simulator):
        name = "elsewhere"

    with hs.Session(sc, executor=Named(sc), store=False, policy="all-cpu") as s, \
            pytest.raises(hs.InputError, match="reach the tools with executor='inproc'"):
        s.submit("hello")


def seven(*_: int) -> int:
    return 7


def plus_one(*xs: int) -> int:
    return sum(xs) + 1


def fails_on_seven(*xs: int) -> int:
    if 7 in xs:
        raise RuntimeError("seven is not allowed")
    return 0


def test_a_session_on_the_local_executor(tmp_path: Path) -> None:
    """Worker processes: a request's inputs reach the source, the sinks' outputs come back, and a tool
    that raises fails that request, typed."""
    wf = (hs.Workflow("local_svc").node("A", hs.function_tool("plus_one", plus_one, plus_one, cpu_ms=1, gpu_ms=1))
          .node("B", hs.function_tool("seven", seven, cpu_ms=1), after="A")
          .node("C", hs.function_tool("plus_one_b", plus_one, cpu_ms=1), after="A"))
    with hs.Session(wf, executor="local", executor_options={"device": "standin"}, policy="all-cpu",
                    store=tmp_path / "s.sqlite") as s:
        assert s.submit(3).outputs == {"B": 7, "C": 5}  # 3 -> A: 4 -> C: 5
        assert s.submit(10).outputs == {"B": 7, "C": 12}
        assert s.submit().outputs == {"B": 7, "C": 2}  # no value: the source gets no input
    bad = hs.Workflow("local_bad").node("A", hs.function_tool("seven", seven, cpu_ms=1)).node(
        "B", hs.function_tool("fails_on_seven", fails_on_seven, cpu_ms=1), after="A")
    with hs.Session(bad, executor="local", policy="all-cpu", store=False) as s:
        with pytest.raises(hs.ToolError) as info:
            s.submit()
        assert info.value.trace is not None and info.value.trace.kind is InfeasibleKind.TOOL_ERROR
        assert "seven is not allowed" in info.value.trace.reason and info.value.round == 0


def test_waiting_requests_run_in_arrival_order_one_at_a_time() -> None:
    wf = hs.Workflow("order").node("A", hs.function_tool("dbl", double))
    with hs.Session(wf, store=False, executor_options=STANDIN, max_in_flight=1) as s:
        rounds: dict[int, int] = {}
        held = s.begin_request()  # holds the session's turn: every submit below queues
        held.run_node("A", [0])
        threads = []
        for i in range(5):
            t = threading.Thread(target=lambda i=i: rounds.__setitem__(i, s.submit(i).round))
            t.start()
            threads.append(t)
            deadline = time.monotonic() + 30
            while s._gate.waiting < i + 1:  # thread i is queued before thread i + 1 arrives
                assert time.monotonic() < deadline, "a submit never queued"
                time.sleep(0.001)
        held.finish()
        for t in threads:
            t.join()
    assert rounds == {i: i + 1 for i in range(5)}  # served in the order they arrived


def test_the_driving_thread_reads_the_mapping_and_cannot_nest_requests() -> None:
    with hs.Session(diamond(), store=False, executor_options=STANDIN) as s:
        with s.begin_request() as req:
            assert s.mapping == req.mapping  # no deadlock: this thread holds the turn
            with pytest.raises(hs.InputError, match="finish\\(\\) it first"):
                s.submit(1)
            with pytest.raises(hs.InputError, match="finish\\(\\) it first"):
                s.begin_request()
            a = req.run_node("src", [1])
            req.run_node("join", [req.run_node("L", [a]), req.run_node("R", [a])])
        assert s.submit(1).round == 1
