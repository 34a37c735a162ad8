"""The bench's figures (matplotlib, Agg backend, PNG): E2E normalized to the oracle (the paper's
Figure 5), convergence per round, cumulative regret, a Gantt chart of all-GPU against the
reference for every scenario (also ``hetsched gantt`` for any scenario and mapping), and VRAM
over time against the budget on a three-way scenario.

Every policy keeps one colour and marker in every figure and every report, whichever policies
and scenarios a bench has (:func:`style`). Schedules in the Gantt and VRAM figures are
noise-free simulator traces of the stored scenarios, so they show the model's answer, not one
noisy draw. Imports matplotlib (the ``bench`` extra), the model, the simulator, the exporter's
lane assignment and the bench data module.
"""

from __future__ import annotations

import functools
import io
import math
import re
import statistics
import textwrap
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from hetsched.export import lanes
from hetsched.model import Mapping, Mode, Placement, Scenario, Trace
from hetsched.model.files import write_output
from hetsched.sim import Simulator

from .data import BenchData, code_mapping, scenario_reference

CLIP = 3.0
"""E2E ratios above this are drawn at the top edge of the ratio plots (all-CPU can be 10x+)."""
MAX_LABELLED_NODES = 40
"""Gantt bars carry their node's name and times only up to this many nodes (else the chart is unreadable)."""
_PNG_META: dict[str, Any] = {"Software": None}  # no version string: same data -> same bytes


# ---------------------------------------------------------------------------- one style per policy
@dataclass(frozen=True)
class Style:
    """How one policy is drawn in every figure."""

    color: str
    """Line and bar colour."""
    marker: str
    """Marker of its line."""
    emphasis: bool = False
    """Drawn thicker and on top (the oracle and the agentic policy: what the figures are about)."""
    faint: bool = False
    """Drawn thin and translucent underneath (UCB1's exploration zigzag would hide the rest)."""


_STYLES: dict[str, Style] = {
    "all-cpu": Style("#7f7f7f", "s"),
    "all-gpu": Style("#d62728", "v"),
    "oracle": Style("#000000", "*", emphasis=True),
    "heft-cf": Style("#ff7f0e", "^"),
    "starpu-dmda": Style("#8c564b", "D"),
    "ucb1": Style("#bcbd22", ".", faint=True),
    "greedy-mem": Style("#e377c2", "P"),
    "agentic": Style("#1f77b4", "o", emphasis=True),
    "agentic:rules": Style("#1f77b4", "o", emphasis=True),
    "agentic:argmin": Style("#17becf", "X", emphasis=True),
    "agentic:openai": Style("#2ca02c", "h", emphasis=True),
    "agentic:local": Style("#9467bd", "p", emphasis=True),
}
_SPARE_COLORS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#31a354", "#756bb1",
                 "#636363", "#e6550d")
_SPARE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h", "<", ">")


def style(label: str) -> Style:
    """The fixed style of a policy label; other labels get one derived from the label's text alone,
    so a policy looks the same in every report whatever else was benched."""
    if label in _STYLES:
        return _STYLES[label]
    base = re.split(r"[\[(]", label, maxsplit=1)[0]
    h = zlib.crc32(label.encode("utf-8"))
    known = _STYLES.get(base)
    if known is not None:  # a variant (agentic[cold_start=True,...]): its family's colour, another marker
        return Style(known.color, _SPARE_MARKERS[h % len(_SPARE_MARKERS)], known.emphasis, known.faint)
    family = "agentic" if base.startswith("agentic") else ""
    return Style(_SPARE_COLORS[h % len(_SPARE_COLORS)], _SPARE_MARKERS[(h // 7) % len(_SPARE_MARKERS)],
                 emphasis=bool(family))


def colors(labels: Sequence[str]) -> dict[str, Any]:
    """One stable colour per policy label (:func:`style`)."""
    return {lb: style(lb).color for lb in labels}


def _draw_order(labels: Sequence[str]) -> list[str]:
    """Faint lines first, emphasized ones last (on top), the oracle's dashed line over everything."""
    return sorted(labels, key=lambda lb: (not style(lb).faint, style(lb).emphasis, lb == "oracle"))


def _line_kw(label: str, index: int, n_points: int) -> dict[str, Any]:
    st = style(label)
    every = max(1, min(4, n_points // 5 or 1))
    kw: dict[str, Any] = {"color": st.color, "marker": st.marker, "ms": 5 if st.emphasis else 4,
                          "markevery": (index % every, every), "label": label}
    if label == "oracle":  # dashed on top: a policy that matches it shows through the gaps
        kw.update(lw=1.4, ls=(0, (4, 3)), zorder=7)
    elif st.emphasis:
        kw.update(lw=2.2, zorder=6)
    elif st.faint:
        kw.update(lw=0.9, alpha=0.45, zorder=2, ms=3)
    else:
        kw.update(lw=1.3, zorder=4)
    return kw


def _legend_handles(labels: Sequence[str], kind: str = "line") -> list[Any]:
    """Explicit legend entries (an empty bar series would otherwise get matplotlib's default colour)."""
    out: list[Any] = []
    for lb in labels:
        st = style(lb)
        if kind == "bar":
            out.append(Patch(facecolor=st.color, edgecolor="black", lw=0.4, label=lb))
        else:
            out.append(Line2D([0], [0], color=st.color, marker=st.marker, lw=2.2 if st.emphasis else 1.3,
                              alpha=0.6 if st.faint else 1.0, label=lb))
    return out


def slug(name: str) -> str:
    """A file-name-safe form of a scenario name (``gantt_<slug>.png``)."""
    text = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")[:60] or "scenario"
    return text if text == name else f"{text}_{zlib.crc32(name.encode('utf-8')):08x}"


_F = TypeVar("_F", bound=Callable[..., Path])


def _plain_text(draw: _F) -> _F:
    """Draw with mathtext off: a scenario, node or tool named ``a $\\frac{$ b`` is text, not a formula
    (matplotlib would otherwise parse it and fail)."""

    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Path:
        with plt.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _save(fig: Figure, path: Path) -> Path:
    """Write the figure as PNG; a file that cannot be written (a full disk, ``/dev/full``) is an OutputError."""
    buffer = io.BytesIO()  # rendered in memory, then written whole: matplotlib lets some write errors pass
    try:
        fig.savefig(buffer, format="png", dpi=110, metadata=_PNG_META)
    finally:
        plt.close(fig)
    write_output(path, buffer.getvalue(), what="figure")
    return path


MIN_GRID_WIDTH_IN = 9.0
"""Narrowest figure of panels: one or two scenarios still get room for the title, axes and legend."""
_TITLE_CHARS_PER_IN = 13.0  # characters of a 10 pt title per inch of figure width (a safe estimate)


def _grid(n: int, title: str, ylabel: str, ncols: int = 4, size: tuple[float, float] = (3.6, 2.6),
          legend_rows: int = 1) -> tuple[Figure, list[Axes]]:
    """``n`` panels in rows of ``ncols`` under a title wrapped to the figure's width, each row's first
    panel labelled ``ylabel``. Margins are fixed in inches (legend strip below, the title's lines above,
    the tick labels and y label on the left), so nothing is cut however few panels there are."""
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    width = max(size[0] * ncols, MIN_GRID_WIDTH_IN)
    lines = textwrap.wrap(title, width=int(width * _TITLE_CHARS_PER_IN)) or [""]
    title_in = 0.3 + 0.2 * len(lines)
    legend_in = 0.35 + 0.25 * legend_rows
    height = size[1] * nrows + title_in + legend_in + 0.35
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    for ax in flat[:n]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in flat[:n:ncols]:
        ax.set_ylabel(ylabel, fontsize=8)
    fig.suptitle("\n".join(lines), fontsize=10, y=1 - 0.12 / height, va="top")
    # tight_layout costs seconds on 13 panels: margins in inches instead
    fig.subplots_adjust(left=0.85 / width, right=1 - 0.2 / width, bottom=(legend_in + 0.35) / height,
                        top=1 - (title_in + 0.1) / height, wspace=0.32, hspace=0.45)
    return fig, flat[:n]


def _legend_below(fig: Figure, labels: Sequence[str], kind: str = "line") -> None:
    ncols = min(len(labels), 6)
    fig.legend(handles=_legend_handles(labels, kind), loc="lower center", ncols=max(1, ncols), fontsize=8,
               frameon=False)


def _present(data: BenchData) -> list[str]:
    return [lb for lb in data.labels if any(r.label == lb for r in data.runs)]


# ---------------------------------------------------------------------------- Figure 5
@_plain_text
def fig_e2e_normalized(data: BenchData, path: Path) -> Path:
    """Grouped bars from 0: noise-free E2E of each policy's best-found mapping / oracle E2E, per scenario."""
    names, labels = data.scenario_names(), _present(data)
    legend_rows = math.ceil(len(labels) / 6)
    width_in = max(8.0, 1.2 + 0.11 * len(labels) * len(names) + 0.5 * len(names))
    fig, ax = plt.subplots(figsize=(width_in, 4.4 + 0.25 * legend_rows))
    width = 0.8 / max(1, len(labels))
    top = CLIP * 1.12
    for j, lb in enumerate(labels):
        st = style(lb)
        xs, ys, clipped, oom_x = [], [], [], []
        for i, s in enumerate(names):
            runs = data.cell(s, lb)
            if not runs:
                continue
            true = [b.true_e2e_ms for r in runs if (b := r.best_round()) is not None and b.true_e2e_ms is not None]
            x = i - 0.4 + width * (j + 0.5)
            if not true:
                oom_x.append(x)
                continue
            ratio = statistics.fmean(true) / runs[0].oracle_e2e_ms
            xs.append(x)
            ys.append(min(CLIP, ratio))
            if ratio > CLIP:
                clipped.append((x, ratio))
        if xs:
            ax.bar(xs, ys, width=width, color=st.color, edgecolor="black", lw=0.3, zorder=3)
        for x, ratio in clipped:
            ax.text(x, CLIP * 1.01, f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x", ha="center", va="bottom",
                    fontsize=6, rotation=90, color=st.color)
        if oom_x:
            ax.scatter(oom_x, [0.08] * len(oom_x), marker="x", color=st.color, s=30, zorder=4)
    ax.axhline(1.0, color="black", lw=0.9, ls="--", zorder=5)
    ax.text(len(names) - 0.5, 1.0, " oracle", va="center", ha="left", fontsize=7)
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.5, len(names) - 0.5)
    ax.set_ylim(0, top)
    ax.set_ylabel("E2E / oracle E2E (1 = oracle)")
    ax.set_title(f"E2E of the best-found mapping / oracle E2E (noise-free)\nx at the bottom: no feasible round; "
                 f"bars clipped at {CLIP:g}x with the value above them", fontsize=9)
    ax.legend(handles=_legend_handles(labels, "bar"), loc="upper center", bbox_to_anchor=(0.5, -0.08),
              ncols=min(len(labels), 6), fontsize=8, frameon=False)
    fig.tight_layout()
    return _save(fig, path)


# ---------------------------------------------------------------------------- convergence
@_plain_text
def fig_convergence(data: BenchData, path: Path) -> Path:
    """Per scenario: noise-free E2E / oracle of each round's mapping (median over seeds), per policy."""
    names, labels = data.scenario_names(), _present(data)
    title = ("Convergence: noise-free E2E of each round's mapping / oracle (dashed line: oracle; median over "
             f"seeds; x at the top: most seeds infeasible; clipped at {CLIP:g})")
    fig, axes = _grid(len(names), title, "E2E / oracle", legend_rows=math.ceil(len(labels) / 6))
    for ax, s in zip(axes, names, strict=True):
        ax.axhline(1.0, color="#999999", lw=0.8, ls="--", zorder=1)
        for lb in _draw_order(labels):
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
            ax.plot(range(n), ys, **_line_kw(lb, labels.index(lb), n))
            ox = [k for k in range(n) if oom[k]]
            if ox:
                ax.scatter(ox, [CLIP * 1.06] * len(ox), marker="x", color=style(lb).color, s=14, clip_on=False)
        ax.set_ylim(0.9, CLIP * 1.1)
        ax.set_title(f"{s} ({data.scenarios[s].mode.value})", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("round", fontsize=7)
    _legend_below(fig, labels)
    return _save(fig, path)


# ---------------------------------------------------------------------------- regret
@_plain_text
def fig_regret(data: BenchData, path: Path) -> Path:
    """Per scenario: cumulative true regret in oracle E2Es (mean over seeds), per policy, symlog scale."""
    names, labels = data.scenario_names(), _present(data)
    title = ("Cumulative regret over rounds (sum of E2E - oracle E2E, in oracle E2Es; 0 = the oracle every "
             "round; infeasible rounds charged the all-CPU E2E)")
    fig, axes = _grid(len(names), title, "cumulative regret (oracle E2Es)", legend_rows=math.ceil(len(labels) / 6))
    for ax, s in zip(axes, names, strict=True):
        for lb in _draw_order(labels):
            runs = data.cell(s, lb)
            if not runs:
                continue
            curves = [[v / r.oracle_e2e_ms for v in r.cumulative_regret()] for r in runs]
            n = min(len(c) for c in curves)
            ax.plot(range(n), [statistics.fmean(c[k] for c in curves) for k in range(n)],
                    **_line_kw(lb, labels.index(lb), n))
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_ylim(bottom=-0.03)  # a policy with no regret draws on 0, above the axis line
        # plain numbers: the log formatters write mathtext ('$\\mathdefault{10^{2}}$'), shown raw with it off
        ax.yaxis.set_major_formatter(FuncFormatter(_tick_number))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(s, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("round", fontsize=7)
    _legend_below(fig, labels)
    return _save(fig, path)


def _tick_number(value: float, _pos: object = None) -> str:
    """A tick as plain text: 0, 0.1, 1, 10, 100, 1000, 1e+04."""
    if value == 0:
        return "0"
    return f"{value:g}"


# ---------------------------------------------------------------------------- Gantt
def pick_fanout(data: BenchData) -> str | None:
    """The scenario of the report's first Gantt chart: S5 when present, else the first binary scenario
    with parallel GPU tools, else the first scenario."""
    if "S5" in data.scenarios:
        return "S5"
    for s in data.scenario_names():
        sc = data.scenarios[s]
        if sc.mode is Mode.BINARY and len(sc.workflow.sources) > 1:
            return s
    names = data.scenario_names()
    return names[0] if names else None


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
    labelled = len(trace.nodes) <= MAX_LABELLED_NODES
    # one broken_barh per row: thousands of nodes draw in one artist per lane, not one per node
    runs: dict[int, list[tuple[float, float]]] = {}
    colours: dict[int, list[Any]] = {}
    loads: dict[int, list[tuple[float, float]]] = {}
    busy: dict[int, list[tuple[float, float]]] = {}  # each lane's occupied spans, loads included
    lane_of: dict[str, int] = {}
    for n in trace.nodes.values():
        y = g_lanes[n.node] if n.placement.on_gpu else n_g + c_lanes[n.node]
        lane_of[n.node] = y
        if n.load_ms > 0:
            loads.setdefault(y, []).append((n.admitted_ms, n.load_ms))
        runs.setdefault(y, []).append((n.start_ms, n.end_ms - n.start_ms))
        colours.setdefault(y, []).append(node_color[n.node])
        busy.setdefault(y, []).append((n.admitted_ms if n.load_ms > 0 else n.start_ms, n.end_ms))
    if labelled:
        # a label's width in ms: characters x the 7 pt font's average advance, scaled by the axes' ms per inch
        ax_width_in = ax.get_position().width * ax.get_figure(root=True).get_figwidth()  # type: ignore[union-attr]
        ms_per_char = 7 * 0.56 / 72 * xmax / max(ax_width_in, 0.1)
        keyed: list[str] = []
        for n in trace.nodes.values():
            y = lane_of[n.node]
            run_ms = n.end_ms - n.start_ms
            alone = iso.get(n.node)
            extra = f" (alone {alone:.0f})" if alone is not None and abs(alone - run_ms) > 0.5 else ""
            text = f"{n.node} {n.tool}\n{run_ms:.0f} ms{extra}"
            need = ms_per_char * (max(len(line) for line in text.split("\n")) + 1)
            after = min([a for a, _ in busy[y] if a >= n.end_ms - 1e-9 and (a, _) != (n.start_ms, n.end_ms)]
                        + [xmax])
            first = n.admitted_ms if n.load_ms > 0 else n.start_ms  # its own load bar is not free room
            before = max([e for _, e in busy[y] if e <= first + 1e-9 and e != n.end_ms] + [0.0])
            if run_ms >= need:
                ax.text((n.start_ms + n.end_ms) / 2, y, text, ha="center", va="center", fontsize=7, clip_on=True)
            elif after - n.end_ms >= need:  # a short bar: the label beside it, where the lane is free
                ax.text(n.end_ms + 0.005 * xmax, y, text, ha="left", va="center", fontsize=7, clip_on=True)
            elif first - before >= need:
                ax.text(first - 0.005 * xmax, y, text, ha="right", va="center", fontsize=7, clip_on=True)
            else:  # no room anywhere on its lane: its id on the bar if it fits, the full label in the key
                if run_ms >= ms_per_char * (len(n.node) + 1):
                    ax.text((n.start_ms + n.end_ms) / 2, y, n.node, ha="center", va="center", fontsize=7,
                            clip_on=True)
                keyed.append(f"{n.node} {n.tool} {run_ms:.0f} ms{extra}")
        if keyed:
            key = "; ".join(keyed)
            ax.text(1.0, 1.02, key if len(key) <= 110 else key[:107] + "...", transform=ax.transAxes, ha="right",
                    va="bottom", fontsize=7)
    for y, spans in loads.items():
        ax.broken_barh(spans, (y - 0.35, 0.7), facecolors="lightgrey", edgecolors="grey", hatch="//")
    for y, spans in runs.items():
        ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colours[y], edgecolors="black", lw=0.5)
    if len(rows) <= 40:
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
    else:
        ax.set_yticks([0, n_g] if n_g and n_c else [0], ["GPU" if n_g else "CPU"] + (["CPU"] if n_g and n_c else []),
                      fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
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


@_plain_text
def gantt_figure(scenario: Scenario, schedules: Sequence[tuple[str, Mapping]], path: Path,
                 subtitle: str = "") -> Path:
    """Noise-free Gantt charts of ``(title, mapping)`` schedules on one scenario, one under the other on
    one time axis; the strip under each chart counts the tasks sharing the GPU. Infeasible mappings
    are listed in the title with their reason instead of a chart."""
    sim = Simulator(scenario, noise=False)
    traces: list[tuple[str, Trace]] = []
    refused: list[str] = []
    for title, mapping in schedules:
        tr = sim.run(mapping)
        if tr.feasible:
            traces.append((title, tr))
        else:
            reason = tr.reason if len(tr.reason) <= 110 else tr.reason[:107] + "..."
            refused.append(f"{title}: infeasible ({reason})")
    if not traces:
        raise ValueError("no feasible schedule to draw")
    xmax = 1.05 * max(t.e2e_ms or 0 for _, t in traces)
    ratios: list[float] = []
    for _ in traces:
        ratios += [3.0, 0.8]
    height = 2.7 * len(traces) + 1.4
    fig, axes = plt.subplots(len(ratios), 1, figsize=(10, height), sharex=False,
                             gridspec_kw={"height_ratios": ratios})
    # fixed margins in inches: tight_layout would double the drawing time
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.55 / height, top=1 - 0.95 / height, hspace=0.55)
    cmap = plt.get_cmap("Set2")
    node_color = {n: cmap(i % cmap.N) for i, n in enumerate(scenario.workflow.node_ids)}
    for i, (title, tr) in enumerate(traces):
        alone = {}
        for n in tr.nodes:
            card = scenario.card_of(n)
            on_gpu = tr.nodes[n].placement.on_gpu and card.gpu_ms is not None
            alone[n] = card.gpu_ms if on_gpu and card.gpu_ms is not None else card.cpu_ms
        _gantt(axes[2 * i], axes[2 * i + 1], tr, title, xmax, node_color, alone)
    axes[-1].set_xlabel("time (ms)")
    head = f"{scenario.name}: " + " vs ".join(t for t, _ in traces) + " (noise-free)"
    notes = "Bars: run time under sharing (hatched: load); red strip: GPU tasks running at once"
    if subtitle:
        notes = f"{subtitle}. {notes}"
    if refused:
        notes += "\n" + "; ".join(refused)
    fig.suptitle(f"{head}\n{notes}", fontsize=8.5)
    return _save(fig, path)


@_plain_text
def fig_gantt(scenario: Scenario, path: Path) -> Path:
    """All-GPU against the reference (the oracle, or a labelled best-known mapping) on one scenario."""
    ref = scenario_reference(scenario)
    name = "oracle" if ref.exact else "best-known (not a proven optimum)"
    return gantt_figure(scenario, [("all-GPU", scenario.uniform(Placement.GPU_NOW)), (name, ref.mapping)], path)


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


def mapping_words(scenario: Scenario, mapping: Mapping, limit: int = 8) -> str:
    """``A gpu_now, B gpu_queue, C cpu`` for a few nodes; a one-letter code with its key beyond ``limit``."""
    ids = scenario.workflow.node_ids
    if len(ids) <= limit:
        return ", ".join(f"{n} {mapping[n].value}" for n in ids)
    return f"{mapping.code(ids)} (one letter a node: C cpu, G gpu_now, Q gpu_queue)"


@_plain_text
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
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for (label, tr), color in zip(lines, (style("oracle").color, style("greedy-mem").color), strict=False):
        ts, us = _vram_steps(tr)
        ax.step(ts, us, where="post", color=color, lw=1.6,
                label=f"{label}: {mapping_words(scenario, tr.mapping)}; E2E {tr.e2e_ms:.0f} ms")
        for n in tr.nodes.values():
            if n.placement is Placement.GPU_QUEUE:
                # marker + text, no arrow: arrow clipping (bezier search) was seen to stall drawing
                ax.plot([n.admitted_ms], [budget], marker="v", color=color, ms=5)
                ax.text(n.admitted_ms, budget * 1.04, f"{n.node} admitted from the queue", fontsize=7, color=color,
                        ha="center")
    ax.axhline(budget, color="red", ls="--", lw=1, label=f"VRAM budget {budget:g} MB")
    best = lines[0][1]
    ax.set_title(f"{scenario.name}: VRAM in use (noise-free); the oracle's gpu_now tools hold "
                 f"{scenario.gpu_now_vram_mb(best.mapping):g} of {budget:g} MB\nfrom t = 0 until their last node ends; "
                 "gpu_queue nodes hold theirs only from admission until they finish", fontsize=8.5)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("VRAM (MB)")
    ax.set_ylim(0, budget * 1.2)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=1, frameon=False)
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
    first = pick_fanout(data)
    names = data.scenario_names()
    for s in ([first] if first else []) + [s for s in names if s != first]:
        sc = data.scenarios[s]
        what = "oracle" if scenario_reference(sc).exact else "best-known mapping"
        out.append((f"{s}: all-GPU vs {what} schedule, GPU sharing visible",
                    fig_gantt(sc, folder / f"gantt_{slug(s)}.png")))
    vram = pick_vram(data)
    if vram is not None:
        out.append((f"{vram}: VRAM over time against the budget", fig_vram(data, data.scenarios[vram],
                                                                          folder / f"vram_{slug(vram)}.png")))
    return out
