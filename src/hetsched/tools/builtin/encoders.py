"""Encoder tools: BERT-base, an E5-large style embedder, a cross-encoder reranker, a BERT NER
tagger, the CLIP ViT-B/32 image tower and a Whisper-small style speech model, built from
transformers configurations with random weights (compute and memory do not depend on the values).

Imports the tool API and the shared helpers; transformers and torch inside the steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from hetsched.tools.base import Device
from hetsched.tools.builtin.common import Shapes, Sized, id_batch, ids_to_text, texts_of
from hetsched.tools.torch_model import TorchModelTool, hf, stable_seed


class _TextEncoder(Sized, TorchModelTool):
    """A BERT-family encoder over a fixed batch of texts (upstream strings first)."""

    requires = ("torch", "transformers")
    model_class = "BertModel"
    """The transformers class built from ``BertConfig(**shape["config"])``."""

    def build(self) -> Any:
        transformers = hf()
        cfg = transformers.BertConfig(**self.shape["config"])
        return getattr(transformers, self.model_class)(cfg)

    def workload(self, device: Device, dtype: Any) -> Any:
        return None  # the batch is made from the inputs at each call

    def _texts(self, inputs: Sequence[Any]) -> list[str]:
        return texts_of(inputs, self.shape["batch"], self.shape["seq"], stable_seed(self.name))

    def _ids(self, handle: dict[str, Any], texts: Sequence[str]) -> Any:
        return id_batch(texts, self.shape["seq"], self.shape["config"]["vocab_size"], handle["device"].torch)

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        hidden = handle["model"](input_ids=self._ids(handle, self._texts(inputs))).last_hidden_state
        return hidden.mean(dim=1)  # mean-pooled embeddings, [batch, hidden]


_BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
              "vocab_size": 30522, "max_position_embeddings": 512}
_SMALL_VOCAB = 8192


class BertBase(_TextEncoder):
    """BERT-base (110M): embeds a batch of passages."""

    name = "bert_base"
    summary = ("BERT-base encoder ({size}, {num_hidden_layers} layers x {hidden_size}):"
               " embeds {batch} passages of {seq} tokens")
    shapes: ClassVar[Shapes] = {
        "full": {"config": _BERT_BASE, "batch": 8, "seq": 128},
        "tiny": {"config": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                            "intermediate_size": 512, "vocab_size": _SMALL_VOCAB, "max_position_embeddings": 128},
                 "batch": 4, "seq": 64},
    }


class E5Large(_TextEncoder):
    """E5-large style embedder (BERT-large shape, 335M): embeds passages."""

    name = "e5_large"
    summary = ("E5-large style embedder ({size}, {num_hidden_layers} layers x {hidden_size}):"
               " embeds {batch} passages of {seq} tokens")
    shapes: ClassVar[Shapes] = {
        "full": {"config": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                            "intermediate_size": 4096, "vocab_size": 30522, "max_position_embeddings": 512},
                 "batch": 32, "seq": 128},
        "tiny": {"config": {"hidden_size": 192, "num_hidden_layers": 3, "num_attention_heads": 3,
                            "intermediate_size": 768, "vocab_size": _SMALL_VOCAB, "max_position_embeddings": 128},
                 "batch": 8, "seq": 64},
    }


class Reranker(_TextEncoder):
    """Cross-encoder reranker (MiniLM-L12 shape): scores query-passage pairs, returns the passages best first."""

    name = "reranker"
    model_class = "BertForSequenceClassification"
    summary = ("Cross-encoder reranker ({size}, {num_hidden_layers} layers x {hidden_size}):"
               " scores {batch} query-passage pairs of {seq} tokens")
    shapes: ClassVar[Shapes] = {
        "full": {"config": {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 12,
                            "intermediate_size": 1536, "vocab_size": 30522, "num_labels": 1,
                            "max_position_embeddings": 512},
                 "batch": 32, "seq": 256},
        "tiny": {"config": {"hidden_size": 96, "num_hidden_layers": 2, "num_attention_heads": 2,
                            "intermediate_size": 384, "vocab_size": _SMALL_VOCAB, "num_labels": 1,
                            "max_position_embeddings": 128},
                 "batch": 8, "seq": 96},
    }

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        texts = self._texts(inputs)
        scores = handle["model"](input_ids=self._ids(handle, texts)).logits[:, 0].float().cpu()
        return [texts[i] for i in scores.argsort(descending=True).tolist()]


class NerTagger(_TextEncoder):
    """BERT-base token classifier (NER) over windows of a document."""

    name = "ner_tagger"
    model_class = "BertForTokenClassification"
    summary = ("BERT NER tagger ({size}, {num_hidden_layers} layers x {hidden_size}):"
               " tags {batch} windows of {seq} tokens")
    shapes: ClassVar[Shapes] = {
        "full": {"config": {**_BERT_BASE, "num_labels": 9}, "batch": 4, "seq": 512},
        "tiny": {"config": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                            "intermediate_size": 512, "vocab_size": _SMALL_VOCAB, "num_labels": 9,
                            "max_position_embeddings": 128},
                 "batch": 2, "seq": 128},
    }

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        tags = handle["model"](input_ids=self._ids(handle, self._texts(inputs))).logits.argmax(-1).cpu()
        return [ids_to_text(row.tolist()) for row in tags]


class ClipVitB32(Sized, TorchModelTool):
    """CLIP ViT-B/32 image tower: embeds a batch of images."""

    name = "clip_vit_b32"
    requires = ("torch", "transformers")
    summary = ("CLIP ViT-B/32 image tower ({size}, {num_hidden_layers} layers x {hidden_size}):"
               " embeds {batch} {image_size}px images")
    shapes: ClassVar[Shapes] = {
        "full": {"config": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                            "intermediate_size": 3072, "image_size": 224, "patch_size": 32, "projection_dim": 512},
                 "batch": 16},
        "tiny": {"config": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                            "intermediate_size": 512, "image_size": 96, "patch_size": 32, "projection_dim": 64},
                 "batch": 8},
    }

    def build(self) -> Any:
        transformers = hf()
        return transformers.CLIPVisionModelWithProjection(transformers.CLIPVisionConfig(**self.shape["config"]))

    def workload(self, device: Device, dtype: Any) -> Any:
        import torch

        px = self.shape["config"]["image_size"]
        g = torch.Generator().manual_seed(stable_seed(self.name, "images"))
        return torch.randn(self.shape["batch"], 3, px, px, generator=g).to(device.torch, dtype)

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        return handle["model"](pixel_values=handle["work"]).image_embeds


class WhisperSmall(Sized, TorchModelTool):
    """Whisper-small style speech model: encodes a log-mel window (a padded clip) and decodes tokens."""

    name = "whisper_small"
    requires = ("torch", "transformers")
    summary = ("Whisper-small style speech model ({size}, {encoder_layers}+{decoder_layers} layers x {d_model}): "
               "encodes {frames} mel frames, decodes {tokens} tokens")
    shapes: ClassVar[Shapes] = {
        "full": {"config": {"d_model": 768, "encoder_layers": 12, "decoder_layers": 12, "encoder_attention_heads": 12,
                            "decoder_attention_heads": 12, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072,
                            "num_mel_bins": 80, "max_source_positions": 1500, "vocab_size": 51865},
                 "frames": 3000, "tokens": 32},
        "tiny": {"config": {"d_model": 128, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
                            "decoder_attention_heads": 2, "encoder_ffn_dim": 512, "decoder_ffn_dim": 512,
                            "num_mel_bins": 80, "max_source_positions": 150, "vocab_size": 4096},
                 "frames": 300, "tokens": 8},
    }

    def build(self) -> Any:
        transformers = hf()
        cfg = transformers.WhisperConfig(**self.shape["config"], pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                         decoder_start_token_id=1, begin_suppress_tokens=None, suppress_tokens=None)
        return transformers.WhisperForConditionalGeneration(cfg)

    def workload(self, device: Device, dtype: Any) -> Any:
        import torch

        g = torch.Generator().manual_seed(stable_seed(self.name, "audio"))
        mels = self.shape["config"]["num_mel_bins"]
        return torch.randn(1, mels, self.shape["frames"], generator=g).to(device.torch, dtype)

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        from transformers.generation import GenerationMixin

        n = self.shape["tokens"]
        # the generic generate(): Whisper's own override wants a pretrained generation config
        out = GenerationMixin.generate(handle["model"], input_features=handle["work"], max_new_tokens=n,
                                       min_new_tokens=n, do_sample=False)
        return ids_to_text(out[0].tolist())
