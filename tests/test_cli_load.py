"""``hetsched run`` under load: the load flags, percentiles in the human output and --json, the
run store (resume keeps the workload) and a trace with a lane per request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.factories import run_cli

from hetsched.model.workload import Workload
from hetsched.store import RunStore


def test_json_has_the_workload_and_each_windows_percentiles(capsys: Any) -> None:
    code, out, _ = run_cli(capsys, "run", "S5", "-p", "all-gpu", "--rounds", "2", "--clients", "3", "--requests",
                           "6", "--slo-ms", "2000", "--no-store", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["workload"]["arrivals"] == "closed" and data["workload"]["clients"] == 3
    for r in data["rounds"]:
        load = r["load"]
        assert load["requests"] == 6 and len(load["latency_ms"]) == 6
        assert r["e2e_ms"] == load["p95_ms"] and load["p50_ms"] <= load["p95_ms"] <= load["p99_ms"]
        assert load["slo_ms"] == 2000 and 0 <= load["slo_attainment"] <= 1
    ref = data["reference"]  # under load the reference is the loaded optimum: a window's p95, noise-free
    assert ref["kind"] == "oracle" and all(r["e2e_ms"] >= 0.9 * ref["e2e_ms"] for r in data["rounds"])


def test_human_output_shows_percentiles_per_round(capsys: Any) -> None:
    code, out, _ = run_cli(capsys, "run", "S5", "-p", "all-cpu", "--rounds", "1", "--rate", "2", "--duration", "3",
                           "--no-store")
    assert code == 0
    assert "under load: open loop, Poisson 2/s, 3 s" in out
    for column in ("p50 ms", "p95 ms", "p99 ms", "per s", "GPU util"):
        assert column in out
    assert "round 0/1: p95" in out


@pytest.mark.parametrize(("args", "fragments"), [
    (["--clients", "2", "--rate", "3"], ["--clients and --rate", "one arrival process"]),
    (["--requests", "5"], ["--requests", "give --clients K, --rate PER_S or --arrivals FILE"]),
    (["--rate", "0"], ["--rate 0", "> 0"]),
    (["--clients", "2", "--requests", "3", "--duration", "1"], ["give one of the two"]),
    (["--rate", "2", "--think-ms", "5"], ["--think-ms", "closed loop"]),
    (["--arrivals", "no_such_arrivals.txt"], ["no_such_arrivals.txt", "not found"]),
    (["--clients", "0"], ["--clients", "got 0; accepted: an integer from 1 to 10000"]),
])
def test_bad_load_flags_exit_2_naming_the_flag(capsys: Any, args: list[str], fragments: list[str]) -> None:
    code, out, err = run_cli(capsys, "run", "S5", "--rounds", "1", "--no-store", *args)
    assert code == 2, out + err
    for f in fragments:
        assert f in err, (f, err)


def test_the_store_keeps_the_workload_and_resume_runs_windows(capsys: Any, tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    code, out, _ = run_cli(capsys, "run", "S5", "-p", "all-gpu", "--rounds", "1", "--clients", "2", "--requests", "4",
                           "--store", str(store), "--json")
    assert code == 0
    run_id = json.loads(out)["run_id"]
    code, out, err = run_cli(capsys, "run", "--resume", run_id, "--rounds", "2", "--store", str(store), "--json")
    assert code == 0, err
    with RunStore(store) as st:
        assert st.scenario(run_id).workload == Workload.closed(2, requests=4)
        rounds = st.rounds(run_id)
    assert [r.trace.load.requests for r in rounds if r.trace.load is not None] == [4, 4]
    assert [r.trace.e2e_ms for r in rounds] == [r.trace.load.p95_ms for r in rounds if r.trace.load is not None]
    code, _, err = run_cli(capsys, "run", "--resume", run_id, "--clients", "3", "--store", str(store))
    assert code == 2 and "--clients" in err


def test_trace_has_a_lane_per_request(capsys: Any, tmp_path: Path) -> None:
    path = tmp_path / "load.json"
    (tmp_path / "arrivals.txt").write_text("0\n0\n250\n")
    code, _, err = run_cli(capsys, "run", "S13", "-p", "greedy-mem", "--rounds", "1", "--arrivals",
                           str(tmp_path / "arrivals.txt"), "--no-store", "--trace", str(path))
    assert code == 0, err
    events = json.loads(path.read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    req_pid = next(pid for pid, name in procs.items() if name == "round 0 · requests")
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == req_pid}
    assert {"request 0", "request 1", "request 2"} <= threads
    sent = sorted(e["ts"] for e in events if e.get("ph") == "i" and e["pid"] == req_pid)
    assert sent == [0.0, 0.0, 250_000.0]
    slices = [e for e in events if e.get("ph") == "X" and e["pid"] != req_pid and e["name"].startswith("A#")]
    assert len(slices) == 3  # the device processes show node A of every request
    flight = [e["args"]["requests"] for e in events if e.get("ph") == "C" and e["name"] == "requests in flight"]
    assert flight[:2] == [1, 2] and flight[-1] == 0 and len(flight) == 6  # 3 sends, 3 returns
    assert any(e["name"] == "utilization (%)" for e in events if e.get("ph") == "C")


def test_simulate_a_window_what_if(capsys: Any) -> None:
    args = ("simulate", "S5", "A=gpu_now,B=cpu,C=cpu,D=gpu_now", "--clients", "4", "--requests", "30", "--no-noise")
    code, out, _ = run_cli(capsys, *args, "--slo-ms", "1000")
    assert code == 0
    assert "closed loop, 4 clients, 30 requests" in out and "p95" in out and "SLO 1000 ms" in out
    assert "... 10 more requests" in out
    code, out, _ = run_cli(capsys, *args, "--json")
    data = json.loads(out)
    assert len(data["requests"]) == 30 and data["load"]["requests"] == 30
    assert data["e2e_ms"] == data["load"]["p95_ms"] and data["workload"]["clients"] == 4
    code, out, _ = run_cli(capsys, "simulate", "S13", "A=gpu_now,B=gpu_queue,C=gpu_now,D=cpu", "--clients", "2")
    assert code == 0 and "infeasible" in out and "under load" in out  # the one-request optimum cannot serve a window


def test_show_run_lists_each_windows_percentiles(capsys: Any, tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    code, out, _ = run_cli(capsys, "run", "S5", "-p", "all-gpu", "--rounds", "2", "--rate", "3", "--requests", "8",
                           "--store", str(store), "--json")
    run_id = json.loads(out)["run_id"]
    code, out, err = run_cli(capsys, "show-run", run_id, "--store", str(store))
    assert code == 0, err
    assert "under load: open loop, Poisson 3/s, 8 requests" in out and "p99 ms" in out


def test_show_names_a_scenarios_workload(capsys: Any, tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("name: w\nnodes: {A: doc_merger}\nworkload: {arrivals: closed, clients: 1, requests: 5}\n")
    code, out, _ = run_cli(capsys, "show", str(path))
    assert code == 0 and "workload: closed loop, 1 client, 5 requests" in out


def test_validate_checks_the_workload_section(capsys: Any, tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("name: g\nnodes: {A: doc_merger}\nworkload: {arrivals: open, rate_per_s: 2, duration_s: 5}\n")
    bad.write_text("name: b\nnodes: {A: doc_merger}\nworkload: {arrivals: open, rate_per_s: -2, requests: 3}\n")
    code, out, _ = run_cli(capsys, "validate", str(good))
    assert code == 0 and "workload: open loop, Poisson 2/s, 5 s" in out
    for args in (("validate", str(bad)), ("run", str(bad), "--no-store")):
        code, _, err = run_cli(capsys, *args)
        assert code == 2 and f"file {bad}: workload.rate_per_s = -2" in err and "greater than 0" in err
