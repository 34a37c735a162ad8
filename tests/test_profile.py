"""The offline profiler: cards measured from real runs (memory, relative latencies, threads),
provenance that says what was measured where, a tool library that loads and runs through the local
executor, and an interrupted ``hetsched profile`` that keeps its cards and resumes.

The tools are tests/realtools.py's (no extra needed); tests/test_real_tools.py profiles built-in
torch tools through the documented example.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.realtools import Worker, check_trace

from hetsched.exec.local import LocalExecutor
from hetsched.model import Placement
from hetsched.model.files import load_scenario, load_tool_library
from hetsched.profiling import ProfileConfig, Profiler, profile_tools, write_library
from hetsched.tools import register_tool, unregister_tool

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tools() -> Iterator[None]:
    made = [Worker("short", ms=10, mem_mb=5), Worker("long", ms=40, mem_mb=30),
            Worker("textonly", ms=5, mem_mb=0.1, has_gpu=False)]
    for t in made:
        register_tool(t, replace=True)
    yield
    for t in made:
        unregister_tool(t.name)


def test_profiled_cards_measure_the_tools_and_say_where(tools: None, tmp_path: Path) -> None:
    config = ProfileConfig(runs=7, warmup=2, loads=2, cpu_threads=1)
    with Profiler(config) as prof:
        results = {r.card.name: r for r in profile_tools(["short", "long", "textonly", "long_x3"], config,
                                                          profiler=prof)}
    short, long_, text = (results[n].card for n in ("short", "long", "textonly"))
    assert long_.vram_mb == pytest.approx(30, abs=3) and short.vram_mb == pytest.approx(5, abs=3)
    # each call spins its tool's milliseconds, so a median can only be longer (load makes it so, never
    # shorter); no upper bound or ratio: those are wall-clock figures that a busy machine moves
    for card, spin_ms in ((short, 10), (long_, 40), (text, 5)):
        assert card.cpu_ms >= spin_ms and (card.gpu_ms is None or card.gpu_ms >= spin_ms), card
    assert text.gpu_ms is None and not text.has_gpu and text.vram_mb == 0
    assert all(c.cpu_threads == 1 and c.provenance.runs == 7 for c in (short, long_, text))
    for c in (short, long_):
        p = c.provenance
        assert p.device == "standin" and p.preset == "tiny" and "NOT on a GPU" in p.source
        assert "stand-in device" in p.gpu and p.cpu and p.date
        assert c.spread["gpu_ms"].p10 <= c.gpu_ms <= c.spread["gpu_ms"].p90  # type: ignore[operator]
        assert c.load_ms >= 0 and 0 < c.gpu_util <= 1
    assert results["long"].derived["long_x3"].cpu_ms == pytest.approx(3 * long_.cpu_ms)
    assert len(results["long"].cpu_times_ms) == 7 and len(results["long"].load_samples_ms) == 2

    # the file is a tool library; a scenario using it runs for real
    path = write_library(tmp_path / "cards.yaml", [short, long_, text], {"long_x3": ("long", 3)}, ["measured here"])
    library = load_tool_library(path)
    assert library["long"] == long_ and library["long_x3"].amplification == 3
    (tmp_path / "flow.yaml").write_text(
        "name: flow\nmode: three_way\ntools: cards.yaml\nmachine: {cpu_cores: 1, vram_budget_mb: 40}\n"
        "nodes: [{id: A, tool: textonly}, {id: B, tool: short}, {id: C, tool: long}]\nedges: [A -> B, A -> C]\n")
    sc = load_scenario(tmp_path / "flow.yaml")
    with LocalExecutor(sc) as ex:
        check_trace(sc, ex.run(sc.uniform(Placement.GPU_QUEUE).moved("A", Placement.CPU)))
        check_trace(sc, ex.run(sc.uniform(Placement.GPU_NOW).moved("A", Placement.CPU)))


def test_profile_cli_keeps_cards_on_ctrl_c_and_resumes(tmp_path: Path) -> None:
    out, hold = tmp_path / "cards.yaml", tmp_path / "hold"
    # slow_b holds while the flag exists (tests/slowtools.py): the profile is at work on it when the
    # SIGINT lands, by construction, however late this process gets to look
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
           "HETSCHED_TEST_HOLD_FLAG": str(hold)}
    hold.touch()
    args = [sys.executable, "-m", "hetsched", "profile", "slow_a", "slow_b", "--tool-module", "tests.slowtools",
            "--runs", "2", "--warmup", "1", "--loads", "1", "--cpu-threads", "1", "-o", str(out), "--no-progress"]
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not out.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert out.exists(), proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "1 new card(s) kept" in err
    assert set(load_tool_library(out)) == {"slow_a"}
    hold.unlink()
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "1 tool(s) already in" in done.stderr and "slow_a" in done.stderr
    assert "NOT GPU measurements" in done.stdout
    library = load_tool_library(out)
    assert set(library) == {"slow_a", "slow_b"}
    assert library["slow_b"].provenance.device == "standin"


def test_cold_loads_are_profiled_apart_from_the_back_to_back_loads(tmp_path: Path) -> None:
    """With ``cold_loads`` the card carries ``load_cold_ms`` (loads after the device sat idle) with
    its spread, beside ``load_ms`` (loads back to back); without, it has none and dumps as before.
    A real tool holding a 40 MB table (tests/shapetools.py); no timing is compared (the machine's load
    moves both)."""
    from tests.shapetools import TableLookup

    tool = TableLookup("cold_table", table_mb=40.0, lookups=1000)
    register_tool(tool, replace=True)
    try:
        config = ProfileConfig(runs=3, warmup=1, loads=2, cold_loads=2, cold_pause_s=0.3, cpu_threads=1)
        (result,) = profile_tools(["cold_table"], config)
        (plain,) = profile_tools(["cold_table"], ProfileConfig(runs=3, warmup=1, loads=2, cpu_threads=1))
    finally:
        unregister_tool(tool.name)
    card = result.card
    assert len(result.load_samples_ms) == 2 and len(result.cold_load_samples_ms) == 2
    assert card.load_cold_ms is not None and card.load_cold_ms > 0
    spread = card.spread["load_cold_ms"]
    assert spread.p10 <= card.load_cold_ms <= spread.p90
    assert "load_cold_ms: median of 2 loads each after 0.3 s idle" in card.provenance.source
    assert plain.card.load_cold_ms is None and plain.cold_load_samples_ms == ()
    assert "load_cold_ms" not in plain.card.model_dump(mode="json") and "load_cold_ms" not in plain.card.spread
    library = load_tool_library(write_library(tmp_path / "cards.yaml", [card]))
    assert library["cold_table"] == card  # the field and its spread survive the tool library


def test_profile_config_refuses_bad_cold_load_settings() -> None:
    from hetsched.model import InputError

    with pytest.raises(InputError, match="cold_loads must be >= 0, got -1"):
        ProfileConfig(cold_loads=-1)
    with pytest.raises(InputError, match="cold_pause_s must be from 0 to 600 s, got 601"):
        ProfileConfig(cold_pause_s=601)
