"""The ``hetsched`` command line: one module per group of commands, registered on one app.

:func:`main` is the console-script entry point and the error boundary: bad input (any
:class:`~hetsched.model.HetschedError`) is printed as one clear message on stderr and the
process exits 2, with no traceback (a library parameter named by the flag that sets it:
:func:`~hetsched.cli.app.error_text`); an LLM decider that never reached its server
(:class:`~hetsched.llm.base.LLMUnreachableError`) exits 69; Ctrl-C exits 130. The exit codes are
listed in :mod:`hetsched.cli.app`.
"""

from __future__ import annotations

import contextlib
import sys

from hetsched.cli.app import (
    COMMANDS,
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_LLM_UNREACHABLE,
    app,
    err,
    error_text,
    interrupted,
    safe,
    watch_ctrl_c,
)

COMMAND_MODULES = tuple(dict.fromkeys(module for module, _ in COMMANDS.values()))
"""Modules whose import registers their commands on :data:`app` (each imported when one of its commands runs)."""


def load_commands() -> None:
    """Import every command module (their commands register on :data:`app`): for tools that walk the whole
    command tree (docs, tests); the CLI itself loads a command's module only when it runs."""
    import importlib

    for module in COMMAND_MODULES:
        importlib.import_module(module)


def _is(exc: BaseException, module: str, name: str) -> bool:
    """Is ``exc`` an instance of ``module.name``? Looked up only if that module was imported: an exception of
    a class never imported cannot be one, and the CLI stays free of the model's imports until a command
    needs them."""
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(cls, type) and isinstance(exc, cls)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        _main(argv)
    except SystemExit as exc:
        _exit_now_if_teardown_abandoned(exc.code)
        raise
    _exit_now_if_teardown_abandoned(0)


def _exit_now_if_teardown_abandoned(code: int | str | None) -> None:
    """When an executor had to abandon its teardown (the Ray executor: Ray's shutdown did not finish in
    time; its watchdog stops the local cluster once this process is gone), exit at once with the
    command's status: a thread of Ray's may still be stuck, and the interpreter's own exit must not wait
    for it. Everything the command printed is flushed first."""
    ray_exec = sys.modules.get("hetsched.exec.ray")
    if ray_exec is None or not ray_exec.teardown_abandoned():
        return
    import os

    if isinstance(code, str):
        print(code, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


def _main(argv: list[str] | None) -> None:
    with watch_ctrl_c():
        try:
            app(args=argv, prog_name="hetsched")
        except KeyboardInterrupt:
            err.print("interrupted")
            sys.exit(EXIT_INTERRUPTED)
        except Exception as exc:
            if interrupted():  # a library wrapped the KeyboardInterrupt raised in its callback (app.ctrl_c_wins)
                err.print("interrupted")
                sys.exit(EXIT_INTERRUPTED)
            _exit_on_known(exc)
            raise


def _exit_on_known(exc: Exception) -> None:
    """Exit with one message for the errors that are not bugs (bad input 2, unreachable LLM server 69)."""
    if _is(exc, "hetsched.llm.base", "LLMUnreachableError"):  # the server never answered: not bad input
        err.print(f"[bold red]error:[/] {safe(error_text(exc))}")
        sys.exit(EXIT_LLM_UNREACHABLE)
    if _is(exc, "hetsched.model.errors", "HetschedError"):
        err.print(f"[bold red]error:[/] {safe(error_text(exc))}")
        sys.exit(EXIT_BAD_INPUT)


__all__ = ["app", "load_commands", "main"]
