"""The package's exception hierarchy; bad input raises these, infeasible mappings never do.

Leaf module: imports nothing of ours.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


class HetschedError(Exception):
    """Base of every error hetsched raises on purpose (bad input, bad configuration)."""


class InputError(HetschedError, ValueError):
    """A file, field, node or value that hetsched cannot accept.

    The message names where the problem is, the bad value and what would be accepted.
    """


class MappingError(InputError):
    """A mapping that misses or invents nodes or uses a placement the scenario forbids."""


class UnknownReasonError(InputError):
    """A stored infeasibility reason that names no kind (``Infeasibility.parse``): a reason written before
    reasons were typed must begin with a kind's label; anything else is damage, not a tool error."""


class UnknownNameError(InputError, KeyError):
    """An unknown policy, decider, scenario or tool name."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class ParameterError(InputError):
    """A bad value of a named parameter of a library call: ``rounds must be >= 1, got 0``.

    The message names the parameter as the library spells it (``param``), then the problem. A
    front end that knows the parameter by another name shows :meth:`named` instead: the CLI
    prints ``--rounds must be >= 1, got 0`` (``hetsched.cli.app.PARAMETER_FLAGS``). A hint inside
    any hetsched message names a parameter or a call in backticks (``raise `max_seconds` ``,
    ```hetsched.resume('ab12')```), which the CLI shows as its flag or command (``cli_words``).
    """

    def __init__(self, param: str, problem: str) -> None:
        super().__init__(f"{param} {problem}")
        self.param = param
        """The parameter, as the library call names it (``rounds``, ``max_seconds``...)."""
        self.problem = problem
        """What is wrong with its value, and what is accepted."""

    def named(self, name: str) -> str:
        """The message with the parameter called ``name`` (a CLI flag)."""
        return f"{name} {self.problem}"

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # crosses process boundaries (bench workers)
        return (type(self), (self.param, self.problem))


class UnknownValueError(ParameterError, UnknownNameError):
    """A parameter naming something that does not exist (an unknown policy, decider or suite)."""


def some(names: Iterable[object], limit: int = 12, quote: bool = True) -> str:
    """``'a', 'b', 'c'`` for a message: at most ``limit`` names, then how many more.

    Messages name what is accepted, but a 10,000-node workflow must not print 10,000 names.
    Names are repr-quoted (``quote=False``: plain unless they hold unprintable characters) and cut at 60 characters.
    """
    items = list(names)
    shown = [
        str(x) if not quote and isinstance(x, str) and x.isprintable() and len(x) <= 60 else _cut(repr(x))
        for x in items[:limit]
    ]
    more = len(items) - len(shown)
    return ", ".join(shown) + (f", ... ({more} more)" if more > 0 else "")


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OutputError(HetschedError):
    """A file hetsched was asked to write (a trace, a figure, a report) could not be written."""


def close_matches(name: object, choices: Iterable[object], n: int = 3) -> list[str]:
    """Up to ``n`` of ``choices`` spelled close to ``name`` (difflib), best first; case and ``-``/``_``
    are ignored when comparing (``S133`` finds ``S13``, ``s13`` finds ``S13``)."""
    import difflib

    def norm(text: object) -> str:
        return str(text).strip().lower().replace("-", "_")

    by_norm: dict[str, str] = {}
    for choice in choices:
        by_norm.setdefault(norm(choice), str(choice))
    exact = by_norm.get(norm(name))
    if exact is not None:
        return [exact]
    found = difflib.get_close_matches(norm(name), list(by_norm), n=n, cutoff=0.6)
    return [by_norm[f] for f in found]


def did_you_mean(name: object, choices: Iterable[object]) -> str:
    """``"; did you mean 'S13'?"`` when a choice is close to ``name``, else ''."""
    found = close_matches(name, choices)
    if not found:
        return ""
    return "; did you mean " + " or ".join(repr(f) for f in found) + "?"


_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def path_text(path: object) -> str:
    """A file or folder name as every message shows it: control characters (newline, tab, ESC, NUL,
    C1, bidi overrides, lone surrogates) as Python escapes (``\\n``, ``\\x1b``, ``\\u202e``), the
    rest as is, so a name can neither break a message's line nor reach a terminal raw."""
    return _CONTROL_CHARS.sub(lambda m: repr(m.group())[1:-1], str(path))


def os_error_text(exc: OSError) -> str:
    """What an OSError really means, in words: a full disk, a read-only file system, a missing
    folder, denied permission... (``strerror`` alone says 'No space left on device')."""
    import errno

    meanings = {
        errno.ENOSPC: "no space left on the device (the disk is full)",
        errno.EDQUOT: "the disk quota is exceeded",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "the operation is not permitted",
        errno.ENOENT: "no such file or folder",
        errno.ENOTDIR: "a part of the path is not a folder",
        errno.EISDIR: "it is a folder",
        errno.EFBIG: "the file is too large",
        errno.EIO: "an input/output error on the device",
    }
    return meanings.get(exc.errno or -1, exc.strerror or str(exc))
