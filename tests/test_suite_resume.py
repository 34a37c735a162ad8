"""``hetsched bench --suite random|scale`` killed with SIGKILL resumes from the run store.

The real CLI runs as a subprocess on a real SQLite store. The test freezes it (SIGSTOP) at
intervals and reads the store: once the frozen state holds both finished runs and a run with
some but not all of its rounds recorded, it kills the process outright (SIGKILL, nothing runs
after it), so the kill lands mid-run whatever the machine's speed. The same command then
finishes the suite. Nothing recorded before the kill may be lost, changed or recorded twice,
every run key has exactly one run, and the tables and every round equal those of an
uninterrupted suite.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hetsched.cli.app import EXIT_INTERRUPTED

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to see a process stopped")

RANDOM = ["--suite", "random", "--quick", "--policy", "agentic:rules", "--policy", "greedy-mem", "--rounds", "4"]
SCALE = ["--suite", "scale", "--quick", "--policy", "agentic:rules", "--policy", "greedy-mem", "--policy", "ucb1",
         "--rounds", "4", "--max-seconds", "1"]
"""``--max-seconds 1``: the 20-node workflow's best-known reference search (10 s by default, 60% of the uninterrupted
suite's time) ends sooner; the killed suite reuses that reference whatever its quality (``_seed_references``)."""
WALL_CLOCK_TABLES = {"scale_time.csv"}
"""Tables of wall-clock figures (decision time), which differ between any two runs."""


def _bench(out: Path, args: list[str], jobs: int = 1) -> list[str]:
    return [sys.executable, "-m", "hetsched", "bench", *args, "--out", str(out), "--jobs", str(jobs), "--no-progress"]


def _run(out: Path, args: list[str], jobs: int = 1) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(_bench(out, args, jobs), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done


def _read(store: Path, sql: str, attempts: int = 100) -> list[tuple[object, ...]]:
    for attempt in range(attempts):  # SQLITE_PROTOCOL: a transient WAL-lock race with a writer mid-step
        conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        try:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
        except sqlite3.OperationalError as exc:
            if "locking protocol" not in str(exc) or attempt == attempts - 1:
                raise
        finally:
            conn.close()
        time.sleep(0.05)
    raise AssertionError("unreachable")


def _peek(store: Path, sql: str) -> list[tuple[object, ...]]:
    """:func:`_read` while the suite, frozen, may still be creating the file or be frozen mid-write (then:
    nothing yet; the caller lets the suite go on and looks again). A writer frozen while it updates the WAL
    index makes every read fail with SQLITE_PROTOCOL until it runs again, so retrying while frozen is useless."""
    if not store.exists():
        return []
    try:
        return _read(store, sql, attempts=1)
    except sqlite3.OperationalError as exc:  # no table yet, the file is being created, or a frozen WAL writer
        text = str(exc)
        if any(s in text for s in ("no such table", "locked", "unable to open", "locking protocol")):
            return []
        raise


def _state(pid: int) -> bytes:
    """The process's state letter (b"" once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return bytes(f.read().rsplit(b")", 1)[-1].split()[0])
    except (FileNotFoundError, ProcessLookupError):
        return b""


def _children(pid: int) -> set[int]:
    """Processes the suite started (its worker processes)."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out |= {int(c) for c in (task / "children").read_text().split()}
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return out


def _kill_mid_run(out: Path, args: list[str], jobs: int, sig: signal.Signals = signal.SIGKILL) -> set[int]:
    """Start the suite and send ``sig`` to it (the CLI process alone, as ``kill -9 PID`` does) while, frozen
    with its workers, it has finished runs and a partly recorded one; returns the workers it had."""
    store = out / "runs.sqlite"
    proc = subprocess.Popen(_bench(out, args, jobs), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    workers: set[int] = set()
    try:
        while True:
            assert proc.poll() is None, f"the suite ended before it could be killed mid-run: {proc.stderr!r}"
            os.killpg(proc.pid, signal.SIGSTOP)  # the CLI and its workers
            group = {proc.pid} | _children(proc.pid)
            while not all(_state(p) in (b"T", b"t", b"", b"Z") for p in group):
                time.sleep(0.001)
            states = _peek(store, "SELECT r.status, r.rounds_planned, (SELECT COUNT(*) FROM rounds x WHERE "
                                  "x.run_id = r.id) FROM runs r")
            finished = sum(1 for s, _, _ in states if s == "finished")
            partial = [n for s, planned, n in states if s == "running" and 0 < int(str(n)) < int(str(planned))]
            if finished and partial:
                workers = _children(proc.pid)
                os.kill(proc.pid, sig)
                os.killpg(proc.pid, signal.SIGCONT)
                break
            os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(0.02)
        code = proc.wait(timeout=120)
        assert proc.stderr is not None
        said = proc.stderr.read().decode()
        if sig is signal.SIGKILL:
            assert code == -signal.SIGKILL
        else:  # Ctrl-C: the CLI says what was kept and how to resume, and exits 130
            assert code == EXIT_INTERRUPTED and "interrupted: every finished run and every recorded round is kept" \
                in said and "Traceback" not in said, said
        return workers
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


def _reap(workers: set[int]) -> list[int]:
    """Wait (up to a minute) for the killed suite's workers to end; the ones still alive are killed and returned."""
    deadline = time.monotonic() + 60
    alive = set(workers)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if _state(p) not in (b"", b"Z")}
        time.sleep(0.05)
    for p in alive:  # never leave them running, whatever the test finds
        os.kill(p, signal.SIGKILL)
    return sorted(alive)


ROUNDS_SQL = ("SELECT r.scenario_name, r.policy, r.options_json, r.seed, x.round, x.mapping_code, x.feasible, "
              "x.e2e_ms, x.trace_json FROM rounds x JOIN runs r ON r.id = x.run_id")


def _tables(out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((out / "tables").glob("*.csv")) if p.name not in WALL_CLOCK_TABLES}


def _without_wall_clock(csv: str) -> list[list[str]]:
    rows = [line.split(",") for line in csv.splitlines()]
    drop = [i for i, name in enumerate(rows[0]) if name.endswith("decision_ms")]
    return [[c for i, c in enumerate(row) if i not in drop] for row in rows]


@pytest.mark.parametrize(("args", "jobs", "sig"), [(RANDOM, 1, signal.SIGKILL), (SCALE, 1, signal.SIGKILL),
                                                   (RANDOM, 2, signal.SIGKILL), (RANDOM, 1, signal.SIGINT)],
                         ids=["random", "scale", "random-2-workers", "random-ctrl-c"])
def test_a_suite_killed_with_sigkill_resumes_from_the_store(tmp_path: Path, args: list[str], jobs: int,
                                                           sig: signal.Signals) -> None:
    whole = tmp_path / "whole"
    _run(whole, args)
    for attempt in range(5):
        killed = tmp_path / f"killed{attempt}"
        if "scale" in args:
            # 20-node workflows get a best-known reference from a time-bounded search: give the killed suite the
            # same references (a recorded reference is reused), so its tables can be compared with the whole one's
            killed.mkdir()
            _seed_references(whole / "runs.sqlite", killed / "runs.sqlite")
        workers = _kill_mid_run(killed, args, jobs, sig)
        assert bool(workers) == (jobs > 1)
        assert _reap(workers) == []  # the workers died with the suite: none goes on driving a run
        store = killed / "runs.sqlite"
        before = {row[:5]: row[5:] for row in _read(store, ROUNDS_SQL)}
        stale = _read(store, "SELECT id FROM runs WHERE status <> 'finished'")  # running (killed) or interrupted
        if stale:
            break
        # the freeze fell inside a commit: the run's last commit was in the WAL file but not yet in its index,
        # so the peek saw the run partial while the kill came after it had finished (the first reader after
        # the kill recovers that commit). Kill another suite at another moment.
    assert before and stale  # the kill left a run partly recorded

    again = _run(killed, args, jobs)
    assert "resumed" in again.stdout and "resumed 0" not in again.stdout, again.stdout
    after = {row[:5]: row[5:] for row in _read(store, ROUNDS_SQL)}
    assert len(after) == len(_read(store, ROUNDS_SQL))  # no round recorded twice
    assert {k: after.get(k) for k in before} == before  # nothing recorded before the kill was lost or changed
    keys = _read(store, "SELECT scenario_name, policy, options_json, seed, COUNT(*), MIN(status), MAX(status) "
                        "FROM runs GROUP BY 1, 2, 3, 4")
    assert keys and all(n == 1 and lo == hi == "finished" for *_, n, lo, hi in keys)  # one finished run a key
    assert {row[0] for row in stale} <= {str(r[0]) for r in _read(store, "SELECT id FROM runs")}  # continued
    whole_rounds = {row[:5]: row[5:8] for row in _read(whole / "runs.sqlite", ROUNDS_SQL)}
    assert {k: v[:3] for k, v in after.items()} == whole_rounds  # every round as in the uninterrupted suite
    tables, expected = _tables(killed), _tables(whole)
    assert tables.keys() == expected.keys() and tables
    for name in tables:
        assert _without_wall_clock(tables[name]) == _without_wall_clock(expected[name]), name


def _seed_references(src: Path, dst: Path) -> None:
    """Create ``dst`` as a run store holding ``src``'s references and no run."""
    from hetsched.store import RunStore

    RunStore(dst).close()
    with sqlite3.connect(dst) as conn:
        conn.execute(f"ATTACH '{src}' AS src")
        conn.execute("INSERT INTO scenario_references SELECT * FROM src.scenario_references")
        conn.commit()
        conn.execute("DETACH src")
