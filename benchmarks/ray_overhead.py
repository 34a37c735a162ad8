"""The Ray executor: dispatch overhead per node, and what Ray's queue semantics do to E2E.

1. Dispatch overhead: a no-op DAG of N nodes (a chain, and a fan-out: one source, N-2 parallel
   nodes, one sink), every node on the CPU, through
   - the Ray executor (E2E from Ray's task events, and the whole ``run()`` wall time, which adds
     the warm phase and reading the events back),
   - plain ``@ray.remote`` tasks submitted the same way (object refs as arguments, one
     ``ray.get`` of the sinks), in the same local Ray cluster,
   - the local executor (E2E from its own clocks, and its ``run()`` wall time).
   Reported per node: best of ``--repeat`` rounds divided by N.
2. Queue semantics: two workflows where the order of the ``gpu_queue`` matters, run noise-free
   through the simulator, the local executor and the Ray executor: the order in which queued
   nodes were admitted, the pairs admitted against their ready (FIFO) order, and E2E. The tools
   sleep instead of computing, so compute contention does not blur the admission order.
   - ``backfill``: a large queued node L is ready first but cannot fit beside a resident tool R;
     a small S, ready later, fits. FIFO holds S behind L; Ray admits S at once.
   - ``starve``: the same L, and two chains of small queued nodes that become ready just after
     it. FIFO admits L as soon as R is released; Ray keeps admitting the small ones, which never
     leave room for L until the chains end, and L sits on the critical path (here R is resident
     for 100 ms only, so FIFO admits L early).

Run: python benchmarks/ray_overhead.py [--sizes 10 100 1000] [--repeat 3] [--out FILE]
Needs the [ray] extra. Starts one local Ray cluster (2 CPUs, 1 logical GPU) and stops it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hetsched.exec.devices import cpu_model
from hetsched.exec.local import LocalExecutor
from hetsched.exec.ray import RayExecutor
from hetsched.exec.ray_trace import queue_inversions
from hetsched.model import Edge, Machine, Mapping, Mode, Node, Placement, Scenario, ToolCard, Trace, Workflow
from hetsched.sim import Simulator
from hetsched.tools import Device, FunctionTool, Tool, register_tool

C, G, Q = Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE
MB = 1_000_000


# ---------------------------------------------------------------------------- tools
def noop_load(device: Device) -> dict[str, Any]:
    """Nothing to load."""
    return {}


def noop_run(handle: dict[str, Any], inputs: Sequence[Any]) -> int:
    """Returns at once: what is left is the executor's own cost."""
    return len(inputs)


def plain_noop(*inputs: Any) -> int:
    """The same no-op as a plain Ray task."""
    return len(inputs)


class Sleeper(Tool):
    """Holds ``mem_mb`` of real memory while loaded and sleeps ``ms`` per call (no CPU used)."""

    def __init__(self, name: str, ms: float, mem_mb: float) -> None:
        super().__init__("tiny")
        self.name, self.ms, self.mem_mb = name, ms, mem_mb

    def load(self, device: Device) -> Any:
        return np.ones(int(self.mem_mb * MB) // 8)

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        time.sleep(self.ms / 1000.0)
        return 1


# ---------------------------------------------------------------------------- scenarios
def scenario(name: str, nodes: Sequence[tuple[str, str]], edges: Sequence[tuple[str, str]],
             cards: Sequence[ToolCard], budget_mb: float, cpu_cores: int = 2) -> Scenario:
    return Scenario(name=name, mode=Mode.THREE_WAY, cards={c.name: c for c in cards},
                    workflow=Workflow(nodes=tuple(Node(id=i, tool=t) for i, t in nodes),
                                      edges=tuple(Edge(src=a, dst=b) for a, b in edges)),
                    machine=Machine(cpu_cores=cpu_cores, vram_budget_mb=budget_mb, noise_cv=0.0, gpu_kappa=0.0))


def noop_dag(shape: str, n: int) -> Scenario:
    card = ToolCard(name="noop", cpu_ms=0.01, gpu_ms=0.01, load_ms=0.01, vram_mb=0.01)
    ids = [f"N{i}" for i in range(n)]
    if shape == "chain":
        edges = list(itertools.pairwise(ids))
    else:  # fan: N0 -> N1..N(n-2) -> N(n-1)
        edges = [(ids[0], i) for i in ids[1:-1]] + [(i, ids[-1]) for i in ids[1:-1]]
    return scenario(f"noop-{shape}-{n}", [(i, "noop") for i in ids], edges, [card], budget_mb=100)


def card(name: str, ms: float, vram: float = 0.0, gpu: bool = True) -> ToolCard:
    return ToolCard(name=name, cpu_ms=ms, gpu_ms=ms if gpu else None, load_ms=5.0 if gpu else 0.0,
                    vram_mb=vram if gpu else 0.0, gpu_util=0.05, has_gpu=gpu)


SLEEPERS = {"res": (400, 10), "brief": (100, 10), "large": (100, 25), "small": (100, 10), "prep": (20, 0),
            "tail": (300, 0), "join": (5, 0)}


def fifo_scenarios() -> dict[str, tuple[Scenario, Mapping]]:
    cards = [card(t, ms, mem, gpu=mem > 0) for t, (ms, mem) in SLEEPERS.items()]
    backfill = scenario("backfill", [("R", "res"), ("L", "large"), ("P", "prep"), ("S", "small"), ("T", "tail"),
                                     ("J", "join")],
                        [("P", "S"), ("S", "T"), ("R", "J"), ("L", "J"), ("T", "J")], cards, budget_mb=30)
    m1 = Mapping({"R": G, "L": Q, "P": C, "S": Q, "T": C, "J": C})
    chains = [f"S{i}" for i in range(4)], [f"U{i}" for i in range(4)]
    starve = scenario("starve", [("R", "brief"), ("L", "large"), ("P", "prep"), ("T", "tail"), ("J", "join"),
                                 *[(s, "small") for s in (*chains[0], *chains[1])]],
                      [("L", "T"), ("T", "J"), ("R", "J"), ("P", chains[0][0]), ("P", chains[1][0]),
                       *itertools.pairwise(chains[0]), *itertools.pairwise(chains[1]),
                       (chains[0][-1], "J"), (chains[1][-1], "J")], cards, budget_mb=30)
    m2 = Mapping({n: (G if n == "R" else Q if starve.card_of(n).has_gpu else C) for n in starve.workflow.node_ids})
    return {"backfill": (backfill, m1), "starve": (starve, m2)}


# ---------------------------------------------------------------------------- measurements
def plain_ray_wall_s(sc: Scenario, fn: Any) -> float:
    import ray

    wf = sc.workflow
    t0 = time.perf_counter()
    refs: dict[str, Any] = {}
    for n in wf.topo_order:
        refs[n] = fn.remote(*[refs[p] for p in wf.preds(n)])
    ray.get([refs[s] for s in wf.sinks])
    return time.perf_counter() - t0


def overhead(sizes: Sequence[int], repeat: int) -> list[str]:
    import ray

    register_tool(FunctionTool("noop", noop_load, noop_run, description="returns at once", has_gpu=True),
                  replace=True)
    lines = ["| DAG | nodes | local executor: E2E ms/node | local: run() ms/node | Ray executor: E2E ms/node | "
             "Ray executor: run() ms/node | plain @ray.remote: ms/node | Ray executor E2E / plain |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    rows: list[tuple[str, int, float, float, float, float, float]] = []
    fn = ray.remote(num_cpus=1, max_retries=0)(plain_noop)
    ray.get(fn.remote())
    if True:
        for shape in ("chain", "fan"):
            for n in sizes:
                sc = noop_dag(shape, n)
                m = sc.uniform(C)
                with RayExecutor(sc) as rex:
                    rex.run(m)
                    rays = [(t := time.perf_counter(), rex.run(m), time.perf_counter() - t) for _ in range(repeat)]
                ray_e2e = min(tr.e2e_ms or 0.0 for _, tr, _ in rays) / n
                ray_wall = min(w for _, _, w in rays) * 1000 / n
                plain_noop_wall = min(plain_ray_wall_s(sc, fn) for _ in range(repeat)) * 1000 / n
                with LocalExecutor(sc, cpu_threads=2, device="none") as lex:
                    lex.run(m)
                    locs = [(t := time.perf_counter(), lex.run(m), time.perf_counter() - t) for _ in range(repeat)]
                loc_e2e = min(tr.e2e_ms or 0.0 for _, tr, _ in locs) / n
                loc_wall = min(w for _, _, w in locs) * 1000 / n
                rows.append((shape, n, loc_e2e, loc_wall, ray_e2e, ray_wall, plain_noop_wall))
                print(f"{shape} {n}: local {loc_e2e:.3f}/{loc_wall:.3f}  ray {ray_e2e:.3f}/{ray_wall:.3f}  plain "
                      f"{plain_noop_wall:.3f} ms/node", file=sys.stderr)
    for shape, n, le, lw, re_, rw, pw in rows:
        lines.append(f"| {shape} | {n} | {le:.3f} | {lw:.3f} | {re_:.3f} | {rw:.3f} | {pw:.3f} | {re_ / pw:.2f} |")
    return lines


def admission(trace: Trace) -> str:
    queued = sorted((nt for nt in trace.nodes.values() if nt.placement is Q), key=lambda nt: nt.admitted_ms)
    return " ".join(nt.node for nt in queued)


def register_sleepers() -> None:
    for t, (ms, mem) in SLEEPERS.items():
        register_tool(Sleeper(t, ms, mem), replace=True)


def fifo(repeat: int) -> list[str]:
    lines = ["| workflow | executor | queued nodes in admission order | admitted against FIFO order | E2E ms "
             f"(median of {repeat}) | resident R released after its last node, ms |",
             "|---|---|---|---|---:|---:|"]
    for name, (sc, m) in fifo_scenarios().items():
        sim = Simulator(sc, noise=False).run(m)
        results: dict[str, list[Trace]] = {"simulator (noise-free)": [sim]}
        with LocalExecutor(sc, device="standin", cpu_threads=2) as lex:
            lex.run(m)
            results["local executor"] = [lex.run(m) for _ in range(repeat)]
        lags: list[float] = []
        with RayExecutor(sc) as rex:
            rex.run(m)
            results["Ray executor"] = []
            for _ in range(repeat):
                results["Ray executor"].append(rex.run(m))
                lags += rex.last_release_lag_ms.values()
        for label, traces in results.items():
            ok = [t for t in traces if t.feasible]
            if not ok:
                lines.append(f"| {name} | {label} | - | - | infeasible: {traces[0].reason} | - |")
                continue
            tr = ok[len(ok) // 2]
            inv = queue_inversions(tr.nodes)
            e2e = statistics.median(t.e2e_ms or 0.0 for t in ok)
            lag = statistics.median(lags) if label == "Ray executor" and lags else 0.0
            shown = ", ".join(f"{b} before {a}" for a, b in inv[:4]) + (" ..." if len(inv) > 4 else "") or "none"
            how = f"{lag:.1f}" if label == "Ray executor" else "0 (by construction)"
            lines.append(f"| {name} | {label} | {admission(tr)} | {shown} | {e2e:.0f} | {how} |")
            print(lines[-1], file=sys.stderr)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ray_overhead.md")
    args = ap.parse_args()
    import ray

    out = ["# Ray executor: dispatch overhead and queue semantics (`benchmarks/ray_overhead.py`)", "",
           f"Command: `python benchmarks/ray_overhead.py --sizes {' '.join(map(str, args.sizes))} "
           f"--repeat {args.repeat}`", "",
           f"Machine: {cpu_model()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}, "
           f"Ray {ray.__version__}; a local Ray cluster of 2 CPUs and 1 logical GPU (no real GPU: GPU placements "
           "ran on the stand-in device). Shared machine: other jobs ran.", "",
           "## Dispatch overhead per node (no-op tool, every node on the CPU)", ""]
    t0 = time.monotonic()
    # one local cluster (2 CPUs, 1 logical GPU, vram_mb 30) for every Ray executor below
    register_sleepers()
    with RayExecutor(fifo_scenarios()["backfill"][0], num_cpus=2):
        out += overhead(args.sizes, args.repeat)
        out += ["", "## Queue semantics (sleeping tools, budget 30 MB, resident R 10 MB)", ""]
        out += fifo(args.repeat)
    out += ["", f"Total time: {time.monotonic() - t0:.0f} s"]
    text = "\n".join(out) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
