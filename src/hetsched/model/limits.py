"""The accepted range of every figure and text in the input formats, in one place.

Every bound is far outside what a real workflow needs and inside what the simulator computes
exactly (latency sums stay well within float precision of its event times). docs/formats.md
lists them. Leaf module of the model package: imports only pydantic.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

MAX_NAME_CHARS = 200
"""Longest node id, tool name, scenario or machine name."""
MAX_TEXT_CHARS = 10_000
"""Longest free text: descriptions, ``shows``, provenance fields."""
MIN_MS = 1e-3
"""Shortest latency of a tool (1 microsecond), ms."""
MAX_MS = 1e8
"""Longest latency or load time of a tool (about 28 hours), ms; amplified cards included."""
MAX_VRAM_MB = 1e7
"""Most VRAM a tool may hold or a budget may allow (10 TB), MB."""
MAX_DATA_MB = 1e7
"""Most data an edge may carry (10 TB), MB."""
MIN_GPU_UTIL = 1e-3
"""Smallest GPU share a tool may keep busy alone."""
MAX_CORES = 4096
"""Most CPU cores of a machine, and most threads a tool may keep busy."""
MAX_KAPPA = 10.0
"""Largest GPU interference per extra concurrent task (the calibrated default is 0.10)."""
MAX_CROSS_CORE = 10.0
"""Largest cross-core interference (``machine.cross_core_slowdown``): a task at most 11x slower."""
MAX_NOISE_CV = 1.0
"""Largest coefficient of variation of the latency noise."""
MIN_PCIE_MB_PER_MS = 1e-3
"""Slowest host-device link (1 MB/s), MB per ms."""
MAX_PCIE_MB_PER_MS = 1e6
"""Fastest host-device link (1 TB/s), MB per ms."""
MAX_AMPLIFICATION = 1_000_000
"""Largest k of an amplified tool (``NAME_xK``, ``amplification: K``)."""
MAX_RUNS = 1_000_000_000
"""Largest profiled run count in a card's provenance."""
MAX_ROUNDS = 1_000_000_000
"""Most rounds a run may plan (a round is at least one execution of the workflow)."""
MAX_SEED = 2**63 - 1
"""Largest run seed: seeds are stored as SQLite integers (signed 64-bit); the smallest is 0."""

_NAME_BAD = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_TEXT_BAD = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _describe(ch: str) -> str:
    return f"U+{ord(ch):04X}"


def check_name(value: str) -> str:
    """A name: no control, bidi-override or lone surrogate characters, no surrounding spaces."""
    bad = _NAME_BAD.search(value)
    if bad:
        raise ValueError(
            f"contains the control character {_describe(bad.group())} at position {bad.start()}; "
            "names may hold printable characters only"
        )
    if value != value.strip():
        raise ValueError("has leading or trailing spaces; remove them")
    if not value:
        raise ValueError("is empty; give a name")
    return value


def check_text(value: str) -> str:
    """Free text: printable characters, newlines and tabs only."""
    bad = _TEXT_BAD.search(value)
    if bad:
        raise ValueError(
            f"contains the control character {_describe(bad.group())} at position {bad.start()}; "
            "text may hold printable characters, newlines and tabs only"
        )
    return value


Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(check_name)]
"""A node id, tool, scenario or machine name (1-200 printable characters)."""
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS), AfterValidator(check_text)]
"""Free text shown to users and deciders (up to 10,000 printable characters, newlines, tabs)."""
