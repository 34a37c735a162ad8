"""The ``hetsched`` command's Typer app and consoles, which every command module registers on.

The entry point that loads the command modules and turns bad input into exit 2 is
``hetsched.cli.main`` (in the package's ``__init__``), so this module imports none of them.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    name="hetsched",
    help="Place every tool of an agentic AI workflow on cpu, gpu_now or gpu_queue, "
    "minimizing end-to-end latency under a VRAM budget.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)  # never hard-wrap messages

EXIT_BAD_INPUT = 2


def fail(message: str) -> typer.Exit:
    """Print an error and return the exit to raise (``raise fail(...)``)."""
    err.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(EXIT_BAD_INPUT)


EXIT_LLM_UNREACHABLE = 69
"""An LLM decider never got an answer from its server (``EX_UNAVAILABLE`` in sysexits.h)."""
