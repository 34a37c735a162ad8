"""The bench's figures (matplotlib, Agg backend, PNG): E2E normalized to the oracle (the paper's
Figure 5), convergence per round, a Gantt chart of all-GPU vs the oracle on the Table 2
fan-out with the GPU sharing visible, VRAM over time against the budget on the two-tool
exchange scenario, and cumulative regret.

Schedules in the Gantt and VRAM figures are noise-free simulator traces of the stored
scenarios, so they show the model's answer, not one noisy draw. Imports matplotlib (the
``bench`` extra), the model, the simulator and the bench data module.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from hetsched.export import lanes
from hetsched.model import Mode, Placement, Scenario, Trace
from hetsched.sim import Simulator

from .data import BenchData, code_mapping, scenario_reference

CLIP = 3.0
"""E2E ratios above this are drawn at the top edge of the ratio plots (all-CPU can be 10x+)."""
_PNG_META: dict[str, Any] = {"Software": None}  # no version string: same data -> same bytes


def colors(labels: Sequence[str]) -> dict[str, Any]:
    """One stable colour per policy label."""
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {lb: cmap(i % cmap.N) for i, lb in enumerate(labels)}


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=110, metadata=_PNG_META)
    plt.close(fig)
    return path


def _grid(n: int, ncols: int = 4, size: tuple[float, float] = (3.6, 2.6)) -> tuple[Figure, list[Axes]]:
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows + 0.8), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    for ax in flat[:n]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # fixed margins in inches (legend strip below, title above): tight_layout costs seconds on 13 panels
    height = size[1] * nrows + 0.8
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.95 / height, top=1 - 0.75 / height, wspace=0.28, hspace=0.42)
    return fig, flat[:n]


# ---------------------------------------------------------------------------- Figure 5
def fig_e2e_normalized(data: BenchData, path: Path) -> Path:
    """Grouped bars: noise-free E2E of each policy's best-found mapping / oracle E2E, per scenario."""
    names, labels = data.scenario_names(), data.labels
    col = colors(labels)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.0 + 0.09 * len(labels) * len(names) + 0.4 * len(names)), 4.6))
    width = 0.8 / max(1, len(labels))
    for j, lb in enumerate(labels):
        xs, ys, oom_x = [], [], []
        for i, s in enumerate(names):
            runs = data.cell(s, lb)
            if not runs:
                continue
            true = [b.true_e2e_ms for r in runs if (b := r.best_round()) is not None and b.true_e2e_ms is not None]
            x = i - 0.4 + width * (j + 0.5)
            if not true:
                oom_x.append(x)
                continue
            xs.append(x)
            ys.append(min(CLIP, statistics.fmean(true) / runs[0].oracle_e2e_ms))
        ax.bar(xs, [y - 1 for y in ys], bottom=1, width=width, color=col[lb], label=lb)
        ax.scatter(xs, ys, marker="_", color=col[lb], s=60, zorder=3)  # shows bars that sit at 1.0
        if oom_x:
            ax.scatter(oom_x, [CLIP] * len(oom_x), marker="x", color=col[lb], s=28, zorder=3)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0.95, CLIP * 1.04)
    ax.set_ylabel("E2E / oracle E2E")
    ax.set_title(f"E2E of the best-found mapping / oracle E2E (noise-free; x: no feasible round; clipped at {CLIP:g})",
                 fontsize=10)
    ax.legend(ncols=min(len(labels), 5), fontsize=8, loc="upper left")
    fig.tight_layout()
    return _save(fig, path)


# ---------------------------------------------------------------------------- convergence
def fig_convergence(data: BenchData, path: Path) -> Path:
    """Per scenario: noise-free E2E / oracle of each round's mapping (mean over seeds), per policy."""
    names, labels = data.scenario_names(), data.labels
    col = colors(labels)
    fig, axes = _grid(len(names))
    for ax, s in zip(axes, names, strict=True):
        for lb in labels:
            runs = data.cell(s, lb)
            if not runs:
                continue
            n = max(len(r.rounds) for r in runs)
            ys, oom = [], []
            for k in range(n):
                pairs = [(r.rounds[k].true_e2e_ms, r.oracle_e2e_ms) for r in runs if k < len(r.rounds)]
                vals = [t / o for t, o in pairs if t is not None]
                infeasible = sum(1 for r in runs if k < len(r.rounds) and not r.rounds[k].feasible)
                ys.append(min(CLIP, statistics.median(vals)) if vals else math.nan)
                oom.append(infeasible > len(runs) / 2)
            ax.plot(range(n), ys, color=col[lb], lw=1.2, label=lb)
            ox = [k for k in range(n) if oom[k]]
            if ox:
                ax.scatter(ox, [CLIP] * len(ox), marker="x", color=col[lb], s=14)
        ax.axhline(1.0, color="black", lw=0.6)
        ax.set_ylim(0.95, CLIP * 1.04)
        ax.set_title(f"{s} ({data.scenarios[s].mode.value})", fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("E2E / oracle")
    handles, lbls = axes[0].get_legend_handles_labels()
    fig.legend(handles, lbls, loc="lower center", ncols=min(len(labels), 9), fontsize=8)
    fig.suptitle("Convergence: noise-free E2E of each round's mapping / oracle (median over seeds; x: most seeds OOM; "
                 f"clipped at {CLIP:g})",
                 fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------------------- regret
def fig_regret(data: BenchData, path: Path) -> Path:
    """Per scenario: cumulative true regret in oracle E2Es (mean over seeds), per policy, symlog scale."""
    names, labels = data.scenario_names(), data.labels
    col = colors(labels)
    fig, axes = _grid(len(names))
    for ax, s in zip(axes, names, strict=True):
        for lb in labels:
            runs = data.cell(s, lb)
            if not runs:
                continue
            curves = [[v / r.oracle_e2e_ms for v in r.cumulative_regret()] for r in runs]
            n = min(len(c) for c in curves)
            ax.plot(range(n), [statistics.fmean(c[k] for c in curves) for k in range(n)], color=col[lb], lw=1.2,
                    label=lb)
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_title(s, fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("regret / oracle E2E")
    handles, lbls = axes[0].get_legend_handles_labels()
    fig.legend(handles, lbls, loc="lower center", ncols=min(len(labels), 9), fontsize=8)
    fig.suptitle("Cumulative regret over rounds (sum of E2E - oracle E2E, in oracle E2Es; OOM rounds charged the "
                 "all-CPU E2E)", fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------------------- Gantt
def pick_fanout(data: BenchData) -> str | None:
    """The Gantt scenario: S5 when present, else the first binary scenario with parallel GPU tools."""
    if "S5" in data.scenarios:
        return "S5"
    for s in data.scenario_names():
        sc = data.scenarios[s]
        if sc.mode is Mode.BINARY and len(sc.workflow.sources) > 1:
            return s
    return None


def _gpu_concurrency(trace: Trace) -> tuple[list[float], list[int]]:
    events: list[tuple[float, int]] = []
    for n in trace.nodes.values():
        if n.placement.on_gpu:
            events += [(n.start_ms, 1), (n.end_ms, -1)]
    ts, ks, k = [0.0], [0], 0
    for t, d in sorted(events, key=lambda e: (e[0], e[1])):
        k += d
        ts.append(t)
        ks.append(k)
    return ts, ks


def _gantt(ax: Axes, share: Axes, trace: Trace, title: str, xmax: float, node_color: dict[str, Any],
           iso: dict[str, float]) -> None:
    gpu = [(n.start_ms, n.end_ms, n.node) for n in trace.nodes.values() if n.placement.on_gpu]
    cpu = [(n.start_ms, n.end_ms, n.node) for n in trace.nodes.values() if n.placement is Placement.CPU]
    g_lanes, c_lanes = lanes(gpu), lanes(cpu)
    n_g = max(g_lanes.values(), default=-1) + 1
    n_c = max(c_lanes.values(), default=-1) + 1
    rows = [f"GPU {i + 1}" for i in range(n_g)] + [f"CPU {i + 1}" for i in range(n_c)]
    for n in trace.nodes.values():
        y = g_lanes[n.node] if n.placement.on_gpu else n_g + c_lanes[n.node]
        if n.load_ms > 0:
            ax.barh(y, n.load_ms, left=n.admitted_ms, color="lightgrey", edgecolor="grey", hatch="//", height=0.7)
        ax.barh(y, n.end_ms - n.start_ms, left=n.start_ms, color=node_color[n.node], height=0.7, edgecolor="black",
                lw=0.5)
        alone = iso.get(n.node)
        extra = f" (alone {alone:.0f})" if alone is not None and abs(alone - (n.end_ms - n.start_ms)) > 0.5 else ""
        ax.text(n.start_ms + (n.end_ms - n.start_ms) / 2, y,
                f"{n.node} {n.tool}\n{n.end_ms - n.start_ms:.0f} ms{extra}", ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, xmax)
    ax.axvline(trace.e2e_ms or 0, color="red", lw=1, ls="--")
    ax.set_title(f"{title}: E2E {trace.e2e_ms:.1f} ms", fontsize=9, loc="left")
    ax.tick_params(labelbottom=False)
    ts, ks = _gpu_concurrency(trace)
    share.step(ts, ks, where="post", color="tab:red")
    share.fill_between(ts, ks, step="post", color="tab:red", alpha=0.25)
    share.set_xlim(0, xmax)
    share.set_ylim(0, max([*ks, 1]) + 0.5)
    share.set_yticks([0, max([*ks, 1])])
    share.set_ylabel("GPU\nsharers", fontsize=7)
    share.tick_params(labelsize=7)


def fig_gantt(scenario: Scenario, path: Path) -> Path:
    """All-GPU vs the oracle on one scenario, noise-free; the strip under each chart counts GPU sharers."""
    sim = Simulator(scenario, noise=False)
    all_gpu = sim.run(scenario.uniform(Placement.GPU_NOW))
    best = sim.run(scenario_reference(scenario).mapping)
    cmap = plt.get_cmap("Set2")
    node_color = {n: cmap(i % cmap.N) for i, n in enumerate(scenario.workflow.node_ids)}
    traces = [("all-GPU", all_gpu), ("oracle", best)] if all_gpu.feasible else [("oracle", best)]
    xmax = 1.05 * max(t.e2e_ms or 0 for _, t in traces)
    ratios: list[float] = []
    for _ in traces:
        ratios += [3.0, 0.8]
    fig, axes = plt.subplots(len(ratios), 1, figsize=(10, 2.7 * len(traces) + 1.0), sharex=False,
                             gridspec_kw={"height_ratios": ratios})
    iso: dict[str, float] = {}
    for n in scenario.workflow.node_ids:
        card = scenario.card_of(n)
        iso[n] = card.gpu_ms if card.gpu_ms is not None else card.cpu_ms
    for i, (title, tr) in enumerate(traces):
        alone = {n: (iso[n] if tr.nodes[n].placement.on_gpu else scenario.card_of(n).cpu_ms) for n in tr.nodes}
        _gantt(axes[2 * i], axes[2 * i + 1], tr, title, xmax, node_color, alone)
    axes[-1].set_xlabel("time (ms)")
    fig.suptitle(f"{scenario.name}: all-GPU vs oracle schedule (noise-free). Bars: run time under sharing; "
                 "red strip: GPU tasks running at once", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


# ---------------------------------------------------------------------------- VRAM
def pick_vram(data: BenchData) -> str | None:
    """The VRAM scenario: S13 when present, else the last three-way scenario."""
    if "S13" in data.scenarios:
        return "S13"
    three = [s for s in data.scenario_names() if data.scenarios[s].mode is Mode.THREE_WAY]
    return three[-1] if three else None


def _vram_steps(trace: Trace) -> tuple[list[float], list[float]]:
    ts = [p.t_ms for p in trace.vram_timeline] + [trace.e2e_ms or 0.0]
    us = [p.used_mb for p in trace.vram_timeline] + [0.0]
    return ts, us


def fig_vram(data: BenchData, scenario: Scenario, path: Path) -> Path:
    """VRAM in use over time for the oracle (best) mapping against the budget, with greedy's if it ran."""
    sim = Simulator(scenario, noise=False)
    budget = scenario.machine.vram_budget_mb
    runs = [r for r in data.runs if r.scenario == scenario.name]
    best_mapping = code_mapping(scenario, runs[0].oracle_code) if runs else scenario_reference(scenario).mapping
    lines: list[tuple[str, Trace]] = [("oracle (best mapping)", sim.run(best_mapping))]
    greedy = data.cell(scenario.name, "greedy-mem")
    if greedy and greedy[0].rounds:
        tr = sim.run(code_mapping(scenario, greedy[0].rounds[0].code))
        if tr.feasible:
            lines.append(("greedy-mem", tr))
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for (label, tr), color in zip(lines, ("tab:blue", "tab:orange"), strict=False):
        ts, us = _vram_steps(tr)
        ax.step(ts, us, where="post", color=color, lw=1.6,
                label=f"{label}: {tr.mapping.code(scenario.workflow.node_ids)}, E2E {tr.e2e_ms:.0f} ms")
        for n in tr.nodes.values():
            if n.placement is Placement.GPU_QUEUE:
                # marker + text, no arrow: arrow clipping (bezier search) was seen to stall drawing
                ax.plot([n.admitted_ms], [budget], marker="v", color=color, ms=5)
                ax.text(n.admitted_ms, budget * 1.04, f"{n.node} admitted", fontsize=7, color=color, ha="center")
    ax.axhline(budget, color="red", ls="--", lw=1, label=f"budget {budget:g} MB")
    best = lines[0][1]
    ax.set_title(f"{scenario.name}: VRAM in use (noise-free); oracle's gpu_now set holds "
                 f"{scenario.gpu_now_vram_mb(best.mapping):g} of {budget:g} MB at t = 0", fontsize=9)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("VRAM (MB)")
    ax.set_ylim(0, budget * 1.2)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return _save(fig, path)


def all_figures(data: BenchData, folder: Path) -> list[tuple[str, Path]]:
    """Write every figure that applies to the data; (caption, path) pairs in report order."""
    folder.mkdir(parents=True, exist_ok=True)
    out = [
        ("E2E of the best-found mapping normalized to the oracle (Figure 5 style)",
         fig_e2e_normalized(data, folder / "e2e_normalized.png")),
        ("Convergence per round", fig_convergence(data, folder / "convergence.png")),
        ("Cumulative regret", fig_regret(data, folder / "regret.png")),
    ]
    fan = pick_fanout(data)
    if fan is not None:
        out.append((f"{fan}: all-GPU vs oracle schedule, GPU sharing visible",
                    fig_gantt(data.scenarios[fan], folder / f"gantt_{fan}.png")))
    vram = pick_vram(data)
    if vram is not None:
        out.append((f"{vram}: VRAM over time against the budget", fig_vram(data, data.scenarios[vram],
                                                                          folder / f"vram_{vram}.png")))
    return out
