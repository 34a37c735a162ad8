"""``hetsched run``: run R rounds of a policy on a scenario and show each round against the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from hetsched.cli.app import app, out
from hetsched.export import write_chrome_trace
from hetsched.loop import LoopConfig, RunResult, run_rounds
from hetsched.model import Mapping, Scenario
from hetsched.model.files import load_scenario
from hetsched.policies import make_policy, policy_names


def mapping_text(mapping: Mapping, reference: Mapping | None = None) -> str:
    """``A:gpu_now B:cpu``; with a reference, nodes that differ from it are marked with ``*``."""
    parts = []
    for node, p in mapping.items():
        mark = "*" if reference is not None and reference.get(node) != p else ""
        parts.append(f"{node}:{p.value}{mark}")
    return " ".join(parts)


def round_table(result: RunResult) -> Table:
    """One row per round: mapping, E2E, ratio to the oracle, feasibility."""
    table = Table(title=f"{result.policy} on {result.scenario.name}", title_justify="left")
    table.add_column("round", justify="right")
    table.add_column("mapping (* differs from oracle)")
    table.add_column("E2E ms", justify="right")
    table.add_column("/ oracle", justify="right")
    table.add_column("probes", justify="right")
    table.add_column("feasible / reason")
    for r in result.rounds:
        e2e = r.trace.e2e_ms
        table.add_row(
            str(r.round),
            mapping_text(r.mapping, result.oracle_mapping),
            "-" if e2e is None else f"{e2e:.1f}",
            "-" if e2e is None else f"{e2e / result.oracle_e2e_ms:.3f}",
            str(len(r.probes)),
            "yes" if r.trace.feasible else f"[red]no[/]: {r.trace.reason}",
        )
    return table


def load(ref: str) -> Scenario:
    """Load a scenario by path or bundled name."""
    return load_scenario(ref)


@app.command()
def run(
    scenario: str = typer.Argument(..., help="Scenario file, or the name of a bundled scenario."),
    policy: str = typer.Option("all-gpu", "--policy", "-p", help=f"One of: {', '.join(policy_names())}."),
    rounds: int = typer.Option(20, "--rounds", "-r", min=1, help="Rounds to run."),
    seed: int = typer.Option(0, "--seed", "-s", help="Run seed (noise, randomized policies)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object and nothing else on stdout."),
    trace: Path | None = typer.Option(None, "--trace", help="Write every round's schedule as Chrome trace-event JSON."),
) -> None:
    """Run ROUNDS rounds of a policy and show each round's mapping and E2E against the oracle."""
    sc = load(scenario)
    pol = make_policy(policy)
    result = run_rounds(sc, pol, LoopConfig(rounds=rounds, seed=seed))
    if trace is not None:
        write_chrome_trace(trace, ((f"round {r.round}", r.trace) for r in result.rounds))
    if as_json:
        typer.echo(json.dumps(result.to_dict()))
        return
    out.print(
        f"oracle: {mapping_text(result.oracle_mapping)}  E2E {result.oracle_e2e_ms:.1f} ms (noise-free)"
    )
    out.print(round_table(result))
    best = result.best()
    if best is None:
        out.print("[red]no round was feasible[/]")
    else:
        e2e = best.trace.e2e_ms or 0.0
        out.print(f"best round {best.round}: E2E {e2e:.1f} ms = {e2e / result.oracle_e2e_ms:.3f} x oracle")
    if trace is not None:
        out.print(f"trace written to {trace} (open in https://ui.perfetto.dev or chrome://tracing)")
