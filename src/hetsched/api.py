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
from dataclasses import replace
from pathlib import Path
from typing import Any

from hetsched.exec import Executor, make_executor
from hetsched.loop import WARM_START_OPTION, LoopConfig, Recorder, RunResult, continue_run, run_rounds
from hetsched.model import ExecutorSpec, InputError, Reference, RoundRecord, RunKey, Scenario, ToolCard
from hetsched.model.files import load_scenario
from hetsched.model.workload import Workload
from hetsched.policies import Policy, make_policy
from hetsched.store import RunStore
from hetsched.warm import prior_for

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


OnStart = Callable[[str, RunStore], None]
"""Called with the run id and its store once the run is recorded, before its first round."""


def with_secret(options: dict[str, Any], api_key: str | None, reach: dict[str, Any] | None = None) -> Policy | None:
    """The agentic policy with an LLM API key (never stored, never put in the environment) and
    connection settings (``timeout_s``, ``retries``: how to reach the server, not what the run is)
    given in code, or None when there is neither or the decider is no LLM."""
    from hetsched.policies.decider_registry import LLM_DECIDERS

    if api_key is None and not reach:
        return None
    if str(options.get("decider", "rules")).strip().lower() not in LLM_DECIDERS:
        return None
    from hetsched.policies.agentic import Agentic

    llm = {**(options.get("llm") or {}), **(reach or {})}
    if api_key is not None:
        llm["api_key"] = api_key
    from hetsched.llm import resolve_llm_config

    rest = {k: v for k, v in options.items() if k != "llm"}
    return Agentic(llm=resolve_llm_config(llm), **rest)


def run(
    scenario: Scenario | str | Path | Any,
    policy: str | Policy = "agentic",
    *,
    rounds: int = 20,
    seed: int = 0,
    stop_after: int = 0,
    max_probes_per_round: int | None = None,
    options: dict[str, Any] | None = None,
    executor: str | ExecutorSpec = "sim",
    executor_options: dict[str, Any] | None = None,
    running: Executor | None = None,
    store: str | Path | RunStore | bool | None = None,
    experiment: str = "",
    on_start: OnStart | None = None,
    on_round: OnRound | None = None,
    on_rounds_done: Callable[[], None] | None = None,
    reference: str = "none",
    max_seconds: float | None = None,
    llm_api_key: str | None = None,
    warm_start: bool = False,
    workload: Workload | None = None,
) -> RunResult:
    """Run ``rounds`` rounds of ``policy`` on ``scenario`` and return the result.

    ``store``: a path or :class:`~hetsched.store.RunStore` (None: the default store) records every
    round as it completes (continue an interrupted run with :func:`resume`); False records nothing.
    ``executor``: ``sim`` (default), ``local``, ``ray``, ``inproc`` or an ExecutorSpec, with
    ``executor_options``; ``running``: an executor already built for it (reused, not closed).
    ``reference``: compute one for the report after the run (``auto``, ``oracle``, ``best-known``;
    default ``none``) and store it with the run. ``llm_api_key`` reaches an LLM decider without
    being stored. ``on_rounds_done`` is called after the last round, before the reference. On any
    exception (Ctrl-C included) the stored run is marked interrupted and keeps
    its rounds. ``warm_start`` (an adaptive policy, a store): start from what the store measured of
    the same workflow or its tools (:mod:`hetsched.warm`); the runs it came from are recorded with
    the run (option ``warm_start``), so a resumed run rebuilds the same prior. ``workload``
    (:class:`~hetsched.model.workload.Workload`): each round runs a window of requests under the
    round's mapping (in place of the scenario's own ``workload:``; it is stored with the scenario);
    a round's E2E is then the window's p95 latency and ``round.trace.load`` holds its metrics.
    """
    sc = _scenario(scenario)
    if workload is not None:
        sc = sc.with_workload(workload)
    opts = dict(options or {})
    pol: Policy
    if isinstance(policy, Policy):
        pol = policy
    else:
        secret = with_secret(opts, llm_api_key) if policy.strip().lower() == "agentic" else None
        pol = secret or make_policy(policy, **opts)
    config = LoopConfig(rounds=rounds, seed=seed, stop_after=stop_after,
                        **({} if max_probes_per_round is None else {"max_probes_per_round": max_probes_per_round}))
    spec = executor if isinstance(executor, ExecutorSpec) else ExecutorSpec(executor, executor_options or {})
    ex = running if running is not None else make_executor(spec, sc)
    try:
        if store is False:
            result = run_rounds(sc, pol, config, executor=ex, recorder=on_round)
        else:
            key = RunKey(scenario=sc, policy=pol.name, options=opts if not isinstance(policy, Policy) else {},
                         config=config, executor=spec, experiment=experiment)
            st, own_store = _store(store)
            try:
                if warm_start and pol.adaptive:
                    prior = prior_for(st, sc, executor=spec.name)
                    if prior is not None:
                        key = replace(key, options={**key.options, WARM_START_OPTION: list(prior.runs)})
                # the same run tried before that recorded no round (its LLM server never answered, Ctrl-C in
                # round 1) is continued, so failed attempts leave one empty run, not one each
                empty = st.find_run(key)
                if empty is not None and empty.rounds_done == 0 and not empty.live_elsewhere and not empty.damage:
                    run_id = empty.id
                else:
                    run_id = st.create_run(key)
                if on_start is not None:
                    on_start(run_id, st)
                result = continue_run(st, run_id, policy=pol, executor=ex, recorder=on_round)
            finally:
                if own_store:
                    st.close()
        if on_rounds_done is not None:
            on_rounds_done()
        _add_reference(result, reference, max_seconds, store, ex)  # measured there on a real executor
    finally:
        if running is None:
            ex.close()
    return result


def resume(
    run_id: str,
    *,
    store: str | Path | RunStore | None = None,
    rounds: int | None = None,
    policy: Policy | None = None,
    running: Executor | None = None,
    on_start: OnStart | None = None,
    on_round: Recorder | None = None,
    on_rounds_done: Callable[[], None] | None = None,
    reference: str = "none",
    max_seconds: float | None = None,
    llm_api_key: str | None = None,
    llm_reach: dict[str, Any] | None = None,
) -> RunResult:
    """Continue a stored run to its planned rounds (or to ``rounds``): the same scenario, policy,
    options, executor and loop settings as it was started with (its :class:`~hetsched.model.RunKey`).

    ``llm_api_key`` and ``llm_reach`` (``timeout_s``, ``retries``) say how to reach an LLM decider's
    server this time; they are not stored. ``running``: an executor built for the stored one (reused).
    """
    st, own_store = _store(store)
    try:
        info = st.readable(run_id)
        if policy is None and (llm_api_key is not None or llm_reach):
            from hetsched.policies.decider_registry import LLM_DECIDERS

            if llm_reach and info.options.get("decider") not in LLM_DECIDERS:
                raise InputError(f"LLM timeout and retries apply to LLM deciders; run {info.id} has none")
            policy = with_secret(dict(info.options), llm_api_key, llm_reach)
        if on_start is not None:
            on_start(info.id, st)
        result = continue_run(st, info.id, policy=policy, executor=running, recorder=on_round, rounds=rounds)
    finally:
        if own_store:
            st.close()
    if on_rounds_done is not None:
        on_rounds_done()
    _add_reference(result, reference, max_seconds, store, running)
    return result


def _add_reference(result: RunResult, choice: str, max_seconds: float | None,
                   store: str | Path | RunStore | bool | None, ex: Executor | None = None) -> None:
    """Compute the report's reference (unless ``none``), lowered to the best mapping the run played when
    that is better than a best-known search's (:func:`~hetsched.search.reference.improved_by`), and store it
    with the run; on a real executor ``ex``, the reference mapping is also measured there
    (:func:`~hetsched.exec.measure.measure_reference`), so real rounds are compared with a
    measurement."""
    from hetsched.exec.measure import measure_reference
    from hetsched.search.reference import ReferenceChoice, improved_by, parse_reference_choice

    if parse_reference_choice(choice) is ReferenceChoice.NONE:
        return
    ref = reference(result.scenario, choice, max_seconds=max_seconds)
    if ref is not None:  # the best mapping known: the search's, or a better one the run played
        ref = improved_by(ref, result.scenario, (
            (m, f"this run's round {r.round}" + ("" if i is None else f" probe {i}"))
            for r in result.rounds for i, m in r.played))
    if ref is not None and ex is not None and ex.name != "sim" and result.rounds:
        ref = measure_reference(ex, ref, result.rounds, workload=result.scenario.workload)
    result.reference = ref
    if result.run_id is not None and ref is not None and store is not False:
        st, own = _store(store)
        try:
            st.set_reference(result.run_id, ref)
        finally:
            if own:
                st.close()


def reference(scenario: Scenario | str | Path | Any, choice: str = "auto", *,
              max_seconds: float | None = None) -> Reference | None:
    """The mapping reports compare against: ``auto`` (the exact oracle when its search fits
    ``max_seconds``, else a best-known mapping with its gap to a lower bound), ``oracle``,
    ``best-known`` or ``none``."""
    from hetsched.search.reference import DEFAULT_SEARCH_SECONDS, parse_reference_choice
    from hetsched.search.reference import reference as compute

    return compute(_scenario(scenario), parse_reference_choice(choice),
                   max_seconds=DEFAULT_SEARCH_SECONDS if max_seconds is None else max_seconds)


def profile(tools: Iterable[str] = (), *, size: str | None = None, runs: int = 30, device: str = "auto",
            refresh: str | Path | None = None, **config: Any) -> list[ToolCard]:
    """Profile registered tools by name on this machine and return their measured cards
    (``hetsched profile``; write them with :func:`hetsched.profiling.write_library`).

    ``refresh=FILE`` (a scenario or tool library file) re-measures FILE's cards (``tools``: only
    these; default all of them) and rewrites them in place, each with its provenance, the file's
    other content kept (``hetsched profile --refresh``); ``size`` then defaults to the preset the
    cards were profiled at, and the CPU pool to the scenario machine's ``cpu_cores``."""
    from hetsched.exec.devices import available_cores
    from hetsched.profiling import ProfileConfig, profile_tools

    names: Sequence[str] = list(tools)
    if refresh is None:
        if not names:
            raise InputError("profile: name the tools to profile, or give refresh=FILE")
        cfg = ProfileConfig(size=size or "tiny", runs=runs, device=device, **config)
        cards: list[ToolCard] = []
        for p in profile_tools(names, cfg):
            cards.append(p.card)
            cards.extend(p.derived.values())
        return cards
    from hetsched.profiling.refresh import refresh_target, write_refreshed

    target = refresh_target(refresh, names)
    if "cpu_threads" not in config and target.cpu_cores is not None:
        config["cpu_threads"] = min(target.cpu_cores, len(available_cores()))
    cfg = ProfileConfig(size=size or target.preset, runs=runs, device=device, **config)
    fresh: list[ToolCard] = []
    for p in profile_tools(list(target.tools), cfg):
        write_refreshed(target, [p.card])
        fresh.append(p.card)
    return fresh


def _store(store: str | Path | RunStore | bool | None) -> tuple[RunStore, bool]:
    if isinstance(store, RunStore):
        return store, False
    return RunStore(None if store in (None, True) else Path(str(store))), True


__all__ = ["OnRound", "OnStart", "profile", "reference", "resume", "run", "with_secret"]
