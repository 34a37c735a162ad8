"""The machine block: CPU cores, the VRAM budget and the contention model's parameters.

Part of the model package; imports pydantic and ``model.limits`` (the accepted ranges).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from hetsched.model.limits import (
    MAX_CORES,
    MAX_CROSS_CORE,
    MAX_KAPPA,
    MAX_MS,
    MAX_NOISE_CV,
    MAX_PCIE_MB_PER_MS,
    MAX_VRAM_MB,
    MIN_PCIE_MB_PER_MS,
    Name,
)

DEFAULT_KAPPA = 0.10
"""Default GPU interference beyond pure sharing; see docs/simulator.md for the calibration."""


LoadSharing = Literal["none", "copy", "device"]
"""What a ``gpu_queue`` load contends with (docs/simulator.md, "Loads"):

- ``none``: nothing; each load takes its card's ``load_ms`` whatever runs beside it (the default).
- ``copy``: concurrent loads share one host-to-device copy path (a real GPU's PCIe link): n loads
  at once each progress at 1/n; compute is not slowed.
- ``device``: a load runs on the device's compute, as a task of ``gpu_util`` 1 under the GPU
  sharing (the stand-in device, whose loads are its own core filling memory).
"""


class Machine(BaseModel):
    """What the simulator needs to know about the hardware, so users can plan 'what if'."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name = "reference"
    """A label for reports (e.g. ``RTX A5500 + EPYC 7713``)."""
    cpu_cores: int = Field(default=8, ge=1, le=MAX_CORES)
    """P: CPU cores available to tools."""
    vram_budget_mb: float = Field(default=24_000.0, gt=0, le=MAX_VRAM_MB, allow_inf_nan=False)
    """M: GPU memory the workflow's tools may hold at once, MB."""
    gpu_kappa: float = Field(default=DEFAULT_KAPPA, ge=0, le=MAX_KAPPA, allow_inf_nan=False)
    """kappa: extra slowdown per additional concurrent GPU task (context switches, bandwidth)."""
    noise_cv: float = Field(default=0.03, ge=0, le=MAX_NOISE_CV, allow_inf_nan=False)
    """Coefficient of variation of the multiplicative latency noise (0: deterministic)."""
    pcie_mb_per_ms: float = Field(
        default=12.0, ge=MIN_PCIE_MB_PER_MS, le=MAX_PCIE_MB_PER_MS, allow_inf_nan=False
    )
    """Host<->device bandwidth for edge data crossing devices, MB per ms (12 MB/ms = 12 GB/s)."""
    load_sharing: LoadSharing = "none"
    """What a ``gpu_queue`` load contends with: ``none`` (nothing, the default), ``copy`` (concurrent
    loads share the copy path), ``device`` (loads take a compute share: the stand-in device)."""

    cold_load_share: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)
    """Share of the ``gpu_queue`` loads that find their memory cold and take their card's
    ``load_cold_ms`` (cards without it: ``load_ms``); each load is charged the expected time. 0
    (the default): every load as the profiler's back-to-back loads. Calibrate it with
    ``benchmarks/calibrate_cold_loads.py`` for the gaps between requests (docs/simulator.md,
    "Cold memory")."""
    warm_reuse_ms: float = Field(default=0.0, ge=0, le=MAX_MS, allow_inf_nan=False)
    """How long memory freed on the device stays warm for a ``gpu_queue`` load, ms: a load reuses
    what was freed this recently (a resident tool's unload, an earlier queued node) and takes its
    card's ``load_ms`` for that share of its ``vram_mb``, the ``cold_load_share`` expectation for
    the rest. 0 (the default): off, every load the expectation. About 2,000 on a virtual machine with
    free page reporting (docs/simulator.md, "Cold memory")."""
    cross_core_slowdown: float = Field(default=0.0, ge=0, le=MAX_CROSS_CORE, allow_inf_nan=False)
    """x: cross-core interference. A CPU task runs (1 + x u_dev) slower while the device is busy
    (u_dev: its utilization, at most 1) and a device task or load (1 + x u_cpu) slower while the
    CPU cores are (u_cpu: the cores the running CPU tasks keep busy over ``cpu_cores``, at most 1):
    shared caches, memory bandwidth, a host core's SMT sibling. 0 (the default): none. Calibrate
    it with ``benchmarks/calibrate_cross_core.py`` (docs/simulator.md, "Cross-core interference")."""

    @model_serializer(mode="wrap")
    def _omit_default_load_sharing(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A machine of the default ``load_sharing``, ``cold_load_share``, ``warm_reuse_ms`` and ``cross_core_slowdown``
        dumps as before those fields existed (stored scenario fingerprints hold)."""
        data: dict[str, Any] = handler(self)
        if self.load_sharing == "none":
            data.pop("load_sharing", None)
        if self.cold_load_share == 0.0:
            data.pop("cold_load_share", None)
        if self.cross_core_slowdown == 0.0:
            data.pop("cross_core_slowdown", None)
        if self.warm_reuse_ms == 0.0:
            data.pop("warm_reuse_ms", None)
        return data
