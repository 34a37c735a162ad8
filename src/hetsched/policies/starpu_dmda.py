"""StarPU's ``dmda`` scheduler (deque model, data aware) as a round-by-round placement policy.

Source: C. Augonnet, S. Thibault, R. Namyst, P.-A. Wacrenier, "StarPU: a unified platform for
task scheduling on heterogeneous multicore architectures", Concurrency and Computation:
Practice and Experience 23(2), 2011, doi:10.1002/cpe.1631; and StarPU's
``src/sched_policies/deque_modeling_policy_data_aware.c`` (``_dmda_push_task``,
``compute_all_performance_predictions``, ``push_task_on_best_worker``), whose rules this file
follows:

- History-based performance model per (tool, device): the mean of every execution time
  observed so far (StarPU's ``STARPU_HISTORY_BASED`` model). A pair with fewer than
  ``calibration_minimum`` samples is uncalibrated (StarPU's ``STARPU_CALIBRATE_MINIMUM``).
- Tasks are pushed in the order they become ready. For each task and worker: if some worker
  has no calibrated model for it, the task is *forced* onto an uncalibrated worker, the one
  with the fewest queued tasks divided by its relative speed (StarPU's defaults: CPU 1.0,
  CUDA 13.33), to calibrate it. Otherwise it goes to the worker with the lowest fitness
  alpha * (exp_end - best_exp_end) + beta * data_penalty, with exp_end = max(worker's expected
  start, now) + its queued expected work + predicted length, and alpha = beta = 1 (StarPU's
  defaults; the energy term gamma is 0 here because we model no power).
- Pushing a task adds its predicted length, and the part of its input transfer that cannot
  overlap the queue, to the worker's expected work.

Mapping onto our problem. Workers are StarPU's default set: one CUDA worker for the GPU
(listed first, as StarPU numbers accelerators before CPUs) and cpu_cores - 1 CPU workers
(StarPU reserves a core to drive each GPU). Each round, dmda's decisions are replayed on its
own predictions (its view of the future, no contention) to decide where every node goes; the
learned lengths come from the traces of previous rounds (``run_ms`` = end - start, so a
``gpu_queue`` load is not counted as execution), so they include whatever contention those
rounds saw. The data penalty is the edge data crossing PCIe (data_mb / pcie_mb_per_ms).
Memory capacity is not in dmda's cost (true of StarPU): GPU nodes get ``gpu_now`` while their
tools fit the budget and otherwise fall back as StarPU's allocator does on an allocation
failure, waiting until memory is freed: ``gpu_queue`` (see :func:`allocate_gpu_nodes`).
Departure: the feasibility guard (:mod:`hetsched.policies.guard`) rebuilds that fallback when the
model says its result would deadlock, so dmda never proposes a mapping that cannot run.

Policies learn only from ``history``; the model is recomputed from it, so a resumed run replays
identically. Imports the model and the Policy base only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hetsched.model import Mapping, Mode, Placement, Probe, Proposal, RoundRecord, Scenario
from hetsched.monitor import Observations
from hetsched.policies.base import Policy
from hetsched.policies.guard import Check, model_check, place_in_order

CPU_RELATIVE_SPEEDUP = 1.0
"""StarPU's ``_STARPU_CPU_ALPHA``: assumed relative speed of a CPU worker (uncalibrated case)."""
CUDA_RELATIVE_SPEEDUP = 13.33
"""StarPU's ``_STARPU_CUDA_ALPHA``: assumed relative speed of a CUDA worker."""
STARPU_CALIBRATION_MINIMUM = 10
"""StarPU's default ``STARPU_CALIBRATE_MINIMUM`` (samples before a model counts as calibrated)."""

CPU_DEV, GPU_DEV = "cpu", "gpu"
_CLOCK_EPS_MS = 1e-6


# ---------------------------------------------------------------------------- VRAM fallback
def allocate_gpu_nodes(
    scenario: Scenario, gpu_order: Sequence[str], check: Check | None = None
) -> tuple[Mapping, list[str]]:
    """Turn "these nodes run on the GPU, in this order" into placements within the VRAM budget.

    StarPU allocates device memory on demand and, when an allocation fails, the task waits
    until memory is freed. Our equivalent: nodes are taken in ``gpu_order`` (the order the
    scheduler meant the GPU to start them); a node gets ``gpu_now`` when its tool is already
    resident or fits beside the resident tools; otherwise, in three-way scenarios, it waits
    for memory as ``gpu_queue``; in binary scenarios (no queue) or when it could never be
    admitted, it runs on the CPU. Every node not in ``gpu_order`` runs on the CPU.

    A static guard keeps the fallback from building an obvious deadlock: a queued node must
    fit beside the ``gpu_now`` tools that stay resident because one of their nodes runs after
    it. The ``gpu_now`` set never exceeds the budget.

    With ``check`` (the feasibility guard of :mod:`hetsched.policies.guard`), a result the check
    refuses (a FIFO deadlock the static guard does not see) is rebuilt node by node in
    ``gpu_order``: each node takes ``gpu_now`` if its tool fits beside the resident ones, else
    ``gpu_queue`` (three-way), else the CPU, keeping a step only when the mapping so far passes
    the check; so the result can always run. A result the check accepts is returned unchanged.

    Returns:
        The mapping (in workflow node order) and one note per node that did not get ``gpu_now``.
    """
    mapping, notes = _allocate(scenario, gpu_order)
    if check is None or check(mapping) is None:
        return mapping, notes
    wf = scenario.workflow
    budget = scenario.machine.vram_budget_mb
    three_way = scenario.mode is Mode.THREE_WAY

    def choices(node: str, placed: dict[str, Placement]) -> list[Placement]:
        if Placement.GPU_NOW not in scenario.allowed(node):
            return [Placement.CPU]
        tool = wf.tool_of[node]
        resident = {wf.tool_of[n] for n, p in placed.items() if p is Placement.GPU_NOW}
        used = sum(scenario.cards[t].vram_mb for t in resident | {tool})
        wanted = [Placement.GPU_NOW] if used <= budget else []
        if three_way and scenario.card_of(node).vram_mb <= budget:
            wanted.append(Placement.GPU_QUEUE)
        return wanted

    place, guard_notes = place_in_order(scenario, [n for n in gpu_order if n in wf.tool_of], choices, check)
    return Mapping((n, place[n]) for n in wf.node_ids), guard_notes


def _allocate(scenario: Scenario, gpu_order: Sequence[str]) -> tuple[Mapping, list[str]]:
    """The allocation fallback with its static guard only (see :func:`allocate_gpu_nodes`)."""
    wf = scenario.workflow
    budget = scenario.machine.vram_budget_mb
    three_way = scenario.mode is Mode.THREE_WAY
    masks = scenario.descendant_masks
    index = {n: i for i, n in enumerate(wf.node_ids)}
    place: dict[str, Placement] = {n: Placement.CPU for n in wf.node_ids}
    now_nodes: dict[str, list[str]] = {}  # resident tool -> its gpu_now nodes
    queued: list[str] = []
    notes: list[str] = []

    def vram(tool: str) -> float:
        return scenario.cards[tool].vram_mb

    def guard_ok(q: str, residents: dict[str, list[str]]) -> bool:
        below = masks[index[q]]
        held = sum(vram(t) for t, ns in residents.items() if any(below >> index[x] & 1 for x in ns))
        return scenario.card_of(q).vram_mb + held <= budget

    for n in gpu_order:
        if Placement.GPU_NOW not in scenario.allowed(n):
            continue
        tool = wf.tool_of[n]
        trial = {t: list(ns) for t, ns in now_nodes.items()}
        trial.setdefault(tool, []).append(n)
        used = sum(vram(t) for t in trial)
        if used <= budget and all(guard_ok(q, trial) for q in queued):
            now_nodes = trial
            place[n] = Placement.GPU_NOW
            continue
        need = scenario.card_of(n).vram_mb
        if three_way and need <= budget and guard_ok(n, now_nodes):
            place[n] = Placement.GPU_QUEUE
            queued.append(n)
            notes.append(f"{n} ({tool}, {need:g} MB): gpu_now set full, waits for VRAM as gpu_queue")
        else:
            why = "no gpu_queue in a binary scenario" if not three_way else "could never be admitted"
            notes.append(f"{n} ({tool}, {need:g} MB): does not fit beside the resident tools, {why}: cpu")
    return Mapping((n, place[n]) for n in wf.node_ids), notes


# ---------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class PerfModel:
    """History-based performance model: per (tool, device) the observed execution times."""

    samples: dict[tuple[str, str], tuple[float, ...]]
    """(tool, 'cpu'|'gpu') -> every observed run_ms, in round then node order."""

    @classmethod
    def from_history(cls, scenario: Scenario, history: Sequence[RoundRecord]) -> PerfModel:
        """Collect run_ms (end - start) of every node of every feasible round."""
        acc: dict[tuple[str, str], list[float]] = {}
        for record in history:
            trace = record.trace
            if not trace.feasible:
                continue
            for n in scenario.workflow.node_ids:
                nt = trace.nodes.get(n)
                if nt is None:
                    continue
                dev = GPU_DEV if nt.placement.on_gpu else CPU_DEV
                acc.setdefault((nt.tool, dev), []).append(nt.run_ms)
        return cls({k: tuple(v) for k, v in acc.items()})

    def count(self, tool: str, dev: str) -> int:
        """Samples of one pair."""
        return len(self.samples.get((tool, dev), ()))

    def mean(self, tool: str, dev: str) -> float:
        """Mean observed run_ms; NaN without samples (StarPU's 'no prediction')."""
        s = self.samples.get((tool, dev), ())
        return sum(s) / len(s) if s else math.nan

    def to_dict(self) -> dict[str, dict[str, float | int]]:
        """JSON-ready {'tool/dev': {'mean_ms', 'n'}}."""
        return {f"{t}/{d}": {"mean_ms": self.mean(t, d), "n": len(s)} for (t, d), s in sorted(self.samples.items())}


@dataclass
class _Worker:
    dev: str
    speedup: float
    free_at: float = 0.0
    """Expected end of everything queued on it (exp_start + exp_len)."""
    starts: list[float] | None = None
    """Expected start times of the tasks pushed to it (to count queued tasks)."""


class StarpuDmda(Policy):
    """StarPU ``dmda``: history-based models, forced calibration, min expected termination + transfer.

    Args:
        calibration_minimum: samples a (tool, device) pair needs before its mean is trusted.
            StarPU's default is 10 (``STARPU_CALIBRATE_MINIMUM``); StarPU keeps models across
            runs, and our loop has only tens of rounds, so the default here is 1: round 0
            calibrates the GPU, round 1 the CPU, then the model drives (docs/baselines.md).
        alpha: weight of the expected-termination term (StarPU default 1).
        beta: weight of the data-transfer penalty (StarPU default 1).
    """

    name = "starpu-dmda"
    adaptive = True

    def __init__(self, calibration_minimum: int = 1, alpha: float = 1.0, beta: float = 1.0) -> None:
        super().__init__()
        if calibration_minimum < 1:
            raise ValueError(f"calibration_minimum must be >= 1, got {calibration_minimum}")
        self.calibration_minimum = calibration_minimum
        self.alpha = alpha
        self.beta = beta

    def model(self, history: Sequence[RoundRecord]) -> PerfModel:
        """The performance model learned from ``history``."""
        return PerfModel.from_history(self.ctx.scenario, history)

    def predict(self, model: PerfModel, tool: str, dev: str) -> float:
        """Expected length, NaN when the pair is not calibrated yet."""
        return model.mean(tool, dev) if model.count(tool, dev) >= self.calibration_minimum else math.nan

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        sc = self.ctx.scenario
        model = self.model(history)
        devices, forced, predicted_end = self._replay(sc, model)
        node_pos = {n: i for i, n in enumerate(sc.workflow.node_ids)}
        by_start = sorted(devices, key=lambda n: (predicted_end[n][0], node_pos[n]))
        gpu_order = [n for n in by_start if devices[n] == GPU_DEV]
        mapping, notes = allocate_gpu_nodes(sc, gpu_order, model_check(sc, self.ctx.planner))
        if forced:
            rationale = f"dmda: {len(forced)} node(s) forced to calibrate ({', '.join(forced)})"
        else:
            makespan = max(e for _, e in predicted_end.values())
            rationale = f"dmda: min expected termination, predicted makespan {makespan:.1f} ms"
        predicted = {n: {"device": devices[n], "start_ms": s, "end_ms": e} for n, (s, e) in predicted_end.items()}
        info = {"model": model.to_dict(), "forced_calibration": forced, "vram_fallback": notes, "predicted": predicted}
        return Proposal(mapping, rationale=rationale, info=info)

    def converged(self, history: Sequence[RoundRecord]) -> bool:
        sc = self.ctx.scenario
        model = self.model(history)
        return all(
            model.count(sc.workflow.tool_of[n], dev) >= self.calibration_minimum
            for n in sc.workflow.node_ids
            for dev in ((CPU_DEV, GPU_DEV) if sc.card_of(n).has_gpu else (CPU_DEV,))
        )

    # ------------------------------------------------------------------ the replay
    def _replay(
        self, sc: Scenario, model: PerfModel
    ) -> tuple[dict[str, str], list[str], dict[str, tuple[float, float]]]:
        """Push every node when it becomes ready (on dmda's own predictions) and record the choice.

        Returns device per node, the nodes forced to calibrate, and predicted (start, end).
        """
        wf = sc.workflow
        ids = wf.node_ids
        order_index = {n: i for i, n in enumerate(wf.topo_order)}
        n_cpu = max(1, sc.machine.cpu_cores - 1)
        workers = [_Worker(GPU_DEV, CUDA_RELATIVE_SPEEDUP, starts=[])]
        workers += [_Worker(CPU_DEV, CPU_RELATIVE_SPEEDUP, starts=[]) for _ in range(n_cpu)]
        pcie = sc.machine.pcie_mb_per_ms
        preds_left = {n: len(wf.preds(n)) for n in ids}
        in_edges = {n: [(e.src, e.data_mb) for e in wf.edges if e.dst == n] for n in ids}
        device: dict[str, str] = {}
        timing: dict[str, tuple[float, float]] = {}
        forced: list[str] = []
        # a list scheduler: the next task pushed is the ready one that became ready first (ties in
        # topological order), as StarPU pushes tasks when their inputs complete
        ready_list: list[tuple[float, int, str]] = [(0.0, order_index[n], n) for n in ids if preds_left[n] == 0]
        while ready_list:
            first = min(ready_list)
            ready_list.remove(first)
            now, _, n = first
            tool = wf.tool_of[n]
            can_gpu = sc.card_of(n).has_gpu
            choice = self._choose(workers, now, tool, can_gpu, model, in_edges[n], device, pcie)
            w_idx, length, penalty, was_forced = choice
            w = workers[w_idx]
            # push_task_on_best_worker: expected start moves to now, the transfer that cannot
            # overlap the queue and the predicted length extend the worker's expected work
            exp_start = max(w.free_at, now)
            extra = 0.0 if now + penalty < exp_start else now + penalty - exp_start
            start = exp_start + extra
            w.free_at = start + length
            # the replay's clock: an uncalibrated task takes no expected time (StarPU counts it
            # as 0) but it still ends after it starts, so its successors see it finished
            end = start + max(length, _CLOCK_EPS_MS)
            assert w.starts is not None
            w.starts.append(start)
            device[n] = w.dev
            timing[n] = (start, end)
            if was_forced:
                forced.append(n)
            for e in wf.edges:
                if e.src == n:
                    preds_left[e.dst] -= 1
                    if preds_left[e.dst] == 0:
                        ready = max(timing[p][1] for p in wf.preds(e.dst))
                        ready_list.append((ready, order_index[e.dst], e.dst))
        return device, forced, timing

    def _choose(
        self,
        workers: list[_Worker],
        now: float,
        tool: str,
        can_gpu: bool,
        model: PerfModel,
        inputs: list[tuple[str, float]],
        device: dict[str, str],
        pcie: float,
    ) -> tuple[int, float, float, bool]:
        """dmda's decision for one task: (worker index, predicted length, transfer, forced?)."""
        ntasks_best = -1
        ntasks_best_end = 0.0
        calibrating = False
        unknown = False
        exp_end: dict[int, float] = {}
        length: dict[int, float] = {}
        penalty: dict[int, float] = {}
        for i, w in enumerate(workers):
            if w.dev == GPU_DEV and not can_gpu:
                continue
            local = self.predict(model, tool, w.dev)
            assert w.starts is not None
            ntasks = sum(1 for s in w.starts if s >= now)
            ntasks_end = ntasks / w.speedup
            if (
                ntasks_best == -1
                or (not calibrating and ntasks_end < ntasks_best_end)
                or (not calibrating and math.isnan(local))
                or (calibrating and math.isnan(local) and ntasks_end < ntasks_best_end)
            ):
                ntasks_best_end = ntasks_end
                ntasks_best = i
            if math.isnan(local):
                calibrating = True
            if math.isnan(local) or local == 0.0:
                unknown = True
            if unknown:
                continue
            length[i] = local
            penalty[i] = sum(mb / pcie for src, mb in inputs if device[src] != w.dev)
            exp_end[i] = max(w.free_at, now) + local
        if unknown:
            return ntasks_best, 0.0, 0.0, True
        best_exp_end = min(exp_end.values())
        best, best_fit = -1, math.inf
        for i in exp_end:
            fit = self.alpha * (exp_end[i] - best_exp_end) + self.beta * penalty[i]
            if best == -1 or fit < best_fit:
                best, best_fit = i, fit
        return best, length[best], penalty[best], False
