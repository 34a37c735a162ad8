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
   stretched by CPU oversubscription (threads of v and of its parallel CPU nodes over the
   cores), is below B + v's GPU time: its CPU run hides behind the contended GPU bottleneck;
5. VRAM packing, when the ``gpu_now`` tools do not fit the budget together: each tool's value
   is the time ``gpu_now`` saves over its best alternative (the CPU, or in three-way scenarios
   ``gpu_queue`` = gpu + load when that fits the budget alone); tools are kept on ``gpu_now``
   by value per MB, largest first, while they fit (or the single most valuable tool, if that is
   worth more: the usual knapsack guard); each node left out goes to ``gpu_queue`` when that is
   allowed, faster than its CPU time and cannot deadlock (no ``gpu_now`` tool downstream of it
   holds the memory it needs), else to the CPU.

Later rounds adopt the measured evidence (rounds and the monitor's probes): keep the last
mapping while its mean measured E2E is within ``margin`` of the lowest, else take the lowest.

Cold start (no cards): round 0 is the first of all-``gpu_now``, all-``gpu_queue`` (three-way
only), all-CPU that passes validation, each rejection recorded as an attempt; later rounds
adopt the evidence as above.

None of these rules uses the simulator or a contention constant. Imports only
``hetsched.model`` and networkx (through the prompt helpers).
"""

from __future__ import annotations

import json
import time

from hetsched.llm.base import Decider, Decision, DecisionContext
from hetsched.llm.evidence import best_measured, last_round, measured
from hetsched.llm.prompt import parallel_nodes
from hetsched.llm.validate import check_mapping
from hetsched.model import Attempt, Mapping, Mode, Placement, Scenario
from hetsched.model.card import GPU_PREFERRED_MIN

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

    # ratio test (Factor A) for ambiguous tools, lowest speedup first
    par = parallel_nodes(scenario)
    cores = scenario.machine.cpu_cores
    ambiguous = [
        n for n in ids if place[n] is Placement.GPU_NOW and (scenario.card_of(n).speedup or 0) <= GPU_PREFERRED_MIN
    ]
    ambiguous.sort(key=lambda n: (scenario.card_of(n).speedup or 0.0, topo[n]))
    for v in ambiguous:
        c = scenario.card_of(v)
        gpu_v = c.gpu_ms or 0.0
        others = [u for u in par[v] if place[u].on_gpu]
        if not others:
            steps.append(f"{v}: ratio test: no GPU node runs in parallel, stays gpu_now")
            continue
        bottleneck = sum(scenario.card_of(u).gpu_ms or 0.0 for u in others)
        threads = c.cpu_threads + sum(scenario.card_of(u).cpu_threads for u in par[v] if place[u] is Placement.CPU)
        cpu_eff = c.cpu_ms * max(1.0, threads / cores)
        if cpu_eff < bottleneck + gpu_v:
            place[v] = Placement.CPU
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
                options.append((card.gpu_ms or 0.0) + card.load_ms)
            return min(options)

        value = {
            t: sum(alternative_ms(n) - (scenario.card_of(n).gpu_ms or 0.0)
                   for n in ids if wf.tool_of[n] == t and place[n] is Placement.GPU_NOW)
            for t in now_tools
        }
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
        for n in ids:
            t = wf.tool_of[n]
            if place[n] is not Placement.GPU_NOW or t in keep:
                continue
            card = scenario.card_of(n)
            queue_ms = (card.gpu_ms or 0.0) + card.load_ms
            if queue_ok and card.vram_mb <= budget and queue_ms < card.cpu_ms:
                place[n] = Placement.GPU_QUEUE
                blocked = scenario.queue_deadlock(Mapping((m, place[m]) for m in wf.node_ids))
                if not blocked:
                    steps.append(
                        f"{n}: left out of gpu_now; queue {queue_ms:.1f} ms < cpu {card.cpu_ms:g} ms -> gpu_queue"
                    )
                    continue
                steps.append(f"{n}: queueing would deadlock ({blocked})")
            place[n] = Placement.CPU
            steps.append(f"{n}: left out of gpu_now -> cpu")
    return Mapping((n, place[n]) for n in wf.node_ids), steps


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


class RulesDecider(Decider):
    """Deterministic rules from the cards, then the measured evidence. Not an LLM.

    Args:
        margin: keep the current mapping while its mean measured E2E is within this relative
            margin of the lowest measured mean (hysteresis against noise).
    """

    name = "rules"

    def __init__(self, margin: float = DEFAULT_MARGIN) -> None:
        if not 0 <= margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {margin}")
        self.margin = margin

    def decide(self, ctx: DecisionContext) -> Decision:
        t0 = time.perf_counter()
        sc = ctx.scenario
        best = best_measured(ctx.observations)
        attempts: list[Attempt] = []
        steps: list[str] = []
        if best is None and ctx.cards_visible:
            mapping, steps = card_rules(sc)
            rationale = "rules from the cards (categories, ratio test, VRAM packing)"
        elif best is None:
            mapping, attempts = first_valid_uniform(sc, NOT_AN_LLM)
            rationale = "cold start, nothing measured: first uniform mapping that passes validation"
        else:
            last = last_round(ctx.observations)
            current = next((m for m in measured(ctx.observations) if m.mapping == last), None)
            if current is not None and current.mean_e2e_ms <= best.mean_e2e_ms * (1 + self.margin):
                mapping = current.mapping
                rationale = (
                    f"keep: measured {current.mean_e2e_ms:.1f} ms is within {self.margin:.0%} of the lowest "
                    f"measured {best.mean_e2e_ms:.1f} ms"
                )
            else:
                mapping = best.mapping
                was = f" (last round's mean {current.mean_e2e_ms:.1f} ms)" if current is not None else ""
                rationale = f"adopt the lowest measured mean E2E {best.mean_e2e_ms:.1f} ms over {best.runs} run(s){was}"
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
