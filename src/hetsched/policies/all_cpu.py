"""All-CPU: every node on the CPU. Always feasible (touches no VRAM); the trivial lower baseline."""

from __future__ import annotations

from collections.abc import Sequence

from hetsched.model import Placement, Probe, Proposal, RoundRecord
from hetsched.monitor import Observations
from hetsched.policies.base import Policy


class AllCpu(Policy):
    """Every node on the CPU."""

    name = "all-cpu"

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        return Proposal(self.ctx.scenario.uniform(Placement.CPU), rationale="every node on the CPU")
