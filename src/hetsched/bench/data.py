"""The bench's data: one compact summary per run, built from stored rounds, and the metrics the
tables and figures are made of.

Every summary is built from what the run store holds (scenario, rounds, probes, proposal
info), so a report made right after a bench and one regenerated later from the store are the
same. Noise-free figures (a round mapping's true E2E, the all-CPU penalty) are recomputed from
the stored scenario with the simulator, which defines them; the reference ("oracle" in the
tables) is the one stored with the run (the exact oracle, or a labelled best-known mapping for
scenarios too large to solve exactly), else computed the same way.

Metric definitions (docs/bench.md):
- match: nodes placed as in the oracle mapping; an infeasible round matches nothing (it ran
  nothing), as the paper scores an OOM round 0/4.
- best match: the highest match over the run's rounds (the paper's Table 4).
- round reached: first round whose executed mapping is the oracle mapping.
- regret of a round: its E2E minus the oracle E2E; an infeasible round delivers no result and
  is charged the all-CPU E2E (the always-feasible fallback a deployment would have to run
  instead) minus the oracle E2E. *True* regret uses the noise-free E2E of the round's mapping
  (>= 0 by the oracle's definition); *measured* regret uses the noisy measurement, so it can
  go below 0 for a policy that runs the oracle mapping.
- probes: what-if executions the policy asked for; "with probes" regret adds each feasible
  probe's true E2E minus the oracle E2E (infeasible probes are refused before they run).

Imports the model, the simulator and its reference search, and the store; never the CLI.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from hetsched.model import Mapping, Placement, Reference, RoundRecord, Scenario
from hetsched.search.reference import reference
from hetsched.sim import Simulator
from hetsched.store import RunInfo

from .spec import PolicySpec


@dataclass(frozen=True)
class ProbeSummary:
    """One what-if probe."""

    code: str
    """Probed mapping, one letter a node (C, G, Q) in workflow node order."""
    e2e_ms: float | None
    """Measured E2E; None when infeasible."""
    true_e2e_ms: float | None
    """Noise-free E2E of the probed mapping; None when infeasible."""


@dataclass(frozen=True)
class RoundSummary:
    """One round of one run."""

    round: int
    """Round index from 0."""
    code: str
    """Executed mapping, one letter a node in workflow node order."""
    feasible: bool
    """False when the mapping could not run."""
    reason: str
    """Why not ('' when feasible)."""
    e2e_ms: float | None
    """Measured (noisy) E2E; None when infeasible."""
    true_e2e_ms: float | None
    """Noise-free E2E of the executed mapping; None when infeasible."""
    match: int
    """Nodes placed as in the oracle mapping (0 when infeasible)."""
    probes: tuple[ProbeSummary, ...] = ()
    """What-if probes run during the round."""
    kind: str = ""
    """Infeasibility label (``OOM``, ``deadlock``, ``tool error``...; '' when feasible)."""
    decider: str | None = None
    """Agentic decider name (None for other policies)."""
    fallback: bool = False
    """The agentic policy fell back to the best measured mapping."""
    attempts: int = 0
    """Decider asks in this round (1 + re-asks)."""
    reasks: int = 0
    """Attempts rejected with a parse/validation error."""
    prompt_tokens: int | None = None
    """Prompt tokens over the round's attempts (None when the decider reports none)."""
    completion_tokens: int | None = None
    """Completion tokens over the round's attempts."""
    decision_ms: float | None = None
    """Decider wall time over the round's attempts, ms."""


@dataclass(frozen=True)
class RunSummary:
    """One stored run, summarized for the tables."""

    run_id: str
    """Run id in the store."""
    label: str
    """Column label (``agentic:rules``)."""
    policy: str
    """Registered policy name."""
    options: dict[str, Any]
    """Policy options."""
    scenario: str
    """Scenario name."""
    seed: int
    """Run seed."""
    rounds_planned: int
    """Rounds the run was meant to reach."""
    status: str
    """Store status (``finished`` for a complete run)."""
    nodes: tuple[str, ...]
    """Workflow node ids (the order of the mapping codes)."""
    oracle_code: str
    """Reference mapping code (the oracle's, unless ``reference_kind`` says best-known)."""
    oracle_e2e_ms: float
    """Reference's noise-free E2E."""
    penalty_e2e_ms: float
    """E2E charged for an infeasible round (the all-CPU E2E)."""
    rounds: tuple[RoundSummary, ...] = field(default_factory=tuple)
    """Rounds in order."""
    reference_kind: str = "oracle"
    """``oracle`` (exact) or ``best-known`` (a bounded search's best; see ``reference_gap``)."""
    reference_gap: float | None = 0.0
    """How far the reference may be above the optimum (0 for the oracle; None when unknown)."""
    reference_found_by: str = ""
    """Which run, round or probe played the reference mapping, when a run's mapping beat the reference search's
    (``Reference.found_by``; '' for the search's own)."""

    # ------------------------------------------------------------------ metrics
    @property
    def n_nodes(self) -> int:
        """Placements per mapping (the '4' of 'x/4')."""
        return len(self.nodes)

    @property
    def best_match(self) -> int:
        """Highest number of oracle placements matched in one feasible round."""
        return max((r.match for r in self.rounds), default=0)

    @property
    def reached(self) -> int | None:
        """First round that executed the oracle mapping, or None."""
        return next((r.round for r in self.rounds if r.feasible and r.code == self.oracle_code), None)

    @property
    def oom_rounds(self) -> int:
        """Rounds whose mapping could not run (OOM, never admissible, deadlock, a failed tool...)."""
        return sum(1 for r in self.rounds if not r.feasible)

    @property
    def infeasible_labels(self) -> tuple[str, ...]:
        """The kinds of the run's infeasible rounds (``OOM``, ``deadlock``...), each once, in order met."""
        return tuple(dict.fromkeys(r.kind or "infeasible" for r in self.rounds if not r.feasible))

    @property
    def probes(self) -> int:
        """What-if probes over the run."""
        return sum(len(r.probes) for r in self.rounds)

    def best_round(self) -> RoundSummary | None:
        """The feasible round with the lowest measured E2E (first on ties)."""
        ok = [r for r in self.rounds if r.feasible and r.e2e_ms is not None]
        return min(ok, key=lambda r: (r.e2e_ms, r.round)) if ok else None

    def regret_steps(self, measured: bool = False, with_probes: bool = False) -> list[float]:
        """Per-round regret (see the module docstring), in ms."""
        out = []
        for r in self.rounds:
            e = r.e2e_ms if measured else r.true_e2e_ms
            step = (self.penalty_e2e_ms if not r.feasible or e is None else e) - self.oracle_e2e_ms
            if with_probes:
                step += sum(p.true_e2e_ms - self.oracle_e2e_ms for p in r.probes if p.true_e2e_ms is not None)
            out.append(step)
        return out

    def cumulative_regret(self, measured: bool = False, with_probes: bool = False) -> list[float]:
        """Running sum of :meth:`regret_steps`."""
        total, out = 0.0, []
        for s in self.regret_steps(measured, with_probes):
            total += s
            out.append(total)
        return out

    def regret(self, measured: bool = False, with_probes: bool = False) -> float:
        """Cumulative regret over all rounds, ms."""
        return sum(self.regret_steps(measured, with_probes))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``runs.json`` next to the report)."""
        return {
            "run_id": self.run_id,
            "label": self.label,
            "policy": self.policy,
            "options": self.options,
            "scenario": self.scenario,
            "seed": self.seed,
            "rounds_planned": self.rounds_planned,
            "status": self.status,
            "nodes": list(self.nodes),
            "oracle": {"code": self.oracle_code, "e2e_ms": self.oracle_e2e_ms},
            **({} if self.reference_kind == "oracle" else
               {"reference": {"kind": self.reference_kind, "gap": self.reference_gap,
                              **({"found_by": self.reference_found_by} if self.reference_found_by else {})}}),
            "penalty_e2e_ms": self.penalty_e2e_ms,
            "rounds": [
                {
                    "round": r.round,
                    "code": r.code,
                    "feasible": r.feasible,
                    "reason": r.reason,
                    "e2e_ms": r.e2e_ms,
                    "true_e2e_ms": r.true_e2e_ms,
                    "match": r.match,
                    "probes": [[p.code, p.e2e_ms, p.true_e2e_ms] for p in r.probes],
                    "decider": r.decider,
                    "fallback": r.fallback,
                    "attempts": r.attempts,
                    "reasks": r.reasks,
                    "prompt_tokens": r.prompt_tokens,
                    "completion_tokens": r.completion_tokens,
                    "decision_ms": r.decision_ms,
                }
                for r in self.rounds
            ],
        }


# ---------------------------------------------------------------------------- building summaries
class _TrueE2E:
    """Noise-free E2E per mapping code for one scenario (memoized: rounds repeat mappings)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.sim = Simulator(scenario, noise=False)
        self.cache: dict[str, float | None] = {}

    def __call__(self, mapping: Mapping) -> float | None:
        code = mapping.code(self.scenario.workflow.node_ids)
        if code not in self.cache:
            self.cache[code] = self.sim.e2e(mapping)
        return self.cache[code]


@lru_cache(maxsize=256)
def _all_cpu_e2e(scenario_json: str) -> float:
    sc = Scenario.model_validate_json(scenario_json)
    cpu = Simulator(sc, noise=False).e2e(sc.uniform(Placement.CPU))
    assert cpu is not None  # all-CPU holds no VRAM: always feasible
    return cpu


@lru_cache(maxsize=256)
def _reference(scenario_json: str) -> Reference:
    ref = reference(Scenario.model_validate_json(scenario_json))
    assert ref is not None
    return ref


def scenario_reference(scenario: Scenario, stored: Reference | None = None) -> Reference:
    """The run's stored reference, else the one ``--reference auto`` computes (memoized per scenario)."""
    return stored if stored is not None else _reference(scenario.model_dump_json(exclude={"source"}))


def scenario_facts(scenario: Scenario, stored: Reference | None = None) -> tuple[str, float, float]:
    """(reference code, reference E2E, all-CPU E2E) of a scenario."""
    ref = scenario_reference(scenario, stored)
    cpu = _all_cpu_e2e(scenario.model_dump_json(exclude={"source"}))
    return ref.mapping.code(scenario.workflow.node_ids), ref.e2e_ms, cpu


def _sum_or_none(values: Iterable[float | int | None]) -> Any:
    vals = [v for v in values if v is not None]
    return sum(vals) if vals else None


def summarize_round(record: RoundRecord, scenario: Scenario, oracle: Mapping, true_e2e: _TrueE2E) -> RoundSummary:
    """One round record as a :class:`RoundSummary`."""
    ids = scenario.workflow.node_ids
    t = record.trace
    feasible = bool(t.feasible)
    match = sum(1 for n in ids if record.mapping[n] == oracle[n]) if feasible else 0
    d = record.proposal.decision
    attempts = d.attempts if d is not None else ()
    probes = tuple(
        ProbeSummary(
            code=p.mapping.code(ids),
            e2e_ms=p.trace.e2e_ms if p.trace.feasible else None,
            true_e2e_ms=true_e2e(p.mapping) if p.trace.feasible else None,
        )
        for p in record.probes
    )
    return RoundSummary(
        round=record.round,
        code=record.mapping.code(ids),
        feasible=feasible,
        reason=t.reason,
        kind="" if t.kind is None else t.kind.label,
        e2e_ms=t.e2e_ms if feasible else None,
        true_e2e_ms=true_e2e(record.mapping) if feasible else None,
        match=match,
        probes=probes,
        decider=None if d is None else d.decider,
        fallback=d is not None and d.fallback,
        attempts=len(attempts),
        reasks=0 if d is None else d.reasks,
        prompt_tokens=None if d is None else d.tokens("prompt_tokens"),
        completion_tokens=None if d is None else d.tokens("completion_tokens"),
        decision_ms=_sum_or_none(a.latency_ms for a in attempts) if attempts else None,
    )


def summarize_run(info: RunInfo, scenario: Scenario, rounds: Sequence[RoundRecord]) -> RunSummary:
    """A stored run (its row, scenario and rounds) as a :class:`RunSummary`."""
    ref = scenario_reference(scenario, info.reference)
    oracle_code, oracle_e2e, cpu_e2e = scenario_facts(scenario, ref)
    ids = scenario.workflow.node_ids
    oracle = Mapping(zip(ids, (Placement.of_letter(ch) for ch in oracle_code), strict=True))
    true_e2e = _TrueE2E(scenario)
    spec = PolicySpec(info.policy, dict(info.options))
    return RunSummary(
        run_id=info.id,
        label=spec.label,
        policy=info.policy,
        options=dict(info.options),
        scenario=scenario.name,
        seed=info.seed,
        rounds_planned=info.rounds_planned,
        status=info.status,
        nodes=ids,
        oracle_code=oracle_code,
        oracle_e2e_ms=oracle_e2e,
        penalty_e2e_ms=cpu_e2e,
        rounds=tuple(summarize_round(r, scenario, oracle, true_e2e) for r in rounds),
        reference_kind=ref.kind.value,
        reference_gap=ref.gap,
        reference_found_by=ref.found_by,
    )


def code_mapping(scenario: Scenario, code: str) -> Mapping:
    """The mapping a code names for a scenario's node order."""
    return Mapping(zip(scenario.workflow.node_ids, (Placement.of_letter(ch) for ch in code), strict=True))


# ---------------------------------------------------------------------------- the data set
@dataclass
class BenchData:
    """Everything a report is made from: run summaries plus the scenarios they ran on."""

    runs: list[RunSummary]
    """Run summaries (one per policy variant, scenario and seed)."""
    scenarios: dict[str, Scenario]
    """Scenario by name (as stored with the runs)."""
    labels: list[str]
    """Policy columns in display order."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Bench settings and timings (from ``bench.json``)."""

    def scenario_names(self) -> list[str]:
        """Scenarios in display order (suite order, then the user's)."""
        from .spec import natural_key

        return sorted(self.scenarios, key=natural_key)

    def cell(self, scenario: str, label: str) -> list[RunSummary]:
        """Runs of one policy on one scenario, by seed."""
        return sorted((r for r in self.runs if r.scenario == scenario and r.label == label), key=lambda r: r.seed)

    def seeds(self) -> list[int]:
        """Seeds present."""
        return sorted({r.seed for r in self.runs})

    def has_label(self, label: str) -> bool:
        """True when some run carries this label."""
        return any(r.label == label for r in self.runs)


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for fewer than two values)."""
    if not values:
        return (math.nan, math.nan)
    return (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)
