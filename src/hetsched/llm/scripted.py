"""The ``scripted`` decider: replays given replies through the real parse/validate/re-ask path.

For unit tests only: it lets a test feed invalid JSON, missing nodes, over-budget mappings or
transport failures and check that the policy holds. It is a chat decider (the chat loop is what
it exercises), so it lives with the LLM clients, not with the deterministic deciders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hetsched.llm.base import DEFAULT_MAX_ATTEMPTS, ChatReply, Messages, TransportError
from hetsched.llm.chat import ChatDecider


class ScriptedDecider(ChatDecider):
    """Answers each ask with the next scripted reply.

    Args:
        responses: replies in order; a str is the content, a :class:`ChatReply` gives every
            field, a :class:`TransportError` is raised as a failed request.
        max_attempts: asks per round.
        model: name reported in the transcript.
    """

    name = "scripted"

    def __init__(
        self,
        responses: Sequence[str | ChatReply | TransportError],
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        model: str = "scripted",
    ) -> None:
        super().__init__(max_attempts)
        self._responses = list(responses)
        self._model = model
        self.received: list[Messages] = []
        """Every message list it was asked with (tests read the prompts here)."""

    @property
    def model(self) -> str | None:
        return self._model

    def complete(self, messages: Messages, schema: dict[str, Any]) -> ChatReply:
        self.received.append([dict(m) for m in messages])
        if not self._responses:
            raise RuntimeError(f"scripted decider ran out of replies after {len(self.received) - 1} ask(s)")
        item = self._responses.pop(0)
        if isinstance(item, TransportError):
            raise item
        if isinstance(item, ChatReply):
            return item
        return ChatReply(text=item, finish_reason="stop")
