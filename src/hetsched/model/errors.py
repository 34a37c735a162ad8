"""The package's exception hierarchy; bad input raises these, infeasible mappings never do.

Leaf module: imports nothing of ours.
"""

from __future__ import annotations

from collections.abc import Iterable


class HetschedError(Exception):
    """Base of every error hetsched raises on purpose (bad input, bad configuration)."""


class InputError(HetschedError, ValueError):
    """A file, field, node or value that hetsched cannot accept.

    The message names where the problem is, the bad value and what would be accepted.
    """


class MappingError(InputError):
    """A mapping that misses or invents nodes or uses a placement the scenario forbids."""


class UnknownNameError(InputError, KeyError):
    """An unknown policy, decider, scenario or tool name."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


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
