"""The decider registry: the agentic policy's deciders by name, whichever room they live in.

- ``rules``: the paper's reasoning as deterministic rules (NOT an LLM; the default);
- ``argmin``: the lowest measured mapping (ablation baseline; not an LLM);
- ``openai``: any OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp server, SGLang, OpenAI);
- ``local``: an embedded GGUF model through llama-cpp-python (default SmolLM2-135M, smoke tests);
- ``scripted``: replays given replies through the chat path (unit tests).

The deterministic deciders live in :mod:`hetsched.deciders`, the chat deciders in
:mod:`hetsched.llm` (which builds on the deciders' interface); the registry sits above both, in
the policies layer, so neither room imports the other's clients. Classes load lazily: an LLM
client's optional packages are imported only when it is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

from hetsched.deciders.base import Decider, DeciderConfigError
from hetsched.llm.config import LLMConfig, resolve_llm_config
from hetsched.model import UnknownNameError
from hetsched.model.errors import did_you_mean
from hetsched.policies import policy_options

DECIDERS: dict[str, str] = {
    "rules": "hetsched.deciders.rules:RulesDecider",
    "argmin": "hetsched.deciders.argmin:ArgminDecider",
    "openai": "hetsched.llm.openai_compat:OpenAIDecider",
    "local": "hetsched.llm.local:LocalDecider",
    "scripted": "hetsched.llm.scripted:ScriptedDecider",
}
"""Decider name -> ``module:Class`` (imported lazily)."""

LLM_DECIDERS = ("openai", "local")
"""Deciders that take an :class:`LLMConfig`."""


def decider_names() -> tuple[str, ...]:
    """Every name :func:`make_decider` accepts."""
    return tuple(DECIDERS)


def make_decider(name: str, llm: LLMConfig | None = None, **options: Any) -> Decider:
    """Build a decider by name; ``llm`` configures ``openai``/``local`` (resolved from env/file when None).

    ``options`` are checked against the decider's constructor by name before it is called
    (:class:`DeciderConfigError` names the unknown one and what it takes), so an error raised
    inside a constructor is the constructor's, never read as a bad option."""
    key = name.strip().lower()
    if key not in DECIDERS:
        raise UnknownNameError(f"Unknown decider: {name!r}; valid deciders: {', '.join(DECIDERS)}"
                               + did_you_mean(name, DECIDERS))
    module_name, cls_name = DECIDERS[key].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    accepted = tuple(p for p in policy_options(cls) if not (key in LLM_DECIDERS and p == "config"))
    unknown = [k for k in options if k not in accepted]
    if unknown:
        takes = f"it takes {', '.join(accepted)}" if accepted else "it takes no options"
        raise DeciderConfigError(f"decider {key!r} has no option {', '.join(map(repr, unknown))}"
                                 f"{did_you_mean(unknown[0], accepted)}; {takes}")
    if key in LLM_DECIDERS:
        decider: Decider = cls(llm or resolve_llm_config(), **options)
    else:
        decider = cls(**options)
    return decider


__all__ = ["DECIDERS", "LLM_DECIDERS", "decider_names", "make_decider"]
