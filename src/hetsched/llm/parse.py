"""Parsing a model's reply: the last JSON object after the reasoning, in time linear in its length.

Handles what real servers send back:
- DeepSeek-R1 style ``<think> ... </think>`` before the answer, and the frequent variant where
  the chat template already opened ``<think>`` so the reply has only the closing tag: everything
  up to the last ``</think>`` is reasoning, the answer is what follows;
- a reply cut at ``max_tokens`` (``finish_reason == "length"``): inside an unclosed ``<think>``
  it is an error that says so; cut inside the answer's JSON object, the object is closed after
  its last complete value (a half string is dropped, never completed) and validation decides
  whether it is usable;
- prose or code fences around the JSON: the last complete object is taken, also when a stray
  prose brace before it never closes;
- duplicate keys are kept on record (:class:`JsonObject.duplicates`) so validation can say
  "node given twice" instead of silently keeping the last.

Hostile replies cost at most linear work: a reply longer than :data:`MAX_REPLY_CHARS` is refused
before it is read; the structure is found in one pass (:func:`scan`, which jumps between
brackets and quotes with regular expressions); candidate objects are decoded from the last one
back within a budget of a few times the reply's length (:data:`DECODE_BUDGET_FACTOR`); objects
nested deeper than :data:`MAX_JSON_DEPTH` are never decoded (a reply is two levels deep), so a
reply of two million ``{`` neither recurses nor goes quadratic. :class:`ParseWork` counts the
work for the tests and ``benchmarks/parse_speed.py``.

Reasoning sent in a separate field (``reasoning`` / ``reasoning_content``) is read by the
client, not here. Imports nothing of ours except the error type.
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from hetsched.llm.validate import JsonObject, ReplyError

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

MAX_REPLY_CHARS = 1_000_000
"""Longest reply text parsed; a longer one is refused with a message (the client bounds the HTTP
body too)."""
MAX_JSON_DEPTH = 32
"""Objects nested deeper than this are never decoded (a valid reply is two levels deep)."""
DECODE_BUDGET_FACTOR = 4
"""Candidate objects decoded per reply: at most this many times the reply's length in characters
(plus :data:`DECODE_BUDGET_SLACK`), however many braces it holds."""
DECODE_BUDGET_SLACK = 4096
"""Characters every reply may decode on top of the factor (short replies with many candidates)."""
REPAIR_CANDIDATES = 8
"""Cut points tried when closing a reply cut at max_tokens (the last complete values first)."""
MAX_REPAIR_CHARS = 200_000
"""A cut object longer than this is not repaired (an answer is a mapping: a few hundred characters)."""

_STRUCTURE = re.compile(r'"|[{\[]+|[}\]]+')
"""A quote, or a run of opening or closing brackets (a run beyond :data:`MAX_JSON_DEPTH` is taken at
once, so ``{`` x 2,000,000 is a few steps)."""
_REPAIR_TOKENS = re.compile(r'[{}\[\]",:]')
_STRING_TAIL = re.compile(r'(?:[^"\\]|\\.)*+"', re.DOTALL)
"""The rest of a JSON string after its opening quote, through the closing quote (possessive: linear)."""


@dataclass
class ParseWork:
    """Work done parsing one reply (the linear-time tests and the benchmark read it)."""

    steps: int = 0
    """Structural tokens visited by the scans (brackets, quotes, commas, colons)."""
    decoded_chars: int = 0
    """Characters handed to the JSON decoder."""


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


Span = tuple[int, int, int]
"""A balanced ``{...}`` in a text: ``(start, end, depth)``, the index of its ``{``, the index after
its ``}``, and the nesting levels it holds (1 for an object with no object or array inside)."""


@dataclass(frozen=True)
class Structure:
    """What one scan of a text found."""

    spans: tuple[Span, ...]
    """Every balanced object, at any level, in the order they close."""
    open_start: int | None
    """Where the outermost bracket still open at the end of the text starts (None: all closed)."""


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


def scan(text: str, work: ParseWork | None = None) -> Structure:
    """One pass over ``text``: every balanced ``{...}`` (strings inside respected; brackets in
    prose outside any object ignored), and where an object still open at the end starts.

    Brackets nested deeper than :data:`MAX_JSON_DEPTH` are counted, not tracked, so memory stays
    bounded whatever the reply.
    """
    spans: list[Span] = []
    # the open brackets: their characters, starts and the depth each holds (parallel lists)
    kinds: list[str] = []
    starts: list[int] = []
    depths: list[int] = []
    overflow = 0  # brackets open beyond MAX_JSON_DEPTH
    steps = 0
    pos = 0
    search = _STRUCTURE.search
    tail_match = _STRING_TAIL.match
    find = text.find
    while True:
        steps += 1
        if not kinds:
            i = find("{", pos)
            if i < 0:
                break
            kinds.append("{")
            starts.append(i)
            depths.append(1)
            pos = i + 1
            continue
        m = search(text, pos)
        if m is None:
            break
        i, pos = m.span()
        ch = text[i]
        if ch == '"':
            tail = tail_match(text, pos)
            if tail is None:  # an unterminated string runs to the end of the text
                break
            pos = tail.end()
        elif ch == "{" or ch == "[":
            room = MAX_JSON_DEPTH - len(kinds)
            for k in range(i, min(pos, i + room)):
                steps += 1
                kinds.append(text[k])
                starts.append(k)
                depths.append(1)
            if pos - i > room:
                overflow += pos - i - room
                depths[-1] = MAX_JSON_DEPTH + 1
        else:
            skip = min(overflow, pos - i)  # closers of brackets that were only counted
            overflow -= skip
            for k in range(i + skip, pos):
                steps += 1
                if (kinds[-1] == "{") != (text[k] == "}"):
                    continue  # a closer that does not match the open bracket is prose: skipped
                bracket = kinds.pop()
                start = starts.pop()
                depth = depths.pop()
                if bracket == "{":
                    spans.append((start, k + 1, depth))
                if not kinds:
                    pos = k + 1  # back to prose: what follows is scanned from here
                    break
                if depths[-1] <= depth:
                    depths[-1] = depth + 1
    if work is not None:
        work.steps += steps
    return Structure(tuple(spans), starts[0] if starts else None)


class _Budget:
    """Characters the decoder may still be handed for one reply."""

    def __init__(self, text_length: int, work: ParseWork | None) -> None:
        self.left = DECODE_BUDGET_FACTOR * text_length + DECODE_BUDGET_SLACK
        self.work = work

    def decode(self, doc: str) -> Any | None:
        """The JSON value of ``doc``; None when it is not JSON, too deep, or over the budget."""
        if len(doc) > self.left:
            self.left = 0
            return None
        self.left -= len(doc)
        if self.work is not None:
            self.work.decoded_chars += len(doc)
        try:
            return _DECODER.decode(doc)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            return None


def last_json_object(text: str, cut: bool = False, work: ParseWork | None = None) -> Any | None:
    """The last complete JSON object in ``text`` (None when there is none).

    The objects not inside another are tried first, the last one first (they do not overlap, so
    decoding them all is linear); then, when a stray brace or invalid outer text broke them, the
    objects inside, within the decode budget. With ``cut`` (the reply hit max_tokens), an object
    nested in one that runs to the end of the text is never returned on its own.
    """
    return _last_object(text, scan(text, work), cut, work)


def _last_object(text: str, found: Structure, cut: bool, work: ParseWork | None) -> Any | None:
    spans = found.spans
    if cut and found.open_start is not None:
        limit = found.open_start  # everything after it is inside the object that was cut short
        spans = tuple(sp for sp in spans if sp[1] <= limit)
    budget = _Budget(len(text), work)
    outer: list[Span] = []
    min_start = len(text) + 1
    for sp in reversed(spans):
        if sp[0] < min_start:
            outer.append(sp)
            min_start = sp[0]
    tried: set[int] = set()
    for group in (outer, reversed(spans)):
        for start, end, depth in group:
            if start in tried or depth > MAX_JSON_DEPTH:
                continue
            tried.add(start)
            obj = budget.decode(text[start:end])
            if obj is not None:
                return obj
            if budget.left <= 0:
                return None
    return None


def close_truncated(text: str, work: ParseWork | None = None) -> Any | None:
    """Parse a JSON object cut short: close it after its last complete value. None when no such
    point exists, or when the object is longer than :data:`MAX_REPAIR_CHARS`.

    One pass finds the points right after a complete value (a string that is not a key, or a
    closed object or array) with the brackets still open there; the last few are tried, last
    first. A string cut in the middle is dropped, never closed: a cut ``"gpu_queue"`` must not
    come back as the valid ``"gpu"`` (= gpu_now). So the repaired object holds only complete
    key/value pairs of the reply; a mapping missing a node then fails validation."""
    start = text.find("{")
    if start < 0 or len(text) - start > MAX_REPAIR_CHARS:
        return None
    body = text[start:]
    stack: _Stack = None  # the open brackets, innermost first, as a linked list (snapshots are free)
    size = 0
    cuts: deque[tuple[int, _Stack]] = deque(maxlen=REPAIR_CANDIDATES)
    prev = ""
    steps = 0
    pos = 0
    while True:
        steps += 1
        m = _REPAIR_TOKENS.search(body, pos)
        if m is None:
            break
        i = m.start()
        ch = body[i]
        pos = i + 1
        if ch == '"':
            tail = _STRING_TAIL.match(body, pos)
            if tail is None:  # cut inside this string: nothing from its start on is usable
                break
            pos = tail.end()
            is_key = stack is not None and stack[0] == "{" and prev in ("{", ",")
            prev = "key" if is_key else "value"
            if not is_key:
                cuts.append((pos, stack))
            continue
        if ch in "{[":
            if size >= MAX_JSON_DEPTH:
                break
            stack = (ch, stack)
            size += 1
        elif ch in "}]":
            if stack is None or (stack[0] == "{") != (ch == "}"):
                break  # not the JSON the reply started: stop at the last good point
            stack = stack[1]
            size -= 1
            if stack is None:
                break  # the object closed: it was not cut (the caller found no object in it)
            cuts.append((pos, stack))
        prev = ch
    if work is not None:
        work.steps += steps
    budget = _Budget(len(body), work)
    for end, open_brackets in reversed(cuts):
        obj = budget.decode(body[:end] + _closers(open_brackets))
        if obj is not None:
            return obj
        if budget.left <= 0:
            break
    return None


_Stack = tuple[str, "_Stack"] | None
"""Open brackets as a linked list ``(innermost, rest)``."""


def _closers(stack: _Stack) -> str:
    out = []
    while stack is not None:
        out.append("}" if stack[0] == "{" else "]")
        stack = stack[1]
    return "".join(out)


def parse_reply(
    text: str,
    finish_reason: str | None = None,
    *,
    max_chars: int | None = MAX_REPLY_CHARS,
    work: ParseWork | None = None,
) -> ParsedReply:
    """Split off the reasoning and return the answer's last JSON object; raise :class:`ReplyError`.

    ``max_chars`` bounds the reply (None: no bound, for benchmarks); ``work`` counts the work done.
    """
    text = text or ""
    if max_chars is not None and len(text) > max_chars:
        raise ReplyError(
            f"the reply is {len(text):,} characters long, over the limit of {max_chars:,}; "
            "reply with the JSON object only"
        )
    reasoning, answer, unterminated = split_reasoning(text)
    found = scan(answer, work)
    obj = _last_object(answer, found, finish_reason == "length", work)
    if obj is not None:
        return ParsedReply(obj, reasoning, answer)
    if unterminated:
        cut = " (cut at max_tokens)" if finish_reason == "length" else ""
        raise ReplyError(
            f"the reply ended inside its <think> reasoning{cut} and gave no answer; "
            "keep the reasoning short and end with the JSON object"
        )
    if finish_reason == "length":
        open_start = found.open_start
        obj = close_truncated(answer[open_start:], work) if open_start is not None else None
        if obj is not None:
            return ParsedReply(obj, reasoning, answer, repaired=True)
        raise ReplyError(
            "the reply was cut at max_tokens before its JSON object was complete; "
            "reply with the JSON object first and keep the rationale to one short sentence"
        )
    if not answer.strip():
        raise ReplyError("the reply was empty; reply with one JSON object")
    raise ReplyError("no JSON object found in the reply; reply with one JSON object and nothing else")
