"""The machine block: CPU cores, the VRAM budget and the contention model's parameters.

Part of the model package; imports pydantic and ``model.limits`` (the accepted ranges).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from hetsched.model.limits import (
    MAX_CORES,
    MAX_KAPPA,
    MAX_NOISE_CV,
    MAX_PCIE_MB_PER_MS,
    MAX_VRAM_MB,
    MIN_PCIE_MB_PER_MS,
    Name,
)

DEFAULT_KAPPA = 0.10
"""Default GPU interference beyond pure sharing; see docs/simulator.md for the calibration."""


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
