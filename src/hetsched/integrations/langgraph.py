"""LangGraph adapter: a compiled LangGraph graph whose nodes name hetsched tools becomes a hetsched
workflow, and each ``invoke``/``ainvoke`` of it is one request (one round) of an online
:class:`hetsched.Session`, while LangGraph's own runtime drives the request.

- **Reading** (:func:`read_graph`, :func:`workflow`): through LangGraph's graph API
  (``compiled.get_graph()``: nodes, their ``metadata`` and runnables, edges, conditional edges;
  the builder's ``branches`` only to refuse conditional edges that do not declare their
  targets). A node takes part when its metadata carries ``{"hetsched": {"tool": NAME}}``
  (``add_node(..., metadata=tool(NAME))``); other nodes are plain LangGraph nodes, run as they
  are, and precedence is carried through them.
- **Wrapping** (:func:`node`): a node built with ``node(fn)`` calls its tool through the
  :class:`ToolCall` it receives; the call runs where the session's current mapping places the node
  (cpu; gpu_now with the model resident; gpu_queue admitted in FIFO order under the VRAM budget),
  by the session's executor (``Request.run_node``).
- **Driving** (:class:`ScheduledGraph`): ``invoke`` opens a session request (which fixes the
  mapping and loads the gpu_now tools), lets LangGraph run the graph, then finishes the request
  (trace recorded, monitor observes, policy proposes the next mapping).

Conditional edges and ``Send`` targets must be declared (a ``path_map`` or a ``Literal`` return
annotation) so the graph API shows them; undeclared ones are refused at reading. Every declared
branch is a precedence edge of the workflow; a branch not taken leaves its nodes out of that
request's trace. A node run several times in one request (``Send`` fan-out) is one workflow node:
each run goes to the node's placement and the trace spans first start to last end. Loops (cycles)
are refused unless ``loops="fold"``, which drops the edges that close them. docs/langgraph.md.

This module translates and applies; it holds no scheduling logic (docs/architecture.md: the
session's policy decides, its executor places). It imports no LangGraph module itself: reading
goes through the compiled graph's own methods, and :func:`node` needs ``langchain_core`` (a
LangGraph dependency, the ``[langgraph]`` extra) for the type LangGraph passes the node's config by.
Imports the model, the tool specs, the workflow builder and the session.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hetsched.builder import Workflow
from hetsched.model import HetschedError, InputError
from hetsched.session import Response, Session
from hetsched.tools.functions import ToolSpec

__all__ = [
    "METADATA_KEY",
    "GraphShape",
    "ScheduledGraph",
    "ToolCall",
    "node",
    "read_graph",
    "tool",
    "workflow",
]

METADATA_KEY = "hetsched"
"""The key of a node's LangGraph metadata that names its tool: ``{"hetsched": {"tool": NAME}}``."""
_SPEC_KEYS = ("tool",)
_START, _END = "__start__", "__end__"  # langgraph.constants.START / END (stable strings)
LOOP_MODES = ("refuse", "fold")
_MARK = "__hetsched_node__"


def tool(name: str) -> dict[str, Any]:
    """The LangGraph node metadata that makes a node run hetsched tool ``name``:
    ``builder.add_node("embed", node(embed), metadata=tool("bert_base"))``."""
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"hetsched tool name must be a non-empty string, got {name!r}")
    return {METADATA_KEY: {"tool": name}}


# ---------------------------------------------------------------------------- reading the graph
@dataclass(frozen=True)
class GraphShape:
    """What hetsched reads from a compiled graph: its scheduled nodes and their precedence."""

    tools: dict[str, str]
    """Scheduled node -> the hetsched tool it runs, in topological order."""
    edges: tuple[tuple[str, str], ...]
    """Precedence between scheduled nodes (static and conditional edges, carried through plain nodes)."""
    plain: tuple[str, ...] = ()
    """Nodes without hetsched metadata: LangGraph runs them as they are, outside the placement."""
    folded: tuple[tuple[str, str], ...] = ()
    """Edges that closed a loop, dropped from the workflow (``loops="fold"``)."""
    conditional: tuple[tuple[str, str], ...] = field(default=())
    """The subset of ``edges`` that come from conditional edges (a branch, or a ``Send`` target)."""

    def preds(self, node_id: str) -> list[str]:
        """The scheduled predecessors of ``node_id``, in edge order."""
        return [u for u, v in self.edges if v == node_id]


def _spec_of(node_id: str, metadata: Any) -> str | None:
    """The tool a node's metadata names, None for a plain node; InputError for a malformed one."""
    if not isinstance(metadata, Mapping) or METADATA_KEY not in metadata:
        return None
    spec = metadata[METADATA_KEY]
    if isinstance(spec, str):
        spec = {"tool": spec}
    if not isinstance(spec, Mapping):
        raise InputError(f"LangGraph node {node_id!r}: metadata[{METADATA_KEY!r}] must be a mapping like "
                         f"{{'tool': 'bert_base'}} (hetsched.integrations.langgraph.tool(NAME)), got {spec!r}")
    unknown = sorted(str(k) for k in spec if k not in _SPEC_KEYS)
    if unknown:
        raise InputError(f"LangGraph node {node_id!r}: metadata[{METADATA_KEY!r}] has unknown keys {unknown}; "
                         f"accepted: {list(_SPEC_KEYS)}")
    name = spec.get("tool")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"LangGraph node {node_id!r}: metadata[{METADATA_KEY!r}]['tool'] must name a hetsched tool "
                         f"(a non-empty string), got {name!r}")
    return name


def _unwrapped(data: Any) -> bool:
    """True when a node's runnable visibly calls a plain function, not one built by :func:`node`
    (False when the runnable does not show its function: it is given the benefit of the doubt)."""
    fn = getattr(data, "func", None) or getattr(data, "afunc", None)
    return inspect.isfunction(fn) and not getattr(fn, _MARK, False)


def _undeclared_branches(graph: Any) -> list[tuple[str, str]]:
    """Conditional edges whose targets LangGraph cannot show (no path_map, no Literal annotation)."""
    builder = getattr(graph, "builder", None)
    branches = getattr(builder, "branches", None)
    if not isinstance(branches, Mapping):
        return []
    out = []
    for source, specs in branches.items():
        if isinstance(specs, Mapping):
            for name, spec in specs.items():
                if getattr(spec, "ends", True) is None:
                    out.append((str(source), str(name)))
    return out


def read_graph(graph: Any, *, loops: str = "refuse") -> GraphShape:
    """Read a compiled LangGraph graph (``StateGraph(...).compile()``) into its scheduled nodes and
    their precedence, through ``graph.get_graph()``.

    Edges between scheduled nodes are carried through plain nodes (a -> plain -> b gives a -> b).
    Raises InputError naming the node for: no scheduled node, malformed metadata, a conditional
    edge whose targets are not declared, and a loop (unless ``loops="fold"``).
    """
    if loops not in LOOP_MODES:
        raise InputError(f"loops must be one of {list(LOOP_MODES)}, got {loops!r}")
    get_graph = getattr(graph, "get_graph", None)
    if not callable(get_graph):
        raise InputError(f"expected a compiled LangGraph graph (StateGraph(...).compile()), got {type(graph).__name__}")
    for source, name in _undeclared_branches(graph):
        raise InputError(
            f"LangGraph node {source!r}: its conditional edge {name!r} does not declare its targets, so hetsched "
            f"cannot see which nodes may follow it; declare them: add_conditional_edges({source!r}, {name}, ['node_a', "
            "'node_b']) or annotate the function's return type with Literal['node_a', 'node_b']")
    g = get_graph()
    order: list[str] = [str(i) for i in g.nodes]
    tools: dict[str, str] = {}
    plain: list[str] = []
    for node_id in order:
        if node_id in (_START, _END):
            continue
        tool_name = _spec_of(node_id, getattr(g.nodes[node_id], "metadata", None))
        if tool_name is None:
            plain.append(node_id)
            continue
        if _unwrapped(getattr(g.nodes[node_id], "data", None)):
            raise InputError(f"LangGraph node {node_id!r} names hetsched tool {tool_name!r} in its metadata, but its "
                             "function does not run the tool: build it with hetsched.integrations.langgraph.node(fn) "
                             "(fn(state, tool) calls tool(*inputs)) or node(reads=..., writes=...)")
        tools[node_id] = tool_name
    if not tools:
        raise InputError("the LangGraph graph has no node with hetsched metadata; mark each node that runs a tool: "
                         "builder.add_node('embed', node(embed), metadata=tool('bert_base'))")
    succ: dict[str, list[tuple[str, bool]]] = {n: [] for n in order}
    for e in g.edges:
        succ.setdefault(str(e.source), []).append((str(e.target), bool(getattr(e, "conditional", False))))
    edges: list[tuple[str, str]] = []
    conditional: set[tuple[str, str]] = set()
    for u in tools:  # successors among scheduled nodes, walking through plain nodes
        seen: set[str] = set()
        todo: deque[tuple[str, bool]] = deque(succ.get(u, []))
        while todo:
            v, cond = todo.popleft()
            if v in seen or v == _END:
                continue
            seen.add(v)
            if v in tools:
                if (u, v) not in edges:
                    edges.append((u, v))
                if cond:
                    conditional.add((u, v))
            else:
                todo.extend((w, cond or c) for w, c in succ.get(v, []))
    ranked = _reach_order(order, succ, tools)
    back = _back_edges(ranked, edges)
    if back and loops == "refuse":
        cycle = _cycle_through(back[0], edges)
        raise InputError(
            f"LangGraph nodes {' -> '.join(cycle)} form a loop (LangGraph may run them several times in one request); "
            "hetsched's workflow is a DAG: pass loops='fold' to keep each node once in the workflow, every run of it "
            "at its placement, the edge that closes the loop dropped (docs/langgraph.md), or remove the loop")
    kept = [e for e in edges if e not in back]
    topo = _topological(ranked, kept)
    return GraphShape(tools={n: tools[n] for n in topo}, edges=tuple(kept), plain=tuple(plain),
                      folded=tuple(back), conditional=tuple(e for e in kept if e in conditional))


def _reach_order(order: list[str], succ: Mapping[str, list[tuple[str, bool]]], tools: Mapping[str, str]) -> list[str]:
    """Scheduled nodes in breadth-first order from the graph's start, the unreachable ones after."""
    seen, ranked = {_START}, []
    todo = deque([_START])
    while todo:
        u = todo.popleft()
        if u in tools:
            ranked.append(u)
        for v, _ in succ.get(u, []):
            if v not in seen:
                seen.add(v)
                todo.append(v)
    return ranked + [n for n in order if n in tools and n not in ranked]


def _back_edges(ranked: list[str], edges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Edges that close a cycle in a depth-first search visiting nodes in ``ranked`` order."""
    out: dict[str, list[str]] = {n: [] for n in ranked}
    for u, v in edges:
        out[u].append(v)
    color: dict[str, int] = {n: 0 for n in ranked}  # 0 new, 1 on the stack, 2 done
    back: list[tuple[str, str]] = []
    for root in ranked:
        if color[root]:
            continue
        color[root] = 1
        stack = [(root, iter(out[root]))]
        while stack:
            u, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[u] = 2
                stack.pop()
                continue
            v = nxt
            if color[v] == 1:
                back.append((u, v))
            elif color[v] == 0:
                color[v] = 1
                stack.append((v, iter(out[v])))
    return back


def _cycle_through(edge: tuple[str, str], edges: list[tuple[str, str]]) -> list[str]:
    """A cycle closed by ``edge`` (u -> v): v ... u -> v, for messages."""
    u, v = edge
    prev: dict[str, str] = {v: v}
    todo = deque([v])
    while todo and u not in prev:
        a = todo.popleft()
        for x, y in edges:
            if x == a and y not in prev:
                prev[y] = a
                todo.append(y)
    path = [u]
    while path[-1] != v and path[-1] in prev:
        path.append(prev[path[-1]])
    return [*reversed(path), v]


def _topological(ranked: list[str], edges: list[tuple[str, str]]) -> list[str]:
    indeg = {n: 0 for n in ranked}
    for _, v in edges:
        indeg[v] += 1
    out: list[str] = []
    ready = [n for n in ranked if indeg[n] == 0]
    while ready:
        n = ready.pop(0)
        out.append(n)
        for u, v in edges:
            if u == n:
                indeg[v] -= 1
                if indeg[v] == 0:
                    ready.append(v)
    return out


def workflow(graph: Any, *, name: str = "langgraph", vram_budget_mb: float, tools: Iterable[Any] = (),
             library: Any = None, mode: str = "three_way", cpu_cores: int | None = None,
             loops: str = "refuse") -> Workflow:
    """The :class:`hetsched.Workflow` of a compiled LangGraph graph (see :func:`read_graph`).

    ``tools``: :class:`hetsched.ToolSpec` objects (``hs.function_tool(...)``) for node tools that are
    not built in; a node's metadata names them by their tool name. ``library``: the tool library the
    other tools' cards come from (a path; default the bundled reference library). ``mode``,
    ``cpu_cores``, ``vram_budget_mb``: the workflow's mode and machine."""
    return _build_workflow(read_graph(graph, loops=loops), name=name, vram_budget_mb=vram_budget_mb, tools=tools,
                           library=library, mode=mode, cpu_cores=cpu_cores)


def _build_workflow(shape: GraphShape, *, name: str, vram_budget_mb: float, tools: Iterable[Any], library: Any,
                    mode: str, cpu_cores: int | None) -> Workflow:
    specs = {_tool_name(t): t for t in tools}
    wf = Workflow(name, vram_budget_mb=vram_budget_mb, tools=library, mode=mode, cpu_cores=cpu_cores)
    for node_id, tool_name in shape.tools.items():
        spec = specs.get(tool_name)
        wf = wf.node(node_id, spec if isinstance(spec, ToolSpec) else tool_name, after=shape.preds(node_id))
    return wf


def _tool_name(spec: Any) -> str:
    inner = getattr(spec, "tool", spec)
    name = getattr(inner, "name", None)
    if not isinstance(name, str):
        raise InputError(f"tools: expected hetsched tool specs (hs.function_tool(...)) or Tool objects, got {spec!r}")
    return name


# ---------------------------------------------------------------------------- the node wrapper
@dataclass(frozen=True)
class _Active:
    """The request an ``invoke`` is serving, seen by the nodes it runs (a context variable)."""

    request: Any
    shape: GraphShape


_ACTIVE: contextvars.ContextVar[_Active | None] = contextvars.ContextVar("hetsched_langgraph_request", default=None)


class ToolCall:
    """A node's tool, as its node function receives it: ``tool(*inputs)`` runs the tool where the
    current mapping places the node and returns its output (``await tool.acall(*inputs)`` in async
    nodes). ``tool.node``, ``tool.tool`` and ``tool.placement`` say what runs where."""

    def __init__(self, node_id: str, active: _Active) -> None:
        self.node = node_id
        self.tool = active.shape.tools[node_id]
        self._request = active.request

    @property
    def placement(self) -> str:
        """Where this request runs the node: ``cpu``, ``gpu_now`` or ``gpu_queue``."""
        return str(self._request.mapping[self.node].value)

    def __call__(self, *inputs: Any) -> Any:
        return self._request.run_node(self.node, list(inputs))

    async def acall(self, *inputs: Any) -> Any:
        """The same call from an async node (the tool runs in a worker thread)."""
        return await asyncio.to_thread(self._request.run_node, self.node, list(inputs))


def _node_id(config: Any) -> str:
    meta = config.get("metadata", {}) if isinstance(config, Mapping) else {}
    node_id = meta.get("langgraph_node") if isinstance(meta, Mapping) else None
    if not isinstance(node_id, str):
        raise HetschedError("a hetsched node ran without LangGraph's node metadata (langgraph_node); build it with "
                            "hetsched.integrations.langgraph.node(...) and run it inside a LangGraph graph")
    return node_id


def _tool_call(config: Any) -> ToolCall:
    node_id = _node_id(config)
    active = _ACTIVE.get()
    if active is None:
        raise HetschedError(f"LangGraph node {node_id!r} runs a hetsched tool, so it runs inside a hetsched request: "
                            "invoke the graph through hetsched.integrations.langgraph.ScheduledGraph(graph, ...)"
                            ".invoke(...) (or ainvoke), not graph.invoke(...) directly")
    if node_id not in active.shape.tools:
        raise HetschedError(f"LangGraph node {node_id!r} is a hetsched node the scheduled graph did not read (it has "
                            f"no metadata {{'{METADATA_KEY}': {{'tool': ...}}}}, or it sits in a subgraph: subgraphs' "
                            "nodes are not scheduled); its graph's scheduled nodes are "
                            f"{sorted(active.shape.tools)}")
    return ToolCall(node_id, active)


def _read(state: Any, key: str, node_id: str) -> Any:
    if isinstance(state, Mapping):
        if key not in state:
            raise InputError(f"LangGraph node {node_id!r} reads state key {key!r}, which the state does not have "
                             f"(keys: {sorted(map(str, state))})")
        return state[key]
    if not hasattr(state, key):
        raise InputError(f"LangGraph node {node_id!r} reads state field {key!r}, which the state does not have")
    return getattr(state, key)


def _config_type() -> Any:
    try:
        from langchain_core.runnables import RunnableConfig
    except ImportError:  # pragma: no cover - the extra is missing
        raise InputError("the LangGraph adapter needs LangGraph: pip install 'hetsched[langgraph]'") from None
    return RunnableConfig


def _as_node(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """Name a wrapper and type its ``config`` parameter as LangGraph expects (it passes the
    RunnableConfig, with the node's metadata, to a parameter so typed)."""
    fn.__name__ = name
    fn.__annotations__ = {"state": Any, "config": _config_type(), "return": Any}
    setattr(fn, _MARK, True)
    return fn


def node(fn: Callable[..., Any] | None = None, *, reads: str | Sequence[str] = (),
         writes: str | None = None) -> Callable[..., Any]:
    """A LangGraph node function that runs its hetsched tool (named by the node's metadata, see
    :func:`tool`) where the session's mapping places it.

    - ``node(fn)``: ``fn(state, tool)`` returns the state update and calls ``tool(*inputs)``
      (:class:`ToolCall`) for the tool's output; an ``async def fn`` awaits ``tool.acall(*inputs)``.
    - ``node(reads=("question",), writes="answer")``: the tool gets the listed state values as its
      inputs and its output becomes ``{"answer": output}``.
    """
    if fn is not None and (reads or writes is not None):
        raise InputError("node(): give either fn, or reads=/writes=, not both")
    if fn is None:
        if not isinstance(writes, str) or not writes:
            raise InputError(f"node(): without fn, writes= must name the state key of the tool's output, got "
                             f"{writes!r}")
        keys = (reads,) if isinstance(reads, str) else tuple(reads)
        out_key = writes

        def run_tool(state: Any, config: Any) -> dict[str, Any]:
            call = _tool_call(config)
            return {out_key: call(*(_read(state, k, call.node) for k in keys))}

        return _as_node(run_tool, f"hetsched_{out_key}")
    if not callable(fn):
        raise InputError(f"node(): fn must be a function (state, tool) -> update, got {fn!r}")
    if inspect.iscoroutinefunction(fn):
        afn = fn

        async def arun(state: Any, config: Any) -> Any:
            return await afn(state, _tool_call(config))

        return _as_node(arun, getattr(fn, "__name__", "hetsched_node"))

    def run(state: Any, config: Any) -> Any:
        return fn(state, _tool_call(config))

    return _as_node(run, getattr(fn, "__name__", "hetsched_node"))


# ---------------------------------------------------------------------------- driving requests
class ScheduledGraph:
    """A compiled LangGraph graph served through a hetsched session: each :meth:`invoke` or
    :meth:`ainvoke` is one request (one round); LangGraph runs the graph, hetsched places each tool.

    Args:
        graph: the compiled graph (``StateGraph(...).compile()``); its hetsched nodes are built with
            :func:`node` and carry :func:`tool` metadata.
        vram_budget_mb: the GPU memory the tools may hold together, MB.
        tools: :class:`hetsched.ToolSpec` objects for the nodes' tools that are not built in.
        library: the tool library the built-in tools' cards come from (a path; default the bundled
            reference library; ``hetsched/data/tools_tiny.yaml`` holds the tiny preset's cards).
        mode, cpu_cores: the workflow's mode (``three_way`` by default) and the machine's CPU cores.
        name: the session's name (and the workflow's): a session opened again with the same name,
            graph, policy and store continues from its stored rounds; None (default): a new run
            each time, the workflow named ``langgraph``.
        loops: ``refuse`` (default) or ``fold`` (see :func:`read_graph`).
        session_options: for ``hs.Session`` (``policy``, ``store``, ``explore``, ``seed``...). The
            session's executor must drive requests node by node (the in-process one, its default).
    """

    def __init__(self, graph: Any, *, vram_budget_mb: float, tools: Sequence[Any] = (), library: Any = None,
                 mode: str = "three_way", cpu_cores: int | None = None, name: str | None = None,
                 loops: str = "refuse", **session_options: Any) -> None:
        self.graph = graph
        """The compiled LangGraph graph."""
        self.shape = read_graph(graph, loops=loops)
        """What was read from it (scheduled nodes and their precedence)."""
        self.workflow = _build_workflow(self.shape, name=name or "langgraph", vram_budget_mb=vram_budget_mb,
                                        tools=tools, library=library, mode=mode, cpu_cores=cpu_cores)
        """The hetsched workflow (``hs.Workflow``) the session schedules."""
        self.session = Session(self.workflow, tools=list(tools), name=name, **session_options)
        """The online session: its mapping, run store and policy."""
        self.last: Response | None = None
        """The last finished request's response (``trace``, ``mapping``, ``round``...); with
        concurrent callers, :meth:`invoke_with_response` gives each its own."""

    @property
    def mapping(self) -> Any:
        """The placement the next request runs under."""
        return self.session.mapping

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        """Serve one request: LangGraph's ``invoke`` inside one session round; returns its result
        (the round's :class:`hetsched.Response` is :attr:`last`)."""
        return self.invoke_with_response(input, config, **kwargs)[0]

    def invoke_with_response(self, input: Any, config: Any = None, **kwargs: Any) -> tuple[Any, Response]:
        """:meth:`invoke`, returning the graph's result and this request's response (its trace,
        mapping and round): what concurrent callers use instead of :attr:`last`."""
        with self.session.begin_request() as req:
            token = _ACTIVE.set(_Active(req, self.shape))
            try:
                result = self.graph.invoke(input, config, **kwargs)
            finally:
                _ACTIVE.reset(token)
            response = self.last = req.finish()
        return result, response

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        """The async form of :meth:`invoke` (waiting for the session's turn happens in a thread)."""
        return (await self.ainvoke_with_response(input, config, **kwargs))[0]

    async def ainvoke_with_response(self, input: Any, config: Any = None, **kwargs: Any) -> tuple[Any, Response]:
        """The async form of :meth:`invoke_with_response`."""
        req = await asyncio.to_thread(self.session.begin_request, thread_bound=False)
        with req:
            token = _ACTIVE.set(_Active(req, self.shape))
            try:
                result = await self.graph.ainvoke(input, config, **kwargs)
            finally:
                _ACTIVE.reset(token)
            response = self.last = await asyncio.to_thread(req.finish)
        return result, response

    def close(self, timeout: float | None = None) -> None:
        """Close the session (releases workers and device memory); ``timeout``: ``Session.close``'s."""
        self.session.close(timeout)

    def __enter__(self) -> ScheduledGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
