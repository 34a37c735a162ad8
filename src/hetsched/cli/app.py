"""The ``hetsched`` command's Typer app, consoles and the error boundary.

Bad input (any :class:`HetschedError`) is printed as one clear message on stderr and the
process exits 2, with no traceback. Sits at the top of the import graph.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

from hetsched.model import HetschedError

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


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    from hetsched.cli import bench, inspect, run, runs  # noqa: F401  (registers commands)

    try:
        app(args=argv, prog_name="hetsched")
    except HetschedError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        sys.exit(EXIT_BAD_INPUT)
