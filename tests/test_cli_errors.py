"""Bad input and failing outputs at the command line: every one is exit 2 with one message that names
what was wrong and what is accepted (a "did you mean" where a name is close), never a traceback.
The faults are real: /dev/full for outputs, /dev/zero and a non-UTF-8 file for the LLM config, a
server that hangs up, a store folder that does not exist."""

from __future__ import annotations

import ast
import inspect
import json
import os
import pickle
import re
import socket
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.factories import run_cli as cli

from hetsched.bench.spec import parse_spec
from hetsched.cli.app import error_text
from hetsched.deciders import DeciderConfigError
from hetsched.exec import executor_class, make_executor
from hetsched.exec.options import SCHEMAS, check_options
from hetsched.llm import resolve_llm_config
from hetsched.model import ExecutorSpec, InputError, RunKey, UnknownNameError
from hetsched.model.errors import ParameterError
from hetsched.model.files import load_scenario, parse_mapping_text
from hetsched.model.limits import MAX_SEED
from hetsched.policies import make_policy
from hetsched.policies.decider_registry import DECIDERS, make_decider
from hetsched.search.reference import check_max_seconds
from hetsched.store import RunStore
from hetsched.tools.registry import import_tool_modules, is_registered, unregister_tool

CHAIN = load_scenario("chain")
full_device = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run a command that must be refused with exit 2; its stderr (one line, whitespace joined)."""
    code, _, err = cli(capsys, *args)
    assert code == 2, err
    return " ".join(err.split())


# ---------------------------------------------------------------- numbers out of range
@pytest.mark.parametrize("args", [
    ("run", "chain", "--rounds", "99999999999999999999"),
    ("run", "chain", "--seed", "99999999999999999999"),
    ("run", "chain", "--seed", "-1"),
    ("run", "chain", "--stop-after", "99999999999999999999"),
    ("gantt", "chain", "-p", "all-cpu", "--seed", "99999999999999999999"),
    ("bench", "--seeds", "99999999999999999999"),
])
def test_numbers_out_of_range_are_refused_before_anything_runs(capsys: pytest.CaptureFixture[str],
                                                               args: tuple[str, ...]) -> None:
    message = refused(capsys, *args)
    assert f"got {args[-1]}; accepted: an integer " in message, message


@pytest.mark.parametrize(("args", "option", "expected"), [
    (("run", "chain", "--rounds", "0"), "'--rounds' / '-r'", "got 0; accepted: an integer from 1 to 1000000000"),
    (("run", "chain", "--llm-timeout", "0"), "'--llm-timeout'", "got 0; accepted: a number >= 0.001"),
    (("run", "chain", "--llm-timeout", "soon"), "'--llm-timeout'",
     "got 'soon', not a number; accepted: a number >= 0.001"),
    (("run", "chain", "--llm-retries", "11"), "'--llm-retries'", "got 11; accepted: an integer from 0 to 10"),
    (("run", "S5", "--clients", "10001"), "'--clients'", "got 10001; accepted: an integer from 1 to 10000"),
    (("oracle", "S5", "--requests", "0"), "'--requests'", "got 0; accepted: an integer from 1 to 100000"),
    (("oracle", "chain", "--top", "0"), "'--top'", "got 0; accepted: an integer >= 1"),
    (("bench", "--jobs", "0"), "'--jobs' / '-j'", "got 0; accepted: an integer >= 1"),
    (("gantt", "chain", "-p", "all-cpu", "--rounds", "x1"), "'--rounds' / '-r'",
     "got 'x1', not an integer; accepted: an integer from 1 to 1000000000"),
    (("runs", "--limit", "-1"), "'--limit' / '-n'", "got -1; accepted: an integer >= 0"),
    (("profile", "vector_search", "--runs", "0"), "'--runs'", "got 0; accepted: an integer >= 1"),
])
def test_a_number_out_of_its_range_names_the_option_the_value_and_the_range(
        capsys: pytest.CaptureFixture[str], args: tuple[str, ...], option: str, expected: str) -> None:
    """Typer 0.29 says only "Input should be greater than or equal to 1": the CLI's one range message
    (``cli.app.range_message``) names the option, the value given and what is accepted; exit 2, no traceback."""
    code, out, err = cli(capsys, *args)
    message = " ".join(err.split())
    assert code == 2, out + err
    assert f"Invalid value for {option}: {expected}" in message, message
    assert "Traceback" not in err and "Input should be" not in err


def range_options() -> list[tuple[tuple[str, ...], str, str]]:
    """(command path, option, a value outside its range) for every option with min= or max= in the CLI."""
    import typer.main

    from hetsched.cli import app, load_commands

    load_commands()
    found: list[tuple[tuple[str, ...], str, str]] = []

    def walk(path: tuple[str, ...], command: Any) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk((*path, name), sub)
        for param in getattr(command, "params", []):
            low, high = getattr(param, "min", None), getattr(param, "max", None)
            if low is None and high is None:
                continue
            bad = low - 1 if low is not None else high + 1
            found.append((path, param.opts[0], str(bad)))

    walk((), typer.main.get_command(app))
    return found


def test_every_range_option_of_every_command_names_the_value_given(capsys: pytest.CaptureFixture[str]) -> None:
    options = range_options()
    assert len(options) >= 20 and {p[0] for p, _, _ in options} >= {"run", "bench", "oracle", "profile", "runs"}
    for path, option, bad in options:
        code, out, err = cli(capsys, *path, option, bad)
        message = " ".join(err.split())
        assert code == 2, (path, option, out + err)
        assert f"'{option}'" in message and f"got {bad}; accepted: " in message, (path, option, message)


def test_the_library_refuses_a_seed_or_rounds_that_cannot_be_stored() -> None:
    with pytest.raises(InputError, match=r"seed must be between 0 and 9223372036854775807"):
        RunKey(scenario=CHAIN, policy="all-gpu", seed=MAX_SEED + 1)
    with pytest.raises(InputError, match=r"rounds must be <= 1,000,000,000"):
        RunKey(scenario=CHAIN, policy="all-gpu", rounds=10**20)
    RunKey(scenario=CHAIN, policy="all-gpu", seed=MAX_SEED)  # the largest storable seed is accepted


# ---------------------------------------------------------------- outputs that cannot be written
@full_device
@pytest.mark.parametrize("args", [
    ("run", "chain", "-r", "1", "--no-store", "--reference", "none", "--trace", "/dev/full"),
    ("simulate", "chain", "A=cpu,B=cpu,C=cpu,D=cpu", "--trace", "/dev/full"),
    ("gantt", "chain", "-o", "/dev/full"),
])
def test_a_full_output_file_is_a_clear_error(capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    message = refused(capsys, *args)
    assert "/dev/full" in message and "no space left" in message and "wrote" not in message


def test_a_store_in_a_folder_that_does_not_exist_is_refused_not_created(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    folder = tmp_path / "no" / "such"
    message = refused(capsys, "run", "chain", "-r", "1", "--store", str(folder / "x.sqlite"))
    assert str(folder) in message and "does not exist" in message
    assert not (tmp_path / "no").exists()


# ---------------------------------------------------------------- the LLM settings
@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999/v1", "127.0.0.1:8000", "ftp://host/v1"])
def test_a_malformed_llm_url_is_refused_naming_it(capsys: pytest.CaptureFixture[str], url: str) -> None:
    with pytest.raises(DeciderConfigError, match="base_url"):
        resolve_llm_config({"base_url": url}, env={})
    message = refused(capsys, "run", "chain", "-p", "agentic", "--decider", "openai", "--llm-base-url", url,
                      "--no-store", "-r", "1")
    assert url in message and "http://127.0.0.1:8000/v1" in message


@pytest.mark.parametrize("kind", ["not UTF-8", "/dev/zero", "a folder"])
def test_an_llm_config_file_that_is_not_text_is_refused_unread(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    if kind == "not UTF-8":
        path = tmp_path / "llm.toml"
        path.write_bytes(b'model = "caf\xe9"\n')
        expected = "not UTF-8"
    elif kind == "/dev/zero":
        if not os.path.exists("/dev/zero"):
            pytest.skip("needs /dev/zero")
        path, expected = Path("/dev/zero"), "not a regular file"
    else:
        path, expected = tmp_path, "directory"
    with pytest.raises(DeciderConfigError, match=expected):
        resolve_llm_config(env={"HETSCHED_LLM_CONFIG": str(path)})
    monkeypatch.setenv("HETSCHED_LLM_CONFIG", str(path))
    message = refused(capsys, "run", "chain", "-p", "agentic", "--decider", "openai", "--no-store", "-r", "1")
    assert str(path) in message and expected in message


@pytest.fixture()
def hang_up_server() -> Iterator[str]:
    """A server that accepts every connection and closes it without a byte of answer."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    stop.set()
    sock.close()
    thread.join(5)


def test_a_server_that_hangs_up_is_not_reported_as_unreachable_and_attempts_leave_one_empty_run(
    capsys: pytest.CaptureFixture[str], hang_up_server: str, tmp_path: Path
) -> None:
    store = tmp_path / "runs.sqlite"
    ids = set()
    for _ in range(3):  # each failed attempt
        code, _, err = cli(capsys, "run", "chain", "-p", "agentic", "--decider", "openai", "--llm-base-url",
                           hang_up_server, "--llm-retries", "0", "-r", "2", "--store", str(store))
        assert code == 69, err
        text = " ".join(err.split())
        assert "closed it without a complete answer" in text and "cannot connect" not in text
        ids.add(text.split("hetsched run --resume ")[1].split()[0])
    with RunStore(store) as st:
        (info,) = st.runs()  # one empty run, continued by each attempt, not one per attempt
        assert info.rounds_done == 0 and ids == {info.id}


# ---------------------------------------------------------------- tool modules
def test_a_tool_module_is_found_as_a_file_or_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = textwrap.dedent("""
        from hetsched.tools import register_tool
        from hetsched.tools.base import Tool

        class Mine(Tool):
            name = "{name}"

        register_tool(Mine)
    """)
    (tmp_path / "cliux_tools_a.py").write_text(body.format(name="cliux_tool_a"))
    (tmp_path / "cliux_tools_b.py").write_text(body.format(name="cliux_tool_b"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cliux_tools_a", raising=False)
    monkeypatch.delitem(sys.modules, "cliux_tools_b", raising=False)
    try:
        import_tool_modules(["./cliux_tools_a.py"])
        assert is_registered("cliux_tool_a")
        import_tool_modules("cliux_tools_b")  # one name, not a list of characters
        assert is_registered("cliux_tool_b")
    finally:
        unregister_tool("cliux_tool_a")
        unregister_tool("cliux_tool_b")
        sys.modules.pop("cliux_tools_a", None)
        sys.modules.pop("cliux_tools_b", None)
    with pytest.raises(InputError, match="not found"):
        import_tool_modules(["./missing_tools.py"])
    with pytest.raises(InputError, match="cannot be imported"):
        import_tool_modules(["no_such_module_anywhere"])
    # the profiler's flag takes a file path too (it raised TypeError), and a near-miss tool name is suggested
    message = refused(capsys, "profile", "--tool-module", "./cliux_tools_a.py", "whisper_smal")
    assert "did you mean 'whisper_small'" in message
    unregister_tool("cliux_tool_a")
    sys.modules.pop("cliux_tools_a", None)


# ---------------------------------------------------------------- executor options: a declared schema
def test_every_executor_declares_exactly_its_constructors_options() -> None:
    from hetsched.exec import executor_names

    assert set(SCHEMAS) == set(executor_names())
    for name, schema in SCHEMAS.items():
        params = inspect.signature(executor_class(name)).parameters
        keywords = {p for p, v in params.items() if v.kind is v.KEYWORD_ONLY or (p != "scenario" and v.default
                                                                                   is not v.empty)}
        assert {o.name for o in schema} == keywords, name


@pytest.mark.parametrize(("options", "expected"), [
    ({"timeout_s": "abc"}, "timeout_s = 'abc' is not accepted; timeout_s takes a number > 0"),
    ({"timeout_s": -1}, "timeout_s = -1 is not accepted"),
    ({"devce": "standin"}, "no option 'devce'; accepted: device, size"),
    ({"device": "standn"}, "device 'standn' is not known; accepted: auto, cuda, standin, none (or cuda:N); did you mean 'standin'?"),
    ({"cpu_threads": 1.5}, "cpu_threads = 1.5 is not accepted; cpu_threads takes an integer >= 1"),
    ({"check_memory": "yes"}, "check_memory takes true or false"),
    ({"tool_modules": 5}, "tool_modules = 5 is not accepted"),
])
def test_executor_option_values_are_checked_against_the_schema(options: dict[str, object], expected: str) -> None:
    with pytest.raises(InputError) as exc:
        check_options("local", options)
    assert expected in str(exc.value)
    if "devce" in options:
        assert isinstance(exc.value, UnknownNameError) and "did you mean 'device'?" in str(exc.value)


def test_executor_option_values_are_converted_as_the_constructor_takes_them() -> None:
    assert check_options("local", {"tool_modules": "my_tools"}) == {"tool_modules": ["my_tools"]}
    assert check_options("local", {"tool_modules": "a, b"}) == {"tool_modules": ["a", "b"]}
    assert check_options("local", {"timeout_s": 60, "cpu_threads": "2", "device": "CUDA:1"}) == {
        "timeout_s": 60.0, "cpu_threads": 2, "device": "cuda:1"}
    assert check_options("sim", {"noise": "false"}) == {"noise": False}


def test_the_command_line_reports_a_bad_executor_option_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    message = refused(capsys, "run", "chain", "-e", "local", "-X", "timeout_s=abc", "--no-store", "-r", "1")
    assert "timeout_s = 'abc'" in message and "a number > 0" in message
    message = refused(capsys, "run", "chain", "-e", "local", "-X", "devce=standin", "--no-store", "-r", "1")
    assert "did you mean 'device'?" in message and "accepted: device" in message
    message = refused(capsys, "run", "chain", "-e", "sim", "-X", "noise=maybe", "--no-store", "-r", "1")
    assert "noise = 'maybe'" in message


def test_sim_options_reach_the_simulator() -> None:
    with make_executor(ExecutorSpec("sim", {"noise": "false"}), CHAIN) as ex:
        assert ex.noise is False  # type: ignore[attr-defined]


class Buggy:
    """A policy whose constructor has a bug (a TypeError inside): it must surface, not read as 'bad options'."""

    def __init__(self, depth: int = 1) -> None:
        raise TypeError("a bug inside the policy")


def test_policy_options_are_checked_by_name_and_internal_errors_are_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(InputError, match=r"policy 'ucb1' has no option 'max_joint_node'; did you mean "
                                         r"'max_joint_nodes'\?; it takes max_joint_nodes"):
        make_policy("ucb1", max_joint_node=3)
    with pytest.raises(InputError, match="it takes no options"):
        make_policy("all-gpu", depth=2)
    with pytest.raises(UnknownNameError, match="did you mean 'agentic'"):
        make_policy("agentc")
    from hetsched import policies

    monkeypatch.setitem(policies._REGISTRY, "buggy", f"{__name__}:Buggy")
    with pytest.raises(TypeError, match="a bug inside the policy"):
        make_policy("buggy", depth=2)


class BuggyDecider:
    """A decider whose constructor has a bug (a TypeError inside)."""

    def __init__(self, depth: int = 1) -> None:
        raise TypeError("a bug inside the decider")


def test_decider_options_are_checked_by_name_and_internal_errors_are_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(DeciderConfigError, match=r"decider 'rules' has no option 'margn'; did you mean 'margin'\?; "
                                                 r"it takes margin, explore_gain, search_evaluations"):
        make_policy("agentic", decider="rules", margn=0.1)
    with pytest.raises(DeciderConfigError, match="decider 'argmin' has no option 'x'; it takes no options"):
        make_decider("argmin", x=1)
    assert make_decider("rules", margin=0.1).name == "rules"
    monkeypatch.setitem(DECIDERS, "buggy", f"{__name__}:BuggyDecider")
    with pytest.raises(TypeError, match="a bug inside the decider"):
        make_decider("buggy", depth=2)


# ---------------------------------------------------------------- library parameters, CLI flags
def test_library_errors_name_the_parameter_and_the_cli_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from hetsched.bench import BenchConfig, PolicySpec, load_scenarios

    scenarios = load_scenarios(["S2"])
    for kwargs, message in (({"rounds": 0}, "rounds must be >= 1, got 0"),
                            ({"jobs": 0}, "jobs must be >= 1, got 0"),
                            ({"seeds": ()}, "seeds must be >= 1"),
                            ({"reference": "none"}, "reference none: the bench's tables compare"),
                            ({"reference_seconds": 0}, "reference_seconds must be > 0 seconds, got 0")):
        with pytest.raises(ParameterError) as caught:
            BenchConfig(**{"specs": (PolicySpec("all-gpu"),), "scenarios": scenarios, **kwargs})
        assert str(caught.value).startswith(message) and "--" not in str(caught.value)
    with pytest.raises(UnknownNameError, match=r"^policy 'magic': Unknown policy 'magic'"):
        parse_spec("magic")
    with pytest.raises(ParameterError, match=r"^max_seconds must be > 0 seconds, got -1$"):
        check_max_seconds(-1)
    # the CLI shows the flag that sets each parameter
    code, _, err = cli(capsys, "bench", "-p", "magic")
    assert code == 2 and "--policy 'magic': Unknown policy 'magic'" in err
    code, _, err = cli(capsys, "run", "S2", "--reference", "best", "--no-store")
    assert code == 2 and "--reference 'best': unknown value; accepted: auto, oracle, best-known, none" in err
    code, _, err = cli(capsys, "bench", "--reference", "none", "--scenario", "S2", "--out", "/nonexistent/x")
    assert code == 2 and "--reference none: the bench's tables compare" in err
    assert error_text(ParameterError("not_a_flag", "must be odd")) == "not_a_flag must be odd"
    # an LLM hint names settings ('the LLM setting base_url'); the CLI shows their flags
    from hetsched.llm.base import LLMUnreachableError

    hint = LLMUnreachableError("no answer; check the LLM setting base_url, or raise the LLM setting timeout_s")
    assert error_text(hint) == "no answer; check --llm-base-url, or raise --llm-timeout"
    # it crosses process boundaries (bench workers) whole
    back = pickle.loads(pickle.dumps(ParameterError("rounds", "must be >= 1, got 0")))
    assert (back.param, back.problem, str(back)) == ("rounds", "must be >= 1, got 0", "rounds must be >= 1, got 0")



@pytest.mark.parametrize(("library", "shown"), [
    ("choose another file with `store` / HETSCHED_STORE", "choose another file with --store / HETSCHED_STORE"),
    ("Use `reference='best-known'`, or raise `max_seconds`", "Use --reference best-known, or raise --max-seconds"),
    ("continue the run with `hetsched.resume('a1b2')`", "continue the run with `hetsched run --resume a1b2`"),
    ("listed by `RunStore('/x y/runs.sqlite').runs()`", "listed by `hetsched runs --store '/x y/runs.sqlite'`"),
    ("use `hetsched.reference(scenario)`", "use `hetsched reference SCENARIO`"),
    ("pass it with the executor option tool_modules=m", "pass it with --executor-option tool_modules=m"),
    ("check the LLM setting base_url", "check --llm-base-url"),
    ("or omit `address` to start a local cluster", "or omit --ray-address to start a local cluster"),
    ("Without `ranking` the bounded search", "Without --all the bounded search"),
    # what the CLI does not know stays as written: a shell line, another name, another call
    ("`sqlite3 a.sqlite .recover | sqlite3 b.sqlite`", "`sqlite3 a.sqlite .recover | sqlite3 b.sqlite`"),
    ("`margin` and `RunStore(p).close()` and `hetsched.run(x, y)`",
     "`margin` and `RunStore(p).close()` and `hetsched.run(x, y)`"),
])
def test_library_hints_name_the_api_and_the_cli_shows_flags_and_commands(library: str, shown: str) -> None:
    assert error_text(InputError(library)) == shown


def test_hints_of_tool_and_card_errors_name_the_parameter(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    from hetsched.exec.toolset import scenario_tools

    flow = tmp_path / "flow.yaml"
    flow.write_text("cards:\n  mine: {cpu_ms: 10, gpu_ms: 1, vram_mb: 100}\nnodes: {A: mine}\n")
    with pytest.raises(InputError) as caught:
        scenario_tools(load_scenario(flow), "tiny")
    assert "the executor option tool_modules=my_module" in str(caught.value)
    assert "--executor-option tool_modules=my_module" in error_text(caught.value)
    lib = tmp_path / "lib.yaml"
    lib.write_text("tools:\n  mine: {cpu_ms: 10, gpu_ms: 1, vram_mb: 100}\n")
    flow.write_text(f"tools: {lib}\nnodes: {{A: mine}}\n")
    with pytest.raises(InputError) as caught:
        load_scenario(flow, library={})
    assert "another library was given too (`library`)" in str(caught.value)
    assert "another library was given too (--tools)" in error_text(caught.value)
    assert "(--tools)" in refused(capsys, "bench", "--tools", str(lib), "--scenario", str(flow), "--quick",
                                  "--out", str(tmp_path / "out"))
    assert "give a bench's output folder (--out)" in refused(capsys, "report", str(tmp_path))


_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
"""A CLI flag inside a message (``--store``, not ``a--b`` nor the ``--`` of a diff)."""

LIBRARY_MESSAGE_FLAGS_ALLOWED = {
    # other programs' command lines, which only their own flags can say:
    ("exec/ray_plan.py", "--num-gpus"),  # `ray start --num-gpus 1 --resources ...`: Ray's CLI starts a node
    ("exec/ray_plan.py", "--resources"),
    ("exec/ray.py", "--head"),  # `ray start --head` prints a cluster's address (Ray's CLI)
    # copying a bundled file has no library call that writes the copy (starter_text only returns its text)
    ("profiling/refresh.py", "hetsched init"),
}
"""(file under src/hetsched, flag or command) pairs a library message may name, each justified above."""


def _message_strings(tree: ast.Module) -> set[tuple[int, str]]:
    """(line, text) of every string that can end up in an exception's message: the constants (f-string
    parts included) of each ``raise X(...)`` and each ``X...Error(...)`` built to be returned or raised,
    those of the local variables it uses (``then = ...``), and those returned by the module's functions
    it calls (hint helpers such as ``recovery_hint``)."""
    functions: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.setdefault(node.name, []).append(node)
    assigned: dict[int, dict[str, list[ast.expr]]] = {}

    def values(scope: ast.AST, name: str) -> list[ast.expr]:
        """The values assigned to ``name`` anywhere in ``scope``, in ``ast.walk`` order (one walk a scope:
        walking the whole module again for each name read made this test take minutes)."""
        if id(scope) not in assigned:
            table: dict[str, list[ast.expr]] = {}
            for assign in ast.walk(scope):
                if isinstance(assign, ast.Assign):
                    for target in {t.id for t in assign.targets if isinstance(t, ast.Name)}:
                        table.setdefault(target, []).append(assign.value)
            assigned[id(scope)] = table
        return assigned[id(scope)].get(name, [])

    returns: dict[int, list[ast.expr]] = {}

    def returned(fn: ast.AST) -> list[ast.expr]:
        """The values ``fn`` returns (``return x``), in ``ast.walk`` order, one walk a function."""
        if id(fn) not in returns:
            returns[id(fn)] = [r.value for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]
        return returns[id(fn)]

    def strings(expr: ast.AST, scope: ast.AST, seen: set[str]) -> Iterator[tuple[int, str]]:
        for node in ast.walk(expr):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield node.lineno, node.value
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and f"={node.id}" not in seen:
                seen.add(f"={node.id}")
                for value in values(scope, node.id):
                    yield from strings(value, scope, seen)
            elif isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name in functions and name not in seen:
                    seen.add(name)
                    for fn in functions[name]:
                        for value in returned(fn):
                            yield from strings(value, fn, seen)

    def is_error(call: ast.Call) -> bool:
        name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
        return name.endswith(("Error", "Exception", "TooLong", "Refused"))

    found: set[tuple[int, str]] = set()

    def visit(node: ast.AST, scopes: list[ast.AST]) -> None:
        """Each error built in ``node``, looked up in the module and in every function around it."""
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            for scope in scopes:
                found.update(strings(node.exc, scope, set()))
        elif isinstance(node, ast.Call) and is_error(node):
            for scope in scopes:
                found.update(strings(node, scope, set()))
        inner = [*scopes, node] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else scopes
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, [tree])
    return found


def test_no_library_error_message_names_a_cli_flag_or_command() -> None:
    """Library code names parameters and API calls; only ``hetsched.cli`` speaks in flags and commands
    (``cli_words`` maps a hint's backticked names). A flag anywhere in a library message fails, and so
    does a ``hetsched COMMAND`` line, unless allowed above with its reason."""
    from hetsched.cli import COMMANDS

    names = "|".join(re.escape(c) for c in sorted(COMMANDS, key=len, reverse=True))
    command = re.compile(rf"\bhetsched (?:{names})\b(?! store)")  # "a hetsched run store" is the file's kind
    src = Path(__file__).resolve().parents[1] / "src" / "hetsched"
    found: list[str] = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel.startswith("cli/"):
            continue
        for line, text in sorted(_message_strings(ast.parse(path.read_text(encoding="utf-8")))):
            flags = [f for f in _FLAG.findall(text) if (rel, f) not in LIBRARY_MESSAGE_FLAGS_ALLOWED]
            commands = [c for c in command.findall(text) if (rel, c) not in LIBRARY_MESSAGE_FLAGS_ALLOWED]
            if flags or commands:
                found.append(f"{rel}:{line}: {flags + commands} in {text[:70]!r}")
    assert not found, "library errors that speak CLI:\n" + "\n".join(found)


def test_the_check_for_cli_words_finds_them() -> None:
    """The check above is not vacuous: it finds a flag deep in a message, in a returned error and in
    a hint helper the message calls."""
    code = textwrap.dedent('''
        def hint(path):
            return f"or use --store {path}"
        def f(x):
            if x:
                raise ValueError(f"bad {x}; " + hint(x))
            then = "continue with `hetsched run --resume`"
            return StoreError("see `hetsched runs` or raise --max-seconds; " + then)
    ''')
    texts = " ".join(t for _, t in sorted(_message_strings(ast.parse(code))))
    assert sorted(_FLAG.findall(texts)) == ["--max-seconds", "--resume", "--store"] and "hetsched runs" in texts
    assert not _FLAG.findall("a--b, x -- y, a-- b")


# ---------------------------------------------------------------- names and keys: what was meant
def test_close_names_are_suggested(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "did you mean 'S13'" in refused(capsys, "show", "S133")
    assert "did you mean 'S13'" in refused(capsys, "show", "s13")
    flow = tmp_path / "flow.yaml"
    flow.write_text("nodes: {A: whisper_smal}\n")
    message = refused(capsys, "validate", str(flow))
    assert str(flow) in message and "did you mean 'whisper_small'" in message
    flow.write_text("nodes: {A: whisper_small}\nmachin: {cpu_cores: 4}\n")
    assert "did you mean 'machine'" in refused(capsys, "validate", str(flow))


@pytest.mark.parametrize(("args", "meant"), [
    (("run", "chain", "-p", "agentic", "--decider", "rule", "--no-store", "-r", "1"), "rules"),
    (("run", "chain", "--reference", "orcle", "--no-store", "-r", "1"), "oracle"),
    (("run", "chain", "-e", "lcoal", "--no-store", "-r", "1"), "local"),
    (("schema", "scenaro"), "scenario"),
    (("bench", "-p", "agentc", "--scenario", "chain"), "agentic"),
    (("runs", "--status", "finishd"), "finished"),
])
def test_every_name_given_on_the_command_line_suggests_the_close_one(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], meant: str
) -> None:
    assert f"did you mean '{meant}'" in refused(capsys, *args)


def test_an_unknown_machine_key_lists_the_accepted_ones(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text("nodes: {A: bert_base}\nmachine: {vram_budget: 4000}\n")
    message = refused(capsys, "validate", str(flow))
    assert "machine.vram_budget: unknown key 'vram_budget'" in message
    assert "accepted keys:" in message and "vram_budget_mb" in message and "did you mean 'vram_budget_mb'" in message


@pytest.mark.parametrize(("keys", "shown"), [("1: bert_base\n  true: bert_base", "keys 1 and true"),
                                             ("A: bert_base\n  A: e5_large", "duplicate key 'A'")])
def test_keys_that_read_the_same_are_named_as_written(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      keys: str, shown: str) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text(f"nodes:\n  {keys}\n")
    message = refused(capsys, "validate", str(flow))
    assert shown in message and "True" not in message


# ---------------------------------------------------------------- mappings
def test_what_oracle_prints_simulate_takes_back(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "oracle", "chain")
    assert code == 0
    printed = out.splitlines()[0].split(": ", 1)[1].split("  E2E")[0]  # 'oracle for chain: A:gpu_now B:cpu ...'
    assert parse_mapping_text(printed).to_dict() == {n: p for n, p in (x.split(":") for x in printed.split())}
    code, out, err = cli(capsys, "simulate", "chain", printed, "--no-noise", "--json")
    assert code == 0, err
    assert json.loads(out)["feasible"]


def test_a_bad_mapping_file_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("A: cpu\nB: cpu\n")
    message = refused(capsys, "simulate", "chain", str(path))
    assert str(path) in message and "misses nodes" in message


# ---------------------------------------------------------------- output for pipes
def test_piped_show_keeps_long_tool_names_whole(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    name = "a_tool_with_a_name_far_longer_than_any_terminal_column_would_let_a_table_show_" + "x" * 40
    flow = tmp_path / "flow.yaml"
    flow.write_text(f"cards:\n  {name}: {{cpu_ms: 10, gpu_ms: 2, load_ms: 5, vram_mb: 100}}\nnodes: {{A: {name}}}\n")
    code, out, err = cli(capsys, "show", str(flow))
    assert code == 0, err
    card_lines = [line for line in out.splitlines() if line.startswith(name)]
    assert card_lines and "10" in card_lines[0]


# ---------------------------------------------------------------- Ctrl-C
def test_ctrl_c_on_bench_says_what_was_kept_and_how_to_resume(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    out_dir = tmp_path / "out"
    args = ["bench", "--scenario", "chain", "-p", "all-gpu", "--seeds", "400", "-r", "5", "-j", "1",
            "--no-progress", "--reference", "oracle", "-o", str(out_dir)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "hetsched", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    store = out_dir / "runs.sqlite"
    deadline = time.monotonic() + 240
    finished = 0
    while finished < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
        if store.exists():
            with RunStore(store, read_only=True) as st:
                finished = len(st.runs(status="finished"))
    assert finished >= 2 and proc.poll() is None, "the bench did not get going"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    text = " ".join(err.split())
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted:" in text and str(store) in text
    assert "of 400 runs finished and are kept" in text and "resume with hetsched bench --scenario chain" in text


@pytest.mark.parametrize("given", ["tool_modules=cliux_real_tools", "tool_modules=./cliux_real_tools.py"])
def test_the_local_executor_runs_a_tool_from_a_module_in_the_current_folder(tmp_path: Path, given: str) -> None:
    import subprocess

    (tmp_path / "cliux_real_tools.py").write_text(textwrap.dedent("""
        from hetsched.tools import FunctionTool, register_tool

        def load(device):
            return None

        def run(model, inputs):
            return "ok"

        register_tool(FunctionTool("cliux_echo", load, run, has_gpu=False))
    """))
    (tmp_path / "flow.yaml").write_text("cards:\n  cliux_echo: {cpu_ms: 1, vram_mb: 0, has_gpu: false}\n"
                                        "nodes: {A: cliux_echo}\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    proc = subprocess.run([sys.executable, "-m", "hetsched", "run", "flow.yaml", "-e", "local", "-X", given,
                           "-X", "device=none", "-r", "1", "--no-store", "--reference", "none", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (round_0,) = json.loads(proc.stdout)["rounds"]
    assert round_0["feasible"]


def _ctrl_c_inside_a_pydantic_serializer(monkeypatch: pytest.MonkeyPatch, after_calls: int) -> None:
    """Make the store's ``create_run`` meet a Ctrl-C inside a pydantic field serializer on its call number
    ``after_calls + 1``: pydantic hands the KeyboardInterrupt back as its own PydanticSerializationError (what
    a CI run met when the SIGINT landed in the store's scenario serialisation)."""
    import pydantic

    from hetsched.cli.app import _on_ctrl_c

    class Interrupted(pydantic.BaseModel):
        x: int = 0

        @pydantic.field_serializer("x")
        def _x(self, value: int) -> int:
            _on_ctrl_c(2, None)  # what the SIGINT handler does: remember, then raise KeyboardInterrupt
            return value

    real = RunStore.create_run
    calls = [0]

    def create_run(self: RunStore, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] > after_calls:
            Interrupted().model_dump()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RunStore, "create_run", create_run)


def test_a_ctrl_c_a_library_wrapped_still_exits_130_with_what_the_bench_kept(
        capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import pydantic_core

    _ctrl_c_inside_a_pydantic_serializer(monkeypatch, after_calls=0)
    with pytest.raises(pydantic_core.PydanticSerializationError, match="KeyboardInterrupt"):
        RunStore.create_run(None, None)  # type: ignore[arg-type]  # the wrapped interrupt the CLI must recognise
    monkeypatch.undo()
    _ctrl_c_inside_a_pydantic_serializer(monkeypatch, after_calls=2)
    out_dir = tmp_path / "out"
    code, _, err = cli(capsys, "bench", "--scenario", "chain", "-p", "all-gpu", "--seeds", "5", "-r", "2", "-j", "1",
                       "--no-progress", "--reference", "oracle", "-o", str(out_dir))
    text = " ".join(err.split())
    assert code == 130, err
    said = re.search(r"interrupted: (\d+) of 5 runs finished and are kept", text)
    assert said is not None, err
    with RunStore(out_dir / "runs.sqlite", read_only=True) as st:
        finished = len(st.runs(status="finished"))
    assert finished == int(said.group(1)) and 1 <= finished < 5  # what finished before the Ctrl-C is kept


def test_a_ctrl_c_a_library_wrapped_in_a_run_exits_130(
        capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _ctrl_c_inside_a_pydantic_serializer(monkeypatch, after_calls=0)
    code, _, err = cli(capsys, "run", "chain", "-r", "2", "--store", str(tmp_path / "runs.sqlite"))
    assert code == 130, err
    assert "interrupted" in err


def test_an_error_after_the_interrupt_flag_was_cleared_is_not_taken_for_a_ctrl_c(
        capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A command starts with no Ctrl-C remembered: an earlier command's interrupt does not turn a later bad
    input into exit 130."""
    from hetsched.cli.app import _on_ctrl_c, interrupted

    with pytest.raises(KeyboardInterrupt):
        _on_ctrl_c(2, None)
    assert interrupted()
    code, _, err = cli(capsys, "run", str(tmp_path / "missing.yaml"))
    assert code == 2 and "missing.yaml" in err
