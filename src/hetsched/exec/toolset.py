"""Which real implementation runs each tool of a scenario, and at which size preset: shared by
the real executors (local, Ray) so both refuse a scenario the same way.

Imports the model and the tool registry.
"""

from __future__ import annotations

from hetsched.model import InputError, Placement, Scenario, ToolCard
from hetsched.tools.base import Tool, check_size
from hetsched.tools.registry import get_tool, tool_names


def default_size(scenario: Scenario, cuda: bool) -> str:
    """The size preset the cards were profiled at (``provenance.preset``), else full on CUDA and tiny
    otherwise."""
    presets = {c.provenance.preset for c in scenario.cards.values() if c.provenance.preset}
    if len(presets) == 1:
        return presets.pop()
    return "full" if cuda else "tiny"


def scenario_tools(scenario: Scenario, size: str) -> dict[str, Tool]:
    """The registered implementation of every tool the scenario uses, by name; an InputError naming
    the tool when one has none, or when its card claims a GPU implementation the tool lacks."""
    size = check_size(size)
    tools: dict[str, Tool] = {}
    for name in scenario.workflow.tools:
        try:
            tools[name] = get_tool(name, size)
        except InputError:
            raise InputError(
                f"scenario {scenario.name!r}: tool {name!r} has no implementation to run; registered tools: "
                f"{', '.join(tool_names())} (and NAME_xK); register yours with hetsched.tools.register_tool "
                "and pass its module with the executor option tool_modules=my_module"
            ) from None
        if scenario.cards[name].has_gpu and not tools[name].has_gpu:
            raise InputError(f"scenario {scenario.name!r}: the card of {name!r} says has_gpu, but the tool has "
                             "no GPU implementation; set has_gpu: false on the card")
    return tools


def node_timeout_s(
    card: ToolCard, placement: Placement, timeout_s: float | None, factor: float, min_timeout_s: float
) -> float:
    """Time limit of one node, seconds: ``timeout_s`` when given, else ``factor`` times the card's
    latency on the placement (its load included for ``gpu_queue``: the slower of ``load_ms`` and ``load_cold_ms``,
    since a load whose memory has gone cold is no fault), at least ``min_timeout_s``."""
    if timeout_s is not None:
        return timeout_s
    ms = card.cpu_ms if placement is Placement.CPU else (card.gpu_ms or card.cpu_ms)
    if placement is Placement.GPU_QUEUE:
        ms += max(card.load_ms, card.load_cold_ms or 0.0)
    return max(min_timeout_s, factor * ms / 1000.0)
