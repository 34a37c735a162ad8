"""``hetsched bench --suite load``: placement under load, latency-throughput curves per policy.

For each scenario and each load (a closed loop of K clients, K in :data:`LOAD_CLIENTS`), every
policy runs ``rounds`` rounds, each round a window of requests (:mod:`hetsched.model.workload`);
its mapping to deploy (the lowest median measured window p95 over its rounds) is its answer at
that load. Two references come from the
model, noise-free (:mod:`hetsched.search.load`): the **single-request optimum** (the mapping the
one-request reference picks, run at every load) and the **loaded optimum** (the best mapping for
the window's p95 at that load). The report has

- per policy and load, the p50/p95/p99 latency and throughput its mapping to deploy measured (its
  last window of that mapping, with the simulator's noise, or on a real executor) and the model's
  noise-free p95;
- which mapping wins at each load, and how far the single-request optimum is from it (p95);
- latency-throughput curves (x: throughput, y: p95, one point per load) with each curve's knee
  marked: the load of highest *power*, throughput / p95 latency (Kleinrock, "Power and
  deterministic rules of thumb for probabilistic problems in computer communications", ICC
  1979): past it, more load buys little throughput for much more latency.

With a real executor (``--executor local``) only the real scenarios run, and the policies are
the two references and ``all-gpu`` (each a fixed mapping, measured ``rounds`` times), so the
report shows measured p95 against the model's prediction. Imports the API, the search and the bench's
table and figure helpers.
"""

from __future__ import annotations

import base64
import html
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsched.bench.spec import PolicySpec, default_specs
from hetsched.bench.tables import Table
from hetsched.model import Mapping, Scenario
from hetsched.model.workload import Workload
from hetsched.policies.fixed import FixedMapping
from hetsched.search.load import load_optimum, predict_window
from hetsched.search.reference import reference

LOAD_SCENARIOS = ("fanout_light", "S6", "rag_tiny", "vram_3way")
"""Bundled scenarios of the load suite: two binary (GPU contention), two three-way (VRAM)."""
QUICK_LOAD_SCENARIOS = ("fanout_light", "rag_tiny")
LOAD_CLIENTS = (1, 2, 4, 8, 16)
"""Closed-loop clients of each load point."""
QUICK_LOAD_CLIENTS = (1, 4, 8)
REAL_LOAD_SCENARIOS = ("rag_tiny",)
"""Scenarios with real tools, run on a real executor."""
REAL_LOAD_CLIENTS = (1, 2, 4)
REQUESTS_PER_CLIENT = 8
MIN_REQUESTS = 24
LOAD_ROUNDS = 6
REAL_LOAD_ROUNDS = 3
"""Windows per mapping and load on a real executor (the median is reported)."""
SINGLE = "single-request optimum"
LOADED = "loaded optimum"


def window_requests(clients: int) -> int:
    """Requests in one window at ``clients`` clients."""
    return max(MIN_REQUESTS, REQUESTS_PER_CLIENT * clients)


@dataclass(frozen=True)
class LoadSuiteConfig:
    """What the load suite runs."""

    scenarios: tuple[Scenario, ...]
    clients: tuple[int, ...] = LOAD_CLIENTS
    specs: tuple[PolicySpec, ...] = ()
    rounds: int = LOAD_ROUNDS
    seed: int = 0
    executor: str = "sim"
    out: Path = Path("bench_load")


@dataclass(frozen=True)
class LoadPoint:
    """One policy (or reference) at one load of one scenario."""

    scenario: str
    clients: int
    policy: str
    mapping: str
    """The mapping as placement letters in node order (``C`` cpu, ``N`` gpu_now, ``Q`` gpu_queue)."""
    feasible: bool
    measured: dict[str, float] = field(default_factory=dict)
    """p50_ms, p95_ms, p99_ms, throughput_per_s of its last window (empty when it could not run)."""
    predicted_p95_ms: float = math.inf
    predicted_throughput_per_s: float = 0.0
    note: str = ""
    """Why its window did not run or failed (the trace's reason, e.g. an OOM measured on a real executor)."""


@dataclass
class LoadSuiteResult:
    config: LoadSuiteConfig
    points: list[LoadPoint]
    seconds: float


def _letters(scenario: Scenario, mapping: Mapping) -> str:
    return "".join("CNQ"[mapping[n].code] for n in scenario.workflow.node_ids)


def _measured(trace: Any) -> dict[str, float]:
    load = getattr(trace, "load", None)
    if not trace.feasible or load is None:
        return {}
    return {"p50_ms": load.p50_ms, "p95_ms": load.p95_ms, "p99_ms": load.p99_ms,
            "throughput_per_s": load.throughput_per_s}


def _point(sc: Scenario, wl: Workload, k: int, label: str, mapping: Mapping | None, trace: Any) -> LoadPoint:
    if mapping is None:
        return LoadPoint(sc.name, k, label, "-", False)
    pred = predict_window(sc, mapping, wl)
    measured = {} if trace is None else _measured(trace)
    note = "" if trace is None or trace.feasible else trace.reason
    if not pred.feasible:
        note = note or f"model: {pred.reason}"
    return LoadPoint(sc.name, k, label, _letters(sc, mapping), pred.feasible and (trace is None or bool(measured)),
                     measured, pred.p95_ms, pred.throughput_per_s, note)


def run_load_suite(config: LoadSuiteConfig, tick: Callable[[str], None] | None = None) -> LoadSuiteResult:
    """Run every policy at every load of every scenario (see the module docstring)."""
    from hetsched.api import run as api_run

    t0 = time.perf_counter()
    points: list[LoadPoint] = []
    real = config.executor != "sim"
    for sc in config.scenarios:
        single = reference(sc, "auto", max_seconds=10.0)
        for k in config.clients:
            wl = Workload.closed(k, requests=window_requests(k), seed=config.seed)
            loaded = load_optimum(sc, wl)
            fixed: list[tuple[str, Mapping | None]] = [
                (SINGLE, None if single is None else single.mapping),
                (LOADED, None if loaded is None else loaded.mapping)]
            for label, mapping in fixed:
                trace = None
                if mapping is not None:
                    res = api_run(sc, FixedMapping(mapping), rounds=config.rounds if real else 1, seed=config.seed,
                                  store=False,
                                  executor=config.executor, workload=wl)
                    trace = _median_round(res.rounds)
                points.append(_point(sc, wl, k, label, mapping, trace))
                if tick:
                    tick(f"{sc.name} K={k} {label}")
            for spec in config.specs:
                res = api_run(sc, spec.policy, rounds=config.rounds, seed=config.seed, store=False,
                              options=dict(spec.options), executor=config.executor, workload=wl)
                dep = res.deploy  # what it would deploy: its lowest median measured window p95
                mapping = dep.mapping if dep is not None else res.rounds[-1].proposal.mapping
                trace = next((r.trace for r in reversed(res.rounds) if r.trace.feasible and r.trace.mapping == mapping),
                             res.rounds[-1].trace)
                points.append(_point(sc, wl, k, spec.label, mapping, trace))
                if tick:
                    tick(f"{sc.name} K={k} {spec.label}")
    return LoadSuiteResult(config, points, time.perf_counter() - t0)


def _median_round(rounds: Sequence[Any]) -> Any:
    """The round whose window p95 is the median of the rounds' (a fixed mapping measured repeatedly)."""
    ok = [r.trace for r in rounds if r.trace.feasible and getattr(r.trace, "load", None) is not None]
    if not ok:
        return rounds[-1].trace
    ok.sort(key=lambda t: t.load.p95_ms)
    return ok[(len(ok) - 1) // 2]


# ---------------------------------------------------------------------------- tables
def _fmt(x: float | None, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and (math.isinf(x) or math.isnan(x))):
        return "-"
    return f"{x:,.{digits}f}"


def knee(points: Sequence[LoadPoint], predicted: bool = True) -> LoadPoint | None:
    """The point of highest power (throughput / p95) on one curve."""
    best, best_power = None, -1.0
    for p in points:
        thr, p95 = ((p.predicted_throughput_per_s, p.predicted_p95_ms) if predicted else
                    (p.measured.get("throughput_per_s", 0.0), p.measured.get("p95_ms", math.inf)))
        if not p.feasible or not math.isfinite(p95) or p95 <= 0:
            continue
        power = thr / p95
        if power > best_power:
            best, best_power = p, power
    return best


def percentiles_table(result: LoadSuiteResult) -> Table:
    real = result.config.executor != "sim"
    where = f"measured on {result.config.executor}" if real else "simulated (with noise)"
    t = Table("load_percentiles", f"Latency percentiles per policy and load ({where}, mapping to deploy)",
              ["scenario", "clients", "policy", "mapping", "p50 ms", "p95 ms", "p99 ms", "throughput /s",
               "model p95 ms", "note"])
    for p in result.points:
        m = p.measured
        note = p.note if len(p.note) <= 140 else p.note[:139] + "…"
        t.rows.append([p.scenario, str(p.clients), p.policy, p.mapping, _fmt(m.get("p50_ms")), _fmt(m.get("p95_ms")),
                       _fmt(m.get("p99_ms")), _fmt(m.get("throughput_per_s"), 2), _fmt(p.predicted_p95_ms), note])
    t.notes += [f"Each load is a closed loop of K clients; a window sends max({MIN_REQUESTS}, "
                f"{REQUESTS_PER_CLIENT} x K) requests.",
                "model p95 ms: the contention model's noise-free p95 of the same mapping at the same load.",
                "'-': the mapping cannot serve the window or its window failed; the note says why (the model's "
                "reason, or what the executor measured: an OOM on a real device means the cards under-state the "
                "memory of concurrent calls)."]
    return t


def winners_table(result: LoadSuiteResult) -> Table:
    t = Table("load_winners", "Which mapping wins at each load (model, noise-free p95)",
              ["scenario", "clients", "loaded optimum", "its p95 ms", "single-request optimum", "its p95 ms",
               "single / loaded", "best policy"])
    by = _group(result.points)
    for (scen, k), pts in by.items():
        lo = next((p for p in pts if p.policy == LOADED), None)
        si = next((p for p in pts if p.policy == SINGLE), None)
        pol = [p for p in pts if p.policy not in (LOADED, SINGLE) and p.feasible]
        best = min(pol, key=lambda p: p.predicted_p95_ms, default=None)
        ratio = "-"
        if lo and si and lo.feasible and math.isfinite(lo.predicted_p95_ms):
            ratio = (f"{si.predicted_p95_ms / lo.predicted_p95_ms:.2f}x" if si.feasible and
                     math.isfinite(si.predicted_p95_ms) else "cannot serve")
        t.rows.append([scen, str(k), lo.mapping if lo else "-", _fmt(lo.predicted_p95_ms if lo else None),
                       si.mapping if si else "-", _fmt(si.predicted_p95_ms if si and si.feasible else None), ratio,
                       "-" if best is None else f"{best.policy} ({_fmt(best.predicted_p95_ms)})"])
    t.notes += ["Mappings as letters in node order: C cpu, N gpu_now, Q gpu_queue.",
                "single / loaded: how much higher the single-request optimum's p95 is than the loaded optimum's at "
                "that load ('cannot serve': its gpu_queue nodes never fit beside its resident gpu_now tools).",
                "best policy: the policy whose mapping to deploy has the lowest model p95 at that load."]
    return t


def knees_table(result: LoadSuiteResult) -> Table:
    t = Table("load_knees", "Knee of each curve (highest throughput / p95, model)",
              ["scenario", "policy", "knee at clients", "throughput /s", "p95 ms"])
    curves: dict[tuple[str, str], list[LoadPoint]] = {}
    for p in result.points:
        curves.setdefault((p.scenario, p.policy), []).append(p)
    for (scen, pol), pts in curves.items():
        kp = knee(pts)
        t.rows.append([scen, pol, "-" if kp is None else str(kp.clients),
                       _fmt(kp.predicted_throughput_per_s if kp else None, 2),
                       _fmt(kp.predicted_p95_ms if kp else None)])
    return t


def _group(points: Sequence[LoadPoint]) -> dict[tuple[str, int], list[LoadPoint]]:
    by: dict[tuple[str, int], list[LoadPoint]] = {}
    for p in points:
        by.setdefault((p.scenario, p.clients), []).append(p)
    return by


def load_tables(result: LoadSuiteResult) -> list[Table]:
    return [winners_table(result), percentiles_table(result), knees_table(result)]


# ---------------------------------------------------------------------------- figure + report
def fig_curves(result: LoadSuiteResult, path: Path) -> Path:
    """Per scenario, two panels: p95 latency against the load (clients, log scale) and the
    latency-throughput curve; each curve's knee marked with a star in its colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hetsched.bench.figures import style

    scen = list(dict.fromkeys(p.scenario for p in result.points))
    fig, axes = plt.subplots(len(scen), 2, figsize=(10.4, 3.6 * len(scen)), squeeze=False)
    real = result.config.executor != "sim"
    for (lax, ax), name in zip(axes, scen, strict=True):
        curves: dict[str, list[LoadPoint]] = {}
        for p in result.points:
            if p.scenario == name and p.feasible:
                curves.setdefault(p.policy, []).append(p)
        for pol, pts in curves.items():
            pts.sort(key=lambda p: p.clients)
            if real:
                xs = [p.measured.get("throughput_per_s", math.nan) for p in pts]
                ys = [p.measured.get("p95_ms", math.nan) for p in pts]
            else:
                xs = [p.predicted_throughput_per_s for p in pts]
                ys = [p.predicted_p95_ms for p in pts]
            st = style(pol)
            ref = pol in (SINGLE, LOADED)
            color = "black" if pol == LOADED else st.color
            kw = {"marker": st.marker, "color": color, "linestyle": "--" if ref else "-",
                  "linewidth": 2.2 if pol == LOADED else 1.2, "markersize": 4}
            ks = [p.clients for p in pts]
            lax.plot(ks, ys, label=pol, **kw)
            ax.plot(xs, ys, **kw)
            kp = knee(pts, predicted=not real)
            if kp is not None:
                i = pts.index(kp)
                for a, x in ((lax, ks[i]), (ax, xs[i])):
                    a.plot([x], [ys[i]], marker="*", markersize=12, color=color, markeredgecolor="black", zorder=5)
        lax.set_title(f"{name}: p95 against load")
        lax.set_xscale("log", base=2)
        lax.set_yscale("log")
        lax.set_xlabel("closed-loop clients")
        lax.set_ylabel("p95 latency (ms)")
        ax.set_title(f"{name}: latency-throughput")
        ax.set_xlabel("throughput (requests/s)")
        ax.set_ylabel("p95 latency (ms)")
        for a in (lax, ax):
            a.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=8, frameon=False)
    what = f"measured on {result.config.executor}" if real else "model, noise-free"
    fig.suptitle(f"Latency-throughput per policy ({what}); star: knee (highest throughput / p95)")
    fig.tight_layout(rect=(0, 0.6 / len(scen) / 3, 1, 1 - 0.25 / len(scen)))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _summary(result: LoadSuiteResult) -> list[str]:
    real = result.config.executor != "sim"
    seen = f"measured on {result.config.executor}" if real else "simulated with noise"
    lines = []
    for (scen, k), pts in _group(result.points).items():
        lo = next((p for p in pts if p.policy == LOADED), None)
        si = next((p for p in pts if p.policy == SINGLE), None)
        if not (lo and si and lo.feasible):
            continue
        if not si.feasible:
            why = f" ({si.note})" if si.note else ""
            got = f", {seen} {_fmt(lo.measured['p95_ms'])} ms" if lo.measured else ""
            lines.append(f"{scen}, {k} clients: the single-request optimum {si.mapping} cannot serve the window{why}; "
                         f"the loaded optimum {lo.mapping} has p95 {_fmt(lo.predicted_p95_ms)} ms{got}.")
        elif si.predicted_p95_ms > lo.predicted_p95_ms * 1.02:
            meas = ""
            if si.measured and lo.measured:
                meas = (f"; {seen} {_fmt(si.measured['p95_ms'])} vs {_fmt(lo.measured['p95_ms'])} ms "
                        f"({si.measured['p95_ms'] / lo.measured['p95_ms']:.2f}x)")
            lines.append(f"{scen}, {k} clients: single-request optimum {si.mapping} p95 {_fmt(si.predicted_p95_ms)} ms "
                         f"vs loaded optimum {lo.mapping} {_fmt(lo.predicted_p95_ms)} ms "
                         f"({si.predicted_p95_ms / lo.predicted_p95_ms:.2f}x){meas}.")
    return lines


def write_load_report(result: LoadSuiteResult) -> dict[str, Path]:
    """Tables (CSV + Markdown), the curves figure, report.md and report.html under the output folder."""
    out = result.config.out
    tables_dir = out / "tables"
    tables_dir.mkdir(parents=True, exist_ok=True)
    tables = load_tables(result)
    for t in tables:
        (tables_dir / f"{t.key}.csv").write_text(t.to_csv(), encoding="utf-8")
    fig = fig_curves(result, out / "figures" / "load_curves.png")
    summary = _summary(result)
    c = result.config
    meta = [f"executor: {c.executor}; scenarios: {', '.join(s.name for s in c.scenarios)}; clients: "
            f"{', '.join(map(str, c.clients))}; rounds per run: {c.rounds}; seed: {c.seed}; "
            f"{result.seconds:.0f} s"]
    head = "Where the single-request optimum loses under load"
    md = ["# hetsched bench --suite load", "", *[f"- {m}" for m in meta], "", f"## {head}", ""]
    md += [f"- {s}" for s in summary] or ["- (at no load of this run)"]
    md += [""] + [t.to_markdown() for t in tables] + ["![latency-throughput](figures/load_curves.png)", ""]
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")
    b64 = base64.b64encode(fig.read_bytes()).decode("ascii")
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>hetsched load suite</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px}.n{text-align:right}</style></head><body>",
             "<h1>hetsched bench --suite load</h1>", "<p>" + "<br>".join(html.escape(m) for m in meta) + "</p>",
             f"<h2>{html.escape(head)}</h2><ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in summary) + "</ul>",
             f'<figure><img alt="latency-throughput curves" src="data:image/png;base64,{b64}"></figure>']
    parts += [t.to_html() for t in tables]
    parts.append("</body></html>\n")
    (out / "report.html").write_text("\n".join(parts), encoding="utf-8")
    return {"html": out / "report.html", "markdown": out / "report.md", "tables": tables_dir, "figure": fig}


def load_specs(specs: Sequence[PolicySpec] | None, executor: str) -> tuple[PolicySpec, ...]:
    """The policies of the load suite: every policy (heft-load included) on the simulator, none
    besides the references on a real executor (unless asked)."""
    if specs:
        return tuple(specs)
    if executor != "sim":
        return (PolicySpec("all-gpu"),)
    return tuple(s for s in default_specs(under_load=True) if s.policy != "oracle")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


__all__ = [
    "LOAD_CLIENTS",
    "LOAD_SCENARIOS",
    "LoadPoint",
    "LoadSuiteConfig",
    "LoadSuiteResult",
    "knee",
    "load_specs",
    "load_tables",
    "run_load_suite",
    "write_load_report",
]
