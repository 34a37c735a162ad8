"""The feasibility guard the baselines share: their one departure from their sources.

HEFT, StarPU's dmda, UCB1 and the memory-aware greedy know nothing (or, for dmda, little) of a
VRAM budget with a ``gpu_queue``; taken literally they propose mappings that cannot run (a
``gpu_now`` set over the budget, a queued node that can never be admitted, or a FIFO deadlock:
a queued node waiting for memory held by ``gpu_now`` tools that depend on it, or behind such a
node). Each baseline keeps its own rule and asks :func:`model_check` before it proposes; what
each does when the check fails is written in its module and in docs/baselines.md.

The check is the planner's (``PolicyContext.planner``: the scenario's static checks, then a
noise-free simulation for the FIFO deadlocks only execution order shows), or the scenario's
static check alone when the loop gives no planner. Policies never import the simulator.

Imports the model only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hetsched.model import Infeasibility, Mapping, Placement, Planner, Scenario

Check = Callable[[Mapping], Infeasibility | None]
"""Why a mapping cannot run under the model, or None."""


def model_check(scenario: Scenario, planner: Planner | None) -> Check:
    """The planner's check (static + noise-free FIFO deadlocks), else the scenario's static check."""
    if planner is not None:
        return planner.infeasibility
    return scenario.infeasibility


def place_in_order(
    scenario: Scenario,
    order: Sequence[str],
    choices: Callable[[str, dict[str, Placement]], Sequence[Placement]],
    check: Check,
) -> tuple[dict[str, Placement], list[str]]:
    """Place nodes one at a time, in ``order``, each on the first of its ``choices`` that keeps the
    mapping so far (every node not yet placed on the CPU) able to run; the CPU when none does.

    ``choices(node, placed)`` lists a node's preferred placements given the placements so far
    (the baseline's own rule). Since every accepted step passes the check, so does the result;
    all-CPU always can run. Returns the placements of every node and a note per node that did
    not get its first choice.
    """
    place = {n: Placement.CPU for n in scenario.workflow.node_ids}
    notes: list[str] = []
    for node in order:
        wanted = list(choices(node, dict(place)))
        got = Placement.CPU
        refused: list[str] = []
        for p in wanted:
            if p is Placement.CPU:
                break
            trial = dict(place)
            trial[node] = p
            reason = check(Mapping(trial))
            if reason is None:
                got = p
                break
            refused.append(f"{p.value} ({reason.kind.label})")
        place[node] = got
        if refused:
            notes.append(f"{node}: guard refused {', '.join(refused)} -> {got.value}")
    return place, notes


__all__ = ["Check", "model_check", "place_in_order"]
