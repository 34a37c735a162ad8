"""Parsing a model's reply: the last JSON object after the reasoning.

Handles what real servers send back:
- DeepSeek-R1 style ``<think> ... </think>`` before the answer, and the frequent variant where
  the chat template already opened ``<think>`` so the reply has only the closing tag: everything
  up to the last ``</think>`` is reasoning, the answer is what follows;
- a reply cut at ``max_tokens`` (``finish_reason == "length"``): inside an unclosed ``<think>``
  it is an error that says so; cut inside the answer's JSON object, the object is closed after
  its last complete value (a half string is dropped, never completed) and validation decides
  whether it is usable;
- prose or code fences around the JSON: the last complete top-level object is taken;
- duplicate keys are kept on record (:class:`JsonObject.duplicates`) so validation can say
  "node given twice" instead of silently keeping the last.

Reasoning sent in a separate field (``reasoning`` / ``reasoning_content``) is read by the
client, not here. Imports nothing of ours except the error type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hetsched.llm.validate import JsonObject, ReplyError

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class ParsedReply:
    """A reply split into reasoning and the JSON object of its answer."""

    obj: Any
    """The last JSON object of the answer (a :class:`JsonObject`)."""
    reasoning: str
    """Text of the ``<think>`` block ('' when none)."""
    answer: str
    """The text after the reasoning."""
    repaired: bool = False
    """True when the object was closed after a cut at max_tokens."""


def split_reasoning(text: str) -> tuple[str, str, bool]:
    """``(reasoning, answer, unterminated)``: the answer follows the last ``</think>``.

    ``unterminated`` is True when a ``<think>`` was opened and never closed (a reply cut inside
    its reasoning); then the answer is whatever came before the opening tag.
    """
    close = text.rfind(THINK_CLOSE)
    if close >= 0:
        reasoning = text[:close]
        start = reasoning.find(THINK_OPEN)
        if start >= 0:
            reasoning = reasoning[start + len(THINK_OPEN) :]
        return reasoning.strip(), text[close + len(THINK_CLOSE) :], False
    start = text.find(THINK_OPEN)
    if start >= 0:
        return text[start + len(THINK_OPEN) :].strip(), text[:start], True
    return "", text, False


def _hook(pairs: list[tuple[str, Any]]) -> JsonObject:
    obj = JsonObject()
    for key, value in pairs:
        if key in obj:
            obj.duplicates.append(key)
        obj[key] = value
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_hook)


def top_level_spans(text: str) -> tuple[list[tuple[int, int]], int | None]:
    """``(spans, open_start)``: the ``(start, end)`` of each balanced top-level ``{...}`` (strings
    inside respected), and where an object still open at the end of the text starts (or None)."""
    spans: list[tuple[int, int]] = []
    depth = 0
    start = 0
    in_string = escaped = False
    for i, ch in enumerate(text):
        if depth == 0:
            if ch == "{":
                depth, start, in_string, escaped = 1, i, False, False
            continue
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    return spans, (start if depth > 0 else None)


def _decode(text: str) -> Any | None:
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError:
        return None


def last_json_object(text: str, cut: bool = False) -> Any | None:
    """The last complete top-level JSON object in ``text`` (None when there is none).

    With ``cut`` (the reply hit max_tokens), an object nested in one that runs to the end of the
    text is never returned on its own. Otherwise, when a stray prose brace breaks the structure,
    the last object that decodes anywhere wins.
    """
    spans, open_start = top_level_spans(text)
    for start, end in reversed(spans):
        obj = _decode(text[start:end])
        if obj is not None:
            return obj
    if open_start is not None and cut:
        return None  # the outer object was cut short; its inner objects are not the answer
    last = None
    i = text.find("{")
    while i >= 0:
        try:
            last, end = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        i = text.find("{", end)
    return last


def _scan(text: str) -> tuple[bool, bool, list[str]]:
    """``(in_string, escaped, closers)`` at the end of a JSON prefix."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    return in_string, escaped, stack


MAX_REPAIR_BACKTRACK = 400
"""Characters a cut reply may be shortened by to reach a point where it can be closed."""


def close_truncated(text: str) -> Any | None:
    """Parse a JSON object cut short: back off to the longest prefix that ends outside any string
    and, with open arrays/objects closed, is valid JSON. None when no such prefix exists.

    A string cut in the middle is dropped, never closed: a cut ``"gpu_queue"`` must not come
    back as the valid ``"gpu"`` (= gpu_now). So the repaired object holds only complete
    key/value pairs of the reply; a mapping missing a node then fails validation."""
    start = text.find("{")
    if start < 0:
        return None
    body = text[start:].rstrip()
    for end in range(len(body), max(0, len(body) - MAX_REPAIR_BACKTRACK), -1):
        in_string, escaped, stack = _scan(body[:end])
        if not stack or in_string or escaped:
            continue
        candidate = body[:end].rstrip()
        if candidate.endswith(","):
            candidate = candidate[:-1]
        try:
            return _DECODER.decode(candidate + "".join(reversed(stack)))
        except json.JSONDecodeError:
            continue
    return None


def parse_reply(text: str, finish_reason: str | None = None) -> ParsedReply:
    """Split off the reasoning and return the answer's last JSON object; raise :class:`ReplyError`."""
    reasoning, answer, unterminated = split_reasoning(text or "")
    obj = last_json_object(answer, cut=finish_reason == "length")
    if obj is not None:
        return ParsedReply(obj, reasoning, answer)
    if unterminated:
        cut = " (cut at max_tokens)" if finish_reason == "length" else ""
        raise ReplyError(
            f"the reply ended inside its <think> reasoning{cut} and gave no answer; "
            "keep the reasoning short and end with the JSON object"
        )
    if finish_reason == "length":
        _, open_start = top_level_spans(answer)
        obj = close_truncated(answer[open_start:]) if open_start is not None else None
        if obj is not None:
            return ParsedReply(obj, reasoning, answer, repaired=True)
        raise ReplyError(
            "the reply was cut at max_tokens before its JSON object was complete; "
            "reply with the JSON object first and keep the rationale to one short sentence"
        )
    if not answer.strip():
        raise ReplyError("the reply was empty; reply with one JSON object")
    raise ReplyError("no JSON object found in the reply; reply with one JSON object and nothing else")
