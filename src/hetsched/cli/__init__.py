"""The ``hetsched`` command line: one module per group of commands, registered on one app.

:func:`main` is the console-script entry point and the error boundary: bad input (any
:class:`~hetsched.model.HetschedError`) is printed as one clear message on stderr and the
process exits 2, with no traceback; an LLM decider that never reached its server
(:class:`~hetsched.llm.base.LLMUnreachableError`) exits 69; Ctrl-C exits 130. The exit codes are
listed in :mod:`hetsched.cli.app`.
"""

from __future__ import annotations

import sys

from hetsched.cli import bench, export, gantt, inspect, profile, run, runs
from hetsched.cli.app import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_LLM_UNREACHABLE, app, err, safe
from hetsched.llm.base import LLMUnreachableError
from hetsched.model import HetschedError

COMMAND_MODULES = (bench, export, gantt, inspect, profile, run, runs)
"""Modules whose import registers their commands on :data:`app`."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        app(args=argv, prog_name="hetsched")
    except LLMUnreachableError as exc:  # the server never answered: not bad input, exit 69
        err.print(f"[bold red]error:[/] {safe(exc)}")
        sys.exit(EXIT_LLM_UNREACHABLE)
    except HetschedError as exc:
        err.print(f"[bold red]error:[/] {safe(exc)}")
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)


__all__ = ["app", "main"]
