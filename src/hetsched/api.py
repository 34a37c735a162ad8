"""The library's entry points for batch runs: :func:`run`, :func:`resume`, :func:`reference`,
:func:`profile` (``hs.run(...)``). ``hetsched run`` is a thin layer over them.

A run is described once, by a :class:`~hetsched.model.RunKey` (scenario, policy and options,
executor, and its :class:`~hetsched.model.LoopConfig`: rounds, seed, early stop, probe cap);
:func:`run` builds it from keywords, records it in the run store (unless ``store=False``) and
drives it round by round, calling ``on_round`` as each one completes. Secrets (an LLM API key)
are handed to the policy object, never to the environment and never to the store.

Imports the loop, the session's warm start, the store, the executors, the policies and the
simulator's reference; never the CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from hetsched.exec import Executor, make_executor
from hetsched.loop import LoopConfig, Recorder, RunResult, continue_run, run_rounds
from hetsched.model import SIM, ExecutorSpec, Reference, RoundRecord, RunKey, Scenario, ToolCard
from hetsched.model.files import load_scenario
from hetsched.policies import Policy, make_policy
from hetsched.store import RunStore

OnRound = Callable[[RoundRecord], None]
"""Called with each round as soon as it is recorded (progress, streaming output)."""


def _scenario(scenario: Scenario | str | Path | Any) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, str | Path):
        return load_scenario(scenario)
    build = getattr(scenario, "scenario", None)  # a hetsched.Workflow builder
    if callable(build):
        result = build()
        if isinstance(result, Scenario):
            return result
    raise TypeError(f"scenario must be a Scenario, a hetsched.Workflow, or a scenario file or bundled name, "
                    f"got {scenario!r}")


def with_secret(options: dict[str, Any], api_key: str | None) -> Policy | None:
    """The agentic policy built with an LLM API key given in code (never stored), or None when no key."""
    if api_key is None:
        return None
    from hetsched.llm import resolve_llm_config
    from hetsched.policies.agentic import Agentic

    llm = resolve_llm_config({**(options.get("llm") or {}), "api_key": api_key})
    rest = {k: v for k, v in options.items() if k != "llm"}
    return Agentic(llm=llm, **rest)


def run(
    scenario: Scenario | str | Path | Any,
    policy: str | Policy = "agentic",
    *,
    rounds: int = 20,
    seed: int = 0,
    stop_after: int = 0,
    max_probes_per_round: int | None = None,
    options: dict[str, Any] | None = None,
    executor: str | ExecutorSpec | Executor = "sim",
    executor_options: dict[str, Any] | None = None,
    store: str | Path | RunStore | bool | None = None,
    experiment: str = "",
    on_round: OnRound | None = None,
    llm_api_key: str | None = None,
) -> RunResult:
    """Run ``rounds`` rounds of ``policy`` on ``scenario`` and return the result.

    ``store``: a path or :class:`~hetsched.store.RunStore` (None: the default store) records every
    round as it completes (continue an interrupted run with :func:`resume`); False records nothing.
    ``executor``: ``sim`` (default), ``local``, ``ray``, ``inproc``, an ExecutorSpec, or an Executor
    (then the caller closes it). ``llm_api_key`` reaches an LLM decider without being stored.
    """
    sc = _scenario(scenario)
    opts = dict(options or {})
    pol: Policy
    if isinstance(policy, Policy):
        pol = policy
    else:
        secret = with_secret(opts, llm_api_key) if policy.strip().lower() == "agentic" else None
        pol = secret or make_policy(policy, **opts)
    config = LoopConfig(rounds=rounds, seed=seed, stop_after=stop_after,
                        **({} if max_probes_per_round is None else {"max_probes_per_round": max_probes_per_round}))
    own = not isinstance(executor, Executor)
    if isinstance(executor, str | ExecutorSpec):
        spec = executor if isinstance(executor, ExecutorSpec) else ExecutorSpec(executor, executor_options or {})
        ex: Executor = make_executor(spec, sc)
    else:
        spec, ex = ExecutorSpec(executor.name, {}), executor
    try:
        if store is False:
            return run_rounds(sc, pol, config, executor=ex, recorder=on_round)
        key = RunKey(scenario=sc, policy=pol.name, options=opts if not isinstance(policy, Policy) else {},
                     config=config, executor=spec, experiment=experiment)
        st, own_store = _store(store)
        try:
            run_id = st.create_run(key)
            return continue_run(st, run_id, policy=pol, executor=ex, recorder=on_round)
        finally:
            if own_store:
                st.close()
    finally:
        if own:
            ex.close()


def resume(
    run_id: str,
    *,
    store: str | Path | RunStore | None = None,
    rounds: int | None = None,
    policy: Policy | None = None,
    executor: Executor | None = None,
    on_round: Recorder | None = None,
    llm_api_key: str | None = None,
) -> RunResult:
    """Continue a stored run to its planned rounds (or to ``rounds``): the same scenario, policy,
    options, executor and loop settings as it was started with (its :class:`~hetsched.model.RunKey`)."""
    st, own_store = _store(store)
    try:
        if policy is None and llm_api_key is not None:
            key = st.key(run_id)
            policy = with_secret(dict(key.options), llm_api_key)
        return continue_run(st, run_id, policy=policy, executor=executor, recorder=on_round, rounds=rounds)
    finally:
        if own_store:
            st.close()


def reference(scenario: Scenario | str | Path | Any, choice: str = "auto", *,
              max_seconds: float | None = None) -> Reference | None:
    """The mapping reports compare against: ``auto`` (the exact oracle when its search fits
    ``max_seconds``, else a best-known mapping with its gap to a lower bound), ``oracle``,
    ``best-known`` or ``none``."""
    from hetsched.sim.reference import DEFAULT_SEARCH_SECONDS, parse_reference_choice
    from hetsched.sim.reference import reference as compute

    return compute(_scenario(scenario), parse_reference_choice(choice),
                   max_seconds=DEFAULT_SEARCH_SECONDS if max_seconds is None else max_seconds)


def profile(tools: Iterable[str], *, size: str = "tiny", runs: int = 30, device: str = "auto",
            **config: Any) -> list[ToolCard]:
    """Profile registered tools by name on this machine and return their measured cards
    (``hetsched profile``; write them with :func:`hetsched.profile.write_library`)."""
    from hetsched.profile import ProfileConfig, profile_tools

    names: Sequence[str] = list(tools)
    cfg = ProfileConfig(size=size, runs=runs, device=device, **config)
    cards: list[ToolCard] = []
    for p in profile_tools(names, cfg):
        cards.append(p.card)
        cards.extend(p.derived.values())
    return cards


def _store(store: str | Path | RunStore | bool | None) -> tuple[RunStore, bool]:
    if isinstance(store, RunStore):
        return store, False
    return RunStore(None if store in (None, True) else Path(str(store))), True


__all__ = ["OnRound", "profile", "reference", "resume", "run", "with_secret"]

_ = SIM  # the default executor's spec (re-exported by hetsched.model)
