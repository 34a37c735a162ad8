"""The scale and generalization suites: ``hetsched bench --suite scale`` and ``--suite random``.

Both run the policies on workflows drawn by :mod:`hetsched.bench.generate` (never the bundled
S1-S13, which the paper suite covers), on the noise-free-referenced simulator:

- ``scale``: n = 10, 20, 50, 100 nodes (binary and three-way; layered and random DAGs). Per
  policy and n: the noise-free E2E of the best mapping played over the reference's (the exact
  oracle where the space allows, else a labelled best-known mapping with its gap to the lower
  bound), the first round within 3% of the reference, the probes spent, and the decision time
  per round (the round's wall time minus the executor's: proposing, monitoring, checking).
- ``random``: many small workflows (4-8 nodes, every family, both modes), each against its exact
  oracle: the share within 1% of the oracle by round 5 and by the last round (the
  generalization table of docs/agentic.md), the median and worst ratio at round 5.

Every run is recorded in the SQLite run store (``OUT/runs.sqlite``, experiment ``bench-scale`` or
``bench-random``) round by round, and every reference in the store's ``scenario_references``
table, through the same rule as the paper suite (``hetsched.loop.ensure_run``,
:func:`hetsched.bench.runner.ensure_reference`): a run recorded finished is reused, a partial one
(interrupted, or killed with SIGKILL) continues from its last recorded round, a missing one runs;
a recorded reference is reused. The tables are built from the store's round summaries
(:meth:`hetsched.store.RunStore.outcomes`, which decodes no trace), the noise-free E2E of each
round's mapping recomputed on the simulator.

Imports the model, the generator, the policies, the loop, the bench runner, the simulator and the
store; matplotlib (the ``bench`` extra) only to draw.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsched.loop import ensure_run
from hetsched.model import InputError, Mode, Reference, RoundOutcome, RunKey, Scenario
from hetsched.model.errors import ParameterError, UnknownValueError, path_text
from hetsched.search.reference import DEFAULT_SEARCH_SECONDS, ReferenceChoice
from hetsched.sim import Simulator
from hetsched.store import RunStore

from .generate import FAMILIES, SMALL_SIZES, WorkflowSpec, random_scenario
from .runner import EXPERIMENT, best_known_of_runs, close_stores, ensure_reference, open_store, worker_pool
from .spec import PolicySpec, default_specs
from .tables import Table

SUITES: tuple[str, ...] = ("paper", "scale", "random")
"""``--suite`` values: the paper's S1-S13 bench, the scale study, the generalization study."""
SCALE_SIZES: tuple[int, ...] = (10, 20, 50, 100)
"""Workflow sizes of the scale suite."""
SCALE_FAMILIES: tuple[str, ...] = ("layered", "random")
"""DAG families of the scale suite (cycled over its instances)."""
SCALE_INSTANCES = 2
"""Workflows per (size, mode) in the scale suite."""
SCALE_ROUNDS = 10
"""Rounds per run in the scale suite."""
RANDOM_COUNT = 100
"""Workflows per mode in the random suite."""
RANDOM_ROUNDS = 10
"""Rounds per run in the random suite."""
QUICK_SCALE_SIZES: tuple[int, ...] = (10, 20)
"""``--suite scale --quick``: sizes (one workflow per size and mode)."""
QUICK_RANDOM_COUNT = 14
"""``--suite random --quick``: workflows per mode."""
QUICK_SUITE_ROUNDS = 6
"""``--quick`` rounds for both suites."""
WITHIN_SCALE = 0.03
"""The scale suite's "rounds to within" threshold (3% of the reference)."""
WITHIN_RANDOM = 0.01
"""The random suite's threshold (1% of the oracle)."""
BY_ROUND = 5
"""The random suite's deadline: within the threshold by this round (rounds 0..5)."""


@dataclass(frozen=True)
class SuiteConfig:
    """What one suite runs and where it writes."""

    suite: str
    """``scale`` or ``random``."""
    specs: tuple[PolicySpec, ...]
    """Policy variants."""
    workflows: tuple[WorkflowSpec, ...]
    """The generated workflows."""
    seeds: tuple[int, ...] = (0,)
    """Run seeds."""
    rounds: int = SCALE_ROUNDS
    """Rounds per run."""
    out: Path = Path("bench-out")
    """Output folder."""
    jobs: int = 1
    """Worker processes."""
    reference: ReferenceChoice = ReferenceChoice.AUTO
    """What ratios are taken to."""
    reference_seconds: float = DEFAULT_SEARCH_SECONDS
    """Time budget of each workflow's reference search (``--max-seconds``)."""
    store: Path | None = None
    """Run store file (None: ``runs.sqlite`` in ``out``)."""

    @property
    def store_path(self) -> Path:
        """The run store file the suite records into."""
        return self.store if self.store is not None else self.out / "runs.sqlite"

    def __post_init__(self) -> None:
        if self.suite not in ("scale", "random"):
            raise UnknownValueError("suite", f"{self.suite!r}: accepted: {', '.join(SUITES)}")
        if ReferenceChoice(self.reference) is ReferenceChoice.NONE:
            raise ParameterError("reference", "none: a suite compares every run with a reference; "
                                 "accepted: auto, oracle, best-known")
        if self.rounds < 1 or not self.seeds or self.jobs < 1 or not self.specs or not self.workflows:
            raise InputError("a suite needs rounds >= 1, at least one seed, one job, one policy and one workflow")


def suite_specs(texts: Sequence[PolicySpec] | None = None) -> tuple[PolicySpec, ...]:
    """The suites' default policies: every registered one but ``oracle`` (its mapping *is* the
    reference, and at scale each of its runs would repeat the reference search)."""
    if texts:
        return tuple(texts)
    return tuple(s for s in default_specs() if s.policy != "oracle")


def scale_workflows(sizes: Sequence[int] = SCALE_SIZES, instances: int = SCALE_INSTANCES,
                    families: Sequence[str] = SCALE_FAMILIES) -> tuple[WorkflowSpec, ...]:
    """``instances`` workflows per (size, mode), cycling through ``families`` (seed = instance)."""
    return tuple(
        WorkflowSpec(families[i % len(families)], n, mode, i)
        for n in sizes for mode in (Mode.BINARY, Mode.THREE_WAY) for i in range(instances)
    )


def random_workflows(count: int = RANDOM_COUNT, sizes: Sequence[int] = SMALL_SIZES,
                     families: Sequence[str] = FAMILIES) -> tuple[WorkflowSpec, ...]:
    """``count`` workflows per mode: family i mod 7, size cycling through ``sizes``, seed i."""
    return tuple(
        WorkflowSpec(families[i % len(families)], sizes[(i // len(families)) % len(sizes)], mode, i)
        for mode in (Mode.BINARY, Mode.THREE_WAY) for i in range(count)
    )


# ---------------------------------------------------------------------------- one run
@dataclass(frozen=True)
class Job:
    """One run of a suite: a policy on a generated workflow with a seed, recorded in ``store``."""

    workflow: WorkflowSpec
    spec: PolicySpec
    seed: int
    rounds: int
    store: str = "runs.sqlite"
    """Run store file."""
    experiment: str = ""
    """Experiment label of the suite's runs (:func:`experiment_of`)."""

    def key(self, scenario: Scenario | None = None) -> RunKey:
        """The run's identity in the store (the scenario is drawn when not given)."""
        return RunKey(scenario=scenario or random_scenario(self.workflow), policy=self.spec.policy,
                      options=self.spec.options, seed=self.seed, rounds=self.rounds, experiment=self.experiment)


def experiment_of(suite: str) -> str:
    """Experiment label of a suite's runs in the store: ``bench-scale``, ``bench-random``."""
    return f"{EXPERIMENT}-{suite}"


def run_job(job: Job) -> dict[str, Any]:
    """Run (or reuse, or continue) one run in the store, by the bench's one rule (``ensure_run``);
    safe to call in a worker process."""
    run_id, how = ensure_run(open_store(job.store), job.key())
    return {"run_id": run_id, "how": how, "scenario": job.workflow.name, "label": job.spec.label, "seed": job.seed}


def reference_job(args: tuple[WorkflowSpec, str, float, str]) -> dict[str, Any]:
    """The reference of one generated workflow, reused from the store or computed and recorded there
    (safe to call in a worker process)."""
    spec, choice, max_seconds, store = args
    ref, how = ensure_reference(open_store(store), random_scenario(spec), ReferenceChoice(choice), max_seconds)
    return {"scenario": spec.name, "how": how, **_reference_dict(ref)}


def _reference_dict(ref: Reference) -> dict[str, Any]:
    return {"kind": ref.kind.value, "e2e_ms": ref.e2e_ms, "lower_bound_ms": ref.lower_bound_ms, "gap": ref.gap,
            "label": ref.label, "seconds": ref.seconds, "found_by": ref.found_by}


# ---------------------------------------------------------------------------- the suite
Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``."""


@dataclass
class SuiteResult:
    """A finished suite: its runs and references, read back from the run store."""

    config: SuiteConfig
    runs: list[dict[str, Any]] = field(default_factory=list)
    references: dict[str, dict[str, Any]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _pool_map(fn: Callable[[Any], dict[str, Any]], items: Sequence[Any], jobs: int,
              done: Callable[[dict[str, Any]], None]) -> None:
    if jobs == 1 or len(items) <= 1:
        for item in items:
            done(fn(item))
        return
    with worker_pool(min(jobs, len(items))) as pool:
        pending: set[Future[dict[str, Any]]] = {pool.submit(fn, item) for item in items}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                done(fut.result())


LEGACY_FILES: tuple[str, ...] = ("runs.jsonl", "references.json")
"""What suites wrote before they recorded into the run store (refused with what to do)."""


def check_legacy(out: Path) -> None:
    """Refuse an output folder holding an older hetsched's ``runs.jsonl`` / ``references.json``: those
    hold per-round summaries only (no traces, probes or decisions), so they cannot be moved into the
    run store or continued."""
    found = [name for name in LEGACY_FILES if (out / name).exists()]
    if found:
        raise InputError(
            f"{path_text(out)} holds {' and '.join(found)} from an older hetsched, whose suites kept their runs there; "
            "the suites now record every run in the run store (runs.sqlite), and those files hold only "
            "per-round summaries, so they cannot be continued or converted. Move them away (or choose another "
            "output folder) and the suite runs afresh; keep them to read the old tables (tables/, report.md)"
        )


def round_dict(outcome: RoundOutcome, true_e2e_ms: float | None) -> dict[str, Any]:
    """A suite's round: the round summary (:meth:`RoundOutcome.to_dict`), its mapping code, the noise-free
    E2E of its mapping and its decision time."""
    return {**outcome.to_dict(), "code": outcome.mapping.code(), "kind": outcome.kind, "true_e2e_ms": true_e2e_ms,
            "decision_ms": outcome.decision_ms if outcome.decision_ms is not None else math.nan}


def read_run(store: RunStore, run_id: str, workflow: WorkflowSpec, spec: PolicySpec, seed: int,
             exact: Simulator) -> dict[str, Any]:
    """One suite run read back from the store: its workflow, policy, seed and round summaries (the noise-free
    E2E of each feasible round's mapping recomputed on ``exact``)."""
    rounds = [round_dict(o, exact.e2e(o.mapping) if o.feasible else None) for o in store.outcomes(run_id)]
    return {
        "run_id": run_id,
        "scenario": workflow.name,
        "family": workflow.family,
        "n": workflow.n,
        "mode": workflow.mode.value,
        "label": spec.label,
        "policy": spec.policy,
        "options": spec.options,
        "seed": seed,
        "rounds": rounds,
    }


def run_suite(config: SuiteConfig, progress: Progress | None = None) -> SuiteResult:
    """Compute (or reuse) the references, run (or reuse, or continue) every job in the run store, and read back."""
    t0 = time.perf_counter()
    out = config.out
    check_legacy(out)
    out.mkdir(parents=True, exist_ok=True)
    store_path = str(config.store_path)
    choice = ReferenceChoice(config.reference)
    experiment = experiment_of(config.suite)
    RunStore(store_path).close()  # create the file (and schema) once, before the workers race to
    # references, one per workflow
    refs: dict[str, dict[str, Any]] = {}
    ref_jobs = [(w, choice.value, config.reference_seconds, store_path) for w in config.workflows]

    def got_ref(r: dict[str, Any]) -> None:
        refs[r["scenario"]] = r
        if progress is not None:
            progress(f"reference {r['scenario']} ({r['how']})", len(refs), len(ref_jobs))

    _pool_map(reference_job, ref_jobs, config.jobs, got_ref)
    close_stores()
    # runs
    jobs = [Job(w, s, seed, config.rounds, store_path, experiment)
            for w in config.workflows for seed in config.seeds for s in config.specs]
    counts = dict.fromkeys(("reused", "resumed", "ran"), 0)
    done = 0
    ids: dict[tuple[str, str, int], str] = {}

    def got_run(r: dict[str, Any]) -> None:
        nonlocal done
        ids[(r["scenario"], r["label"], r["seed"])] = r["run_id"]
        counts[r["how"]] += 1
        done += 1
        if progress is not None:
            progress(f"{r['scenario']} {r['label']} ({r['how']})", done, len(jobs))

    _pool_map(run_job, jobs, config.jobs, got_run)
    close_stores()  # workers' connections close when the pool's processes exit
    exacts: dict[str, Simulator] = {}
    runs = []
    with RunStore(store_path) as store:
        for j in jobs:
            if j.workflow.name not in exacts:
                exacts[j.workflow.name] = Simulator(random_scenario(j.workflow), noise=False)
            exact = exacts[j.workflow.name]
            runs.append(read_run(store, ids[(j.workflow.name, j.spec.label, j.seed)], j.workflow, j.spec, j.seed,
                                 exact))
        # the best mapping known: a workflow's best-known reference gives way to a better mapping its runs played
        for w in config.workflows:
            sc = random_scenario(w)
            ref = store.stored_reference(sc, choice.value)
            if ref is None or ref.exact:
                continue
            infos = [store.run(ids[(w.name, s.label, seed)]) for seed in config.seeds for s in config.specs]
            better = best_known_of_runs(store, sc, ref, infos)
            if better is not ref:
                store.record_reference(sc, choice.value, better)
                refs[w.name] = {"scenario": w.name, "how": "improved by a run", **_reference_dict(better)}
    run_ids = [r["run_id"] for r in runs]
    result = SuiteResult(config, runs, {w.name: refs[w.name] for w in config.workflows}, counts,
                         time.perf_counter() - t0)
    (out / "suite.json").write_text(json.dumps({
        "suite": config.suite,
        "policies": [s.label for s in config.specs],
        "workflows": [w.name for w in config.workflows],
        "workflow_specs": [{"family": w.family, "n": w.n, "mode": w.mode.value, "seed": w.seed}
                           for w in config.workflows],
        "seeds": list(config.seeds),
        "rounds": config.rounds,
        "reference": choice.value,
        "jobs": config.jobs,
        "store": store_path,
        "experiment": experiment,
        "run_ids": run_ids,
        "seconds": round(result.seconds, 2),
        "counts": counts,
    }, indent=1))
    return result


def read_suite_runs(out: Path) -> list[dict[str, Any]]:
    """The runs of a finished suite in ``out`` (as :attr:`SuiteResult.runs`), read from the run store that
    ``out/suite.json`` names; nothing runs."""
    meta = json.loads((out / "suite.json").read_text())
    workflows = {w.name: w for w in (WorkflowSpec(d["family"], int(d["n"]), Mode(d["mode"]), int(d["seed"]))
                                     for d in meta["workflow_specs"])}
    runs = []
    with RunStore(meta["store"], read_only=True) as store:
        for run_id in meta["run_ids"]:
            info = store.run(run_id)
            workflow = workflows[info.scenario_name]
            exact = Simulator(store.scenario(run_id), noise=False)
            runs.append(read_run(store, run_id, workflow, PolicySpec(info.policy, info.options), info.seed, exact))
    return runs


# ---------------------------------------------------------------------------- metrics
def ratios(run: dict[str, Any], ref_e2e: float) -> list[float]:
    """Per round: the noise-free E2E of the round's mapping over the reference's (inf: could not run)."""
    return [math.inf if r["true_e2e_ms"] is None else r["true_e2e_ms"] / ref_e2e for r in run["rounds"]]


def best_by(values: Sequence[float], last_round: int) -> float:
    """The lowest value among rounds 0..last_round."""
    head = values[: last_round + 1]
    return min(head) if head else math.inf


def first_within(values: Sequence[float], threshold: float) -> int | None:
    """The first round whose ratio is within ``threshold`` of 1 (None: never)."""
    return next((i for i, v in enumerate(values) if v <= 1 + threshold + 1e-12), None)


def _fmt_ratio(value: float) -> str:
    return "no feasible round" if math.isinf(value) else f"{value:.3f}"


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def _labels(result: SuiteResult) -> list[str]:
    return [s.label for s in result.config.specs]


def _scale_cells(result: SuiteResult, label: str, n: int) -> dict[str, str]:
    runs = [r for r in result.runs if r["label"] == label and r["n"] == n]
    if not runs:
        return dict.fromkeys(("ratio", "rounds", "probes", "time"), "-")
    best: list[float] = []
    firsts: list[int] = []
    probes: list[int] = []
    times: list[float] = []
    never = 0
    for r in runs:
        vals = ratios(r, result.references[r["scenario"]]["e2e_ms"])
        best.append(min(vals))
        f = first_within(vals, WITHIN_SCALE)
        if f is None:
            never += 1
        else:
            firsts.append(f)
        probes.append(sum(x["probes"] for x in r["rounds"]))
        times.extend(x["decision_ms"] for x in r["rounds"])
    finite = [v for v in best if math.isfinite(v)]
    ratio = _fmt_ratio(_median(best)) if len(finite) * 2 > len(best) else "no feasible round"
    if finite and len(finite) < len(best):
        ratio += f" ({len(best) - len(finite)}/{len(best)} no feasible round)"
    reach = f"R{_median(firsts):g}" if firsts else "never"
    if never and firsts:
        reach += f" ({never}/{len(runs)} never)"
    return {"ratio": ratio, "rounds": reach, "probes": f"{statistics.fmean(probes):.0f}",
            "time": f"{_median(times):.1f}"}


def scale_tables(result: SuiteResult) -> list[Table]:
    """Per policy and workflow size: best ratio to the reference, rounds to within 3%, probes, decision time."""
    sizes = sorted({w.n for w in result.config.workflows})
    cells = {(label, n): _scale_cells(result, label, n) for label in _labels(result) for n in sizes}
    ref = "Reference: " + _reference_summary(result)
    specs = [
        ("scale_ratio", "Scale: best mapping played / reference (median over workflows and seeds)",
         [ref, "Noise-free E2E of the best mapping a run played over the reference's (1: the best mapping known)."]),
        ("scale_rounds", "Scale: first round within 3% of the reference (median; runs that never got there)",
         [ref, "R0 is the first round."]),
        ("scale_probes", "Scale: what-if probes per run (mean)",
         ["Only the agentic policy's monitor probes; its budget per round grows with n (docs/agentic.md)."]),
        ("scale_time", "Scale: decision time per round, ms (median)",
         ["The round's wall time minus the simulator's: the policy's decision, its monitor, the loop's checks. "
          "One process per run, on a shared machine: compare within a column."]),
    ]
    key_of = {"scale_ratio": "ratio", "scale_rounds": "rounds", "scale_probes": "probes", "scale_time": "time"}
    tables = []
    for key, title, notes in specs:
        table = Table(key, title, ["policy", *[f"n={n}" for n in sizes]], notes=notes)
        for label in _labels(result):
            table.rows.append([label, *[cells[(label, n)][key_of[key]] for n in sizes]])
        tables.append(table)
    return tables


def scale_csv(result: SuiteResult) -> str:
    """One row per run: workflow, n, mode, policy, seed, best ratio, first round within 3%, probes, decision ms."""
    lines = ["scenario,family,n,mode,policy,seed,reference_kind,reference_e2e_ms,best_ratio,first_within_3pct,"
             "probes,median_decision_ms,infeasible_rounds"]
    for r in result.runs:
        ref = result.references[r["scenario"]]
        vals = ratios(r, ref["e2e_ms"])
        f = first_within(vals, WITHIN_SCALE)
        dec = _median([x["decision_ms"] for x in r["rounds"]])
        bad = sum(1 for x in r["rounds"] if not x["feasible"])
        lines.append(f"{r['scenario']},{r['family']},{r['n']},{r['mode']},{r['label']},{r['seed']},{ref['kind']},"
                     f"{ref['e2e_ms']:.3f},{min(vals):.5f},{'' if f is None else f},"
                     f"{sum(x['probes'] for x in r['rounds'])},{dec:.3f},{bad}")
    return "\n".join(lines) + "\n"


def random_table(result: SuiteResult) -> Table:
    """Per policy and mode: share within 1% of the oracle by round 5 and by the last round, median and worst."""
    modes = [m.value for m in (Mode.BINARY, Mode.THREE_WAY) if any(w.mode is m for w in result.config.workflows)]
    last = result.config.rounds - 1
    cols = ["policy"]
    for m in modes:
        cols += [f"{m}: within 1% by R{BY_ROUND}", f"{m}: by R{last}", f"{m}: median / worst at R{BY_ROUND}"]
    cols.append("infeasible rounds")
    table = Table(
        "random",
        f"Generalization: random 4-8-node workflows, best mapping played by round {BY_ROUND} vs the exact oracle",
        cols,
        notes=[
            f"Within 1% by R{BY_ROUND}: share of workflows (x seeds) where some round 0..{BY_ROUND} ran a mapping "
            f"whose noise-free E2E is within 1% of the oracle's; by R{last}: the same over the whole run "
            f"(rounds 0..{last}). Median / worst: the best ratio reached by round {BY_ROUND}. "
            "'no feasible round': every round of some run was infeasible (all-GPU's documented OOMs).",
            "Workflows: hetsched.bench.generate (families " + ", ".join(FAMILIES) + "), never the bundled S1-S13. "
            "Reference: " + _reference_summary(result),
        ],
    )
    for label in _labels(result):
        row = [label]
        bad = 0
        for m in modes:
            runs = [r for r in result.runs if r["label"] == label and r["mode"] == m]
            at5, atlast = [], []
            for r in runs:
                vals = ratios(r, result.references[r["scenario"]]["e2e_ms"])
                at5.append(best_by(vals, BY_ROUND))
                atlast.append(min(vals))
                bad += sum(1 for x in r["rounds"] if not x["feasible"])
            if not runs:
                row += ["-", "-", "-"]
                continue
            ok5 = sum(1 for v in at5 if v <= 1 + WITHIN_RANDOM + 1e-12)
            oklast = sum(1 for v in atlast if v <= 1 + WITHIN_RANDOM + 1e-12)
            row += [f"{ok5}/{len(runs)} ({100 * ok5 / len(runs):.0f}%)", f"{oklast}/{len(runs)}",
                    f"{_fmt_ratio(_median(at5))} / {_fmt_ratio(max(at5))}"]
        row.append(str(bad))
        table.rows.append(row)
    return table


def random_csv(result: SuiteResult) -> str:
    """One row per run: workflow, family, n, mode, policy, seed, best ratio by round 5 and overall."""
    lines = ["scenario,family,n,mode,policy,seed,oracle_e2e_ms,best_ratio_by_r5,best_ratio,infeasible_rounds"]
    for r in result.runs:
        ref = result.references[r["scenario"]]
        vals = ratios(r, ref["e2e_ms"])
        bad = sum(1 for x in r["rounds"] if not x["feasible"])
        lines.append(f"{r['scenario']},{r['family']},{r['n']},{r['mode']},{r['label']},{r['seed']},"
                     f"{ref['e2e_ms']:.3f},{best_by(vals, BY_ROUND):.5f},{min(vals):.5f},{bad}")
    return "\n".join(lines) + "\n"


def _reference_summary(result: SuiteResult) -> str:
    kinds: dict[str, int] = {}
    gaps = []
    for ref in result.references.values():
        kinds[ref["kind"]] = kinds.get(ref["kind"], 0) + 1
        if ref["kind"] != "oracle" and ref.get("gap") is not None:
            gaps.append(ref["gap"])
    text = ", ".join(f"{k} for {v} workflow(s)" for k, v in sorted(kinds.items()))
    if gaps:
        text += f"; best-known within {100 * min(gaps):.1f}-{100 * max(gaps):.1f}% of the lower bound"
    found = sum(1 for ref in result.references.values() if ref.get("found_by"))
    if kinds.keys() - {"oracle"} or found:
        text += ("; a best-known reference is the best of its search and every mapping the runs played" +
                 (f" (a run's mapping for {found} workflow(s))" if found else ""))
    return text + "."


# ---------------------------------------------------------------------------- figures
def scale_figures(result: SuiteResult, folder: Path) -> list[Path]:
    """``scale_ratio.png`` (best / reference vs n) and ``scale_time.png`` (decision ms per round vs n)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    sizes = sorted({w.n for w in result.config.workflows})
    labels = _labels(result)
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    paths = []
    for key, ylabel, metric in (
        ("scale_ratio", "best mapping played / reference (median)", "ratio"),
        ("scale_time", "decision time per round, ms (median)", "time"),
    ):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for i, label in enumerate(labels):
            ys = []
            for n in sizes:
                runs = [r for r in result.runs if r["label"] == label and r["n"] == n]
                if metric == "ratio":
                    vals = [min(ratios(r, result.references[r["scenario"]]["e2e_ms"])) for r in runs]
                    ys.append(min(_median(vals), 3.0) if vals else math.nan)
                else:
                    vals = [x["decision_ms"] for r in runs for x in r["rounds"]]
                    ys.append(max(_median(vals), 1e-3) if vals else math.nan)
            ax.plot(sizes, ys, marker="o", label=label, color=cmap(i % cmap.N))
        ax.set_xscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(n) for n in sizes])
        ax.set_xlabel("workflow nodes n")
        ax.set_ylabel(ylabel)
        if metric == "time":
            ax.set_yscale("log")
        else:
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            ax.set_title("clipped at 3x")
        ax.legend(fontsize=7, ncol=2)
        fig.subplots_adjust(left=0.13, right=0.98, bottom=0.13, top=0.92)
        path = folder / f"{key}.png"
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)
        paths.append(path)
    return paths


def write_suite_report(result: SuiteResult) -> dict[str, Path]:
    """Tables (CSV + Markdown) and, for the scale suite, figures, under the output folder."""
    out = result.config.out
    tables_dir = out / "tables"
    tables_dir.mkdir(parents=True, exist_ok=True)
    if result.config.suite == "scale":
        tables = scale_tables(result)
        (tables_dir / "scale_runs.csv").write_text(scale_csv(result))
        figures = scale_figures(result, out / "figures")
    else:
        tables = [random_table(result)]
        (tables_dir / "random_runs.csv").write_text(random_csv(result))
        figures = []
    for table in tables:
        (tables_dir / f"{table.key}.csv").write_text(table.to_csv())
    lines = [f"# hetsched bench --suite {result.config.suite}", ""] + [t.to_markdown() for t in tables]
    lines += [f"![{p.stem}](figures/{p.name})" for p in figures]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return {"report": report, "tables": tables_dir, **{p.stem: p for p in figures}}


__all__ = [
    "QUICK_RANDOM_COUNT",
    "QUICK_SCALE_SIZES",
    "QUICK_SUITE_ROUNDS",
    "SCALE_SIZES",
    "SUITES",
    "SuiteConfig",
    "SuiteResult",
    "random_table",
    "random_workflows",
    "read_suite_runs",
    "run_suite",
    "scale_tables",
    "scale_workflows",
    "suite_specs",
    "write_suite_report",
]
