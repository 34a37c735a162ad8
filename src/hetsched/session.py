"""An online placement session: each real request a workflow serves is one round of the loop.

:class:`Session` owns a scenario, its tools, an executor (in-process by default; local, Ray or
the simulator), a policy (agentic by default) and a run store. :meth:`Session.submit` runs one
request: its inputs reach the source nodes, the sink outputs come back, and the request is a
round (probes if this request is sampled for exploration -> the monitor observes -> the policy
proposes -> the static check and the planner -> execute -> record). :meth:`Session.begin_request`
lets another runtime (LangGraph) drive a request node by node on the in-process executor.

Requests overlap. On the in-process executor, requests submitted from several threads (and
requests driven node by node) run at once, as a service's requests do (docs/simulator.md "Under
load" is the model of it): they share the CPU pool and the device; a ``gpu_now`` tool is loaded
once and serves every request's calls (concurrent calls share it); ``gpu_queue`` nodes of every
request wait in the device's one FIFO queue, admitted when their VRAM fits beside everything held.
``max_in_flight`` caps the requests running at once (1: one at a time, in arrival order; the local,
Ray and simulator executors always run a session's requests one at a time). Decisions:

- the *mapping in force* (:attr:`Session.mapping`) is what every request that starts while it is in
  force runs under; the policy's next proposal is taken by the first request that starts after
  ``window`` requests (default 1) have finished since the last decision, from every round recorded
  by then. A request is recorded as the next round when it finishes (rounds are numbered in the
  order requests finish; its seed and exploration draw come from its arrival index);
- a mapping change never takes a tool from a running request: a GPU request starts only when the
  GPU requests in flight place the same tools ``gpu_now`` (or none is in flight), so a change of
  the resident tools waits until the requests using them have drained, then unloads the tools
  moved off ``gpu_now`` and loads the new ones; requests whose mapping keeps every queued node
  within the budget beside its resident tools overlap freely, while one whose queued node needs a
  resident tool's room (``load_infeasibility``'s rule) runs with no other GPU request in flight,
  under the one-request rules.

Guarantees (docs/python.md "Sessions"):

- no request runs a mapping that fails the scenario's static check or the planner's noise-free
  check: such a proposal is replaced by the best measured feasible mapping (all-CPU before any)
  and the round says so;
- exploration on live traffic is the user's choice (:class:`Explore`): off, probes on a sampled
  share of requests, or probes while the session is idle; each response reports what its
  exploration cost (``probe_ms``, ``waited_ms``);
- a tool that raises fails that request with :class:`~hetsched.exec.inproc.ToolError` (recorded
  as a ``tool_error`` round); the session and the requests in flight beside it go on (a resident
  tool it used is unloaded once no request in flight uses it: its state may be damaged);
- within a request independent nodes run in parallel;
- every round is written to the run store before ``submit`` returns; a session opened again with
  the same ``name`` and store (in any process) continues from the stored rounds; ``close`` waits
  for the requests in flight (``close(timeout=...)`` fails and records the node-by-node requests
  still open after the timeout);
- a node-by-node request whose handle is dropped unfinished never holds the session: when the handle
  is garbage-collected the request is ended, recorded as an ``abandoned`` round (not a ``tool_error``: no
  tool failed, and the monitor takes it as no evidence against its mapping) and its place let go.

Imports the model, the executors, the policies, the simulator's planner, the store and the loop's
helpers (it sits beside the loop, above everything it drives).
"""

from __future__ import annotations

import gc
import inspect
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Mapping as MappingABC
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from hetsched.builder import Workflow, tools_of
from hetsched.exec import Executor, make_executor
from hetsched.exec.inproc import InProcessExecutor, Request, RequestResult, ToolError
from hetsched.loop import round_seed
from hetsched.model import (
    ExecutorSpec,
    InfeasibleKind,
    InputError,
    Mapping,
    Placement,
    Probe,
    Proposal,
    RoundRecord,
    RunKey,
    Scenario,
    Trace,
)
from hetsched.model.files import load_scenario
from hetsched.policies import Policy, PolicyContext, make_policy
from hetsched.search.reference import SimPlanner
from hetsched.store import RunBusyError, RunStore
from hetsched.tools.base import Tool
from hetsched.tools.functions import ToolSpec

SESSION_ROUNDS = 1_000_000_000
"""Rounds planned for a session's run (a session is open-ended; its run stays ``running``)."""
EXPLORE_MODES = ("off", "sampled", "idle")
"""Accepted :attr:`Explore.mode` values."""


@dataclass(frozen=True)
class Explore:
    """How much exploration (what-if probes) a session spends on live traffic.

    - ``off``: no probes; the policy learns from the requests themselves only;
    - ``sampled``: a request is chosen with probability ``share`` (seeded) and runs up to
      ``probes_per_request`` probes (extra executions of the workflow on its inputs, outputs
      discarded) before its own execution: that request pays their time (``probe_ms``);
    - ``idle``: after a request returns, a background thread runs up to ``probes_per_request``
      probes on its inputs while no request waits; a request that arrives meanwhile waits for the
      probe in flight only (reported as ``waited_ms``).
    """

    mode: str = "off"
    """``off``, ``sampled`` or ``idle``."""
    share: float = 0.1
    """``sampled``: probability that a request runs probes."""
    probes_per_request: int = 1
    """Most probes one request (or one idle period) runs."""

    def __post_init__(self) -> None:
        if self.mode not in EXPLORE_MODES:
            raise InputError(f"explore mode {self.mode!r} is not known; accepted: {', '.join(EXPLORE_MODES)}")
        if not 0.0 <= self.share <= 1.0:
            raise InputError(f"explore share must be within [0, 1], got {self.share}")
        if self.probes_per_request < 0:
            raise InputError(f"explore probes_per_request must be >= 0, got {self.probes_per_request}")


@dataclass
class Response:
    """What :meth:`Session.submit` returns for one request."""

    outputs: dict[str, Any]
    """Output of each sink node, by node id (empty on the simulator, which runs no tools)."""
    round: int
    """The round this request is in the session's run (rounds are numbered in the order requests finish)."""
    mapping: Mapping
    """The mapping it ran under."""
    trace: Trace
    """Its measured trace."""
    probe_ms: float = 0.0
    """Time this request spent running exploration probes before its own execution, ms."""
    waited_ms: float = 0.0
    """Time it waited to start: for its place among the requests in flight (``max_in_flight``, an
    idle-time probe in flight) and for its turn on the device (a change of the resident tools waiting
    for the requests using them, a mapping that runs alone), ms. Not part of ``e2e_ms``."""
    probes: int = 0
    """Probes this request ran."""
    fallback: str = ""
    """Why the policy's proposal was replaced by a safe mapping ('' when it was not)."""

    @property
    def e2e_ms(self) -> float | None:
        """The request's measured E2E, ms."""
        return self.trace.e2e_ms


class InfeasibleMappingError(InputError):
    """A request could not run (e.g. a GPU placement on an executor without a device); recorded."""

    def __init__(self, message: str, trace: Trace, round: int) -> None:
        super().__init__(message)
        self.trace, self.round = trace, round


class _Gate:
    """Who runs now: up to ``capacity`` requests at once (None: no limit), or one exclusive holder
    (an idle-time probe, ``close``); granted strictly in arrival order (tickets)."""

    def __init__(self, capacity: int | None) -> None:
        self._cond = threading.Condition()
        self._next = 0
        self._serving = 0
        self.capacity = capacity
        self.shared = 0
        """Requests holding the gate (in flight)."""
        self.exclusive = False

    def _fits(self, exclusive: bool) -> bool:
        if exclusive:
            return self.shared == 0 and not self.exclusive
        return not self.exclusive and (self.capacity is None or self.shared < self.capacity)

    def acquire(self, exclusive: bool = False, patience_s: float | None = None,
                impatient: Callable[[], None] | None = None) -> None:
        """Wait for the gate; after ``patience_s`` seconds of waiting, call ``impatient`` once (it may end
        what holds the gate) and go on waiting, keeping this caller's place."""
        with self._cond:
            ticket = self._next
            self._next += 1
            deadline = None if patience_s is None or impatient is None else time.monotonic() + patience_s
            while self._serving != ticket or not self._fits(exclusive):
                if deadline is not None and time.monotonic() >= deadline:
                    deadline = None
                    assert impatient is not None
                    impatient()
                    continue
                self._cond.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            self._serving += 1
            if exclusive:
                self.exclusive = True
            else:
                self.shared += 1
            self._cond.notify_all()

    def try_exclusive(self) -> bool:
        """Take the gate exclusively if nobody holds it or waits for it; False otherwise."""
        with self._cond:
            if self._next != self._serving or not self._fits(True):
                return False
            self.exclusive = True
            return True

    def release(self, exclusive: bool = False) -> None:
        with self._cond:
            if exclusive:
                self.exclusive = False
            else:
                self.shared -= 1
            self._cond.notify_all()

    @property
    def waiting(self) -> int:
        """Callers waiting for the gate."""
        with self._cond:
            return self._next - self._serving


def _scenario_of(workflow: Scenario | Workflow | str | Path) -> tuple[Scenario, dict[str, Tool]]:
    if isinstance(workflow, Scenario):
        return workflow, {}
    if isinstance(workflow, Workflow):
        return workflow.scenario(), workflow.implementations
    if isinstance(workflow, str | Path):
        return load_scenario(workflow), {}
    raise InputError(f"Session: workflow must be a hetsched.Workflow, a Scenario, or a scenario file or bundled "
                     f"name, got {workflow!r}")


class Session:
    """An online placement session over real requests (see the module docstring).

    Args:
        workflow: a :class:`~hetsched.builder.Workflow`, a :class:`~hetsched.model.Scenario`, or a
            scenario file / bundled scenario name.
        tools: implementations (:func:`~hetsched.tools.functions.function_tool` specs or Tool objects)
            beyond those given with the workflow's nodes; others come from the tool registry. For the
            ``local`` and ``ray`` executors they are registered by name (``register_tool``, replacing),
            since those executors look tools up there; their functions must be defined at module level.
        policy: a policy name (``agentic`` by default, with the ``rules`` decider) or a Policy object.
        policy_options: ``make_policy`` options for a policy name (JSON-ready; recorded).
        executor: ``inproc`` (default: tools in this process), ``local``, ``ray`` (a request's inputs
            reach their worker processes or tasks), ``sim`` (runs no tools), or an Executor object (then
            the caller closes it).
        executor_options: the executor's options.
        store: a run store path, a :class:`~hetsched.store.RunStore`, None for the default store
            (``$HETSCHED_STORE``, else the user data dir), or False to record nothing.
        name: the session's name: opening a session with the same name, scenario, policy, options
            and executor in the same store continues its stored rounds (None: always a new run).
        explore: how much exploration live traffic pays (:class:`Explore`; default off).
        seed: the run seed (probe sampling, simulator noise, randomized policies).
        warm_start: start a new session of an adaptive policy (agentic, ucb1) from what the store knows of
            the same workflow or its tools (:mod:`hetsched.warm`); default True.
        max_in_flight: most requests running at once (None: no limit on the in-process executor; 1 runs
            them one at a time, in arrival order; the other executors always run one at a time).
        window: the policy's next proposal is taken by the first request that starts once this many
            requests have finished since the last decision (default 1: every finished request informs
            the next decision).
    """

    def __init__(
        self,
        workflow: Scenario | Workflow | str | Path,
        *,
        tools: Iterable[ToolSpec | Tool] = (),
        policy: str | Policy = "agentic",
        policy_options: dict[str, Any] | None = None,
        executor: str | Executor = "inproc",
        executor_options: dict[str, Any] | None = None,
        store: str | Path | RunStore | bool | None = None,
        name: str | None = None,
        explore: Explore | str = Explore(),
        seed: int = 0,
        warm_start: bool = True,
        max_in_flight: int | None = None,
        window: int = 1,
    ) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise InputError(f"Session: max_in_flight must be >= 1 (or None: no limit), got {max_in_flight}")
        if window < 1:
            raise InputError(f"Session: window must be >= 1 finished requests, got {window}")
        self.scenario, impls = _scenario_of(workflow)
        impls.update(tools_of(tools))
        self.explore = explore if isinstance(explore, Explore) else Explore(mode=explore)
        self.seed = seed
        options = dict(policy_options or {})
        if isinstance(policy, Policy):
            if options:
                raise InputError("Session: policy_options apply to a policy name, not to a Policy object")
            self.policy = policy
        else:
            if policy.strip().lower() == "agentic":
                options.setdefault("decider", "rules")
            self.policy = make_policy(policy, **options)
        exec_options = dict(executor_options or {})
        self.executor: Executor
        if isinstance(executor, str):
            spec = ExecutorSpec(executor, exec_options)
            if spec.name == "inproc":
                self.executor = cast(Executor, InProcessExecutor(self.scenario, tools=impls, **exec_options))
            else:
                if impls and spec.name != "sim":
                    from hetsched.tools.registry import register_tool

                    for tool in impls.values():
                        register_tool(tool, replace=True)
                self.executor = make_executor(spec, self.scenario)
            self._own_executor = True
        else:
            spec = ExecutorSpec(executor.name, {})
            self.executor = executor
            self._own_executor = False
        if not isinstance(self.executor, InProcessExecutor):
            if max_in_flight not in (None, 1):
                if self._own_executor:
                    self.executor.close()
                raise InputError(f"Session: max_in_flight={max_in_flight} needs executor='inproc'; executor "
                                 f"{self.executor.name!r} runs a session's requests one at a time (windows of "
                                 "overlapping requests run there through hs.run(..., workload=...))")
            max_in_flight = 1
        self.max_in_flight = max_in_flight
        """Most requests running at once (None: no limit)."""
        self.window = window
        """Finished requests between two decisions of the policy."""
        self.planner = SimPlanner(self.scenario, seed=seed)
        self.policy.reset(PolicyContext(scenario=self.scenario, seed=seed, rounds=SESSION_ROUNDS,
                                        planner=self.planner, probes=self.explore.mode != "off",
                                        measured=self.executor.name != "sim"))
        self._gate = _Gate(max_in_flight)
        self._lock = threading.RLock()  # the decision, the history and the store
        self._drivers: set[int] = set()  # threads driving a request (begin_request, thread-bound)
        self._open: dict[int, _Open] = {}  # node-by-node requests in flight, by executor request id
        self._abandoned: queue.SimpleQueue[_Open | None] = queue.SimpleQueue()  # handles garbage-collected unfinished
        self._reaper: threading.Thread | None = None
        self._history: list[RoundRecord] = []
        self._pending: Proposal | None = None
        self._finished_since = 0  # requests finished since the mapping in force was decided
        self._idle_probes: list[Probe] = []
        self._idle_thread: threading.Thread | None = None
        self._idle_stop = threading.Event()
        self._last_inputs: dict[str, Any] | None = None
        self._closed = False
        self.prior: Any = None
        """What the warm start took from the store (a :class:`hetsched.warm.Prior`), or None."""
        # ---- the run store
        self._own_store = False
        self.store: RunStore | None
        if store is False:
            self.store = None
        elif isinstance(store, RunStore):
            self.store = store
        else:
            self.store = RunStore(None if store in (None, True) else Path(str(store)))
            self._own_store = True
        self.run_id: str | None = None
        """The session's run id in the store (None without a store)."""
        key = RunKey(scenario=self.scenario, policy=self.policy.name, options=options if not isinstance(
            policy, Policy) else {}, seed=seed, rounds=SESSION_ROUNDS, executor=spec,
            experiment=f"session:{name}" if name else "session")
        self.key = key
        if self.store is not None:
            found = self.store.find_run(key) if name else None
            if found is not None:
                if found.live_elsewhere:
                    raise RunBusyError(f"session {name!r} (run {found.id}) is open in process {found.pid} on "
                                       f"{found.host}; close it there first")
                self.store.claim(found.id)
                self._history = self.store.rounds(found.id)
                self.run_id = found.id
            else:
                self.run_id = self.store.create_run(key)
            self._write = self.store.recorder(self.run_id)
        self._arrivals = len(self._history)  # requests begun (their seeds and exploration draws)
        if warm_start and self.policy.adaptive and not self._history and self.store is not None:
            from hetsched.warm import prior_for

            self.prior = prior_for(self.store, self.scenario, executor=self.executor.name, exclude=self.run_id)
            if self.prior is not None and self.prior.cards:  # plan with the tools' measured behaviour
                planned = self.scenario.model_copy(update={"cards": self.prior.cards})
                self.policy.reset(PolicyContext(scenario=planned, seed=seed, rounds=SESSION_ROUNDS,
                                                planner=SimPlanner(planned, seed=seed),
                                                probes=self.explore.mode != "off",
                                                measured=self.executor.name != "sim"))

    # ------------------------------------------------------------------ state
    @property
    def rounds(self) -> list[RoundRecord]:
        """Every round (request) so far, stored ones first."""
        return list(self._history)

    @property
    def mapping(self) -> Mapping:
        """The mapping in force: the placement the next request starts under (unless it runs probes that
        change the decision)."""
        if self._closed:
            raise InputError("the session is closed")
        with self._lock:
            return self._proposal(()).mapping

    @property
    def in_flight(self) -> int:
        """Requests running now."""
        return self._gate.shared

    def best(self) -> RoundRecord | None:
        """The feasible round with the lowest measured E2E (the mapping to deploy), or None."""
        ok = [r for r in self._history if r.trace.feasible and r.trace.e2e_ms is not None and
              complete(self.scenario, r.trace)]
        return min(ok, key=lambda r: r.trace.e2e_ms or 0.0) if ok else None

    @contextmanager
    def _slot(self) -> Iterator[float]:
        """A request's place among those in flight (arrival order, at most ``max_in_flight``); yields how
        long the caller waited for it, ms."""
        if self._closed:
            raise InputError("the session is closed")
        begin = time.monotonic()
        self._gate.acquire()
        try:
            if self._closed:
                raise InputError("the session is closed")
            yield (time.monotonic() - begin) * 1000.0
        finally:
            self._gate.release()

    def _not_driving(self, what: str) -> None:
        if threading.get_ident() in self._drivers:
            raise InputError(f"{what}: this thread is driving a request (begin_request); finish() it first")

    # ------------------------------------------------------------------ deciding
    def _proposal(self, probes: tuple[Probe, ...]) -> Proposal:
        if not probes and self._pending is not None:
            return self._pending
        r = len(self._history)
        if r == 0 and self.prior is not None and self.prior.mapping is not None:
            proposal = Proposal(self.prior.mapping, rationale=f"warm start: {self.prior.why}")
        else:
            monitor = self.policy.monitor
            history = self._policy_history()
            observations = None if monitor is None else monitor.observe(history, probes)
            proposal = self.policy.propose(history, probes, observations)
        proposal = self._guard(proposal, r)
        if not probes:
            self._pending = proposal
        return proposal

    def _policy_history(self) -> list[RoundRecord]:
        """The rounds the policy reads, numbered in order: the warm-start prior's first, then the
        session's. A request that ran only part of the workflow (a conditional branch not taken, driven
        node by node) is shown as it ran: the monitor takes per-node evidence from the nodes that ran and
        E2E-level evidence only from complete traces (never a zero-length stand-in for a node)."""
        rounds = [*(self.prior.rounds if self.prior is not None else ()), *self._history]
        return [r if r.round == i else replace(r, round=i) for i, r in enumerate(rounds)]

    def _guard(self, proposal: Proposal, r: int) -> Proposal:
        """The proposal, or the best measured feasible mapping (all-CPU before any) when it cannot run."""
        mapping = self.scenario.validate_mapping(proposal.mapping, where=f"policy {self.policy.name!r} round {r}")
        refused = self.planner.infeasibility(mapping)
        if refused is None:
            return Proposal(mapping, proposal.rationale, proposal.decision, proposal.info)
        best = self.best()
        safe = best.mapping if best is not None else self.scenario.uniform(Placement.CPU)
        why = f"the policy's mapping cannot run ({refused}); ran {'the best measured' if best else 'all-CPU'} instead"
        return Proposal(safe, f"session guard: {why}", proposal.decision, {**proposal.info, "session_guard": why})

    def _inputs(self, value: Any, inputs: MappingABC[str, Any] | None) -> dict[str, Any]:
        sources = self.scenario.workflow.sources
        if inputs is not None:
            unknown = [k for k in inputs if k not in sources]
            if unknown:
                raise InputError(f"submit: inputs for {unknown}, which are not source nodes; source nodes: "
                                 f"{list(sources)}")
            return dict(inputs)
        if value is None:
            return {}
        return {s: value for s in sources}

    # ------------------------------------------------------------------ executing
    def _execute(self, mapping: Mapping, inputs: dict[str, Any], seed: int) -> RequestResult:
        ex = self.executor
        refused = self.scenario.infeasibility(mapping)
        if refused is not None:  # never reached through the guard; kept as the last line of defence
            return RequestResult(Trace.refused(mapping, refused, vram_budget_mb=self.scenario.machine.vram_budget_mb,
                                               seed=seed, executor=ex.name))
        if isinstance(ex, InProcessExecutor):
            return ex.run_request(mapping, inputs, seed)
        # inputs: submit checked that this executor's run takes them
        trace = ex.run(mapping, seed=seed, inputs=inputs) if inputs else ex.run(mapping, seed=seed)  # type: ignore[call-arg]
        outputs = dict(getattr(ex, "last_outputs", {}) or {}) if trace.feasible else {}
        error = None
        if not trace.feasible and trace.kind is not None and trace.kind.value in ("tool_error", "timeout", "oom"):
            error = ToolError(trace.reason, trace=trace)
        return RequestResult(trace, outputs, error)

    def _run_probes(self, inputs: dict[str, Any], r: int, limit: int, stop: threading.Event | None = None
                    ) -> list[Probe]:
        probes: list[Probe] = []
        while len(probes) < limit and (stop is None or not stop.is_set()):
            with self._lock:
                request = self.policy.next_probe(self._policy_history(), tuple(probes))
            if request is None:
                break
            mapping = self.scenario.validate_mapping(request.mapping, where=f"{request.kind} probe")
            if self.planner.infeasibility(mapping) is not None:
                trace = Trace.refused(mapping, self.planner.infeasibility(mapping),  # type: ignore[arg-type]
                                      vram_budget_mb=self.scenario.machine.vram_budget_mb, executor=self.executor.name)
            else:
                trace = self._execute(mapping, inputs, round_seed(self.seed, r, len(probes))).trace
            probes.append(Probe(kind=request.kind, base=request.base, trace=trace, note=request.note))
        return probes

    def submit(self, value: Any = None, *, inputs: MappingABC[str, Any] | None = None) -> Response:
        """Run one request: ``value`` goes to every source node (or give ``inputs={source: value}``;
        ``None``: the sources get no input, as in a batch round);
        returns the sinks' outputs with the round's record. A tool that raises raises
        :class:`~hetsched.exec.inproc.ToolError` (the round is recorded; the session goes on)."""
        self._not_driving("submit")
        given = self._inputs(value, inputs)
        if given and not isinstance(self.executor, InProcessExecutor) and self.executor.name != "sim" and \
                "inputs" not in inspect.signature(self.executor.run).parameters:
            raise InputError(f"executor {self.executor.name!r} runs source nodes without inputs; a request's inputs "
                             "reach the tools with executor='inproc', 'local' or 'ray' (submit() with no value runs "
                             "the workflow as is)")
        self._stop_idle()
        with self._slot() as waited_ms:
            with self._lock:
                k = self._arrivals
                self._arrivals += 1
                probes = tuple(self._idle_probes)
                self._idle_probes = []
            probe_ms = 0.0
            if self.explore.mode == "sampled" and self.explore.probes_per_request > 0 and \
                    random.Random(round_seed(self.seed, k, -2)).random() < self.explore.share:
                begin = time.monotonic()
                sampled = self._run_probes(given, k, self.explore.probes_per_request)
                probes += tuple(sampled)
                probe_ms = (time.monotonic() - begin) * 1000.0 if sampled else 0.0
            with self._lock:
                proposal = self._proposal(probes)
            result = self._execute(proposal.mapping, given, round_seed(self.seed, k))
            with self._lock:
                r = self._commit(proposal, result.trace, probes)
                self._last_inputs = given
        self._start_idle()
        if result.error is not None:
            result.error.round = r
            raise result.error
        if not result.trace.feasible:
            raise InfeasibleMappingError(f"request {r} could not run: {result.trace.reason}", result.trace, r)
        return Response(outputs=result.outputs, round=r, mapping=proposal.mapping, trace=result.trace,
                        probe_ms=probe_ms, waited_ms=waited_ms + result.start_wait_ms, probes=len(probes),
                        fallback=str(proposal.info.get("session_guard", "")))

    def _commit(self, proposal: Proposal, trace: Trace, probes: tuple[Probe, ...]) -> int:
        """Record a finished request as the next round (caller holds the lock); returns its round."""
        r = len(self._history)
        record = RoundRecord(round=r, proposal=proposal, trace=trace, probes=probes)
        if self.store is not None:
            self._write(record)  # stored before the caller hears of it
        self._history.append(record)
        self._finished_since += 1
        if self._finished_since >= self.window:  # the next request to start gets a fresh decision
            self._pending = None
            self._finished_since = 0
        return r

    # ------------------------------------------------------------------ idle exploration
    def _start_idle(self) -> None:
        if self._closed or self.explore.mode != "idle" or self.explore.probes_per_request == 0 or \
                self._last_inputs is None:
            return
        if self.policy.monitor is None and type(self.policy).next_probe is Policy.next_probe:
            return
        self._idle_stop.clear()
        self._idle_thread = threading.Thread(target=self._idle, name="hetsched-idle-probes", daemon=True)
        self._idle_thread.start()

    def _stop_idle(self) -> None:
        self._idle_stop.set()

    def _idle(self) -> None:
        if self._idle_stop.is_set() or self._closed or not self._gate.try_exclusive():
            return  # a request is in flight or waiting: not idle
        try:
            if self._idle_stop.is_set() or self._last_inputs is None:
                return
            probes = self._run_probes(self._last_inputs, self._arrivals, self.explore.probes_per_request,
                                      self._idle_stop)
            with self._lock:
                self._idle_probes = probes
                self._pending = None
        finally:
            self._gate.release(exclusive=True)

    # ------------------------------------------------------------------ node by node
    def begin_request(self, *, thread_bound: bool = True) -> RequestHandle:
        """Start a request another runtime drives node by node (in-process executor only), under the
        mapping in force; it counts among the requests in flight (``max_in_flight``) until
        :meth:`RequestHandle.finish` (or the ``with`` block ends), and overlaps with the others.

        ``thread_bound=False`` for a driver that hops threads (asyncio's ``to_thread``): the request is
        then not tied to the calling thread, so a pool thread that began it may begin the next one
        instead of being told it is already driving a request."""
        if not isinstance(self.executor, InProcessExecutor):
            raise InputError(f"begin_request drives nodes in this process; it needs executor='inproc', not "
                             f"{self.executor.name!r} (use submit() there)")
        self._not_driving("begin_request")
        self._stop_idle()
        if self._closed:
            raise InputError("the session is closed")
        begin = time.monotonic()
        self._gate.acquire()
        try:
            if self._closed:
                raise InputError("the session is closed")
            with self._lock:
                k = self._arrivals
                self._arrivals += 1
                probes = tuple(self._idle_probes)
                self._idle_probes = []
                proposal = self._proposal(probes)
            request = self.executor.begin(proposal.mapping, round_seed(self.seed, k))
            request.start()
        except BaseException:
            self._gate.release()
            raise
        thread = threading.get_ident() if thread_bound else None
        if thread is not None:
            self._drivers.add(thread)
        state = _Open(request, proposal, probes, thread)
        with self._lock:
            self._open[request.id] = state
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, name="hetsched-abandoned-requests", daemon=True)
                self._reaper.start()
        handle = RequestHandle(self, state, (time.monotonic() - begin) * 1000.0)
        # a handle dropped unfinished (its driver raised, an asyncio task was cancelled) is ended when it is
        # garbage-collected: SimpleQueue.put is safe in a weakref callback; the reaper thread does the rest
        state.finalizer = weakref.finalize(handle, _dropped, self._drivers, self._abandoned, state)
        state.finalizer.atexit = False
        return handle

    def _end(self, state: _Open, why: str | None = None) -> bool:
        """End a node-by-node request (its handle's :meth:`RequestHandle.finish`, or the session's
        ``why``: it fails the request with that reason first) and record it as the next round; False
        when it had already ended."""
        with self._lock:
            if state.done:
                return False
            state.done = True
            state.ended_by = why or ""
        if state.finalizer is not None:
            state.finalizer.detach()
        try:
            if why is not None and state.request.failure is None:
                state.request.fail(why, InfeasibleKind.ABANDONED)
            trace = state.request.finish()
            with self._lock:
                state.trace = trace
                state.round = self._commit(state.proposal, trace, state.probes)
        finally:
            with self._lock:
                self._open.pop(state.request.id, None)
            if state.thread is not None and why != ABANDONED:  # (a dropped handle's thread was let go at once)
                self._drivers.discard(state.thread)
            self._gate.release()
        return True

    def _reap(self) -> None:
        """The reaper thread: ends the requests whose handles were garbage-collected unfinished."""
        while (state := self._abandoned.get()) is not None:
            self._end(state, ABANDONED)

    def _reap_now(self) -> None:
        """End, in this thread, the abandoned requests the reaper has not taken yet."""
        while True:
            try:
                state = self._abandoned.get_nowait()
            except queue.Empty:
                return
            if state is None:  # the reaper's stop: put it back for it
                self._abandoned.put(None)
                return
            self._end(state, ABANDONED)

    # ------------------------------------------------------------------ closing
    def close(self, timeout: float | None = None) -> None:
        """Wait for the requests in flight, then release the executor's workers and device memory and
        the store (idempotent). The session's run stays ``running`` in the store: open it again by
        name to continue.

        A node-by-node request whose handle was dropped unfinished is ended when the handle is
        garbage-collected (close collects garbage once first, so a handle caught in a reference cycle
        is found): it is recorded as an ``abandoned`` round. ``timeout``: seconds
        to wait for the node-by-node requests still open (their drivers hold their handles); then each
        is ended and recorded as ``abandoned`` (the reason names ``close(timeout=...)``) and its handle refuses
        further nodes. Requests submitted with :meth:`submit` run to their end either way (a tool
        running in this process cannot be interrupted)."""
        if self._closed:
            return
        if timeout is not None and timeout < 0:
            raise InputError(f"close: timeout must be >= 0 seconds (or None: wait), got {timeout}")
        if self._open:
            gc.collect()
        self._reap_now()
        self._not_driving("close")
        self._stop_idle()
        if self._idle_thread is not None:
            self._idle_thread.join()

        def end_open() -> None:
            why = (f"the session closed (close(timeout={timeout})) while the request was unfinished: its driver "
                   "had neither finished nor dropped it")
            with self._lock:
                open_now = list(self._open.values())
            for state in open_now:
                self._end(state, why)

        # the requests in flight finish first; after `timeout`, the node-by-node ones are ended
        self._gate.acquire(exclusive=True, patience_s=timeout, impatient=end_open)
        self._closed = True
        self._gate.release(exclusive=True)
        if self._reaper is not None:
            self._abandoned.put(None)
            self._reaper.join()
        try:
            if self._own_executor:
                self.executor.close()
        finally:
            if self.store is not None and self.run_id is not None:
                self.store.set_status(self.run_id, "interrupted", "session closed")
            if self._own_store and self.store is not None:
                self.store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Session({self.scenario.name!r}, policy {self.policy.name!r}, executor {self.executor.name!r}, "
                f"{len(self._history)} rounds" + (f", run {self.run_id}" if self.run_id else "") + ")")


def complete(scenario: Scenario, trace: Trace) -> bool:
    """True unless the trace is feasible and lacks a node (the request did not run all of the workflow);
    an incomplete trace is per-node evidence, never E2E evidence (:meth:`Session.best`)."""
    return not trace.feasible or len(trace.nodes) == len(scenario.workflow.node_ids)




ABANDONED = ("its handle was garbage-collected before finish() (the driver dropped it, e.g. its code raised "
             "outside a with block or its asyncio task was cancelled)")
"""The recorded reason of a node-by-node request whose handle was dropped unfinished."""


def _dropped(drivers: set[int], abandoned: queue.SimpleQueue[_Open | None], state: _Open) -> None:
    """A handle was garbage-collected unfinished (a weakref callback: it may run in any thread, inside
    any code, so it only lets the driving thread go and queues the request for the reaper)."""
    if state.thread is not None:
        drivers.discard(state.thread)
    abandoned.put(state)


@dataclass
class _Open:
    """A node-by-node request in flight, shared by its handle and the session (the session never holds
    the handle itself, so a handle its driver drops is garbage-collected and the request ended)."""

    request: Request
    proposal: Proposal
    probes: tuple[Probe, ...]
    thread: int | None
    done: bool = False
    ended_by: str = ""
    """Why the session ended it ('' when its handle's finish() did)."""
    round: int = -1
    trace: Trace | None = None
    finalizer: weakref.finalize | None = None


class RequestHandle:
    """A request driven node by node (:meth:`Session.begin_request`). Finish it (or use it as a
    ``with`` block): a handle dropped unfinished is ended as a failed round when it is garbage-collected."""

    def __init__(self, session: Session, state: _Open, waited_ms: float) -> None:
        self.session = session
        self._state = state
        self.waited_ms = waited_ms
        """Time it waited to start (its place among the requests in flight, its turn on the device), ms."""
        self.outputs: dict[str, Any] = {}
        """Output of every node run so far, by node id."""

    @property
    def request(self) -> Request:
        """The executor's request."""
        return self._state.request

    @property
    def proposal(self) -> Proposal:
        """The decision it runs under."""
        return self._state.proposal

    @property
    def probes(self) -> tuple[Probe, ...]:
        """Idle-time probes recorded with its round."""
        return self._state.probes

    @property
    def round(self) -> int:
        """The round it was recorded as (-1 until it ends: requests are numbered as they finish)."""
        return self._state.round

    @property
    def mapping(self) -> Mapping:
        """The mapping this request runs under."""
        return self._state.proposal.mapping

    def _refuse_if_ended(self, what: str) -> None:
        st = self._state
        if st.done:
            why = f"ended by the session: {st.ended_by}" if st.ended_by else "already finished"
            raise InputError(f"{what}: the request (round {st.round}) is {why}")

    def run_node(self, node: str, inputs: Any = ()) -> Any:
        """Run ``node``'s tool at its placement with ``inputs`` (a sequence: the tool's inputs); thread-safe."""
        self._refuse_if_ended(f"run_node({node!r})")
        out = self._state.request.run_node(node, list(inputs))
        self.outputs[node] = out
        return out

    def fail(self, reason: str) -> None:
        """Mark the request failed (recorded as a ``tool_error`` round at :meth:`finish`)."""
        self._state.request.fail(reason)

    def finish(self) -> Response:
        """Build the round's trace, record it as the next round, leave the requests in flight."""
        self._refuse_if_ended("finish")
        s = self.session
        if not s._end(self._state):
            self._refuse_if_ended("finish")  # ended meanwhile by close(timeout=...)
        trace = self._state.trace
        assert trace is not None
        return Response(outputs={n: v for n, v in self.outputs.items() if n in s.scenario.workflow.sinks},
                        round=self.round, mapping=self.mapping, trace=trace, waited_ms=self.waited_ms,
                        fallback=str(self.proposal.info.get("session_guard", "")))

    def __enter__(self) -> RequestHandle:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._state.done:
            return
        if exc is not None and self._state.request.failure is None:
            self._state.request.fail(f"the request's driver raised {type(exc).__name__}: {exc}")
        self.finish()
