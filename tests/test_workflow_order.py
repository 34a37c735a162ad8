"""The workflow's own topological order and DAG check (no networkx at load time) agree with networkx:
the same order (ties broken by file order) on random DAGs, and a cycle is refused naming one."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.model import Edge, Node, Workflow


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, str]]]:
    n = draw(st.integers(1, 25))
    ids = draw(st.permutations([f"n{i}" for i in range(n)]))
    rank = draw(st.permutations(list(range(n))))  # a hidden order the edges respect
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=60))
    edges = sorted({(ids[a], ids[b]) if rank[a] < rank[b] else (ids[b], ids[a]) for a, b in pairs if a != b})
    return list(ids), edges


@settings(max_examples=200, deadline=None)
@given(dag=dags())
def test_the_order_is_networkx_lexicographical_order_by_file_position(dag: tuple[list[str], list[tuple[str, str]]]
                                                                      ) -> None:
    ids, edges = dag
    wf = Workflow(nodes=tuple(Node(id=i, tool="t") for i in ids), edges=tuple(Edge(src=a, dst=b) for a, b in edges))
    index = {n: i for i, n in enumerate(ids)}
    graph = nx.DiGraph()
    graph.add_nodes_from(ids)
    graph.add_edges_from(edges)
    assert wf.topo_order == tuple(nx.lexicographical_topological_sort(graph, key=index.__getitem__))


def test_a_cycle_is_refused_naming_it() -> None:
    nodes = tuple(Node(id=i, tool="t") for i in "ABCDE")
    edges = tuple(Edge(src=a, dst=b) for a, b in ("AB", "BC", "CD", "DB", "DE"))  # B -> C -> D -> B, E after it
    with pytest.raises(ValueError, match=r"the workflow has a cycle \(B -> C -> D -> B\)"):
        Workflow(nodes=nodes, edges=edges)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_order_holds_on_thousands_of_nodes(seed: int) -> None:
    """The ready set is a bit set over file positions: on 3,000 nodes (a set many machine words
    long) in a shuffled file order the order is still networkx's lexicographical one."""
    import random

    rng = random.Random(seed)
    n = 3000
    rank = list(range(n))
    rng.shuffle(rank)  # file position -> position in a hidden order the edges respect
    pairs = {(a, b) for b in range(n) for a in rng.sample(range(n), 2) if rank[a] < rank[b]}
    ids = [f"n{i}" for i in range(n)]
    edges = sorted((ids[a], ids[b]) for a, b in pairs)
    wf = Workflow(nodes=tuple(Node(id=i, tool="t") for i in ids), edges=tuple(Edge(src=a, dst=b) for a, b in edges))
    graph = nx.DiGraph()
    graph.add_nodes_from(ids)
    graph.add_edges_from(edges)
    index = {v: i for i, v in enumerate(ids)}
    assert wf.topo_order == tuple(nx.lexicographical_topological_sort(graph, key=index.__getitem__))
