"""Golden outputs of the CLI examples, and the properties the README promises about them.

Regenerate the golden files after an intended change with ``UPDATE_GOLDEN=1 pytest tests/test_cli_golden.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetsched.cli import app

GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = ["chain", "fanout", "vram_3way"]
runner = CliRunner()


def invoke(*args: str, code: int = 0) -> str:
    from hetsched.cli import inspect, run  # noqa: F401  (registers commands)

    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result.stdout


def check_golden(name: str, data: object) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with UPDATE_GOLDEN=1"
    assert json.loads(path.read_text()) == json.loads(text)


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize("policy", ["all-gpu", "oracle", "all-cpu"])
def test_run_json_golden(example: str, policy: str) -> None:
    code = 3 if (example, policy) == ("vram_3way", "all-gpu") else 0  # every round OOMs: exit 3 (README)
    data = json.loads(invoke("run", example, "--policy", policy, "--rounds", "3", "--seed", "7", "--json", code=code))
    assert set(data) == {"scenario", "policy", "executor", "run_id", "oracle", "reference", "deploy", "cards", "notes",
                         "rounds"}
    assert data["notes"] == []  # the simulator has nothing every reader must know
    assert len(data.pop("run_id")) == 8  # a fresh id each time: the rest is golden
    assert data["reference"]["kind"] == "oracle" and data["reference"]["mapping"] == data["oracle"]["mapping"]
    check_golden(f"run_{example}_{policy}", data)


@pytest.mark.parametrize("example", EXAMPLES)
def test_oracle_json_golden(example: str) -> None:
    check_golden(f"oracle_{example}", json.loads(invoke("oracle", example, "--json", "--top", "5")))


def test_fanout_oracle_beats_all_gpu() -> None:
    gpu = json.loads(invoke("run", "fanout", "--policy", "all-gpu", "--rounds", "5", "--json"))
    orc = json.loads(invoke("run", "fanout", "--policy", "oracle", "--rounds", "5", "--json"))
    mean = lambda d: sum(r["e2e_ms"] for r in d["rounds"]) / len(d["rounds"])  # noqa: E731
    assert mean(orc) < mean(gpu)


def test_three_way_all_gpu_ooms_and_oracle_runs() -> None:
    gpu = json.loads(invoke("run", "vram_3way", "--policy", "all-gpu", "--rounds", "2", "--json", code=3))
    orc = json.loads(invoke("run", "vram_3way", "--policy", "oracle", "--rounds", "2", "--json"))
    assert all(not r["feasible"] and r["reason"].startswith("OOM: gpu_now tools need") for r in gpu["rounds"])
    assert all(r["feasible"] and r["e2e_ms"] > 0 for r in orc["rounds"])


def test_trace_file_is_chrome_trace_events(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    invoke("run", "vram_3way", "--policy", "oracle", "--rounds", "2", "--trace", str(path))
    events = json.loads(path.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    counters = [e for e in events if e["ph"] == "C"]
    # every node of every round has its compute slice; the queued LLM also has a load slice
    assert {(e["pid"], e["name"].split()[0]) for e in slices if e.get("cat") != "load"} >= {
        (pid, n) for pid in (2, 4) for n in "ABD"
    }
    assert any(e["cat"] == "load" for e in slices)
    assert counters and all(c["args"]["used"] <= c["args"]["budget"] for c in counters)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)


def test_scenarios_lists_every_bundled_scenario_in_natural_order() -> None:
    from hetsched.model.files import bundled_scenarios

    lines = [line.split()[0] for line in invoke("scenarios").splitlines()[1:] if line and not line[0].isspace()]
    assert set(lines) == set(bundled_scenarios())
    suite = [n for n in lines if n[0] == "S" and n[1:].isdigit()]
    assert suite == [f"S{i}" for i in range(1, len(suite) + 1)]


@pytest.mark.parametrize("mapping", ["A=gpu_now,B=gpu_queue,C=gpu_now,D=cpu", '{"A": "gpu", "B": "queue", "C": "gpu", "D": "cpu"}'])
def test_simulate_prints_the_simulators_trace(mapping: str) -> None:
    from hetsched.model import Mapping, Trace
    from hetsched.model.files import load_scenario
    from hetsched.sim import Simulator

    got = Trace.from_dict(json.loads(invoke("simulate", "S13", mapping, "--seed", "3", "--json")))
    sc = load_scenario("S13")
    want = Simulator(sc).run(Mapping({"A": "gpu_now", "B": "gpu_queue", "C": "gpu_now", "D": "cpu"}), seed=3)
    assert got == want


def test_simulate_mapping_file_and_infeasible(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("mapping: {A: gpu_now, B: gpu_now, C: gpu_now, D: gpu_now}\n")
    data = json.loads(invoke("simulate", "vram_3way", str(path), "--no-noise", "--json"))
    assert data["feasible"] is False and data["reason"].startswith("OOM: gpu_now tools need 6350 MB of 3000 MB")
