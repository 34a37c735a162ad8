"""The ``openai`` decider: any OpenAI-compatible chat endpoint through the ``openai`` SDK.

Works with vLLM, SGLang, Ollama, the llama.cpp server (C++ ``llama-server`` or
``python -m llama_cpp.server``) and OpenAI itself. Structured output, in the order tried with
``response_format="auto"``: ``json_schema`` (OpenAI, vLLM, SGLang), ``json_object`` with a
``schema`` key (llama-cpp-python server), plain ``json_object``, then no format at all. A
format the server rejects (HTTP 400/422/500 whose message names the response format) is
dropped for the rest of the run. Reasoning models are handled: ``reasoning_content`` /
``reasoning`` fields are kept as reasoning, and the parser takes the last JSON object after
``</think>``.

A server is not trusted to behave. The SDK builds and sends the requests; the answers are read
here, from the raw body, never through the SDK's models:

- every request goes through :class:`BoundedTransport`: at most ``timeout_s`` seconds for the
  whole exchange (a server that drips bytes is cut too) and at most :data:`MAX_BODY_BYTES`
  bytes of body (uncompressed: compression is refused), so a hanging or flooding server costs
  seconds and bounded memory;
- a body that is not a chat completion (not UTF-8, not JSON, nested too deeply, a list, no
  ``choices``, ``choices: [{}]``, ``message: null``, content that is neither text nor a list of
  text parts, over the size limit) raises :class:`~hetsched.llm.base.MalformedReply`: a
  recorded failed attempt, then the same conversation is asked again;
- a request that fails (connection refused, timeout, HTTP error) is retried ``retries`` times
  when that can help (connection errors, HTTP 408/409/429/5xx; never a timeout), then raises
  :class:`~hetsched.llm.base.TransportError` carrying the fix to apply (start the server,
  check ``--llm-base-url``, ``--llm-api-key``, ``--llm-model``, raise ``--llm-timeout``);
- before its first ask the decider checks the server (``GET /models``, at most
  :data:`PROBE_TIMEOUT_S` s), so a server that is down or hangs is reported in seconds.

The API key is, in this order: ``LLMConfig.api_key`` (``--llm-api-key``,
``HETSCHED_LLM_API_KEY``, the config file), ``OPENAI_API_KEY``, else ``EMPTY`` (local servers
ignore it). The base URL: ``LLMConfig.base_url``, else ``OPENAI_BASE_URL``, else api.openai.com.

Imports only ``hetsched.model`` and, when built, ``openai`` (the ``llm`` extra) and the HTTP
library it is built on (``httpx`` or ``httpx2``).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any, cast

from hetsched.deciders.base import DeciderConfigError
from hetsched.llm.base import ChatReply, MalformedReply, Messages, TransportError
from hetsched.llm.chat import ChatDecider
from hetsched.llm.config import LLMConfig

_ORDER = {
    "auto": ("json_schema", "json_object_schema", "json_object", "text"),
    "json_schema": ("json_schema",),
    "json_object": ("json_object_schema", "json_object"),
    "text": ("text",),
}

MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest HTTP body read from the server; a longer one is cut there and reported."""
PROBE_TIMEOUT_S = 10.0
"""Longest wait for ``GET /models`` before the first ask (never more than ``timeout_s``)."""
CONNECT_TIMEOUT_S = 10.0
"""Longest wait to open a connection (never more than ``timeout_s``)."""
RETRY_STATUSES = frozenset({408, 409, 429})
"""HTTP statuses (besides 5xx) worth one more try."""
MAX_BACKOFF_S = 4.0
"""Longest pause between two tries of a request (0.5 s, 1 s, 2 s, 4 s...)."""
RAW_EXCERPT_CHARS = 2000
"""How much of an unusable body the transcript keeps."""

BASE_URL_FIX = "start the server, or check the LLM setting base_url (or HETSCHED_LLM_BASE_URL / OPENAI_BASE_URL)"
KEY_FIX = "check the LLM setting api_key (or HETSCHED_LLM_API_KEY / OPENAI_API_KEY)"


def _response_format(kind: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "hetsched_mapping", "schema": schema, "strict": False}}
    if kind == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    if kind == "json_object":
        return {"type": "json_object"}
    return None


# ---------------------------------------------------------------------------- the transport
def http_module(openai: Any) -> Any:
    """The HTTP library the installed SDK is built on (``httpx``, or ``httpx2`` in recent releases)."""
    base = next(c for c in openai.DefaultHttpxClient.__mro__ if c.__name__ == "Client")
    return importlib.import_module(base.__module__.split(".")[0])


_TOO_LARGE: dict[str, type[Exception]] = {}
_STREAMS: dict[str, type[Any]] = {}


def too_large_error(httpx: Any) -> type[Exception]:
    """The exception :class:`BoundedTransport` raises for an oversized body (a ``ReadError`` of
    the HTTP library, so the SDK reports it as a connection error; the client tells it apart)."""
    if httpx.__name__ not in _TOO_LARGE:
        _TOO_LARGE[httpx.__name__] = type("BodyTooLarge", (httpx.ReadError,), {})
    return _TOO_LARGE[httpx.__name__]


def _stream_class(httpx: Any) -> type[Any]:
    """:class:`_BoundedStream` as a byte stream of the HTTP library in use (its client checks the type)."""
    if httpx.__name__ not in _STREAMS:
        _STREAMS[httpx.__name__] = type("BoundedStream", (_BoundedStream, httpx.SyncByteStream), {})
    return _STREAMS[httpx.__name__]


def _closed_by_server(exc: BaseException) -> bool:
    """Did a connection error happen after connecting (the server closed it: httpx's RemoteProtocolError,
    ReadError, WriteError), rather than while connecting (ConnectError, refused, no route)?"""
    seen: BaseException | None = exc
    while seen is not None:
        name = type(seen).__name__
        if name in ("ConnectError", "ConnectTimeout", "ConnectionRefusedError"):
            return False
        if name in ("RemoteProtocolError", "ReadError", "WriteError", "ConnectionResetError"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class BoundedTransport:
    """An HTTP transport that bounds each exchange: ``timeout_s`` in all (also for a body that
    arrives a byte at a time) and ``max_bytes`` of body; asks for and reads bodies uncompressed.

    Built for the HTTP library the SDK uses (see :func:`http_module`); ``inner`` sends the
    requests (the library's own transport by default; tests pass a mock).
    """

    def __init__(self, httpx: Any, timeout_s: float, max_bytes: int = MAX_BODY_BYTES, inner: Any = None) -> None:
        self.httpx = httpx
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.inner = inner if inner is not None else httpx.HTTPTransport()
        self.too_large = too_large_error(httpx)

    def handle_request(self, request: Any) -> Any:
        httpx = self.httpx
        limit = self.timeout_s
        asked = request.extensions.get("timeout")
        if isinstance(asked, dict) and isinstance(asked.get("read"), (int, float)):
            limit = min(limit, float(asked["read"]))  # a shorter timeout asked for this request wins
        deadline = time.monotonic() + limit
        request.extensions["timeout"] = {"connect": min(limit, CONNECT_TIMEOUT_S), "read": limit, "write": limit,
                                         "pool": limit}
        request.headers["Accept-Encoding"] = "identity"
        response = self.inner.handle_request(request)
        headers = [(k, v) for k, v in response.headers.raw if k.lower() != b"content-encoding"]
        stream = _stream_class(httpx)(self, response, deadline, limit)
        return httpx.Response(response.status_code, headers=headers, stream=stream, extensions=response.extensions)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> BoundedTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _BoundedStream:
    """A response body that raises past the deadline or the size limit."""

    def __init__(self, transport: BoundedTransport, response: Any, deadline: float, limit_s: float) -> None:
        self.transport = transport
        self.response = response
        self.deadline = deadline
        self.limit_s = limit_s

    def __iter__(self) -> Iterator[bytes]:
        t = self.transport
        size = 0
        for chunk in self.response.stream:
            size += len(chunk)
            if size > t.max_bytes:
                raise t.too_large(f"HTTP {self.response.status_code} body over {t.max_bytes:,} bytes; cut there")
            if time.monotonic() > self.deadline:
                raise t.httpx.ReadTimeout(f"the whole reply did not arrive within {self.limit_s:g} s")
            yield chunk

    def close(self) -> None:
        self.response.close()


# ---------------------------------------------------------------------------- reading answers
def _excerpt(body: bytes) -> str:
    text = body[:RAW_EXCERPT_CHARS].decode("utf-8", errors="replace")
    return text + (f"... ({len(body):,} bytes)" if len(body) > RAW_EXCERPT_CHARS else "")


def _json_body(body: bytes, content_type: str) -> Any:
    """The body as JSON; :class:`MalformedReply` when it is not."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedReply(f"the body ({len(body):,} bytes, {content_type or 'no content type'}) is not UTF-8 "
                             "text", _excerpt(body)) from None
    try:
        return json.loads(text)
    except RecursionError:
        raise MalformedReply("the body is JSON nested too deeply to read", _excerpt(body)) from None
    except ValueError:
        what = content_type or "no content type"
        raise MalformedReply(f"the body ({len(body):,} bytes, {what}) is not JSON", _excerpt(body)) from None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text_content(content: Any) -> str:
    """Message content as text: a string, or a list of ``{"type": "text", "text": ...}`` parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif not (isinstance(part, dict) and part.get("type") not in (None, "text")):
                raise MalformedReply(f"a part of the message content is a {type(part).__name__} without text")
        return "".join(parts)
    raise MalformedReply(f"the message content is a JSON {_json_type(content)}, not text")


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def read_completion(body: bytes, content_type: str = "") -> ChatReply:
    """A chat completion body as a :class:`ChatReply`; :class:`MalformedReply` when it is not one."""
    data = _json_body(body, content_type)
    raw = _excerpt(body)
    if not isinstance(data, dict):
        raise MalformedReply(f"the body is a JSON {_json_type(data)}, not a chat completion object", raw)
    if "error" in data and "choices" not in data:
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise MalformedReply(f"the server answered with an error: {str(message)[:300]}", raw)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedReply("the completion has no choices", raw)
    choice = choices[0]
    if not isinstance(choice, dict):
        raise MalformedReply(f"choice 0 is a JSON {_json_type(choice)}, not an object", raw)
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedReply(f"choice 0 has no message (got {_json_type(message)})", raw)
    try:
        text = _text_content(message.get("content"))
    except MalformedReply as exc:
        raise MalformedReply(str(exc), raw) from None
    reasoning = ""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            reasoning = value
            break
    finish = choice.get("finish_reason")
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return ChatReply(
        text=text,
        reasoning=reasoning,
        finish_reason=finish if isinstance(finish, str) else None,
        prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
        completion_tokens=_int_or_none(usage.get("completion_tokens")),
    )


def read_model_ids(body: bytes) -> list[str]:
    """Model ids of a ``GET /models`` body (``{"data": [{"id": ...}]}``); [] when it lists none it can read."""
    try:
        data = _json_body(body, "")
    except MalformedReply:
        return []
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return []
    return [m["id"] for m in items if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]


# ---------------------------------------------------------------------------- the decider
class FormatRefused(TransportError):
    """The server refused the request's response format (the decider drops it and asks again)."""


class OpenAIDecider(ChatDecider):
    """Asks an OpenAI-compatible server; see the module docstring.

    Args:
        config: endpoint, model, key, sampling, timeout, retries, attempts (see :class:`LLMConfig`).
        transport: an HTTP transport of the SDK's HTTP library to send through (tests pass a
            ``MockTransport``); it is wrapped in :class:`BoundedTransport` like the default one.
    """

    name = "openai"

    def __init__(self, config: LLMConfig | None = None, transport: Any = None) -> None:
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
        httpx = http_module(openai)
        self.transport = BoundedTransport(httpx, config.timeout_s, inner=transport)
        self.client = openai.OpenAI(
            base_url=config.base_url,
            api_key=config.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=config.timeout_s,
            max_retries=0,  # retried here, only when it can help (see complete)
            http_client=openai.DefaultHttpxClient(transport=cast(Any, self.transport), timeout=config.timeout_s),
        )
        self._formats = list(_ORDER[config.response_format])
        self._model = config.model
        self._checked = False

    @property
    def model(self) -> str | None:
        return self._model

    @property
    def base_url(self) -> str:
        """The endpoint asked (the configured one, else ``OPENAI_BASE_URL``, else the SDK's default)."""
        return str(self.client.base_url).rstrip("/")

    @property
    def endpoint(self) -> str:
        return f"the server at {self.base_url}"

    @property
    def response_format(self) -> str:
        """Structured-output mode in use: ``json_schema``, ``json_object_schema``, ``json_object`` or ``text``."""
        return self._formats[0]

    # ------------------------------------------------------------------ one request, with retries
    def _send(self, call: Any, what: str, timeout_s: float | None = None) -> Any:
        """``call()`` (an SDK ``with_raw_response`` request) with the configured retries; the raw
        response, or :class:`TransportError` / :class:`MalformedReply`. A refused response format
        is not retried (the caller drops the format)."""
        openai = self._openai
        cfg = self.config
        limit = cfg.timeout_s if timeout_s is None else timeout_s
        for attempt in range(cfg.retries + 1):
            last = attempt == cfg.retries
            try:
                return call()
            except openai.APIStatusError as exc:
                status = exc.status_code
                if not last and (status in RETRY_STATUSES or status >= 500) and not _about_format(exc):
                    time.sleep(min(MAX_BACKOFF_S, 0.5 * 2**attempt))
                    continue
                raise self._status_error(exc, what) from None
            except openai.APITimeoutError:
                raise TransportError(
                    f"{what}: no answer within {limit:g} s",
                    f"check that the server at {self.base_url} is serving, or raise the LLM setting timeout_s "
                    f"(now {cfg.timeout_s:g} s) if the model is slow",
                ) from None
            except openai.APIConnectionError as exc:
                cause = exc.__cause__
                if isinstance(cause, self.transport.too_large):
                    raise MalformedReply(f"{what}: {cause}") from None
                if not last:
                    time.sleep(min(MAX_BACKOFF_S, 0.5 * 2**attempt))
                    continue
                why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
                if _closed_by_server(exc):  # it connected: the server hung up, it was reached
                    raise TransportError(
                        f"{what}: the server at {self.base_url} accepted the connection, then closed it without a "
                        f"complete answer{why}",
                        "check the server's log (it may have crashed or refused the request), or that the LLM setting "
                        "base_url points at an OpenAI-compatible server",
                    ) from None
                raise TransportError(f"{what}: cannot connect to {self.base_url}{why}", BASE_URL_FIX) from None
            except openai.OpenAIError as exc:
                raise TransportError(f"{what}: {type(exc).__name__}: {exc}") from None
            except (RecursionError, UnicodeError, ValueError, TypeError) as exc:
                # the SDK read a hostile answer and failed inside; the server did answer
                raise MalformedReply(f"{what}: the openai client could not read the answer "
                                     f"({type(exc).__name__}: {str(exc)[:200]})") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _status_error(self, exc: Any, what: str) -> TransportError:
        status = exc.status_code
        text = str(getattr(exc, "message", "") or exc)[:300]
        if status in (401, 403):
            fix = KEY_FIX
        elif status == 404 and "model" in text.lower():
            fix = f"check the LLM setting model (the server lists its models at {self.base_url}/models)"
        elif status in (404, 405):
            fix = (f"check the LLM setting base_url: {self.base_url} does not serve the OpenAI API there "
                   "(OpenAI-compatible servers serve under /v1, e.g. http://127.0.0.1:8000/v1)")
        elif status >= 500:
            fix = "the server failed; see its log"
        else:
            fix = "the server refused the request; see its log"
        cls = FormatRefused if _about_format(exc) else TransportError
        return cls(f"{what}: HTTP {status}: {text}", fix, status)

    # ------------------------------------------------------------------ the server check and model
    def _check_server(self) -> None:
        """``GET /models`` once before the first ask: fails fast on a server that is down or hangs,
        and picks the model when none was given."""
        self._checked = True
        limit = min(self.config.timeout_s, PROBE_TIMEOUT_S)
        models = self.client.with_options(timeout=limit).models.with_raw_response
        try:
            raw = self._send(models.list, "GET /models", limit)
        except TransportError as exc:
            status = exc.status
            if status is not None and status not in (401, 403) and self._model is not None:
                return  # the server answers HTTP but has no usable /models: ask it anyway
            if status is not None and self._model is None:
                raise TransportError(str(exc),
                                     "give the LLM setting model (the server does not list its models)") from None
            raise
        except MalformedReply:
            ids: list[str] = []
        else:
            ids = read_model_ids(raw.http_response.content)
        if self._model is None:
            if not ids:
                raise TransportError(f"{self.base_url}/models lists no model", "give the LLM setting model")
            self._model = ids[0]

    # ------------------------------------------------------------------ one ask
    def complete(self, messages: Messages, schema: dict[str, Any]) -> ChatReply:
        if not self._checked:
            self._check_server()
        assert self._model is not None
        cfg = self.config
        kwargs: dict[str, Any] = {"model": self._model, "messages": messages, "temperature": cfg.temperature,
                                  "max_tokens": cfg.max_tokens}
        if cfg.top_p is not None:
            kwargs["top_p"] = cfg.top_p
        if cfg.seed is not None:
            kwargs["seed"] = cfg.seed
        # kwargs are built at run time, which the SDK's typed overloads cannot follow
        create: Any = self.client.chat.completions.with_raw_response.create
        while True:
            fmt = _response_format(self._formats[0], schema)
            call_kwargs = kwargs if fmt is None else {**kwargs, "response_format": fmt}
            try:
                raw = self._send(functools.partial(create, **call_kwargs), "POST /chat/completions")
                break
            except FormatRefused:
                if len(self._formats) > 1:
                    self._formats.pop(0)  # the server does not take this format: dropped for the rest of the run
                    continue
                raise
        response = raw.http_response
        return read_completion(response.content, response.headers.get("content-type", ""))


def _about_format(exc: Any) -> bool:
    """Does an HTTP error refuse the response format? Servers refuse an unknown one with 400, 422,
    or (llama-cpp-python's server, whose request validation error escapes as) 500 naming the field."""
    text = str(getattr(exc, "message", "") or exc).lower()
    return exc.status_code in (400, 422, 500) and any(
        k in text for k in ("response_format", "json_schema", "schema", "json_object")
    )
