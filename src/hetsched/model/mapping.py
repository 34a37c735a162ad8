"""Placements and mappings: where each node of a workflow runs.

Part of the model package; imports only ``model.errors``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from collections.abc import Mapping as AbcMapping
from enum import StrEnum

from hetsched.model.errors import MappingError


class Placement(StrEnum):
    """Where one node runs (PAPER.md's action set)."""

    CPU = "cpu"
    """On the CPU; touches no VRAM."""
    GPU_NOW = "gpu_now"
    """On the GPU at once, warm; the tool's model is resident from the start until its last node ends."""
    GPU_QUEUE = "gpu_queue"
    """On the GPU when admitted from a FIFO queue; pays the load cost, holds VRAM only while admitted."""

    @property
    def on_gpu(self) -> bool:
        """True for both GPU placements."""
        return self is not Placement.CPU

    @property
    def short(self) -> str:
        """One-letter code used in compact mapping strings: C, G, Q."""
        return _LETTER[self]

    @property
    def code(self) -> int:
        """Integer code used by array-based hot loops (simulator, search): its index in :data:`PLACEMENTS`."""
        return _CODE[self]

    @staticmethod
    def of_code(code: int) -> Placement:
        """Inverse of :attr:`code`."""
        return PLACEMENTS[code]

    @staticmethod
    def of_letter(letter: str) -> Placement:
        """Inverse of :attr:`short` (``C``, ``G``, ``Q``)."""
        return _OF_LETTER[letter]


PLACEMENTS: tuple[Placement, ...] = (Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE)
"""Every placement, in code order: the one placement-code table (``Placement.code`` is the index)."""
CPU_CODE, NOW_CODE, QUEUE_CODE = 0, 1, 2
"""Integer codes of cpu, gpu_now and gpu_queue (index in :data:`PLACEMENTS`)."""
_CODE = {p: i for i, p in enumerate(PLACEMENTS)}
_LETTER = {Placement.CPU: "C", Placement.GPU_NOW: "G", Placement.GPU_QUEUE: "Q"}
_OF_LETTER = {v: k for k, v in _LETTER.items()}

BINARY: tuple[Placement, ...] = (Placement.CPU, Placement.GPU_NOW)
"""Placements of binary scenarios."""
THREE_WAY: tuple[Placement, ...] = PLACEMENTS
"""Placements of VRAM-constrained three-way scenarios."""

_ALIASES = {"gpu": Placement.GPU_NOW, "queue": Placement.GPU_QUEUE}


def parse_placement(value: str | Placement, where: str = "placement") -> Placement:
    """Parse a placement name (``cpu``, ``gpu_now``, ``gpu_queue``; ``gpu`` means ``gpu_now``)."""
    if isinstance(value, Placement):
        return value
    text = str(value).strip().lower()
    if text in _ALIASES:
        return _ALIASES[text]
    try:
        return Placement(text)
    except ValueError:
        accepted = ", ".join(p.value for p in Placement)
        raise MappingError(f"{where}: unknown placement {value!r}; accepted: {accepted}") from None


class Mapping(AbcMapping[str, Placement]):
    """An immutable node -> placement assignment, hashable, ordered by node id insertion."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: AbcMapping[str, Placement | str] | Iterable[tuple[str, Placement | str]]):
        pairs = items.items() if isinstance(items, AbcMapping) else items
        self._items: dict[str, Placement] = {str(k): parse_placement(v, where=f"node {k!r}") for k, v in pairs}
        # equality ignores insertion order, so the hash must too
        self._hash = hash(frozenset(self._items.items()))

    def __getitem__(self, key: str) -> Placement:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._items == other._items
        return NotImplemented

    def __repr__(self) -> str:  # short whatever the size: 12 nodes, then a count
        if len(self._items) <= 12:
            return f"Mapping({self.compact()})"
        head = " ".join(f"{k}={v.value}" for k, v in list(self._items.items())[:12])
        return f"Mapping({head} ... {len(self._items)} nodes)"

    def compact(self) -> str:
        """``A=gpu_now B=cpu ...`` in insertion order."""
        return " ".join(f"{k}={v.value}" for k, v in self._items.items())

    def code(self, order: Iterable[str] | None = None) -> str:
        """Short code, one letter a node: C (cpu), G (gpu_now), Q (gpu_queue)."""
        keys = list(order) if order is not None else list(self._items)
        return "".join(self._items[k].short for k in keys)

    def to_dict(self) -> dict[str, str]:
        """Plain ``{node: placement}`` for JSON."""
        return {k: v.value for k, v in self._items.items()}

    def moved(self, node: str, placement: Placement) -> Mapping:
        """A copy with one node moved (node names need not be identifiers)."""
        items = dict(self._items)
        if node not in items:
            raise MappingError(f"node {node!r} is not in the mapping; nodes: {list(items)}")
        items[node] = placement
        return Mapping(items)

    def differs_at(self, other: Mapping) -> tuple[str, ...]:
        """Nodes whose placement differs from ``other``."""
        return tuple(k for k in self._items if other._items.get(k) != self._items[k])
