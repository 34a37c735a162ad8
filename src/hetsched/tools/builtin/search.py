"""Vector tools: flat inner-product vector search and k-means clustering.

CPU implementations use FAISS (``faiss-cpu``; falls back to torch when it is not installed);
GPU implementations use torch on the device (faiss-gpu has no PyPI build). The data sets are
seeded random vectors written once to the cache folder by ``prepare()``; ``load`` reads them and
puts them on the device, so the load is a real copy of the index.

Imports the tool API and the shared helpers; numpy, faiss and torch inside the steps.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from hetsched.tools.base import Device, DeviceKind, Tool
from hetsched.tools.builtin.common import Shapes, Sized, passage, tensors_in
from hetsched.tools.torch_model import atomic_write, cache_dir, stable_seed


def _have_faiss() -> bool:
    return importlib.util.find_spec("faiss") is not None


def _project(t: Any, dim: int, rows: int, seed: int) -> Any:
    """``rows`` x ``dim`` float32 host vectors from an upstream tensor (seeded random projection,
    rows repeated or cut), L2-normalized."""
    import torch

    x = t.detach().float().cpu().reshape(-1, t.shape[-1]) if t.dim() > 0 else t.detach().float().cpu().reshape(1, 1)
    g = torch.Generator().manual_seed(seed + x.shape[1])
    proj = torch.randn(x.shape[1], dim, generator=g) / max(1.0, x.shape[1] ** 0.5)
    y = x @ proj
    y = y.repeat((rows + y.shape[0] - 1) // y.shape[0], 1)[:rows]
    return torch.nn.functional.normalize(y, dim=1)


class _VectorData(Sized, Tool):
    """A tool over a seeded random vector data set kept as a .npy file in the cache folder."""

    requires = ("numpy", "torch")

    def data_path(self) -> Path:
        s = self.shape
        return cache_dir() / "data" / f"{self.name}-{self.size}-{s['n']}x{s['dim']}.npy"

    def prepare(self) -> None:
        import numpy as np

        path = self.data_path()
        if path.exists():
            return
        rng = np.random.default_rng(stable_seed(self.name, self.size))
        x = rng.standard_normal((self.shape["n"], self.shape["dim"]), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        atomic_write(path, lambda p: p.write_bytes(_npy_bytes(x)))

    def _queries(self, inputs: Sequence[Any], rows: int) -> Any:
        import torch

        found = tensors_in(inputs)
        if found:
            return _project(found[0], self.shape["dim"], rows, stable_seed(self.name, "proj"))
        g = torch.Generator().manual_seed(stable_seed(self.name, "queries"))
        return torch.nn.functional.normalize(torch.randn(rows, self.shape["dim"], generator=g), dim=1)


def _npy_bytes(x: Any) -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, x, allow_pickle=False)
    return buf.getvalue()


class VectorSearch(_VectorData):
    """Flat inner-product search: top-k passages for a batch of queries (upstream embeddings, projected)."""

    name = "vector_search"
    summary = "Flat inner-product vector search ({size}): {queries} queries over {n} x {dim} vectors, top {k}"
    shapes: ClassVar[Shapes] = {
        "full": {"n": 1_000_000, "dim": 384, "queries": 16, "k": 10},
        "tiny": {"n": 40_000, "dim": 64, "queries": 8, "k": 10},
    }

    def load(self, device: Device) -> Any:
        import numpy as np

        data = np.load(self.data_path())
        if device.kind is DeviceKind.CPU and _have_faiss():
            import faiss

            index = faiss.IndexFlatIP(self.shape["dim"])
            index.add(data)
            return {"faiss": index, "device": device}
        import torch

        dtype = torch.float16 if device.kind is DeviceKind.CUDA else torch.float32
        return {"db": torch.from_numpy(data).to(device.torch, dtype), "device": device}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        import torch

        s = self.shape
        q = self._queries(inputs, s["queries"])
        if "faiss" in handle:
            scores, ids = handle["faiss"].search(q.numpy(), s["k"])
            flat = sorted(zip(scores.ravel().tolist(), ids.ravel().tolist(), strict=True), reverse=True)
        else:
            db = handle["db"]
            with torch.inference_mode():
                sc, ix = (q.to(db.device, db.dtype) @ db.T).topk(s["k"], dim=1)
            flat = sorted(zip(sc.float().cpu().ravel().tolist(), ix.cpu().ravel().tolist(), strict=True),
                          reverse=True)
        best = list(dict.fromkeys(i for _, i in flat))[: s["k"]]
        return [passage(int(i)) for i in best]

    def unload(self, handle: Any) -> None:
        handle.clear()


class KmeansCluster(_VectorData):
    """k-means (Lloyd) over a set of embeddings; upstream vectors replace its first rows."""

    name = "kmeans_cluster"
    summary = "k-means ({size}): k={k} over {n} x {dim} vectors, {iters} iterations"
    shapes: ClassVar[Shapes] = {
        "full": {"n": 100_000, "dim": 384, "k": 64, "iters": 10},
        "tiny": {"n": 8_000, "dim": 32, "k": 16, "iters": 5},
    }

    def load(self, device: Device) -> Any:
        import numpy as np
        import torch

        data = np.load(self.data_path())
        if device.kind is DeviceKind.CPU:
            return {"x": data, "device": device}
        return {"x": torch.from_numpy(data).to(device.torch, torch.float32), "device": device}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        import numpy as np
        import torch

        s = self.shape
        found = tensors_in(inputs)
        extra = _project(found[0], s["dim"], min(s["n"], 256), stable_seed(self.name, "proj")) if found else None
        x: Any = handle["x"]
        if handle["device"].kind is DeviceKind.CPU:
            if extra is not None:
                x = x.copy()
                x[: extra.shape[0]] = extra.numpy()
            if _have_faiss():
                import faiss

                km = faiss.Kmeans(s["dim"], s["k"], niter=s["iters"], seed=stable_seed(self.name) % 1000,
                                  max_points_per_centroid=s["n"], verbose=False)
                km.train(np.ascontiguousarray(x, dtype=np.float32))
                return torch.from_numpy(np.array(km.centroids, dtype=np.float32))
            x = torch.from_numpy(x)
        elif extra is not None:
            x = x.clone()
            x[: extra.shape[0]] = extra.to(x.device)
        with torch.inference_mode():
            return _lloyd(x, s["k"], s["iters"], stable_seed(self.name)).cpu()

    def unload(self, handle: Any) -> None:
        handle.clear()


def _lloyd(x: Any, k: int, iters: int, seed: int) -> Any:
    """Lloyd's k-means on a device tensor: nearest centroid by ``|x|^2 - 2 x.c + |c|^2``, then means."""
    import torch

    g = torch.Generator().manual_seed(seed)
    centroids = x[torch.randperm(x.shape[0], generator=g)[:k].to(x.device)].clone()
    for _ in range(iters):
        dist = (x * x).sum(1, keepdim=True) - 2 * x @ centroids.T + (centroids * centroids).sum(1)
        assign = dist.argmin(1)
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k).clamp_min(1).unsqueeze(1).to(x.dtype)
        centroids = sums / counts
    return centroids
