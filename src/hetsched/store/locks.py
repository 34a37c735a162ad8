"""Which process drives a run, told by an operating-system lock the kernel drops when the process
dies (``kill -9`` included), not by a pid that may belong to a zombie or to a new process.

A driver holds an exclusive ``fcntl`` lock on one byte of a sidecar file next to the store
(``runs.sqlite-runs.lock``; the byte's offset is the run id read as hex) for as long as it drives
the run. Anyone can ask whether another process holds it: the answer is exact on this host,
the moment the driver dies. POSIX record locks belong to the process and are dropped when *any*
descriptor of the file is closed, so each process keeps one descriptor per lock file open for
its whole life (:data:`_FDS`) and never tests a lock it holds itself (that would convert it).

Where ``fcntl`` is missing (Windows) or the lock file cannot be opened, the answer is None
("cannot tell") and callers fall back to the stored pid. Imports nothing of ours.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_SUFFIX = "-runs.lock"
"""Appended to the store's file name to name the lock file."""

_FDS: dict[tuple[int, str], int] = {}
"""One open descriptor per (process, lock file), kept for the process's life."""
_HELD: dict[tuple[int, str], dict[str, int]] = {}
"""Run ids whose lock this process holds, per (process, lock file), with how many claims hold it."""


def lock_path(store_path: str | os.PathLike[str]) -> Path:
    """The lock file of a store file."""
    return Path(str(store_path) + LOCK_SUFFIX)


def _offset(run_id: str) -> int:
    try:
        return int(run_id, 16)
    except ValueError:
        return int(hashlib.sha1(run_id.encode()).hexdigest()[:8], 16)


def _fd(path: Path, create: bool) -> int | None:
    key = (os.getpid(), str(path))
    fd = _FDS.get(key)
    if fd is not None:
        return fd
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    except OSError:
        if create:
            return None
        try:  # a read-only store: a descriptor for reading can still test a lock
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
    _FDS[key] = fd
    return fd


def acquire_run_lock(store_path: str | os.PathLike[str], run_id: str) -> bool | None:
    """Take the run's lock for this process: True when taken (or already held here), False when
    another live process holds it, None when locks are not available here."""
    if fcntl is None:
        return None
    path = lock_path(store_path)
    held = _HELD.setdefault((os.getpid(), str(path)), {})
    if run_id in held:
        held[run_id] += 1
        return True
    fd = _fd(path, create=True)
    if fd is None:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _offset(run_id))
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        return None  # e.g. a descriptor opened read-only earlier: cannot lock for writing
    held[run_id] = 1
    return True


def release_run_lock(store_path: str | os.PathLike[str], run_id: str) -> None:
    """Give up one claim of the run's lock; the lock is dropped when no claim in this process is left."""
    if fcntl is None:
        return
    path = lock_path(store_path)
    held = _HELD.get((os.getpid(), str(path)), {})
    if run_id not in held:
        return
    held[run_id] -= 1
    if held[run_id] > 0:
        return
    del held[run_id]
    fd = _fd(path, create=False)
    if fd is not None:
        with contextlib.suppress(OSError):
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, _offset(run_id))


def held_here(store_path: str | os.PathLike[str], run_id: str) -> bool:
    """Does this process hold the run's lock?"""
    return run_id in _HELD.get((os.getpid(), str(lock_path(store_path))), {})


def held_elsewhere(store_path: str | os.PathLike[str], run_id: str) -> bool | None:
    """Does another live process on this host hold the run's lock? None: cannot tell (no fcntl,
    no readable lock file, or this process holds it)."""
    if fcntl is None or held_here(store_path, run_id):
        return None
    path = lock_path(store_path)
    if not path.exists():
        return False if path.parent.exists() else None
    fd = _fd(path, create=False)
    if fd is None:
        return None
    offset = _offset(run_id)
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, offset)
    except OSError as exc:
        return True if exc.errno in (errno.EACCES, errno.EAGAIN) else None
    with contextlib.suppress(OSError):
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)
    return False
