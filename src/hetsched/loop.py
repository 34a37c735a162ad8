"""The rounds loop: propose -> feasibility check -> execute -> record, R times.

Owns the per-round seeds, binds what-if probes to the executor, and hands every finished
round to an optional recorder (the run store) as soon as it completes, so an interrupted run
loses nothing. :func:`run_recorded`, :func:`continue_run` and :func:`ensure_run` drive a run
through the run store (``hetsched.store``) and mark it finished or interrupted; a resumed run
replays to the same rounds as an uninterrupted one because every seed derives from
(run seed, round, probe) and policies decide from (context, history). Imports the model,
policies, the simulator (default executor), the oracle and the store.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hetsched.model import Executor, InputError, Mapping, Probe, Proposal, RoundRecord, Scenario, Trace
from hetsched.policies import Policy, PolicyContext, make_policy
from hetsched.policies.oracle import solve
from hetsched.sim import Simulator
from hetsched.store import RunStore, StoreError


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
    run_id: str | None = None
    """Id in the run store when the run was recorded there."""

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
    # a continued history may end exactly where the uninterrupted run would have stopped early
    if rounds and config.stop_after and _stable(rounds, config.stop_after) and policy.converged(rounds):
        return result
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


# ---------------------------------------------------------------------------- the run store
def _run_identity(
    options: dict[str, Any] | None, config: LoopConfig, executor: Executor | None, experiment: str
) -> dict[str, Any]:
    """What identifies a stored run besides its scenario and policy (shared by create and find)."""
    return {
        "options": options,
        "seed": config.seed,
        "rounds": config.rounds,
        "stop_after": config.stop_after,
        "executor": executor.name if executor is not None else Simulator.name,
        "experiment": experiment,
    }


def run_recorded(
    scenario: Scenario,
    policy: Policy,
    config: LoopConfig = LoopConfig(),
    *,
    store: RunStore,
    options: dict[str, Any] | None = None,
    executor: Executor | None = None,
    experiment: str = "",
    recorder: Recorder | None = None,
) -> RunResult:
    """Create a run in ``store`` and drive it to the end, writing each round as it completes.

    ``options`` are the keyword options ``policy`` was built with (``make_policy(name,
    **options)``); they are stored (secrets removed) so :func:`continue_run` can rebuild it.
    On any exception (Ctrl-C included) the run is marked ``interrupted`` and the exception
    propagates; the rounds already done stay stored.
    """
    run_id = store.create_run(scenario, policy.name, **_run_identity(options, config, executor, experiment))
    return continue_run(store, run_id, policy=policy, executor=executor, recorder=recorder)


def continue_run(
    store: RunStore,
    run_id: str,
    *,
    policy: Policy | None = None,
    executor: Executor | None = None,
    recorder: Recorder | None = None,
    rounds: int | None = None,
) -> RunResult:
    """Continue a stored run from its recorded rounds to its planned rounds (``hetsched run --resume``).

    The policy is rebuilt from the stored name and options unless given (give it when its
    options are not JSON, e.g. a decider object); the executor defaults to the noisy simulator
    and must match the stored executor name. ``rounds`` changes the planned rounds (not below
    the rounds done). The same scenario, seed and early-stop setting are used, so the rounds
    equal those of an uninterrupted run. A finished run is returned as stored (nothing runs).
    """
    info = store.run(run_id)
    run_id = info.id
    if info.live_elsewhere:
        raise StoreError(
            f"run {run_id} is being driven by process {info.pid} on {info.host}; wait for it or stop it first"
        )
    scenario = store.scenario(run_id)
    history = store.rounds(run_id)
    planned = info.rounds_planned
    if rounds is not None and rounds != planned:
        if rounds < len(history):
            raise InputError(f"run {run_id} already has {len(history)} rounds; rounds must be >= {len(history)}, "
                             f"got {rounds}")
        store.set_rounds_planned(run_id, rounds)
        planned = rounds
    if policy is None:
        policy = make_policy(info.policy, **info.options)
    elif policy.name != info.policy:
        raise InputError(f"run {run_id} was made by policy {info.policy!r}; cannot continue it with {policy.name!r}")
    if executor is None:
        if info.executor != Simulator.name:
            raise InputError(
                f"run {run_id} was executed by {info.executor!r}; pass that executor to continue it "
                f"(only {Simulator.name!r} runs can be continued without one)"
            )
        executor = Simulator(scenario, noise=True)
    elif executor.name != info.executor:
        raise InputError(f"run {run_id} was executed by {info.executor!r}; cannot continue it with {executor.name!r}")
    config = LoopConfig(rounds=planned, seed=info.seed, stop_after=info.stop_after)
    store.claim(run_id)
    write = store.recorder(run_id)

    def record(r: RoundRecord) -> None:
        write(r)  # stored first: a failing extra recorder cannot lose the round
        if recorder is not None:
            recorder(r)

    try:
        result = run_rounds(scenario, policy, config, executor=executor, recorder=record, history=history)
    except BaseException as exc:
        _mark_interrupted(store, run_id, exc)
        raise
    store.set_oracle(run_id, result.oracle_mapping, result.oracle_e2e_ms)
    stopped_early = len(result.rounds) < planned
    store.set_status(run_id, "finished", f"converged after {len(result.rounds)} rounds" if stopped_early else "")
    result.run_id = run_id
    return result


def _mark_interrupted(store: RunStore, run_id: str, exc: BaseException) -> None:
    """Record why a run stopped; a failure to record is attached to the original exception."""
    reason = type(exc).__name__ + (f": {exc}" if str(exc) else "")
    try:
        store.set_status(run_id, "interrupted", reason[:500])
    except (StoreError, sqlite3.Error) as store_exc:
        exc.add_note(f"run {run_id} could not be marked interrupted in {store.path}: {store_exc}")


def ensure_run(
    store: RunStore,
    scenario: Scenario,
    policy: str,
    *,
    options: dict[str, Any] | None = None,
    config: LoopConfig = LoopConfig(),
    executor: Executor | None = None,
    experiment: str = "",
) -> tuple[str, str]:
    """The bench's unit of work: make sure the run with exactly this configuration is finished
    in ``store``, and return ``(run_id, how)``.

    ``how`` is ``reused`` (finished before: nothing runs, nothing is loaded), ``resumed`` (an
    interrupted run continued) or ``ran`` (started: none existed, or the one found is being
    driven by a live process elsewhere). Safe to call again after a crash: nothing finished is
    re-run.
    """
    built = make_policy(policy, **(options or {}))
    found = store.find_run(scenario, built.name, **_run_identity(options, config, executor, experiment))
    if found is not None and found.status == "finished" and found.rounds_done > 0:
        return found.id, "reused"
    if found is not None and not found.live_elsewhere:
        continue_run(store, found.id, policy=built, executor=executor)
        return found.id, "resumed"
    result = run_recorded(scenario, built, config, store=store, options=options, executor=executor,
                          experiment=experiment)
    assert result.run_id is not None
    return result.run_id, "ran"


def load_result(store: RunStore, run_id: str) -> RunResult:
    """A stored run as a :class:`RunResult` (for reports); the oracle is solved if not stored."""
    stored = store.load(run_id)
    info = stored.info
    if info.oracle_mapping is not None and info.oracle_e2e_ms is not None:
        oracle_mapping, oracle_e2e_ms = info.oracle_mapping, info.oracle_e2e_ms
    else:
        oracle = solve(stored.scenario, ranking=False)
        oracle_mapping, oracle_e2e_ms = oracle.best, oracle.e2e_ms
    return RunResult(stored.scenario, info.policy, oracle_mapping, oracle_e2e_ms, stored.rounds, run_id=info.id)
