"""The Decider interface: a decision context in, a mapping + rationale + transcript out.

Every decider (``rules``, ``argmin``, ``openai``, ``local``, ``scripted``) implements
:meth:`Decider.decide`; chat deciders build on :class:`hetsched.llm.chat.ChatDecider`. The
transcript record (:class:`~hetsched.model.Attempt`) is the model's, shared with the store.

Imports only ``hetsched.model``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from hetsched.model import Attempt, InputError, Mapping, Scenario

DEFAULT_MAX_ATTEMPTS = 3
"""Asks per round for chat deciders: the first ask plus two re-asks carrying the validation error."""


class DeciderConfigError(InputError):
    """A decider cannot be built as configured (missing package, model file, bad option)."""


class TransportError(Exception):
    """The model could not be asked (connection refused, timeout, HTTP error, context overflow).

    Recorded as the attempt's error, like an invalid reply; never crashes a run.
    """


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
    observations: tuple[dict[str, Any], ...] = ()
    """The runtime monitor's records as JSON (``kind``-tagged: execution, infeasible, latency,
    probe, unmeasured, budget, last_round)."""
    observations_text: str = ""
    """The same records rendered for a prompt."""


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
        """The mapping for ``ctx.round``; never raises for a bad model reply."""


@dataclass(frozen=True)
class ChatReply:
    """What a chat backend returned for one ask."""

    text: str
    """Message content."""
    reasoning: str = ""
    """Separate reasoning field (``reasoning_content`` / ``reasoning``), if the server sends one."""
    finish_reason: str | None = None
    """``stop``, ``length`` (cut at max_tokens)..."""
    prompt_tokens: int | None = None
    """Prompt tokens counted by the server."""
    completion_tokens: int | None = None
    """Completion tokens counted by the server."""


Messages = list[dict[str, str]]
