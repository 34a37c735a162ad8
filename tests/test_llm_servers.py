"""The ``openai`` decider against real misbehaving OpenAI-compatible servers.

Each test starts a real HTTP server on 127.0.0.1 (``http.server`` in a thread) that answers
the chat-completions endpoint with what the test scripts: bodies that are not chat completions
(deeply nested, a list, ``choices: [{}]``, ``message: null``, text/plain, not JSON, not UTF-8,
too large), HTTP errors, a server that hangs, one that drips its reply a byte at a time, one
that closes the connection, and an address where nothing listens. Every bad answer must become a
recorded failed attempt and then a re-ask or a fallback; a decider that never reached its server
must stop the run with a message that says what to fix (exit 69 on the command line); nothing
may raise a traceback or hang.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.factories import decision_info

from hetsched.cli.app import error_text
from hetsched.deciders import check_mapping
from hetsched.llm import LLMConfig, resolve_llm_config
from hetsched.llm.base import LLMUnreachableError
from hetsched.llm.openai_compat import MAX_BODY_BYTES, OpenAIDecider
from hetsched.loop import LoopConfig, RunResult, run_key, run_recorded, run_rounds
from hetsched.model.files import load_scenario
from hetsched.policies.agentic import Agentic
from hetsched.store import RunStore

pytest.importorskip("openai", reason="the openai decider needs the llm extra (pip install 'hetsched[llm]')")

CHAIN = load_scenario("chain")
GOOD = {"A": "gpu_now", "B": "cpu", "C": "gpu_now", "D": "gpu_now"}


def completion(content: Any, **message: Any) -> dict[str, Any]:
    """A well-formed chat completion whose message content is ``content``."""
    return {
        "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content,
                                                                     **message}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


def good_reply(mapping: dict[str, str] | None = None) -> dict[str, Any]:
    return completion(json.dumps({"mapping": mapping or GOOD, "rationale": "the GPU tools fit"}))


# ---------------------------------------------------------------- the server
Answer = Callable[[BaseHTTPRequestHandler], None]
"""Writes one HTTP answer (status, headers, body) to the handler, or misbehaves."""


def send(status: int, body: bytes, content_type: str = "application/json") -> Answer:
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return answer


def send_json(obj: Any, status: int = 200) -> Answer:
    return send(status, json.dumps(obj).encode())


def hang(h: BaseHTTPRequestHandler) -> None:
    """Accept the request and never answer (until the server stops)."""
    h.server.stopping.wait(60)  # type: ignore[attr-defined]


def drip(h: BaseHTTPRequestHandler) -> None:
    """Headers at once, then the body one byte every 0.2 s: each read is quick, the whole never ends."""
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", "100000")
    h.end_headers()
    for _ in range(300):
        if h.server.stopping.is_set():  # type: ignore[attr-defined]
            return
        try:
            h.wfile.write(b" ")
            h.wfile.flush()
        except OSError:
            return
        time.sleep(0.2)


def close_at_once(h: BaseHTTPRequestHandler) -> None:
    """Close the connection without a byte of answer."""
    h.close_connection = True
    h.connection.shutdown(socket.SHUT_RDWR)


def flood(size: int) -> Answer:
    """A 200 body of ``size`` bytes: a completion whose content is that long, sent in chunks."""

    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        h.wfile.write(b'{"choices": [{"message": {"content": "')
        sent = 0
        try:
            while sent < size:
                h.wfile.write(b"y" * 65536)
                sent += 65536
            h.wfile.write(b'"}}]}')
        except OSError:
            return

    return answer


@dataclass
class FakeServer:
    """A real HTTP server: ``answers`` are served in order for chat completions, the last one
    repeated; ``/models`` lists model ``m`` unless ``models`` says otherwise."""

    url: str
    httpd: ThreadingHTTPServer
    answers: list[Answer] = field(default_factory=list)
    models: Answer | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    completions: int = 0

    def script(self, *answers: Answer, models: Answer | None = None) -> None:
        self.answers = list(answers)
        self.models = models
        self.requests.clear()
        self.completions = 0


@pytest.fixture
def server() -> Iterator[FakeServer]:
    state: dict[str, FakeServer] = {}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, body: bytes) -> None:
            fake = state["fake"]
            fake.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
            if self.path.endswith("/models"):
                (fake.models or send_json({"object": "list", "data": [{"id": "m", "object": "model"}]}))(self)
                return
            answers = fake.answers or [send_json(good_reply())]
            answer = answers[min(fake.completions, len(answers) - 1)]
            fake.completions += 1
            answer(self)

        def do_GET(self) -> None:
            self._answer(b"")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._answer(self.rfile.read(length))

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            # the tests' clients time out and hang up on purpose: no traceback on the test run's output
            if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
                super().handle_error(request, client_address)

    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.stopping = threading.Event()  # type: ignore[attr-defined]
    fake = FakeServer(url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", httpd=httpd)
    state["fake"] = fake
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        httpd.stopping.set()  # type: ignore[attr-defined]
        httpd.shutdown()
        httpd.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def decider(url: str, **config: Any) -> OpenAIDecider:
    settings: dict[str, Any] = {"base_url": url, "model": "m", "timeout_s": 2.0, "retries": 0, **config}
    return OpenAIDecider(LLMConfig(**settings))


def run(url: str, rounds: int = 2, **config: Any) -> tuple[RunResult, OpenAIDecider]:
    d = decider(url, **config)
    return run_rounds(CHAIN, Agentic(decider=d), LoopConfig(rounds=rounds, seed=0)), d


def attempts(result: RunResult, rnd: int) -> list[dict[str, Any]]:
    return list(decision_info(result.rounds[rnd])["transcript"])


def assert_nothing_infeasible_ran(result: RunResult) -> None:
    for r in result.rounds:
        assert r.trace.feasible and not check_mapping(result.scenario, r.mapping), r.round


# ---------------------------------------------------------------- bodies that are not chat completions
NESTED = b'{"choices": [{"message": {"content": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}]}"

BAD_BODIES: dict[str, tuple[Answer, str]] = {
    "content nested 100,000 deep": (send(200, NESTED), "nested too deeply"),
    "choices: [{}]": (send_json({"choices": [{}]}), "choice 0 has no message"),
    "message: null": (send_json({"choices": [{"message": None}]}), "choice 0 has no message"),
    "no choices": (send_json({"id": "x", "choices": []}), "no choices"),
    "a list": (send_json([good_reply()]), "is a JSON array, not a chat completion"),
    "a string": (send_json("hello"), "is a JSON string, not a chat completion"),
    "text/plain": (send(200, b"Hello from a web server", "text/plain"), "text/plain) is not JSON"),
    "not JSON": (send(200, b"{'mapping': oops"), "is not JSON"),
    "not UTF-8": (send(200, b"\xff\xfe\x00garbage"), "is not UTF-8"),
    "content a number": (send_json(completion(42)), "content is a JSON number, not text"),
    "content an object": (send_json(completion({"mapping": GOOD})), "content is a JSON object, not text"),
    "choice a string": (send_json({"choices": ["x"]}), "choice 0 is a JSON string"),
    "an error with 200": (send_json({"error": {"message": "model crashed"}}), "answered with an error: model crashed"),
    "over the size limit": (flood(MAX_BODY_BYTES + 1_000_000), "over 4,194,304 bytes"),
    "closed without an answer": (close_at_once, "request failed"),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_a_bad_answer_is_a_recorded_attempt_then_a_reask(server: FakeServer, case: str) -> None:
    bad, fragment = BAD_BODIES[case]
    server.script(send_json(good_reply()), bad, send_json(good_reply()))  # round 0 fine, round 1: bad, then fine
    result, _ = run(server.url, rounds=2)
    first, *rest = attempts(result, 1)
    assert fragment in first["error"], first["error"]
    if case == "closed without an answer":  # a failed request ends the round's asks: fallback
        assert decision_info(result.rounds[1])["fallback"] and not rest
    else:  # the same conversation asked again, answered well
        assert not decision_info(result.rounds[1])["fallback"] and rest[-1]["error"] == ""
        assert result.rounds[1].mapping.to_dict() == GOOD
    assert_nothing_infeasible_ran(result)


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_always_bad_answers_fall_back_on_record(server: FakeServer, case: str) -> None:
    bad, fragment = BAD_BODIES[case]
    server.script(send_json(good_reply()), bad)
    result, d = run(server.url, rounds=3)
    for rnd in (1, 2):
        info = decision_info(result.rounds[rnd])
        assert info["fallback"] and all(fragment in a["error"] for a in info["transcript"]), info["transcript"]
        assert 1 <= len(info["transcript"]) <= d.max_attempts
    assert_nothing_infeasible_ran(result)


def test_text_parts_are_read_as_the_content_and_other_parts_as_nothing(server: FakeServer) -> None:
    text = json.dumps({"mapping": GOOD, "rationale": "parts"})
    parts = [{"type": "text", "text": text[:10]}, {"type": "text", "text": text[10:]}]
    server.script(send_json(completion(parts)), send_json(completion([{"type": "image_url", "image_url": {}}])),
                  send_json(good_reply()))
    result, _ = run(server.url, rounds=2)
    assert result.rounds[0].mapping.to_dict() == GOOD and attempts(result, 0)[0]["error"] == ""
    assert "empty" in attempts(result, 1)[0]["error"] and attempts(result, 1)[1]["error"] == ""


def test_huge_content_within_the_body_limit_is_refused_by_the_parser(server: FakeServer) -> None:
    server.script(send_json(good_reply()), send_json(completion("{" * 2_000_000)), send_json(good_reply()))
    result, _ = run(server.url, rounds=2)
    assert "over the limit of 1,000,000" in attempts(result, 1)[0]["error"]
    assert result.rounds[1].mapping.to_dict() == GOOD


# ---------------------------------------------------------------- servers that fail or hang
def test_nothing_listening_stops_the_run_with_the_fix(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    key = run_key(CHAIN, "agentic", LoopConfig(rounds=3))
    with RunStore(tmp_path / "runs.sqlite") as store:
        with pytest.raises(LLMUnreachableError) as exc:
            run_recorded(key, Agentic(decider=decider(url, retries=1)), store=store)
        (info,) = store.runs()
        assert (info.status, info.rounds_done) == ("interrupted", 0)
    message = str(exc.value)  # the library names the setting, the CLI its flag
    assert url in message and "cannot connect" in message
    assert "start the server, or check the LLM setting base_url" in message and "--llm" not in message
    assert "start the server, or check --llm-base-url (or HETSCHED_LLM_BASE_URL" in error_text(exc.value)
    assert "--llm-model" not in error_text(exc.value)


@pytest.mark.parametrize("where", ["everywhere", "completions only"])
def test_a_hanging_server_costs_one_timeout_then_stops_the_run(server: FakeServer, where: str) -> None:
    server.script(hang, models=hang if where == "everywhere" else None)
    with pytest.raises(LLMUnreachableError, match=r"no answer within 1 s.*raise the LLM setting timeout_s"):
        run(server.url, rounds=3, timeout_s=1.0, retries=2)
    # a timed-out request is not retried, whatever --llm-retries says
    assert server.completions <= 1 and len(server.requests) <= 2


def test_a_server_that_hangs_after_answering_costs_a_fallback_per_round(server: FakeServer) -> None:
    server.script(send_json(good_reply()), hang)
    result, _ = run(server.url, rounds=3, timeout_s=1.0)
    for rnd in (1, 2):
        (only,) = attempts(result, rnd)
        assert "no answer within 1 s" in only["error"] and decision_info(result.rounds[rnd])["fallback"]
    assert_nothing_infeasible_ran(result)


def test_a_dripping_reply_is_cut_at_the_timeout(server: FakeServer) -> None:
    server.script(send_json(good_reply()), drip)
    result, _ = run(server.url, rounds=2, timeout_s=1.0)
    assert "no answer within 1 s" in attempts(result, 1)[0]["error"]
    assert server.completions == 2  # not retried


@pytest.mark.parametrize(
    ("status", "fix"),
    [(404, "check the LLM setting base_url"), (401, "check the LLM setting api_key"), (500, "the server failed"),
     (400, "the server refused the request")],
)
def test_http_errors_before_any_answer_stop_the_run_naming_the_fix(server: FakeServer, status: int, fix: str) -> None:
    server.script(send_json({"error": {"message": "nope"}}, status=status))
    with pytest.raises(LLMUnreachableError, match=f"HTTP {status}.*{fix}"):
        run(server.url, rounds=2)


def test_http_errors_after_an_answer_fall_back_and_5xx_is_retried(server: FakeServer) -> None:
    server.script(send_json(good_reply()), send_json({"error": {"message": "busy"}}, status=503),
                  send_json(good_reply()))
    result, _ = run(server.url, rounds=2, retries=1)
    assert attempts(result, 1)[0]["error"] == "" and server.completions == 3  # the 503 was retried once
    server.script(send_json(good_reply()), send_json({"error": {"message": "busy"}}, status=503))
    result, _ = run(server.url, rounds=2, retries=0)
    assert "HTTP 503" in attempts(result, 1)[0]["error"] and decision_info(result.rounds[1])["fallback"]


def test_model_not_found_names_the_model_fix(server: FakeServer) -> None:
    server.script(send_json({"error": {"message": "model 'x' not found"}}, status=404))
    with pytest.raises(LLMUnreachableError, match="check the LLM setting model"):
        run(server.url, rounds=1)


def test_no_model_given_and_none_listed_says_give_llm_model(server: FakeServer) -> None:
    server.script(models=send_json({"object": "list", "data": []}))
    with pytest.raises(LLMUnreachableError, match="lists no model; give the LLM setting model"):
        run(server.url, rounds=1, model=None)
    server.script(models=send_json({"object": "list", "data": [{"id": "first"}, {"id": "second"}]}))
    _, d = run(server.url, rounds=1, model=None)
    assert d.model == "first"


# ---------------------------------------------------------------- keys and URLs from the environment
def test_openai_api_key_and_base_url_are_honoured_below_hetsched_settings(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("HETSCHED_LLM_API_KEY", "HETSCHED_LLM_BASE_URL", "HETSCHED_LLM_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HETSCHED_LLM_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-openai-env")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    cfg = resolve_llm_config({"model": "m"})
    assert (cfg.base_url, cfg.api_key) == (server.url, "sk-from-openai-env")
    run_rounds(CHAIN, Agentic(decider=OpenAIDecider(LLMConfig(model="m"))), LoopConfig(rounds=1))
    assert server.requests[-1]["headers"]["authorization"] == "Bearer sk-from-openai-env"
    monkeypatch.setenv("HETSCHED_LLM_API_KEY", "sk-hetsched")
    assert resolve_llm_config().api_key == "sk-hetsched"
    assert resolve_llm_config({"api_key": "sk-flag"}).api_key == "sk-flag"


# ---------------------------------------------------------------- the command line
def hetsched(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.run([sys.executable, "-m", "hetsched", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_cli_unreachable_server_exits_69_with_the_fix_and_the_resume_hint(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    store = tmp_path / "runs.sqlite"
    proc = hetsched("run", "chain", "-p", "agentic", "--decider", "openai", "--llm-base-url", url,
                    "--llm-model", "m", "--llm-timeout", "5", "--llm-retries", "0", "--store", str(store))
    assert proc.returncode == 69, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert f"cannot connect to {url}" in proc.stderr and "start the server" in proc.stderr
    assert "hetsched run --resume" in proc.stderr and "give --llm-model" not in proc.stderr
    proc = hetsched("run", "chain", "-p", "agentic", "--decider", "openai", "--llm-base-url", url,
                    "--no-store", "--json")
    assert proc.returncode == 69 and proc.stdout == "" and "Traceback" not in proc.stderr


def test_cli_hanging_server_exits_69_within_the_timeout(server: FakeServer) -> None:
    server.script(hang, models=hang)
    proc = hetsched("run", "chain", "-p", "agentic", "--decider", "openai", "--llm-base-url", server.url,
                    "--llm-timeout", "1", "--no-store", timeout=60)
    assert proc.returncode == 69 and "no answer within 1 s" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_resume_after_the_server_came_back_with_a_longer_timeout(server: FakeServer, tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    server.script(hang)
    proc = hetsched("run", "chain", "-p", "agentic", "--decider", "openai", "--llm-base-url", server.url,
                    "--llm-model", "m", "--llm-timeout", "1", "-r", "2", "--store", str(store), timeout=60)
    assert proc.returncode == 69 and "raise --llm-timeout" in proc.stderr
    run_id = proc.stderr.split("hetsched run --resume ")[1].split()[0]
    server.script(send_json(good_reply()))
    proc = hetsched("run", "--resume", run_id, "--store", str(store), "--llm-timeout", "30", "--llm-retries", "2",
                    "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["mapping"] for r in json.loads(proc.stdout)["rounds"]] == [GOOD, GOOD]
    with RunStore(store) as st:
        info = st.run(run_id)
    assert info.status == "finished" and info.options["llm"]["timeout_s"] == 1  # the session's value is not stored
    proc = hetsched("run", "--resume", run_id, "--store", str(store), "--llm-timeout", "0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(["--llm-timeout", "0"], "--llm-timeout"), (["--llm-retries", "-1"], "--llm-retries"),
     (["--llm-retries", "99"], "--llm-retries")],
)
def test_cli_llm_timeout_and_retries_are_checked(args: list[str], fragment: str) -> None:
    proc = hetsched("run", "chain", "-p", "agentic", "--decider", "openai", "--no-store", *args)
    assert proc.returncode == 2 and fragment in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("var", "value", "fragment"),
    [("HETSCHED_LLM_TIMEOUT", "soon", "HETSCHED_LLM_TIMEOUT='soon'"),
     ("HETSCHED_LLM_TIMEOUT", "-3", "timeout_s must be a number of seconds > 0"),
     ("HETSCHED_LLM_TIMEOUT", "nan", "timeout_s must be"),
     ("HETSCHED_LLM_RETRIES", "2.5", "HETSCHED_LLM_RETRIES='2.5'")],
)
def test_llm_environment_values_are_checked(var: str, value: str, fragment: str) -> None:
    with pytest.raises(Exception, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        resolve_llm_config(env={var: value})


def test_llm_settings_reach_the_config_from_env_and_file(tmp_path: Path) -> None:
    f = tmp_path / "llm.toml"
    f.write_text("timeout_s = 7\nretries = 3\n")
    cfg = resolve_llm_config(env={"HETSCHED_LLM_CONFIG": str(f)})
    assert (cfg.timeout_s, cfg.retries) == (7, 3)
    cfg = resolve_llm_config(env={"HETSCHED_LLM_CONFIG": str(f), "HETSCHED_LLM_TIMEOUT": "2.5"})
    assert (cfg.timeout_s, cfg.retries) == (2.5, 3)
    f.write_text('retries = "many"\n')
    with pytest.raises(Exception, match="retries must be an integer from 0 to 10, got 'many'"):
        resolve_llm_config(env={"HETSCHED_LLM_CONFIG": str(f)})
