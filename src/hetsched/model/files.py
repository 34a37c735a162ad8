"""File formats: reading tool libraries, scenarios and mappings from YAML/JSON, with clear errors.

Every error names the file, the field (or node) and the bad value, and says what is accepted.
Part of the model package; imports PyYAML, pydantic and the other model modules.
"""

from __future__ import annotations

import errno
import itertools
import json
import math
import os
import re
import stat
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from hetsched.model.card import Provenance, ToolCard
from hetsched.model.errors import (
    InputError,
    MappingError,
    OutputError,
    UnknownNameError,
    did_you_mean,
    os_error_text,
    path_text,
    some,
)
from hetsched.model.limits import MAX_NAME_CHARS
from hetsched.model.machine import Machine
from hetsched.model.mapping import Mapping
from hetsched.model.scenario import Mode, Scenario
from hetsched.model.workflow import Edge, Node, Workflow
from hetsched.model.workload import MAX_DURATION_S, Arrivals, Workload

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
def write_output(path: Path | str, data: str | bytes, what: str = "file") -> None:
    """Write an output file whole; a failure (a full disk, ``/dev/full``, a read-only folder) is an
    :class:`OutputError` naming ``what``, the file and the real cause, never an OSError traceback."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with path.open("wb") as fh:  # a full device fails on write or on the flush at close: both caught
            fh.write(raw)
    except OSError as exc:
        raise OutputError(f"{what} {path_text(path)}: cannot be written: {os_error_text(exc)}") from None


MAX_FILE_BYTES = 8 * 1024 * 1024
"""Largest input file read (8 MiB: a 100,000-node scenario fits); larger ones are refused unread."""
MAX_DEPTH = 32
"""Deepest nesting of lists and mappings in an input file (the formats need 5)."""
MAX_ALIAS_EXPANSION = 100_000
"""Most YAML nodes that aliases (``*name``, ``<<: *name``) may add to a document, counted before it is
walked: a 1 KB "billion laughs" file would otherwise expand to millions of nodes."""
MAX_INT_DIGITS = 100
"""Longest integer literal accepted (every figure has a far smaller upper bound)."""

_SCALAR_TYPES = (str, int, float, bool, type(None))
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _stat(path: Path) -> os.stat_result | None:
    """``os.stat``, or None when nothing is there (or the name cannot be a file name at all)."""
    try:
        return path.stat()
    except (OSError, ValueError):  # missing, too long, embedded NUL, not a directory...
        return None


def _file(path: object) -> str:
    """``file NAME`` as this module's messages start, the name shown by :func:`path_text`."""
    return f"file {path_text(path)}"


def _missing(path: Path) -> str:
    """Why nothing can be read at ``path``, in words: ``not found`` unless the system said more (a loop of
    symbolic links, a name too long, a file where a folder should be, no permission)."""
    try:
        path.stat()
    except ValueError:
        return "not a file name (it holds a NUL character)"
    except OSError as exc:
        return {errno.ELOOP: "a loop of symbolic links", errno.ENAMETOOLONG: "the name is too long for the file system",
                errno.ENOTDIR: "not found (a part of the path is a file, not a folder)",
                errno.EACCES: "permission denied"}.get(exc.errno or 0, "not found")
    return "not found"


def _exists(path: Path) -> bool:
    return _stat(path) is not None


class _Resolver(yaml.resolver.Resolver):
    """YAML 1.2 core-schema scalars (as JSON reads them), not PyYAML's YAML 1.1 defaults.

    ``1e3`` is a number (YAML 1.1: a string), ``yes``/``no``/``on``/``off`` are text (1.1:
    booleans, so a node named ``no`` became ``False``), ``2026-11-01`` is text (1.1: a date),
    ``010`` is ten (1.1: eight) and ``1:30`` is text (1.1: ninety).
    """

    yaml_implicit_resolvers: dict[Any, Any] = {}  # noqa: RUF012 (PyYAML's class-level registry)


_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_Resolver.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
_Resolver.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])


class _Composer(yaml.composer.Composer):
    """Refuses, while composing and before anything is walked: nesting deeper than MAX_DEPTH
    (PyYAML composes recursively), aliases that would expand to more than MAX_ALIAS_EXPANSION
    nodes, and recursive aliases (an anchor used inside itself)."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._expanded = 0
        self._sizes: dict[int, int] = {}  # id(node) -> nodes under it, aliases expanded

    def compose_node(self, parent: Any, index: Any) -> Any:
        events: Any = self  # the Parser mixed into the loader provides the events
        if events.check_event(yaml.AliasEvent):
            event = events.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:
                size = self._sizes.get(id(node))
                if size is None:
                    raise yaml.composer.ComposerError(
                        None, None, f"alias *{event.anchor} is used inside its own anchor (a recursive alias)",
                        event.start_mark,
                    )
                self._expanded += size
                if self._expanded > MAX_ALIAS_EXPANSION:
                    raise yaml.composer.ComposerError(
                        None, None, f"aliases expand to more than {MAX_ALIAS_EXPANSION:,} nodes (an alias bomb?); "
                        "write the repeated parts out or use fewer aliases", event.start_mark,
                    )
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels of lists and mappings",
                events.peek_event().start_mark,
            )
        node = super().compose_node(parent, index)
        self._depth -= 1
        if isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._sizes.get(id(v), 1) for v in node.value)
        elif isinstance(node, yaml.MappingNode):
            size = 1 + sum(self._sizes.get(id(k), 1) + self._sizes.get(id(v), 1) for k, v in node.value)
        else:
            size = 1
        self._sizes[id(node)] = size
        return node


def _yaml_text(key: Any) -> str:
    """A key as YAML writes it: ``true``, ``1``, ``'name'``."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return repr(key)


class _Constructor(yaml.constructor.SafeConstructor):
    """SafeConstructor (no arbitrary objects) that refuses duplicate keys (plain YAML keeps the last
    one silently) and over-long integers, with YAML 1.2 numbers."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # '<<: *defaults': keys given beside it override the merged ones
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"a {type(key).__name__} cannot be a key; keys are names or numbers",
                    key_node.start_mark,
                ) from None
            if duplicate:
                first = next(k for k in seen if k == key)
                if type(first) is not type(key) or repr(first) != repr(key):  # 1 and true, 1 and 1.0: equal in Python
                    raise yaml.constructor.ConstructorError(
                        None, None, f"keys {_yaml_text(first)} and {_yaml_text(key)} are read as the same key; quote "
                        "them to make them names ('1', 'true')", key_node.start_mark
                    )
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {_yaml_text(key)} (each key may appear once)", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node)).replace("_", "")
        if len(text) > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(text)} digits; at most {MAX_INT_DIGITS} are accepted", node.start_mark
            )
        if text.startswith(("0x", "0o")):
            return int(text[2:], 16 if text[1] == "x" else 8)
        return int(text, 10)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        text = str(self.construct_scalar(node)).replace("_", "").lower()
        if text.endswith((".inf", ".nan")):
            return float(text.replace(".", ""))  # caught as not finite when the document is walked
        return float(text)


_Constructor.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)  # type: ignore[type-var]
_Constructor.add_constructor("tag:yaml.org,2002:float", _Constructor.construct_yaml_float)  # type: ignore[type-var]


class _PyLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _Composer, _Constructor, _Resolver):
    """The bounded, strict, safe YAML loader every input file goes through (pure Python)."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        _Composer.__init__(self)
        _Constructor.__init__(self)
        _Resolver.__init__(self)


_Loader: Any = _PyLoader
if getattr(yaml, "__with_libyaml__", False):
    from yaml.cyaml import CParser  # type: ignore[attr-defined]

    class _CLoader(_Composer, _Constructor, _Resolver, CParser):
        """The same loader on libyaml's scanner and parser (about 5x faster): libyaml only produces the
        events; composing (with the bounds above), resolving and constructing stay in Python."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _Composer.__init__(self)
            _Constructor.__init__(self)
            _Resolver.__init__(self)

    _Loader = _CLoader


class _Refused(Exception):
    """A JSON document refused by one of the parser hooks (message says why)."""


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"duplicate key {key!r} (each key may appear once)")
        out[key] = value
    return out


def _json_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a finite number; give a finite number")


def _json_nonfinite(name: str) -> float:
    """``Infinity``/``NaN`` read as floats, so the document walk refuses them naming their field."""
    return float(name)


def _json_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text)} digits; at most {MAX_INT_DIGITS} are accepted")
    return int(text)


def _load_json(text: str, path: Path) -> Any:
    """Strict JSON (RFC 8259: no trailing commas, no comments, no NaN), duplicate keys refused."""
    try:
        return json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_nonfinite, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise InputError(f"{_file(path)}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except _Refused as exc:
        raise InputError(f"{_file(path)}: {exc}") from None
    except RecursionError:
        raise InputError(f"{_file(path)}: nested deeper than {MAX_DEPTH} levels of lists and mappings") from None


def _load_yaml(text: str, path: Path) -> Any:
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"{_file(path)}: malformed YAML{where}: {problem}") from None
    except RecursionError:  # not expected with the depth bound; kept so it can never be a traceback
        raise InputError(f"{_file(path)}: nested deeper than {MAX_DEPTH} levels of lists and mappings") from None
    finally:
        loader.dispose()


def _check_tree(doc: Any, path: Path) -> None:
    """Walk a parsed document once, without recursion: its depth, its types (the JSON ones only:
    no dates, sets or binary from YAML tags), finite numbers and valid Unicode text."""
    stack: list[tuple[Any, str, int]] = [(doc, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"{_file(path)}: {where} is nested deeper than {MAX_DEPTH} levels of lists and mappings")
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str | int | float | bool | None):
                    raise InputError(f"{_file(path)}: {where or '(top level)'} has a {type(k).__name__} as a key")
                inner = f"{where}.{_key(k)}" if where else _key(k)
                _check_scalar(k, inner, path)
                stack.append((v, inner, depth + 1))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                stack.append((v, f"{where}[{i}]", depth + 1))
        else:
            _check_scalar(value, where, path)


def _check_scalar(value: Any, where: str, path: Path) -> None:
    where = _short(where)
    if not isinstance(value, _SCALAR_TYPES):
        raise InputError(
            f"{_file(path)}: {where or '(top level)'} is a {type(value).__name__}; these files hold text, numbers, "
            "true/false, lists and mappings only (drop the YAML tag, or quote the value)"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{_file(path)}: {where} = {value!r} is not a finite number; give a finite number")
    if isinstance(value, str):
        bad = _SURROGATE.search(value)
        if bad:
            raise InputError(
                f"{_file(path)}: {where or 'a text'} holds the lone surrogate U+{ord(bad.group()):04X}, which is not "
                "a character; write the character itself, or a complete surrogate pair"
            )


def _key(key: Any) -> str:
    """A key as a step of a field path in a message: as written when plain, else quoted with escapes."""
    text = str(key)
    return text if text.isprintable() and len(text) <= 60 and "." not in text else _value(text, 60)


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _value(value: Any, limit: int = 80) -> str:
    """A value as shown in a message: repr, cut to ``limit`` characters."""
    return _short(repr(value), limit)


_TYPE_WORDS = {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number",
               bool: "a boolean (true/false)"}


def a_type(value: Any) -> str:
    """What a value is, in a message's words: ``nothing``, ``a list``, ``an integer``, ``a mapping``..."""
    if value is None:
        return "nothing"
    name = type(value).__name__
    return _TYPE_WORDS.get(type(value), f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}")


def read_structured(path: Path) -> Any:
    """Parse a YAML file (or a ``.json`` file as strict JSON); errors name the file, line and column.

    Refuses before parsing: a missing file, anything but a regular file (a directory, a FIFO,
    ``/dev/zero``), a file over :data:`MAX_FILE_BYTES`, text that is not UTF-8. While parsing:
    nesting over :data:`MAX_DEPTH`, alias expansion over :data:`MAX_ALIAS_EXPANSION`, duplicate
    keys, over-long integers. After: types other than JSON's, non-finite numbers, lone surrogates.
    """
    st = _stat(path)
    if st is None:
        raise InputError(f"{_file(path)}: {_missing(path)}")
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, pipe or socket)"
        raise InputError(f"{_file(path)}: is {kind}; give a YAML or JSON file")
    if st.st_size > MAX_FILE_BYTES:
        raise InputError(f"{_file(path)}: {st.st_size:,} bytes; input files may hold at most {MAX_FILE_BYTES:,} bytes")
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{_file(path)}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(f"{_file(path)}: more than {MAX_FILE_BYTES:,} bytes; input files may hold at most that")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{_file(path)}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None
    doc = _load_json(text, path) if path.suffix.lower() == ".json" else _load_yaml(text, path)
    _check_tree(doc, path)
    return doc


def _fields_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The field names of the model found at ``loc`` inside ``model`` (nested models followed), or []."""
    current = model
    for part in loc:
        if current is None:
            return []
        field = current.model_fields.get(str(part))
        ann = field.annotation if field is not None else None
        current = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return list(current.model_fields) if current is not None else []


_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})


def _accepted_range(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> str:
    """``; accepted: a number from 0.001 to 100000000`` for the numeric field at ``loc`` inside ``model``
    (its bounds both ways, as the CLI's range messages word them), or '' when the field is not found."""
    current, field = model, None
    for part in loc:
        if current is None:
            return ""
        field = current.model_fields.get(str(part))
        ann = field.annotation if field is not None else None
        current = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    if field is None:
        return ""
    bounds = {type(m).__name__.lower(): _bound(getattr(m, type(m).__name__.lower())) for m in field.metadata
              if type(m).__name__ in ("Ge", "Gt", "Le", "Lt")}
    kind = "an integer" if int in (field.annotation, *get_args(field.annotation)) else "a number"
    low = f">= {bounds['ge']}" if "ge" in bounds else f"> {bounds['gt']}" if "gt" in bounds else ""
    high = f"<= {bounds['le']}" if "le" in bounds else f"< {bounds['lt']}" if "lt" in bounds else ""
    if "ge" in bounds and "le" in bounds:
        return f"; accepted: {kind} from {bounds['ge']} to {bounds['le']}"
    return f"; accepted: {kind} {' and '.join(b for b in (low, high) if b)}" if low or high else ""


def _bound(value: float) -> str:
    """A range bound as a user types it: ``100000000``, ``0.001``."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def format_validation_error(
    exc: ValidationError, path: Path | str, prefix: str = "", model: type[BaseModel] | None = None
) -> str:
    """One line per problem: ``file F: field.path = value: message``; an unknown key (with ``model``, the
    model validated) lists the accepted keys and the one probably meant."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
        if err["type"] == "extra_forbidden":
            accepted = _fields_at(model, tuple(err["loc"][:-1]))
            key = err["loc"][-1] if err["loc"] else ""
            hint = f"; accepted keys: {', '.join(accepted)}{did_you_mean(key, accepted)}" if accepted else ""
            lines.append(f"{_short(loc)}: unknown key {_value(key)}{hint}")
            continue
        value = err.get("input")
        if isinstance(value, dict | list):
            shown = f" (a {'mapping' if isinstance(value, dict) else 'list'})" if err["type"].endswith("_type") else ""
        elif value is None or err["type"] == "missing":
            shown = ""
        else:
            shown = f" = {_value(value)}"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] in _RANGE_ERRORS:
            msg += _accepted_range(model, tuple(err["loc"]))
        lines.append(f"{_short(loc) or '(top level)'}{shown}: {msg}")
    head = f"{_file(path)}: " if str(path) else ""
    if len(lines) == 1:
        return head + lines[0]
    return head + "invalid:\n  " + "\n  ".join(lines)


def _expect_dict(value: Any, where: str, path: Path) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{_file(path)}: {where} must be a mapping of keys to values, got {a_type(value)}")
    return value


def _check_keys(doc: dict[str, Any], known: set[str], where: str, path: Path) -> None:
    for key in doc:
        if key not in known:
            raise InputError(f"{_file(path)}: {where}unknown key {_value(key)}; accepted keys: "
                             f"{', '.join(sorted(known))}"
                             + did_you_mean(key, known))


def _given(doc: dict[str, Any], key: str, default: Any) -> Any:
    """``doc[key]``, or ``default`` when it is absent or empty (``key:`` alone); any other value as written,
    for its check to refuse a wrong type (``machine: 0`` is no machine block)."""
    value = doc.get(key)
    return default if value is None or value == default else value


def _node_name(value: Any) -> str | None:
    """A node id or tool name as written: text, or a whole number (``1: tool``); None otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


# ---------------------------------------------------------------------------- tool library
LIBRARY_KEYS = {"tools", *PROVENANCE_DEFAULTS}
"""Top-level keys of a tool library file."""


def load_tool_library(path: Path | str) -> dict[str, ToolCard]:
    """Read a tool library file (``tools:`` name -> card fields) into cards by name.

    A card may be derived from another one with ``base: NAME`` and ``amplification: K``; a tool
    named ``NAME_xK`` that has no entry is derived from ``NAME`` on demand by :func:`resolve_card`.
    """
    path = Path(path)
    doc = _expect_dict(read_structured(path), "the top level", path)
    _check_keys(doc, LIBRARY_KEYS, "", path)
    tools = _expect_dict(doc.get("tools"), "tools", path)
    given = {k: doc[k] for k in PROVENANCE_DEFAULTS if k in doc}
    try:
        defaults = Provenance.model_validate(given, strict=True)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, path, model=Provenance)) from None
    return parse_cards(tools, path, defaults, where="tools")


def parse_cards(
    entries: dict[str, Any], path: Path, defaults: Provenance | None = None, where: str = "cards"
) -> dict[str, ToolCard]:
    """Cards from ``name -> fields`` entries, resolving ``base``/``amplification`` derivations.

    Linear in the number of cards: each ``base`` chain is followed once, without recursion.
    """
    for name, fields in entries.items():
        if not isinstance(name, str):
            raise InputError(f"{_file(path)}: {where}: the key {_value(name)} is not a tool name; quote it")
        fields = _expect_dict(fields, f"{where}.{_key(name)}", path)
        base = fields.get("base")
        if base is not None and not isinstance(base, str):
            raise InputError(
                f"{_file(path)}: {where}.{_key(name)}.base = {_value(base)}; give the name of a tool in this file"
            )
        if base is not None and base not in entries:
            raise InputError(
                f"{_file(path)}: {where}.{_key(name)}.base = {base!r} is not a tool in this file; "
                f"known tools: [{some(sorted(entries))}]"
            )
    cards: dict[str, ToolCard] = {}
    for name in entries:
        chain = [name]  # name, its base, the base's base... until a built card or a full card
        on_chain = {name}
        while True:
            base = entries[chain[-1]].get("base")
            if base is None or base in cards:
                break
            if base in on_chain:
                loop = chain[chain.index(base):]
                raise InputError(f"{_file(path)}: {where}: circular 'base' references among [{some(sorted(loop))}]")
            chain.append(base)
            on_chain.add(base)
        for n in reversed(chain):
            if n not in cards:
                base = entries[n].get("base")
                cards[n] = _build_card(n, entries[n], cards[base] if base else None, path, defaults, where)
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
        raise InputError(
            f"{_file(path)}: {where}.{_key(name)}.name = {_value(data['name'])} differs from its key {name!r}"
        )
    try:
        if base is not None:
            k = data.pop("amplification", 1)
            data.pop("base")
            try:
                derived = base.amplified(k, name=name)
            except ValidationError as exc:
                raise InputError(
                    format_validation_error(exc, path, prefix=f"{where}.{_key(name)} (amplified {k}x from {base.name})")
                ) from None
            except ValueError as exc:
                raise InputError(f"{_file(path)}: {where}.{_key(name)}.{exc}") from None
            merged = derived.model_dump()
            merged.update(data)
            return ToolCard.model_validate(merged, strict=True)  # errors: formatted below with the model
        if "provenance" not in data:
            prov = (defaults or Provenance()).model_dump()
            if "source" in data:  # shorthand: a card-level ``source:`` line
                prov["source"] = data.pop("source")
            data["provenance"] = prov
        return ToolCard.model_validate(data, strict=True)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, path, prefix=f"{where}.{_key(name)}", model=ToolCard)) from None


def resolve_card(name: str, library: dict[str, ToolCard]) -> ToolCard | None:
    """The card for ``name``; ``BASE_xK`` is derived from ``BASE`` when not listed.

    Raises ``ValueError`` when K is out of range or the derived figures leave theirs.
    """
    if name in library:
        return library[name]
    if len(name) > MAX_NAME_CHARS:  # a name's length bounds the regex work and the digits of K
        return None
    m = _AMPLIFIED.match(name)
    if m and m["base"] in library:
        return library[m["base"]].amplified(int(m["k"]), name=name)
    return None


# ---------------------------------------------------------------------------- scenario
SCENARIO_KEYS = {"name", "description", "shows", "mode", "tools", "cards", "machine", "nodes", "edges", "workload"}
"""Top-level keys of a scenario file."""


def resolve_scenario_path(ref: str | Path) -> Path:
    """A scenario reference (a file path, or the name of a bundled scenario) as a path."""
    path = Path(ref)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or _exists(path):
        if not _exists(path):
            raise InputError(f"{_file(path)}: {_missing(path)}")
        return path
    bundled = bundled_scenarios()
    if str(ref) in bundled:
        return bundled[str(ref)]
    raise UnknownNameError(
        f"scenario {_value(str(ref))} is neither a file nor a bundled scenario; bundled: {', '.join(bundled)}"
        + did_you_mean(str(ref), bundled)
    )


def load_scenario(ref: str | Path, library: dict[str, ToolCard] | None = None) -> Scenario:
    """Read a scenario file (or a bundled scenario by name).

    Cards come from, in order of precedence: the file's inline ``cards:``, then the library
    named by its ``tools:`` key (a path relative to the scenario file), else ``library`` if
    given, else the bundled reference library. A file that names its own ``tools:`` while
    ``library`` is given is an error (the bench's ``tools``): one of the two would be ignored.
    """
    path = resolve_scenario_path(ref)
    doc = _expect_dict(read_structured(path), "the top level", path)
    _check_keys(doc, SCENARIO_KEYS, "", path)

    if "tools" in doc:
        if not isinstance(doc["tools"], str) or not doc["tools"].strip():
            raise InputError(
                f"{_file(path)}: tools = {_value(doc['tools'])}; give the path of a tool library file "
                "(relative to this scenario), or put cards inline under 'cards:'"
            )
        if library is not None:
            raise InputError(
                f"{_file(path)}: tools = {doc['tools']!r} names this scenario's own tool library, and another "
                "library was given too (`library`); a scenario takes its cards from one library: drop one "
                "of the two, or put cards that must override inline under 'cards:'"
            )
        lib_path = Path(doc["tools"])
        if not lib_path.is_absolute():
            lib_path = path.parent / lib_path
        if not _exists(lib_path):
            raise InputError(f"{_file(path)}: tools = {doc['tools']!r}: tool library {path_text(lib_path)} not found")
        try:
            base_library = load_tool_library(lib_path)
        except InputError as exc:  # name the scenario that points at the library too
            raise InputError(f"{_file(path)}: tools = {doc['tools']!r}: {exc}") from None
    elif library is not None:
        base_library = library
    else:
        base_library = load_tool_library(bundled_library_path())
    inline = parse_cards(_expect_dict(_given(doc, "cards", {}), "cards", path), path)
    combined = {**base_library, **inline}

    nodes = _parse_nodes(doc.get("nodes"), path)
    edges = _parse_edges(_given(doc, "edges", []), path)
    cards: dict[str, ToolCard] = {}
    for node in nodes:
        if node.tool in cards:
            continue
        try:
            card = resolve_card(node.tool, combined)
        except ValidationError as exc:
            where = f"node {node.id!r} tool {node.tool!r}"
            raise InputError(format_validation_error(exc, path, prefix=where)) from None
        except ValueError as exc:
            raise InputError(f"{_file(path)}: node {node.id!r} uses tool {node.tool!r}: {exc}") from None
        if card is None:
            raise InputError(
                f"{_file(path)}: node {node.id!r} uses tool {node.tool!r}, which has no card; "
                f"known tools: {some(sorted(combined), quote=False)}" + did_you_mean(node.tool, combined)
            )
        cards[node.tool] = card

    try:
        workflow = Workflow(nodes=tuple(nodes), edges=tuple(edges))
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, path, prefix="workflow")) from None
    try:
        machine = Machine.model_validate(_expect_dict(_given(doc, "machine", {}), "machine", path), strict=True)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, path, prefix="machine", model=Machine)) from None
    workload = _parse_workload(doc.get("workload"), path)
    mode_raw = doc.get("mode", "binary")
    if not isinstance(mode_raw, str) or mode_raw not in {m.value for m in Mode}:
        raise InputError(
            f"{_file(path)}: mode = {_value(mode_raw)} is not a mode; accepted: {', '.join(m.value for m in Mode)}"
        )
    try:
        return Scenario.model_validate(
            {
                # an empty 'key:' (null) is the same as leaving the key out
                "name": doc["name"] if doc.get("name") is not None else path.stem,
                "description": doc["description"] if doc.get("description") is not None else "",
                "shows": doc["shows"] if doc.get("shows") is not None else "",
                "mode": Mode(mode_raw),
                "workflow": workflow,
                "cards": cards,
                "machine": machine,
                "source": str(path),
                "workload": workload,
            },
            strict=True,
        )
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, path)) from None


def _parse_workload(raw: Any, path: Path) -> Workload | None:
    """The optional ``workload:`` section (:class:`~hetsched.model.workload.Workload`); a trace's
    ``file:`` is read relative to the scenario file."""
    if raw is None:
        return None
    data = dict(_expect_dict(raw, "workload", path))
    kind = data.get("arrivals")
    accepted = ", ".join(a.value for a in Arrivals)
    if kind is None:
        raise InputError(f"{_file(path)}: workload.arrivals is missing; accepted: {accepted}")
    if not isinstance(kind, str) or kind not in {a.value for a in Arrivals}:
        raise InputError(f"{_file(path)}: workload.arrivals = {_value(kind)} is not an arrival process; "
                         f"accepted: {accepted}")
    data["arrivals"] = Arrivals(kind)
    if "file" in data:
        name = data["file"]
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"{_file(path)}: workload.file = {_value(name)}; give the path of a file of arrival "
                             "times (relative to this scenario)")
        if "times_ms" in data:
            raise InputError(f"{_file(path)}: workload gives both file and times_ms; give one of the two")
        target = Path(name) if Path(name).is_absolute() else path.parent / name
        try:
            data["times_ms"] = read_arrivals(target)
        except InputError as exc:  # name the scenario that points at the file too
            raise InputError(f"{_file(path)}: workload.file = {name!r}: {exc}") from None
    if isinstance(data.get("times_ms"), list):
        data["times_ms"] = tuple(data["times_ms"])
    try:
        return Workload.model_validate(data, strict=True)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, path, prefix="workload", model=Workload)) from None


ARRIVAL_COLUMNS: tuple[str, ...] = ("time_ms", "arrival_ms", "t_ms")
"""Header names a CSV file of arrival times may give its time column (ms from the start; any case)."""


def read_arrivals(path: Path) -> tuple[float, ...]:
    """Arrival times (ms from the start) from a file: a YAML/JSON list (or ``{times_ms: [...]}``), or
    text with one number a line (blank lines and ``#`` comments skipped), or a CSV whose header line
    names its time column (:data:`ARRIVAL_COLUMNS`; the other columns are ignored). Several values on a
    line without such a header are refused: which of them is the time cannot be known."""
    return tuple(ms for _, ms in _placed_arrivals(path))


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _placed_arrivals(path: Path) -> list[tuple[str, float]]:
    """:func:`read_arrivals` with where each time is in the file (``line 7``, ``[3]``)."""
    if path.suffix.lower() in (".yaml", ".yml", ".json"):
        doc = read_structured(path)
        if isinstance(doc, dict) and set(doc) == {"times_ms"}:
            doc = doc["times_ms"]
        if not isinstance(doc, list):
            raise InputError(f"{_file(path)}: give a list of arrival times in ms (or times_ms: [...])")
        out = []
        for i, v in enumerate(doc):
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise InputError(f"{_file(path)}: [{i}] = {_value(v)} is not a number; give arrival times in ms")
            out.append((f"[{i}]", _arrival_ms(float(v), f"{_file(path)}: [{i}] = {_value(v)}")))
        return out
    st = _stat(path)
    if st is None:
        raise InputError(f"{_file(path)}: {_missing(path)} (a file of arrival times)")
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{_file(path)}: is a directory; give a file of arrival times (ms), one a line")
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        raise InputError(f"{_file(path)}: not a regular file of at most {MAX_FILE_BYTES:,} bytes")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise InputError(f"{_file(path)}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise InputError(f"{_file(path)}: not UTF-8 text; save it as UTF-8") from None
    import csv

    accepted = (f"give one arrival time (ms) a line, or a CSV whose header line names its time column "
                f"{ARRIVAL_COLUMNS[0]} (or {', '.join(ARRIVAL_COLUMNS[1:])})")
    rows: list[tuple[int, list[str]]] = []
    for no, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0]
        if not body.strip():
            continue
        try:
            cells = [c.strip() for c in next(csv.reader([body]))]
        except csv.Error as exc:
            raise InputError(f"{_file(path)}: line {no}: not a CSV line ({exc}); {accepted}") from None
        while len(cells) > 1 and not cells[-1]:  # a trailing comma
            cells.pop()
        rows.append((no, cells))
    if not rows:
        raise InputError(f"{_file(path)}: holds no arrival times; give one number (ms) a line")
    column, name = 0, ""
    head_no, head = rows[0]
    if not any(_is_number(c) for c in head):  # a header line
        names = [c.lower() for c in head]
        found = [i for i, n in enumerate(names) if n in ARRIVAL_COLUMNS]
        if not found:
            what = (f"{_value(head[0])} is not a number" if len(head) == 1 else
                    f"the header {_short(', '.join(head), 80)!r} names no time column")
            raise InputError(f"{_file(path)}: line {head_no}: {what}; {accepted}")
        column, name, rows = found[0], head[found[0]], rows[1:]
        if not rows:
            raise InputError(f"{_file(path)}: holds a header line and no arrival times")
    times = []
    for no, cells in rows:
        if not name and len(cells) > 1:
            raise InputError(f"{_file(path)}: line {no}: {len(cells)} comma-separated values, and no header line "
                             f"says which is the arrival time; {accepted}")
        cell = cells[column] if column < len(cells) else ""
        where = f"line {no}" + (f", column {name}" if name else "")
        if not cell:
            raise InputError(f"{_file(path)}: {where}: no value; {accepted}")
        if not _is_number(cell):
            raise InputError(f"{_file(path)}: {where}: {_value(cell)} is not a number; give arrival times in ms")
        times.append((f"line {no}", _arrival_ms(float(cell), f"{_file(path)}: {where}: {_short(cell, 40)}")))
    return times


def arrivals_warnings(path: Path) -> list[str]:
    """What a file of arrival times holds that reading it accepts but changes (for ``hetsched validate``):
    times out of order (they are sorted when read), naming the file and the lines."""
    return _order_warnings(_file(path), _placed_arrivals(path))


def _order_warnings(source: str, placed: Sequence[tuple[str, float]]) -> list[str]:
    """The one warning (or none) for arrival times out of order, naming ``source`` (the file, or the
    scenario's field) and the first time earlier than the one before it: ``line 7 (40 ms) comes after
    line 6 (90 ms)``. Every reader of arrival times (a file of them, a scenario's inline times or the
    file it names) warns through it."""
    for (where_before, before), (where, ms) in itertools.pairwise(placed):
        if ms < before:
            return [f"{source}: arrival times out of order: {where} ({ms:g} ms) comes after {where_before} "
                    f"({before:g} ms); they are sorted when read"]
    return []


def scenario_warnings(ref: str | Path) -> list[str]:
    """What a scenario file holds that loading it accepts but ignores or changes, one message each (for
    ``hetsched validate``): an inline card of a tool no node uses (the card is ignored), and arrival times
    out of order (inline ``workload.times_ms`` or the ``workload.file`` it names: they are sorted when
    read). Each message names the file and the tool or line. Call it on a file that loads."""
    path = resolve_scenario_path(ref)
    doc = read_structured(path)
    if not isinstance(doc, dict):
        return []
    out: list[str] = []
    nodes = _parse_nodes(doc.get("nodes"), path)
    used = {n.tool for n in nodes}
    cards = doc.get("cards")
    for name in cards if isinstance(cards, dict) else ():
        if str(name) not in used:
            out.append(f"{_file(path)}: cards.{_key(str(name))}: no node uses tool {str(name)!r}; its card is ignored")
    workload = doc.get("workload")
    if isinstance(workload, dict):
        times = workload.get("times_ms")
        if isinstance(times, list):
            out += _order_warnings(_file(path), [(f"workload.times_ms[{i}]", float(v)) for i, v in enumerate(times)
                                                 if isinstance(v, int | float) and not isinstance(v, bool)])
        name = workload.get("file")
        if isinstance(name, str) and name.strip():
            target = Path(name) if Path(name).is_absolute() else path.parent / name
            out += _order_warnings(f"{_file(target)} (workload.file of {_file(path)})", _placed_arrivals(target))
    return out


def _arrival_ms(value: float, where: str) -> float:
    """One arrival time, refused with ``where`` (the file and line) unless finite and within a window's span."""
    top_ms = MAX_DURATION_S * 1000
    if not math.isfinite(value):
        raise InputError(f"{where} is not a finite number; give arrival times in ms, 0 to {top_ms:g}")
    if not 0 <= value <= top_ms:
        raise InputError(f"{where}: arrival times are ms from the start, 0 to {top_ms:g}")
    return value


def _parse_nodes(raw: Any, path: Path) -> list[Node]:
    if raw is None:
        raise InputError(f"{_file(path)}: 'nodes' is missing; give a list of {{id, tool}} or a mapping id: tool")
    items: list[tuple[Any, Any, str]] = []  # (id, tool, where)
    if isinstance(raw, dict):
        items = [(k, v, f"nodes.{_key(k)}") for k, v in raw.items()]
    elif isinstance(raw, list):
        for i, entry in enumerate(raw):
            if not isinstance(entry, dict) or "id" not in entry or "tool" not in entry:
                raise InputError(f"{_file(path)}: nodes[{i}] = {_value(entry)}: give {{id: NAME, tool: TOOL}}")
            extra = set(entry) - {"id", "tool"}
            if extra:
                raise InputError(
                    f"{_file(path)}: nodes[{i}] has unknown keys [{some(sorted(map(str, extra)))}]; accepted: id, tool"
                )
            items.append((entry["id"], entry["tool"], f"nodes[{i}]"))
    else:
        raise InputError(f"{_file(path)}: 'nodes' must be a list or a mapping, got {a_type(raw)}")
    if not items:
        raise InputError(f"{_file(path)}: 'nodes' is empty; a workflow needs at least one node")
    nodes = []
    for node_id, tool, where in items:
        if not isinstance(tool, str) or not tool:
            raise InputError(f"{_file(path)}: node {_value(node_id)}: tool = {_value(tool)}; give a tool name")
        name = _node_name(node_id)
        if name is None or name.strip() == "":
            if node_id is None or name is not None:
                raise InputError(
                    f"{_file(path)}: node id {_value(node_id)} (tool {tool!r}) is empty; give every node a name"
                )
            raise InputError(
                f"{_file(path)}: {where}: node id {_value(node_id)} is {a_type(node_id)}; give a name "
                "(quote it: YAML reads true, 1.5 or null as values, not text)"
            )
        try:
            nodes.append(Node.model_validate({"id": name, "tool": tool}, strict=True))
        except ValidationError as exc:
            raise InputError(format_validation_error(exc, path, prefix=where)) from None
    return nodes


_MAX_EDGE_TEXT = 2 * MAX_NAME_CHARS + 16


def _parse_edges(raw: Any, path: Path) -> list[Edge]:
    if not isinstance(raw, list):
        raise InputError(f"{_file(path)}: 'edges' must be a list, got {a_type(raw)}")
    edges = []
    for i, entry in enumerate(raw):
        try:
            if isinstance(entry, str):
                m = _EDGE_TEXT.match(entry) if len(entry) <= _MAX_EDGE_TEXT else None
                if not m:
                    raise InputError(
                        f"{_file(path)}: edges[{i}] = {_value(entry)}; write 'A -> B' or {{src, dst, data_mb}}"
                    )
                edges.append(Edge.model_validate({"src": m["src"], "dst": m["dst"]}, strict=True))
            elif isinstance(entry, list) and len(entry) == 2 and all(_node_name(x) is not None for x in entry):
                edges.append(
                    Edge.model_validate({"src": _node_name(entry[0]), "dst": _node_name(entry[1])}, strict=True)
                )
            elif isinstance(entry, dict):
                fixed = dict(entry)
                for end in ("src", "dst"):
                    if end in fixed and isinstance(fixed[end], int) and not isinstance(fixed[end], bool):
                        fixed[end] = str(fixed[end])  # '1: tool' nodes are named '1'
                edges.append(Edge.model_validate(fixed, strict=True))
            else:
                raise InputError(
                    f"{_file(path)}: edges[{i}] = {_value(entry)}; write 'A -> B', [A, B] or {{src, dst, data_mb}}"
                )
        except ValidationError as exc:
            raise InputError(format_validation_error(exc, path, prefix=f"edges[{i}]", model=Edge)) from None
    return edges


# ---------------------------------------------------------------------------- mappings
def _mapping_from_pairs(pairs: list[tuple[Any, Any]], where: str) -> Mapping:
    """A mapping from (node, placement) pairs: every node a name, every placement text, each node once."""
    seen: dict[str, Any] = {}
    for node, placement in pairs:
        name = _node_name(node)
        if name is None or not name.strip():
            raise MappingError(f"{where}: node {_value(node)} is not a node name")
        if not isinstance(placement, str):
            raise MappingError(
                f"{where}: node {name!r}: placement = {_value(placement)}; accepted: cpu, gpu_now, gpu_queue"
            )
        if name in seen:
            raise MappingError(
                f"{where}: node {name!r} is placed twice ({seen[name]} and {placement}); place each node once"
            )
        seen[name] = placement
    return Mapping(seen)


def parse_mapping_text(text: str, where: str = "mapping") -> Mapping:
    """``A=cpu,B=gpu_now`` or ``A:cpu B:gpu_now`` (as the CLI prints mappings; commas or spaces) or a JSON
    object, as a mapping; each node once."""
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text, object_pairs_hook=list, parse_constant=_json_constant, parse_int=_json_int)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except _Refused as exc:
            raise InputError(f"{where}: {exc}") from None
        except RecursionError:
            raise InputError(f"{where}: nested too deep; give a flat JSON object node -> placement") from None
        if not isinstance(data, list):  # object_pairs_hook=list: an object is its list of pairs
            raise InputError(f"{where}: give a JSON object node -> placement")
        return _mapping_from_pairs(data, where)
    pairs = []
    for part in re.split(r"[,\s]+", text):
        if not part:
            continue
        if "=" in part:
            k, v = part.split("=", 1)
        elif ":" in part:  # as `hetsched oracle` and `run` print mappings: A:gpu_now B:cpu
            k, v = part.rsplit(":", 1)
        else:
            raise InputError(
                f"{where}: {_value(part)} is not NODE=PLACEMENT; e.g. A=cpu,B=gpu_now (or A:cpu B:gpu_now)"
            )
        pairs.append((k.strip(), v.strip().rstrip("*")))
    return _mapping_from_pairs(pairs, where)


def load_mapping(path: Path | str) -> Mapping:
    """A mapping from a YAML/JSON file holding ``node: placement`` (or only ``mapping: {...}``)."""
    path = Path(path)
    doc = _expect_dict(read_structured(path), "the top level", path)
    if isinstance(doc.get("mapping"), dict):  # else 'mapping' is a node's name
        others = [k for k in doc if k != "mapping"]
        if others:
            raise MappingError(
                f"{_file(path)}: unknown key(s) [{some(others)}] beside 'mapping:'; a mapping file holds "
                "node: placement pairs, or only a 'mapping:' key holding them"
            )
        doc = _expect_dict(doc["mapping"], "mapping", path)
    try:
        return _mapping_from_pairs(list(doc.items()), f"{_file(path)}")
    except MappingError as exc:
        message = str(exc)
        raise MappingError(message if message.startswith(f"{_file(path)}") else f"{_file(path)}: {message}") from None


def detect_kind(path: Path) -> str:
    """``tools``, ``scenario``, ``mapping`` or ``arrivals``: which format a file holds (for ``hetsched
    validate``). A file of arrival times (:func:`read_arrivals`) is a YAML/JSON list of numbers or
    ``{times_ms: [...]}``, or a text file (any other suffix) whose top level is not a mapping."""
    structured = path.suffix.lower() in (".yaml", ".yml", ".json")
    try:
        doc = read_structured(path)
    except InputError:
        if structured or _stat(path) is None:
            raise
        return "arrivals"  # text YAML cannot read (a CSV line with quotes...): the arrivals reader says what it is
    if isinstance(doc, dict) and set(doc) == {"times_ms"}:
        return "arrivals"
    if isinstance(doc, list) and doc and all(isinstance(v, int | float) and not isinstance(v, bool) for v in doc):
        return "arrivals"
    if not structured and not isinstance(doc, dict | list):
        return "arrivals"
    if isinstance(doc, dict) and "tools" in doc and "nodes" not in doc:
        return "tools"
    if isinstance(doc, dict) and "nodes" in doc:
        return "scenario"
    what = "not a tool library (top-level 'tools:'), a scenario ('nodes:') or a mapping (node: placement)"
    if isinstance(doc, dict):
        nested = [k for k, v in doc.items() if isinstance(v, dict | list) and k != "mapping"]
        if not nested:
            return "mapping"
        raise InputError(f"{_file(path)}: {what}: {_value(nested[0])} holds {a_type(doc[nested[0]])}, where a "
                         f"mapping gives a placement (cpu, gpu_now, gpu_queue); top-level keys: {some(list(doc))} (a "
                         "tool library lists its cards under 'tools:', a scenario its nodes under 'nodes:')")
    raise InputError(f"{_file(path)}: {what}; the top level is {a_type(doc)}")


# ---------------------------------------------------------------------------- starting points
def bundled_libraries() -> dict[str, Path]:
    """Bundled tool library name (``tools``, ``tools_tiny``) -> file."""
    return {p.stem: p for p in sorted(data_dir().glob("*.yaml"))}


_TOP_NAME = re.compile(r"^name:.*\n?", re.MULTILINE)
_TOP_TOOLS = re.compile(r"^tools:.*\n?", re.MULTILINE)


def starter_text(ref: str, name: str | None = None) -> str:
    """A bundled scenario (or tool library) as YAML to start your own from (``hetsched init``).

    The text is the bundled file's, comments included. A scenario copy stands alone: the cards it
    takes from a bundled library are written inline under ``cards:`` (with their provenance), and
    its ``name:`` is ``name``, or dropped when ``name`` is None so that the copy takes its file's
    name when it is loaded (a copy never keeps the bundled name). A library is returned as it is.
    """
    libraries = bundled_libraries()
    if ref in libraries:
        return libraries[ref].read_text(encoding="utf-8")
    scenarios = bundled_scenarios()
    if ref not in scenarios:
        choices = [*scenarios, *libraries]
        raise UnknownNameError(f"{_value(ref)} is not a bundled scenario or tool library; bundled: "
                               f"{', '.join(choices)}" + did_you_mean(ref, choices))
    path = scenarios[ref]
    text = path.read_text(encoding="utf-8")
    doc = _expect_dict(read_structured(path), "the top level", path)
    if name is None:
        text = _TOP_NAME.sub("# name: this file's name unless you set one (a copy of a bundled scenario\n"
                             f"# must not keep its name, {ref!r})\n", text, count=1)
    else:
        text = _TOP_NAME.sub(lambda _: f"name: {json.dumps(name)}\n", text, count=1)
    if "tools" in doc:  # a library next to the bundled file: inline the cards the scenario uses
        lib_path = (path.parent / str(doc["tools"])).resolve()
        lib = _expect_dict(read_structured(lib_path), "the top level", lib_path)
        entries = _expect_dict(lib.get("tools"), "tools", lib_path)
        defaults = {k: lib[k] for k in PROVENANCE_DEFAULTS if k in lib}
        used = [n.tool for n in _parse_nodes(doc.get("nodes"), path)]
        wanted: list[str] = []
        while used:  # each tool, its base, the base's base...
            tool = used.pop()
            if tool in entries and tool not in wanted:
                wanted.append(tool)
                base = entries[tool].get("base")
                if isinstance(base, str):
                    used.append(base)
        cards: dict[str, Any] = {}
        for tool in sorted(wanted):
            entry = dict(entries[tool])
            if "provenance" not in entry and "base" not in entry:
                prov = dict(defaults)
                if "source" in entry:
                    prov["source"] = entry.pop("source")
                entry["provenance"] = prov
            cards[tool] = entry
        if "cards" in doc:  # cards of its own too: point at the library where it is installed instead
            return _TOP_TOOLS.sub(lambda _: f"tools: {json.dumps(str(lib_path))}\n", text, count=1)
        text = _TOP_TOOLS.sub(f"# the cards below are copied from the bundled library {lib_path.name}\n", text,
                              count=1)
        block = yaml.safe_dump({"cards": cards}, sort_keys=False, allow_unicode=True, width=110)
        text = text.rstrip("\n") + "\n" + block
    return text
