"""The simulator under load: how fast it simulates windows of requests, and what the model says
about the single-request optimum at load.

For each scenario and closed-loop client count K (``requests = max(40, 10 K)`` per window), every
mapping that can serve one request is simulated noise-free under the window
(``Simulator.run_workload``). Printed per row: simulated requests per second of wall time (all
mappings), the mapping with the lowest p95 and its p95, and the single-request optimum's p95
(or why it cannot serve the window: under load its ``gpu_queue`` nodes must fit beside every
resident ``gpu_now`` tool, docs/simulator.md "Under load").

Run: python benchmarks/load_sim.py [--scenarios S5 S13 vram_3way] [--clients 1 2 4 8 16]
"""

from __future__ import annotations

import argparse
import platform
import time

from hetsched.model.files import load_scenario
from hetsched.model.workload import Workload
from hetsched.sim import Simulator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="+", default=["S5", "S13", "vram_3way"])
    ap.add_argument("--clients", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print("| scenario | K | requests | mappings | simulated requests/s | best p95 ms (mapping) | "
          "single-request optimum p95 ms | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- | ---: |")
    for name in args.scenarios:
        sc = load_scenario(name)
        sim = Simulator(sc, noise=False)
        maps = [m for m in sc.all_mappings() if sc.infeasibility(m) is None]
        single = min(maps, key=lambda m: sim.e2e(m) or float("inf"))
        for k in args.clients:
            wl = Workload.closed(k, requests=max(40, 10 * k))
            t0 = time.perf_counter()
            traces = {str(m): sim.run_workload(m, wl, seed=0) for m in maps}
            wall = time.perf_counter() - t0
            sent = sum(t.load.requests for t in traces.values() if t.load is not None)
            best_key = min((k2 for k2, t in traces.items() if t.load is not None),
                           key=lambda k2: traces[k2].load.p95_ms)  # type: ignore[union-attr]
            best = traces[best_key].load
            one = traces[str(single)]
            assert best is not None
            if one.load is None:
                single_cell, ratio = f"cannot serve the window ({one.kind.label if one.kind else '?'})", "-"
            else:
                single_cell = f"{one.load.p95_ms:.0f}"
                ratio = f"{one.load.p95_ms / best.p95_ms:.2f}"
            print(f"| {name} | {k} | {wl.requests} | {len(maps)} | {sent / wall:,.0f} | {best.p95_ms:.0f} "
                  f"({best_key.removeprefix('Mapping(').removesuffix(')')}) | {single_cell} | {ratio} |")


if __name__ == "__main__":
    main()
