"""The import direction of DESIGN.md holds: model <- sim/monitor/llm/store <- policies <- loop <- bench/cli.

Parses every module under src/hetsched and checks each import of ``hetsched.<room>`` against
the rooms that module's room may use (docs/architecture.md lists the same table and the one
documented exception: the oracle uses the simulator, which defines it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hetsched"
ALLOWED: dict[str, set[str]] = {
    "model": set(),
    "sim": {"model"},
    "monitor": {"model"},
    "llm": {"model"},
    "store": {"model", "__init__"},
    "export": {"model"},
    "policies": {"model", "monitor", "llm"},
    "loop": {"model", "policies", "sim", "store"},
    "bench": {"model", "sim", "monitor", "llm", "store", "policies", "loop", "export", "__init__"},
    "cli": {"model", "sim", "monitor", "llm", "store", "policies", "loop", "export", "bench", "__init__"},
}
EXCEPTIONS = {("policies/oracle.py", "sim")}


def room_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.suffix == ".py" else ""


def imported_rooms(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rooms: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "hetsched" else [f"hetsched.{a.name}" for a in node.names]
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
    bad = {r for r in imported_rooms(path) - {room} if r not in ALLOWED[room] and (rel, r) not in EXCEPTIONS}
    assert not bad, f"{rel} ({room}) imports {sorted(bad)}; {room} may import only {sorted(ALLOWED[room])}"


def test_every_room_is_known() -> None:
    rooms = {room_of(p) for p in SRC.rglob("*.py")} - {"", "__init__", "__main__"}
    assert rooms <= set(ALLOWED), f"new room(s) {sorted(rooms - set(ALLOWED))}: add them to ALLOWED and the docs"
