"""The benchmarks' shared result cache (``benchmarks/json_cache.py``): several benchmark processes may add
to one file; none may drop what another wrote."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from benchmarks import json_cache


def test_store_keeps_entries_another_process_wrote_after_this_one_read(tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    json_cache.store(path, {"a": 1.0})
    seen = json_cache.load(path)  # this process's view
    path.write_text(json.dumps({**seen, "b": 2.0}))  # another process adds an entry meanwhile
    merged = json_cache.store(path, {"c": 3.0})
    assert merged == {"a": 1.0, "b": 2.0, "c": 3.0}
    assert json_cache.load(path) == merged


def test_load_without_a_file_is_empty(tmp_path: Path) -> None:
    assert json_cache.load(tmp_path / "missing.json") == {}
    assert json_cache.load(None) == {}


def _writer(path: str, prefix: str, count: int) -> None:
    for i in range(count):
        json_cache.store(Path(path), {f"{prefix}{i}": float(i)})


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    procs = [multiprocessing.get_context("spawn").Process(target=_writer, args=(str(path), p, 25)) for p in "xy"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert json_cache.load(path) == {f"{p}{i}": float(i) for p in "xy" for i in range(25)}
