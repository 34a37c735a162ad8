"""The Decider interface: a decision context in, a mapping + rationale + transcript out.

Every decider (``rules``, ``argmin``, ``openai``, ``local``, ``scripted``) implements
:meth:`Decider.decide`; chat deciders build on :class:`hetsched.llm.chat.ChatDecider`. The
transcript record (:class:`~hetsched.model.Attempt`) is the model's, shared with the store.

Imports only ``hetsched.model``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from hetsched.model import Attempt, HetschedError, InputError, Mapping, Planner, Scenario
from hetsched.model.observations import Observation

DEFAULT_MAX_ATTEMPTS = 3
"""Asks per round for chat deciders: the first ask plus two re-asks carrying the validation error."""


class DeciderConfigError(InputError):
    """A decider cannot be built as configured (missing package, model file, bad option)."""


class TransportError(Exception):
    """The model could not be asked (connection refused, timeout, HTTP error, context overflow).

    Recorded as the attempt's error; it ends the round's asks (the client already retried what
    is worth retrying), and the policy falls back. Only when the decider never got an answer
    at all does the chat decider turn it into :class:`LLMUnreachableError`.

    Args:
        message: what failed, for the transcript.
        fix: what the user should do about it (start the server, check the URL...), for the
            message of :class:`LLMUnreachableError`.
        status: the HTTP status the server answered with (None: no HTTP answer at all).
    """

    def __init__(self, message: str, fix: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.fix = fix
        self.status = status


class MalformedReply(Exception):
    """The server answered, but not with a usable chat completion (not JSON, no choices, no
    message, content of the wrong type, over the size limit...).

    Recorded as a failed attempt with the raw body (cut) as its reply; the same conversation is
    asked again, up to the attempt limit, then the policy falls back.

    Args:
        message: what is wrong with the answer.
        raw: the body as received (cut to a readable length), for the transcript.
    """

    def __init__(self, message: str, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw


class LLMUnreachableError(HetschedError):
    """An LLM decider never got an answer from its model (server not started, wrong URL, wrong
    key, a server that never replies within the timeout): the run stops instead of silently
    falling back every round. The CLI exits with status 69 (``EX_UNAVAILABLE``)."""


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
        the decision carries no mapping); raises :class:`LLMUnreachableError` when an LLM decider
        never got an answer from its model at all."""


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
