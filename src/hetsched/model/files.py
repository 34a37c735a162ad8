"""File formats: reading tool libraries, scenarios and mappings from YAML/JSON, with clear errors.

Every error names the file, the field (or node) and the bad value, and says what is accepted.
Part of the model package; imports PyYAML, pydantic and the other model modules.
"""

from __future__ import annotations

import json
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hetsched.model.card import Provenance, ToolCard
from hetsched.model.errors import InputError, MappingError, UnknownNameError
from hetsched.model.machine import Machine
from hetsched.model.mapping import Mapping
from hetsched.model.scenario import Mode, Scenario
from hetsched.model.workflow import Edge, Node, Workflow

PROVENANCE_DEFAULTS: tuple[str, ...] = ("hardware", "runs", "date", "source", "device", "preset", "cpu", "gpu",
                                         "software")
"""Top-level keys of a tool library that set every card's provenance (a card's own ``provenance`` wins)."""
_AMPLIFIED = re.compile(r"^(?P<base>.+)_x(?P<k>[1-9][0-9]*)$")
_EDGE_TEXT = re.compile(r"^\s*(?P<src>[^\s>-][^>]*?)\s*->\s*(?P<dst>[^\s].*?)\s*$")


def data_dir() -> Path:
    """The bundled data folder (reference tool library and example scenarios)."""
    return Path(str(resources.files("hetsched") / "data"))


def bundled_library_path() -> Path:
    """Path of the bundled reference tool library (19 tools and their amplified variants)."""
    return data_dir() / "tools.yaml"


def bundled_scenarios() -> dict[str, Path]:
    """Bundled scenario name -> file."""
    folder = data_dir() / "scenarios"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


# ---------------------------------------------------------------------------- low level
class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (each key may appear once)", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_structured(path: Path) -> Any:
    """Parse a YAML (or JSON, which is YAML) file; errors name the file, line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"file {path}: not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"file {path}: cannot be read ({exc})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"file {path}: malformed YAML{where}: {problem}") from None


def _reject_nonfinite(value: Any, where: str, path: Path) -> None:
    """YAML accepts .nan and .inf; no figure of ours may be either."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"file {path}: {where} = {value!r} is not a finite number; give a finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            _reject_nonfinite(v, f"{where}.{k}" if where else str(k), path)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _reject_nonfinite(v, f"{where}[{i}]", path)


def format_validation_error(exc: ValidationError, path: Path | str, prefix: str = "") -> str:
    """One line per problem: ``file F: field.path = value: message``."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
        value = err.get("input")
        shown = "" if isinstance(value, dict | list) or value is None else f" = {value!r}"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{loc or '(top level)'}{shown}: {msg}")
    head = f"file {path}: " if str(path) else ""
    if len(lines) == 1:
        return head + lines[0]
    return head + "invalid:\n  " + "\n  ".join(lines)


def _expect_dict(value: Any, where: str, path: Path) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"file {path}: {where} must be a mapping of keys to values, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------- tool library
def load_tool_library(path: Path | str) -> dict[str, ToolCard]:
    """Read a tool library file (``tools:`` name -> card fields) into cards by name.

    A card may be derived from another one with ``base: NAME`` and ``amplification: K``; a tool
    named ``NAME_xK`` that has no entry is derived from ``NAME`` on demand by :func:`resolve_card`.
    """
    path = Path(path)
    raw = read_structured(path)
    doc = _expect_dict(raw, "the top level", path)
    _reject_nonfinite(doc, "", path)
    tools = _expect_dict(doc.get("tools"), "tools", path)
    known = {"tools", *PROVENANCE_DEFAULTS}
    for key in doc:
        if key not in known:
            raise InputError(f"file {path}: unknown top-level key {key!r}; accepted: {', '.join(sorted(known))}")
    try:
        defaults = Provenance(
            hardware=str(doc.get("hardware", "unknown")),
            runs=int(doc.get("runs", 0) or 0),
            **{k: str(doc[k]) for k in PROVENANCE_DEFAULTS if k not in ("hardware", "runs") and k in doc},
        )
    except (ValidationError, ValueError) as exc:
        raise InputError(f"file {path}: bad provenance defaults at the top level ({exc})") from None
    return parse_cards(tools, path, defaults, where="tools")


def parse_cards(
    entries: dict[str, Any], path: Path, defaults: Provenance | None = None, where: str = "cards"
) -> dict[str, ToolCard]:
    """Cards from ``name -> fields`` entries, resolving ``base``/``amplification`` derivations."""
    cards: dict[str, ToolCard] = {}
    pending = dict(entries)
    while pending:
        progressed = False
        for name, fields in list(pending.items()):
            fields = _expect_dict(fields, f"{where}.{name}", path)
            base = fields.get("base")
            if base is not None and base not in cards:
                if base not in entries:
                    raise InputError(
                        f"file {path}: {where}.{name}.base = {base!r} is not a tool in this file; "
                        f"known tools: {sorted(entries)}"
                    )
                continue  # derive once the base exists
            cards[name] = _build_card(name, fields, cards.get(base) if base else None, path, defaults, where)
            del pending[name]
            progressed = True
        if not progressed:
            raise InputError(f"file {path}: {where}: circular 'base' references among {sorted(pending)}")
    return cards


def _build_card(
    name: str,
    fields: dict[str, Any],
    base: ToolCard | None,
    path: Path,
    defaults: Provenance | None,
    where: str,
) -> ToolCard:
    data = dict(fields)
    data.setdefault("name", name)
    if data["name"] != name:
        raise InputError(f"file {path}: {where}.{name}.name = {data['name']!r} differs from its key {name!r}")
    try:
        if base is not None:
            k = data.pop("amplification", 1)
            data.pop("base")
            if not isinstance(k, int) or k < 1:
                raise InputError(f"file {path}: {where}.{name}.amplification = {k!r}: give an integer k >= 1")
            derived = base.amplified(k, name=name)
            merged = derived.model_dump()
            merged.update(data)
            return ToolCard.model_validate(merged)
        if "provenance" not in data:
            prov = (defaults or Provenance()).model_dump()
            if "source" in data:  # shorthand: a card-level ``source:`` line
                prov["source"] = data.pop("source")
            data["provenance"] = prov
        return ToolCard.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, path, prefix=f"{where}.{name}")) from None


def resolve_card(name: str, library: dict[str, ToolCard]) -> ToolCard | None:
    """The card for ``name``; ``BASE_xK`` is derived from ``BASE`` when not listed."""
    if name in library:
        return library[name]
    m = _AMPLIFIED.match(name)
    if m and m["base"] in library:
        return library[m["base"]].amplified(int(m["k"]), name=name)
    return None


# ---------------------------------------------------------------------------- scenario
def resolve_scenario_path(ref: str | Path) -> Path:
    """A scenario reference (a file path, or the name of a bundled scenario) as a path."""
    path = Path(ref)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or path.exists():
        if not path.exists():
            raise InputError(f"file {path}: not found")
        return path
    bundled = bundled_scenarios()
    if str(ref) in bundled:
        return bundled[str(ref)]
    raise UnknownNameError(
        f"scenario {str(ref)!r} is neither a file nor a bundled scenario; bundled: {', '.join(bundled)}"
    )


def load_scenario(ref: str | Path, library: dict[str, ToolCard] | None = None) -> Scenario:
    """Read a scenario file (or a bundled scenario by name).

    Cards come from, in order of precedence: the file's inline ``cards:``, then the library
    named by its ``tools:`` key (a path relative to the scenario file), else ``library`` if
    given, else the bundled reference library.
    """
    path = resolve_scenario_path(ref)
    doc = _expect_dict(read_structured(path), "the top level", path)
    _reject_nonfinite(doc, "", path)
    known = {"name", "description", "shows", "mode", "tools", "cards", "machine", "nodes", "edges"}
    for key in doc:
        if key not in known:
            raise InputError(f"file {path}: unknown key {key!r}; accepted keys: {sorted(known)}")

    if "tools" in doc:
        if not isinstance(doc["tools"], str) or not doc["tools"].strip():
            raise InputError(
                f"file {path}: tools = {doc['tools']!r}; give the path of a tool library file "
                "(relative to this scenario), or put cards inline under 'cards:'"
            )
        lib_path = Path(doc["tools"])
        if not lib_path.is_absolute():
            lib_path = path.parent / lib_path
        if not lib_path.exists():
            raise InputError(f"file {path}: tools = {doc['tools']!r}: tool library {lib_path} not found")
        base_library = load_tool_library(lib_path)
    elif library is not None:
        base_library = library
    else:
        base_library = load_tool_library(bundled_library_path())
    inline = parse_cards(_expect_dict(doc.get("cards", {}) or {}, "cards", path), path)
    combined = {**base_library, **inline}

    nodes = _parse_nodes(doc.get("nodes"), path)
    edges = _parse_edges(doc.get("edges") or [], path)
    cards: dict[str, ToolCard] = {}
    for node in nodes:
        card = resolve_card(node.tool, combined)
        if card is None:
            raise InputError(
                f"file {path}: node {node.id!r} uses tool {node.tool!r}, which has no card; "
                f"known tools: {', '.join(sorted(combined))}"
            )
        cards[node.tool] = card

    try:
        workflow = Workflow(nodes=tuple(nodes), edges=tuple(edges))
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, path, prefix="workflow")) from None
    try:
        machine = Machine.model_validate(doc.get("machine") or {})
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, path, prefix="machine")) from None
    mode_raw = doc.get("mode", "binary")
    try:
        mode = Mode(mode_raw)
    except ValueError:
        raise InputError(
            f"file {path}: mode = {mode_raw!r} is not a mode; accepted: {', '.join(m.value for m in Mode)}"
        ) from None
    try:
        return Scenario(
            name=str(doc.get("name") or path.stem),
            description=str(doc.get("description", "")),
            shows=str(doc.get("shows", "")),
            mode=mode,
            workflow=workflow,
            cards=cards,
            machine=machine,
            source=str(path),
        )
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, path)) from None


def _parse_nodes(raw: Any, path: Path) -> list[Node]:
    if raw is None:
        raise InputError(f"file {path}: 'nodes' is missing; give a list of {{id, tool}} or a mapping id: tool")
    items: list[tuple[Any, Any]]
    if isinstance(raw, dict):
        items = list(raw.items())
    elif isinstance(raw, list):
        items = []
        for i, entry in enumerate(raw):
            if not isinstance(entry, dict) or "id" not in entry or "tool" not in entry:
                raise InputError(f"file {path}: nodes[{i}] = {entry!r}: give {{id: NAME, tool: TOOL}}")
            extra = set(entry) - {"id", "tool"}
            if extra:
                raise InputError(f"file {path}: nodes[{i}] has unknown keys {sorted(extra)}; accepted: id, tool")
            items.append((entry["id"], entry["tool"]))
    else:
        raise InputError(f"file {path}: 'nodes' must be a list or a mapping, got {type(raw).__name__}")
    if not items:
        raise InputError(f"file {path}: 'nodes' is empty; a workflow needs at least one node")
    nodes = []
    for node_id, tool in items:
        if not isinstance(tool, str) or not tool:
            raise InputError(f"file {path}: node {node_id!r}: tool = {tool!r}; give a tool name")
        if node_id is None or str(node_id).strip() == "":
            raise InputError(f"file {path}: node id {node_id!r} (tool {tool!r}) is empty; give every node a name")
        nodes.append(Node(id=str(node_id), tool=tool))
    return nodes


def _parse_edges(raw: Any, path: Path) -> list[Edge]:
    if not isinstance(raw, list):
        raise InputError(f"file {path}: 'edges' must be a list, got {type(raw).__name__}")
    edges = []
    for i, entry in enumerate(raw):
        if isinstance(entry, str):
            m = _EDGE_TEXT.match(entry)
            if not m:
                raise InputError(f"file {path}: edges[{i}] = {entry!r}; write 'A -> B' or {{src, dst, data_mb}}")
            edges.append(Edge(src=m["src"], dst=m["dst"]))
        elif isinstance(entry, list) and len(entry) == 2:
            edges.append(Edge(src=str(entry[0]), dst=str(entry[1])))
        elif isinstance(entry, dict):
            try:
                edges.append(Edge.model_validate(entry))
            except ValidationError as exc:
                raise InputError(format_validation_error(exc, path, prefix=f"edges[{i}]")) from None
        else:
            raise InputError(f"file {path}: edges[{i}] = {entry!r}; write 'A -> B', [A, B] or {{src, dst, data_mb}}")
    return edges


# ---------------------------------------------------------------------------- mappings
def parse_mapping_text(text: str, where: str = "mapping") -> Mapping:
    """``A=cpu,B=gpu_now`` (commas or spaces) or a JSON object, as a mapping."""
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict):
            raise InputError(f"{where}: give a JSON object node -> placement")
        return Mapping({str(k): str(v) for k, v in data.items()})
    pairs = []
    for part in re.split(r"[,\s]+", text):
        if not part:
            continue
        if "=" not in part:
            raise InputError(f"{where}: {part!r} is not NODE=PLACEMENT; e.g. A=cpu,B=gpu_now")
        k, v = part.split("=", 1)
        pairs.append((k.strip(), v.strip()))
    return Mapping(pairs)


def load_mapping(path: Path | str) -> Mapping:
    """A mapping from a YAML/JSON file holding ``node: placement`` (or ``mapping: {...}``)."""
    path = Path(path)
    doc = _expect_dict(read_structured(path), "the top level", path)
    if "mapping" in doc and isinstance(doc["mapping"], dict):
        doc = doc["mapping"]
    try:
        return Mapping({str(k): str(v) for k, v in doc.items()})
    except MappingError as exc:
        raise MappingError(f"file {path}: {exc}") from None


def detect_kind(path: Path) -> str:
    """``tools``, ``scenario`` or ``mapping``: which format a file holds (for ``hetsched validate``)."""
    doc = read_structured(path)
    if isinstance(doc, dict) and "tools" in doc and "nodes" not in doc:
        return "tools"
    if isinstance(doc, dict) and "nodes" in doc:
        return "scenario"
    if isinstance(doc, dict):
        return "mapping"
    raise InputError(
        f"file {path}: not a tool library (top-level 'tools:'), a scenario ('nodes:') or a mapping; "
        f"got {type(doc).__name__}"
    )
