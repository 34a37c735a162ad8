"""A scenario: a workflow, the cards of its tools, the machine, and the allowed placements.

Also the static checks every executor and policy share: is a mapping well-formed for this
scenario, and does its ``gpu_now`` set fit the VRAM budget. Part of the model package.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from enum import StrEnum
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer, model_validator

from hetsched.model.card import ToolCard
from hetsched.model.contention import Compiled
from hetsched.model.errors import MappingError, some
from hetsched.model.limits import Name, Text
from hetsched.model.machine import Machine
from hetsched.model.mapping import BINARY, THREE_WAY, Mapping, Placement
from hetsched.model.trace import Infeasibility, InfeasibleKind
from hetsched.model.workflow import Workflow
from hetsched.model.workload import Workload, load_infeasibility


class Mode(StrEnum):
    """Which placements a scenario allows."""

    BINARY = "binary"
    """cpu / gpu_now (PAPER.md's S1-S10)."""
    THREE_WAY = "three_way"
    """cpu / gpu_now / gpu_queue under an explicit VRAM budget (S11-S13)."""


class Scenario(BaseModel):
    """Everything needed to run, simulate or plan one workflow."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    """Scenario name (``S5``, ``fanout``...)."""
    description: Text = ""
    """What the workflow does."""
    shows: Text = ""
    """The property the scenario exists to show (checked by a test for bundled scenarios)."""
    mode: Mode = Mode.BINARY
    """Allowed placements."""
    workflow: Workflow
    """The DAG."""
    cards: dict[str, ToolCard]
    """Cards of the tools the workflow uses, by tool name."""
    machine: Machine = Machine()
    """Hardware and contention parameters."""
    source: str = ""
    """File the scenario was loaded from (for messages); empty when built in code."""
    workload: Workload | None = None
    """Requests under load (:mod:`hetsched.model.workload`); None: one request at a time (a round is
    one execution). Left out of the serialized form when None, so fingerprints of scenarios without
    one are those they always had."""

    @model_serializer(mode="wrap")
    def _omit_no_workload(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.workload is None:
            data.pop("workload", None)
        return data

    def with_workload(self, workload: Workload | None) -> Scenario:
        """The same scenario run under ``workload`` (None: one request at a time)."""
        return self.model_copy(update={"workload": workload})

    @model_validator(mode="after")
    def _cards_cover_tools(self) -> Scenario:
        for node in self.workflow.nodes:
            if node.tool not in self.cards:
                known = some(sorted(self.cards), quote=False) or "(none)"
                raise ValueError(f"node {node.id!r} uses tool {node.tool!r}, which has no card; known tools: {known}")
        for key, card in self.cards.items():
            if key != card.name:
                raise ValueError(f"card stored under {key!r} is named {card.name!r}; they must agree")
        return self

    def __repr__(self) -> str:  # the pydantic default prints every card and node: unreadable past a few
        m = self.machine
        return (f"Scenario({self.name!r}, {self.mode.value}, {len(self.workflow.nodes)} nodes, "
                f"{len(self.workflow.edges)} edges, {len(self.cards)} tools, {m.cpu_cores} cores, "
                f"budget {m.vram_budget_mb:g} MB)")

    # ------------------------------------------------------------------ placements
    @property
    def placements(self) -> tuple[Placement, ...]:
        """Placements the scenario's mode allows."""
        return THREE_WAY if self.mode is Mode.THREE_WAY else BINARY

    def card_of(self, node: str) -> ToolCard:
        """The card of the tool a node invokes."""
        return self.cards[self.workflow.tool_of[node]]

    def allowed(self, node: str) -> tuple[Placement, ...]:
        """Placements allowed for one node (CPU only when its tool has no GPU implementation)."""
        if not self.card_of(node).has_gpu:
            return (Placement.CPU,)
        return self.placements

    @cached_property
    def choices(self) -> tuple[tuple[Placement, ...], ...]:
        """Allowed placements per node, in workflow node order."""
        return tuple(self.allowed(n) for n in self.workflow.node_ids)

    @property
    def compiled(self) -> Compiled:
        """The scenario as index arrays for the contention model (:mod:`hetsched.model.contention`),
        built once and shared by the simulator, the estimators, the monitor and the searches.

        Kept with the objects it was built from and rebuilt when they differ: ``model_copy`` copies
        the instance's dict, so a copy with another machine, mode or cards must not inherit it."""
        key = (self.workflow, self.machine, self.cards, self.mode, self.workload)
        got = self.__dict__.get("_compiled")
        if got is None or any(a is not b for a, b in zip(got[0], key, strict=True)):
            got = (key, Compiled.of(self))
            self.__dict__["_compiled"] = got  # frozen model: a cache, as cached_property writes it
        compiled: Compiled = got[1]
        return compiled

    @cached_property
    def descendant_masks(self) -> tuple[int, ...]:
        """Per node, in workflow node order, a bit mask of every node that depends on it
        (transitively): bit i stands for ``workflow.node_ids[i]``. Computed once per scenario, in
        O(edges) big-integer ORs and n^2 bits of memory (12.5 MB at 10,000 nodes)."""
        wf = self.workflow
        index = {n: i for i, n in enumerate(wf.node_ids)}
        succ: list[list[int]] = [[] for _ in wf.node_ids]
        for e in wf.edges:
            succ[index[e.src]].append(index[e.dst])
        masks = [0] * len(wf.node_ids)
        for n in reversed(wf.topo_order):
            i = index[n]
            acc = 0
            for j in succ[i]:
                acc |= (1 << j) | masks[j]
            masks[i] = acc
        return tuple(masks)

    def mapping_space_size(self) -> int:
        """Number of well-formed mappings (before the VRAM check)."""
        size = 1
        for c in self.choices:
            size *= len(c)
        return size

    def all_mappings(self) -> Iterator[Mapping]:
        """Every well-formed mapping (feasible or not), in a fixed order."""
        ids = self.workflow.node_ids
        for combo in itertools.product(*self.choices):
            yield Mapping(zip(ids, combo, strict=True))

    def uniform(self, placement: Placement) -> Mapping:
        """Every node at ``placement`` where allowed, else on the CPU."""
        return Mapping(
            (n, placement if placement in self.allowed(n) else Placement.CPU) for n in self.workflow.node_ids
        )

    def isolated_critical_path_ms(self) -> float:
        """Longest source-to-sink chain with every node at its faster isolated latency.

        No contention, no transfers, no load: a lower bound on the E2E of any mapping.
        """
        wf = self.workflow
        finish: dict[str, float] = {}
        for n in wf.topo_order:
            card = self.card_of(n)
            own = card.cpu_ms if card.gpu_ms is None else min(card.cpu_ms, card.gpu_ms)
            finish[n] = max((finish[p] for p in wf.preds(n)), default=0.0) + own
        return max(finish[s] for s in wf.sinks)

    # ------------------------------------------------------------------ checks
    def validate_mapping(self, mapping: Mapping, where: str = "mapping") -> Mapping:
        """Raise :class:`MappingError` unless every node is placed once, legally; return it in node order."""
        ids = self.workflow.node_ids
        missing = [n for n in ids if n not in mapping]
        extra = [n for n in mapping if n not in self.workflow.tool_of]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"misses nodes [{some(missing)}]")
            if extra:
                parts.append(f"invents nodes [{some(extra)}]")
            raise MappingError(f"{where} {' and '.join(parts)}; scenario {self.name!r} has nodes [{some(ids)}]")
        for n in ids:
            p = mapping[n]
            if p not in self.allowed(n):
                tool = self.workflow.tool_of[n]
                why = (
                    f"tool {tool!r} has no GPU implementation"
                    if not self.card_of(n).has_gpu
                    else f"scenario {self.name!r} is {self.mode.value}"
                )
                accepted = ", ".join(a.value for a in self.allowed(n))
                raise MappingError(f"{where}: node {n!r} cannot be {p.value} ({why}); accepted: {accepted}")
        return Mapping((n, mapping[n]) for n in ids)

    def gpu_now_tools(self, mapping: Mapping) -> tuple[str, ...]:
        """Distinct tools with at least one ``gpu_now`` node (each resident once)."""
        return tuple(
            dict.fromkeys(self.workflow.tool_of[n] for n in self.workflow.node_ids if mapping[n] is Placement.GPU_NOW)
        )

    def gpu_now_vram_mb(self, mapping: Mapping) -> float:
        """VRAM the ``gpu_now`` tools hold at t = 0, counted once per tool."""
        return sum(self.cards[t].vram_mb for t in self.gpu_now_tools(mapping))

    def infeasibility(self, mapping: Mapping) -> Infeasibility | None:
        """The static reason a well-formed mapping cannot run, or None when it passes the static checks.

        Static checks: the ``gpu_now`` set must fit the budget at t = 0 (where it is largest),
        every ``gpu_queue`` node must fit an empty GPU, and no queued node may need memory held
        by ``gpu_now`` tools whose nodes depend on it (:meth:`queue_deadlock`). Head-of-line
        waits in the FIFO queue that end in a deadlock are found by the executor. Under the
        scenario's workload (a window of several requests) every queued node must also fit beside
        all the ``gpu_now`` tools (:func:`~hetsched.model.workload.load_infeasibility`).
        """
        budget = self.machine.vram_budget_mb
        tools = self.gpu_now_tools(mapping)
        need = sum(self.cards[t].vram_mb for t in tools)
        if need > budget:
            parts = " + ".join(f"{t} {self.cards[t].vram_mb:g}" for t in tools)
            return Infeasibility(InfeasibleKind.OOM, f"gpu_now tools need {need:g} MB of {budget:g} MB ({parts})")
        for n in self.workflow.node_ids:
            if mapping[n] is Placement.GPU_QUEUE:
                card = self.card_of(n)
                if card.vram_mb > budget:
                    return Infeasibility(
                        InfeasibleKind.NEVER_ADMISSIBLE,
                        f"node {n!r} ({card.name}) needs {card.vram_mb:g} MB > budget {budget:g} MB",
                    )
        deadlock = self.queue_deadlock(mapping)
        if deadlock is not None or self.workload is None:
            return deadlock
        return load_infeasibility(self, mapping, self.workload)

    def queue_deadlock(self, mapping: Mapping) -> Infeasibility | None:
        """The reason a ``gpu_queue`` node can never be admitted because of its own descendants, or None.

        ``gpu_now`` tools stay resident from the start until their last node ends, so a tool with
        a ``gpu_now`` node downstream of a queued node q still holds its memory when q is ready,
        and keeps holding it until q has run: if q does not fit beside those tools, it never will.
        (Waits for memory held by nodes that do not depend on q end by themselves.)
        """
        wf = self.workflow
        budget = self.machine.vram_budget_mb
        ids = wf.node_ids
        codes = [mapping[n] for n in ids]
        queued = [i for i, p in enumerate(codes) if p is Placement.GPU_QUEUE]
        if not queued:
            return None
        # gpu_now tools numbered in order of their first gpu_now node; per node, a small bit mask of
        # the gpu_now tools with a node below it, propagated bottom-up in O(edges) (no n x n masks)
        tool_bit: dict[str, int] = {}
        now_bit = [0] * len(ids)
        for i, p in enumerate(codes):
            if p is Placement.GPU_NOW:
                now_bit[i] = 1 << tool_bit.setdefault(wf.tool_of[ids[i]], len(tool_bit))
        if not tool_bit:
            return None
        tools = list(tool_bit)
        below = [0] * len(ids)
        succ, bottom_up = self._successors
        for i in bottom_up:
            acc = 0
            for j in succ[i]:
                acc |= now_bit[j] | below[j]
            below[i] = acc
        for i in queued:
            if not below[i]:
                continue  # no gpu_now node depends on it: nothing can hold memory it waits for
            q = ids[i]
            holders = [t for b, t in enumerate(tools) if below[i] >> b & 1]
            held = sum(self.cards[t].vram_mb for t in holders)
            need = self.card_of(q).vram_mb
            if holders and need + held > budget:
                return Infeasibility(
                    InfeasibleKind.DEADLOCK,
                    f"node {q!r} ({self.card_of(q).name}) needs {need:g} MB but gpu_now tools "
                    f"{holders} hold {held:g} MB of {budget:g} MB until nodes that depend on it finish",
                )
        return None

    @cached_property
    def _successors(self) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        """Per node (workflow node order) the indices of its direct successors, and the node
        indices in reverse topological order (for bottom-up passes such as :meth:`queue_deadlock`)."""
        wf = self.workflow
        index = {n: i for i, n in enumerate(wf.node_ids)}
        succ: list[list[int]] = [[] for _ in wf.node_ids]
        for e in wf.edges:
            succ[index[e.src]].append(index[e.dst])
        return tuple(tuple(s) for s in succ), tuple(index[n] for n in reversed(wf.topo_order))


_COLD_DETAILS = {
    InfeasibleKind.OOM: "the gpu_now tools did not fit the VRAM budget",
    InfeasibleKind.NEVER_ADMISSIBLE: "a gpu_queue node could never get the VRAM it needs",
    InfeasibleKind.DEADLOCK: "a gpu_queue node waited for VRAM held by tools that depend on queued work",
}
"""Cold-start wording of infeasibility details, by kind."""


def cold_reason(infeasibility: Infeasibility | None) -> str:
    """The reason without the card figures it quotes (for cold start): its kind, in fixed words."""
    if infeasibility is None:
        return ""
    detail = _COLD_DETAILS.get(infeasibility.kind, "details withheld in cold start (they may quote the tool cards)")
    return str(Infeasibility(infeasibility.kind, detail))
