"""``hetsched profile --refresh`` (hetsched.profiling.refresh): a scenario's cards re-measured in
place, wherever they live (inline, its own library, the bundled library), each with its provenance,
the rest of the file kept as written; bad requests refused with exit 2.

Real profiles of real tools (tests/realtools.py's, and the built-in CPU-only text_chunker), 2 runs each.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.factories import run_cli
from tests.realtools import Worker

import hetsched as hs
from hetsched.model.files import bundled_scenarios, load_scenario, load_tool_library
from hetsched.profiling import write_library
from hetsched.tools import register_tool, unregister_tool

FAST = ("--runs", "2", "--warmup", "1", "--loads", "1", "--cpu-threads", "1", "--no-progress")


def _today() -> str:
    return dt.date.today().isoformat()


@pytest.fixture
def tools() -> Iterator[None]:
    made = [Worker("short", ms=10, mem_mb=5), Worker("textonly", ms=5, mem_mb=0.1, has_gpu=False)]
    for t in made:
        register_tool(t, replace=True)
    yield
    for t in made:
        unregister_tool(t.name)


def _outside(text: str, key: str) -> str:
    """The file's text without its top-level ``key:`` block."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
        end += 1
    return "".join(lines[:start] + lines[end:])


def test_refresh_inline_cards_keeps_the_rest_of_the_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    assert run_cli(capsys, "init", "rag_tiny", "-o", str(path))[0] == 0
    before = path.read_text()
    old = load_scenario(path)
    first_day = _today()
    code, out, err = run_cli(capsys, "profile", "--refresh", str(path), "text_chunker", *FAST)
    days = {first_day, _today()}  # the date the profile stamps (a run may span midnight)
    assert code == 0, err
    after = path.read_text()
    assert _outside(after, "cards") == _outside(before, "cards")  # comments, nodes, machine: as written
    assert "# rag_tiny" in after
    new = load_scenario(path)
    card = new.cards["text_chunker"]
    assert card.provenance.runs == 2 and card.provenance.date in days
    assert card.provenance.hardware and card.provenance.preset == "tiny"  # the preset it was profiled at
    for name, c in old.cards.items():  # every other card exactly as it was
        if name != "text_chunker":
            assert new.cards[name] == c
    assert "text_chunker: cpu_ms" in out and "->" in out


def test_refresh_writes_the_scenarios_own_library_and_keeps_its_defaults(
        tools: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    lib = tmp_path / "lib.yaml"
    old_cards = hs.profile(["short", "textonly"], runs=2, warmup=1, loads=1, cpu_threads=1)
    write_library(lib, old_cards, header=["my library"])
    lib_before = load_tool_library(lib)
    flow = tmp_path / "flow.yaml"
    flow.write_text("# my flow\nname: f\nmode: three_way\ntools: lib.yaml\nmachine: {cpu_cores: 1, vram_budget_mb: 100}\n"
                    "nodes:\n  - {id: A, tool: short}\n  - {id: B, tool: textonly}\n  - {id: C, tool: short_x3}\n"
                    "edges:\n  - A -> B\n  - B -> C\n")
    flow_before = flow.read_text()
    first_day = _today()
    code, _, err = run_cli(capsys, "profile", "--refresh", str(flow), "short_x3", *FAST)
    days = {first_day, _today()}  # the date the profile stamps (a run may span midnight)
    assert code == 0, err
    assert flow.read_text() == flow_before  # the cards live in the library: the scenario is untouched
    assert lib.read_text().startswith("# my library\n")
    lib_after = load_tool_library(lib)
    assert lib_after["textonly"] == lib_before["textonly"]
    assert lib_after["short"].provenance.date in days
    sc = load_scenario(flow)
    assert sc.cards["short_x3"].cpu_ms == pytest.approx(3 * lib_after["short"].cpu_ms)


def test_refresh_of_bundled_cards_goes_inline(tools: None, tmp_path: Path) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text("name: f\nnodes:\n  - {id: A, tool: text_chunker}\n  - {id: B, tool: text_chunker_x4}\n"
                    "edges: [A -> B]\n")
    old = load_scenario(flow)
    fresh = hs.profile(refresh=flow, runs=2, warmup=1, loads=1)
    assert [c.name for c in fresh] == ["text_chunker"]
    sc = load_scenario(flow)
    assert sc.cards["text_chunker"] == fresh[0]
    assert sc.cards["text_chunker_x4"].cpu_ms == pytest.approx(4 * fresh[0].cpu_ms)
    assert sc.cards["text_chunker"] != old.cards["text_chunker"]  # provenance changed at least
    assert sc.workflow == old.workflow


def test_refresh_refuses_bad_requests(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bundled = str(bundled_scenarios()["rag_tiny"])
    before = Path(bundled).read_text()
    code, _, err = run_cli(capsys, "profile", "--refresh", bundled, *FAST)
    assert code == 2 and "hetsched init rag_tiny" in err
    assert Path(bundled).read_text() == before
    flow = tmp_path / "flow.yaml"
    assert run_cli(capsys, "init", "chain", "-o", str(flow))[0] == 0
    code, _, err = run_cli(capsys, "profile", "--refresh", str(flow), "no_such_tool", *FAST)
    assert code == 2 and "no_such_tool" in err and "its tools" in err
    code, _, err = run_cli(capsys, "profile", "--refresh", str(flow), "--out", str(tmp_path / "x.yaml"), *FAST)
    assert code == 2 and "--refresh" in err
    code, _, err = run_cli(capsys, "profile", "--refresh", str(tmp_path / "missing.yaml"), *FAST)
    assert code == 2 and "not found" in err


SLOW_YAML = """# a two-tool chain whose cards say 20 ms; the tools spin 400 ms
name: slow_chain
mode: three_way
machine: {cpu_cores: 1, vram_budget_mb: 100}
cards:
  slow_a: {cpu_ms: 20, gpu_ms: 20, load_ms: 5, vram_mb: 2}
  slow_b: {cpu_ms: 20, gpu_ms: 20, load_ms: 5, vram_mb: 2}
nodes: [{id: A, tool: slow_a}, {id: B, tool: slow_b}]
edges: [A -> B]
"""


def _cli(*args: str) -> tuple[int, str, str]:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)]), "COLUMNS": "250"}
    proc = subprocess.run([sys.executable, "-m", "hetsched", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_a_real_run_contradicts_stale_cards_and_the_refresh_it_names_fixes_them(tmp_path: Path) -> None:
    """The local executor, real tools: cards 20x too fast are contradicted (json and text), the printed
    command refreshes them in place, and the same run on the refreshed file contradicts nothing."""
    import json
    import shlex

    path = tmp_path / "slow.yaml"
    path.write_text(SLOW_YAML)
    run = ["run", str(path), "--executor", "local", "-X", 'tool_modules=["tests.slowtools"]', "--policy", "all-cpu",
           "--rounds", "3", "--no-store", "--reference", "none"]
    code, out, err = _cli(*run, "--json")
    assert code == 0, err
    cards = json.loads(out)["cards"]
    assert sorted(cards["contradicted"]) == [["slow_a", "cpu_ms"], ["slow_b", "cpu_ms"]]
    assert all(f["drift"] > 5 for f in cards["figures"])
    command = cards["refresh"]
    assert command == f"hetsched profile --refresh {shlex.quote(str(path))} slow_a slow_b"
    code, out, err = _cli(*run)
    assert code == 0, err
    assert "card contradicted: slow_a cpu_ms" in out and command in out
    code, out, err = _cli(*shlex.split(command)[1:], "--tool-module", "tests.slowtools", *FAST)
    assert code == 0, err
    assert "# a two-tool chain" in path.read_text()  # the comment is kept
    assert load_scenario(path).cards["slow_a"].cpu_ms > 300
    code, out, err = _cli(*run, "--json")
    assert code == 0, err
    assert json.loads(out)["cards"]["contradicted"] == []


def test_own_core_reaches_the_profiler_from_the_cli(tools: None, capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    out = tmp_path / "cards.yaml"
    code, _, err = run_cli(capsys, "profile", "textonly", "--own-core", "-o", str(out), *FAST)
    assert code == 0, err
    assert "own_core" in load_tool_library(out)["textonly"].provenance.source
    flow = tmp_path / "flow.yaml"
    flow.write_text("name: f\ntools: cards.yaml\nnodes: [{id: A, tool: textonly}]\n")
    code, _, err = run_cli(capsys, "profile", "--refresh", str(flow), *FAST)
    assert code == 0, err
    assert "own_core" not in load_tool_library(out)["textonly"].provenance.source  # refreshed without it
