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
import math
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
from hetsched.profiling import ProfileConfig, profile_tools
from hetsched.search.oracle import solve
from hetsched.sim import Simulator
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


def kendall_tau_b(x: dict[str, float], y: dict[str, float]) -> float:
    """Kendall's tau-b between two scorings of the same policies (ties count as ties, not as order)."""
    keys = list(x)
    conc = disc = tx = ty = 0
    for a, b in itertools.combinations(keys, 2):
        dx, dy = _sign(x[a] - x[b]), _sign(y[a] - y[b])
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            tx += 1
        elif dy == 0:
            ty += 1
        elif dx == dy:
            conc += 1
        else:
            disc += 1
    denom = ((conc + disc + tx) * (conc + disc + ty)) ** 0.5
    return (conc - disc) / denom if denom else 1.0


def _sign(v: float) -> int:
    if v != v or abs(v) < 1e-9:  # NaN: both infinite (both infeasible), a tie
        return 0
    return 1 if v > 0 else -1


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


def waited_s(pids: Sequence[int]) -> float:
    """Seconds the threads of these processes have spent ready to run but waiting for a core (schedstat):
    the time other processes of a shared machine took from the workers."""
    total = 0.0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                total += int((task / "schedstat").read_text().split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                continue
    return total


LOAD: list[tuple[float, float]] = []
"""(seconds the workers waited for a core, wall seconds) of every measurement: the machine's share."""


def measure(ex: LocalExecutor, mappings: Sequence[Mapping], runs: int,
            traces: list[Any] | None = None) -> dict[Mapping, float | None]:
    """Median real E2E per mapping (None if a run failed), the mappings interleaved so a slow spell of
    the machine hits every mapping alike; feasible traces are appended to ``traces``."""
    real: dict[Mapping, list[float]] = {m: [] for m in mappings}
    failed: set[Mapping] = set()
    ex.start()
    w0, t0 = waited_s(ex.pids()), time.monotonic()
    for _ in range(runs):
        for m in mappings:
            trace = ex.run(m)
            if trace.feasible and trace.e2e_ms is not None:
                real[m].append(trace.e2e_ms)
                if traces is not None:
                    traces.append(trace)
            else:
                failed.add(m)
    LOAD.append((waited_s(ex.pids()) - w0, time.monotonic() - t0))
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


def in_situ(sc: Scenario, traces: list[Any]) -> dict[str, list[float]]:
    """Per node that ran alone on its device (no other node of that device overlapped it): its real run
    time / its card's, by placement, and real load / card load for gpu_queue nodes."""
    out: dict[str, list[float]] = {}
    for trace in traces:
        for n, nt in trace.nodes.items():
            card = sc.card_of(n)
            dev = nt.placement.on_gpu
            alone = all(o.end_ms <= nt.start_ms or o.start_ms >= nt.end_ms for m, o in trace.nodes.items()
                        if m != n and o.placement.on_gpu == dev)
            if not alone:
                continue
            ms = card.cpu_ms if nt.placement is C else card.gpu_ms
            if ms:
                out.setdefault(f"run on {'the device' if dev else 'the CPU'}", []).append(nt.run_ms / ms)
            if nt.placement is Q and card.load_ms > 0:
                out.setdefault("gpu_queue load", []).append(nt.load_ms / card.load_ms)
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


def rankings(sc: Scenario, rounds: int, runs: int) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """Each policy runs ``rounds`` rounds on the simulator and on the local executor; its score in each
    world is the E2E of the mapping it ends with: noise-free simulated for the simulator's run, the
    median of ``runs`` fresh real executions (all policies' final mappings interleaved) for the real run."""
    sim = Simulator(sc, noise=False)
    finals: dict[str, tuple[Mapping, Mapping]] = {}
    with LocalExecutor(sc) as ex:
        ex.start()
        for name, opts in POLICIES:
            label = name if not opts else f"{name}:{opts['decider']}"
            ends = []
            for executor in (None, ex):  # None: the noisy simulator, as the bench runs it
                result = run_rounds(sc, make_policy(name, **opts), LoopConfig(rounds=rounds, seed=0), executor=executor)
                ends.append(result.rounds[-1].mapping)
            finals[label] = (ends[0], ends[1])
        real = measure(ex, list(dict.fromkeys(m for _, m in finals.values())), runs)
    scores, codes = {}, {}
    for label, (sim_m, real_m) in finals.items():
        p, r = sim.e2e(sim_m), real[real_m]
        scores[label] = (float("inf") if p is None else p, float("inf") if r is None else r)
        codes[label] = f"{sim_m.code()} / {real_m.code()}"
    return scores, codes


def overhead(n: int, runs: int) -> list[str]:
    """Per node: E2E / n of a chain of n nodes through the executor, against the same tool called
    directly (``ToolRuntime.run``, no scheduling loop, no messages) inside the same worker process,
    alternating the two so the machine's load hits both alike."""
    from hetsched.exec.worker import tool_bytes

    register_tool(FunctionTool("noop", noop_load, noop_run, description="returns at once"), replace=True)
    lines = ["| tool | placement | direct call in the worker, median ms | through the executor, ms per node | "
             "overhead per node (median of paired differences), ms |", "|---|---|---:|---:|---:|"]
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
                per_node, direct, diff = [], [], []
                for _ in range(runs):  # paired: a round, then the same n calls directly, right after
                    per_node.append((ex.run(m).e2e_ms or 0.0) / n)
                    worker.call("load", key="direct", tool=blob)  # (a round unloads the device's tools)
                    direct.append(sum(worker.call("bench", key="direct", inputs=[], warmup=1,
                                                  runs=n).data["times_ms"]) / n)
                    worker.call("unload", key="direct")
                    diff.append(per_node[-1] - direct[-1])
                lines.append(f"| {tool_name} | {placement.value} | {statistics.median(direct):.3f} | "
                             f"{statistics.median(per_node):.3f} | {statistics.median(diff):.3f} |")
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
    args.load_before = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else ""
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
    all_real: dict[str, dict[Mapping, float | None]] = {}
    situ: dict[str, list[float]] = {}
    scenarios = {name: with_cards(load_scenario(name), cards) for name in SCENARIOS}
    for name, sc in scenarios.items():
        mappings = mapping_set(sc, args.mappings, seed=1)
        print(f"{name}: {len(mappings)} mappings x {args.runs} real runs ...", file=sys.stderr)
        traces: list[Any] = []
        with LocalExecutor(sc) as ex:
            all_real[name] = measure(ex, mappings, args.runs, traces)
        for key, vals in in_situ(sc, traces).items():
            situ.setdefault(key, []).extend(vals)
        rows.append((name, f"{sc.machine.gpu_kappa:g} (scenario)", errors(sc, all_real[name], sc.machine.gpu_kappa)))

    def log_ratios(k: float) -> list[float]:
        return [math.log1p(e) for name, sc in scenarios.items() for e in errors(sc, all_real[name], k).values()]

    def spread(k: float) -> float:  # median absolute deviation of log(pred / real): what a uniform scale cannot fix
        lr = log_ratios(k)
        mid = statistics.median(lr)
        return statistics.median(abs(x - mid) for x in lr)

    grid = [k / 100 for k in range(0, 101)]
    fitted = min(grid, key=spread)
    bias = math.expm1(statistics.median(log_ratios(fitted)))
    for name, sc in scenarios.items():
        rows.append((name, f"{fitted:g} (fitted)", errors(sc, all_real[name], fitted)))
    out += ["## Prediction error per mapping kind", "",
            "Error = (simulated - real) / real E2E; the real E2E is the median of "
            f"{args.runs} executions. Negative: the simulator predicts faster than reality.", ""]
    out += error_table(rows)
    after = [abs(math.expm1(x - math.log1p(bias))) for x in log_ratios(fitted)]
    out += ["", f"Fitted kappa: {fitted:g}. It is fitted to what kappa can explain: the kappa that makes the "
            "prediction errors most alike across mappings (least median absolute deviation of log(predicted / "
            f"real)), since no kappa can remove an error common to every mapping. With it, the simulator is off "
            f"by {fmt(bias)} in the median over all {len(after)} mappings; scaled by that one factor, the "
            f"remaining error is {statistics.median(after):.1%} in the median and {max(after):.1%} at worst.", ""]
    out += ["## Where the time goes: nodes alone on their device, real / card", "",
            "For every node that ran with no other node on its device at the same time: its real run time (or "
            "load) divided by its card's isolated figure. Above 1: slower inside a workflow than alone.", "",
            "| what | nodes | median | p10 | p90 |", "|---|---:|---:|---:|---:|"]
    for key, vals in sorted(situ.items()):
        q = statistics.quantiles(vals, n=10) if len(vals) > 1 else [vals[0]] * 9
        out.append(f"| {key} | {len(vals)} | {statistics.median(vals):.2f}x | {q[0]:.2f}x | {q[-1]:.2f}x |")
    out += ["", "## Mappings (real vs predicted with the fitted kappa)", "",
            "| scenario | mapping | kind | real ms | predicted ms | error |", "|---|---|---|---:|---:|---:|"]
    for name in SCENARIOS:
        sc = with_cards(load_scenario(name), cards, fitted)
        sim = Simulator(sc, noise=False)
        for m, r in all_real[name].items():
            p = sim.e2e(m)
            if r is not None and p is not None:
                out.append(f"| {name} | {m.code()} | {kind_of(sc, m)} | {r:.1f} | {p:.1f} | {fmt((p - r) / r)} |")
    out += ["", f"## Policy rankings ({args.rounds} rounds each, seed 0)", "",
            "Each policy runs on the simulator (noisy, the profiled cards, the fitted kappa) and on the local "
            "executor. Score: the E2E of the mapping it ends with, noise-free simulated for the simulator's run, "
            f"and the median of {args.runs} fresh real executions (interleaved) for the real run; infeasible: inf.",
            ""]
    for name in SCENARIOS:
        sc = with_cards(load_scenario(name), cards, fitted)
        scores, codes = rankings(sc, args.rounds, args.runs)
        sim_order = sorted(scores, key=lambda k: scores[k][0])
        real_order = sorted(scores, key=lambda k: scores[k][1])
        tau = kendall_tau_b({k: v[0] for k, v in scores.items()}, {k: v[1] for k, v in scores.items()})
        sim_best = {k for k, v in scores.items() if abs(v[0] - scores[sim_order[0]][0]) < 1e-6}
        real_best = {k for k, v in scores.items() if abs(v[1] - scores[real_order[0]][1]) < 1e-6}
        out += [f"### {name}", "", "| policy | final mapping (sim run / real run) | sim ms | real ms |",
                "|---|---|---:|---:|"]
        out += [f"| {k} | {codes[k]} | {scores[k][0]:.1f} | {scores[k][1]:.1f} |" for k in real_order]
        out += ["", f"Kendall tau-b {tau:+.2f} (ties count as ties); the real best ({', '.join(sorted(real_best))}) "
                f"{'is' if real_best & sim_best else 'is not'} among the simulator's best "
                f"({', '.join(sorted(sim_best))}).", ""]
    out += ["## Executor overhead per node", "",
            f"A chain of {args.chain} nodes of one tool through the local executor (median of {args.runs} rounds, "
            "E2E / nodes) against the same tool called directly inside the same worker process (no scheduling "
            "loop, no messages), alternating the two.", ""]
    out += overhead(args.chain, args.runs * 3)
    waited = sum(w for w, _ in LOAD) / max(1e-9, sum(t for _, t in LOAD))
    out += ["", f"Machine load while measuring: the worker processes' threads waited for a core {waited:.0%} of the "
            f"measuring wall time (schedstat; other jobs on the shared machine). Load average before and after: "
            f"{args.load_before or '?'} / {Path('/proc/loadavg').read_text().split()[0]}.",
            "", f"Wall time of this benchmark: {time.monotonic() - t0:.0f} s."]
    text = "\n".join(out) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
