"""Execution: the Executor contract and ``make_executor``, which builds an executor by name.

- ``sim``: the discrete-event simulator (``hetsched.sim``), noisy by default;
- ``local``: real tools on this machine (``hetsched.exec.local``, extra ``[tools]``);
- ``ray``: real tools on a Ray cluster (``hetsched.exec.ray``, extra ``[ray]``);
- ``inproc``: real tools in this process, threads (``hetsched.exec.inproc``; what a Session uses).

Executors load lazily, like policies, so a heavy extra is imported only when its executor is
used. Imports the model, the simulator and (lazily) the tools; never policies or the loop.
"""

from __future__ import annotations

import importlib
from typing import Any

from hetsched.exec.base import ClosingExecutor, Executor, WorkloadExecutor, run_window
from hetsched.exec.options import check_options
from hetsched.model import SIM, ExecutorSpec, InputError, Scenario, UnknownNameError
from hetsched.model.errors import did_you_mean

_REGISTRY: dict[str, tuple[str, str]] = {
    "sim": ("hetsched.sim.engine:Simulator", ""),
    "local": ("hetsched.exec.local:LocalExecutor", "tools"),
    "ray": ("hetsched.exec.ray:RayExecutor", "ray"),
    "inproc": ("hetsched.exec.inproc:InProcessExecutor", ""),
}
"""name -> ("module:Class", the extra that provides its dependencies)."""


def executor_names() -> tuple[str, ...]:
    """Every name :func:`make_executor` accepts."""
    return tuple(_REGISTRY)


def executor_class(name: str) -> type:
    """The class behind an executor name (imports its module, and so its extra)."""
    key = name.strip().lower()
    if key not in _REGISTRY:
        raise UnknownNameError(f"Unknown executor: {name!r}; valid executors: {', '.join(_REGISTRY)}"
                               + did_you_mean(key, _REGISTRY))
    target, extra = _REGISTRY[key]
    module_name, cls_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"; install it with: pip install 'hetsched[{extra}]'" if extra else ""
        raise InputError(f"executor {key!r} needs {exc.name or 'a package'} which is not installed{hint}") from None
    cls: type = getattr(module, cls_name)
    return cls


def make_executor(spec: str | ExecutorSpec, scenario: Scenario, **options: Any) -> Executor:
    """Build an executor for ``scenario`` by name (``Unknown executor`` lists the valid names).

    ``spec`` is a name or an :class:`ExecutorSpec` (whose options come first; ``options``
    override them). Options are the executor's constructor keywords (``sim``: ``noise``), checked against
    its declared schema (:mod:`hetsched.exec.options`) first.
    """
    if isinstance(spec, str):
        spec = ExecutorSpec(spec)
    if spec.name not in _REGISTRY:
        executor_class(spec.name)  # raises Unknown executor, with the valid names
    # checked against the declared schema before the executor (and its extra) is imported
    merged = check_options(spec.name, {**spec.options, **options})
    cls = executor_class(spec.name)
    executor: Executor = cls(scenario, **merged)
    return executor


__all__ = ["SIM", "ClosingExecutor", "Executor", "ExecutorSpec", "WorkloadExecutor", "executor_class", "executor_names",
           "make_executor", "run_window"]
