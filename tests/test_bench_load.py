"""``hetsched bench --suite load``: its runner's invariants, its report, and its CLI."""

from __future__ import annotations

import csv
import math

import pytest
from tests.factories import run_cli

from hetsched.bench.load import LOADED, SINGLE, LoadSuiteConfig, knee, load_specs, run_load_suite, write_load_report
from hetsched.bench.spec import PolicySpec, default_specs
from hetsched.model.files import load_scenario
from hetsched.model.workload import Workload
from hetsched.search.load import predict_window


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    sc = load_scenario("fanout_light")
    specs = (PolicySpec("all-gpu"), PolicySpec("heft-load"), PolicySpec("agentic", {"decider": "rules"}))
    cfg = LoadSuiteConfig((sc,), (1, 4), specs, rounds=3, out=tmp_path_factory.mktemp("load"))
    return sc, run_load_suite(cfg)


def test_the_loaded_optimum_is_never_beaten_and_every_policy_is_at_every_load(quick_result) -> None:  # type: ignore[no-untyped-def]
    _sc, result = quick_result
    labels = {p.policy for p in result.points}
    assert labels == {SINGLE, LOADED, "all-gpu", "heft-load", "agentic:rules"}
    for k in (1, 4):
        pts = [p for p in result.points if p.clients == k]
        assert len(pts) == 5
        best = next(p for p in pts if p.policy == LOADED)
        assert all(best.predicted_p95_ms <= p.predicted_p95_ms for p in pts if p.feasible)
        for p in pts:  # measured windows carry ordered percentiles
            if p.measured:
                assert p.measured["p50_ms"] <= p.measured["p95_ms"] <= p.measured["p99_ms"]


def test_model_p95_is_the_mappings_noise_free_window(quick_result) -> None:  # type: ignore[no-untyped-def]
    sc, result = quick_result
    from hetsched.model import Mapping, Placement

    for p in result.points:
        if p.mapping == "-":
            continue
        m = Mapping(zip(sc.workflow.node_ids, (Placement.of_code("CNQ".index(ch)) for ch in p.mapping), strict=True))
        wl = Workload.closed(p.clients, requests=max(24, 8 * p.clients))
        assert predict_window(sc, m, wl).p95_ms == p.predicted_p95_ms


def test_report_has_percentiles_winners_and_the_curves(quick_result, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, result = quick_result
    paths = write_load_report(result)
    html = paths["html"].read_text()
    assert "p95 ms" in html and "p99 ms" in html and "data:image/png;base64," in html
    with open(paths["tables"] / "load_percentiles.csv") as f:
        rows = list(csv.DictReader(f))
    assert {"p50 ms", "p95 ms", "p99 ms", "throughput /s"} <= set(rows[0])
    assert len(rows) == len(result.points)
    assert (paths["tables"] / "load_winners.csv").exists() and paths["figure"].stat().st_size > 0


def test_knee_is_the_point_of_highest_power(quick_result) -> None:  # type: ignore[no-untyped-def]
    _, result = quick_result
    pts = [p for p in result.points if p.policy == "all-gpu"]
    kp = knee(pts)
    assert kp is not None
    power = [p.predicted_throughput_per_s / p.predicted_p95_ms for p in pts]
    assert kp.predicted_throughput_per_s / kp.predicted_p95_ms == max(power)
    assert knee([]) is None and math.isfinite(kp.predicted_p95_ms)


def test_heft_load_runs_under_load_only() -> None:
    assert "heft-load" not in {s.policy for s in default_specs()}
    assert "heft-load" in {s.policy for s in default_specs(under_load=True)}
    assert "oracle" not in {s.policy for s in load_specs(None, "sim")}
    assert [s.policy for s in load_specs(None, "local")] == ["all-gpu"]


def test_cli_load_suite_writes_the_report(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli(capsys, "bench", "--suite", "load", "--scenario", "fanout_light", "-p", "all-gpu",
                             "--rounds", "2", "--out", str(tmp_path), "--no-progress")
    assert code == 0, err
    assert (tmp_path / "report.html").exists() and "single / loaded" in out


def test_cli_load_suite_refuses_options_it_does_not_take(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run_cli(capsys, "bench", "--suite", "load", "--store", str(tmp_path / "s.sqlite"),
                           "--out", str(tmp_path))
    assert code == 2 and "--suite load" in err and "Traceback" not in err


def test_cli_oracle_under_load_names_the_loaded_optimum(capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from hetsched.search.load import load_optimum

    code, out, err = run_cli(capsys, "oracle", "fanout_light", "--clients", "4", "--requests", "24", "--json")
    assert code == 0, err
    got = json.loads(out)
    best = load_optimum(load_scenario("fanout_light"), Workload.closed(4, requests=24))
    assert best is not None and got["p95_ms"] == best.value and got["exact"]
    assert got["mapping"] == best.mapping.to_dict()
    assert got["single_request_optimum"]["p95_ms"] > got["p95_ms"]


@pytest.mark.parametrize("args, message", [
    (("--objective", "throughput"), "apply under load"),
    (("--clients", "2", "--objective", "speed"), "accepted: p95, throughput"),
    (("--clients", "2", "--objective", "throughput"), "--slo-ms"),
])
def test_cli_oracle_load_flags_are_checked(capsys, args, message) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run_cli(capsys, "oracle", "S6", *args)
    assert code == 2 and message in err and "Traceback" not in err
