"""The run store: an SQLite record of runs, rounds, traces, probes, observations and decider
transcripts, written as each round completes so a run can be listed, shown, reported on and
resumed.

Imports only the model (and the top-level version string); the loop drives it, the CLI and
the bench read it. See docs/store.md for the schema and how to query it with ``sqlite3``.
"""

from hetsched.store.codec import (
    SECRET_OPTION_KEYS,
    DamagedValue,
    NotJsonReady,
    StoreError,
    canonical,
    public_options,
)
from hetsched.store.db import (
    DEFAULT_FILENAME,
    ENV_VAR,
    RunBusyError,
    RunInfo,
    RunStore,
    StoredRun,
    UnknownRunError,
    decision_to_dict,
    default_store_path,
    resolve_store_path,
    round_to_dict,
    scenario_json,
)
from hetsched.store.schema import SCHEMA_VERSION, STATUSES

__all__ = [
    "DEFAULT_FILENAME",
    "ENV_VAR",
    "SCHEMA_VERSION",
    "SECRET_OPTION_KEYS",
    "STATUSES",
    "DamagedValue",
    "NotJsonReady",
    "RunBusyError",
    "RunInfo",
    "RunStore",
    "StoreError",
    "StoredRun",
    "UnknownRunError",
    "canonical",
    "decision_to_dict",
    "default_store_path",
    "public_options",
    "resolve_store_path",
    "round_to_dict",
    "scenario_json",
]
