"""UCB1, the upper-confidence-bound bandit, over mappings.

Source: P. Auer, N. Cesa-Bianchi, P. Fischer, "Finite-time analysis of the multiarmed bandit
problem", Machine Learning 47(2-3):235-256, 2002, doi:10.1023/A:1013689704352, Figure 1
(policy UCB1): play each arm once; then play the arm j maximizing
x_mean_j + sqrt(2 ln n / n_j), with n the plays so far and n_j the plays of arm j.

Mapping onto our problem (docs/baselines.md):

- Arms. With n <= ``max_joint_nodes`` (8) nodes, each arm is a whole mapping: every mapping
  of the 2^n (binary) or 3^n (three-way) that the model says can run. Above that the arms are
  factored: each node runs its own UCB1 over its allowed placements and every node's chosen arm
  is credited with the round's reward.
- Departure, the feasibility guard (:mod:`hetsched.policies.guard`): Auer et al.'s arms are
  all playable; ours are not, so infeasible whole mappings are not arms, and a factored joint
  choice the model says cannot run is repaired before it is proposed: the nodes on a GPU
  placement go to the CPU one at a time, the node whose chosen arm has the lowest index first
  (untried arms count as the highest), until the mapping can run (all-CPU always can). The
  repaired mapping is what runs and what is credited.
- Reward in [0, 1]: lower_bound / measured E2E, clipped to [0, 1], where lower_bound is the
  contention-free critical path of the cards with each node on its faster device (no
  mapping can beat it without noise). Infeasible rounds get 0, the worst reward.
- Each arm is tried once before the confidence bound applies, in an order shuffled by the
  run seed; ties of the index go to the earlier arm in that order. So the policy is
  deterministic for a seed and needs at least as many rounds as arms, which is the paper's
  point about bandits.

The statistics are recomputed from ``history`` (the executed proposals and their traces; probes
are ignored) at each call, so a resumed run replays identically. Imports the model and the
Policy base (and its guard) only.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from hetsched.model import Mapping, Placement, Probe, Proposal, RoundRecord, Scenario, Trace
from hetsched.monitor import Observations
from hetsched.policies.base import Policy, PolicyContext
from hetsched.policies.guard import model_check


def lower_bound_ms(scenario: Scenario) -> float:
    """The reward's numerator: the isolated critical path, a lower bound on any mapping's E2E."""
    return scenario.isolated_critical_path_ms()


def reward(trace: Trace, lower_ms: float) -> float:
    """lower_bound / E2E in [0, 1]; 0 for an infeasible round."""
    if not trace.feasible or not trace.e2e_ms:
        return 0.0
    return min(1.0, max(0.0, lower_ms / trace.e2e_ms))


class Ucb1(Policy):
    """UCB1 (Auer et al. 2002) with whole-mapping arms up to ``max_joint_nodes`` nodes, factored above.

    Args:
        max_joint_nodes: largest workflow whose mappings are arms themselves (default 8).
    """

    name = "ucb1"
    adaptive = True

    def __init__(self, max_joint_nodes: int = 8) -> None:
        super().__init__()
        if max_joint_nodes < 0:
            raise ValueError(f"max_joint_nodes must be >= 0, got {max_joint_nodes}")
        self.max_joint_nodes = max_joint_nodes
        self._arms: list[Mapping] = []
        self._arm_index: dict[Mapping, int] = {}
        self._node_arms: dict[str, list[Placement]] = {}
        self._lower_ms = 1.0

    @property
    def factored(self) -> bool:
        """True when arms are per node (more than ``max_joint_nodes`` nodes)."""
        return len(self.ctx.scenario.workflow.node_ids) > self.max_joint_nodes

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        sc = ctx.scenario
        rng = random.Random(f"ucb1:{ctx.seed}")
        self._lower_ms = lower_bound_ms(sc)
        if self.factored:
            self._arms, self._arm_index = [], {}
            self._node_arms = {}
            for n in sc.workflow.node_ids:
                node_arms = list(sc.allowed(n))
                rng.shuffle(node_arms)
                self._node_arms[n] = node_arms
        else:
            check = model_check(sc, ctx.planner)
            # the static check first (cheap); only a mapping with a queued node can deadlock at run time
            arms = [m for m in sc.all_mappings() if sc.infeasibility(m) is None]
            arms = [m for m in arms if Placement.GPU_QUEUE not in m.values() or check(m) is None]
            rng.shuffle(arms)
            self._arms = arms
            self._arm_index = {m: i for i, m in enumerate(arms)}
            self._node_arms = {}

    def arms(self) -> tuple[Mapping, ...]:
        """The whole-mapping arms in their seeded order (empty when factored)."""
        return tuple(self._arms)

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        if self.factored:
            return self._propose_factored(history)
        k = len(self._arms)
        plays = [0] * k
        total = [0.0] * k
        t = 0
        for rec in history:
            i = self._arm_index.get(rec.mapping)
            if i is None:  # a round this policy would never have played (e.g. resumed from another)
                continue
            plays[i] += 1
            total[i] += reward(rec.trace, self._lower_ms)
            t += 1
        untried = [i for i in range(k) if plays[i] == 0]
        if untried:
            i = untried[0]
            return Proposal(
                self._arms[i],
                rationale=f"UCB1: initial play of arm {i + 1}/{k}",
                info={"arm": i, "arms": k, "phase": "initial"},
            )
        index = [total[i] / plays[i] + math.sqrt(2.0 * math.log(t) / plays[i]) for i in range(k)]
        best = max(range(k), key=lambda i: (index[i], -i))
        mean = total[best] / plays[best]
        return Proposal(
            self._arms[best],
            rationale=f"UCB1: arm {best + 1}/{k}, mean reward {mean:.3f}, index {index[best]:.3f}",
            info={
                "arm": best,
                "arms": k,
                "phase": "ucb",
                "mean_reward": mean,
                "index": index[best],
                "plays": plays[best],
            },
        )

    def _propose_factored(self, history: Sequence[RoundRecord]) -> Proposal:
        sc = self.ctx.scenario
        t = len(history)
        rewards = [reward(rec.trace, self._lower_ms) for rec in history]
        chosen: dict[str, Placement] = {}
        index_of: dict[str, float] = {}
        for n in sc.workflow.node_ids:
            arms = self._node_arms[n]
            plays = {a: 0 for a in arms}
            total = {a: 0.0 for a in arms}
            for rec, r in zip(history, rewards, strict=True):
                a = rec.mapping.get(n)
                if a in plays:
                    plays[a] += 1
                    total[a] += r
            untried = [a for a in arms if plays[a] == 0]
            if untried:
                chosen[n], index_of[n] = untried[0], math.inf
                continue
            n_plays = sum(plays.values())
            index = {a: total[a] / plays[a] + math.sqrt(2.0 * math.log(n_plays) / plays[a]) for a in arms}
            chosen[n] = max(arms, key=lambda a: (index[a], -arms.index(a)))
            index_of[n] = index[chosen[n]]
        mapping, repaired = self._guard(chosen, index_of)
        info: dict[str, object] = {"phase": "factored", "rounds_seen": t}
        rationale = f"UCB1 (factored per node), round {t}"
        if repaired:
            info["guard"] = repaired
            rationale += f"; guard moved {len(repaired)} node(s) to the CPU so the mapping can run"
        return Proposal(mapping, rationale=rationale, info=info)

    def _guard(self, chosen: dict[str, Placement], index_of: dict[str, float]) -> tuple[Mapping, list[str]]:
        """The factored choice, repaired until the model says it can run (module docstring)."""
        sc = self.ctx.scenario
        check = model_check(sc, self.ctx.planner)
        ids = sc.workflow.node_ids
        place = dict(chosen)
        mapping = Mapping((n, place[n]) for n in ids)
        if check(mapping) is None:
            return mapping, []
        position = {n: i for i, n in enumerate(ids)}
        on_gpu = sorted((n for n in ids if place[n].on_gpu), key=lambda n: (index_of[n], position[n]))
        repaired: list[str] = []
        for n in on_gpu:
            place[n] = Placement.CPU
            repaired.append(f"{n}: {chosen[n].value} -> cpu")
            mapping = Mapping((m, place[m]) for m in ids)
            # the static check first: it is exact for OOM and cheap; the planner adds FIFO deadlocks
            if sc.infeasibility(mapping) is None and check(mapping) is None:
                break
        return mapping, repaired
