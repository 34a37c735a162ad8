"""The bench report: tables (Markdown and CSV), figures (PNG) and one self-contained HTML page,
written from :class:`~hetsched.bench.data.BenchData`; and the ``bench.json`` manifest that lets
``hetsched report`` regenerate all of it from the run store without re-running anything.

Output folder layout (docs/bench.md)::

    bench.json         settings, timings, run ids, store path (the manifest)
    runs.sqlite        the run store (unless --store put it elsewhere)
    report.html        everything below, PNGs embedded (base64): open it in a browser
    report.md          every table in Markdown, with links to the figures
    tables/*.csv       one CSV per table, plus rounds.csv and regret.csv (long format)
    figures/*.png      the figures

The report holds no clock time of its own: the same runs give the same files. Imports the
bench's data, tables and figures modules.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from hetsched import __version__
from hetsched.model import InputError
from hetsched.model.errors import path_text

from .data import BenchData
from .tables import Table, all_tables, reference_note, regret_csv, rounds_csv

MANIFEST = "bench.json"
"""Manifest file name in a bench output folder."""
MANIFEST_VERSION = 1
"""Layout version of the manifest."""

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th.n, td.n { text-align: right; font-variant-numeric: tabular-nums; }
thead th { background: #f3f3f3; position: sticky; top: 0; }
tbody tr:nth-child(even) { background: #fafafa; }
ul.notes { font-size: 12px; color: #555; margin-top: 0.2em; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 13px; color: #444; }
.meta { color: #555; font-size: 13px; }
code { background: #f5f5f5; padding: 0 3px; }
"""


GUIDE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Words and codes", (
        "Oracle: the noise-free optimum of the simulator (exact branch-and-bound). Where its search would not "
        "fit the time budget, the reference is a best-known mapping from a bounded search, and the tables say so.",
        "Mapping codes: one letter a node, in the order of the scenario's 'nodes' column: C cpu, G gpu_now "
        "(resident in VRAM from the start until its last node ends), Q gpu_queue (loaded when VRAM frees).",
        "E2E: end-to-end latency of one round, ms. Measured E2E is noisy; 'true' E2E is the noise-free "
        "E2E of the same mapping. An infeasible round (OOM, never admissible, deadlock) ran nothing.",
    )),
    ("Tables", (
        "Table 4, best match: per run, the most nodes placed as in the oracle mapping in any one round "
        "(an infeasible round counts 0). 'k/n': every seed reached k; 'lo-hi/n': the seeds ranged from lo to hi.",
        "Table 5, on the three-way scenarios: best-found E2E = the lowest measured E2E of a run, mean ± sd over "
        "seeds (noise can put it under the oracle); 'true' = noise-free E2E of that mapping over the oracle's; "
        "round reached = median first round that ran the oracle mapping (R0 = the first round).",
        "E2E ratio: noise-free E2E of each policy's best-found mapping over the oracle's; 1.000 = the oracle.",
        "Regret: per run, the sum over rounds of (E2E of the round's mapping - oracle E2E), in oracle E2Es; 0 "
        "means every round ran the oracle mapping; an infeasible round is charged the all-CPU E2E. The second "
        "regret table also charges the monitor's what-if probes, which are real executions.",
        "Probes: what-if executions per run. Decider cost: asks, re-asks, fallbacks, tokens and decision time "
        "per round of each agentic variant (rules and argmin are not LLMs).",
    )),
    ("Figures", (
        "E2E normalized: bars from 0 of each policy's best-found E2E over the oracle's (dashed line at 1); "
        "x at the bottom: no feasible round; bars over 3x are clipped with their value written above.",
        "Convergence: per scenario, the noise-free E2E of each round's mapping over the oracle's (median over "
        "seeds). The oracle is the dashed black line; a policy that matches it shows through the gaps.",
        "Regret: cumulative regret per round (symlog scale), mean over seeds; 0 = the oracle every round.",
        "Gantt charts (one per scenario): all-GPU against the reference, noise-free; bars are run times under "
        "GPU sharing (isolated time in brackets, hatched: load from the queue); the strip under each chart counts "
        "the tasks sharing the GPU. 'hetsched gantt SCENARIO --mapping M' draws any mapping.",
        "VRAM: memory in use over time for the oracle mapping (and the memory-aware greedy's) against the "
        "budget; gpu_now tools hold theirs from t = 0, queued nodes from admission until they finish.",
        "Every policy keeps the same colour and marker in every figure and every report.",
    )),
)
"""'How to read this report', shipped inside the report (pip users have no docs/ folder)."""

REAL_GUIDE: tuple[str, tuple[str, ...]] = ("Measured and simulated (a real executor)", (
    "The rounds and probes of these runs ran for real on the executor named above: their E2E figures are "
    "measurements (noisy), and so is the 'Measured' table, the one to read first: each run's mapping to deploy "
    "(lowest median measured E2E, with its spread over repeats) against the best measured mapping of its "
    "scenario, which is the measured reference.",
    "Everything called oracle, 'true' or noise-free (the oracle mapping and its E2E, E2E ratios, rounds to the "
    "oracle, regret, convergence, the Gantt and VRAM figures) is simulated from the cards; the titles of those "
    "tables say [simulated from the cards]. The cards may have been profiled on another machine or device, so "
    "a simulated ratio can be far from what the executor measures.",
    "`hetsched run --executor local|ray` measures the reference mapping itself on the executor (3 runs) and "
    "divides by that measurement, labelled '(measured)'; it ends with the mapping to deploy.",
))
"""The guide's section for runs on a real executor (added before the others)."""


def _guide(executor: str = "sim") -> tuple[tuple[str, tuple[str, ...]], ...]:
    return GUIDE if executor == "sim" else (REAL_GUIDE, *GUIDE)


def _guide_html(executor: str = "sim") -> str:
    parts = ['<h2 id="how-to-read">How to read this report</h2>']
    for title, items in _guide(executor):
        parts.append(f"<h3>{html.escape(title)}</h3><ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items)
                     + "</ul>")
    return "\n".join(parts)


def _guide_markdown(executor: str = "sim") -> list[str]:
    lines = ["## How to read this report", ""]
    for title, items in _guide(executor):
        lines += [f"### {title}", "", *(f"- {i}" for i in items), ""]
    return lines


def _meta_lines(data: BenchData) -> list[str]:
    m = data.meta
    lines = []
    if m:
        lines.append(
            f"{len(data.labels)} policies x {len(data.scenarios)} scenarios x {len(data.seeds())} seeds "
            f"x {m.get('rounds', '?')} rounds = {len(data.runs)} runs"
            + (" (--quick)" if m.get("quick") else "")
        )
        if "seconds" in m:
            lines.append(f"bench wall time {m['seconds']:.1f} s with {m.get('jobs', '?')} worker process(es); "
                         f"runs: {m.get('counts', {})}")
        if m.get("command"):
            lines.append(f"command: {m['command']}")
    else:
        lines.append(f"{len(data.runs)} stored runs")
    executor = m.get("executor", "sim")
    lines.append(f"hetsched {__version__}; " + ("simulator executor (noise cv per scenario machine block)"
                                                if executor == "sim" else f"executor {executor}"))
    return lines


_SHOWN_NODES = 24
"""Nodes of a scenario listed in the scenarios table (a 10,000-node workflow gets a count)."""


def _scenario_rows(data: BenchData) -> Table:
    real = data.meta.get("executor", "sim") != "sim"
    t = Table("scenarios", "Scenarios", ["scenario", "mode", "nodes", "budget MB", "cores", "oracle",
                                         "oracle E2E ms (simulated)" if real else "oracle E2E ms", "shows"])
    for s in data.scenario_names():
        sc = data.scenarios[s]
        runs = [r for r in data.runs if r.scenario == s]
        oracle = runs[0] if runs else None
        ids = sc.workflow.node_ids
        nodes = " ".join(f"{n}:{sc.workflow.tool_of[n]}" for n in ids[:_SHOWN_NODES])
        if len(ids) > _SHOWN_NODES:
            nodes += f" ... ({len(ids)} nodes)"
        code = oracle.oracle_code if oracle else "-"
        t.rows.append([
            s, sc.mode.value, nodes, f"{sc.machine.vram_budget_mb:g}", str(sc.machine.cpu_cores),
            code if len(code) <= _SHOWN_NODES else code[:_SHOWN_NODES] + "...",
            f"{oracle.oracle_e2e_ms:.1f}" if oracle else "-", sc.shows,
        ])
    t.notes.append("Mapping codes: one letter a node in the order of the 'nodes' column: C cpu, G gpu_now, "
                   "Q gpu_queue.")
    note = reference_note(data)
    if note:
        t.notes.append(note)
    return t


def write_report(data: BenchData, out: Path) -> dict[str, Path]:
    """Write tables, figures, report.md and report.html into ``out``; return the main paths."""
    try:
        from .figures import all_figures
    except ImportError as exc:  # matplotlib is the 'bench' extra
        raise InputError(f"the bench report draws with matplotlib, which is not installed ({exc}); "
                         "install it with: pip install 'hetsched[bench]'") from None

    out.mkdir(parents=True, exist_ok=True)
    tables_dir = out / "tables"
    tables_dir.mkdir(exist_ok=True)
    scen = _scenario_rows(data)
    tables = [scen, *all_tables(data)]
    for t in tables:
        (tables_dir / f"{t.key}.csv").write_text(t.to_csv(), encoding="utf-8")
    (tables_dir / "rounds.csv").write_text(rounds_csv(data), encoding="utf-8")
    (tables_dir / "regret.csv").write_text(regret_csv(data), encoding="utf-8")
    figures = all_figures(data, out / "figures")

    md = ["# hetsched bench report", ""] + [f"- {line}" for line in _meta_lines(data)] + [""]
    md += ["How to read it: [the guide at the end](#how-to-read-this-report).", ""]
    for t in tables:
        md += [t.to_markdown(), ""]
    md.append("## Figures\n")
    for caption, path in figures:
        md.append(f"![{caption}](figures/{path.name})\n")
    executor = str(data.meta.get("executor", "sim"))
    md += _guide_markdown(executor)
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")

    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>hetsched bench report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>hetsched bench report</h1>",
        '<p class="meta">' + "<br>".join(html.escape(x) for x in _meta_lines(data)) + "</p>",
        '<p><a href="#how-to-read">How to read it</a>. Contents: '
        + ", ".join(f'<a href="#{html.escape(t.key)}">{html.escape(t.title.split(":")[0])}</a>' for t in tables)
        + ', <a href="#figures">figures</a>.</p>',
        "<h2>Tables</h2>",
    ]
    parts += [t.to_html() for t in tables]
    parts.append('<h2 id="figures">Figures</h2>')
    for caption, path in figures:
        b64 = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{b64}">'
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    parts.append(_guide_html(executor))
    parts.append("</body></html>\n")
    report = out / "report.html"
    report.write_text("\n".join(parts), encoding="utf-8")
    return {"html": report, "markdown": out / "report.md", "tables": tables_dir, "figures": out / "figures"}


# ---------------------------------------------------------------------------- manifest
def write_manifest(out: Path, store: Path, run_ids: list[str], labels: list[str], meta: dict[str, Any]) -> Path:
    """``bench.json``: what ``hetsched report DIR`` needs to rebuild the report from the store."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        store_ref = str(store.resolve().relative_to(out.resolve()))
    except ValueError:
        store_ref = str(store.resolve())
    doc = {"manifest_version": MANIFEST_VERSION, "store": store_ref, "labels": labels, "run_ids": run_ids,
           "meta": meta}
    path = out / MANIFEST
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


def read_manifest(folder: Path) -> tuple[Path, list[str], list[str], dict[str, Any]]:
    """(store path, run ids, labels, meta) from a bench output folder."""
    path = folder / MANIFEST
    if not path.is_file():
        raise InputError(f"{path_text(folder)}: no {MANIFEST} here; give a bench's output folder (`out`), "
                         "a run store file, or run ids")
    from hetsched.model.files import a_type, read_structured

    doc = read_structured(path)  # strict JSON; a damaged file (not UTF-8, too large...) is named
    if not isinstance(doc, dict):
        raise InputError(f"file {path_text(path)}: the top level must be a JSON object (a bench manifest), got "
                         f"{a_type(doc)}")
    if doc.get("manifest_version") != MANIFEST_VERSION:
        raise InputError(f"file {path_text(path)}: manifest_version = {doc.get('manifest_version')!r}; this "
                         f"hetsched reads version {MANIFEST_VERSION}")
    expected = {"store": (str, "the run store's path"), "run_ids": (list, "a list of run ids"),
                "labels": (list, "a list of labels"), "meta": (dict, "an object")}
    for key, (kind, what) in expected.items():
        value = doc.get(key)
        if (value is None and key in ("labels", "meta")) or (isinstance(value, kind) and value != ""):
            continue
        raise InputError(f"file {path_text(path)}: {key} = {value!r}; accepted: {what} (write the folder again "
                         f"with a bench run, or give the run store file)")
    if not all(isinstance(r, str) for r in doc["run_ids"]):
        raise InputError(f"file {path_text(path)}: run_ids must hold run ids (text); got {doc['run_ids']!r:.80}")
    store = Path(doc["store"])
    if not store.is_absolute():
        store = folder / store
    return store, list(doc["run_ids"]), list(doc.get("labels") or []), dict(doc.get("meta") or {})
