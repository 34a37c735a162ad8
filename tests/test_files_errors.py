"""Errors of the input files (``hetsched.model.files``): each kind of bad input gets one clear message
naming file/node/field, the bad value and what is accepted.

Checked twice: through the library (the exception and its text) and through the CLI (exit 2,
the message on stderr, no traceback).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hetsched.model import InputError, Mapping, MappingError
from hetsched.model.files import load_scenario, load_tool_library, parse_mapping_text

SCENARIO = """\
name: t
mode: {mode}
machine: {{cpu_cores: 4, vram_budget_mb: {budget}}}
cards:
  emb: {{cpu_ms: {cpu}, gpu_ms: 10, load_ms: 50, vram_mb: 400}}
  fetch: {{cpu_ms: 30, has_gpu: false}}
nodes:
  - {{id: A, tool: emb}}
  - {{id: B, tool: {tool_b}}}
edges:
{edges}
"""


def write(tmp_path: Path, name: str = "s.yaml", **kw: object) -> Path:
    fields: dict[str, object] = {"mode": "binary", "budget": 1000, "cpu": 100, "tool_b": "fetch", "edges": "  - A -> B"}
    fields.update(kw)
    path = tmp_path / name
    path.write_text(SCENARIO.format(**fields))
    return path


CASES = {
    # case: (file overrides, fragments the message must contain)
    "cycle": ({"edges": "  - A -> B\n  - B -> A"}, ["cycle", "A -> B -> A", "must be a DAG"]),
    "unknown tool": ({"tool_b": "nope"}, ["node 'B'", "'nope'", "no card", "known tools"]),
    "negative figure": ({"cpu": -5}, ["cards.emb.cpu_ms", "-5", "greater than or equal to 0.001"]),
    "nan figure": ({"cpu": ".nan"}, ["cards.emb.cpu_ms", "nan", "finite number"]),
    "zero budget": ({"budget": 0}, ["machine.vram_budget_mb", "= 0", "greater than 0"]),
    "unknown mode": ({"mode": "quad"}, ["mode = 'quad'", "binary, three_way"]),
    "edge to nowhere": ({"edges": "  - A -> Z"}, ["edge A->Z", "'Z' is not a node", "known nodes"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_scenario_errors_name_field_value_and_accepted(tmp_path: Path, case: str) -> None:
    overrides, fragments = CASES[case]
    path = write(tmp_path, **overrides)
    with pytest.raises(InputError) as info:
        load_scenario(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"


def test_malformed_yaml_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nnodes: [A\n  - b: : :\n")
    with pytest.raises(InputError, match=rf"file {path}: malformed YAML at line \d+, column \d+"):
        load_scenario(path)


def test_missing_card_in_library(tmp_path: Path) -> None:
    lib = tmp_path / "tools.yaml"
    lib.write_text("tools:\n  a: {cpu_ms: 1, gpu_ms: 1}\n  b: {base: zzz, amplification: 3}\n")
    with pytest.raises(
        InputError, match=r"tools\.b\.base = 'zzz' is not a tool in this file; known tools: \['a', 'b'\]"
    ):
        load_tool_library(lib)


def test_gpu_without_gpu_ms_and_gpu_ms_without_gpu(tmp_path: Path) -> None:
    lib = tmp_path / "tools.yaml"
    lib.write_text("tools:\n  a: {cpu_ms: 1}\n")
    with pytest.raises(InputError, match="has_gpu is true but gpu_ms is missing"):
        load_tool_library(lib)
    lib.write_text("tools:\n  a: {cpu_ms: 1, gpu_ms: 2, has_gpu: false}\n")
    with pytest.raises(InputError, match=r"has_gpu is false but gpu_ms=2\.0 is given"):
        load_tool_library(lib)


def test_mapping_errors(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path))
    with pytest.raises(MappingError, match=r"misses nodes \['B'\].*has nodes \['A', 'B'\]"):
        sc.validate_mapping(Mapping({"A": "cpu"}))
    with pytest.raises(MappingError, match=r"invents nodes \['C'\]"):
        sc.validate_mapping(Mapping({"A": "cpu", "B": "cpu", "C": "cpu"}))
    with pytest.raises(
        MappingError, match=r"node 'B' cannot be gpu_now \(tool 'fetch' has no GPU implementation\); accepted: cpu"
    ):
        sc.validate_mapping(Mapping({"A": "cpu", "B": "gpu_now"}))
    with pytest.raises(
        MappingError, match=r"node 'A' cannot be gpu_queue \(scenario 't' is binary\); accepted: cpu, gpu_now"
    ):
        sc.validate_mapping(Mapping({"A": "gpu_queue", "B": "cpu"}))
    with pytest.raises(MappingError, match=r"node 'A': unknown placement 'tpu'; accepted: cpu, gpu_now, gpu_queue"):
        parse_mapping_text("A=tpu,B=cpu")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hetsched", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case", ["cycle", "unknown tool", "zero budget", "nan figure"])
def test_cli_exits_2_without_traceback(tmp_path: Path, case: str) -> None:
    path = write(tmp_path, **CASES[case][0])
    for command in (["validate", str(path)], ["run", str(path), "--rounds", "1"], ["oracle", str(path)]):
        proc = run_cli(*command)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
        assert proc.stderr.startswith("error: file ") and CASES[case][1][0] in proc.stderr.replace("\n", " ")


def test_cli_unknown_policy_and_scenario() -> None:
    proc = run_cli("run", "fanout", "--policy", "magic", "--rounds", "1")
    assert proc.returncode == 2 and "Unknown policy: 'magic'; valid policies: all-cpu, all-gpu" in proc.stderr
    proc = run_cli("show", "S99")
    assert proc.returncode == 2
    assert "scenario 'S99' is neither a file nor a bundled scenario; bundled:" in proc.stderr


def test_cli_validate_mapping_file(tmp_path: Path) -> None:
    mapping = tmp_path / "m.yaml"
    mapping.write_text(textwrap.dedent("A: gpu_now\nB: gpu_now\n"))
    proc = run_cli("validate", str(mapping), "--scenario", str(write(tmp_path)))
    assert proc.returncode == 2 and "node 'B' cannot be gpu_now" in proc.stderr


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("nodes: {A: bert_base, A: ocr}\n", ["malformed YAML at line 1", "duplicate key 'A'"]),
        ("nodes:\n  - {id: '', tool: bert_base}\n", ["node id '' (tool 'bert_base') is empty"]),
        ("tools: 5\nnodes: {A: bert_base}\n", ["tools = 5", "give the path of a tool library file"]),
        ("tools: nope.yaml\nnodes: {A: bert_base}\n", ["tools = 'nope.yaml'", "nope.yaml not found"]),
    ],
)
def test_more_scenario_errors(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"file {path}")
    for fragment in fragments:
        assert fragment in str(info.value)


def test_mapping_file_errors_name_the_file(tmp_path: Path) -> None:
    from hetsched.model.files import load_mapping

    path = tmp_path / "m.yaml"
    path.write_text("A: tpu\n")
    with pytest.raises(MappingError, match=rf"^file {path}: node 'A': unknown placement 'tpu'; accepted: cpu"):
        load_mapping(path)
