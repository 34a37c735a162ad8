"""``hetsched gantt``: a Gantt chart (PNG) of any scenario: all-GPU, a given mapping, or the best
mapping a policy found, each against the reference (the oracle or a labelled best-known
mapping), drawn from noise-free simulator traces. Needs matplotlib (the ``bench`` extra)."""

from __future__ import annotations

from pathlib import Path

import typer

from hetsched.cli.app import app, examples, fail, out, safe_path
from hetsched.cli.common import SCENARIO_HELP, check_output_file, load
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import InputError, Mapping, Placement
from hetsched.model.errors import path_text
from hetsched.model.files import load_mapping, parse_mapping_text
from hetsched.model.limits import MAX_ROUNDS, MAX_SEED
from hetsched.policies import make_policy, policy_names
from hetsched.search.reference import reference


@app.command(epilog=examples(
    "hetsched gantt S5                                    # all-GPU vs the oracle",
    "hetsched gantt S13 --mapping A=gpu_now,B=gpu_queue,C=gpu_now,D=cpu -o s13.png",
    "hetsched gantt my_flow.yaml --policy heft-cf",
    "hetsched gantt S11 --policy agentic --rounds 5 --seed 1",
))
def gantt(
    scenario: str = typer.Argument(..., metavar="SCENARIO", help=SCENARIO_HELP),
    mapping: str | None = typer.Option(
        None, "--mapping", "-m", metavar="MAPPING",
        help="Draw this mapping ('A=gpu_now,B=cpu,...', a JSON object, or a mapping file) against the reference.",
    ),
    policy: str | None = typer.Option(
        None, "--policy", "-p", metavar="NAME",
        help=f"Draw the best mapping this policy ran in --rounds simulated rounds ({', '.join(policy_names())}).",
    ),
    rounds: int = typer.Option(
        10, "--rounds", "-r", min=1, max=MAX_ROUNDS, metavar="N", help="With --policy: rounds to run."
    ),
    seed: int = typer.Option(
        0, "--seed", "-s", min=0, max=MAX_SEED, metavar="N", help="With --policy: the run's seed."
    ),
    out_file: Path | None = typer.Option(
        None, "--out", "-o", metavar="FILE", show_default="gantt_SCENARIO.png", help="PNG file to write."
    ),
) -> None:
    """Draw a Gantt chart (PNG) of a scenario's schedule against the reference: all-GPU by default,
    or --mapping, or the best mapping of --policy; noise-free, with the GPU sharing visible."""
    if mapping is not None and policy is not None:
        raise fail("give --mapping or --policy, not both")
    try:
        from hetsched.bench.figures import gantt_figure, slug
    except ImportError as exc:  # matplotlib is the 'bench' extra
        raise InputError(f"hetsched gantt draws with matplotlib, which is not installed ({exc}); "
                         "install it with: pip install 'hetsched[bench]'") from None
    sc = load(scenario)
    path = out_file or Path(f"gantt_{slug(sc.name)}.png")
    check_output_file(path, "--out")
    if mapping is not None:
        given = Path(mapping)
        from_file = given.suffix.lower() in (".yaml", ".yml", ".json")
        chosen: Mapping = load_mapping(given) if from_file else parse_mapping_text(mapping, where="--mapping")
        chosen = sc.validate_mapping(chosen, where=f"--mapping file {path_text(given)}" if from_file else "--mapping")
        title = "your mapping"
    elif policy is not None:
        result = run_rounds(sc, make_policy(policy), LoopConfig(rounds=rounds, seed=seed))
        best = result.best_round
        if best is None:
            raise InputError(f"policy {policy!r} ran no feasible round in {rounds} rounds on {sc.name!r}; "
                             "nothing to draw")
        chosen = best.mapping
        title = f"{result.policy} (best of {rounds} rounds, seed {seed})"
    else:
        chosen, title = sc.uniform(Placement.GPU_NOW), "all-GPU"
    ref = reference(sc)
    assert ref is not None
    ref_title = "oracle" if ref.exact else "best-known mapping (not a proven optimum)"
    schedules = [(title, chosen)] + ([] if chosen == ref.mapping else [(ref_title, ref.mapping)])
    subtitle = f"{title} is the {ref_title}" if chosen == ref.mapping else ""
    try:
        gantt_figure(sc, schedules, path, subtitle=subtitle)
    except ValueError as exc:  # nothing feasible to draw cannot happen with a reference; kept clear anyway
        raise InputError(f"scenario {sc.name!r}: {exc}") from None
    out.print(f"wrote {safe_path(path)}", soft_wrap=True)
