"""HEFT-load: HEFT-CF made aware of concurrent requests, the load-aware variant of the best baseline.

Under load a mapping serves several requests at once. Zhao and Sakellariou ("Scheduling multiple
DAGs onto heterogeneous systems", IPDPS 2006, doi:10.1109/IPDPS.2006.1639387) schedule
concurrent DAGs by composing them into one DAG (a common entry) and running HEFT on it. We do the
same with K copies of the workflow, K the requests expected in flight:

- closed loop: K = the clients;
- open loop: K = ceil(rate x the lone request's critical path) (Little's law with the isolated
  critical path as the time in system, a lower bound), at least 1;
- a trace: the same with the trace's mean rate;

capped at :data:`MAX_COPIES`. HEFT then places each copy's tasks on the GPU or the CPU slots with
contention-free costs (:func:`hetsched.policies.heft.heft`, processors as in ``heft-cf``); a node
goes to the GPU when most of its copies did (ties: the GPU). The GPU nodes are allocated as
``heft-cf`` does (``gpu_now`` while the tools fit, else ``gpu_queue`` or the CPU), with a check
that also refuses mappings a window cannot serve (:func:`hetsched.model.workload.load_infeasibility`).
Without a workload (one request at a time) it is ``heft-cf``. Non-adaptive: the same mapping
every round. Imports the model and the HEFT and StarPU modules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hetsched.model import Mapping, Placement, Probe, Proposal, RoundRecord, Scenario
from hetsched.model.trace import Infeasibility
from hetsched.model.workload import Arrivals, Workload, load_infeasibility
from hetsched.monitor import Observations
from hetsched.policies.base import Policy, PolicyContext
from hetsched.policies.guard import model_check
from hetsched.policies.heft import GPU_PROC, cpu_slots, heft
from hetsched.policies.starpu_dmda import allocate_gpu_nodes

MAX_COPIES = 16
"""Most concurrent copies of the workflow HEFT-load schedules together."""


def copies_in_flight(scenario: Scenario, workload: Workload | None) -> int:
    """How many requests HEFT-load expects in flight (see the module docstring)."""
    if workload is None:
        return 1
    if workload.arrivals is Arrivals.CLOSED:
        k = int(workload.clients or 1)
    else:
        if workload.arrivals is Arrivals.OPEN:
            rate_per_ms = float(workload.rate_per_s or 0.0) / 1000.0
        else:
            times = workload.times_ms
            span = times[-1] - times[0] if len(times) > 1 else 0.0
            rate_per_ms = (len(times) - 1) / span if span > 0 else 0.0
        k = max(1, math.ceil(rate_per_ms * scenario.isolated_critical_path_ms()))
    return max(1, min(MAX_COPIES, k))


def heft_load_gpu_order(scenario: Scenario, copies: int) -> list[str]:
    """The nodes HEFT puts on the GPU in most of ``copies`` concurrent copies, in the order the GPU
    first starts one of their copies."""
    k = cpu_slots(scenario)
    wf = scenario.workflow
    comp: dict[tuple[str, int], tuple[float, ...]] = {}
    for r in range(copies):
        for n in wf.node_ids:
            card = scenario.card_of(n)
            gpu = card.gpu_ms if card.gpu_ms is not None else math.inf
            comp[(n, r)] = (gpu, *([card.cpu_ms] * k))
    per_mb = 1.0 / scenario.machine.pcie_mb_per_ms
    link = [[0.0 if (p == GPU_PROC) == (q == GPU_PROC) else per_mb for q in range(k + 1)] for p in range(k + 1)]
    edges = {((e.src, r), (e.dst, r)): e.data_mb for r in range(copies) for e in wf.edges}
    sched = heft(comp, edges, link)
    votes = {n: 0 for n in wf.node_ids}
    first: dict[str, float] = {}
    for (n, _r), slot in sched.slots.items():
        if slot.proc == GPU_PROC:
            votes[n] += 1
            first[n] = min(first.get(n, math.inf), slot.start)
    on_gpu = [n for n in wf.node_ids if 2 * votes[n] >= copies and votes[n] > 0]
    return sorted(on_gpu, key=lambda n: (first[n], wf.node_ids.index(n)))


class HeftLoad(Policy):
    """HEFT on K concurrent copies of the workflow (Zhao & Sakellariou 2006), as one mapping."""

    name = "heft-load"

    def __init__(self) -> None:
        super().__init__()
        self._proposal: Proposal | None = None

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._proposal = None

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        if self._proposal is None:  # a function of the scenario (and its workload) only
            sc = self.ctx.scenario
            wl = sc.workload
            copies = copies_in_flight(sc, wl)
            gpu_order = heft_load_gpu_order(sc, copies)
            base = model_check(sc, self.ctx.planner)

            def check(mapping: Mapping) -> Infeasibility | None:
                return base(mapping) or (None if wl is None else load_infeasibility(sc, mapping, wl))

            mapping, notes = allocate_gpu_nodes(sc, gpu_order, check)
            demoted = [n for n in gpu_order if mapping[n] is not Placement.GPU_NOW]
            rationale = f"HEFT on {copies} concurrent cop{'y' if copies == 1 else 'ies'} of the workflow"
            if demoted:
                rationale += f"; VRAM fallback for {', '.join(demoted)}"
            info = {"heft_load": {"copies": copies, "gpu_order": gpu_order}, "vram_fallback": notes}
            self._proposal = Proposal(mapping, rationale=rationale, info=info)
        return self._proposal

    def converged(self, history: Sequence[RoundRecord]) -> bool:
        return True
