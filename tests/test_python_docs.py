"""docs/python.md's examples run as written: every ``python`` block, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "python.md"


def test_python_md_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HETSCHED_STORE", str(tmp_path / "default.sqlite"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "python_md"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{DOC.name} block {i + 1}", "exec"), namespace)  # the docs' own code
    out = capsys.readouterr().out
    assert "failed: A" in out and "{'A': 'OK'}" in out
    assert "deploy:" in out


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HETSCHED_STORE", str(tmp_path / "default.sqlite"))
    readme = (DOC.parents[1] / "README.md").read_text()
    section = readme[readme.index("### Use it from Python"):]
    block = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})  # the README's own code
    assert "{'emb': [1, 2, 3]}" in capsys.readouterr().out
