"""``hs.Workflow``: build a scenario from Python (nodes and edges), the same
:class:`~hetsched.model.Scenario` a YAML scenario file loads to.

A node names a tool: a registered or built-in tool by name (its card comes from the tool
library: the bundled reference library, or the one given as ``tools=``), or a
:class:`~hetsched.tools.functions.ToolSpec` from :func:`~hetsched.tools.functions.function_tool`
(its implementation and card travel with the workflow to a :class:`~hetsched.session.Session`)::

    import hetsched as hs

    wf = (hs.Workflow("rag", mode="three_way", vram_budget_mb=30, tools="tools_tiny.yaml")
          .node("A", "pdf_parse").node("C", "text_chunker", after="A"))
    scenario = wf.scenario()

Imports the model (cards, workflow, machine, scenario, files) and the tool specs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hetsched.model import Edge, InputError, Machine, Mode, Node, Scenario, ToolCard
from hetsched.model import Workflow as WorkflowGraph
from hetsched.model.errors import some
from hetsched.model.files import bundled_library_path, format_validation_error, load_tool_library, resolve_card
from hetsched.tools.base import Tool
from hetsched.tools.functions import ToolSpec


class Workflow:
    """A scenario under construction: nodes (each invoking one tool), edges, cards and the machine.

    Args:
        name: the scenario's name.
        mode: ``binary`` (cpu / gpu_now) or ``three_way`` (cpu / gpu_now / gpu_queue under a budget).
        tools: the tool library cards come from for tools named by string (a file path, or a dict
            of cards); default: the bundled reference library.
        machine: a :class:`~hetsched.model.Machine` or a dict of its fields.
        vram_budget_mb, cpu_cores: shortcuts for those machine fields.
        description: what the workflow does.
    """

    def __init__(
        self,
        name: str,
        *,
        mode: str | Mode = Mode.BINARY,
        tools: str | Path | dict[str, ToolCard] | None = None,
        machine: Machine | dict[str, Any] | None = None,
        vram_budget_mb: float | None = None,
        cpu_cores: int | None = None,
        description: str = "",
    ) -> None:
        self.name = name
        try:
            self.mode = Mode(mode)
        except ValueError:
            raise InputError(f"workflow {name!r}: mode {mode!r} is not known; accepted: "
                             f"{', '.join(m.value for m in Mode)}") from None
        self.description = description
        self._library_ref = tools
        self._library: dict[str, ToolCard] | None = dict(tools) if isinstance(tools, dict) else None
        fields = machine.model_dump() if isinstance(machine, Machine) else dict(machine or {})
        if vram_budget_mb is not None:
            fields["vram_budget_mb"] = vram_budget_mb
        if cpu_cores is not None:
            fields["cpu_cores"] = cpu_cores
        try:
            self.machine = Machine.model_validate(fields)
        except ValidationError as exc:
            raise InputError(format_validation_error(exc, f"workflow {name!r}", prefix="machine")) from None
        self._nodes: list[Node] = []
        self._edges: list[Edge] = []
        self._cards: dict[str, ToolCard] = {}
        self._impls: dict[str, Tool] = {}

    # ------------------------------------------------------------------ building
    def node(
        self, node_id: str, tool: str | ToolSpec, *, after: str | Sequence[str] = (), data_mb: float = 0.0
    ) -> Workflow:
        """Add a node invoking ``tool`` (a tool name, or a :class:`ToolSpec`), with an edge from each
        node in ``after`` (each carrying ``data_mb``); returns the builder for chaining."""
        if isinstance(tool, ToolSpec):
            self.card(tool.card)
            self._impls[tool.name] = tool.tool
            tool_name = tool.name
        elif isinstance(tool, str):
            tool_name = tool
        else:
            raise InputError(f"workflow {self.name!r}: node {node_id!r}: tool must be a tool name or a ToolSpec "
                             f"(hetsched.function_tool), got {tool!r}")
        try:
            self._nodes.append(Node(id=node_id, tool=tool_name))
        except ValidationError as exc:
            raise InputError(format_validation_error(exc, f"workflow {self.name!r}", prefix="node")) from None
        for src in [after] if isinstance(after, str) else list(after):
            self.edge(src, node_id, data_mb=data_mb)
        return self

    def edge(self, src: str, dst: str, data_mb: float = 0.0) -> Workflow:
        """Add an edge ``src -> dst`` carrying ``data_mb`` MB; returns the builder."""
        try:
            self._edges.append(Edge(src=src, dst=dst, data_mb=data_mb))
        except ValidationError as exc:
            raise InputError(format_validation_error(exc, f"workflow {self.name!r}", prefix="edge")) from None
        return self

    def card(self, card: ToolCard) -> Workflow:
        """Use ``card`` for its tool (over the library's); returns the builder."""
        if not isinstance(card, ToolCard):
            raise InputError(f"workflow {self.name!r}: card must be a ToolCard, got {card!r}")
        self._cards[card.name] = card
        return self

    # ------------------------------------------------------------------ results
    @property
    def implementations(self) -> dict[str, Tool]:
        """Tool implementations given with the nodes (:class:`ToolSpec`), by tool name."""
        return dict(self._impls)

    def library(self) -> dict[str, ToolCard]:
        """The tool library cards of named tools come from (read once)."""
        if self._library is None:
            ref = self._library_ref
            self._library = load_tool_library(bundled_library_path() if ref is None else Path(str(ref)))
        return self._library

    def _card_for(self, node: Node) -> ToolCard:
        if node.tool in self._cards:
            return self._cards[node.tool]
        try:
            card = resolve_card(node.tool, self.library())
        except ValueError as exc:
            raise InputError(f"workflow {self.name!r}: node {node.id!r} uses tool {node.tool!r}: {exc}") from None
        if card is None:
            known = some(sorted({*self.library(), *self._cards}), quote=False)
            raise InputError(f"workflow {self.name!r}: node {node.id!r} uses tool {node.tool!r}, which has no card; "
                             f"known tools: {known}; give a ToolSpec (hetsched.function_tool) or .card(...)")
        return card

    def scenario(self) -> Scenario:
        """The scenario: the same object a YAML file with these nodes, edges, cards and machine loads to."""
        if not self._nodes:
            raise InputError(f"workflow {self.name!r} has no nodes; add them with .node(id, tool)")
        cards: dict[str, ToolCard] = {}
        for node in self._nodes:
            if node.tool not in cards:
                cards[node.tool] = self._card_for(node)
        try:
            graph = WorkflowGraph(nodes=tuple(self._nodes), edges=tuple(self._edges))
            return Scenario(name=self.name, description=self.description, mode=self.mode, workflow=graph,
                            cards=cards, machine=self.machine)
        except ValidationError as exc:
            raise InputError(format_validation_error(exc, f"workflow {self.name!r}")) from None

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, {len(self._nodes)} nodes, {len(self._edges)} edges, {self.mode.value})"


def tools_of(items: Iterable[ToolSpec | Tool]) -> dict[str, Tool]:
    """Tool implementations by name, from ToolSpecs or Tool objects."""
    out: dict[str, Tool] = {}
    for item in items:
        if isinstance(item, ToolSpec):
            out[item.name] = item.tool
        elif isinstance(item, Tool):
            out[item.name] = item
        else:
            raise InputError(f"tools: {item!r} is neither a ToolSpec (hetsched.function_tool) nor a Tool")
    return out
