"""The ``rules`` decider: the paper's reasoning as explicit, deterministic rules. NOT an LLM.

It is the default when no LLM is configured, and it is named for what it is everywhere.

Round 0, from the cards (PAPER.md, "The problem" and Figure 3's reasoning):
1. a tool without a GPU implementation runs on the CPU;
2. a tool that is faster on the CPU in isolation (speedup cpu/gpu < 1, which includes the
   paper's CPU-preferred category) runs on the CPU;
3. every other node starts on ``gpu_now``;
4. the ratio test, for ambiguous tools (speedup <= 5x), lowest speedup first: let B be the GPU
   time of the GPU nodes that may run in parallel with node v, added up (concurrent tools on
   one GPU roughly serialize: the paper's Figure 1). v moves to the CPU when its CPU time,
   stretched by CPU oversubscription (the cores v and its parallel CPU nodes keep busy, as the
   contention model charges them: measured ``cpu_demand``, else ``cpu_threads``, over the cores;
   a v that waits part of the time slows only on its busy part), is below B + v's GPU time: its
   CPU run hides behind the contended GPU bottleneck;
5. VRAM packing, when the ``gpu_now`` tools do not fit the budget together: each tool's value
   is the time ``gpu_now`` saves over its best alternative (the CPU, or in three-way scenarios
   ``gpu_queue`` = gpu + load when that fits the budget alone, the load as the contention model
   charges it: ``queue_load_ms``, with the machine's ``cold_load_share``); tools are kept on ``gpu_now``
   by value per MB, largest first, while they fit (or the single most valuable tool, if that is
   worth more: the usual knapsack guard); each node left out goes to ``gpu_queue`` when that is
   allowed, faster than its CPU time and cannot deadlock (no ``gpu_now`` tool downstream of it
   holds the memory it needs), else to the CPU.

These rules seed a model. The decider reads the cards through its own estimator
(:mod:`hetsched.deciders.estimate`: DESIGN.md's contention model, GPU interference as the machine
block declares it until measured) and searches it (:mod:`hetsched.deciders.search`: exhaustive when
the space fits the budget of estimates, else iterated local search from the rules' mapping and
the uniform ones; three-way from ``SCREEN_MIN_NODES`` nodes on also from the rules' mapping with its
``gpu_now`` nodes queued; round 0 then also descends from the late starts,
``hetsched.deciders.search.late_starts``). Round 0 runs the lowest estimate.

Later rounds use the evidence the monitor reports (docs/agentic.md):
- calibration: the running averages rescale the cards a node's measured latency contradicts
  by more than ``CARD_TOLERANCE``, and the GPU interference is fitted to the measured E2Es of
  the lowest and the most recent measured mappings (repeated ``CALIBRATION_PASSES`` times; from
  ``SCREEN_MIN_NODES`` nodes on by Gauss-Newton steps from the previous pass's answer,
  :func:`~hetsched.deciders.estimate.fit_interference_local`, not a grid);
- the calibrated model is searched again (also from the best measured mappings; from
  ``SCREEN_MIN_NODES`` nodes on from those alone); from ``SCREEN_MIN_NODES`` nodes on, round 0's search
  also goes on a chunk more each round (``SCREEN_CONTINUE_LATER``; anytime,
  ``hetsched.deciders.search.resume``), and its lowest mapping, re-scored on the calibrated model, joins
  the candidates;
- its lowest mapping that never ran and is not on record as infeasible is measured next when
  the model expects it to beat the best measured one by ``explore_gain``;
- otherwise the evidence decides: among the measured mappings within ``margin`` of the lowest
  measured mean (tied within noise), the one the model estimates lowest.

Cold start (no cards): round 0 is the first of all-``gpu_now``, all-``gpu_queue`` (three-way
only), all-CPU that passes validation, each rejection recorded as an attempt; later rounds keep
the last mapping while its mean measured E2E is within ``margin`` of the lowest, else take the
lowest (no model: it would need the cards).

Nothing here runs the simulator; decisions are a function of the scenario and the observations
(the caches are caches). Imports only ``hetsched.model`` (and numpy).
"""

from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hetsched.deciders.base import Decider, Decision, DecisionContext, check_mapping
from hetsched.deciders.estimate import Estimator, fit_interference, fit_interference_local
from hetsched.deciders.evidence import Codes, Evidence, MeasuredCodes
from hetsched.deciders.parallel import mask_bits, related_masks
from hetsched.deciders.search import SearchResult, late_starts, local_search, resume
from hetsched.model import Attempt, Infeasibility, InfeasibleKind, Mapping, Mode, Placement, Scenario
from hetsched.model.card import GPU_PREFERRED_MIN
from hetsched.model.contention import Timings, cpu_slowdown, queue_load_ms

DEFAULT_MARGIN = 0.02
"""Relative E2E margin within which the rules keep the current mapping (noise hysteresis)."""

NOT_AN_LLM = "(rules decider: deterministic rules, not an LLM; no prompt was sent)"


def card_rules(scenario: Scenario) -> tuple[Mapping, list[str]]:
    """The round-0 mapping from the cards, and the rule applied to each node."""
    wf = scenario.workflow
    ids = wf.topo_order
    topo = {n: i for i, n in enumerate(ids)}
    steps: list[str] = []
    place: dict[str, Placement] = {}
    for n in ids:
        c = scenario.card_of(n)
        if c.gpu_ms is None:
            place[n] = Placement.CPU
            steps.append(f"{n}: {c.name} has no GPU implementation -> cpu")
        elif c.cpu_ms < c.gpu_ms:
            place[n] = Placement.CPU
            steps.append(f"{n}: speedup {c.cpu_ms / c.gpu_ms:.2f}x < 1, faster on the CPU in isolation -> cpu")
        else:
            place[n] = Placement.GPU_NOW
            steps.append(f"{n}: speedup {c.cpu_ms / c.gpu_ms:.2f}x ({c.category.value}) -> gpu_now")

    # ratio test (Factor A) for ambiguous tools, lowest speedup first; the nodes beside v are a bit
    # mask, the sums over them numpy's left-to-right cumsum (the same floats as a sum in node order)
    related = related_masks(scenario)
    node_ids = wf.node_ids
    n_nodes = len(node_ids)
    at = {v: i for i, v in enumerate(node_ids)}
    gpu_ms = np.array([scenario.card_of(u).gpu_ms or 0.0 for u in node_ids], dtype=np.float64)
    # cores a CPU run keeps busy, as the kernel charges them (ToolCard.cores_busy: the measured
    # cpu_demand, else cpu_threads; integer-valued floats without measured demands: exact sums)
    busy_of = np.array([scenario.card_of(u).cores_busy for u in node_ids], dtype=np.float64)
    on_gpu = np.array([place[u].on_gpu for u in node_ids], dtype=bool)
    cores = scenario.machine.cpu_cores
    ambiguous = [
        n for n in ids if place[n] is Placement.GPU_NOW and (scenario.card_of(n).speedup or 0) <= GPU_PREFERRED_MIN
    ]
    ambiguous.sort(key=lambda n: (scenario.card_of(n).speedup or 0.0, topo[n]))
    for v in ambiguous:
        c = scenario.card_of(v)
        gpu_v = c.gpu_ms or 0.0
        beside = ~mask_bits(related[at[v]], n_nodes)
        others = beside & on_gpu
        if not others.any():
            steps.append(f"{v}: ratio test: no GPU node runs in parallel, stays gpu_now")
            continue
        bottleneck = float(np.cumsum(gpu_ms[others])[-1])
        busy = c.cores_busy + float(busy_of[beside & ~on_gpu].sum())
        cpu_eff = c.cpu_ms * cpu_slowdown(c.cores_busy, busy / cores)
        if cpu_eff < bottleneck + gpu_v:
            place[v] = Placement.CPU
            on_gpu[at[v]] = False
            steps.append(
                f"{v}: ratio test: CPU {cpu_eff:.1f} ms < contended GPU {bottleneck + gpu_v:.1f} ms "
                f"(its {gpu_v:g} ms + parallel GPU nodes {bottleneck:g} ms) -> cpu"
            )
        else:
            steps.append(
                f"{v}: ratio test: CPU {cpu_eff:.1f} ms >= contended GPU {bottleneck + gpu_v:.1f} ms, stays gpu_now"
            )

    # VRAM packing (Factor B)
    budget = scenario.machine.vram_budget_mb
    now_tools = list(dict.fromkeys(wf.tool_of[n] for n in ids if place[n] is Placement.GPU_NOW))
    need = sum(scenario.cards[t].vram_mb for t in now_tools)
    if need > budget:
        queue_ok = scenario.mode is Mode.THREE_WAY

        def alternative_ms(n: str) -> float:
            card = scenario.card_of(n)
            options = [card.cpu_ms]
            if queue_ok and card.vram_mb <= budget:
                options.append((card.gpu_ms or 0.0) + queue_load_ms(card, scenario.machine))
            return min(options)

        value: dict[str, float] = dict.fromkeys(now_tools, 0)  # one pass in node order: the sums per tool
        for n in ids:
            if place[n] is Placement.GPU_NOW:
                value[wf.tool_of[n]] += alternative_ms(n) - (scenario.card_of(n).gpu_ms or 0.0)
        vram = {t: scenario.cards[t].vram_mb for t in now_tools}
        fits = [t for t in now_tools if vram[t] <= budget]
        fits.sort(key=lambda t: (-(value[t] / vram[t]) if vram[t] > 0 else -float("inf"), now_tools.index(t)))
        keep: list[str] = []
        used = 0.0
        for t in fits:
            if used + vram[t] <= budget:
                keep.append(t)
                used += vram[t]
        if fits:
            single = max(fits, key=lambda t: value[t])
            if value[single] > sum(value[t] for t in keep):
                keep = [single]
        steps.append(
            f"VRAM packing: gpu_now tools need {need:g} MB of {budget:g} MB; by value per MB "
            + ", ".join(f"{t} {value[t]:.0f} ms/{vram[t]:g} MB" for t in fits)
            + f"; keep {keep}"
        )
        resident = _Resident(scenario, place)
        for n in ids:
            t = wf.tool_of[n]
            if place[n] is not Placement.GPU_NOW or t in keep:
                continue
            card = scenario.card_of(n)
            queue_ms = (card.gpu_ms or 0.0) + queue_load_ms(card, scenario.machine)
            resident.leave(n)
            if queue_ok and card.vram_mb <= budget and queue_ms < card.cpu_ms:
                place[n] = Placement.GPU_QUEUE
                blocked = resident.deadlock(n)
                if not blocked:
                    steps.append(
                        f"{n}: left out of gpu_now; queue {queue_ms:.1f} ms < cpu {card.cpu_ms:g} ms -> gpu_queue"
                    )
                    continue
                steps.append(f"{n}: queueing would deadlock ({blocked})")
            place[n] = Placement.CPU
            steps.append(f"{n}: left out of gpu_now -> cpu")
    return Mapping((n, place[n]) for n in wf.node_ids), steps


class _Resident:
    """The ``gpu_now`` nodes of each tool as bit masks, kept up to date while the VRAM packing moves
    nodes off ``gpu_now`` one at a time, so checking the node just queued costs O(tools), not a
    whole-mapping ``Scenario.queue_deadlock`` (O(n) per node, O(n^2) per packing). Moving a node off
    ``gpu_now`` only releases memory, so nodes queued before cannot become deadlocked: the node just
    queued is the only one to check, with the scenario's words."""

    def __init__(self, scenario: Scenario, place: dict[str, Placement]) -> None:
        self.scenario = scenario
        wf = scenario.workflow
        self.index = {v: i for i, v in enumerate(wf.node_ids)}
        self.tools: dict[str, int] = {}
        for v in wf.node_ids:
            if place[v] is Placement.GPU_NOW:
                t = wf.tool_of[v]
                self.tools[t] = self.tools.get(t, 0) | (1 << self.index[v])

    def leave(self, node: str) -> None:
        """``node`` no longer runs on ``gpu_now``."""
        t = self.scenario.workflow.tool_of[node]
        self.tools[t] = self.tools.get(t, 0) & ~(1 << self.index[node])

    def deadlock(self, node: str) -> Infeasibility | None:
        """``Scenario.queue_deadlock``'s verdict on queued ``node`` (holders listed in the order of their
        first ``gpu_now`` node, as that method lists them)."""
        sc = self.scenario
        below = sc.descendant_masks[self.index[node]]
        held_by = sorted(((nodes & -nodes).bit_length(), t) for t, nodes in self.tools.items() if nodes & below)
        holders = [t for _, t in held_by]
        held = sum(sc.cards[t].vram_mb for t in holders)
        need = sc.card_of(node).vram_mb
        budget = sc.machine.vram_budget_mb
        if holders and need + held > budget:
            return Infeasibility(
                InfeasibleKind.DEADLOCK,
                f"node {node!r} ({sc.card_of(node).name}) needs {need:g} MB but gpu_now tools "
                f"{holders} hold {held:g} MB of {budget:g} MB until nodes that depend on it finish",
            )
        return None


def first_valid_uniform(scenario: Scenario, prompt: str) -> tuple[Mapping, list[Attempt]]:
    """All-gpu_now, then all-gpu_queue (three-way), then all-CPU: the first that validates,
    with every rejection on record as an attempt."""
    candidates = [scenario.uniform(Placement.GPU_NOW)]
    if scenario.mode is Mode.THREE_WAY:
        candidates.append(scenario.uniform(Placement.GPU_QUEUE))
    candidates.append(scenario.uniform(Placement.CPU))
    attempts: list[Attempt] = []
    for m in candidates:
        problem = check_mapping(scenario, m)
        reply = json.dumps({"mapping": m.to_dict()})
        sent = prompt if not attempts else "(validation feedback)"
        attempts.append(Attempt(len(attempts) + 1, sent, reply, error=problem))
        if not problem:
            return m, attempts
    raise AssertionError("all-CPU failed validation")  # all-CPU is always feasible


DEFAULT_EXPLORE_GAIN = 0.005
"""An unmeasured mapping is proposed only when the decider's model expects it to beat the best
measured one by at least this share (smaller gains are within what the model cannot resolve)."""
SEARCH_EVALUATIONS_BASE = 200
"""Estimates the search may make per decision: this many plus ``SEARCH_EVALUATIONS_PER_NODE`` per node."""
SEARCH_EVALUATIONS_PER_NODE = 30
"""See ``SEARCH_EVALUATIONS_BASE``: the search grows with the one-node neighbourhood (2n-ish moves)."""
SEARCH_NODE_ESTIMATES_MAX = 500_000
"""Past this many nodes x estimates (each estimate simulates every node), the default budget of
estimates shrinks to ``SEARCH_NODE_ESTIMATES_MAX // n`` (at least ``SEARCH_EVALUATIONS_BASE``), so a
decision stays linear in n: unchanged up to 100 nodes (3,200 estimates), 2,000 at 250 nodes, 200 from
2,500 nodes on."""
SEARCH_EVALUATIONS_PER_NODE_LATER = 10
"""Per-node estimates once something was measured: the search then also starts from the best
measured mappings (usually the model's earlier optimum), so it needs less."""
SCREEN_MIN_NODES = 17
"""From this many nodes on, the search's descents try only the moves of the nodes that can shorten the
current mapping's estimate (``hetsched.deciders.search.focus``: its critical chain, what shares a device
with it, what holds the memory it waits for), start from every starting mapping, and the budget of
estimates is fixed (below) instead of growing with n: a decision costs a bounded number of
simulations. Up to 16 nodes the search is the full-neighbourhood one above (the bundled and random
suites' workflows, whose tables are pinned)."""
SCREEN_EVALUATIONS_FIRST = 1600
"""Estimates of the screened search with nothing measured yet (round 0), at least (the 100-node budget
at every size from ``SCREEN_MIN_NODES`` nodes: fewer left 20-50-node three-way workflows 2-12% above
the best known, their descents converging to poor optima before the kicks could leave them); and..."""
SCREEN_NODES_PER_EVALUATION_ROOT = 2.5
"""...(n / this)^2 (1,600 at 100 nodes, 2,500 at 125): round 0 descends from the rules' and the uniform
mappings, often far from the optimum on three-way workflows, in O(n) improving steps of O(n) tries
each; later rounds start near it."""
SCREEN_KICKS_FIRST = 1600
"""Estimates round 0's screened search spends on kicks on top of those: half of the budget above races
the descents from the starts, the rest and these kick the best mapping found (3,200 estimates up to 100
nodes, the race unchanged). The descents converge at 20-100 nodes; what the race's winner misses is
mostly a multi-tool exchange (three tools in, two out; a tool queued and another sent to the CPU) that
no one-node or one-tool move improves and a kick then a descent finds. With 1,600 kicks instead of 800,
tuning seeds 41/14 and 13/7, round 0 alone: 50 nodes 16 -> 19 and 16 -> 17 of 20 within 1% of the best
known, 100 nodes 17 -> 19 and 15 -> 18 within 3%; round 0 costs about twice as long (later rounds,
the median decision, unchanged)."""
SCREEN_LATE_FIRST = 3200
"""Estimates round 0's screened search spends, after those, on descents from the late starts
(``hetsched.deciders.search.late_starts``: the greedy mapping and, in three-way workflows, CPU-heavy
ones) and kicks from the best of all (capped like the rest: 5,000 in all at 100 nodes). The first
estimates are the same as without them, so round 0 can only gain. Tuning seeds 41/14/13/7/21/22,
three-way, round 0 alone: 50 nodes 25 -> 30 of 30 within 1% of the best found, 100 nodes 28 -> 29 within
3% (the same estimates spent on more kicks instead: 27 and 29); round 0 costs about twice as long
(later rounds, the median decision, unchanged)."""
SCREEN_EXCHANGE_FIRST_3W = 8000
"""In three-way workflows, the estimates round 0's screened search spends after all those on more kicks from
the best mapping, exchanges between the CPU and the GPU among them (``hetsched.deciders.search``'s
``EXCHANGE_KICK_SHARE_3W``): 13,000 in all at 100 nodes, capped by ``SEARCH_ESTIMATES_FIRST_3W_NODES_SQUARED``.
The first 5,000 estimates are those round 0 made without them, so its estimate is never higher. Round 0 of a
100-tool three-way workflow ends in one of many basins a few % apart, which one depending on its kicks' random
stream; more kicks, and exchanges that shift work between the devices where the CPU is saturated, reach the
better ones more often. Round 0 alone (against the lowest of the variants tried), tuning seeds 103-112, five
families: within 3% 40 -> 43 of 50; seeds 113-115 (not tuned on) 14 -> 15 of 15 (the exchange kicks from the
first kick on with as many estimates: 46 of 50 and 13 of 15, and round 0 worse than before on 13 of 65). Round 0
costs about twice as long at 100 tools (later rounds, the median decision, unchanged); binary workflows are
unchanged. 8,000 instead of 5,000 (quality30, tuning seeds 160-163, five families, round 0 and its five later
chunks, against the lowest found): never higher (the same estimates first), lower on 10 of 18 100-tool workflows
(a layered one 2.6% -> 0), round 0 about 1.25x the process time."""
SCREEN_POLISH_FIRST_SHARE = 0.1
"""Round 0's screened search ends with a descent from its best mapping over every node's moves, unscreened
(``hetsched.deciders.search.local_search``'s ``polish_evaluations``), of at most this share of its estimates
more (1,300 at 100 nodes three-way, 1,000 binary; it usually needs 30-900, most of its neighbours estimated
already). The screened descents try only the moves of the nodes on or beside the critical chain; at convergence
a one-node move elsewhere can still lower the estimate (a node whose slack a kick's descent used up, a queued
node whose load now waits on the chain). On a 100-tool layered three-way workflow (unseen seed 82) 16 of the
31 one-node moves from round 0's best toward a mapping 2.9% lower each lowered it; the polish took round 0 and
its five continuation chunks 0.7% lower there (BENCHMARKS.md, issue 17, session 33). The estimates before are
the same, so round 0 never ends higher; the later rounds are unchanged."""
SEARCH_ESTIMATES_FIRST_3W_NODES_SQUARED = 130_000_000
"""The cap of round 0's estimates in three-way workflows, over n^2 (10,000 estimates at 100 nodes), where it is
above ``SEARCH_NODE_ESTIMATES_MAX``'s: from 260 nodes on round 0 spends what it did, so the decision stays
linear in n (round 0's first part keeps its cap)."""
SCREEN_MORE_KICKS_FIRST_BIN = 5000
"""In binary workflows, the estimates round 0's screened search spends after all those on more kicks from the
best mapping (its exchange kicks among them, as from the first kick on): the binary counterpart of
``SCREEN_EXCHANGE_FIRST_3W`` (10,000 in all at 100 nodes, 11,400 at 50, capped by
``SEARCH_ESTIMATES_FIRST_BIN_NODES_SQUARED``). The first estimates are those round 0 made without them, so its
estimate is never higher. Round 0 of a 100-tool binary workflow ended 1-4% above the best known where its
kicks had not yet reached the better basin; measured on tuning seeds 130-133, round 0 alone, against the lowest
of the variants tried, these kicks reached it more often than the same estimates spent on independent restarts
(from the race's other local optima, from its winner with another random stream, or from the best mapping
kicked four times over; BENCHMARKS.md, issue 17). 5,000 instead of 2,500 (quality30, tuning seeds 160-163, five
families, round 0 and its five later chunks, against the lowest found): never higher (the same estimates first),
a 100-tool random workflow 2.6% -> 0 (layered-s130, 3.8% above the best known, 3.2%). Round 0 costs about twice
as long at 100 tools as without the phase (later rounds, the median decision, unchanged)."""
SEARCH_ESTIMATES_FIRST_BIN_NODES_SQUARED = 100_000_000
"""The cap of round 0's estimates in binary workflows, over n^2 (10,000 estimates at 100 nodes), where it is above
``SEARCH_NODE_ESTIMATES_MAX``'s: from 200 nodes on round 0 spends what it did, so the decision stays linear in
n."""
SCREEN_EVALUATIONS_LATER = 40
"""Estimates of the screened search once something was measured, on the calibrated model (it starts from the
best measured mappings, the model's earlier optima). Both shrink past ``SEARCH_NODE_ESTIMATES_MAX``
node-estimates like the full search's (from 1,250 nodes on). 150 until round 0's search went on in the later
rounds (``SCREEN_CONTINUE_LATER``), which took most of the round's time: rounds 1-5 rarely beat round 0.
A close trade at a fixed time a round (BENCHMARKS.md, issue 17, seeds 101/102/121): within goal 56 -> 57 of
60 workflows, but on three 100-tool workflows the 150-estimate search's later gains (0.5-1.4%) are lost.
(Twice to five times 150 at 20-50 nodes, tried: the same workflows within 1% of the best known by round 5,
decisions 2-5x slower.)"""
SCREEN_CONTINUE_LATER = 56
"""Simulations each later round adds, from ``SCREEN_MIN_NODES`` nodes on, to round 0's search (anytime): its
iterated local search goes on from its best mapping with kicks of a seed of the round's own, on the cards'
model as round 0 searched it, every estimate it made kept (``hetsched.deciders.search.resume``; new estimates
and the descents' timings both count: kicks that land on known ground cost time too); what it found lowest
is a candidate of the round, re-scored on the calibrated model like the calibrated search's. The outcome of
round 0's search swings with its kicks' random stream (one 100-tool fork-join 1.003-1.065 of the best known
across six seeds), so kicks spread over the later rounds reach basins round 0 missed; with
``SCREEN_EVALUATIONS_LATER`` cut to 40 the round costs about what it did. 80 until session 31: half of a later round's
simulations at 100 tools (the calibrated search about a third, the fit and the cards the rest: 135-165 a round); with
56, 15-18% fewer, and the best of rounds 0-5 the same on all 52 tuning workflows tried (100 tools: seeds 160-163,
five families, both modes; 50 tools: 160-161, three; the one later-round gain among them, a round 5 0.2% below
round 0, kept), while 24 estimates for the calibrated search instead lost that gain (BENCHMARKS.md, issue 17)."""
CONTINUE_STRONGER_KICKS = 2
"""Per chunk of the continuation that found nothing lower than the chunk before (in a row, from the last one
back), each kick of the next chunk composes one kick more, up to this many more (``hetsched.deciders.search.resume``'s
``strength``): a chunk whose kicks of 2-4 nodes all fell back into the basin they left jumps farther. The same
simulations a round. Tuning seeds 160-163, five families, 100 tools, both modes (quality30), the best of round 0 and
five chunks: the same on 36 of 38 workflows, lower on one (a random binary workflow 2.6% -> 0.45% above the best
found), 0.03% higher on one; a weak gain, at no cost (BENCHMARKS.md, issue 17)."""
CAPPED_CONTINUE_LATER = 10_000
"""With a time budget (``RulesDecider``'s ``max_decision_ms``), the simulations each later round may add to round 0's
search instead of ``SCREEN_CONTINUE_LATER``: the chunk goes on until the decision's deadline, so a round 0 cut
short by the budget is made up for over the next rounds (about round 0's whole budget at 100 nodes)."""
CONTINUE_MAX_CHUNKS = 20
"""Rounds after which the continuation of round 0's search stops growing (a decider built afresh
replays the chain to the round's chunk)."""
CARD_TOLERANCE = 0.10
"""A node's measured mean latency must differ from the model's by more than this share before its
card is rescaled (the noise of a few runs stays below it)."""
CARD_FACTOR_RANGE = (0.1, 10.0)
"""Bounds of a card's rescaling factor."""
MIN_MEASURED_MS = 1e-3
"""A measured mean latency below this (0 ms: a tool faster than the clock) counts as this, ms."""
CALIBRATION_PASSES = 3
"""Passes of (rescale the contradicted cards, fit the interference): under GPU sharing a card
error shows only partly in one pass's latency ratio, so the rescaling compounds over passes."""
INTERFERENCE_STEP = 0.005
"""The fitted interference is rounded to this step (finer is below what noisy E2Es resolve), so
the model and its search repeat from round to round."""
FIT_BEST = 8
"""The interference is fitted to the E2Es of this many lowest measured mappings..."""
FIT_RECENT = 4
"""...and of this many most recently measured ones (keeps the fit's cost flat as runs grow)."""
FIT_SCREENED = (2, 1)
"""(lowest, most recent) measured mappings the fit reads from ``SCREEN_MIN_NODES`` nodes on: each costs
every interference the fit tries as a simulation of the whole workflow, so there the fit is the local
one (``fit_interference_local``: at most 2 + ``LOCAL_FIT_STEPS`` interferences a pass, usually 2-5, instead
of the grid's 26)."""
CANDIDATES = 8
"""How many of the model's lowest mappings are considered for the next measurement."""


@dataclass
class _Compiled:
    """What the decider derives from a scenario once: its model, the allowed codes, the starts."""

    estimator: Estimator
    allowed: list[tuple[int, ...]]
    rules: Codes
    rules_steps: list[str]
    starts: list[Codes]
    late: list[Codes]
    """Round 0's late starts from ``SCREEN_MIN_NODES`` nodes on (``hetsched.deciders.search.late_starts``)."""
    chain: list[SearchResult] = field(default_factory=list)
    """Round 0's search and its continuations, one per later round (``SCREEN_CONTINUE_LATER``)."""
    estimates: dict[tuple[float, ...], dict[tuple[float, Codes], float]] = field(default_factory=dict)
    """Per card rescaling (factors, () for the cards as given): (interference, mapping) -> estimate,
    kept for the calibration's repeated fits."""

    latencies: dict[tuple[float, ...], dict[tuple[float, Codes], list[float] | None]] = field(default_factory=dict)
    """Per card rescaling: (interference, mapping) -> the model's per-node latencies, kept across passes
    and rounds: a pass rescales the cards from the latencies at the interference the last pass fitted
    (from ``SCREEN_MIN_NODES`` nodes on that fit simulated them already), and each round's first pass
    reads the cards as given at the machine's interference for mostly the same measured mappings."""

    timings: dict[tuple[float, ...], dict[tuple[float, Codes], Timings | None]] = field(default_factory=dict)
    """Per card rescaling: (interference, mapping) -> the timings of the fit's simulations (the latencies' own),
    kept for the round: the search after the fit starts from the measured mappings, and its first descent
    steps read their timings at the fitted interference, which the fit simulated already."""

    def memo(self, factors: tuple[float, ...]) -> dict[tuple[float, Codes], float]:
        """The estimates kept for one card rescaling."""
        if factors not in self.estimates and len(self.estimates) > 16:
            self.estimates.clear()
        return self.estimates.setdefault(factors, {})

    def latency_memo(self, factors: tuple[float, ...]) -> dict[tuple[float, Codes], list[float] | None]:
        """The per-node latencies kept for one card rescaling."""
        if factors not in self.latencies and len(self.latencies) > 16:
            self.latencies.clear()
        return self.latencies.setdefault(factors, {})

    def timings_memo(self, factors: tuple[float, ...]) -> dict[tuple[float, Codes], Timings | None]:
        """The fit's timings kept for one card rescaling (this round's alone: a round starts them afresh)."""
        return self.timings.setdefault(factors, {})


class RulesDecider(Decider):
    """Deterministic rules from the cards, then a model calibrated on the measured evidence. Not an LLM.

    Args:
        margin: measured mappings within this relative margin of the lowest measured mean count
            as tied (noise); the model's estimate breaks the tie (hysteresis against noise).
        explore_gain: the least relative gain the model must expect from an unmeasured mapping
            over the best measured one before the decider spends a round measuring it.
        search_evaluations: estimates the search may make per decision (default: 200 + 30 x nodes).
        max_decision_ms: a time budget for each decision's searches (wall clock, ms; default None: only the
            budget of estimates bounds them, and a decision is the same on every machine). When it passes,
            the searches stop with the lowest mapping found so far and the decision's record says so
            (``stopped at its time budget``): a cap for a serving path (round 0 at 100 nodes makes about
            10,000 estimates, seconds on a slow core), never an extension. Decisions then depend on the
            machine's speed and load, so a resumed run may not replay them.
    """

    name = "rules"

    def __init__(
        self,
        margin: float = DEFAULT_MARGIN,
        explore_gain: float = DEFAULT_EXPLORE_GAIN,
        search_evaluations: int | None = None,
        max_decision_ms: float | None = None,
    ) -> None:
        if not 0 <= margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {margin}")
        if not 0 <= explore_gain < 1:
            raise ValueError(f"explore_gain must be in [0, 1), got {explore_gain}")
        if search_evaluations is not None and search_evaluations < 1:
            raise ValueError(f"search_evaluations must be >= 1, got {search_evaluations}")
        if max_decision_ms is not None and not (max_decision_ms > 0 and math.isfinite(max_decision_ms)):
            raise ValueError(f"max_decision_ms must be a positive number of milliseconds, got {max_decision_ms}")
        self.margin = margin
        self.explore_gain = explore_gain
        self.search_evaluations = search_evaluations
        self.max_decision_ms = max_decision_ms
        self._deadline: float | None = None
        """This decision's deadline (a ``time.perf_counter`` value) with ``max_decision_ms``, else None."""
        # caches only: every decision is a function of the scenario and the observations
        self._compiled: dict[int, tuple[Scenario, _Compiled]] = {}
        self._searches: dict[tuple[int, float, tuple[Codes, ...], tuple[float, ...]], SearchResult] = {}

    def decide(self, ctx: DecisionContext) -> Decision:
        t0 = time.perf_counter()
        self._deadline = None if self.max_decision_ms is None else t0 + self.max_decision_ms / 1000.0
        sc = ctx.scenario
        attempts: list[Attempt] = []
        steps: list[str] = []
        if ctx.cards_visible:
            mapping, rationale, steps = self._with_cards(ctx)
        else:
            ev = Evidence.read(sc, ctx.observations)
            best = ev.best
            if best is None:
                mapping, attempts = first_valid_uniform(sc, NOT_AN_LLM)
                rationale = "cold start, nothing measured: first uniform mapping that passes validation"
            else:
                mapping, rationale = self._adopt(ev, best, None)
                steps.append(rationale)
        problem = check_mapping(sc, mapping)
        reply = json.dumps({"mapping": mapping.to_dict(), "rationale": rationale})
        latency = (time.perf_counter() - t0) * 1000.0
        if attempts:
            attempts[-1] = Attempt(
                attempts[-1].attempt, attempts[-1].prompt, reply, "\n".join(steps), latency_ms=latency, error=problem
            )
        else:
            attempts.append(Attempt(1, NOT_AN_LLM, reply, "\n".join(steps), latency_ms=latency, error=problem))
        if problem:
            return Decision(None, "", tuple(attempts), error=f"rules produced an invalid mapping: {problem}")
        return Decision(mapping, rationale, tuple(attempts))

    # ------------------------------------------------------------------ with cards
    def _compile(self, sc: Scenario) -> _Compiled:
        hit = self._compiled.get(id(sc))
        if hit is not None and hit[0] is sc:
            return hit[1]
        est = Estimator(sc, sc.machine.gpu_kappa)
        allowed = [tuple(p.code for p in sc.allowed(n)) for n in sc.workflow.node_ids]
        rules_mapping, rules_steps = card_rules(sc)
        rules = tuple(rules_mapping[n].code for n in sc.workflow.node_ids)
        starts = [rules]
        for p in sc.placements:
            uniform = sc.uniform(p)  # once: a mapping per node made the compile quadratic
            u = tuple(uniform[n].code for n in sc.workflow.node_ids)
            if est.static_ok(u) and u not in starts:
                starts.append(u)
        if len(allowed) >= SCREEN_MIN_NODES and sc.mode is Mode.THREE_WAY:
            # the rules' CPU/GPU split with every GPU node queued: the other side of the residency
            # trade-off, from which the descent promotes to gpu_now only the tools worth their memory
            queue, now = Placement.GPU_QUEUE.code, Placement.GPU_NOW.code
            queued = tuple(queue if c == now and queue in a else c for c, a in zip(rules, allowed, strict=True))
            if est.static_ok(queued) and queued not in starts:
                starts.insert(1, queued)
        late = [s for s in late_starts(est, allowed, sc.mode is Mode.THREE_WAY) if s not in starts] \
            if len(allowed) >= SCREEN_MIN_NODES else []
        compiled = _Compiled(est, allowed, rules, rules_steps, starts, late)
        if len(self._compiled) > 8:
            self._compiled.clear()
        self._compiled[id(sc)] = (sc, compiled)
        return compiled

    def _cards_from_latencies(
        self,
        sc: Scenario,
        comp: _Compiled,
        ev: Evidence,
        kappa: float,
        fit_set: list[MeasuredCodes],
        factors: tuple[float, ...] = (),
    ) -> tuple[Estimator, tuple[float, ...], list[str]]:
        """The model with the cards the running averages contradict rescaled: a node's measured mean
        latency on the CPU (or on ``gpu_now``) over the model's for the same mappings (the model
        already rescaled by ``factors``), when the two differ by more than ``CARD_TOLERANCE``
        (beyond run-to-run noise), multiplies its card's cpu_ms (gpu_ms) once more. Returns the
        model, the factors (empty when none) and a note per rescaled card."""
        n = len(comp.allowed)
        cpu, gpu = (list(factors[:n]), list(factors[n:])) if factors else ([1.0] * n, [1.0] * n)
        base = comp.estimator.rescaled(cpu, gpu) if factors else comp.estimator
        est = base.with_interference(kappa)
        predicted: dict[tuple[int, int], list[float]] = {}
        kept = comp.latency_memo(factors)
        for m in fit_set:
            if (kappa, m.codes) not in kept:
                kept[(kappa, m.codes)] = est.latencies(m.codes)
            lat = kept[(kappa, m.codes)]
            if lat is None:
                continue
            for i, c in enumerate(m.codes):
                predicted.setdefault((i, c), []).append(lat[i])
        index = {node: i for i, node in enumerate(sc.workflow.node_ids)}
        for (node, placement), record in ev.latency.items():
            code = Placement(placement).code
            if node not in index or code == Placement.GPU_QUEUE.code:  # a queued latency is mostly load and wait
                continue
            i = index[node]
            got = predicted.get((i, code))
            if not got or sum(got) <= 0:
                continue
            ratio = max(record.mean_ms, MIN_MEASURED_MS) / (sum(got) / len(got))  # a 0 ms mean: log(0) is undefined
            if abs(math.log(ratio)) <= math.log1p(CARD_TOLERANCE):
                continue
            scale = cpu if code == Placement.CPU.code else gpu
            scale[i] = min(CARD_FACTOR_RANGE[1], max(CARD_FACTOR_RANGE[0], round(scale[i] * ratio, 2)))
        notes = [f"{node} {kind} x{f[i]:g}" for node, i in index.items()
                 for kind, f in (("cpu", cpu), ("gpu", gpu)) if f[i] != 1.0]
        if not notes:
            return comp.estimator, (), []
        return comp.estimator.rescaled(cpu, gpu), tuple(cpu + gpu), notes

    def _search(
        self,
        sc: Scenario,
        comp: _Compiled,
        kappa: float,
        starts: list[Codes],
        model: Estimator | None = None,
        factors: tuple[float, ...] = (),
        timed: dict[Codes, Timings | None] | None = None,
    ) -> SearchResult:
        """The search of one model (``model``, else the cards', at ``kappa``) from ``starts``; ``timed``: timings
        of some of its mappings on that very model, already simulated (the fit's), which its estimator keeps."""
        key = (id(sc), kappa, tuple(starts), factors)
        hit = self._searches.get(key)
        if hit is not None:
            return hit
        n = len(sc.workflow.node_ids)
        first = starts == comp.starts
        screen = n >= SCREEN_MIN_NODES
        race: int | None = None
        if screen:
            wanted = max(SCREEN_EVALUATIONS_FIRST, round((n / SCREEN_NODES_PER_EVALUATION_ROOT) ** 2)) if first \
                else SCREEN_EVALUATIONS_LATER
            cap = max(SEARCH_EVALUATIONS_BASE, SEARCH_NODE_ESTIMATES_MAX // n)
            budget = self.search_evaluations or min(wanted, cap)
            if first and not self.search_evaluations:
                # round 0: the race keeps half of ``wanted``, the kicks get the rest and ``SCREEN_KICKS_FIRST``
                race = budget // 2
                budget = min(wanted + SCREEN_KICKS_FIRST, cap)
        else:
            per_node = SEARCH_EVALUATIONS_PER_NODE if first else SEARCH_EVALUATIONS_PER_NODE_LATER
            budget = self.search_evaluations or min(SEARCH_EVALUATIONS_BASE + per_node * n,
                                                    max(SEARCH_EVALUATIONS_BASE, SEARCH_NODE_ESTIMATES_MAX // n))
        seed = zlib.crc32(f"{sc.name}:{kappa}:{starts[-1]}".encode())
        late: list[Codes] = []
        late_evaluations = exchange_evaluations = 0
        if race is not None:
            # round 0: the kicks end where they did, then descents from the late starts and more kicks
            late = comp.late
            late_evaluations = max(0, min(budget + SCREEN_LATE_FIRST, cap) - budget) if late else 0
            budget += late_evaluations
            # then more kicks (three-way: exchanges between the CPU and the GPU among them from there on)
            if sc.mode is Mode.THREE_WAY:
                cap = max(cap, SEARCH_ESTIMATES_FIRST_3W_NODES_SQUARED // n**2)
                exchange_evaluations = max(0, min(budget + SCREEN_EXCHANGE_FIRST_3W, cap) - budget)
            else:
                cap = max(cap, SEARCH_ESTIMATES_FIRST_BIN_NODES_SQUARED // n**2)
                exchange_evaluations = max(0, min(budget + SCREEN_MORE_KICKS_FIRST_BIN, cap) - budget)
        est = (model or comp.estimator).with_interference(kappa)
        if timed:
            est.timed.update(timed)
        res = local_search(est, starts, comp.allowed,
                           max_evaluations=budget, seed=seed, screen=screen, race_evaluations=race,
                           late_starts=late, late_evaluations=late_evaluations,
                           exchange_evaluations=exchange_evaluations,
                           polish_evaluations=round(SCREEN_POLISH_FIRST_SHARE * (budget + exchange_evaluations))
                           if race is not None else 0,
                           deadline=self._deadline)
        if len(self._searches) > 64:
            self._searches.clear()
        self._searches[key] = res
        return res

    def _continued(self, sc: Scenario, comp: _Compiled, chunk: int) -> SearchResult:
        """Round 0's search continued ``chunk`` times by ``SCREEN_CONTINUE_LATER`` estimates (at most
        ``CONTINUE_MAX_CHUNKS``): a function of the scenario and the chunk, kept for the next round."""
        chain = comp.chain
        if not chain:
            chain.append(self._search(sc, comp, sc.machine.gpu_kappa, comp.starts))
        chunk = min(chunk, CONTINUE_MAX_CHUNKS)
        while len(chain) <= chunk:
            seed = zlib.crc32(f"{sc.name}:continue:{len(chain)}".encode())
            # chunks in a row that found nothing lower: each makes the next one's kicks one kick stronger
            stale = 0
            while stale + 1 < len(chain) and chain[-1 - stale].e2e_ms >= chain[-2 - stale].e2e_ms:
                stale += 1
            strength = 1 + min(stale, CONTINUE_STRONGER_KICKS)
            more = SCREEN_CONTINUE_LATER if self._deadline is None else CAPPED_CONTINUE_LATER
            chain.append(resume(chain[-1], more, seed, deadline=self._deadline, strength=strength))
        return chain[chunk]

    def _with_cards(self, ctx: DecisionContext) -> tuple[Mapping, str, list[str]]:
        sc = ctx.scenario
        comp = self._compile(sc)
        ev = Evidence.read(sc, ctx.observations)
        best = ev.best
        prior = sc.machine.gpu_kappa
        if best is None:
            # no complete request yet (e.g. every request skipped a branch): the running averages of
            # the nodes that ran still rescale the cards they contradict, at the last round's mapping
            rescaled_model: Estimator | None = None
            scaled: tuple[float, ...] = ()
            if ev.latency and ev.last is not None and ev.last_feasible:
                rescaled_model, scaled, scaled_notes = self._cards_from_latencies(
                    sc, comp, ev, prior, [MeasuredCodes(ev.last, 0.0, 1, 0, 0)])
            res = self._search(sc, comp, prior, comp.starts, rescaled_model if scaled else None, scaled)
            steps = list(comp.rules_steps)
            if scaled:
                steps.append(f"cards rescaled from the running averages (no complete request yet): "
                             f"{'; '.join(scaled_notes)}")
            steps.append(
                f"model (cards, GPU shared by utilization, interference {prior:g} as the machine block declares "
                f"until measured): searched from the rules' mapping and the uniform ones, "
                f"{res.spent()}; lowest estimate "
                f"{res.e2e_ms:.1f} ms (the rules' mapping: {res.seen.get(comp.rules, math.inf):.1f} ms)"
            )
            rationale = (
                "rules from the cards (categories, ratio test, VRAM packing), then the lowest estimate of the "
                f"cards' contention model: {res.e2e_ms:.1f} ms"
                + (" (cards rescaled from the nodes' measured latencies)" if scaled else "")
            )
            return ev.mapping(res.best), rationale, steps
        # calibrate: the interference that best explains what was measured
        ranked = sorted(ev.measured.values(), key=lambda m: (m.mean_e2e_ms, m.listed))
        recent = sorted(ev.measured.values(), key=lambda m: (-m.last_round, m.listed))
        screened = len(comp.allowed) >= SCREEN_MIN_NODES
        lowest, latest = FIT_SCREENED if screened else (FIT_BEST, FIT_RECENT)
        fit_set = list({m.codes: m for m in ranked[:lowest] + recent[:latest]}.values())
        measured = [(m.codes, m.mean_e2e_ms) for m in fit_set]
        # calibrate in two passes: the running averages first rescale the cards a node's measured
        # latency contradicts (at the current interference), then the interference is fitted to the
        # measured E2Es on those cards; a card error is not mistaken for interference that way
        kappa = prior
        comp.timings.clear()  # the last round's fit's timings: this round's search reads this round's
        model: Estimator = comp.estimator
        factors: tuple[float, ...] = ()
        notes: list[str] = []
        rms = 0.0
        slopes: dict[Codes, float] = {}  # from 17 nodes on: each pass's fit starts from the last one's slopes
        for passes in range(CALIBRATION_PASSES):
            model, rescaled, notes = self._cards_from_latencies(sc, comp, ev, kappa, fit_set, factors)
            if passes and rescaled == factors:
                break  # the running averages agree with the model as fitted: done
            factors = rescaled
            if screened:
                kappa, rms = fit_interference_local(model, measured, kappa, prior=prior, step=INTERFERENCE_STEP,
                                                    memo=comp.memo(factors), slopes=slopes,
                                                    latencies=comp.latency_memo(factors),
                                                    timed=comp.timings_memo(factors))
            else:
                kappa, rms = fit_interference(model, measured, prior=prior, memo=comp.memo(factors))
            kappa = round(round(kappa / INTERFERENCE_STEP) * INTERFERENCE_STEP, 6)
        steps = [
            f"calibration: interference {kappa:g} per extra concurrent GPU task fits the {len(fit_set)} "
            f"measured mapping(s) within {100 * (math.exp(rms) - 1):.1f}% (rms of log ratios)"
            + (f"; cards rescaled from the running averages: {'; '.join(notes)}" if notes else ""),
        ]
        top = [m.codes for m in ranked[:3]]
        # from 17 nodes on, round 0 raced descents from the rules' and the uniform mappings; later rounds
        # descend from what was measured best (the model's earlier optima), the budget theirs alone
        starts = top if screened else list(dict.fromkeys(comp.starts + top))
        fit_timed = comp.timings_memo(factors)
        res = self._search(sc, comp, kappa, starts, model, factors,
                           {c: fit_timed[(kappa, c)] for c in starts if (kappa, c) in fit_timed})
        est = model.with_interference(kappa)

        fitted = comp.memo(factors)  # the last fit estimated the measured mappings it read at this kappa

        def estimate(codes: Codes) -> float:
            got = res.seen.get(codes)
            if got is None:
                got = fitted.get((kappa, codes))
            return est.e2e(codes) if got is None else got

        steps.append(f"model search: {res.spent()}; lowest {res.e2e_ms:.1f} ms")
        best_est = estimate(best.codes)
        fresh = [(c, e) for c, e in res.ranked(CANDIDATES) if c not in ev.measured and c not in ev.infeasible]
        if screened and SCREEN_CONTINUE_LATER > 0:
            # anytime: round 0's search goes on a chunk more each round; its lowest, re-scored on this model
            chunk = max(1, ctx.round)
            cont = self._continued(sc, comp, chunk)
            size = f"{SCREEN_CONTINUE_LATER}" if self._deadline is None else f"up to {CAPPED_CONTINUE_LATER}"
            steps.append(f"round 0's search continued ({chunk} chunk(s) of {size} estimates): "
                         f"{cont.spent()}; lowest {cont.e2e_ms:.1f} ms on the cards' model")
            known = cont.best in ev.measured or cont.best in ev.infeasible
            if not known and all(c != cont.best for c, _ in fresh):
                fresh.append((cont.best, estimate(cont.best)))
                fresh.sort(key=lambda ce: (ce[1], ce[0]))
        for codes, e in fresh:
            if e < best_est * (1 - self.explore_gain):
                rationale = (
                    f"measure the model's lowest unmeasured mapping: estimated {e:.1f} ms vs {best_est:.1f} ms "
                    f"for the best measured ({best.mean_e2e_ms:.1f} ms measured)"
                )
                steps.append(rationale)
                return ev.mapping(codes), rationale, steps
        mapping, rationale = self._adopt(ev, best, estimate)
        steps.append(f"no unmeasured mapping is estimated {100 * self.explore_gain:g}% below the best measured; "
                     + rationale)
        return mapping, rationale, steps

    # ------------------------------------------------------------------ adopt the evidence
    def _adopt(
        self, ev: Evidence, best: MeasuredCodes, estimate: Callable[[Codes], float] | None
    ) -> tuple[Mapping, str]:
        """The measured mapping to run: among those within ``margin`` of the lowest measured mean
        (tied within noise), the lowest model estimate when there is a model, else the last
        round's mapping if it is among them, else the lowest measured."""
        limit = best.mean_e2e_ms * (1 + self.margin)
        near = [m for m in ev.measured.values() if m.mean_e2e_ms <= limit]
        if estimate is not None:
            pick = min(near, key=lambda m: (round(estimate(m.codes), 6), m.mean_e2e_ms, m.listed))
            why = "lowest model estimate among them" if pick.codes != best.codes else "also the lowest model estimate"
            return ev.mapping(pick.codes), (
                f"adopt {pick.mean_e2e_ms:.1f} ms measured over {pick.runs} run(s): {len(near)} measured mapping(s) "
                f"within {self.margin:.0%} of the lowest ({best.mean_e2e_ms:.1f} ms); {why}"
            )
        current = ev.measured.get(ev.last) if ev.last is not None else None
        if current is not None and current.mean_e2e_ms <= limit:
            return ev.mapping(current.codes), (
                f"keep: measured {current.mean_e2e_ms:.1f} ms is within {self.margin:.0%} of the lowest "
                f"measured {best.mean_e2e_ms:.1f} ms"
            )
        was = f" (last round's mean {current.mean_e2e_ms:.1f} ms)" if current is not None else ""
        return ev.mapping(best.codes), (
            f"adopt the lowest measured mean E2E {best.mean_e2e_ms:.1f} ms over {best.runs} run(s){was}"
        )
