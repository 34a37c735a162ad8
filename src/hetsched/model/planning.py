"""The planning contract: what the model of the world (the cards run through the contention
model, noise-free) predicts about a mapping, without executing anything.

Policies receive a :class:`Planner` in their context from the loop, which builds it from the
simulator; they never import the simulator. A :class:`Reference` is the best mapping a report
compares against: the exact oracle when the space is small enough, else a labelled best-known
value with a lower bound. Part of the model package.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from hetsched.model.mapping import Mapping
from hetsched.model.measured import MeasuredMapping
from hetsched.model.trace import Infeasibility


class ReferenceKind(StrEnum):
    """How a reference was obtained."""

    ORACLE = "oracle"
    """The exact optimum of the model (exhaustive branch-and-bound)."""
    BEST_KNOWN = "best-known"
    """The best mapping a bounded search found; not proven optimal (see ``lower_bound_ms``)."""


@dataclass(frozen=True)
class Reference:
    """The mapping reports compare against, and how good it is known to be."""

    kind: ReferenceKind
    """``oracle`` (exact) or ``best-known`` (a bounded search's best)."""
    mapping: Mapping
    """The reference mapping."""
    e2e_ms: float
    """Its noise-free E2E under the model."""
    lower_bound_ms: float | None = None
    """A proven lower bound on the optimum's E2E (equal to ``e2e_ms`` for the oracle)."""
    seconds: float = 0.0
    """Time the search took."""
    measured: MeasuredMapping | None = None
    """On a real executor: what the run's executor measured for a reference (``measured_kind``);
    ratios of a real run divide by its median, never by the simulated ``e2e_ms``."""
    measured_kind: str = ""
    """``reference mapping`` (this reference's mapping executed on the run's executor) or ``best
    measured`` (the run's best measured mapping, when the reference mapping could not run there)."""
    bound_note: str = ""
    """What the label adds about the lower bound, e.g. that the stronger relaxation bound was not
    available (OR-Tools not installed); empty when there is nothing to add."""
    found_by: str = ""
    """Where a best-known mapping came from when not from the reference search: the run, round or
    probe that played a better mapping than the search found (``improved_by`` in
    :mod:`hetsched.search.reference`); empty for the search's own mapping."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ReferenceKind(self.kind))

    @property
    def exact(self) -> bool:
        """True for the oracle."""
        return self.kind is ReferenceKind.ORACLE

    @property
    def gap(self) -> float | None:
        """How far the reference may be above the optimum: e2e / lower bound - 1 (0 for the oracle)."""
        if self.exact:
            return 0.0
        if not self.lower_bound_ms:
            return None
        return max(0.0, self.e2e_ms / self.lower_bound_ms - 1.0)

    @property
    def label(self) -> str:
        """``oracle`` or ``best-known (within 3.2% of the lower bound)``."""
        if self.exact:
            return "oracle"
        gap = self.gap
        notes = [n for n in (self.bound_note, f"found by {self.found_by}" if self.found_by else "") if n]
        if gap is None:
            return f"best-known ({'; '.join(notes)})" if notes else "best-known"
        return f"best-known (within {100 * gap:.1f}% of the lower bound{''.join('; ' + n for n in notes)})"

    @property
    def compare_ms(self) -> float:
        """What ratios divide by: the measured median when measured, else the simulated E2E."""
        return self.measured.median_ms if self.measured is not None else self.e2e_ms

    @property
    def compare_name(self) -> str:
        """Column name of the ratios: ``oracle``, ``oracle (measured)`` or ``best measured``."""
        if self.measured is None:
            return self.kind.value
        return "best measured" if self.measured_kind == "best measured" else f"{self.kind.value} (measured)"

    def to_dict(self) -> dict[str, Any]:
        """``{"kind", "mapping", "e2e_ms", "lower_bound_ms"}`` for JSON, with ``bound_note`` and
        ``found_by`` when they are set; measured on a real executor, also ``measured``
        (:meth:`MeasuredMapping.to_dict` plus ``kind``, ``reference mapping`` or ``best measured``)."""
        out: dict[str, Any] = {
            "kind": self.kind.value,
            "mapping": self.mapping.to_dict(),
            "e2e_ms": self.e2e_ms,
            "lower_bound_ms": self.lower_bound_ms,
        }
        if self.bound_note:
            out["bound_note"] = self.bound_note
        if self.found_by:
            out["found_by"] = self.found_by
        if self.measured is not None:
            out["measured"] = {**self.measured.to_dict(), "kind": self.measured_kind}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reference:
        """Inverse of :meth:`to_dict`."""
        measured = data.get("measured")
        return cls(
            ReferenceKind(data["kind"]),
            Mapping(data["mapping"]),
            float(data["e2e_ms"]),
            None if data.get("lower_bound_ms") is None else float(data["lower_bound_ms"]),
            measured=None if measured is None else MeasuredMapping.from_dict(measured),
            measured_kind="" if measured is None else str(measured.get("kind", "reference mapping")),
            bound_note=str(data.get("bound_note", "")),
            found_by=str(data.get("found_by", "")),
        )


class Planner(Protocol):
    """Noise-free predictions of the model for one scenario; computes, never executes."""

    def infeasibility(self, mapping: Mapping) -> Infeasibility | None:
        """Why ``mapping`` cannot run under the model (static checks and FIFO deadlocks), or None."""
        ...

    def e2e_ms(self, mapping: Mapping) -> float | None:
        """The model's noise-free E2E of ``mapping``; None when it cannot run."""
        ...

    def reference(self) -> Reference:
        """The best mapping known for the scenario (exact when the space allows)."""
        ...
