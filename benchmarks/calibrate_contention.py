"""Calibration of the GPU interference factor kappa against the paper's Factor A figures.

The paper measured concurrent tools running 43-250% slower than in isolation (1.43x-3.5x) and
an E2E up to 2.7x the isolated upper bound (the slowest tool alone). For every set of 2, 3
and 4 GPU-preferred/ambiguous amplified tools of the bundled library run together on
``gpu_now``, this prints the per-tool slowdown range and the E2E / isolated-max ratio for a few
kappa values, so the default (DEFAULT_KAPPA) can be checked against the paper's band.

Run: python benchmarks/calibrate_contention.py
"""

from __future__ import annotations

import itertools
import statistics

from hetsched.model import Machine, Mapping, Mode, Node, Placement, Scenario, Workflow
from hetsched.model.files import bundled_library_path, load_tool_library
from hetsched.model.machine import DEFAULT_KAPPA
from hetsched.sim import Simulator

TOOLS = ["bert_base_x12", "e5_large_x4", "vector_search_x15", "reranker_x6", "clip_vit_b32_x8", "resnet50_x10"]


def slowdowns(tools: tuple[str, ...], kappa: float) -> tuple[list[float], float]:
    lib = load_tool_library(bundled_library_path())
    nodes = tuple(Node(id=f"N{i}", tool=t) for i, t in enumerate(tools))
    sc = Scenario(
        name="calib",
        mode=Mode.BINARY,
        workflow=Workflow(nodes=nodes),
        cards={t: lib[t] for t in tools},
        machine=Machine(gpu_kappa=kappa, noise_cv=0.0, cpu_cores=16, vram_budget_mb=1e6),
    )
    tr = Simulator(sc, noise=False).run(Mapping({n.id: Placement.GPU_NOW for n in nodes}))
    per_tool = [tr.nodes[n.id].run_ms / (lib[n.tool].gpu_ms or 1) for n in nodes]
    iso_max = max(lib[t].gpu_ms or 0 for t in tools)
    return per_tool, (tr.e2e_ms or 0) / iso_max


def main() -> None:
    print("k tools | kappa | per-tool slowdown min / median / max | E2E / isolated max (max)")
    for kappa in (0.0, 0.1, DEFAULT_KAPPA, 0.25, 0.35):
        for k in (2, 3, 4):
            per, e2e = [], []
            for combo in itertools.combinations(TOOLS, k):
                p, e = slowdowns(combo, kappa)
                per += p
                e2e.append(e)
            print(
                f"{k:7d} | {kappa:5.2f} | {min(per):5.2f} / {statistics.median(per):5.2f} / {max(per):5.2f}"
                f"            | {max(e2e):5.2f}"
            )


if __name__ == "__main__":
    main()
