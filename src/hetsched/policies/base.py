"""The Policy interface: from the history of rounds to the next mapping (decide, never act).

Policies receive a :class:`PolicyContext` once per run. Each round the loop first asks
:meth:`Policy.next_probe` for what-if measurements (a :class:`~hetsched.model.ProbeRequest`
at a time, until it returns None) and executes and records each one; then, for a policy with a
runtime monitor (:attr:`Policy.monitor`), it has the monitor observe the history and the
round's probes; then it asks :meth:`Policy.propose` for the round's mapping, handing it those
observations. A policy never executes anything itself.
``propose`` and ``next_probe`` should be functions of (context, history, this round's probes):
internal state is a cache, so a run resumed from the store replays to the same decisions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from hetsched.model import Planner, Probe, ProbeRequest, Proposal, RoundRecord, Scenario
from hetsched.monitor import Monitor, Observations


@dataclass(frozen=True)
class PolicyContext:
    """What a policy knows about the run before round 0."""

    scenario: Scenario
    """The scenario (cards, workflow, machine, mode)."""
    seed: int = 0
    """Seed for any randomness the policy uses."""
    rounds: int = 20
    """Rounds planned for the run."""
    planner: Planner | None = None
    """The model's noise-free predictions (feasibility including FIFO deadlocks, predicted E2E,
    the reference mapping); computes, never executes. None when the loop gives none."""
    probes: bool = True
    """False when the loop allows no what-if probes (``next_probe`` is then never called)."""
    measured: bool = False
    """True when the rounds run on a real executor (measured, noisy, costly), False on the simulator."""


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

    @property
    def planner(self) -> Planner:
        """The context's planner (an error naming the policy when the loop gave none)."""
        planner = self.ctx.planner
        if planner is None:
            raise RuntimeError(f"policy {self.name!r} needs a planner in its PolicyContext")
        return planner

    def reset(self, ctx: PolicyContext) -> None:
        """Start a new run."""
        self._ctx = ctx

    @property
    def monitor(self) -> Monitor | None:
        """The runtime monitor whose observations the loop hands :meth:`propose` (None: no monitor)."""
        return None

    def next_probe(self, history: Sequence[RoundRecord], probes: Sequence[Probe]) -> ProbeRequest | None:
        """A what-if execution to run before this round's decision, or None (the default: no probes).

        ``probes`` are the ones already executed this round, in order.
        """
        return None

    @abstractmethod
    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        """The mapping for the next round, given every round so far, this round's probes and, for a
        policy with a monitor, what the monitor observed of them (the loop calls ``monitor.observe``)."""

    def converged(self, history: Sequence[RoundRecord]) -> bool:
        """True when the policy has nothing more to learn (the loop may stop early)."""
        return False
