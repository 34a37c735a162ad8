"""Predicted vs measured latency percentiles under load, on the bundled tiny real scenarios.

For each scenario (``rag_tiny``, ``fanout_tiny``: real tools, cards measured on the stand-in device)
the mapping deployed is the one-request best (the oracle's) that can also serve a window (every
``gpu_queue`` node fits beside the resident tools). At three loads, closed loops of 1, 2 and 4
clients (``--arrivals open``: Poisson arrivals at 30%, 60% and 90% of 1000 / E2E requests per
second, E2E that mapping's predicted one-request latency, the same arrival times from one seed), the
same workload goes to

- the simulator (the kernel on the scenario's cards, noise-free): the predicted p50/p95;
- a real executor (``local``: worker processes, the stand-in device; ``ray``; or ``inproc``: threads of
  this process, one per request, the stand-in device's one thread): the measured p50/p95,

and the table prints both and their ratio (measured / predicted), with the peak device memory the
local executor measured (its memory watch is widened, ``memory_slack`` 4: under load several calls
on one resident model each hold their own working memory, which a card, measured for one call,
does not count; the watch would end the window as an OOM). A second table measures how concurrent
calls share one resident (``gpu_now``) model: k calls released at once on the resident tool,
their mean call time, the window and the peak memory, predicted (processor sharing; the card's
``vram_mb`` once) and measured.

Timing on a shared machine is noisy: the load average is printed before and after; the numbers in
BENCHMARKS.md come from a quiet machine. Runs in about 3-5 minutes on 2 cores (local).

    python benchmarks/load_real.py [--executor local|ray|inproc] [--arrivals closed|open] [--requests 30] [--seed 0]
                                   [--alone 5] [--out FILE.json]

``--executor ray`` starts a local Ray cluster (on a machine whose only interface is loopback, run
it in a loopback namespace: ``unshare -n sh -c 'ip link set lo up; python benchmarks/load_real.py
--executor ray --requests 20 --alone 3'``); each Ray round pays its warm-up and event collection,
so it takes longer than the local run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from hetsched.exec import make_executor
from hetsched.exec.devices import cpu_model
from hetsched.model import Mapping, Placement, Scenario
from hetsched.model.files import load_scenario
from hetsched.model.workflow import Node, Workflow
from hetsched.model.workload import Workload, load_infeasibility
from hetsched.search.oracle import solve
from hetsched.sim import Simulator

SCENARIOS = ("rag_tiny", "fanout_tiny")
CLIENTS = (1, 2, 4)
"""Closed loops: clients."""
RATES = (0.3, 0.6, 0.9)
"""Open loops: arrival rates as shares of 1000 / E2E (the mapping's predicted one-request latency)."""
ALONE_RUNS = 5
"""Lone requests measured first (their median is the one-request baseline)."""
SHARING = (1, 2, 4)
"""Concurrent calls on one resident model."""


def deployable(sc: Scenario) -> Mapping:
    """The best one-request mapping (oracle) that can also serve a window: the oracle's if every
    queued node fits beside the resident tools, else the best such mapping by the kernel."""
    best = solve(sc).best
    probe = Workload.open(1.0, requests=2)
    if load_infeasibility(sc, best, probe) is None:
        return best
    sim = Simulator(sc, noise=False)
    ok = [(e, m) for m in sc.all_mappings() if load_infeasibility(sc, m, probe) is None
          and (e := sim.e2e(m)) is not None]
    return min(ok, key=lambda t: t[0])[1]


MEMORY_SLACK = 4.0
"""The local executor's memory watch under load: the budget plus 4 x budget (see the docstring)."""


def executor_options(executor: str) -> dict[str, Any]:
    return {"memory_slack": MEMORY_SLACK} if executor == "local" else {}


def measure(executor: Any, sc: Scenario, mapping: Mapping, workload: Workload) -> dict[str, Any]:
    tr = executor.run_workload(mapping, workload, seed=0)
    if not tr.feasible or tr.load is None:
        raise SystemExit(f"{sc.name}: the window failed on {executor.name}: {tr.reason}")
    return {"p50_ms": tr.load.p50_ms, "p95_ms": tr.load.p95_ms, "throughput_per_s": tr.load.throughput_per_s,
            "peak_mb": getattr(executor, "last_measured_peak_mb", None)}


def mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def sharing_scenario(sc: Scenario, tool: str) -> Scenario:
    """One node running ``tool``: k requests of it at once are k concurrent calls on the resident model."""
    return Scenario(name=f"{sc.name}_{tool}", mode=sc.mode, workflow=Workflow(nodes=(Node(id="N", tool=tool),)),
                    cards={tool: sc.cards[tool]}, machine=sc.machine)


def call_stats(tr: Any) -> tuple[float, float]:
    """(mean call time, window) of a window of one-node requests, ms."""
    calls = [r.nodes["N"].end_ms - r.nodes["N"].start_ms for r in tr.requests]
    return sum(calls) / len(calls), max(r.end_ms for r in tr.requests)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executor", choices=("local", "ray", "inproc"), default="local")
    ap.add_argument("--arrivals", choices=("closed", "open"), default="closed")
    ap.add_argument("--requests", type=int, default=30, help="requests per load (default 30)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the arrival times (default 0)")
    ap.add_argument("--alone", type=int, default=ALONE_RUNS, help=f"lone requests first (default {ALONE_RUNS})")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    load0 = os.getloadavg()
    print(f"# load_real: {args.executor} executor vs the simulator, {args.arrivals} loop, {args.requests} requests "
          f"per load, seed "
          f"{args.seed}\n# machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()}; load average before "
          f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    rows: list[dict[str, Any]] = []
    sharing: list[dict[str, Any]] = []
    for name in args.scenarios.split(","):
        sc = load_scenario(name)
        mapping = deployable(sc)
        sim = Simulator(sc, noise=False)
        e2e = sim.e2e(mapping)
        assert e2e is not None
        print(f"\n## {name}: mapping {mapping} (predicted one-request E2E {e2e:.1f} ms)")
        with make_executor(args.executor, sc, **executor_options(args.executor)) as ex:
            start = getattr(ex, "start", None)
            if start is not None:
                start()  # workers started and tools prepared before the first window
            alone = sorted(t.e2e_ms for t in (ex.run(mapping) for _ in range(args.alone)) if t.e2e_ms is not None)
            if len(alone) < args.alone:
                raise SystemExit(f"{name}: a lone request failed on {args.executor}")
            alone_ms = alone[len(alone) // 2]
            print(f"  one request alone: predicted {e2e:.1f} ms, measured {alone_ms:.1f} ms (median of {args.alone}; "
                  "the gap under load beyond this ratio is queueing the model does not predict)", flush=True)
            for level in (CLIENTS if args.arrivals == "closed" else RATES):
                if args.arrivals == "closed":
                    wl = Workload.closed(int(level), requests=args.requests, seed=args.seed)
                    label = f"{level} client{'s' if level > 1 else ''}"
                else:
                    wl = Workload.open(level * 1000.0 / e2e, requests=args.requests, seed=args.seed)
                    label = f"{level:.0%} ({level * 1000.0 / e2e:.2f}/s)"
                pred = sim.run_workload(mapping, wl, seed=None)
                assert pred.load is not None, pred.reason
                got = measure(ex, sc, mapping, wl)
                row = {"scenario": name, "executor": args.executor, "load": label, "arrivals": args.arrivals,
                       "requests": args.requests, "mapping": str(mapping),
                       "pred_p50_ms": pred.load.p50_ms, "pred_p95_ms": pred.load.p95_ms,
                       "meas_p50_ms": got["p50_ms"], "meas_p95_ms": got["p95_ms"],
                       "meas_throughput_per_s": got["throughput_per_s"], "meas_peak_mb": got["peak_mb"],
                       "budget_mb": sc.machine.vram_budget_mb, "pred_alone_ms": e2e, "meas_alone_ms": alone_ms}
                rows.append(row)
                print(f"  {label}: p50 predicted {row['pred_p50_ms']:.1f} measured "
                      f"{row['meas_p50_ms']:.1f} ms (x{row['meas_p50_ms'] / row['pred_p50_ms']:.2f}); p95 predicted "
                      f"{row['pred_p95_ms']:.1f} measured {row['meas_p95_ms']:.1f} ms "
                      f"(x{row['meas_p95_ms'] / row['pred_p95_ms']:.2f}); measured peak memory "
                      f"{mb(row['meas_peak_mb'])} MB (budget {sc.machine.vram_budget_mb:g})", flush=True)
        resident = [mapping[n] is Placement.GPU_NOW for n in sc.workflow.node_ids]
        tools = [sc.workflow.tool_of[n] for n, r in zip(sc.workflow.node_ids, resident, strict=True) if r]
        if tools:
            tool = tools[0]
            one = sharing_scenario(sc, tool)
            only = Mapping({"N": Placement.GPU_NOW})
            with make_executor(args.executor, one, **executor_options(args.executor)) as ex:
                start = getattr(ex, "start", None)
                if start is not None:
                    start()
                for k in SHARING:
                    wl = Workload.trace([0.0] * k)
                    pred = Simulator(one, noise=False).run_workload(only, wl, seed=None)
                    tr = ex.run_workload(only, wl, seed=0)
                    if not tr.feasible:
                        raise SystemExit(f"{one.name}: {tr.reason}")
                    p_call, p_win = call_stats(pred)
                    m_call, m_win = call_stats(tr)
                    peak = getattr(ex, "last_measured_peak_mb", None)
                    sharing.append({"scenario": name, "tool": tool, "calls": k, "pred_call_ms": p_call,
                                    "pred_window_ms": p_win, "meas_call_ms": m_call, "meas_window_ms": m_win,
                                    "card_mb": one.cards[tool].vram_mb, "meas_peak_mb": peak})
                    print(f"  resident {tool}: {k} concurrent call(s): mean call predicted {p_call:.1f} measured "
                          f"{m_call:.1f} ms; window predicted {p_win:.1f} measured {m_win:.1f} ms; peak memory "
                          f"{mb(peak)} MB (card {one.cards[tool].vram_mb:g})", flush=True)
    load1 = os.getloadavg()
    took = time.monotonic() - t_start
    print("\n| scenario | alone pred / meas | load | p50 pred | p50 meas | ratio | p95 pred | p95 meas "
          "| ratio | peak MB (budget) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['scenario']} | {r['pred_alone_ms']:.1f} / {r['meas_alone_ms']:.1f} | {r['load']} | "
              f"{r['pred_p50_ms']:.1f} | "
              f"{r['meas_p50_ms']:.1f} | {r['meas_p50_ms'] / r['pred_p50_ms']:.2f} | {r['pred_p95_ms']:.1f} | "
              f"{r['meas_p95_ms']:.1f} | {r['meas_p95_ms'] / r['pred_p95_ms']:.2f} | {mb(r['meas_peak_mb'])} "
              f"({r['budget_mb']:g}) |")
    if sharing:
        print("\n| scenario | resident tool | concurrent calls | call pred | call meas | window pred | window meas | "
              "peak MB meas (card) |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
        for s in sharing:
            print(f"| {s['scenario']} | {s['tool']} | {s['calls']} | {s['pred_call_ms']:.1f} | {s['meas_call_ms']:.1f} "
                  f"| {s['pred_window_ms']:.1f} | {s['meas_window_ms']:.1f} | {mb(s['meas_peak_mb'])} "
                  f"({s['card_mb']:g}) |")
    print(f"\n# {took:.0f} s; load average after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if args.out is not None:
        args.out.write_text(json.dumps({"rows": rows, "sharing": sharing, "load_before": load0, "load_after": load1,
                                        "seconds": took, "executor": args.executor, "machine": cpu_model(),
                                        "command": " ".join(["python", *sys.argv])}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
