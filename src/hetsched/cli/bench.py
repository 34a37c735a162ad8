"""``hetsched bench`` (policies x scenarios x seeds x rounds, then the report) and ``hetsched report``
(the report again, from stored runs, without re-running)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import typer
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
from hetsched.bench.suites import (
    QUICK_RANDOM_COUNT,
    QUICK_SCALE_SIZES,
    QUICK_SUITE_ROUNDS,
    RANDOM_COUNT,
    RANDOM_ROUNDS,
    SCALE_ROUNDS,
    SUITES,
    SuiteConfig,
    random_table,
    random_workflows,
    run_suite,
    scale_tables,
    scale_workflows,
    suite_specs,
    write_suite_report,
)
from hetsched.bench.tables import all_tables
from hetsched.cli.app import EXIT_INTERRUPTED, app, ctrl_c_wins, err, examples, fail, out, safe, safe_path
from hetsched.cli.common import check_store_folder, parse_executor_options
from hetsched.exec import executor_class, executor_names
from hetsched.exec.options import check_options
from hetsched.model import ExecutorSpec, InputError
from hetsched.model.errors import path_text
from hetsched.model.interrupts import ctrl_c_deferred
from hetsched.model.limits import MAX_ROUNDS
from hetsched.search.reference import DEFAULT_SEARCH_SECONDS, ReferenceChoice, parse_reference_choice
from hetsched.store import RunStore, resolve_store_path

MAX_SEEDS = 10_000
"""Most seeds per bench cell (--seeds)."""


@app.command(epilog=examples(
    "hetsched bench --quick --out out/quick",
    "hetsched bench --scenario S13 --scenario my_flow.yaml -p agentic:rules -p greedy-mem --seeds 3",
    "hetsched bench --tools my_cards.yaml --out out/recalibrated",
    "hetsched bench -p agentic:openai --scenario S11 --rounds 10   # an LLM server: see docs/agentic.md",
))
def bench(
    policy: list[str] = typer.Option(
        [], "--policy", "-p", metavar="NAME", show_default="every registered policy; agentic with rules and argmin",
        help="Policy to bench (repeat for several): NAME, or agentic:DECIDER (rules, argmin, openai, local; "
        "local is an embedded SmolLM2-135M: a smoke test, 35-75 s a decision on a 2-core CPU).",
    ),
    scenario: list[str] = typer.Option(
        [], "--scenario", metavar="SCENARIO", show_default="S1-S13",
        help="Bundled scenario name or scenario file (repeat for several).",
    ),
    tools: Path | None = typer.Option(
        None, "--tools", metavar="FILE", help="Tool library (cards) for every scenario, the bundled ones included. "
        "A scenario file that names its own library (tools: FILE) is an error with --tools, so no card is "
        "silently taken from the other library; cards inline under 'cards:' still win.",
    ),
    seeds: int | None = typer.Option(
        None, "--seeds", min=1, max=MAX_SEEDS, metavar="N", show_default=f"{DEFAULT_SEEDS}",
        help="Seeds 0..N-1 per cell."
    ),
    rounds: int | None = typer.Option(
        None, "--rounds", "-r", min=1, max=MAX_ROUNDS, metavar="N", show_default=f"{DEFAULT_ROUNDS}",
        help="Rounds per run."
    ),
    quick: bool = typer.Option(
        False, "--quick",
        help=f"Small version: {', '.join(QUICK_SCENARIOS)}, {QUICK_SEEDS} seeds, {QUICK_ROUNDS} rounds "
        "(explicit --scenario/--seeds/--rounds win).",
    ),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", min=1, metavar="N", show_default="the CPUs available", help="Worker processes."
    ),
    out_dir: Path = typer.Option(
        Path("bench-out"), "--out", "-o", metavar="DIR", help="Folder for the report, tables and figures."
    ),
    store: Path | None = typer.Option(
        None, "--store", metavar="FILE", show_default="OUT/runs.sqlite",
        help="Run store file; runs already stored there with the same settings are reused, interrupted ones "
        "continued.",
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
    executor: str = typer.Option(
        "sim", "--executor", "-e", metavar="NAME", help=f"Where every run executes: {', '.join(executor_names())}. "
        f"A real executor runs one run at a time and defaults to the small real suite ({', '.join(REAL_SUITE)}), "
        f"{REAL_SEEDS} seed, {REAL_ROUNDS} rounds."
    ),
    executor_option: list[str] = typer.Option(
        [], "--executor-option", "-X", metavar="KEY=VALUE", help="An executor option (repeat for several), e.g. "
        "-X device=standin."
    ),
    reference_choice: str = typer.Option(
        "auto", "--reference", metavar="KIND", help="What the tables compare against: auto (the exact oracle when "
        "its search is estimated to fit --max-seconds, else a best-known mapping with its gap to a lower bound), "
        "oracle, or best-known.",
    ),
    max_seconds: float = typer.Option(
        DEFAULT_SEARCH_SECONDS, "--max-seconds", metavar="SECONDS",
        help="Time budget of each scenario's reference search (seconds).",
    ),
    suite: str = typer.Option(
        "paper", "--suite", help="paper: the paper's S1-S13 (or --scenario files); scale: generated workflows of "
        "10, 20, 50 and 100 nodes (ratio to the reference, rounds to within 3%, probes, decision time vs n); "
        "random: 200 generated 4-8-node workflows against their exact oracle (within 1% by round 5); "
        "load: latency-throughput curves per policy at 1-16 closed-loop clients, the loaded optimum vs the "
        "single-request optimum (docs/load.md; --executor local measures the real scenarios).",
    ),
) -> None:
    """Run the evaluation (policies x scenarios x seeds x rounds) and write the report to OUT."""
    choice = parse_reference_choice(reference_choice)
    suite_name = suite.strip().lower()
    if suite_name not in (*SUITES, "load"):
        raise InputError(f"--suite {suite!r}: unknown suite; accepted: {', '.join((*SUITES, 'load'))}")
    if out_dir.exists() and not out_dir.is_dir():
        raise fail(f"--out {path_text(out_dir)} is a file, not a folder; give a folder for the report (created if "
                   "missing)")
    if suite_name == "load":
        if tools is not None or store is not None or seeds is not None or jobs is not None:
            raise InputError("--suite load runs one seed in this process without the run store; --tools, --store, "
                             "--seeds and --jobs apply to the other suites")
        _run_load_suite(policy, scenario, rounds, quick, out_dir, progress, executor, executor_option)
        return
    if suite_name != "paper":
        if scenario or tools is not None or executor != "sim" or executor_option:
            raise InputError(f"--suite {suite_name} draws its own workflows and runs on the simulator; --scenario, "
                             "--tools, --executor and -X apply to --suite paper only")
        check_store_folder(store)
        _run_suite(suite_name, policy, seeds, rounds, quick, jobs, out_dir, progress, choice, max_seconds,
                   None if store is None else resolve_store_path(store))
        return
    spec = ExecutorSpec(executor, parse_executor_options(executor_option))
    executor_class(spec.name)  # an unknown name or a missing extra fails before any run
    check_options(spec.name, spec.options)  # and so does a bad option
    real = spec.name != "sim"
    if real and jobs is not None and jobs > 1:
        raise fail(f"--executor {spec.name} runs one run at a time (parallel runs would contend for the same cores "
                   f"and device); drop --jobs {jobs}")
    specs = parse_specs(policy)
    refs = list(scenario) or (list(REAL_SUITE) if real else list(QUICK_SCENARIOS) if quick else [])
    scenarios = load_scenarios(refs, tools)
    n_seeds = seeds or (REAL_SEEDS if real else QUICK_SEEDS if quick else DEFAULT_SEEDS)
    n_rounds = rounds or (REAL_ROUNDS if real else QUICK_ROUNDS if quick else DEFAULT_ROUNDS)
    check_store_folder(store)
    store_path = resolve_store_path(store) if store is not None else out_dir / "runs.sqlite"
    if store_path.is_dir():
        raise fail(f"--store {path_text(store_path)} is a directory; give a file such as "
                   f"{path_text(store_path / 'runs.sqlite')}")
    config = BenchConfig(
        specs=specs, scenarios=scenarios, seeds=tuple(range(n_seeds)), rounds=n_rounds, store=store_path,
        jobs=1 if real else jobs or default_jobs(), executor=spec, reference=choice, reference_seconds=max_seconds,
    )
    llm = [s.label for s in specs if s.uses_llm]
    total = len(specs) * len(scenarios) * n_seeds
    err.print(
        f"bench: {len(specs)} policies x {len(scenarios)} scenarios x {n_seeds} seeds x {n_rounds} rounds = "
        f"{total} runs on {config.jobs} process(es), executor {safe(spec.label)}; store {safe_path(store_path)}"
        + (f"; LLM deciders: {safe(', '.join(llm))}" if llm else ""),
        soft_wrap=True,
    )
    finished = [0]

    def count(r: JobResult, done: int, total: int) -> None:
        finished[0] = done

    try:
        with ctrl_c_wins():
            if progress:
                with Progress(
                    TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=False,
                ) as bar:
                    task = bar.add_task("", total=total)

                    def tick(r: JobResult, done: int, total: int) -> None:
                        count(r, done, total)
                        bar.update(task, completed=done, description=safe(f"{r.scenario} {r.label} ({r.how})"))

                    result = run_bench(config, tick)
            else:
                result = run_bench(config, count)
    except KeyboardInterrupt:
        with ctrl_c_deferred(raise_after=False):  # a second Ctrl-C: the command is stopping already
            again = (shlex.join(["hetsched", *sys.argv[1:]]) if sys.argv[1:2] == ["bench"]
                     else "the same hetsched bench command")
            err.print(f"interrupted: {finished[0]} of {total} runs finished and are kept in "
                      f"{safe_path(store_path)}, and the runs in progress keep their stored rounds; resume with "
                      f"{safe(again)} (finished runs are reused, interrupted ones continued)", soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
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
    out.print(f"{total} runs in {result.seconds:.1f} s ({safe(counts)})")
    out.print(f"report: {safe_path(paths['html'])}  (tables: {safe_path(paths['tables'])}, "
              f"figures: {safe_path(paths['figures'])})", soft_wrap=True)


def _run_suite(
    name: str, policy: list[str], seeds: int | None, rounds: int | None, quick: bool, jobs: int | None,
    out_dir: Path, progress: bool, choice: ReferenceChoice, max_seconds: float = DEFAULT_SEARCH_SECONDS,
    store: Path | None = None,
) -> None:
    """``bench --suite scale|random``: generated workflows, tables and figures under OUT."""
    specs = suite_specs(parse_specs(policy) if policy else None)
    if name == "scale":
        workflows = scale_workflows(QUICK_SCALE_SIZES, 1) if quick else scale_workflows()
        n_rounds = rounds or (QUICK_SUITE_ROUNDS if quick else SCALE_ROUNDS)
    else:
        workflows = random_workflows(QUICK_RANDOM_COUNT if quick else RANDOM_COUNT)
        n_rounds = rounds or (QUICK_SUITE_ROUNDS if quick else RANDOM_ROUNDS)
    config = SuiteConfig(suite=name, specs=specs, workflows=workflows, seeds=tuple(range(seeds or 1)),
                         rounds=n_rounds, out=out_dir, jobs=jobs or default_jobs(), reference=choice,
                         reference_seconds=max_seconds, store=store)
    if config.store_path.is_dir():
        raise fail(f"--store {config.store_path} is a directory; give a file such as "
                   f"{config.store_path / 'runs.sqlite'}")
    total = len(specs) * len(workflows) * len(config.seeds)
    err.print(f"bench --suite {name}: {len(specs)} policies x {len(workflows)} generated workflows x "
              f"{len(config.seeds)} seed(s) x {n_rounds} rounds = {total} runs on {config.jobs} process(es); "
              f"results in {safe(out_dir)}, store {safe_path(config.store_path)}", soft_wrap=True)
    try:
        with ctrl_c_wins():
            if progress:
                with Progress(TextColumn(f"[bold]{name}[/]"), BarColumn(), MofNCompleteColumn(),
                              TextColumn("{task.description}"), TimeElapsedColumn(), console=err,
                              transient=False) as bar:
                    task = bar.add_task("", total=None)

                    def tick(what: str, done: int, of: int) -> None:
                        bar.update(task, completed=done, total=of, description=safe(what))

                    result = run_suite(config, tick)
            else:
                result = run_suite(config)
    except KeyboardInterrupt:
        with ctrl_c_deferred(raise_after=False):  # a second Ctrl-C: the command is stopping already
            again = (shlex.join(["hetsched", *sys.argv[1:]]) if sys.argv[1:2] == ["bench"]
                     else f"the same hetsched bench --suite {name} command")
            err.print(f"interrupted: every finished run and every recorded round is kept in "
                      f"{safe_path(config.store_path)}; resume with {safe(again)} (finished runs are reused, "
                      "interrupted ones continued)", soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    paths = write_suite_report(result)
    for table in scale_tables(result) if name == "scale" else [random_table(result)]:
        out.print(table.to_markdown(), markup=False, soft_wrap=True)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items()))
    out.print(f"{total} runs in {result.seconds:.1f} s ({safe(counts)})")
    out.print(f"report: {safe_path(paths['report'])}  (tables: {safe_path(paths['tables'])})", soft_wrap=True)


def _run_load_suite(policy: list[str], scenario: list[str], rounds: int | None, quick: bool, out_dir: Path,
                    progress: bool, executor: str, executor_option: list[str]) -> None:
    """``bench --suite load``: every policy at every load, tables, curves and report.html under OUT."""
    from hetsched.bench.load import (
        LOAD_CLIENTS,
        LOAD_ROUNDS,
        LOAD_SCENARIOS,
        QUICK_LOAD_CLIENTS,
        QUICK_LOAD_SCENARIOS,
        REAL_LOAD_CLIENTS,
        REAL_LOAD_ROUNDS,
        REAL_LOAD_SCENARIOS,
        LoadSuiteConfig,
        load_specs,
        load_tables,
        run_load_suite,
        write_load_report,
    )

    spec = ExecutorSpec(executor, parse_executor_options(executor_option))
    executor_class(spec.name)
    check_options(spec.name, spec.options)
    real = spec.name != "sim"
    refs = list(scenario) or list(REAL_LOAD_SCENARIOS if real else QUICK_LOAD_SCENARIOS if quick else LOAD_SCENARIOS)
    scenarios = tuple(load_scenarios(refs, None))
    clients = REAL_LOAD_CLIENTS if real else QUICK_LOAD_CLIENTS if quick else LOAD_CLIENTS
    specs = load_specs(parse_specs(policy) if policy else None, spec.name)
    config = LoadSuiteConfig(scenarios, clients, specs, rounds or (REAL_LOAD_ROUNDS if real else LOAD_ROUNDS), 0,
                             spec.name, out_dir)
    err.print(f"bench --suite load: {len(specs)} policies + 2 references x {len(scenarios)} scenarios x "
              f"{len(clients)} loads on {spec.name}; results in {safe(out_dir)}", soft_wrap=True)
    total = (len(specs) + 2) * len(scenarios) * len(clients)
    if progress:
        with Progress(TextColumn("[bold]load[/]"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=False) as bar:
            task = bar.add_task("", total=total)
            result = run_load_suite(config, lambda what: bar.update(task, advance=1, description=safe(what)))
    else:
        result = run_load_suite(config)
    paths = write_load_report(result)
    out.print(load_tables(result)[0].to_markdown(), markup=False, soft_wrap=True)
    out.print(f"{len(result.points)} load points in {result.seconds:.1f} s")
    out.print(f"report: {safe_path(paths['html'])}  (tables: {safe_path(paths['tables'])})", soft_wrap=True)


@app.command(epilog=examples(
    "hetsched report bench-out", "hetsched report bench-out/runs.sqlite --out report-out",
    "hetsched report 3f2a9c1b 77d0e4aa --out two-runs",
))
def report(
    source: list[str] = typer.Argument(
        ..., metavar="SOURCE...",
        help="A bench output folder (with bench.json), a run store file, or run ids (or unique prefixes).",
    ),
    out_dir: Path | None = typer.Option(
        None, "--out", "-o", metavar="DIR", show_default="the bench folder itself, else ./report-out",
        help="Where to write.",
    ),
    store: Path | None = typer.Option(
        None, "--store", metavar="FILE", show_default="$HETSCHED_STORE, else runs.sqlite in the user data dir",
        help="Run store holding the run ids.",
    ),
    experiment: str | None = typer.Option(
        None, "--experiment", metavar="NAME",
        help=f"With a store file: only runs of this experiment (bench runs: {EXPERIMENT!r}).",
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
        for s in source:  # a run id is hex: one with a folder or a suffix was meant as a path
            if ("/" in s or os.sep in s or "." in s) and not Path(s).exists():
                raise InputError(f"{s}: not found; give a bench's output folder (--out), a run store file, or run ids")
        store_path = resolve_store_path(store)
        with RunStore(store_path, create=False) as st:
            run_ids = [st.resolve(s) for s in source]
        labels, meta = [], {}
        target = out_dir or Path("report-out")
    if not run_ids:
        raise InputError(f"run store {path_text(store_path)}: no runs to report on")
    data = load_runs(store_path, run_ids, labels, meta)
    paths = write_report(data, target)
    out.print(f"report over {len(data.runs)} runs: {safe_path(paths['html'])}", soft_wrap=True)
