"""Simulator vs real execution on tool shapes the bundled tools lack (issue 20): fresh and stale cards.

Tools (``tests/shapetools.py``, real tools): ``fetch`` waits 80 ms like an HTTP call (I/O bound,
CPU only); ``lookup`` holds a 250 MB table and ``embed`` a 120 MB one (memory-heavy loads, offered
as gpu_queue); ``text`` and ``parse`` are pure-Python text work; ``mm`` and ``merge`` are numpy
matrix products (numeric compute).

Workflows:

- ``shapes7``: parse -> {fetch, lookup, embed, text, mm} -> merge, three-way, VRAM budget 330 MB
  (the two tables do not fit together), CPU pool of 1 core + the stand-in device (1 core):
  ``--mappings`` (16) feasible mappings of every kind.
- ``io4``: parse -> {fetch x4, text} -> merge: four I/O-bound tools beside a CPU tool, binary.

Steps: profile the tools (``ProfileConfig``: 1-thread CPU pool, 1-thread stand-in device, as the
executor runs them); run every mapping ``--runs`` times on the local executor, the mappings
interleaved so a slow spell hits all alike (the *fresh* phase); with ``--stale-min M``, wait until
the cards are M minutes old and measure again with the same cards (the *stale* phase). With
``--cards FILE`` the cards of an earlier run are reused (their age from the file) instead of
profiling: profile once, come back later. Every measurement is written raw (``--raw``, JSON), and
``--report RAW`` re-reads one and prints the tables with the current model, so a model change is
judged on the same measurements.

Per phase and model variant: the median and the worst prediction error over the mappings
((predicted - real) / real, real = median of the runs), and Kendall's tau-b between predicted and
real E2E over the mappings. Variants: ``before`` (cards without ``cpu_demand``: every tool charged
``cpu_threads`` >= 1 core; loads independent), ``after`` (the cards' measured ``cpu_demand`` and
``load_sharing: device``, the stand-in device's), and with ``--own-core`` also ``after, own-core
cards`` (the same model on cards profiled with ``ProfileConfig(own_core=True)``: each call timed
less what its thread waited for a core, so a busy machine's load at profiling time stays out of
the cards); on top of ``after``, the two machine terms of docs/simulator.md, each alone and together:
``after + cold loads S`` (cards with ``load_cold_ms``, ``--cold-loads``; S = ``cold_load_share``
calibrated before the fresh phase on a workflow of its own at the suite's cadence: the largest table
alone as gpu_queue, rounds back to back) and ``after + cross-core X`` (``--cross-core X``, or with
``--calibrate-cross-core`` the x of ``benchmarks/calibrate_cross_core.py``, run during the wait for
the stale phase; skipped at 0). A table of real / card per tool for nodes alone on their device
tells card errors from model errors, and counts the cold loads. The scenarios' machine: 1 core for
the CPU pool, kappa 0 (the stand-in device is one core shared by its threads: pure processor sharing).

Run (fresh part, about 3 minutes):  python benchmarks/sim_vs_real_shapes.py --raw results/shapes.json
Fresh + 15-minute-old cards, one go (about 16.5 minutes on a quiet machine):
    python benchmarks/sim_vs_real_shapes.py --runs 5 --stale-min 15 --calibrate-cross-core --raw ...
Later reuse:                         python benchmarks/sim_vs_real_shapes.py --cards results/shapes.json ...
Re-score saved measurements:         python benchmarks/sim_vs_real_shapes.py --report results/shapes.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.shapetools, in this process and the workers


from hetsched.exec.devices import cpu_model
from hetsched.exec.local import LocalExecutor
from hetsched.model import Edge, Machine, Mapping, Mode, Node, Placement, Scenario, ToolCard, Workflow
from hetsched.profiling import ProfileConfig, profile_tools
from hetsched.sim import Simulator
from hetsched.tools import register_tool

C, G, Q = Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE
def make_tools() -> tuple[Any, ...]:
    """The tools, built on demand: importing tests.shapetools imports numpy, and a module-level import
    here would run again in every spawned worker (the script is their ``__main__``) before the
    worker limits the BLAS threads, leaving OpenBLAS with a thread per core on its one pinned core."""
    from tests.shapetools import MatMul, PyText, TableLookup, Waiter

    return (
        Waiter("fetch", wait_ms=80.0),
        TableLookup("lookup", table_mb=250.0, lookups=60_000),
        TableLookup("embed", table_mb=120.0, lookups=40_000),
        PyText("text", words=300_000),
        PyText("parse", words=120_000),
        MatMul("mm", n=512, reps=16),
        MatMul("merge", n=384, reps=8),
    )


BUDGET_MB = 330.0
WARM_REUSE_MS = 2000.0
"""machine.warm_reuse_ms of the warm-reuse variants: freed memory goes back to this VM's host ~2 s after the free."""
COLD_PAUSE_S = 3.0
"""Idle time before each profiled cold load (ProfileConfig.cold_pause_s)."""
"""The VRAM budget: the two tables (about 260 and 130 MB measured) do not fit together."""
ROOT = Path(__file__).resolve().parents[1]


def scenarios(cards: dict[str, ToolCard]) -> dict[str, Scenario]:
    def build(name: str, nodes: list[tuple[str, str]], mode: Mode, budget: float) -> Scenario:
        mids = [n for n, _ in nodes[1:-1]]
        edges = [Edge(src="parse", dst=m) for m in mids] + [Edge(src=m, dst="merge") for m in mids]
        used = {t for _, t in nodes}
        return Scenario(name=name, mode=mode, cards={t: cards[t] for t in sorted(used)},
                        workflow=Workflow(nodes=tuple(Node(id=n, tool=t) for n, t in nodes), edges=tuple(edges)),
                        machine=Machine(name="local: 1-core CPU pool + 1-core stand-in device", cpu_cores=1,
                                        vram_budget_mb=budget, gpu_kappa=0.0, noise_cv=0.0))

    shapes7 = [("parse", "parse"), ("fetch", "fetch"), ("lookup", "lookup"), ("embed", "embed"),
               ("text", "text"), ("mm", "mm"), ("merge", "merge")]
    io4 = [("parse", "parse"), *[(f"fetch{i}", "fetch") for i in range(1, 5)], ("text", "text"), ("merge", "merge")]
    return {"shapes7": build("shapes7", shapes7, Mode.THREE_WAY, BUDGET_MB),
            "io4": build("io4", io4, Mode.BINARY, BUDGET_MB)}


def kind_of(sc: Scenario, m: Mapping) -> str:
    places = {m[n] for n in sc.workflow.node_ids if sc.card_of(n).has_gpu}
    if places == {C}:
        return "all-CPU"
    if Q in places:
        return "with gpu_queue"
    return "all-GPU (gpu_now)" if places == {G} else "CPU + gpu_now"


def choose_mappings(sc: Scenario, n: int, seed: int = 1) -> list[Mapping]:
    """All-CPU, all-GPU, all-queue when feasible, then a seeded sample round-robin over the kinds."""
    sim = Simulator(sc, noise=False)
    pool = [m for m in sc.all_mappings() if sim.infeasibility(m) is None]
    chosen: dict[Mapping, None] = {}
    for p in (C, G, Q):
        m = sc.validate_mapping(sc.uniform(p))
        if m in pool:
            chosen[m] = None
    rng = random.Random(seed)
    rng.shuffle(pool)
    by_kind: dict[str, list[Mapping]] = {}
    for m in pool:
        by_kind.setdefault(kind_of(sc, m), []).append(m)
    for group in itertools.zip_longest(*by_kind.values()):
        for m in group:
            if m is not None and len(chosen) < n:
                chosen.setdefault(m, None)
    return list(chosen)


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    conc = disc = tx = ty = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = _sign(x[i] - x[j]), _sign(y[i] - y[j])
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
    return 0 if abs(v) < 1e-9 else (1 if v > 0 else -1)


def loadavg() -> str:
    return f"{os.getloadavg()[0]:.2f}"


# ---------------------------------------------------------------------------- measuring
def profile(runs: int, own_core: bool = False, cold_loads: int = 0) -> dict[str, ToolCard]:
    config = ProfileConfig(size="tiny", runs=runs, warmup=2, loads=3, cpu_threads=1, device_threads=1,
                           own_core=own_core, cold_loads=cold_loads, cold_pause_s=COLD_PAUSE_S)
    cards = {}
    for result in profile_tools([t.name for t in make_tools()], config):
        c = result.card
        cards[c.name] = c
        print(f"  {c.name}: cpu {c.cpu_ms:.1f} ms (demand {c.cpu_demand} cores), gpu {c.gpu_ms} ms, load "
              f"{c.load_ms} ms (cold {c.load_cold_ms}), vram {c.vram_mb} MB, util {c.gpu_util}", file=sys.stderr)
    return cards


def measure(sc: Scenario, mappings: list[Mapping], runs: int) -> dict[str, Any]:
    """Every mapping ``runs`` times, interleaved; raw E2Es and per-node clocks of every run."""
    rows: list[dict[str, Any]] = [{"mapping": m.to_dict(), "e2e_ms": [], "nodes": []} for m in mappings]
    t0, la0 = time.time(), loadavg()
    with LocalExecutor(sc, device="standin", cpu_threads=1, device_threads=1) as ex:
        ex.start()
        ex.run(mappings[0])  # warm the workers (imports, first calls)
        for _ in range(runs):
            for row, m in zip(rows, mappings, strict=True):
                trace = ex.run(m)
                if not trace.feasible or trace.e2e_ms is None:
                    row["e2e_ms"].append(None)
                    continue
                row["e2e_ms"].append(trace.e2e_ms)
                row["nodes"].append({n: [t.placement.value, t.start_ms, t.end_ms, t.load_ms]
                                     for n, t in trace.nodes.items()})
    return {"mappings": rows, "started": t0, "wall_s": time.time() - t0, "loadavg": [la0, loadavg()]}


def cold_cut_ms(card: ToolCard) -> float | None:
    """A load above this counts as cold: the geometric mean of the card's warm and cold loads."""
    if card.load_cold_ms is None or card.load_cold_ms <= card.load_ms or card.load_ms <= 0:
        return None
    return float((card.load_ms * card.load_cold_ms) ** 0.5)


def calibrate_cold_share(cards: dict[str, ToolCard], rounds: int) -> dict[str, Any]:
    """``machine.cold_load_share`` at the suite's cadence (rounds back to back), measured on a workflow
    of its own: the largest table alone as ``gpu_queue``, ``rounds`` rounds in a row on the local
    executor; the share of its loads nearer (in ratio) the card's cold load than its warm one (the
    method of ``benchmarks/calibrate_cold_loads.py``, gap 0)."""
    tool = max((c for c in cards.values() if cold_cut_ms(c) is not None), key=lambda c: c.vram_mb, default=None)
    if tool is None or rounds <= 0:
        return {"share": 0.0, "tool": None, "loads_ms": []}
    sc = Scenario(name="cold", mode=Mode.THREE_WAY, cards={tool.name: tool},
                  workflow=Workflow(nodes=(Node(id="q", tool=tool.name),), edges=()),
                  machine=Machine(cpu_cores=1, vram_budget_mb=BUDGET_MB, gpu_kappa=0.0, noise_cv=0.0))
    m = Mapping({"q": Q})
    loads: list[float] = []
    with LocalExecutor(sc, device="standin", cpu_threads=1, device_threads=1) as ex:
        ex.start()
        ex.run(m)
        for _ in range(rounds):
            trace = ex.run(m)
            if trace.feasible:
                loads.append(trace.nodes["q"].load_ms)
    cut = cold_cut_ms(tool)
    assert cut is not None
    share = sum(x > cut for x in loads) / len(loads) if loads else 0.0
    print(f"  cold share: {tool.name} {len(loads)} rounds back to back, loads {[round(x) for x in loads]} ms, "
          f"cold above {cut:.0f} ms: {share:.2f}", file=sys.stderr)
    return {"share": share, "tool": tool.name, "loads_ms": loads}


def calibrate_cross_core(deadline: float) -> dict[str, Any]:
    """``benchmarks/calibrate_cross_core.py`` in a process of its own, stopped at ``deadline`` (time.time());
    its x and its table, or nothing when it did not finish in time."""
    left = deadline - time.time()
    cmd = [sys.executable, str(ROOT / "benchmarks" / "calibrate_cross_core.py"), "--reps", "3", "--runs", "6"]
    print(f"  cross-core calibration ({left / 60:.1f} min at most): {' '.join(cmd[1:])}", file=sys.stderr)
    if left < 60:
        return {}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=left, check=True)
    except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as exc:
        print(f"  cross-core calibration did not finish: {type(exc).__name__}", file=sys.stderr)
        return {}
    last = done.stdout.strip().splitlines()[-1]
    x = float(last.rsplit("=", 1)[1])
    print(f"  {last}", file=sys.stderr)
    return {"cross_core": x, "cross_core_table": done.stdout}


def run_phase(label: str, cards: dict[str, ToolCard], profiled_at: float, runs: int, n_maps: int) -> dict[str, Any]:
    age = (time.time() - profiled_at) / 60.0
    print(f"phase {label}: cards {age:.1f} min old", file=sys.stderr)
    out: dict[str, Any] = {"label": label, "age_min": age, "scenarios": {}}
    for name, sc in scenarios(cards).items():
        maps = choose_mappings(sc, n_maps)
        print(f"  {name}: {len(maps)} mappings x {runs} runs", file=sys.stderr)
        out["scenarios"][name] = measure(sc, maps, runs)
    return out


# ---------------------------------------------------------------------------- scoring
def variant(sc: Scenario, which: str, own: dict[str, ToolCard] | None, cold_share: float = 0.0,
            cross: float = 0.0, warm_reuse_ms: float = 0.0) -> Scenario | None:
    """The scenario as a model variant predicts it (None: the variant does not apply: its cards were
    not profiled, no cold loads, no cross-core figure)."""
    if which.startswith("after +"):
        has_cold = any(c.load_cold_ms is not None for c in sc.cards.values())
        extra: dict[str, Any] = {}
        if "cold loads" in which:
            if not has_cold:
                return None
            extra["cold_load_share"] = cold_share
        if "warm reuse" in which:
            extra["warm_reuse_ms"] = warm_reuse_ms
        if "cross-core" in which:
            if cross <= 0:
                return None
            extra["cross_core_slowdown"] = cross
        base = variant(sc, "after", own)
        assert base is not None
        return base.model_copy(update={"machine": base.machine.model_copy(update=extra)})
    if which == "after, own-core cards":
        if own is None:
            return None
        sc = sc.model_copy(update={"cards": {t: own[t] for t in sc.cards}})
    if which == "before":
        cards = {t: c.model_copy(update={"cpu_demand": None}) for t, c in sc.cards.items()}
        return sc.model_copy(update={"cards": cards})
    machine = sc.machine
    if "load_sharing" in Machine.model_fields:
        machine = machine.model_copy(update={"load_sharing": "device"})
    return sc.model_copy(update={"machine": machine})


VARIANTS = ("before", "after", "after, own-core cards", "after + cold loads", "after + cold loads + warm reuse",
            "after + cross-core", "after + cold loads + warm reuse + cross-core")
"""Model variants scored side by side: ``before`` (issue 20's start), ``after`` (measured CPU demand,
``load_sharing: device``), and on top of ``after`` the two machine terms of this round, each alone and
together: ``cold_load_share`` (the share calibrated at the suite's cadence, cards with
``load_cold_ms``), with it ``warm_reuse_ms`` (memory freed earlier in the request is reused warm;
``--warm-reuse-ms``) and ``cross_core_slowdown`` (``--cross-core``, from benchmarks/calibrate_cross_core.py)."""


def score(raw: dict[str, Any]) -> list[str]:
    cards = {n: ToolCard.model_validate(c) for n, c in raw["cards"].items()}
    own = ({n: ToolCard.model_validate(c) for n, c in raw["cards_own_core"].items()}
           if raw.get("cards_own_core") else None)
    scs = scenarios(cards)
    cold_share = float(raw.get("cold", {}).get("share", 0.0))
    cross = float(raw.get("cross_core", 0.0))
    reuse = float(raw.get("warm_reuse_ms", WARM_REUSE_MS))
    lines = ["| phase | cards age | workflow | model | mappings | median abs error | worst error | Kendall tau-b |",
             "|---|---:|---|---|---:|---:|---:|---:|"]
    detail: list[str] = []
    for phase in raw["phases"]:
        for name, data in phase["scenarios"].items():
            for which in VARIANTS:
                model = variant(scs[name], which, own, cold_share, cross, reuse)
                if model is None:
                    continue
                label = which.replace("cold loads", f"cold loads {cold_share:.2f}").replace(
                    "cross-core", f"cross-core {cross:g}").replace("warm reuse", f"warm reuse {reuse:g} ms")
                sim = Simulator(model, noise=False)
                preds, reals, errs = [], [], []
                for row in data["mappings"]:
                    vals = [v for v in row["e2e_ms"] if v is not None]
                    m = Mapping({k: Placement(v) for k, v in row["mapping"].items()})
                    p = sim.e2e(m)
                    if not vals or p is None:
                        continue
                    r = statistics.median(vals)
                    preds.append(p)
                    reals.append(r)
                    errs.append((p - r) / r)
                    detail.append(f"| {phase['label']} | {name} | {label} | {m.code(scs[name].workflow.node_ids)} | "
                                  f"{kind_of(scs[name], m)} | {r:.1f} | {p:.1f} | {(p - r) / r:+.1%} |")
                if not errs:
                    continue
                worst = max(errs, key=abs)
                tau = kendall_tau_b(preds, reals) if len(preds) > 2 else float("nan")
                lines.append(f"| {phase['label']} | {phase['age_min']:.0f} min | {name} | {label} | {len(errs)} | "
                             f"{statistics.median(abs(e) for e in errs):.1%} | {worst:+.1%} | {tau:+.2f} |")
    loads = [f"{p['label']}/{n}: load average {d['loadavg'][0]} -> {d['loadavg'][1]}, {d['wall_s']:.0f} s"
             for p in raw["phases"] for n, d in p["scenarios"].items()]
    out = ["# Simulator vs real on new tool shapes (`benchmarks/sim_vs_real_shapes.py`)", "",
           f"Machine: {raw['machine']}. Cards profiled {raw['profiled']}.", "", *lines, "",
           "Machine load: " + "; ".join(loads) + ".", "", "## Cards", "",
           "| tool | cpu_ms | cpu_demand | gpu_ms (stand-in) | load_ms | load_cold_ms | vram_mb | gpu_util |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    out += [f"| {c.name} | {c.cpu_ms} | {c.cpu_demand} | {c.gpu_ms} | {c.load_ms} | {c.load_cold_ms} | {c.vram_mb} "
            f"| {c.gpu_util} |" for c in cards.values()]
    cold = raw.get("cold", {})
    if cold.get("tool"):
        out += ["", f"Cold-load share at the suite's cadence (a workflow of its own: `{cold['tool']}` alone as "
                f"gpu_queue, {len(cold['loads_ms'])} rounds back to back; cold = above the geometric mean of its "
                f"card's warm and cold loads): {cold['share']:.2f}; loads "
                f"{', '.join(f'{x:.0f}' for x in cold['loads_ms'])} ms."]
    if own:
        out += ["", "Own-core cards (each call less its thread's wait for a core):", "",
                "| tool | cpu_ms | cpu_demand | gpu_ms (stand-in) | load_ms | vram_mb | gpu_util |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        out += [f"| {c.name} | {c.cpu_ms} | {c.cpu_demand} | {c.gpu_ms} | {c.load_ms} | {c.vram_mb} | {c.gpu_util} |"
                for c in own.values()]
    out += ["", "## Where the time goes: nodes alone on their device, real / card", "",
            "Every node of every run that had its device to itself (no other node of that device overlapping "
            "it): its real run time over its card's isolated figure, and a queued node's real load over its "
            "card's load_ms, split by whether the load had the device to itself. Far from 1 with the device to "
            "itself: the card, not the contention model, is off. Cold: loads above the geometric mean of the "
            "card's load_ms and load_cold_ms.", "",
            "| phase | tool | what | nodes | median | p10 | p90 | cold |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for phase in raw["phases"]:
        ratios: dict[tuple[str, str], list[float]] = {}
        colds: dict[tuple[str, str], int] = {}
        for name, data in phase["scenarios"].items():
            sc = scs[name]
            for row in data["mappings"]:
                for nodes in row["nodes"]:
                    for n, (place, start, end, load) in nodes.items():
                        card = sc.card_of(n)
                        dev = place != "cpu"
                        alone = all(o_end <= start or o_start >= end for m, (o_place, o_start, o_end, _) in
                                    nodes.items() if m != n and (o_place != "cpu") == dev)
                        ms = card.cpu_ms if not dev else card.gpu_ms
                        if alone and ms:
                            what = "run on the device" if dev else "run on the CPU"
                            ratios.setdefault((card.name, what), []).append((end - start) / ms)
                        if place == "gpu_queue" and card.load_ms > 0:
                            a, b = start - load, start  # the load's interval
                            shared = any(not (o_end <= a or o_start - (o_load or 0.0) >= b) for m, (o_place, o_start,
                                         o_end, o_load) in nodes.items() if m != n and o_place != "cpu")
                            key = (card.name, "gpu_queue load, device shared" if shared else
                                   "gpu_queue load, device to itself")
                            ratios.setdefault(key, []).append(load / card.load_ms)
                            cut = cold_cut_ms(card)
                            if cut is not None:
                                colds[key] = colds.get(key, 0) + int(load > cut)
        for (tool, what), vals in sorted(ratios.items()):
            q = statistics.quantiles(vals, n=10) if len(vals) > 1 else [vals[0]] * 9
            cold_n = f"{colds[(tool, what)]} of {len(vals)}" if (tool, what) in colds else ""
            out.append(f"| {phase['label']} | {tool} | {what} | {len(vals)} | {statistics.median(vals):.2f}x | "
                       f"{q[0]:.2f}x | {q[-1]:.2f}x | {cold_n} |")
    if raw.get("cross_core_table"):
        out += ["", "## Cross-core calibration (run during the wait for the stale phase)", "",
                *raw["cross_core_table"].strip().splitlines()[2:]]
    out += ["", "## Per mapping", "", "| phase | workflow | model | mapping | kind | real ms | predicted ms | error |",
            "|---|---|---|---|---|---:|---:|---:|", *detail]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--runs", type=int, default=5, help="real executions per mapping (median)")
    ap.add_argument("--profile-runs", type=int, default=15, help="profiler runs per tool and device")
    ap.add_argument("--mappings", type=int, default=16, help="mappings of the shapes7 workflow")
    ap.add_argument("--stale-min", type=float, default=0.0,
                    help="after the fresh phase, wait until the cards are this many minutes old and measure again")
    ap.add_argument("--own-core", action="store_true",
                    help="also profile with ProfileConfig(own_core=True) and score the 'after, own-core cards' variant")
    ap.add_argument("--cold-loads", type=int, default=2,
                    help="cold loads profiled per device tool (load_cold_ms; 0: none: no cold-load variants)")
    ap.add_argument("--cold-rounds", type=int, default=8,
                    help="rounds of the cold-share calibration (the largest table alone, back to back)")
    ap.add_argument("--cold-share", type=float, help="score with this cold_load_share instead of the calibrated one")
    ap.add_argument("--warm-reuse-ms", type=float, default=WARM_REUSE_MS,
                    help="machine.warm_reuse_ms of the warm-reuse variants")
    ap.add_argument("--cross-core", type=float, default=0.0,
                    help="machine.cross_core_slowdown of the cross-core variants (benchmarks/calibrate_cross_core.py; "
                         "0: those variants are skipped)")
    ap.add_argument("--calibrate-cross-core", action="store_true",
                    help="while waiting for the stale phase, run benchmarks/calibrate_cross_core.py and score the "
                         "cross-core variants with its x (unless --cross-core is given)")
    ap.add_argument("--cards", type=Path, help="reuse the cards of an earlier --raw file instead of profiling")
    ap.add_argument("--raw", type=Path, default=ROOT / "benchmarks" / "results" / "sim_vs_real_shapes.json")
    ap.add_argument("--report", type=Path, help="only score a saved --raw file with the current model")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sim_vs_real_shapes.md")
    args = ap.parse_args()
    for tool in make_tools():
        register_tool(tool, replace=True)
    if args.report:
        raw = json.loads(args.report.read_text())
        raw["cross_core"] = args.cross_core or raw.get("cross_core", 0.0)
    else:
        t0 = time.monotonic()
        if args.cards:
            old = json.loads(args.cards.read_text())
            cards = {n: ToolCard.model_validate(c) for n, c in old["cards"].items()}
            own = {n: ToolCard.model_validate(c) for n, c in old.get("cards_own_core", {}).items()} or None
            profiled_at = float(old["profiled_at"])
        else:
            print("profiling ...", file=sys.stderr)
            cards = profile(args.profile_runs, cold_loads=args.cold_loads)
            own = profile(args.profile_runs, own_core=True, cold_loads=args.cold_loads) if args.own_core else None
            profiled_at = time.time()
        raw = {"cards": {n: c.model_dump(mode="json") for n, c in cards.items()}, "profiled_at": profiled_at,
               "cards_own_core": {n: c.model_dump(mode="json") for n, c in own.items()} if own else {},
               "profiled": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(profiled_at)),
               "machine": f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}; "
                          "CPU pool 1 thread, stand-in device 1 thread (no GPU)",
               "command": " ".join(sys.argv), "phases": [], "cross_core": args.cross_core,
               "cold": calibrate_cold_share(cards, args.cold_rounds)}
        label = "reused" if args.cards else "fresh"
        raw["phases"].append(run_phase(label, cards, profiled_at, args.runs, args.mappings))
        args.raw.parent.mkdir(parents=True, exist_ok=True)
        args.raw.write_text(json.dumps(raw))
        if args.stale_min > 0:
            if args.calibrate_cross_core:
                raw.update(calibrate_cross_core(profiled_at + args.stale_min * 60.0 - 15.0))
                if args.cross_core:
                    raw["cross_core"] = args.cross_core
                args.raw.write_text(json.dumps(raw))
            wait = profiled_at + args.stale_min * 60.0 - time.time()
            if wait > 0:
                print(f"waiting {wait / 60:.1f} min for the cards to be {args.stale_min:g} min old", file=sys.stderr)
                time.sleep(wait)
            raw["phases"].append(run_phase("stale", cards, profiled_at, args.runs, args.mappings))
            args.raw.write_text(json.dumps(raw))
        print(f"measured in {time.monotonic() - t0:.0f} s; raw: {args.raw}", file=sys.stderr)
    raw["warm_reuse_ms"] = args.warm_reuse_ms
    if args.cold_share is not None:
        raw.setdefault("cold", {"tool": None, "loads_ms": []})["share"] = args.cold_share
    text = "\n".join(score(raw)) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
