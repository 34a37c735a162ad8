"""The in-process executor runs a window of overlapping requests (``run_window``, ``run_workload``)
with the rules of the model under load: requests overlap for real (forced by events), the resident
tool is loaded once before the window and serves every request, queued nodes of every request share
one FIFO under the budget, and a mapping that cannot serve a window is refused before it runs."""

from __future__ import annotations

import threading
from typing import Any

import hetsched as hs
from hetsched.exec.inproc import InProcessExecutor
from hetsched.exec.window import split_id
from hetsched.model import InfeasibleKind, Mapping

WAIT_S = 30.0


def _workflow(first_in: threading.Event, second_in: threading.Event, loads: list[str]) -> hs.Workflow:
    calls = [0]
    lock = threading.Lock()

    def src(*_: Any) -> int:
        with lock:
            calls[0] += 1
            k = calls[0]
        if k == 1:  # the first request waits until the second is running: serialized requests time out
            first_in.set()
            if not second_in.wait(WAIT_S):
                raise TimeoutError("the second request never ran while the first did")
        elif k == 2:
            if not first_in.wait(WAIT_S):
                raise TimeoutError("the first request never ran")
            second_in.set()
        return k

    def load(device: hs.Device) -> str:
        loads.append(device.label)
        return device.label

    emb = hs.function_tool("emb", lambda h, x: x, lambda h, x: x, load=load, cpu_ms=20, gpu_ms=2, vram_mb=400)
    big = hs.function_tool("big", lambda x: x, lambda x: x, cpu_ms=20, gpu_ms=2, vram_mb=500)
    return (hs.Workflow("win", mode="three_way", vram_budget_mb=1000.0)
            .node("S", hs.function_tool("src", src)).node("E", emb, after="S").node("Q", big, after="E"))


def test_a_closed_loop_window_overlaps_shares_the_resident_tool_and_one_fifo() -> None:
    first_in, second_in = threading.Event(), threading.Event()
    loads: list[str] = []
    wf = _workflow(first_in, second_in, loads)
    sc = wf.scenario()
    m = Mapping({"S": "cpu", "E": "gpu_now", "Q": "gpu_queue"})
    with InProcessExecutor(sc, tools=wf.implementations, device="standin", device_threads=2) as ex:
        run = ex.run_window(m, clients=2, count=6)
        assert run.completed and run.count == 6 and len(run.latency_ms) == 6
        assert run.resident_loads == {"emb": 1} and loads.count("standin") == 1  # loaded once, before the window
        assert sorted(split_id(n) for n in run.trace.nodes) == sorted((n, r) for r in range(6) for n in "SEQ")
        for r in range(6):  # precedence within each request; each ends after its release
            nodes = run.request_nodes(r)
            assert nodes["E"].start_ms >= nodes["S"].end_ms - 1e-6 and nodes["Q"].start_ms >= nodes["E"].end_ms - 1e-6
            assert (run.end_ms[r] or 0.0) >= (run.release_ms[r] or 0.0)
        assert len(run.enqueued) == 6  # every queued node went through the one FIFO
        # 400 (resident) + 500 (one queued node) fit, two queued nodes do not: never over the budget
        assert max(p.used_mb for p in run.trace.vram_timeline) <= 1000.0 + 1e-6
        assert ex.vram_peak_mb <= 1000.0 + 1e-6
        admitted = [n for e, _, n in ex.fifo_log if e == "admit"]
        assert len(admitted) == 6


def test_run_workload_gives_the_windows_trace_and_refuses_a_mapping_that_cannot_serve_one() -> None:
    first_in, second_in = threading.Event(), threading.Event()
    wf = _workflow(first_in, second_in, [])
    sc = wf.scenario()
    with InProcessExecutor(sc, tools=wf.implementations, device="standin", device_threads=2) as ex:
        trace = ex.run_workload(Mapping({"S": "cpu", "E": "gpu_now", "Q": "gpu_queue"}),
                                hs.Workload.closed(2, requests=4))
        assert trace.feasible and trace.load is not None and trace.load.requests == 4
        assert len(trace.requests) == 4 and trace.e2e_ms == trace.load.p95_ms
        # 600 + 500 > 1000: the queued node cannot fit beside the resident tool for a whole window
        heavy = hs.Workflow("heavy", mode="three_way", vram_budget_mb=1000.0).node(
            "E", hs.function_tool("e6", lambda x: x, lambda x: x, vram_mb=600)).node(
            "Q", hs.function_tool("q5", lambda x: x, lambda x: x, vram_mb=500), after="E")
    with InProcessExecutor(heavy.scenario(), tools=heavy.implementations, device="standin") as ex2:
        m = Mapping({"E": "gpu_now", "Q": "gpu_queue"})
        refused = ex2.run_workload(m, hs.Workload.closed(2, requests=4))
        assert not refused.feasible and refused.kind is InfeasibleKind.NEVER_ADMISSIBLE
        run = ex2.run_window(m, clients=2, count=4)
        assert not run.completed and run.trace.kind is InfeasibleKind.NEVER_ADMISSIBLE
        assert ex2.resident_loads == {}  # nothing ran


def test_hs_run_under_load_runs_its_windows_on_the_in_process_executor() -> None:
    from hetsched.tools.registry import register_tool

    wf = (hs.Workflow("inproc_load", mode="three_way", vram_budget_mb=1000.0)
          .node("A", hs.function_tool("inproc_load_a", lambda x=0: 1, cpu_ms=5))
          .node("B", hs.function_tool("inproc_load_b", lambda x: x + 1, lambda x: x + 1, cpu_ms=5, gpu_ms=1,
                                      vram_mb=300), after="A"))
    for tool in wf.implementations.values():
        register_tool(tool, replace=True)
    result = hs.run(wf.scenario(), "all-gpu", rounds=2, store=False, reference="none", executor="inproc",
                    executor_options={"device": "standin"}, workload=hs.Workload.closed(3, requests=9))
    for rec in result.rounds:
        tr = rec.trace
        assert tr.feasible and tr.executor == "inproc" and tr.load is not None and tr.load.requests == 9
        assert len(tr.requests) == 9 and tr.load.p95_ms == tr.e2e_ms
        assert all(p.used_mb <= 1000.0 + 1e-6 for p in tr.vram_timeline)


def test_a_window_of_one_request_keeps_the_one_request_rules() -> None:
    # 600 (resident) + 500 (queued) > 1000: cannot serve a window of several requests, but one request
    # runs (the resident tool makes room once its node has run), as it would alone
    wf = hs.Workflow("one", mode="three_way", vram_budget_mb=1000.0).node(
        "E", hs.function_tool("e6b", lambda x=0: 1, lambda x=0: 1, vram_mb=600)).node(
        "Q", hs.function_tool("q5b", lambda x: x + 1, lambda x: x + 1, vram_mb=500), after="E")
    with InProcessExecutor(wf.scenario(), tools=wf.implementations, device="standin") as ex:
        run = ex.run_window(Mapping({"E": "gpu_now", "Q": "gpu_queue"}), releases_ms=[0.0])
        assert run.completed and run.count == 1
        assert max(p.used_mb for p in run.trace.vram_timeline) <= 1000.0 + 1e-6
