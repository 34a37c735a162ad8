"""The rules decider's round-0 rules (``card_rules``) and the concurrency they read (``parallel_nodes``).

Both were rewritten to stay near-linear on 10,000-node workflows (bit masks instead of a graph walk
per node, one incremental deadlock check instead of a whole-mapping check per queued node). The
references below are the straightforward algorithms they replace, written with networkx; on
random small workflows the results must be the same, mapping and every step's words.
"""

from __future__ import annotations

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import make_workflow
from tests.search_scenarios import FAMILIES, random_search_scenario

from hetsched.deciders.parallel import parallel_nodes
from hetsched.deciders.rules import card_rules
from hetsched.model import Mapping, Mode, Placement, Scenario, ToolCard
from hetsched.model.card import GPU_PREFERRED_MIN
from hetsched.model.contention import simulate
from hetsched.model.mapping import QUEUE_CODE

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_parallel(scenario: Scenario) -> dict[str, tuple[str, ...]]:
    g = scenario.workflow.graph
    ids = scenario.workflow.node_ids
    return {n: tuple(m for m in ids if m not in nx.ancestors(g, n) | nx.descendants(g, n) | {n}) for n in ids}


def kernel_load_ms(scenario: Scenario, card: ToolCard) -> float:
    """The load the contention kernel charges a lone ``gpu_queue`` node of ``card`` on the scenario's machine."""
    alone = scenario.model_copy(update={"workflow": make_workflow([("q", card.name)]), "cards": {card.name: card}, "workload": None})
    return simulate(alone.compiled, (QUEUE_CODE,), timings=True).load[0]


def reference_card_rules(scenario: Scenario) -> tuple[Mapping, list[str]]:
    """The round-0 rules as first written: parallel sets per node, a whole-mapping deadlock check per node;
    a queued node's load is the one the kernel charges (cold loads included)."""
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
    par = reference_parallel(scenario)
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
        busy = c.cores_busy + sum(scenario.card_of(u).cores_busy for u in par[v] if place[u] is Placement.CPU)
        over = max(1.0, busy / cores)  # a v that waits part of the time (demand < 1) slows only on its busy part
        cpu_eff = c.cpu_ms * (over if c.cores_busy >= 1.0 else 1.0 + c.cores_busy * (over - 1.0))
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
    budget = scenario.machine.vram_budget_mb
    now_tools = list(dict.fromkeys(wf.tool_of[n] for n in ids if place[n] is Placement.GPU_NOW))
    need = sum(scenario.cards[t].vram_mb for t in now_tools)
    if need > budget:
        queue_ok = scenario.mode is Mode.THREE_WAY

        def alternative_ms(n: str) -> float:
            card = scenario.card_of(n)
            options = [card.cpu_ms]
            if queue_ok and card.vram_mb <= budget:
                options.append((card.gpu_ms or 0.0) + kernel_load_ms(scenario, card))
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
            queue_ms = (card.gpu_ms or 0.0) + kernel_load_ms(scenario, card)
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


scenarios = st.builds(
    random_search_scenario,
    n=st.integers(1, 16),
    seed=st.integers(0, 10_000),
    family=st.sampled_from(FAMILIES),
    mode=st.sampled_from([Mode.BINARY, Mode.THREE_WAY]),
)


@SETTINGS
@given(scenarios)
def test_parallel_nodes_are_neither_ancestors_nor_descendants(sc: Scenario) -> None:
    assert parallel_nodes(sc) == reference_parallel(sc)


@SETTINGS
@given(scenarios)
def test_card_rules_equal_the_straightforward_algorithm(sc: Scenario) -> None:
    assert card_rules(sc) == reference_card_rules(sc)


def with_cold_loads(sc: Scenario, factors: list[float], share: float) -> Scenario:
    """``sc`` with each tool's cold load at a factor (cycled) of its ``load_ms`` and ``share`` of the loads cold."""
    cards = {t: c.model_copy(update={"load_cold_ms": c.load_ms * factors[i % len(factors)]})
             for i, (t, c) in enumerate(sorted(sc.cards.items()))}
    return sc.model_copy(update={"cards": cards, "machine": sc.machine.model_copy(update={"cold_load_share": share})})


@SETTINGS
@given(scenarios, st.lists(st.sampled_from([0.5, 1.0, 2.0, 8.0, 40.0]), min_size=1, max_size=4),
       st.sampled_from([0.1, 0.5, 1.0]))
def test_card_rules_charge_cold_loads_as_the_kernel_does(sc: Scenario, factors: list[float], share: float) -> None:
    sc = with_cold_loads(sc, factors, share)
    assert card_rules(sc) == reference_card_rules(sc)


def with_measured_demands(sc: Scenario, demands: list[float]) -> Scenario:
    """``sc`` with each tool's ``cpu_demand`` set (cycled from ``demands``): some wait, some are multi-threaded."""
    cards = {t: c.model_copy(update={"cpu_demand": demands[i % len(demands)]})
             for i, (t, c) in enumerate(sorted(sc.cards.items()))}
    return sc.model_copy(update={"cards": cards})


@SETTINGS
@given(scenarios, st.lists(st.sampled_from([0.0, 0.01, 0.3, 0.97, 1.0, 1.5, 3.0]), min_size=1, max_size=5))
def test_card_rules_charge_the_measured_cpu_demand_as_the_kernel_does(sc: Scenario, demands: list[float]) -> None:
    sc = with_measured_demands(sc, demands)
    assert card_rules(sc) == reference_card_rules(sc)


def test_an_io_bound_tool_beside_an_ambiguous_one_does_not_count_as_a_busy_core() -> None:
    """One core; v (30 ms CPU, 10 ms GPU) runs beside a GPU node of 25 ms and a tool that waits 80 ms
    on I/O (cpu_demand 0.01). Charged a whole core (cpu_threads), the I/O tool doubles v's CPU time
    (60 ms >= 35 ms contended GPU: v stays on the GPU); charged what it measures, v's CPU run hides
    behind the GPU bottleneck (30.3 ms < 35 ms) and moves to the CPU."""
    from tests.factories import make_card, make_scenario, make_workflow

    def scenario(io_demand: float | None) -> Scenario:
        cards = [make_card("v", 30.0, 10.0), make_card("w", 1000.0, 25.0),
                 make_card("io", 80.0, None, cpu_demand=io_demand)]
        return make_scenario(make_workflow([("V", "v"), ("W", "w"), ("IO", "io")]), cards, cpu_cores=1)

    assert card_rules(scenario(None))[0]["V"] is Placement.GPU_NOW
    mapping, steps = card_rules(scenario(0.01))
    assert mapping["V"] is Placement.CPU, steps
    assert any("V: ratio test: CPU 30.3 ms < contended GPU 35.0 ms" in s for s in steps), steps


def test_the_references_exercise_every_rule() -> None:
    """The property tests above see the ratio test move nodes and the packing queue and refuse nodes."""
    words: set[str] = set()
    for seed in range(300):
        for mode in (Mode.BINARY, Mode.THREE_WAY):
            _, steps = reference_card_rules(random_search_scenario(10, seed, mode=mode))
            for key in ("-> cpu\n", "(its", "VRAM packing", "-> gpu_queue", "queueing would deadlock"):
                if any(key.strip() in s for s in steps):
                    words.add(key.strip())
    assert words == {"-> cpu", "(its", "VRAM packing", "-> gpu_queue", "queueing would deadlock"}


def test_a_node_measured_at_0_ms_rescales_its_card_without_failing() -> None:
    # a tool faster than the clock measures 0 ms (start == end); log(0) must not end the decision
    from tests.factories import make_card, make_scenario, make_workflow

    from hetsched.deciders.base import DecisionContext
    from hetsched.deciders.rules import RulesDecider
    from hetsched.model import NodeTrace, Proposal, RoundRecord, Trace
    from hetsched.monitor import Monitor

    sc = make_scenario(make_workflow([("A", "ta"), ("B", "tb")], [("A", "B")]),
                       [make_card("ta", 40.0, 4.0), make_card("tb", 300.0, 30.0)], mode=Mode.THREE_WAY)
    mapping = Mapping({"A": "cpu", "B": "gpu_now"})
    nodes = {"A": NodeTrace("A", "ta", Placement.CPU, 0.0, 0.0, 0.0, 0.0, 0.0),
             "B": NodeTrace("B", "tb", Placement.GPU_NOW, 0.0, 0.0, 0.0, 30.0, 0.0)}
    history = [RoundRecord(0, Proposal(mapping), Trace(mapping, True, 30.0, nodes))]
    obs = Monitor(sc).observe(history)
    assert any(r.kind == "latency" and r.node == "A" and r.mean_ms == 0.0 for r in obs.records)
    decision = RulesDecider().decide(DecisionContext(sc, round=1, observations=tuple(obs.records)))
    assert decision.mapping is not None, decision.error
    assert decision.mapping["A"] is Placement.CPU  # 0 ms measured on the CPU: it stays there
