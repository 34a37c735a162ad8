"""``hetsched show``, ``oracle``, ``reference`` and ``validate``: look at scenarios, cards and the optimum."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import typer
from rich.table import Table

from hetsched.cli.app import EXIT_NO_RESULT, app, err, examples, fail, out, plain_table, safe, safe_path
from hetsched.cli.common import SCENARIO_HELP, load, mapping_text
from hetsched.model import Mapping, Reference, Scenario
from hetsched.model.errors import path_text
from hetsched.model.files import (
    arrivals_warnings,
    bundled_scenarios,
    detect_kind,
    load_mapping,
    load_scenario,
    load_tool_library,
    read_arrivals,
    scenario_warnings,
)
from hetsched.model.workload import Workload

# the simulator and the searches (numpy) are imported by the commands that use them: show and validate
# of a scenario or library, and `scenarios`, start without them
ORACLE_MAX_SECONDS = 60.0
"""``oracle --max-seconds`` default: :data:`hetsched.search.oracle.DEFAULT_MAX_SECONDS` (a test keeps them equal)."""

# the window flags `simulate` and `oracle` share (`hetsched run` words them per round)
_LOAD = "Under load"
_CLIENTS = typer.Option(None, "--clients", min=1, max=10_000, metavar="K", rich_help_panel=_LOAD,
                        help="A window of requests from K clients (closed loop).")
_RATE = typer.Option(None, "--rate", metavar="PER_S", rich_help_panel=_LOAD,
                     help="A window of Poisson arrivals at this rate (open loop).")
_ARRIVALS = typer.Option(None, "--arrivals", metavar="FILE", rich_help_panel=_LOAD,
                         help="A window of requests sent at the times in FILE (ms).")
_REQUESTS = typer.Option(None, "--requests", min=1, max=100_000, metavar="N", rich_help_panel=_LOAD,
                         show_default="100 with --clients or --rate", help="Requests in the window.")
_DURATION = typer.Option(None, "--duration", metavar="SECONDS", rich_help_panel=_LOAD,
                         help="Send requests for this long (instead of --requests).")
_THINK_MS = typer.Option(None, "--think-ms", metavar="MS", rich_help_panel=_LOAD,
                         help="--clients: wait after a response before the next request.")

RICH_TABLE_ROWS = 100
"""Tables longer than this are printed as plain padded text (rich's Table is slow on thousands of rows)."""


def cards_table(sc: Scenario) -> Table | str:
    """The cards of a scenario's tools with their derived figures. The queue speedup is that of the load
    the model charges a ``gpu_queue`` node (``contention.queue_speedup``); when that differs from a card's
    ``load_ms`` (the machine's ``cold_load_share`` and a card's ``load_cold_ms``), a column shows it."""
    from hetsched.model.contention import queue_load_ms, queue_speedup

    loads = {name: queue_load_ms(card, sc.machine) for name, card in sc.cards.items()}
    cold = any(loads[name] != card.load_ms for name, card in sc.cards.items())
    columns = ("tool", "cpu ms", "gpu ms", "load ms", *(("expected load ms",) if cold else ()), "VRAM MB", "util",
               "speedup", "queue sp.", "category")
    rows = []
    for card in sc.cards.values():
        s = card.speedup
        q = queue_speedup(card, sc.machine)
        rows.append((
            card.name,
            f"{card.cpu_ms:g}",
            "-" if card.gpu_ms is None else f"{card.gpu_ms:g}",
            f"{card.load_ms:g}",
            *((f"{loads[card.name]:.4g}",) if cold else ()),
            f"{card.vram_mb:g}",
            f"{card.gpu_util:g}",
            "-" if s is None else f"{s:.2f}x",
            "-" if q is None else f"{q:.2f}x",
            card.category.value,
        ))
    numeric = [c for c in columns if c not in ("tool", "category")]
    if len(rows) > RICH_TABLE_ROWS or not out.is_terminal:
        # piped or long: plain padded text, never cut to a terminal width (a pipe has none)
        return "tool cards\n" + plain_table(columns, rows, right=numeric)
    table = Table(title="tool cards", title_justify="left")
    for col in columns:
        table.add_column(col, justify="right" if col in numeric else "left")
    for row in rows:
        table.add_row(*(safe(cell) for cell in row))
    return table


MACHINE_LINE_FIELDS = ("name", "cpu_cores", "vram_budget_mb", "gpu_kappa", "noise_cv", "pcie_mb_per_ms")
"""The machine fields ``show`` always prints; every other field is printed, by its file name, when it is set
away from its default (the contention parameters that change the model's numbers: ``cold_load_share``...)."""


def machine_text(sc: Scenario) -> str:
    """``show``'s machine line: the fields every model reads, then each other machine field set away from its
    default (by the name a scenario file gives it), and what a cold share does to the cards' queued loads."""
    m = sc.machine
    text = (f"machine: {safe(m.name)}; {m.cpu_cores} CPU cores; VRAM budget {m.vram_budget_mb:g} MB; "
            f"kappa {m.gpu_kappa:g}; noise cv {m.noise_cv:g}; PCIe {m.pcie_mb_per_ms:g} MB/ms")
    for field, info in type(m).model_fields.items():
        value = getattr(m, field)
        if field in MACHINE_LINE_FIELDS or value == info.default:
            continue
        text += f"; {field} {value:g}" if isinstance(value, float) else f"; {field} {safe(str(value))}"
    if m.cold_load_share > 0.0 and any(c.load_cold_ms is not None for c in sc.cards.values()):
        text += (f"\nqueued loads: a card with load_cold_ms is charged load_ms + {m.cold_load_share:g} x "
                 "(load_cold_ms - load_ms) (the expected load ms column"
                 + (f"; memory freed within {m.warm_reuse_ms:g} ms is reused at load_ms" if m.warm_reuse_ms else "")
                 + ")")
    return text


def space_text(sc: Scenario) -> str:
    """The size of the mapping space, exact while it is readable, else as powers (3^10000 has 4,772 digits)."""
    sizes = [len(c) for c in sc.choices]
    twos, threes = sizes.count(2), sizes.count(3)
    if twos * math.log10(2) + threes * math.log10(3) < 15:
        return f"{2**twos * 3**threes:,}"
    powers = " x ".join(f"{b}^{e}" for b, e in ((2, twos), (3, threes)) if e)
    return f"{powers} (about 10^{int(twos * math.log10(2) + threes * math.log10(3))})"


@app.command(epilog=examples("hetsched show S13", "hetsched show my_flow.yaml"))
def show(scenario: str = typer.Argument(..., metavar="SCENARIO", help=SCENARIO_HELP)) -> None:
    """Print a scenario: its cards, its DAG and its machine/budget."""
    sc = load(scenario)
    out.print(f"[bold]{safe(sc.name)}[/] ({sc.mode.value}) {safe(sc.description)}")
    if sc.shows:
        out.print(f"shows: {safe(sc.shows)}")
    cards = cards_table(sc)
    out.print(cards, soft_wrap=isinstance(cards, str))  # plain text: one line a card, however wide
    wf = sc.workflow
    lines = ["DAG:"]  # one print for the whole DAG: a print per node costs seconds on 10,000 nodes
    for n in wf.topo_order:
        succ = wf.succs(n)
        tail = f" -> {', '.join(safe(x, newlines=False) for x in succ)}" if succ else "  (sink)"
        lines.append(f"  {safe(n, newlines=False)} \\[{safe(wf.tool_of[n], newlines=False)}]{tail}")
    out.print("\n".join(lines), soft_wrap=True)
    out.print(machine_text(sc), soft_wrap=True)
    out.print(f"mapping space: {space_text(sc)} mappings")
    if sc.workload is not None:
        out.print(f"workload: {safe(sc.workload.describe())} (each round of `hetsched run` is a window of requests)",
                  soft_wrap=True)


@app.command(epilog=examples("hetsched oracle S13", "hetsched oracle fanout --top 3 --json",
                             "hetsched oracle fanout_light --clients 8",
                             "hetsched oracle S6 --rate 0.5 --objective throughput --slo-ms 5000",
                             "hetsched oracle my_flow.yaml --max-seconds 120", "hetsched oracle S13 --all"))
def oracle(
    scenario: str = typer.Argument(..., metavar="SCENARIO", help=SCENARIO_HELP),
    top: int = typer.Option(
        10, "--top", min=1, metavar="N", help="How many of the best mappings to rank (all proven)."
    ),
    full: bool = typer.Option(
        False, "--all", help="Simulate and rank every feasible mapping instead (small spaces: its time estimate "
        "must fit --max-seconds)."
    ),
    max_seconds: float = typer.Option(
        ORACLE_MAX_SECONDS, "--max-seconds", metavar="SECONDS",
        help="Give up with an estimate when the search would take longer.",
    ),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", min=1, metavar="N", show_default="the CPUs available",
        help="Processes; the result does not depend on it.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object and nothing else."),
    clients: int | None = _CLIENTS,
    rate: float | None = _RATE,
    arrivals: Path | None = _ARRIVALS,
    requests: int | None = _REQUESTS,
    duration: float | None = _DURATION,
    think_ms: float | None = _THINK_MS,
    slo_ms: float | None = typer.Option(None, "--slo-ms", metavar="MS", rich_help_panel="Under load",
                                        help="p95 target of --objective throughput."),
    objective: str = typer.Option("p95", "--objective", metavar="NAME", rich_help_panel="Under load",
                                  help="p95: the lowest p95 latency at the load; throughput: the highest Poisson rate "
                                  "whose p95 meets --slo-ms."),
) -> None:
    """Find the best feasible mappings on the noise-free simulator by exact branch-and-bound.
    With --clients, --rate or --arrivals (or a scenario with a workload): the best mapping under
    that load (lowest window p95, or with --objective throughput the highest rate meeting --slo-ms)."""
    from hetsched.cli.run import workload_from_flags
    from hetsched.search.load import parse_objective
    from hetsched.search.oracle import solve
    from hetsched.search.reference import check_max_seconds

    sc = load(scenario)
    goal = parse_objective(objective)
    wl = workload_from_flags(sc.workload, clients=clients, rate=rate, arrivals=arrivals, requests=requests,
                             duration=duration, think_ms=think_ms, slo_ms=slo_ms)
    if wl is None and (goal.value != "p95" or slo_ms is not None):
        raise fail("--objective and --slo-ms apply under load: give --clients K, --rate PER_S or --arrivals FILE")
    if wl is not None:
        _oracle_under_load(sc, wl, goal.value, as_json)
        return
    check_max_seconds(max_seconds)
    t0 = time.perf_counter()
    res = solve(sc, ranking=full, top=top, max_seconds=max_seconds, workers=jobs)
    seconds = time.perf_counter() - t0
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "scenario": sc.name,
                    "mapping": res.best.to_dict(),
                    "e2e_ms": res.e2e_ms,
                    "optimal": [m.to_dict() for m in res.optimal],
                    "space": res.space,
                    "feasible": res.feasible if res.full else None,
                    "search": "full" if res.full else "bounded",
                    "ranking": [{"mapping": r.mapping.to_dict(), "e2e_ms": r.e2e_ms} for r in res.ranking[:top]],
                }
            )
        )
        return
    out.print(f"oracle for {safe(sc.name)}: {safe(mapping_text(res.best))}  E2E {res.e2e_ms:.1f} ms")
    if len(res.optimal) > 1:
        out.print(f"{len(res.optimal)} mappings tie at the optimum (the one shown holds the least VRAM)")
    if res.full:
        out.print(
            f"searched {space_text(sc)} mappings: {res.feasible:,} feasible, {res.space - res.feasible:,} infeasible "
            f"({res.simulated:,} simulated in {seconds:.2f} s)"
        )
    else:
        out.print(
            f"bounded search over {space_text(sc)} mappings: {res.simulated:,} simulated, the rest proven no better "
            f"by lower bounds or over the VRAM budget ({seconds:.2f} s, {res.workers} process(es))"
        )
    shown = res.ranking[:top]
    table = Table(title=f"top {len(shown)}" + ("" if res.full else " (exact)"), title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("mapping")
    table.add_column("E2E ms", justify="right")
    table.add_column("/ best", justify="right")
    for i, r in enumerate(shown, 1):
        table.add_row(str(i), safe(mapping_text(r.mapping)), f"{r.e2e_ms:.1f}", f"{r.e2e_ms / res.e2e_ms:.3f}")
    out.print(table)


@app.command(epilog=examples(
    "hetsched validate my_flow.yaml", "hetsched validate my_tools.yaml", "hetsched validate arrivals.txt",
    "hetsched validate mapping.yaml --scenario vram_3way",
))
def validate(
    file: Path = typer.Argument(..., metavar="FILE", help="A tool library, scenario, mapping or arrival-times file."),
    scenario: str | None = typer.Option(
        None, "--scenario", metavar="SCENARIO", help="For a mapping file: the scenario to check it against."
    ),
) -> None:
    """Check a file; print what it holds, or one clear error and exit 2."""
    kind = detect_kind(file)
    if kind == "arrivals":
        times = read_arrivals(file)
        out.print(f"ok: arrival times {safe_path(file)}: {len(times)} requests, {min(times):g} to {max(times):g} ms "
                  "from the start (use it with --arrivals, or workload.file in a scenario)", soft_wrap=True)
        for warning in arrivals_warnings(file):  # accepted, but changed when read
            err.print(f"[yellow]warning:[/] {safe(warning)}", soft_wrap=True)
    elif kind == "tools":
        cards = load_tool_library(file)
        out.print(f"ok: tool library {safe_path(file)} with {len(cards)} cards", soft_wrap=True)
    elif kind == "scenario":
        sc = load_scenario(file)
        out.print(
            f"ok: scenario {safe(sc.name)} ({sc.mode.value}, {len(sc.workflow.nodes)} nodes, "
            f"{len(sc.workflow.edges)} edges, budget {sc.machine.vram_budget_mb:g} MB"
            + (f"; workload: {safe(sc.workload.describe())}" if sc.workload is not None else "") + ")",
            soft_wrap=True,
        )
        for warning in scenario_warnings(file):  # accepted, but ignored or changed when read
            err.print(f"[yellow]warning:[/] {safe(warning)}", soft_wrap=True)
    else:
        mapping = load_mapping(file)
        if scenario is None:
            out.print(f"ok: mapping {safe_path(file)} with {len(mapping)} nodes (give --scenario to check it fully)",
                      soft_wrap=True)
            return
        sc = load(scenario)
        mapping = sc.validate_mapping(mapping, where=f"file {path_text(file)}")
        from hetsched.sim import Simulator

        reason = Simulator(sc, noise=False).infeasibility(mapping)
        verdict = f", but infeasible: {safe(reason)}" if reason else ", feasible"
        out.print(f"ok: mapping for {safe(sc.name)}{verdict}")


@app.command(epilog=examples("hetsched init S13 > my_flow.yaml", "hetsched init rag_tiny -o my_rag.yaml",
                             "hetsched init tools -o my_cards.yaml"))
def init(
    name: str = typer.Argument(..., metavar="NAME", help="A bundled scenario (hetsched scenarios lists them), or "
                               "tools / tools_tiny for a bundled tool library."),
    out_file: Path | None = typer.Option(
        None, "--out", "-o", metavar="FILE", help="Write it here (the scenario takes the file's name); "
        "default: print it."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
) -> None:
    """Print a bundled scenario or the bundled tool library as YAML to start your own from.

    The copy stands alone (cards from a bundled library are copied inline) and never keeps the
    bundled scenario's name: with --out it takes the file's name, printed it has no name line, so
    it takes the name of the file you save it to. Check your edits with ``hetsched validate FILE``.
    """
    from hetsched.model.files import starter_text, write_output

    if out_file is None:
        typer.echo(starter_text(name), nl=False)
        return
    if out_file.is_dir():
        raise fail(f"--out {path_text(out_file)} is a directory; give a file such as "
                   f"{path_text(out_file / (name + '.yaml'))}")
    if out_file.exists() and not force:
        raise fail(f"--out {path_text(out_file)} exists; give another file, or --force to overwrite it")
    if not out_file.parent.is_dir():
        raise fail(f"--out {path_text(out_file)}: the folder {path_text(out_file.parent)} does not exist")
    if out_file.suffix.lower() not in (".yaml", ".yml"):
        raise fail(f"--out {path_text(out_file)}: give a .yaml file (the copy is YAML, comments included)")
    text = starter_text(name, name=out_file.stem)
    write_output(out_file, text, what="--out")
    err.print(f"wrote {safe_path(out_file)}; check your edits with: hetsched validate {safe_path(out_file)}",
              soft_wrap=True)


@app.command("scenarios", epilog=examples("hetsched scenarios", "hetsched show S5"))
def list_scenarios() -> None:
    """List the bundled scenarios (the examples and the paper's suite S1-S13)."""
    import re

    def natural(name: str) -> tuple[str, int]:
        m = re.fullmatch(r"([A-Za-z_]+?)(\d+)", name)
        return (m[1], int(m[2])) if m else (name, -1)

    table = Table(box=None, pad_edge=False, header_style="bold underline")
    for col in ("name", "mode", "nodes", "VRAM MB", "shows"):
        table.add_column(col, justify="right" if col in ("nodes", "VRAM MB") else "left", no_wrap=col != "shows")
    for name, path in sorted(bundled_scenarios().items(), key=lambda kv: natural(kv[0])):
        sc = load_scenario(path)
        table.add_row(
            name,
            sc.mode.value,
            str(len(sc.workflow.nodes)),
            f"{sc.machine.vram_budget_mb:g}",
            safe(sc.shows or sc.description),
        )
    out.print(table)


@app.command(epilog=examples("hetsched schema scenario > scenario.schema.json", "hetsched schema --write schemas"))
def schema(
    kind: str = typer.Argument("scenario", metavar="KIND", help="tools, scenario or mapping."),
    write: Path | None = typer.Option(
        None, "--write", metavar="DIR", help="Write every schema into this folder instead."
    ),
) -> None:
    """Print the JSON Schema of a file format (or write them all with --write)."""
    from hetsched.model import UnknownNameError
    from hetsched.model.errors import did_you_mean
    from hetsched.model.schemas import SCHEMAS, write_schemas

    if write is not None:
        from hetsched.model.errors import OutputError, os_error_text

        if write.exists() and not write.is_dir():
            raise fail(f"--write {write} is a file, not a folder; give a folder for the schemas (created if missing)")
        try:
            paths = write_schemas(write)
        except OSError as exc:
            raise OutputError(f"--write {write}: cannot be written: {os_error_text(exc)}") from None
        for path in paths:
            out.print(f"wrote {safe_path(path)}", soft_wrap=True)
        return
    if kind not in SCHEMAS:
        raise UnknownNameError(f"unknown file kind {kind!r}; accepted: {', '.join(SCHEMAS)}"
                               + did_you_mean(kind, SCHEMAS))
    typer.echo(json.dumps(SCHEMAS[kind](), indent=2, sort_keys=True))


@app.command("reference", epilog=examples("hetsched reference S13", "hetsched reference my_flow.yaml --max-seconds 30",
                                          "hetsched reference big.yaml --kind best-known --json",
                                          "hetsched reference big.yaml --store bench-out/runs.sqlite"))
def reference_command(
    scenario: str = typer.Argument(..., metavar="SCENARIO", help=SCENARIO_HELP),
    kind: str = typer.Option(
        "auto", "--kind", metavar="KIND", help="auto (the oracle when the exact search proves it in --max-seconds, "
        "else a best-known mapping with its gap to a lower bound), oracle, or best-known."
    ),
    max_seconds: float = typer.Option(10.0, "--max-seconds", metavar="SECONDS", help="Time budget of the search."),
    seed: int = typer.Option(0, "--seed", "-s", metavar="N", help="Seeds the searches."),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", min=1, metavar="N", show_default="the CPUs available",
        help="Processes for the exact search and the best-known search's race (more search in the time budget).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object and nothing else."),
    store: Path | None = typer.Option(
        None, "--store", metavar="FILE",
        help="Also read this run store: a best-known mapping gives way to the reference a bench recorded for this "
        "scenario's content and to any better mapping its runs played (the best mapping known, as the bench's "
        "report has it); nothing is written.",
    ),
) -> None:
    """The mapping reports compare against: the exact oracle, or a best-known mapping with a lower bound."""
    from hetsched.search.reference import check_max_seconds, parse_reference_choice, reference

    sc = load(scenario)
    check_max_seconds(max_seconds)
    choice = parse_reference_choice(kind)
    if choice.value == "none":
        raise fail("--kind none computes nothing; accepted: auto, oracle, best-known")
    if store is not None:
        _check_store(store)  # a wrong path is refused before the search, whatever the search finds
    ref = reference(sc, choice, max_seconds=max_seconds, seed=seed, workers=jobs)
    assert ref is not None
    if store is not None and not ref.exact:
        ref = _best_known_in_store(store, sc, choice.value, ref)
    if as_json:
        typer.echo(json.dumps({"scenario": sc.name, **ref.to_dict(), "gap": ref.gap, "label": ref.label,
                               "seconds": ref.seconds}))
        return
    out.print(f"reference for {safe(sc.name)}: {safe(mapping_text(ref.mapping))}  E2E {ref.e2e_ms:.1f} ms")
    if ref.exact:
        out.print(f"oracle: the exact optimum ({ref.seconds:.1f} s)")
    else:
        bound = "" if ref.lower_bound_ms is None else f"; lower bound {ref.lower_bound_ms:.1f} ms"
        out.print(f"{safe(ref.label)}{bound} ({ref.seconds:.1f} s)")


def _check_store(path: Path) -> None:
    """Refuse a ``--store`` that is not a readable run store (the store's own error names the file and why)."""
    from hetsched.store import RunStore

    with RunStore(path, create=False, read_only=True):
        pass


def _best_known_in_store(path: Path, sc: Scenario, choice: str, ref: Reference) -> Reference:
    """``ref``, or what the run store at ``path`` knows better for ``sc``'s content: the reference a bench recorded
    (for ``choice``), then the best mapping its runs played (``hetsched.bench.runner.best_known_of_runs``)."""
    from hetsched.bench.runner import best_known_of_runs
    from hetsched.store import RunStore

    with RunStore(path, create=False, read_only=True) as st:
        recorded = st.stored_reference(sc, choice)
        if recorded is not None and (recorded.exact or recorded.e2e_ms < ref.e2e_ms):
            ref = recorded
        return best_known_of_runs(st, sc, ref, st.runs_of(sc))


@app.command(epilog=examples(
    "hetsched simulate S13 A=gpu_now,B=gpu_queue,C=gpu_now,D=cpu",
    "hetsched simulate fanout '{\"A\": \"cpu\", \"B\": \"gpu_now\", \"C\": \"gpu_now\", \"D\": \"cpu\"}' --no-noise",
    "hetsched simulate vram_3way mapping.yaml --trace what_if.json",
    "hetsched simulate S5 A=gpu_now,B=cpu,C=cpu,D=gpu_now --clients 4 --requests 100 --slo-ms 1000",
))
def simulate(
    scenario: str = typer.Argument(..., metavar="SCENARIO", help=SCENARIO_HELP),
    mapping: str = typer.Argument(
        ..., metavar="MAPPING", help="A mapping: 'A=gpu_now,B=cpu,...', a JSON object, or a mapping file."
    ),
    seed: int = typer.Option(0, "--seed", "-s", metavar="N", help="Noise seed."),
    noise: bool = typer.Option(True, "--noise/--no-noise", help="Apply the machine's latency noise."),
    as_json: bool = typer.Option(False, "--json", help="Print the trace as one JSON object and nothing else."),
    trace: Path | None = typer.Option(
        None, "--trace", metavar="FILE", help="Write the schedule as Chrome trace-event JSON."
    ),
    clients: int | None = _CLIENTS,
    rate: float | None = _RATE,
    arrivals: Path | None = _ARRIVALS,
    requests: int | None = _REQUESTS,
    duration: float | None = _DURATION,
    think_ms: float | None = _THINK_MS,
    slo_ms: float | None = typer.Option(None, "--slo-ms", metavar="MS", rich_help_panel="Under load",
                                        help="Latency target: report the share of requests within it."),
) -> None:
    """Simulate one mapping: per-node times, VRAM, E2E and its ratio to the oracle ("what if").
    With --clients, --rate or --arrivals (or a scenario with a workload), a window of requests:
    throughput, p50/p95/p99, SLO attainment and each request's latency."""
    from hetsched.cli.common import check_output_file
    from hetsched.export import write_chrome_trace
    from hetsched.model.files import parse_mapping_text
    from hetsched.search.reference import reference
    from hetsched.sim import Simulator

    if trace is not None:
        check_output_file(trace, "--trace")
    sc = load(scenario)
    path = Path(mapping)
    from_file = path.suffix.lower() in (".yaml", ".yml", ".json")
    given = load_mapping(path) if from_file else parse_mapping_text(mapping)
    m = sc.validate_mapping(given, where=f"file {path_text(path)}" if from_file else "mapping")
    from hetsched.cli.run import workload_from_flags

    wl = workload_from_flags(sc.workload, clients=clients, rate=rate, arrivals=arrivals, requests=requests,
                             duration=duration, think_ms=think_ms, slo_ms=slo_ms)
    if wl is not None:
        _simulate_window(sc, m, wl, seed, noise, as_json, trace)
        return
    tr = Simulator(sc, noise=noise).run(m, seed=seed)
    if trace is not None:
        write_chrome_trace(trace, [(f"{sc.name} {m.code()}", tr)])
    if as_json:
        typer.echo(json.dumps(tr.to_dict()))
        return
    # the reference before anything is printed: a scenario it refuses must not print half a report
    best = None if not tr.feasible else reference(sc)
    out.print(f"{safe(sc.name)}: {safe(mapping_text(m))}" + (f"  (seed {seed})" if noise else "  (noise-free)"))
    if not tr.feasible:
        out.print(f"[red]infeasible[/]: {safe(tr.reason)}")  # the answer to the what-if: exit 0
        return
    columns = ("node", "tool", "placement", "ready", "admitted", "start", "end", "wait", "load", "run", "alone")
    rows = []
    for n in sc.workflow.topo_order:
        nt = tr.nodes[n]
        card = sc.card_of(n)
        alone = card.cpu_ms if nt.placement.value == "cpu" else card.gpu_ms
        rows.append((
            n, nt.tool, nt.placement.value,
            *(f"{v:.1f}" for v in (nt.ready_ms, nt.admitted_ms, nt.start_ms, nt.end_ms)),
            *(f"{v:.1f}" for v in (nt.wait_ms, nt.load_ms, nt.run_ms)),
            "-" if alone is None else f"{alone:g}",
        ))
    out.print(plain_table(columns, rows, right=columns[3:]), soft_wrap=True)
    assert best is not None
    e2e = tr.e2e_ms or 0.0
    out.print(
        f"E2E {e2e:.1f} ms = {e2e / best.e2e_ms:.3f} x {best.kind.value} ({best.e2e_ms:.1f} ms); "
        f"peak VRAM {tr.peak_vram_mb:g} of {sc.machine.vram_budget_mb:g} MB; times in ms, 'alone' = card figure"
    )
    if trace is not None:
        out.print(f"trace written to {safe_path(trace)}", soft_wrap=True)


def _oracle_under_load(sc: Scenario, wl: Workload, objective: str, as_json: bool) -> None:
    """``hetsched oracle`` under load: the loaded optimum, and the single-request optimum beside it."""
    from hetsched.search.load import LoadObjective, load_optimum, max_rate_per_s, predict_window
    from hetsched.search.reference import reference

    goal = LoadObjective(objective)
    if goal is LoadObjective.THROUGHPUT and wl.slo_ms is None:
        raise fail("--objective throughput needs its p95 target: --slo-ms MS")
    t0 = time.perf_counter()
    best = load_optimum(sc, wl, goal)
    single = reference(sc.with_workload(None), "auto")
    seconds = time.perf_counter() - t0
    if best is None:
        err.print(f"[bold red]no result:[/] no mapping of {safe(sc.name)} can serve {safe(wl.describe())} (every "
                  "mapping is over the VRAM budget, or queues a node that never fits beside the resident gpu_now "
                  "tools)")
        raise typer.Exit(EXIT_NO_RESULT)
    alone = None if single is None else predict_window(sc, single.mapping, wl)
    p = best.prediction
    if as_json:
        typer.echo(json.dumps({
            "scenario": sc.name, "workload": wl.model_dump(mode="json"), "objective": goal.value,
            "mapping": best.mapping.to_dict(), "exact": best.exact, "evaluations": best.evaluations,
            "p50_ms": p.p50_ms, "p95_ms": p.p95_ms, "p99_ms": p.p99_ms, "throughput_per_s": p.throughput_per_s,
            "max_rate_per_s": best.value if goal is LoadObjective.THROUGHPUT else None,
            "single_request_optimum": None if single is None or alone is None else {
                "mapping": single.mapping.to_dict(), "feasible": alone.feasible, "reason": alone.reason,
                "p95_ms": alone.p95_ms if alone.feasible else None},
        }))
        return
    how = f"every mapping simulated ({best.evaluations:,} windows)" if best.exact else \
        f"best-known: local search, {best.evaluations:,} windows"
    out.print(f"loaded optimum for {safe(sc.name)} at {safe(wl.describe())}: {safe(mapping_text(best.mapping))}",
              soft_wrap=True)
    out.print(f"p50 {p.p50_ms:.1f} ms, p95 {p.p95_ms:.1f} ms, p99 {p.p99_ms:.1f} ms, "
              f"{p.throughput_per_s:.2f} requests/s (noise-free; {how}; {seconds:.1f} s)")
    if goal is LoadObjective.THROUGHPUT:
        out.print(f"sustains {best.value:.2f} requests/s (Poisson) with p95 <= {wl.slo_ms:g} ms")
    if single is not None and alone is not None:
        if not alone.feasible:
            out.print(f"the single-request optimum {safe(mapping_text(single.mapping))} cannot serve this window: "
                      f"{safe(alone.reason)}", soft_wrap=True)
        elif single.mapping != best.mapping and goal is LoadObjective.THROUGHPUT:
            rate = max_rate_per_s(sc, single.mapping, float(wl.slo_ms or 0.0), seed=wl.seed)
            out.print(f"the single-request optimum {safe(mapping_text(single.mapping))} sustains {rate:.2f} "
                      f"requests/s with p95 <= {wl.slo_ms:g} ms", soft_wrap=True)
        elif single.mapping != best.mapping:
            out.print(f"the single-request optimum {safe(mapping_text(single.mapping))} has p95 {alone.p95_ms:.1f} ms "
                      f"here ({alone.p95_ms / p.p95_ms:.2f}x)", soft_wrap=True)
        else:
            out.print("the single-request optimum is the same mapping")


def _simulate_window(sc: Scenario, m: Mapping, wl: Workload, seed: int, noise: bool, as_json: bool,
                     trace: Path | None) -> None:
    """``hetsched simulate`` under load: one window of requests under one mapping."""
    from hetsched.export import write_chrome_trace
    from hetsched.sim import Simulator

    tr = Simulator(sc, noise=noise).run_workload(m, wl, seed=seed)
    if trace is not None:
        write_chrome_trace(trace, [(f"{sc.name} {m.code()}", tr)])
    if as_json:
        typer.echo(json.dumps({**tr.to_dict(), "workload": wl.model_dump(mode="json"),
                               "requests": [r.to_dict() for r in tr.requests]}))
        return
    out.print(f"{safe(sc.name)}: {safe(mapping_text(m))}" + (f"  (seed {seed})" if noise else "  (noise-free)")
              + f"; {safe(wl.describe())}", soft_wrap=True)
    if tr.load is None:
        out.print(f"[red]infeasible[/]: {safe(tr.reason)}", soft_wrap=True)
        return
    ld = tr.load
    shown = tr.requests[:SHOWN_REQUESTS]
    rows = [(str(r.request), "-" if r.client < 0 else str(r.client), f"{r.release_ms:.1f}", f"{r.end_ms:.1f}",
             f"{r.latency_ms:.1f}", f"{r.queue_wait_ms:.1f}") for r in shown]
    columns = ("request", "client", "sent", "returned", "latency", "queue wait")
    out.print(plain_table(columns, rows, right=columns), soft_wrap=True)
    if len(tr.requests) > len(shown):
        out.print(f"... {len(tr.requests) - len(shown)} more requests (--json for every one)")
    out.print(safe(ld.describe()), soft_wrap=True)
    out.print(f"window {ld.window_ms:.1f} ms; in flight mean {ld.in_flight_mean:.2f}, max {ld.in_flight_max}; queue "
              f"wait mean {ld.queue_wait_mean_ms:.1f} / p95 {ld.queue_wait_p95_ms:.1f} ms; "
              f"CPU {100 * ld.cpu_util_mean:.0f}%, GPU {100 * ld.gpu_util_mean:.0f}%; VRAM peak {ld.peak_vram_mb:g}, "
              f"mean {ld.mean_vram_mb:.0f} of {sc.machine.vram_budget_mb:g} MB; times in ms", soft_wrap=True)
    if trace is not None:
        out.print(f"trace written to {safe_path(trace)}", soft_wrap=True)


SHOWN_REQUESTS = 20
"""Requests listed by ``hetsched simulate`` under load (all of them with --json)."""
