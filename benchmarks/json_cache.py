"""A JSON file of cached benchmark results that several benchmark processes may share.

``benchmarks/agentic_scale.py --reference-cache`` and ``benchmarks/lower_bound_gap.py --uppers`` keep
expensive results (best-known E2Es) across runs. Two processes writing one file each wrote their own
dict, so the later write dropped the other's new entries. ``store`` merges instead: under an exclusive
lock on ``FILE.lock`` it re-reads the file, adds the entries and replaces the file atomically, so a
reader never sees half a file and no process's entries are lost.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any


def load(path: Path | None) -> dict[str, Any]:
    """The cache's entries ({} when there is no file)."""
    if path is None or not path.exists():
        return {}
    return dict(json.loads(path.read_text()))


def store(path: Path, entries: dict[str, Any]) -> dict[str, Any]:
    """Add ``entries`` to the cache file, keeping what other processes wrote meanwhile; returns the merged
    cache."""
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = load(path)
        merged.update(entries)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged, indent=1, sort_keys=True))
        os.replace(tmp, path)
    return merged
