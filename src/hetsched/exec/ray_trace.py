"""The Ray executor's trace: Ray's own task events, turned into the Trace contract.

Where each figure comes from (docs/ray.md):

- ``host``: the Ray node that ran the task (Ray's task event ``node_id``);
- ``ready_ms``: the task's ``PENDING_NODE_ASSIGNMENT`` transition (its arguments became
  available), which Ray stamps on the owner's clock and floors to whole milliseconds: the true
  time lies in [t, t + 1 ms), so the earliest time consistent with the predecessors' ends is taken;
- ``admitted_ms``: ``SUBMITTED_TO_WORKER`` (Ray granted the resources, ``vram_mb`` included, and
  leased a worker), likewise floored: the latest time in its millisecond that is not after the
  execution began, so a VRAM interval never starts before Ray granted it;
- ``start_ms``/``end_ms``: the worker's ``task:execute`` profile event (microseconds), split into
  load and run by the worker's own clocks (the meta of :mod:`hetsched.exec.ray_remote`);
- the VRAM timeline, per Ray node: each ``gpu_now`` actor from before the round until the
  executor killed it, each ``gpu_queue`` task from its admission until its execution ended.

When Ray's events are missing (the dashboard is off, or they did not arrive in time) the
worker's own clocks stand in and the trace says so in its notes.

Pure: imports only the model and the Ray plan (no ray).
"""

from __future__ import annotations

from collections.abc import Mapping as AbcMapping
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hetsched.exec.ray_plan import RayHost, RayPlan
from hetsched.model import HostTrace, Infeasibility, NodeTrace, Placement, Scenario, Trace, VramPoint
from hetsched.model.trace import vram_steps

RES_MS = 1.0
"""Resolution of Ray's task state events (its state API floors them to whole milliseconds)."""
_EPS = 1e-6

READY = "PENDING_NODE_ASSIGNMENT"
"""The state a task enters when its arguments are available."""
ADMITTED = "SUBMITTED_TO_WORKER"
"""The state a task enters when Ray has granted its resources and leased it a worker."""
RUNNING = "RUNNING"
FINISHED = "FINISHED"
FAILED = "FAILED"


@dataclass(frozen=True)
class TaskEvents:
    """What Ray recorded about one task attempt."""

    task_id: str
    """Ray's task id (hex)."""
    name: str = ""
    """The task's name (the executor gives every task of a round the round's name)."""
    node_id: str = ""
    """The Ray node that ran it ('' when not scheduled)."""
    states_ms: dict[str, float] = field(default_factory=dict)
    """State -> epoch milliseconds (floored by Ray)."""
    exec_ms: tuple[float, float] | None = None
    """The ``task:execute`` profile event: (start, end), epoch milliseconds with microseconds."""
    error: str = ""
    """Ray's error message for a failed task."""

    @property
    def terminal(self) -> bool:
        """True once Ray recorded how the task ended."""
        return FINISHED in self.states_ms or FAILED in self.states_ms

    @classmethod
    def from_state(cls, data: AbcMapping[str, Any]) -> TaskEvents:
        """From one entry of ``ray.util.state.list_tasks(detail=True)`` (as a dict)."""
        states = {str(e["state"]): float(e["created_ms"]) for e in data.get("events") or () if "created_ms" in e}
        exec_ms: tuple[float, float] | None = None
        profile = data.get("profiling_data") or {}
        for ev in profile.get("events") or ():
            if ev.get("event_name") == "task:execute":
                exec_ms = (float(ev["start_time"]), float(ev["end_time"]))
        return cls(task_id=str(data.get("task_id") or ""), name=str(data.get("name") or ""),
                   node_id=str(data.get("node_id") or ""), states_ms=states, exec_ms=exec_ms,
                   error=str(data.get("error_message") or ""))


@dataclass
class RoundFacts:
    """What the executor saw of one round, in epoch seconds (Ray's clock) and by DAG node."""

    t0_s: float
    """When the executor began submitting the round's tasks (the round's zero)."""
    task_ids: dict[str, str] = field(default_factory=dict)
    """DAG node -> Ray task id."""
    metas: dict[str, dict[str, Any]] = field(default_factory=dict)
    """DAG node -> the worker's meta, for the nodes that finished."""
    events: dict[str, TaskEvents] = field(default_factory=dict)
    """Ray task id -> its events."""
    actor_release_s: dict[str, float] = field(default_factory=dict)
    """gpu_now tool -> when the executor killed its actor."""


def _rel(t_ms: float, t0_ms: float) -> float:
    return t_ms - t0_ms


def node_traces(scenario: Scenario, plan: RayPlan, facts: RoundFacts) -> tuple[dict[str, NodeTrace], list[str]]:
    """Per finished node its times (ms from the round's zero) and host; plus the nodes whose
    times came from the worker's clocks because Ray's events were missing."""
    wf = scenario.workflow
    t0 = facts.t0_s * 1000.0
    out: dict[str, NodeTrace] = {}
    fallback: list[str] = []
    for n in wf.topo_order:
        meta = facts.metas.get(n)
        if meta is None:
            continue
        ev = facts.events.get(facts.task_ids.get(n, ""))
        if ev is not None and ev.exec_ms is not None:
            exec_start = ev.exec_ms[0]
        elif ev is not None and RUNNING in ev.states_ms:
            exec_start = ev.states_ms[RUNNING]
        else:
            exec_start = float(meta["fn_start"]) * 1000.0
            fallback.append(n)
        start = _rel(exec_start, t0) + (float(meta["run_start"]) - float(meta["fn_start"])) * 1000.0
        end = _rel(exec_start, t0) + (float(meta["run_end"]) - float(meta["fn_start"])) * 1000.0
        lo = max([0.0, *(out[p].end_ms for p in wf.preds(n) if p in out)])
        ready = lo
        if ev is not None and READY in ev.states_ms:
            ready = max(lo, _rel(ev.states_ms[READY], t0))
        admitted = ready
        if ev is not None and ADMITTED in ev.states_ms:
            admitted = max(ready, min(_rel(ev.states_ms[ADMITTED], t0) + RES_MS, _rel(exec_start, t0)))
        host = (ev.node_id if ev is not None and ev.node_id else "") or str(meta.get("host") or "")
        load = float(meta.get("load_ms") or 0.0)
        out[n] = NodeTrace(node=n, tool=wf.tool_of[n], placement=plan.mapping[n], ready_ms=ready,
                           admitted_ms=admitted, start_ms=max(start, admitted), end_ms=max(end, start, admitted),
                           load_ms=load, host=host)
    return out, fallback


def _steps(deltas: Sequence[tuple[float, float]]) -> tuple[VramPoint, ...]:
    """A step function from (time, +/-MB) changes; releases before admissions at equal times."""
    return vram_steps(deltas, 0.0, _EPS)


def host_deltas(plan: RayPlan, nodes: AbcMapping[str, NodeTrace], facts: RoundFacts) -> dict[str, list[tuple[float,
                                                                                                           float]]]:
    """Per Ray node, the VRAM changes (ms, +/-MB) of the round: actors resident from t = 0 until
    killed, queued tasks from admission until their execution ended."""
    t0 = facts.t0_s * 1000.0
    deltas: dict[str, list[tuple[float, float]]] = {}
    for tool, actor in plan.actors.items():
        mb = actor.options.vram_mb
        released = facts.actor_release_s.get(tool)
        deltas.setdefault(actor.host, []).append((0.0, mb))
        if released is not None:
            deltas[actor.host].append((max(0.0, released * 1000.0 - t0), -mb))
    for n, unit in plan.tasks.items():
        if unit.placement is not Placement.GPU_QUEUE or n not in nodes:
            continue
        nt = nodes[n]
        ev = facts.events.get(facts.task_ids.get(n, ""))
        meta = facts.metas[n]
        if ev is not None and ev.exec_ms is not None:
            released = _rel(ev.exec_ms[1], t0)
        else:
            released = nt.end_ms + (float(meta["fn_end"]) - float(meta["run_end"])) * 1000.0
        deltas.setdefault(nt.host, []).append((nt.admitted_ms, unit.options.vram_mb))
        deltas[nt.host].append((max(released, nt.admitted_ms), -unit.options.vram_mb))
    return deltas


def host_traces(hosts: Sequence[RayHost], deltas: AbcMapping[str, list[tuple[float, float]]]) -> tuple[HostTrace,
                                                                                                      ...]:
    """A HostTrace per Ray node (in the order given), with its VRAM timeline."""
    return tuple(HostTrace(host=h.node_id, address=h.address, cpus=h.cpus, gpus=h.gpus, vram_budget_mb=h.vram_mb,
                           vram_timeline=_steps(deltas.get(h.node_id, ()))) for h in hosts)


def build_trace(scenario: Scenario, plan: RayPlan, hosts: Sequence[RayHost], facts: RoundFacts,
                failure: Infeasibility | None, notes: Sequence[str] = ()) -> Trace:
    """The round's Trace: per node times and hosts, per host and total VRAM, E2E, and notes on
    anything a reader must know (fallback clocks, out-of-FIFO admissions)."""
    nodes, fallback = node_traces(scenario, plan, facts)
    deltas = host_deltas(plan, nodes, facts)
    per_host = host_traces(hosts, deltas)
    total = _steps([d for ds in deltas.values() for d in ds])
    budget = sum(h.vram_mb for h in hosts if h.gpu_capable)
    all_notes = list(notes)
    if fallback:
        all_notes.append(f"Ray's task events for nodes {fallback} did not arrive: their times come from the worker's "
                         "own clocks and their ready/admitted times from their predecessors' ends")
    cold = [n for n, m in facts.metas.items() if m.get("cold") and plan.mapping[n] is Placement.CPU]
    if cold:
        all_notes.append(f"cpu nodes {sorted(cold)} ran in a fresh Ray worker and loaded their tool first "
                         "(load_ms shown apart from the run)")
    inversions = queue_inversions(nodes)
    if inversions:
        shown = ", ".join(f"{b} before {a}" for a, b in inversions[:5])
        all_notes.append(f"gpu_queue nodes were admitted out of their ready (FIFO) order: {shown} "
                         "(Ray admits whatever fits; it keeps no FIFO queue)")
    if failure is not None:
        return Trace.refused(plan.mapping, failure, vram_budget_mb=budget, executor="ray", nodes=nodes,
                             vram_timeline=total, notes=tuple(all_notes), hosts=per_host)
    e2e = max(nodes[s].end_ms for s in scenario.workflow.sinks if s in nodes)
    return Trace(mapping=plan.mapping, feasible=True, e2e_ms=e2e, nodes=nodes, vram_timeline=total,
                 vram_budget_mb=budget, executor="ray", notes=tuple(all_notes), hosts=per_host)


def queue_inversions(nodes: AbcMapping[str, NodeTrace], resolution_ms: float = RES_MS) -> list[tuple[str, str]]:
    """Pairs (a, b) of ``gpu_queue`` nodes where a became ready first (by more than the event
    resolution) but b was admitted first: where an executor did not keep FIFO order. Works on any
    trace's nodes (the simulator and the local executor never produce one)."""
    queued = sorted((nt for nt in nodes.values() if nt.placement is Placement.GPU_QUEUE),
                    key=lambda nt: (nt.ready_ms, nt.node))
    out: list[tuple[str, str]] = []
    for i, a in enumerate(queued):
        for b in queued[i + 1:]:
            if b.ready_ms > a.ready_ms + resolution_ms and b.admitted_ms + resolution_ms < a.admitted_ms:
                out.append((a.node, b.node))
    return out
