"""The Trace contract: what one execution of a workflow under a mapping did.

The simulator and every real executor return this same type (DESIGN.md), so policies, the
monitor and the reports run unchanged on either. Part of the model package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hetsched.model.mapping import Mapping, Placement


@dataclass(frozen=True, slots=True)
class NodeTrace:
    """Timing of one node, all in ms from the start of the run."""

    node: str
    """Node id."""
    tool: str
    """Tool the node invoked."""
    placement: Placement
    """Where it ran."""
    ready_ms: float
    """When all its inputs had arrived."""
    admitted_ms: float
    """When it got its device (for ``gpu_queue``: admitted from the queue; else = ready)."""
    start_ms: float
    """When its computation started (after the load for ``gpu_queue``)."""
    end_ms: float
    """When it finished."""
    load_ms: float = 0.0
    """Load time paid on admission (``gpu_queue`` only)."""

    @property
    def wait_ms(self) -> float:
        """Time spent waiting in the queue for VRAM."""
        return self.admitted_ms - self.ready_ms

    @property
    def run_ms(self) -> float:
        """Computation time (excludes the queue wait and the load)."""
        return self.end_ms - self.start_ms


@dataclass(frozen=True, slots=True)
class VramPoint:
    """VRAM in use from ``t_ms`` until the next point."""

    t_ms: float
    """Time of the change."""
    used_mb: float
    """VRAM held from then on."""


@dataclass(frozen=True)
class Trace:
    """One execution of a workflow under a mapping (or the reason it could not run)."""

    mapping: Mapping
    """The mapping that was executed."""
    feasible: bool
    """False when the mapping could not run (OOM, never admissible); then ``nodes`` is empty."""
    e2e_ms: float | None
    """Makespan: the latest sink completion; None when infeasible."""
    nodes: dict[str, NodeTrace] = field(default_factory=dict)
    """Per-node timing."""
    vram_timeline: tuple[VramPoint, ...] = ()
    """Step function of VRAM in use."""
    reason: str = ""
    """Why the mapping was infeasible (``OOM: gpu_now tools need 1260 MB of 1100 MB ...``)."""
    vram_budget_mb: float = 0.0
    """The budget the run was held to."""
    seed: int | None = None
    """Noise seed (None: noise-free)."""
    executor: str = "sim"
    """Which executor produced the trace (``sim``, ``local``, ``ray``)."""

    @property
    def peak_vram_mb(self) -> float:
        """Highest VRAM in use during the run."""
        return max((p.used_mb for p in self.vram_timeline), default=0.0)

    def latency_ms(self, node: str) -> float:
        """Node latency as the monitor sees it: admission-to-end (load + run)."""
        nt = self.nodes[node]
        return nt.end_ms - nt.admitted_ms

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "mapping": self.mapping.to_dict(),
            "feasible": self.feasible,
            "e2e_ms": self.e2e_ms,
            "reason": self.reason,
            "vram_budget_mb": self.vram_budget_mb,
            "seed": self.seed,
            "executor": self.executor,
            "nodes": {
                k: {
                    "tool": v.tool,
                    "placement": v.placement.value,
                    "ready_ms": v.ready_ms,
                    "admitted_ms": v.admitted_ms,
                    "start_ms": v.start_ms,
                    "end_ms": v.end_ms,
                    "load_ms": v.load_ms,
                    "wait_ms": v.wait_ms,
                }
                for k, v in self.nodes.items()
            },
            "vram_timeline": [[p.t_ms, p.used_mb] for p in self.vram_timeline],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        """Inverse of :meth:`to_dict`."""
        nodes = {
            k: NodeTrace(
                node=k,
                tool=v["tool"],
                placement=Placement(v["placement"]),
                ready_ms=v["ready_ms"],
                admitted_ms=v["admitted_ms"],
                start_ms=v["start_ms"],
                end_ms=v["end_ms"],
                load_ms=v["load_ms"],
            )
            for k, v in data["nodes"].items()
        }
        return cls(
            mapping=Mapping(data["mapping"]),
            feasible=data["feasible"],
            e2e_ms=data["e2e_ms"],
            nodes=nodes,
            vram_timeline=tuple(VramPoint(t, u) for t, u in data["vram_timeline"]),
            reason=data.get("reason", ""),
            vram_budget_mb=data.get("vram_budget_mb", 0.0),
            seed=data.get("seed"),
            executor=data.get("executor", "sim"),
        )
