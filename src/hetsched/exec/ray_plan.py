"""How a mapping becomes Ray resource requests, and the per-node checks Ray itself does not make.

The rules (docs/ray.md has the reasoning):

- a ``cpu`` node is a Ray **task** with ``num_cpus`` = its card's ``cpu_threads`` and no GPU;
- a ``gpu_queue`` node is a Ray **task** that loads its tool, runs and releases it, with
  ``num_gpus`` = its GPU share (below), ``num_cpus=0`` and ``resources={"vram_mb": card.vram_mb}``:
  Ray starts it only on a node whose ``vram_mb`` resource has that much free, so the custom
  resource carries the VRAM budget as Ray's admission control;
- a ``gpu_now`` tool is one Ray **actor** (however many nodes use it) with the same kind of
  request, created and loaded before the round, serving its nodes as method calls, and killed
  when its last node ends (its ``vram_mb`` is held exactly as long as the actor lives).

GPU share: ``num_gpus = gpu_util / max(1, U)``, with U the sum of ``gpu_util`` over the GPU
units (one per ``gpu_now`` tool, one per ``gpu_queue`` node) of the mapping, rounded down to
Ray's 0.0001 step. It is the share of the card the unit gets under the model's processor
sharing when every GPU unit runs at once, so the shares sum to at most 1: ``num_gpus`` steers
units to GPU nodes but never refuses what ``vram_mb`` admits (the model has no GPU admission
beyond memory). ``vram_mb`` requests are rounded up to Ray's 0.0001 step, node capacities are
whole numbers (Ray requires it).

The checks Ray does not make (it would leave an unplaceable request pending forever): every
``gpu_now`` tool is packed onto one GPU node's ``vram_mb`` (exact search; the actor is pinned
there), every ``gpu_queue`` node fits some GPU node, none waits for memory held by ``gpu_now``
tools that depend on it (the scenario's deadlock rule, per node), and every CPU node's threads
fit some node's CPUs.

Pure: imports only the model (never ray), so ``hetsched export ray`` and these checks run
without the ``[ray]`` extra.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from hetsched.model import Infeasibility, InfeasibleKind, Mapping, Placement, Scenario

VRAM_RESOURCE = "vram_mb"
"""The custom Ray resource that carries a node's VRAM budget, in MB."""
RESOURCE_STEP = 1e-4
"""Ray's resource precision: fractional requests are fixed-point with four decimals."""
_EPS = 1e-9


def floor_step(value: float) -> float:
    """``value`` rounded down to Ray's resource step (at least one step)."""
    return max(RESOURCE_STEP, math.floor(value / RESOURCE_STEP + _EPS) * RESOURCE_STEP)


def ceil_step(value: float) -> float:
    """``value`` rounded up to Ray's resource step."""
    return round(math.ceil(value / RESOURCE_STEP - _EPS) * RESOURCE_STEP, 4)


@dataclass(frozen=True)
class RayHost:
    """One alive Ray node and the resources it offers."""

    node_id: str
    """Ray's node id (hex)."""
    address: str = ""
    """The node's IP address."""
    cpus: float = 0.0
    """Its ``CPU`` resource."""
    gpus: float = 0.0
    """Its ``GPU`` resource."""
    vram_mb: float = 0.0
    """Its ``vram_mb`` resource (0: GPU placements are never admitted there)."""

    @property
    def gpu_capable(self) -> bool:
        """True when GPU placements can run here (a GPU and a VRAM budget)."""
        return self.gpus > 0 and self.vram_mb > 0

    @property
    def label(self) -> str:
        """``127.0.0.1 (node 1a2b3c4d)``."""
        return f"{self.address or '?'} (node {self.node_id[:8]})"

    @classmethod
    def from_ray(cls, node: dict[str, Any]) -> RayHost:
        """From one entry of ``ray.nodes()``."""
        res = node.get("Resources") or {}
        return cls(node_id=str(node["NodeID"]), address=str(node.get("NodeManagerAddress", "")),
                   cpus=float(res.get("CPU", 0.0)), gpus=float(res.get("GPU", 0.0)),
                   vram_mb=float(res.get(VRAM_RESOURCE, 0.0)))


@dataclass(frozen=True)
class RayOptions:
    """The resource part of ``.options(...)`` for one Ray task or actor."""

    num_cpus: float
    """CPU cores reserved while it runs (tasks) or lives (actors)."""
    num_gpus: float
    """GPU share reserved."""
    vram_mb: float = 0.0
    """The ``vram_mb`` custom resource reserved (0: none)."""

    def as_options(self) -> dict[str, Any]:
        """Keyword arguments for ``.options(...)``."""
        opts: dict[str, Any] = {"num_cpus": _num(self.num_cpus), "num_gpus": _num(self.num_gpus)}
        if self.vram_mb > 0:
            opts["resources"] = {VRAM_RESOURCE: _num(self.vram_mb)}
        return opts


def _num(value: float) -> float | int:
    """A resource figure as Ray and readers like it: whole numbers as int, else four decimals."""
    rounded = round(value, 4)
    return int(rounded) if float(rounded).is_integer() else rounded


@dataclass(frozen=True)
class RayUnit:
    """One thing Ray schedules: a task (a ``cpu`` or ``gpu_queue`` node) or an actor (a ``gpu_now`` tool)."""

    key: str
    """The node id (tasks) or the tool name (actors)."""
    kind: str
    """``task`` or ``actor``."""
    tool: str
    """The tool it runs."""
    placement: Placement
    """cpu, gpu_queue (tasks) or gpu_now (actors)."""
    nodes: tuple[str, ...]
    """The DAG nodes it serves (one for a task; every gpu_now node of the tool for an actor)."""
    options: RayOptions
    """What it asks Ray for."""
    host: str = ""
    """For an actor: the Ray node it is pinned to ('' before placement, and always for tasks)."""


@dataclass(frozen=True)
class RayPlan:
    """A mapping as Ray tasks and actors."""

    mapping: Mapping
    """The mapping planned."""
    tasks: dict[str, RayUnit] = field(default_factory=dict)
    """One task per ``cpu`` and ``gpu_queue`` node, by node id."""
    actors: dict[str, RayUnit] = field(default_factory=dict)
    """One actor per ``gpu_now`` tool, by tool name."""

    @property
    def gpu_units(self) -> list[RayUnit]:
        """Actors and ``gpu_queue`` tasks."""
        return [*self.actors.values(), *(u for u in self.tasks.values() if u.placement.on_gpu)]


def gpu_shares(scenario: Scenario, mapping: Mapping) -> dict[str, float]:
    """``num_gpus`` of every GPU unit (key: tool for ``gpu_now``, node for ``gpu_queue``), by the rule
    in the module docstring: ``gpu_util / max(1, sum of gpu_util)``, rounded down to Ray's step."""
    utils: dict[str, float] = {}
    for tool in scenario.gpu_now_tools(mapping):
        utils[tool] = scenario.cards[tool].gpu_util
    for n in scenario.workflow.node_ids:
        if mapping[n] is Placement.GPU_QUEUE:
            utils[n] = scenario.card_of(n).gpu_util
    total = max(1.0, sum(utils.values()))
    return {k: floor_step(u / total) for k, u in utils.items()}


def plan(scenario: Scenario, mapping: Mapping) -> RayPlan:
    """The tasks and actors of a (valid) mapping, with their resource requests; actors not yet pinned."""
    wf = scenario.workflow
    shares = gpu_shares(scenario, mapping)
    tasks: dict[str, RayUnit] = {}
    for n in wf.topo_order:
        tool, p = wf.tool_of[n], mapping[n]
        card = scenario.cards[tool]
        if p is Placement.CPU:
            tasks[n] = RayUnit(n, "task", tool, p, (n,), RayOptions(num_cpus=float(card.cpu_threads), num_gpus=0.0))
        elif p is Placement.GPU_QUEUE:
            tasks[n] = RayUnit(n, "task", tool, p, (n,),
                               RayOptions(num_cpus=0.0, num_gpus=shares[n], vram_mb=ceil_step(card.vram_mb)))
    actors: dict[str, RayUnit] = {}
    for tool in scenario.gpu_now_tools(mapping):
        nodes = tuple(n for n in wf.topo_order if wf.tool_of[n] == tool and mapping[n] is Placement.GPU_NOW)
        card = scenario.cards[tool]
        actors[tool] = RayUnit(tool, "actor", tool, Placement.GPU_NOW, nodes,
                               RayOptions(num_cpus=0.0, num_gpus=shares[tool], vram_mb=ceil_step(card.vram_mb)))
    return RayPlan(mapping=mapping, tasks=tasks, actors=actors)


def node_budget_mb(budget_mb: float) -> int:
    """The whole-number ``vram_mb`` a node declares for a budget (Ray node resources are whole)."""
    return max(0, math.floor(budget_mb + _EPS))


def _pack(items: list[tuple[str, float, float]], hosts: list[RayHost]) -> dict[str, str] | None:
    """Assign (key, vram, gpu share) items to hosts within each host's vram_mb and GPUs; exact
    backtracking in first-fit-decreasing order (the item counts are small), or None."""
    items = sorted(items, key=lambda it: (-it[1], it[0]))
    free_mem = {h.node_id: h.vram_mb for h in hosts}
    free_gpu = {h.node_id: h.gpus for h in hosts}
    where: dict[str, str] = {}

    def place(i: int) -> bool:
        if i == len(items):
            return True
        key, mem, share = items[i]
        tried: set[tuple[float, float]] = set()
        for h in hosts:
            state = (free_mem[h.node_id], free_gpu[h.node_id])
            if state in tried:  # two hosts with equal free room lead to the same outcome
                continue
            tried.add(state)
            if mem <= free_mem[h.node_id] + _EPS and share <= free_gpu[h.node_id] + _EPS:
                free_mem[h.node_id] -= mem
                free_gpu[h.node_id] -= share
                where[key] = h.node_id
                if place(i + 1):
                    return True
                free_mem[h.node_id] += mem
                free_gpu[h.node_id] += share
                del where[key]
        return False

    return where if place(0) else None


def place(scenario: Scenario, mapping: Mapping, hosts: Sequence[RayHost]) -> RayPlan | Infeasibility:
    """The plan with every actor pinned to a GPU node, or the typed reason Ray could never run it
    on these nodes (see the module docstring); ``mapping`` must be valid for the scenario."""
    p = plan(scenario, mapping)
    wf = scenario.workflow
    gpu_hosts = sorted((h for h in hosts if h.gpu_capable), key=lambda h: (-h.vram_mb, -h.gpus, h.node_id))
    cpu_max = max((h.cpus for h in hosts), default=0.0)
    for n, unit in p.tasks.items():
        if unit.placement is Placement.CPU and unit.options.num_cpus > cpu_max + _EPS:
            return Infeasibility(InfeasibleKind.UNAVAILABLE,
                                 f"node {n!r} ({unit.tool}) needs {unit.options.num_cpus:g} CPUs (the card's "
                                 f"cpu_threads) but the largest Ray node offers {cpu_max:g}")
    if not p.gpu_units:
        return p
    if not gpu_hosts:
        gpu_nodes = [n for n in wf.node_ids if mapping[n].on_gpu]
        return Infeasibility(InfeasibleKind.UNAVAILABLE,
                             f"nodes {gpu_nodes} are placed on the GPU, but no Ray node offers both a GPU and a "
                             f"{VRAM_RESOURCE!r} resource; start one with: ray start --num-gpus 1 --resources "
                             f"'{{\"{VRAM_RESOURCE}\": BUDGET_MB}}'")
    offered = ", ".join(f"{h.label}: {h.vram_mb:g} MB" for h in gpu_hosts)
    biggest = gpu_hosts[0].vram_mb
    where = _pack([(t, u.options.vram_mb, u.options.num_gpus) for t, u in p.actors.items()], gpu_hosts)
    if where is None:
        need = sum(u.options.vram_mb for u in p.actors.values())
        parts = " + ".join(f"{t} {u.options.vram_mb:g}" for t, u in p.actors.items())
        return Infeasibility(InfeasibleKind.OOM,
                             f"gpu_now tools need {need:g} MB ({parts}) and cannot be packed onto the Ray GPU "
                             f"nodes' {VRAM_RESOURCE} ({offered})")
    actors = {t: RayUnit(u.key, u.kind, u.tool, u.placement, u.nodes, u.options, host=where[t])
              for t, u in p.actors.items()}
    for n, unit in p.tasks.items():
        if unit.placement is Placement.GPU_QUEUE and unit.options.vram_mb > biggest + _EPS:
            return Infeasibility(InfeasibleKind.NEVER_ADMISSIBLE,
                                 f"node {n!r} ({unit.tool}) needs {unit.options.vram_mb:g} MB > the largest Ray GPU "
                                 f"node's {VRAM_RESOURCE} ({offered})")
    # a queued node must fit some GPU node beside the resident tools that wait for it there
    for q, unit in p.tasks.items():
        if unit.placement is not Placement.GPU_QUEUE:
            continue
        below = nx.descendants(wf.graph, q)
        waiting = {t for t, a in actors.items() if any(n in below for n in a.nodes)}
        fits = []
        for h in gpu_hosts:
            held = sum(actors[t].options.vram_mb for t in waiting if actors[t].host == h.node_id)
            if unit.options.vram_mb + held <= h.vram_mb + _EPS:
                fits.append(h)
        if not fits:
            return Infeasibility(InfeasibleKind.DEADLOCK,
                                 f"node {q!r} ({unit.tool}) needs {unit.options.vram_mb:g} MB but on every Ray GPU "
                                 f"node ({offered}) gpu_now tools {sorted(waiting)} hold memory until nodes that "
                                 "depend on it finish")
    return RayPlan(mapping=mapping, tasks=p.tasks, actors=actors)


# ---------------------------------------------------------------------------- export
def export_dict(scenario: Scenario, mapping: Mapping) -> dict[str, Any]:
    """The plan as JSON-ready data: per task and per actor, its ``.options(...)`` and what it serves."""
    p = plan(scenario, mapping)
    return {
        "scenario": scenario.name,
        "mapping": mapping.to_dict(),
        "gpu_node_resources": {"num_gpus": 1, "resources": {VRAM_RESOURCE: node_budget_mb(
            scenario.machine.vram_budget_mb)}},
        "tasks": {n: {"tool": u.tool, "placement": u.placement.value, "options": u.options.as_options()}
                  for n, u in p.tasks.items()},
        "actors": {t: {"nodes": list(u.nodes), "options": u.options.as_options()} for t, u in p.actors.items()},
    }


def export_text(scenario: Scenario, mapping: Mapping) -> str:
    """Python source a user pastes into their own Ray code: ``TASKS`` and ``ACTORS`` option dicts."""
    p = plan(scenario, mapping)
    budget = node_budget_mb(scenario.machine.vram_budget_mb)
    code = ",".join(f"{n}={mapping[n].value}" for n in scenario.workflow.node_ids)
    lines = [
        f"# Ray options for scenario {scenario.name!r} under {code}",
        "# (hetsched export ray; the rules are in hetsched's docs/ray.md)",
        "#",
        "# Every GPU node of the cluster declares its VRAM budget as a custom resource:",
        f"#   ray start --num-gpus 1 --resources '{{\"{VRAM_RESOURCE}\": {budget}}}'",
        "# num_gpus is each GPU unit's share: gpu_util / max(1, sum of gpu_util over the GPU units),",
        "# so the shares never block what vram_mb admits. Ray does not order admissions FIFO and does",
        "# not measure memory: vram_mb is an admission budget, true only as far as the cards are.",
        "",
        "# One task per cpu and gpu_queue node (a gpu_queue task loads its model, runs and releases it):",
        "#   my_task.options(**TASKS[node]).remote(*inputs)",
        "TASKS = {",
    ]
    for n, u in p.tasks.items():
        lines.append(f"    {json.dumps(n)}: {_py(u.options.as_options())},  # {u.tool}, {u.placement.value}")
    lines.append("}")
    lines += [
        "",
        "# One actor per gpu_now tool, created (model loaded) before the request and killed after its",
        "# last node; its nodes are method calls:  MyModel.options(**ACTORS[tool]).remote()",
        "ACTORS = {",
    ]
    for t, u in p.actors.items():
        lines.append(f"    {json.dumps(t)}: {_py(u.options.as_options())},  # serves {', '.join(u.nodes)}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _py(options: dict[str, Any]) -> str:
    """A dict literal in Python syntax with double-quoted keys (valid Python and close to JSON)."""
    inner = ", ".join(f"{json.dumps(k)}: {_py(v) if isinstance(v, dict) else json.dumps(v)}"
                      for k, v in options.items())
    return "{" + inner + "}"
