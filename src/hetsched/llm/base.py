"""What the chat deciders share below the chat loop: the ask limit, transport and reply errors,
a server's reply, the message list.

The decider interface itself (:class:`~hetsched.deciders.base.Decider`, the context, the
decision) is :mod:`hetsched.deciders.base`. Imports only ``hetsched.model``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.model import HetschedError

DEFAULT_MAX_ATTEMPTS = 3
"""Asks per round for chat deciders: the first ask plus two re-asks carrying the validation error."""


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
