"""Tool cards: the offline profile of one tool (PAPER.md's Table 1 row), validated and immutable.

Leaf of the model package: imports only pydantic and ``model.limits`` (the accepted ranges).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from hetsched.model.limits import (
    MAX_AMPLIFICATION,
    MAX_CORES,
    MAX_MS,
    MAX_RUNS,
    MAX_VRAM_MB,
    MIN_GPU_UTIL,
    MIN_MS,
    Name,
    Text,
)

GPU_PREFERRED_MIN = 5.0
"""Speedup above which a tool is GPU-preferred (PAPER.md)."""
AMBIGUOUS_MIN = 0.5
"""Speedup below which a tool is CPU-preferred; in between it is ambiguous."""


class Category(StrEnum):
    """The paper's four tool categories, derived from the speedup."""

    GPU_PREFERRED = "gpu_preferred"
    AMBIGUOUS = "ambiguous"
    CPU_PREFERRED = "cpu_preferred"
    DEVICE_NEUTRAL = "device_neutral"


class Spread(BaseModel):
    """The 10th and 90th percentile of one profiled figure."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    p10: float = Field(ge=0, le=MAX_MS, allow_inf_nan=False)
    """10th percentile."""
    p90: float = Field(ge=0, le=MAX_MS, allow_inf_nan=False)
    """90th percentile."""


class Provenance(BaseModel):
    """Where a card's figures come from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hardware: Text = "unknown"
    """Machine the tool was profiled on (GPU + CPU model)."""
    runs: int = Field(default=0, ge=0, le=MAX_RUNS)
    """Number of isolated runs the medians come from (0: not measured, e.g. literature figures)."""
    date: Text = ""
    """ISO date of the profile."""
    source: Text = ""
    """Free text: how the figures were obtained (profiler run, paper table, vendor benchmark...)."""
    device: Text = ""
    """What the GPU figures (gpu_ms, load_ms, vram_mb, gpu_util) were measured on: ``cuda`` (a real GPU),
    ``standin`` (the stand-in device: CPU cores, NOT a GPU), or '' (not measured by ``hetsched profile``)."""
    preset: Text = ""
    """Size preset of the profiled tool implementation (``tiny``, ``full``); '' when not profiled by hetsched."""
    cpu: Text = ""
    """CPU model and threads behind the CPU figures (cpu_ms, cpu_threads)."""
    gpu: Text = ""
    """GPU name, driver and CUDA version behind the GPU figures, or the stand-in device's description."""
    software: Text = ""
    """Library versions of the measurement (``torch 2.13.0, transformers 5.24.0``)."""


class ToolCard(BaseModel):
    """One tool's isolated profile: latencies on each device, load cost, VRAM, GPU share."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    """Tool name, unique in a library."""
    description: Text = ""
    """What the tool does, in words (shown to the decider as data)."""
    cpu_ms: float = Field(ge=MIN_MS, le=MAX_MS, allow_inf_nan=False)
    """Median latency on the CPU in isolation, ms."""
    gpu_ms: float | None = Field(default=None, ge=MIN_MS, le=MAX_MS, allow_inf_nan=False)
    """Median warm latency on the GPU in isolation, ms; None when the tool has no GPU implementation."""
    load_ms: float = Field(default=0.0, ge=0, le=MAX_MS, allow_inf_nan=False)
    """Cost of loading the model onto the GPU, paid by ``gpu_queue`` on admission, ms."""
    load_cold_ms: float | None = Field(default=None, ge=0, le=MAX_MS, allow_inf_nan=False)
    """A load whose memory has gone cold, ms: the profiler's loads after the device sat idle (its
    ``cold_loads``), where ``load_ms`` comes from loads back to back, each reusing the memory the
    previous one just freed. On a virtual machine that hands freed memory back to its host (free
    page reporting), a memory-heavy load that finds none recently freed pays the host's page
    faults: measured 4-9x ``load_ms`` for a 250 MB table. The model charges it to the machine's
    ``cold_load_share`` of the loads (docs/simulator.md, "Cold memory"). None (not measured):
    every load takes ``load_ms``."""
    vram_mb: float = Field(default=0.0, ge=0, le=MAX_VRAM_MB, allow_inf_nan=False)
    """GPU memory the tool holds while resident, MB."""
    gpu_util: float = Field(default=1.0, ge=MIN_GPU_UTIL, le=1, allow_inf_nan=False)
    """Share of the GPU the tool keeps busy when it runs alone (0-1]."""
    cpu_threads: int = Field(default=1, ge=1, le=MAX_CORES)
    """CPU cores the tool keeps busy when it runs on the CPU."""
    cpu_demand: float | None = Field(default=None, ge=0, le=MAX_CORES, allow_inf_nan=False)
    """Measured CPU demand on the CPU, in cores: process CPU time / wall time of its isolated runs
    (0.02 for a tool that mostly waits on I/O, 1 for one busy thread, 3.6 for a multi-threaded
    kernel). None (not measured): the model takes ``cpu_threads``, today's meaning."""
    has_gpu: bool = True
    """Whether a GPU implementation exists; False makes the tool device-neutral (CPU only)."""
    amplification: int = Field(default=1, ge=1, le=MAX_AMPLIFICATION)
    """k: the same computation repeated k times (PAPER.md's amplified tools, e.g. ``bert_base_x12``)."""
    base: Name | None = None
    """Name of the base card an amplified card was derived from."""
    provenance: Provenance = Provenance()
    """Where the figures come from."""
    spread: dict[str, Spread] = Field(default_factory=dict)
    """p10/p90 per figure name (``cpu_ms``, ``gpu_ms``, ``load_ms``, ``vram_mb``)."""

    @field_validator("spread")
    @classmethod
    def _known_spread_keys(cls, value: dict[str, Spread]) -> dict[str, Spread]:
        allowed = {"cpu_ms", "gpu_ms", "load_ms", "load_cold_ms", "vram_mb"}
        for key in value:
            if key not in allowed:
                raise ValueError(f"spread key {key!r} is not a figure; accepted: {sorted(allowed)}")
        return value

    @model_serializer(mode="wrap")
    def _omit_unmeasured_demand(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A card without ``cpu_demand`` or ``load_cold_ms`` dumps as before those fields existed
        (stored scenario fingerprints hold)."""
        data: dict[str, Any] = handler(self)
        if self.cpu_demand is None:
            data.pop("cpu_demand", None)
        if self.load_cold_ms is None:
            data.pop("load_cold_ms", None)
        return data

    def expected_load_ms(self, cold_share: float) -> float:
        """The load time the model charges when ``cold_share`` of the loads find their memory cold:
        ``load_ms`` + share x (``load_cold_ms`` - ``load_ms``), never below ``load_ms`` (a cold load
        measured faster is noise; the lower bounds count on loads of at least ``load_ms``);
        ``load_ms`` itself at share 0 or without a measured cold load."""
        if cold_share <= 0.0 or self.load_cold_ms is None or self.load_cold_ms <= self.load_ms:
            return self.load_ms
        return self.load_ms + cold_share * (self.load_cold_ms - self.load_ms)

    @model_validator(mode="after")
    def _gpu_consistent(self) -> ToolCard:
        if self.has_gpu and self.gpu_ms is None:
            raise ValueError(
                f"tool {self.name!r}: has_gpu is true but gpu_ms is missing; give gpu_ms (> 0) or set has_gpu: false"
            )
        if not self.has_gpu and self.gpu_ms is not None:
            raise ValueError(
                f"tool {self.name!r}: has_gpu is false but gpu_ms={self.gpu_ms} is given; "
                "drop gpu_ms or set has_gpu: true"
            )
        return self

    @property
    def cores_busy(self) -> float:
        """The cores the contention model charges a CPU run: ``cpu_demand`` when measured, else
        ``cpu_threads``."""
        return float(self.cpu_threads) if self.cpu_demand is None else self.cpu_demand

    @property
    def speedup(self) -> float | None:
        """cpu_ms / gpu_ms: the warm GPU speedup; None without a GPU implementation."""
        return None if self.gpu_ms is None else self.cpu_ms / self.gpu_ms

    @property
    def category(self) -> Category:
        """The paper's category from the speedup (gpu_preferred > 5x, ambiguous 0.5-5x, ...)."""
        s = self.speedup
        if s is None:
            return Category.DEVICE_NEUTRAL
        if s > GPU_PREFERRED_MIN:
            return Category.GPU_PREFERRED
        if s >= AMBIGUOUS_MIN:
            return Category.AMBIGUOUS
        return Category.CPU_PREFERRED

    def amplified(self, k: int, name: str | None = None) -> ToolCard:
        """The card of this tool's computation repeated k times.

        Latencies scale by k; the load cost and the VRAM do not (the same weights are loaded
        once and the repeats run back to back). Spreads of latencies scale by k too.

        Raises ``ValueError`` (a pydantic ``ValidationError`` when a scaled figure leaves its
        accepted range) unless 1 <= k <= MAX_AMPLIFICATION.
        """
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_AMPLIFICATION:
            shown = repr(k) if len(repr(k)) <= 30 else repr(k)[:27] + "..."
            raise ValueError(f"amplification = {shown}: give an integer from 1 to {MAX_AMPLIFICATION:,}")
        spread = {
            key: ({"p10": s.p10 * k, "p90": s.p90 * k} if key in ("cpu_ms", "gpu_ms") else s.model_dump())
            for key, s in self.spread.items()
        }
        fields = self.model_dump()
        fields.update(
            name=name or f"{self.name}_x{k}",
            description=f"{self.description} (amplified: repeated {k}x)".strip(),
            cpu_ms=self.cpu_ms * k,
            gpu_ms=None if self.gpu_ms is None else self.gpu_ms * k,
            amplification=self.amplification * k,
            base=self.base or self.name,
            spread=spread,
        )
        return ToolCard.model_validate(fields)
