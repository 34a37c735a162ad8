"""The machine block: CPU cores, the VRAM budget and the contention model's parameters.

Part of the model package; imports pydantic only.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_KAPPA = 0.10
"""Default GPU interference beyond pure sharing; see docs/simulator.md for the calibration."""


class Machine(BaseModel):
    """What the simulator needs to know about the hardware, so users can plan 'what if'."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "reference"
    """A label for reports (e.g. ``RTX A5500 + EPYC 7713``)."""
    cpu_cores: int = Field(default=8, ge=1)
    """P: CPU cores available to tools."""
    vram_budget_mb: float = Field(default=24_000.0, gt=0, allow_inf_nan=False)
    """M: GPU memory the workflow's tools may hold at once, MB."""
    gpu_kappa: float = Field(default=DEFAULT_KAPPA, ge=0, allow_inf_nan=False)
    """kappa: extra slowdown per additional concurrent GPU task (context switches, bandwidth)."""
    noise_cv: float = Field(default=0.03, ge=0, le=1, allow_inf_nan=False)
    """Coefficient of variation of the multiplicative latency noise (0: deterministic)."""
    pcie_mb_per_ms: float = Field(default=12.0, gt=0, allow_inf_nan=False)
    """Host<->device bandwidth for edge data crossing devices, MB per ms (12 MB/ms = 12 GB/s)."""
