"""The run store: one SQLite file (WAL mode) holding every run, round, probe, observation and
decider transcript, written one transaction per round as the round completes.

Several processes may write to one file (a parallel bench): each opens its own
:class:`RunStore` (a store reconnects by itself after a fork), every write takes the write
lock up front (``BEGIN IMMEDIATE``) and waits up to ``timeout_s`` for it. The process driving a
run holds an OS lock on it (:mod:`hetsched.store.locks`), so a run whose driver was killed is
seen as stale at once and resumed, never taken for live.

Failures are reported as :class:`StoreError` naming the file and what to do, never as an
``sqlite3`` traceback: a full disk (nothing recorded before is lost), a read-only file
(``read_only=True`` reads it, through a temporary copy when its WAL must be replayed), a
damaged file (``PRAGMA quick_check`` runs on the first failure and its finding is quoted),
missing tables. A damaged row does not hide the others: :meth:`RunStore.runs` lists every run
and marks the unreadable ones (:attr:`RunInfo.damage`); reading such a run says what is wrong.
Imports the model and the store's codec/schema/locks only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import sqlite3
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from hetsched import __version__
from hetsched.model import (
    Attempt,
    DecisionRecord,
    ExecutorSpec,
    HetschedError,
    Mapping,
    Reference,
    RoundOutcome,
    RoundRecord,
    RunKey,
    Scenario,
    UnknownNameError,
)
from hetsched.model.errors import path_text
from hetsched.model.learned import learned_cards
from hetsched.model.measured import deploy_choice, executions
from hetsched.store.codec import (
    DamagedValue,
    StoreError,
    Undecodable,
    attempt_from_row,
    canonical,
    decode_round,
    decode_text,
    dumps,
    encode_round,
    loads,
    public_options,
    sha256,
)
from hetsched.store.locks import acquire_run_lock, held_elsewhere, release_run_lock
from hetsched.store.schema import STATUSES, current_version, ensure_schema, missing_tables

ENV_VAR = "HETSCHED_STORE"
"""Environment variable naming the store file (overrides the default location)."""
DEFAULT_FILENAME = "runs.sqlite"
"""File name of the default store inside the user data dir."""


class UnknownRunError(UnknownNameError, StoreError):
    """A run id (or prefix) that names no run, or more than one."""


class RunBusyError(StoreError):
    """A run is being driven by another live process on this host (it holds the run's lock)."""


def recovery_hint(path: Path, listed: bool = True) -> str:
    """What to do with a damaged store file (``listed``: whether :meth:`RunStore.runs` can still list it).
    Names the API (``RunStore(path).runs()``, ``store=``); the CLI shows its commands and flags."""
    first = f"Runs that read back are still listed by `RunStore({str(path)!r}).runs()`. " if listed else ""
    return (f"{first}To keep what can be read: "
            f"`sqlite3 {path_text(path)} .recover | sqlite3 recovered.sqlite`, then use "
            f"`store='recovered.sqlite'`; or move "
            f"{path_text(path)} away and hetsched starts a new store there")


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """Does an sqlite3 error say the file is damaged (a malformed page, not a database)?"""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in str(exc)


def _pid_alive(pid: int) -> bool | None:
    """Is process ``pid`` alive (a zombie is not)? None where signal 0 cannot be used (Windows)."""
    if sys.platform == "win32":  # os.kill would terminate it on Windows
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    try:  # Linux: a killed process stays a zombie until reaped, and signal 0 still reaches it
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[-1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def default_store_path() -> Path:
    """``$HETSCHED_STORE`` when set, else ``<user data dir>/hetsched/runs.sqlite`` (platformdirs)."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return platformdirs.user_data_path("hetsched", appauthor=False) / DEFAULT_FILENAME


def resolve_store_path(path: str | os.PathLike[str] | None = None) -> Path:
    """An explicit path wins, then ``$HETSCHED_STORE``, then the default location."""
    return Path(path).expanduser() if path is not None and str(path) != "" else default_store_path()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class RunInfo:
    """One row of ``runs`` with the figures derived from its rounds."""

    id: str
    """Run id (8 hex digits)."""
    experiment: str
    """Grouping label ('' for ad-hoc runs; the bench puts its id here)."""
    scenario_name: str
    """Scenario name."""
    scenario_sha256: str
    """Fingerprint of the stored scenario JSON (a changed card gives a different one)."""
    policy: str
    """Policy name for ``make_policy``."""
    options: dict[str, Any]
    """Policy options (secrets removed)."""
    seed: int
    """Run seed."""
    rounds_planned: int
    """Rounds the run is meant to reach."""
    stop_after: int
    """Early-stop setting of the run's ``LoopConfig``."""
    status: str
    """``running``, ``finished`` or ``interrupted``."""
    status_reason: str
    """Why it stopped (``converged``, ``KeyboardInterrupt``, an error); '' for a full finish."""
    executor: ExecutorSpec
    """The executor the rounds ran on (name and options)."""
    hetsched_version: str
    """Version that created the run."""
    created_at: str
    """ISO 8601 UTC."""
    updated_at: str
    """ISO 8601 UTC of the last write."""
    rounds_done: int
    """Rounds stored."""
    best_e2e_ms: float | None
    """Lowest feasible measured E2E among the rounds."""
    reference: Reference | None = None
    """The reference a report computed for the run's scenario (oracle or best-known), if any."""
    pid: int | None = None
    """Process that last drove the run."""
    host: str | None = None
    """Host of that process."""
    driver_alive: bool | None = None
    """For a ``running`` run on this host: does another process hold its lock (is it being driven)?
    None when it cannot be told (another host, this very process, not running)."""
    damage: str = ""
    max_probes_per_round: int = 64
    """The loop's cap on probes in one round (``LoopConfig.max_probes_per_round``)."""
    """What could not be read back from the run's row ('' when it reads back whole): the file was
    damaged or edited by hand; such a run is listed, but cannot be shown or resumed."""

    @property
    def stale(self) -> bool:
        """``running`` but its process on this host is gone (killed; continue it with ``--resume``)."""
        return self.driver_alive is False

    @property
    def live_elsewhere(self) -> bool:
        """``running`` and another live process on this host is driving it."""
        return self.driver_alive is True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "id": self.id,
            "experiment": self.experiment,
            "scenario": self.scenario_name,
            "scenario_sha256": self.scenario_sha256,
            "policy": self.policy,
            "options": self.options,
            "seed": self.seed,
            "rounds_planned": self.rounds_planned,
            "rounds_done": self.rounds_done,
            "stop_after": self.stop_after,
            "status": self.status,
            "status_reason": self.status_reason,
            "stale": self.stale,
            "executor": self.executor.to_dict(),
            "hetsched_version": self.hetsched_version,
            "best_e2e_ms": self.best_e2e_ms,
            "oracle": None
            if self.reference is None or not self.reference.exact
            else {"mapping": self.reference.mapping.to_dict(), "e2e_ms": self.reference.e2e_ms},
            "reference": None if self.reference is None else self.reference.to_dict(),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "damage": self.damage,
        }


@dataclass(frozen=True)
class StoredRun:
    """A run read back whole: its row, its scenario and its rounds."""

    info: RunInfo
    """Metadata."""
    scenario: Scenario
    """The scenario exactly as it was run."""
    rounds: list[RoundRecord] = field(default_factory=list)
    """Rounds in order, rebuilt (equal to what the loop produced)."""


_ROW_COLUMNS = """
    runs.id, runs.experiment, runs.scenario_name, runs.scenario_sha256, runs.policy, runs.options_json,
    runs.seed, runs.rounds_planned, runs.stop_after, runs.max_probes_per_round, runs.status, runs.status_reason,
    runs.executor,
    runs.executor_options_json, runs.hetsched_version, runs.created_at, runs.updated_at, runs.reference_json,
    runs.pid, runs.host"""
_INFO_COLUMNS = _ROW_COLUMNS + """,
    (SELECT COUNT(*) FROM rounds WHERE rounds.run_id = runs.id) AS rounds_done,
    (SELECT MIN(e2e_ms) FROM rounds WHERE rounds.run_id = runs.id AND feasible = 1) AS best_e2e_ms
"""


def scenario_json(scenario: Scenario) -> str:
    """The scenario as stored (key-sorted JSON, so equal scenarios give equal text and hash)."""
    return canonical(scenario.model_dump(mode="json"))


class RunStore:
    """A run store file. Open one per process; use as a context manager or call :meth:`close`.

    Args:
        path: the SQLite file; None means ``$HETSCHED_STORE`` or the user data dir.
        create: create the file (and its folder) when missing; False raises :class:`StoreError`.
        timeout_s: how long a write waits for another process's write lock (busy timeout).
        read_only: open for reading only (``runs``, ``show-run``): works on a file or folder that
            cannot be written, and migrates an older schema in memory, not in the file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        timeout_s: float = 30.0,
        read_only: bool = False,
    ) -> None:
        if timeout_s <= 0:
            raise StoreError(f"timeout_s must be > 0, got {timeout_s}")
        self.path = resolve_store_path(path)
        self.timeout_s = timeout_s
        self.read_only = read_only
        if not self.path.exists():
            if not create or read_only:
                raise StoreError(f"run store {self.path} does not exist (no run has been recorded there yet)")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"run store {self.path}: cannot create its folder ({exc})") from None
        elif self.path.is_dir():
            raise StoreError(
                f"run store {self.path} is a directory; give a file path such as {self.path / DEFAULT_FILENAME}"
            )
        self._conn_obj: sqlite3.Connection | None = None
        self._pid = -1
        self._copy: tempfile.TemporaryDirectory[str] | None = None
        self._claimed: set[str] = set()
        self.damage_found = ""
        """Set when :meth:`runs` had to read around a damaged page (what SQLite said); '' otherwise."""
        self._conn()  # open now, so a bad file fails here with a clear message

    # ------------------------------------------------------------------ connection
    def _conn(self) -> sqlite3.Connection:
        if self._conn_obj is not None and self._pid == os.getpid():
            return self._conn_obj
        # after a fork the parent's connection must not be used (SQLite forbids it): reconnect
        self._conn_obj = None
        self._claimed = set() if self._pid != os.getpid() else self._claimed  # locks are not inherited
        conn: sqlite3.Connection | None = None
        try:
            conn = self._open_read_only() if self.read_only else self._open()
            missing = missing_tables(conn)
            if missing:
                raise StoreError(
                    f"run store {self.path} has no table {', '.join(missing)} (dropped, or the file is damaged). "
                    f"{recovery_hint(self.path, listed=False)}"
                )
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            name = getattr(exc, "sqlite_errorname", "")
            if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in str(exc):
                raise StoreError(f"run store {self.path}: cannot be opened as a hetsched run store ({exc}); "
                                 "choose another file with `store` / HETSCHED_STORE, or move it away") from None
            raise self._error(exc, "opening it") from None
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        self._conn_obj, self._pid = conn, os.getpid()
        return conn

    def _setup(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        conn.row_factory = sqlite3.Row
        conn.text_factory = decode_text  # a damaged value reads back marked, never raising mid-query
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _open(self) -> sqlite3.Connection:
        # any thread may use it (an online session records each request from its caller's thread);
        # callers that share a store between threads serialize their calls (hs.Session does)
        conn = self._setup(sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None,
                                           check_same_thread=False))
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() == "wal":
            # in WAL mode NORMAL keeps every committed round across a process crash; only an
            # OS crash or power loss may drop the last commits (the file stays consistent)
            conn.execute("PRAGMA synchronous = NORMAL")
        ensure_schema(conn, str(self.path), __version__)
        return conn

    def _open_read_only(self) -> sqlite3.Connection:
        """The file opened for reading: directly (``mode=ro``) when SQLite can, else as an immutable
        file, else (a WAL to replay in a folder that cannot be written) through a temporary copy."""
        uri = "file:" + urllib.parse.quote(str(self.path.resolve()))
        conn = self._setup(sqlite3.connect(uri + "?mode=ro", uri=True, timeout=self.timeout_s, isolation_level=None))
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.OperationalError as exc:
            conn.close()
            if getattr(exc, "sqlite_errorname", "") not in ("SQLITE_CANTOPEN", "SQLITE_READONLY_CANTINIT",
                                                            "SQLITE_READONLY"):
                raise
            wal = Path(str(self.path) + "-wal")
            if wal.exists() and wal.stat().st_size > 0:
                conn = self._open_copy()  # the last commits are in the WAL: replay them in a copy
            else:
                conn = self._setup(sqlite3.connect(uri + "?immutable=1", uri=True, isolation_level=None))
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != current_version():  # an older layout: migrate a copy in memory, never the file
            memory = self._setup(sqlite3.connect(":memory:", isolation_level=None))
            conn.backup(memory)
            conn.close()
            conn = memory
            ensure_schema(conn, str(self.path), __version__)
        return conn

    def _open_copy(self) -> sqlite3.Connection:
        self._copy = tempfile.TemporaryDirectory(prefix="hetsched-store-")
        target = Path(self._copy.name) / self.path.name
        try:
            shutil.copyfile(self.path, target)
            shutil.copyfile(Path(str(self.path) + "-wal"), Path(str(target) + "-wal"))
        except OSError as exc:
            raise StoreError(f"run store {self.path}: cannot read it ({exc})") from None
        return self._setup(sqlite3.connect(target, isolation_level=None))

    def close(self) -> None:
        """Close the connection (the store reopens on the next call) and give up the runs it claimed."""
        if self._pid == os.getpid():
            for run_id in sorted(self._claimed):
                release_run_lock(self.path, run_id)
            self._claimed.clear()
            if self._conn_obj is not None:
                self._conn_obj.close()
        self._conn_obj = None
        if self._copy is not None:
            self._copy.cleanup()
            self._copy = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"

    # ------------------------------------------------------------------ errors
    def _error(self, exc: sqlite3.Error, doing: str, run_id: str | None = None) -> StoreError:
        """An sqlite3 failure as a :class:`StoreError` that names the file and says what to do."""
        name = getattr(exc, "sqlite_errorname", "") or ""
        text = str(exc)
        if name == "SQLITE_FULL" or "disk is full" in text:
            then = (f"free some space, then continue the run with `hetsched.resume({run_id!r})`"
                    if run_id else "free some space and try again")
            return StoreError(f"run store {self.path}: the disk is full ({text}) while {doing}. Nothing recorded "
                              f"before was lost (each round is written in one transaction); {then}")
        if name.startswith("SQLITE_READONLY") or "readonly" in text:
            return StoreError(f"run store {self.path} cannot be written ({text}) while {doing}; it can still be "
                              f"read (`RunStore({str(self.path)!r}).runs()` lists its runs); to record runs, make it "
                              "writable or choose another file with `store` / HETSCHED_STORE")
        if name in ("SQLITE_BUSY", "SQLITE_LOCKED") or "database is locked" in text:
            return StoreError(f"run store {self.path}: could not get the write lock within {self.timeout_s:g} s "
                              f"({text}) while {doing}; another process holds it")
        if "no such table" in text or "no such column" in text:
            return StoreError(f"run store {self.path} is missing part of its schema ({text}) while {doing}: it was "
                              f"edited by hand or is damaged. {recovery_hint(self.path)}")
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text:
            return self.damaged(f"{text} while {doing}")
        if name.startswith("SQLITE_IOERR") or name == "SQLITE_CANTOPEN":
            return StoreError(f"run store {self.path}: the file could not be read or written ({text}) while "
                              f"{doing}: {self._diagnose()}")
        return StoreError(f"run store {self.path}: {doing} failed ({type(exc).__name__}: {text})")

    def _diagnose(self) -> str:
        """Why the file (or its folder) cannot be used, from what the system says: a read-only file system,
        a full disk, a folder or file that may not be written, else a generic hint."""
        folder = self.path.parent
        try:
            vfs = os.statvfs(folder)
        except (OSError, AttributeError):
            vfs = None
        if vfs is not None and vfs.f_flag & getattr(os, "ST_RDONLY", 1):
            return (f"{path_text(folder)} is on a read-only file system; the store can still be read "
                    f"(`RunStore({str(self.path)!r}).runs()` lists its runs); to record runs choose a store on a "
                    "writable disk with `store` / HETSCHED_STORE")
        if vfs is not None and vfs.f_bavail * vfs.f_frsize < 1024 * 1024:
            free = vfs.f_bavail * vfs.f_frsize
            return (f"the disk holding {path_text(folder)} is full ({free:,} bytes free); free some space, or "
                    f"choose a store on another disk with `store` / HETSCHED_STORE")
        for target in (folder, self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
            if target.exists() and not os.access(target, os.W_OK):
                what = "folder" if target == folder else "file"
                return (f"the {what} {path_text(target)} may not be written by this user; make it writable, or "
                        f"choose another store with `store` / HETSCHED_STORE")
        return "check the disk and the file's permissions"

    def damaged(self, detail: str, listed: bool = True) -> StoreError:
        """A :class:`StoreError` for a damaged file: the detail, what ``PRAGMA quick_check`` finds, what to do
        (``listed``: whether ``hetsched runs`` still lists what reads back)."""
        try:
            found = [str(r[0]) for r in self._conn().execute("PRAGMA quick_check(5)").fetchall()]
            check = ("quick_check finds the file's structure intact, so the damage is inside stored values"
                     if found == ["ok"] else f"quick_check: {'; '.join(found)[:500]}")
        except (sqlite3.Error, StoreError) as exc:
            check = f"quick_check could not run ({exc})"
        return StoreError(f"run store {self.path} is damaged: {detail} ({check}). "
                          f"{recovery_hint(self.path, listed)}")

    @contextmanager
    def _write(self, doing: str = "writing", run_id: str | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction holding the write lock from its start; sqlite3 failures (a full
        disk, a read-only file...) come out as :class:`StoreError`, integrity errors as they are."""
        if self.read_only:
            raise StoreError(f"run store {self.path} was opened read-only; cannot record while {doing}")
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error(exc, doing, run_id) from None
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already (a full disk does)
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.IntegrityError):
                raise self._error(exc, doing, run_id) from None
            raise

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc, "reading") from None

    def _info(self, row: sqlite3.Row | dict[str, Any]) -> RunInfo:
        """A ``runs`` row as :class:`RunInfo`; what cannot be read is named in ``damage``, never raised."""
        problems: list[str] = []

        def value(column: str, kind: type | tuple[type, ...], default: Any) -> Any:
            got = row[column]
            if isinstance(got, Undecodable):
                problems.append(f"{column} holds bytes that are not UTF-8 text")
                return str(got)
            if (got is None and default is not None) or (got is not None and not isinstance(got, kind)):
                problems.append(f"{column} holds {got!r:.40}")
                return default
            return got

        def json_value(column: str, default: Any, kind: type = dict) -> Any:
            try:
                got = loads(row[column])
            except DamagedValue as exc:
                problems.append(f"{column} {exc}")
                return default
            if got is None and default is None:
                return None
            if not isinstance(got, kind):
                problems.append(f"{column} holds a {type(got).__name__}, not a JSON {kind.__name__}")
                return default
            return got

        run_id = value("id", str, "?")
        status = value("status", str, "interrupted")
        if status not in STATUSES:
            problems.append(f"status {status!r} is not a run status")
        reference = None
        ref_data = json_value("reference_json", None)
        if ref_data is not None:
            try:
                reference = Reference.from_dict(ref_data)
            except (HetschedError, KeyError, TypeError, ValueError) as exc:
                problems.append(f"reference_json cannot be read ({exc})")
        try:
            executor = ExecutorSpec(value("executor", str, "sim"), json_value("executor_options_json", {}))
        except (HetschedError, TypeError, ValueError) as exc:
            problems.append(f"executor cannot be read ({exc})")
            executor = ExecutorSpec("sim")
        pid, host = value("pid", int, None), value("host", str, None)
        info = RunInfo(
            id=run_id,
            experiment=value("experiment", str, ""),
            scenario_name=value("scenario_name", str, "?"),
            scenario_sha256=value("scenario_sha256", str, ""),
            policy=value("policy", str, "?"),
            options=json_value("options_json", {}),
            seed=value("seed", int, 0),
            rounds_planned=value("rounds_planned", int, 0),
            stop_after=value("stop_after", int, 0),
            status=status,
            status_reason=value("status_reason", str, ""),
            executor=executor,
            hetsched_version=value("hetsched_version", str, "?"),
            created_at=value("created_at", str, ""),
            updated_at=value("updated_at", str, ""),
            rounds_done=value("rounds_done", int, 0),
            best_e2e_ms=value("best_e2e_ms", (int, float), None),
            reference=reference,
            pid=pid,
            host=host,
            driver_alive=self._driver_alive(run_id, status, pid, host),
            damage="; ".join(problems),
            max_probes_per_round=value("max_probes_per_round", int, 64),
        )
        return info

    def _driver_alive(self, run_id: str, status: str, pid: int | None, host: str | None) -> bool | None:
        """Is another process driving this ``running`` run? Its lock says, exactly; where locks are not
        available, whether its recorded process is alive. None when it cannot be told."""
        if status != "running" or pid is None or host != socket.gethostname() or pid == os.getpid():
            return None
        held = held_elsewhere(self.path, run_id)
        return held if held is not None else _pid_alive(pid)

    # ------------------------------------------------------------------ writing
    def create_run(self, key: RunKey) -> str:
        """Record a new run (status ``running``, no rounds yet) for ``key`` and return its id."""
        sc_json = scenario_json(key.scenario)
        opts = dumps(public_options(key.options), "policy options")
        exec_opts = dumps(public_options(key.executor.options), "executor options")
        now = _now()
        for _ in range(20):
            run_id = secrets.token_hex(4)
            try:
                with self._write("recording a new run") as conn:
                    conn.execute(
                        "INSERT INTO runs (id, experiment, scenario_name, scenario_json, scenario_sha256, policy, "
                        "options_json, seed, rounds_planned, stop_after, max_probes_per_round, status, executor, "
                        "executor_options_json, hetsched_version, pid, host, created_at, updated_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                        (run_id, key.experiment, key.scenario.name, sc_json, sha256(sc_json), key.policy, opts,
                         key.seed, key.rounds, key.stop_after, key.max_probes_per_round, key.executor.name, exec_opts,
                         __version__, os.getpid(), socket.gethostname(), now, now),
                    )
            except sqlite3.IntegrityError:  # id collision: draw another
                continue
            if acquire_run_lock(self.path, run_id):  # this process is about to drive it
                self._claimed.add(run_id)
            return run_id
        raise StoreError(f"run store {self.path}: could not draw a free run id")  # pragma: no cover

    def record_round(self, run_id: str, record: RoundRecord) -> None:
        """Write one round (its mapping, trace, proposal, probes, observations, transcript) atomically."""
        now = _now()
        rows = encode_round(run_id, record, now)
        try:
            with self._write(f"recording round {record.round} of run {run_id}", run_id) as conn:
                conn.execute(
                    "INSERT INTO rounds (run_id, round, mapping_json, mapping_code, feasible, e2e_ms, reason, "
                    "infeasible_kind, rationale, decider, model, fallback, fallback_reason, probes_spent, "
                    "prompt_tokens, "
                    "completion_tokens, info_json, split_json, decision_json, trace_json, recorded_at, decision_ms) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows.round,
                )
                conn.executemany(
                    "INSERT INTO probes (run_id, round, idx, kind, note, base_json, mapping_code, feasible, "
                    "e2e_ms, reason, infeasible_kind, trace_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows.probes,
                )
                conn.executemany(
                    "INSERT INTO observations (run_id, round, idx, kind, data_json) VALUES (?, ?, ?, ?, ?)",
                    rows.observations,
                )
                conn.executemany(
                    "INSERT INTO transcript (run_id, round, idx, attempt, prompt, reply, reasoning, prompt_tokens, "
                    "completion_tokens, latency_ms, error, extra_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows.transcript,
                )
                conn.execute(
                    "UPDATE runs SET updated_at = ?, pid = ?, host = ? WHERE id = ?",
                    (now, os.getpid(), socket.gethostname(), run_id),
                )
        except sqlite3.IntegrityError as exc:
            if not self._read("SELECT 1 FROM runs WHERE id = ?", (run_id,)):
                raise UnknownRunError(f"no run {run_id!r} in run store {self.path}") from None
            raise StoreError(
                f"run {run_id}: round {record.round} is already stored ({exc}); is another process driving this run?"
            ) from None

    def recorder(self, run_id: str) -> Callable[[RoundRecord], None]:
        """A ``recorder`` for :func:`hetsched.loop.run_rounds` that writes each round into run ``run_id``."""
        self.run(run_id)  # fail now on an unknown id, not after the first round

        def record(round_record: RoundRecord) -> None:
            self.record_round(run_id, round_record)

        return record

    def set_status(self, run_id: str, status: str, reason: str = "") -> None:
        """Mark a run ``running``, ``finished`` or ``interrupted`` (with why)."""
        if status not in STATUSES:
            raise StoreError(f"unknown run status {status!r}; accepted: {', '.join(STATUSES)}")
        self._update(run_id, "status = ?, status_reason = ?", (status, reason))
        if status != "running" and run_id in self._claimed:
            self._claimed.discard(run_id)
            release_run_lock(self.path, run_id)

    def set_reference(self, run_id: str, reference: Reference) -> None:
        """Store the reference a report computed for the run's scenario (an exact one also fills
        ``oracle_json``/``oracle_e2e_ms``, for SQL readers)."""
        oracle = (dumps(reference.mapping.to_dict()), reference.e2e_ms) if reference.exact else (None, None)
        self._update(run_id, "reference_json = ?, oracle_json = ?, oracle_e2e_ms = ?",
                     (dumps(reference.to_dict()), *oracle))

    def set_rounds_planned(self, run_id: str, rounds: int) -> None:
        """Change how many rounds the run is meant to reach (resume with more rounds)."""
        if rounds < 1:
            raise StoreError(f"rounds must be >= 1, got {rounds}")
        self._update(run_id, "rounds_planned = ?", (rounds,))

    def claim(self, run_id: str) -> None:
        """Mark the run ``running`` by this process (before the loop drives it) and take its lock until
        its status changes or the store closes; :class:`RunBusyError` when another live process holds it."""
        run_id = self.resolve(run_id)
        if run_id not in self._claimed:
            got = acquire_run_lock(self.path, run_id)
            if got is False:
                raise RunBusyError(f"run {run_id} is being driven by another process on {socket.gethostname()}; "
                                   "wait for it or stop it first")
            if got:
                self._claimed.add(run_id)
        self._update(run_id, "status = 'running', status_reason = '', pid = ?, host = ?",
                     (os.getpid(), socket.gethostname()), run_id)

    def _update(self, run_id: str, assignments: str, params: tuple[Any, ...], resume: str | None = None) -> None:
        with self._write(f"updating run {run_id}", resume) as conn:
            cur = conn.execute(f"UPDATE runs SET {assignments}, updated_at = ? WHERE id = ?",
                               (*params, _now(), run_id))
            if cur.rowcount == 0:
                raise UnknownRunError(f"no run {run_id!r} in run store {self.path}")

    def delete_run(self, run_id: str) -> None:
        """Delete a run and everything recorded for it."""
        run_id = self.resolve(run_id)
        with self._write(f"deleting run {run_id}") as conn:
            for table in ("transcript", "observations", "probes", "rounds"):
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    # ------------------------------------------------------------------ reading
    def resolve(self, run_id: str) -> str:
        """The full id of a run given its id or a unique prefix of it."""
        key = run_id.strip().lower()
        if not key:
            raise UnknownRunError(f"empty run id; `RunStore({str(self.path)!r}).runs()` lists the runs")
        rows = self._read("SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT 6", (len(key), key))
        if len(rows) == 1:
            return str(rows[0]["id"])
        if not rows:
            raise UnknownRunError(
                f"no run {run_id!r} in run store {self.path}; `RunStore({str(self.path)!r}).runs()` lists the runs"
            )
        ids = ", ".join(r["id"] for r in rows[:5])
        raise UnknownRunError(f"run id prefix {run_id!r} is ambiguous in {self.path}: {ids}...; give more digits")

    def run(self, run_id: str) -> RunInfo:
        """Metadata of one run (id or unique prefix)."""
        full = self.resolve(run_id)
        return self._info(self._read(f"SELECT {_INFO_COLUMNS} FROM runs WHERE id = ?", (full,))[0])

    def runs(
        self,
        *,
        experiment: str | None = None,
        scenario: str | None = None,
        policy: str | None = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> list[RunInfo]:
        """Runs matching every given filter, newest first."""
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("experiment", experiment), ("scenario_name", scenario), ("policy", policy),
                              ("status", status)):
            if value is not None:
                where.append(f"runs.{column} = ?")
                params.append(value)
        sql = f"SELECT {_INFO_COLUMNS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY runs.created_at DESC, runs.rowid DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        try:
            rows = self._conn().execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            if not _is_damage(exc):
                raise self._error(exc, "reading") from None
            # a damaged page (of the runs table, an index or the rounds) fails the whole query: read the
            # runs one by one instead, so every readable run is listed and the damaged ones are marked
            self.damage_found = str(exc)
            infos = self._runs_one_by_one(str(exc))
            wanted = {"experiment": experiment, "scenario_name": scenario, "policy": policy, "status": status}
            infos = [i for i in infos if all(v is None or getattr(i, k) == v for k, v in wanted.items())]
            return infos[:limit] if limit is not None else infos
        return [self._info(r) for r in rows]

    def _runs_one_by_one(self, first_error: str) -> list[RunInfo]:
        """Every run whose row reads back, newest first, each read alone by rowid; a run whose rounds cannot
        be counted is marked damaged. Rows on a damaged page of the runs table are skipped (they cannot be
        read at all); when even the row ids cannot be walked, the store is reported damaged."""
        conn = self._conn()
        try:
            top = conn.execute("SELECT MAX(rowid) FROM runs").fetchone()[0] or 0
        except sqlite3.DatabaseError as exc:
            raise self.damaged(f"{first_error}; the runs cannot be listed ({exc})", listed=False) from None
        infos: list[tuple[str, int, RunInfo]] = []
        for rowid in range(1, top + 1):
            try:
                row = conn.execute(f"SELECT {_ROW_COLUMNS} FROM runs WHERE rowid = ?", (rowid,)).fetchone()
            except sqlite3.DatabaseError:
                continue  # on a damaged page: nothing of it can be read
            if row is None:
                continue
            values = {k: row[k] for k in row.keys()}  # noqa: SIM118 (sqlite3.Row has no items())
            hurt = ""
            try:
                count, best = conn.execute(
                    "SELECT COUNT(*), MIN(CASE WHEN feasible = 1 THEN e2e_ms END) FROM rounds WHERE run_id = ?",
                    (values["id"],)).fetchone()
            except sqlite3.DatabaseError as exc:
                count, best, hurt = 0, None, f"its rounds cannot be read: the store file is damaged ({exc})"
            values.update(rounds_done=count, best_e2e_ms=best)
            info = self._info(values)
            if hurt:
                info = replace(info, damage="; ".join(d for d in (info.damage, hurt) if d))
            infos.append((str(values.get("created_at") or ""), rowid, info))
        infos.sort(key=lambda t: (t[0], t[1]), reverse=True)
        return [i for _, _, i in infos]

    def runs_of(self, scenario: Scenario) -> list[RunInfo]:
        """The runs of this scenario's exact content (its name and its hash), newest first."""
        digest = sha256(scenario_json(scenario))
        return [i for i in self.runs(scenario=scenario.name) if i.scenario_sha256 == digest]

    def find_run(self, key: RunKey) -> RunInfo | None:
        """The newest run with exactly this key (same scenario content, policy, options, seed,
        planned rounds, early stop, executor and its options, experiment), or None. The bench uses
        it to skip finished work and resume interrupted work."""
        sc_hash = sha256(scenario_json(key.scenario))
        rows = self._read(
            f"SELECT {_INFO_COLUMNS} FROM runs WHERE experiment = ? AND scenario_name = ? AND scenario_sha256 = ? "
            "AND policy = ? AND seed = ? AND rounds_planned = ? AND stop_after = ? AND max_probes_per_round = ? "
            "AND executor = ? ORDER BY created_at DESC, rowid DESC",
            (key.experiment, key.scenario.name, sc_hash, key.policy, key.seed, key.rounds, key.stop_after,
             key.max_probes_per_round, key.executor.name),
        )
        want = canonical(public_options(key.options))
        want_exec = canonical(public_options(key.executor.options))
        for row in rows:
            try:
                same = (canonical(loads(row["options_json"])) == want
                        and canonical(loads(row["executor_options_json"])) == want_exec)
            except DamagedValue:
                continue  # a damaged row is no run to reuse
            if same:
                info = self._info(row)
                if not info.damage:
                    return info
        return None

    def readable(self, run_id: str) -> RunInfo:
        """:meth:`run`, refusing a run whose row is damaged (to show or resume it) with what to do."""
        info = self.run(run_id)
        if info.damage:
            raise self.damaged(f"run {info.id} cannot be read: {info.damage}")
        return info

    def key(self, run_id: str) -> RunKey:
        """The run's :class:`~hetsched.model.RunKey` as stored (what resuming it rebuilds)."""
        info = self.readable(run_id)
        return RunKey(
            scenario=self.scenario(info.id),
            policy=info.policy,
            options=info.options,
            seed=info.seed,
            rounds=info.rounds_planned,
            stop_after=info.stop_after,
            max_probes_per_round=info.max_probes_per_round,
            executor=info.executor,
            experiment=info.experiment,
        )

    def scenario(self, run_id: str) -> Scenario:
        """The scenario exactly as the run used it."""
        full = self.resolve(run_id)
        text = self._read("SELECT scenario_json FROM runs WHERE id = ?", (full,))[0]["scenario_json"]
        try:
            if isinstance(text, Undecodable):
                raise DamagedValue("holds bytes that are not UTF-8 text")
            return Scenario.model_validate_json(text)
        except (HetschedError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            detail = str(exc).splitlines()[0][:300]
            raise self.damaged(f"run {full}: its stored scenario cannot be read (scenario_json: {detail})") from None

    def rounds(self, run_id: str) -> list[RoundRecord]:
        """The run's rounds rebuilt, in order (pass them as ``history`` to continue the run)."""
        full = self.resolve(run_id)
        rows = self._read("SELECT * FROM rounds WHERE run_id = ? ORDER BY round", (full,))
        probes = self._grouped("probes", full)
        observations = self._grouped("observations", full)
        transcript = self._grouped("transcript", full)
        out = []
        for i, row in enumerate(rows):
            if row["round"] != i:
                raise StoreError(f"run {full}: round {i} is missing from {self.path} (found round {row['round']})")
            r = row["round"]
            try:
                out.append(decode_round(row, probes.get(r, []), observations.get(r, []), transcript.get(r, [])))
            except (HetschedError, KeyError, TypeError, ValueError, AttributeError) as exc:
                raise self.damaged(f"run {full}: round {r} cannot be read ({str(exc)[:300]})") from None
        return out

    def outcomes(self, run_id: str) -> list[RoundOutcome]:
        """The run's round summaries, in order, read from the round columns alone (no trace, probe or
        transcript is decoded: cheap for 100-node rounds); equal to ``[r.outcome for r in rounds(run_id)]``."""
        full = self.resolve(run_id)
        rows = self._read(
            "SELECT r.round, r.mapping_json, r.feasible, r.e2e_ms, r.reason, r.infeasible_kind, r.decision_ms, "
            "(SELECT COUNT(*) FROM probes p WHERE p.run_id = r.run_id AND p.round = r.round) AS probes "
            "FROM rounds r WHERE r.run_id = ? ORDER BY r.round", (full,))
        out = []
        for i, row in enumerate(rows):
            if row["round"] != i:
                raise StoreError(f"run {full}: round {i} is missing from {self.path} (found round {row['round']})")
            try:
                out.append(RoundOutcome(
                    round=i, mapping=Mapping(loads(row["mapping_json"])), feasible=bool(row["feasible"]),
                    e2e_ms=None if row["e2e_ms"] is None else float(row["e2e_ms"]), reason=str(row["reason"]),
                    kind=None if row["infeasible_kind"] is None else str(row["infeasible_kind"]),
                    probes=int(row["probes"]),
                    decision_ms=None if row["decision_ms"] is None else float(row["decision_ms"])))
            except (HetschedError, TypeError, ValueError) as exc:
                raise self.damaged(f"run {full}: round {i} cannot be read ({str(exc)[:300]})") from None
        return out

    def played(self, run_id: str) -> list[tuple[int, int | None, Mapping]]:
        """Every mapping the run executed and could run: ``(round, probe index or None, mapping)``, each round's
        mapping before its probes, in order. Read from the round columns and the probes' traces' ``mapping``
        field alone (no trace is decoded in Python: cheap for 100-node rounds)."""
        full = self.resolve(run_id)
        rows = self._read(
            "SELECT round, NULL AS idx, mapping_json AS m FROM rounds WHERE run_id = ? AND feasible = 1 "
            "UNION ALL SELECT round, idx, "
            "CASE WHEN json_valid(trace_json) THEN json_extract(trace_json, '$.mapping') END AS m "
            "FROM probes WHERE run_id = ? AND feasible = 1 ORDER BY round, idx", (full, full))
        out: list[tuple[int, int | None, Mapping]] = []
        for row in rows:
            what = f"round {row['round']}" + ("" if row["idx"] is None else f" probe {row['idx']}")
            try:
                out.append((int(row["round"]), None if row["idx"] is None else int(row["idx"]),
                            Mapping(loads(row["m"]))))
            except (DamagedValue, HetschedError, TypeError, ValueError) as exc:
                raise self.damaged(f"run {full}: the mapping of {what} cannot be read ({str(exc)[:300]})") from None
        return out

    # ------------------------------------------------------------------ references, per scenario
    def stored_reference(self, scenario: Scenario, choice: str) -> Reference | None:
        """The reference recorded for this scenario's content and ``choice`` (``auto``, ``oracle``,
        ``best-known``), with the time its search took; None when none is recorded or its row is damaged
        (then it is computed again)."""
        rows = self._read("SELECT reference_json, seconds FROM scenario_references WHERE scenario_sha256 = ? "
                          "AND choice = ?", (sha256(scenario_json(scenario)), choice))
        if not rows:
            return None
        try:
            ref = Reference.from_dict(loads(rows[0]["reference_json"]))
            return replace(ref, seconds=float(rows[0]["seconds"]))
        except (DamagedValue, HetschedError, KeyError, TypeError, ValueError):
            return None

    def record_reference(self, scenario: Scenario, choice: str, reference: Reference) -> None:
        """Record the reference computed for this scenario's content and ``choice`` (replacing any)."""
        with self._write(f"recording the reference of scenario {scenario.name}") as conn:
            conn.execute(
                "INSERT OR REPLACE INTO scenario_references (scenario_sha256, choice, scenario_name, kind, label, "
                "e2e_ms, lower_bound_ms, gap, seconds, reference_json, hetsched_version, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (sha256(scenario_json(scenario)), choice, scenario.name, reference.kind.value, reference.label,
                 reference.e2e_ms, reference.lower_bound_ms, reference.gap, reference.seconds,
                 dumps(reference.to_dict(), "reference"), __version__, _now()))

    def _grouped(self, table: str, run_id: str) -> dict[int, list[sqlite3.Row]]:
        groups: dict[int, list[sqlite3.Row]] = {}
        for row in self._read(f"SELECT * FROM {table} WHERE run_id = ? ORDER BY round, idx", (run_id,)):
            groups.setdefault(row["round"], []).append(row)
        return groups

    def transcript(self, run_id: str) -> list[tuple[int, Attempt]]:
        """``(round, attempt)`` for every decider attempt of the run, by round and attempt."""
        full = self.resolve(run_id)
        rows = self._read("SELECT * FROM transcript WHERE run_id = ? ORDER BY round, idx", (full,))
        return [(r["round"], attempt_from_row(r)) for r in rows]

    def observations(self, run_id: str) -> list[tuple[int, dict[str, Any]]]:
        """``(round, record)`` for every monitor observation of the run."""
        full = self.resolve(run_id)
        rows = self._read("SELECT round, data_json FROM observations WHERE run_id = ? ORDER BY round, idx", (full,))
        try:
            return [(r["round"], loads(r["data_json"])) for r in rows]
        except DamagedValue as exc:
            raise self.damaged(f"run {full}: an observation {exc}") from None

    def load(self, run_id: str) -> StoredRun:
        """Metadata, scenario and rounds of one run (:class:`StoreError` saying what to do when it is damaged)."""
        info = self.readable(run_id)
        return StoredRun(info=info, scenario=self.scenario(info.id), rounds=self.rounds(info.id))

    def export(self, run_id: str) -> dict[str, Any]:
        """The whole run as one JSON-ready object (``hetsched show-run --json``)."""
        stored = self.load(run_id)
        deploy = deploy_choice(executions(stored.rounds))
        return {
            "run": stored.info.to_dict(),
            "scenario": stored.scenario.model_dump(mode="json"),
            "deploy": None if deploy is None else deploy.to_dict(),
            "cards": learned_cards(stored.scenario, stored.rounds).to_dict(),
            "rounds": [round_to_dict(r) for r in stored.rounds],
        }


def round_to_dict(r: RoundRecord) -> dict[str, Any]:
    """One round as JSON: its summary (:class:`~hetsched.model.RoundOutcome`), then the proposal (with its full
    info), trace and probes."""
    summary = r.outcome.to_dict()
    del summary["probes"]  # listed in full below
    return {
        **summary,
        "rationale": r.proposal.rationale,
        "decision": None if r.proposal.decision is None else decision_to_dict(r.proposal.decision),
        "info": r.proposal.info,
        "trace": r.trace.to_dict(),
        "probes": [
            {
                "kind": p.kind,
                "note": p.note,
                "base": p.base.to_dict(),
                "mapping": p.mapping.to_dict(),
                "e2e_ms": p.trace.e2e_ms,
                "feasible": p.trace.feasible,
                "reason": p.trace.reason,
                "infeasible_kind": None if p.trace.kind is None else p.trace.kind.value,
                "trace": p.trace.to_dict(),
            }
            for p in r.probes
        ],
    }


def decision_to_dict(d: DecisionRecord) -> dict[str, Any]:
    """A decision record as JSON (``show-run --json``)."""
    return {
        "decider": d.decider,
        "model": d.model,
        "fallback": d.fallback,
        "fallback_reason": d.fallback_reason,
        "probes_spent": d.probes_spent,
        "cold_start": d.cold_start,
        "transcript": [a.to_json() for a in d.attempts],
        "observations": list(d.observations),
        "observations_text": d.observations_text,
    }
