"""The workflow DAG: nodes that each invoke one tool, and edges that may carry data.

Part of the model package; imports pydantic, ``model.errors`` and ``model.limits`` only (networkx only
when :attr:`Workflow.graph` is asked for: the order and the DAG check are computed here, so loading a
scenario does not pay networkx's import).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hetsched.model.errors import some
from hetsched.model.limits import MAX_DATA_MB, Name

if TYPE_CHECKING:
    import networkx as nx


def _topological(ids: list[str], pairs: list[tuple[str, str]]) -> tuple[list[str], dict[str, list[str]]]:
    """Kahn's algorithm taking the first ready node in file order: the same order as networkx's
    ``lexicographical_topological_sort`` keyed by file position. The ready nodes are a bit set over
    file positions (a Python int), so the first of them is its lowest set bit. Returns the order
    (shorter than ``ids`` when there is a cycle) and the successors."""
    index = {n: i for i, n in enumerate(ids)}
    succs: dict[str, list[str]] = {n: [] for n in ids}
    indegree = dict.fromkeys(ids, 0)
    for src, dst in pairs:
        succs[src].append(dst)
        indegree[dst] += 1
    ready = 0
    for i, n in enumerate(ids):
        if indegree[n] == 0:
            ready |= 1 << i
    order: list[str] = []
    while ready:
        first = ready & -ready  # the lowest set bit: the ready node first in the file
        ready ^= first
        node = ids[first.bit_length() - 1]
        order.append(node)
        for nxt in succs[node]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready |= 1 << index[nxt]
    return order, succs


def _a_cycle(left: set[str], succs: dict[str, list[str]]) -> list[str]:
    """One cycle among ``left``, the nodes Kahn's algorithm could not order. Each of them still has a
    predecessor in ``left`` (else it would have been ordered), so walking predecessors never stops and
    must repeat a node: the walk from that node on is a cycle, reversed."""
    preds: dict[str, list[str]] = {n: [] for n in left}
    for src in left:
        for dst in succs[src]:
            if dst in left:
                preds[dst].append(src)
    node = min(left)
    seen: dict[str, int] = {}
    path: list[str] = []
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = preds[node][0]
    return path[seen[node]:][::-1]


class Node(BaseModel):
    """One tool invocation in the workflow."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Name
    """Node name, unique in the workflow (the paper uses A, B, C, D)."""
    tool: Name
    """Name of the tool card this node invokes."""


class Edge(BaseModel):
    """A precedence constraint src -> dst, optionally carrying data between devices."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    src: Name
    """Producer node id."""
    dst: Name
    """Consumer node id."""
    data_mb: float = Field(default=0.0, ge=0, le=MAX_DATA_MB, allow_inf_nan=False)
    """Data passed along the edge, MB; costs a PCIe transfer when src and dst sit on different devices."""


class Workflow(BaseModel):
    """A DAG of tool invocations; sinks (nodes without successors) define the E2E latency."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: tuple[Node, ...] = Field(min_length=1)
    """The nodes, in file order."""
    edges: tuple[Edge, ...] = ()
    """The precedence edges."""

    @model_validator(mode="after")
    def _is_dag(self) -> Workflow:
        ids = [n.id for n in self.nodes]
        seen: set[str] = set()
        for node_id in ids:
            if node_id in seen:
                raise ValueError(f"node {node_id!r} is defined twice; node ids must be unique")
            seen.add(node_id)
        pairs: set[tuple[str, str]] = set()
        for e in self.edges:
            for end, value in (("src", e.src), ("dst", e.dst)):
                if value not in seen:
                    raise ValueError(
                        f"edge {e.src}->{e.dst}: {end} {value!r} is not a node; known nodes: [{some(ids)}]"
                    )
            if e.src == e.dst:
                raise ValueError(f"edge {e.src}->{e.dst} is a self-loop; a workflow must be a DAG")
            if (e.src, e.dst) in pairs:
                raise ValueError(f"edge {e.src}->{e.dst} is given twice")
            pairs.add((e.src, e.dst))
        order, succs = _topological(list(ids), [(e.src, e.dst) for e in self.edges])
        if len(order) < len(ids):
            around = _a_cycle(set(ids) - set(order), succs)
            position = {n: i for i, n in enumerate(ids)}
            start = min(range(len(around)), key=lambda i: position[around[i]])  # from its first node in the file
            around = around[start:] + around[:start]
            first = around[0]
            if len(around) > 10:  # name enough of a long cycle to find it, not all of it
                around = [*around[:5], f"... ({len(around) - 6} more)", around[-1]]
            path = " -> ".join([*around, first])
            raise ValueError(f"the workflow has a cycle ({path}); a workflow must be a DAG")
        return self

    @cached_property
    def graph(self) -> nx.DiGraph[str]:
        """The DAG as a networkx graph (edge attribute ``data_mb``)."""
        import networkx as nx

        g: nx.DiGraph[str] = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.id, tool=n.tool)
        for e in self.edges:
            g.add_edge(e.src, e.dst, data_mb=e.data_mb)
        return g

    @cached_property
    def node_ids(self) -> tuple[str, ...]:
        """Node ids in file order."""
        return tuple(n.id for n in self.nodes)

    @cached_property
    def topo_order(self) -> tuple[str, ...]:
        """A deterministic topological order (ties broken by file order)."""
        order, _ = _topological(list(self.node_ids), [(e.src, e.dst) for e in self.edges])
        return tuple(order)

    @cached_property
    def tool_of(self) -> dict[str, str]:
        """node id -> tool name."""
        return {n.id: n.tool for n in self.nodes}

    @cached_property
    def tools(self) -> tuple[str, ...]:
        """Distinct tool names, in first-use order."""
        return tuple(dict.fromkeys(n.tool for n in self.nodes))

    @cached_property
    def adjacency(self) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
        """(predecessors, successors) of every node, in edge file order: one pass over the edges."""
        preds: dict[str, list[str]] = {n: [] for n in self.node_ids}
        succs: dict[str, list[str]] = {n: [] for n in self.node_ids}
        for e in self.edges:
            preds[e.dst].append(e.src)
            succs[e.src].append(e.dst)
        return ({n: tuple(v) for n, v in preds.items()}, {n: tuple(v) for n, v in succs.items()})

    def preds(self, node_id: str) -> tuple[str, ...]:
        """Predecessors of a node, in file order."""
        return self.adjacency[0].get(node_id, ())

    def succs(self, node_id: str) -> tuple[str, ...]:
        """Successors of a node, in file order."""
        return self.adjacency[1].get(node_id, ())

    @cached_property
    def sinks(self) -> tuple[str, ...]:
        """Nodes without successors."""
        has_succ = {e.src for e in self.edges}
        return tuple(n for n in self.node_ids if n not in has_succ)

    @cached_property
    def sources(self) -> tuple[str, ...]:
        """Nodes without predecessors."""
        has_pred = {e.dst for e in self.edges}
        return tuple(n for n in self.node_ids if n not in has_pred)
