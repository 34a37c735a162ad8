"""Validating a decider's choice against the scenario, with errors written for a re-ask.

A reply is usable only when its mapping names every node exactly once, uses only placements
the scenario allows (``gpu_queue`` only in three-way scenarios, no GPU placement for a tool
without a GPU implementation), keeps the ``gpu_now`` tools within the VRAM budget and queues
nothing that could never be admitted: neither a node larger than the budget nor one that would
wait forever for memory held by ``gpu_now`` tools whose nodes depend on it (all three are the
scenario's static check, ``Scenario.infeasibility``). A rarer deadlock, a FIFO head-of-line
wait behind such a node, is not caught here; the executor reports it as an infeasible round.
Each failure raises :class:`ReplyError` with a message
that names the node and value and says what is accepted; the chat decider sends it back to
the model as the re-ask.

Imports only ``hetsched.model`` and networkx.
"""

from __future__ import annotations

from typing import Any

from hetsched.model import Mapping, MappingError, Placement, Scenario, parse_placement
from hetsched.model.scenario import cold_reason

MAX_RATIONALE_CHARS = 2000
"""Longer rationales are cut (they are stored, not acted on)."""


class ReplyError(ValueError):
    """A reply that cannot be used; the message is sent back to the model."""


class JsonObject(dict[str, Any]):
    """A parsed JSON object that remembers keys it saw more than once."""

    def __init__(self) -> None:
        super().__init__()
        self.duplicates: list[str] = []


def _accepted(scenario: Scenario, node: str) -> str:
    return ", ".join(p.value for p in scenario.allowed(node))


def choice_from_object(scenario: Scenario, obj: Any, cards_visible: bool = True) -> tuple[Mapping, str]:
    """The validated mapping and rationale in a reply object; raise :class:`ReplyError`.

    Accepts ``{"mapping": {node: placement}, "rationale": "..."}``, and also a bare
    ``{node: placement}`` object whose keys are all node ids. With ``cards_visible`` False
    (cold start) an infeasibility is reported by its kind only: the full reason quotes the
    cards' VRAM figures.
    """
    ids = scenario.workflow.node_ids
    if not isinstance(obj, dict):
        raise ReplyError(f"the reply's JSON is a {type(obj).__name__}, not an object with a \"mapping\" key")
    if "mapping" in obj:
        raw = obj["mapping"]
        rationale = obj.get("rationale", "")
    elif obj and all(k in ids for k in obj):
        raw, rationale = obj, ""
    else:
        keys = ", ".join(repr(k) for k in list(obj)[:8]) or "none"
        raise ReplyError(
            f"the JSON object has no \"mapping\" key (keys: {keys}); "
            'reply with {"mapping": {node: placement, ...}, "rationale": "..."}'
        )
    if not isinstance(raw, dict):
        raise ReplyError(f"\"mapping\" must be an object from node id to placement, got a {type(raw).__name__}")
    dups = getattr(raw, "duplicates", [])
    if dups:
        raise ReplyError(
            f"node(s) {sorted(set(dups))} appear more than once in \"mapping\"; give every node exactly once"
        )
    extra = [k for k in raw if k not in ids]
    missing = [n for n in ids if n not in raw]
    if extra or missing:
        parts = []
        if missing:
            parts.append(f"misses node(s) {missing}")
        if extra:
            parts.append(f"names unknown node(s) {extra}")
        raise ReplyError(f"the mapping {' and '.join(parts)}; give exactly these nodes once each: {list(ids)}")
    placements: dict[str, Placement] = {}
    for n in ids:
        value = raw[n]
        if not isinstance(value, str):
            raise ReplyError(
                f"node {n!r}: placement must be a string, got {value!r}; accepted: {_accepted(scenario, n)}"
            )
        try:
            p = parse_placement(value, where=f"node {n!r}")
        except MappingError:
            raise ReplyError(f"node {n!r}: unknown placement {value!r}; accepted: {_accepted(scenario, n)}") from None
        if p not in scenario.allowed(n):
            card = scenario.card_of(n)
            why = (
                f"tool {card.name!r} has no GPU implementation"
                if not card.has_gpu
                else f"this scenario is {scenario.mode.value} and allows only {_accepted(scenario, n)}"
            )
            raise ReplyError(f"node {n!r} cannot be {p.value}: {why}; accepted: {_accepted(scenario, n)}")
        placements[n] = p
    mapping = Mapping((n, placements[n]) for n in ids)
    refused = scenario.infeasibility(mapping)
    if refused is not None:
        reason = str(refused) if cards_visible else cold_reason(refused)
        raise ReplyError(
            f"the mapping is infeasible: {reason}. The gpu_now tools must fit the "
            f"{scenario.machine.vram_budget_mb:g} MB budget together, and each gpu_queue node must fit it alone"
        )
    text = rationale if isinstance(rationale, str) else str(rationale)
    return mapping, text[:MAX_RATIONALE_CHARS]


def check_mapping(scenario: Scenario, mapping: Mapping) -> str:
    """'' when a mapping is well-formed and passes the budget and deadlock checks, else the reason."""
    try:
        scenario.validate_mapping(mapping)
    except MappingError as exc:
        return str(exc)
    refused = scenario.infeasibility(mapping)
    return "" if refused is None else str(refused)
