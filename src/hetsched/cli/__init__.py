"""The ``hetsched`` command line: one module per group of commands, registered on one app."""

from hetsched.cli.app import app, main

__all__ = ["app", "main"]
