"""A lower bound on the optimum from a mixed-integer relaxation of the contention model, solved by CP-SAT.

The model (:mod:`hetsched.model.contention`) is relaxed into constraints every feasible mapping
and its simulated schedule satisfy, so the smallest makespan ``T`` the solver can prove over them
is at most the optimal E2E. Per node i: a placement ``x[i, code]`` (one of its allowed codes; a
``gpu_queue`` node larger than the budget is never admitted), a relaxed ready time ``s[i]`` and
end ``f[i]``; per tool a ``gpu_now`` flag ``y[t]`` and the end ``E[t]`` of its last ``gpu_now``
node. For the simulated schedule of any feasible mapping (s = the time a node's inputs have
arrived, f = its end, E = when the tool frees its memory, T = the E2E) these hold:

- **budget**: ``x[i, gpu_now] <= y[tool(i)]`` and the ``gpu_now`` tools fit together (second
  round: ``y[t] <=`` the sum of ``x[j, gpu_now]`` over the tool's nodes, resident exactly when one
  of them is ``gpu_now``);
- **precedence**: ``s[w] >= f[v] + transfer`` (the transfer only when the edge crosses between
  the CPU and the GPU), ``f[i] >= s[i] + isolated time`` (CPU: ``cpu_ms * max(1, d / cores)``,
  d the cores it keeps busy; ``gpu_now``: ``gpu_ms``; ``gpu_queue``: ``load_ms + gpu_ms``),
  ``T >= f[i]``;
- **device work** (:mod:`hetsched.search.bounds`): the GPU completes at most 1 ms of
  ``gpu_ms * min(1, (1 + kappa) gpu_util)`` per ms (loads count none), the cores at most 1 ms of
  ``cpu_ms * d / cores`` over the CPU nodes of d >= 1: ``T >=`` each device's total work. With
  kappa <= 1 the GPU also completes at most 1 ms of ``gpu_ms (u + kappa (1 - u))`` per ms
  (u = ``gpu_util``): with k tasks computing and U their utilisation, ``max(1, U) (1 + kappa (k -
  1)) >= U (1 - kappa) + kappa k``, the sum of those weights, so light tasks that share the GPU
  still pay kappa each. And ``T >= gpu_ms`` of any GPU node L ``+ kappa *`` the ``gpu_ms`` of
  every other: all computing tasks progress at one rate, so while L computes each other task
  adds at least kappa to the slowdown per unit of progress, and apart from L it costs at least
  as much (the weight above is at least kappa);
- **energy before and after a node** (what makes this stronger than the terms taken apart):
  every ancestor of i ends before i does, so ``f[i] >=`` the work of i and its ancestors on each
  device; none of i's descendants, nor i, starts before ``s[i]``, so ``T >= s[i] +`` the work of
  i and its descendants on each device;
- **no sure queue deadlock** (``Scenario.queue_deadlock``): a ``gpu_queue`` node fits beside
  the ``gpu_now`` tools with a node below it (they hold their memory until it has run);
- **VRAM x time**: ``budget * T >= sum over gpu_queue nodes of vram_mb (load_ms + gpu_ms) + sum
  over tools of vram_mb * E[t]``, with ``E[t] >= f[i]`` for each ``gpu_now`` node of tool t;
- **memory exclusion**: an item holding memory is a resident tool (over ``[0, E[t])``) or a
  ``gpu_queue`` node (from its admission to its end, at least ``load_ms + gpu_ms``); when at
  most k items of a set fit the budget together (k = 1: no two of them fit, or they are a tool and
  the one node that could make it resident), ``k T >=`` the time they hold memory summed, and for
  the queued nodes below a node v, ``k (T - s[v]) >=`` theirs (they are admitted after v is
  ready). The sets: greedy cliques of items that pairwise do not fit, and the longest prefixes by
  decreasing memory of which at most 2 or 3 fit. This is what the VRAM x time term misses for
  large tools: two that each need most of the budget hold it one after the other, whatever their
  sizes (the second round, and the first once it is solved without them);
- **VRAM as a cumulative resource**: a resident tool holds its memory over ``[0, E[t])``, a
  ``gpu_queue`` node from its admission ``a[q] >= s[q]`` to its end ``f[q] >= a[q] + load_ms +
  gpu_ms``; what is held at any moment fits the budget. So a queued node that does not fit beside
  a resident tool is admitted after the tool is released, and queued nodes that do not fit
  together never overlap (the term above is this constraint's energy);
- **FIFO order**: the sources are released together in node order, and siblings (nodes with the
  same predecessors) whose edges carry no transfer arrive at one instant, queued in their
  predecessors' successor order: placed on ``gpu_queue``, each such line is admitted in its order,
  so ``T >=`` a queued node's admission ``+`` the GPU work of the queued nodes from it on in its line;
- **work after a moment**: no node computes before its earliest start (the longest path above it,
  every node at its fastest; a queued node loads first), so for each such moment ``T >=`` the
  moment ``+`` the work on each device of the nodes that cannot start before it;
- **sibling contention**: siblings on one device (``gpu_now``, or the CPU with d >= 1) become
  ready within D of each other (D: their largest transfer) and progress at one rate, so while a
  sibling L has progressed x, every sibling j with ``D <= x < work_j - D`` runs beside it
  (:mod:`hetsched.search.bounds` uses the same argument per prefix). Sorting the siblings by work,
  a slowdown variable per level of work is at least ``max(1, sum d / cores)`` over those still
  computing on the CPU, and on the GPU at least ``max(1, U) + max(1, S_k) kappa (k - 1)`` (k of
  them computing, U their utilisation, S_k the k smallest utilisations summed: both parts are
  convex in k, so by secant lines it is linear in the placements and at most ``max(1, U) (1 +
  kappa (k - 1))``), and at least that product itself, with ``max(1, U)`` (a variable at least U,
  1 and those lines) times the count k (CP-SAT's multiplication: the lines' S_k counts the
  smallest utilisations among every sibling still computing, also those placed elsewhere, so
  two heavy ``gpu_now`` siblings beside light ones on the CPU had kappa charged at ``max(1, S_2)``
  instead of U); then ``f[L] >= s[L] + D +`` the integral of the slowdown over L's work, and,
  on the GPU, ``T >= s[L] +`` that integral ``+ kappa *`` the ``gpu_ms`` of the GPU nodes (the
  group's ``gpu_queue`` nodes, and nodes below all its predecessors) that compute after the group
  is ready.

Times are scaled to integers of a unit u ms: every duration and work is rounded down and every
image of a real schedule rounded up (``ceil(F / u)``), so the rounded constraints still hold for
every feasible mapping and ``(proven objective bound - 1) * u`` is below the optimum (the
slowdowns are integers of 1/4096, rounded the same way, and the sibling terms give up one unit u
for it). The unit is 2^-20 of the power of two at or above the upper bound, so the coefficients,
and with them the relaxation's optimum, do not move with the ``upper_ms`` it is handed unless that
crosses a power of two (``upper_ms`` still caps ``T``, which leaves a solved relaxation's optimum as
it is; an unsolved one's search path may differ). CP-SAT's proven bound is valid
whenever it stops, optimal or not; the solver runs on one worker with a deterministic time limit,
so the bound is the same on every machine unless its wall-clock cap (for a loaded machine) ends
it first.

**Probes.** When the whole model stops unsolved, its proven bound is often the LP's, far below the
relaxation's optimum (parallel-n50-s421: 12,672 proven, 13,036 found and 13,000 infeasible). A
*probe* solves the same model with ``T`` capped at a value ``tau`` a little above the proven bound
(every variable's domain ends there): a proof that no solution has ``T <= tau`` is a bound of
``tau`` (each feasible mapping's image satisfies every constraint, so a mapping of E2E at most
``tau`` would be a solution), and with every time bounded by the cap CP-SAT propagates the
precedences, the memory and the sibling terms from both sides and often proves that in a fraction
of what the open model needs. The probes climb from the proven bound (:data:`_PROBE_STEP` above
it, a smaller step after a probe that proves nothing) in a deterministic time of their own
(:data:`_PROBE_SHARE`); a probe that solves its model exactly gives the relaxation's optimum.

OR-Tools is the optional ``[search]`` extra: without it :func:`available` is False and
:func:`relaxation_bound_ms` returns None (the reference then keeps the bounds of
:mod:`hetsched.search.lower_bound` and says so in its label). Imports the model only (OR-Tools
lazily).
"""

from __future__ import annotations

import bisect
import importlib.util
import math
import time
from dataclasses import dataclass
from typing import Any

from hetsched.model import Scenario
from hetsched.model.mapping import CPU_CODE as CPU
from hetsched.model.mapping import NOW_CODE as NOW
from hetsched.model.mapping import QUEUE_CODE as QUEUE

RELAXATION_MAX_NODES = 400
"""Largest workflow the relaxation is built for (its energy constraints hold n^2 terms)."""
_UNITS = 1 << 20
_VRAM_SCALE = 10.0  # VRAM in units of 0.1 MB
_SLOW_SCALE = 1 << 12  # slowdowns in units of 1/4096
_SLOW_CAP = 1 << 16  # largest slowdown a sibling group's variables take (far above any real one)
_LINES = 16  # secant lines per convex slowdown term
_LEVELS = 64  # work levels per sibling group and device (coarser levels stay valid: see _add_sibling_contention)
_MIN_ROUND_SECONDS = 0.05  # the second round runs only with at least this much time left
_FIRST_ROUND_WALL_SHARE = 0.5
"""Share of the wall-clock cap (what the import left of it) the first round may take, so the whole model always gets
a round when the cap binds: at 50 tools on a loaded machine the first round had taken the whole cap unsolved (a
bound 10% below the whole model's optimum, which the whole model proved in 0.4 s when it got the time, and an
infeasible mapping as the race's start)."""
_PROBE_SHARE = 1.0
"""Deterministic time the probes get (a share of ``max_seconds``) when the second round stops unsolved."""
_PROBE_STEP = 0.02
"""The first probe's cap: this share above the proven bound (halved after each probe that proves nothing)."""
_PROBE_PRECISION = 500
"""The probes stop when the bound is within 1/this of the best relaxed solution (0.2%)."""


def _unit_ms(upper_ms: float) -> float:
    """The time unit (module docstring): 2^-20 of the power of two at or above ``upper_ms``. Any
    positive unit is sound; this one is the same for every upper bound within a power of two, and
    at most twice ``upper_ms / 2^20`` (the solver's integers stay as small)."""
    return float(2.0 ** math.ceil(math.log2(upper_ms))) / _UNITS


def available() -> bool:
    """Whether OR-Tools (the ``[search]`` extra) is installed."""
    return importlib.util.find_spec("ortools") is not None


@dataclass(frozen=True)
class RelaxationBound:
    """What the relaxation proved."""

    lower_ms: float
    """A lower bound on the optimal E2E (0 when the solver proved nothing)."""
    optimal: bool
    """True when the solver solved the relaxation exactly (the bound is the relaxation's optimum)."""
    seconds: float
    """Wall time, building the model included."""
    codes: tuple[int, ...] | None = None
    """The placements of the relaxation's best solution (node order), None if it found none: a
    mapping whose relaxed makespan is small, a good start for the best-known search (it may be
    slower or infeasible under the real model: admission waits and contention are relaxed)."""


def relaxation_bound_ms(scenario: Scenario, upper_ms: float, *, max_seconds: float = 2.0,
                        wall_seconds: float | None = None) -> RelaxationBound | None:
    """The relaxation's proven bound (see the module docstring); None without OR-Tools or when the
    workflow is longer than :data:`RELAXATION_MAX_NODES`.

    Solved in two rounds: first the constraints up to the VRAM x time term (small, and solved to
    optimality in a fraction of a second up to about 100 nodes; when it is solved, it is solved
    again with the memory exclusion added, told its bound, in what it left of its limit), then the
    whole model, told the first round's bound and started from its solution, with the wall-clock
    time and the deterministic time the first left of the two rounds' limits (``2 * max_seconds``
    together: the small model seldom needs its share, the whole one often needs more at 50-100
    nodes); when that stops unsolved, probes with ``T`` capped (module docstring) in up to
    ``_PROBE_SHARE * max_seconds`` more. The bound is the largest, so the stronger terms never
    cost the bound the smaller model proves within the same limit (a small model the solver does
    not finish keeps the search it had without the exclusion: the terms change CP-SAT's path, and
    on a 100-node diamond that path proved 4% less).

    Args:
        scenario: the scenario.
        upper_ms: the E2E of a feasible mapping (caps ``T`` and sets the time unit by its power
            of two: a solved relaxation's bound is the same for every upper bound within one).
        max_seconds: the solver's deterministic time limit (about seconds of one core) per round;
            the second round also gets what the first left of its limit, the probes their own.
        wall_seconds: a wall-clock cap as well (default: four times ``max_seconds``); the bound
            is then the same on every machine only when the cap does not bind.
    """
    c = scenario.compiled
    if not available() or c.n > RELAXATION_MAX_NODES or not (0 < upper_ms < math.inf):
        return None
    t0 = time.perf_counter()
    wall = 4 * max_seconds if wall_seconds is None else wall_seconds
    importlib.import_module("ortools.sat.python.cp_model")  # once a process (1-1.5 s: it imports pandas)
    first_wall = _FIRST_ROUND_WALL_SHARE * (wall - (time.perf_counter() - t0))
    first = _solve(scenario, upper_ms, False, max_seconds, first_wall, 0, None, exclusion=False)
    spent = first.seconds
    left_wall = wall - (time.perf_counter() - t0)
    if first.optimal and left_wall > _MIN_ROUND_SECONDS and max_seconds - spent > _MIN_ROUND_SECONDS:
        # solved: again with the memory exclusion, in what the first left of its limit (so a model
        # the first round cannot solve keeps its search as it was)
        again = _solve(scenario, upper_ms, False, max_seconds - spent, left_wall, math.floor(first.proven + 1e-9),
                       first.codes)
        spent += again.seconds
        if again.proven > first.proven:
            first = _Round(again.proven, again.optimal, again.codes or first.codes, spent)
        left_wall = wall - (time.perf_counter() - t0)
    out = first
    if left_wall > _MIN_ROUND_SECONDS:
        # the two rounds share their limits: the second has what the first left of them
        limit = 2 * max_seconds - spent
        second = _solve(scenario, upper_ms, True, limit, left_wall, math.floor(first.proven + 1e-9), first.codes)
        if second.proven > first.proven or (second.proven == first.proven and second.codes is not None):
            out = _Round(second.proven, second.optimal or (second.proven == first.proven and first.optimal),
                         second.codes or first.codes)
        if not second.optimal and _PROBE_SHARE > 0:  # the whole model stopped unsolved: probe it
            probed = _probe(scenario, upper_ms, out, second.found, _PROBE_SHARE * max_seconds, t0 + wall)
            if probed.proven > out.proven or probed.optimal:
                out = _Round(probed.proven, probed.optimal, probed.codes or out.codes)
    u = _unit_ms(upper_ms)  # every round's unit
    lower = max(0.0, (out.proven - 1.0) * u)
    return RelaxationBound(min(lower, upper_ms), out.optimal, time.perf_counter() - t0, out.codes)


@dataclass(frozen=True)
class _Round:
    proven: float
    """The proven bound on ``T`` in time units (0: nothing proven)."""
    optimal: bool
    codes: tuple[int, ...] | None
    seconds: float = 0.0
    """The solver's deterministic time."""
    unit_ms: float = 0.0
    """The time unit of ``proven`` (ms)."""
    found: int | None = None
    """``T`` of the solution found (time units), None if none."""
    infeasible: bool = False
    """Proven: no solution has ``T`` at most the round's cap (``proven`` is the cap plus one unit)."""

    @property
    def lower_ms(self) -> float:
        """The proven bound in ms (one unit given back for the rounding)."""
        return max(0.0, (self.proven - 1.0) * self.unit_ms)


def _solve(scenario: Scenario, upper_ms: float, strong: bool, max_seconds: float, wall_seconds: float,
           floor_units: int, hint: tuple[int, ...] | None, fixed: tuple[int, ...] | None = None,
           exclusion: bool = True, cap_units: int | None = None) -> _Round:
    """One round: build the relaxation (``strong``: with the terms after VRAM x time; ``exclusion``:
    with the memory exclusion) and solve it; with ``fixed`` (codes in node order), the placements
    are those codes: the relaxation's bound on that one mapping's E2E, which the tests hold against
    its simulation. ``cap_units``: a probe's cap on ``T`` and every time (default: the image of
    ``upper_ms``, which some mapping reaches); infeasible under it, the round proves the cap plus one."""
    c = scenario.compiled
    n = c.n
    # untyped on purpose: OR-Tools' stubs do not accept sums of its variables and Python ints
    cp_model: Any = importlib.import_module("ortools.sat.python.cp_model")
    t0 = time.perf_counter()
    u = _unit_ms(upper_ms)
    top = math.ceil(upper_ms / u) + 1 if cap_units is None else cap_units
    budget = c.budget

    def units(ms: float) -> int:
        return max(0, math.floor(ms / u))

    allowed = [tuple(k for k in c.allowed[i] if not (k == QUEUE and c.vram[i] > budget)) for i in range(n)]
    model = cp_model.CpModel()
    x = [{k: model.new_bool_var(f"x{i}_{k}") for k in allowed[i]} for i in range(n)]
    for i in range(n):
        model.add_exactly_one(x[i].values())
    ntools = len(c.tools)
    y = [model.new_bool_var(f"y{t}") for t in range(ntools)]
    vram_units = [math.floor(c.tool_vram[t] * _VRAM_SCALE) for t in range(ntools)]
    budget_units = math.ceil(budget * _VRAM_SCALE)
    for i in range(n):
        if NOW in x[i]:
            model.add_implication(x[i][NOW], y[c.tool_idx[i]])
    model.add(sum(vram_units[t] * y[t] for t in range(ntools)) <= budget_units)

    def isolated(i: int, k: int) -> float:
        if k == CPU:
            return c.cpu_ms[i] * max(1.0, c.demand[i] / c.cores)
        return c.gpu_ms[i] + (c.load_ms[i] if k == QUEUE else 0.0)

    s = [model.new_int_var(0, top, f"s{i}") for i in range(n)]
    f = [model.new_int_var(0, top, f"f{i}") for i in range(n)]
    makespan = model.new_int_var(0, top, "T")
    for i in range(n):
        model.add(f[i] >= s[i] + sum(units(isolated(i, k)) * x[i][k] for k in allowed[i]))
        model.add(makespan >= f[i])
    for v in range(n):
        for w, delay in c.succs[v]:
            dl = units(delay)
            cv, cw = x[v].get(CPU), x[w].get(CPU)
            if dl > 0 and (cv is not None or cw is not None):
                cross = model.new_bool_var(f"z{v}_{w}")
                lv = 0 if cv is None else cv
                lw = 0 if cw is None else cw
                model.add(cross >= lv - lw)
                model.add(cross >= lw - lv)
                model.add(s[w] >= f[v] + dl * cross)
            else:
                model.add(s[w] >= f[v])
    gpu_w = [0.0 if math.isinf(c.gpu_ms[i]) else c.gpu_ms[i] * min(1.0, (1.0 + c.kappa) * c.util[i]) for i in range(n)]
    cpu_w = [c.cpu_ms[i] * c.demand[i] / c.cores if c.demand[i] >= 1.0 else 0.0 for i in range(n)]

    def gpu_work(nodes: list[int]) -> Any:
        return sum(units(gpu_w[i]) * x[i][k] for i in nodes for k in allowed[i] if k != CPU)

    def cpu_work(nodes: list[int]) -> Any:
        return sum(units(cpu_w[i]) * x[i][CPU] for i in nodes if CPU in x[i])

    everything = list(range(n))
    model.add(makespan >= gpu_work(everything))
    model.add(makespan >= cpu_work(everything))
    masks = scenario.descendant_masks  # per node, its descendants as bits (workflow node order)
    below = [{j for j in range(n) if masks[v] >> j & 1} for v in range(n)]
    above: list[set[int]] = [set() for _ in range(n)]
    for v in range(n):
        for w in below[v]:
            above[w].add(v)
    for v in range(n):
        after = sorted(below[v] | {v})
        model.add(makespan >= s[v] + gpu_work(after))
        model.add(makespan >= s[v] + cpu_work(after))
        before = sorted(above[v] | {v})
        model.add(f[v] >= gpu_work(before))
        model.add(f[v] >= cpu_work(before))
    for q in range(n):  # Scenario.queue_deadlock: a queued node fits beside the gpu_now tools below it
        if QUEUE not in x[q]:
            continue
        held: dict[int, Any] = {}
        for v in sorted(below[q]):
            if NOW in x[v]:
                t = c.tool_idx[v]
                if t not in held:
                    held[t] = model.new_bool_var(f"h{q}_{t}")
                model.add_implication(x[v][NOW], held[t])
        if held and c.vram[q] + sum(c.tool_vram[t] for t in held) > budget:
            room = budget_units - math.ceil(c.vram[q] * _VRAM_SCALE)
            model.add(sum(vram_units[t] * h for t, h in held.items()) <= room).only_enforce_if(x[q][QUEUE])
    ends = [model.new_int_var(0, top, f"E{t}") for t in range(ntools)]
    for i in range(n):
        if NOW in x[i]:
            model.add(ends[c.tool_idx[i]] >= f[i]).only_enforce_if(x[i][NOW])
    queue_mem = sum(
        math.floor(c.vram[i] * _VRAM_SCALE * (c.load_ms[i] + c.gpu_ms[i]) / u) * x[i][QUEUE]
        for i in range(n) if QUEUE in x[i]
    )
    held = sum(vram_units[t] * ends[t] for t in range(ntools))
    model.add(budget_units * makespan + sum(vram_units) >= queue_mem + held)
    if exclusion:
        _add_memory_exclusion(model, c, x, ends, s, makespan, below, u)
    if strong:
        _add_strong_terms(model, c, x, y, s, f, ends, makespan, below, above, allowed, u, top)
    if floor_units > 0:  # a bound the first round proved holds for every image too (a weaker model's)
        model.add(makespan >= floor_units)
    if fixed is not None:
        for i in range(n):
            if fixed[i] not in x[i]:  # a placement the relaxation excludes (never feasible)
                model.add_bool_or([])
            else:
                model.add(x[i][fixed[i]] == 1)
    if hint is not None:
        for i in range(n):
            for k, var in x[i].items():
                model.add_hint(var, hint[i] == k)
    model.minimize(makespan)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_deterministic_time = max_seconds
    # a loaded machine: the wall clock caps it too (what is left of it after building the model)
    solver.parameters.max_time_in_seconds = max(0.05, wall_seconds - (time.perf_counter() - t0))
    status = solver.solve(model)
    solved = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    # the proven bound holds whether or not a solution was found (UNKNOWN: stopped by the limit)
    proven = solver.best_objective_bound if solved or status == cp_model.UNKNOWN else 0.0
    if not math.isfinite(proven):
        proven = 0.0
    codes = tuple(next(k for k in allowed[i] if solver.value(x[i][k])) for i in range(n)) if solved else None
    if status == cp_model.INFEASIBLE and cap_units is not None:
        # no image of a mapping has T <= the cap: every mapping's E2E is above cap * u
        return _Round(float(top + 1), False, None, solver.deterministic_time, u, infeasible=True)
    found = round(solver.objective_value) if solved else None
    return _Round(max(float(floor_units), proven), status == cp_model.OPTIMAL, codes, solver.deterministic_time, u,
                  found)


def _probe(scenario: Scenario, upper_ms: float, best: _Round, found: int | None, limit: float,
           deadline: float) -> _Round:
    """The probes (module docstring): the whole model with ``T`` capped, from just above ``best``'s
    proven bound up, in ``limit`` deterministic seconds (half of it at most per probe) and until the
    wall clock reaches ``deadline`` (``time.perf_counter``). ``found``: ``T`` of the second round's
    solution (the relaxation's optimum is at most that). Returns the bound, and the relaxation's
    optimum (``optimal``) when a probe solves its model."""
    u = _unit_ms(upper_ms)
    lo = math.floor(best.proven + 1e-9)  # proven: every image has T >= lo
    hi = math.ceil(upper_ms / u) + 1 if found is None else found  # some solution has T <= hi
    codes = best.codes
    step = _PROBE_STEP
    left = limit
    while left > _MIN_ROUND_SECONDS and hi - lo > max(2, lo // _PROBE_PRECISION):
        wall = deadline - time.perf_counter()
        if wall <= _MIN_ROUND_SECONDS:
            break
        cap = min(lo + max(1, math.floor(step * lo)), lo + (hi - lo) // 2)
        got = _solve(scenario, upper_ms, True, max(_MIN_ROUND_SECONDS, min(left, limit / 2)), wall, 0, None,
                     cap_units=cap)
        left -= got.seconds
        if got.infeasible:
            lo = cap + 1
            continue
        if got.optimal and got.found is not None:  # the relaxation's optimum (below the cap, so the whole model's)
            return _Round(float(max(lo, got.found)), True, got.codes)
        # solutions with T <= cap have T >= its proven bound, the others T > cap
        lo = max(lo, min(math.floor(got.proven + 1e-9), cap + 1))
        if got.found is not None:
            hi, codes = got.found, got.codes
        step /= 2
    return _Round(float(lo), False, codes)


_EXCLUSION_LEVELS = 3  # at most this many items of a set fit together: k T >= their memory-holding time


def _add_memory_exclusion(model: Any, c: Any, x: list[dict[int, Any]], ends: list[Any], s: list[Any],
                          makespan: Any, below: list[set[int]], u: float) -> None:
    """Memory holders that do not fit together take turns: the module docstring's "memory
    exclusion" item. An item is a tool resident over ``[0, E[t])`` or a ``gpu_queue`` node holding
    its memory from admission to its end (at least ``load_ms + gpu_ms``); when at most k items of a
    set fit the budget together, ``k T >=`` the time they hold memory summed (k = 1: a set that
    pairwise does not fit, so they hold it one after another)."""
    n = c.n
    budget = c.budget + 1e-6  # admission allows float noise: fewer conflicts, never more
    now_nodes: dict[int, list[int]] = {}
    for i in range(n):
        if NOW in x[i]:
            now_nodes.setdefault(c.tool_idx[i], []).append(i)

    def units(ms: float) -> int:
        return max(0, math.floor(ms / u))

    # (vram, tool or -1, node or -1, term): a tool's term is E[t] (image rounded up: one unit each
    # is given back below), a queued node's its shortest holding time when it is queued
    tools = [(c.tool_vram[t], t, -1, ends[t]) for t in sorted(now_nodes) if c.tool_vram[t] > 0]
    queued = [(c.vram[q], -1, q, units(c.load_ms[q] + c.gpu_ms[q]) * x[q][QUEUE])
              for q in range(n) if QUEUE in x[q] and c.vram[q] > 0 and units(c.load_ms[q] + c.gpu_ms[q]) > 0]

    def conflict(a: tuple[float, int, int, Any], b: tuple[float, int, int, Any]) -> bool:
        if a[0] + b[0] > budget:
            return True
        # a tool whose one gpu_now-capable node is the queued one: never both
        tool, node = (a[1], b[2]) if a[1] >= 0 else (b[1], a[2])
        return tool >= 0 and node >= 0 and now_nodes.get(tool) == [node]

    def sets(items: list[tuple[float, int, int, Any]]) -> list[tuple[int, list[tuple[float, int, int, Any]]]]:
        """(k, items) pairs: greedy cliques of the conflict graph (k = 1), then the longest
        prefixes by decreasing memory of which at most k fit together."""
        items = sorted(items, key=lambda it: (-it[0], it[1], it[2]))
        out: list[tuple[int, list[tuple[float, int, int, Any]]]] = []
        seen: set[tuple[tuple[int, int], ...]] = set()
        for first in range(min(len(items), 8)):
            clique = [items[first]]
            for it in items:
                if it is not items[first] and all(conflict(it, other) for other in clique):
                    clique.append(it)
            key = tuple(sorted((it[1], it[2]) for it in clique))
            if len(clique) >= 2 and key not in seen:
                seen.add(key)
                out.append((1, clique))
        for k in range(2, _EXCLUSION_LEVELS + 1):
            end, sizes = 0, list[float]()  # the prefix's memory sizes, ascending
            while end < len(items):
                bisect.insort(sizes, items[end][0])
                if len(sizes) > k and sum(sizes[: k + 1]) <= budget:
                    break  # k + 1 of them fit together
                end += 1
            if end > k:
                out.append((k, items[:end]))
        return out

    for k, group in sets(tools + queued):
        given_back = sum(1 for it in group if it[1] >= 0)
        model.add(k * makespan + given_back >= sum(it[3] for it in group))
    for v in range(n):  # queued nodes below v are admitted after v is ready
        part = [it for it in queued if it[2] in below[v]]
        if len(part) < 2:
            continue
        for k, group in sets(part):
            model.add(k * (makespan - s[v]) + k >= sum(it[3] for it in group))


def _add_strong_terms(model: Any, c: Any, x: list[dict[int, Any]], y: list[Any], s: list[Any], f: list[Any],
                      ends: list[Any], makespan: Any, below: list[set[int]], above: list[set[int]],
                      allowed: list[tuple[int, ...]], u: float, top: int) -> None:
    """The second round's terms (module docstring): interference-aware GPU work, sibling
    contention, VRAM as a cumulative resource, FIFO order."""
    n = c.n
    ntools = len(c.tools)

    def units(ms: float) -> int:
        return max(0, math.floor(ms / u))

    for t in range(ntools):  # a tool is resident exactly when one of its nodes is gpu_now
        model.add(y[t] <= sum(x[i][NOW] for i in range(n) if c.tool_idx[i] == t and NOW in x[i]))
    if 0 < c.kappa <= 1:
        # the GPU's sharing caps gpu_ms (u + kappa (1 - u)) per ms too: total, before and after each node
        gpu_b = [0.0 if math.isinf(c.gpu_ms[i]) else c.gpu_ms[i] * (c.util[i] + c.kappa * (1.0 - c.util[i]))
                 for i in range(n)]

        def gpu_work(nodes: list[int] | range) -> Any:
            return sum(units(gpu_b[i]) * x[i][k] for i in nodes for k in allowed[i] if k != CPU)

        model.add(makespan >= gpu_work(range(n)))
        for v in range(n):
            model.add(makespan >= s[v] + gpu_work(sorted(below[v] | {v})))
            model.add(f[v] >= gpu_work(sorted(above[v] | {v})))
        # the longest GPU task, and kappa ms per ms of every other beside or apart from it
        longest = model.new_int_var(0, top, "Wg")
        for i in range(n):
            if not math.isinf(c.gpu_ms[i]):
                model.add(longest >= units(c.gpu_ms[i]) * sum(x[i][k] for k in allowed[i] if k != CPU))
        all_gpu = sum(math.floor(c.kappa * c.gpu_ms[i] / u) * x[i][k] for i in range(n) for k in allowed[i] if k != CPU)
        model.add(_SLOW_SCALE * makespan >= math.floor(_SLOW_SCALE * (1 - c.kappa)) * longest + _SLOW_SCALE * all_gpu)
    _add_sibling_contention(model, c, x, s, f, makespan, below, u, top)
    vram_units = [math.floor(c.tool_vram[t] * _VRAM_SCALE) for t in range(ntools)]
    budget_units = math.ceil(c.budget * _VRAM_SCALE)
    # VRAM as a cumulative resource: the resident tools hold theirs over [0, E[t]), a queued node
    # from its admission to its end; what is held at any moment fits the budget
    intervals, demands = [], []
    for t in range(ntools):
        if any(NOW in x[i] and c.tool_idx[i] == t for i in range(n)):
            intervals.append(model.new_optional_interval_var(0, ends[t], ends[t], y[t], f"R{t}"))
            demands.append(vram_units[t])
    admit: dict[int, Any] = {}
    for q in range(n):
        if QUEUE not in x[q]:
            continue
        admit[q] = model.new_int_var(0, top, f"a{q}")
        size = model.new_int_var(0, top, f"d{q}")
        model.add(admit[q] >= s[q]).only_enforce_if(x[q][QUEUE])
        model.add(size >= units(c.load_ms[q] + c.gpu_ms[q])).only_enforce_if(x[q][QUEUE])
        intervals.append(model.new_optional_interval_var(admit[q], size, f[q], x[q][QUEUE], f"Q{q}"))
        demands.append(math.floor(c.vram[q] * _VRAM_SCALE))
    if intervals:
        model.add_cumulative(intervals, demands, budget_units)
    gpu_a = [0.0 if math.isinf(c.gpu_ms[i]) else c.gpu_ms[i] * min(1.0, (1.0 + c.kappa) * c.util[i]) for i in range(n)]
    for line in _fifo_lines(c):  # the queue admits in arrival order
        prev: Any = 0
        for m, q in enumerate(line):
            if q not in admit:
                continue
            here = model.new_int_var(0, top, f"P{line[0]}_{m}")
            model.add(here >= prev)
            model.add(here >= admit[q]).only_enforce_if(x[q][QUEUE])
            model.add(admit[q] >= prev).only_enforce_if(x[q][QUEUE])
            prev = here
        # the queued nodes from q on in the line compute after q is admitted: the GPU work after it
        rest: Any = 0
        for q in reversed([q for q in line if q in admit]):
            rest = rest + units(gpu_a[q]) * x[q][QUEUE]
            model.add(makespan >= admit[q] + rest).only_enforce_if(x[q][QUEUE])
    # no node computes before its earliest start (every path above it at its smallest time; a
    # queued node loads first): the device work that cannot start before a moment comes after it
    fastest = [min(c.cpu_ms[i] * max(1.0, c.demand[i] / c.cores) if k == CPU
                   else c.gpu_ms[i] + (c.load_ms[i] if k == QUEUE else 0.0) for k in allowed[i]) for i in range(n)]
    earliest = [0.0] * n
    for v in scenario_order(c):
        for w, _ in c.succs[v]:
            earliest[w] = max(earliest[w], earliest[v] + fastest[v])
    cpu_w = [c.cpu_ms[i] * c.demand[i] / c.cores if c.demand[i] >= 1.0 else 0.0 for i in range(n)]
    starts = {(i, k): earliest[i] + (c.load_ms[i] if k == QUEUE else 0.0) for i in range(n) for k in allowed[i]}
    for device in (CPU, NOW):
        keys = [(i, k) for (i, k) in starts if (k == CPU) == (device == CPU)]
        moments = sorted({starts[key] for key in keys if starts[key] > 0})
        if len(moments) > _LEVELS:
            moments = [moments[round(j * (len(moments) - 1) / (_LEVELS - 1))] for j in range(_LEVELS)]
        for moment in moments:
            late = [(i, k) for i, k in keys if starts[(i, k)] >= moment]
            placed = model.new_bool_var(f"m{device}_{moment}")  # the moment counts only if a node comes after it
            for i, k in late:
                model.add_implication(x[i][k], placed)
            work = sum(units(cpu_w[i] if k == CPU else gpu_a[i]) * x[i][k] for i, k in late)
            model.add(makespan >= units(moment) * placed + work)


def scenario_order(c: Any) -> list[int]:
    """Node indices in a topological order (Kahn's, smallest index first among the ready)."""
    left = list(c.npreds)
    ready = [i for i in range(c.n) if left[i] == 0]
    out = []
    while ready:
        v = min(ready)
        ready.remove(v)
        out.append(v)
        for w, _ in c.succs[v]:
            left[w] -= 1
            if left[w] == 0:
                ready.append(w)
    return out


def _fifo_lines(c: Any) -> list[list[int]]:
    """Sets of nodes that, placed on ``gpu_queue``, join the FIFO queue in a known order (so are
    admitted in it): the sources (released together in node order) and the siblings of each
    group with the same predecessors whose edges carry no transfer (ready at the same instant, the
    end of their last predecessor, and queued in its successor order, which must agree over the
    predecessors)."""
    by_preds: dict[tuple[int, ...], list[int]] = {}
    for i in range(c.n):
        by_preds.setdefault(tuple(sorted(c.preds[i])), []).append(i)
    lines = []
    for key, members in by_preds.items():
        if len(members) < 2:
            continue
        if not key:
            lines.append(members)
            continue
        inside = set(members)
        orders = {tuple(w for w, _ in c.succs[p] if w in inside) for p in key}
        if len(orders) == 1 and all(d == 0 for p in key for w, d in c.succs[p] if w in inside):
            lines.append(list(next(iter(orders))))
    return lines


def _convex_lines(values: list[float], most: int) -> list[tuple[float, float]]:
    """Secant lines (slope, intercept) of a convex function given at k = 0, 1, ..., len - 1: each
    lies below every value (convexity), so ``y >= a k + b`` holds at every integer k in range.
    At most ``most`` of them, spread over the range (any subset is still valid)."""
    m = len(values) - 1
    picks = sorted({round(i * (m - 1) / max(1, most - 1)) for i in range(most)} if m > most else range(m))
    return [(values[k + 1] - values[k], values[k] - (values[k + 1] - values[k]) * k) for k in picks]


def _add_sibling_contention(model: Any, c: Any, x: list[dict[int, Any]], s: list[Any], f: list[Any],
                            makespan: Any, below: list[set[int]], u: float, top: int) -> None:
    """Siblings (nodes with the same predecessors) on one device run beside each other: the
    constraints of the module docstring's "sibling contention" item."""
    n = c.n
    delay_of: dict[tuple[int, int], float] = {(v, w): d for v in range(n) for w, d in c.succs[v]}
    by_preds: dict[tuple[int, ...], list[int]] = {}
    for i in range(n):
        by_preds.setdefault(tuple(sorted(c.preds[i])), []).append(i)
    scale = _SLOW_SCALE
    for key, members in by_preds.items():
        if len(members) < 2:
            continue
        delay = max((delay_of[(p, i)] for i in members for p in key), default=0.0)
        for code in (CPU, NOW):
            # a CPU node of d < 1 runs ahead of its siblings when the cores are oversubscribed: left out
            on = [i for i in members if code in x[i] and (code != CPU or c.demand[i] >= 1.0)]
            if len(on) < 2:
                continue
            work = {i: (c.cpu_ms[i] if code == CPU else c.gpu_ms[i]) for i in on}
            others = None
            if code == NOW and 0 < c.kappa <= 1:
                # GPU work that computes after the group is ready and is not in its slowdowns: each
                # ms of it costs kappa ms beside the leader and at least as much elsewhere
                later = set(range(n)) if not key else set.intersection(*(below[p] for p in key))
                extra = [math.floor(c.kappa * c.gpu_ms[j] / u) * x[j][k] for j in sorted(later | set(members))
                         for k in (NOW, QUEUE) if k in x[j] and not (k == NOW and j in work)]
                if extra:
                    others = model.new_int_var(0, top, f"o{members[0]}")
                    model.add(others == sum(extra))
            levels = sorted(set(work.values()))
            if len(levels) > _LEVELS:  # coarser: a segment counts the siblings still computing at its end
                levels = [levels[round(k * (len(levels) - 1) / (_LEVELS - 1))] for k in range(_LEVELS)]
            slow: list[Any] = []
            for j, level in enumerate(levels):
                active = [i for i in on if work[i] >= level]  # still computing past the previous level
                h = model.new_int_var(scale, scale * _SLOW_CAP, f"g{members[0]}_{code}_{j}")
                slow.append(h)
                if len(active) < 2:
                    continue
                if code == CPU:
                    model.add(h >= sum(math.floor(scale * c.demand[i] / c.cores) * x[i][CPU] for i in active))
                    continue
                _gpu_slowdown(model, c, x, h, active, f"{members[0]}_{j}")
            for lead in on:
                w_lead = work[lead]
                lo, hi = 2 * delay, w_lead + delay
                if hi <= lo:
                    continue
                terms = []
                prev = 0.0
                for j, level in enumerate(levels):
                    overlap = min(level, hi) - max(prev, lo)
                    if overlap > 0:
                        terms.append(math.floor(overlap / u) * slow[j])
                    prev = level
                beyond = max(0.0, hi - max(prev, lo))  # past every sibling's work: L alone (slowdown >= 1)
                span = scale * (math.floor(beyond / u) - 1) + sum(terms)
                model.add(scale * f[lead] >= scale * s[lead] + scale * math.floor(delay / u) + span
                          ).only_enforce_if(x[lead][code])
                if others is not None:
                    model.add(scale * makespan >= scale * s[lead] + span + scale * others).only_enforce_if(x[lead][NOW])


def _gpu_slowdown(model: Any, c: Any, x: list[dict[int, Any]], h: Any, active: list[int], name: str) -> None:
    """``h >= scale * max(1, U) (1 + kappa (k - 1))`` for the ``gpu_now`` nodes among ``active``
    (k of them, U their ``gpu_util``), by lines that hold at every k: max(1, U) is at least
    max(1, S_k), S_k the k smallest utilisations summed, so max(1, U) (1 + kappa (k - 1)) >=
    max(1, U) + max(1, S_k) kappa (k - 1); both max(1, S_k) and max(1, S_k) kappa (k - 1) are
    convex in k, so each lies above its secant lines. And by the product itself: ``umax`` (at least
    max(1, U)) times the count k (a multiplication constraint, exact once the placements are
    known; rounded down with kappa, and ``prod - umax >= 0`` whenever k >= 1)."""
    scale = _SLOW_SCALE
    kappa = c.kappa
    utils = sorted(c.util[i] for i in active)
    sums = [0.0]
    for v in utils:
        sums.append(sums[-1] + v)
    k = sum(x[i][NOW] for i in active)
    load = sum(math.floor(scale * c.util[i]) * x[i][NOW] for i in active)
    umax = model.new_int_var(scale, scale * _SLOW_CAP, f"U{name}")
    model.add(umax >= load)
    for a, b in _convex_lines([max(1.0, v) for v in sums], _LINES):
        if a > 0:
            model.add(umax >= math.floor(scale * a) * k + math.floor(scale * b))
    if kappa <= 0:
        model.add(h >= umax)
        return
    psi = [max(1.0, v) * kappa * (kk - 1) for kk, v in enumerate(sums)]
    for a, b in _convex_lines(psi, _LINES):
        model.add(h >= umax + math.floor(scale * a) * k + math.floor(scale * b))
    # exactly: h >= max(1, U) (1 + kappa (k - 1)), the product of umax and the count
    count = model.new_int_var(0, len(active), f"k{name}")
    model.add(count == k)
    prod = model.new_int_var(0, scale * _SLOW_CAP * len(active), f"P{name}")
    model.add_multiplication_equality(prod, [umax, count])
    ks = math.floor(scale * kappa)
    model.add(scale * h >= scale * umax + ks * prod - ks * umax)


__all__ = ["RELAXATION_MAX_NODES", "RelaxationBound", "available", "relaxation_bound_ms"]
