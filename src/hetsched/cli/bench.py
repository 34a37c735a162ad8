"""``hetsched bench`` (policies x scenarios x seeds x rounds, then the report) and ``hetsched report``
(the report again, from stored runs, without re-running)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from hetsched.bench import (
    DEFAULT_ROUNDS,
    DEFAULT_SEEDS,
    EXPERIMENT,
    QUICK_ROUNDS,
    QUICK_SCENARIOS,
    QUICK_SEEDS,
    BenchConfig,
    load_runs,
    load_scenarios,
    parse_specs,
    read_manifest,
    run_bench,
    store_run_ids,
    write_manifest,
    write_report,
)
from hetsched.bench.runner import JobResult, default_jobs
from hetsched.bench.spec import REAL_ROUNDS, REAL_SEEDS, REAL_SUITE
from hetsched.bench.tables import all_tables
from hetsched.cli.app import app, err, fail, out
from hetsched.cli.run import parse_executor_options
from hetsched.exec import executor_class, executor_names
from hetsched.model import ExecutorSpec, InputError
from hetsched.sim.reference import parse_reference_choice
from hetsched.store import RunStore, resolve_store_path


@app.command()
def bench(
    policy: list[str] = typer.Option(
        [], "--policy", "-p",
        help="Policy to bench (repeat for several): NAME, or agentic:DECIDER (rules, argmin, openai, local). "
        "Default: every registered policy, agentic with the rules and argmin deciders.",
    ),
    scenario: list[str] = typer.Option(
        [], "--scenario", "-s", help="Bundled scenario name or scenario file (repeat for several). Default: S1-S13."
    ),
    tools: Path | None = typer.Option(
        None, "--tools", help="Tool library (cards) for scenarios that do not name their own, bundled ones included."
    ),
    seeds: int | None = typer.Option(
        None, "--seeds", min=1, help=f"Seeds 0..N-1 per cell (default: {DEFAULT_SEEDS})."
    ),
    rounds: int | None = typer.Option(
        None, "--rounds", "-r", min=1, help=f"Rounds per run (default: {DEFAULT_ROUNDS})."
    ),
    quick: bool = typer.Option(
        False, "--quick",
        help=f"Small version: {', '.join(QUICK_SCENARIOS)}, {QUICK_SEEDS} seeds, {QUICK_ROUNDS} rounds "
        "(explicit --scenario/--seeds/--rounds win).",
    ),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", min=1, help="Worker processes (default: the CPUs available)."
    ),
    out_dir: Path = typer.Option(Path("bench-out"), "--out", "-o", help="Folder for the report, tables and figures."),
    store: Path | None = typer.Option(
        None, "--store",
        help="Run store file; runs already stored there with the same settings are reused, interrupted ones "
        "continued (default: OUT/runs.sqlite).",
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
    executor: str = typer.Option(
        "sim", "--executor", "-e", help=f"Where every run executes: {', '.join(executor_names())} (default: sim). "
        f"A real executor runs one run at a time and defaults to the small real suite ({', '.join(REAL_SUITE)}), "
        f"{REAL_SEEDS} seed, {REAL_ROUNDS} rounds."
    ),
    executor_option: list[str] = typer.Option(
        [], "--executor-option", "-X", metavar="KEY=VALUE", help="An executor option (repeat for several), e.g. "
        "-X device=standin."
    ),
    reference_choice: str = typer.Option(
        "auto", "--reference", help="What the tables compare against: auto (the oracle when the mapping space is "
        "small enough, else a labelled best-known mapping), oracle, or best-known.",
    ),
) -> None:
    """Run the evaluation (policies x scenarios x seeds x rounds) and write the report to OUT."""
    choice = parse_reference_choice(reference_choice)
    spec = ExecutorSpec(executor, parse_executor_options(executor_option))
    executor_class(spec.name)  # an unknown name or a missing extra fails before any run
    real = spec.name != "sim"
    if real and jobs is not None and jobs > 1:
        raise fail(f"--executor {spec.name} runs one run at a time (parallel runs would contend for the same cores "
                   f"and device); drop --jobs {jobs}")
    specs = parse_specs(policy)
    refs = list(scenario) or (list(REAL_SUITE) if real else list(QUICK_SCENARIOS) if quick else [])
    scenarios = load_scenarios(refs, tools)
    n_seeds = seeds or (REAL_SEEDS if real else QUICK_SEEDS if quick else DEFAULT_SEEDS)
    n_rounds = rounds or (REAL_ROUNDS if real else QUICK_ROUNDS if quick else DEFAULT_ROUNDS)
    store_path = resolve_store_path(store) if store is not None else out_dir / "runs.sqlite"
    if store_path.is_dir():
        raise fail(f"--store {store_path} is a directory; give a file such as {store_path / 'runs.sqlite'}")
    config = BenchConfig(
        specs=specs, scenarios=scenarios, seeds=tuple(range(n_seeds)), rounds=n_rounds, store=store_path,
        jobs=1 if real else jobs or default_jobs(), executor=spec, reference=choice,
    )
    llm = [s.label for s in specs if s.uses_llm]
    total = len(specs) * len(scenarios) * n_seeds
    err.print(
        f"bench: {len(specs)} policies x {len(scenarios)} scenarios x {n_seeds} seeds x {n_rounds} rounds = "
        f"{total} runs on {config.jobs} process(es), executor {spec.label}; store {store_path}"
        + (f"; LLM deciders: {', '.join(llm)}" if llm else ""),
        soft_wrap=True,
    )
    if progress:
        with Progress(
            TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
            TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=False,
        ) as bar:
            task = bar.add_task("", total=total)

            def tick(r: JobResult, done: int, total: int) -> None:
                bar.update(task, completed=done, description=escape(f"{r.scenario} {r.label} ({r.how})"))

            result = run_bench(config, tick)
    else:
        result = run_bench(config)
    meta = {
        "policies": [s.label for s in specs],
        "scenarios": [s.name for s in scenarios],
        "seeds": n_seeds,
        "rounds": n_rounds,
        "quick": quick,
        "jobs": config.jobs,
        "seconds": round(result.seconds, 2),
        "counts": dict(sorted(result.counts.items())),
    }
    if spec.name != "sim":
        meta["executor"] = spec.label
    write_manifest(out_dir, store_path, result.run_ids, [s.label for s in specs], meta)
    data = load_runs(store_path, result.run_ids, [s.label for s in specs], meta)
    paths = write_report(data, out_dir)
    for t in all_tables(data):
        if t.key in ("table4", "table5"):
            out.print(t.to_markdown(), markup=False, soft_wrap=True)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items()))
    out.print(f"{total} runs in {result.seconds:.1f} s ({counts})")
    out.print(f"report: {paths['html']}  (tables: {paths['tables']}, figures: {paths['figures']})", soft_wrap=True)


@app.command()
def report(
    source: list[str] = typer.Argument(
        ..., help="A bench output folder (with bench.json), a run store file, or run ids (or unique prefixes)."
    ),
    out_dir: Path | None = typer.Option(
        None, "--out", "-o", help="Where to write (default: the bench folder itself, else ./report-out)."
    ),
    store: Path | None = typer.Option(
        None, "--store", help="Run store holding the run ids (default: $HETSCHED_STORE, else the user data dir)."
    ),
    experiment: str | None = typer.Option(
        None, "--experiment", help=f"With a store file: only runs of this experiment (bench runs: {EXPERIMENT!r})."
    ),
) -> None:
    """Regenerate the report from stored runs (a bench folder, a store file, or run ids); nothing is re-run."""
    first = Path(source[0])
    if len(source) == 1 and first.is_dir():
        store_path, run_ids, labels, meta = read_manifest(first)
        target = out_dir or first
    elif len(source) == 1 and first.is_file():
        store_path, labels, meta = first, [], {}
        run_ids = store_run_ids(first, experiment)
        target = out_dir or Path("report-out")
    else:
        store_path = resolve_store_path(store)
        with RunStore(store_path, create=False) as st:
            run_ids = [st.resolve(s) for s in source]
        labels, meta = [], {}
        target = out_dir or Path("report-out")
    if not run_ids:
        raise InputError(f"run store {store_path}: no runs to report on")
    data = load_runs(store_path, run_ids, labels, meta)
    paths = write_report(data, target)
    out.print(f"report over {len(data.runs)} runs: {paths['html']}", soft_wrap=True)
