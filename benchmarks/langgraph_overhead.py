"""What serving a LangGraph graph through hetsched costs per request and per node, over the same
graph whose nodes call the same functions directly.

    python benchmarks/langgraph_overhead.py [--requests 300] [--width 4]

The graph: a source, ``--width`` parallel branches of two nodes each, a sink (2 x width + 2
nodes), every node a no-op function (so the difference is all overhead). Plain: LangGraph's
``invoke`` with the functions called in the nodes. Scheduled: ``ScheduledGraph.invoke`` with the
same functions as hetsched function tools, an all-CPU mapping pinned (no policy work), no run
store (``store=False``) and, separately, a SQLite run store. Requests interleaved; medians.
Needs the [langgraph] extra only.
"""

from __future__ import annotations

import argparse
import operator
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

import hetsched as hs
from hetsched.integrations import langgraph as hlg
from hetsched.model import Proposal


class State(TypedDict, total=False):
    x: Annotated[list[int], operator.add]  # parallel branches write it in one step


def noop(*inputs: Any) -> list[int]:
    return []


class Pinned(hs.Policy):
    name = "pinned"

    def __init__(self, mapping: hs.Mapping) -> None:
        super().__init__()
        self.pinned = mapping

    def propose(self, history: Any, probes: Any = (), observations: Any = None) -> Proposal:
        return Proposal(self.pinned, rationale="pinned")


def _names(width: int) -> tuple[list[str], list[tuple[str, str]]]:
    nodes = ["src", *(f"b{i}{k}" for i in range(width) for k in "ab"), "sink"]
    edges = [("src", f"b{i}a") for i in range(width)] + [(f"b{i}a", f"b{i}b") for i in range(width)]
    edges += [(f"b{i}b", "sink") for i in range(width)]
    return nodes, edges


def _plain_node(state: State) -> dict[str, Any]:
    return {"x": noop()}


def _build(width: int, scheduled: bool) -> Any:
    nodes, edges = _names(width)
    g = StateGraph(State)
    for n in nodes:
        if scheduled:
            g.add_node(n, hlg.node(reads=(), writes="x"), metadata=hlg.tool("noop"))
        else:
            g.add_node(n, _plain_node)
    g.add_edge(START, "src")
    for u, v in edges:
        g.add_edge(u, v)
    g.add_edge("sink", END)
    return g.compile()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--width", type=int, default=4)
    args = ap.parse_args()
    n_nodes = 2 * args.width + 2
    spec = hs.function_tool("noop", cpu=noop, cpu_ms=0.01)
    plain = _build(args.width, scheduled=False)
    with tempfile.TemporaryDirectory() as tmp:
        def serve(store: Any) -> hlg.ScheduledGraph:
            graph = _build(args.width, scheduled=True)
            shape = hlg.read_graph(graph)
            cpu = hs.Mapping(dict.fromkeys(shape.tools, "cpu"))
            return hlg.ScheduledGraph(graph, vram_budget_mb=100, tools=[spec], policy=Pinned(cpu), store=store,
                                      name="overhead" if store else None)

        times: dict[str, list[float]] = {"plain": [], "scheduled, no store": [], "scheduled, SQLite store": []}
        with serve(False) as bare, serve(Path(tmp) / "runs.sqlite") as stored:
            for _ in range(10):  # warm-up
                plain.invoke({"x": []})
                bare.invoke({"x": []})
                stored.invoke({"x": []})
            for _ in range(args.requests):
                for label, fn in (("plain", plain.invoke), ("scheduled, no store", bare.invoke),
                                  ("scheduled, SQLite store", stored.invoke)):
                    t0 = time.perf_counter()
                    fn({"x": []})
                    times[label].append((time.perf_counter() - t0) * 1000)
    base = statistics.median(times["plain"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {load:.1f} at the end; {n_nodes} no-op nodes, {args.requests} requests each")
    print("| how the graph is invoked | median ms per request | overhead ms per request | overhead ms per node |")
    print("|---|---:|---:|---:|")
    for label, values in times.items():
        med = statistics.median(values)
        extra = med - base
        print(f"| {label} | {med:.2f} | {extra:.2f} | {extra / n_nodes:.3f} |")


if __name__ == "__main__":
    main()
