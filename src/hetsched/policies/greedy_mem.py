"""Memory-aware greedy: the paper's baseline for the VRAM-constrained three-way scenarios.

Source: the memory-aware greedy baseline of "Agentic CPU-GPU Scheduling for Heterogeneous AI
Workloads" (PAPER.md, S11-S13, Table 5), in the common form of knapsack-style greedy placement
by benefit under a capacity (e.g. first-fit decreasing). Rule: tools in descending GPU benefit
get ``gpu_now`` while the VRAM budget allows; a tool that no longer fits gets ``gpu_queue``
when its single-shot queue speedup cpu_ms / (gpu_ms + load_ms) is above 1 (and it fits the
budget alone), else ``cpu``.

Choices (docs/baselines.md):
- GPU benefit = the time the GPU saves on the tool, (cpu_ms - gpu_ms) x its number of nodes,
  in ms; ties by speedup, then name. Only tools the GPU speeds up (gpu_ms < cpu_ms) are
  candidates; the others, and tools without a GPU implementation, run on the CPU.
- A tool's nodes all share its placement (the budget counts a resident tool once).
- In a binary scenario (no queue) a tool that does not fit runs on the CPU.

It cannot see that demoting a strong tool to the queue frees VRAM for a more valuable one
(the paper's S11/S13 failure), and it does not check for queue deadlocks: both are the
baseline's behaviour, not bugs. It never proposes a ``gpu_now`` set over the budget.
Non-adaptive. Imports the model and the Policy base only.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetsched.model import Mapping, Mode, Placement, Probe, Proposal, RoundRecord, Scenario
from hetsched.monitor import Observations
from hetsched.policies.base import Policy


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


def greedy_placements(scenario: Scenario) -> tuple[dict[str, Placement], list[str]]:
    """Tool -> placement by the greedy rule, and one note per decision."""
    budget = scenario.machine.vram_budget_mb
    three_way = scenario.mode is Mode.THREE_WAY
    used = 0.0
    place: dict[str, Placement] = {t: Placement.CPU for t in scenario.workflow.tools}
    notes: list[str] = []
    for t in benefit_order(scenario):
        c = scenario.cards[t]
        if used + c.vram_mb <= budget:
            used += c.vram_mb
            place[t] = Placement.GPU_NOW
            notes.append(f"{t}: gpu_now ({used:g}/{budget:g} MB)")
        elif three_way and (c.queue_speedup or 0.0) > 1.0 and c.vram_mb <= budget:
            place[t] = Placement.GPU_QUEUE
            notes.append(f"{t}: does not fit ({c.vram_mb:g} MB), queue speedup {c.queue_speedup:.2f} > 1: gpu_queue")
        else:
            qs = f"queue speedup {c.queue_speedup:.2f}" if three_way else "binary scenario"
            notes.append(f"{t}: does not fit ({c.vram_mb:g} MB), {qs}: cpu")
    return place, notes


class GreedyMem(Policy):
    """Tools by descending GPU benefit: ``gpu_now`` while the budget allows, then queue or CPU."""

    name = "greedy-mem"

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        sc = self.ctx.scenario
        place, notes = greedy_placements(sc)
        mapping = Mapping((n, place[sc.workflow.tool_of[n]]) for n in sc.workflow.node_ids)
        return Proposal(
            mapping,
            rationale=f"memory-aware greedy: gpu_now {sc.gpu_now_vram_mb(mapping):g} of "
            f"{sc.machine.vram_budget_mb:g} MB",
            info={"decisions": notes},
        )

    def converged(self, history: Sequence[RoundRecord]) -> bool:
        return True
