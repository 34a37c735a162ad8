"""Helpers every command module shares (the SCENARIO help, loading a scenario, mapping text, output and
store checks, ``-X`` options), kept light: ``show``, ``validate`` or ``simulate`` import this, not the
run orchestration of :mod:`hetsched.cli.run` (the loop, the monitor, the store, the api)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsched.cli.app import fail

if TYPE_CHECKING:
    from hetsched.model import Mapping, Scenario
    from hetsched.model.learned import LearnedCards

def _path_text(path: object) -> str:
    """:func:`hetsched.model.errors.path_text` (a file name with its control characters escaped), imported
    when an error needs it: this module stays light."""
    from hetsched.model.errors import path_text

    return path_text(path)


SCENARIO_HELP = "Scenario file, or the name of a bundled scenario (hetsched scenarios lists them)."
"""Help text of every SCENARIO argument."""


def mapping_text(mapping: Mapping, reference: Mapping | None = None) -> str:
    """``A:gpu_now B:cpu``; with a reference, nodes that differ from it are marked with ``*``.

    Plain text: pass it through :func:`~hetsched.cli.app.safe` before rich output."""
    parts = []
    for node, p in mapping.items():
        mark = "*" if reference is not None and reference.get(node) != p else ""
        parts.append(f"{node}:{p.value}{mark}")
    return " ".join(parts)


def check_output_file(path: Path, option: str) -> None:
    """Fail early (exit 2) when an output file cannot be written, before any work is done."""
    if path.is_dir():
        raise fail(f"{option} {_path_text(path)} is a directory; give a file name such as "
                   f"{_path_text(path / 'trace.json')}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"{option} {_path_text(path)}: cannot create its folder ({exc.strerror})") from None


def check_store_folder(store: Path | None, option: str = "--store") -> None:
    """Refuse (exit 2) a ``--store`` file whose folder does not exist, naming it: a typo in a folder
    name must not create a new folder and a new, empty store there."""
    if store is None:
        return
    folder = store.expanduser().parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise fail(f"{option} {_path_text(store)}: the folder {_path_text(folder)} {what}; create it first, or "
                   f"give a file in an existing folder")


def load(ref: str) -> Scenario:
    """Load a scenario by path or bundled name."""
    from hetsched.model.files import load_scenario

    return load_scenario(ref)


def parse_executor_options(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items as executor options; a VALUE that reads as JSON (numbers, true/false, lists)
    is taken as JSON, else as a string."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise fail(f"--executor-option {item!r}: write KEY=VALUE, e.g. device=standin or timeout_s=60")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value.strip()
    return options


def print_learned(learned: LearnedCards, measured: bool) -> None:
    """The cards as the run's measurements left them (``hetsched run``, ``show-run``): on a real
    executor a table per tool and figure (card, learned, drift, n, p10-p90); on the simulator one
    line; then, when the measurements contradict cards beyond their spread, which ones and the
    command that re-profiles them."""
    from rich.table import Table

    from hetsched.cli.app import out, safe

    figures = learned.figures
    if not figures:
        return
    if measured:
        table = Table(title="cards vs this run's measurements (de-contended by the model)", title_justify="left",
                      box=None, pad_edge=False, header_style="bold underline")
        for col in ("tool", "figure", "card ms", "learned ms", "drift", "n", "p10-p90 ms", ""):
            table.add_column(col, justify="left" if col in ("tool", "figure", "") else "right")
        for f in figures:
            table.add_row(safe(f.tool), f.figure, f"{f.card_ms:.4g}", f"{f.learned_ms:.4g}", f"{100 * f.drift:+.1f}%",
                          str(f.n), "-" if f.n < 2 else f"{f.p10_ms:.4g}-{f.p90_ms:.4g}",
                          "[red]contradicted[/]" if f.contradicted else "")
        out.print(table)
    else:
        worst = max(figures, key=lambda f: abs(f.drift))
        out.print(f"cards: {len(figures)} figures measured, largest drift {100 * worst.drift:+.1f}% "
                  f"({safe(worst.tool)} {worst.figure})"
                  + ("; none contradicted" if not learned.contradicted else ""), soft_wrap=True)
    bad = learned.contradicted
    if bad:
        for f in bad:
            out.print(f"[bold red]card contradicted:[/] {safe(f.describe())}", soft_wrap=True)
        out.print(f"re-profile the contradicted cards: {safe(learned.refresh or '')}", soft_wrap=True)
    elif measured:
        out.print("cards hold: no measured figure contradicts its card beyond their spreads", soft_wrap=True)
