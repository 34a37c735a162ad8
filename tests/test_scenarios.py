"""The evaluation suite S1-S13: each bundled scenario shows the property it states, on the noise-free simulator.

A change to the cards, the contention model or the oracle that breaks a scenario's story fails
here, with the figure that moved. Properties mirror PAPER.md (S1-S4 precedence-constrained,
S5-S10 fan-out with GPU contention, S11-S13 VRAM-constrained three-way); each file's comment
and ``shows:`` field say which one it exists to show.
"""

from __future__ import annotations

import math

import pytest

from hetsched.model import InfeasibleKind, Mapping, Mode, Placement, Scenario
from hetsched.model.card import Category
from hetsched.model.files import bundled_library_path, bundled_scenarios, load_scenario, load_tool_library, resolve_card
from hetsched.policies import PolicyContext, make_policy, policy_names
from hetsched.search.oracle import solve
from hetsched.sim import Simulator

C, G, Q = Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE
SUITE = tuple(f"S{i}" for i in range(1, 14))
PRECEDENCE = SUITE[:4]
FAN_OUT = SUITE[4:10]
THREE_WAY = SUITE[10:]
SEPARATION = 1.04
"""Every suite oracle beats the runner-up by at least 4% (noise is cv 3% per node), so 'matched
the oracle' in the tables is decided by the mapping, not by a lucky draw."""


def sc(name: str) -> Scenario:
    return load_scenario(name)


def e2e(s: Scenario, m: Mapping) -> float | None:
    return Simulator(s, noise=False).e2e(m)


def greedy_mapping(s: Scenario) -> Mapping:
    assert "greedy-mem" in policy_names(), "the memory-aware greedy baseline must be registered"
    policy = make_policy("greedy-mem")
    policy.reset(PolicyContext(scenario=s))
    return policy.propose([]).mapping


def moved_to_cpu(s: Scenario, m: Mapping) -> list[str]:
    """GPU-capable nodes a mapping puts on the CPU."""
    return [n for n in s.workflow.node_ids if s.card_of(n).has_gpu and m[n] is C]


def single_moves(s: Scenario, m: Mapping) -> list[Mapping]:
    return [m.moved(n, p) for n in s.workflow.node_ids for p in s.allowed(n) if p is not m[n]]


def run_ms(s: Scenario, m: Mapping, node: str) -> float:
    nt = Simulator(s, noise=False).run(m).nodes[node]
    return nt.end_ms - nt.start_ms


# ---------------------------------------------------------------------------- the suite as a whole
def test_suite_is_bundled_with_four_library_tools_each() -> None:
    library = load_tool_library(bundled_library_path())
    bundled = bundled_scenarios()
    for name in SUITE:
        assert name in bundled, f"{name}.yaml missing from the bundled scenarios"
        s = sc(name)
        text = bundled[name].read_text(encoding="utf-8")
        assert s.name == name and s.shows, f"{name}: needs its name and a 'shows:' line"
        assert "# Property:" in text, f"{name}: the file must say in a comment which property it shows"
        assert len(s.workflow.nodes) == 4 and len(s.workflow.tools) == 4
        for tool, card in s.cards.items():
            assert resolve_card(tool, library) == card, f"{name}: {tool} is not the library's card"


@pytest.mark.parametrize("name", SUITE)
def test_modes_and_shapes_follow_the_paper(name: str) -> None:
    s = sc(name)
    assert s.mode is (Mode.THREE_WAY if name in THREE_WAY else Mode.BINARY)
    if name in PRECEDENCE:
        assert s.workflow.edges, f"{name} is precedence-constrained"
    if name in FAN_OUT:  # pure fan-out: all four tools in parallel
        assert not s.workflow.edges and len(s.workflow.sources) == 4
    if name in THREE_WAY:
        assert s.machine.vram_budget_mb < 24_000, f"{name} needs an explicit, binding budget"


@pytest.mark.parametrize("name", SUITE)
def test_oracle_is_unique_and_separated(name: str) -> None:
    res = solve(sc(name), ranking=True)
    assert len(res.optimal) == 1
    runner_up = res.ranking[1].e2e_ms
    assert runner_up >= SEPARATION * res.e2e_ms, (name, res.ranking[1].mapping.code(), runner_up / res.e2e_ms)


# ---------------------------------------------------------------------------- S1-S4: precedence
def test_s1_chain_oracle_is_each_tools_faster_isolated_device() -> None:
    s = sc("S1")
    best = solve(s).best
    isolated = Mapping(
        (n, G if s.card_of(n).gpu_ms is not None and s.card_of(n).gpu_ms < s.card_of(n).cpu_ms else C)  # type: ignore[operator]
        for n in s.workflow.node_ids
    )
    assert best == isolated
    assert any(s.card_of(n).category is Category.CPU_PREFERRED and best[n] is C for n in s.workflow.node_ids)
    assert e2e(s, s.uniform(G)) / solve(s).e2e_ms > 1.1  # type: ignore[operator]


@pytest.mark.parametrize("name", ["S2", "S4"])
def test_high_gain_oracle_well_over_2x_faster_than_all_gpu(name: str) -> None:
    s = sc(name)
    res = solve(s)
    all_gpu = e2e(s, s.uniform(G))
    assert all_gpu is not None and all_gpu / res.e2e_ms > 2.5  # paper: 2.60x (S2), 2.83x (S4)
    cpu_side = moved_to_cpu(s, res.best)
    assert [s.card_of(n).category for n in cpu_side] == [Category.CPU_PREFERRED]


def test_s3_diamond_hides_a_gpu_faster_tool_on_the_cpu() -> None:
    s = sc("S3")
    best = solve(s).best
    (moved,) = moved_to_cpu(s, best)
    card = s.card_of(moved)
    assert card.speedup is not None and card.speedup > 1  # the GPU is faster for it in isolation
    assert card.cpu_ms <= solve(s).e2e_ms  # ...but its CPU time fits inside the optimum
    assert e2e(s, s.uniform(G)) > solve(s).e2e_ms  # type: ignore[operator]


# ---------------------------------------------------------------------------- S5-S10: fan-out
@pytest.mark.parametrize("name", FAN_OUT)
def test_fan_out_contention_changes_the_answer(name: str) -> None:
    s = sc(name)
    res = solve(s)
    assert res.best != s.uniform(G)
    assert e2e(s, s.uniform(G)) >= SEPARATION * res.e2e_ms  # type: ignore[operator]


def test_s5_table2_moved_tool_slower_others_faster_e2e_drops() -> None:
    s = sc("S5")
    res, all_gpu = solve(s), s.uniform(G)
    assert res.best == all_gpu.moved("C", C) and s.workflow.tool_of["C"] == "vector_search_x15"
    assert run_ms(s, res.best, "C") > 1.1 * run_ms(s, all_gpu, "C")  # paper: +78%
    for n in ("A", "B", "D"):
        assert run_ms(s, res.best, n) < 0.9 * run_ms(s, all_gpu, n)  # paper: -18% to -44%
    assert res.e2e_ms < e2e(s, all_gpu)  # type: ignore[operator]  # paper: 988 -> 812 ms


def test_s6_ratio_test_moves_a_gpu_preferred_tool() -> None:
    s = sc("S6")
    res = solve(s)
    (moved,) = moved_to_cpu(s, res.best)
    assert s.card_of(moved).category is Category.GPU_PREFERRED
    assert run_ms(s, res.best, moved) > run_ms(s, s.uniform(G), moved)  # slower for the tool itself
    assert run_ms(s, res.best, moved) <= res.e2e_ms  # hidden behind the GPU bottleneck


def test_s7_two_ambiguous_tools_leave_and_one_is_not_enough() -> None:
    s = sc("S7")
    res = solve(s)
    moved = moved_to_cpu(s, res.best)
    assert len(moved) == 2 and all(s.card_of(n).category is Category.AMBIGUOUS for n in moved)
    for n in moved:
        assert e2e(s, res.best.moved(n, G)) >= 1.1 * res.e2e_ms  # type: ignore[operator]


def test_s8_profile_finds_one_tool_contention_the_other() -> None:
    s = sc("S8")
    res = solve(s)
    cats = sorted(s.card_of(n).category.value for n in moved_to_cpu(s, res.best))
    assert cats == ["ambiguous", "cpu_preferred"]
    profile_only = s.uniform(G).moved(
        next(n for n in s.workflow.node_ids if s.card_of(n).category is Category.CPU_PREFERRED), C
    )
    assert e2e(s, profile_only) >= SEPARATION * res.e2e_ms  # type: ignore[operator]


def test_s9_cpu_contention_on_four_cores() -> None:
    s = sc("S9")
    assert s.machine.cpu_cores == 4
    small = solve(s)
    big_machine = s.model_copy(update={"machine": s.machine.model_copy(update={"cpu_cores": 16})})
    big = solve(big_machine)
    assert len(moved_to_cpu(s, small.best)) == 1 and len(moved_to_cpu(s, big.best)) == 2
    assert e2e(s, big.best) >= 1.5 * small.e2e_ms  # type: ignore[operator]


def test_s10_two_gpu_preferred_tools_move_under_heavy_contention() -> None:
    s = sc("S10")
    moved = moved_to_cpu(s, solve(s).best)
    assert len(moved) == 2 and all(s.card_of(n).category is Category.GPU_PREFERRED for n in moved)


# ---------------------------------------------------------------------------- S11-S13: three-way
@pytest.mark.parametrize("name", THREE_WAY)
def test_three_way_all_gpu_ooms_and_oracle_queues(name: str) -> None:
    s = sc(name)
    reason = s.infeasibility(s.uniform(G))
    assert reason is not None and reason.kind is InfeasibleKind.OOM, reason
    trace = Simulator(s, noise=False).run(solve(s).best)
    assert trace.feasible and Q in solve(s).best.values()
    assert trace.peak_vram_mb <= s.machine.vram_budget_mb


def test_s11_greedy_far_from_oracle_and_stuck() -> None:
    s = sc("S11")
    greedy, res = greedy_mapping(s), solve(s)
    g = e2e(s, greedy)
    assert g is not None and g >= 2.0 * res.e2e_ms  # paper: 6837 vs 1715 ms
    llm = next(n for n in s.workflow.node_ids if s.workflow.tool_of[n].startswith("llama"))
    assert greedy[llm] is G and res.best[llm] is Q
    for m in single_moves(s, greedy):
        e = e2e(s, m)
        assert e is None or e > g, m.code()


def test_s12_queue_time_shares_the_budget_and_greedy_finds_it() -> None:
    s = sc("S12")
    res = solve(s)
    (queued,) = [n for n in s.workflow.node_ids if res.best[n] is Q]
    assert s.gpu_now_vram_mb(res.best) + s.card_of(queued).vram_mb > s.machine.vram_budget_mb
    trace = Simulator(s, noise=False).run(res.best)
    producer_end = max(trace.nodes[p].end_ms for p in s.workflow.preds(queued))
    assert math.isclose(trace.nodes[queued].admitted_ms, producer_end)
    assert greedy_mapping(s) == res.best


def test_s13_two_tool_exchange_no_single_move_reaches() -> None:
    s = sc("S13")
    greedy, res = greedy_mapping(s), solve(s)
    g = e2e(s, greedy)
    assert g is not None and g >= 2.0 * res.e2e_ms  # paper: 4685 vs 1566 ms
    diff = res.best.differs_at(greedy)
    demoted = [n for n in diff if greedy[n] is G and res.best[n] is Q]
    promoted = [n for n in diff if greedy[n] is not G and res.best[n] is G]
    assert len(diff) == 2 and len(demoted) == 1 and len(promoted) == 1
    slack = s.machine.vram_budget_mb - s.gpu_now_vram_mb(res.best)
    assert 0 <= slack <= 5, slack  # just fits (paper: 1098 of 1100 MB)
    assert str(s.infeasibility(greedy.moved(promoted[0], G))).startswith("OOM")
    for m in single_moves(s, greedy):
        assert m != res.best
        e = e2e(s, m)
        assert e is None or e >= g, m.code()  # none improves on greedy (one ties: C queued)
