"""The measured reference of a real run: the reference mapping executed on the run's own
executor, so a real run is compared with a measurement, never with a simulated figure from
cards profiled elsewhere.

:func:`measure_reference` runs the reference mapping ``repeats`` times on the executor; when it
cannot run there (refused, failed), the reference measured is the run's best measured mapping
(:func:`~hetsched.model.measured.deploy_choice`), labelled ``best measured``. On the simulator
nothing is measured: the simulated reference is the comparison.

Imports the model and the Executor contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hetsched.exec.base import Executor
from hetsched.model import Reference, RoundRecord, Trace
from hetsched.model.measured import MeasuredMapping, deploy_choice, executions, measured_mappings
from hetsched.model.workload import Workload

REFERENCE_REPEATS = 3
"""Executions of the reference mapping on a real executor (its spread over repeats is reported)."""


def measure_reference(executor: Executor, reference: Reference, history: Sequence[RoundRecord],
                      repeats: int = REFERENCE_REPEATS, seed: int = 0, workload: Workload | None = None) -> Reference:
    """``reference`` with ``measured`` filled in from ``executor`` (see the module docstring).

    The run's own executions of the reference mapping count among the repeats, so only what is
    missing runs. With ``workload`` each repeat is a window of requests. On the simulator
    (``executor.name == "sim"``) the reference is returned as is."""
    if executor.name == "sim":
        return reference
    runs = executions(history)
    have = [(r, t) for r, t in runs if t.feasible and t.mapping == reference.mapping]
    extra: list[tuple[int, Trace]] = []
    failed: Trace | None = None
    for i in range(max(0, repeats - len(have))):
        if workload is None:
            trace = executor.run(reference.mapping, seed=seed + i)
        else:  # under load the run's rounds are windows: so are the reference's repeats
            run_workload = getattr(executor, "run_workload", None)
            if run_workload is None:
                break
            trace = run_workload(reference.mapping, workload, seed=seed + i)
        if not trace.feasible:
            failed = trace
            break
        extra.append((-1, trace))
    if failed is None and have + extra:
        [mine] = measured_mappings(have + extra)
        return replace(reference, measured=mine, measured_kind="reference mapping")
    best = deploy_choice(runs)
    if best is None:
        return reference
    return replace(reference, measured=MeasuredMapping(best.mapping, best.runs_ms, best.rounds),
                   measured_kind="best measured")
