"""``hetsched init``: a bundled scenario or tool library as YAML to start from. The copy stands alone
(inline cards), never keeps the bundled name, and round-trips through ``hetsched validate`` and the
loader to the same workflow, cards and machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.factories import run_cli as cli

from hetsched.model.files import bundled_libraries, bundled_scenarios, load_scenario, load_tool_library


@pytest.mark.parametrize("name", sorted(bundled_scenarios()))
def test_a_copy_of_every_bundled_scenario_round_trips(name: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    bundled = load_scenario(name)
    target = tmp_path / "sub" / f"my_{name}.yaml"
    target.parent.mkdir()
    code, _, err = cli(capsys, "init", name, "-o", str(target))
    assert code == 0 and "hetsched validate" in err, err
    code, out, err = cli(capsys, "validate", str(target))
    assert code == 0 and f"ok: scenario my_{name}" in out, err
    copy = load_scenario(target)
    assert copy.name == f"my_{name}" != bundled.name
    assert copy.workflow == bundled.workflow and copy.machine == bundled.machine and copy.mode == bundled.mode
    assert {k: c.model_dump() for k, c in copy.cards.items()} == {k: c.model_dump() for k, c in bundled.cards.items()}
    # printed, it has no name: saved under any file name, it takes that name
    code, out, _ = cli(capsys, "init", name)
    assert code == 0
    saved = tmp_path / "whatever.yaml"
    saved.write_text(out, encoding="utf-8")
    assert load_scenario(saved).name == "whatever"


@pytest.mark.parametrize("name", sorted(bundled_libraries()))
def test_a_copy_of_a_bundled_library_round_trips(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cards.yaml"
    assert cli(capsys, "init", name, "-o", str(target))[0] == 0
    code, out, _ = cli(capsys, "validate", str(target))
    assert code == 0 and "ok: tool library" in out
    assert load_tool_library(target) == load_tool_library(bundled_libraries()[name])


def test_init_refuses_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "init", "S133")
    assert code == 2 and "did you mean 'S13'" in err
    existing = tmp_path / "mine.yaml"
    existing.write_text("keep me")
    code, _, err = cli(capsys, "init", "S13", "-o", str(existing))
    assert code == 2 and "--force" in err and existing.read_text() == "keep me"
    code, _, err = cli(capsys, "init", "S13", "-o", str(tmp_path / "nope" / "x.yaml"))
    assert code == 2 and "does not exist" in err
