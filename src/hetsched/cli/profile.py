"""``hetsched profile``: measure real tools into a tool library (cards with provenance)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hetsched.cli.app import app, ctrl_c_wins, err, examples, fail, out, safe, safe_path
from hetsched.exec.devices import DEVICE_CHOICES, available_cores
from hetsched.model import InputError, ToolCard
from hetsched.model.errors import path_text, some
from hetsched.model.files import load_scenario, load_tool_library
from hetsched.profiling import ProfileConfig, Profiler, profile_tools, write_library
from hetsched.profiling.profiler import plan_names
from hetsched.profiling.refresh import moved, refresh_target, write_refreshed
from hetsched.tools.registry import builtin_names, import_tool_modules, is_registered, tool_names


def card_table(cards: list[ToolCard], title: str) -> Table:
    """The measured cards: latencies, load, memory, speedup and category."""
    table = Table(title=title, title_justify="left")
    for col, justify in (("tool", "left"), ("cpu_ms", "right"), ("gpu_ms", "right"), ("load_ms", "right"),
                         ("vram_mb", "right"), ("gpu_util", "right"), ("cpu_threads", "right"),
                         ("speedup", "right"), ("category", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for c in cards:
        table.add_row(c.name, f"{c.cpu_ms:.2f}", "-" if c.gpu_ms is None else f"{c.gpu_ms:.2f}",
                      "-" if c.gpu_ms is None else f"{c.load_ms:.1f}", "-" if c.gpu_ms is None else f"{c.vram_mb:.1f}",
                      "-" if c.gpu_ms is None else f"{c.gpu_util:.2f}", str(c.cpu_threads),
                      "-" if c.speedup is None else f"{c.speedup:.2f}x", c.category.value)
    return table


@app.command(epilog=examples(
    "hetsched profile --scenario rag_tiny --runs 10 --out my_cards.yaml",
    "hetsched profile bert_base llama_1b --size full --device cuda --out gpu_cards.yaml",
    "hetsched profile my_tool --tool-module my_tools.py --out my_cards.yaml",
    "hetsched profile --refresh my_flow.yaml                      # re-measure its cards in place",
    "hetsched profile --refresh my_flow.yaml bert_base --runs 10  # only these tools",
))
def profile(
    tools: list[str] = typer.Argument(
        None, help="Tools to profile (registered names; NAME_xK profiles NAME and derives the amplified card). "
        "Default: the tools of --scenario, else every built-in tool (with --refresh: every tool of FILE)."
    ),
    scenario: list[str] = typer.Option(
        [], "--scenario", help="Profile the tools this scenario uses (repeat for several); its machine's "
        "cpu_cores sets the CPU threads unless --cpu-threads is given."
    ),
    size: str | None = typer.Option(
        None, "--size", show_default="tiny", help="Size preset: tiny (seconds on a CPU) or full (real shapes); "
        "with --refresh, the preset the refreshed cards were profiled at."
    ),
    runs: int = typer.Option(30, "--runs", min=1, help="Timed runs per device (median, p10, p90)."),
    warmup: int = typer.Option(3, "--warmup", min=0, help="Untimed calls before the timed runs."),
    loads: int = typer.Option(3, "--loads", min=1, help="Fresh loads timed for load_ms (median)."),
    cold_loads: int = typer.Option(
        0, "--cold-loads", min=0, help="Also time this many loads each after the device sat idle 3 s (load_cold_ms: "
        "memory gone cold; the machine's cold_load_share charges it, docs/simulator.md); 0: none."
    ),
    device: str = typer.Option(
        "auto", "--device",
        help=f"Where GPU figures are measured: {', '.join(d for d in DEVICE_CHOICES if d != 'none')} (or cuda:N); "
        "auto = CUDA when available, else the stand-in device."
    ),
    cpu_threads: int | None = typer.Option(None, "--cpu-threads", min=1, help="Threads of the CPU pool."),
    device_threads: int | None = typer.Option(
        None, "--device-threads", min=1, show_default="1", help="Threads of the stand-in device."
    ),
    out_file: Path | None = typer.Option(
        None, "--out", "-o", show_default="cards-SIZE.yaml", help="Tool library to write."
    ),
    force: bool = typer.Option(False, "--force", help="Profile every tool again even if --out already holds its card."),
    tool_module: list[str] = typer.Option(
        [], "--tool-module", help="Import this module first (it registers your tools); repeat for several."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
    own_core: bool = typer.Option(
        False, "--own-core", help="Time each call less what its thread waited for a core (Linux schedstat): cards "
        "that describe the tool, not the machine's load while profiling (single-threaded tools: exact)."
    ),
    refresh: Path | None = typer.Option(
        None, "--refresh", metavar="FILE", help="Re-measure the cards of this scenario (or tool library) file and "
        "rewrite them in place, each with its provenance; the file's other content is kept (docs/tools.md)."
    ),
) -> None:
    """Measure tools alone on the CPU and on the GPU (or the stand-in device) into a tool library.

    Cards are written to --out as each tool finishes; Ctrl-C keeps them, and running the same
    command again profiles only the tools still missing.
    """
    import_tool_modules(tool_module)
    if refresh is not None:
        if scenario or out_file is not None or force:
            raise fail("--refresh FILE rewrites FILE's cards in place: it takes no --scenario, --out or --force")
        _refresh(refresh, list(tools or []), size, runs, warmup, loads, device, cpu_threads, device_threads,
                 tuple(tool_module), progress, own_core, cold_loads)
        return
    names = list(tools or [])
    threads = cpu_threads
    for ref in scenario:
        sc = load_scenario(ref)
        names += [t for t in sc.workflow.tools if t not in names]
        if threads is None:
            threads = min(sc.machine.cpu_cores, len(available_cores()))
    if not names:
        names = list(builtin_names())
    config = ProfileConfig(size=size or "tiny", runs=runs, warmup=warmup, loads=loads, device=device,
                           cpu_threads=threads,
                           device_threads=device_threads, tool_modules=tuple(tool_module), own_core=own_core,
                           cold_loads=cold_loads)
    path = out_file or Path(f"cards-{config.size}.yaml")
    if path.is_dir():
        raise fail(f"--out {path_text(path)} is a directory; give a file such as {path_text(path / 'cards.yaml')}")
    plan = plan_names(names)
    derived = {name: (base, int(name.rsplit("_x", 1)[1])) for base, asked in plan.items() for name in asked}
    with Profiler(config) as prof:
        kept: dict[str, ToolCard] = {}
        if path.exists() and not force:
            kept = _reusable(path, config, prof.device.kind.value)
        skip = [b for b in plan if b in kept]
        header = _header(prof, config)
        err.print(f"profiling {len(plan) - len(skip)} tool(s) at size {config.size}: CPU {prof.cpu_text}; "
                  f"GPU figures on {prof.gpu_text}", soft_wrap=True)
        if skip:
            err.print(f"{len(skip)} tool(s) already in {safe_path(path)}: {', '.join(skip)} (--force profiles "
                      f"them again)",
                      soft_wrap=True)
        cards = dict(kept)

        def save() -> None:
            order = [b for b in plan if b in cards] + [n for n in cards if n not in plan]
            write_library(path, [cards[n] for n in order],
                          {n: d for n, d in derived.items() if d[0] in cards}, header)

        try:
            with ctrl_c_wins():
                if progress:
                    with Progress(TextColumn("[bold]profile[/]"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.description}"), TimeElapsedColumn(), console=err) as bar:
                        task = bar.add_task("", total=len(plan) - len(skip))

                        def tick(name: str, done: int, total: int) -> None:
                            bar.update(task, completed=done, description=safe(name))

                        for result in profile_tools(names, config, skip=skip, progress=tick, profiler=prof):
                            cards[result.card.name] = result.card
                            save()
                            for note in result.notes:
                                err.print(f"{result.card.name}: {note}", soft_wrap=True)
                else:
                    for result in profile_tools(names, config, skip=skip, profiler=prof):
                        cards[result.card.name] = result.card
                        save()
        except KeyboardInterrupt:
            measured = len(cards) - len(kept)
            err.print(f"interrupted: {measured} new card(s) kept in {safe_path(path)}; run the same command "
                      f"again to profile the rest", soft_wrap=True)
            raise typer.Exit(130) from None
        save()
        real = prof.real_gpu
        gpu_text = prof.gpu_text
    shown = [cards[b] for b in plan if b in cards]
    out.print(card_table(shown, f"cards written to {safe_path(path)}"))
    if real:
        out.print(f"GPU figures are real GPU measurements on {safe(gpu_text)}.", soft_wrap=True)
    else:
        out.print(f"[bold]GPU figures are NOT GPU measurements[/]: they were measured on the {safe(gpu_text)}. "
                  "CPU figures are real CPU measurements.", soft_wrap=True)
    out.print(f"use them: a scenario with 'tools: {safe_path(path.name)}' (see docs/tools.md), or "
              f"hetsched bench --tools {safe_path(path)} for scenarios that name no library", soft_wrap=True)


def _refresh(path: Path, names: list[str], size: str | None, runs: int, warmup: int, loads: int, device: str,
             cpu_threads: int | None, device_threads: int | None, modules: tuple[str, ...], progress: bool,
             own_core: bool = False, cold_loads: int = 0) -> None:
    """``hetsched profile --refresh FILE``: measure FILE's tools and rewrite their cards in place."""
    target = refresh_target(path, names)
    unknown = [t for t in target.tools if not is_registered(t)]
    if unknown:  # before any measurement: say which, and how to register them
        raise fail(f"--refresh {path_text(path)}: tool(s) {', '.join(map(repr, unknown))} have no implementation "
                   f"to measure; "
                   f"registered tools: {some(list(tool_names()), quote=False)}; register yours with --tool-module "
                   "MODULE (docs/tools.md)")
    size = size or target.preset
    threads = cpu_threads
    if threads is None and target.cpu_cores is not None:
        threads = min(target.cpu_cores, len(available_cores()))
    config = ProfileConfig(size=size, runs=runs, warmup=warmup, loads=loads, device=device, cpu_threads=threads,
                           device_threads=device_threads, tool_modules=modules, own_core=own_core,
                           cold_loads=cold_loads)
    done: list[ToolCard] = []
    written: dict[Path, None] = {}
    with Profiler(config) as prof:
        err.print(f"refreshing {len(target.tools)} card(s) of {safe_path(path)} at size {config.size}: CPU "
                  f"{prof.cpu_text}; GPU figures on {prof.gpu_text}", soft_wrap=True)
        try:
            with ctrl_c_wins(), Progress(TextColumn("[bold]refresh[/]"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.description}"), TimeElapsedColumn(), console=err,
                          disable=not progress) as bar:
                task = bar.add_task("", total=len(target.tools))

                def tick(name: str, i: int, total: int) -> None:
                    bar.update(task, completed=i, description=safe(name))

                for result in profile_tools(list(target.tools), config, progress=tick, profiler=prof):
                    written.update(dict.fromkeys(write_refreshed(target, [result.card])))
                    done.append(result.card)
                    for note in result.notes:
                        err.print(f"{result.card.name}: {note}", soft_wrap=True)
        except KeyboardInterrupt:
            err.print(f"interrupted: {len(done)} card(s) refreshed in {safe_path(path)}; the others are as they were",
                      soft_wrap=True)
            raise typer.Exit(130) from None
        real = prof.real_gpu
    out.print(card_table(done, f"cards refreshed in {', '.join(str(p) for p in written)}"))
    for card in done:
        out.print(f"{safe(card.name)}: {safe(moved(target.old.get(card.name), card))}", soft_wrap=True)
    if not real:
        out.print("[bold]GPU figures are NOT GPU measurements[/]: they were measured on the stand-in device.",
                  soft_wrap=True)


def _reusable(path: Path, config: ProfileConfig, device_kind: str) -> dict[str, ToolCard]:
    """Cards of an existing --out file measured the same way (preset and device), to skip them."""
    try:
        existing = load_tool_library(path)
    except InputError as exc:
        raise InputError(f"--out {path_text(path)} exists but is not a tool library ({exc}); use --force or "
                         f"another --out") \
            from None
    kept = {n: c for n, c in existing.items() if c.base is None}
    other = [n for n, c in kept.items() if (c.provenance.preset, c.provenance.device) != (config.size, device_kind)]
    if other:
        raise InputError(f"--out {path_text(path)} holds cards profiled another way ({', '.join(other)}: not size "
                         f"{config.size} on {device_kind}); use --force to overwrite it or give another --out")
    return kept


def _header(prof: Profiler, config: ProfileConfig) -> list[str]:
    lines = [
        f"Tool cards measured by `hetsched profile` (size preset {config.size}).",
        f"CPU figures (cpu_ms, cpu_threads): {prof.cpu_text}.",
    ]
    if prof.real_gpu:
        lines.append(f"GPU figures (gpu_ms, load_ms, vram_mb, gpu_util): real GPU measurements on {prof.gpu_text}.")
    else:
        lines += [f"GPU figures (gpu_ms, load_ms, vram_mb, gpu_util) were measured on the {prof.gpu_text}:",
                  "they are NOT GPU measurements; they describe the stand-in device the local executor uses on a",
                  "machine without CUDA (real weights in host memory, real work on its CPU threads)."]
    lines += [f"Each figure: median of {config.runs} isolated runs after {config.warmup} warm-up call(s); "
              "spread: p10/p90;",
              f"load_ms: median of {config.loads} fresh loads plus first-call initialization; vram_mb: peak memory",
              "above the device's idle level during load and runs. Provenance per card says the same."]
    if config.cold_loads:
        lines.append(f"load_cold_ms: median of {config.cold_loads} loads each after {config.cold_pause_s:g} s "
                     "with the device idle (memory gone cold).")
    return lines
