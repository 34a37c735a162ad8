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

In cold start (``cards_visible=False``) nothing drawn from the cards reaches the records: no
isolated figures, no budget-check records (their reasons list each tool's VRAM), and the reason
of an execution that could not run is cut to its kind (``OOM``, ``never admissible``), since the
executor's text quotes the cards' VRAM too. The budget check still prunes probe candidates.

Imports only ``hetsched.model``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hetsched.model import (
    Infeasibility,
    InfeasibleKind,
    Mapping,
    Placement,
    Probe,
    ProbeRequest,
    RoundRecord,
    Scenario,
    Trace,
)
from hetsched.model.observations import (
    Budget,
    Execution,
    Infeasible,
    LastRound,
    NodeLatency,
    Observation,
    Pairs,
    ProbeResult,
    Unmeasured,
    render,
    to_json,
)
from hetsched.model.scenario import cold_reason
from hetsched.monitor.config import MonitorConfig

_NO_SWAP = frozenset({InfeasibleKind.NEVER_ADMISSIBLE, InfeasibleKind.DEADLOCK})
"""Failed moves whose swaps are not tried: the node fits nowhere, or waits on its own descendants."""

_PLACEMENT_INDEX = {Placement.CPU: 0, Placement.GPU_NOW: 1, Placement.GPU_QUEUE: 2}


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

    def to_json(self) -> list[dict[str, object]]:
        """The records as JSON-ready dicts (``DecisionRecord.observations``)."""
        return [to_json(r) for r in self.records]


def _pairs(mapping: Mapping, order: Sequence[str]) -> Pairs:
    return tuple((n, mapping[n].value) for n in order)


def _change(node: str, old: Placement, new: Placement) -> str:
    return f"{node}: {old.value} -> {new.value}"


def critical_path(trace: Trace, scenario: Scenario) -> tuple[str, ...]:
    """Nodes of the precedence chain that ended last: from the latest sink back through the
    predecessor that finished last at each step (empty for an infeasible trace)."""
    if not trace.feasible or not trace.nodes:
        return ()
    wf = scenario.workflow
    node = max(wf.sinks, key=lambda s: trace.nodes[s].end_ms)
    path = [node]
    while wf.preds(node):
        node = max(wf.preds(node), key=lambda u: trace.nodes[u].end_ms)
        path.append(node)
    return tuple(reversed(path))


def _concurrency(trace: Trace, node: str) -> float:
    """Time-weighted mean number of other nodes on the same device kind running during ``node``."""
    me = trace.nodes[node]
    span = me.end_ms - me.admitted_ms
    if span <= 0:
        return 0.0
    gpu = me.placement.on_gpu
    overlap = 0.0
    for other, nt in trace.nodes.items():
        if other == node or nt.placement.on_gpu != gpu:
            continue
        overlap += max(0.0, min(me.end_ms, nt.end_ms) - max(me.admitted_ms, nt.admitted_ms))
    return overlap / span


class Monitor:
    """Algorithm 1: running averages, feasibility history, bounded what-if probes, hints."""

    def __init__(self, scenario: Scenario, config: MonitorConfig | None = None, cards_visible: bool = True) -> None:
        self.scenario = scenario
        self.config = config or MonitorConfig()
        self.cards_visible = cards_visible
        wf = scenario.workflow
        self._order = wf.node_ids
        self._topo = {n: i for i, n in enumerate(wf.topo_order)}

    # ------------------------------------------------------------------ public API
    @property
    def run_budget(self) -> int:
        """Probes allowed in the whole run."""
        return self.config.run_budget(len(self._order))

    def next_probe(self, history: Sequence[RoundRecord], probes: Sequence[Probe] = ()) -> ProbeRequest | None:
        """The next what-if execution worth asking the loop for, or None (budgets spent, nothing left).

        ``probes`` are this round's probes already executed. Pure: the loop executes the request.
        """
        cfg = self.config
        if not cfg.probing or len(probes) >= cfg.probes_per_round:
            return None
        if sum(len(r.probes) for r in history) + len(probes) >= self.run_budget:
            return None
        candidates, _ = self._plan(self._runs(history, probes), len(history))
        if not candidates:
            return None
        c = candidates[0]
        return ProbeRequest(kind=c.kind, base=c.base, mapping=c.mapping, note=c.note)

    def observe(self, history: Sequence[RoundRecord], probes: Sequence[Probe] = ()) -> Observations:
        """Observations for the next round from the rounds so far and this round's probes; runs nothing."""
        cfg = self.config
        round_index = len(history)
        spent_before = sum(len(r.probes) for r in history)
        static: dict[Mapping, Infeasible] = {}
        # the budget-check failures met while planning each of this round's probes, then after them
        prefixes = range(len(probes) + 1) if cfg.probing else [len(probes)] if cfg.reprobe or cfg.swap else []
        for k in prefixes:
            _, found = self._plan(self._runs(history, probes[:k]), round_index)
            for m, rec in found.items():
                static.setdefault(m, rec)
        runs = self._runs(history, probes)
        records = self._records(history, runs, probes, list(static.values()), spent_before)
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
        candidates, _ = self._plan(self._runs(history), len(history))
        return min(len(candidates), left)

    def plan(self, history: Sequence[RoundRecord]) -> tuple[Candidate, ...]:
        """The probe candidates in the order they would run (for tests and docs)."""
        candidates, _ = self._plan(self._runs(history), len(history))
        return tuple(candidates)

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

    @staticmethod
    def _measured(runs: Sequence[_Run]) -> dict[Mapping, list[_Run]]:
        """Feasible runs grouped by mapping, in order of first execution."""
        out: dict[Mapping, list[_Run]] = {}
        for run in runs:
            if run.trace.feasible and run.trace.e2e_ms is not None:
                out.setdefault(run.trace.mapping, []).append(run)
        return out

    @staticmethod
    def _mean(runs: Sequence[_Run]) -> float:
        return sum(r.trace.e2e_ms or 0.0 for r in runs) / len(runs)

    # ------------------------------------------------------------------ probe planning
    def _plan(self, runs: Sequence[_Run], round_index: int) -> tuple[list[Candidate], dict[Mapping, Infeasible]]:
        """Ranked probe candidates around the best measured mapping, and the budget-check failures met."""
        cfg = self.config
        sc = self.scenario
        measured = self._measured(runs)
        if measured:
            base = min(measured, key=lambda m: self._mean(measured[m]))  # ties: first measured
            base_trace: Trace | None = measured[base][-1].trace
        elif runs:
            base = next(r.trace.mapping for r in reversed(runs) if not r.probe)
            base_trace = None
        else:
            return [], {}
        executed: dict[Mapping, Trace] = {}
        for run in runs:
            executed[run.trace.mapping] = run.trace
        measured_pairs = {
            (n, nt.placement) for run in runs if run.trace.feasible for n, nt in run.trace.nodes.items()
        }
        crit = set(critical_path(base_trace, sc)) if base_trace is not None else set()

        def latency(node: str) -> float:
            return base_trace.latency_ms(node) if base_trace is not None else 0.0

        moves = [(n, p) for n in self._order for p in sc.allowed(n) if p is not base[n]]
        moves.sort(
            key=lambda np: (
                np in measured_pairs,
                np[0] not in crit,
                -latency(np[0]),
                self._topo[np[0]],
                _PLACEMENT_INDEX[np[1]],
            )
        )
        candidates: list[Candidate] = []
        seen: set[Mapping] = set()
        static: dict[Mapping, Infeasible] = {}

        def budget_check(m: Mapping) -> Infeasibility | None:
            reason = sc.infeasibility(m)
            if reason is not None and m not in static:
                static[m] = Infeasible(
                    _pairs(m, self._order), m.code(self._order), str(reason), "budget check", round_index
                )
            return reason

        for node, target in moves:
            m = base.moved(node, target)
            note = _change(node, base[node], target)
            if m in executed:
                reason = executed[m].infeasibility
            else:
                reason = budget_check(m)
                if reason is None and cfg.reprobe and m not in seen:
                    seen.add(m)
                    candidates.append(Candidate("reprobe", base, m, note))
            # a swap cannot help a node that fits nowhere or waits on its own descendants
            if reason is None or not cfg.swap or base_trace is None or reason.kind in _NO_SWAP:
                continue
            for s, swap_note in self._swaps(base, node, target, latency):
                if s in executed or s in seen or budget_check(s) is not None:
                    continue
                seen.add(s)
                candidates.append(Candidate("swap", base, s, f"{note}, {swap_note}"))
        return candidates, static

    def _swaps(
        self, base: Mapping, node: str, target: Placement, latency: Callable[[str], float]
    ) -> list[tuple[Mapping, str]]:
        """Two-node variants for a failed move of ``node`` to ``target``."""
        sc = self.scenario
        old = base[node]
        partners = [m for m in self._order if m != node and base[m] is target]
        partners.sort(key=lambda m: (latency(m), self._topo[m]))
        out: list[tuple[Mapping, str]] = []
        for m in partners:
            moved = base.moved(node, target)
            demote = (
                target is Placement.GPU_NOW
                and old is not Placement.GPU_QUEUE
                and Placement.GPU_QUEUE in sc.allowed(m)
            )
            if demote:  # PAPER.md's S13: keep the partner on the GPU, but queued
                out.append((moved.moved(m, Placement.GPU_QUEUE), _change(m, target, Placement.GPU_QUEUE)))
            if old in sc.allowed(m):
                out.append((moved.moved(m, old), _change(m, target, old)))
        return out

    # ------------------------------------------------------------------ records
    def _records(
        self,
        history: Sequence[RoundRecord],
        runs: Sequence[_Run],
        fresh: Sequence[Probe],
        static: Sequence[Infeasible],
        spent_before: int,
    ) -> list[Observation]:
        cfg = self.config
        sc = self.scenario
        order = self._order
        records: list[Observation] = []
        if history:
            last = history[-1].trace
            records.append(
                LastRound(
                    round=history[-1].round,
                    mapping=_pairs(last.mapping, order),
                    code=last.mapping.code(order),
                    feasible=last.feasible,
                    e2e_ms=last.e2e_ms,
                    reason=self._reason(last.infeasibility) if cfg.feasibility else "",
                )
            )
        measured = self._measured(runs)
        for m, group in measured.items():
            e2es = [r.trace.e2e_ms or 0.0 for r in group]
            records.append(
                Execution(
                    mapping=_pairs(m, order),
                    code=m.code(order),
                    runs=len(group),
                    mean_e2e_ms=sum(e2es) / len(e2es),
                    min_e2e_ms=min(e2es),
                    max_e2e_ms=max(e2es),
                    rounds=tuple(dict.fromkeys(r.round for r in group)),
                    probe_runs=sum(1 for r in group if r.probe),
                )
            )
        if cfg.feasibility:
            seen: set[Mapping] = set()
            for run in runs:
                t = run.trace
                if not t.feasible and t.mapping not in seen:
                    seen.add(t.mapping)
                    records.append(
                        Infeasible(
                            _pairs(t.mapping, order),
                            t.mapping.code(order),
                            self._reason(t.infeasibility),
                            "probe" if run.probe else "round",
                            run.round,
                        )
                    )
            if self.cards_visible:  # a budget check's reason lists each tool's card VRAM
                records.extend(s for s in static if Mapping(dict(s.mapping)) not in seen)
        if cfg.running_averages:
            records.extend(self._latencies(runs))
        base_means = {m: self._mean(g) for m, g in measured.items()}
        for p in fresh:
            t = p.trace
            records.append(
                ProbeResult(
                    round=len(history),
                    probe_kind=p.kind,
                    base=_pairs(p.base, order),
                    base_code=p.base.code(order),
                    base_mean_e2e_ms=base_means.get(p.base),
                    mapping=_pairs(t.mapping, order),
                    code=t.mapping.code(order),
                    changes=tuple(_change(n, p.base[n], t.mapping[n]) for n in t.mapping.differs_at(p.base)),
                    feasible=t.feasible,
                    e2e_ms=t.e2e_ms,
                    reason=self._reason(t.infeasibility) if cfg.feasibility else "",
                )
            )
        if cfg.hints:
            done = {(n, nt.placement) for run in runs if run.trace.feasible for n, nt in run.trace.nodes.items()}
            for n in order:
                for place in sc.allowed(n):
                    if (n, place) not in done:
                        records.append(Unmeasured(n, sc.workflow.tool_of[n], place.value))
        if cfg.probing:
            records.append(Budget(len(fresh), cfg.probes_per_round, spent_before + len(fresh), self.run_budget))
        return records

    def _reason(self, reason: Infeasibility | None) -> str:
        """An executor's reason as the decider may see it (card figures cut in cold start)."""
        if reason is None:
            return ""
        return str(reason) if self.cards_visible else cold_reason(reason)

    def _latencies(self, runs: Sequence[_Run]) -> list[NodeLatency]:
        sc = self.scenario
        samples: dict[tuple[str, Placement], list[tuple[float, float, float]]] = {}
        for run in runs:
            t = run.trace
            if not t.feasible:
                continue
            for n, nt in t.nodes.items():
                samples.setdefault((n, nt.placement), []).append((t.latency_ms(n), nt.wait_ms, _concurrency(t, n)))
        out: list[NodeLatency] = []
        for n in self._order:
            card = sc.card_of(n)
            for p in sc.allowed(n):
                got = samples.get((n, p))
                if not got:
                    continue
                lat = [s[0] for s in got]
                isolated: float | None = None
                if self.cards_visible:
                    if p is Placement.CPU:
                        isolated = card.cpu_ms
                    elif card.gpu_ms is not None:
                        isolated = card.gpu_ms + (card.load_ms if p is Placement.GPU_QUEUE else 0.0)
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
