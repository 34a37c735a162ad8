"""Bench speed: wall time of ``hetsched bench --quick`` and of the full default bench (every
registered non-LLM policy, agentic with the rules and argmin deciders, S1-S13, 5 seeds, 20
rounds), split into running the rounds, reading them back from the run store, and drawing the
report; optionally the cProfile hot spots of each phase.

Each timing starts from an empty run store (a bench over a store that already holds the runs
only reuses them; that case is timed too, as "rerun").

Run: python benchmarks/bench_speed.py [--repeat 1] [--jobs N] [--profile] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hetsched.bench import BenchConfig, default_specs, load_runs, load_scenarios, run_bench, write_report
from hetsched.bench.runner import DEFAULT_ROUNDS, DEFAULT_SEEDS, QUICK_ROUNDS, QUICK_SEEDS, default_jobs
from hetsched.bench.spec import QUICK_SCENARIOS


def cli_seconds(args: list[str], folder: Path) -> float:
    """Wall time of one ``hetsched bench`` process (interpreter start and imports included)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hetsched", "bench", *args, "--out", str(folder), "--no-progress"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def phases(config: BenchConfig, out: Path, profile: bool) -> dict[str, Any]:
    """Seconds (and optionally the top cProfile entries) of run / load / report, in this process."""
    result: dict[str, Any] = {}
    state: dict[str, Any] = {}

    def run() -> None:
        state["run"] = run_bench(config)

    def load() -> None:
        state["data"] = load_runs(config.store, state["run"].run_ids)

    def report() -> None:
        write_report(state["data"], out)

    for name, fn in (("run", run), ("load", load), ("report", report)):
        prof = cProfile.Profile() if profile else None
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        fn()
        if prof:
            prof.disable()
        result[f"{name}_s"] = round(time.perf_counter() - t0, 2)
        if prof:
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(8)
            result[f"{name}_top"] = [line for line in buf.getvalue().splitlines() if line.strip()][-9:]
    result["runs"] = len(state["run"].run_ids)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="repeat each CLI timing, report the best")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="worker processes for the full bench")
    ap.add_argument("--profile", action="store_true", help="cProfile each phase (in-process, --jobs 1)")
    ap.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here too")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="hetsched-bench-speed-"))
    rows: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(), "jobs": args.jobs}
    try:
        quick, full = [], []
        for i in range(args.repeat):
            quick.append(cli_seconds(["--quick"], tmp / f"quick{i}"))
            full.append(cli_seconds(["--jobs", str(args.jobs)], tmp / f"full{i}"))
        rows["quick_cli_s"] = round(min(quick), 2)
        rows["full_cli_s"] = round(min(full), 2)
        rows["full_rerun_cli_s"] = round(cli_seconds(["--jobs", str(args.jobs)], tmp / "full0"), 2)

        specs = default_specs()
        for label, scen, seeds, rounds in (
            ("quick", list(QUICK_SCENARIOS), QUICK_SEEDS, QUICK_ROUNDS),
            ("full", [], DEFAULT_SEEDS, DEFAULT_ROUNDS),
        ):
            folder = tmp / f"phases-{label}"
            folder.mkdir()
            cfg = BenchConfig(specs=specs, scenarios=load_scenarios(scen), seeds=tuple(range(seeds)), rounds=rounds,
                              store=folder / "runs.sqlite", jobs=1 if args.profile else args.jobs)
            rows[f"{label}_phases"] = phases(cfg, folder, args.profile)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"Python {rows['python']} on {rows['machine']}, {rows['jobs']} worker process(es)")
    print(f"hetsched bench --quick           : {rows['quick_cli_s']:7.2f} s (whole command)")
    print(f"hetsched bench (full default)    : {rows['full_cli_s']:7.2f} s (whole command)")
    print(f"hetsched bench (full, rerun)     : {rows['full_rerun_cli_s']:7.2f} s (every run reused from the store)")
    for label in ("quick", "full"):
        p = rows[f"{label}_phases"]
        print(f"{label:5} phases: {p['runs']} runs; run {p['run_s']} s, load {p['load_s']} s, report {p['report_s']} s")
        for name in ("run", "load", "report"):
            for line in p.get(f"{name}_top", []):
                print(f"    [{name}] {line}")
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
