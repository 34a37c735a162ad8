"""The Decider interface: a decision context in, a mapping + rationale + transcript out.

Every decider (``rules``, ``argmin``, ``openai``, ``local``, ``scripted``) implements
:meth:`Decider.decide`. Chat deciders share :class:`ChatDecider`, which owns the ask ->
parse -> validate -> re-ask loop: a reply that cannot be parsed or fails validation is answered
with the error, up to ``max_attempts`` asks in all (default 3); after that the decision carries
no mapping and the agentic policy falls back to the best measured feasible mapping, and says so.

Imports only ``hetsched.model`` (and, lazily, the optional LLM clients).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from hetsched.model import InputError, Mapping, Scenario

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
class Attempt:
    """One ask of a decider: the shared transcript record (see /docs/agentic.md)."""

    attempt: int
    """1 for the first ask, 2.. for re-asks."""
    prompt: str
    """What was sent: the full prompt for attempt 1, the re-ask message after that."""
    reply: str
    """The model's reply text (content)."""
    reasoning: str = ""
    """Reasoning the model emitted (``<think>`` block, ``reasoning``/``reasoning_content``)."""
    prompt_tokens: int | None = None
    """Prompt tokens the server counted (None when unknown)."""
    completion_tokens: int | None = None
    """Completion tokens the server counted (None when unknown)."""
    latency_ms: float = 0.0
    """Wall time of the ask."""
    error: str = ""
    """The parse/validation/transport error that made this attempt unusable ('' if accepted)."""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict in the shared transcript format."""
        return {
            "attempt": self.attempt,
            "prompt": self.prompt,
            "reply": self.reply,
            "reasoning": self.reasoning,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_ms": self.latency_ms,
            "error": self.error,
        }


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


class ChatDecider(Decider):
    """Base of the LLM deciders: prompt -> ask -> parse -> validate -> re-ask with the error.

    Args:
        max_attempts: asks per round (first ask + re-asks), at least 1.
    """

    is_llm: ClassVar[bool] = True

    def __init__(self, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        if max_attempts < 1:
            raise DeciderConfigError(f"max_attempts must be >= 1, got {max_attempts}")
        self.max_attempts = max_attempts

    @abstractmethod
    def complete(self, messages: Messages, schema: dict[str, Any]) -> ChatReply:
        """Ask the model once; raise :class:`TransportError` when it cannot be asked."""

    def decide(self, ctx: DecisionContext) -> Decision:
        from hetsched.llm.parse import parse_reply
        from hetsched.llm.prompt import build_messages, messages_text, reask_message, response_schema
        from hetsched.llm.validate import ReplyError, choice_from_object

        messages = build_messages(ctx)
        schema = response_schema(ctx.scenario)
        attempts: list[Attempt] = []
        sent = messages_text(messages)
        error = ""
        for k in range(1, self.max_attempts + 1):
            t0 = time.perf_counter()
            try:
                reply = self.complete(messages, schema)
            except TransportError as exc:
                error = f"request failed: {exc}"
                attempts.append(Attempt(k, sent, "", latency_ms=_ms_since(t0), error=error))
                sent = "(same conversation, asked again after the request failed)"
                continue
            latency = _ms_since(t0)
            reasoning = reply.reasoning
            try:
                parsed = parse_reply(reply.text, finish_reason=reply.finish_reason)
                reasoning = "\n".join(x for x in (reply.reasoning, parsed.reasoning) if x)
                mapping, rationale = choice_from_object(ctx.scenario, parsed.obj, cards_visible=ctx.cards_visible)
            except ReplyError as exc:
                error = str(exc)
                attempts.append(
                    Attempt(
                        k, sent, reply.text, reasoning, reply.prompt_tokens, reply.completion_tokens, latency, error
                    )
                )
                ask = reask_message(error, ctx.scenario)
                messages = [*messages, {"role": "assistant", "content": reply.text}, {"role": "user", "content": ask}]
                sent = ask
                continue
            attempts.append(
                Attempt(k, sent, reply.text, reasoning, reply.prompt_tokens, reply.completion_tokens, latency)
            )
            return Decision(mapping, rationale, tuple(attempts))
        return Decision(None, "", tuple(attempts), error=f"no valid mapping after {len(attempts)} attempt(s): {error}")


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def transcript_json(attempts: Sequence[Attempt]) -> list[dict[str, Any]]:
    """A transcript as JSON-ready dicts."""
    return [a.to_json() for a in attempts]
