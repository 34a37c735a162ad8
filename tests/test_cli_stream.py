"""``hetsched run`` streams each round as it completes (on stderr when stdout is JSON), says when a
round runs long, and on Ctrl-C (a real SIGINT) prints the rounds done and exits 130 with them stored."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.factories import run_cli as cli

from hetsched.store import RunStore

ROOT = Path(__file__).resolve().parents[1]


def test_rounds_stream_to_stdout_or_to_stderr_under_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = str(tmp_path / "r.sqlite")
    code, out, err = cli(capsys, "run", "chain", "-p", "all-cpu", "-r", "3", "--store", store, "--reference", "none")
    assert code == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("round ")]
    assert [ln.split(":")[0] for ln in lines] == ["round 0/3", "round 1/3", "round 2/3"]
    assert out.index("round 0/3") < out.index("all-cpu on chain")  # rows come before the final table
    code, out, err = cli(capsys, "run", "chain", "-p", "all-cpu", "-r", "2", "--store", store, "--json")
    assert code == 0
    assert json.loads(out)["policy"] == "all-cpu"  # stdout is the JSON object and nothing else
    assert "round 0/2: E2E" in err and "round 1/2: E2E" in err


def _rounds_last_until_their_progress_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress after 0.05 s, and every simulated round lasting until its progress line is out (bounded: a
    missing line fails the test's assertion), so a busy machine that wakes the progress thread late cannot end
    the round first."""
    import hetsched.cli.run as run_cli
    from hetsched.sim.engine import Simulator

    monkeypatch.setattr(run_cli, "PROGRESS_AFTER_S", 0.05)
    real_run, real_print = Simulator.run, run_cli.err.print
    shown = threading.Event()

    def print_progress(*args: object, **kwargs: object) -> None:
        real_print(*args, **kwargs)  # type: ignore[arg-type]
        if "running for" in str(args[0] if args else ""):
            shown.set()

    def slow_run(self: Simulator, *args: object, **kwargs: object) -> object:
        shown.wait(timeout=120)
        return real_run(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(run_cli.err, "print", print_progress)
    monkeypatch.setattr(Simulator, "run", slow_run)


def test_a_long_round_shows_progress(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _rounds_last_until_their_progress_line(monkeypatch)
    code, _, err = cli(capsys, "run", "chain", "-p", "all-cpu", "-r", "1", "--no-store", "--reference", "none")
    assert code == 0
    assert re.search(r"the first round running for \d+ s\.\.\.", err), err


def test_a_long_rounds_progress_says_what_the_executor_is_doing(capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor that says what it is doing (the Ray executor's ``current_phase``: warming its workers,
    loading its actors...) has it named in the progress line, so a slow phase is seen while it runs."""
    from hetsched.sim.engine import Simulator

    monkeypatch.setattr(Simulator, "current_phase", "warming [bold]workers[/]", raising=False)
    _rounds_last_until_their_progress_line(monkeypatch)
    code, _, err = cli(capsys, "run", "chain", "-p", "all-cpu", "-r", "1", "--no-store", "--reference", "none")
    assert code == 0
    assert re.search(r"the first round running for \d+ s \(warming \[bold\]workers\[/\]\)\.\.\.", err), err


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_prints_the_rounds_done(tmp_path: Path, as_json: bool) -> None:
    store = tmp_path / "r.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    args = [sys.executable, "-m", "hetsched", "run", "chain", "-p", "all-cpu", "-r", "100000000", "--store",
            str(store), "--reference", "none", *(["--json"] if as_json else [])]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    watched = proc.stderr if as_json else proc.stdout
    assert watched is not None
    seen = ""
    while not seen.startswith("round 2/"):  # some rounds are done
        seen = watched.readline()
        assert seen or proc.poll() is None, "the run ended before it was interrupted"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in out + err
    m = re.search(r"interrupted: run (\w+) keeps its (\d+) stored rounds; continue it with: hetsched run --resume",
                  err)
    assert m, err
    with RunStore(store) as st:
        stored = st.rounds(m[1])
        assert st.run(m[1]).status == "interrupted"
    assert int(m[2]) == len(stored) >= 3
    table = err if as_json else out
    assert f"rounds done ({len(stored)}):" in table
    body = table[table.index("rounds done"):]
    assert len(re.findall(r"^\s+\d+\s+\S+\s+0\s+yes ", body, flags=re.M)) == len(stored)  # one row per stored round
    if as_json:
        assert out == ""  # stdout never carries a partial object


def test_no_round_progress_while_the_reference_is_computed(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import hetsched.api as api
    import hetsched.cli.run as run_cli

    monkeypatch.setattr(run_cli, "PROGRESS_AFTER_S", 0.05)
    real = api.reference

    def slow_reference(*args: object, **kwargs: object) -> object:
        time.sleep(0.4)  # a slow search after the last round
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "reference", slow_reference)
    code, out, err = cli(capsys, "run", "chain", "-p", "all-cpu", "-r", "1", "--no-store", "--reference", "oracle")
    assert code == 0 and "oracle:" in out
    assert "running for" not in err, err
