"""The import direction of DESIGN.md holds, with no exception, and no module imports itself in a circle:
model <- sim <- search; model <- tools/exec/profiling/monitor/deciders/store <- policies <- loop <- bench/cli,
with llm (the chat deciders) between deciders and policies.

Parses every module under src/hetsched and checks each import of ``hetsched.<room>`` against
the rooms that module's room may use (docs/architecture.md lists the same table), then looks
for a cycle among the modules, imports inside functions included (a function-level import
only hides a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hetsched"
BELOW_LOOP = {
    "model", "sim", "search", "tools", "exec", "profiling", "monitor", "deciders", "llm", "store", "export", "policies"
}
ALLOWED: dict[str, set[str]] = {
    "model": set(),
    "sim": {"model"},
    "search": {"model", "sim"},
    "tools": {"model"},
    "exec": {"model", "sim", "tools"},
    "profiling": {"model", "tools", "exec"},
    "monitor": {"model"},
    "deciders": {"model"},
    "llm": {"model", "deciders"},
    "store": {"model", "__init__"},
    "export": {"model"},
    "policies": {"model", "monitor", "deciders", "llm"},
    "loop": {"model", "policies", "monitor", "exec", "sim", "search", "store", "warm"},
    "builder": {"model", "tools"},
    "warm": {"model", "sim", "search", "store"},
    "session": {"model", "exec", "tools", "policies", "sim", "search", "store", "loop", "builder", "warm"},
    "api": BELOW_LOOP | {"loop", "builder", "warm", "session"},
    "integrations": {"model", "tools", "builder", "session"},
    "bench": BELOW_LOOP | {"loop", "__init__", "builder", "warm", "session", "api"},
    "cli": BELOW_LOOP | {"loop", "bench", "__init__", "builder", "warm", "session", "api"},
}


def room_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.suffix == ".py" else ""


def package_of(path: Path) -> str:
    """The dotted package a module file belongs to (``hetsched.bench`` for bench/runner.py and bench/__init__.py)."""
    parts = ("hetsched", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1])


def absolute_names(node: ast.ImportFrom, package: str) -> list[str]:
    """The absolute modules a ``from ... import`` statement in ``package`` reaches.

    Relative imports resolve as Python does: ``level`` 1 is the package itself, each further dot
    one package up (``from ..policies import x`` in hetsched.bench -> hetsched.policies;
    ``from . import data`` -> hetsched.bench.data). A name imported from a package may be a
    submodule, so ``from hetsched import loop`` and ``from .. import loop`` both reach
    hetsched.loop.
    """
    if node.level == 0:
        base = node.module or ""
    else:
        parts = package.split(".")
        if node.level > len(parts):
            raise ValueError(f"relative import beyond the top package: level {node.level} in {package}")
        base = ".".join(parts[: len(parts) - node.level + 1])
        if node.module:
            base = f"{base}.{node.module}"
    if node.module is None or base == "hetsched":
        return [f"{base}.{a.name}" for a in node.names]
    return [base]


def imported_rooms(path: Path, text: str | None = None) -> set[str]:
    """Rooms (top-level packages/modules of hetsched) the module at ``path`` imports; ``text``
    stands in for the file's source (for tests of this checker)."""
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
    package = package_of(path)
    rooms: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = absolute_names(node, package)
        for name in names:
            parts = name.split(".")
            if parts[0] == "hetsched":
                is_room = len(parts) > 1 and ((SRC / parts[1]).is_dir() or (SRC / f"{parts[1]}.py").exists())
                rooms.add(parts[1] if is_room else "__init__")  # e.g. `from hetsched import __version__`
    return rooms


MODULES = sorted(p for p in SRC.rglob("*.py") if room_of(p) in ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down(path: Path) -> None:
    room = room_of(path)
    rel = str(path.relative_to(SRC))
    bad = {r for r in imported_rooms(path) - {room} if r not in ALLOWED[room]}
    assert not bad, f"{rel} ({room}) imports {sorted(bad)}; {room} may import only {sorted(ALLOWED[room])}"


def test_every_room_is_known() -> None:
    rooms = {room_of(p) for p in SRC.rglob("*.py")} - {"", "__init__", "__main__"}
    assert rooms <= set(ALLOWED), f"new room(s) {sorted(rooms - set(ALLOWED))}: add them to ALLOWED and the docs"


def _from(statement: str) -> ast.ImportFrom:
    node = ast.parse(statement).body[0]
    assert isinstance(node, ast.ImportFrom)
    return node


def test_relative_imports_resolve_to_absolute_modules() -> None:
    assert package_of(SRC / "bench" / "runner.py") == "hetsched.bench"
    assert package_of(SRC / "bench" / "__init__.py") == "hetsched.bench"
    assert package_of(SRC / "loop.py") == "hetsched"
    cases = {
        ("from .data import BenchData", "hetsched.bench"): ["hetsched.bench.data"],
        ("from . import data, spec", "hetsched.bench"): ["hetsched.bench.data", "hetsched.bench.spec"],
        ("from ..policies import make_policy", "hetsched.bench"): ["hetsched.policies"],
        ("from .. import loop", "hetsched.bench"): ["hetsched.loop"],
        ("from ...model import Mapping", "hetsched.llm.sub"): ["hetsched.model"],
        ("from .policies import oracle", "hetsched"): ["hetsched.policies"],
        ("from hetsched import loop", "hetsched.cli"): ["hetsched.loop"],
        ("from hetsched.store import canonical", "hetsched.bench"): ["hetsched.store"],
    }
    for (statement, package), want in cases.items():
        assert absolute_names(_from(statement), package) == want, statement
    with pytest.raises(ValueError, match="beyond the top package"):
        absolute_names(_from("from ... import x"), "hetsched.bench")


def test_a_relative_import_against_the_direction_is_caught() -> None:
    monitor = SRC / "monitor" / "monitor.py"
    assert imported_rooms(monitor, "from ..policies import make_policy\nfrom .config import MonitorConfig\n") == {
        "policies", "monitor"
    }
    assert imported_rooms(SRC / "bench" / "runner.py", "from .data import BenchData\nfrom .. import loop\n") == {
        "bench", "loop"
    }


def module_name(path: Path) -> str:
    """``hetsched.bench.runner`` for bench/runner.py, ``hetsched.bench`` for bench/__init__.py."""
    parts = ("hetsched", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of import nodes inside ``if TYPE_CHECKING:`` blocks (never executed)."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom))
    return hidden


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The hetsched modules a module imports (the most specific known module each name reaches)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hidden = _type_checking_only(tree)
    package = package_of(path)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = absolute_names(node, package)
            if node.level == 0 and node.module:
                names += [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts:
                out.add(".".join(parts))
    return out


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in SRC.rglob("*.py")}
    known = set(files)
    return {m: imported_modules(p, known) - {m} for m, p in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as a list of modules (first == last), or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return [*stack[stack.index(n):], n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return []

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return []


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []
    known = {"hetsched.llm.base", "hetsched.llm.prompt", "hetsched.llm"}
    base = SRC / "llm" / "base.py"
    tree_text = "def f():\n    from hetsched.llm.prompt import build_messages\n"
    tmp = SRC.parent.parent / "tests" / "_cycle_probe.py"
    assert "hetsched.llm.prompt" in _imports_of_text(base, tree_text, known)
    assert not tmp.exists()


def _imports_of_text(path: Path, text: str, known: set[str]) -> set[str]:
    tree = ast.parse(text)
    package = package_of(path)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for name in absolute_names(node, package) + [f"{node.module}.{a.name}" for a in node.names]:
                parts = name.split(".")
                while parts and ".".join(parts) not in known:
                    parts.pop()
                if parts:
                    out.add(".".join(parts))
    return out


def test_the_loop_reaches_the_monitor() -> None:
    """DESIGN.md's loop is the code's loop: the loop's imports lead to the monitor (through the policies)."""
    graph = import_graph()
    seen, todo = set(), ["hetsched.loop"]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(graph.get(m, ()))
    assert "hetsched.monitor.monitor" in seen and "hetsched.exec" in seen


# ---- typed evidence: deciders and policies read the monitor's records by type and field ----

READERS = ("deciders", "llm", "policies")
"""Rooms whose modules receive the monitor's observation records."""
REPLY_OBJECTS = {("llm/validate.py", "obj")}
"""(module, name) pairs that index a model's parsed reply (``{"mapping": ..., "rationale": ...}``),
not an observation; the reply's own format has a ``mapping`` key."""


def observation_keys() -> set[str]:
    from dataclasses import fields

    from hetsched.model.observations import OBSERVATION_TYPES

    return {"kind"} | {f.name for t in OBSERVATION_TYPES for f in fields(t)}


def untyped_reads(rel: str, text: str, keys: set[str]) -> list[str]:
    """Where a module turns observation records into dicts (``to_json``, ``asdict``) or reads one
    by a string key that names an observation field (``r["mean_e2e_ms"]``, ``r.get("kind")``)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and any(a.name in ("to_json", "asdict") for a in node.names):
            found.append(f"{rel}:{node.lineno}: imports {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            keyed_get = (name == "get" and isinstance(func, ast.Attribute) and bool(node.args)
                         and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys
                         and (rel, ast.unparse(func.value)) not in REPLY_OBJECTS)
            if name in ("to_json", "asdict") or keyed_get:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:60]}")
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and node.slice.value in keys and (rel, ast.unparse(node.value)) not in REPLY_OBJECTS):
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:60]}")
    return found


@pytest.mark.parametrize("room", READERS)
def test_deciders_and_policies_never_read_observations_as_dicts(room: str) -> None:
    """Issue 16: the decider interface receives the monitor's typed records and nothing parses them
    back by key; the decision record's JSON is made by the model (``DecisionRecord.of``)."""
    keys = observation_keys()
    found = [hit for p in sorted((SRC / room).rglob("*.py"))
             for hit in untyped_reads(str(p.relative_to(SRC)), p.read_text(encoding="utf-8"), keys)]
    assert not found, "observations read as dicts:\n" + "\n".join(found)


def test_the_typed_evidence_check_catches_dict_reads() -> None:
    keys = observation_keys()
    for bad in ("records = tuple(obs.to_json())",
                "from hetsched.model.observations import to_json",
                "best = min(recs, key=lambda r: r['mean_e2e_ms'])",
                "if r.get('kind') == 'execution': pass",
                "data = asdict(record)"):
        assert untyped_reads("policies/x.py", bad, keys), bad
    for fine in ("best = min(recs, key=lambda r: r.mean_e2e_ms)",
                 "isinstance(r, Execution) and r.runs > 1",
                 "kwargs['seed'] = 1",
                 "raw = obj['mapping']"):
        assert not untyped_reads("llm/validate.py", fine, keys), fine
    assert untyped_reads("deciders/x.py", "raw = obj['mapping']", keys)
