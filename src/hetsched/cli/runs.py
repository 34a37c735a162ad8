"""``hetsched runs`` and ``hetsched show-run``: list the runs in the run store and show one of
them (rounds, probes, decider transcript, fallbacks). Reads ``hetsched.store``; top of the
import graph with the other CLI modules.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import typer
from rich.table import Table

from hetsched.cli.app import app, err, examples, fail, out, safe, safe_path
from hetsched.cli.common import mapping_text, print_learned
from hetsched.model import Mapping, RoundRecord
from hetsched.model.errors import did_you_mean, path_text
from hetsched.model.learned import learned_cards
from hetsched.model.measured import deploy_choice, executions
from hetsched.store import STATUSES, RunInfo, RunStore, UnknownRunError, resolve_store_path
from hetsched.store.db import recovery_hint

STORE_DEFAULT = "$HETSCHED_STORE, else runs.sqlite in the user data dir"
"""How the --store default is shown in help."""


def _when(iso: str, fmt: str = "%Y-%m-%d %H:%M") -> str:
    """``2026-11-29 17:58`` in local time."""
    try:
        return datetime.fromisoformat(iso).astimezone().strftime(fmt)
    except ValueError:
        return iso


def _status(info: RunInfo) -> str:
    if info.damage:
        return "[red]damaged[/]"  # the row cannot be read back whole: show-run says what and what to do
    if info.stale:
        return "[yellow]stale[/]"  # running, but its process is gone: resume it
    colour = {"finished": "green", "interrupted": "yellow", "running": "cyan"}.get(info.status, "red")
    return f"[{colour}]{safe(info.status)}[/]"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


FULL_LIMIT = 100_000
"""Most characters of one prompt, reply or reasoning that ``show-run --full`` prints (--json has all)."""


def _clip(text: str, limit: int | None) -> str:
    if limit is None:
        if len(text) <= FULL_LIMIT:
            return text
        return f"{text[:FULL_LIMIT]}... ({len(text) - FULL_LIMIT:,} more characters; --json has all of it)"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters; --full shows more)"


def _block(text: str, limit: int | None) -> str:
    """Escaped, clipped, continuation lines indented under their label."""
    return safe(_clip(text, limit)).replace("\n", "\n      ")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@app.command("runs", epilog=examples(
    "hetsched runs", "hetsched runs --scenario S13 --policy agentic --status finished",
    "hetsched runs --store bench-out/runs.sqlite --limit 0 --json",
))
def runs_command(
    store: Path | None = typer.Option(None, "--store", metavar="FILE", help="Run store file.",
                                      show_default=STORE_DEFAULT),
    scenario: str | None = typer.Option(None, "--scenario", metavar="NAME", help="Only runs of this scenario name."),
    policy: str | None = typer.Option(None, "--policy", "-p", metavar="NAME", help="Only runs of this policy."),
    status: str | None = typer.Option(
        None, "--status", metavar="STATUS", help=f"Only runs with this status: {', '.join(STATUSES)}."
    ),
    experiment: str | None = typer.Option(
        None, "--experiment", metavar="NAME", help="Only runs of this experiment (bench id)."
    ),
    limit: int = typer.Option(
        50, "--limit", "-n", min=0, metavar="N", help="Show at most this many (newest first); 0: all."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array and nothing else."),
) -> None:
    """List the recorded runs, newest first."""
    if status is not None and status not in STATUSES:
        raise fail(f"--status {status!r} is not a run status; accepted: {', '.join(STATUSES)}"
                   + did_you_mean(status, STATUSES))
    path = resolve_store_path(store)
    if not path.exists():
        if as_json:
            typer.echo("[]")
        else:
            out.print(f"no runs yet: run store {safe_path(path)} does not exist", soft_wrap=True)
        return
    with RunStore(path, create=False, read_only=True) as st:
        infos = st.runs(experiment=experiment, scenario=scenario, policy=policy, status=status, limit=limit or None)
        hurt = st.damage_found
    if hurt:  # the listing read around a damaged page: say so, on stderr (stdout stays the list)
        err.print(f"[yellow]warning:[/] run store {safe_path(path)} is damaged ({safe(hurt)}); the runs below are "
                  f"those that read back, read one by one. {safe(recovery_hint(path, listed=False))}", soft_wrap=True)
    if as_json:
        typer.echo(json.dumps([i.to_dict() for i in infos]))
        return
    if not infos:
        out.print(f"no matching runs in {safe_path(path)}", soft_wrap=True)
        return
    damaged = [i.id for i in infos if i.damage]
    out.print(f"runs in {safe_path(path)}", soft_wrap=True)
    table = Table(box=None, pad_edge=False, header_style="bold underline")
    for col in ("id", "scenario", "policy", "seed", "rounds", "status", "best E2E ms", "created"):
        table.add_column(col, justify="right" if col in ("seed", "rounds", "best E2E ms") else "left",
                         no_wrap=col in ("id", "policy", "rounds", "status"))
    for i in infos:
        best = _ms(i.best_e2e_ms)
        if i.best_e2e_ms is not None and i.reference is not None:
            best += f" ({i.best_e2e_ms / i.reference.compare_ms:.2f}x)"
        # the decider is what tells agentic runs apart; every option is in `hetsched show-run`
        opts = f":{safe(str(i.options['decider']))}" if "decider" in i.options else ""
        opts += " (cold)" if i.options.get("cold_start") else ""
        table.add_row(
            safe(i.id),
            safe(i.scenario_name),
            safe(i.policy) + opts,
            str(i.seed),
            f"{i.rounds_done}/{i.rounds_planned}",
            _status(i),
            best,
            safe(_when(i.created_at, "%m-%d %H:%M")),
        )
    out.print(table)
    if damaged:
        out.print(f"[red]{len(damaged)} run(s) cannot be read back whole[/] ({safe(', '.join(damaged[:5]))}"
                  f"{', ...' if len(damaged) > 5 else ''}): `hetsched show-run ID` says what is damaged and what to do")


@app.command("show-run", epilog=examples("hetsched show-run 3f2a9c1b", "hetsched show-run 3f2a --full",
                                          "hetsched show-run 3f2a9c1b --json > run.json"))
def show_run(
    run_id: str = typer.Argument(
        ..., metavar="RUN_ID", help="Run id (or a unique prefix), as `hetsched runs` lists it."
    ),
    store: Path | None = typer.Option(None, "--store", metavar="FILE", help="Run store file.",
                                      show_default=STORE_DEFAULT),
    as_json: bool = typer.Option(False, "--json", help="Print the whole run (traces included) as one JSON object."),
    full: bool = typer.Option(
        False, "--full", help=f"Print prompts, replies and observations in full (up to {FULL_LIMIT:,} characters each)."
    ),
) -> None:
    """Show one run: its settings, each round against its reference, probes, the decider transcript and fallbacks."""
    path = resolve_store_path(store)
    if not path.exists():
        raise UnknownRunError(f"no run {run_id!r}: run store {path_text(path)} does not exist")
    with RunStore(path, create=False, read_only=True) as st:
        if as_json:
            typer.echo(json.dumps(st.export(run_id)))
            return
        stored = st.load(run_id)
    info = stored.info
    ref = info.reference
    out.print(f"[bold]run {safe(info.id)}[/]  {_status(info)}"
              + (f" ({safe(info.status_reason)})" if info.status_reason else ""))
    sc = stored.scenario
    out.print(f"scenario {safe(info.scenario_name)} ({sc.mode.value}, {len(sc.workflow.nodes)} nodes, "
              f"VRAM budget {sc.machine.vram_budget_mb:g} MB)")
    out.print(f"policy {safe(info.policy)}  options {safe(json.dumps(info.options, sort_keys=True))}  "
              f"seed {info.seed}  rounds {info.rounds_done}/{info.rounds_planned}"
              + (f"  stop after {info.stop_after} stable" if info.stop_after else ""))
    out.print(f"executor {safe(info.executor.label)}  hetsched {safe(info.hetsched_version)}  "
              f"created {safe(_when(info.created_at))}  updated {safe(_when(info.updated_at))}"
              + (f"  experiment {safe(info.experiment)}" if info.experiment else ""))
    if ref is not None:
        how = "noise-free" if info.executor.name == "sim" else "simulated from the cards, not measured"
        out.print(f"{safe(ref.label)}: {safe(mapping_text(ref.mapping))} ({_code(ref.mapping, None)})  "
                  f"E2E {ref.e2e_ms:.1f} ms ({how})")
        if ref.measured is not None:
            what = f"the {ref.kind.value} mapping" if ref.measured_kind != "best measured" else \
                f"the {ref.kind.value} mapping could not run; the best measured mapping"
            out.print(f"{what} measured on {safe(info.executor.name)}: {safe(ref.measured.describe())}",
                      soft_wrap=True)
    out.print(_rounds_table(info, stored.rounds))
    if sc.workload is not None:  # each round a window of requests: its percentiles (E2E above = p95)
        from hetsched.cli.run import load_table

        out.print(load_table(sc.workload, stored.rounds), soft_wrap=True)
    deploy = deploy_choice(executions(stored.rounds))
    if deploy is not None:
        out.print(f"deploy: {safe(mapping_text(deploy.mapping))}  ({safe(deploy.describe())})", soft_wrap=True)
    print_learned(learned_cards(sc, stored.rounds), measured=info.executor.name != "sim")
    notes = dict.fromkeys(n for r in stored.rounds for t in (r.trace, *(p.trace for p in r.probes)) for n in t.notes)
    for note in notes:
        out.print(f"[bold]note:[/] {safe(note)}", soft_wrap=True)
    _print_probes(stored.rounds)
    _print_transcript(stored.rounds, None if full else 600, full)


def _code(mapping: Mapping, reference: Mapping | None) -> str:
    """``G C G* Q``: one letter a node (C cpu, G gpu_now, Q gpu_queue), * where it differs from reference."""
    return " ".join(p.short + ("*" if reference is not None and reference.get(n) != p else "")
                    for n, p in mapping.items())


def _rounds_table(info: RunInfo, rounds: list[RoundRecord]) -> Table:
    nodes = " ".join(rounds[0].mapping) if rounds else ""
    ref = info.reference
    ratio_col = "/ref" if ref is None else f"/{ref.compare_name}"
    out.print(f"rounds; mapping letters per node {safe(_cut(nodes, 2000))}: C cpu, G gpu_now, Q gpu_queue"
              + ("" if ref is None else f"; * differs from the {ref.kind.value}"))
    table = Table(box=None, pad_edge=False, header_style="bold underline")
    for col in ("round", "mapping", "E2E ms", ratio_col, "probes", "feasible / reason", "decider", "rationale"):
        table.add_column(col, justify="right" if col in ("round", "E2E ms", ratio_col, "probes") else "left",
                         no_wrap=col in ("round", "mapping"))
    for r in rounds:
        e2e = r.trace.e2e_ms
        d = r.proposal.decision
        decider = safe(d.decider) if d is not None else "-"
        if d is not None and d.fallback:
            decider += " [red]fallback[/]"
        table.add_row(
            str(r.round),
            _code(r.mapping, None if ref is None else ref.mapping),
            _ms(e2e),
            "-" if e2e is None or ref is None else f"{e2e / ref.compare_ms:.3f}",
            str(len(r.probes)),
            "yes" if r.trace.feasible else f"[red]no[/]: {safe(_cut(r.trace.reason, 40))}",
            decider,
            safe(_cut(r.proposal.rationale, 60)),
        )
    return table


def _print_probes(rounds: list[RoundRecord]) -> None:
    probes = [(r.round, i, p) for r in rounds for i, p in enumerate(r.probes)]
    if not probes:
        return
    out.print("[bold]probes[/]")
    for rnd, i, p in probes:
        result = (f"E2E {_ms(p.trace.e2e_ms)} ms" if p.trace.feasible
                  else f"[red]infeasible[/]: {safe(p.trace.reason)}")
        note = f" ({safe(p.note)})" if p.note else ""
        out.print(f"  round {rnd} probe {i} {safe(p.kind)}{note}: {safe(mapping_text(p.mapping, p.base))} -> {result}")


def _print_transcript(rounds: list[RoundRecord], limit: int | None, full: bool) -> None:
    shown = False
    for r in rounds:
        d = r.proposal.decision
        if d is None or (not d.attempts and not d.fallback and not d.observations):
            continue
        if not shown:
            out.print("[bold]transcript[/]")
            shown = True
        model = f" model {safe(str(d.model))}" if d.model else ""
        out.print(f"[bold]round {r.round}[/]: decider {safe(d.decider)}{model}"
                  f", {len(d.observations)} observations, {d.probes_spent} probes spent")
        if full:
            for o in d.observations:
                out.print(f"  observation: {safe(_clip(json.dumps(o, sort_keys=True), None))}", soft_wrap=True)
        for t in d.attempts:
            facts = []
            if t.prompt_tokens is not None or t.completion_tokens is not None:
                facts.append(f"{t.prompt_tokens if t.prompt_tokens is not None else '?'} prompt + "
                             f"{t.completion_tokens if t.completion_tokens is not None else '?'} completion tokens")
            if t.latency_ms is not None:
                facts.append(f"{t.latency_ms:.0f} ms")
            out.print(f"  attempt {t.attempt}" + (f" ({', '.join(facts)})" if facts else ""))
            # soft_wrap: the terminal wraps long texts; rich's own wrapping is slow on 100,000 characters
            out.print(f"    [dim]prompt:[/] {_block(t.prompt, limit)}", soft_wrap=True)
            if t.reasoning:
                out.print(f"    [dim]reasoning:[/] {_block(t.reasoning, limit)}", soft_wrap=True)
            out.print(f"    [dim]reply:[/] {_block(t.reply, limit)}", soft_wrap=True)
            if t.error:
                out.print(f"    [red]rejected:[/] {safe(t.error)}")
        if d.fallback:
            out.print(f"  [red]fallback[/]: {safe(d.fallback_reason or 'no reason recorded')}; "
                      f"ran {safe(mapping_text(r.mapping))}")

