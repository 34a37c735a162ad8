"""A given mapping every round: to measure one mapping on an executor (a reference, a mapping to
deploy) through the loop, with its recording and traces. Not in the registry (it needs the mapping);
build it with ``FixedMapping(mapping)`` and pass it to ``hs.run``."""

from __future__ import annotations

from collections.abc import Sequence

from hetsched.model import Mapping, Probe, Proposal, RoundRecord
from hetsched.monitor import Observations
from hetsched.policies.base import Policy


class FixedMapping(Policy):
    """Proposes ``mapping`` every round."""

    name = "fixed"

    def __init__(self, mapping: Mapping) -> None:
        super().__init__()
        self.mapping = mapping

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        return Proposal(self.ctx.scenario.validate_mapping(self.mapping), rationale="the given mapping")

    def converged(self, history: Sequence[RoundRecord]) -> bool:
        return True
