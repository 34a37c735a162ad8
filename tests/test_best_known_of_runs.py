"""The best mapping known: a best-known reference gives way to a better mapping a run played (rounds and
probes), in the search room (``improved_by``), the bench (stored references, the suites, the report) and the
Python API; an exact reference never moves. Invariants, not traces: after a bench no noise-free ratio reads
below 1, every run of a scenario is compared with one mapping, and the reference's E2E is its mapping's."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.test_search import cli, write_scenario_file

import hetsched.api as api
import hetsched.search.reference as search_reference
from hetsched.bench import BenchConfig, PolicySpec, load_runs, run_bench
from hetsched.bench.generate import FAMILIES, WorkflowSpec, random_scenario
from hetsched.bench.runner import report_reference
from hetsched.bench.suites import SuiteConfig, _reference_summary, ratios, run_suite
from hetsched.bench.tables import reference_note
from hetsched.model import Mapping, Mode, Placement, Reference, ReferenceKind, Scenario
from hetsched.model.files import load_scenario
from hetsched.model.workload import Workload
from hetsched.search.load import predict_window
from hetsched.search.reference import ReferenceChoice, improved_by
from hetsched.sim import Simulator
from hetsched.store import RunStore

pytest.importorskip("matplotlib", reason="the bench package's report draws with matplotlib (the 'bench' extra)")


def _random_mapping(sc: Scenario, rng: random.Random) -> Mapping:
    return Mapping((n, rng.choice(sorted(sc.allowed(n), key=lambda p: p.value))) for n in sc.workflow.node_ids)


def _weak(sc: Scenario, lower_ms: float | None) -> Reference:
    """A best-known reference as weak as it gets: the all-CPU mapping (always feasible)."""
    cpu = sc.uniform(Placement.CPU)
    e2e = Simulator(sc, noise=False).e2e(cpu)
    assert e2e is not None
    return Reference(ReferenceKind.BEST_KNOWN, cpu, e2e, lower_ms, seconds=1.5, bound_note="a note")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(3, 12), three_way=st.booleans(), seed=st.integers(0, 10**6),
       count=st.integers(0, 12))
def test_improved_by_is_the_lowest_of_the_reference_and_the_candidates(family: str, n: int, three_way: bool,
                                                                       seed: int, count: int) -> None:
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    sim = Simulator(sc, noise=False)
    rng = random.Random(seed)
    cands = [(_random_mapping(sc, rng), f"candidate {i}") for i in range(count)]
    values = [sim.e2e(m) for m, _ in cands]
    ref = _weak(sc, lower_ms=1.0)  # a valid lower bound (every E2E is over 1 ms), never reached
    got = improved_by(ref, sc, cands)
    feasible = [(v, i) for i, v in enumerate(values) if v is not None]
    best = min(feasible, default=None)  # the first of the lowest wins: (value, index) ordering
    if best is None or best[0] >= ref.e2e_ms * (1 - 1e-9):
        assert got is ref
        return
    value, i = best
    assert got.kind is ReferenceKind.BEST_KNOWN and got.e2e_ms == value == sim.e2e(got.mapping)
    assert got.mapping == cands[i][0] and got.found_by == f"candidate {i}"
    assert got.lower_bound_ms == 1.0 and got.seconds == 1.5 and got.bound_note == "a note"
    assert f"found by candidate {i}" in got.label and got.measured is None
    # the improved reference is itself a reference: improving it again with the same candidates changes nothing
    assert improved_by(got, sc, cands) is got


def test_an_exact_reference_never_moves_and_reaching_the_bound_proves_optimal() -> None:
    sc = random_scenario(WorkflowSpec("diamond", 6, Mode.THREE_WAY, 3))
    sim = Simulator(sc, noise=False)
    best_e2e, best = min((e, m) for m in (_random_mapping(sc, random.Random(s)) for s in range(40))
                         if (e := sim.e2e(m)) is not None)  # type: ignore[misc]
    weak = _weak(sc, lower_ms=best_e2e)  # a bound the best candidate reaches: it is then proven optimal
    oracle = dataclasses.replace(weak, kind=ReferenceKind.ORACLE)
    assert improved_by(oracle, sc, [(best, "a run")]) is oracle
    proved = improved_by(weak, sc, [(best, "a run")])
    assert proved.exact and proved.e2e_ms == proved.lower_bound_ms == best_e2e and proved.label == "oracle"


def test_improved_by_names_a_mapping_of_another_scenario() -> None:
    sc = random_scenario(WorkflowSpec("chain", 4, Mode.BINARY, 1))
    with pytest.raises(Exception, match=r"the mapping of run x round 2 misses nodes"):
        improved_by(_weak(sc, None), sc, [(Mapping({"zz": Placement.CPU}), "run x round 2")])


def test_under_a_workload_candidates_are_judged_by_the_window_p95() -> None:
    sc = random_scenario(WorkflowSpec("fanout", 5, Mode.THREE_WAY, 11))
    sc = sc.model_copy(update={"workload": Workload.closed(2, requests=4)})
    assert sc.workload is not None
    rng = random.Random(5)
    cands = [(_random_mapping(sc, rng), f"c{i}") for i in range(10)]
    p95 = [predict_window(sc, m, sc.workload) for m, _ in cands]
    cpu = predict_window(sc, sc.uniform(Placement.CPU), sc.workload)
    ref = Reference(ReferenceKind.BEST_KNOWN, cpu.mapping, cpu.p95_ms, None)
    got = improved_by(ref, sc, cands)
    lowest = min((p.p95_ms for p in p95 if p.feasible), default=None)
    if lowest is None or lowest >= cpu.p95_ms:
        assert got is ref
    else:
        assert got.e2e_ms == lowest == predict_window(sc, got.mapping, sc.workload).p95_ms


def test_reference_round_trip_keeps_where_it_was_found() -> None:
    sc = random_scenario(WorkflowSpec("chain", 4, Mode.BINARY, 1))
    ref = dataclasses.replace(_weak(sc, 10.0), found_by="run abc (ucb1, seed 0) round 3 probe 1")
    assert Reference.from_dict(ref.to_dict()) == dataclasses.replace(ref, seconds=0.0)
    plain = Reference(ReferenceKind.BEST_KNOWN, sc.uniform(Placement.CPU), 5.0, None)
    assert set(plain.to_dict()) == {"kind", "mapping", "e2e_ms", "lower_bound_ms"}  # what was stored before


# ---------------------------------------------------------------------------- the bench
def _bench_scenario() -> Scenario:
    return random_scenario(WorkflowSpec("layered", 14, Mode.THREE_WAY, 402))


def _config(store: Path) -> BenchConfig:
    return BenchConfig(specs=(PolicySpec("agentic"), PolicySpec("ucb1")), scenarios=[_bench_scenario()],
                       seeds=(0,), rounds=4, store=store, jobs=1, reference=ReferenceChoice.BEST_KNOWN)


def test_store_played_matches_the_rounds(tmp_path: Path) -> None:
    sc = _bench_scenario()
    result = api.run(sc, "agentic", rounds=4, store=tmp_path / "r.sqlite", max_probes_per_round=4)
    with RunStore(tmp_path / "r.sqlite") as store:
        assert result.run_id is not None
        played = store.played(result.run_id)
        rounds = store.rounds(result.run_id)
    assert played == [(r.round, i, m) for r in rounds for i, m in r.played]
    assert any(i is not None for _, i, _ in played)  # the agentic policy probes: probes are candidates too


def test_a_bench_compares_every_run_with_the_best_mapping_known(tmp_path: Path) -> None:
    store_path = tmp_path / "b.sqlite"
    sc = _bench_scenario()
    weak = _weak(sc, lower_ms=1.0)
    with RunStore(store_path) as store:  # a recorded best-known reference any policy beats
        store.record_reference(sc, "best-known", weak)
    out = run_bench(_config(store_path))
    sim = Simulator(sc, noise=False)
    with RunStore(store_path) as store:
        stored = store.stored_reference(sc, "best-known")
        infos = [store.run(i) for i in out.run_ids]
        played = [e for i in out.run_ids for _, _, m in store.played(i) if (e := sim.e2e(m)) is not None]
    assert stored is not None and stored.e2e_ms == min(played) < weak.e2e_ms
    assert stored.e2e_ms == sim.e2e(stored.mapping) and stored.lower_bound_ms == 1.0
    assert any(stored.found_by.startswith(f"run {i} (") for i in out.run_ids)
    # every run holds the improved reference (a run's copy does not keep the search's seconds)
    assert all(i.reference == dataclasses.replace(stored, seconds=0.0) for i in infos)
    data = load_runs(store_path, out.run_ids)
    assert {r.oracle_code for r in data.runs} == {stored.mapping.code(sc.workflow.node_ids)}
    assert f"found by {stored.found_by}" in reference_note(data)  # the report says where the mapping came from
    for run in data.runs:  # no noise-free ratio below 1, in rounds or probes
        for rnd in run.rounds:
            for e in [rnd.true_e2e_ms, *(p.true_e2e_ms for p in rnd.probes)]:
                assert e is None or e >= run.oracle_e2e_ms
    again = run_bench(_config(store_path))  # a rerun reuses the runs and the improved reference
    assert again.counts == {"reused": 2}
    with RunStore(store_path) as store:
        assert store.stored_reference(sc, "best-known") == stored


def test_a_report_uses_one_reference_per_scenario(tmp_path: Path) -> None:
    """Runs recorded with different best-known references are reported against the best of them and of
    their mappings, the same for each."""
    store_path = tmp_path / "r.sqlite"
    sc = _bench_scenario()
    ids = []
    with RunStore(store_path) as store:
        for seed in (0, 1):
            res = api.run(sc, "ucb1", rounds=3, seed=seed, store=store)
            assert res.run_id is not None
            ids.append(res.run_id)
        store.set_reference(ids[0], _weak(sc, 1.0))  # two different held references
        store.set_reference(ids[1], dataclasses.replace(_weak(sc, 1.0), e2e_ms=_weak(sc, 1.0).e2e_ms * 2))
        loaded = [store.load(i) for i in ids]
    ref = report_reference(sc, loaded)
    data = load_runs(store_path, ids)
    assert {(r.oracle_code, r.oracle_e2e_ms) for r in data.runs} == {(ref.mapping.code(), ref.e2e_ms)}
    assert ref.e2e_ms <= _weak(sc, 1.0).e2e_ms
    assert all(x.true_e2e_ms is None or x.true_e2e_ms >= ref.e2e_ms for r in data.runs for x in r.rounds)


def test_the_api_lowers_a_best_known_reference_to_the_runs_best(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    sc = _bench_scenario()
    weak = _weak(sc, 1.0)
    monkeypatch.setattr(api, "reference", lambda *a, **k: weak)  # a search that found nothing better than all-CPU
    result = api.run(sc, "agentic", rounds=3, reference="best-known", store=tmp_path / "a.sqlite")
    sim = Simulator(sc, noise=False)
    played = [e for r in result.rounds for _, m in r.played if (e := sim.e2e(m)) is not None]
    assert result.reference is not None and result.reference.e2e_ms == min(played) < weak.e2e_ms
    assert result.reference.found_by.startswith("this run's round ")
    with RunStore(tmp_path / "a.sqlite") as store:
        assert result.run_id is not None and store.run(result.run_id).reference == dataclasses.replace(result.reference, seconds=0.0)


def test_a_suite_takes_a_runs_better_mapping_as_the_reference(tmp_path: Path) -> None:
    spec = WorkflowSpec("layered", 14, Mode.THREE_WAY, 402)
    sc = random_scenario(spec)
    cfg = SuiteConfig(suite="scale", specs=(PolicySpec("agentic"), PolicySpec("greedy-mem")), workflows=(spec,),
                      rounds=3, out=tmp_path / "scale", jobs=1, reference=ReferenceChoice.BEST_KNOWN)
    weak = _weak(sc, 1.0)
    with RunStore(cfg.store_path) as store:
        store.record_reference(sc, "best-known", weak)
    result = run_suite(cfg)
    ref = result.references[spec.name]
    best = min(x["true_e2e_ms"] for r in result.runs for x in r["rounds"] if x["true_e2e_ms"] is not None)
    assert ref["e2e_ms"] <= best < weak.e2e_ms and ref["how"] == "improved by a run" and ref["found_by"]
    assert all(min(ratios(r, ref["e2e_ms"])) >= 1.0 for r in result.runs)
    with RunStore(cfg.store_path) as store:
        stored = store.stored_reference(sc, "best-known")
    assert stored is not None and stored.e2e_ms == ref["e2e_ms"] and stored.found_by == ref["found_by"]
    assert "a run's mapping for 1 workflow(s)" in _reference_summary(result)


def test_the_reference_command_reads_a_store_for_the_best_mapping_known(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "flow.yaml"
    write_scenario_file(_bench_scenario(), path)
    sc = load_scenario(path)  # the file's scenario: the store keys runs by its exact content
    store_path = tmp_path / "runs.sqlite"
    with RunStore(store_path) as store:
        for policy in ("agentic", "ucb1"):
            api.run(sc, policy, rounds=3, store=store)
        store.record_reference(sc, "best-known", _weak(sc, 1.0))
        runs = {i.id for i in store.runs_of(sc)}
        sim = Simulator(sc, noise=False)
        played = [e for i in runs for _, _, m in store.played(i) if (e := sim.e2e(m)) is not None]
    assert len(runs) == 2 and played
    # a search that found nothing better than all-CPU: what the store knows must then show
    monkeypatch.setattr(search_reference, "reference", lambda *a, **k: _weak(sc, 1.0))
    args = ("reference", str(path), "--kind", "best-known", "--json")
    code, text = cli(capsys, *args, "--store", str(store_path))
    got = json.loads(text)
    assert code == 0 and got["e2e_ms"] == min(played) == sim.e2e(Mapping(got["mapping"]))
    assert got["found_by"].split(" ")[1] in runs and got["lower_bound_ms"] == 1.0
    assert json.loads(cli(capsys, *args)[1])["e2e_ms"] == _weak(sc, 1.0).e2e_ms  # without --store: the search's
    code, text = cli(capsys, *args, "--store", str(tmp_path / "missing.sqlite"))
    assert code != 0 and "missing.sqlite" in text and "Traceback" not in text
    (tmp_path / "notes.txt").write_text("not a store")
    for bad in (tmp_path / "notes.txt", tmp_path / "missing.sqlite"):  # refused before the search: even an exact
        code, text = cli(capsys, "reference", "S13", "--store", str(bad))  # reference, which reads no store
        assert code == 2 and bad.name in text and "Traceback" not in text
