"""The bench runner: policies x scenarios x seeds x rounds, in parallel processes, through the run store.

Every run is recorded in the run store (``hetsched.store``) as its rounds complete, under the
experiment label :data:`EXPERIMENT`. Before running, the runner looks each run up by its full
configuration (scenario content, policy, options, seed, rounds): a finished run is reused, an
interrupted one is continued, so a bench killed half-way resumes where it stopped and a second
bench over the same store only runs what is new. After the runs, every summary is read back
from the store, so the report depends only on what the store holds.

After the runs, the reference of each scenario (``--reference``: the exact oracle when its search
is estimated to fit ``--max-seconds``, else a labelled best-known mapping) is computed once and
stored with every run that lacks it, so ``hetsched report`` rebuilds the same tables from the
store alone.

Imports the model, the policies, the loop, the simulator's reference search and the store; never
the CLI.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hetsched.exec import Executor, make_executor
from hetsched.loop import ensure_run
from hetsched.model import SIM, ExecutorSpec, InputError, Mapping, Reference, RunKey, Scenario
from hetsched.model.errors import ParameterError
from hetsched.policies import policy_names
from hetsched.search.reference import (
    DEFAULT_SEARCH_SECONDS,
    ReferenceChoice,
    check_max_seconds,
    improved_by,
    reference,
)
from hetsched.store import RunInfo, RunStore, StoredRun, canonical

from .data import BenchData, scenario_reference, summarize_run
from .spec import PolicySpec, natural_key

EXPERIMENT = "bench"
"""Experiment label of bench runs in the store (``hetsched runs`` shows it)."""
DEFAULT_ROUNDS = 20
"""Rounds per run (the paper's 20)."""
DEFAULT_SEEDS = 5
"""Seeds per policy and scenario."""
QUICK_ROUNDS = 10
"""Rounds per run with ``--quick``."""
QUICK_SEEDS = 2
"""Seeds with ``--quick``."""


@dataclass(frozen=True)
class BenchConfig:
    """What one bench runs and where it records it."""

    specs: tuple[PolicySpec, ...]
    """Policy variants (table columns)."""
    scenarios: tuple[Scenario, ...]
    """Scenarios (table rows)."""
    seeds: tuple[int, ...] = tuple(range(DEFAULT_SEEDS))
    """Run seeds."""
    rounds: int = DEFAULT_ROUNDS
    """Rounds per run."""
    store: Path = Path("runs.sqlite")
    """Run store file."""
    jobs: int = 1
    """Worker processes (1: run in this process)."""
    executor: ExecutorSpec = SIM
    """Where every run executes (the simulator by default)."""
    reference: ReferenceChoice = ReferenceChoice.AUTO
    """What the tables compare against (``none`` is refused: the tables need a reference)."""
    reference_seconds: float = DEFAULT_SEARCH_SECONDS
    """Time budget of each scenario's reference search (``--max-seconds``)."""

    def __post_init__(self) -> None:
        if ReferenceChoice(self.reference) is ReferenceChoice.NONE:
            raise ParameterError("reference", "none: the bench's tables compare every run with a reference; "
                                 "accepted: auto, oracle, best-known")
        check_max_seconds(self.reference_seconds, "reference_seconds")
        if self.rounds < 1:
            raise ParameterError("rounds", f"must be >= 1, got {self.rounds}")
        if not self.seeds:
            raise ParameterError("seeds", "must be >= 1 (at least one seed)")
        if self.jobs < 1:
            raise ParameterError("jobs", f"must be >= 1, got {self.jobs}")
        if self.jobs > 1 and self.executor.name != SIM.name:
            raise ParameterError("jobs", f"must be 1 on executor {self.executor.name}, which runs one run at a time "
                                 "(parallel runs would contend for the same cores and device and spoil each "
                                 f"other's clocks); got {self.jobs}")
        if not self.specs or not self.scenarios:
            raise InputError("a bench needs at least one policy and one scenario")


@dataclass(frozen=True)
class Job:
    """One run: a policy variant on a scenario with a seed, on the bench's executor."""

    spec: PolicySpec
    """The policy variant (its label names the table column)."""
    key: RunKey
    """The run's full identity (scenario, policy, options, seed, rounds, executor, experiment)."""
    store: str
    """Run store file."""


@dataclass(frozen=True)
class JobResult:
    """What a worker hands back: the run id and how the run was obtained."""

    run_id: str
    """Run id in the store."""
    how: str
    """``ran``, ``resumed`` or ``reused``."""
    seconds: float
    """Wall time in the worker."""
    label: str = ""
    """Policy label (for the progress line)."""
    scenario: str = ""
    """Scenario name."""


_OPEN: dict[tuple[int, str], RunStore] = {}
"""One open store per (process, file): closing a WAL database checkpoints it, which cost more
than a whole run when every job opened and closed its own connection (see BENCHMARKS.md)."""


def open_store(path: str) -> RunStore:
    """This process's open store for ``path`` (one per process and file, kept open across jobs)."""
    key = (os.getpid(), path)
    if key not in _OPEN:
        _OPEN[key] = RunStore(path)
    return _OPEN[key]


def close_stores() -> None:
    """Close the stores :func:`open_store` opened in this process."""
    for key in [k for k in _OPEN if k[0] == os.getpid()]:
        _OPEN.pop(key).close()


_EXECUTORS: dict[tuple[int, str, str], Executor] = {}
"""One real executor per (process, scenario content, executor spec): its worker processes start once
for all the runs of a bench, not once per run. The simulator is cheap and is built per run."""


def _executor(key: RunKey) -> Executor | None:
    if key.executor.name == SIM.name:
        return None
    ident = (os.getpid(), canonical(key.scenario.model_dump(mode="json")), canonical(key.executor.to_dict()))
    if ident not in _EXECUTORS:
        _EXECUTORS[ident] = make_executor(key.executor, key.scenario)
    return _EXECUTORS[ident]


def _close_executors() -> None:
    for ident in [k for k in _EXECUTORS if k[0] == os.getpid()]:
        _EXECUTORS.pop(ident).close()


PR_SET_PDEATHSIG = 1
"""Linux ``prctl`` option: the signal a process gets when its parent dies."""


def die_with_parent(parent_pid: int) -> None:
    """A bench worker's initializer: on Linux the kernel kills the worker (SIGKILL) the moment the bench
    process dies, ``kill -9`` included, so no orphan goes on driving a run that the rerun means to continue
    (an orphan holding a run's lock makes the rerun start a second run of that key). Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # no prctl: the worker ends when it next reads from the dead parent
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def worker_pool(jobs: int) -> ProcessPoolExecutor:
    """The bench's worker processes: ``jobs`` of them, each dying with this process (:func:`die_with_parent`)."""
    return ProcessPoolExecutor(max_workers=jobs, initializer=die_with_parent, initargs=(os.getpid(),))


def run_job(job: Job) -> JobResult:
    """Run (or reuse, or continue) one run in the store; safe to call in a worker process."""
    t0 = time.perf_counter()
    run_id, how = ensure_run(open_store(job.store), job.key, executor=_executor(job.key))
    return JobResult(run_id, how, time.perf_counter() - t0, job.spec.label, job.key.scenario.name)


def plan(config: BenchConfig) -> list[Job]:
    """Every run of a bench, scenario-major (so early results cover every policy)."""
    return [
        Job(spec, RunKey(scenario=sc, policy=spec.policy, options=spec.options, seed=seed, rounds=config.rounds,
                         executor=config.executor, experiment=EXPERIMENT), str(config.store))
        for sc in config.scenarios
        for seed in config.seeds
        for spec in config.specs
    ]


Progress = Callable[[JobResult, int, int], None]
"""``progress(result, done, total)`` after each run."""


@dataclass
class BenchRun:
    """A finished bench: its config, the run ids by job, and timings."""

    config: BenchConfig
    run_ids: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def run_bench(config: BenchConfig, progress: Progress | None = None) -> BenchRun:
    """Run every job (in ``config.jobs`` processes), each recorded in the store as it goes."""
    jobs = plan(config)
    t0 = time.perf_counter()
    RunStore(config.store).close()  # create the file (and schema) once, before the workers race to
    results: list[JobResult | None] = [None] * len(jobs)
    done = 0

    def finished(i: int, r: JobResult) -> None:
        nonlocal done
        results[i] = r
        done += 1
        if progress is not None:
            progress(r, done, len(jobs))

    if config.jobs == 1 or len(jobs) == 1:
        try:
            for i, job in enumerate(jobs):
                finished(i, run_job(job))
        finally:
            _close_executors()
    else:
        with worker_pool(min(config.jobs, len(jobs))) as pool:
            pending: dict[Future[JobResult], int] = {pool.submit(run_job, job): i for i, job in enumerate(jobs)}
            while pending:
                complete, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in complete:
                    finished(pending.pop(fut), fut.result())
    close_stores()  # workers' connections close when the pool's processes exit
    out = BenchRun(config=config, seconds=time.perf_counter() - t0)
    for r in results:
        assert r is not None
        out.run_ids.append(r.run_id)
        out.counts[r.how] = out.counts.get(r.how, 0) + 1
    store_references(config.store, out.run_ids, ReferenceChoice(config.reference), config.reference_seconds)
    return out


def store_references(store_path: Path | str, run_ids: Sequence[str], choice: ReferenceChoice,
                     max_seconds: float = DEFAULT_SEARCH_SECONDS) -> None:
    """Compute each scenario's reference once (or reuse the one recorded), make it the best mapping known
    (:func:`best_known_of_runs`: a best-known reference gives way to a better mapping any of the scenario's
    runs played), record it, and store it with every run that lacks it or holds a worse one."""
    wanted = {ReferenceChoice.ORACLE: "oracle", ReferenceChoice.BEST_KNOWN: "best-known"}.get(choice)
    with RunStore(store_path) as store:
        by_scenario: dict[str, tuple[Scenario, list[RunInfo]]] = {}
        for run_id in dict.fromkeys(run_ids):
            info = store.run(run_id)
            group = by_scenario.get(info.scenario_sha256)
            if group is None:
                group = by_scenario[info.scenario_sha256] = (store.scenario(run_id), [])
            group[1].append(info)
        for sc, infos in by_scenario.values():
            held = [i.reference for i in infos]
            kept = [r for r in held if r is not None and wanted in (None, r.kind.value)]
            if len(kept) == len(held):  # every run holds a reference of the kind asked for: none is computed
                if any(r.exact for r in kept):
                    continue  # an exact reference: nothing can beat it
                ref = min(kept, key=lambda r: r.e2e_ms)
            else:
                ref, _ = ensure_reference(store, sc, choice, max_seconds)
            better = best_known_of_runs(store, sc, ref, infos)
            if better is not ref:
                store.record_reference(sc, choice.value, better)
            for info, had in zip(infos, held, strict=True):
                if (had is None or wanted not in (None, had.kind.value) or better.e2e_ms < had.e2e_ms
                        or (better.exact and not had.exact)):
                    store.set_reference(info.id, better)


def best_known_of_runs(store: RunStore, scenario: Scenario, ref: Reference, infos: Iterable[RunInfo]) -> Reference:
    """``ref``, or the best mapping the runs ``infos`` of ``scenario`` played (rounds and probes) when it is better
    under the model (:func:`~hetsched.search.reference.improved_by`; an exact reference stays)."""
    if ref.exact:
        return ref
    return improved_by(ref, scenario, (c for info in infos for c in played_by(info, store.played(info.id))))


def played_by(info: RunInfo, played: Iterable[tuple[int, int | None, Mapping]]) -> Iterator[tuple[Mapping, str]]:
    """A run's played mappings ``(round, probe index or None, mapping)`` as candidates for the best mapping known:
    ``(mapping, "run ID (LABEL, seed S) round R [probe P]")``."""
    run = f"run {info.id} ({PolicySpec(info.policy, dict(info.options)).label}, seed {info.seed})"
    for rnd, idx, mapping in played:
        yield mapping, f"{run} round {rnd}" + ("" if idx is None else f" probe {idx}")


def ensure_reference(store: RunStore, scenario: Scenario, choice: ReferenceChoice,
                     max_seconds: float = DEFAULT_SEARCH_SECONDS) -> tuple[Reference, str]:
    """The bench's one rule for references, as :func:`~hetsched.loop.ensure_run` is for runs: the reference
    recorded in ``store`` for this scenario's content and ``choice`` is reused; else it is computed and
    recorded. Returns ``(reference, how)``, ``how`` being ``reused`` or ``computed``."""
    choice = ReferenceChoice(choice)
    stored = store.stored_reference(scenario, choice.value)
    if stored is not None:
        return stored, "reused"
    ref = reference(scenario, choice, max_seconds=max_seconds)
    if ref is None:
        raise ParameterError("reference", f"{choice.value!r}: the bench needs a reference; accepted: auto, oracle, "
                             "best-known")
    store.record_reference(scenario, choice.value, ref)
    return ref, "computed"


def default_jobs() -> int:
    """Worker processes by default: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------------------- reading back
def load_runs(store_path: Path | str, run_ids: Sequence[str], labels: Sequence[str] | None = None,
              meta: dict[str, Any] | None = None) -> BenchData:
    """Summaries of the given runs read from the store (the report's only input)."""
    scenarios: dict[str, Scenario] = {}
    loaded: list[StoredRun] = []
    with RunStore(store_path, create=False) as store:
        for run_id in dict.fromkeys(run_ids):
            stored = store.load(run_id)
            sc = stored.scenario
            if sc.name in scenarios and scenarios[sc.name] != sc:
                raise InputError(
                    f"run {run_id}: scenario {sc.name!r} differs from another run's scenario of that name "
                    "(changed cards?); report them separately"
                )
            scenarios.setdefault(sc.name, sc)
            loaded.append(stored)
    refs = {name: report_reference(sc, [s for s in loaded if s.scenario.name == name])
            for name, sc in scenarios.items()}
    runs = [summarize_run(replace(s.info, reference=refs[s.scenario.name]), s.scenario, s.rounds) for s in loaded]
    order = list(labels) if labels else registry_order(PolicySpec(r.policy, r.options) for r in runs)
    runs.sort(key=lambda r: (natural_key(r.scenario), order.index(r.label) if r.label in order else len(order),
                             r.label, r.seed))
    return BenchData(runs=runs, scenarios=scenarios, labels=[lb for lb in order if any(r.label == lb for r in runs)],
                     meta=dict(meta or {}))


def report_reference(scenario: Scenario, runs: Sequence[StoredRun]) -> Reference:
    """The one reference a report compares a scenario's runs with: an exact one any run holds; else the best
    mapping known, the lowest of the runs' best-known references (or, when none holds one, the ``auto``
    reference) and of every mapping the runs played (:func:`~hetsched.search.reference.improved_by`). So
    every run of a scenario is compared with the same mapping, and no noise-free ratio reads below 1."""
    held = [s.info.reference for s in runs if s.info.reference is not None]
    exact = [r for r in held if r.exact]
    if exact:
        return exact[0]
    base = min(held, key=lambda r: r.e2e_ms) if held else scenario_reference(scenario)
    return improved_by(base, scenario, (
        c for s in runs for c in played_by(s.info, ((r.round, i, m) for r in s.rounds for i, m in r.played))))


def registry_order(specs: Iterable[PolicySpec]) -> list[str]:
    """Labels in the policy registry's order (then by label), each once: a stable column order."""
    names = list(policy_names())
    unique = {s.label: s for s in specs}
    return sorted(unique, key=lambda lb: (names.index(unique[lb].policy) if unique[lb].policy in names else len(names),
                                          lb))


def store_run_ids(store_path: Path | str, experiment: str | None = None) -> list[str]:
    """Ids of the newest run per run key (experiment, scenario content, policy, options, seed, rounds,
    early stop, executor and its options) in a store.

    Options compare in the store's canonical form (key-sorted JSON at every depth), the same test
    ``RunStore.find_run`` uses, so nested options (``llm``, ``monitor``) written in another key
    order are the same configuration."""
    with RunStore(store_path, create=False) as store:
        infos = store.runs(experiment=experiment)
    seen: set[tuple[object, ...]] = set()
    out: list[str] = []
    for info in infos:  # newest first
        key = (info.experiment, info.scenario_sha256, info.policy, canonical(info.options), info.seed,
               info.rounds_planned, info.stop_after, info.executor.name, canonical(info.executor.options))
        if key in seen or info.rounds_done == 0 or info.damage:  # a damaged run is listed by `runs`, not reported
            continue
        seen.add(key)
        out.append(info.id)
    return out
