"""``hetsched runs`` and ``hetsched show-run``: list the runs in the run store and show one of
them (rounds, probes, decider transcript, fallbacks). Reads ``hetsched.store``; top of the
import graph with the other CLI modules.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from hetsched.cli.app import app, fail, out
from hetsched.cli.run import mapping_text
from hetsched.model import Mapping, RoundRecord
from hetsched.store import STATUSES, RunInfo, RunStore, UnknownRunError, resolve_store_path

STORE_HELP = "Run store file (default: $HETSCHED_STORE, else runs.sqlite in the user data dir)."


def _when(iso: str, fmt: str = "%Y-%m-%d %H:%M") -> str:
    """``2026-11-29 17:58`` in local time."""
    try:
        return datetime.fromisoformat(iso).astimezone().strftime(fmt)
    except ValueError:
        return iso


def _status(info: RunInfo) -> str:
    if info.stale:
        return "[yellow]stale[/]"  # running, but its process is gone: resume it
    colour = {"finished": "green", "interrupted": "yellow", "running": "cyan"}[info.status]
    return f"[{colour}]{info.status}[/]"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _clip(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters; --full shows all)"


def _block(text: str, limit: int | None) -> str:
    """Escaped, clipped, continuation lines indented under their label."""
    return escape(_clip(text, limit)).replace("\n", "\n      ")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@app.command("runs")
def runs_command(
    store: Path | None = typer.Option(None, "--store", help=STORE_HELP),
    scenario: str | None = typer.Option(None, "--scenario", help="Only runs of this scenario name."),
    policy: str | None = typer.Option(None, "--policy", "-p", help="Only runs of this policy."),
    status: str | None = typer.Option(None, "--status", help=f"Only runs with this status: {', '.join(STATUSES)}."),
    experiment: str | None = typer.Option(None, "--experiment", help="Only runs of this experiment (bench id)."),
    limit: int = typer.Option(50, "--limit", "-n", min=0, help="Show at most this many (newest first); 0: all."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array and nothing else."),
) -> None:
    """List the recorded runs, newest first."""
    if status is not None and status not in STATUSES:
        raise fail(f"--status {status!r} is not a run status; accepted: {', '.join(STATUSES)}")
    path = resolve_store_path(store)
    if not path.exists():
        if as_json:
            typer.echo("[]")
        else:
            out.print(f"no runs yet: run store {escape(str(path))} does not exist")
        return
    with RunStore(path, create=False) as st:
        infos = st.runs(experiment=experiment, scenario=scenario, policy=policy, status=status, limit=limit or None)
    if as_json:
        typer.echo(json.dumps([i.to_dict() for i in infos]))
        return
    if not infos:
        out.print(f"no matching runs in {escape(str(path))}")
        return
    out.print(f"runs in {escape(str(path))}")
    table = Table(box=None, pad_edge=False, header_style="bold underline")
    for col in ("id", "scenario", "policy", "seed", "rounds", "status", "best E2E ms", "created"):
        table.add_column(col, justify="right" if col in ("seed", "rounds", "best E2E ms") else "left",
                         no_wrap=col in ("id", "policy", "rounds", "status"))
    for i in infos:
        best = _ms(i.best_e2e_ms)
        if i.best_e2e_ms is not None and i.reference is not None:
            best += f" ({i.best_e2e_ms / i.reference.e2e_ms:.2f}x)"
        # the decider is what tells agentic runs apart; every option is in `hetsched show-run`
        opts = f":{escape(str(i.options['decider']))}" if "decider" in i.options else ""
        opts += " (cold)" if i.options.get("cold_start") else ""
        table.add_row(
            i.id,
            escape(i.scenario_name),
            escape(i.policy) + opts,
            str(i.seed),
            f"{i.rounds_done}/{i.rounds_planned}",
            _status(i),
            best,
            _when(i.created_at, "%m-%d %H:%M"),
        )
    out.print(table)


@app.command("show-run")
def show_run(
    run_id: str = typer.Argument(..., help="Run id (or a unique prefix), as `hetsched runs` lists it."),
    store: Path | None = typer.Option(None, "--store", help=STORE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the whole run (traces included) as one JSON object."),
    full: bool = typer.Option(False, "--full", help="Print prompts, replies and observations in full."),
) -> None:
    """Show one run: its settings, each round against its reference, probes, the decider transcript and fallbacks."""
    path = resolve_store_path(store)
    if not path.exists():
        raise UnknownRunError(f"no run {run_id!r}: run store {path} does not exist")
    with RunStore(path, create=False) as st:
        if as_json:
            typer.echo(json.dumps(st.export(run_id)))
            return
        stored = st.load(run_id)
    info = stored.info
    ref = info.reference
    out.print(f"[bold]run {info.id}[/]  {_status(info)}"
              + (f" ({escape(info.status_reason)})" if info.status_reason else ""))
    sc = stored.scenario
    out.print(f"scenario {escape(info.scenario_name)} ({sc.mode.value}, {len(sc.workflow.nodes)} nodes, "
              f"VRAM budget {sc.machine.vram_budget_mb:g} MB)")
    out.print(f"policy {escape(info.policy)}  options {escape(json.dumps(info.options, sort_keys=True))}  "
              f"seed {info.seed}  rounds {info.rounds_done}/{info.rounds_planned}"
              + (f"  stop after {info.stop_after} stable" if info.stop_after else ""))
    out.print(f"executor {escape(info.executor.label)}  hetsched {escape(info.hetsched_version)}  "
              f"created {_when(info.created_at)}  updated {_when(info.updated_at)}"
              + (f"  experiment {escape(info.experiment)}" if info.experiment else ""))
    if ref is not None:
        out.print(f"{escape(ref.label)}: {escape(mapping_text(ref.mapping))} ({_code(ref.mapping, None)})  "
                  f"E2E {ref.e2e_ms:.1f} ms (noise-free)")
    out.print(_rounds_table(info, stored.rounds))
    notes = dict.fromkeys(n for r in stored.rounds for t in (r.trace, *(p.trace for p in r.probes)) for n in t.notes)
    for note in notes:
        out.print(f"[bold]note:[/] {escape(note)}", soft_wrap=True)
    _print_probes(stored.rounds)
    _print_transcript(stored.rounds, None if full else 600, full)


def _code(mapping: Mapping, reference: Mapping | None) -> str:
    """``G C G* Q``: one letter a node (C cpu, G gpu_now, Q gpu_queue), * where it differs from reference."""
    return " ".join(p.short + ("*" if reference is not None and reference.get(n) != p else "")
                    for n, p in mapping.items())


def _rounds_table(info: RunInfo, rounds: list[RoundRecord]) -> Table:
    nodes = " ".join(rounds[0].mapping) if rounds else ""
    ref = info.reference
    ratio_col = "/ref" if ref is None else f"/{ref.kind.value}"
    out.print(f"rounds; mapping letters per node {escape(nodes)}: C cpu, G gpu_now, Q gpu_queue"
              + ("" if ref is None else f"; * differs from the {ref.kind.value}"))
    table = Table(box=None, pad_edge=False, header_style="bold underline")
    for col in ("round", "mapping", "E2E ms", ratio_col, "probes", "feasible / reason", "decider", "rationale"):
        table.add_column(col, justify="right" if col in ("round", "E2E ms", ratio_col, "probes") else "left",
                         no_wrap=col in ("round", "mapping"))
    for r in rounds:
        e2e = r.trace.e2e_ms
        d = r.proposal.decision
        decider = escape(d.decider) if d is not None else "-"
        if d is not None and d.fallback:
            decider += " [red]fallback[/]"
        table.add_row(
            str(r.round),
            _code(r.mapping, None if ref is None else ref.mapping),
            _ms(e2e),
            "-" if e2e is None or ref is None else f"{e2e / ref.e2e_ms:.3f}",
            str(len(r.probes)),
            "yes" if r.trace.feasible else f"[red]no[/]: {escape(_cut(r.trace.reason, 40))}",
            decider,
            escape(_cut(r.proposal.rationale, 60)),
        )
    return table


def _print_probes(rounds: list[RoundRecord]) -> None:
    probes = [(r.round, i, p) for r in rounds for i, p in enumerate(r.probes)]
    if not probes:
        return
    out.print("[bold]probes[/]")
    for rnd, i, p in probes:
        result = (f"E2E {_ms(p.trace.e2e_ms)} ms" if p.trace.feasible
                  else f"[red]infeasible[/]: {escape(p.trace.reason)}")
        note = f" ({escape(p.note)})" if p.note else ""
        out.print(f"  round {rnd} probe {i} {escape(p.kind)}{note}: {mapping_text(p.mapping, p.base)} -> {result}")


def _print_transcript(rounds: list[RoundRecord], limit: int | None, full: bool) -> None:
    shown = False
    for r in rounds:
        d = r.proposal.decision
        if d is None or (not d.attempts and not d.fallback and not d.observations):
            continue
        if not shown:
            out.print("[bold]transcript[/]")
            shown = True
        model = f" model {escape(str(d.model))}" if d.model else ""
        out.print(f"[bold]round {r.round}[/]: decider {escape(d.decider)}{model}"
                  f", {len(d.observations)} observations, {d.probes_spent} probes spent")
        if full:
            for o in d.observations:
                out.print(f"  observation: {escape(json.dumps(o, sort_keys=True))}")
        for t in d.attempts:
            facts = []
            if t.prompt_tokens is not None or t.completion_tokens is not None:
                facts.append(f"{t.prompt_tokens if t.prompt_tokens is not None else '?'} prompt + "
                             f"{t.completion_tokens if t.completion_tokens is not None else '?'} completion tokens")
            if t.latency_ms is not None:
                facts.append(f"{t.latency_ms:.0f} ms")
            out.print(f"  attempt {t.attempt}" + (f" ({', '.join(facts)})" if facts else ""))
            out.print(f"    [dim]prompt:[/] {_block(t.prompt, limit)}")
            if t.reasoning:
                out.print(f"    [dim]reasoning:[/] {_block(t.reasoning, limit)}")
            out.print(f"    [dim]reply:[/] {_block(t.reply, limit)}")
            if t.error:
                out.print(f"    [red]rejected:[/] {escape(t.error)}")
        if d.fallback:
            out.print(f"  [red]fallback[/]: {escape(d.fallback_reason or 'no reason recorded')}; "
                      f"ran {escape(mapping_text(r.mapping))}")

