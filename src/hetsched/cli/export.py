"""``hetsched export ray``: a mapping as the ``.options(...)`` a user pastes into their own Ray code.

Prints Python source (``TASKS`` and ``ACTORS`` option dicts) or, with ``--json``, the same as
JSON, from the rules of :mod:`hetsched.exec.ray_plan` (pure: no Ray needed to export).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from hetsched.cli.app import app, examples, fail
from hetsched.cli.common import load
from hetsched.exec.ray_plan import export_dict, export_text
from hetsched.model import Mapping, Scenario
from hetsched.model.errors import path_text
from hetsched.model.files import load_mapping, parse_mapping_text
from hetsched.search.reference import reference

export_app = typer.Typer(help="Export a placement for another system (ray: per-node .options(...)).",
                         no_args_is_help=True, epilog=examples("hetsched export ray rag_tiny",
                                                               "hetsched export ray S13 --mapping best.json --json"))
app.add_typer(export_app, name="export")


def read_mapping(sc: Scenario, text: str | None, option: str = "--mapping") -> Mapping:
    """A mapping from ``A=cpu,B=gpu_now``, a JSON object or a mapping file, validated against ``sc``;
    without one, the reference's (the noise-free optimum, or a best-known mapping when the workflow
    is too large to solve exactly)."""
    if text is None:
        ref = reference(sc)
        assert ref is not None  # auto always gives one
        return ref.mapping
    path = Path(text)
    from_file = path.suffix.lower() in (".yaml", ".yml", ".json")
    given = load_mapping(path) if from_file else parse_mapping_text(text, where=option)
    return sc.validate_mapping(given, where=f"{option} file {path_text(path)}" if from_file else option)


@export_app.command("ray", epilog=examples(
    "hetsched export ray rag_tiny", "hetsched export ray S13 --mapping A=gpu_now,B=gpu_queue,C=gpu_now,D=cpu",
    "hetsched export ray my_flow.yaml --mapping best.json --json",
))
def export_ray(
    scenario: str = typer.Argument(..., help="Scenario file or bundled name."),
    mapping: str | None = typer.Option(
        None, "--mapping", "-m", metavar="MAPPING", show_default="the reference's mapping (the oracle's when exact)",
        help="'A=gpu_now,B=cpu,...', a JSON object or a mapping file."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of Python source."),
) -> None:
    """Print the Ray ``.options(...)`` of every node: tasks for cpu and gpu_queue nodes, one actor per
    gpu_now tool (num_cpus, num_gpus, resources={"vram_mb": ...}), as the ray executor runs them."""
    sc = load(scenario)
    m = read_mapping(sc, mapping)
    static = sc.infeasibility(m)
    if static is not None:
        raise fail(f"mapping {m.code()} cannot run on scenario {sc.name!r}: {static}")
    if as_json:
        typer.echo(json.dumps(export_dict(sc, m)))
        return
    typer.echo(export_text(sc, m), nl=False)
