"""The rounds loop, the only part of hetsched that executes anything:
probe -> observe -> propose -> check -> execute -> record, R times.

Each round the loop asks the policy for what-if probes (``Policy.next_probe``) and executes
each one, has the policy's runtime monitor (if it has one) observe the history and the probes
(``Monitor.observe``: passive, it reads traces and returns observations), asks for the round's
mapping (``Policy.propose``, given those observations), refuses it without executing when the
scenario's static check rules it out, executes it, and hands the finished round (probes,
proposal with its decision record, trace) to an optional recorder (the run store) before the
next round starts, so an interrupted run loses nothing.

:func:`run_recorded`, :func:`continue_run` and :func:`ensure_run` drive a run through the run
store (``hetsched.store``) by its :class:`~hetsched.model.RunKey`; a resumed run replays to the
same rounds as an uninterrupted one because every seed derives from (run seed, round, probe)
and policies decide from (context, history, probes). A run needs no oracle: references are
computed for reports only (``hetsched.search.reference``).

Imports the model, the policies, the monitor, the executors (``hetsched.exec``, the simulator)
and the store.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hetsched.exec import Executor, make_executor
from hetsched.exec.base import run_window
from hetsched.model import (
    SIM,
    ExecutorSpec,
    InputError,
    LoopConfig,
    Mapping,
    Planner,
    Probe,
    Proposal,
    Reference,
    RoundRecord,
    RunKey,
    Scenario,
    Trace,
)
from hetsched.model.errors import path_text
from hetsched.model.interrupts import ctrl_c_deferred
from hetsched.model.learned import LearnedCards, learned_cards
from hetsched.model.measured import MeasuredMapping, deploy_choice, executions
from hetsched.model.run import DEFAULT_MAX_PROBES_PER_ROUND as DEFAULT_MAX_PROBES_PER_ROUND  # re-exported
from hetsched.monitor import Monitor
from hetsched.policies import Policy, PolicyContext, make_policy
from hetsched.search.reference import SimPlanner
from hetsched.store import RunBusyError, RunStore, StoreError
from hetsched.warm import Prior, prior_from_runs

WARM_START_OPTION = "warm_start"
"""Key of a run's recorded options naming the runs its warm start came from (not a policy option)."""


def policy_options(options: dict[str, Any]) -> dict[str, Any]:
    """A run's recorded options as ``make_policy`` takes them (without the warm start's run ids)."""
    return {k: v for k, v in options.items() if k != WARM_START_OPTION}


def round_seed(seed: int, round_index: int, probe_index: int = -1) -> int:
    """Seed of one execution: distinct per (run seed, round, probe), stable across versions."""
    return (seed * 1_000_003 + round_index * 1_009 + probe_index + 1) & 0x7FFFFFFF


@dataclass
class RunResult:
    """A finished (or resumed-and-finished) run."""

    scenario: Scenario
    """The scenario it ran."""
    policy: str
    """Policy name."""
    rounds: list[RoundRecord] = field(default_factory=list)
    """Rounds in order."""
    run_id: str | None = None
    """Id in the run store when the run was recorded there."""
    executor: str = SIM.name
    """Name of the executor the rounds ran on."""
    reference: Reference | None = None
    """The mapping reports compare against (set by the caller for reporting; None: not computed)."""

    @property
    def best_round(self) -> RoundRecord | None:
        """The feasible round with the lowest measured E2E (the first on ties)."""
        ok = [r for r in self.rounds if r.trace.feasible and r.trace.e2e_ms is not None]
        return min(ok, key=lambda r: r.trace.e2e_ms or 0.0) if ok else None

    @property
    def deploy(self) -> MeasuredMapping | None:
        """The mapping to deploy: the lowest median E2E over its executions in the run's rounds and
        probes, with its spread over repeats (:func:`~hetsched.model.measured.deploy_choice`)."""
        return deploy_choice(executions(self.rounds))

    @property
    def learned(self) -> LearnedCards:
        """The cards as the run's measurements left them: per tool and figure, the de-contended
        measurements with their spread, the drift from the card, and the figures contradicted
        (:func:`~hetsched.model.learned.learned_cards`)."""
        return learned_cards(self.scenario, self.rounds)

    @property
    def feasible_rounds(self) -> int:
        """Rounds whose mapping ran to completion."""
        return sum(1 for r in self.rounds if r.trace.feasible)

    @property
    def notes(self) -> tuple[str, ...]:
        """What the executor said every reader must know (e.g. a stand-in device), each once, in order."""
        seen: dict[str, None] = {}
        for r in self.rounds:
            for trace in (r.trace, *(p.trace for p in r.probes)):
                for note in trace.notes:
                    seen.setdefault(note, None)
        return tuple(seen)

    def __repr__(self) -> str:
        best = self.best_round
        what = "no feasible round" if best is None else f"best E2E {best.trace.e2e_ms:.1f} ms in round {best.round}"
        ref = "" if self.reference is None else f", {self.reference.label} {self.reference.e2e_ms:.1f} ms"
        rid = "" if self.run_id is None else f", run {self.run_id}"
        return (f"RunResult({self.policy!r} on {self.scenario.name!r}, {len(self.rounds)} rounds on "
                f"{self.executor}, {what}{ref}{rid})")

    def to_dict(self) -> dict[str, object]:
        """The ``hetsched run --json`` object.

        ``oracle`` is the exact optimum when the reference is the oracle, else null; ``reference``
        says which reference was computed (``{"kind", "mapping", "e2e_ms", "lower_bound_ms"}``, and
        ``measured`` on a real executor), or is null when none was; ``deploy`` is the mapping to
        deploy with its spread over repeats (:attr:`deploy`), null when no round ran to completion;
        ``cards`` is the learned view of the cards (:attr:`learned`: per tool and figure the card's
        figure, the learned one with n and spread, the drift, and ``contradicted`` / ``refresh``).
        Under a workload, ``workload`` describes it and each round has ``load`` (its
        :class:`~hetsched.model.workload.LoadMetrics`; ``e2e_ms`` is the window's p95). On a real
        executor that times its phases (Ray) each round has ``phases_s`` (:attr:`Trace.phases_s`).
        """
        ref = self.reference
        return {
            "scenario": self.scenario.name,
            "policy": self.policy,
            "executor": self.executor,
            "run_id": self.run_id,
            "oracle": {"mapping": ref.mapping.to_dict(), "e2e_ms": ref.e2e_ms} if ref is not None and ref.exact
            else None,
            "reference": None if ref is None else ref.to_dict(),
            "deploy": None if self.deploy is None else self.deploy.to_dict(),
            "cards": self.learned.to_dict(),
            "notes": list(self.notes),
            "rounds": [
                {**r.outcome.to_dict(), **({"load": r.trace.load.to_dict()} if r.trace.load is not None else {}),
                 **({"phases_s": dict(r.trace.phases_s)} if r.trace.phases_s else {})}
                for r in self.rounds
            ],
            **({"workload": {**self.scenario.workload.model_dump(mode="json"),
                             "describe": self.scenario.workload.describe()}}
               if self.scenario.workload is not None else {}),
        }


Recorder = Callable[[RoundRecord], None]


def run_rounds(
    scenario: Scenario,
    policy: Policy,
    config: LoopConfig = LoopConfig(),
    executor: Executor | None = None,
    recorder: Recorder | None = None,
    history: Sequence[RoundRecord] = (),
    planner: Planner | None = None,
    prior: Prior | None = None,
) -> RunResult:
    """Run ``config.rounds`` rounds of ``policy`` on ``scenario`` (continuing ``history``).

    ``executor`` defaults to the noisy simulator; ``planner`` (the model's noise-free
    predictions handed to the policy) to the simulator's. Nothing is recorded unless a
    ``recorder`` is given. To record into the run store (what ``hetsched run`` does, so that
    ``hetsched runs``/``show-run``/``--resume`` see the run), call :func:`run_recorded` instead::

        from hetsched.model import RunKey
        from hetsched.store import RunStore

        with RunStore() as store:  # or RunStore("runs.sqlite"); default: $HETSCHED_STORE, else the user data dir
            result = run_recorded(RunKey(scenario, "agentic", options={"decider": "rules"}, rounds=5),
                                  store=store)
        print(result.run_id)  # continue an interrupted one with continue_run(store, run_id)

    ``prior`` (a warm start, :mod:`hetsched.warm`): round 0 proposes its mapping, the policy reads
    its rounds before the run's own, and plans with its measured cards when it has them.

    Each proposal and
    probe is validated against the scenario (a malformed mapping from a policy is a bug and
    raises :class:`~hetsched.model.MappingError`); statically infeasible ones are recorded with
    their reason and not executed.
    """
    executor = executor or make_executor(SIM, scenario)
    planned = scenario if prior is None or not prior.cards else scenario.model_copy(update={"cards": prior.cards})
    planner = planner or SimPlanner(planned)
    rounds: list[RoundRecord] = list(history)
    ctx = PolicyContext(scenario=planned, seed=config.seed, rounds=config.rounds, planner=planner,
                        probes=config.max_probes_per_round > 0, measured=executor.name != SIM.name)
    policy.reset(ctx)
    result = RunResult(scenario, policy.name, rounds, executor=executor.name)
    # a continued history may end exactly where the uninterrupted run would have stopped early
    if rounds and config.stop_after and _stable(rounds, config.stop_after) and policy.converged(seen(prior, rounds)):
        return result
    while len(rounds) < config.rounds:
        r = len(rounds)
        started = time.perf_counter()
        executing = [0.0]  # seconds spent in the executor this round (not the decision's)
        read = seen(prior, rounds)
        probes = _probe(scenario, policy, executor, read, config, r, executing)
        monitor: Monitor | None = policy.monitor
        observations = None if monitor is None else monitor.observe(read, probes)
        proposal: Proposal
        if r == 0 and prior is not None and prior.mapping is not None:
            proposal = Proposal(prior.mapping, rationale=f"warm start: {prior.why}")
        else:
            proposal = policy.propose(read, probes, observations)
        mapping = scenario.validate_mapping(proposal.mapping, where=f"policy {policy.name!r} round {r}")
        trace = _execute(scenario, executor, mapping, round_seed(config.seed, r), executing)
        decision_ms = max(0.0, (time.perf_counter() - started - executing[0]) * 1000.0)
        record = RoundRecord(round=r, proposal=proposal, trace=trace, probes=probes, decision_ms=decision_ms)
        rounds.append(record)
        if recorder is not None:
            recorder(record)
        if config.stop_after and _stable(rounds, config.stop_after) and policy.converged(seen(prior, rounds)):
            break
    return result


def seen(prior: Prior | None, rounds: Sequence[RoundRecord]) -> Sequence[RoundRecord]:
    """What the policy reads: a warm start's rounds, then the run's own, numbered in order."""
    if prior is None or not prior.rounds:
        return rounds
    k = len(prior.rounds)
    return [*prior.rounds, *(replace(r, round=r.round + k) for r in rounds)]


def _probe(
    scenario: Scenario, policy: Policy, executor: Executor, rounds: Sequence[RoundRecord], config: LoopConfig, r: int,
    executing: list[float],
) -> tuple[Probe, ...]:
    """Execute the what-if probes the policy asks for before round ``r``'s decision."""
    probes: list[Probe] = []
    while len(probes) < config.max_probes_per_round:
        request = policy.next_probe(rounds, tuple(probes))
        if request is None:
            break
        mapping = scenario.validate_mapping(request.mapping, where=f"{request.kind} probe")
        trace = _execute(scenario, executor, mapping, round_seed(config.seed, r, len(probes)), executing)
        probes.append(Probe(kind=request.kind, base=request.base, trace=trace, note=request.note))
    return tuple(probes)


def _execute(scenario: Scenario, executor: Executor, mapping: Mapping, seed: int, executing: list[float]) -> Trace:
    """Check, then execute ``mapping``, adding the executor's wall time to ``executing[0]``."""
    refused = scenario.infeasibility(mapping)
    if refused is not None:  # never hand an OOM mapping to a real executor
        return Trace.refused(mapping, refused, vram_budget_mb=scenario.machine.vram_budget_mb, seed=seed,
                             executor=executor.name)
    t0 = time.perf_counter()
    try:
        if scenario.workload is not None:  # a round is a window of requests under the mapping
            return run_window(executor, mapping, scenario.workload, seed=seed)
        return executor.run(mapping, seed=seed)
    finally:
        executing[0] += time.perf_counter() - t0


def _stable(rounds: Sequence[RoundRecord], k: int) -> bool:
    if len(rounds) < k:
        return False
    last = rounds[-1].mapping
    return all(r.mapping == last for r in rounds[-k:])


# ---------------------------------------------------------------------------- the run store
def run_key(
    scenario: Scenario,
    policy: str,
    config: LoopConfig = LoopConfig(),
    *,
    options: dict[str, Any] | None = None,
    executor: ExecutorSpec = SIM,
    experiment: str = "",
) -> RunKey:
    """The :class:`~hetsched.model.RunKey` of a run driven with ``config`` (every one of its fields)."""
    return RunKey(scenario=scenario, policy=policy, options=dict(options or {}), config=config, executor=executor,
                  experiment=experiment)


def run_recorded(
    key: RunKey,
    policy: Policy | None = None,
    *,
    store: RunStore,
    executor: Executor | None = None,
    recorder: Recorder | None = None,
) -> RunResult:
    """Create the run ``key`` in ``store`` and drive it to the end, writing each round as it completes.

    ``policy`` defaults to ``make_policy(key.policy, **key.options)`` (give it when its options
    are not JSON, e.g. a decider object); ``executor`` to ``make_executor(key.executor)``. On any
    exception (Ctrl-C included) the run is marked ``interrupted`` and the exception propagates;
    the rounds already done stay stored.
    """
    if policy is not None and policy.name != key.policy:
        raise InputError(f"run key names policy {key.policy!r}, but the policy given is {policy.name!r}")
    run_id = store.create_run(key)
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

    The policy is rebuilt from the stored name and options unless given, and the executor from
    the stored :class:`~hetsched.model.ExecutorSpec` unless given (then its name must match).
    ``rounds`` changes the planned rounds (not below the rounds done). The same scenario, seed
    and early-stop setting are used, so the rounds equal those of an uninterrupted run. A
    finished run is returned as stored (nothing runs).
    """
    info = store.run(run_id)
    run_id = info.id
    if info.live_elsewhere:
        raise RunBusyError(
            f"run {run_id} is being driven by process {info.pid} on {info.host}; wait for it or stop it first"
        )
    key = store.key(run_id)
    history = store.rounds(run_id)
    planned = key.rounds
    if rounds is not None and rounds != planned:
        if rounds < len(history):
            raise InputError(f"run {run_id} already has {len(history)} rounds; rounds must be >= {len(history)}, "
                             f"got {rounds}")
        store.set_rounds_planned(run_id, rounds)
        planned = rounds
    options = dict(key.options)
    warm_runs = options.pop(WARM_START_OPTION, None)
    if policy is None:
        policy = make_policy(key.policy, **options)
    elif policy.name != key.policy:
        raise InputError(f"run {run_id} was made by policy {key.policy!r}; cannot continue it with {policy.name!r}")
    if executor is not None and executor.name != key.executor.name:
        raise InputError(
            f"run {run_id} was executed by {key.executor.name!r}; cannot continue it with {executor.name!r}"
        )
    config = replace(key.config, rounds=planned)  # every stored loop setting, the planned rounds updated
    store.claim(run_id)
    write = store.recorder(run_id)

    def record(r: RoundRecord) -> None:
        write(r)  # stored first: a failing extra recorder cannot lose the round
        if recorder is not None:
            recorder(r)

    own = executor is None
    try:
        if executor is None:
            executor = make_executor(key.executor, key.scenario)
        prior = None if not warm_runs else prior_from_runs(store, key.scenario, list(warm_runs),
                                                           executor=key.executor.name)
        result = run_rounds(key.scenario, policy, config, executor=executor, recorder=record, history=history,
                            prior=prior)
    except BaseException as exc:
        _mark_interrupted(store, run_id, exc)
        raise
    finally:
        if own and executor is not None:
            executor.close()
    stopped_early = len(result.rounds) < planned
    store.set_status(run_id, "finished", f"converged after {len(result.rounds)} rounds" if stopped_early else "")
    result.run_id = run_id
    return result


def _mark_interrupted(store: RunStore, run_id: str, exc: BaseException) -> None:
    """Record why a run stopped; a failure to record is attached to the original exception. A second
    Ctrl-C meanwhile waits until it is recorded (else the run would stay ``running``)."""
    reason = type(exc).__name__ + (f": {exc}" if str(exc) else "")
    try:
        with ctrl_c_deferred():
            store.set_status(run_id, "interrupted", reason[:500])
    except (StoreError, sqlite3.Error) as store_exc:
        exc.add_note(f"run {run_id} could not be marked interrupted in {path_text(store.path)}: {store_exc}")


def ensure_run(store: RunStore, key: RunKey, executor: Executor | None = None) -> tuple[str, str]:
    """The bench's unit of work: make sure the run ``key`` is finished in ``store``, and return
    ``(run_id, how)``.

    ``how`` is ``reused`` (finished before: nothing runs, nothing is loaded), ``resumed`` (an
    interrupted run continued) or ``ran`` (started: none existed, or the one found is being
    driven by a live process elsewhere). Safe to call again after a crash: nothing finished is
    re-run. ``executor`` (built for ``key.executor`` and ``key.scenario``) is used instead of a new
    one, so a caller running many runs on a real executor starts its workers once.
    """
    built = make_policy(key.policy, **policy_options(key.options))
    key = replace(key, policy=built.name)
    found = store.find_run(key)
    if found is not None and found.status == "finished" and found.rounds_done > 0:
        return found.id, "reused"
    if found is not None and not found.live_elsewhere:
        try:
            continue_run(store, found.id, policy=built, executor=executor)
            return found.id, "resumed"
        except RunBusyError:  # another process claimed it first: leave it to that process
            built = make_policy(key.policy, **policy_options(key.options))
    result = run_recorded(key, built, store=store, executor=executor)
    assert result.run_id is not None
    return result.run_id, "ran"


def load_result(store: RunStore, run_id: str) -> RunResult:
    """A stored run as a :class:`RunResult` (for reports), with the reference stored for it, if any."""
    stored = store.load(run_id)
    info = stored.info
    return RunResult(stored.scenario, info.policy, stored.rounds, run_id=info.id, executor=info.executor.name,
                     reference=info.reference)
