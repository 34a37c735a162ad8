"""The scenario's static check (``Scenario.infeasibility``), incremental around a base mapping.

The monitor ranks hundreds of one- and two-node variants of its base mapping each round; building
each variant as a :class:`~hetsched.model.Mapping` and checking it from scratch cost O(n^2) per
variant (the ``gpu_now`` set, then every queued node against the ``gpu_now`` tools among its
descendants). :class:`StaticCheck` compiles the scenario once (descendants as bit masks, tool and
node memory), :meth:`StaticCheck.around` summarizes a base mapping once (resident tools, memory
held below each queued node), and :meth:`Around.kind` then answers for a variant given as its
changed nodes in O(queued nodes): the same verdict as ``Scenario.infeasibility`` (which kind:
OOM, never admissible, deadlock; or None). A sum within a hair of the budget, where the order of
float additions could decide, is settled by ``Scenario.infeasibility`` itself. The reason's text
is always the scenario's (:meth:`StaticCheck.reason`).

Imports only ``hetsched.model``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetsched.model import Infeasibility, InfeasibleKind, Mapping, Scenario
from hetsched.model.mapping import NOW_CODE, QUEUE_CODE

Codes = tuple[int, ...]
"""A mapping as placement codes in workflow node order (``Placement.code``)."""
Change = tuple[int, int]
"""(node index, new placement code)."""


class StaticCheck:
    """A scenario compiled for fast static checks of mappings given as placement codes."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        c = scenario.compiled  # the one compile of the scenario (hetsched.model.contention)
        self.order: tuple[str, ...] = c.names
        self.index: dict[str, int] = c.index
        """node id -> position in ``order``."""
        self.tool: tuple[int, ...] = c.tool_idx
        self.tool_vram: tuple[float, ...] = c.tool_vram
        self.node_vram: tuple[float, ...] = tuple(self.tool_vram[t] for t in self.tool)
        self.budget = scenario.machine.vram_budget_mb
        self.tolerance = 1e-9 * (self.budget + sum(self.tool_vram))
        self.desc: tuple[int, ...] = scenario.descendant_masks
        tool_nodes = [0] * len(c.tools)
        for i, t in enumerate(self.tool):
            tool_nodes[t] |= 1 << i
        self.tool_nodes: tuple[int, ...] = tuple(tool_nodes)
        wf = scenario.workflow
        preds: list[list[int]] = [[] for _ in self.order]
        for e in wf.edges:
            preds[self.index[e.dst]].append(self.index[e.src])
        anc = [0] * len(self.order)
        for v in wf.topo_order:
            i = self.index[v]
            acc = 0
            for j in preds[i]:
                acc |= (1 << j) | anc[j]
            anc[i] = acc
        self.anc: tuple[int, ...] = tuple(anc)
        """Per node, a bit mask of the nodes it depends on (transitively): ``desc`` read the other way."""

    def codes(self, mapping: Mapping) -> Codes:
        """Placement codes of a mapping in node order."""
        return self.scenario.compiled.codes(mapping)

    def mapping(self, codes: Sequence[int]) -> Mapping:
        """The mapping of placement codes (node order)."""
        return self.scenario.compiled.mapping(codes)

    def reason(self, codes: Sequence[int]) -> Infeasibility | None:
        """The scenario's own verdict and text (``Scenario.infeasibility``)."""
        return self.scenario.infeasibility(self.mapping(codes))

    def around(self, codes: Codes) -> Around:
        """A summary of ``codes`` for checking its variants."""
        return Around(self, codes)


class Around:
    """A base mapping summarized for incremental checks of its one- and two-node variants."""

    def __init__(self, check: StaticCheck, codes: Codes) -> None:
        self.check = check
        self.codes = codes
        count = [0] * len(check.tool_vram)
        now_mask = 0
        for i, c in enumerate(codes):
            if c == NOW_CODE:
                count[check.tool[i]] += 1
                now_mask |= 1 << i
        self.count = count
        self.now_mask = now_mask
        self.need = sum(v for v, k in zip(check.tool_vram, count, strict=True) if k)
        self.queued: tuple[int, ...] = tuple(i for i, c in enumerate(codes) if c == QUEUE_CODE)
        self.queued_mask = sum(1 << q for q in self.queued)
        self._held: dict[int, float] = {}
        self._verdicts: dict[tuple[Change, ...], InfeasibleKind | None] = {}
        self._triggers: list[int] | None = None
        self._triggers_mask = 0
        self._at_risk: dict[int, int] = {}
        budget = check.budget
        self.never: tuple[int, ...] = tuple(q for q in self.queued if check.node_vram[q] > budget)
        """The base's queued nodes that do not fit the budget alone."""

    def _status(self, q: int, now_mask: int, moved_tools: Sequence[int]) -> int:
        """Queued ``q`` with ``now_mask`` resident: 0 fits, 1 within a hair of the budget, 2 deadlock."""
        ck = self.check
        held = self.held(q)
        below_old = self.now_mask & ck.desc[q]
        below_new = now_mask & ck.desc[q]
        if below_old != below_new:
            for t in moved_tools:
                nodes = ck.tool_nodes[t]
                was, now = bool(nodes & below_old), bool(nodes & below_new)
                if was != now:
                    held += ck.tool_vram[t] if now else -ck.tool_vram[t]
        total = ck.node_vram[q] + held
        if abs(total - ck.budget) <= ck.tolerance:
            return 1
        return 2 if total > ck.budget else 0

    @property
    def triggers(self) -> list[int]:
        """The base's queued nodes (in order) that deadlock or sit within a hair of the budget."""
        if self._triggers is None:
            self._triggers = [q for q in self.queued if self._status(q, self.now_mask, ())]
            self._triggers_mask = sum(1 << q for q in self._triggers)
        return self._triggers

    def at_risk(self, t: int) -> int:
        """Bit mask of the base's queued nodes that could deadlock (or come within a hair) if tool
        ``t`` came to hold memory below them: every node whose verdict can change when ``t`` is
        the only tool a variant adds (held memory otherwise only falls, and float sums are monotone)."""
        got = self._at_risk.get(t)
        if got is None:
            ck = self.check
            nodes, vram, floor = ck.tool_nodes[t], ck.tool_vram[t], ck.budget - ck.tolerance
            got = 0
            for q in self.queued:
                if not nodes & self.now_mask & ck.desc[q] and ck.node_vram[q] + (self.held(q) + vram) >= floor:
                    got |= 1 << q
            self._at_risk[t] = got
        return got

    def held(self, q: int) -> float:
        """Memory of the ``gpu_now`` tools with a node below ``q`` in the base (cached)."""
        got = self._held.get(q)
        if got is None:
            ck = self.check
            below = self.now_mask & ck.desc[q]
            got = 0.0
            if below:
                got = sum(ck.tool_vram[t] for t, nodes in enumerate(ck.tool_nodes) if nodes & below)
            self._held[q] = got
        return got

    def kind(self, changes: tuple[Change, ...]) -> InfeasibleKind | None:
        """The static verdict on the base with ``changes`` applied: an infeasibility kind, or None
        (remembered: the monitor asks again for the same variants after each probe)."""
        if changes in self._verdicts:
            return self._verdicts[changes]
        if self.check.scenario.compiled.window:  # under a workload: the scenario's own (stricter) check
            codes = list(self.codes)
            for i, new in changes:
                codes[i] = new
            reason = self.check.reason(codes)
            verdict = None if reason is None else reason.kind
        else:
            verdict = self._kind(changes)
        self._verdicts[changes] = verdict
        return verdict

    def _kind(self, changes: Sequence[Change]) -> InfeasibleKind | None:
        ck = self.check
        codes = self.codes
        budget, tol = ck.budget, ck.tolerance
        delta: dict[int, int] = {}
        now_mask = self.now_mask
        changed: dict[int, int] = {}
        for i, new in changes:
            old = codes[i]
            changed[i] = new
            if old == new:
                continue
            t = ck.tool[i]
            if old == NOW_CODE:
                delta[t] = delta.get(t, 0) - 1
                now_mask &= ~(1 << i)
            if new == NOW_CODE:
                delta[t] = delta.get(t, 0) + 1
                now_mask |= 1 << i
        need = self.need
        for t, d in delta.items():
            before, after = self.count[t] > 0, self.count[t] + d > 0
            if before != after:
                need += ck.tool_vram[t] if after else -ck.tool_vram[t]
        if abs(need - budget) <= tol:
            return self._exact(changes)
        if need > budget:
            return InfeasibleKind.OOM
        # never admissible: a base queued node left queued, or a newly queued one, that fits nowhere
        fresh = [i for i, new in changed.items() if new == QUEUE_CODE]
        if any(q not in changed for q in self.never) or any(ck.node_vram[q] > budget for q in fresh):
            return InfeasibleKind.NEVER_ADMISSIBLE
        # the base's queued nodes in order, then the newly queued: the first that deadlocks (or is
        # within a hair) decides. Only ancestors of a node whose gpu_now-ness changed can differ
        # from the base, so the others' verdicts are the base's (Around.triggers).
        moved_tools = list(delta)  # a swap within one tool nets 0 but may still move it across q
        flipped = now_mask ^ self.now_mask
        above = 0
        while flipped:
            low = flipped & -flipped
            above |= ck.anc[low.bit_length() - 1]
            flipped ^= low
        changed_mask = sum(1 << i for i in changed)
        affected = above & self.queued_mask & ~changed_mask
        # held memory only rises through tools that gain a gpu_now node; with none (or one), only
        # the base's triggers (and that tool's nodes at risk) can change verdict
        gained = {ck.tool[i] for i, new in changed.items() if new == NOW_CODE and codes[i] != NOW_CODE}
        if len(gained) <= 1:
            self.triggers  # noqa: B018 - fills the triggers' mask
            risky = self._triggers_mask
            for t in gained:
                risky |= self.at_risk(t)
            affected &= risky
        first = next((q for q in self.triggers if not (changed_mask >> q & 1) and not (affected >> q & 1)), None)
        while affected:
            low = affected & -affected
            q = low.bit_length() - 1
            if first is not None and q > first:
                break
            status = self._status(q, now_mask, moved_tools)
            if status:
                return self._exact(changes) if status == 1 else InfeasibleKind.DEADLOCK
            affected ^= low
        if first is not None:
            return self._exact(changes) if self._status(first, now_mask, moved_tools) == 1 else InfeasibleKind.DEADLOCK
        for q in fresh:
            status = self._status(q, now_mask, moved_tools)
            if status:
                return self._exact(changes) if status == 1 else InfeasibleKind.DEADLOCK
        return None

    def _exact(self, changes: Sequence[Change]) -> InfeasibleKind | None:
        codes = list(self.codes)
        for i, new in changes:
            codes[i] = new
        reason = self.check.reason(codes)
        return None if reason is None else reason.kind


__all__ = ["Around", "Change", "Codes", "StaticCheck"]
