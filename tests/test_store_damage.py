"""The run store when things go wrong: a full disk (SQLite's page limit, and a real tiny
filesystem when the tests run as root), random bytes written into the file, damaged rows and
dropped tables, a read-only file or folder, and drivers killed with SIGKILL. Nothing may raise a
traceback, one bad row may not hide the others, and nothing recorded may be lost."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.factories import run_cli as cli

from hetsched.cli.app import error_text
from hetsched.loop import LoopConfig, continue_run, ensure_run, run_key, run_recorded
from hetsched.model.files import load_scenario
from hetsched.store import RunBusyError, RunStore, StoreError, schema
from hetsched.store.locks import lock_path

SRC = str(Path(__file__).resolve().parents[1] / "src")
CHAIN = load_scenario("chain")
VRAM = load_scenario("vram_3way")


def hetsched(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "hetsched", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def make_store(path: Path, runs: int = 3) -> list[str]:
    """A store with ``runs`` finished agentic runs (transcripts, observations, probes) on vram_3way."""
    ids = []
    with RunStore(path) as store:
        for seed in range(runs):
            key = run_key(VRAM, "agentic", LoopConfig(rounds=4, seed=seed),
                          options={"decider": "rules", "probe_budget": 10 + seed})  # distinct rows
            result = run_recorded(key, store=store)
            assert result.run_id is not None
            ids.append(result.run_id)
    return ids


# ---------------------------------------------------------------- a full disk
def test_a_full_disk_is_a_clear_error_and_loses_nothing_recorded(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    key = run_key(VRAM, "agentic", LoopConfig(rounds=12, seed=3), options={"decider": "rules"})
    with RunStore(path) as store:
        conn = store._conn()
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 12}")  # SQLite answers SQLITE_FULL past this size
        with pytest.raises(StoreError) as exc:
            run_recorded(key, store=store)
        (info,) = store.runs()
        message = str(exc.value)
        assert "the disk is full" in message and "Nothing recorded before was lost" in message
        assert f"`hetsched.resume({info.id!r})`" in message and str(path) in message
        assert f"`hetsched run --resume {info.id}`" in error_text(exc.value)  # the CLI names the command
        done = store.rounds(info.id)
        assert 0 < len(done) < 12 and [r.round for r in done] == list(range(len(done)))
        conn.execute("PRAGMA max_page_count = 1000000")  # space freed
        continue_run(store, info.id)
        resumed = store.rounds(info.id)
    with RunStore(tmp_path / "clean.sqlite") as clean:
        uninterrupted = run_recorded(key, store=clean).rounds
    def facts(rounds: list[Any]) -> list[Any]:  # what the rounds measured (decision latencies are wall time)
        return [(r.round, r.mapping, r.trace, [(p.mapping, p.trace) for p in r.probes]) for r in rounds]

    assert facts(resumed) == facts(uninterrupted) and resumed[: len(done)] == done


def _in_namespace(script: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a shell script in a private mount namespace (root only), hetsched on the path."""
    env = {**os.environ, "PYTHONPATH": SRC, "PY": sys.executable}
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=timeout,
                          env=env)


needs_root_mounts = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a real full or read-only filesystem needs root and unshare(1) to mount one privately",
)


@needs_root_mounts
def test_a_real_full_filesystem_stops_the_run_with_a_clear_message(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    script = textwrap.dedent(f"""
        set -u
        mount -t tmpfs -o size=360k tmpfs {disk} || exit 97
        "$PY" -m hetsched run S13 -p agentic --decider rules -r 60 --store {disk}/runs.sqlite >{out}/run.out 2>{out}/run.err
        echo $? > {out}/run.rc
        "$PY" -m hetsched runs --store {disk}/runs.sqlite --json >{out}/runs.json 2>{out}/runs.err
        echo $? > {out}/runs.rc
        """)
    proc = _in_namespace(script)
    if proc.returncode == 97:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    err = (out / "run.err").read_text()
    assert (out / "run.rc").read_text().strip() == "2", err
    assert "Traceback" not in err and "the disk is full" in err and "Nothing recorded before was lost" in err
    assert (out / "runs.rc").read_text().strip() == "0", (out / "runs.err").read_text()
    (run,) = json.loads((out / "runs.json").read_text())
    assert f"--resume {run['id']}" in err and 0 < run["rounds_done"] < 60


@needs_root_mounts
def test_a_tiny_full_disk_and_a_read_only_disk_are_named_as_such(tmp_path: Path) -> None:
    full, ro, out = tmp_path / "full", tmp_path / "ro", tmp_path / "out"
    for folder in (full, ro, out):
        folder.mkdir()
    script = textwrap.dedent(f"""
        set -u
        mount -t tmpfs -o size=8k tmpfs {full} || exit 97
        "$PY" -m hetsched run chain -r 1 --store {full}/runs.sqlite >/dev/null 2>{out}/full.err
        echo $? > {out}/full.rc
        mount -t tmpfs -o size=1m tmpfs {ro} || exit 97
        "$PY" -m hetsched run chain -r 1 --store {ro}/runs.sqlite >/dev/null 2>&1 || exit 98
        mount -o remount,ro {ro} || exit 97
        "$PY" -m hetsched run chain -r 1 --store {ro}/runs.sqlite >/dev/null 2>{out}/ro.err
        echo $? > {out}/ro.rc
        """)
    proc = _in_namespace(script)
    if proc.returncode == 97:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    for name, said in (("full", "is full"), ("ro", "read-only file system")):
        err = " ".join((out / f"{name}.err").read_text().split())
        assert (out / f"{name}.rc").read_text().strip() == "2", err
        assert said in err and "permissions" not in err and "Traceback" not in err, err


# ---------------------------------------------------------------- damaged files and rows
def test_random_bytes_in_a_stored_value_mark_that_run_and_spare_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.sqlite"
    ids = make_store(path)
    with sqlite3.connect(path) as raw:  # the bytes of run 1's options, somewhere in the middle of the file
        options = raw.execute("SELECT options_json FROM runs WHERE id = ?", (ids[1],)).fetchone()[0]
    data = bytearray(path.read_bytes())
    at = data.find(options.encode())
    assert at > 0 and data.find(options.encode(), at + 1) < 0
    data[at + 2 : at + 6] = b"\xff\xfe\xfd\xfc"
    path.write_bytes(bytes(data))
    code, out, _ = cli(capsys, "runs", "--store", str(path), "--json")
    listed = {r["id"]: r for r in json.loads(out)}
    assert code == 0 and set(listed) == set(ids)
    assert "not UTF-8" in listed[ids[1]]["damage"] and not listed[ids[0]]["damage"]
    code, out, _ = cli(capsys, "runs", "--store", str(path))
    assert code == 0 and "damaged" in out and ids[0] in out and ids[2] in out
    code, _, err = cli(capsys, "show-run", ids[1], "--store", str(path))
    assert code == 2 and f"run store {path} is damaged" in err and "quick_check" in err and ".recover" in err
    shown = " ".join(err.split())  # the CLI names its command and flag; the library its API (below)
    assert f"still listed by `hetsched runs --store {path}`" in shown and "then use --store recovered.sqlite" in shown
    with RunStore(path, read_only=True) as store, pytest.raises(StoreError) as damaged:
        store.load(ids[1])
    assert f"still listed by `RunStore({str(path)!r}).runs()`" in str(damaged.value)
    assert "then use `store='recovered.sqlite'`" in str(damaged.value) and "--" not in str(damaged.value)
    assert cli(capsys, "show-run", ids[2], "--store", str(path))[0] == 0
    code, _, err = cli(capsys, "run", "--resume", ids[1], "--store", str(path))
    assert code == 2 and "damaged" in err


CORRUPTIONS: dict[str, tuple[str, str, Any]] = {
    # name: (table, column, value)
    "options not JSON": ("runs", "options_json", "{oops"),
    "options a list": ("runs", "options_json", "[1, 2]"),
    "options nested deep": ("runs", "options_json", "[" * 100_000 + "]" * 100_000),
    "executor options not JSON": ("runs", "executor_options_json", "nope"),
    "reference not a reference": ("runs", "reference_json", '{"kind": "magic"}'),
    "scenario valid JSON, not a scenario": ("runs", "scenario_json", '{"name": 3}'),
    "scenario not UTF-8": ("runs", "scenario_json", b"\xff\xfe"),
    "seed a string": ("runs", "seed", "seven"),
    "status unknown": ("runs", "status", "exploded"),
    "created_at a number": ("runs", "created_at", 12345),
    "trace not JSON": ("rounds", "trace_json", "{"),
    "mapping not a mapping": ("rounds", "mapping_json", '{"A": "tpu"}'),
    "info a number": ("rounds", "info_json", "12"),
    "decision not UTF-8": ("rounds", "decision_json", b"\xc3\x28"),
    "probe trace empty": ("probes", "trace_json", "{}"),
    "observation not JSON": ("observations", "data_json", "{]"),
    "transcript latency text": ("transcript", "latency_ms", "slow"),
}


def _corrupt(path: Path, run_id: str, table: str, column: str, value: Any) -> None:
    key = "id" if table == "runs" else "run_id"
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA ignore_check_constraints = ON")
        if isinstance(value, bytes):  # bytes stored as TEXT: what random bytes in the file look like
            raw.execute(f"UPDATE {table} SET {column} = CAST(? AS TEXT) WHERE {key} = ?", (value, run_id))
        else:
            raw.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (value, run_id))


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_one_damaged_row_never_hides_the_others(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    path = tmp_path / "runs.sqlite"
    ids = make_store(path)
    _corrupt(path, ids[1], *CORRUPTIONS[case])
    code, out, _ = cli(capsys, "runs", "--store", str(path), "--json")
    assert code == 0 and {r["id"] for r in json.loads(out)} == set(ids)
    assert cli(capsys, "runs", "--store", str(path))[0] == 0
    for good in (ids[0], ids[2]):
        assert cli(capsys, "show-run", good, "--store", str(path))[0] == 0
    for args in (("show-run", ids[1]), ("show-run", ids[1], "--json"), ("show-run", ids[1], "--full"),
                 ("run", "--resume", ids[1])):
        code, _, err = cli(capsys, *args, "--store", str(path))
        assert code in (0, 2), (args, err)
        if code == 2:
            assert str(path) in err and ids[1] in err, err
    with RunStore(path) as store:  # the bench's lookup skips the damaged run instead of failing
        assert store.find_run(run_key(VRAM, "agentic", LoopConfig(rounds=4, seed=0),
                                      options={"decider": "rules", "probe_budget": 10})) is not None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.floats(min_value=0.0, max_value=1.0), size=st.integers(min_value=1, max_value=600),
       seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_random_bytes_anywhere_in_the_file_never_raise_a_traceback(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], offset: float, size: int, seed: int
) -> None:
    base = tmp_path_factory.getbasetemp() / "damage-base.sqlite"
    if not base.exists():
        make_store(base, runs=3)
    path = tmp_path_factory.mktemp("damage") / "runs.sqlite"
    shutil.copyfile(base, path)
    data = bytearray(path.read_bytes())
    at = int(offset * (len(data) - 1))
    data[at : at + size] = random.Random(seed).randbytes(min(size, len(data) - at))
    path.write_bytes(bytes(data))
    code, out, err = cli(capsys, "runs", "--store", str(path), "--json")
    assert code in (0, 2)
    if code == 2:
        assert str(path) in err
        return
    for run in json.loads(out):
        for args in (("show-run", run["id"]), ("show-run", run["id"], "--json")):
            code, _, err = cli(capsys, *args, "--store", str(path))
            assert code in (0, 2) and (code == 0 or str(path) in err), err


@pytest.mark.parametrize("table", sorted(schema._OUR_TABLES))
def test_a_dropped_table_is_named_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str) -> None:
    path = tmp_path / "runs.sqlite"
    ids = make_store(path, runs=1)
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA foreign_keys = OFF")
        raw.execute(f"DROP TABLE {table}")
    for args in (("runs",), ("show-run", ids[0]), ("run", "chain", "-r", "1")):
        code, _, err = cli(capsys, *args, "--store", str(path))
        assert code == 2 and f"has no table {table}" in err and ".recover" in err, err


def test_damage_found_by_quick_check_is_quoted(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    make_store(path, runs=3)
    with sqlite3.connect(path) as raw:
        page_size = raw.execute("PRAGMA page_size").fetchone()[0]
        root = raw.execute("SELECT rootpage FROM sqlite_master WHERE name = 'rounds'").fetchone()[0]
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    data[start : start + 8] = b"\x0d\x00\x00\xff\xff\xff\xff\xff"  # a b-tree page header that makes no sense
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError) as exc, RunStore(path, read_only=True) as store:
        for info in store.runs():
            store.load(info.id)
    message = str(exc.value)
    assert f"run store {path}" in message and ("quick_check" in message or "damaged" in message)


def _damage_page(path: Path, name: str) -> None:
    """Write a b-tree page header that makes no sense over the root page of table or index ``name``."""
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the main file
        page_size = raw.execute("PRAGMA page_size").fetchone()[0]
        root = raw.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    data[start : start + 8] = b"\x0d\x00\x00\xff\xff\xff\xff\xff"
    path.write_bytes(bytes(data))


def test_one_damaged_page_never_hides_the_runs_that_read_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.sqlite"
    ids = make_store(path, runs=3)
    _damage_page(path, "runs_by_created")  # the index the listing's ORDER BY reads; show-run never does
    code, out, err = cli(capsys, "runs", "--store", str(path), "--json")
    assert code == 0, err
    assert [r["id"] for r in json.loads(out)] == ids[::-1]  # every run, newest first
    assert "is damaged" in err and ".recover" in err and "still listed by `hetsched runs" not in err
    code, out, _ = cli(capsys, "runs", "--store", str(path))
    assert code == 0 and all(i in out for i in ids)
    for run_id in ids:
        assert cli(capsys, "show-run", run_id, "--store", str(path))[0] == 0
    with RunStore(path, read_only=True) as store:  # the filters still apply
        assert [i.id for i in store.runs(limit=1)] == ids[-1:]
        assert store.runs(policy="no such policy") == []


def test_a_damaged_page_of_the_rounds_marks_the_runs_it_hides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.sqlite"
    ids = make_store(path, runs=3)
    _damage_page(path, "sqlite_autoindex_rounds_1")  # the rounds of every run are counted through it
    code, out, err = cli(capsys, "runs", "--store", str(path), "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert {r["id"] for r in listed} == set(ids)
    assert all("its rounds cannot be read" in r["damage"] for r in listed)


# ---------------------------------------------------------------- read-only files and folders
def _read_only_script(folder: Path, commands: str) -> str:
    return textwrap.dedent(f"""
        set -u
        mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} || exit 97
        {commands}
        """)


@needs_root_mounts
@pytest.mark.parametrize("wal", [False, True])
def test_a_store_on_a_read_only_filesystem_can_be_read(tmp_path: Path, wal: bool) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    ids = make_store(tmp_path / "src.sqlite", runs=2)
    if wal:  # copied while a writer holds it open: the last commits are still in the -wal file
        with RunStore(tmp_path / "src.sqlite") as store:
            store._conn().execute("PRAGMA wal_autocheckpoint = 0")
            ids.append(run_recorded(run_key(CHAIN, "all-cpu", LoopConfig(rounds=2)), store=store).run_id or "")
            for suffix in ("", "-wal"):
                shutil.copyfile(str(tmp_path / "src.sqlite") + suffix, str(folder / "runs.sqlite") + suffix)
        assert (folder / "runs.sqlite-wal").stat().st_size > 0
    else:
        shutil.copyfile(tmp_path / "src.sqlite", folder / "runs.sqlite")
    out = tmp_path / "out"
    out.mkdir()
    store = folder / "runs.sqlite"
    proc = _in_namespace(_read_only_script(folder, f"""
        "$PY" -m hetsched runs --store {store} --json >{out}/runs.json 2>{out}/runs.err; echo $? >{out}/runs.rc
        "$PY" -m hetsched show-run {ids[-1]} --store {store} >{out}/show.out 2>{out}/show.err; echo $? >{out}/show.rc
        "$PY" -m hetsched run chain -r 1 --store {store} >{out}/run.out 2>{out}/run.err; echo $? >{out}/run.rc
        """))
    if proc.returncode == 97:
        pytest.skip(f"cannot make a read-only bind mount here: {proc.stderr.strip()}")
    assert (out / "runs.rc").read_text().strip() == "0", (out / "runs.err").read_text()
    assert {r["id"] for r in json.loads((out / "runs.json").read_text())} == set(ids)
    assert (out / "show.rc").read_text().strip() == "0", (out / "show.err").read_text()
    run_err = (out / "run.err").read_text()
    assert (out / "run.rc").read_text().strip() == "2" and "Traceback" not in run_err
    assert str(store) in run_err


def test_a_read_only_file_is_opened_read_only_and_an_old_schema_migrates_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.sqlite"
    ids = make_store(path, runs=1)
    before = path.read_bytes()
    now = schema.SCHEMA_VERSION
    monkeypatch.setattr(schema, "SCHEMA_VERSION", now + 1)
    monkeypatch.setitem(schema.MIGRATIONS, now, lambda conn: conn.execute("ALTER TABLE runs ADD COLUMN label TEXT"))
    with RunStore(path, read_only=True) as store:
        assert [i.id for i in store.runs()] == ids and store.load(ids[0]).rounds
        with pytest.raises(StoreError, match="opened read-only"):
            store.set_status(ids[0], "finished")
    assert path.read_bytes() == before  # the file was neither migrated nor written


# ---------------------------------------------------------------- drivers killed with SIGKILL
DRIVER = textwrap.dedent(
    """
    import sys, time
    from hetsched.loop import LoopConfig, run_key, continue_run
    from hetsched.model.files import load_scenario
    from hetsched.policies import make_policy
    from hetsched.store import RunStore

    class Slow(type(make_policy("all-cpu"))):
        def propose(self, history, probes=(), observations=None):
            time.sleep(0.05)
            return super().propose(history, probes, observations)

    store = RunStore(sys.argv[1])
    key = run_key(load_scenario("chain"), "all-cpu", LoopConfig(rounds=int(sys.argv[2]), seed=0))
    run_id = store.find_run(key).id if store.find_run(key) else store.create_run(key)
    print(run_id, flush=True)
    continue_run(store, run_id, policy=Slow())
    """
)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(path: Path, rounds: int) -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(path), str(rounds)], stdout=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": SRC})
        procs.append(proc)
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        with RunStore(path, read_only=True) as store:
            deadline = time.monotonic() + 60
            while store.run(run_id).rounds_done < 2:  # driving, with rounds stored
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.02)
        return proc, run_id

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_driver_killed_with_sigkill_is_stale_at_once_even_as_an_unreaped_zombie(tmp_path: Path, driver: Any) -> None:
    path = tmp_path / "runs.sqlite"
    proc, run_id = driver(path, 400)
    with RunStore(path) as store:
        info = store.run(run_id)
        assert info.live_elsewhere and not info.stale  # its lock is held
        with pytest.raises(RunBusyError, match=f"run {run_id} is being driven"):
            continue_run(store, run_id)
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{proc.pid}").exists() and b"Z" not in _state(proc.pid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # not reaped: still a zombie, and signal 0 still reaches it; the kernel drops its lock anyway, once
        # the last of its threads (numpy's BLAS pool...) has exited, which may trail the leader's exit
        info = store.run(run_id)
        while not info.stale:
            assert time.monotonic() < deadline, "the killed driver's lock was never released"
            time.sleep(0.01)
            info = store.run(run_id)
        assert info.status == "running" and info.stale and not info.live_elsewhere
        key = run_key(CHAIN, "all-cpu", LoopConfig(rounds=400, seed=0))
        got, how = ensure_run(store, key)
        assert (got, how) == (run_id, "resumed")
        assert [i.status for i in store.runs()] == ["finished"]  # no second run, no orphan
        assert lock_path(path).exists()


def _state(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return b"X"


def test_a_live_driver_is_never_taken_over(tmp_path: Path, driver: Any) -> None:
    path = tmp_path / "runs.sqlite"
    _, run_id = driver(path, 400)
    with RunStore(path) as store:
        key = run_key(CHAIN, "all-cpu", LoopConfig(rounds=400, seed=0))
        with pytest.raises(RunBusyError):
            store.claim(run_id)
        assert store.run(run_id).live_elsewhere
        other, how = ensure_run(store, replace_rounds(key, 3))
        assert how == "ran" and other != run_id


def replace_rounds(key: Any, rounds: int) -> Any:
    from dataclasses import replace

    return replace(key, rounds=rounds)


@pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGKILL are POSIX")
def test_a_bench_rerun_right_after_kill_9_resumes_instead_of_orphaning(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    store = out / "runs.sqlite"
    args = ("bench", "--scenario", "S13", "--policy", "agentic:rules", "--policy", "ucb1", "--seeds", "6",
            "--rounds", "40", "--jobs", "2", "--no-progress", "--out", str(out))
    proc = subprocess.Popen([sys.executable, "-m", "hetsched", *args], env={**os.environ, "PYTHONPATH": SRC},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the bench ended before it could be killed"
            if store.exists():
                with RunStore(store, read_only=True) as st:
                    running = [i for i in st.runs() if i.status == "running" and i.rounds_done > 0]
                if running:
                    break
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)  # the bench and its workers, mid-run
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with RunStore(store, read_only=True) as st:
        running = [i for i in st.runs() if i.status == "running"]
        deadline = time.monotonic() + 30
        for info in running:  # SIGKILL takes a moment: wait until each worker has exited (a zombie at most)
            while _state(info.pid or 0) not in (b"Z", b"X"):
                assert time.monotonic() < deadline
                time.sleep(0.01)
        killed = {i.id for i in running}
        assert killed and all(st.run(i).stale for i in killed)
    rerun = hetsched(*args)  # at once: the dead workers may still be zombies
    assert rerun.returncode == 0, rerun.stderr
    with RunStore(store, read_only=True) as st:
        infos = st.runs()
    assert all(i.status == "finished" for i in infos), [(i.id, i.status) for i in infos]
    assert len(infos) == 2 * 6  # one run per job: the killed ones were resumed, none started twice
    assert killed <= {i.id for i in infos}
