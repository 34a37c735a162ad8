"""Torch-model tools: a model built from its architecture configuration with random weights, kept
as a local checkpoint file so that loading it is what loading a real model is (read the weights,
put them on the device), and nothing is ever downloaded.

Compute and memory do not depend on the weight values, only on the shapes, so a random-weight
model of a real architecture costs what the real model costs. ``prepare()`` writes the
checkpoint once per machine (seeded, untimed); ``load(device)`` reads it, builds the module on
the meta device and materializes every parameter and buffer on the target device in the
device's dtype (fp16 on CUDA, fp32 on the CPU and the stand-in device), keeping tied weights
tied. Checkpoints live under ``$HETSCHED_CACHE`` (default: the user cache dir) and are named by
a hash of the architecture, so a changed configuration writes a new one.

Imports the tool API; torch (and what a subclass builds with, e.g. transformers) is imported
inside the steps.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import threading
import warnings
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hetsched.tools.base import Device, DeviceKind, Tool

_BUILD_LOCK = threading.Lock()


def cache_dir() -> Path:
    """Where checkpoints and data files of the built-in tools are written (``$HETSCHED_CACHE``)."""
    env = os.environ.get("HETSCHED_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("hetsched")) / "tools"


def stable_seed(*parts: object) -> int:
    """A seed from names (CRC32; Python's ``hash`` is salted per process)."""
    return zlib.crc32("/".join(str(p) for p in parts).encode()) & 0x7FFFFFFF


def atomic_write(path: Path, write: Any) -> None:
    """Write through a temporary file and rename, so concurrent processes never read half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def hf() -> Any:
    """The transformers module, quietened (typed ``Any``: its configs take keywords that its type hints omit)."""
    quiet_transformers()
    return importlib.import_module("transformers")


def quiet_transformers() -> None:
    """Silence transformers' advice about random configs (token ids, deprecations) in tool output."""
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module="transformers")
    warnings.filterwarnings("ignore", message=".*past_key_values.*")


def materialize(model: Any, state: dict[str, Any], device: str, dtype: Any) -> Any:
    """Give every parameter and buffer of a meta-device ``model`` its value from ``state`` on
    ``device``; floating parameters take ``dtype``, buffers keep theirs (rotary tables stay fp32).
    Names that share one tensor in ``state`` (tied weights) share one tensor on the device."""
    import torch

    made: dict[tuple[int, int, tuple[int, ...]], Any] = {}
    entries = [(n, True) for n, _ in model.named_parameters(remove_duplicate=False)]
    entries += [(n, False) for n, _ in model.named_buffers(remove_duplicate=False)]
    for name, is_param in entries:
        if name not in state:
            raise KeyError(f"checkpoint lacks {name!r}")
        src = state[name]
        ident = (src.untyped_storage().data_ptr(), src.storage_offset(), tuple(src.shape))
        value = made.get(ident)
        if value is None:
            target = dtype if (is_param and src.is_floating_point()) else src.dtype
            tensor = src.to(device=device, dtype=target)
            value = torch.nn.Parameter(tensor, requires_grad=False) if is_param else tensor
            made[ident] = value
        owner, _, leaf = name.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        if is_param:
            module._parameters[leaf] = value
        else:
            module._buffers[leaf] = value
    return model


class TorchModelTool(Tool):
    """A tool backed by a ``torch.nn.Module`` with random weights read from a local checkpoint.

    Subclasses implement :meth:`build` (the module, from its configuration), :meth:`workload`
    (the fixed synthetic work of one call, made at load time on the device) and :meth:`forward`
    (one call under ``torch.inference_mode``). The handle is a dict with ``model``, ``work``,
    ``device`` and ``dtype``.
    """

    requires: tuple[str, ...] = ("torch",)

    def build(self) -> Any:
        """The module for this size preset (called on the meta device and, once, for the checkpoint)."""
        raise NotImplementedError

    def workload(self, device: Device, dtype: Any) -> Any:
        """The synthetic inputs of one call at this size, on ``device``."""
        raise NotImplementedError

    def forward(self, handle: dict[str, Any], inputs: Sequence[Any]) -> Any:
        """One call (inference mode is on)."""
        raise NotImplementedError

    def architecture(self) -> dict[str, Any]:
        """What identifies the checkpoint: class and configuration (JSON-ready). Default: the built
        module's class and its ``config`` when it has one."""
        import torch

        with _BUILD_LOCK, torch.device("meta"):
            model = self.build()
        config = getattr(model, "config", None)
        cfg = config.to_dict() if config is not None and hasattr(config, "to_dict") else {}
        cfg.pop("transformers_version", None)
        return {"class": type(model).__name__, "config": cfg}

    def checkpoint_path(self) -> Path:
        """The checkpoint file of this tool and size (computed once per instance)."""
        cached: Path | None = getattr(self, "_checkpoint", None)
        if cached is not None:
            return cached
        digest = hashlib.sha256(json.dumps(self.architecture(), sort_keys=True, default=str).encode()).hexdigest()
        path = cache_dir() / "checkpoints" / f"{self.name}-{self.size}-{digest[:12]}.pt"
        self._checkpoint = path
        return path

    def checkpoint_dtype(self) -> Any:
        """fp16 for the full preset (how real checkpoints ship), fp32 for tiny."""
        import torch

        return torch.float16 if self.size == "full" else torch.float32

    def prepare(self) -> None:
        """Write the checkpoint once (seeded random weights; untimed)."""
        import torch

        path = self.checkpoint_path()
        if path.exists():
            return
        with _BUILD_LOCK:
            torch.manual_seed(stable_seed(self.name, self.size))
            model = self.build()
        dtype = self.checkpoint_dtype()
        params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
        converted: dict[int, Any] = {}  # by tensor identity, so tied names keep sharing one tensor
        state: dict[str, Any] = {}
        for name, tensor in [*model.named_parameters(remove_duplicate=False),
                             *model.named_buffers(remove_duplicate=False)]:
            if id(tensor) not in converted:
                t = tensor.detach()
                converted[id(tensor)] = t.to(dtype) if name in params and t.is_floating_point() else t
            state[name] = converted[id(tensor)]
        atomic_write(path, lambda p: torch.save(state, p))

    def device_dtype(self, device: Device) -> Any:
        """fp16 on CUDA; fp32 on the CPU and the stand-in device (CPU fp16 math is not what CPUs run)."""
        import torch

        return torch.float16 if device.kind is DeviceKind.CUDA else torch.float32

    def load(self, device: Device) -> Any:
        import torch

        state = torch.load(self.checkpoint_path(), map_location="cpu", weights_only=True, mmap=False)
        with _BUILD_LOCK, torch.device("meta"):
            model = self.build()
        dtype = self.device_dtype(device)
        materialize(model, state, device.torch, dtype)
        del state
        model.eval()
        return {"model": model, "work": self.workload(device, dtype), "device": device, "dtype": dtype}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        import torch

        with torch.inference_mode():
            return self.forward(handle, inputs)

    def unload(self, handle: Any) -> None:
        handle.clear()
