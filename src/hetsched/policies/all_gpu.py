"""All-GPU: the GPU-first default of agentic frameworks (LangGraph/LangChain style).

Every tool with a GPU implementation gets ``gpu_now``; CPU-only tools stay on the CPU. It
ignores contention (Factor A) and the VRAM budget (Factor B), which is why it is slow on
fan-out and OOMs on tight budgets (PAPER.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from hetsched.model import Placement, Probe, Proposal, RoundRecord
from hetsched.monitor import Observations
from hetsched.policies.base import Policy


class AllGpu(Policy):
    """``gpu_now`` for every GPU-capable node."""

    name = "all-gpu"

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        return Proposal(
            self.ctx.scenario.uniform(Placement.GPU_NOW),
            rationale="GPU-first: gpu_now for every tool with a GPU implementation",
        )
