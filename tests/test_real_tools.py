"""The built-in real tools: every one loads and runs at the tiny preset on the CPU and on the
stand-in device, takes upstream outputs of any kind, keeps its work fixed; the full presets have
the real architectures' parameter counts; weights are deterministic and tied weights stay tied;
the registry, amplification and the memory meter behave; and the bundled real scenario runs
through the local executor and the CLI with every invariant.

Skips (saying why) without the [tools] extra; tests/test_local_exec.py covers the executor with
tools that need no extra.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.conftest import needs_tools_extra
from tests.realtools import check_trace

from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import InputError, Mapping, Placement, UnknownNameError
from hetsched.model.files import load_scenario
from hetsched.policies import make_policy
from hetsched.tools import (
    Amplified,
    Device,
    DeviceKind,
    FunctionTool,
    builtin_names,
    get_tool,
    register_tool,
    unregister_tool,
)
from hetsched.tools.runtime import HostMeter, ToolRuntime

ROOT = Path(__file__).resolve().parents[1]
CPU = Device(DeviceKind.CPU, threads=1)
STANDIN = Device(DeviceKind.STANDIN, threads=1)


@pytest.fixture(scope="module")
def torch_() -> Any:
    needs_tools_extra()
    import torch

    torch.set_num_threads(1)
    return torch


# ---------------------------------------------------------------------------- the registry (no extra needed)
def _load(device: Device) -> dict[str, Any]:
    return {"calls": 0}


def _run(handle: dict[str, Any], inputs: Any) -> int:
    handle["calls"] += 1
    return handle["calls"]


def test_registry_names_amplification_and_errors() -> None:
    assert len(builtin_names()) == 20 and "doc_merger" in builtin_names()
    counter = FunctionTool("counter", _load, _run, description="counts its calls")
    assert register_tool(counter) == "counter"
    try:
        with pytest.raises(InputError, match="already registered"):
            register_tool(counter)
        with pytest.raises(InputError, match="_xK"):
            register_tool(FunctionTool("counter_x2", _load, _run))
        amp = get_tool("counter_x5")
        assert isinstance(amp, Amplified) and amp.name == "counter_x5" and amp.k == 5
        handle = amp.load(CPU)
        assert amp.run(handle, []) == 5  # the base computation ran five times on one loaded handle
        assert "repeated 5x" in amp.description
        with pytest.raises(UnknownNameError, match="Unknown tool: 'nope'; registered tools: bert_base"):
            get_tool("nope")
        with pytest.raises(InputError, match="size preset 'huge' is not known; accepted: tiny, full"):
            get_tool("counter", "huge")
    finally:
        unregister_tool("counter")


def test_host_meter_measures_real_allocations() -> None:
    meter = HostMeter()
    meter.rebase()
    block = np.ones(50_000_000 // 8)  # 50 MB, touched
    assert 48 <= meter.in_use_mb() <= 53
    del block
    assert meter.in_use_mb() < 3
    assert meter.peak_mb() >= 48


# ---------------------------------------------------------------------------- every built-in tool
UPSTREAM: list[list[Any]] = [[], ["a passage about gpu memory"], [["chunk one", "chunk two"], "more text"]]


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_tool_runs_tiny_on_cpu_and_stand_in(torch_: Any, name: str) -> None:
    tool = get_tool(name, "tiny")
    assert tool.name == name and tool.description and "(tiny" in tool.description
    devices = [CPU, STANDIN] if tool.has_gpu else [CPU]
    outputs = []
    for device in devices:
        rt = ToolRuntime(device)
        rt.prepare(tool)
        loaded = rt.load("k", tool)
        assert loaded.load_ms > 0
        for inputs in [*UPSTREAM, [torch_.randn(4, 128)], [{"boxes": torch_.rand(3, 4)}]]:
            out = rt.run("k", inputs).output
            assert out is not None
        outputs.append(rt.run("k", []).output)
        rt.unload("k")
        assert rt.keys() == ()
    if name not in ("web_fetch",):  # the same work gives the same answer (seeded weights and inputs)
        rt = ToolRuntime(devices[0])
        rt.load("again", tool)
        again = rt.run("again", []).output
        assert same(torch_, again, outputs[0]), f"{name}: a second load gave another answer"


def same(torch: Any, a: Any, b: Any) -> bool:
    """Equal outputs: tensors elementwise (close), containers item by item."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.allclose(a, b, atol=1e-5))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(torch, a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(same(torch, x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


FULL_PARAMS_M = {  # the published architectures' parameter counts (millions)
    "bert_base": 109.5, "e5_large": 335.1, "reranker": 33.4, "ner_tagger": 108.9, "clip_vit_b32": 87.8,
    "whisper_small": 241.7, "resnet50": 23.5, "object_detector": 41.5, "ocr": 334.0, "llama_1b": 1235.8,
    "llama_3b": 3212.7, "summarizer": 222.9,
}


@pytest.mark.parametrize("name", sorted(FULL_PARAMS_M))
def test_full_presets_have_the_real_architectures(torch_: Any, name: str) -> None:
    tool = get_tool(name, "full")
    with torch_.device("meta"):  # shapes only: nothing is allocated
        model = tool.build()  # type: ignore[attr-defined]
    params = sum(p.numel() for p in model.parameters()) / 1e6
    assert abs(params - FULL_PARAMS_M[name]) / FULL_PARAMS_M[name] < 0.01, f"{name}: {params:.1f}M parameters"
    tiny = get_tool(name, "tiny")
    with torch_.device("meta"):
        small = sum(p.numel() for p in tiny.build().parameters()) / 1e6  # type: ignore[attr-defined]
    assert small < params / 20  # same code path, small shapes


def test_checkpoints_keep_tied_weights_tied_and_cost_their_size(torch_: Any) -> None:
    tool = get_tool("llama_1b", "tiny")
    rt = ToolRuntime(STANDIN)
    rt.prepare(tool)
    rt.meter.rebase()
    loaded = rt.load("l", tool)
    model = rt._handles["l"][1]["model"]
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    weights_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e6
    assert weights_mb * 0.9 <= loaded.mem_mb <= weights_mb * 1.5  # the load really allocated the weights
    assert all(p.device.type == "cpu" and p.dtype == torch_.float32 for p in model.parameters())
    assert next(model.buffers()).device.type == "cpu"  # non-persistent buffers materialized too
    rt.unload("l")


# ---------------------------------------------------------------------------- the bundled real scenario
def test_rag_tiny_runs_for_real_with_every_invariant(torch_: Any) -> None:
    from hetsched.exec.local import LocalExecutor

    sc = load_scenario("rag_tiny")
    assert all(c.provenance.device == "standin" and c.provenance.preset == "tiny" for c in sc.cards.values())
    assert sc.infeasibility(sc.uniform(Placement.GPU_NOW)) is not None  # all-GPU OOMs
    queue = {n: (Placement.GPU_QUEUE if sc.card_of(n).has_gpu else Placement.CPU) for n in sc.workflow.node_ids}
    mixed = {**queue, "B": Placement.GPU_NOW, "D": Placement.GPU_NOW}
    with LocalExecutor(sc) as ex:
        assert ex.size == "tiny"
        for mapping in (sc.uniform(Placement.CPU), Mapping(queue), Mapping(mixed)):
            trace = ex.run(mapping)
            check_trace(sc, trace)
            assert ex.last_measured_peak_mb is None or ex.last_measured_peak_mb <= ex.memory_limit_mb()
        assert isinstance(ex.last_outputs["H"], str) and ex.last_outputs["H"].startswith("t")  # the LLM's answer
        # the agentic policy through the loop, probes included, on the same workers
        result = run_rounds(sc, make_policy("agentic", decider="rules"), LoopConfig(rounds=3), executor=ex)
        traces = [t for r in result.rounds for t in (r.trace, *(p.trace for p in r.probes))]
        assert len(traces) > 3 and result.best_round is not None
        for trace in traces:
            if trace.feasible:
                check_trace(sc, trace)
            else:  # an infeasible proposal or probe is refused with a reason, never raised
                assert trace.infeasibility is not None


def test_cli_runs_rag_tiny_with_the_agentic_policy(torch_: Any, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-m", "hetsched", "run", "rag_tiny", "--executor", "local", "--policy",
                           "agentic", "--rounds", "1", "--json", "--store", str(tmp_path / "r.sqlite")],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["executor"] == "local" and len(data["rounds"]) == 1 and data["rounds"][0]["feasible"]
    assert any("stand-in device" in n for n in data["notes"])
    assert "local: GPU placements: stand-in device" in proc.stderr


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("HETSCHED_CACHE", str(tmp_path / "cache"))
    yield tmp_path / "cache"


def test_bundled_real_cards_are_measurements_that_say_where() -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the 'test' extra")
    import yaml

    from hetsched.bench.spec import REAL_SUITE
    from hetsched.model.files import data_dir, load_tool_library
    from hetsched.model.schemas import SCHEMAS

    path = data_dir() / "tools_tiny.yaml"
    jsonschema.validate(yaml.safe_load(path.read_text()), SCHEMAS["tools"]())
    assert "NOT GPU measurements" in path.read_text()  # the header says it in words
    for card in load_tool_library(path).values():
        p = card.provenance
        assert p.runs >= 30 and p.preset == "tiny" and p.device == "standin" and "NOT on a GPU" in p.source
        assert card.spread["cpu_ms"].p10 <= card.cpu_ms <= card.spread["cpu_ms"].p90
    for name in REAL_SUITE:
        sc = load_scenario(name)
        assert "tiny" in name and sc.cards and all(c.provenance.device == "standin" for c in sc.cards.values())
    # the properties their files state, on the simulator with the measured cards
    from hetsched.search.oracle import solve
    from hetsched.sim import Simulator

    rag = load_scenario("rag_tiny")
    need = rag.gpu_now_vram_mb(rag.uniform(Placement.GPU_NOW))
    assert need > rag.machine.vram_budget_mb and 50 <= need <= 58  # "~54 MB of a 30 MB budget"
    fan = load_scenario("fanout_tiny")
    assert solve(fan).e2e_ms < 0.8 * (Simulator(fan, noise=False).e2e(fan.uniform(Placement.GPU_NOW)) or 0)


def test_the_documented_example_runs(torch_: Any, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "custom_tool.py"), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "one round: E2E" in proc.stdout and "feasible True" in proc.stdout
    assert "agentic: best round" in proc.stdout and "stand-in device" in proc.stdout
    from hetsched.model.files import load_tool_library

    cards = load_tool_library(tmp_path / "out" / "cards.yaml")
    assert set(cards) == {"cleaner", "hash_embedder", "llama_1b"} and not cards["cleaner"].has_gpu
    llama = cards["llama_1b"]  # a built-in torch tool, profiled
    assert llama.description.startswith("Llama-style decoder (tiny") and llama.gpu_ms and llama.vram_mb > 3
    assert "torch" in llama.provenance.software and llama.provenance.device == "standin"
    assert cards["hash_embedder"].vram_mb > 16  # its two fp32 weight matrices: 4096x1024 + 1024x256


def test_web_fetch_server_is_silent_when_a_client_hangs_up_and_reports_other_errors(
        capsys: pytest.CaptureFixture[str]) -> None:
    from hetsched.tools.builtin.text import _PageServer

    server = _PageServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    try:
        for hang_up in (ConnectionResetError(104, "reset by peer"), BrokenPipeError(32, "broken pipe"),
                        TimeoutError("timed out")):
            try:
                raise hang_up
            except OSError:
                server.handle_error(None, ("127.0.0.1", 1))
        assert capsys.readouterr().err == ""  # a cancelled or timed-out fetch is not a traceback
        try:
            raise ValueError("a bug in the handler")
        except ValueError:
            server.handle_error(None, ("127.0.0.1", 1))
        assert "ValueError: a bug in the handler" in capsys.readouterr().err
    finally:
        server.server_close()
