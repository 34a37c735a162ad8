"""The Executor contract: run a workflow under a mapping once and return a :class:`Trace`.

Every executor (the simulator, the local executor, the Ray executor) satisfies it, so the loop,
the monitor, the store and the reports run unchanged on any of them. A mapping that cannot run
(over budget, a deadlock, a tool that failed or timed out, a device that is missing) comes
back as ``Trace.refused(...)`` with a typed :class:`~hetsched.model.Infeasibility`; only bad
input (a malformed mapping) raises. Executors hold resources (worker processes, loaded
models, a Ray connection): ``close()`` frees them, and every executor is a context manager.

Executors that run windows of requests under load (``run_workload``) also satisfy
:class:`WorkloadExecutor`.

Imports only the model.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, runtime_checkable

from hetsched.model import Infeasibility, InfeasibleKind, Mapping, Trace
from hetsched.model.workload import Workload


@runtime_checkable
class Executor(Protocol):
    """Runs a workflow under a mapping once; infeasible mappings come back as a Trace, not raised."""

    name: str
    """``sim``, ``local``, ``ray``..."""

    def run(self, mapping: Mapping, seed: int | None = 0) -> Trace:
        """Execute (or refuse, with a typed reason) and return the trace."""
        ...

    def close(self) -> None:
        """Free what the executor holds (workers, loaded models, connections); idempotent."""
        ...

    def __enter__(self) -> Executor: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


@runtime_checkable
class WorkloadExecutor(Executor, Protocol):
    """An executor that also runs a window of requests under load (the simulator, local, Ray, in-process)."""

    def run_workload(self, mapping: Mapping, workload: Workload, seed: int | None = 0) -> Trace:
        """Run ``workload``'s window under one mapping; the window's Trace (``load``, ``requests``)."""
        ...


def run_window(executor: Executor, mapping: Mapping, workload: Workload, seed: int | None = 0) -> Trace:
    """``executor.run_workload(...)``, or an ``unavailable`` trace from an executor that runs one
    request at a time (the one way the loop runs a window)."""
    if isinstance(executor, WorkloadExecutor):
        return executor.run_workload(mapping, workload, seed=seed)
    why = Infeasibility(InfeasibleKind.UNAVAILABLE, f"executor {executor.name!r} does not run workloads")
    return Trace.refused(mapping, why, seed=seed, executor=executor.name)


class ClosingExecutor:
    """Mixin giving an executor the context-manager half of the contract (``close()`` on exit)."""

    def close(self) -> None:
        """Nothing to free by default."""

    def __enter__(self) -> ClosingExecutor:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
