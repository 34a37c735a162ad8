"""Real tools of the shapes agentic workflows have and the bundled tools lack (issue 20): a tool that
waits like an HTTP call, one that holds a table of a few hundred MB, pure-Python text work, numeric
compute (numpy matmul), and a plain CPU spinner.

They are real tools, not mocks (real sleeps, real memory, real CPU work, real clocks), written as a
user would write them, so the profiler and the executors measure them as they would a user's tool.
The CPU placement and the device placement run the same code (on the stand-in device, that is the
device's core); ``has_gpu`` only says whether a device placement is offered.

Imported by the tests and by ``benchmarks/sim_vs_real_shapes.py``, and through pickling by the
executors' worker processes (``tests`` is on their sys.path).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from hetsched.tools.base import Device, Tool

MB = 1_000_000


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        x += 1


class Waiter(Tool):
    """Waits ``wait_ms`` for an answer (a web fetch, a database query, a remote LLM API): the
    thread sleeps, using no core while it waits."""

    def __init__(self, name: str = "http_fetch", wait_ms: float = 80.0, *, has_gpu: bool = False) -> None:
        super().__init__("tiny")
        self.name, self.wait_ms, self.has_gpu = name, wait_ms, has_gpu
        self.description = f"waits {wait_ms:g} ms for a remote answer (I/O bound)"

    def load(self, device: Device) -> Any:
        return {}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        time.sleep(self.wait_ms / 1000.0)
        return {"status": 200, "bytes": 1024 + len(inputs)}


class Spinner(Tool):
    """Keeps one core busy for ``ms`` milliseconds of wall time."""

    def __init__(self, name: str = "spin", ms: float = 30.0, *, has_gpu: bool = False) -> None:
        super().__init__("tiny")
        self.name, self.ms, self.has_gpu = name, ms, has_gpu
        self.description = f"spins one core for {ms:g} ms"

    def load(self, device: Device) -> Any:
        return {}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        _spin(self.ms)
        return len(inputs)


class TableLookup(Tool):
    """Holds a ``table_mb`` table (float64 rows of 64 values, filled at load: loading it is real
    memory traffic) and answers each call by gathering ``lookups`` random rows and reducing them."""

    requires = ("numpy",)

    def __init__(self, name: str = "table_lookup", table_mb: float = 300.0, lookups: int = 200_000) -> None:
        super().__init__("tiny")
        self.name, self.table_mb, self.lookups = name, table_mb, lookups
        self.description = f"looks up {lookups:,} rows in a {table_mb:g} MB in-memory table (memory heavy)"

    def load(self, device: Device) -> Any:
        rows = int(self.table_mb * MB) // (64 * 8)
        table = np.random.default_rng(0).random((rows, 64))  # written: really resident
        return {"table": table, "rng": np.random.default_rng(1)}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        table = handle["table"]
        idx = handle["rng"].integers(0, table.shape[0], self.lookups)
        return float(table[idx].sum(axis=0).max())


class PyText(Tool):
    """Pure-Python text work (no native code): tokenizes ``words`` words, counts them in a dict and
    keeps the most frequent, as a hand-written preprocessing or parsing step does."""

    def __init__(self, name: str = "py_text", words: int = 60_000, *, has_gpu: bool = True) -> None:
        super().__init__("tiny")
        self.name, self.words, self.has_gpu = name, words, has_gpu
        self.description = f"counts the words of a {words:,}-word text in pure Python"

    def load(self, device: Device) -> Any:
        vocab = [f"w{i % 997}x{i % 13}" for i in range(5000)]
        return {"text": " ".join(vocab[(i * 7919) % len(vocab)] for i in range(self.words))}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        counts: dict[str, int] = {}
        for word in handle["text"].split():
            word = word.strip(".,").lower()
            counts[word] = counts.get(word, 0) + 1
        return sorted(counts.items(), key=lambda kv: -kv[1])[:10]


class MatMul(Tool):
    """Numeric compute: ``reps`` float32 matrix products of size ``n`` (numpy/BLAS, GIL released)."""

    requires = ("numpy",)

    def __init__(self, name: str = "matmul", n: int = 384, reps: int = 4, *, has_gpu: bool = True) -> None:
        super().__init__("tiny")
        self.name, self.n, self.reps, self.has_gpu = name, n, reps, has_gpu
        self.description = f"{reps} float32 {n}x{n} matrix products (numeric compute)"

    def load(self, device: Device) -> Any:
        rng = np.random.default_rng(2)
        return {"a": rng.random((self.n, self.n), dtype=np.float32), "b": rng.random((self.n, self.n),
                                                                                     dtype=np.float32)}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        a, b = handle["a"], handle["b"]
        out = a
        for _ in range(self.reps):
            out = (out @ b) / self.n
        return float(out[0, 0])
