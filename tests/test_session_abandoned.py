"""A node-by-node request (``begin_request``) whose driver never finishes it must not hang the
session: a handle dropped unfinished is ended as a recorded failed round when it is garbage-collected
(its slot and its thread are let go), and ``close(timeout=...)`` ends the handles still held after the
timeout, recorded with that reason. Every call that could hang runs in a thread joined with a generous
limit that only a hang exceeds (the test fails instead of hanging); no duration is asserted."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import hetsched as hs
from hetsched.model import InfeasibleKind, RoundRecord
from hetsched.session import ABANDONED, RequestHandle
from hetsched.store import RunStore

STANDIN = {"device": "standin"}
HANG_S = 120.0  # only a hang takes this long


def in_thread(fn: Callable[[], object], what: str) -> dict[str, object]:
    """Run ``fn`` in a daemon thread; fail (never hang) if it has not returned after HANG_S."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # kept for the test to re-raise, never swallowed
            box["error"] = exc

    t = threading.Thread(target=run, name=what, daemon=True)
    t.start()
    t.join(timeout=HANG_S)
    assert not t.is_alive(), f"{what} hung"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box


def workflow() -> hs.Workflow:
    return (hs.Workflow("two").node("A", hs.function_tool("inc", lambda x: x + 1))
            .node("B", hs.function_tool("dbl", lambda x: 2 * x), after="A"))


def stored_rounds(db: Path) -> list[RoundRecord]:
    store = RunStore(db)
    try:
        (run,) = store.runs()
        return store.rounds(run.id)
    finally:
        store.close()


def test_a_dropped_handle_is_recorded_as_abandoned_and_close_does_not_hang(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    s = hs.Session(workflow(), store=db, name="app", executor_options=STANDIN, warm_start=False)
    handle = s.begin_request(thread_bound=False)
    assert handle.run_node("A", [1]) == 2
    del handle  # the driver raised and dropped it: finish() is never called
    gc.collect()
    in_thread(s.close, "close")
    (record,) = stored_rounds(db)
    assert record.trace.kind is InfeasibleKind.ABANDONED  # told apart from a failed tool
    assert record.trace.reason == f"abandoned: {ABANDONED}"
    assert set(record.trace.nodes) == {"A"}  # what the request ran is kept


def test_a_dropped_handle_lets_the_next_request_run() -> None:
    s = hs.Session(workflow(), store=False, executor_options=STANDIN, max_in_flight=1)
    s.begin_request(thread_bound=False).run_node("A", [1])  # the handle is dropped at once
    gc.collect()
    box = in_thread(lambda: s.submit(3), "a submit behind the dropped request")
    response = box["result"]
    assert isinstance(response, hs.Response) and response.outputs == {"B": 8} and response.round == 1
    assert s.rounds[0].trace.kind is InfeasibleKind.ABANDONED and ABANDONED in s.rounds[0].trace.reason
    in_thread(s.close, "close")


def test_a_thread_that_dropped_its_handle_may_drive_the_next_request_and_close() -> None:
    s = hs.Session(workflow(), store=False, executor_options=STANDIN)
    handle = s.begin_request()  # thread-bound
    handle.run_node("A", [1])
    del handle
    gc.collect()
    with s.begin_request() as req:  # this thread is not 'driving a request' any more
        req.run_node("B", [req.run_node("A", [4])])
    assert req.round == 1 and s.rounds[1].trace.feasible
    in_thread(s.close, "close")
    assert [r.trace.feasible for r in s.rounds] == [False, True]


def test_close_with_a_timeout_ends_a_held_unfinished_handle_and_lets_submits_finish(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    release = threading.Event()

    def slow(x: int) -> int:
        if not release.wait(HANG_S):
            raise TimeoutError("the test never released the submit")
        return x

    wf = hs.Workflow("mixed").node("A", hs.function_tool("inc", lambda x: x + 1)).node(
        "S", hs.function_tool("slow", slow))
    s = hs.Session(wf, store=db, name="app", executor_options=STANDIN, warm_start=False)
    held = s.begin_request(thread_bound=False)  # its driver keeps it and never finishes it
    held.run_node("A", [1])
    submitted: dict[str, object] = {}
    client = threading.Thread(target=lambda: submitted.update(r=s.submit(7)), daemon=True)
    client.start()

    def close_then_release() -> None:
        # the submit is still running when the timeout ends the held request; it finishes afterwards
        watcher = threading.Thread(target=lambda: (_wait_ended(held), release.set()), daemon=True)
        watcher.start()
        s.close(timeout=0.2)
        watcher.join(HANG_S)

    in_thread(close_then_release, "close(timeout=0.2)")
    client.join(HANG_S)
    assert not client.is_alive()
    response = submitted["r"]
    assert isinstance(response, hs.Response) and response.trace.feasible
    with pytest.raises(hs.InputError, match=r"ended by the session: the session closed \(close\(timeout=0.2\)\)"):
        held.run_node("A", [2])
    with pytest.raises(hs.InputError, match="ended by the session"):
        held.finish()
    with held:  # leaving a with block of an ended request is quiet
        pass
    rounds = stored_rounds(db)
    assert len(rounds) == 2  # nothing recorded is lost
    ended = rounds[held.round]
    assert ended.trace.kind is InfeasibleKind.ABANDONED and "close(timeout=0.2)" in ended.trace.reason
    assert set(ended.trace.nodes) == {"A"}
    assert rounds[response.round].trace.feasible


def _wait_ended(handle: RequestHandle) -> None:
    """Wait until the session has ended ``handle``'s request (close's timeout)."""
    deadline = time.monotonic() + HANG_S
    while handle.round < 0 and time.monotonic() < deadline:
        time.sleep(0.001)


def test_close_timeout_is_checked() -> None:
    s = hs.Session(workflow(), store=False, executor_options=STANDIN)
    with pytest.raises(hs.InputError, match="timeout must be >= 0 seconds"):
        s.close(timeout=-1)
    in_thread(s.close, "close")


def test_a_failed_tool_and_an_abandoned_request_read_apart_in_the_store_and_the_cli(tmp_path: Path) -> None:
    """Real SQLite: a request whose driver fails it stays ``tool_error``; a dropped one is ``abandoned``, in
    the stored rounds, ``show-run`` (table and --json) and the round summaries."""
    import json
    import re

    from typer.testing import CliRunner

    from hetsched.cli import app, load_commands

    db = tmp_path / "runs.db"
    s = hs.Session(workflow(), store=db, name="app", executor_options=STANDIN, warm_start=False)
    failed = s.begin_request(thread_bound=False)
    failed.run_node("A", [1])
    failed.fail("the caller's code broke")
    failed.finish()
    s.begin_request(thread_bound=False).run_node("A", [1])  # dropped at once
    gc.collect()
    in_thread(s.close, "close")
    rounds = stored_rounds(db)
    assert [r.trace.kind for r in rounds] == [InfeasibleKind.TOOL_ERROR, InfeasibleKind.ABANDONED]
    with RunStore(db, read_only=True) as st:
        (run,) = st.runs()
        assert [o.kind for o in st.outcomes(run.id)] == ["tool_error", "abandoned"]
    load_commands()
    runner = CliRunner()
    shown = runner.invoke(app, ["show-run", run.id, "--store", str(db)])
    assert shown.exit_code == 0, shown.output
    rows = [ln.split(None, 6) for ln in shown.stdout.splitlines() if re.match(r" +[01] +C C ", ln)]
    assert [row[6][:15] for row in rows] == ["no: tool error:", "no: abandoned: "], shown.stdout
    exported = json.loads(runner.invoke(app, ["show-run", run.id, "--store", str(db), "--json"]).stdout)
    assert [r["trace"]["infeasibility"]["kind"] for r in exported["rounds"]] == ["tool_error", "abandoned"]


def test_an_abandoned_round_is_no_evidence_against_its_mapping() -> None:
    """The monitor lists no infeasibility and no last round for a request whose driver went away: the
    deciders must not avoid the mapping it ran under (a failed tool's round still counts)."""
    from hetsched.deciders.evidence import measured_infeasible
    from hetsched.model import Infeasibility, Mapping, Placement, Proposal, Trace
    from hetsched.monitor import Monitor

    s = hs.Session(workflow(), store=False, executor_options=STANDIN)
    sc = s.scenario
    in_thread(s.close, "close")
    cpu = sc.uniform(Placement.CPU)
    other = Mapping({**cpu.to_dict(), "A": Placement.GPU_NOW})
    ran = Trace(mapping=cpu, feasible=True, e2e_ms=5.0, nodes={}, vram_budget_mb=sc.machine.vram_budget_mb)

    def gone(kind: InfeasibleKind) -> Trace:
        return Trace.refused(other, Infeasibility(kind, ABANDONED), vram_budget_mb=sc.machine.vram_budget_mb)

    for kind, counted in ((InfeasibleKind.ABANDONED, False), (InfeasibleKind.TOOL_ERROR, True)):
        history = [RoundRecord(0, Proposal(cpu), ran), RoundRecord(1, Proposal(other), gone(kind))]
        records = Monitor(sc).observe(history).records
        assert (other in measured_infeasible(records)) is counted, (kind, records)
