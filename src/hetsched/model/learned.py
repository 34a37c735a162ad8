"""Cards that learn: what a run's measurements say about each card figure, with its spread, how far
the cards moved, and which cards the measurements contradict. Part of the model package.

Every node execution of a run (rounds and probes) is a sample of its tool's figure for its
placement: ``cpu_ms`` on the CPU, ``gpu_ms`` on ``gpu_now`` and ``gpu_queue`` (the run after the
load), ``load_ms`` on ``gpu_queue`` (the load itself). A node measured under contention is
**de-contended** by the contention model (:mod:`hetsched.model.contention`), the way the model
slowed it: its isolated-equivalent time is the integral of 1 / slowdown over its run, where the
slowdown at each moment is the model's for the tasks the trace shows running beside it on the same
device (CPU: s = max(1, cores busy / cores), all of it for a task busy a core or more, 1 + d (s - 1)
for one busy d < 1 of the time; GPU: max(1, sum of gpu_util) x (1 + gpu_kappa x (tasks - 1)), with the
cards' ``cpu_demand`` (else ``cpu_threads``) and ``gpu_util`` and the machine's kappa). On the
simulator this inverts the model exactly, so a figure learned there is the card's figure times the
simulator's noise; on a real executor it is what the hardware did, read through the model. Loads are not de-contended
(the model has them share nothing).

A queued load is measured against the load the model charges, :func:`~hetsched.model.contention.queue_load_ms`:
the card's ``load_ms`` at the default ``cold_load_share`` 0, else its expectation between ``load_ms`` (warm) and
``load_cold_ms`` (memory gone cold). A trace does not say which loads found their memory cold (the Ray
executor's ``cold`` flag is a worker that had not loaded the tool yet, not cold memory), so while the card's
expectation is above its ``load_ms`` the learned load is the **mean** of the samples (a mix of warm and cold
loads, whose median is the warm one), compared with that expectation; the learned card scales ``load_ms`` and
``load_cold_ms`` alike by learned / expected, so the model's expected load becomes the measured mean and a
second pass learns the same figure (no drift round after round). With the machine's ``warm_reuse_ms`` W the
kernel charges a load that reuses memory freed in the W ms before its admission less (down to ``load_ms``):
each load is then read against what the model charged it, the memory the trace shows freed (queued nodes'
ends, resident tools' last ``gpu_now`` ends) claimed in admission order as the kernel does, and scaled to
the no-reuse expectation (measured x expected / charged), so the simulator's own loads teach the card's
figures exactly. Otherwise (share 0, or no ``load_cold_ms``) nothing changes: the median against ``load_ms``.

A :class:`LearnedFigure` is the median of its samples (the mean for a queued load under a cold
share, above) with their 10th-90th percentile spread and the drift from the card (learned / card - 1).
A card is **contradicted** when, with at least ``MIN_SAMPLES`` samples, the learned figure lies
outside the card's own p10-p90 spread (the card's figure when it has none) widened by
``DRIFT_FLOOR``, *and* the card's figure lies outside the samples' p10-p90 widened the same way:
beyond both spreads, not noise. Such a run says so and
names the command that refreshes the cards (:func:`refresh_command`).

:meth:`LearnedCards.scenario` is the scenario with the learned figures in place of the cards'
(figures with ``MIN_SAMPLES`` samples or more): the model the agentic policy ranks its candidates
with on real executors (``hetsched.model.measured.settling``).
"""

from __future__ import annotations

import bisect
import itertools
import math
import shlex
import statistics
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetsched.model.contention import Compiled, _slowed, _warm_load, queue_load_ms, simulate
from hetsched.model.history import RoundRecord
from hetsched.model.mapping import Mapping, Placement
from hetsched.model.scenario import Scenario
from hetsched.model.trace import NodeTrace, Trace

MIN_SAMPLES = 3
"""Samples a figure needs before it may be called contradicted or replace the card's figure."""
DRIFT_FLOOR = 0.10
"""The least relative band around a card's figure and around the samples (clocks, scheduling and
the model's own approximations are never exact)."""
FIGURES: tuple[str, ...] = ("cpu_ms", "gpu_ms", "load_ms")
"""The card figures a run measures, in the order reports list them."""


def _quantiles(xs: Sequence[float]) -> tuple[float, float]:
    """(p10, p90) by linear interpolation between order statistics (one sample: itself)."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0], s[0]
    q = statistics.quantiles(s, n=10, method="inclusive")
    return q[0], q[-1]


@dataclass(frozen=True)
class LearnedFigure:
    """What a run measured of one card figure (one tool, one figure)."""

    tool: str
    """The tool (card name)."""
    figure: str
    """``cpu_ms``, ``gpu_ms`` or ``load_ms``."""
    card_ms: float
    """The card's figure; for ``load_ms``, the load the model charges (``contention.queue_load_ms``)."""
    card_p10_ms: float | None
    """The card's own 10th percentile of the figure (None: the card gives no spread)."""
    card_p90_ms: float | None
    """The card's own 90th percentile of the figure."""
    samples_ms: tuple[float, ...]
    """The de-contended samples, in execution order, ms."""
    by_mean: bool = False
    """Learn the mean of the samples, not their median: a queued load whose card's expected load mixes warm
    and cold loads (module docstring)."""

    @property
    def n(self) -> int:
        """Samples."""
        return len(self.samples_ms)

    @property
    def median_ms(self) -> float:
        """The learned figure: the median of the samples, ms."""
        return float(statistics.median(self.samples_ms))

    @property
    def learned_ms(self) -> float:
        """The learned figure: the median of the samples, or their mean with ``by_mean``, ms."""
        return float(statistics.fmean(self.samples_ms)) if self.by_mean else self.median_ms

    @property
    def p10_ms(self) -> float:
        """10th percentile of the samples, ms."""
        return _quantiles(self.samples_ms)[0]

    @property
    def p90_ms(self) -> float:
        """90th percentile of the samples, ms."""
        return _quantiles(self.samples_ms)[1]

    @property
    def spread(self) -> float | None:
        """(p90 - p10) / median of the samples; None with one sample."""
        if self.n < 2 or self.median_ms <= 0:
            return None
        return (self.p90_ms - self.p10_ms) / self.median_ms

    @property
    def drift(self) -> float:
        """How far the card moved: learned / card - 1."""
        return self.learned_ms / self.card_ms - 1.0 if self.card_ms > 0 else 0.0

    @property
    def contradicted(self) -> bool:
        """The samples and the card disagree beyond both spreads (module docstring)."""
        if self.n < MIN_SAMPLES:
            return False
        lo = self.card_ms if self.card_p10_ms is None else min(self.card_p10_ms, self.card_ms)
        hi = self.card_ms if self.card_p90_ms is None else max(self.card_p90_ms, self.card_ms)
        med = self.learned_ms
        outside_card = med < lo * (1.0 - DRIFT_FLOOR) or med > hi * (1.0 + DRIFT_FLOOR)
        outside_samples = (self.card_ms < self.p10_ms * (1.0 - DRIFT_FLOOR)
                           or self.card_ms > self.p90_ms * (1.0 + DRIFT_FLOOR))
        return outside_card and outside_samples

    def describe(self) -> str:
        """``bert_base gpu_ms: card 6.0 ms, learned 7.9 ms (+31.7%) over 5 samples, p10-p90 7.5-8.4``."""
        spread = f", p10-p90 {self.p10_ms:.4g}-{self.p90_ms:.4g}" if self.n > 1 else ""
        flag = "; CONTRADICTS the card" if self.contradicted else ""
        stat = " (mean of warm and cold loads)" if self.by_mean else ""
        return (f"{self.tool} {self.figure}: card {self.card_ms:.4g} ms, learned {self.learned_ms:.4g} ms{stat} "
                f"({100 * self.drift:+.1f}%) over {self.n} sample{'s' if self.n != 1 else ''}{spread}{flag}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tool, figure, card_ms, card_p10_ms, card_p90_ms, n, learned_ms, p10_ms, p90_ms,
        spread, drift, contradicted, samples_ms."""
        return {"tool": self.tool, "figure": self.figure, "card_ms": self.card_ms, "card_p10_ms": self.card_p10_ms,
                "card_p90_ms": self.card_p90_ms, "n": self.n, "learned_ms": self.learned_ms, "p10_ms": self.p10_ms,
                "p90_ms": self.p90_ms, "spread": self.spread, "drift": self.drift,
                "contradicted": self.contradicted, "samples_ms": list(self.samples_ms)}


@dataclass(frozen=True)
class LearnedCards:
    """The learned view of a run's cards: one :class:`LearnedFigure` per measured (tool, figure)."""

    figures: tuple[LearnedFigure, ...]
    """Per tool (workflow order) and figure (``FIGURES`` order), the figures measured at least once."""
    source: str = ""
    """The scenario's file ('' when built in code): where a refresh writes."""
    scenario_name: str = ""
    """The scenario's name."""

    @property
    def contradicted(self) -> tuple[LearnedFigure, ...]:
        """The figures the measurements contradict."""
        return tuple(f for f in self.figures if f.contradicted)

    def get(self, tool: str, figure: str) -> LearnedFigure | None:
        """The learned figure of one tool, or None when the run never measured it."""
        return next((f for f in self.figures if f.tool == tool and f.figure == figure), None)

    @property
    def refresh(self) -> str | None:
        """The command that re-profiles the contradicted cards, or None when nothing is contradicted."""
        bad = self.contradicted
        if not bad:
            return None
        return refresh_command(self.source or self.scenario_name, list(dict.fromkeys(f.tool for f in bad)))

    @property
    def refresh_call(self) -> str | None:
        """:attr:`refresh` for a Python caller: the ``hs.profile(...)`` call that re-profiles the contradicted
        cards (after copying a bundled scenario to a file), or None when nothing is contradicted."""
        bad = self.contradicted
        if not bad:
            return None
        return refresh_call(self.source or self.scenario_name, list(dict.fromkeys(f.tool for f in bad)))

    def scenario(self, scenario: Scenario, min_samples: int = MIN_SAMPLES) -> Scenario:
        """``scenario`` with each figure measured ``min_samples`` times or more replaced by its learned figure;
        a queued load scales ``load_ms`` and ``load_cold_ms`` alike so that the load the model charges on
        ``scenario``'s machine (``contention.queue_load_ms``) is the learned one (module docstring)."""
        cards = dict(scenario.cards)
        changed = False
        for f in self.figures:
            card = cards.get(f.tool)
            learned = f.learned_ms
            if card is None or f.n < min_samples or learned <= 0:
                continue
            if f.figure == "gpu_ms" and card.gpu_ms is None:
                continue
            update: dict[str, float] = {f.figure: learned}
            if f.figure == "load_ms":
                expected = queue_load_ms(card, scenario.machine)
                if expected != card.load_ms and expected > 0:
                    scale = learned / expected
                    update = {"load_ms": card.load_ms * scale}
                    if card.load_cold_ms is not None:
                        update["load_cold_ms"] = card.load_cold_ms * scale
            cards[f.tool] = card.model_copy(update=update)
            changed = True
        return scenario.model_copy(update={"cards": cards}) if changed else scenario

    def describe(self) -> list[str]:
        """One line per learned figure, then the contradiction and the refresh command, if any."""
        lines = [f.describe() for f in self.figures]
        cmd = self.refresh
        if cmd is not None:
            tools = ", ".join(dict.fromkeys(f.tool for f in self.contradicted))
            lines.append(f"the measurements contradict the cards of {tools} beyond their spread: re-profile with "
                         f"`{cmd}`")
        return lines

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"figures": [...], "contradicted": [[tool, figure], ...], "refresh": cmd or null,
        "refresh_call": Python call or null}``."""
        return {"figures": [f.to_dict() for f in self.figures],
                "contradicted": [[f.tool, f.figure] for f in self.contradicted], "refresh": self.refresh,
                "refresh_call": self.refresh_call}


def refresh_command(scenario_ref: str, tools: Sequence[str] = ()) -> str:
    """``hetsched profile --refresh FILE [TOOL...]``; a bundled scenario (or one built in code) is
    copied first with ``hetsched init``, since the package's own files are not refreshed in place."""
    tail = "".join(f" {shlex.quote(t)}" for t in tools)
    path = _own_file(scenario_ref)
    if path is None:
        name = Path(scenario_ref).stem if scenario_ref and Path(scenario_ref).name else "SCENARIO"
        copy = f"{name}.yaml"
        return (f"hetsched init {shlex.quote(name)} -o {shlex.quote(copy)} && "
                f"hetsched profile --refresh {shlex.quote(copy)}{tail}")
    return f"hetsched profile --refresh {shlex.quote(scenario_ref)}{tail}"


def _own_file(scenario_ref: str) -> Path | None:
    """The scenario's file when it is the user's own; None for a bundled scenario or one built in code."""
    path = Path(scenario_ref) if scenario_ref else None
    if path is None or not path.suffix or "hetsched/data/" in path.as_posix():
        return None
    return path


def refresh_call(scenario_ref: str, tools: Sequence[str] = ()) -> str:
    """:func:`refresh_command` for Python callers: ``hs.profile([TOOL...], refresh=FILE)``; a bundled scenario
    (or one built in code) is first copied to a file of its own (``hetsched init``), since the package's files
    are not refreshed in place."""
    names = f"{list(tools)!r}, " if tools else ""
    path = _own_file(scenario_ref)
    if path is None:
        name = Path(scenario_ref).stem if scenario_ref and Path(scenario_ref).name else "SCENARIO"
        copy = f"{name}.yaml"
        init = f"hetsched init {shlex.quote(name)} -o {shlex.quote(copy)}"
        return f"hs.profile({names}refresh={copy!r})  # after `{init}`"
    return f"hs.profile({names}refresh={str(path)!r})"


# ---------------------------------------------------------------------------- de-contention
def _integrals(intervals: Sequence[tuple[float, float, float]], slowdown: Any) -> tuple[list[float], list[float]]:
    """Breakpoints and the integral of 1 / slowdown(active) up to each, for tasks ``(start, end, weight)``
    on one device; ``slowdown(count, weight_sum)`` is the model's factor for the active set."""
    events: dict[float, list[tuple[int, float]]] = {}
    for s, e, w in intervals:
        if e > s:
            events.setdefault(s, []).append((1, w))
            events.setdefault(e, []).append((-1, -w))
    times = sorted(events)
    acc = [0.0]
    count, weight = 0, 0.0
    for i, t in enumerate(times[:-1]):
        for dc, dw in events[t]:
            count += dc
            weight += dw
        f = slowdown(count, weight) if count > 0 else 1.0
        acc.append(acc[-1] + (times[i + 1] - t) / f)
    return times, acc


def _at(times: list[float], acc: list[float], t: float) -> float:
    i = bisect.bisect_left(times, t)
    return acc[i] if i < len(times) and times[i] == t else acc[max(0, min(i, len(acc)) - 1)]


def isolated_samples(scenario: Scenario, trace: Trace) -> list[tuple[str, str, float]]:
    """``(tool, figure, isolated ms)`` for every node a feasible trace recorded, de-contended by the
    model (module docstring); an infeasible trace gives none."""
    if not trace.feasible or not trace.nodes:
        return []
    if trace.load is not None and not trace.requests:
        return []  # a window read back from the store: its other requests' tasks (the contention) are not kept
    # a window of requests (a workload): every request's tasks contend, so all of them are de-contended together
    items = [kv for req in trace.requests for kv in req.nodes.items()] if trace.requests else list(trace.nodes.items())
    c = scenario.compiled
    cores, kappa = c.cores, c.kappa
    cpu: list[tuple[float, float, float]] = []
    gpu: list[tuple[float, float, float]] = []
    for name, nt in items:
        i = c.index.get(name)
        if i is None:
            continue
        if nt.placement is Placement.CPU:
            cpu.append((nt.start_ms, nt.end_ms, float(c.demand[i])))
        else:
            gpu.append((nt.start_ms, nt.end_ms, float(c.util[i])))
    # the kernel's CPU slowdown is per task (a task busy d < 1 of the time slows on its busy part only):
    # one integral per distinct demand class below one core, one for every task from one core up
    classes = {min(d, 1.0) for _, _, d in cpu}
    cpu_int = {d: _integrals(cpu, lambda k, w, d=d: _slowed(d, w / cores) if w > cores else 1.0) for d in classes}
    gt, ga = _integrals(gpu, lambda k, w: (w if w > 1.0 else 1.0) * (1.0 + kappa * (k - 1)))
    warm = _warm_charges(c, items)
    out: list[tuple[str, str, float]] = []
    for k, (name, nt) in enumerate(items):
        i = c.index.get(name)
        if i is None:
            continue
        tool = nt.tool
        if nt.placement is Placement.CPU:
            ct, ca = cpu_int[min(float(c.demand[i]), 1.0)]
            iso = _at(ct, ca, nt.end_ms) - _at(ct, ca, nt.start_ms)
            out.append((tool, "cpu_ms", iso))
        else:
            iso = _at(gt, ga, nt.end_ms) - _at(gt, ga, nt.start_ms)
            out.append((tool, "gpu_ms", iso))
            if nt.placement is Placement.GPU_QUEUE and nt.load_ms > 0:
                load = nt.load_ms
                charged = warm.get(k)
                if charged is not None and charged > 0:  # as if none of its memory had been reused warm
                    load *= c.load_cold_ms[i] / charged
                out.append((tool, "load_ms", load))
    return out


def _warm_charges(c: Compiled, items: Sequence[tuple[str, NodeTrace]]) -> dict[int, float]:
    """With the machine's ``warm_reuse_ms``: per queued item (its position in ``items``), the load the
    kernel charges it given the memory the trace shows freed on the device in the W ms before its
    admission (queued nodes' ends, resident tools' last ``gpu_now`` ends), claimed in admission order
    (``contention._warm_load``); empty without warm reuse or when no load can differ from its expectation."""
    if not c.warm_ms or not any(e != w for e, w in zip(c.load_cold_ms, c.load_ms, strict=True)):
        return {}
    frees: list[tuple[float, int, int, float]] = []  # (when, 0, tie order, MB)
    last_now: dict[int, tuple[float, int]] = {}  # tool -> (end of its last gpu_now node, that node)
    queued: list[tuple[float, int, float, int]] = []  # (admitted, 1, ready, item)
    for k, (name, nt) in enumerate(items):
        i = c.index.get(name)
        if i is None:
            continue
        if nt.placement is Placement.GPU_QUEUE:
            frees.append((nt.end_ms, 0, i, c.vram[i]))
            queued.append((nt.admitted_ms, 1, nt.ready_ms, k))
        elif nt.placement is Placement.GPU_NOW:
            ti = c.tool_idx[i]
            last_now[ti] = max(last_now.get(ti, (-math.inf, 0)), (nt.end_ms, i))
    frees.extend((end, 0, i, c.tool_vram[ti]) for ti, (end, i) in last_now.items())
    freed: deque[list[float]] = deque()
    charges: dict[int, float] = {}
    for event in sorted([*frees, *queued]):  # at one moment the kernel frees first, then admits
        if event[1] == 0:
            freed.append([event[0], event[3]])
            continue
        k = int(event[3])
        i = c.index[items[k][0]]
        charges[k] = _warm_load(freed, event[0] - c.warm_ms, c.vram[i], c.load_ms[i], c.load_cold_ms[i])
    return charges


def traces(history: Iterable[RoundRecord]) -> list[Trace]:
    """Every execution of a run in order: each round's probes, then the round."""
    out: list[Trace] = []
    for r in history:
        out.extend(p.trace for p in r.probes)
        out.append(r.trace)
    return out


def learned_cards(scenario: Scenario, history: Iterable[RoundRecord]) -> LearnedCards:
    """The learned view of ``scenario``'s cards from a run's executions (rounds and probes)."""
    samples: dict[tuple[str, str], list[float]] = {}
    for trace in traces(history):
        for tool, figure, ms in isolated_samples(scenario, trace):
            if ms > 0:
                samples.setdefault((tool, figure), []).append(ms)
    figures: list[LearnedFigure] = []
    for tool in scenario.workflow.tools:
        card = scenario.cards[tool]
        for figure in FIGURES:
            got = samples.get((tool, figure))
            value = getattr(card, figure)
            if not got or value is None:
                continue
            spread = card.spread.get(figure)
            p10, p90 = (None, None) if spread is None else (spread.p10, spread.p90)
            by_mean = False
            if figure == "load_ms":
                # measured against the load the model charges: the cold-share expectation (module docstring)
                expected = queue_load_ms(card, scenario.machine)
                if expected != value and value > 0:
                    by_mean = True
                    scale = expected / value
                    value = expected
                    p10, p90 = (None, None) if spread is None else (spread.p10 * scale, spread.p90 * scale)
            figures.append(LearnedFigure(tool, figure, float(value), p10, p90, tuple(got), by_mean))
    return LearnedCards(tuple(figures), scenario.source, scenario.name)


# ---------------------------------------------------------------------------- the model's ranking
EXHAUSTIVE_LIMIT = 729
"""Mapping spaces up to this size are ranked whole (3^6); larger ones around the seeds given."""


def model_ranking(scenario: Scenario, seeds: Iterable[Mapping] = ()) -> list[tuple[Mapping, float]]:
    """The model's ranking of mappings for ``scenario`` (its cards, e.g. :meth:`LearnedCards.scenario`'s
    learned ones, through the contention model, noise-free): ``(mapping, predicted E2E ms)``, lowest
    first, feasible mappings only (the static check and the FIFO queue). Every mapping when the space
    has at most ``EXHAUSTIVE_LIMIT``, else the ``seeds`` and every one-node move of each."""
    c = scenario.compiled
    size = math.prod(len(a) for a in c.allowed)
    if size <= EXHAUSTIVE_LIMIT:
        space: Iterable[tuple[int, ...]] = itertools.product(*c.allowed)
    else:
        around: dict[tuple[int, ...], None] = {}
        for seed in seeds:
            codes = c.codes(seed)
            around[codes] = None
            for i, allowed in enumerate(c.allowed):
                for p in allowed:
                    if p != codes[i]:
                        around[(*codes[:i], p, *codes[i + 1:])] = None
        space = around
    out: list[tuple[Mapping, float]] = []
    for codes in space:
        if not c.static_ok(codes):
            continue
        e2e = simulate(c, codes).e2e_ms
        if math.isfinite(e2e):
            out.append((c.mapping(codes), e2e))
    out.sort(key=lambda x: x[1])
    return out
