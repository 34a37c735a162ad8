"""The run store's SQLite schema, its version, and the check/migration done on every open.

The version lives in ``PRAGMA user_version`` (and, for people reading the file with other
tools, in the ``meta`` table). Opening a file written by a newer hetsched is refused with a
message; an older one is migrated in one transaction by the steps in :data:`MIGRATIONS`.
Imports the model and the store's codec.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable

from hetsched.model import Infeasibility, InfeasibleKind
from hetsched.model.errors import UnknownReasonError, path_text
from hetsched.store.codec import DECISION_INFO_KEYS, StoreError, dumps, loads

SCHEMA_VERSION = 5
"""Version of the layout below; bump it and add a step to :data:`MIGRATIONS` for every change."""

def current_version() -> int:
    """:data:`SCHEMA_VERSION`, read when called."""
    return SCHEMA_VERSION


STATUSES: tuple[str, ...] = ("running", "finished", "interrupted")
"""Values of ``runs.status``."""

DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS runs (
    id               TEXT PRIMARY KEY,          -- short hex id, e.g. 3f9a2c1b
    experiment       TEXT NOT NULL DEFAULT '',  -- free grouping label (a bench id), '' for ad-hoc runs
    scenario_name    TEXT NOT NULL,
    scenario_json    TEXT NOT NULL,             -- full Scenario (cards, workflow, machine): replayable
    scenario_sha256  TEXT NOT NULL,             -- fingerprint of scenario_json (key-sorted)
    policy           TEXT NOT NULL,             -- name for make_policy()
    options_json     TEXT NOT NULL DEFAULT '{}',-- make_policy() keyword options, secrets removed
    seed             INTEGER NOT NULL,
    rounds_planned   INTEGER NOT NULL,
    stop_after       INTEGER NOT NULL DEFAULT 0,
    max_probes_per_round INTEGER NOT NULL DEFAULT 64, -- the loop's cap on probes in one round (LoopConfig)
    status           TEXT NOT NULL CHECK (status IN ('running', 'finished', 'interrupted')),
    status_reason    TEXT NOT NULL DEFAULT '',  -- 'KeyboardInterrupt', 'converged', an error message
    executor         TEXT NOT NULL,             -- sim, local, ray...
    executor_options_json TEXT NOT NULL DEFAULT '{}', -- the executor's options (ExecutorSpec)
    hetsched_version TEXT NOT NULL,
    oracle_json      TEXT,                      -- exact oracle mapping, once a report computed it
    oracle_e2e_ms    REAL,
    reference_json   TEXT,                      -- Reference.to_dict(): kind (oracle/best-known), mapping, e2e_ms
    pid              INTEGER,                   -- process that last drove the run
    host             TEXT,
    created_at       TEXT NOT NULL,             -- ISO 8601 UTC
    updated_at       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_key ON runs (experiment, scenario_name, policy, seed);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created_at);

CREATE TABLE IF NOT EXISTS rounds (
    run_id            TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    round             INTEGER NOT NULL,
    mapping_json      TEXT NOT NULL,            -- {"A": "gpu_now", ...}
    mapping_code      TEXT NOT NULL,            -- one letter a node: C cpu, G gpu_now, Q gpu_queue
    feasible          INTEGER NOT NULL,
    e2e_ms            REAL,                     -- NULL when infeasible
    reason            TEXT NOT NULL,            -- why infeasible, '' otherwise
    infeasible_kind   TEXT,                     -- oom, deadlock, tool_error, abandoned...; NULL if feasible
    rationale         TEXT NOT NULL,
    decider           TEXT,                     -- DecisionRecord.decider (NULL: no decider)
    model             TEXT,                     -- DecisionRecord.model
    fallback          INTEGER NOT NULL DEFAULT 0,
    fallback_reason   TEXT NOT NULL DEFAULT '',
    probes_spent      INTEGER,
    prompt_tokens     INTEGER,                  -- sums over the round's transcript
    completion_tokens INTEGER,
    info_json         TEXT NOT NULL,            -- Proposal.info (policy extras), verbatim
    split_json        TEXT NOT NULL,            -- schema 1 only; '{}' since
    decision_json     TEXT,                     -- rest of the DecisionRecord; NULL: no decider
    trace_json        TEXT NOT NULL,            -- Trace.to_dict()
    recorded_at       TEXT NOT NULL,
    decision_ms       REAL,                     -- round wall time minus its executions; NULL: not measured
    PRIMARY KEY (run_id, round)
);

CREATE TABLE IF NOT EXISTS probes (
    run_id       TEXT NOT NULL,
    round        INTEGER NOT NULL,
    idx          INTEGER NOT NULL,
    kind         TEXT NOT NULL,                 -- reprobe, swap...
    note         TEXT NOT NULL,
    base_json    TEXT NOT NULL,
    mapping_code TEXT NOT NULL,
    feasible     INTEGER NOT NULL,
    e2e_ms       REAL,
    reason       TEXT NOT NULL,
    infeasible_kind TEXT,                       -- oom, deadlock, tool_error...; NULL if feasible
    trace_json   TEXT NOT NULL,
    PRIMARY KEY (run_id, round, idx),
    FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round) ON DELETE CASCADE
);

CREATE TABLE IF NOT EXISTS observations (
    run_id    TEXT NOT NULL,
    round     INTEGER NOT NULL,
    idx       INTEGER NOT NULL,
    kind      TEXT,                             -- the record's "kind" key, if it has one
    data_json TEXT NOT NULL,
    PRIMARY KEY (run_id, round, idx),
    FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round) ON DELETE CASCADE
);

CREATE TABLE IF NOT EXISTS transcript (
    run_id            TEXT NOT NULL,
    round             INTEGER NOT NULL,
    idx               INTEGER NOT NULL,         -- position in DecisionRecord.attempts
    attempt           INTEGER,
    prompt            TEXT,
    reply             TEXT,
    reasoning         TEXT,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    latency_ms        REAL,
    error             TEXT,                     -- validation/parse error that caused a re-ask
    extra_json        TEXT,                     -- keys outside the contract, verbatim
    PRIMARY KEY (run_id, round, idx),
    FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round) ON DELETE CASCADE
);

CREATE TABLE IF NOT EXISTS scenario_references (
    scenario_sha256  TEXT NOT NULL,             -- the scenario's fingerprint (runs.scenario_sha256)
    choice           TEXT NOT NULL,             -- what was asked for: auto, oracle, best-known
    scenario_name    TEXT NOT NULL,
    kind             TEXT NOT NULL,             -- what was found: oracle or best-known
    label            TEXT NOT NULL,             -- 'oracle', 'best-known (within 3.2% of the lower bound)'
    e2e_ms           REAL NOT NULL,
    lower_bound_ms   REAL,
    gap              REAL,                      -- e2e / lower bound - 1; 0 for the oracle, NULL: no bound
    seconds          REAL NOT NULL,             -- time the search took
    reference_json   TEXT NOT NULL,             -- Reference.to_dict()
    hetsched_version TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    PRIMARY KEY (scenario_sha256, choice)
);

CREATE VIEW IF NOT EXISTS validation_errors AS
    SELECT run_id, round, attempt, error, reply FROM transcript WHERE error IS NOT NULL AND error <> '';

CREATE VIEW IF NOT EXISTS fallbacks AS
    SELECT run_id, round, decider, model, fallback_reason, mapping_code, e2e_ms, feasible
    FROM rounds WHERE fallback = 1;
"""

Migration = Callable[[sqlite3.Connection], None]



def _kind_of(reason: str) -> str | None:
    """The kind of a reason stored before schema 2; None (the column stays NULL) for one that names no kind:
    the migration goes on, and reading that round says its reason cannot be read (``Infeasibility.parse``)."""
    try:
        return Infeasibility.parse(reason).kind.value
    except UnknownReasonError:
        return None


def _v1_to_v2(conn: sqlite3.Connection) -> None:
    """Typed infeasibility kinds, executor options, references, and decision records out of ``info_json``."""
    for statement in (
        "ALTER TABLE runs ADD COLUMN executor_options_json TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE runs ADD COLUMN reference_json TEXT",
        "ALTER TABLE rounds ADD COLUMN infeasible_kind TEXT",
        "ALTER TABLE rounds ADD COLUMN decision_json TEXT",
        "ALTER TABLE probes ADD COLUMN infeasible_kind TEXT",
    ):
        conn.execute(statement)
    for run_id, oracle_json, oracle_e2e in conn.execute(
        "SELECT id, oracle_json, oracle_e2e_ms FROM runs WHERE oracle_json IS NOT NULL"
    ).fetchall():
        ref = {"kind": "oracle", "mapping": json.loads(oracle_json), "e2e_ms": oracle_e2e, "lower_bound_ms": oracle_e2e}
        conn.execute("UPDATE runs SET reference_json = ? WHERE id = ?", (json.dumps(ref), run_id))
    for table in ("rounds", "probes"):
        rows = conn.execute(f"SELECT rowid, reason FROM {table} WHERE feasible = 0").fetchall()
        conn.executemany(f"UPDATE {table} SET infeasible_kind = ? WHERE rowid = ?", [(_kind_of(r), i) for i, r in rows])
    for rowid, info_json in conn.execute("SELECT rowid, info_json FROM rounds").fetchall():
        info = json.loads(info_json)
        if not isinstance(info, dict) or "decider" not in info:
            continue
        decision = {"observations_text": info.get("observations_text", ""), "cold_start": info.get("cold_start", False)}
        rest = {k: v for k, v in info.items() if k not in DECISION_INFO_KEYS}
        conn.execute("UPDATE rounds SET info_json = ?, decision_json = ?, split_json = '{}' WHERE rowid = ?",
                     (json.dumps(rest), json.dumps(decision), rowid))


def _v2_to_v3(conn: sqlite3.Connection) -> None:
    """The loop's probe cap is part of the stored run (a resumed run restores every LoopConfig field)."""
    conn.execute("ALTER TABLE runs ADD COLUMN max_probes_per_round INTEGER NOT NULL DEFAULT 64")


def _v3_to_v4(conn: sqlite3.Connection) -> None:
    """Each round's decision time, and references kept per scenario (every bench suite reuses them)."""
    conn.execute("ALTER TABLE rounds ADD COLUMN decision_ms REAL")
    for statement in _statements(DDL):
        if "scenario_references" in statement.split("(", 1)[0]:
            conn.execute(statement)


ABANDONED_BEFORE_V5 = ("the request was abandoned: ", "the session closed (close(timeout=")
"""How the detail of a ``tool_error`` round began, before schema 5, when the session had ended a request driven
node by node whose driver went away (its handle dropped; ``close(timeout=...)`` ran out)."""


def _v4_to_v5(conn: sqlite3.Connection) -> None:
    """Abandoned requests get their own kind: the ``tool_error`` rounds the session recorded for a request whose
    driver went away become ``abandoned`` (kind, reason and trace), told apart from a failed tool."""
    rows = conn.execute("SELECT rowid, trace_json FROM rounds WHERE infeasible_kind = 'tool_error'").fetchall()
    for rowid, trace_json in rows:
        trace = loads(trace_json)
        why = trace.get("infeasibility") if isinstance(trace, dict) else None
        detail = why.get("detail") if isinstance(why, dict) else None
        if not isinstance(detail, str) or not detail.startswith(ABANDONED_BEFORE_V5):
            continue
        detail = detail.removeprefix(ABANDONED_BEFORE_V5[0])
        reason = str(Infeasibility(InfeasibleKind.ABANDONED, detail))
        trace.update(infeasibility={"kind": InfeasibleKind.ABANDONED.value, "detail": detail}, reason=reason)
        conn.execute("UPDATE rounds SET infeasible_kind = ?, reason = ?, trace_json = ? WHERE rowid = ?",
                     (InfeasibleKind.ABANDONED.value, reason, dumps(trace, "trace"), rowid))


MIGRATIONS: dict[int, Migration] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5}
"""``from_version -> step`` taking a store from ``from_version`` to ``from_version + 1``
inside the open transaction."""

_OUR_TABLES = {"meta", "runs", "rounds", "probes", "observations", "transcript", "scenario_references"}


def missing_tables(conn: sqlite3.Connection) -> list[str]:
    """The store's tables that the file lacks (dropped by hand, or a damaged schema)."""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return sorted(_OUR_TABLES - have)


def ensure_schema(conn: sqlite3.Connection, path: str, hetsched_version: str) -> None:
    """Create the schema in an empty file, migrate an older one, refuse a newer or foreign one.

    Runs under ``BEGIN IMMEDIATE`` so two processes opening a new file at once do not race.
    """
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:  # the common case: no write lock needed
        return
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"run store {path_text(path)} has schema version {version}, but this hetsched ({hetsched_version}) "
            f"knows versions up to {SCHEMA_VERSION}; upgrade hetsched, or choose another file with "
            "`store` / HETSCHED_STORE"
        )
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may have won
        if version == 0:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            foreign = tables - _OUR_TABLES
            if foreign:
                raise StoreError(
                    f"file {path_text(path)} is an SQLite database but not a hetsched run store (it has tables "
                    f"{sorted(foreign)}); choose another file with `store` / HETSCHED_STORE"
                )
            for statement in _statements(DDL):
                conn.execute(statement)
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('created_by', ?), ('schema_version', ?)",
                (hetsched_version, str(SCHEMA_VERSION)),
            )
        else:
            while version < SCHEMA_VERSION:
                step = MIGRATIONS.get(version)
                if step is None:
                    raise StoreError(
                        f"run store {path_text(path)} has schema version {version}; this hetsched "
                        f"({hetsched_version}) uses {SCHEMA_VERSION} and has no migration from "
                        f"{version}; export what you need with an older hetsched, then start a new store"
                    )
                step(conn)
                version += 1
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                         (str(SCHEMA_VERSION),))
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already (a full disk does)
            conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> list[str]:
    """Split the DDL into single statements (``executescript`` would commit our transaction)."""
    out, buf = [], []
    for line in script.splitlines():
        code = line.split("--", 1)[0].rstrip()
        if not code:
            continue
        buf.append(code)
        if code.endswith(";") and sqlite3.complete_statement("\n".join(buf)):
            out.append("\n".join(buf))
            buf = []
    return out
