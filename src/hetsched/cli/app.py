"""The ``hetsched`` command's Typer app and consoles, which every command module registers on.

The entry point that loads the command modules and turns bad input into exit 2 is
``hetsched.cli.main`` (in the package's ``__init__``), so this module imports none of them.

Exit codes (README "Exit codes"): 0 success, 1 an unexpected error (a bug: please report it),
2 bad input or configuration, 3 the command ran but produced no usable result (every round
of a run was infeasible), 130 interrupted (Ctrl-C; stored rounds are kept).
"""

from __future__ import annotations

import ast
import re
import shlex
import signal
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

import typer
import typer.core
from rich.cells import cell_len
from rich.console import Console

from hetsched import __version__

EXIT_OK = 0
"""The command did what it was asked."""
EXIT_UNEXPECTED = 1
"""An unexpected error (a bug); Python prints the traceback."""
EXIT_BAD_INPUT = 2
"""Bad input or configuration: one message on stderr, no traceback."""
EXIT_NO_RESULT = 3
"""The command ran, but produced no usable result (e.g. every round of a run was infeasible)."""
EXIT_LLM_UNREACHABLE = 69
"""An LLM decider never got an answer from its server (``EX_UNAVAILABLE`` in sysexits.h)."""
EXIT_INTERRUPTED = 130
"""Interrupted with Ctrl-C (what was stored is kept)."""

_CTRL_C = threading.Event()
"""Set once a Ctrl-C (SIGINT) reached the command (see :func:`watch_ctrl_c`)."""


def _on_ctrl_c(signum: int, frame: FrameType | None) -> None:
    _CTRL_C.set()
    raise KeyboardInterrupt


@contextmanager
def watch_ctrl_c() -> Iterator[None]:
    """While a command runs, remember a Ctrl-C before raising Python's ``KeyboardInterrupt`` (from the main
    thread, and only where nobody else handles SIGINT), so that :func:`ctrl_c_wins` can tell an interrupt a
    library wrapped; the previous handler is back afterwards."""
    _CTRL_C.clear()
    mine = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if mine:
        signal.signal(signal.SIGINT, _on_ctrl_c)
    try:
        yield
    finally:
        if mine:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def interrupted() -> bool:
    """Has a Ctrl-C reached the command (with :func:`watch_ctrl_c` installed)?"""
    return _CTRL_C.is_set()


@contextmanager
def ctrl_c_wins() -> Iterator[None]:
    """Re-raise as ``KeyboardInterrupt`` an error raised after a Ctrl-C arrived.

    A ``KeyboardInterrupt`` raised while a library runs our callback comes out as the library's own error
    (seen: pydantic's ``PydanticSerializationError`` "Error calling function ...: KeyboardInterrupt" when
    Ctrl-C lands inside a field serializer), and the command must still say what it kept and exit 130.
    """
    try:
        yield
    except Exception as exc:
        if interrupted():
            raise KeyboardInterrupt from exc
        raise


PARAMETER_FLAGS: dict[str, str] = {
    "rounds": "--rounds",
    "seeds": "--seeds",
    "jobs": "--jobs",
    "policy": "--policy",
    "suite": "--suite",
    "scenarios": "--scenario",
    "refresh": "--refresh",
    "reference": "--reference",
    "max_seconds": "--max-seconds",
    "reference_seconds": "--max-seconds",
    "store": "--store",
    "library": "--tools",
    "ranking": "--all",
    "address": "--ray-address",
    "out": "--out",
}
"""Library parameter -> the flag that sets it: a library error names the parameter
(:class:`~hetsched.model.errors.ParameterError`), the CLI shows its flag. A hint inside a message
names a parameter in backticks, ``store`` or ``reference='best-known'`` (:func:`cli_words`)."""

API_COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "hetsched.resume": ("hetsched run --resume", ()),
    "hetsched.reference": ("hetsched reference", ()),
    "RunStore.runs": ("hetsched runs", ("store",)),
}
"""A library call a hint names in backticks -> the command that does the same, and the parameter
each positional argument of a constructor before the method is (``RunStore(path).runs()`` is
``hetsched runs --store PATH``)."""

OPTION_PHRASES: dict[str, str] = {"the executor option ": "--executor-option "}
"""A phrase a library hint names an option with -> the flag that sets it (LLM settings: :func:`llm_setting_flag`)."""


LLM_SETTING_FLAGS: dict[str, str] = {"timeout_s": "--llm-timeout"}
"""LLM settings whose flag is not ``--llm-`` + the setting's name with dashes."""
_LLM_SETTING = re.compile(r"\bthe LLM setting ([a-z][a-z_]*)\b")


def llm_setting_flag(name: str) -> str:
    """The flag that sets an LLM setting (an :class:`~hetsched.llm.LLMConfig` field)."""
    return LLM_SETTING_FLAGS.get(name, "--llm-" + name.replace("_", "-"))


def error_text(exc: BaseException) -> str:
    """An error's message as the CLI shows it: a parameter named by the flag that sets it, and the
    library names inside its hints in the CLI's words (:func:`cli_words`)."""
    param = getattr(exc, "param", None)
    named = getattr(exc, "named", None)
    if isinstance(param, str) and param in PARAMETER_FLAGS and callable(named):
        return cli_words(str(named(PARAMETER_FLAGS[param])))
    return cli_words(str(exc))


_BACKTICKED = re.compile(r"`([^`\n]+)`")
_OPTION_PHRASE = re.compile("|".join(re.escape(p) for p in OPTION_PHRASES))


def cli_words(text: str) -> str:
    """A library message in the CLI's words. Library hints name what to change as the Python API
    spells it; each is shown as its flag or command:

    - a parameter in backticks, bare or with a value: ```max_seconds``` -> ``--max-seconds``,
      ```reference='best-known'``` -> ``--reference best-known`` (:data:`PARAMETER_FLAGS`);
    - a call in backticks: ```hetsched.resume('ab12')``` -> ```hetsched run --resume ab12```
      (:data:`API_COMMANDS`);
    - "the LLM setting NAME" -> its ``--llm-`` flag; "the executor option K=V" -> ``--executor-option K=V``.

    What it does not know (a backticked shell line, another name) stays as written."""
    text = _BACKTICKED.sub(lambda m: _cli_mention(m[1]) or m[0], text)
    text = _OPTION_PHRASE.sub(lambda m: OPTION_PHRASES[m[0]], text)
    return _LLM_SETTING.sub(lambda m: llm_setting_flag(m[1]), text)


def _cli_mention(code: str) -> str | None:
    """One backticked library mention as the CLI writes it, None to keep it as it is."""
    def word(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):  # a placeholder: scenario -> SCENARIO
            return node.id.upper()
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)):
            return shlex.quote(str(node.value))
        return None

    def flag(name: str, value: ast.expr | None) -> str | None:
        if name not in PARAMETER_FLAGS:
            return None
        if value is None:
            return PARAMETER_FLAGS[name]
        shown = word(value)
        return None if shown is None else f"{PARAMETER_FLAGS[name]} {shown}"

    try:
        tree = ast.parse(f"f({code})", mode="eval").body  # a bare name, name=value, or a call
    except SyntaxError:
        return None
    assert isinstance(tree, ast.Call)
    if len(tree.args) + len(tree.keywords) != 1:
        return None
    if tree.keywords:
        kw = tree.keywords[0]
        return None if kw.arg is None else flag(kw.arg, kw.value)
    node = tree.args[0]
    if isinstance(node, ast.Name):
        return flag(node.id, None)
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    owner, args, keywords = node.func.value, list(node.args), list(node.keywords)
    named: list[tuple[str, ast.expr]] = []
    if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name):  # Class(...).method(...)
        key = f"{owner.func.id}.{node.func.attr}"
        params = API_COMMANDS.get(key, ("", ()))[1]
        if len(owner.args) > len(params) or owner.keywords:
            return None
        named = list(zip(params, owner.args, strict=False))
    elif isinstance(owner, ast.Name):
        key = f"{owner.id}.{node.func.attr}"
    else:
        return None
    if key not in API_COMMANDS:
        return None
    words = [API_COMMANDS[key][0]] + [word(a) for a in args]
    words += [flag(k.arg, k.value) if k.arg else None for k in keywords]
    words += [flag(name, value) for name, value in named]
    return None if None in words else "`" + " ".join(w for w in words if w) + "`"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hetsched {__version__}")
        raise typer.Exit(EXIT_OK)


_PLAIN_METAVARS = {"int": "N", "integer": "N", "float": "X", "path": "PATH", "file": "FILE", "directory": "DIR"}


def _type_label(param: Any, ctx: Any) -> str:
    """'int', 'float', 'path', 'str'...: the parameter's type name under any Typer/Click version."""
    kind = getattr(param, "type", None)
    if kind is not None and getattr(kind, "name", None):
        text = str(kind.name)
    else:
        try:
            text = str(param.display_type(ctx))
        except Exception:  # a help display detail must never break a command
            return "text"
    text = text.strip("<>").lower().removesuffix(" range")
    return text.removeprefix("list[").removesuffix("]")


def _plain_params(command: Any, ctx: Any = None) -> None:
    """Plain metavars in help and usage: ``SCENARIO`` and ``--rounds N``, not Typer's ``{SCENARIO}``,
    ``SCENARIO <str>`` or ``--policy <list[str]>``. Options without a metavar get one from their type."""
    for param in command.params:
        # by duck type: Typer may ship its own copy of Click, whose classes are not click's
        if param.param_type_name == "argument":
            name = param.metavar or (param.name or "ARG").upper()
            usage = name if param.required else f"[{name}]"
            usage += "..." if param.nargs != 1 else ""
            param.metavar = name
            # Typer's own display hooks, shadowed per instance (absent in older Typer: then nothing to do)
            param.display_type_rich = lambda ctx: None
            param._usage_display_name = lambda usage=usage: usage
        elif param.param_type_name == "option" and not param.is_flag and param.metavar is None:
            param.metavar = _PLAIN_METAVARS.get(_type_label(param, ctx), "TEXT")
        if param.param_type_name == "option" and isinstance(param.show_default, str):
            # Click prints a described default as '[default: (text)]'; show it as '[default: text]' like the rest
            param.help = f"{param.help or ''}  [default: {param.show_default}]".strip()
            param.show_default = False


COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("hetsched.cli.run", "Run ROUNDS rounds of a policy and show each round's mapping and E2E against a "
            "reference."),
    "bench": ("hetsched.cli.bench", "Run the evaluation (policies x scenarios x seeds x rounds) and write the report "
              "to OUT."),
    "report": ("hetsched.cli.bench", "Regenerate the report from stored runs (a bench folder, a store file, or run "
               "ids); nothing is re-run."),
    "gantt": ("hetsched.cli.gantt", "Draw a Gantt chart (PNG) of a scenario's schedule against the reference: "
              "all-GPU by default,"),
    "show": ("hetsched.cli.inspect", "Print a scenario: its cards, its DAG and its machine/budget."),
    "init": ("hetsched.cli.inspect", "Print a bundled scenario or the bundled tool library as YAML to start your own "
             "from."),
    "oracle": ("hetsched.cli.inspect", "Find the best feasible mappings on the noise-free simulator by exact "
               "branch-and-bound."),
    "reference": ("hetsched.cli.inspect", "The mapping reports compare against: the exact oracle, or a best-known "
                  "mapping with a lower bound."),
    "validate": ("hetsched.cli.inspect", "Check a file; print what it holds, or one clear error and exit 2."),
    "scenarios": ("hetsched.cli.inspect", "List the bundled scenarios (the examples and the paper's suite S1-S13)."),
    "schema": ("hetsched.cli.inspect", "Print the JSON Schema of a file format (or write them all with --write)."),
    "simulate": ("hetsched.cli.inspect", "Simulate one mapping: per-node times, VRAM, E2E and its ratio to the oracle "
                 "(\"what if\")."),
    "profile": ("hetsched.cli.profile", "Measure tools alone on the CPU and on the GPU (or the stand-in device) into "
                "a tool library."),
    "runs": ("hetsched.cli.runs", "List the recorded runs, newest first."),
    "show-run": ("hetsched.cli.runs", "Show one run: its settings, each round against its reference, probes, the "
                 "decider transcript and fallbacks."),
    "export": ("hetsched.cli.export", "Export a placement for another system (ray: per-node .options(...))."),
}
"""Command name -> (the module that registers it, the first line of its help). The module is imported only
when its command runs or shows its own help, so ``hetsched --version`` and ``hetsched --help`` import none
of them (no numpy, pydantic, networkx or bench); a test keeps this table in step with the commands."""


def _command_info(name: str) -> Any:
    for info in app.registered_commands:
        callback = info.callback
        if (info.name or (callback.__name__.replace("_", "-") if callback else "")) == name:
            return info
    return None


def _number(value: float) -> str:
    """A range bound as a user types it: ``1000``, ``0.001``."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def range_message(exc: typer.BadParameter) -> str | None:
    """The message of a number option with ``min=``/``max=`` that refused its value, naming the value
    given and what is accepted (``got 0; accepted: an integer from 1 to 10000``); None for any other
    error. Typer 0.29 checks those ranges with pydantic and says only "Input should be greater than or
    equal to 1" (no value, and no other bound); the option itself is named by the error's hint."""
    param = exc.param
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if (low is None and high is None) or not callable(errors):
        return None
    found = errors()
    if not found:
        return None
    given = found[0].get("input")
    descriptor = getattr(param, "type_descriptor", None)
    kind = "an integer" if getattr(descriptor, "annotation", None) is int else "a number"
    if low is not None and high is not None:
        accepted = f"{kind} from {_number(low)} to {_number(high)}"
    elif low is not None:
        accepted = f"{kind} >= {_number(low)}"
    else:
        assert high is not None
        accepted = f"{kind} <= {_number(high)}"
    text = plain(given, newlines=False)
    try:
        float(text)
    except ValueError:
        text = f"{text!r}, not {kind}"
    return f"got {text}; accepted: {accepted}"


class _Group(typer.core.TyperGroup):
    """The command group: commands load lazily (:data:`COMMANDS`), and every command's parameters get
    plain metavars as it is looked up; a number option out of its range (``min=``/``max=``) is refused
    naming the value given and the range (:func:`range_message`), exit 2 as every usage error."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.BadParameter as exc:
            message = range_message(exc)
            if message is not None:
                exc.message = message
            raise

    def list_commands(self, ctx: Any) -> list[str]:
        return list(dict.fromkeys([*COMMANDS, *self.commands]))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in COMMANDS:
            import importlib

            import typer.main

            importlib.import_module(COMMANDS[cmd_name][0])  # registers its commands on the app
            info = _command_info(cmd_name)
            group = next((g for g in app.registered_groups if g.name == cmd_name), None)
            if info is not None:
                command = typer.main.get_command_from_info(
                    info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
                )
            elif group is not None:  # a command with subcommands (export ray)
                command = typer.main.get_group_from_info(
                    group, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode,
                    suggest_commands=app.suggest_commands,
                )
            if command is not None:
                self.commands[cmd_name] = command
        if command is not None:
            _plain_params(command, ctx)
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list from :data:`COMMANDS`, without importing a command module."""
        def short(text: str, limit: int) -> str:  # as Click shortens help: whole words, then '...'
            if len(text) <= limit:
                return text
            cut = text[: max(limit - 3, 1)].rsplit(" ", 1)[0]
            return cut.rstrip(" ,;:") + "..."

        names = self.list_commands(ctx)
        width = max(len(n) for n in names)
        limit = formatter.width - 6 - width
        rows = []
        for name in names:
            if name in COMMANDS:
                text = COMMANDS[name][1]
            else:
                command = self.get_command(ctx, name)
                text = command.get_short_help_str(limit) if command is not None else ""
            rows.append((name, short(text, limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    cls=_Group,
    name="hetsched",
    help="Place every tool of an agentic AI workflow on cpu, gpu_now or gpu_queue, "
    "minimizing end-to-end latency under a VRAM budget.",
    epilog="Examples: hetsched scenarios; hetsched show S13; hetsched run S13 --policy agentic; "
    "hetsched bench --quick. 'hetsched COMMAND --help' shows each command's options and examples. "
    "Exit codes: 0 ok, 1 unexpected error, 2 bad input, 3 no usable result, 130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is plain text: '[env X]' or a tool name is never read as markup
)


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Place every tool of an agentic AI workflow on cpu, gpu_now or gpu_queue, minimizing
    end-to-end latency under a VRAM budget."""


# no highlighting and no ':smile:' emoji codes: user text is printed as written
out = Console(highlight=False, emoji=False)
err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)  # never hard-wrap messages

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_CONTROL_ALL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def plain(text: object, newlines: bool = True) -> str:
    """User text with control characters (ESC, NUL, bidi overrides...) shown as escapes, never sent
    to the terminal raw; newlines and tabs kept unless ``newlines`` is False."""
    pattern = _CONTROL if newlines else _CONTROL_ALL
    return pattern.sub(lambda m: repr(m.group())[1:-1], str(text))


_TAG_LIKE = re.compile(r"\[[a-z#/@][^[]*?]")  # what rich's markup parser reads as a tag (rich.markup.RE_TAGS)
_BRACKETS = re.compile(r"(\\*)\[")


def escape_markup(text: str) -> str:
    """Markup that rich renders as exactly ``text``, wherever it is put in a markup string.

    ``rich.markup.escape`` is not exact: it drops the backslash of ``a\\[b`` and doubles a trailing
    backslash unless a tag follows. Rich reads k backslashes before a tag as k // 2 backslashes (an
    odd count escapes the tag) and turns ``\\[`` into ``[`` elsewhere; so a bracket after k
    backslashes is written with 2k + 1 of them when it looks like a tag, k + 1 otherwise, and
    trailing backslashes are doubled and closed by an empty ``[none][/none]`` span.
    """
    out: list[str] = []
    pos = 0
    for m in _BRACKETS.finditer(text):
        out.append(text[pos:m.start()])
        k = len(m.group(1))
        out.append("\\" * (2 * k + 1 if _TAG_LIKE.match(text, m.end() - 1) else k + 1) + "[")
        pos = m.end()
    out.append(text[pos:])
    result = "".join(out)
    trailing = len(result) - len(result.rstrip("\\"))
    if trailing:
        result = result[: len(result) - trailing] + "\\" * (2 * trailing) + "[none][/none]"
    return result


def safe(text: object, newlines: bool = True) -> str:
    """User text (a node id, tool name, description, path, reply...) ready for rich output: markup
    such as ``[/]`` is escaped exactly (:func:`escape_markup`) and control characters are shown as
    escapes (see :func:`plain`)."""
    return escape_markup(plain(text, newlines))


def safe_path(path: object) -> str:
    """A file or folder name ready for rich output, in any line that names one (what was written, where
    a run is recorded): shown as error messages show names (:func:`hetsched.model.errors.path_text`:
    control characters, newline and tab included, as escapes), its markup escaped."""
    from hetsched.model.errors import path_text  # imported when a name is printed: this module stays light

    return escape_markup(path_text(path))


def plain_table(columns: Sequence[str], rows: Iterable[Sequence[object]], right: Iterable[str] = ()) -> str:
    """A borderless table as one markup string, padded here: linear in its rows, where rich's Table
    measures every cell several times (a 10,000-row table took minutes). Cells are user-safe."""
    right_set = set(right)
    cells = [[plain(c, newlines=False) for c in row] for row in rows]
    widths = [max([cell_len(col)] + [cell_len(r[i]) for r in cells]) for i, col in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        padded = []
        for col, value, width in zip(columns, values, widths, strict=True):
            gap = " " * (width - cell_len(value))
            padded.append(gap + value if col in right_set else value + gap)
        return "  ".join(padded).rstrip()

    head = f"[bold underline]{escape_markup(line(list(columns)))}[/]"
    return "\n".join([head, *(escape_markup(line(r)) for r in cells)])


def fail(message: str) -> typer.Exit:
    """Print an error and return the exit to raise (``raise fail(...)``)."""
    err.print(f"[bold red]error:[/] {safe(message)}")
    return typer.Exit(EXIT_BAD_INPUT)


def examples(*lines: str) -> str:
    """A command's help epilog: one example command a line (kept as written by Click's ``\\b``)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)
