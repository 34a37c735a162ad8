"""Chat deciders' shared loop: prompt -> ask -> parse -> validate -> re-ask with the error.

A reply that cannot be parsed or fails validation is answered with the error, up to
``max_attempts`` asks in all (default 3); after that the decision carries no mapping and the
agentic policy falls back to the best measured feasible mapping, and says so.

Imports the decider base, the prompt, the parser and the validator (the LLM clients subclass it).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from typing import Any, ClassVar

from hetsched.llm.base import (
    DEFAULT_MAX_ATTEMPTS,
    ChatReply,
    Decider,
    DeciderConfigError,
    Decision,
    DecisionContext,
    Messages,
    TransportError,
)
from hetsched.llm.parse import parse_reply
from hetsched.llm.prompt import build_messages, messages_text, reask_message, response_schema
from hetsched.llm.validate import ReplyError, choice_from_object
from hetsched.model import Attempt


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

