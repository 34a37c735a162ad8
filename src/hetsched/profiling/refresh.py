"""Refreshing the cards of a scenario (or a tool library) in place: ``hetsched profile --refresh``.

Freshly measured cards replace the entries they refresh where those entries live:

- a scenario's inline ``cards:`` entry is rewritten in the scenario file;
- a card from the library its ``tools:`` key names is rewritten in that library file;
- a card the scenario took from the bundled library (never rewritten) is added to the scenario's
  inline ``cards:``, which override the library from then on;
- an amplified tool ``NAME_xK`` the scenario uses is written beside its refreshed base as
  ``{base: NAME, amplification: K}``, so it derives from the new measurement.

Each refreshed card carries its own provenance (machine, date, runs, device, preset, software):
in a library whose top-level keys set every card's provenance, a refreshed card writes its own
``provenance:`` when it differs, so the cards left alone keep theirs. Everything else in the file
is kept as written, comments included: only the ``cards:`` (scenario) or ``tools:`` (library)
block is replaced, and within it the entries not refreshed keep their fields (comments inside
that one block are not kept). JSON files are rewritten whole (they hold no comments). Each file is
written atomically (a temporary file, checked by loading it, then renamed), so an interrupted or
refused refresh leaves the file as it was.

Imports the model and the profiler's card writer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hetsched.model import OutputError, Provenance, ToolCard
from hetsched.model.errors import ParameterError, os_error_text, path_text
from hetsched.model.files import (
    PROVENANCE_DEFAULTS,
    data_dir,
    load_scenario,
    load_tool_library,
    read_structured,
)
from hetsched.profiling.profiler import card_entry, plan_names


@dataclass(frozen=True)
class RefreshTarget:
    """What a refresh of one file measures and where each card goes."""

    path: Path
    """The file asked for (a scenario or a tool library)."""
    kind: str
    """``scenario`` or ``tools``."""
    tools: tuple[str, ...]
    """The base tools to measure, in order."""
    amplified: dict[str, tuple[str, int]]
    """``NAME_xK`` entries to write beside their base: name -> (base, k)."""
    old: dict[str, ToolCard]
    """The cards as they were, by tool name (what the refresh reports the move from)."""
    library: Path | None
    """A scenario's own tool library file (its ``tools:`` key), None when it has none."""
    in_library: frozenset[str]
    """Tools whose entry lives in that library (the rest go to the scenario's inline ``cards:``)."""
    cpu_cores: int | None = None
    """A scenario's machine ``cpu_cores`` (the CPU pool the cards should be measured with), else None."""

    @property
    def preset(self) -> str:
        """The size preset the refreshed cards were profiled at when they agree on one, else ``tiny``."""
        presets = {self.old[t].provenance.preset for t in self.tools if t in self.old} - {""}
        return presets.pop() if len(presets) == 1 else "tiny"


def refresh_target(path: Path | str, tools: Sequence[str] = ()) -> RefreshTarget:
    """Read ``path`` (a scenario or a tool library file) and plan the refresh of ``tools`` (default:
    every tool the scenario uses, or every measured card of the library). Bundled files are refused."""
    path = Path(path)
    if path.is_dir():
        raise ParameterError("refresh", f"{path_text(path)}: is a directory; give a scenario or tool library file")
    if not path.is_file():
        raise ParameterError("refresh", f"{path_text(path)}: not found; give a scenario or tool library file (a "
                                        f"bundled scenario is copied first: hetsched init NAME -o NAME.yaml)")
    try:
        path.resolve().relative_to(data_dir().resolve())
    except ValueError:
        pass
    else:
        raise ParameterError("refresh", f"{path_text(path)}: a bundled file is not refreshed in place; copy it "
                                        f"first with hetsched init {path.stem} -o {path.stem}.yaml")
    doc = read_structured(path)
    if not isinstance(doc, dict) or ("nodes" not in doc and "tools" not in doc):
        raise ParameterError("refresh", f"{path_text(path)}: not a scenario (top-level 'nodes:') or a tool "
                                        f"library ('tools:')")
    if "nodes" in doc:
        sc = load_scenario(path)
        used = list(sc.workflow.tools)
        old = dict(sc.cards)
        library = None
        in_library: frozenset[str] = frozenset()
        if isinstance(doc.get("tools"), str):
            library = Path(doc["tools"]) if Path(doc["tools"]).is_absolute() else path.parent / doc["tools"]
            lib_doc = read_structured(library)
            inline = set((doc.get("cards") or {}).keys())
            in_library = frozenset(n for n in (lib_doc.get("tools") or {}) if n not in inline)
        kind = "scenario"
        cores: int | None = sc.machine.cpu_cores
    else:
        lib = load_tool_library(path)
        used = [n for n, c in lib.items()]
        old = dict(lib)
        library, in_library, kind, cores = None, frozenset(), "tools", None
    asked = list(tools) or used
    unknown = [t for t in asked if t not in used]
    if unknown:
        raise ParameterError("refresh", f"{path_text(path)}: tool(s) {', '.join(map(repr, unknown))} not in this "
                             f"{'scenario' if kind == 'scenario' else 'library'}; its tools: {', '.join(used)}")
    bases: dict[str, None] = {}
    amplified: dict[str, tuple[str, int]] = {}
    for name in asked:
        card = old[name]
        base, k = (card.base, card.amplification) if card.base is not None and card.amplification > 1 else (name, 1)
        if base == name:  # a full card named NAME_xK (the registry refuses such names): NAME is what runs
            plan = plan_names([name])
            base = next(iter(plan))
            k = int(name.rsplit("_x", 1)[1]) if base != name else 1
        bases.setdefault(base, None)
        if base != name:
            amplified[name] = (base, k)
    return RefreshTarget(path, kind, tuple(bases), amplified, old, library, in_library, cores)


# ---------------------------------------------------------------------------- writing
def _block_span(lines: list[str], key: str) -> tuple[int, int] | None:
    """Lines [start, end) of the top-level ``key:`` block of a block-style YAML file, or None."""
    head = re.compile(rf"^(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')\s*:(?:\s|$)")
    for i, line in enumerate(lines):
        if head.match(line):
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or lines[j][0] in " \t"):
                j += 1
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1  # blank lines after the block stay where they are
            return i, j
    return None


def _rewrite(path: Path, doc: dict[str, Any], key: str, check: Any) -> None:
    """Write ``doc`` to ``path`` replacing only its ``key`` block (YAML) or whole (JSON), atomically,
    after ``check(tmp_path)`` accepted the new file."""
    from hetsched.tools.torch_model import atomic_write

    if path.suffix.lower() == ".json":
        text = json.dumps(doc, indent=2) + "\n"
    else:
        old = path.read_text(encoding="utf-8")
        lines = old.splitlines(keepends=True)
        block = yaml.safe_dump({key: doc[key]}, sort_keys=False, allow_unicode=True, width=120)
        span = _block_span(lines, key)
        if span is None:
            text = old + ("" if not old or old.endswith("\n") else "\n") + block
        else:
            text = "".join(lines[: span[0]]) + block + "".join(lines[span[1]:])

    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")
        check(tmp)

    try:
        atomic_write(path, write)
    except OSError as exc:
        raise OutputError(f"{path_text(path)} cannot be written: {os_error_text(exc)}; it is as it was") from None


def _defaults(doc: dict[str, Any]) -> Provenance | None:
    given = {k: doc[k] for k in PROVENANCE_DEFAULTS if k in doc}
    try:
        return Provenance.model_validate(given)
    except ValueError:
        return None


def _entries(block: Any) -> dict[str, Any]:
    return dict(block) if isinstance(block, dict) else {}


def write_refreshed(target: RefreshTarget, cards: Iterable[ToolCard]) -> list[Path]:
    """Write the freshly measured base ``cards`` (and the target's amplified entries whose base is among
    them) into the files they belong to; returns the files written."""
    fresh = {c.name: c for c in cards}
    if not fresh:
        return []
    amplified = {n: (b, k) for n, (b, k) in target.amplified.items() if b in fresh}
    written: list[Path] = []
    if target.kind == "tools" or target.library is not None:
        lib_path = target.path if target.kind == "tools" else target.library
        assert lib_path is not None
        in_lib = set(fresh) if target.kind == "tools" else {n for n in fresh if n in target.in_library}
        if in_lib:
            doc = read_structured(lib_path)
            defaults = _defaults(doc)
            entries = _entries(doc.get("tools"))
            for name in in_lib:
                entries[name] = card_entry(fresh[name], defaults)
            for name, (base, k) in amplified.items():
                if base in in_lib and (target.kind == "tools" or name in target.in_library):
                    entries[name] = {"base": base, "amplification": k}
            doc["tools"] = entries
            _rewrite(lib_path, doc, "tools", load_tool_library)
            written.append(lib_path)
            fresh = {n: c for n, c in fresh.items() if n not in in_lib}
            amplified = {n: v for n, v in amplified.items() if v[0] not in in_lib}
    if target.kind == "scenario" and fresh:
        doc = read_structured(target.path)
        entries = _entries(doc.get("cards"))
        for name, card in fresh.items():
            entries[name] = card_entry(card, None)
        for name, (base, k) in amplified.items():
            entries[name] = {"base": base, "amplification": k}
        doc["cards"] = entries
        _rewrite(target.path, doc, "cards", load_scenario)
        written.append(target.path)
    return written


def moved(old: ToolCard | None, new: ToolCard) -> str:
    """``cpu_ms 12.0 -> 14.1 (+17.5%), gpu_ms ...``: how far a refresh moved a card's latencies."""
    if old is None:
        return "new card"
    parts = []
    for figure in ("cpu_ms", "gpu_ms", "load_ms"):
        a, b = getattr(old, figure), getattr(new, figure)
        if a is None or b is None or (figure == "load_ms" and (old.gpu_ms is None or new.gpu_ms is None)):
            continue
        pct = f" ({100 * (b / a - 1):+.1f}%)" if a > 0 else ""
        parts.append(f"{figure} {a:.4g} -> {b:.4g}{pct}")
    return ", ".join(parts)
