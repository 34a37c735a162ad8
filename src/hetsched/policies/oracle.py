"""The oracle policy: proposes the reference mapping every round (the model's optimum).

The search itself lives on the evaluation side (``hetsched.search.oracle`` and
``hetsched.search.reference``); this policy asks the planner the loop gives it, so it proposes
the exact optimum when the space allows and a labelled best-known mapping otherwise.
Imports the model and the policy base only.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetsched.model import Probe, Proposal, RoundRecord
from hetsched.monitor import Observations
from hetsched.policies.base import Policy


class Oracle(Policy):
    """Proposes the planner's reference every round (the mapping every ratio is taken to)."""

    name = "oracle"

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        ref = self.planner.reference()
        what = "noise-free optimum" if ref.exact else ref.label
        return Proposal(ref.mapping, rationale=f"{what}, {ref.e2e_ms:.1f} ms")
