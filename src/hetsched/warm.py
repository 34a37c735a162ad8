"""Warm start: what the run store already knows about a workflow, as a prior for a new run.

A new session or run of a workflow the store has seen (the same DAG and tools; its cards or its
budget may have changed) starts from:

- the best measured feasible mapping of the earlier runs on the same executor, re-checked
  against the new scenario (static check and planner), as its first proposal;
- the earlier runs' measured rounds whose mappings can still run, as evidence the monitor reads
  before the new run's own rounds.

A workflow that only shares tools with earlier ones gets those tools' measured behaviour as its
prior: their cards' ``cpu_ms``/``gpu_ms`` are replaced by the median of the measured node times
of the same tool at the same placement (:func:`measured_cards`).

Imports the model, the simulator's planner and the store.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hetsched.model import Mapping, Placement, RoundRecord, Scenario, ToolCard
from hetsched.model.limits import MIN_MS
from hetsched.sim.reference import SimPlanner
from hetsched.store import RunStore

MAX_RUNS_READ = 200
"""Most recent runs of the store a warm start looks at."""


@dataclass
class Prior:
    """What a new run starts from (see the module docstring)."""

    mapping: Mapping | None
    """First proposal (None: the policy's own)."""
    rounds: list[RoundRecord] = field(default_factory=list)
    """Earlier measured rounds that still apply, renumbered from 0 (the policy reads them first)."""
    runs: tuple[str, ...] = ()
    """Ids of the runs the prior comes from."""
    why: str = ""
    """One line: where the mapping comes from."""


def same_workflow(a: Scenario, b: Scenario) -> bool:
    """The same DAG (node ids, tools, edges) and the same placement mode."""
    return a.mode == b.mode and a.workflow == b.workflow


def prior_for(store: RunStore, scenario: Scenario, *, executor: str | None = None,
              exclude: str | None = None) -> Prior | None:
    """The prior for ``scenario`` from ``store`` (runs of the same workflow, on ``executor`` when given),
    or None when the store has none that applies."""
    planner = SimPlanner(scenario)
    rounds: list[RoundRecord] = []
    runs: list[str] = []
    # compared by content, whatever the runs' scenario names: a renamed copy is the same workflow
    for info in store.runs(limit=MAX_RUNS_READ):
        if info.id == exclude or info.damage or info.rounds_done == 0:
            continue
        if executor is not None and info.executor.name != executor:
            continue
        try:
            other = store.scenario(info.id)
        except Exception:  # an unreadable run is no evidence
            continue
        if not same_workflow(other, scenario):
            continue
        usable = [r for r in store.rounds(info.id) if r.trace.feasible and r.trace.e2e_ms is not None
                  and planner.infeasibility(r.mapping) is None]
        if usable:
            runs.append(info.id)
            rounds.extend(usable)
    if not rounds:
        return None
    best = min(rounds, key=lambda r: r.trace.e2e_ms or 0.0)
    renumbered = [replace(r, round=i, probes=()) for i, r in enumerate(rounds)]
    return Prior(best.mapping, renumbered, tuple(runs),
                 f"best measured mapping of run(s) {', '.join(runs[:3])} ({best.trace.e2e_ms:.1f} ms), re-checked "
                 "against this scenario's budget")


def measured_cards(scenario: Scenario, history: Sequence[RoundRecord]) -> dict[str, ToolCard]:
    """The scenario's cards with ``cpu_ms``/``gpu_ms`` replaced by the median measured run time of
    each tool at cpu / gpu_now in ``history`` (tools never measured keep their card)."""
    cpu: dict[str, list[float]] = {}
    gpu: dict[str, list[float]] = {}
    for r in history:
        for nt in r.trace.nodes.values():
            if nt.placement is Placement.CPU:
                cpu.setdefault(nt.tool, []).append(nt.run_ms)
            elif nt.placement is Placement.GPU_NOW:
                gpu.setdefault(nt.tool, []).append(nt.run_ms)
    cards = dict(scenario.cards)
    for name, card in scenario.cards.items():
        update: dict[str, float] = {}
        if cpu.get(name):
            update["cpu_ms"] = max(MIN_MS, statistics.median(cpu[name]))
        if gpu.get(name) and card.gpu_ms is not None:
            update["gpu_ms"] = max(MIN_MS, statistics.median(gpu[name]))
        if update:
            cards[name] = card.model_copy(update=update)
    return cards
