"""The simulator executor: runs a workflow under a mapping on the contention model
(:mod:`hetsched.model.contention`, DESIGN.md's model, written once there), adds the machine's noise
and builds the ``Trace``.

- Noise: one multiplicative lognormal factor (mean 1, cv ``noise_cv``) per node for its work
  and one for its load, drawn in node order from the seed whatever the mapping, so mappings
  compared under one seed see the same luck (common random numbers).

Infeasible mappings are a result (``Trace(feasible=False, reason=...)``), never an exception.
Imports only ``hetsched.model``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from hetsched.model import Infeasibility, InfeasibleKind, Mapping, NodeTrace, Scenario, Trace, VramPoint
from hetsched.model.contention import Compiled, Timings, simulate, simulate_e2e
from hetsched.model.workload import ArrivalPlan, RequestTrace, Workload, load_infeasibility, window_trace


def lognormal_factors(n: int, cv: float, rng: random.Random) -> list[float]:
    """n multiplicative factors with mean 1 and coefficient of variation cv."""
    if cv <= 0:
        return [1.0] * n
    sigma = math.sqrt(math.log1p(cv * cv))
    mu = -0.5 * sigma * sigma
    return [rng.lognormvariate(mu, sigma) for _ in range(n)]


def _deadlock_reason(c: Compiled, out: Timings) -> Infeasibility:
    head = out.head % len(c.names) if out.head >= 0 else -1  # node of the instance it belongs to
    if head < 0:  # cannot happen with a DAG; kept so a bug reads as a reason, not a hang
        return Infeasibility(InfeasibleKind.DEADLOCK, "stalled: no task can run and none is queued")
    holders = [c.tools[t] for t, k in enumerate(out.now_left) if k]
    free = c.budget - out.used_mb
    return Infeasibility(
        InfeasibleKind.DEADLOCK,
        f"node {c.names[head]!r} ({c.tools[c.tool_idx[head]]}) at the head of the gpu_queue "
        f"needs {c.vram[head]:g} MB but only {free:g} MB of {c.budget:g} MB are free and nothing running will "
        f"free more: gpu_now tools {holders} stay resident until queued work they depend on has run",
    )


def _clients_cut_short(plan: ArrivalPlan, out: Timings) -> bool:
    """A closed loop run for a duration: did a client's last planned request return early enough
    that the client would have sent another before the window ended?"""
    if plan.follows is None or math.isinf(plan.horizon_ms):
        return False
    followed = set(plan.follows)
    think = max(plan.releases_ms, default=0.0)  # every follow-up is sent the think time after its client's last
    return any(r not in followed and not math.isinf(rel) and rel + out.instance_e2e_ms[r] + think < plan.horizon_ms
               for r, rel in enumerate(out.released))


class Simulator:
    """Simulated executor for one scenario: ``run(mapping, seed) -> Trace``.

    Args:
        scenario: the scenario to simulate.
        noise: apply the machine's multiplicative noise (needs a seed); False gives the
            noise-free figures that define the true oracle.
    """

    name = "sim"

    def __init__(self, scenario: Scenario, noise: bool = True) -> None:
        self.scenario = scenario
        self.noise = noise and scenario.machine.noise_cv > 0
        self._c = scenario.compiled

    def close(self) -> None:
        """Nothing to free (the Executor contract)."""

    def __enter__(self) -> Simulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def codes(self, mapping: Mapping) -> tuple[int, ...]:
        """Placement codes in node order (``Placement.code``: 0 cpu, 1 gpu_now, 2 gpu_queue)."""
        return self._c.codes(mapping)

    def run(self, mapping: Mapping, seed: int | None = 0) -> Trace:
        """Execute once; infeasible mappings come back with ``feasible=False`` and a reason."""
        sc = self.scenario
        mapping = sc.validate_mapping(mapping)
        budget = sc.machine.vram_budget_mb
        refused = sc.infeasibility(mapping)
        use_seed = seed if self.noise else None
        if refused is not None:
            return Trace.refused(mapping, refused, vram_budget_mb=budget, seed=use_seed, executor=self.name)
        wf = lf = None
        if self.noise:
            rng = random.Random(seed)
            n = len(self._c.names)
            wf = lognormal_factors(n, sc.machine.noise_cv, rng)
            lf = lognormal_factors(n, sc.machine.noise_cv, rng)
        out = simulate(self._c, self.codes(mapping), work_factor=wf, load_factor=lf, record=True)
        if out.deadlock:
            return Trace.refused(mapping, _deadlock_reason(self._c, out), vram_budget_mb=budget, seed=use_seed,
                                 executor=self.name)
        c = self._c
        nodes = {
            name: NodeTrace(
                node=name,
                tool=c.tools[c.tool_idx[i]],
                placement=mapping[name],
                ready_ms=out.ready[i],
                admitted_ms=out.admitted[i],
                start_ms=out.start[i],
                end_ms=out.end[i],
                load_ms=out.load[i],
            )
            for i, name in enumerate(c.names)
        }
        return Trace(
            mapping=mapping,
            feasible=True,
            e2e_ms=out.e2e_ms,
            nodes=nodes,
            vram_timeline=tuple(VramPoint(t, u) for t, u in out.vram),
            vram_budget_mb=budget,
            seed=use_seed,
        )

    def run_workload(self, mapping: Mapping, workload: Workload, seed: int | None = 0) -> Trace:
        """Run a window of requests (``workload``) under one mapping on the kernel: the requests share
        the CPU pool, the GPU, the resident ``gpu_now`` tools and the one FIFO queue (docs/simulator.md,
        "Under load"). Returns the window's ``Trace`` (:func:`~hetsched.model.workload.window_trace`):
        ``load`` holds its metrics, ``requests`` every request. Noise: per request, its work factors
        then its load factors, drawn from ``seed`` in send order, so request 0 sees what a one-request
        :meth:`run` with that seed sees."""
        sc = self.scenario
        mapping = sc.validate_mapping(mapping)
        budget = sc.machine.vram_budget_mb
        refused = sc.infeasibility(mapping) or load_infeasibility(sc, mapping, workload)
        use_seed = seed if self.noise else None
        if refused is not None:
            return Trace.refused(mapping, refused, vram_budget_mb=budget, seed=use_seed, executor=self.name)
        c = self._c
        n1 = len(c.names)
        min_ms = sc.isolated_critical_path_ms()
        while True:
            plan = workload.plan(min_ms)
            copies = len(plan)
            wf = lf = None
            if self.noise:  # per request in send order: a longer plan draws the same factors for its prefix
                rng = random.Random(seed)
                wf, lf = [], []
                for _ in range(copies):
                    wf += lognormal_factors(n1, sc.machine.noise_cv, rng)
                    lf += lognormal_factors(n1, sc.machine.noise_cv, rng)
            out = simulate(c, self.codes(mapping), work_factor=wf, load_factor=lf, releases=plan.releases_ms,
                           follows=plan.follows, horizon_ms=plan.horizon_ms, record=True)
            if out.deadlock:
                return Trace.refused(mapping, _deadlock_reason(c, out), vram_budget_mb=budget, seed=use_seed,
                                     executor=self.name)
            if not _clients_cut_short(plan, out):
                break
            min_ms /= 2  # noise made requests faster than the plan assumed: plan more of them
        released = out.released or list(plan.releases_ms)
        order = sorted((rel, r) for r, rel in enumerate(released) if not math.isinf(rel))
        requests = []
        for k, (rel, r) in enumerate(order):
            base = r * n1
            nodes = {
                name: NodeTrace(node=name, tool=c.tools[c.tool_idx[i]], placement=mapping[name],
                                ready_ms=out.ready[base + i], admitted_ms=out.admitted[base + i],
                                start_ms=out.start[base + i], end_ms=out.end[base + i], load_ms=out.load[base + i])
                for i, name in enumerate(c.names)
            }
            requests.append(RequestTrace(request=k, release_ms=rel, nodes=nodes, client=plan.clients[r]))
        return window_trace(mapping, requests, sc, workload, vram_timeline=[VramPoint(t, u) for t, u in out.vram],
                            vram_budget_mb=budget, seed=use_seed, executor=self.name)

    def e2e_codes(self, codes: Sequence[int]) -> float:
        """Noise-free E2E for placement codes in node order; inf when it deadlocks.

        The caller must have checked the static feasibility (``gpu_now`` set within budget).
        This is the oracle's hot path: no trace is built.
        """
        return simulate_e2e(self._c, codes)

    def infeasibility(self, mapping: Mapping) -> Infeasibility | None:
        """Why a mapping cannot run under the model, or None: the static checks, then a noise-free
        simulation for what only the FIFO order shows (a deadlock at the head of the queue)."""
        mapping = self.scenario.validate_mapping(mapping)
        static = self.scenario.infeasibility(mapping)
        if static is not None:
            return static
        out = simulate(self._c, self.codes(mapping))
        return _deadlock_reason(self._c, out) if out.deadlock else None

    def e2e(self, mapping: Mapping) -> float | None:
        """Noise-free E2E of a mapping, None when infeasible."""
        mapping = self.scenario.validate_mapping(mapping)
        if self.scenario.infeasibility(mapping):
            return None
        e = self.e2e_codes(self.codes(mapping))
        return None if math.isinf(e) else e

