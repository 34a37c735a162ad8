"""The runtime monitor (PAPER.md's Algorithm 1): turns executed rounds into observations.

The monitor is passive: it reads traces and returns data, and executes nothing. Each round
the agentic policy relays :meth:`Monitor.next_probe` to the loop until it returns None (the loop
executes and records each request), then calls :meth:`Monitor.observe` with the history and
the round's probes. The monitor

1. aggregates every execution (rounds and earlier probes): the measured E2E of each distinct
   mapping, and each node's running-average latency per placement *under the contention it
   met* (Factor A), next to the card's isolated figure;
2. keeps the feasibility history: which mappings were infeasible and why (Factor B);
3. asks for bounded what-if probes (:class:`~hetsched.model.ProbeRequest`), in this order:
   the base is the best measured mapping (lowest mean measured E2E; before any mapping ran
   to completion, the last round's mapping); its one-node moves are ranked by
   (a) the node has never been measured on the target placement first,
   (b) nodes on the critical path of the base's latest trace first,
   (c) longer measured latency in that trace first,
   (d) workflow topological order, then placement order (cpu, gpu_now, gpu_queue).
   A move whose mapping was already executed is skipped. A move that fails (the VRAM budget
   rules it out, or it ran and was infeasible) opens its swaps, ranked right after it: the moved
   node takes the target placement and a node already holding that placement goes, for a
   ``gpu_now`` target in three-way scenarios, to ``gpu_queue`` (demotion: PAPER.md's S13
   C<->B), then to the moved node's old placement (exchange); partners with the shortest
   latency in the base trace first. The first unexecuted, budget-feasible candidate is asked
   for; after each probe the ranking is recomputed (a probe that beats the base becomes the new base);
4. lists the exploration hints: (node, placement) pairs never measured.

It never chooses: its output is :class:`Observations` (records + text), with no recommended
mapping and no figure for a mapping that was not executed. Budget checks use only the VRAM
arithmetic of the scenario (``Scenario.infeasibility``), which is a fact, not a prediction.

Budgets: ``MonitorConfig.round_budget`` (max(2, ceil(n / 10)) probes a round unless set) and
``run_budget`` (3 per node unless set). Cost: the ranking is generated lazily, only as far as
the first candidate, from placement codes checked incrementally around the base
(:mod:`hetsched.monitor.static`, the same verdicts as ``Scenario.infeasibility``); what the
runs show is aggregated once per run and extended as the history grows; plans are memoized
for the round (``observe`` replays the round's prefixes). The records list the budget-check
failures met while ranking, then the base's failing one-node moves, at most
``MonitorConfig.max_budget_checks``. About n^2 work a round instead of n^3 (BENCHMARKS.md).

In cold start (``cards_visible=False``) nothing drawn from the cards reaches the records: no
isolated figures, no budget-check records (their reasons list each tool's VRAM), and the reason
of an execution that could not run is cut to its kind (``OOM``, ``never admissible``), since the
executor's text quotes the cards' VRAM too. The budget check still prunes probe candidates.

Imports only ``hetsched.model``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from hetsched.model import (
    InfeasibleKind,
    Mapping,
    Placement,
    Probe,
    ProbeRequest,
    RoundRecord,
    Scenario,
    Trace,
)
from hetsched.model.contention import queue_load_ms
from hetsched.model.mapping import PLACEMENTS, QUEUE_CODE
from hetsched.model.observations import (
    Budget,
    Execution,
    Infeasible,
    LastRound,
    LoadWindow,
    NodeLatency,
    Observation,
    Pairs,
    ProbeResult,
    Unmeasured,
    render,
)
from hetsched.model.scenario import cold_reason
from hetsched.monitor.config import MonitorConfig
from hetsched.monitor.static import Around, Change, Codes, StaticCheck

_NO_SWAP = frozenset({InfeasibleKind.NEVER_ADMISSIBLE, InfeasibleKind.DEADLOCK})
"""Failed moves whose swaps are not tried: the node fits nowhere, or waits on its own descendants."""

_VALUE = tuple(p.value for p in PLACEMENTS)
_LETTER = tuple(p.short for p in PLACEMENTS)


@dataclass(frozen=True)
class Candidate:
    """A probe the monitor would run next (internal to the monitor; never shown to a decider)."""

    kind: str
    """``reprobe`` or ``swap``."""
    base: Mapping
    """The best measured mapping it varies."""
    mapping: Mapping
    """The mapping to execute."""
    note: str
    """The change, ``C: cpu -> gpu_now``."""


@dataclass(frozen=True)
class _Run:
    """One execution the monitor has seen."""

    trace: Trace
    round: int
    probe: bool


@dataclass(frozen=True)
class Observations:
    """The monitor's output for one round: records, their prompt text, and the round's probes."""

    round: int
    """The round these observations feed (the one about to be decided)."""
    records: tuple[Observation, ...]
    """Observation records (facts only)."""
    text: str
    """The records rendered for the prompt."""
    probes: tuple[Probe, ...]
    """This round's probes (executed by the loop before the decision)."""
    probes_spent_run: int
    """Probes executed in the run so far, these included."""


def _load_window(pairs: Pairs, code: str, group: _Group) -> LoadWindow | None:
    """Under a workload: the mean figures of a mapping's windows (None when its runs were single requests)."""
    loads = [r.trace.load for r in group.runs if r.trace.load is not None]
    if not loads:
        return None

    def mean(values: Sequence[float]) -> float:
        return sum(values) / len(values)

    slo = [m.slo_attainment for m in loads if m.slo_attainment is not None]
    return LoadWindow(
        mapping=pairs, code=code, runs=len(loads), requests=loads[-1].requests,
        throughput_per_s=mean([m.throughput_per_s for m in loads]), p50_ms=mean([m.p50_ms for m in loads]),
        p95_ms=mean([m.p95_ms for m in loads]), p99_ms=mean([m.p99_ms for m in loads]),
        queue_wait_p95_ms=mean([m.queue_wait_p95_ms for m in loads]),
        in_flight_mean=mean([m.in_flight_mean for m in loads]), gpu_util_mean=mean([m.gpu_util_mean for m in loads]),
        slo_ms=loads[-1].slo_ms, slo_attainment=mean(slo) if slo else None,
    )


def _change(node: str, old: Placement, new: Placement) -> str:
    return f"{node}: {old.value} -> {new.value}"


def critical_path(trace: Trace, scenario: Scenario) -> tuple[str, ...]:
    """Nodes of the precedence chain that ended last: from the latest sink back through the
    predecessor that finished last at each step (empty for an infeasible trace). A partial trace
    (a branch not taken) is read through the nodes that ran: its latest-ending node stands in for the sink."""
    if not trace.feasible or not trace.nodes:
        return ()
    wf = scenario.workflow
    preds: dict[str, list[str]] = {n: [] for n in wf.node_ids}
    for e in wf.edges:
        if e.src in trace.nodes and e.dst in trace.nodes:
            preds[e.dst].append(e.src)
    ends = [s for s in wf.sinks if s in trace.nodes] or list(trace.nodes)
    node = max(ends, key=lambda s: trace.nodes[s].end_ms)
    path = [node]
    while preds[node]:
        node = max(preds[node], key=lambda u: trace.nodes[u].end_ms)
        path.append(node)
    return tuple(reversed(path))


def _concurrency(trace: Trace) -> dict[str, float]:
    """Per node: the time-weighted mean number of other nodes on the same device kind running
    during it (admission to end). Sums run left to right in node order (``cumsum``), as a plain
    loop would, so the figures do not depend on how they were computed.

    Only nodes that can overlap enter a row: rows go in blocks of nodes adjacent in admission
    time, and each block's columns are the nodes (kept in node order) running at some time in the
    block's window. A node left out would add an exact ``0.0``, so the sums are bit-identical to
    the full n x n overlap matrix, in O(n x overlapping nodes) time and memory.
    """
    names = list(trace.nodes)
    nts = list(trace.nodes.values())
    admitted = np.array([nt.admitted_ms for nt in nts], dtype=float)
    end = np.array([nt.end_ms for nt in nts], dtype=float)
    gpu = np.array([nt.placement.on_gpu for nt in nts], dtype=bool)
    totals = np.zeros(len(names))
    by_start = np.argsort(admitted, kind="stable")
    for lo in range(0, len(names), _CONCURRENCY_BLOCK):
        rows = np.sort(by_start[lo : lo + _CONCURRENCY_BLOCK])
        # a column overlaps some row only if it starts before the block's last end and ends after its first start
        cols = np.flatnonzero((admitted < end[rows].max()) & (end > admitted[rows].min()))
        overlap = np.minimum.outer(end[rows], end[cols]) - np.maximum.outer(admitted[rows], admitted[cols])
        np.maximum(overlap, 0.0, out=overlap)
        overlap[gpu[rows][:, None] != gpu[cols][None, :]] = 0.0
        overlap[rows[:, None] == cols[None, :]] = 0.0
        if len(cols):
            totals[rows] = np.cumsum(overlap, axis=1)[:, -1]
    span = end - admitted
    return {n: (float(totals[k]) / float(span[k]) if span[k] > 0 else 0.0) for k, n in enumerate(names)}


_CONCURRENCY_BLOCK = 256
"""Rows of the overlap computed at once in :func:`_concurrency` (bounds its memory)."""


@dataclass
class _Group:
    """The feasible runs of one mapping."""

    mapping: Mapping
    runs: list[_Run] = field(default_factory=list)
    e2es: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return sum(self.e2es) / len(self.e2es)


class _Seen:
    """Everything the monitor derives from the executions so far, extended run by run.

    The loop hands the monitor a history that only grows (rounds, then the round's probes), so
    the monitor extends this aggregate with the new runs instead of recomputing it per call.
    """

    def __init__(self, check: StaticCheck) -> None:
        self.check = check
        self.runs: list[_Run] = []
        self.groups: dict[Codes, _Group] = {}
        """Feasible runs grouped by mapping, in order of first execution."""
        self.executed: dict[Codes, Trace] = {}
        """Every executed mapping, with its latest trace."""
        self.pairs: list[set[int]] = [set() for _ in check.order]
        """Per node, the placement codes it was measured on (feasible runs)."""
        self.infeasible: dict[Codes, _Run] = {}
        """Executed mappings that could not run, first run each, in order."""
        self.samples: dict[tuple[str, Placement], list[tuple[float, float, float]]] = {}
        """(node, placement) -> (latency, queue wait, concurrency) per feasible run, in run order."""
        self.codes_of: dict[int, Codes] = {}

    def matches(self, runs: Sequence[_Run]) -> bool:
        """True when ``runs`` starts with the runs seen so far."""
        if len(runs) < len(self.runs):
            return False
        return all(a.trace is b.trace and a.round == b.round and a.probe == b.probe
                   for a, b in zip(self.runs, runs, strict=False))

    def codes(self, trace: Trace) -> Codes:
        got = self.codes_of.get(id(trace))
        if got is None:
            got = self.check.codes(trace.mapping)
            self.codes_of[id(trace)] = got
        return got

    def extend(self, runs: Sequence[_Run]) -> None:
        for run in runs[len(self.runs):]:
            self.runs.append(run)
            t = run.trace
            if t.kind is InfeasibleKind.ABANDONED:  # its driver went away: no evidence about the mapping
                continue
            codes = self.codes(t)
            self.executed[codes] = t
            if not t.feasible:
                self.infeasible.setdefault(codes, run)
                continue
            if t.e2e_ms is not None and not 0 < len(t.nodes) < len(self.check.order):  # E2E: not from partial traces
                group = self.groups.get(codes)
                if group is None:
                    group = self.groups[codes] = _Group(t.mapping)
                group.runs.append(run)
                group.e2es.append(t.e2e_ms)
            conc = _concurrency(t)
            index = self.check.index
            for n, nt in t.nodes.items():
                self.pairs[index[n]].add(nt.placement.code)
                self.samples.setdefault((n, nt.placement), []).append((t.latency_ms(n), nt.wait_ms, conc[n]))


class _Plan:
    """The lazy ranking of probe candidates around one base, and the budget-check failures met so far.

    Candidates are generated only as far as they are asked for (usually the first one), so a
    round costs a few checks rather than the whole quadratic neighbourhood. The generator reads
    the monitor's aggregate of executions; if that aggregate has grown since (the loop executed
    more), asking for more candidates starts over from a fresh aggregate of the plan's own runs,
    so the answer stays a function of those runs.
    """

    def __init__(self, monitor: Monitor, runs: Sequence[_Run], round_index: int) -> None:
        self._monitor = monitor
        self._runs = list(runs)
        self._round = round_index
        self.failures: dict[Codes, None] = {}
        self.first: list[Candidate] = []
        self.done = False
        self._seen = monitor._seen_for(self._runs)
        self._horizon = len(self._seen.runs)
        self.base: Codes | None = None
        self.moves: list[Change] = []
        """The base's one-node moves in probe order."""
        self._candidates = self._start(self._seen)

    def _start(self, seen: _Seen) -> Iterator[Candidate]:
        self.failures.clear()
        gen, self.base, self.moves = self._monitor._ranking(seen, self._runs, self.failures)
        return gen

    def take(self, k: int) -> list[Candidate]:
        """The first ``k`` candidates (fewer when the ranking ends)."""
        if len(self.first) < k and not self.done and len(self._seen.runs) != self._horizon:
            seen = _Seen(self._monitor._check)
            seen.extend(self._runs)
            self._seen, self._horizon = seen, len(seen.runs)
            self._candidates = self._start(seen)
            for _ in self.first:  # the same runs rank the same candidates first
                next(self._candidates)
        while len(self.first) < k and not self.done:
            nxt = next(self._candidates, None)
            if nxt is None:
                self.done = True
            else:
                self.first.append(nxt)
        return self.first[:k]


class _BaseView:
    """What the probe ranking needs about one base mapping and its latest trace, computed once:
    latencies, the critical path, the one-node moves in order (but for "never measured first",
    which depends on the runs), the swap partners of each move, and the static verdicts."""

    def __init__(self, monitor: Monitor, codes: Codes, trace: Trace | None) -> None:
        self.monitor = monitor
        self.codes = codes
        self.trace = trace
        order = monitor._order
        self.latency = [0.0 if trace is None or n not in trace.nodes else trace.latency_ms(n) for n in order]
        crit = set() if trace is None else {monitor._index[n] for n in critical_path(trace, monitor.scenario)}
        topo = monitor._topo_of
        latency = self.latency
        moves = [(i, p) for i in range(len(order)) for p in monitor._allowed[i] if p != codes[i]]
        moves.sort(key=lambda m: (m[0] not in crit, -latency[m[0]], topo[m[0]], m[1]))
        self._moves = moves
        self.around = monitor._around(codes)
        self._swaps: dict[Change, list[tuple[tuple[Change, ...], str]]] = {}

    def moves(self, pairs: Sequence[set[int]]) -> list[Change]:
        """The one-node moves in probe order: never-measured (node, placement) pairs first, then
        the fixed order (a stable partition of the sorted moves is the full documented sort)."""
        fresh = [m for m in self._moves if m[1] not in pairs[m[0]]]
        known = [m for m in self._moves if m[1] in pairs[m[0]]]
        return fresh + known

    def swaps(self, i: int, target: int) -> list[tuple[tuple[Change, ...], str]]:
        """Two-node variants for a failed move of node ``i`` to ``target`` (module docstring, 3)."""
        got = self._swaps.get((i, target))
        if got is not None:
            return got
        mon = self.monitor
        order, base, latency = mon._order, self.codes, self.latency
        old = base[i]
        now = Placement.GPU_NOW.code
        partners = [j for j in range(len(order)) if j != i and base[j] == target]
        partners.sort(key=lambda j: (latency[j], mon._topo_of[j]))
        got = []
        for j in partners:
            demote = target == now and old != QUEUE_CODE and QUEUE_CODE in mon._allowed[j]
            if demote:  # PAPER.md's S13: keep the partner on the GPU, but queued
                got.append((((i, target), (j, QUEUE_CODE)), _change(order[j], PLACEMENTS[target], Placement.GPU_QUEUE)))
            if old in mon._allowed[j]:
                got.append((((i, target), (j, old)), _change(order[j], PLACEMENTS[target], PLACEMENTS[old])))
        self._swaps[(i, target)] = got
        return got


class Monitor:
    """Algorithm 1: running averages, feasibility history, bounded what-if probes, hints."""

    def __init__(self, scenario: Scenario, config: MonitorConfig | None = None, cards_visible: bool = True) -> None:
        self.scenario = scenario
        self.config = config or MonitorConfig()
        self.cards_visible = cards_visible
        wf = scenario.workflow
        self._order = wf.node_ids
        self._index = {n: i for i, n in enumerate(self._order)}
        self._topo = {n: i for i, n in enumerate(wf.topo_order)}
        self._check = StaticCheck(scenario)
        self._allowed = tuple(tuple(p.code for p in scenario.allowed(n)) for n in self._order)
        self._seen = _Seen(self._check)
        self._plans: dict[tuple[object, ...], tuple[_Plan, tuple[object, ...]]] = {}
        self._topo_of = [self._topo[n] for n in self._order]
        self._views: dict[tuple[Codes, int], _BaseView] = {}
        self._arounds: dict[Codes, Around] = {}
        self._reasons: dict[Codes, str] = {}
        self._pairs_of: dict[Codes, tuple[Pairs, str]] = {}

    # ------------------------------------------------------------------ public API
    @property
    def run_budget(self) -> int:
        """Probes allowed in the whole run."""
        return self.config.run_budget(len(self._order))

    @property
    def round_budget(self) -> int:
        """Probes allowed in one round (the config's number, or its rule for this workflow's size)."""
        return self.config.round_budget(len(self._order))

    def next_probe(self, history: Sequence[RoundRecord], probes: Sequence[Probe] = ()) -> ProbeRequest | None:
        """The next what-if execution worth asking the loop for, or None (budgets spent, nothing left).

        ``probes`` are this round's probes already executed. Pure: the loop executes the request.
        """
        cfg = self.config
        if not cfg.probing or len(probes) >= self.round_budget:
            return None
        if sum(len(r.probes) for r in history) + len(probes) >= self.run_budget:
            return None
        first = self._plan(history, probes).take(1)
        if not first:
            return None
        c = first[0]
        return ProbeRequest(kind=c.kind, base=c.base, mapping=c.mapping, note=c.note)

    def observe(self, history: Sequence[RoundRecord], probes: Sequence[Probe] = ()) -> Observations:
        """Observations for the next round from the rounds so far and this round's probes; runs nothing."""
        cfg = self.config
        round_index = len(history)
        spent_before = sum(len(r.probes) for r in history)
        static: dict[Codes, None] = {}
        # the budget-check failures met while planning each of this round's probes, then after
        # them, and every one-node move of each base that the budget check rules out
        prefixes = range(len(probes) + 1) if cfg.probing else [len(probes)] if cfg.reprobe or cfg.swap else []
        bases: dict[Codes, list[Change]] = {}
        for k in prefixes:
            plan = self._plan(history, probes[:k])
            plan.take(1)
            static.update(plan.failures)
            if plan.base is not None:
                bases.setdefault(plan.base, plan.moves)
        for base, moves in bases.items():
            static.update(dict.fromkeys(self._failed_moves(base, moves)))
        static = dict.fromkeys(list(static)[: cfg.max_budget_checks])
        seen = self._seen_for(self._runs(history, probes))
        records = self._records(history, seen, probes, list(static), spent_before, round_index)
        text = render(
            records,
            self._order,
            cards_visible=self.cards_visible,
            max_executions=cfg.max_executions_shown,
            max_infeasible=cfg.max_infeasible_shown,
        )
        return Observations(
            round=round_index,
            records=tuple(records),
            text=text,
            probes=tuple(probes),
            probes_spent_run=spent_before + len(probes),
        )

    def pending_probes(self, history: Sequence[RoundRecord]) -> int:
        """Probes still worth running after ``history`` (unexecuted candidates), capped by the budgets left."""
        cfg = self.config
        if not cfg.probing:
            return 0
        left = self.run_budget - sum(len(r.probes) for r in history)
        if left <= 0:
            return 0
        return len(self._plan(history, ()).take(left))

    def plan(self, history: Sequence[RoundRecord]) -> tuple[Candidate, ...]:
        """The probe candidates in the order they would run (for tests and docs)."""
        plan = self._plan(history, ())
        return tuple(plan.take(len(self._order) ** 2 * 4 + 8))

    # ------------------------------------------------------------------ aggregation
    def _runs(self, history: Sequence[RoundRecord], probes: Sequence[Probe] = ()) -> list[_Run]:
        """Every execution seen: each round's probes, then its own run; then this round's probes."""
        runs: list[_Run] = []
        for rec in history:
            # probes ran before the round's own execution (they informed its decision)
            runs.extend(_Run(p.trace, rec.round, probe=True) for p in rec.probes)
            runs.append(_Run(rec.trace, rec.round, probe=False))
        runs.extend(_Run(p.trace, len(history), probe=True) for p in probes)
        return runs

    def _seen_for(self, runs: Sequence[_Run]) -> _Seen:
        """The aggregate of ``runs``: the cached one extended when ``runs`` extends it, else a new one
        (which becomes the cache unless it is shorter, e.g. an earlier prefix of this round)."""
        if self._seen.matches(runs):
            self._seen.extend(runs)
            return self._seen
        seen = _Seen(self._check)
        seen.extend(runs)
        if len(runs) >= len(self._seen.runs):
            self._seen = seen
        return seen

    # ------------------------------------------------------------------ probe planning
    def _plan(self, history: Sequence[RoundRecord], probes: Sequence[Probe]) -> _Plan:
        """The (lazy, memoized) ranking of probe candidates after ``history`` and ``probes``."""
        key: tuple[object, ...] = (len(history), id(history[-1]) if history else None, tuple(id(p) for p in probes))
        hit = self._plans.get(key)
        if hit is not None:
            return hit[0]
        if any(k[0] != key[0] for k in self._plans) or len(self._plans) > 256:
            self._plans.clear()  # a new round: earlier rounds' plans are not asked for again
        plan = _Plan(self, self._runs(history, probes), len(history))
        # the key's objects are kept alive with the plan, so their ids cannot be reused meanwhile
        self._plans[key] = (plan, (history[-1] if history else None, tuple(probes)))
        return plan

    def _ranking(
        self, seen: _Seen, runs: Sequence[_Run], failures: dict[Codes, None]
    ) -> tuple[Iterator[Candidate], Codes | None, list[Change]]:
        """The candidate generator around the base of ``runs`` (``seen`` aggregates them), the base,
        and its one-node moves in probe order."""
        if seen.groups:
            base_codes = min(seen.groups, key=lambda c: seen.groups[c].mean)  # ties: first measured
            group = seen.groups[base_codes]
            base, base_trace = group.mapping, group.runs[-1].trace
        else:
            last = next((r.trace for r in reversed(runs) if not r.probe), None)
            if last is None:
                return iter(()), None, []
            base, base_trace, base_codes = last.mapping, None, seen.codes(last)
        view = self._view(base_codes, base_trace)
        moves = view.moves(seen.pairs)
        gen = self._candidates(seen, base, view, moves, failures)
        return gen, base_codes, moves

    def _view(self, codes: Codes, trace: Trace | None) -> _BaseView:
        """The ranking's view of one base and its latest trace (cached: the base rarely changes)."""
        key = (codes, id(trace))
        got = self._views.get(key)
        if got is None or got.trace is not trace:
            if len(self._views) > 64:
                self._views.clear()
            got = self._views[key] = _BaseView(self, codes, trace)
        return got

    def _around(self, codes: Codes) -> Around:
        """The incremental static check around ``codes`` (cached with its verdicts)."""
        got = self._arounds.get(codes)
        if got is None:
            if len(self._arounds) > 256:
                self._arounds.clear()
            got = self._arounds[codes] = self._check.around(codes)
        return got

    def _candidates(
        self, seen: _Seen, base: Mapping, view: _BaseView, moves: Sequence[Change], failures: dict[Codes, None]
    ) -> Iterator[Candidate]:
        cfg = self.config
        order = self._order
        base_codes = view.codes
        around = view.around
        seen_candidates: set[Codes] = set()
        executed = dict(seen.executed)  # as of this plan: a later probe must not change its answer
        for i, target in moves:
            m = _apply(base_codes, ((i, target),))
            kind: InfeasibleKind | None
            if m in executed:
                inf = executed[m].infeasibility
                kind = None if inf is None else inf.kind
            else:
                kind = around.kind(((i, target),))
                if kind is not None:
                    failures[m] = None
                elif cfg.reprobe and m not in seen_candidates:
                    seen_candidates.add(m)
                    note = _change(order[i], PLACEMENTS[base_codes[i]], PLACEMENTS[target])
                    yield Candidate("reprobe", base, self._check.mapping(m), note)
            # a swap cannot help a node that fits nowhere or waits on its own descendants
            if kind is None or not cfg.swap or view.trace is None or kind in _NO_SWAP:
                continue
            for changes, swap_note in view.swaps(i, target):
                s = _apply(base_codes, changes)
                if s in executed or s in seen_candidates:
                    continue
                if around.kind(changes) is not None:
                    failures[s] = None
                    continue
                seen_candidates.add(s)
                note = _change(order[i], PLACEMENTS[base_codes[i]], PLACEMENTS[target])
                yield Candidate("swap", base, self._check.mapping(s), f"{note}, {swap_note}")

    def _failed_moves(self, base_codes: Codes, moves: Sequence[Change]) -> list[Codes]:
        """The one-node ``moves`` of ``base_codes`` that the budget check rules out, in the order given."""
        around = self._around(base_codes)
        return [_apply(base_codes, (m,)) for m in moves if around.kind((m,)) is not None]

    # ------------------------------------------------------------------ records
    def _shown(self, codes: Codes) -> tuple[Pairs, str]:
        """A mapping's pairs and letter code for the records (cached: executions recur every round)."""
        got = self._pairs_of.get(codes)
        if got is None:
            got = (tuple(zip(self._order, (_VALUE[c] for c in codes), strict=True)),
                   "".join(_LETTER[c] for c in codes))
            if len(self._pairs_of) > 4096:
                self._pairs_of.clear()
            self._pairs_of[codes] = got
        return got

    def _pairs(self, codes: Codes) -> Pairs:
        return self._shown(codes)[0]

    def _code(self, codes: Codes) -> str:
        return self._shown(codes)[1]

    def _budget_reason(self, codes: Codes) -> str:
        got = self._reasons.get(codes)
        if got is None:
            reason = self._check.reason(codes)
            got = "" if reason is None else str(reason)
            if len(self._reasons) > 4096:
                self._reasons.clear()
            self._reasons[codes] = got
        return got

    def _records(
        self,
        history: Sequence[RoundRecord],
        seen: _Seen,
        fresh: Sequence[Probe],
        static: Sequence[Codes],
        spent_before: int,
        round_index: int,
    ) -> list[Observation]:
        cfg = self.config
        sc = self.scenario
        order = self._order
        records: list[Observation] = []
        # the last round that ran (an abandoned request is no evidence: see _Seen.extend)
        lr = next((h for h in reversed(history) if h.trace.kind is not InfeasibleKind.ABANDONED), None)
        if lr is not None:
            last = lr.trace
            lc = seen.codes(last)
            records.append(
                LastRound(
                    round=lr.round,
                    mapping=self._pairs(lc),
                    code=self._code(lc),
                    feasible=last.feasible,
                    e2e_ms=last.e2e_ms,
                    reason=self._reason(last) if cfg.feasibility else "",
                )
            )
        for codes, group in seen.groups.items():
            e2es = group.e2es
            records.append(
                Execution(
                    mapping=self._pairs(codes),
                    code=self._code(codes),
                    runs=len(e2es),
                    mean_e2e_ms=sum(e2es) / len(e2es),
                    min_e2e_ms=min(e2es),
                    max_e2e_ms=max(e2es),
                    rounds=tuple(dict.fromkeys(r.round for r in group.runs)),
                    probe_runs=sum(1 for r in group.runs if r.probe),
                )
            )
            window = _load_window(self._pairs(codes), self._code(codes), group)
            if window is not None:
                records.append(window)
        if cfg.feasibility:
            for codes, run in seen.infeasible.items():
                records.append(
                    Infeasible(
                        self._pairs(codes),
                        self._code(codes),
                        self._reason(run.trace),
                        "probe" if run.probe else "round",
                        run.round,
                    )
                )
            if self.cards_visible:  # a budget check's reason lists each tool's card VRAM
                records.extend(
                    Infeasible(self._pairs(c), self._code(c), self._budget_reason(c), "budget check", round_index)
                    for c in static
                    if c not in seen.infeasible
                )
        if cfg.running_averages:
            records.extend(self._latencies(seen))
        base_means = {group.mapping: group.mean for group in seen.groups.values()}
        for p in fresh:
            t = p.trace
            pc = seen.codes(t)
            records.append(
                ProbeResult(
                    round=len(history),
                    probe_kind=p.kind,
                    base=self._pairs(self._check.codes(p.base)),
                    base_code=p.base.code(order),
                    base_mean_e2e_ms=base_means.get(p.base),
                    mapping=self._pairs(pc),
                    code=self._code(pc),
                    changes=tuple(_change(n, p.base[n], t.mapping[n]) for n in t.mapping.differs_at(p.base)),
                    feasible=t.feasible,
                    e2e_ms=t.e2e_ms,
                    reason=self._reason(t) if cfg.feasibility else "",
                )
            )
        if cfg.hints:
            for i, n in enumerate(order):
                for place in sc.allowed(n):
                    if place.code not in seen.pairs[i]:
                        records.append(Unmeasured(n, sc.workflow.tool_of[n], place.value))
        if cfg.probing:
            records.append(Budget(len(fresh), self.round_budget, spent_before + len(fresh), self.run_budget))
        return records

    def _reason(self, trace: Trace) -> str:
        """An executor's reason as the decider may see it (card figures cut in cold start)."""
        reason = trace.infeasibility
        if reason is None:
            return ""
        return str(reason) if self.cards_visible else cold_reason(reason)

    def _latencies(self, seen: _Seen) -> list[NodeLatency]:
        sc = self.scenario
        out: list[NodeLatency] = []
        for n in self._order:
            card = sc.card_of(n)
            for p in sc.allowed(n):
                got = seen.samples.get((n, p))
                if not got:
                    continue
                lat = [s[0] for s in got]
                isolated: float | None = None
                if self.cards_visible:
                    if p is Placement.CPU:
                        isolated = card.cpu_ms
                    elif card.gpu_ms is not None:
                        load = queue_load_ms(card, sc.machine) if p is Placement.GPU_QUEUE else 0.0
                        isolated = card.gpu_ms + load
                out.append(
                    NodeLatency(
                        node=n,
                        tool=card.name,
                        placement=p.value,
                        runs=len(got),
                        mean_ms=sum(lat) / len(lat),
                        min_ms=min(lat),
                        max_ms=max(lat),
                        isolated_ms=isolated,
                        mean_wait_ms=sum(s[1] for s in got) / len(got),
                        mean_concurrent=sum(s[2] for s in got) / len(got),
                    )
                )
        return out


def _apply(codes: Codes, changes: Sequence[Change]) -> Codes:
    out = list(codes)
    for i, new in changes:
        out[i] = new
    return tuple(out)
