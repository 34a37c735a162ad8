"""The Policy interface: from the history of rounds to the next mapping (decide, never act).

Policies receive a :class:`PolicyContext` once per run and then one ``propose`` call per round.
They run nothing themselves except what-if probes through ``ctx.run_probe``, which the loop
binds to its executor and records. ``propose`` should be a function of (context, history):
internal state is a cache, so a run resumed from the store replays to the same decisions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from hetsched.model import Mapping, Probe, Proposal, RoundRecord, Scenario


@dataclass(frozen=True)
class PolicyContext:
    """What a policy knows about the run before round 0."""

    scenario: Scenario
    """The scenario (cards, workflow, machine, mode)."""
    seed: int = 0
    """Seed for any randomness the policy uses."""
    rounds: int = 20
    """Rounds planned for the run."""
    run_probe: Callable[[str, Mapping, Mapping, str], Probe] | None = None
    """``run_probe(kind, base, mapping, note)``: execute a what-if through the loop's executor
    (recorded, counted as cost). None when the loop allows no probes."""


class Policy(ABC):
    """Base of every placement policy (one file per policy under ``hetsched.policies``)."""

    name: ClassVar[str]
    """Name used by ``hetsched run --policy``."""
    adaptive: ClassVar[bool] = False
    """True when the policy learns from the rounds (reports then take the best of the rounds)."""

    def __init__(self) -> None:
        self._ctx: PolicyContext | None = None

    @property
    def ctx(self) -> PolicyContext:
        """The run's context; set by :meth:`reset`."""
        if self._ctx is None:
            raise RuntimeError(f"policy {self.name!r} used before reset()")
        return self._ctx

    def reset(self, ctx: PolicyContext) -> None:
        """Start a new run."""
        self._ctx = ctx

    @abstractmethod
    def propose(self, history: Sequence[RoundRecord]) -> Proposal:
        """The mapping for the next round, given every round so far."""

    def converged(self, history: Sequence[RoundRecord]) -> bool:
        """True when the policy has nothing more to learn (the loop may stop early)."""
        return False
