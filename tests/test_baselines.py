"""The baselines (HEFT-CF, StarPU dmda, UCB1, memory-aware greedy) on the canonical DAGs and the bundled examples."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import CANONICAL, canonical_scenario, fork, make_card, make_scenario, make_workflow

from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.loop import LoopConfig, RunResult, run_rounds
from hetsched.model import InfeasibleKind, Mapping, Mode, Placement, Scenario
from hetsched.model.files import load_scenario
from hetsched.policies import PolicyContext, make_policy, policy_names
from hetsched.policies.greedy_mem import benefit_order
from hetsched.policies.starpu_dmda import StarpuDmda
from hetsched.policies.ucb1 import Ucb1, lower_bound_ms, reward
from hetsched.search.oracle import solve
from hetsched.search.reference import SimPlanner
from hetsched.sim import Simulator

BASELINES = ("heft-cf", "starpu-dmda", "ucb1", "greedy-mem")
C, G, Q = Placement.CPU, Placement.GPU_NOW, Placement.GPU_QUEUE


def run(sc: Scenario, policy: str, rounds: int = 8, seed: int = 0) -> RunResult:
    return run_rounds(sc, make_policy(policy), LoopConfig(rounds=rounds, seed=seed))


def codes(result: RunResult) -> list[str]:
    return [r.mapping.code() for r in result.rounds]


def test_registered_by_name() -> None:
    assert set(BASELINES) <= set(policy_names())


# ---------------------------------------------------------------------------- every policy, every DAG
@pytest.mark.parametrize("mode", [Mode.BINARY, Mode.THREE_WAY])
@pytest.mark.parametrize("kind", sorted(CANONICAL))
@pytest.mark.parametrize("policy", BASELINES)
def test_canonical_dags_invariants(policy: str, kind: str, mode: Mode) -> None:
    sc = canonical_scenario(kind, mode=mode, noise_cv=0.03)
    result = run(sc, policy)
    assert len(result.rounds) == 8
    for rec in result.rounds:
        m = rec.mapping
        assert sc.validate_mapping(m) == m  # every node placed once, legally for the mode
        if mode is Mode.BINARY:
            assert Q not in m.values()
        assert sc.gpu_now_vram_mb(m) <= sc.machine.vram_budget_mb  # every baseline (the guard)
        if rec.trace.feasible:
            for n in sc.workflow.node_ids:  # the executed trace respects precedence
                for p in sc.workflow.preds(n):
                    assert rec.trace.nodes[n].start_ms >= rec.trace.nodes[p].end_ms - 1e-9
        else:
            assert rec.trace.reason
    # deterministic for a seed
    assert codes(run(sc, policy)) == codes(result)


@pytest.mark.parametrize("policy", BASELINES)
def test_resumed_run_replays_identically(policy: str) -> None:
    sc = canonical_scenario("diamond", mode=Mode.THREE_WAY, noise_cv=0.05)
    straight = run(sc, policy, rounds=10, seed=3)
    first = run(sc, policy, rounds=4, seed=3)
    resumed = run_rounds(sc, make_policy(policy), LoopConfig(rounds=10, seed=3), history=first.rounds)
    assert codes(resumed) == codes(straight)


BEST_RATIO: dict[tuple[str, str], float] = {
    # documented behaviour (docs/baselines.md, "Results on the bundled examples"): the noise-free
    # E2E of the best mapping a policy plays in 20 rounds, over the oracle's
    ("heft-cf", "chain"): 1.0,
    ("heft-cf", "fanout"): 1.0,
    ("heft-cf", "vram_3way"): 1.484,  # contention-free costs, then the shared memory fallback
    ("starpu-dmda", "chain"): 1.0,
    ("starpu-dmda", "fanout"): 1.0,
    ("starpu-dmda", "vram_3way"): 1.154,  # the calibration round's mapping; the model then settles at 1.484
    ("ucb1", "chain"): 1.0,  # 16 arms, all played within 20 rounds
    ("ucb1", "fanout"): 1.0,
    ("greedy-mem", "chain"): 1.0,
    ("greedy-mem", "fanout"): 1.118,
    ("greedy-mem", "vram_3way"): 1.400,  # the LLM holds 2600 of 3000 MB, everything else on the CPU
}
UCB1_VRAM_3WAY_MAX_RATIO = 1.57
"""UCB1 on vram_3way plays 20 of its 53 arms: its best is between 1.00x and 1.57x over seeds 0-9."""


@pytest.mark.parametrize("name", ["chain", "fanout", "vram_3way"])
@pytest.mark.parametrize("policy", BASELINES)
def test_bundled_examples_reach_their_documented_ratio(policy: str, name: str) -> None:
    sc = load_scenario(name)
    result = run(sc, policy, rounds=20)
    exact = Simulator(sc, noise=False)
    played = [e2e for e2e in (exact.e2e(r.mapping) for r in result.rounds) if e2e is not None]
    assert played, "no feasible round"
    ratio = min(played) / solve(result.scenario, ranking=False).e2e_ms  # noise-free: no lucky draw moves it
    assert ratio >= 1 - 1e-9  # nothing beats the oracle without noise
    if (policy, name) in BEST_RATIO:
        assert ratio == pytest.approx(BEST_RATIO[policy, name], abs=5e-4)
    else:
        assert ratio <= UCB1_VRAM_3WAY_MAX_RATIO
    best = result.best_round  # the lowest measured round is a mapping that was played
    assert best is not None and best.trace.e2e_ms is not None and best.mapping in {r.mapping for r in result.rounds}


@pytest.mark.parametrize("name", ["chain", "fanout"])
@pytest.mark.parametrize("policy", ["heft-cf", "starpu-dmda", "ucb1"])
def test_oracle_mapping_is_played_on_chain_and_fanout(policy: str, name: str) -> None:
    sc = load_scenario(name)
    result = run(sc, policy, rounds=20)
    assert solve(result.scenario, ranking=False).best in {r.mapping for r in result.rounds}
    if policy != "ucb1":  # the model-based ones settle there; UCB1 keeps exploring
        assert result.rounds[-1].mapping == solve(result.scenario, ranking=False).best


# ---------------------------------------------------------------------------- HEFT-CF
def test_heft_cf_is_static() -> None:
    result = run(load_scenario("chain"), "heft-cf", rounds=5)
    assert len(set(codes(result))) == 1
    # contention-free costs, no contention on a chain: doc_merger (CPU-preferred) stays on the CPU
    assert result.rounds[0].mapping.to_dict() == {"A": "gpu_now", "B": "cpu", "C": "gpu_now", "D": "gpu_now"}


# ---------------------------------------------------------------------------- StarPU dmda
def dmda_fork() -> Scenario:
    # S is GPU-preferred; two identical kids, 30 ms on the GPU, 40 ms on the CPU, half a GPU each
    # (so running side by side costs nothing with kappa 0), no noise
    cards = [make_card("t0", 100, 10), make_card("t1", 40, 30, gpu_util=0.5), make_card("t2", 40, 30, gpu_util=0.5)]
    return make_scenario(fork(2), cards, cpu_cores=4, gpu_kappa=0.0, noise_cv=0.0)


def test_dmda_forced_calibration_then_model() -> None:
    result = run(dmda_fork(), "starpu-dmda", rounds=4)
    assert codes(result) == [
        # round 0, nothing calibrated: S and K0 to the CUDA worker (listed first, queue empty when
        # pushed); K1 is pushed while K0 still waits there, so 1/13.33 > 0 sends it to a CPU worker
        "GGC",
        # round 1: each node forced onto the device it has not been measured on
        "CCG",
        # round 2+: the model. S -> GPU (10 < 100). At t=10 K0 -> GPU (10+30 < 10+40); K1 sees
        # the GPU queue busy until 40: 40+30 = 70 > 10+40 = 50 -> CPU
        "GGC",
        "GGC",
    ]
    forced = [r.proposal.info["forced_calibration"] for r in result.rounds]
    assert forced == [["S", "K0", "K1"], ["S", "K0", "K1"], [], []]


def test_dmda_model_is_the_mean_of_observed_latencies() -> None:
    sc = canonical_scenario("diamond", mode=Mode.THREE_WAY, noise_cv=0.05)
    result = run(sc, "starpu-dmda", rounds=7, seed=11)
    pol = make_policy("starpu-dmda")
    assert isinstance(pol, StarpuDmda)
    pol.reset(PolicyContext(scenario=sc, seed=11))
    model = pol.model(result.rounds)
    observed: dict[tuple[str, str], list[float]] = {}
    for rec in result.rounds:
        for nt in rec.trace.nodes.values():
            dev = "gpu" if nt.placement in (G, Q) else "cpu"
            observed.setdefault((nt.tool, dev), []).append(nt.end_ms - nt.start_ms)
    assert observed, "no feasible round to learn from"
    assert set(model.samples) == set(observed)
    for (tool, dev), xs in observed.items():
        assert model.mean(tool, dev) == pytest.approx(sum(xs) / len(xs), rel=1e-12)
        assert model.count(tool, dev) == len(xs)
    assert math.isnan(model.mean("no-such-tool", "gpu"))


def test_dmda_stock_calibration_minimum_keeps_calibrating() -> None:
    result = run_rounds(dmda_fork(), StarpuDmda(calibration_minimum=10), LoopConfig(rounds=6))
    assert all(r.proposal.info["forced_calibration"] for r in result.rounds)


def test_dmda_rejects_a_bad_option() -> None:
    with pytest.raises(ValueError, match="calibration_minimum must be >= 1, got 0"):
        StarpuDmda(calibration_minimum=0)


# ---------------------------------------------------------------------------- UCB1
def test_ucb1_finds_the_fanout_oracle_within_20_rounds() -> None:
    sc = load_scenario("fanout")
    oracle = solve(sc, ranking=False).best
    found = 0
    for seed in range(10):
        best = run(sc, "ucb1", rounds=20, seed=seed).best_round
        assert best is not None
        found += best.mapping == oracle
    assert found >= 9


def test_ucb1_tries_every_arm_once_first() -> None:
    sc = canonical_scenario("chain", mode=Mode.BINARY, noise_cv=0.03)
    pol = make_policy("ucb1")
    result = run_rounds(sc, pol, LoopConfig(rounds=12, seed=5))
    assert isinstance(pol, Ucb1)
    arms = pol.arms()
    assert len(arms) == 2**3
    first = [r.mapping for r in result.rounds[: len(arms)]]
    assert sorted(m.code() for m in first) == sorted(m.code() for m in arms)
    assert [r.proposal.info["phase"] for r in result.rounds[len(arms) :]] == ["ucb"] * 4


@pytest.mark.parametrize("mode", [Mode.BINARY, Mode.THREE_WAY])
def test_ucb1_arms_are_the_mappings_that_can_run(mode: Mode) -> None:
    sc = canonical_scenario("diamond", mode=mode, vram_budget_mb=1200.0)
    pol = Ucb1()
    pol.reset(PolicyContext(scenario=sc, seed=0, planner=SimPlanner(sc)))
    exact = Simulator(sc, noise=False)
    feasible = [m for m in sc.all_mappings() if exact.infeasibility(m) is None]
    assert 0 < len(pol.arms()) == len(feasible) < len(sc.choices[0]) ** 4
    assert set(pol.arms()) == set(feasible)


def test_ucb1_seed_changes_the_exploration_order() -> None:
    sc = canonical_scenario("chain", mode=Mode.BINARY)
    assert codes(run(sc, "ucb1", rounds=4, seed=0)) != codes(run(sc, "ucb1", rounds=4, seed=1))


def test_ucb1_factored_above_max_joint_nodes() -> None:
    sc = canonical_scenario("diamond", mode=Mode.THREE_WAY, noise_cv=0.03)
    pol = Ucb1(max_joint_nodes=2)
    result = run_rounds(sc, pol, LoopConfig(rounds=10, seed=2))
    assert pol.factored and pol.arms() == ()
    exact = Simulator(sc, noise=False)
    for r in result.rounds:  # the guard: every joint choice that runs is one the model says can run
        assert r.trace.feasible and exact.infeasibility(r.mapping) is None
        for note in r.proposal.info.get("guard", []):  # a repaired node went from a GPU placement to the CPU
            node, change = note.split(": ")
            assert change.endswith("-> cpu") and r.mapping[node] is C
    assert any(r.proposal.info.get("guard") for r in result.rounds)  # this budget needs the guard
    for n in sc.workflow.node_ids:  # each node still tries each of its placements
        assert {r.mapping[n] for r in result.rounds} == set(sc.allowed(n))


def test_ucb1_factored_guard_on_large_random_workflows() -> None:
    for family in ("layered", "fanout"):
        sc = random_scenario(WorkflowSpec(family, 24, Mode.THREE_WAY, 3))
        result = run_rounds(sc, make_policy("ucb1"), LoopConfig(rounds=6, seed=0))
        exact = Simulator(sc, noise=False)
        assert all(exact.infeasibility(r.mapping) is None for r in result.rounds)


def test_ucb1_reward() -> None:
    sc = load_scenario("chain")
    lb = lower_bound_ms(sc)
    # chain: each node on its faster device, isolated: 150 + 40 + 6 + 380
    assert lb == pytest.approx(576.0)
    tr = run(sc, "oracle", rounds=1).rounds[0].trace
    assert reward(tr, lb) == pytest.approx(min(1.0, lb / (tr.e2e_ms or 1.0)))
    bad = run(load_scenario("vram_3way"), "all-gpu", rounds=1).rounds[0].trace
    assert not bad.feasible and reward(bad, lb) == 0.0


# ---------------------------------------------------------------------------- memory-aware greedy
def test_greedy_on_vram_3way_shows_the_papers_failure() -> None:
    sc = load_scenario("vram_3way")
    pol = make_policy("greedy-mem")
    pol.reset(PolicyContext(scenario=sc))
    m = pol.propose([]).mapping
    # llama_1b saves the most time and takes 2600 of 3000 MB; nothing else fits beside it and
    # none of whisper/ocr/e5 has a queue speedup above 1, so they all run on the CPU
    assert benefit_order(sc) == ["llama_1b", "whisper_small", "ocr", "e5_large"]
    assert m.to_dict() == {"A": "cpu", "B": "cpu", "C": "cpu", "D": "gpu_now"}
    oracle = solve(sc, ranking=False)
    assert oracle.best["D"] is Q  # the oracle queues the LLM to keep ASR and OCR resident
    from hetsched.sim import Simulator

    e2e = Simulator(sc, noise=False).e2e(m)
    assert e2e is not None and e2e > 1.3 * oracle.e2e_ms


def test_greedy_queues_only_above_unit_queue_speedup() -> None:
    cards = [
        make_card("t0", 1000, 10, load_ms=100, vram_mb=800),
        make_card("t1", 500, 50, load_ms=100, vram_mb=800),
        make_card("t2", 300, 100, load_ms=900, vram_mb=800),
    ]
    sc = make_scenario(
        make_workflow([("A", "t0"), ("B", "t1"), ("C", "t2")]), cards, mode=Mode.THREE_WAY, vram_budget_mb=1000
    )
    pol = make_policy("greedy-mem")
    pol.reset(PolicyContext(scenario=sc))
    # t0 saves 990 ms -> gpu_now; t1 (500/150 = 3.3x queued) -> gpu_queue; t2 (300/1000) -> cpu
    assert pol.propose([]).mapping.to_dict() == {"A": "gpu_now", "B": "gpu_queue", "C": "cpu"}


@st.composite
def random_scenarios(draw: st.DrawFn) -> Scenario:
    n = draw(st.integers(1, 6))
    tools = []
    for i in range(n):
        cpu = draw(st.floats(1, 2000))
        has_gpu = draw(st.booleans()) or i == 0
        tools.append(
            make_card(
                f"t{i}",
                cpu_ms=cpu,
                gpu_ms=draw(st.floats(1, 2000)) if has_gpu else None,
                load_ms=draw(st.floats(0, 2000)),
                vram_mb=draw(st.floats(0, 3000)),
                gpu_util=draw(st.floats(0.1, 1.0)),
                cpu_threads=draw(st.integers(1, 8)),
            )
        )
    nodes = [(f"N{i}", f"t{draw(st.integers(0, n - 1))}") for i in range(draw(st.integers(1, 7)))]
    edges = [
        (a, b, draw(st.floats(0, 50)))
        for (i, (a, _)), (j, (b, _)) in itertools.combinations(enumerate(nodes), 2)
        if draw(st.booleans())
    ]
    used = {t for _, t in nodes}
    return make_scenario(
        make_workflow(nodes, edges),
        [c for c in tools if c.name in used],
        mode=draw(st.sampled_from([Mode.BINARY, Mode.THREE_WAY])),
        vram_budget_mb=draw(st.floats(100, 5000)),
        cpu_cores=draw(st.integers(1, 16)),
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_scenarios(), st.sampled_from(BASELINES))
def test_never_a_mapping_the_model_says_cannot_run(sc: Scenario, policy: str) -> None:
    """The feasibility guard (docs/baselines.md): no baseline proposes a mapping that the static
    check or the noise-free simulation shows cannot run (over budget, never admissible, deadlock)."""
    result = run_rounds(sc, make_policy(policy), LoopConfig(rounds=3, seed=1))
    exact = Simulator(sc, noise=False)
    for rec in result.rounds:
        m: Mapping = rec.mapping
        assert sc.gpu_now_vram_mb(m) <= sc.machine.vram_budget_mb
        assert sc.infeasibility(m) is None and exact.infeasibility(m) is None, (policy, m.code())
        assert rec.trace.feasible or rec.trace.kind is not InfeasibleKind.OOM
