"""The public API: ``import hetsched as hs`` lists and resolves every name of ``__all__`` (lazily:
importing the package loads nothing heavy), the Workflow builder gives the same scenario as the
YAML form, plain functions become tools, and ``hs.run`` / ``hs.resume`` drive recorded runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import hetsched as hs
from hetsched.model.files import data_dir


def test_every_public_name_resolves_and_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "python.md").read_text()
    for name in hs.__all__:
        assert getattr(hs, name) is not None
        assert f"`{name}`" in doc or f"hs.{name}" in doc, f"{name} is not documented in docs/python.md"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = hs.nope  # type: ignore[attr-defined]


def test_public_names_are_not_shadowed_by_subpackages() -> None:
    """Importing a subpackage binds it as an attribute of the package: a public name equal to a
    subpackage's (``hs.profile`` vs a ``hetsched.profile`` package) would turn into that module as soon
    as anything imported it. Run in a fresh interpreter after importing every module."""
    code = ("import importlib, pkgutil, hetsched as hs\n"
            "for m in pkgutil.walk_packages(hs.__path__, 'hetsched.'):\n"
            "    if not m.name.endswith('__main__') and '.integrations' not in m.name and 'ray' not in m.name:\n"
            "        importlib.import_module(m.name)\n"
            "bad = [n for n in hs.__all__ if n != '__version__' and getattr(hs, n) is not\n"
            "       getattr(importlib.import_module(hs._EXPORTS[n]), n)]\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_importing_the_package_loads_nothing_heavy() -> None:
    code = ("import sys, hetsched; heavy = [m for m in ('numpy', 'pydantic', 'networkx', 'hetsched.model') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_builder_gives_the_scenario_the_yaml_gives() -> None:
    yaml_sc = hs.load_scenario("rag_tiny")
    wf = hs.Workflow("rag_tiny", mode="three_way", tools=data_dir() / "tools_tiny.yaml",
                     machine=yaml_sc.machine, description=yaml_sc.description)
    for node in yaml_sc.workflow.nodes:
        wf.node(node.id, node.tool)
    for e in yaml_sc.workflow.edges:
        wf.edge(e.src, e.dst, data_mb=e.data_mb)
    built = wf.scenario()
    assert built.model_dump(exclude={"source", "shows"}) == yaml_sc.model_dump(exclude={"source", "shows"})


def test_builder_errors_name_the_node_and_what_is_accepted() -> None:
    with pytest.raises(hs.InputError, match="node 'A' uses tool 'no_such_tool', which has no card"):
        hs.Workflow("w").node("A", "no_such_tool").scenario()
    with pytest.raises(hs.InputError, match="cycle"):
        hs.Workflow("w").node("A", "doc_merger").node("B", "doc_merger", after="A").edge("B", "A").scenario()
    with pytest.raises(hs.InputError, match="mode 'ternary' is not known; accepted: binary, three_way"):
        hs.Workflow("w", mode="ternary")
    with pytest.raises(hs.InputError, match="give gpu= as well"):
        hs.function_tool("f", len, vram_mb=10)


def test_function_tool_calling_convention() -> None:
    loaded: list[str] = []

    def load(device: hs.Device) -> str:
        loaded.append(device.label)
        return "model"

    spec = hs.function_tool("t", lambda m, a, b: (m, "cpu", a + b), lambda m, a, b: (m, "gpu", a * b),
                            load=load, unload=lambda m: loaded.append(f"unload {m}"), cpu_ms=10, gpu_ms=1)
    tool = spec.tool
    from hetsched.tools import DeviceKind

    h = tool.load(hs.Device(DeviceKind.CPU))
    assert tool.run(h, [2, 3]) == ("model", "cpu", 5)
    g = tool.load(hs.Device(DeviceKind.STANDIN))
    assert tool.run(g, [2, 3]) == ("model", "gpu", 6)
    tool.unload(g)
    assert loaded == ["cpu", "standin", "unload model"]
    assert spec.card.has_gpu and spec.card.gpu_ms == 1 and spec.card.cpu_ms == 10


def test_run_and_resume_from_python(tmp_path: Path) -> None:
    store = tmp_path / "r.sqlite"
    seen: list[int] = []
    result = hs.run("chain", "all-cpu", rounds=3, store=store, on_round=lambda r: seen.append(r.round))
    assert seen == [0, 1, 2] and result.run_id is not None
    more = hs.resume(result.run_id, store=store, rounds=5)
    assert [r.round for r in more.rounds] == [0, 1, 2, 3, 4]
    free = hs.run("chain", "all-cpu", rounds=2, store=False)
    assert free.run_id is None and len(free.rounds) == 2
    ref = hs.reference("chain", "oracle")
    assert ref is not None and ref.exact


def test_profile_measures_registered_tools_into_cards() -> None:
    from tests.realtools import Worker

    from hetsched.tools import unregister_tool

    hs.register_tool(Worker("api_probe_tool", ms=5, mem_mb=2), replace=True)
    try:
        cards = hs.profile(["api_probe_tool", "api_probe_tool_x3"], runs=3, warmup=1, loads=1, device="standin")
    finally:
        unregister_tool("api_probe_tool")
    by_name = {c.name: c for c in cards}
    assert set(by_name) == {"api_probe_tool", "api_probe_tool_x3"}
    base = by_name["api_probe_tool"]
    assert base.provenance.runs == 3 and base.provenance.device == "standin" and base.cpu_ms >= 5
    assert by_name["api_probe_tool_x3"].cpu_ms == pytest.approx(3 * base.cpu_ms)
