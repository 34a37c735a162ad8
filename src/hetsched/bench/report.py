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
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f3f3f3; position: sticky; top: 0; }
tbody tr:nth-child(even) { background: #fafafa; }
ul.notes { font-size: 12px; color: #555; margin-top: 0.2em; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 13px; color: #444; }
.meta { color: #555; font-size: 13px; }
code { background: #f5f5f5; padding: 0 3px; }
"""


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


def _scenario_rows(data: BenchData) -> Table:
    t = Table("scenarios", "Scenarios", ["scenario", "mode", "nodes", "budget MB", "cores", "oracle", "oracle E2E ms",
                                         "shows"])
    for s in data.scenario_names():
        sc = data.scenarios[s]
        runs = [r for r in data.runs if r.scenario == s]
        oracle = runs[0] if runs else None
        t.rows.append([
            s, sc.mode.value, " ".join(f"{n}:{sc.workflow.tool_of[n]}" for n in sc.workflow.node_ids),
            f"{sc.machine.vram_budget_mb:g}", str(sc.machine.cpu_cores),
            oracle.oracle_code if oracle else "-", f"{oracle.oracle_e2e_ms:.1f}" if oracle else "-", sc.shows,
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
    for t in tables:
        md += [t.to_markdown(), ""]
    md.append("## Figures\n")
    for caption, path in figures:
        md.append(f"![{caption}](figures/{path.name})\n")
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")

    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>hetsched bench report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>hetsched bench report</h1>",
        '<p class="meta">' + "<br>".join(html.escape(x) for x in _meta_lines(data)) + "</p>",
        "<p>How to read it: <code>docs/bench.md</code>. Contents: "
        + ", ".join(f'<a href="#{t.key}">{html.escape(t.title.split(":")[0])}</a>' for t in tables)
        + ', <a href="#figures">figures</a>.</p>',
        "<h2>Tables</h2>",
    ]
    parts += [t.to_html() for t in tables]
    parts.append('<h2 id="figures">Figures</h2>')
    for caption, path in figures:
        b64 = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{b64}">'
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
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
        raise InputError(f"{folder}: no {MANIFEST} here; give a bench output folder (hetsched bench --out DIR), "
                         "a run store file, or run ids")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"file {path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict) or doc.get("manifest_version") != MANIFEST_VERSION:
        got = doc.get("manifest_version") if isinstance(doc, dict) else doc
        raise InputError(f"file {path}: manifest_version = {got!r}; this hetsched reads version {MANIFEST_VERSION}")
    store = Path(doc["store"])
    if not store.is_absolute():
        store = folder / store
    return store, list(doc["run_ids"]), list(doc.get("labels") or []), dict(doc.get("meta") or {})
