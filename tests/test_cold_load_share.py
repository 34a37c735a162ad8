"""Cold loads everywhere the model charges a queued load (docs/simulator.md, "Cold memory").

With the machine's ``cold_load_share`` s and a card's ``load_cold_ms`` above its ``load_ms``, the
contention kernel charges a ``gpu_queue`` load its expectation; the code that reasons about a
queued load outside the simulation (the ``rules`` decider's VRAM packing, ``greedy-mem``'s queue
speedup, the monitor's isolated figure) must charge the same, or it queues a node the model then
finds slower than the CPU. The kernel's figures here come from ``simulate`` itself (a lone node),
never from the formula, so these tests check agreement in behaviour.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow

from hetsched.deciders.rules import card_rules
from hetsched.model import Mode, Placement, Proposal, RoundRecord, Scenario, ToolCard
from hetsched.model.contention import queue_load_ms, queue_speedup, simulate
from hetsched.model.mapping import CPU_CODE, QUEUE_CODE, Mapping
from hetsched.monitor import Monitor
from hetsched.policies.greedy_mem import greedy_placements
from hetsched.sim import Simulator

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BUDGET_MB = 100.0


def alone(card: ToolCard, code: int, share: float, warm_reuse_ms: float = 0.0) -> float:
    """The kernel's E2E of one node of ``card`` alone at ``code`` on a machine with ``share``."""
    sc = make_scenario(make_workflow([("q", card.name)]), [card], mode=Mode.THREE_WAY, cpu_cores=1,
                       vram_budget_mb=BUDGET_MB, cold_load_share=share, warm_reuse_ms=warm_reuse_ms)
    return simulate(sc.compiled, (code,)).e2e_ms


def packing_case(card: ToolCard, share: float) -> Scenario:
    """Node ``q`` of ``card`` (60 MB) beside node ``a`` of a tool worth far more per MB (80 MB, its
    own alternatives slow): both gpu_preferred, together over the 100 MB budget. The packing keeps
    ``a`` resident and leaves ``q`` out, to the queue or to the CPU."""
    big = make_card("big", cpu_ms=50_000.0, gpu_ms=10.0, load_ms=40_000.0, vram_mb=80.0)
    return make_scenario(make_workflow([("a", "big"), ("q", card.name)]), [big, card], mode=Mode.THREE_WAY,
                         cpu_cores=4, vram_budget_mb=BUDGET_MB, cold_load_share=share)


def queued_card(gpu_ms: float, cpu_ms: float, load_ms: float, cold_factor: float) -> ToolCard:
    return make_card("t", cpu_ms=cpu_ms, gpu_ms=gpu_ms, load_ms=load_ms, load_cold_ms=load_ms * cold_factor,
                     vram_mb=60.0)


cards = st.builds(
    lambda g, speed, load, cold: queued_card(g, g * speed, load, cold),
    st.floats(1.0, 50.0), st.floats(5.5, 60.0), st.floats(1.0, 500.0), st.floats(1.5, 10.0),
)
shares = st.floats(0.05, 1.0)


@SETTINGS
@given(cards, shares)
@example(queued_card(10.0, 200.0, 100.0, 5.0), 0.5)  # 110 ms warm < 200 ms cpu < 310 ms expected
def test_the_rules_packing_queues_exactly_when_the_kernel_finds_the_queue_faster(card: ToolCard,
                                                                                 share: float) -> None:
    queue_ms, cpu_ms = alone(card, QUEUE_CODE, share), alone(card, CPU_CODE, share)
    assume(abs(queue_ms - cpu_ms) > 1e-6 * cpu_ms)
    mapping, steps = card_rules(packing_case(card, share))
    assert mapping["a"] is Placement.GPU_NOW, steps
    want = Placement.GPU_QUEUE if queue_ms < cpu_ms else Placement.CPU
    assert mapping["q"] is want, (queue_ms, cpu_ms, steps)


@SETTINGS
@given(cards, shares)
@example(queued_card(10.0, 200.0, 100.0, 5.0), 0.5)
def test_greedy_mem_queues_exactly_when_the_kernel_finds_the_queue_faster(card: ToolCard, share: float) -> None:
    queue_ms, cpu_ms = alone(card, QUEUE_CODE, share), alone(card, CPU_CODE, share)
    assume(abs(queue_ms - cpu_ms) > 1e-6 * cpu_ms)
    place, notes = greedy_placements(packing_case(card, share))
    assert place["big"] is Placement.GPU_NOW, notes
    assert place["t"] is (Placement.GPU_QUEUE if queue_ms < cpu_ms else Placement.CPU), (queue_ms, cpu_ms, notes)


@SETTINGS
@given(cards, shares, st.sampled_from([0.0, 2000.0]))
def test_the_monitors_isolated_figure_is_what_the_noise_free_simulator_measures(card: ToolCard, share: float,
                                                                               warm_reuse_ms: float) -> None:
    """A lone queued node, noise off: its measured latency (admission to end) is the card figure."""
    sc = make_scenario(make_workflow([("q", "t")]), [card], mode=Mode.THREE_WAY, cpu_cores=1,
                       vram_budget_mb=BUDGET_MB, cold_load_share=share, warm_reuse_ms=warm_reuse_ms)
    mapping = Mapping({"q": Placement.GPU_QUEUE})
    trace = Simulator(sc, noise=False).run(mapping, seed=1)
    obs = Monitor(sc).observe([RoundRecord(0, Proposal(mapping), trace)])
    (rec,) = [r for r in obs.records if r.kind == "latency"]
    assert rec.isolated_ms == pytest.approx(rec.mean_ms, rel=1e-9)
    assert rec.mean_ms == pytest.approx(alone(card, QUEUE_CODE, share, warm_reuse_ms), rel=1e-12)


@SETTINGS
@given(cards, shares)
@example(queued_card(10.0, 200.0, 100.0, 5.0), 0.5)
def test_the_queue_speedup_has_one_home_the_machines(card: ToolCard, share: float) -> None:
    """A card alone cannot give the queue speedup (its load depends on the machine's cold share): the
    figure is ``contention.queue_speedup(card, machine)``, that of the kernel's lone queued node, and
    the prompt and ``greedy-mem`` quote that one."""
    from hetsched.llm.prompt import card_lines

    assert not hasattr(card, "queue_speedup")  # the warm-load-only property misled under a cold share
    sc = packing_case(card, share)
    got = queue_speedup(card, sc.machine)
    assert got == pytest.approx(card.cpu_ms / alone(card, QUEUE_CODE, share), rel=1e-9)
    assert queue_speedup(make_card("c", gpu_ms=None), sc.machine) is None
    (row,) = [ln for ln in card_lines(sc) if ln.startswith('| "t" |')]
    assert f"| {got:.2f}x |" in row, row
    _, notes = greedy_placements(sc)
    assert any(f"queue speedup {got:.2f}" in n for n in notes if n.startswith("t:")), notes


def test_the_share_decides_whether_a_node_left_out_of_gpu_now_queues() -> None:
    """Load 100 ms back to back, 500 ms cold, GPU 10 ms, CPU 200 ms: with no cold loads the queue
    (110 ms) beats the CPU; with half the loads cold (310 ms expected) it does not."""
    card = queued_card(10.0, 200.0, 100.0, 5.0)
    warm, steps_warm = card_rules(packing_case(card, 0.0))
    cold, steps_cold = card_rules(packing_case(card, 0.5))
    assert warm["q"] is Placement.GPU_QUEUE, steps_warm
    assert cold["q"] is Placement.CPU, steps_cold
    assert "q: left out of gpu_now; queue 110.0 ms < cpu 200 ms -> gpu_queue" in steps_warm
    assert "q: left out of gpu_now -> cpu" in steps_cold


def test_the_share_decides_which_tool_stays_resident() -> None:
    """Two tools that cannot both stay resident (60 MB each, 100 MB budget). ``x`` loads fast cold
    or warm; ``y``'s load goes 20 ms -> 2,000 ms cold. Warm, ``y`` loses little on the queue and
    ``x`` (worth more per MB) stays; with every load cold, queueing ``y`` costs more than keeping it."""
    x = make_card("x", cpu_ms=2_000.0, gpu_ms=10.0, load_ms=300.0, vram_mb=60.0)
    y = make_card("y", cpu_ms=5_000.0, gpu_ms=10.0, load_ms=20.0, load_cold_ms=2_000.0, vram_mb=60.0)

    def scenario(share: float) -> Scenario:
        return make_scenario(make_workflow([("X", "x"), ("Y", "y")]), [x, y], mode=Mode.THREE_WAY,
                             cpu_cores=4, vram_budget_mb=BUDGET_MB, cold_load_share=share)

    warm, steps_warm = card_rules(scenario(0.0))
    cold, steps_cold = card_rules(scenario(1.0))
    assert (warm["X"], warm["Y"]) == (Placement.GPU_NOW, Placement.GPU_QUEUE), steps_warm
    assert (cold["X"], cold["Y"]) == (Placement.GPU_QUEUE, Placement.GPU_NOW), steps_cold


@given(st.floats(0.0, 1_000.0), st.one_of(st.none(), st.floats(0.0, 5_000.0)), st.floats(0.0, 1.0))
def test_without_cold_loads_the_charged_load_is_the_cards(load_ms: float, cold: float | None, share: float) -> None:
    """Share 0 or no measured cold load: the card's ``load_ms``, bit for bit (the tables hold)."""
    card = make_card("t", load_ms=load_ms, load_cold_ms=cold)
    machine = make_scenario(make_workflow([("q", "t")]), [card], cold_load_share=share).machine
    got = queue_load_ms(card, machine)
    if share == 0.0 or cold is None or cold <= load_ms:
        assert got == load_ms
    else:
        assert load_ms <= got <= cold


def test_a_queued_nodes_time_limit_leaves_room_for_its_cold_load() -> None:
    """Real executors stop a node past ``timeout_factor`` x its card latency: a queued node's load counts
    at its slower figure, the cold one when the card has it (a cold load is no fault to kill a worker for)."""
    from hetsched.exec.toolset import node_timeout_s

    card = queued_card(10.0, 400.0, 100.0, 30.0)  # a cold load 30x the warm one
    limit_s = node_timeout_s(card, Placement.GPU_QUEUE, None, 10.0, 0.0)
    assert limit_s * 1000.0 >= 10.0 * (card.gpu_ms + card.load_cold_ms) - 1e-9
    warm_only = card.model_copy(update={"load_cold_ms": None})
    assert node_timeout_s(warm_only, Placement.GPU_QUEUE, None, 10.0, 0.0) == pytest.approx(10.0 * 110.0 / 1000.0)
    assert node_timeout_s(card, Placement.GPU_NOW, None, 10.0, 0.0) == pytest.approx(10.0 * 10.0 / 1000.0)
