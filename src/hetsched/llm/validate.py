"""Validating a decider's choice against the scenario, with errors written for a re-ask.

A reply is usable only when its mapping names every node exactly once, uses only placements
the scenario allows (``gpu_queue`` only in three-way scenarios, no GPU placement for a tool
without a GPU implementation), passes the scenario's static check (``Scenario.infeasibility``:
the ``gpu_now`` tools within the VRAM budget, no queued node larger than the budget or waiting
forever for memory held by ``gpu_now`` tools whose nodes depend on it), passes the planner's
check when one is given (:class:`~hetsched.model.Planner`: the noise-free model on the cards,
which also finds head-of-line deadlocks in the FIFO queue), and was not already measured
infeasible (an ``infeasible`` record of a round or probe, or the last round, in the monitor's
observations). Each failure raises :class:`ReplyError` with a message that names the node and
value and says what is accepted; the chat decider sends it back to the model as the re-ask.

Every user-supplied string in a message (node ids, tool names, reasons, which quote them) is a
JSON string literal (:func:`~hetsched.model.observations.quote`): the messages are sent to the
model, so they are data there like the rest of the prompt. Lists in a message are cut after a
few items, so a hostile reply cannot make the re-ask grow without bound.

Imports only ``hetsched.model``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hetsched.model import Mapping, MappingError, Placement, Planner, Scenario, parse_placement
from hetsched.model.observations import quote
from hetsched.model.scenario import cold_reason
from hetsched.model.trace import Infeasibility

MAX_RATIONALE_CHARS = 2000
"""Longer rationales are cut (they are stored, not acted on)."""
MAX_LISTED = 8
"""Items a message lists before it says how many more there are."""
MAX_VALUE_CHARS = 60
"""A bad value from a reply is shown cut to this many characters."""


class ReplyError(ValueError):
    """A reply that cannot be used; the message is sent back to the model."""


class JsonObject(dict[str, Any]):
    """A parsed JSON object that remembers keys it saw more than once."""

    def __init__(self) -> None:
        super().__init__()
        self.duplicates: list[str] = []


def names(items: Iterable[Any], limit: int = MAX_LISTED) -> str:
    """``["A", "B", ... and 7 more]``: quoted, at most ``limit`` shown."""
    shown: list[str] = []
    more = 0
    for x in items:
        if len(shown) < limit:
            shown.append(quote(str(x)))
        else:
            more += 1
    return "[" + ", ".join(shown) + (f", ... and {more} more" if more else "") + "]"


def short(value: Any) -> str:
    """A reply's value, quoted and cut to :data:`MAX_VALUE_CHARS` (whatever its type or size)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, (dict, list)):
        text = f"a JSON {'object' if isinstance(value, dict) else 'array'} of {len(value)} item(s)"
    else:
        text = repr(value)
    if len(text) > MAX_VALUE_CHARS:
        text = text[:MAX_VALUE_CHARS] + f"... ({len(text)} characters)"
    return quote(text)


def _accepted(scenario: Scenario, node: str) -> str:
    return ", ".join(p.value for p in scenario.allowed(node))


def _reason(refused: Infeasibility, cards_visible: bool) -> str:
    return quote(str(refused) if cards_visible else cold_reason(refused))


def choice_from_object(
    scenario: Scenario,
    obj: Any,
    cards_visible: bool = True,
    planner: Planner | None = None,
    measured: dict[Mapping, tuple[int, str]] | None = None,
) -> tuple[Mapping, str]:
    """The validated mapping and rationale in a reply object; raise :class:`ReplyError`.

    Accepts ``{"mapping": {node: placement}, "rationale": "..."}``, and also a bare
    ``{node: placement}`` object whose keys are all node ids. With ``cards_visible`` False
    (cold start) an infeasibility is reported by its kind only: the full reason quotes the
    cards' VRAM figures. ``planner`` adds the noise-free model's check (FIFO deadlocks);
    ``measured`` (see :func:`~hetsched.deciders.evidence.measured_infeasible`) refuses mappings
    already measured infeasible.
    """
    ids = scenario.workflow.node_ids
    id_set = set(ids)
    if not isinstance(obj, dict):
        raise ReplyError(f"the reply's JSON is a {type(obj).__name__}, not an object with a \"mapping\" key")
    if "mapping" in obj:
        raw = obj["mapping"]
        rationale = obj.get("rationale", "")
    elif obj and all(k in id_set for k in obj):
        raw, rationale = obj, ""
    else:
        raise ReplyError(
            f"the JSON object has no \"mapping\" key (keys: {names(obj) if obj else 'none'}); "
            'reply with {"mapping": {node: placement, ...}, "rationale": "why"}'
        )
    if not isinstance(raw, dict):
        raise ReplyError(f"\"mapping\" must be an object from node id to placement, got a {type(raw).__name__}")
    dups = getattr(raw, "duplicates", [])
    if dups:
        raise ReplyError(f"node(s) {names(sorted(set(dups)))} appear more than once in \"mapping\"; "
                         "give every node exactly once")
    extra = [k for k in raw if k not in id_set]
    missing = [n for n in ids if n not in raw]
    if extra or missing:
        parts = []
        if missing:
            parts.append(f"misses node(s) {names(missing)}")
        if extra:
            parts.append(f"names unknown node(s) {names(extra)}")
        raise ReplyError(f"the mapping {' and '.join(parts)}; give exactly these nodes once each: {names(ids)}")
    placements: dict[str, Placement] = {}
    for n in ids:
        value = raw[n]
        if not isinstance(value, str):
            raise ReplyError(
                f"node {quote(n)}: placement must be a string, got {short(value)}; "
                f"accepted: {_accepted(scenario, n)}"
            )
        try:
            p = parse_placement(value, where=f"node {n!r}")
        except MappingError:
            raise ReplyError(
                f"node {quote(n)}: unknown placement {short(value)}; accepted: {_accepted(scenario, n)}"
            ) from None
        if p not in scenario.allowed(n):
            card = scenario.card_of(n)
            why = (
                f"tool {quote(card.name)} has no GPU implementation"
                if not card.has_gpu
                else f"this scenario is {scenario.mode.value} and allows only {_accepted(scenario, n)}"
            )
            raise ReplyError(f"node {quote(n)} cannot be {p.value}: {why}; accepted: {_accepted(scenario, n)}")
        placements[n] = p
    mapping = Mapping((n, placements[n]) for n in ids)
    refused = scenario.infeasibility(mapping)
    if refused is None and planner is not None:
        refused = planner.infeasibility(mapping)
    if refused is not None:
        raise ReplyError(
            f"the mapping is infeasible: {_reason(refused, cards_visible)}. The gpu_now tools must fit the "
            f"{scenario.machine.vram_budget_mb:g} MB budget together, each gpu_queue node must fit it alone, "
            "and no queued node may wait on memory that only frees after it ran"
        )
    if measured and mapping in measured:
        rnd, reason = measured[mapping]
        why = f": {quote(reason)}" if reason else ""
        raise ReplyError(
            f"the mapping {mapping.code(ids)} was measured infeasible in round {rnd}{why}; "
            "propose a mapping that can run"
        )
    text = rationale if isinstance(rationale, str) else short(rationale)
    return mapping, text[:MAX_RATIONALE_CHARS]
