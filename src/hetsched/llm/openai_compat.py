"""The ``openai`` decider: any OpenAI-compatible chat endpoint through the ``openai`` SDK.

Works with vLLM, SGLang, Ollama, the llama.cpp server (C++ ``llama-server`` or
``python -m llama_cpp.server``) and OpenAI itself. Structured output, in the order tried with
``response_format="auto"``: ``json_schema`` (OpenAI, vLLM, SGLang), ``json_object`` with a
``schema`` key (llama-cpp-python server), plain ``json_object``, then no format at all. A
format the server rejects (HTTP 400/422/500 whose message names the response format) is
dropped for the rest of the run. Reasoning
models are handled: ``reasoning_content`` / ``reasoning`` fields are kept as reasoning, and the
parser takes the last JSON object after ``</think>``.

Imports only ``hetsched.model`` and, when built, ``openai`` (the ``llm`` extra).
"""

from __future__ import annotations

from typing import Any

from hetsched.llm.base import ChatReply, DeciderConfigError, Messages, TransportError
from hetsched.llm.chat import ChatDecider
from hetsched.llm.config import LLMConfig

_ORDER = {
    "auto": ("json_schema", "json_object_schema", "json_object", "text"),
    "json_schema": ("json_schema",),
    "json_object": ("json_object_schema", "json_object"),
    "text": ("text",),
}


def _response_format(kind: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "hetsched_mapping", "schema": schema, "strict": False}}
    if kind == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    if kind == "json_object":
        return {"type": "json_object"}
    return None


def _reasoning(message: Any) -> str:
    for key in ("reasoning_content", "reasoning"):
        value = getattr(message, key, None)
        if value is None and getattr(message, "model_extra", None):
            value = message.model_extra.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


class OpenAIDecider(ChatDecider):
    """Asks an OpenAI-compatible server; see the module docstring.

    Args:
        config: endpoint, model, key, sampling, attempts (see :class:`LLMConfig`).
        http_client: an ``httpx.Client`` to use instead of the SDK's own (tests, proxies).
    """

    name = "openai"

    def __init__(self, config: LLMConfig | None = None, http_client: Any = None) -> None:
        config = config or LLMConfig()
        super().__init__(config.max_attempts)
        try:
            import openai
        except ImportError:
            raise DeciderConfigError(
                "the openai decider needs the openai package: pip install 'hetsched[llm]'"
            ) from None
        self._openai = openai
        self.config = config
        self.client = openai.OpenAI(
            base_url=config.base_url,
            api_key=config.api_key or "EMPTY",
            timeout=config.timeout_s,
            max_retries=1,
            http_client=http_client,
        )
        self._formats = list(_ORDER[config.response_format])
        self._model = config.model

    @property
    def model(self) -> str | None:
        return self._model

    @property
    def response_format(self) -> str:
        """Structured-output mode in use: ``json_schema``, ``json_object_schema``, ``json_object`` or ``text``."""
        return self._formats[0]

    def _resolve_model(self) -> str:
        if self._model is None:
            try:
                listed = self.client.models.list()
            except self._openai.APIError as exc:
                raise TransportError(f"cannot list the server's models to pick one ({exc}); give --llm-model") from exc
            ids = [m.id for m in listed.data]
            if not ids:
                raise TransportError("the server lists no models; give --llm-model")
            self._model = ids[0]
        return self._model

    def complete(self, messages: Messages, schema: dict[str, Any]) -> ChatReply:
        openai = self._openai
        model = self._resolve_model()
        cfg = self.config
        kwargs: dict[str, Any] = {"model": model, "messages": messages, "temperature": cfg.temperature,
                                  "max_tokens": cfg.max_tokens}
        if cfg.top_p is not None:
            kwargs["top_p"] = cfg.top_p
        if cfg.seed is not None:
            kwargs["seed"] = cfg.seed
        # kwargs are built at run time, which the SDK's typed overloads cannot follow
        create: Any = self.client.chat.completions.create
        while True:
            fmt = _response_format(self._formats[0], schema)
            try:
                resp = create(**kwargs) if fmt is None else create(response_format=fmt, **kwargs)
                break
            except openai.APIStatusError as exc:
                # servers refuse an unknown response_format with 400, 422, or (llama-cpp-python's
                # server, whose request validation error escapes as) 500 naming the field
                text = str(exc).lower()
                about_format = exc.status_code in (400, 422, 500) and any(
                    k in text for k in ("response_format", "json_schema", "schema", "json_object")
                )
                if about_format and len(self._formats) > 1:
                    # the server does not take this response_format: drop it for the rest of the run
                    self._formats.pop(0)
                    continue
                raise TransportError(f"HTTP {exc.status_code}: {exc.message}") from exc
            except openai.APIError as exc:
                raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        if not resp.choices:
            raise TransportError("the server returned no choices")
        choice = resp.choices[0]
        usage = resp.usage
        return ChatReply(
            text=choice.message.content or "",
            reasoning=_reasoning(choice.message),
            finish_reason=choice.finish_reason,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
        )
