"""Vision tools: ResNet-50, a DETR-ResNet-50 object detector, a TrOCR-style OCR model (ViT encoder,
TrOCR decoder) and an image preprocessor, built from transformers configurations with random
weights (compute and memory do not depend on the values).

Imports the tool API and the shared helpers; transformers and torch inside the steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from hetsched.tools.base import Device, DeviceKind, Tool
from hetsched.tools.builtin.common import Shapes, Sized, ids_to_text
from hetsched.tools.torch_model import TorchModelTool, hf, stable_seed


def _images(name: str, batch: int, px: int, device: Device, dtype: Any) -> Any:
    import torch

    g = torch.Generator().manual_seed(stable_seed(name, "images"))
    return torch.randn(batch, 3, px, px, generator=g).to(device.torch, dtype)


class Resnet50(Sized, TorchModelTool):
    """ResNet-50: classifies a batch of images (pooled features)."""

    name = "resnet50"
    requires = ("torch", "transformers")
    summary = "ResNet-50 ({size}, depths {depths}): encodes {batch} {px}px images"
    shapes: ClassVar[Shapes] = {
        "full": {"config": {"embedding_size": 64, "hidden_sizes": [256, 512, 1024, 2048], "depths": [3, 4, 6, 3],
                            "layer_type": "bottleneck"}, "batch": 8, "px": 224},
        "tiny": {"config": {"embedding_size": 16, "hidden_sizes": [32, 64, 128, 256], "depths": [1, 1, 1, 1],
                            "layer_type": "bottleneck"}, "batch": 4, "px": 96},
    }

    def build(self) -> Any:
        transformers = hf()
        return transformers.ResNetModel(transformers.ResNetConfig(**self.shape["config"]))

    def workload(self, device: Device, dtype: Any) -> Any:
        return _images(self.name, self.shape["batch"], self.shape["px"], device, dtype)

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        return handle["model"](pixel_values=handle["work"]).pooler_output.flatten(1)


class ObjectDetector(Sized, TorchModelTool):
    """DETR with a ResNet-50 backbone (transformers' own ResNet, no timm): detects objects in one image."""

    name = "object_detector"
    requires = ("torch", "transformers")
    summary = "DETR-ResNet object detector ({size}, d_model {d_model}, {num_queries} queries): one {px}px image"
    shapes: ClassVar[Shapes] = {
        "full": {"config": {"d_model": 256, "encoder_layers": 6, "decoder_layers": 6, "num_queries": 100},
                 "backbone": {"embedding_size": 64, "hidden_sizes": [256, 512, 1024, 2048], "depths": [3, 4, 6, 3]},
                 "px": 800},
        "tiny": {"config": {"d_model": 64, "encoder_layers": 1, "decoder_layers": 1, "num_queries": 20,
                            "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 128,
                            "decoder_ffn_dim": 128},
                 "backbone": {"embedding_size": 16, "hidden_sizes": [32, 64, 128, 256], "depths": [1, 1, 1, 1]},
                 "px": 160},
    }

    def build(self) -> Any:
        transformers = hf()
        backbone = transformers.ResNetConfig(**self.shape["backbone"], layer_type="bottleneck", out_features=["stage4"])
        cfg = transformers.DetrConfig(use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False,
                                      num_labels=91, **self.shape["config"])
        return transformers.DetrForObjectDetection(cfg)

    def workload(self, device: Device, dtype: Any) -> Any:
        return _images(self.name, 1, self.shape["px"], device, dtype)

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        out = handle["model"](pixel_values=handle["work"])
        return {"boxes": out.pred_boxes[0].float(), "labels": out.logits[0].argmax(-1)}


class Ocr(Sized, TorchModelTool):
    """TrOCR-style OCR: a ViT encoder reads text-line crops and a TrOCR decoder writes their text."""

    name = "ocr"
    requires = ("torch", "transformers")
    summary = ("TrOCR-style OCR ({size}, ViT {enc_layers} layers x {enc_hidden} + decoder {dec_layers} layers x "
               "{dec_hidden}): reads {batch} text-line crops of {px}px, {tokens} tokens each")
    shapes: ClassVar[Shapes] = {
        "full": {"enc_hidden": 768, "enc_layers": 12, "enc_heads": 12, "px": 384, "patch": 16,
                 "dec_hidden": 1024, "dec_layers": 12, "dec_heads": 16, "vocab": 50265, "batch": 8, "tokens": 16},
        "tiny": {"enc_hidden": 128, "enc_layers": 2, "enc_heads": 2, "px": 96, "patch": 16,
                 "dec_hidden": 128, "dec_layers": 2, "dec_heads": 2, "vocab": 4096, "batch": 4, "tokens": 8},
    }

    def build(self) -> Any:
        transformers = hf()
        s = self.shape
        enc = transformers.ViTConfig(hidden_size=s["enc_hidden"], num_hidden_layers=s["enc_layers"],
                                     num_attention_heads=s["enc_heads"], intermediate_size=4 * s["enc_hidden"],
                                     image_size=s["px"], patch_size=s["patch"])
        dec = transformers.TrOCRConfig(d_model=s["dec_hidden"], decoder_layers=s["dec_layers"],
                                       decoder_attention_heads=s["dec_heads"], decoder_ffn_dim=4 * s["dec_hidden"],
                                       vocab_size=s["vocab"], cross_attention_hidden_size=s["enc_hidden"],
                                       pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
        cfg = transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
        cfg.decoder_start_token_id, cfg.pad_token_id, cfg.eos_token_id = 2, 1, 2
        return transformers.VisionEncoderDecoderModel(cfg)

    def workload(self, device: Device, dtype: Any) -> Any:
        return _images(self.name, self.shape["batch"], self.shape["px"], device, dtype)

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        n = self.shape["tokens"]
        out = handle["model"].generate(pixel_values=handle["work"], max_new_tokens=n, min_new_tokens=n,
                                       do_sample=False)
        return [ids_to_text(row.tolist()) for row in out]


class ImagePreprocess(Sized, Tool):
    """Resize and normalize a batch of raw RGB images (uint8) to the model input size.

    The CPU path works on host tensors; the GPU path copies the raw batch to the device first
    (the host-device copy is part of its cost).
    """

    name = "image_preprocess"
    requires = ("torch",)
    summary = "Image preprocessing ({size}): resizes and normalizes {batch} {h}x{w} RGB images to {px}px"
    shapes: ClassVar[Shapes] = {
        "full": {"batch": 16, "h": 480, "w": 640, "px": 224},
        "tiny": {"batch": 8, "h": 240, "w": 320, "px": 96},
    }

    def load(self, device: Device) -> Any:
        import torch

        s = self.shape
        g = torch.Generator().manual_seed(stable_seed(self.name, "raw"))
        raw = torch.randint(0, 256, (s["batch"], s["h"], s["w"], 3), dtype=torch.uint8, generator=g)
        mean = torch.tensor([0.485, 0.456, 0.406], device=device.torch).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225], device=device.torch).view(1, 3, 1, 1)
        return {"raw": raw, "mean": mean, "std": std, "device": device}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        import torch
        import torch.nn.functional as F

        device: Device = handle["device"]
        x = handle["raw"]
        if device.kind is DeviceKind.CUDA:
            x = x.to(device.torch, non_blocking=False)
        elif device.acts_as_gpu:
            x = x.clone()  # the stand-in's "host-device copy": a real copy into the device's memory
        with torch.inference_mode():
            x = x.permute(0, 3, 1, 2).float().div_(255.0)
            x = F.interpolate(x, size=(self.shape["px"], self.shape["px"]), mode="bilinear", antialias=True,
                              align_corners=False)
            return (x - handle["mean"]) / handle["std"]

    def unload(self, handle: Any) -> None:
        handle.clear()
