"""Simulator vs real execution: how well the model predicts what the local executor measures.

1. Profile the tiny tools of the real suite (rag_tiny, fanout_tiny) on this machine with the
   same core plan the executor uses (1-thread CPU pool, 1-thread stand-in device).
2. For each scenario, a set of mappings of every kind (all-CPU, all-GPU, CPU + gpu_now mixes,
   mappings with gpu_queue; all-CPU/all-GPU/oracle plus a seeded random sample): the real E2E is
   the median of ``--runs`` executions on the local executor; the prediction is the noise-free
   simulator with the freshly profiled cards. Error = (predicted - real) / real.
3. Fit kappa: the GPU interference factor that minimizes the median |error| over every mapping
   (grid 0..1 by 0.01), and the errors again with it.
4. Policy rankings: every non-LLM policy runs ``--rounds`` rounds on the simulator (noisy, as in
   the bench) and on the local executor; each is scored by its best feasible E2E; do the rankings
   agree (Kendall tau, and the winner)?
5. Executor overhead per node: a chain of N nodes of one tool through the local executor against
   calling the tool directly in-process (``ToolRuntime``), for a no-op tool and a real one.

Prints the tables and writes them to --out (markdown).

Run: python benchmarks/sim_vs_real.py [--runs 5] [--profile-runs 15] [--rounds 4] [--out FILE]
Needs the [tools] extra (torch, transformers, faiss-cpu).
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hetsched.exec.devices import cpu_model
from hetsched.exec.local import LocalExecutor
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Edge, Machine, Mapping, Mode, Node, Placement, Scenario, ToolCard, Workflow
from hetsched.model.files import load_scenario
from hetsched.policies import make_policy
from hetsched.profile import ProfileConfig, profile_tools
from hetsched.sim import Simulator
from hetsched.sim.oracle import solve
from hetsched.tools import Device, FunctionTool, get_tool, register_tool

SCENARIOS = ("rag_tiny", "fanout_tiny")
POLICIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("all-cpu", {}), ("all-gpu", {}), ("heft-cf", {}), ("starpu-dmda", {}), ("ucb1", {}), ("greedy-mem", {}),
    ("oracle", {}), ("agentic", {"decider": "rules"}),
)
C, G, Q = Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE


# ---------------------------------------------------------------------------- a no-op tool for the overhead
def noop_load(device: Device) -> dict[str, Any]:
    """Nothing to load."""
    return {}


def noop_run(handle: dict[str, Any], inputs: Sequence[Any]) -> int:
    """Returns at once (the executor's own cost is all that is left)."""
    return len(inputs)


# ---------------------------------------------------------------------------- helpers
def kind_of(sc: Scenario, m: Mapping) -> str:
    gpu_nodes = [n for n in sc.workflow.node_ids if sc.card_of(n).has_gpu]
    places = {m[n] for n in gpu_nodes}
    if places == {C}:
        return "all-CPU"
    if Q in places:
        return "with gpu_queue"
    if places == {G}:
        return "all-GPU (gpu_now)"
    return "CPU + gpu_now"


def with_cards(sc: Scenario, cards: dict[str, ToolCard], kappa: float | None = None) -> Scenario:
    machine = sc.machine if kappa is None else sc.machine.model_copy(update={"gpu_kappa": kappa})
    return sc.model_copy(update={"cards": {t: cards[t] for t in sc.cards}, "machine": machine})


def mapping_set(sc: Scenario, n: int, seed: int) -> list[Mapping]:
    sim = Simulator(sc, noise=False)
    chosen: dict[Mapping, None] = {}
    for m in (sc.uniform(C), sc.uniform(G), sc.uniform(Q), solve(sc).best):
        if sim.infeasibility(m) is None:
            chosen.setdefault(sc.validate_mapping(m), None)
    pool = [m for m in sc.all_mappings() if sim.infeasibility(m) is None and m not in chosen]
    rng = random.Random(seed)
    rng.shuffle(pool)
    # a spread of kinds: take the random pool round-robin by kind
    by_kind: dict[str, list[Mapping]] = {}
    for m in pool:
        by_kind.setdefault(kind_of(sc, m), []).append(m)
    for group in itertools.zip_longest(*by_kind.values()):
        for m in group:
            if m is not None and len(chosen) < n:
                chosen.setdefault(m, None)
    return list(chosen)


def kendall_tau(a: Sequence[str], b: Sequence[str]) -> float:
    pos = {x: i for i, x in enumerate(b)}
    pairs = list(itertools.combinations(a, 2))
    concordant = sum(1 for x, y in pairs if pos[x] < pos[y])
    return (2 * concordant - len(pairs)) / len(pairs) if pairs else 1.0


def fmt(x: float) -> str:
    return f"{x:+.1%}"


# ---------------------------------------------------------------------------- the checks
def profile(names: list[str], runs: int) -> dict[str, ToolCard]:
    config = ProfileConfig(size="tiny", runs=runs, warmup=3, loads=3, cpu_threads=1, device_threads=1)
    cards = {}
    for result in profile_tools(names, config):
        cards[result.card.name] = result.card
        print(f"  profiled {result.card.name}: cpu {result.card.cpu_ms:.2f} ms, gpu {result.card.gpu_ms} ms, "
              f"vram {result.card.vram_mb} MB", file=sys.stderr)
    return cards


def measure(sc: Scenario, mappings: list[Mapping], runs: int) -> dict[Mapping, float | None]:
    real: dict[Mapping, list[float]] = {m: [] for m in mappings}
    failed: set[Mapping] = set()
    with LocalExecutor(sc) as ex:
        ex.start()
        for _ in range(runs):  # interleaved, so a slow spell of the machine hits every mapping alike
            for m in mappings:
                trace = ex.run(m)
                if trace.feasible and trace.e2e_ms is not None:
                    real[m].append(trace.e2e_ms)
                else:
                    failed.add(m)
                    print(f"  {sc.name} {m.code()}: {trace.reason}", file=sys.stderr)
    return {m: (statistics.median(v) if v and m not in failed else None) for m, v in real.items()}


def errors(sc: Scenario, real: dict[Mapping, float | None], kappa: float) -> dict[Mapping, float]:
    sim = Simulator(sc.model_copy(update={"machine": sc.machine.model_copy(update={"gpu_kappa": kappa})}),
                    noise=False)
    out = {}
    for m, r in real.items():
        p = sim.e2e(m)
        if r is not None and p is not None:
            out[m] = (p - r) / r
    return out


def error_table(rows: list[tuple[str, str, dict[Mapping, float]]]) -> list[str]:
    lines = ["| scenario | kappa | mapping kind | mappings | median error | median abs error | worst error |",
             "|---|---|---|---:|---:|---:|---:|"]
    for name, kappa, errs in rows:
        sc = load_scenario(name)
        by_kind: dict[str, list[float]] = {}
        for m, e in errs.items():
            by_kind.setdefault(kind_of(sc, m), []).append(e)
        by_kind["all kinds"] = list(errs.values())
        for kind, es in by_kind.items():
            worst = max(es, key=abs)
            lines.append(f"| {name} | {kappa} | {kind} | {len(es)} | {fmt(statistics.median(es))} | "
                         f"{statistics.median(abs(e) for e in es):.1%} | {fmt(worst)} |")
    return lines


def rankings(sc: Scenario, rounds: int) -> tuple[list[str], list[str], dict[str, tuple[float, float]],
                                                  dict[str, str]]:
    scores: dict[str, tuple[float, float]] = {}
    why: dict[str, str] = {}
    with LocalExecutor(sc) as ex:
        ex.start()
        for name, opts in POLICIES:
            label = name if not opts else f"{name}:{opts['decider']}"
            best = []
            for executor in (None, ex):  # None: the noisy simulator, as the bench runs it
                result = run_rounds(sc, make_policy(name, **opts), LoopConfig(rounds=rounds, seed=0), executor=executor)
                ok = [r.trace.e2e_ms for r in result.rounds if r.trace.feasible and r.trace.e2e_ms]
                best.append(min(ok) if ok else float("inf"))
                if not ok:
                    why[label] = result.rounds[0].trace.reason
            scores[label] = (best[0], best[1])
    sim_order = sorted(scores, key=lambda k: scores[k][0])
    real_order = sorted(scores, key=lambda k: scores[k][1])
    return sim_order, real_order, scores, why


def overhead(n: int, runs: int) -> list[str]:
    """Per node: E2E / n of a chain of n nodes through the executor, against the same tool called
    directly (``ToolRuntime.run``, no scheduling loop, no messages) inside the same worker process,
    alternating the two so the machine's load hits both alike."""
    from hetsched.exec.worker import tool_bytes

    register_tool(FunctionTool("noop", noop_load, noop_run, description="returns at once"), replace=True)
    lines = ["| tool | placement | direct call in the worker, median ms | through the executor, ms per node | "
             "overhead per node, ms |", "|---|---|---:|---:|---:|"]
    for tool_name, card_ms in (("noop", 0.01), ("bert_base", 5.0)):
        card = ToolCard(name=tool_name, cpu_ms=card_ms, gpu_ms=card_ms, load_ms=1.0, vram_mb=1.0)
        ids = [f"N{i}" for i in range(n)]
        sc = Scenario(name="chain", mode=Mode.THREE_WAY, cards={tool_name: card},
                      workflow=Workflow(nodes=tuple(Node(id=i, tool=tool_name) for i in ids),
                                        edges=tuple(Edge(src=a, dst=b) for a, b in itertools.pairwise(ids))),
                      machine=Machine(cpu_cores=1, vram_budget_mb=100))
        blob = tool_bytes(get_tool(tool_name, "tiny"))
        with LocalExecutor(sc) as ex:
            ex.start()
            for placement, worker in ((C, ex.cpu), (G, ex.gpu)):
                assert worker is not None
                m = sc.uniform(placement)
                ex.run(m)
                per_node, direct = [], []
                for _ in range(runs):
                    per_node.append((ex.run(m).e2e_ms or 0.0) / n)
                    worker.call("load", key="direct", tool=blob)  # (a round unloads the device's tools)
                    direct += worker.call("bench", key="direct", inputs=[], warmup=1, runs=n).data["times_ms"]
                    worker.call("unload", key="direct")
                d, p = statistics.median(direct), statistics.median(per_node)
                lines.append(f"| {tool_name} | {placement.value} | {d:.3f} | {p:.3f} | {p - d:.3f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--runs", type=int, default=5, help="real executions per mapping (median)")
    ap.add_argument("--profile-runs", type=int, default=15, help="profiler runs per tool")
    ap.add_argument("--mappings", type=int, default=14, help="mappings per scenario")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per policy run")
    ap.add_argument("--chain", type=int, default=10, help="nodes of the overhead chain")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sim_vs_real.md")
    args = ap.parse_args()
    t0 = time.monotonic()
    out: list[str] = [
        "# Simulator vs real execution (`benchmarks/sim_vs_real.py`)", "",
        f"Command: `python benchmarks/sim_vs_real.py --runs {args.runs} --profile-runs {args.profile_runs} "
        f"--mappings {args.mappings} --rounds {args.rounds} --chain {args.chain}`", "",
        f"Machine: {cpu_model()}, {len(os.sched_getaffinity(0))} cores, Python "
        f"{platform.python_version()}; CPU pool 1 thread on core 0, stand-in device 1 thread on core 1 "
        "(no GPU: every GPU figure here is the stand-in device's). Shared machine: other jobs ran.", "",
    ]
    names = sorted({t for s in SCENARIOS for t in load_scenario(s).workflow.tools})
    print(f"profiling {len(names)} tools ...", file=sys.stderr)
    cards = profile(names, args.profile_runs)
    rows: list[tuple[str, str, dict[Mapping, float]]] = []
    fitted: dict[str, float] = {}
    all_real: dict[str, dict[Mapping, float | None]] = {}
    for name in SCENARIOS:
        sc = with_cards(load_scenario(name), cards)
        mappings = mapping_set(sc, args.mappings, seed=1)
        print(f"{name}: {len(mappings)} mappings x {args.runs} real runs ...", file=sys.stderr)
        real = measure(sc, mappings, args.runs)
        all_real[name] = real
        rows.append((name, f"{sc.machine.gpu_kappa:g} (scenario)", errors(sc, real, sc.machine.gpu_kappa)))
        grid = [k / 100 for k in range(0, 101)]
        best = min(grid, key=lambda k: statistics.median(abs(e) for e in errors(sc, real, k).values()))
        fitted[name] = best
    pooled = min((k / 100 for k in range(0, 101)), key=lambda k: statistics.median(
        abs(e) for name in SCENARIOS for e in errors(with_cards(load_scenario(name), cards), all_real[name],
                                                      k).values()))
    for name in SCENARIOS:
        sc = with_cards(load_scenario(name), cards)
        rows.append((name, f"{pooled:g} (fitted)", errors(sc, all_real[name], pooled)))
    out += ["## Prediction error per mapping kind", "",
            "Error = (simulated - real) / real E2E; the real E2E is the median of "
            f"{args.runs} executions. Negative: the simulator predicts faster than reality.", ""]
    out += error_table(rows)
    out += ["", f"Fitted kappa: {pooled:g} over both scenarios (per scenario: "
            + ", ".join(f"{k} {v:g}" for k, v in fitted.items()) + ").", ""]
    out += ["## Mappings (real vs predicted with the fitted kappa)", "",
            "| scenario | mapping | kind | real ms | predicted ms | error |", "|---|---|---|---:|---:|---:|"]
    for name in SCENARIOS:
        sc = with_cards(load_scenario(name), cards, pooled)
        sim = Simulator(sc, noise=False)
        for m, r in all_real[name].items():
            p = sim.e2e(m)
            if r is not None and p is not None:
                out.append(f"| {name} | {m.code()} | {kind_of(sc, m)} | {r:.1f} | {p:.1f} | {fmt((p - r) / r)} |")
    out += ["", "## Policy rankings (best feasible E2E in "
            f"{args.rounds} rounds, seed 0; sim = the noisy simulator with the profiled cards and the fitted kappa)",
            ""]
    for name in SCENARIOS:
        sc = with_cards(load_scenario(name), cards, pooled)
        sim_order, real_order, scores, why = rankings(sc, args.rounds)
        tau = kendall_tau(sim_order, real_order)
        out += [f"### {name}", "", "| policy | sim best ms | real best ms |", "|---|---:|---:|"]
        out += [f"| {k} | {scores[k][0]:.1f} | {scores[k][1]:.1f} |" for k in real_order]
        out += ["", f"Real order: {' < '.join(real_order)}", "", f"Sim order: {' < '.join(sim_order)}", "",
                f"Kendall tau {tau:+.2f}; winner {'agrees' if sim_order[0] == real_order[0] else 'differs'} "
                f"(sim: {sim_order[0]}, real: {real_order[0]}).", ""]
        out += [f"No feasible round for {k}: {v}" for k, v in why.items()] + ([""] if why else [])
    out += ["## Executor overhead per node", "",
            f"A chain of {args.chain} nodes of one tool through the local executor (median of {args.runs} rounds, "
            "E2E / nodes) against the same tool called directly inside the same worker process (no scheduling "
            "loop, no messages), alternating the two.", ""]
    out += overhead(args.chain, args.runs)
    out += ["", f"Wall time of this benchmark: {time.monotonic() - t0:.0f} s."]
    text = "\n".join(out) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
