"""The evaluation bench: the S1-S13 suite, policies x scenarios x seeds x rounds through the run
store, and a report (PAPER.md's Tables 4 and 5, regret, probes, decider cost, figures, HTML).

Sits near the top of the import graph: may import the model, simulator, policies, loop and
store; only the CLI imports it. matplotlib (the ``bench`` extra) is imported only to draw.
"""

from hetsched.bench.data import BenchData, RoundSummary, RunSummary, summarize_run
from hetsched.bench.report import read_manifest, write_manifest, write_report
from hetsched.bench.runner import (
    DEFAULT_ROUNDS,
    DEFAULT_SEEDS,
    EXPERIMENT,
    QUICK_ROUNDS,
    QUICK_SEEDS,
    BenchConfig,
    BenchRun,
    load_runs,
    run_bench,
    store_run_ids,
)
from hetsched.bench.spec import QUICK_SCENARIOS, SUITE, PolicySpec, default_specs, load_scenarios, parse_specs

__all__ = [
    "DEFAULT_ROUNDS",
    "DEFAULT_SEEDS",
    "EXPERIMENT",
    "QUICK_ROUNDS",
    "QUICK_SCENARIOS",
    "QUICK_SEEDS",
    "SUITE",
    "BenchConfig",
    "BenchData",
    "BenchRun",
    "PolicySpec",
    "RoundSummary",
    "RunSummary",
    "default_specs",
    "load_runs",
    "load_scenarios",
    "parse_specs",
    "read_manifest",
    "run_bench",
    "store_run_ids",
    "summarize_run",
    "write_manifest",
    "write_report",
]
