"""Chat deciders' shared loop: prompt -> ask -> parse -> validate -> re-ask with the error.

A reply that cannot be parsed or fails validation is answered with the error, up to
``max_attempts`` asks in all (default 3); an answer that is not a chat completion at all
(:class:`~hetsched.llm.base.MalformedReply`) is recorded and the same conversation asked again;
after that the decision carries no mapping and the agentic policy falls back to the best
measured feasible mapping, and says so. A request that fails (:class:`TransportError`, after
the client's own retries) is recorded and ends the round's asks. Validation uses the
decision context's planner (FIFO deadlocks) and refuses mappings the observations show were
measured infeasible. When the decider has never had an answer from its model and a request
fails, it raises :class:`~hetsched.llm.base.LLMUnreachableError` instead of falling back
silently, round after round.

Imports the decider base, the prompt, the parser and the validator (the LLM clients subclass it).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from typing import Any, ClassVar

from hetsched.deciders.base import Decider, DeciderConfigError, Decision, DecisionContext
from hetsched.deciders.evidence import measured_infeasible
from hetsched.llm.base import (
    DEFAULT_MAX_ATTEMPTS,
    ChatReply,
    LLMUnreachableError,
    MalformedReply,
    Messages,
    TransportError,
)
from hetsched.llm.parse import parse_reply
from hetsched.llm.prompt import build_messages, messages_text, reask_message, response_schema
from hetsched.llm.validate import ReplyError, choice_from_object
from hetsched.model import Attempt

MAX_ECHO_CHARS = 8000
"""A re-ask sends the model's unusable reply back to it cut to this many characters."""


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
        self.answered = False
        """True once the model answered any ask (its reply may still have been unusable)."""

    @property
    def endpoint(self) -> str:
        """Where the model is asked, for messages (``the server at http://...``)."""
        return "its model"

    @abstractmethod
    def complete(self, messages: Messages, schema: dict[str, Any]) -> ChatReply:
        """Ask the model once; raise :class:`TransportError` when it cannot be asked."""

    def decide(self, ctx: DecisionContext) -> Decision:
        messages = build_messages(ctx)
        schema = response_schema(ctx.scenario)
        measured = measured_infeasible(ctx.observations)
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
                if not self.answered:
                    fix = f"; {exc.fix}" if exc.fix else ""
                    raise LLMUnreachableError(
                        f"the {self.name} decider got no answer from {self.endpoint}: {exc}{fix}"
                    ) from None
                break  # the client retried what was worth retrying: this round falls back
            except MalformedReply as exc:
                self.answered = True
                error = f"the server's answer is not a usable chat completion: {exc}"
                attempts.append(Attempt(k, sent, exc.raw, latency_ms=_ms_since(t0), error=error))
                sent = "(same conversation, asked again after the server's answer could not be read)"
                continue
            self.answered = True
            latency = _ms_since(t0)
            reasoning = reply.reasoning
            try:
                parsed = parse_reply(reply.text, finish_reason=reply.finish_reason)
                reasoning = "\n".join(x for x in (reply.reasoning, parsed.reasoning) if x)
                mapping, rationale = choice_from_object(
                    ctx.scenario, parsed.obj, cards_visible=ctx.cards_visible, planner=ctx.planner, measured=measured
                )
            except ReplyError as exc:
                error = str(exc)
                attempts.append(
                    Attempt(
                        k, sent, reply.text, reasoning, reply.prompt_tokens, reply.completion_tokens, latency, error
                    )
                )
                ask = reask_message(error, ctx.scenario)
                echo = reply.text if len(reply.text) <= MAX_ECHO_CHARS else reply.text[:MAX_ECHO_CHARS] + " [cut]"
                messages = [*messages, {"role": "assistant", "content": echo}, {"role": "user", "content": ask}]
                sent = ask
                continue
            attempts.append(
                Attempt(k, sent, reply.text, reasoning, reply.prompt_tokens, reply.completion_tokens, latency)
            )
            return Decision(mapping, rationale, tuple(attempts))
        return Decision(None, "", tuple(attempts), error=f"no valid mapping after {len(attempts)} attempt(s): {error}")


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0

