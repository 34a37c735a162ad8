"""The ``hetsched`` command line: one module per group of commands, registered on one app.

:func:`main` is the console-script entry point and the error boundary: bad input (any
:class:`~hetsched.model.HetschedError`) is printed as one clear message on stderr and the
process exits 2, with no traceback.
"""

from __future__ import annotations

import sys

from rich.markup import escape

from hetsched.cli import bench, export, inspect, profile, run, runs
from hetsched.cli.app import EXIT_BAD_INPUT, app, err
from hetsched.model import HetschedError

COMMAND_MODULES = (bench, export, inspect, profile, run, runs)
"""Modules whose import registers their commands on :data:`app`."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        app(args=argv, prog_name="hetsched")
    except HetschedError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        sys.exit(EXIT_BAD_INPUT)


__all__ = ["app", "main"]
