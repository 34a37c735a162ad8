"""E2E per request of the LangGraph example agent (examples/langgraph_agent.py): the mapping the
agentic session converged to against all-GPU, requests interleaved so both see the same load.

    python benchmarks/langgraph_example.py [--requests 20] [--compare 15]

The agentic session serves ``--requests`` requests first; its final mapping and all-GPU are then
served by two sessions pinned to them, one request each in turn. Prints one markdown table row
per placement (median and p90 of the trace's E2E, median wall time of ``invoke``: LangGraph's
runtime, the adapter and the gpu_now loads included), the ratios, and what the tool cards
predict for both, for BENCHMARKS.md. Needs the [tools] and [langgraph] extras.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any


def _example() -> Any:
    path = Path(__file__).resolve().parent.parent / "examples" / "langgraph_agent.py"
    spec = importlib.util.spec_from_file_location("langgraph_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["langgraph_agent"] = module
    spec.loader.exec_module(module)
    return module


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20, help="requests the agentic session serves first")
    ap.add_argument("--compare", type=int, default=15, help="interleaved requests per placement")
    args = ap.parse_args()
    out = _example().main(args.requests, args.compare, quiet=True)
    rows = []
    for label, key, mapping in (("converged (agentic)", "converged", out["converged"]),
                                ("all-GPU", "all_gpu", out["all_gpu"])):
        e2e = [c[f"{key}_ms"] for c in out["compare"]]
        wall = [c[f"{key}_wall_ms"] for c in out["compare"]]
        rows.append((label, mapping, statistics.median(e2e), _p90(e2e), statistics.median(wall)))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {load:.1f} at the end")
    print(f"agentic rounds before the comparison: {args.requests}; compared requests per placement: {args.compare}")
    print("| placement | mapping | E2E median ms | E2E p90 ms | invoke wall median ms |")
    print("|---|---|---|---|---|")
    for label, mapping, med, p90, wall in rows:
        print(f"| {label} | `{mapping}` | {med:.1f} | {p90:.1f} | {wall:.1f} |")
    print(f"all-GPU / converged: {rows[1][2] / rows[0][2]:.2f}x (E2E medians), "
          f"{out['median_paired_ratio']:.2f}x (median of the paired requests' ratios)")
    pred_conv, pred_gpu = out["predicted_converged_ms"], out["predicted_all_gpu_ms"]
    print(f"the cards predict (simulator, noise-free): converged {pred_conv:.1f} ms, all-GPU {pred_gpu:.1f} ms "
          f"({pred_gpu / pred_conv:.2f}x)")


if __name__ == "__main__":
    main()
