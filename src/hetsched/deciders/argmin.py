"""The ``argmin`` decider (ablation): always the lowest measured mapping among rounds and probes.

The critique of the paper (PAPER.md, weak point 4) asks what an LLM adds over a plain argmin
over what the monitor measured; this decider is that baseline. Before anything has run it
takes the first of all-``gpu_now``, all-``gpu_queue`` (three-way), all-CPU that passes
validation. It ignores the cards entirely. Not an LLM. Imports only ``hetsched.model``.
"""

from __future__ import annotations

import json
import time

from hetsched.deciders.base import Decider, Decision, DecisionContext
from hetsched.deciders.evidence import best_measured
from hetsched.deciders.rules import first_valid_uniform
from hetsched.model import Attempt

NOT_AN_LLM = "(argmin decider: lowest measured mapping, not an LLM; no prompt was sent)"


class ArgminDecider(Decider):
    """The mapping with the lowest mean measured E2E; no hysteresis, no cards."""

    name = "argmin"

    def decide(self, ctx: DecisionContext) -> Decision:
        t0 = time.perf_counter()
        best = best_measured(ctx.observations)
        if best is None:
            mapping, attempts = first_valid_uniform(ctx.scenario, NOT_AN_LLM)
            rationale = "nothing measured: first uniform mapping that passes validation"
            last = attempts[-1]
            attempts[-1] = Attempt(last.attempt, last.prompt, last.reply, rationale,
                                   latency_ms=(time.perf_counter() - t0) * 1000.0)
            return Decision(mapping, rationale, tuple(attempts))
        rationale = f"lowest measured mean E2E: {best.mean_e2e_ms:.1f} ms over {best.runs} run(s)"
        reply = json.dumps({"mapping": best.mapping.to_dict(), "rationale": rationale})
        attempt = Attempt(1, NOT_AN_LLM, reply, rationale, latency_ms=(time.perf_counter() - t0) * 1000.0)
        return Decision(best.mapping, rationale, (attempt,))
