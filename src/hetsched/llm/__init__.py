"""The LLM deciders, built on the deciders' interface (:mod:`hetsched.deciders.base`):

- ``openai``: any OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp server, SGLang, OpenAI);
- ``local``: an embedded GGUF model through llama-cpp-python (default SmolLM2-135M, smoke tests);
- ``scripted``: replays given replies through the same chat path (unit tests).

Also the one chat loop, prompt, reply parsing and reply validation they share, and their
configuration. Imports ``hetsched.model`` and ``hetsched.deciders`` (the interface and the
evidence readers); the LLM clients load lazily, from the ``llm`` extra. The deterministic
deciders (``rules``, ``argmin``) are :mod:`hetsched.deciders`; the registry by name is
:mod:`hetsched.policies.decider_registry`.
"""

from __future__ import annotations

from hetsched.llm.base import (
    DEFAULT_MAX_ATTEMPTS,
    ChatReply,
    LLMUnreachableError,
    TransportError,
)
from hetsched.llm.chat import ChatDecider
from hetsched.llm.config import LLMConfig, resolve_llm_config

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "ChatDecider",
    "ChatReply",
    "LLMConfig",
    "LLMUnreachableError",
    "TransportError",
    "resolve_llm_config",
]
