"""The bench: specs, runner (store-backed, resumable, parallel), metrics on hand-built rounds, the
report and its regeneration from stored runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tests.factories import make_card, make_scenario, make_workflow
from typer.testing import CliRunner

from hetsched.bench import BenchConfig, PolicySpec, default_specs, load_runs, load_scenarios, parse_specs, run_bench
from hetsched.bench.data import RunSummary, summarize_run
from hetsched.bench.runner import EXPERIMENT, store_run_ids
from hetsched.bench.spec import parse_spec
from hetsched.bench.tables import best_match_cell, table4
from hetsched.cli import app
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import InputError, Mapping, Placement, Proposal, RoundRecord, RunKey, Scenario, UnknownNameError
from hetsched.policies import LOAD_ONLY, make_policy, policy_names
from hetsched.search.oracle import solve
from hetsched.sim import Simulator
from hetsched.store import RunInfo, RunStore

pytest.importorskip("matplotlib", reason="the bench report draws with matplotlib (the 'bench' extra)")

runner = CliRunner()


def cli(*args: str) -> str:
    from hetsched.cli import bench  # noqa: F401  (registers commands)

    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


# ---------------------------------------------------------------------------- specs
def test_default_specs_follow_the_registry() -> None:
    specs = default_specs()
    assert {s.policy for s in specs} == set(policy_names()) - LOAD_ONLY
    assert {s.policy for s in default_specs(under_load=True)} == set(policy_names())
    assert {"all-cpu", "all-gpu", "oracle", "heft-cf", "starpu-dmda", "ucb1", "greedy-mem", "agentic"} <= set(
        policy_names()
    )
    assert {"agentic:rules", "agentic:argmin"} <= {s.label for s in specs}
    assert not any(s.uses_llm for s in specs)  # LLM deciders only when asked for


def test_parse_spec_names_and_errors() -> None:
    assert parse_spec("ucb1") == PolicySpec("ucb1")
    assert parse_spec("agentic").label == "agentic:rules"
    assert parse_spec("agentic:local").uses_llm
    with pytest.raises(UnknownNameError, match="valid policies"):
        parse_spec("heft-magic")
    with pytest.raises(InputError, match="only the agentic policy"):
        parse_spec("ucb1:rules")
    with pytest.raises(UnknownNameError, match="valid deciders"):
        parse_spec("agentic:gpt5")
    assert [s.label for s in parse_specs(["ucb1", "ucb1", "agentic"])] == ["ucb1", "agentic:rules"]


# ---------------------------------------------------------------------------- metrics on hand-built rounds
def _tiny() -> Scenario:
    """A chain of four tools; t3 is CPU-preferred; the budget holds three tools: all-GPU OOMs."""
    cards = [make_card(f"t{i}", cpu_ms=100, gpu_ms=10, vram_mb=500) for i in range(3)]
    cards.append(make_card("t3", cpu_ms=10, gpu_ms=100, vram_mb=500))
    wf = make_workflow([("A", "t0"), ("B", "t1"), ("C", "t2"), ("D", "t3")], [("A", "B"), ("B", "C"), ("C", "D")])
    return make_scenario(wf, cards, vram_budget_mb=1600)


def _info(policy: str, seed: int, rounds: int) -> RunInfo:
    return RunInfo(id=f"{policy[:4]}{seed:04d}", experiment=EXPERIMENT, scenario_name="test", scenario_sha256="x",
                   policy=policy, options={}, seed=seed, rounds_planned=rounds, stop_after=0, status="finished",
                   status_reason="", executor="sim", hetsched_version="0", created_at="", updated_at="",
                   rounds_done=rounds, best_e2e_ms=None)


def _summary(sc: Scenario, policy: str, seed: int, codes: list[str]) -> RunSummary:
    sim = Simulator(sc, noise=False)
    place = {"C": Placement.CPU, "G": Placement.GPU_NOW}
    records = []
    for i, code in enumerate(codes):
        m = Mapping(zip(sc.workflow.node_ids, (place[c] for c in code), strict=True))
        records.append(RoundRecord(round=i, proposal=Proposal(m), trace=sim.run(m)))
    return summarize_run(_info(policy, seed, len(codes)), sc, records)


def test_table4_match_counts_by_hand() -> None:
    sc = _tiny()
    assert solve(sc).best.code() == "GGGC" and solve(sc).e2e_ms == 40.0
    a0 = _summary(sc, "pa", 0, ["GGGG", "CGGC", "GGGC"])  # OOM (0), 3, 4
    a1 = _summary(sc, "pa", 1, ["CCCC", "GCCC"])  # 1 (D on the CPU), 2
    b0 = _summary(sc, "pb", 0, ["GGGG", "CGGC"])  # 0, 3
    b1 = _summary(sc, "pb", 1, ["GCGC", "GGCC"])  # 3, 3
    assert [r.match for r in a0.rounds] == [0, 3, 4] and a0.rounds[0].feasible is False
    assert (a0.best_match, a0.reached, a1.best_match, a1.reached) == (4, 2, 2, None)
    assert (b0.best_match, b1.best_match) == (3, 3)
    assert best_match_cell([a0, a1]) == "2-4/4" and best_match_cell([b0, b1]) == "3/4"
    from hetsched.bench import BenchData

    data = BenchData(runs=[a0, a1, b0, b1], scenarios={"test": sc}, labels=["pa", "pb"])
    rows = {row[0]: row[1:] for row in table4(data).rows}
    assert rows["test"] == ["2-4/4", "3/4"]
    assert rows["total binary (1 scenarios): scenarios at full match"] == ["0/1", "0/1"]
    assert rows["total binary: runs at full match"] == ["1/2", "0/2"]


def test_regret_by_hand_with_oom_penalty() -> None:
    sc = _tiny()
    run = _summary(sc, "pa", 0, ["GGGG", "CGGC", "GGGC"])
    # oracle 40 ms; all-CPU 310 ms charged for the OOM round; CGGC runs 130 ms
    assert run.penalty_e2e_ms == 310.0
    assert run.regret_steps() == [270.0, 90.0, 0.0]
    assert run.cumulative_regret() == [270.0, 360.0, 360.0]
    assert run.regret(measured=True) == run.regret()  # the scenario is noise-free


def test_oracle_regret_is_zero_true_but_only_near_zero_measured() -> None:
    """What can fail: the measured E2E of the oracle mapping is noisy, so a seed can measure it
    below the noise-free optimum; 'regret >= 0' holds for the true E2E only."""
    from hetsched.model.files import load_scenario

    sc = load_scenario("S5")
    oracle_e2e = solve(sc).e2e_ms
    measured = []
    for seed in range(8):
        result = run_rounds(sc, make_policy("oracle"), LoopConfig(rounds=10, seed=seed))
        info = _info("oracle", seed, 10)
        run = summarize_run(info, sc, result.rounds)
        assert run.regret() == 0.0 and run.best_match == 4 and run.reached == 0
        measured.append(run.regret(measured=True))
        # noise cv 3% per node: |sum over 10 rounds| stays within 10 x 4 sd of one E2E
        assert abs(run.regret(measured=True)) <= 10 * 4 * 0.03 * oracle_e2e
    assert min(measured) < 0 < max(measured)


# ---------------------------------------------------------------------------- the runner
def _config(store: Path, jobs: int, specs: tuple[PolicySpec, ...] | None = None, rounds: int = 3) -> BenchConfig:
    return BenchConfig(specs=specs or (PolicySpec("all-gpu"), PolicySpec("ucb1")),
                       scenarios=load_scenarios(["S2", "S13"]), seeds=(0, 1), rounds=rounds, store=store, jobs=jobs)


def _comparable(data_runs: list[RunSummary]) -> list[tuple[object, ...]]:
    return [(r.label, r.scenario, r.seed, tuple(dataclasses.replace(x, decision_ms=None) for x in r.rounds))
            for r in data_runs]


def test_parallel_equals_serial_and_rerun_reuses(tmp_path: Path) -> None:
    serial = run_bench(_config(tmp_path / "a.sqlite", jobs=1))
    parallel = run_bench(_config(tmp_path / "b.sqlite", jobs=2))
    assert serial.counts == parallel.counts == {"ran": 8}
    a = load_runs(tmp_path / "a.sqlite", serial.run_ids)
    b = load_runs(tmp_path / "b.sqlite", parallel.run_ids)
    assert _comparable(a.runs) == _comparable(b.runs)
    again = run_bench(_config(tmp_path / "a.sqlite", jobs=2))
    assert again.counts == {"reused": 8} and again.run_ids == serial.run_ids


def test_interrupted_run_is_resumed_to_the_same_rounds(tmp_path: Path) -> None:
    cfg = _config(tmp_path / "s.sqlite", jobs=1, specs=(PolicySpec("ucb1"),), rounds=6)
    sc = cfg.scenarios[0]
    with RunStore(cfg.store) as store:  # a run killed after 2 of its 6 rounds
        run_id = store.create_run(RunKey(sc, "ucb1", seed=0, rounds=6, experiment=EXPERIMENT))
        run_rounds(sc, make_policy("ucb1"), LoopConfig(rounds=2, seed=0), recorder=store.recorder(run_id))
        store.set_status(run_id, "interrupted", "KeyboardInterrupt")
    resumed = run_bench(cfg)
    assert resumed.counts == {"resumed": 1, "ran": 3} and run_id in resumed.run_ids
    fresh = run_bench(dataclasses.replace(cfg, store=tmp_path / "fresh.sqlite"))
    r = load_runs(cfg.store, resumed.run_ids)
    f = load_runs(tmp_path / "fresh.sqlite", fresh.run_ids)
    assert _comparable(r.runs) == _comparable(f.runs)
    assert all(len(run.rounds) == 6 for run in r.runs)


def test_nested_options_in_another_key_order_are_one_configuration(tmp_path: Path) -> None:
    sc = _tiny()
    first = {"decider": "rules", "monitor": {"probes_per_round": 1, "hints": False}}
    same = {"monitor": {"hints": False, "probes_per_round": 1}, "decider": "rules"}  # key order only
    other = {"decider": "rules", "monitor": {"probes_per_round": 2, "hints": False}}
    ids = []
    with RunStore(tmp_path / "s.sqlite") as store:
        for options in (first, same, other):
            run_id = store.create_run(RunKey(sc, "agentic", options=options, seed=0, rounds=1, experiment=EXPERIMENT))
            run_rounds(sc, make_policy("all-cpu"), LoopConfig(rounds=1), recorder=store.recorder(run_id))
            ids.append(run_id)
        stored = store.run(ids[1]).options
        assert stored == first and list(stored["monitor"]) == ["hints", "probes_per_round"]  # stored as written
        found = store.find_run(RunKey(sc, "agentic", options=first, seed=0, rounds=1, experiment=EXPERIMENT))
    assert found is not None and found.id == ids[1]  # the store: one configuration, newest run
    # the bench agrees with the store: the newest of the two equal ones, and the different one
    assert sorted(store_run_ids(tmp_path / "s.sqlite", EXPERIMENT)) == sorted([ids[1], ids[2]])


# ---------------------------------------------------------------------------- CLI, report, regeneration
def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in ("bench.json", "runs.sqlite", "runs.sqlite-wal", "runs.sqlite-shm",
                                              "runs.sqlite-runs.lock")}


def test_quick_bench_writes_report_and_regenerates_identically(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    text = cli("bench", "--scenario", "S5", "--scenario", "S13", "--policy", "all-gpu", "--policy", "agentic:rules",
               "--seeds", "2", "--rounds", "3", "--jobs", "1", "--out", str(out), "--no-progress")
    assert "Table 4" in text and "Table 5" in text
    for name in ("bench.json", "runs.sqlite", "report.html", "report.md", "tables/table4.csv", "tables/table5.csv",
                 "tables/regret.csv", "tables/rounds.csv", "figures/e2e_normalized.png", "figures/convergence.png",
                 "figures/regret.png", "figures/gantt_S5.png", "figures/gantt_S13.png", "figures/vram_S13.png"):
        assert (out / name).is_file(), name
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == 6 and "<table>" in page and 'src="figures/' not in page
    assert '<a href="#how-to-read">' in page and '<h2 id="how-to-read">' in page  # the guide ships inside
    table4_csv = (out / "tables/table4.csv").read_text(encoding="utf-8").splitlines()
    assert table4_csv[0] == "scenario,all-gpu,agentic:rules"
    assert table4_csv[1].startswith("S5,3/4,")  # all-GPU misses exactly vector_search_x15
    assert table4_csv[2].startswith("S13,0/4,")  # every all-GPU round OOMs

    again = tmp_path / "again"
    cli("report", str(out), "--out", str(again))
    assert _files(again) == _files(out)
    from_store = tmp_path / "from_store"
    cli("report", str(out / "runs.sqlite"), "--out", str(from_store))
    assert (from_store / "tables/table4.csv").read_text() == (out / "tables/table4.csv").read_text()


def test_bench_on_user_scenario_and_cards(tmp_path: Path) -> None:
    lib = tmp_path / "mytools.yaml"
    lib.write_text(
        "tools:\n"
        "  enc: {cpu_ms: 300, gpu_ms: 20, vram_mb: 800, gpu_util: 0.9}\n"
        "  merge: {cpu_ms: 30, gpu_ms: 90, vram_mb: 100}\n"
        "  parse: {cpu_ms: 50, has_gpu: false}\n",
        encoding="utf-8",
    )
    scen = tmp_path / "mine.yaml"
    scen.write_text(
        "name: mine\nmode: binary\nnodes: [{id: P, tool: parse}, {id: E, tool: enc}, {id: M, tool: merge}]\n"
        "edges: ['P -> E', 'E -> M']\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    cli("bench", "--scenario", str(scen), "--tools", str(lib), "--policy", "all-gpu", "--policy", "oracle",
        "--seeds", "1", "--rounds", "2", "--jobs", "1", "--out", str(out), "--no-progress")
    rows = (out / "tables/table4.csv").read_text(encoding="utf-8").splitlines()
    assert rows[1] == "mine,2/3,3/3"  # all-GPU puts the CPU-preferred merge on the GPU
    assert not (out / "figures/vram_S13.png").exists()  # no three-way scenario, no VRAM figure


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", "--policy", "nope"], "valid policies"),
        (["bench", "--scenario", "S99"], "bundled"),
        (["report", "."], "bench.json"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hetsched.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main([*args, "--out", str(tmp_path / "o")] if args[0] == "bench" else args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
