"""The command line starts at once: ``--version`` and ``--help`` import no command module and nothing
heavy (numpy, pydantic, networkx, the bench); each command imports what it uses when it runs. The
lazy command table stays in step with the commands the modules register."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hetsched.cli import COMMAND_MODULES, main
from hetsched.cli.app import COMMANDS, app

SRC = str(Path(__file__).resolve().parents[1] / "src")
HEAVY = ("numpy", "pydantic", "networkx", "hetsched.bench", "hetsched.model", "yaml", "matplotlib", "torch")


def modules_after(*args: str) -> list[str]:
    """``sys.modules`` after the CLI's entry point handled ``args``, in a fresh interpreter."""
    code = ("import sys, json\nfrom hetsched.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
            "    pass\nprint(json.dumps(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": SRC})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [("--version",), ("--help",), ()])
def test_version_and_help_import_nothing_heavy(args: tuple[str, ...]) -> None:
    loaded = modules_after(*args)
    heavy = sorted(m for m in loaded if m.startswith(HEAVY))
    assert heavy == [], heavy
    assert not [m for m in loaded if m.startswith("hetsched.cli.") and m != "hetsched.cli.app"]


def test_a_command_imports_its_own_module_only() -> None:
    loaded = modules_after("scenarios")
    assert "hetsched.cli.inspect" in loaded and "pydantic" in loaded  # it reads scenarios
    assert "hetsched.cli.profile" not in loaded and "hetsched.cli.bench" not in loaded
    assert not [m for m in loaded if m.startswith("hetsched.bench")]


def test_the_lazy_command_table_matches_the_registered_commands() -> None:
    for module in COMMAND_MODULES:
        importlib.import_module(module)
    registered = {}
    for info in app.registered_commands:
        assert info.callback is not None
        name = info.name or info.callback.__name__.replace("_", "-")
        registered[name] = (info.callback.__module__, " ".join((info.callback.__doc__ or "").split()))
    for group in app.registered_groups:  # commands with subcommands (export ray)
        typer_app = group.typer_instance
        assert typer_app is not None and group.name is not None
        module = typer_app.registered_commands[0].callback.__module__  # type: ignore[union-attr]
        registered[group.name] = (module, " ".join(str(typer_app.info.help or "").split()))
    assert set(registered) == set(COMMANDS)
    for name, (module, short) in COMMANDS.items():
        assert registered[name][0] == module, name
        assert registered[name][1].startswith(short.removesuffix(",")), (name, short)


def test_help_lists_every_command_and_each_command_has_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    for name in COMMANDS:
        assert f"  {name} " in listed
    for name in COMMANDS:
        with pytest.raises(SystemExit) as exc:
            main([name, "--help"])
        assert exc.value.code == 0
        assert "Usage: hetsched " + name in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["shwo"])
    assert exc.value.code == 2


def test_looking_at_a_scenario_imports_no_simulator_search_loop_or_networkx() -> None:
    for args in (("validate", str(Path(SRC) / "hetsched" / "data" / "scenarios" / "S13.yaml")), ("show", "S13")):
        loaded = modules_after(*args)
        heavy = [m for m in loaded if m.startswith(("numpy", "networkx", "hetsched.sim", "hetsched.search",
                                                    "hetsched.loop", "hetsched.store", "hetsched.cli.run"))]
        assert heavy == [], (args, heavy)


def test_the_oracle_commands_default_budget_is_the_searchs() -> None:
    from hetsched.cli.inspect import ORACLE_MAX_SECONDS
    from hetsched.search.oracle import DEFAULT_MAX_SECONDS

    assert ORACLE_MAX_SECONDS == DEFAULT_MAX_SECONDS
