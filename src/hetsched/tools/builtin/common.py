"""Helpers the built-in tools share: turning upstream outputs into text, token ids and vectors of
a fixed shape, and a seeded synthetic corpus (so sources have something real to work on).

Imports the standard library; torch only inside the functions that return tensors.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar

Shapes = dict[str, dict[str, Any]]
"""Figures of each size preset: ``{"tiny": {...}, "full": {...}}``."""

_WORDS: tuple[str, ...] = (
    "gpu", "cpu", "memory", "latency", "tool", "workflow", "agent", "model", "token", "vector", "index", "query",
    "passage", "document", "answer", "schedule", "budget", "queue", "load", "batch", "kernel", "tensor", "layer",
    "attention", "encoder", "decoder", "embedding", "search", "rank", "merge", "chunk", "page", "figure", "table",
    "report", "scan", "image", "audio", "speech", "text", "extract", "parse", "fetch", "cache", "device", "thread",
    "core", "stream", "copy", "resident", "admission", "contention", "profile", "card", "round", "policy", "monitor",
    "probe", "oracle",
)
_TOKEN = re.compile(r"\w+|[^\w\s]")


def corpus_text(seed: int, n_words: int) -> str:
    """Deterministic pseudo-English text of ``n_words`` words (sentences of 8-20 words)."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n_words:
        k = rng.randint(8, 20)
        sentence = [rng.choice(_WORDS) for _ in range(k)]
        sentence[0] = sentence[0].capitalize()
        out.extend(sentence)
        out[-1] += "."
    return " ".join(out[:n_words])


def passage(doc_id: int, n_words: int = 60) -> str:
    """Passage ``doc_id`` of the synthetic corpus."""
    return f"[doc {doc_id}] " + corpus_text(zlib.crc32(f"passage-{doc_id}".encode()), n_words)


def leaves(inputs: Iterable[Any]) -> Iterator[Any]:
    """Every value in the inputs that is not a list, tuple or dict (their items and values walked
    into), in order; iterative, so nesting depth costs no recursion."""
    stack: list[Any] = list(reversed(list(inputs)))
    while stack:
        x = stack.pop()
        if isinstance(x, list | tuple):
            stack.extend(reversed(x))
        elif isinstance(x, dict):
            stack.extend(reversed(list(x.values())))
        else:
            yield x


def strings_in(inputs: Iterable[Any]) -> list[str]:
    """Every string found in the inputs (inside lists, tuples and dict values too), in order."""
    return [x for x in leaves(inputs) if isinstance(x, str)]


def text_of(inputs: Sequence[Any], n_words: int, seed: int) -> str:
    """Upstream text padded (with the synthetic corpus) or truncated to exactly ``n_words`` words."""
    words = " ".join(strings_in(inputs)).split()
    if len(words) < n_words:
        words += corpus_text(seed, n_words - len(words)).split()
    return " ".join(words[:n_words])


def texts_of(inputs: Sequence[Any], count: int, n_words: int, seed: int) -> list[str]:
    """``count`` texts of ``n_words`` words: upstream strings first, then synthetic passages."""
    found = [s for s in strings_in(inputs) if s.strip()]
    texts = [text_of([s], n_words, seed + i) for i, s in enumerate(found[:count])]
    texts += [text_of([], n_words, seed + 1000 + i) for i in range(count - len(texts))]
    return texts


def token_ids(text: str, length: int, vocab: int, offset: int = 3) -> list[int]:
    """``length`` token ids hashed from the text's words (no tokenizer download); ids < ``offset``
    are left to special tokens. Short texts wrap around."""
    tokens = _TOKEN.findall(text) or ["<empty>"]
    span = max(1, vocab - offset)
    return [offset + zlib.crc32(tokens[i % len(tokens)].encode()) % span for i in range(length)]


def id_batch(texts: Sequence[str], length: int, vocab: int, device: str) -> Any:
    """A ``[len(texts), length]`` LongTensor of hashed token ids on ``device``."""
    import torch

    return torch.tensor([token_ids(t, length, vocab) for t in texts], dtype=torch.long, device=device)


def tensors_in(inputs: Iterable[Any]) -> list[Any]:
    """Every floating torch tensor (or numpy float array, as a tensor) in the inputs."""
    import numpy as np
    import torch

    found: list[Any] = []
    for x in leaves(inputs):
        if isinstance(x, torch.Tensor):
            if x.is_floating_point():
                found.append(x)
        elif isinstance(x, np.ndarray) and x.dtype.kind == "f":
            found.append(torch.from_numpy(x))
    return found


def ids_to_text(ids: Sequence[int]) -> str:
    """Generated token ids as text (there is no tokenizer: ids become words ``t123``)."""
    return " ".join(f"t{int(i)}" for i in ids)


class Sized:
    """Mixin of the built-in tools: per-preset shapes and a description made from them.

    ``shapes[size]`` holds the preset's figures (a ``config`` dict for models); ``summary`` is a
    format string over ``size`` and those figures (config fields included).
    """

    shapes: ClassVar[Shapes] = {}
    """Figures of each size preset."""
    summary: str = ""
    """Description template, e.g. ``"BERT-base encoder ({size}): {batch} passages of {seq} tokens"``."""
    size: str
    description: str

    def __init__(self, size: str = "tiny") -> None:
        super().__init__(size)  # type: ignore[call-arg]  # the Tool next in the MRO takes the size
        self.description = self._describe()

    @property
    def shape(self) -> dict[str, Any]:
        """The figures of this instance's preset."""
        return self.shapes[self.size]

    def _describe(self) -> str:
        fields = {**self.shape.get("config", {}), **self.shape, "size": self.size}
        return self.summary.format(**fields)
