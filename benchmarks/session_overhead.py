"""What an ``hs.Session`` costs per request and per node over calling the tools directly.

Workflows of trivial function tools (each returns its input: the tools cost ~nothing, so what is
measured is the session), as a chain and as a fan-out (one source, N-2 parallel nodes, one
join), of N nodes. Per request, median over ``--requests`` requests after 5 warm-up requests:

- ``direct``: the same functions called in topological order in a plain loop;
- ``session``: ``Session(executor="inproc", policy="all-cpu", store=False).submit(x)`` (the
  in-process executor: threads, trace, the static check);
- ``+ store``: the same, recording every request in a SQLite run store;
- ``+ agentic``: the agentic policy (rules decider) deciding every request, with the store.

Overhead per node = (session - direct) / N.

Run: python benchmarks/session_overhead.py [--requests 200] [--sizes 1,4,16] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hetsched as hs


def ident(*xs: Any) -> Any:
    return xs[0] if xs else None


def workflow(shape: str, n: int) -> hs.Workflow:
    tool = hs.function_tool("ident", ident, cpu_ms=0.01)
    wf = hs.Workflow(f"{shape}{n}")
    if shape == "chain" or n < 3:
        for i in range(n):
            wf.node(f"N{i}", tool, after=[f"N{i - 1}"] if i else [])
    else:
        wf.node("src", tool)
        for i in range(n - 2):
            wf.node(f"B{i}", tool, after="src")
        wf.node("join", tool, after=[f"B{i}" for i in range(n - 2)])
    return wf


def direct(sc: hs.Scenario) -> Callable[[Any], Any]:
    order = sc.workflow.topo_order
    preds = {n: sc.workflow.preds(n) for n in order}

    def call(x: Any) -> Any:
        out: dict[str, Any] = {}
        for n in order:
            out[n] = ident(*(out[p] for p in preds[n])) if preds[n] else ident(x)
        return out[order[-1]]

    return call


def median_ms(fn: Callable[[Any], Any], requests: int) -> float:
    for i in range(5):
        fn(i)
    times = []
    for i in range(requests):
        t = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t) * 1000.0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    for shape in ("chain", "fanout"):
        for n in (int(x) for x in args.sizes.split(",")):
            if shape == "fanout" and n < 3:
                continue
            wf = workflow(shape, n)
            sc = wf.scenario()
            base = median_ms(direct(sc), args.requests)
            cells = [f"{shape} n={n}", f"{base:.4f}"]
            with tempfile.TemporaryDirectory() as tmp:
                variants: list[tuple[str, dict[str, Any]]] = [
                    ("session", {"policy": "all-cpu", "store": False}),
                    ("+ store", {"policy": "all-cpu", "store": Path(tmp) / "a.sqlite"}),
                    ("+ agentic", {"policy": "agentic", "store": Path(tmp) / "b.sqlite"}),
                ]
                for _, kw in variants:
                    with hs.Session(wf, executor_options={"device": "standin"}, **kw) as s:
                        ms = median_ms(s.submit, args.requests)
                    cells += [f"{ms:.3f}", f"{(ms - base) / n:.3f}"]
            rows.append(cells)
            print(" | ".join(cells), flush=True)
    head = ("| workflow | direct ms | session ms | per node | + store ms | per node | + agentic ms | per node |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
               f"Python {platform.python_version()}")
    text = (f"Session overhead per request (median of {args.requests}; {machine})\n\n{head}\n"
            + "\n".join("| " + " | ".join(r) + " |" for r in rows))
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
