"""The rounds loop: propose -> feasibility check -> execute -> record, R times.

Owns the per-round seeds, binds what-if probes to the executor, and hands every finished
round to an optional recorder (the run store) as soon as it completes, so an interrupted run
loses nothing. Imports the model, policies, the simulator (default executor) and the oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hetsched.model import Executor, Mapping, Probe, Proposal, RoundRecord, Scenario, Trace
from hetsched.policies import Policy, PolicyContext
from hetsched.policies.oracle import solve
from hetsched.sim import Simulator


def round_seed(seed: int, round_index: int, probe_index: int = -1) -> int:
    """Seed of one execution: distinct per (run seed, round, probe), stable across versions."""
    return (seed * 1_000_003 + round_index * 1_009 + probe_index + 1) & 0x7FFFFFFF


@dataclass(frozen=True)
class LoopConfig:
    """How a run is driven."""

    rounds: int = 20
    """Rounds to run (an upper bound when ``stop_after`` is set)."""
    seed: int = 0
    """Run seed; rounds and probes derive theirs from it."""
    stop_after: int = 0
    """Stop early once the mapping has been unchanged for this many rounds and the policy says
    it has converged (0: never stop early)."""

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if self.stop_after < 0:
            raise ValueError(f"stop_after must be >= 0, got {self.stop_after}")


@dataclass
class RunResult:
    """A finished (or resumed-and-finished) run."""

    scenario: Scenario
    policy: str
    oracle_mapping: Mapping
    oracle_e2e_ms: float
    rounds: list[RoundRecord] = field(default_factory=list)

    def best(self) -> RoundRecord | None:
        """The feasible round with the lowest measured E2E."""
        ok = [r for r in self.rounds if r.trace.feasible and r.trace.e2e_ms is not None]
        return min(ok, key=lambda r: r.trace.e2e_ms or 0.0) if ok else None

    def to_dict(self) -> dict[str, object]:
        """The ``hetsched run --json`` object."""
        return {
            "scenario": self.scenario.name,
            "policy": self.policy,
            "oracle": {"mapping": self.oracle_mapping.to_dict(), "e2e_ms": self.oracle_e2e_ms},
            "rounds": [
                {
                    "round": r.round,
                    "mapping": r.mapping.to_dict(),
                    "e2e_ms": r.trace.e2e_ms,
                    "feasible": r.trace.feasible,
                    "reason": r.trace.reason,
                    "probes": len(r.probes),
                }
                for r in self.rounds
            ],
        }


Recorder = Callable[[RoundRecord], None]


def run_rounds(
    scenario: Scenario,
    policy: Policy,
    config: LoopConfig = LoopConfig(),
    executor: Executor | None = None,
    recorder: Recorder | None = None,
    history: Sequence[RoundRecord] = (),
) -> RunResult:
    """Run ``config.rounds`` rounds of ``policy`` on ``scenario`` (continuing ``history``).

    Each proposal is validated against the scenario (a malformed mapping from a policy is a
    bug and raises :class:`~hetsched.model.MappingError`); infeasible ones are recorded with
    their reason and not executed.
    """
    executor = executor or Simulator(scenario, noise=True)
    oracle = solve(scenario, ranking=False)
    rounds: list[RoundRecord] = list(history)
    probes: list[Probe] = []
    current = {"round": len(rounds)}

    def run_probe(kind: str, base: Mapping, mapping: Mapping, note: str) -> Probe:
        mapping = scenario.validate_mapping(mapping, where=f"{kind} probe")
        seed = round_seed(config.seed, current["round"], len(probes))
        probe = Probe(kind=kind, base=base, trace=_execute(scenario, executor, mapping, seed), note=note)
        probes.append(probe)
        return probe

    policy.reset(PolicyContext(scenario=scenario, seed=config.seed, rounds=config.rounds, run_probe=run_probe))
    result = RunResult(scenario, policy.name, oracle.best, oracle.e2e_ms, rounds)
    while len(rounds) < config.rounds:
        r = len(rounds)
        current["round"] = r
        probes.clear()
        proposal: Proposal = policy.propose(rounds)
        mapping = scenario.validate_mapping(proposal.mapping, where=f"policy {policy.name!r} round {r}")
        trace = _execute(scenario, executor, mapping, round_seed(config.seed, r))
        record = RoundRecord(round=r, proposal=proposal, trace=trace, probes=tuple(probes))
        rounds.append(record)
        if recorder is not None:
            recorder(record)
        if config.stop_after and _stable(rounds, config.stop_after) and policy.converged(rounds):
            break
    return result


def _execute(scenario: Scenario, executor: Executor, mapping: Mapping, seed: int) -> Trace:
    reason = scenario.infeasibility(mapping)
    if reason:  # never hand an OOM mapping to a real executor
        return Trace(
            mapping=mapping,
            feasible=False,
            e2e_ms=None,
            reason=reason,
            vram_budget_mb=scenario.machine.vram_budget_mb,
            seed=seed,
            executor=executor.name,
        )
    return executor.run(mapping, seed=seed)


def _stable(rounds: Sequence[RoundRecord], k: int) -> bool:
    if len(rounds) < k:
        return False
    last = rounds[-1].mapping
    return all(r.mapping == last for r in rounds[-k:])
