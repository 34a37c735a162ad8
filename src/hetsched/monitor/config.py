"""The runtime monitor's configuration: which mechanisms run and how many probes they may spend.

Every mechanism of Algorithm 1 (PAPER.md) can be switched off on its own, which is what the
ablation (PAPER.md's Appendix A, ``benchmarks/ablation.py``) varies. Imports nothing of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

MECHANISMS: tuple[str, ...] = ("running_averages", "feasibility", "reprobe", "swap", "hints")
"""Names of the switchable mechanisms, in the order the docs and the ablation list them."""

DEFAULT_PROBES_PER_ROUND = 2
"""The fewest what-if probes a round may run under the default rule (the paper's 4-tool scale)."""
NODES_PER_ROUND_PROBE = 10
"""With ``probes_per_round=None`` a round may run one probe per this many nodes, at least
``DEFAULT_PROBES_PER_ROUND``: 2 up to 20 nodes, 5 at 50, 10 at 100 (see :meth:`MonitorConfig.round_budget`)."""
DEFAULT_PROBES_PER_NODE = 3
"""With ``probes_per_run=None`` the run budget is this many probes per workflow node (12 for 4 nodes)."""


@dataclass(frozen=True)
class MonitorConfig:
    """Switches and budgets of the runtime monitor (Algorithm 1)."""

    running_averages: bool = True
    """Report each node's mean latency per placement under the contention it met (Factor A),
    next to the card's isolated figure."""
    feasibility: bool = True
    """Report which mappings were infeasible (OOM, never admissible, deadlock) and why."""
    reprobe: bool = True
    """Symmetric reprobe: execute the best measured mapping with one node moved."""
    swap: bool = True
    """Swap reprobe: when a one-node move fails (OOM / never admissible / deadlock), execute a
    two-node exchange of placements (PAPER.md's S13 C<->B)."""
    hints: bool = True
    """Exploration hints: list the (node, placement) pairs never measured."""
    probes_per_round: int | None = None
    """Most probes executed in one round (0 disables probing); None means the rule that scales
    with the workflow: max(``DEFAULT_PROBES_PER_ROUND``, ceil(nodes / ``NODES_PER_ROUND_PROBE``))."""
    probes_per_run: int | None = None
    """Most probes executed in the whole run; None means ``DEFAULT_PROBES_PER_NODE`` x nodes."""
    max_executions_shown: int = 8
    """Distinct measured mappings listed in the prompt text (lowest mean E2E first; the last
    round's mapping is always listed). Keeps the prompt from growing with the rounds."""
    max_infeasible_shown: int = 8
    """Infeasible mappings listed in the prompt text (most recent first)."""
    max_budget_checks: int = 32
    """Budget-check failures (probe candidates the VRAM arithmetic rules out) recorded per round:
    those met while ranking the round's probes first, then the base's one-node moves in their
    probe order. Keeps the records linear in the workflow's size (each one lists n placements)."""

    def __post_init__(self) -> None:
        if self.probes_per_round is not None and self.probes_per_round < 0:
            raise ValueError(f"probes_per_round must be >= 0, got {self.probes_per_round}")
        if self.probes_per_run is not None and self.probes_per_run < 0:
            raise ValueError(f"probes_per_run must be >= 0 or None, got {self.probes_per_run}")
        if self.max_executions_shown < 1:
            raise ValueError(f"max_executions_shown must be >= 1, got {self.max_executions_shown}")
        if self.max_infeasible_shown < 0:
            raise ValueError(f"max_infeasible_shown must be >= 0, got {self.max_infeasible_shown}")
        if self.max_budget_checks < 0:
            raise ValueError(f"max_budget_checks must be >= 0, got {self.max_budget_checks}")

    def run_budget(self, n_nodes: int) -> int:
        """The per-run probe budget for a workflow of ``n_nodes`` nodes: 3 per node unless set."""
        return DEFAULT_PROBES_PER_NODE * n_nodes if self.probes_per_run is None else self.probes_per_run

    def round_budget(self, n_nodes: int) -> int:
        """The per-round probe budget for a workflow of ``n_nodes`` nodes, unless set: one probe per
        ``NODES_PER_ROUND_PROBE`` nodes, at least ``DEFAULT_PROBES_PER_ROUND`` (2 for 4-20 nodes, 5 for
        50, 10 for 100), so a round's probes cover a share of the one-node moves that does not shrink
        as the workflow grows too fast, while the run budget (3 per node) bounds the total cost."""
        if self.probes_per_round is not None:
            return self.probes_per_round
        return max(DEFAULT_PROBES_PER_ROUND, -(-n_nodes // NODES_PER_ROUND_PROBE))

    @property
    def probing(self) -> bool:
        """True when some probe mechanism is on and the budget allows a probe."""
        return (self.reprobe or self.swap) and self.probes_per_round != 0 and self.probes_per_run != 0

    def without(self, mechanism: str) -> MonitorConfig:
        """A copy with one mechanism switched off (for the ablation)."""
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown monitor mechanism {mechanism!r}; accepted: {', '.join(MECHANISMS)}")
        return replace(self, **{mechanism: False})

    @classmethod
    def off(cls) -> MonitorConfig:
        """No monitor: the decider sees only each round's mapping and E2E (or that it failed)."""
        return cls(**{m: False for m in MECHANISMS})

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> MonitorConfig:
        """Build from a plain dict (CLI / config files); unknown keys are an error naming them."""
        known = {f.name for f in fields(cls)}
        bad = sorted(set(data) - known)
        if bad:
            raise ValueError(f"unknown monitor option(s) {bad}; accepted: {sorted(known)}")
        return cls(**data)  # type: ignore[arg-type]
