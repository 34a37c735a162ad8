"""The decider interface: a decision context in, a mapping + rationale + transcript out.

Every decider (``rules``, ``argmin`` here; ``openai``, ``local``, ``scripted`` in
:mod:`hetsched.llm`) implements :meth:`Decider.decide`. The context carries the monitor's
typed observation records (:mod:`hetsched.model.observations`), never dicts. The transcript
record (:class:`~hetsched.model.Attempt`) is the model's, shared with the store.
:func:`check_mapping` is the check every decider's mapping passes before the policy uses it.

Imports only ``hetsched.model``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from hetsched.model import Attempt, InputError, Mapping, MappingError, Planner, Scenario
from hetsched.model.observations import Observation


class DeciderConfigError(InputError):
    """A decider cannot be built as configured (missing package, model file, bad option)."""


@dataclass(frozen=True)
class DecisionContext:
    """Everything a decider may look at for one round."""

    scenario: Scenario
    """The scenario; with ``cards_visible`` False a decider must not read the cards' figures
    (validation still uses them: the runtime knows its VRAM)."""
    round: int
    """The round being decided (from 0)."""
    rounds: int = 20
    """Rounds planned for the run."""
    cards_visible: bool = True
    """False in cold start: only names, descriptions and measurements may be used."""
    observations: tuple[Observation, ...] = ()
    """The runtime monitor's typed records (:mod:`hetsched.model.observations`: execution,
    infeasible, latency, probe, unmeasured, budget, last round)."""
    observations_text: str = ""
    """The same records rendered for a prompt."""
    planner: Planner | None = None
    """The noise-free model of the scenario (the loop's planner); validation uses it to refuse
    mappings it predicts cannot run (FIFO head-of-line deadlocks included). None: static checks only."""


@dataclass(frozen=True)
class Decision:
    """A decider's answer: a validated mapping, or None with the last error."""

    mapping: Mapping | None
    """The chosen mapping, already validated against the scenario; None when every attempt failed."""
    rationale: str = ""
    """The decider's short reason."""
    transcript: tuple[Attempt, ...] = ()
    """Every ask, in order."""
    error: str = ""
    """Why there is no mapping ('' when there is one)."""


class Decider(ABC):
    """Chooses a mapping for a round from a :class:`DecisionContext`."""

    name: ClassVar[str]
    """Decider name (``rules``, ``openai``...)."""
    is_llm: ClassVar[bool] = False
    """True only for deciders that ask a language model."""

    @property
    def model(self) -> str | None:
        """The model asked (None for deciders that are not LLMs)."""
        return None

    @abstractmethod
    def decide(self, ctx: DecisionContext) -> Decision:
        """The mapping for ``ctx.round``; never raises for a bad model reply (it is recorded, and
        the decision carries no mapping); raises :class:`~hetsched.llm.base.LLMUnreachableError` when an LLM decider
        never got an answer from its model at all."""


def check_mapping(scenario: Scenario, mapping: Mapping) -> str:
    """'' when a mapping is well-formed and passes the budget and deadlock checks, else the reason."""
    try:
        scenario.validate_mapping(mapping)
    except MappingError as exc:
        return str(exc)
    refused = scenario.infeasibility(mapping)
    return "" if refused is None else str(refused)
