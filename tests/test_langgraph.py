"""The LangGraph adapter (hetsched.integrations.langgraph) against real LangGraph: reading compiled
graphs through LangGraph's graph API, refusing what it cannot schedule, and serving requests
through a session while LangGraph drives them."""

from __future__ import annotations

import operator
import time
from typing import Annotated, Any, Literal, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph", reason="LangGraph is not installed: pip install -e '.[langgraph]'")

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from hetsched.integrations import langgraph as hlg
from hetsched.model import HetschedError, InputError


class State(TypedDict, total=False):
    text: str
    items: list[str]
    out: Annotated[list[Any], operator.add]


def _noop(state: State) -> dict[str, Any]:
    return {}


def _tool_node(builder: StateGraph, name: str, tool: str = "text_chunker") -> None:
    builder.add_node(name, hlg.node(reads=(), writes="out"), metadata=hlg.tool(tool))


def _route(state: State) -> Literal["b", "c"]:
    return "b"


def _fan(state: State) -> list[Send]:
    return [Send("work", {"text": t}) for t in state.get("items", [])]


# ---------------------------------------------------------------------------- reading
def test_reads_nodes_tools_and_fan_out_edges() -> None:
    b = StateGraph(State)
    for n, t in [("a", "pdf_parse"), ("b", "bert_base"), ("c", "e5_large"), ("d", "llama_1b")]:
        _tool_node(b, n, t)
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("a", "c")
    b.add_edge(["b", "c"], "d")
    b.add_edge("d", END)
    shape = hlg.read_graph(b.compile())
    assert shape.tools == {"a": "pdf_parse", "b": "bert_base", "c": "e5_large", "d": "llama_1b"}
    assert set(shape.edges) == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}
    assert shape.plain == () and shape.folded == () and shape.conditional == ()
    assert shape.preds("d") == ["b", "c"]


def test_precedence_is_carried_through_plain_nodes() -> None:
    b = StateGraph(State)
    _tool_node(b, "a")
    b.add_node("glue", _noop)  # no metadata: LangGraph runs it as it is
    _tool_node(b, "z")
    b.add_edge(START, "a")
    b.add_edge("a", "glue")
    b.add_edge("glue", "z")
    shape = hlg.read_graph(b.compile())
    assert shape.edges == (("a", "z"),)
    assert shape.plain == ("glue",)


def test_declared_conditional_edges_and_send_targets_are_edges() -> None:
    b = StateGraph(State)
    for n in ("a", "b", "c", "work"):
        _tool_node(b, n)
    b.add_edge(START, "a")
    b.add_conditional_edges("a", _route)  # declared by its Literal annotation
    b.add_conditional_edges("b", _fan, ["work"])  # Send targets declared by the path_map
    b.add_edge("c", END)
    b.add_edge("work", END)
    shape = hlg.read_graph(b.compile())
    assert set(shape.edges) == {("a", "b"), ("a", "c"), ("b", "work")}
    assert set(shape.conditional) == set(shape.edges)


def test_undeclared_conditional_edge_is_refused_naming_the_node() -> None:
    b = StateGraph(State)
    _tool_node(b, "a")
    _tool_node(b, "b")
    b.add_edge(START, "a")
    b.add_conditional_edges("a", lambda s: "b")
    with pytest.raises(InputError, match=r"node 'a'.*does not declare its targets.*Literal"):
        hlg.read_graph(b.compile())


def _loop_graph() -> Any:
    b = StateGraph(State)
    for n in ("plan", "act", "check", "answer"):
        _tool_node(b, n)
    b.add_edge(START, "plan")
    b.add_edge("plan", "act")
    b.add_edge("act", "check")

    def again(state: State) -> Literal["act", "answer"]:
        return "answer"

    b.add_conditional_edges("check", again)
    b.add_edge("answer", END)
    return b.compile()


def test_loops_are_refused_naming_the_cycle_unless_folded() -> None:
    g = _loop_graph()
    with pytest.raises(InputError, match=r"act -> check -> act form a loop.*loops='fold'"):
        hlg.read_graph(g)
    shape = hlg.read_graph(g, loops="fold")
    assert shape.folded == (("check", "act"),)
    assert set(shape.edges) == {("plan", "act"), ("act", "check"), ("check", "answer")}
    assert list(shape.tools) == ["plan", "act", "check", "answer"]  # topological


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ({"hetsched": 3}, r"node 'a'.*must be a mapping"),
        ({"hetsched": {"tool": ""}}, r"node 'a'.*must name a hetsched tool"),
        ({"hetsched": {"tool": "x", "gpu": True}}, r"node 'a'.*unknown keys \['gpu'\]"),
    ],
)
def test_malformed_metadata_is_refused_naming_the_node(metadata: dict[str, Any], match: str) -> None:
    b = StateGraph(State)
    b.add_node("a", hlg.node(writes="out"), metadata=metadata)
    b.add_edge(START, "a")
    with pytest.raises(InputError, match=match):
        hlg.read_graph(b.compile())


def test_a_node_with_metadata_but_a_plain_function_is_refused() -> None:
    b = StateGraph(State)
    b.add_node("a", _noop, metadata=hlg.tool("bert_base"))  # would never call its tool
    b.add_edge(START, "a")
    with pytest.raises(InputError, match=r"node 'a' names hetsched tool 'bert_base'.*node\(fn\)"):
        hlg.read_graph(b.compile())


def test_graph_without_hetsched_nodes_or_not_a_graph_is_refused() -> None:
    b = StateGraph(State)
    b.add_node("a", _noop)
    b.add_edge(START, "a")
    with pytest.raises(InputError, match="no node with hetsched metadata"):
        hlg.read_graph(b.compile())
    with pytest.raises(InputError, match="expected a compiled LangGraph graph"):
        hlg.read_graph(b)  # the builder, not compiled
    with pytest.raises(InputError, match="loops must be one of"):
        hlg.read_graph(b.compile(), loops="unroll")


def test_a_hetsched_node_invoked_outside_a_request_says_how_to_invoke_it() -> None:
    b = StateGraph(State)
    _tool_node(b, "a")
    b.add_edge(START, "a")
    with pytest.raises(HetschedError, match=r"node 'a' runs a hetsched tool.*ScheduledGraph"):
        b.compile().invoke({"text": "x"})


def test_node_wrapper_arguments_are_checked() -> None:
    with pytest.raises(InputError, match="writes= must name"):
        hlg.node()
    with pytest.raises(InputError, match="either fn, or reads="):
        hlg.node(lambda s, t: {}, writes="x")
    with pytest.raises(InputError, match="non-empty string"):
        hlg.tool("")


@st.composite
def _dags(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]], set[int]]:
    n = draw(st.integers(2, 9))
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if draw(st.booleans())]
    plain = set(draw(st.sets(st.integers(0, n - 1), max_size=n - 1)))
    return n, edges, plain


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dags())
def test_read_edges_are_the_dag_reachability_through_plain_nodes(dag: tuple[int, list[tuple[int, int]], set[int]]) -> None:
    n, edges, plain = dag
    b = StateGraph(State)
    for i in range(n):
        if i in plain:
            b.add_node(f"n{i}", _noop)
        else:
            _tool_node(b, f"n{i}")
    targets = {v for _, v in edges}
    for i in range(n):
        if i not in targets:
            b.add_edge(START, f"n{i}")
    for u, v in edges:
        b.add_edge(f"n{u}", f"n{v}")
    shape = hlg.read_graph(b.compile())
    succ = {i: [v for u, v in edges if u == i] for i in range(n)}
    expected = set()
    for u in range(n):
        if u in plain:
            continue
        todo, seen = list(succ[u]), set()
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in plain:
                todo.extend(succ[v])
            else:
                expected.add((f"n{u}", f"n{v}"))
    assert set(shape.edges) == expected
    assert set(shape.tools) == {f"n{i}" for i in range(n) if i not in plain}
    pos = {node: k for k, node in enumerate(shape.tools)}
    assert all(pos[u] < pos[v] for u, v in shape.edges)  # topological order


# ---------------------------------------------------------------------------- serving requests
hs = pytest.importorskip("hetsched")


def _double(x: Any) -> Any:
    return [v * 2 for v in x] if isinstance(x, list) else x * 2


def _inc(x: Any) -> Any:
    return x + 1


def _add(*xs: Any) -> Any:
    return sum(xs)


def _boom(x: Any) -> Any:
    raise RuntimeError(f"boom on {x!r}")


def _spec(name: str, fn: Any, vram_mb: float = 10.0) -> Any:
    return hs.function_tool(name, cpu=fn, gpu=fn, cpu_ms=2.0, gpu_ms=1.0, load_ms=1.0, vram_mb=vram_mb)


class NumState(TypedDict, total=False):
    x: int
    a: int
    b: int
    c: int
    total: int
    parts: Annotated[list[int], operator.add]
    route: str
    rounds: int


class _Fixed(hs.Policy):
    """Proposes one mapping every request (to drive a chosen placement through the session)."""

    name = "fixed"

    def __init__(self, mapping: dict[str, str]) -> None:
        super().__init__()
        self.fixed = mapping

    def propose(self, history: Any, probes: Any = (), observations: Any = None) -> Any:
        from hetsched.model import Mapping, Proposal

        return Proposal(Mapping(self.fixed), rationale="fixed by the test")


def _diamond() -> Any:
    """a -> (b, c) -> d: the tools double, increment and add."""
    g = StateGraph(NumState)
    g.add_node("a", hlg.node(reads="x", writes="a"), metadata=hlg.tool("double"))
    g.add_node("b", hlg.node(lambda s, tool: {"b": tool(s["a"])}), metadata=hlg.tool("inc"))
    g.add_node("c", hlg.node(lambda s, tool: {"c": tool(s["a"])}), metadata=hlg.tool("inc2"))
    g.add_node("d", hlg.node(lambda s, tool: {"total": tool(s["b"], s["c"])}), metadata=hlg.tool("add"))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("a", "c")
    g.add_edge(["b", "c"], "d")
    g.add_edge("d", END)
    return g.compile()


DIAMOND_TOOLS = [_spec("double", _double), _spec("inc", _inc), _spec("inc2", _inc), _spec("add", _add)]


def test_each_invoke_is_one_round_and_each_node_runs_at_its_placement() -> None:
    placements = {"a": "cpu", "b": "gpu_now", "c": "gpu_queue", "d": "cpu"}
    with hlg.ScheduledGraph(_diamond(), vram_budget_mb=100, tools=DIAMOND_TOOLS, store=False,
                            policy=_Fixed(placements)) as app:
        for x in (1, 5):
            out = app.invoke({"x": x})
            assert out["total"] == 2 * (2 * x + 1)
            r = app.last
            assert r.trace.feasible and set(r.trace.nodes) == {"a", "b", "c", "d"}
            assert {n: nt.placement.value for n, nt in r.trace.nodes.items()} == placements
            assert r.trace.nodes["d"].start_ms >= max(r.trace.nodes["b"].end_ms, r.trace.nodes["c"].end_ms)
        assert [rec.round for rec in app.session.rounds] == [0, 1]


def test_agentic_session_serves_requests_and_keeps_a_feasible_mapping() -> None:
    with hlg.ScheduledGraph(_diamond(), vram_budget_mb=15, tools=DIAMOND_TOOLS, store=False) as app:
        for x in range(4):
            assert app.invoke({"x": x})["total"] == 2 * (2 * x + 1)
            assert app.last.trace.feasible  # 4 tools of 10 MB in 15 MB: never all resident
        assert len(app.session.rounds) == 4
        assert app.session.scenario.infeasibility(app.mapping) is None


def test_gpu_queue_nodes_are_admitted_one_at_a_time_under_the_budget() -> None:
    # b and c run in one LangGraph superstep, both queued, 10 MB each in a 15 MB budget
    with hlg.ScheduledGraph(_diamond(), vram_budget_mb=15, tools=DIAMOND_TOOLS, store=False,
                            policy=_Fixed({"a": "cpu", "b": "gpu_queue", "c": "gpu_queue", "d": "cpu"})) as app:
        app.invoke({"x": 3})
        t = app.last.trace
        first, second = sorted((t.nodes["b"], t.nodes["c"]), key=lambda nt: nt.admitted_ms)
        assert second.admitted_ms >= first.end_ms
        assert t.peak_vram_mb <= 15


def _branchy(route: str) -> Any:
    g = StateGraph(NumState)
    g.add_node("a", hlg.node(reads="x", writes="a"), metadata=hlg.tool("double"))
    g.add_node("b", hlg.node(reads="a", writes="total"), metadata=hlg.tool("inc"))
    g.add_node("c", hlg.node(reads="a", writes="total"), metadata=hlg.tool("inc2"))

    def pick(state: NumState) -> Literal["b", "c"]:
        return "b" if route == "b" else "c"

    g.add_edge(START, "a")
    g.add_conditional_edges("a", pick)
    return g.compile()


def test_a_branch_not_taken_leaves_its_node_out_of_the_trace() -> None:
    with hlg.ScheduledGraph(_branchy("c"), vram_budget_mb=100, tools=DIAMOND_TOOLS[:3], store=False) as app:
        assert set(app.workflow.scenario().workflow.node_ids) == {"a", "b", "c"}
        for _ in range(3):  # the policy sees rounds with a node absent
            assert app.invoke({"x": 4})["total"] == 9
            assert set(app.last.trace.nodes) == {"a", "c"}


def _fan_out(width: int) -> Any:
    g = StateGraph(NumState)
    g.add_node("plan", hlg.node(reads="x", writes="a"), metadata=hlg.tool("double"))
    g.add_node("work", hlg.node(lambda s, tool: {"parts": [tool(s["x"])]}), metadata=hlg.tool("inc"))

    def spread(state: NumState) -> list[Send]:
        return [Send("work", {"x": state["a"] + i}) for i in range(width)]

    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", spread, ["work"])
    g.add_edge("work", END)
    return g.compile()


@pytest.mark.parametrize("placement", ["cpu", "gpu_now", "gpu_queue"])
def test_send_fan_out_runs_one_node_several_times_in_one_request(placement: str) -> None:
    with hlg.ScheduledGraph(_fan_out(4), vram_budget_mb=100, tools=DIAMOND_TOOLS[:2], store=False,
                            policy=_Fixed({"plan": "cpu", "work": placement})) as app:
        for _ in range(2):
            out = app.invoke({"x": 1})
            assert sorted(out["parts"]) == [3, 4, 5, 6]
            t = app.last.trace
            assert t.feasible and set(t.nodes) == {"plan", "work"}  # one span for the four runs
            assert t.nodes["work"].placement.value == placement


def test_folded_loop_runs_a_node_several_times_in_one_request() -> None:
    g = StateGraph(NumState)
    g.add_node("step", hlg.node(reads="x", writes="x"), metadata=hlg.tool("inc"))
    g.add_node("done", hlg.node(reads="x", writes="total"), metadata=hlg.tool("double"))

    def again(state: NumState) -> Literal["step", "done"]:
        return "step" if state["x"] < 3 else "done"

    g.add_edge(START, "step")
    g.add_conditional_edges("step", again)
    g.add_edge("done", END)
    with hlg.ScheduledGraph(g.compile(), vram_budget_mb=100, tools=DIAMOND_TOOLS[:2], store=False,
                            loops="fold") as app:
        assert app.shape.folded == (("step", "step"),)
        assert app.invoke({"x": 0})["total"] == 6  # step ran three times
        assert set(app.last.trace.nodes) == {"step", "done"}


def test_a_tool_that_raises_fails_its_request_not_the_session() -> None:
    g = StateGraph(NumState)
    g.add_node("a", hlg.node(reads="x", writes="a"), metadata=hlg.tool("boom"))
    g.add_edge(START, "a")
    with hlg.ScheduledGraph(g.compile(), vram_budget_mb=100, tools=[_spec("boom", _boom)], store=False) as app:
        for _ in range(2):
            with pytest.raises(hs.ToolError, match="boom on 7") as info:
                app.invoke({"x": 7})
            assert info.value.node == "a"
        kinds = [rec.trace.kind.value for rec in app.session.rounds if rec.trace.kind is not None]
        assert kinds == ["tool_error", "tool_error"]


def test_concurrent_invokes_each_get_their_own_result_response_and_round() -> None:
    """Invokes from several threads overlap in the session (that they run at once is proved in
    tests/test_session_load.py); each caller gets its own graph result and its own request's response,
    and every request is recorded once, rounds numbered 0..n-1 as they finish."""
    import threading

    results: dict[int, int] = {}
    rounds: dict[int, int] = {}
    with hlg.ScheduledGraph(_diamond(), vram_budget_mb=100, tools=DIAMOND_TOOLS, store=False) as app:

        def client(x: int) -> None:
            out, response = app.invoke_with_response({"x": x})
            results[x], rounds[x] = out["total"], response.round

        threads = [threading.Thread(target=client, args=(x,)) for x in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert results == {x: 2 * (2 * x + 1) for x in range(6)}
        assert sorted(rec.round for rec in app.session.rounds) == list(range(6))
        assert sorted(rounds.values()) == list(range(6))  # each caller got its own request's response


def test_an_ainvoke_cancelled_while_it_waits_for_its_turn_does_not_hang_close() -> None:
    """A real dropped handle: asyncio cancels ainvoke while its begin_request waits (in a thread) for
    the session's one slot; the thread still gets the request, and nobody is left to finish it. The
    session records it as abandoned and closes (a hang is caught by a join limit, never timed)."""
    import asyncio
    import threading

    from hetsched.session import ABANDONED

    hang_s = 120.0
    app = hlg.ScheduledGraph(_diamond(), vram_budget_mb=100, tools=DIAMOND_TOOLS, store=False, max_in_flight=1)
    held = app.session.begin_request(thread_bound=False)  # the slot is taken: ainvoke must wait
    held.run_node("a", [1])
    cancelled = threading.Event()

    async def impatient() -> None:
        with pytest.raises(TimeoutError):  # it can never start while `held` is open
            await asyncio.wait_for(app.ainvoke({"x": 1}), timeout=0.05)
        cancelled.set()

    loop_thread = threading.Thread(target=lambda: asyncio.run(impatient()), daemon=True)
    loop_thread.start()
    assert cancelled.wait(hang_s), "ainvoke was never cancelled"
    held.finish()  # the waiting begin_request now gets the slot, for a caller that has gone
    loop_thread.join(hang_s)
    assert not loop_thread.is_alive()
    closer = threading.Thread(target=app.close, daemon=True)
    closer.start()
    closer.join(hang_s)
    assert not closer.is_alive(), "close() hung on the abandoned request"
    rounds = app.session.rounds
    assert len(rounds) == 2 and ABANDONED in rounds[1].trace.reason


def test_ainvoke_serves_requests_from_asyncio_with_sync_and_async_nodes() -> None:
    import asyncio

    async def add_async(state: NumState, tool: hlg.ToolCall) -> dict[str, Any]:
        return {"total": await tool.acall(state["b"], state["c"])}

    g = StateGraph(NumState)
    g.add_node("a", hlg.node(reads="x", writes="a"), metadata=hlg.tool("double"))
    g.add_node("b", hlg.node(reads="a", writes="b"), metadata=hlg.tool("inc"))
    g.add_node("c", hlg.node(reads="a", writes="c"), metadata=hlg.tool("inc2"))
    g.add_node("d", hlg.node(add_async), metadata=hlg.tool("add"))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("a", "c")
    g.add_edge(["b", "c"], "d")

    async def main(app: hlg.ScheduledGraph) -> list[int]:
        first = [(await app.ainvoke({"x": x}))["total"] for x in range(2)]
        together = await asyncio.gather(*(app.ainvoke_with_response({"x": x}) for x in (5, 6)))
        return first + [out["total"] for out, _ in together]

    with hlg.ScheduledGraph(g.compile(), vram_budget_mb=100, tools=DIAMOND_TOOLS, store=False) as app:
        assert asyncio.run(main(app)) == [2, 6, 22, 26]
        assert len(app.session.rounds) == 4
        assert set(app.session.rounds[-1].trace.nodes) == {"a", "b", "c", "d"}


def test_a_hetsched_node_inside_a_subgraph_is_refused_naming_it() -> None:
    inner = StateGraph(NumState)
    inner.add_node("deep", hlg.node(reads="x", writes="a"), metadata=hlg.tool("double"))
    inner.add_edge(START, "deep")
    outer = StateGraph(NumState)
    outer.add_node("top", hlg.node(reads="x", writes="b"), metadata=hlg.tool("inc"))
    outer.add_node("sub", inner.compile())  # a plain node of the outer graph
    outer.add_edge(START, "top")
    outer.add_edge("top", "sub")
    with hlg.ScheduledGraph(outer.compile(), vram_budget_mb=100, tools=DIAMOND_TOOLS[:2], store=False) as app:
        assert app.shape.plain == ("sub",)
        with pytest.raises(HetschedError, match=r"node 'deep'.*subgraph"):
            app.invoke({"x": 1})


# ---------------------------------------------------------------------------- the example application
def test_the_example_agent_runs_and_reports_its_placement_against_all_gpu(tmp_path: Any) -> None:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    for module in ("torch", "transformers", "faiss"):
        pytest.importorskip(module, reason=f"the example's built-in tools need {module}: pip install -e '.[tools]'")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "HETSCHED_STORE": str(tmp_path / "runs.sqlite")}
    proc = subprocess.run([sys.executable, str(root / "examples" / "langgraph_agent.py"), "--requests", "4",
                           "--compare", "2", "--json"], capture_output=True, text=True, env=env, timeout=900,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    nodes = {"parse", "chunk", "embed", "search", "keywords", "scan", "figures", "rerank", "answer"}
    assert [r["round"] for r in out["requests"]] == [0, 1, 2, 3]
    for text in (out["converged"], out["all_gpu"], *(r["mapping"] for r in out["requests"])):
        assert {pair.split("=")[0] for pair in text.split()} == nodes
    # GPU-first: every GPU-capable tool resident; the CPU-only ones (PDF, chunker, the function tool) on the CPU
    all_gpu = dict(pair.split("=") for pair in out["all_gpu"].split())
    assert {n for n, p in all_gpu.items() if p == "cpu"} == {"parse", "chunk", "keywords"}
    assert len(out["compare"]) == 2 and all(c["converged_ms"] > 0 and c["all_gpu_ms"] > 0 for c in out["compare"])
    assert out["predicted_converged_ms"] > 0 and out["predicted_all_gpu_ms"] > 0  # both feasible on the cards


def test_docs_langgraph_md_example_runs(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    import re
    from pathlib import Path

    monkeypatch.setenv("HETSCHED_STORE", str(tmp_path / "default.sqlite"))
    doc = Path(__file__).resolve().parent.parent / "docs" / "langgraph.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
    assert len(blocks) == 1
    import sys
    import types

    module = types.ModuleType("langgraph_md")  # a real module: LangGraph resolves the state's annotations in it
    monkeypatch.setitem(sys.modules, "langgraph_md", module)
    exec(compile(blocks[0], "langgraph.md", "exec"), module.__dict__)  # the docs' own code
    out = capsys.readouterr().out
    assert out.count("about ") == 2 and "the next request runs under split=cpu" in out


def test_a_node_naming_an_unknown_tool_is_refused_naming_node_and_tool() -> None:
    b = StateGraph(NumState)
    b.add_node("a", hlg.node(reads="x", writes="a"), metadata=hlg.tool("no_such_tool"))
    b.add_edge(START, "a")
    with pytest.raises(InputError, match=r"node 'a' uses tool 'no_such_tool', which has no card"):
        hlg.ScheduledGraph(b.compile(), vram_budget_mb=100, store=False)


def test_a_named_scheduled_graph_continues_its_stored_rounds_when_opened_again(tmp_path: Any) -> None:
    store = tmp_path / "runs.sqlite"
    with hlg.ScheduledGraph(_diamond(), vram_budget_mb=100, tools=DIAMOND_TOOLS, store=store, name="svc") as app:
        for x in range(2):
            app.invoke({"x": x})
        run_id = app.session.run_id
    with hlg.ScheduledGraph(_diamond(), vram_budget_mb=100, tools=DIAMOND_TOOLS, store=store, name="svc") as again:
        assert again.session.run_id == run_id and len(again.session.rounds) == 2
        _, response = again.invoke_with_response({"x": 3})
        assert response.round == 2


def _slow_on_device(x: Any) -> Any:
    time.sleep(0.2)  # the card says 5 ms on the GPU: a measurement must correct it
    return x + 1


def test_a_router_that_always_skips_a_branch_still_teaches_the_policy() -> None:
    # every request skips b: its traces lack b; the policy must still learn from a and c's measured times
    tools = [_spec("double", _double), _spec("inc", _inc),
             hs.function_tool("inc2", cpu=_inc, gpu=_slow_on_device, cpu_ms=20.0, gpu_ms=5.0, load_ms=1.0,
                              vram_mb=10.0)]
    with hlg.ScheduledGraph(_branchy("c"), vram_budget_mb=100, tools=tools, store=False,
                            executor_options={"device": "standin"}) as app:
        first = app.session.mapping
        assert first["c"] is not hs.Placement.CPU  # the cards say the device is 4x faster for c
        for _ in range(4):
            assert app.invoke({"x": 4})["total"] == 9
            assert set(app.last.trace.nodes) == {"a", "c"}
        assert app.session.mapping["c"] is hs.Placement.CPU  # measured 200 ms there: moved off the device
        assert all(r.trace.feasible for r in app.session.rounds)
