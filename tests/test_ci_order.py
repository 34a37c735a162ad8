"""The suite's longest tests start first (tests/conftest.py ``LONGEST_FIRST``): each id there must still name a
test, or CI would silently go back to starting the Ray suite and the LLM tests late."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import LONGEST_FIRST, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parents[1]


def test_every_longest_first_id_names_a_test_function() -> None:
    for nodeid in LONGEST_FIRST:
        path, name = nodeid.split("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert name in names, f"{nodeid} in LONGEST_FIRST names no test"


def test_the_longest_tests_are_collected_first() -> None:
    """The hook moves them to the front, in their order, the rest keeping theirs."""

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    rest = [Item(f"tests/test_x.py::test_{i}") for i in range(5)]
    longest = [Item(n) for n in LONGEST_FIRST]
    items = [rest[0], longest[2], rest[1], longest[0], rest[2], rest[3], *reversed(longest[3:]), longest[1], rest[4]]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [*LONGEST_FIRST, *(i.nodeid for i in rest)]
