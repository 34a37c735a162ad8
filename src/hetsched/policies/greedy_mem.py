"""Memory-aware greedy: the paper's baseline for the VRAM-constrained three-way scenarios.

Source: the memory-aware greedy baseline of "Agentic CPU-GPU Scheduling for Heterogeneous AI
Workloads" (PAPER.md, S11-S13, Table 5), in the common form of knapsack-style greedy placement
by benefit under a capacity (e.g. first-fit decreasing). Rule: tools in descending GPU benefit
get ``gpu_now`` while the VRAM budget allows; a tool that no longer fits gets ``gpu_queue``
when its single-shot queue speedup cpu_ms / (gpu_ms + load) is above 1 (and it fits the
budget alone), else ``cpu``; the load is the one the contention model charges on this machine
(:func:`hetsched.model.contention.queue_speedup` with ``queue_load_ms``: the card's ``load_ms``, or
with the machine's ``cold_load_share`` its expectation between ``load_ms`` and ``load_cold_ms``).

Choices (docs/baselines.md):
- GPU benefit = the time the GPU saves on the tool, (cpu_ms - gpu_ms) x its number of nodes,
  in ms; ties by speedup, then name. Only tools the GPU speeds up (gpu_ms < cpu_ms) are
  candidates; the others, and tools without a GPU implementation, run on the CPU.
- A tool's nodes all share its placement (the budget counts a resident tool once).
- In a binary scenario (no queue) a tool that does not fit runs on the CPU.

It cannot see that demoting a strong tool to the queue frees VRAM for a more valuable one
(the paper's S11/S13 failure): that is the baseline's behaviour, not a bug. It never proposes a
``gpu_now`` set over the budget.

Departure (the feasibility guard, :mod:`hetsched.policies.guard`): the plain rule can queue a
tool whose nodes then wait forever for memory held by a resident tool downstream of them (a
deadlock; on random three-way fan-outs this is common). When the model's check says the rule's
mapping cannot run, the rule is applied again tool by tool, and a step the check refuses takes
the rule's next option instead (``gpu_now`` -> ``gpu_queue`` -> ``cpu``), so what it proposes
can always run. Where the plain rule's mapping can run, nothing changes.
Non-adaptive. Imports the model and the Policy base only.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetsched.model import Mapping, Mode, Placement, Probe, Proposal, RoundRecord, Scenario
from hetsched.model.contention import queue_speedup
from hetsched.monitor import Observations
from hetsched.policies.base import Policy
from hetsched.policies.guard import Check, model_check


def benefit_order(scenario: Scenario) -> list[str]:
    """GPU-capable tools that the GPU speeds up, by descending time saved (ms), then speedup, then name."""
    wf = scenario.workflow
    uses = {t: sum(1 for n in wf.node_ids if wf.tool_of[n] == t) for t in wf.tools}
    tools = [t for t in wf.tools if scenario.cards[t].gpu_ms is not None]
    tools = [t for t in tools if (scenario.cards[t].gpu_ms or 0.0) < scenario.cards[t].cpu_ms]

    def key(t: str) -> tuple[float, float, str]:
        c = scenario.cards[t]
        saved = (c.cpu_ms - (c.gpu_ms or 0.0)) * uses[t]
        return (-saved, -(c.speedup or 0.0), t)

    return sorted(tools, key=key)


def _node_mapping(scenario: Scenario, place: dict[str, Placement]) -> Mapping:
    return Mapping((n, place[scenario.workflow.tool_of[n]]) for n in scenario.workflow.node_ids)


def greedy_placements(scenario: Scenario, check: Check | None = None) -> tuple[dict[str, Placement], list[str]]:
    """Tool -> placement by the greedy rule, and one note per decision.

    With ``check`` (the feasibility guard), a rule's mapping that the check refuses is rebuilt
    tool by tool, each step kept only when the mapping so far passes the check.
    """
    place, notes = _greedy(scenario, None)
    if check is None or check(_node_mapping(scenario, place)) is None:
        return place, notes
    return _greedy(scenario, check)


def _greedy(scenario: Scenario, check: Check | None) -> tuple[dict[str, Placement], list[str]]:
    budget = scenario.machine.vram_budget_mb
    three_way = scenario.mode is Mode.THREE_WAY
    used = 0.0
    place: dict[str, Placement] = {t: Placement.CPU for t in scenario.workflow.tools}
    notes: list[str] = []

    def refused(t: str, p: Placement) -> str | None:
        """Why the guard refuses tool ``t`` at ``p`` given the tools placed so far (None: accepted)."""
        if check is None:
            return None
        reason = check(_node_mapping(scenario, {**place, t: p}))
        return None if reason is None else reason.kind.label

    for t in benefit_order(scenario):
        c = scenario.cards[t]
        why_now = refused(t, Placement.GPU_NOW) if used + c.vram_mb <= budget else "does not fit"
        if why_now is None:
            used += c.vram_mb
            place[t] = Placement.GPU_NOW
            notes.append(f"{t}: gpu_now ({used:g}/{budget:g} MB)")
            continue
        lead = f"{t}: does not fit ({c.vram_mb:g} MB)" if why_now == "does not fit" else f"{t}: gpu_now {why_now}"
        qsp = queue_speedup(c, scenario.machine) or 0.0  # benefit_order gives GPU-capable tools only
        if three_way and qsp > 1.0 and c.vram_mb <= budget:
            why_queue = refused(t, Placement.GPU_QUEUE)
            if why_queue is None:
                place[t] = Placement.GPU_QUEUE
                notes.append(f"{lead}, queue speedup {qsp:.2f} > 1: gpu_queue")
                continue
            notes.append(f"{lead}, gpu_queue {why_queue} (guard): cpu")
            continue
        qs = f"queue speedup {qsp:.2f}" if three_way else "binary scenario"
        notes.append(f"{lead}, {qs}: cpu")
    return place, notes


class GreedyMem(Policy):
    """Tools by descending GPU benefit: ``gpu_now`` while the budget allows, then queue or CPU."""

    name = "greedy-mem"

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        sc = self.ctx.scenario
        place, notes = greedy_placements(sc, model_check(sc, self.ctx.planner))
        mapping = _node_mapping(sc, place)
        return Proposal(
            mapping,
            rationale=f"memory-aware greedy: gpu_now {sc.gpu_now_vram_mb(mapping):g} of "
            f"{sc.machine.vram_budget_mb:g} MB",
            info={"decisions": notes},
        )

    def converged(self, history: Sequence[RoundRecord]) -> bool:
        return True
