"""``hetsched profile --cold-loads N`` end to end: the real command profiles bundled tiny tools on the
stand-in device and writes a tool library whose device cards carry ``load_cold_ms`` (with its spread
and provenance), that ``hetsched validate`` accepts and the model charges; bad counts exit 2 naming
the value and what is accepted.

Real tools, real worker processes; one run, one timed call per figure and one cold load (the
command's 3 s idle pause is the bulk of the time). No timing is compared: a cold load on a loaded
machine may even measure faster than the back-to-back one, which the model clamps (docs/simulator.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.factories import run_cli

from hetsched.model.contention import queue_load_ms
from hetsched.model.files import load_scenario, load_tool_library

FAST = ("--runs", "2", "--warmup", "1", "--loads", "1", "--cpu-threads", "1", "--device", "standin",
        "--no-progress")


def test_cold_loads_reach_the_written_library_and_the_model(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    cards = tmp_path / "cards.yaml"
    code, out, err = run_cli(capsys, "profile", "vector_search", "text_chunker", "--cold-loads", "1", *FAST,
                             "-o", str(cards))
    assert code == 0, err
    assert "cards written to" in out and "NOT GPU measurements" in out

    text = cards.read_text()
    assert "# load_cold_ms: median of 1 loads each after 3 s with the device idle" in text
    library = load_tool_library(cards)
    assert set(library) == {"vector_search", "text_chunker"}
    dev = library["vector_search"]
    assert dev.provenance.device == "standin" and dev.provenance.preset == "tiny"
    assert dev.load_cold_ms is not None and dev.load_cold_ms > 0
    spread = dev.spread["load_cold_ms"]
    assert spread.p10 <= dev.load_cold_ms <= spread.p90
    assert "load_cold_ms: median of 1 loads each after 3 s idle" in dev.provenance.source
    cpu_only = library["text_chunker"]
    assert cpu_only.load_cold_ms is None and "load_cold_ms" not in cpu_only.spread  # nothing to load

    flow = tmp_path / "flow.yaml"
    flow.write_text("name: cold\ntools: cards.yaml\nmode: three_way\nmachine: {cold_load_share: 0.5}\n"
                    "nodes: [{id: A, tool: text_chunker}, {id: B, tool: vector_search}]\n"
                    "edges: [{src: A, dst: B}]\n")
    for path, said in ((cards, "ok: tool library"), (flow, "ok: scenario cold")):
        code, out, err = run_cli(capsys, "validate", str(path))
        assert code == 0, err
        assert said in out
    sc = load_scenario(flow)
    assert sc.cards["vector_search"] == dev
    charged = queue_load_ms(sc.cards["vector_search"], sc.machine)
    assert dev.load_ms <= charged <= max(dev.load_ms, dev.load_cold_ms)  # the expectation, never below load_ms


@pytest.mark.parametrize("value", ["-1", "-30"])
def test_a_negative_cold_load_count_is_refused_naming_it(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                         value: str) -> None:
    cards = tmp_path / "cards.yaml"
    code, _, err = run_cli(capsys, "profile", "vector_search", "--cold-loads", value, *FAST, "-o", str(cards))
    message = " ".join(err.split())
    assert code == 2, err
    assert "'--cold-loads'" in message and f"got {value}; accepted: an integer >= 0" in message
    assert not cards.exists()  # refused before anything ran


def test_a_cold_load_count_that_is_no_number_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cards = tmp_path / "cards.yaml"
    code, _, err = run_cli(capsys, "profile", "vector_search", "--cold-loads", "two", *FAST, "-o", str(cards))
    assert code == 2, err
    assert "'--cold-loads'" in err and "got 'two', not an integer; accepted: an integer >= 0" in " ".join(err.split())
    assert not cards.exists()
