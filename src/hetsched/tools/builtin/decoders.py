"""Generation tools: Llama-style decoders at the 1B and 3B shapes (Llama 3.2) and a T5-base
summarizer, built from transformers configurations with random weights (compute and memory do
not depend on the values). Each call prefills a fixed prompt and generates a fixed number of
tokens greedily (``min_new_tokens`` = ``max_new_tokens``, so a random model cannot stop early).

Imports the tool API and the shared helpers; transformers and torch inside the steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from hetsched.tools.base import Device
from hetsched.tools.builtin.common import Shapes, Sized, id_batch, ids_to_text, text_of
from hetsched.tools.torch_model import TorchModelTool, hf, stable_seed

_SPECIAL = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


class _Llama(Sized, TorchModelTool):
    """A Llama-architecture decoder: prefill ``prompt`` tokens (from upstream text), generate ``new`` tokens."""

    requires = ("torch", "transformers")
    summary = ("Llama-style decoder ({size}, {num_hidden_layers} layers x {hidden_size}, vocab {vocab_size}): "
               "prefills {prompt} tokens, generates {new}")

    def build(self) -> Any:
        transformers = hf()
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**self.shape["config"], **_SPECIAL))

    def workload(self, device: Device, dtype: Any) -> Any:
        return None

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        import torch

        s = self.shape
        prompt = text_of(inputs, s["prompt"], stable_seed(self.name))
        ids = id_batch([prompt], s["prompt"], s["config"]["vocab_size"], handle["device"].torch)
        out = handle["model"].generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=s["new"],
                                       min_new_tokens=s["new"], do_sample=False)
        return ids_to_text(out[0, s["prompt"]:].tolist())


_TINY_LLAMA = {"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096,
               "max_position_embeddings": 256, "tie_word_embeddings": True}


class Llama1B(_Llama):
    """Llama 3.2 1B shape (1.24B parameters)."""

    name = "llama_1b"
    shapes: ClassVar[Shapes] = {
        "full": {"config": {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
                            "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
                            "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": True},
                 "prompt": 512, "new": 48},
        "tiny": {"config": {**_TINY_LLAMA, "hidden_size": 128, "num_hidden_layers": 2, "intermediate_size": 384},
                 "prompt": 64, "new": 8},
    }


class Llama3B(_Llama):
    """Llama 3.2 3B shape (3.2B parameters)."""

    name = "llama_3b"
    shapes: ClassVar[Shapes] = {
        "full": {"config": {"hidden_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 24,
                            "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
                            "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": True},
                 "prompt": 512, "new": 48},
        "tiny": {"config": {**_TINY_LLAMA, "hidden_size": 192, "num_attention_heads": 6, "num_hidden_layers": 3,
                            "intermediate_size": 512},
                 "prompt": 64, "new": 8},
    }


class Summarizer(Sized, TorchModelTool):
    """T5-base summarizer: encodes a document, generates a summary."""

    name = "summarizer"
    requires = ("torch", "transformers")
    summary = ("T5 summarizer ({size}, {num_layers}+{num_decoder_layers} layers x {d_model}): "
               "summarizes {source} tokens to {new}")
    shapes: ClassVar[Shapes] = {
        "full": {"config": {"d_model": 768, "d_kv": 64, "d_ff": 3072, "num_layers": 12, "num_decoder_layers": 12,
                            "num_heads": 12, "vocab_size": 32128}, "source": 1024, "new": 96},
        "tiny": {"config": {"d_model": 128, "d_kv": 32, "d_ff": 512, "num_layers": 2, "num_decoder_layers": 2,
                            "num_heads": 4, "vocab_size": 4096}, "source": 128, "new": 8},
    }

    def build(self) -> Any:
        transformers = hf()
        cfg = transformers.T5Config(**self.shape["config"], decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        return transformers.T5ForConditionalGeneration(cfg)

    def workload(self, device: Device, dtype: Any) -> Any:
        return None

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        s = self.shape
        doc = text_of(inputs, s["source"], stable_seed(self.name))
        ids = id_batch([doc], s["source"], s["config"]["vocab_size"], handle["device"].torch)
        out = handle["model"].generate(input_ids=ids, max_new_tokens=s["new"], min_new_tokens=s["new"],
                                       do_sample=False)
        return ids_to_text(out[0].tolist())
