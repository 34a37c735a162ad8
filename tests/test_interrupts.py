"""A second Ctrl-C while the first one's clean-up runs (users press Ctrl-C twice): the held Ctrl-C of
:mod:`hetsched.model.interrupts`, and the places that must not be cut short by it outside the Ray executor
(the run's ``interrupted`` status, the CLI's "what was kept" line). The Ray executor's cleanup and
``close()`` are checked on a real cluster in ``ray_cluster_suite.py``."""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.factories import run_cli as cli

from hetsched.loop import LoopConfig, run_key, run_recorded
from hetsched.model import RoundRecord
from hetsched.model.files import load_scenario
from hetsched.model.interrupts import ctrl_c_deferred
from hetsched.policies import make_policy
from hetsched.store import RunStore


def test_a_ctrl_c_in_the_block_is_held_until_it_ends_then_raised_through_the_previous_handler(
        capfd: pytest.CaptureFixture[str]) -> None:
    """SIGINTs inside the block are held (the block runs to its end), the first says once on stderr what
    is finished first and how to leave at once, and at the end the previous handler gets one (Python's
    raises KeyboardInterrupt, the CLI's also remembers it); nothing happens without a SIGINT; with
    ``raise_after=False`` the held one is dropped; in another thread the block runs as it is."""
    ran: list[str] = []
    with pytest.raises(KeyboardInterrupt), ctrl_c_deferred("finishing X", 5, leave_hint=lambda: "it leaves Y"):
        signal.raise_signal(signal.SIGINT)
        ran.append("after the first")
        signal.raise_signal(signal.SIGINT)
        ran.append("after the second")
    assert ran == ["after the first", "after the second"]
    err = capfd.readouterr().err
    assert err.count("hetsched: Ctrl-C: finishing X first (at most 5 s)") == 1, err
    assert "kill -9" in err and "(it leaves Y)" in err, err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    got: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        with ctrl_c_deferred():  # a registration: silent
            signal.raise_signal(signal.SIGINT)
            assert not got
        assert got == [signal.SIGINT] and capfd.readouterr().err == ""
        with ctrl_c_deferred("finishing Y", 1):
            pass
        assert got == [signal.SIGINT]
        with ctrl_c_deferred(raise_after=False):  # the caller is stopping anyway
            signal.raise_signal(signal.SIGINT)
        assert got == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)

    def elsewhere() -> None:
        with ctrl_c_deferred("finishing Z", 1):
            ran.append("in a thread")

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert ran[-1] == "in a thread"


def _second_ctrl_c_on(monkeypatch: pytest.MonkeyPatch, method: str, when: Any = None) -> list[str]:
    """Make the first call of ``RunStore.<method>`` (for which ``when(args)`` holds) meet a real SIGINT as it
    starts: the second Ctrl-C landing in the first one's clean-up. Returns a list that gets an entry then."""
    real = getattr(RunStore, method)
    sent: list[str] = []

    def wrapped(self: RunStore, *args: Any, **kwargs: Any) -> Any:
        if not sent and (when is None or when(args)):
            sent.append(method)
            signal.raise_signal(signal.SIGINT)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RunStore, method, wrapped)
    return sent


def test_a_second_ctrl_c_while_the_run_is_marked_interrupted_still_marks_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C (from the recorder after round 1 is stored), then another one just as the loop records
    the run's status: the run is still ``interrupted`` with its stored rounds (not left ``running``), and
    the KeyboardInterrupt still reaches the caller."""
    sent = _second_ctrl_c_on(monkeypatch, "set_status", when=lambda args: args[1] == "interrupted")

    def record(r: RoundRecord) -> None:
        if r.round == 1:
            raise KeyboardInterrupt

    sc = load_scenario("chain")
    with RunStore(tmp_path / "s.sqlite") as st:
        with pytest.raises(KeyboardInterrupt):
            run_recorded(run_key(sc, "all-cpu", LoopConfig(rounds=5, seed=1)), make_policy("all-cpu"), store=st,
                         recorder=record)
        assert sent == ["set_status"]
        (info,) = st.runs()
        assert (info.status, info.status_reason, info.rounds_done) == ("interrupted", "KeyboardInterrupt", 2)


def test_a_second_ctrl_c_while_the_cli_says_what_it_kept_still_says_it_and_exits_130(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hetsched run`` interrupted after round 1 is stored, then a second Ctrl-C as it reads the stored
    rounds back to print them: it still prints the rounds and how to continue, and exits 130."""
    from hetsched.cli.app import _on_ctrl_c, interrupted

    real_record = RunStore.record_round

    def record_round(self: RunStore, run_id: str, record: RoundRecord) -> None:
        real_record(self, run_id, record)
        if record.round == 1:
            _on_ctrl_c(signal.SIGINT, None)  # what the SIGINT handler does: remember, then raise

    monkeypatch.setattr(RunStore, "record_round", record_round)
    sent = _second_ctrl_c_on(monkeypatch, "rounds", when=lambda args: interrupted())
    store = tmp_path / "runs.sqlite"
    code, out, err = cli(capsys, "run", "chain", "-p", "all-cpu", "-r", "5", "--store", str(store),
                         "--reference", "none")
    assert sent == ["rounds"]
    assert code == 130, err
    m = re.search(r"interrupted: run (\w+) keeps its 2 stored rounds; continue it with: hetsched run --resume",
                  " ".join(err.split()))
    assert m, err
    assert "rounds done (2):" in out
    with RunStore(store, read_only=True) as st:
        assert st.run(m[1]).status == "interrupted" and len(st.rounds(m[1])) == 2


@pytest.mark.parametrize("suite", [None, "random"])
def test_a_second_ctrl_c_while_the_bench_says_what_it_kept_still_says_it_and_exits_130(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suite: str | None) -> None:
    """``hetsched bench`` (the S1-S13 form and a ``--suite``) interrupted as its third run is created, then a
    second Ctrl-C as it writes the store's path into its "kept" line: it still says what was kept and how to
    resume, and exits 130."""
    import hetsched.cli.bench as bench_cli

    real_create = RunStore.create_run
    calls = [0]
    armed: list[bool] = []

    def create_run(self: RunStore, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 3:
            armed.append(True)
            raise KeyboardInterrupt
        return real_create(self, *args, **kwargs)

    real_safe_path = bench_cli.safe_path
    sent: list[str] = []

    def safe_path(path: Any) -> str:
        if armed and not sent:
            sent.append("safe_path")
            signal.raise_signal(signal.SIGINT)
        return real_safe_path(path)

    monkeypatch.setattr(RunStore, "create_run", create_run)
    monkeypatch.setattr(bench_cli, "safe_path", safe_path)
    out_dir = tmp_path / "out"
    what = (["--scenario", "chain", "-p", "all-gpu", "--seeds", "5", "-r", "2"] if suite is None
            else ["--suite", "random", "--quick", "-p", "all-gpu", "-r", "2"])
    code, _, err = cli(capsys, "bench", *what, "-j", "1", "--no-progress", "-o", str(out_dir))
    assert sent == ["safe_path"]
    assert code == 130, err
    text = " ".join(err.split())
    assert re.search(r"interrupted: .*kept in .*resume with (hetsched bench|the same hetsched bench)", text), err
