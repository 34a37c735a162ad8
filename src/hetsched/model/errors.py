"""The package's exception hierarchy; bad input raises these, infeasible mappings never do.

Leaf module: imports nothing of ours.
"""

from __future__ import annotations


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
