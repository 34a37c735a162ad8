"""Reading input files (``hetsched.model.files``): hostile scenario, library and mapping files and
mapping strings. Every class is refused with one clear message naming the file and field, never a
traceback, a hang or a wrong acceptance.

Each test names the class it covers; the property tests at the end throw generated documents,
wrong-typed values and mapping strings at the loaders and assert the same contract for all.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow

from hetsched.model import InputError, Mapping, MappingError, Placement
from hetsched.model import limits as L
from hetsched.model.files import (
    MAX_ALIAS_EXPANSION,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    detect_kind,
    load_mapping,
    load_scenario,
    load_tool_library,
    parse_mapping_text,
)

CARD = {"cpu_ms": 100.0, "gpu_ms": 10.0, "load_ms": 50.0, "vram_mb": 400.0}


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refused(loader: Any, path: Path, *fragments: str) -> str:
    """The loader raises InputError whose message starts with the file and holds every fragment."""
    with pytest.raises(InputError) as info:
        loader(path)
    message = str(info.value)
    assert message.startswith(f"file {path}"), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"
    return message


# ---------------------------------------------------------------------------- YAML structure
def bomb(levels: int, width: int = 9, under: str = "description") -> str:
    lines = ["a0: &a0 [" + ",".join(["x"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    body = "\n".join("  " + line for line in lines)
    return f"junk:\n{body}\n{under}: *a{levels - 1}\nnodes: {{A: bert_base}}\n"


def test_alias_bomb_is_refused_before_the_document_is_walked(tmp_path: Path) -> None:
    # 9^6 = 531,441 nodes from a file of 300 bytes (before: seconds of work, then accepted as a description)
    path = write(tmp_path, bomb(6))
    assert path.stat().st_size < 400
    refused(load_scenario, path, "malformed YAML at line", f"more than {MAX_ALIAS_EXPANSION:,} nodes")
    refused(load_scenario, write(tmp_path, bomb(12), "b12.yaml"), "alias bomb")  # 9^12: would never finish


def test_aliases_within_the_limit_and_merge_keys_still_work(tmp_path: Path) -> None:
    path = write(tmp_path, "cards:\n  base: &b {cpu_ms: 100, gpu_ms: 10, vram_mb: 400}\n"
                           "  big: {<<: *b, vram_mb: 900}\nnodes: {A: base, B: big}\n")
    sc = load_scenario(path)
    assert sc.cards["big"].vram_mb == 900 and sc.cards["big"].cpu_ms == 100


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    refused(load_scenario, write(tmp_path, "shows: &a [*a]\nnodes: {A: bert_base}\n"), "recursive alias")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 400, 600, 100_000])
def test_deep_nesting_is_refused_without_recursion(tmp_path: Path, depth: int) -> None:
    for suffix, value in ((".yaml", "[" * depth + "]" * depth), (".json", "[" * depth + "]" * depth)):
        text = (f"description: {value}\nnodes: {{A: bert_base}}\n" if suffix == ".yaml"
                else '{"description": ' + value + ', "nodes": {"A": "bert_base"}}')
        message = refused(load_scenario, write(tmp_path, text, f"d{suffix}"))
        assert f"nested deeper than {MAX_DEPTH} levels" in message or "maximum nesting depth" in message, message


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("name", "[a, b]", "name (a list): Input should be a valid string"),
        ("description", "[[[x]]]", "description (a list)"),
        ("shows", "{a: 1}", "shows (a mapping)"),
        ("name", "5", "name = 5: Input should be a valid string"),
        ("name", "true", "name = True"),
        ("mode", "[binary]", "mode = ['binary'] is not a mode"),
        ("machine", "[1]", "machine must be a mapping of keys to values, got a list"),
    ],
)
def test_no_list_or_number_is_accepted_as_text(tmp_path: Path, key: str, value: str, fragment: str) -> None:
    refused(load_scenario, write(tmp_path, f"{key}: {value}\nnodes: {{A: bert_base}}\n"), fragment)


def test_yaml_reads_numbers_and_words_as_json_does(tmp_path: Path) -> None:
    # YAML 1.2 scalars: 1e3 is a number, 'no' and dates are text, 010 is ten
    path = write(tmp_path, "name: no\ncards:\n  t: {cpu_ms: 1e3, gpu_ms: 010, provenance: {date: 2026-11-01}}\n"
                           "nodes: {no: t, yes: t, on: t}\nedges: [no -> yes]\n")
    sc = load_scenario(path)
    assert sc.name == "no" and sc.workflow.node_ids == ("no", "yes", "on")
    assert sc.cards["t"].cpu_ms == 1000.0 and sc.cards["t"].gpu_ms == 10.0
    assert sc.cards["t"].provenance.date == "2026-11-01"


def test_yaml_tags_outside_json_types_are_refused(tmp_path: Path) -> None:
    refused(load_scenario, write(tmp_path, "description: !!binary aGVsbG8=\nnodes: {A: bert_base}\n"),
            "description is a bytes")
    refused(load_scenario, write(tmp_path, "description: !!set {a, b}\nnodes: {A: bert_base}\n"), "is a set")
    refused(load_scenario, write(tmp_path, "x: !!python/object:os.system {}\nnodes: {A: bert_base}\n"),
            "malformed YAML")


# ---------------------------------------------------------------------------- files that are not files
def test_special_and_huge_files_are_refused_unread(tmp_path: Path) -> None:
    if Path("/dev/zero").exists():
        refused(load_tool_library, Path("/dev/zero"), "not a regular file")
        lib_ref = write(tmp_path, "tools: /dev/zero\nnodes: {A: bert_base}\n")
        with pytest.raises(InputError, match="file /dev/zero: is not a regular file"):
            load_scenario(lib_ref)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # opening it would block until a writer came
    refused(load_scenario, fifo, "not a regular file")
    refused(load_scenario, tmp_path / "missing.yaml", "not found")
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    refused(load_scenario, folder, "is a directory")
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing is written
    refused(load_scenario, huge, f"at most {MAX_FILE_BYTES:,} bytes")
    refused(load_scenario, write(tmp_path, "x", "bin.yaml").with_name("bin.yaml"), "must be a mapping")
    (tmp_path / "latin.yaml").write_bytes(b"name: caf\xe9\nnodes: {A: bert_base}\n")
    refused(load_scenario, tmp_path / "latin.yaml", "not UTF-8 text (byte 0xe9")


# ---------------------------------------------------------------------------- strict types and ranges
@pytest.mark.parametrize(
    ("runs", "fragment"),
    [("abc", "runs = 'abc': Input should be a valid integer"), ("[1]", "runs (a list)"),
     ("-5", "runs = -5: Input should be greater than or equal to 0"), ("true", "runs = True"),
     ("1e308", "runs = 1e+308"), ("2.0", "runs = 2.0"), ("1e10", "runs = 10000000000.0")],
)
def test_library_runs_is_a_whole_number_in_range(tmp_path: Path, runs: str, fragment: str) -> None:
    refused(load_tool_library, write(tmp_path, f"runs: {runs}\ntools:\n  t: {{cpu_ms: 1, gpu_ms: 1}}\n"), fragment)


def test_library_header_fields_are_text_and_known(tmp_path: Path) -> None:
    refused(load_tool_library, write(tmp_path, "hardware: {a: 1}\ntools:\n  t: {cpu_ms: 1, gpu_ms: 1}\n"),
            "hardware (a mapping): Input should be a valid string")
    refused(load_tool_library, write(tmp_path, "tols: {}\ntools:\n  t: {cpu_ms: 1, gpu_ms: 1}\n"),
            "unknown key 'tols'")


def test_huge_integers_never_overflow(tmp_path: Path) -> None:
    digits = "9" * 400
    refused(load_tool_library, write(tmp_path, f"tools:\n  t: {{cpu_ms: 1, gpu_ms: 1}}\n  u: {{base: t, "
                                               f"amplification: {digits}}}\n"), "an integer of 400 digits")
    refused(load_tool_library, write(tmp_path, f'{{"tools": {{"t": {{"cpu_ms": {digits}}}}}}}', "l.json"),
            "an integer of 400 digits")
    refused(load_scenario, write(tmp_path, f"nodes: {{A: bert_base_x{digits}}}\n"), "at most 200 characters")
    refused(load_scenario, write(tmp_path, "nodes: {A: bert_base_x2000000}\n"),
            "amplification = 2000000: give an integer from 1 to 1,000,000")
    refused(load_scenario, write(tmp_path, "nodes: {A: llama_3b_x999999}\n"), "less than or equal to 100000000")
    refused(load_tool_library, write(tmp_path, "tools:\n  t: {cpu_ms: 1, gpu_ms: 1}\n  u: {base: t, "
                                               "amplification: true}\n"), "amplification = True")


#: field -> (where in a scenario, values the loader must refuse, values it must accept)
RANGES: dict[str, tuple[str, list[Any], list[Any]]] = {
    "cpu_ms": ("card", [0, -1, L.MIN_MS / 2, L.MAX_MS * 1.01, 1e308, True, "1", [1]], [L.MIN_MS, 1, L.MAX_MS]),
    "gpu_ms": ("card", [0, L.MAX_MS * 2, False, "fast"], [L.MIN_MS, L.MAX_MS]),
    "load_ms": ("card", [-1, L.MAX_MS * 2, True], [0, L.MAX_MS]),
    "vram_mb": ("card", [-1, L.MAX_VRAM_MB * 2, True, {"a": 1}], [0, L.MAX_VRAM_MB]),
    "gpu_util": ("card", [0, L.MIN_GPU_UTIL / 2, 1.01, True], [L.MIN_GPU_UTIL, 1]),
    "cpu_threads": ("card", [0, L.MAX_CORES + 1, 2.0, 2.5, True, "4"], [1, L.MAX_CORES]),
    "amplification": ("card", [0, L.MAX_AMPLIFICATION + 1, 1.0, True], [1, L.MAX_AMPLIFICATION]),
    "description": ("card", [5, ["a"], "a\x1bb", "a\x00", "x" * (L.MAX_TEXT_CHARS + 1)],
                    ["", "tab\tand\nnewline", "x" * L.MAX_TEXT_CHARS]),
    "cpu_cores": ("machine", [0, L.MAX_CORES + 1, 8.0, True], [1, L.MAX_CORES]),
    "vram_budget_mb": ("machine", [0, -5, L.MAX_VRAM_MB * 2, False], [0.5, L.MAX_VRAM_MB]),
    "gpu_kappa": ("machine", [-0.1, L.MAX_KAPPA * 1.01, 1e308, True], [0, L.MAX_KAPPA]),
    "noise_cv": ("machine", [-0.1, L.MAX_NOISE_CV + 0.1, True], [0, L.MAX_NOISE_CV]),
    "pcie_mb_per_ms": ("machine", [0, L.MIN_PCIE_MB_PER_MS / 2, L.MAX_PCIE_MB_PER_MS * 2], [L.MIN_PCIE_MB_PER_MS,
                                                                                           L.MAX_PCIE_MB_PER_MS]),
    "name": ("machine", [1, "", " padded ", "a\nb", "x" * (L.MAX_NAME_CHARS + 1)], ["A5500", "x" * L.MAX_NAME_CHARS]),
    "data_mb": ("edge", [-1, L.MAX_DATA_MB * 2, True, "3"], [0, L.MAX_DATA_MB]),
}


def scenario_with(field: str, value: Any) -> dict[str, Any]:
    where = RANGES[field][0]
    card = {"cpu_ms": 100.0, "gpu_ms": 10.0}
    doc: dict[str, Any] = {"cards": {"t": card}, "nodes": {"A": "t", "B": "t"}, "edges": [{"src": "A", "dst": "B"}]}
    if where == "card":
        if field == "amplification":
            doc["cards"]["u"] = {"base": "t", "amplification": value}
            doc["cards"]["t"] = {"cpu_ms": L.MIN_MS, "gpu_ms": L.MIN_MS}  # so k = MAX stays in range
        else:
            card[field] = value
            if field == "gpu_ms":
                card.pop("has_gpu", None)
    elif where == "machine":
        doc["machine"] = {field: value}
    else:
        doc["edges"][0][field] = value
    return doc


@pytest.mark.parametrize("field", sorted(RANGES))
def test_every_figure_has_a_range_and_a_type(tmp_path: Path, field: str) -> None:
    _, bad, good = RANGES[field]
    for i, value in enumerate(bad):
        path = write(tmp_path, json.dumps(scenario_with(field, value)), f"bad{i}.json")
        message = refused(load_scenario, path)
        assert field in message, message
    for i, value in enumerate(good):
        path = write(tmp_path, json.dumps(scenario_with(field, value)), f"good{i}.json")
        load_scenario(path)


def test_huge_kappa_is_refused_so_no_run_ever_sees_infinity(tmp_path: Path) -> None:
    path = write(tmp_path, "mode: three_way\nmachine: {gpu_kappa: 1.0e+308}\nnodes: {A: bert_base, B: ocr, C: e5_large}\n")
    refused(load_scenario, path, "machine.gpu_kappa = 1e+308", "less than or equal to 10")


# ---------------------------------------------------------------------------- names
@pytest.mark.parametrize("node_id", ["A\x00", "A\x1b[31m", "\u202eA", "A\x7f", " A", "A ", "x" * 201])
def test_node_ids_with_control_characters_or_padding_are_refused(tmp_path: Path, node_id: str) -> None:
    message = refused(load_scenario, write(tmp_path, json.dumps({"nodes": {node_id: "bert_base"}}), "s.json"))
    assert "\x1b" not in message and "\x00" not in message and "\u202e" not in message  # quoted, never raw


def test_markup_and_unicode_names_are_accepted_as_written(tmp_path: Path) -> None:
    names = ["[/]", "[/bold] x", "[red]hot[/red]", "日本語", "🙂", "a.b", "A-1"]
    doc = {"name": "[/]", "cards": {"[b]t": CARD}, "nodes": {n: "[b]t" for n in names}}
    sc = load_scenario(write(tmp_path, json.dumps(doc), "s.json"))
    assert sc.workflow.node_ids == tuple(names) and sc.name == "[/]"


def test_integer_node_ids_are_names_but_other_scalars_are_not(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, "nodes: {1: bert_base, 2: ocr}\nedges: [[1, 2]]\n"))
    assert sc.workflow.node_ids == ("1", "2") and sc.workflow.succs("1") == ("2",)
    refused(load_scenario, write(tmp_path, "nodes: {1.5: bert_base}\n"), "is a number", "quote it")
    refused(load_scenario, write(tmp_path, "nodes: {1: bert_base, '1': ocr}\n"), "defined twice")


def test_edge_text_is_bounded_before_the_pattern_runs(tmp_path: Path) -> None:
    long_edge = "A" + " " * 50_000 + "-"  # quadratic for the edge pattern if it ever ran on this
    refused(load_scenario, write(tmp_path, json.dumps({"nodes": {"A": "ocr"}, "edges": [long_edge]}), "e.json"),
            "write 'A -> B'")


# ---------------------------------------------------------------------------- mappings
def test_duplicate_nodes_in_every_mapping_form_are_an_error(tmp_path: Path) -> None:
    for text in ("A=cpu,A=gpu_now", "A=cpu A=cpu", '{"A": "cpu", "A": "gpu_now"}'):
        with pytest.raises(MappingError, match="node 'A' is placed twice"):
            parse_mapping_text(text)
    with pytest.raises(InputError, match="duplicate key 'A'"):
        load_mapping(write(tmp_path, "A: cpu\nA: gpu_now\n", "m.yaml"))
    with pytest.raises(InputError, match="duplicate key 'A'"):
        load_mapping(write(tmp_path, '{"A": "cpu", "A": "gpu_now"}', "m.json"))


def test_valid_json_mapping_files_are_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, '{"\\ud83d\\ude42": "cpu", "' + "k" * 1100 + '": "gpu_now"}', "m.json")
    m = load_mapping(path)
    assert list(m) == ["🙂", "k" * 1100] and m["🙂"] is Placement.CPU
    assert load_mapping(write(tmp_path, '{"mapping": {"A": "gpu"}}', "w.json")) == Mapping({"A": "gpu_now"})
    assert load_mapping(write(tmp_path, "mapping: cpu\nB: gpu_now\n", "n.yaml"))["mapping"] is Placement.CPU


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("extra.yaml", "mapping: {A: cpu}\nfoo: 1\n", "unknown key(s) ['foo'] beside 'mapping:'"),
        ("comma.json", '{"A": "cpu",}', "malformed JSON at line 1"),
        ("nan.json", '{"A": NaN}', "A = nan is not a finite number"),
        ("lone.json", '{"\\ud83d": "cpu"}', "lone surrogate U+D83D"),
        ("list.json", '{"A": ["cpu"]}', "placement = ['cpu']"),
        ("num.yaml", "A: 1\n", "placement = 1"),
        ("top.json", "[1, 2]", "must be a mapping"),
        ("comment.json", '{"A": "cpu"} // no', "malformed JSON"),
    ],
)
def test_malformed_mapping_files_are_refused(tmp_path: Path, name: str, text: str, fragment: str) -> None:
    refused(load_mapping, write(tmp_path, text, name), fragment)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("A", "is not NODE=PLACEMENT"), ("=cpu", "is not a node name"), ('{"A": 1}', "placement = 1"),
     ('{"A": NaN}', "not a finite number"), ("[1]", "not NODE=PLACEMENT"), ('{"A": "cpu"', "not valid JSON"),
     ('{"a": ' * 5000 + '"cpu"' + "}" * 5000, "JSON object node -> placement")],
)
def test_malformed_mapping_text_is_refused(text: str, fragment: str) -> None:
    with pytest.raises(InputError) as info:
        parse_mapping_text(text)
    assert fragment in str(info.value)


# ---------------------------------------------------------------------------- large inputs stay linear
def test_a_large_chain_loads_and_its_adjacency_matches_the_edges(tmp_path: Path) -> None:
    n = 1200  # CPU-only: a mapping space of one
    doc = {"cards": {"f": {"cpu_ms": 1, "has_gpu": False}}, "nodes": {f"n{i}": "f" for i in range(n)},
           "edges": [f"n{i} -> n{i + 1}" for i in range(n - 1)]}
    sc = load_scenario(write(tmp_path, yaml.safe_dump(doc), "c.yaml"))
    assert sc.mapping_space_size() == 1 and sc.workflow.topo_order[-1] == f"n{n - 1}"
    assert sc.isolated_critical_path_ms() == pytest.approx(n)
    assert sc.workflow.preds("n5") == ("n4",) and sc.workflow.succs("n5") == ("n6",)
    assert len(repr(sc)) < 200 and len(repr(sc.uniform(Placement.CPU))) < 300


def test_messages_about_large_workflows_stay_short(tmp_path: Path) -> None:
    doc = {"cards": {"f": {"cpu_ms": 1, "has_gpu": False}}, "nodes": {f"n{i}": "f" for i in range(5000)},
           "edges": ["n1 -> zz"]}
    message = refused(load_scenario, write(tmp_path, json.dumps(doc), "w.json"), "'zz' is not a node",
                      "(4988 more)")
    assert len(message) < 600
    sc = load_scenario(write(tmp_path, json.dumps({**doc, "edges": []}), "ok.json"))
    with pytest.raises(MappingError) as info:
        sc.validate_mapping(Mapping({"n0": "cpu"}))
    assert len(str(info.value)) < 600 and "more" in str(info.value)


@st.composite
def random_dags(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, str]]]:
    n = draw(st.integers(1, 12))
    ids = [f"N{i}" for i in range(n)]
    pairs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))
    return ids, [(ids[a], ids[b]) for a, b in sorted(pairs) if a < b]


@settings(max_examples=60, deadline=None)
@given(dag=random_dags(), places=st.lists(st.sampled_from(list(Placement)), min_size=12, max_size=12),
       vram=st.lists(st.sampled_from([0.0, 300.0, 700.0, 1200.0]), min_size=3, max_size=3),
       budget=st.sampled_from([800.0, 1500.0, 3000.0]))
def test_queue_deadlock_agrees_with_the_descendant_definition(
    dag: tuple[list[str], list[tuple[str, str]]], places: list[Placement], vram: list[float], budget: float
) -> None:
    import networkx as nx

    ids, edges = dag
    tools = [f"t{i % 3}" for i in range(len(ids))]
    cards = [make_card(f"t{k}", vram_mb=vram[k]) for k in range(3)]
    sc = make_scenario(make_workflow(list(zip(ids, tools, strict=True)), edges), cards, mode="three_way",
                       vram_budget_mb=budget)
    m = Mapping(zip(ids, places[: len(ids)], strict=True))
    got = sc.queue_deadlock(m)
    expected = None  # the definition: a queued q that cannot fit beside gpu_now tools with a node below it
    for q in ids:
        if m[q] is not Placement.GPU_QUEUE:
            continue
        below = nx.descendants(sc.workflow.graph, q)
        holders = {sc.workflow.tool_of[n] for n in below if m[n] is Placement.GPU_NOW}
        if holders and sc.card_of(q).vram_mb + sum(sc.cards[t].vram_mb for t in holders) > budget:
            expected = (q, holders)
            break
    assert (got is None) == (expected is None)
    if got is not None and expected is not None:
        assert got.detail.startswith(f"node {expected[0]!r}")
        assert all(repr(t) in got.detail for t in expected[1])


# ---------------------------------------------------------------------------- property tests
JSON_SCALARS = (st.none() | st.booleans() | st.integers(-(10**30), 10**30)
                | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=20)
FIELDS = ["name", "description", "shows", "mode", "tools", "cards", "machine", "nodes", "edges", "zzz"]
CARD_FIELDS = ["cpu_ms", "gpu_ms", "load_ms", "vram_mb", "gpu_util", "cpu_threads", "has_gpu", "amplification",
               "base", "description", "spread", "provenance", "source", "name", "bogus"]


def valid_doc() -> dict[str, Any]:
    return {"name": "fuzz", "mode": "three_way", "machine": {"vram_budget_mb": 3000, "cpu_cores": 8},
            "cards": {"t": dict(CARD), "u": {"base": "t", "amplification": 3}, "c": {"cpu_ms": 5, "has_gpu": False}},
            "nodes": [{"id": "A", "tool": "t"}, {"id": "B", "tool": "u"}, {"id": "C", "tool": "c"}],
            "edges": ["A -> B", {"src": "B", "dst": "C", "data_mb": 2}]}


@st.composite
def mutated_docs(draw: st.DrawFn) -> Any:
    """A valid scenario with a few fields replaced, removed or retyped, or a random document."""
    if draw(st.integers(0, 5)) == 0:
        return draw(JSON_VALUES)
    doc = valid_doc()
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "card", "machine", "node", "edge"]))
        value = draw(JSON_VALUES)
        if where == "top":
            key = draw(st.sampled_from(FIELDS))
            if draw(st.booleans()):
                doc.pop(key, None)
            else:
                doc[key] = value
        elif where == "card" and isinstance(doc.get("cards"), dict) and isinstance(doc["cards"].get("t"), dict):
            doc["cards"]["t"][draw(st.sampled_from(CARD_FIELDS))] = value
        elif where == "machine" and isinstance(doc.get("machine"), dict):
            doc["machine"][draw(st.sampled_from(["cpu_cores", "vram_budget_mb", "gpu_kappa", "noise_cv", "name",
                                                 "pcie_mb_per_ms", "x"]))] = value
        elif where == "node" and isinstance(doc.get("nodes"), list):
            node = {"id": value, "tool": "t"} if draw(st.booleans()) else value
            if doc["nodes"]:  # an earlier mutation may have replaced the list by a shorter one
                doc["nodes"][draw(st.integers(0, len(doc["nodes"]) - 1))] = node
            else:
                doc["nodes"].append(node)
        elif where == "edge" and isinstance(doc.get("edges"), list):
            doc["edges"].append(value)
    return doc


def dump(doc: Any, as_json: bool) -> str:
    if as_json:
        return json.dumps(doc, allow_nan=True)
    return yaml.safe_dump(doc, allow_unicode=True)


def check_loaded_or_refused(path: Path, loader: Any) -> Any:
    """The contract: a value, or InputError naming the file (any other exception fails the test)."""
    try:
        return loader(path)
    except InputError as exc:
        assert str(exc).startswith(f"file {path}") or str(exc).startswith("scenario "), str(exc)
        assert "Traceback" not in str(exc)
        return None


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(doc=mutated_docs(), as_json=st.booleans())
def test_fuzzed_scenarios_load_or_are_refused_clearly(tmp_path: Path, doc: Any, as_json: bool) -> None:
    path = tmp_path / ("f.json" if as_json else "f.yaml")
    path.write_text(dump(doc, as_json), encoding="utf-8")
    sc = check_loaded_or_refused(path, load_scenario)
    if sc is not None:  # accepted: then it is what the file says, with every figure in range and typed
        assert isinstance(doc, dict)
        for card in sc.cards.values():
            assert L.MIN_MS <= card.cpu_ms <= L.MAX_MS and isinstance(card.cpu_threads, int)
            assert not isinstance(card.cpu_threads, bool) and isinstance(card.description, str)
        name, description = doc.get("name"), doc.get("description")  # null or absent: the defaults
        assert sc.name == (path.stem if name is None else name) and isinstance(sc.name, str)
        assert sc.description == ("" if description is None else description)
        assert math.isfinite(sc.machine.gpu_kappa) and sc.machine.gpu_kappa <= L.MAX_KAPPA
    for loader in (load_tool_library, load_mapping, detect_kind):
        check_loaded_or_refused(path, loader)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
       suffix=st.sampled_from([".yaml", ".json"]))
def test_random_bytes_load_or_are_refused_clearly(tmp_path: Path, data: bytes, suffix: str) -> None:
    path = tmp_path / f"r{suffix}"
    path.write_bytes(data)
    for loader in (load_scenario, load_tool_library, load_mapping, detect_kind):
        check_loaded_or_refused(path, loader)


WRONG_FOR = {
    "int": st.booleans() | st.floats(allow_nan=False) | st.text(max_size=5) | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    "float": st.booleans() | st.text(max_size=5) | st.lists(st.floats(), max_size=2) | st.none(),
    "str": st.integers() | st.floats(allow_nan=False) | st.booleans() | st.lists(st.text(max_size=3), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
}
TYPED = {("card", "cpu_ms"): "float", ("card", "load_ms"): "float", ("card", "vram_mb"): "float",
         ("card", "gpu_util"): "float", ("card", "cpu_threads"): "int", ("card", "description"): "str",
         ("machine", "cpu_cores"): "int", ("machine", "gpu_kappa"): "float", ("machine", "name"): "str",
         ("machine", "noise_cv"): "float", ("top", "name"): "str", ("top", "description"): "str",
         ("top", "shows"): "str", ("edge", "data_mb"): "float"}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(sorted(TYPED)), data=st.data(), as_json=st.booleans())
def test_a_value_of_the_wrong_type_is_never_accepted(
    tmp_path: Path, target: tuple[str, str], data: st.DataObject, as_json: bool
) -> None:
    where, field = target
    value = data.draw(WRONG_FOR[TYPED[target]])
    if TYPED[target] == "float" and value is None and where != "card":
        value = "none"
    doc = valid_doc()
    holder = {"card": doc["cards"]["t"], "machine": doc["machine"], "top": doc, "edge": doc["edges"][1]}[where]
    holder[field] = value
    path = tmp_path / ("w.json" if as_json else "w.yaml")
    path.write_text(dump(doc, as_json), encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"file {path}") and field in str(info.value)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60) | st.lists(st.tuples(st.sampled_from(["A", "B", "[/]", "A B", ""]),
                                                      st.sampled_from(["cpu", "gpu", "queue", "tpu", ""])),
                                            max_size=4).map(lambda kv: ",".join(f"{k}={v}" for k, v in kv)))
def test_mapping_strings_parse_or_are_refused(text: str) -> None:
    try:
        m = parse_mapping_text(text)
    except InputError as exc:
        assert str(exc).startswith("mapping") or "node " in str(exc)
        return
    assert all(isinstance(k, str) and k for k in m) and len(set(m)) == len(m)
    pairs = [p.split("=", 1) for p in re.split(r"[,\s]+", text.strip()) if p] if not text.strip().startswith("{") else []
    if pairs:  # every NODE=PLACEMENT pair is kept, once
        assert len(m) == len(pairs)


def test_formats_doc_lists_every_limit() -> None:
    section = (Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text(encoding="utf-8")
    section = section.split("### Accepted ranges")[1].split("\n## ")[0]
    for name in dir(L):
        if name.startswith(("MAX_", "MIN_")):
            value = getattr(L, name)
            shown = f"{value:,}" if value >= 1 else f"{value:g}"
            assert shown.removesuffix(".0") in section, (name, shown)
    whole = (Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text(encoding="utf-8")
    assert f"{MAX_ALIAS_EXPANSION:,} nodes" in whole and f"{MAX_DEPTH} levels" in whole and "8 MiB" in whole
    assert MAX_FILE_BYTES == 8 * 1024 * 1024


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(doc=mutated_docs(), as_json=st.booleans(), command=st.sampled_from(["validate", "show", "simulate"]))
def test_fuzzed_files_through_the_cli_exit_0_or_2_with_the_file_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: Any, as_json: bool, command: str
) -> None:
    from hetsched.cli import main

    path = tmp_path / ("c.json" if as_json else "c.yaml")
    path.write_text(dump(doc, as_json), encoding="utf-8")
    args = [command, str(path)] + (["A=cpu,B=cpu,C=cpu", "--no-noise"] if command == "simulate" else [])
    capsys.readouterr()
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code in (0, 2), (code, err)
    if code == 2:
        first = err.splitlines()[0]
        assert first.startswith((f"error: file {path}", "error: scenario ", "error: mapping")), err
