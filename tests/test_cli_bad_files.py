"""Files nobody bundled, at every command that reads one: each malformed input is exit 2 with one message
naming the file, the field or line, the bad value and what is accepted, never a traceback.

The scenario cases run through every command that takes a scenario (a bad file must be refused the same
way wherever it is read); the other formats (mapping, arrival times, tool library, run store, report
source, output folders) through the commands that read them. Files are real (binary bytes, Latin-1, a
directory where a file is expected, /dev/full for an output)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.factories import run_cli as cli

GOOD = """mode: three_way
cards:
  a: {cpu_ms: 100, gpu_ms: 10, load_ms: 20, vram_mb: 100}
  b: {cpu_ms: 50, gpu_ms: 25, load_ms: 20, vram_mb: 100}
nodes: {A: a, B: b}
edges: ["A -> B"]
machine: {vram_budget_mb: 1000}
"""


def edit(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


# name -> (file name, content (None: a directory), fragments the message must hold besides the file's name)
SCENARIOS: dict[str, tuple[str, str | bytes | None, tuple[str, ...]]] = {
    "empty": ("empty.yaml", "", ("top level", "nothing")),
    "binary": ("bin.yaml", bytes(range(256)) * 4, ("not UTF-8 text (byte 0x80 at offset 128)", "save it as UTF-8")),
    "latin-1": ("latin1.yaml", "description: caf\xe9\n".encode("latin-1"), ("not UTF-8 text (byte 0xe9",)),
    "NUL": ("nul.yaml", b"mode: binary\x00", ("malformed YAML", "#x0000")),
    "directory": ("dir.yaml", None, ("is a directory", "give a YAML or JSON file")),
    "top-level list": ("list.yaml", "- a\n- b\n", ("top level", "a list")),
    "top-level integer": ("int.yaml", "42\n", ("top level", "an integer")),
    "JSON array": ("list.json", "[\"a\", 2]", ("top level", "a list")),  # a list of numbers is a file of arrival times
    "broken JSON": ("bad.json", '{"nodes": ', ("malformed JSON at line 1, column 11",)),
    "YAML syntax": ("syntax.yaml", "nodes: {A: a\n  b: [\n", ("malformed YAML at line 2",)),
    "no nodes": ("nonodes.yaml", "machine: {vram_budget_mb: 10}\n", ("nodes",)),
    "nodes integer": ("nodesint.yaml", edit("nodes: {A: a, B: b}", "nodes: 5"),
                      ("'nodes' must be a list or a mapping, got an integer",)),
    "cpu_ms text": ("cpustr.yaml", edit("cpu_ms: 100", "cpu_ms: fast"), ("cards.a.cpu_ms = 'fast'", "valid number")),
    "cpu_ms NaN": ("nan.yaml", edit("cpu_ms: 100", "cpu_ms: .nan"), ("cards.a.cpu_ms = nan", "finite number")),
    "cpu_ms inf": ("inf.yaml", edit("cpu_ms: 100", "cpu_ms: .inf"), ("cards.a.cpu_ms = inf", "finite number")),
    "cpu_ms 1e400": ("e400.yaml", edit("cpu_ms: 100", "cpu_ms: 1e400"), ("cards.a.cpu_ms = inf", "finite number")),
    "cpu_ms negative": ("neg.yaml", edit("cpu_ms: 100", "cpu_ms: -3"), ("cards.a.cpu_ms = -3", "accepted: a number from 0.001 to 100000000")),
    "cpu_ms huge": ("huge.yaml", edit("cpu_ms: 100", "cpu_ms: 1e300"), ("cards.a.cpu_ms = 1e+300", "accepted: a number from 0.001 to 100000000")),
    "5000-digit integer": ("digits.yaml", edit("cpu_ms: 100", "cpu_ms: " + "9" * 5000),
                           ("an integer of 5000 digits", "at most 100")),
    "cpu_cores huge": ("cores.yaml", edit("vram_budget_mb: 1000", "vram_budget_mb: 1000, cpu_cores: " + "9" * 23),
                       ("machine.cpu_cores = 999", "accepted: an integer from 1 to 4096")),
    "cpu_cores fraction": ("frac.yaml", edit("vram_budget_mb: 1000", "vram_budget_mb: 1000, cpu_cores: 2.5"),
                           ("machine.cpu_cores = 2.5", "valid integer")),
    "budget negative": ("budget.yaml", edit("vram_budget_mb: 1000", "vram_budget_mb: -5"),
                        ("machine.vram_budget_mb = -5", "accepted: a number > 0 and <= 10000000")),
    "machine a list": ("machine.yaml", edit("machine: {vram_budget_mb: 1000}", "machine: [1, 2]"),
                       ("machine must be a mapping of keys to values, got a list",)),
    "machine 0": ("machine0.yaml", edit("machine: {vram_budget_mb: 1000}", "machine: 0"),
                  ("machine must be a mapping of keys to values, got an integer",)),
    "edges 0": ("edges0.yaml", edit('edges: ["A -> B"]', "edges: 0"), ("'edges' must be a list, got an integer",)),
    "card a scalar": ("card.yaml", edit("  b: {cpu_ms: 50, gpu_ms: 25, load_ms: 20, vram_mb: 100}", "  b: 7"),
                      ("cards.b must be a mapping of keys to values, got an integer",)),
    "duplicate node (list)": ("dupl.yaml", edit("nodes: {A: a, B: b}", "nodes: [{id: A, tool: a}, {id: A, tool: b}]"),
                              ("node 'A' is defined twice", "must be unique")),
    "duplicate node (key)": ("dupk.yaml", edit("nodes: {A: a, B: b}", "nodes: {A: a, A: b}"),
                             ("line 5", "duplicate key 'A'")),
    "cycle": ("cycle.yaml", edit('edges: ["A -> B"]', 'edges: ["A -> B", "B -> A"]'),
              ("cycle (A -> B -> A)", "must be a DAG")),
    "self-loop": ("loop.yaml", edit('edges: ["A -> B"]', 'edges: ["A -> A"]'), ("edge A->A is a self-loop",)),
    "edge to an unknown node": ("edge.yaml", edit('edges: ["A -> B"]', 'edges: ["A -> Z"]'),
                                ("dst 'Z' is not a node", "known nodes: ['A', 'B']")),
    "edge syntax": ("arrow.yaml", edit('edges: ["A -> B"]', 'edges: ["A => B"]'), ("edges[0] = 'A => B'", "'A -> B'")),
    "edge data NaN": ("data.yaml", edit('edges: ["A -> B"]', "edges: [{src: A, dst: B, data_mb: .nan}]"),
                      ("edges[0].data_mb = nan", "finite number")),
    "node without a card": ("nocard.yaml", edit("nodes: {A: a, B: b}", "nodes: {A: a, B: c}"),
                            ("node 'B' uses tool 'c', which has no card", "known tools:")),
    "unknown key": ("key.yaml", GOOD + "colour: blue\n", ("unknown key 'colour'", "accepted keys:")),
    "unknown mode": ("mode.yaml", edit("mode: three_way", "mode: quantum"),
                     ("mode = 'quantum'", "accepted: binary, three_way")),
    "library missing": ("libmiss.yaml", "tools: nowhere.yaml\nnodes: {A: a}\n", ("tools = 'nowhere.yaml'", "not found")),
    "library a directory": ("libdir.yaml", "tools: adir\nnodes: {A: a}\n", ("tools = 'adir'", "adir: is a directory")),
    "library binary": ("libbin.yaml", "tools: bin.yaml\nnodes: {A: a}\n", ("tools = 'bin.yaml'", "not UTF-8 text")),
    "alias bomb": ("bomb.yaml", "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{k}: &{k} [{', '.join([f'*{p}'] * 10)}]\n" for p, k in zip("abcdef", "bcdefg", strict=True)),
        ("aliases expand to more than 100,000 nodes",)),
    "deep nesting": ("deep.json", '{"nodes": ' + "[" * 10_000 + "]" * 10_000 + "}", ("nested deeper than",)),
    "control character in a name": ("ctrl.yaml", edit("nodes: {A: a, B: b}", 'nodes: {"A\\x1b": a, B: b}').replace(
        'edges: ["A -> B"]', "edges: []"), ("control character U+001B", "printable characters only")),
    "workload rate negative": ("wl.yaml", GOOD + "workload: {arrivals: open, rate_per_s: -1}\n",
                               ("workload.rate_per_s = -1", "accepted: a number > 0 and <= 1000000")),
}

SCENARIO_COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "show": lambda p, d: ["show", str(p)],
    "validate": lambda p, d: ["validate", str(p)],
    "simulate": lambda p, d: ["simulate", str(p), "A=cpu,B=cpu", "--no-noise"],
    "oracle": lambda p, d: ["oracle", str(p)],
    "reference": lambda p, d: ["reference", str(p)],
    "run": lambda p, d: ["run", str(p), "--rounds", "1", "--no-store"],
    "bench": lambda p, d: ["bench", "--scenario", str(p), "--seeds", "1", "--rounds", "1", "--no-progress",
                           "--out", str(d / "bench-out")],
    "export ray": lambda p, d: ["export", "ray", str(p)],
    "gantt": lambda p, d: ["gantt", str(p), "-p", "all-cpu", "-o", str(d / "g.png")],
}


def write(folder: Path, name: str, content: str | bytes | None) -> Path:
    path = folder / name
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def refused(capsys: pytest.CaptureFixture[str], args: list[str], path: Path, fragments: tuple[str, ...]) -> str:
    """Run ``hetsched ARGS``: exit 2, no traceback (run_cli checks), the message names ``path`` and holds
    every fragment; the message, whitespace joined."""
    code, _, err = cli(capsys, *args)
    message = " ".join(err.split())
    assert code == 2, (args, message)
    assert str(path) in message, (args, message)
    for fragment in fragments:
        assert fragment in message, (args, fragment, message)
    return message


@pytest.mark.parametrize("case", sorted(SCENARIOS))
def test_a_bad_scenario_file_is_refused_alike_by_every_command(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               case: str) -> None:
    name, content, fragments = SCENARIOS[case]
    (tmp_path / "adir").mkdir()
    (tmp_path / "bin.yaml").write_bytes(bytes(range(256)))
    path = write(tmp_path, name, content)
    for command, args in SCENARIO_COMMANDS.items():
        message = refused(capsys, args(path, tmp_path), path, fragments)
        assert len(message) < 1000, (command, message)  # one message, never a dump


def test_files_a_user_may_write_another_way_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The other side of the sweep: a byte-order mark, another suffix, a card no node uses are fine."""
    for name, text in (("bom.yaml", "\ufeff" + GOOD), ("flow.txt", GOOD),
                       ("spare.yaml", edit("nodes: {A: a, B: b}", "nodes: {A: a}").replace('edges: ["A -> B"]', ""))):
        path = write(tmp_path, name, text)
        code, out, err = cli(capsys, "validate", str(path))
        assert code == 0 and out.startswith("ok: scenario"), err


MAPPINGS: dict[str, tuple[str, str | bytes | None, tuple[str, ...]]] = {
    "empty": ("m.yaml", "", ("top level", "nothing")),
    "binary": ("m.yaml", bytes(range(256)), ("not UTF-8 text",)),
    "list": ("m.yaml", "- A\n", ("top level", "a list")),
    "directory": ("m.yaml", None, ("is a directory",)),
    "unknown node": ("m.yaml", "A: cpu\nB: cpu\nZ: cpu\n", ("invents nodes ['Z']", "has nodes ['A', 'B']")),
    "missing node": ("m.yaml", "A: cpu\n", ("misses nodes ['B']", "has nodes ['A', 'B']")),
    "unknown placement": ("m.yaml", "A: tpu\nB: cpu\n", ("node 'A'", "'tpu'", "accepted: cpu, gpu_now, gpu_queue")),
    "placement a number": ("m.yaml", "A: 1\nB: cpu\n", ("node 'A': placement = 1", "accepted: cpu, gpu_now")),
    "duplicate node": ("m.yaml", "A: cpu\nA: gpu_now\nB: cpu\n", ("duplicate key 'A'",)),
    "broken JSON": ("m.json", "{", ("malformed JSON",)),
}


@pytest.mark.parametrize("case", sorted(MAPPINGS))
def test_a_bad_mapping_file_is_refused_by_every_command_that_reads_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    name, content, fragments = MAPPINGS[case]
    sc = write(tmp_path, "flow.yaml", GOOD)
    path = write(tmp_path, name, content)
    for args in (["simulate", str(sc), str(path), "--no-noise"], ["validate", str(path), "--scenario", str(sc)],
                 ["export", "ray", str(sc), "--mapping", str(path)],
                 ["gantt", str(sc), "--mapping", str(path), "-o", str(tmp_path / "g.png")]):
        refused(capsys, args, path, fragments)


ARRIVALS: dict[str, tuple[str, str | bytes | None, tuple[str, ...]]] = {
    "empty": ("t.txt", "", ("holds no arrival times", "one number (ms) a line")),
    "binary": ("t.txt", bytes(range(256)), ("not UTF-8 text",)),
    "words": ("t.txt", "0\nsoon\n", ("line 2: 'soon' is not a number",)),
    "negative": ("t.txt", "0\n-5\n", ("line 2: -5", "ms from the start, 0 to 8.64e+07")),
    "too late": ("t.txt", "0\n1e300\n", ("line 2: 1e300", "0 to 8.64e+07")),
    "NaN": ("t.txt", "0\nnan\n", ("line 2: nan is not a finite number",)),
    "5000 digits": ("t.txt", "9" * 5000 + "\n", ("line 1: 999", "... is not a finite number")),
    "JSON out of range": ("t.json", "[0, -1]", ("[1] = -1", "0 to 8.64e+07")),
    "directory": ("t.txt", None, ("is a directory",)),
    "CSV without a header": ("t.csv", "0,a\n100,b\n", ("line 1: 2 comma-separated values", "no header line",
                                                     "header line names its time column time_ms")),
    "CSV header without a time column": ("t.csv", "id,when\n1,0\n", ("line 1: the header 'id, when' names no "
                                                                     "time column", "time_ms (or arrival_ms, t_ms)")),
    "CSV row without its time": ("t.csv", "id,time_ms\n1,0\n2,\n", ("line 3, column time_ms: no value",)),
    "CSV words": ("t.csv", "id,time_ms\n1,soon\n", ("line 2, column time_ms: 'soon' is not a number",)),
}


@pytest.mark.parametrize("case", sorted(ARRIVALS))
def test_a_bad_arrivals_file_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    name, content, fragments = ARRIVALS[case]
    sc = write(tmp_path, "flow.yaml", GOOD)
    path = write(tmp_path, name, content)
    for args in (["simulate", str(sc), "A=cpu,B=cpu", "--arrivals", str(path)],
                 ["oracle", str(sc), "--arrivals", str(path)],
                 ["run", str(sc), "--arrivals", str(path), "--rounds", "1", "--no-store"]):
        message = refused(capsys, args, path, fragments)
        assert len(message) < 400, message


def test_validate_tells_what_a_file_of_no_known_format_holds(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A library written under 'cards:' is not read as a mapping with a node named 'cards'."""
    path = write(tmp_path, "cards.yaml", "cards:\n  a: {cpu_ms: 1, gpu_ms: 1}\n")
    message = refused(capsys, ["validate", str(path)], path, (
        "not a tool library (top-level 'tools:'), a scenario ('nodes:') or a mapping (node: placement)",
        "'cards' holds a mapping", "a tool library lists its cards under 'tools:'"))
    assert "placement = " not in message
    path = write(tmp_path, "scalar.json", "3")
    refused(capsys, ["validate", str(path)], path, ("the top level is an integer",))


def test_profile_refresh_refuses_a_directory_and_unregistered_tools_before_measuring(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write(tmp_path, "flow.yaml", None)
    refused(capsys, ["profile", "--refresh", str(folder)], folder, ("is a directory",))
    path = write(tmp_path, "mine.yaml", GOOD)
    message = refused(capsys, ["profile", "--refresh", str(path), "--runs", "1"], path,
                      ("tool(s) 'a', 'b' have no implementation to measure", "registered tools:", "--tool-module"))
    assert "refreshing" not in message  # nothing started


def test_report_and_bench_name_a_path_that_is_not_what_they_need(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "gone" / "runs.sqlite"
    refused(capsys, ["report", str(missing)], missing, ("not found", "a run store file, or run ids"))
    a_file = write(tmp_path, "out.txt", "x")
    refused(capsys, ["bench", "--quick", "--out", str(a_file), "--no-progress"], a_file,
            ("is a file, not a folder",))
    if os.path.exists("/dev/full"):
        refused(capsys, ["bench", "--quick", "--out", "/dev/full", "--no-progress"], Path("/dev/full"),
                ("is a file, not a folder",))


def test_schema_write_refuses_a_file_where_its_folder_goes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = write(tmp_path, "schemas", "x")
    refused(capsys, ["schema", "--write", str(a_file)], a_file, ("is a file, not a folder",))
    under = a_file / "deeper"
    refused(capsys, ["schema", "--write", str(under)], under, ("cannot be written",))


def test_a_model_file_llama_cpp_cannot_read_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A damaged .gguf (random bytes) for the local decider: exit 2 naming it, not llama.cpp's traceback."""
    pytest.importorskip("llama_cpp")
    junk = write(tmp_path, "junk.gguf", bytes(range(256)) * 16)
    refused(capsys, ["run", "chain", "--rounds", "1", "--no-store", "-p", "agentic", "--decider", "local",
                     "--llm-model-path", str(junk)], junk, ("llama.cpp cannot load it", "give a .gguf model file"))


@pytest.mark.parametrize(("file", "fragments"), [
    ("nothere.txt", ("not found (a file of arrival times)",)),
    ("adir", ("is a directory",)),
    ("neg.txt", ("line 2: -5", "0 to 8.64e+07")),
])
def test_a_scenarios_arrivals_file_is_named_with_the_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               file: str, fragments: tuple[str, ...]) -> None:
    (tmp_path / "adir").mkdir()
    write(tmp_path, "neg.txt", "0\n-5\n")
    path = write(tmp_path, "flow.yaml", GOOD + f"workload: {{arrivals: trace, file: {file}}}\n")
    refused(capsys, ["show", str(path)], path, (f"workload.file = '{file}'", str(tmp_path / file), *fragments))


def test_an_integer_fields_range_says_integer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "flow.yaml", GOOD + "workload: {arrivals: closed, clients: 2, requests: 0}\n")
    refused(capsys, ["show", str(path)], path, ("workload.requests = 0", "accepted: an integer from 1 to 100000"))


@pytest.mark.parametrize(("name", "fragment"), [
    ("loop.yaml", "a loop of symbolic links"),
    ("x" * 300 + ".yaml", "the name is too long for the file system"),
    ("a_file/flow.yaml", "not found (a part of the path is a file, not a folder)"),
    ("nothere.yaml", ": not found"),
])
def test_a_path_that_leads_nowhere_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                            fragment: str) -> None:
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    write(tmp_path, "a_file", "x")
    path = tmp_path / name
    refused(capsys, ["show", str(path)], path, (fragment,))
    refused(capsys, ["simulate", str(write(tmp_path, "flow.yaml", GOOD)), "A=cpu,B=cpu", "--arrivals", str(path)],
            path, (fragment,))


def test_a_tool_module_that_is_a_bare_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Python imports a folder without __init__.py as an empty namespace package: no tool is registered, and
    the command must not go on as if the user's tools were there."""
    monkeypatch.chdir(tmp_path)
    folder = write(tmp_path, "polish_bare_tools_folder", None)
    refused(capsys, ["profile", "vector_search", "--runs", "1", "--tool-module", folder.name], folder,
            ("is a folder without __init__.py", "registers no tool"))


@pytest.mark.parametrize(("content", "fragments"), [
    (b'{"a": "\xe9"}', ("not UTF-8 text",)),
    (b"[1]", ("the top level must be a JSON object", "got a list")),
    (b"{", ("malformed JSON at line 1",)),
    (b'{"manifest_version": 1}', ("store = None", "accepted: the run store's path")),
    (b'{"manifest_version": 1, "store": 5, "run_ids": []}', ("store = 5",)),
    (b'{"manifest_version": 1, "store": "runs.sqlite", "run_ids": 5}', ("run_ids = 5", "accepted: a list of run ids")),
    (b'{"manifest_version": 1, "store": "runs.sqlite", "run_ids": [1]}', ("run_ids must hold run ids",)),
    (b'{"manifest_version": 7}', ("manifest_version = 7", "reads version 1")),
])
def test_a_damaged_bench_manifest_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes,
                                           fragments: tuple[str, ...]) -> None:
    folder = write(tmp_path, "bench-out", None)
    manifest = write(folder, "bench.json", content)
    refused(capsys, ["report", str(folder), "-o", str(tmp_path / "out")], manifest, fragments)


CONTROL_NAMES = {"newline": "two\nlines.yaml", "tab": "a\tb.yaml", "carriage return": "x\ry.yaml",
                 "ESC": "red\x1b[31m.yaml", "bidi override": "evil\u202elmay.yaml", "NUL-free C1": "c1\x85.yaml"}


@pytest.mark.parametrize("case", sorted(CONTROL_NAMES))
def test_a_file_name_with_control_characters_is_shown_escaped_in_every_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    """A newline or another control character in a file name is shown as its escape (``\\n``, ``\\x1b``...)
    in every error that names the file (a library's or the CLI's own), never raw: a name cannot break the
    message's line or reach the terminal."""
    name = CONTROL_NAMES[case]
    good = write(tmp_path, "flow.yaml", GOOD)
    bad = write(tmp_path, name, "42\n")  # a scenario whose top level is an integer
    missing = tmp_path / f"missing-{name}"
    folder = write(tmp_path, f"dir-{name}", None)
    cases = [
        (["validate", str(bad)], bad, "top level"),
        (["show", str(missing)], missing, "not found"),
        (["simulate", str(good), "A=cpu,B=cpu", "--arrivals", str(missing)], missing, "not found"),
        (["run", str(good), "--rounds", "1", "--store", str(missing / "runs.sqlite")], missing, "does not exist"),
        (["run", str(good), "--rounds", "1", "--no-store", "--trace", str(folder)], folder, "is a directory"),
        (["init", "chain", "--out", str(folder)], folder, "is a directory"),
    ]
    raw = name.split(".")[0]
    for args, path, fragment in cases:
        code, _, err = cli(capsys, *args)
        message = " ".join(err.split())
        assert code == 2, (args, err)
        shown = str(path).encode("unicode_escape").decode("ascii")
        assert shown in message and fragment in message, (args, shown, message)
        assert raw not in err, (args, err)
        assert not any(ch in err for ch in name if (ord(ch) < 32 and ch != "\n") or 0x7f <= ord(ch) <= 0x9f
                       or 0x202a <= ord(ch) <= 0x202e), (args, err)


def test_a_csv_of_arrival_times_is_read_by_its_header_and_validate_checks_an_arrivals_file_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A CSV's time column is the one its header names (the other columns ignored, quotes allowed); `hetsched
    validate` reads a file of arrival times on its own (text, CSV or a YAML list) and warns, naming the file and
    lines, when its times are out of order (they are sorted when read), as it does for a scenario's."""
    from hetsched.model.files import read_arrivals

    csv_file = write(tmp_path, "arrivals.csv", 'request,Time_ms,note\n1,0,"first, of two"\n2,250.5,\n# done\n')
    assert read_arrivals(csv_file) == (0.0, 250.5)
    sc = write(tmp_path, "flow.yaml", GOOD)
    code, out, err = cli(capsys, "simulate", str(sc), "A=cpu,B=cpu", "--arrivals", str(csv_file), "--json")
    assert code == 0 and json.loads(out)["load"]["requests"] == 2, (out, err)

    late = write(tmp_path, "late.txt", "0\n100\n# a comment\n50\n")
    late_csv = write(tmp_path, "late.csv", "id,time_ms\n1,0\n2,90\n3,40\n")
    late_yaml = write(tmp_path, "late.yaml", "[0, 20, 5]\n")
    in_order = write(tmp_path, "sorted.txt", "0\n0\n10\n")
    for path, where in [(late, "line 4 (50 ms) comes after line 2 (100 ms)"),
                        (late_csv, "line 4 (40 ms) comes after line 3 (90 ms)"),
                        (late_yaml, "[2] (5 ms) comes after [1] (20 ms)")]:
        code, out, err = cli(capsys, "validate", str(path))
        message = " ".join(err.split())
        assert code == 0 and out.startswith(f"ok: arrival times {path}: 3 requests"), (path, out, err)
        assert message == f"warning: file {path}: arrival times out of order: {where}; they are sorted when read", \
            message
    code, out, err = cli(capsys, "validate", str(in_order))
    assert code == 0 and "3 requests, 0 to 10 ms" in out and err == "", (out, err)
    refused(capsys, ["validate", str(write(tmp_path, "pairs.csv", "0,5\n1,7\n"))], tmp_path / "pairs.csv",
            ("line 1: 2 comma-separated values",))


@pytest.mark.parametrize("case", sorted(CONTROL_NAMES))
def test_a_file_name_with_control_characters_is_shown_escaped_where_a_command_says_what_it_wrote(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    """Lines that are not errors but name a file ("wrote ...", "trace written to ...", "run ... recorded in
    ...", "runs in ...") show it as errors do: its control characters (newline and tab too) as escapes."""
    name = CONTROL_NAMES[case]
    good = write(tmp_path, "flow.yaml", GOOD)
    folder = write(tmp_path, f"dir-{name}", None)
    store, trace, starter = folder / "runs.sqlite", tmp_path / f"trace-{name}.json", tmp_path / f"starter-{name}"
    cases = [
        (["run", str(good), "--rounds", "1", "--store", str(store), "--reference", "none"], store, "recorded in"),
        (["runs", "--store", str(store)], store, "runs in"),
        (["run", str(good), "--rounds", "1", "--no-store", "--reference", "none", "--trace", str(trace)], trace,
         "trace written to"),
        (["simulate", str(good), "A=cpu,B=cpu", "--trace", str(trace)], trace, "trace written to"),
        (["init", "chain", "--out", str(starter)], starter, "wrote"),
    ]
    raw = name.split(".")[0]
    for args, path, fragment in cases:
        code, out, err = cli(capsys, *args)
        said = out + err
        assert code == 0, (args, said)
        shown = str(path).encode("unicode_escape").decode("ascii")
        assert shown in " ".join(said.split()) and fragment in said, (args, shown, said)
        assert raw not in said, (args, said)
        assert not any(ch in said for ch in name if (ord(ch) < 32 and ch != "\n") or 0x7f <= ord(ch) <= 0x9f
                       or 0x202a <= ord(ch) <= 0x202e), (args, said)


def test_validate_warns_of_what_a_scenario_holds_that_loading_ignores_or_reorders(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Accepted (exit 0, 'ok' on stdout), but said on stderr, naming the file and the tool or line: an inline
    card no node uses (ignored), arrival times out of order, inline or in the workload's file (sorted)."""
    clean = write(tmp_path, "clean.yaml", GOOD)
    code, out, err = cli(capsys, "validate", str(clean))
    assert code == 0 and out.startswith("ok: scenario") and err == ""

    spare = write(tmp_path, "spare.yaml", edit("cards:\n", "cards:\n  spare: {cpu_ms: 5, gpu_ms: 1, load_ms: 2, "
                                                           "vram_mb: 10}\n"))
    inline = write(tmp_path, "inline.yaml", GOOD + "workload: {arrivals: trace, times_ms: [0, 100, 50, 200]}\n")
    write(tmp_path, "arr.txt", "0\n100\n# a comment\n50\n200\n")
    write(tmp_path, "arr.yaml", "[0, 10, 20, 5]\n")
    in_text = write(tmp_path, "text.yaml", GOOD + "workload: {arrivals: trace, file: arr.txt}\n")
    in_yaml = write(tmp_path, "list.yaml", GOOD + "workload: {arrivals: trace, file: arr.yaml}\n")
    sorted_file = write(tmp_path, "ok_arr.txt", "0\n0\n10\n")
    in_order = write(tmp_path, "in_order.yaml", GOOD + f"workload: {{arrivals: trace, file: {sorted_file.name}}}\n")
    for path, fragments in [
        (spare, (f"file {spare}: cards.spare: no node uses tool 'spare'; its card is ignored",)),
        (inline, (f"file {inline}: arrival times out of order: workload.times_ms[2] (50 ms) comes after "
                  "workload.times_ms[1] (100 ms); they are sorted when read",)),
        (in_text, (f"file {tmp_path / 'arr.txt'} (workload.file of file {in_text})",
                   "line 4 (50 ms) comes after line 2 (100 ms)")),
        (in_yaml, (f"file {tmp_path / 'arr.yaml'}", "[3] (5 ms) comes after [2] (20 ms)")),
    ]:
        code, out, err = cli(capsys, "validate", str(path))
        message = " ".join(err.split())
        assert code == 0 and out.startswith("ok: scenario"), (path, out, err)
        assert message.startswith("warning:") and message.count("warning:") == 1, message
        for fragment in fragments:
            assert fragment in message, (fragment, message)
    code, out, err = cli(capsys, "validate", str(in_order))
    assert code == 0 and err == "", err
