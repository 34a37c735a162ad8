"""The command-line app (``hetsched.cli.app``) as a new user meets it: help with examples and plain
metavars, one meaning per short option, --version, documented exit codes, user text that can never break or spoof the
output (rich markup, control characters), bounded output for huge inputs, and `hetsched gantt`.

Commands run in-process through the real entry point (``hetsched.cli.main``, the error boundary).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import run_cli as cli

from hetsched import __version__
from hetsched.cli import app, load_commands
from hetsched.cli.app import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_NO_RESULT, EXIT_UNEXPECTED, plain, safe
from hetsched.model import InputError

ROOT = Path(__file__).resolve().parents[1]


def commands() -> list[str]:
    import typer.main

    load_commands()  # the CLI loads command modules lazily; the whole tree here
    group = typer.main.get_command(app)
    return sorted(group.commands)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- help
def test_every_command_has_examples_plain_metavars_and_one_way_to_show_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert {"run", "show", "oracle", "simulate", "validate", "bench", "report", "runs", "show-run", "gantt",
            "scenarios", "schema"} <= set(commands())
    for name in commands():
        code, out, _ = cli(capsys, name, "--help")
        assert code == 0, name
        assert "Examples:" in out and "hetsched " + name in out.split("Examples:")[1], name
        assert not re.search(r"<(str|int|float|bool|path|list)", out), (name, out)
        assert "{" not in out.splitlines()[0], out.splitlines()[0]  # usage: SCENARIO, not {SCENARIO}
        flat = out.replace("\n", " ")
        assert "(default" not in flat and "[default: (" not in flat, name  # defaults only as [default: X]
        assert not re.search(r"\s\.(\s|$)", out), name  # a stray " ." is markup eaten from the help


def test_a_short_option_means_one_thing_in_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    import typer.main

    load_commands()
    group = typer.main.get_command(app)
    seen: dict[str, tuple[str, str]] = {}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for param in command.params:
            shorts = [o for o in param.opts if re.fullmatch(r"-[A-Za-z]", o)]
            longs = [o for o in param.opts if o.startswith("--")]
            for short in shorts:
                if short in seen:
                    assert seen[short][1] == longs[0], f"{short} is {seen[short][1]} in {seen[short][0]} " \
                                                       f"but {longs[0]} in {name}"
                seen[short] = (name, longs[0])
    assert seen["-s"][1] == "--seed" and seen["-p"][1] == "--policy"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "--version")
    assert code == 0 and out.strip() == f"hetsched {__version__}"


def test_readme_documents_every_exit_code() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Exit codes")[1].split("\n## ")[0]
    for code in (0, EXIT_UNEXPECTED, EXIT_BAD_INPUT, EXIT_NO_RESULT, EXIT_INTERRUPTED):
        assert f"| {code} |" in section, code


# ---------------------------------------------------------------------------- exit codes
def test_every_round_infeasible_says_so_and_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "run", "vram_3way", "--policy", "all-gpu", "--rounds", "2")
    assert code == EXIT_NO_RESULT and "no feasible round: all 2 rounds were infeasible (oom)" in err
    code, out, err = cli(capsys, "run", "vram_3way", "--policy", "all-gpu", "--rounds", "2", "--json")
    assert code == EXIT_NO_RESULT and json.loads(out)["rounds"][0]["feasible"] is False
    code, _, _ = cli(capsys, "run", "vram_3way", "--policy", "oracle", "--rounds", "1")
    assert code == 0


def test_simulate_prints_nothing_when_its_reference_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hetsched.search.reference as search_reference

    def refuse(*args: object, **kwargs: object) -> None:
        raise InputError("scenario 'fanout': too large")

    monkeypatch.setattr(search_reference, "reference", refuse)  # simulate imports it when it runs
    code, out, err = cli(capsys, "simulate", "fanout", "A=cpu,B=cpu,C=cpu,D=cpu")
    assert code == EXIT_BAD_INPUT and out == "" and "too large" in err


def test_simulate_on_a_space_too_large_for_the_oracle_uses_a_best_known_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.yaml"
    n = 60  # 3^60 mappings: the exact search's time estimate is far over the default budget
    path.write_text(yaml.safe_dump({"mode": "three_way", "nodes": {f"n{i}": "bert_base" for i in range(n)}}))
    code, out, _ = cli(capsys, "simulate", str(path), ",".join(f"n{i}=cpu" for i in range(n)), "--no-noise")
    assert code == 0 and "x best-known" in out


def test_bench_tools_beside_a_scenario_naming_its_own_library_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tmp_path / "lib.yaml"
    lib.write_text("tools:\n  t: {cpu_ms: 10, gpu_ms: 1}\n")
    own = tmp_path / "own.yaml"
    own.write_text("tools: lib.yaml\nnodes: {A: t}\n")
    code, _, err = cli(capsys, "bench", "--scenario", str(own), "--tools", str(lib), "--out", str(tmp_path / "o"))
    assert code == EXIT_BAD_INPUT and f"file {own}: tools = 'lib.yaml' names this scenario's own" in err


# ---------------------------------------------------------------------------- user text in the output
MARKUP = ["[/]", "[/bold] x", "[bold]", "[link=http://x]y", "[red]a[/red]", "\\", "a\\[b", ":smile:", "[[/]]"]


def markup_scenario(tmp_path: Path, text: str) -> Path:
    doc = {"name": text or "n", "description": text, "shows": text,
           "cards": {text or "t": {"cpu_ms": 100, "gpu_ms": 5, "vram_mb": 100, "description": text}},
           "nodes": {"A" + text: text or "t", "B": text or "t"}, "edges": [{"src": "A" + text, "dst": "B"}]}
    path = tmp_path / "markup.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("text", MARKUP)
def test_markup_in_names_and_descriptions_is_printed_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = markup_scenario(tmp_path, text)
    node = "A" + text
    mapping = json.dumps({node: "gpu_now", "B": "cpu"})
    for args in (["show", str(path)], ["oracle", str(path)], ["validate", str(path)],
                 ["simulate", str(path), mapping], ["run", str(path), "--rounds", "2"]):
        code, out, err = cli(capsys, *args)
        assert code == 0, (args, err)
        shown = out.replace("\n", "")
        assert (text or "n") in shown and (args[0] == "validate" or node in shown), (args, out)
    code, out, _ = cli(capsys, "runs", "--json")
    run_id = json.loads(out)[0]["id"]
    code, out, _ = cli(capsys, "show-run", run_id, "--full")
    assert code == 0 and (text or "n") in out
    code, out, _ = cli(capsys, "runs")
    assert code == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.sampled_from("[]/\\ab:=#@ "), min_size=1, max_size=12).filter(
    lambda t: t == t.strip() and "=" not in t and "," not in t))
def test_any_bracketed_text_survives_show_and_simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = markup_scenario(tmp_path, text)
    code, out, err = cli(capsys, "show", str(path))
    assert code == 0 and f"A{text}" in out, err
    code, out, err = cli(capsys, "simulate", str(path), json.dumps({"A" + text: "cpu", "B": "cpu"}))
    assert code == 0, err


def render(markup: str) -> str:
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=10_000, color_system=None, emoji=False, highlight=False).print(markup, end="")
    return buf.getvalue()


TEMPLATES = ["{}", "[bold]{}[/]", "<{}>", "{} [red]z[/red]", "[bold]{}[/bold] [i]{}[/i]"]


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("[]/\\ab#@= :"), max_size=16), template=st.sampled_from(TEMPLATES))
def test_escaped_text_renders_exactly_as_written_in_any_markup(text: str, template: str) -> None:
    # rich.markup.escape is not exact ('a\\[b' loses its backslash; a trailing backslash doubles)
    markup = template.format(*[safe(text)] * template.count("{}"))
    expected = re.sub(r"\[/?(bold|red|i)?\]", "", template).format(*[text] * template.count("{}"))
    assert render(markup) == expected


def test_control_characters_never_reach_the_terminal_raw() -> None:
    for raw in ("\x1b[31mred", "nul\x00", "\u202eevil", "bell\x07", "\x9b2J"):
        shown = plain(raw)
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", shown), repr(shown)
    assert plain("tab\tnewline\n") == "tab\tnewline\n" and "\\n" in plain("a\nb", newlines=False)
    assert render(safe("[/]")) == "[/]" and render(safe(":smile:")) == ":smile:"


def test_error_messages_are_escaped_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"nodes": {"[/]\x1b": "bert_base"}}))
    code, _, err = cli(capsys, "show", str(path))
    assert code == EXIT_BAD_INPUT and "\x1b" not in err and "[/]" in err


# ---------------------------------------------------------------------------- big inputs, bounded output
def test_show_on_a_10000_node_chain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = 10_000
    path = tmp_path / "chain.yaml"
    path.write_text(yaml.safe_dump({"mode": "three_way", "nodes": {f"n{i}": "bert_base" for i in range(n)},
                                    "edges": [f"n{i} -> n{i + 1}" for i in range(n - 1)]}))
    code, out, _ = cli(capsys, "show", str(path))
    assert code == 0 and "n9999 [bert_base]  (sink)" in out
    assert "mapping space: 3^10000 (about 10^4771) mappings" in out  # 4,772 digits are not printed
    code, _, err = cli(capsys, "oracle", str(path))
    assert code == EXIT_BAD_INPUT and "3^10000" in err


def test_show_run_full_bounds_a_huge_reply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hetsched.cli.runs import FULL_LIMIT
    from hetsched.model import Attempt, DecisionRecord, Proposal, RoundRecord, RunKey
    from hetsched.model.files import load_scenario
    from hetsched.sim import Simulator
    from hetsched.store import RunStore

    sc = load_scenario("chain")
    m = sc.uniform(sc.placements[0])
    reply = "[/] \x1b[2J " * 400_000  # 4.4 MB of markup and terminal escapes
    with RunStore() as st:
        run_id = st.create_run(RunKey(scenario=sc, policy="agentic", rounds=1))
        decision = DecisionRecord(decider="openai", attempts=(Attempt(attempt=1, prompt="p", reply=reply),))
        st.record_round(run_id, RoundRecord(0, Proposal(m, "r", decision), Simulator(sc).run(m, seed=0)))
    code, out, _ = cli(capsys, "show-run", run_id, "--full")
    assert code == 0 and "more characters; --json has all of it" in out
    assert len(out) < 2 * FULL_LIMIT and "\x1b" not in out
    code, out, _ = cli(capsys, "show-run", run_id)
    assert code == 0 and "--full shows more" in out and len(out) < 20_000
    code, out, _ = cli(capsys, "show-run", run_id, "--json")
    assert json.loads(out)["rounds"][0]["decision"]["transcript"][0]["reply"] == reply


# ---------------------------------------------------------------------------- gantt
PNG = b"\x89PNG\r\n\x1a\n"


def test_gantt_for_any_scenario_mapping_or_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="hetsched gantt needs the 'bench' extra")
    for args in (["S13"], ["fanout", "--mapping", "A=cpu,B=gpu_now,C=gpu_now,D=cpu"],
                 ["vram_3way", "--policy", "greedy-mem", "--rounds", "2"], ["chain", "-p", "oracle"]):
        out_file = tmp_path / f"{args[0]}.png"
        code, out, err = cli(capsys, "gantt", *args, "--out", str(out_file))
        assert code == 0, err
        assert out_file.read_bytes().startswith(PNG) and f"wrote {out_file}" in out
    code, _, err = cli(capsys, "gantt", "S13", "--mapping", "A=cpu", "--policy", "oracle")
    assert code == EXIT_BAD_INPUT and "not both" in err
    code, _, err = cli(capsys, "gantt", "S13", "--mapping", "A=cpu,A=gpu_now")
    assert code == EXIT_BAD_INPUT and "placed twice" in err
    code, _, err = cli(capsys, "gantt", "vram_3way", "--policy", "all-gpu", "--rounds", "1",
                       "--out", str(tmp_path / "x.png"))
    assert code == EXIT_BAD_INPUT and "no feasible round" in err


def test_long_tables_are_printed_whole_and_aligned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = 300  # more tools and nodes than rich's Table handles quickly: plain padded text
    doc = {"cards": {f"tool[{i}]": {"cpu_ms": 10 + i, "gpu_ms": 5} for i in range(n)},
           "nodes": {f"N{i}": f"tool[{i}]" for i in range(n)}, "machine": {"vram_budget_mb": 1000}}
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(doc))
    code, out, _ = cli(capsys, "show", str(path))
    assert code == 0 and all(f"tool[{i}]" in out for i in range(n))
    mapping = json.dumps({f"N{i}": "cpu" for i in range(n)})
    code, out, _ = cli(capsys, "simulate", str(path), mapping, "--no-noise")
    rows = [ln for ln in out.splitlines() if re.match(r"N\d+ +tool\[", ln)]
    assert code == 0 and len(rows) == n
    ends = {len(ln) for ln in rows}  # right-aligned number columns end in the same place
    assert len(ends) == 1, ends


def test_show_gives_the_queue_speedup_of_the_load_the_model_charges(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Under the machine's ``cold_load_share`` the model charges a queued load its warm/cold expectation:
    ``show`` adds that column and its queue speedup uses it; without a cold share the table is as before."""
    doc = {"mode": "three_way",
           "cards": {"slow": {"cpu_ms": 400, "gpu_ms": 20, "load_ms": 100, "load_cold_ms": 900, "vram_mb": 100},
                     "warm": {"cpu_ms": 400, "gpu_ms": 20, "load_ms": 100, "vram_mb": 100}},
           "nodes": {"A": "slow", "B": "warm"}, "machine": {"vram_budget_mb": 1000, "cold_load_share": 0.5}}
    path = tmp_path / "cold.json"
    path.write_text(json.dumps(doc))
    code, out, err = cli(capsys, "show", str(path))
    assert code == 0, err
    header = next(ln for ln in out.splitlines() if ln.split()[:3] == ["tool", "cpu", "ms"])
    assert "load ms  expected load ms  VRAM MB" in header
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.split()[:1] in (["slow"], ["warm"])}
    assert rows["slow"][3:5] == ["100", "500"] and rows["slow"][8] == f"{400 / 520:.2f}x"  # 100 + 0.5 x 800
    assert rows["warm"][3:5] == ["100", "100"] and rows["warm"][8] == f"{400 / 120:.2f}x"
    doc["machine"] = {"vram_budget_mb": 1000}
    path.write_text(json.dumps(doc))
    code, out, _ = cli(capsys, "show", str(path))
    assert code == 0 and "expected load" not in out
    row = next(ln.split() for ln in out.splitlines() if ln.startswith("slow "))
    assert row[3] == "100" and row[7] == f"{400 / 120:.2f}x"


# a value away from its default for every machine field ``show`` prints only when set
SET_MACHINE_FIELDS = {"load_sharing": "copy", "cold_load_share": 0.5, "warm_reuse_ms": 2000.0,
                      "cross_core_slowdown": 0.25}


def test_show_prints_every_machine_field_that_changes_the_models_numbers(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The machine line names each field set away from its default, as a scenario file spells it, so a user
    sees why the queue column differs from the card's load_ms; at the defaults the line is as before."""
    from hetsched.cli.inspect import MACHINE_LINE_FIELDS
    from hetsched.model import Machine

    assert set(Machine.model_fields) == set(MACHINE_LINE_FIELDS) | set(SET_MACHINE_FIELDS)  # a new field: add it
    doc = {"mode": "three_way",
           "cards": {"slow": {"cpu_ms": 400, "gpu_ms": 20, "load_ms": 100, "load_cold_ms": 900, "vram_mb": 100}},
           "nodes": {"A": "slow"}, "machine": {"vram_budget_mb": 1000, **SET_MACHINE_FIELDS}}
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(doc))
    code, out, err = cli(capsys, "show", str(path))
    assert code == 0, err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("machine: ")]
    assert all(f"; {k} {v:g}" in line if isinstance(v, float) else f"; {k} {v}" in line
               for k, v in SET_MACHINE_FIELDS.items()), line
    assert "charged load_ms + 0.5 x (load_cold_ms - load_ms)" in out and "reused at load_ms" in out
    doc["machine"] = {"vram_budget_mb": 1000}
    path.write_text(json.dumps(doc))
    code, out, _ = cli(capsys, "show", str(path))
    (line,) = [ln for ln in out.splitlines() if ln.startswith("machine: ")]
    assert code == 0 and line == "machine: reference; 8 CPU cores; VRAM budget 1000 MB; kappa 0.1; noise cv 0.03; " \
        "PCIe 12 MB/ms" and "queued loads" not in out
