"""The Ray executor: runs a workflow under a mapping on a Ray cluster and returns the same
:class:`~hetsched.model.Trace` as the simulator, built from Ray's own task events.

- **Cluster.** ``address`` connects to an existing cluster (``ray start --head`` ...); without
  one, the executor starts a local single-node cluster with one (logical) GPU whose ``vram_mb``
  resource is the scenario's budget, and stops exactly that cluster on ``close()``. A cluster
  the executor only connected to keeps running.
- **Tasks and actors** (:mod:`hetsched.exec.ray_plan`): every ``cpu`` and ``gpu_queue`` node is
  a Ray task, every ``gpu_now`` tool a Ray actor that loads its model before the round and unloads
  it when its last node ends; outputs flow between them as object refs (the whole DAG is
  submitted at once and Ray resolves the dependencies). GPU units ask for a share of a GPU and
  for the custom ``vram_mb`` resource, so Ray admits them only where the budget has room (a
  resident tool through its round's lease, a task that holds them from before the round until the
  release); CPU tasks ask for their card's threads.
- **Kept actors.** A resident tool's actor (a process with its libraries imported) is kept across
  executions and reused by every later one that makes the tool resident on the same Ray node with
  as many threads; the residency itself (weights, ``vram_mb``, the memory check) is per round. A
  failed round keeps none, ``close()`` kills them (docs/ray.md).
- **Per-node budgets.** A cluster may have several GPU nodes, each with its own ``vram_mb``:
  actors are packed onto them (and pinned), queued tasks go wherever Ray finds room, and the
  trace has a VRAM timeline per Ray node (``Trace.hosts``) besides the total.
- **Failures.** A tool that raises, a worker or actor that dies, an OOM (a CUDA OOM, Ray's
  memory monitor, or a GPU unit whose measured memory exceeds its card), a Ray node that dies
  or a node past its time limit ends the round as ``Trace.refused(...)`` with its typed reason
  and the nodes that finished; everything still running is cancelled and every actor of the
  round killed, and the next round runs normally.
- **Trace** (:mod:`hetsched.exec.ray_trace`): ready, admitted, start and end per node and the
  Ray node that ran it, from Ray's task events.

What Ray does and does not guarantee compared with the model (measured in BENCHMARKS.md,
explained in docs/ray.md): admission by ``vram_mb`` holds; memory is not measured by Ray (the
executor checks each GPU unit against its card); within a round queued nodes are admitted in no
particular order (no FIFO). A window of requests under load (:meth:`RayExecutor.run_window`,
``run_workload``) submits each request at its release, keeps one actor per resident tool for the
whole window, and keeps the FIFO itself (the driver submits a queued node at the head of its queue).

Imports the model, the tool registry, the Ray plan and trace modules and (lazily) ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

import ray
import ray.exceptions as rex
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hetsched.exec import ray_remote
from hetsched.exec.base import ClosingExecutor
from hetsched.exec.devices import available_cores
from hetsched.exec.ray_plan import RESOURCE_STEP, VRAM_RESOURCE, RayHost, RayPlan, node_budget_mb, place
from hetsched.exec.ray_remote import DeviceUnavailable, NodeSpec, ResidentTool, WarmItem, run_node
from hetsched.exec.ray_trace import RoundFacts, TaskEvents, build_trace
from hetsched.exec.toolset import default_size, node_timeout_s, scenario_tools
from hetsched.exec.window import (
    Admission,
    ReleaseClock,
    WindowRun,
    instance_id,
    request_ends,
    run_workload,
    split_id,
    window_mapping,
    window_scenario,
)
from hetsched.model import (
    Infeasibility,
    InfeasibleKind,
    InputError,
    Mapping,
    Placement,
    Scenario,
    Trace,
)
from hetsched.model.interrupts import ctrl_c_deferred
from hetsched.model.workload import Workload
from hetsched.tools.base import Tool, check_size
from hetsched.tools.registry import import_tool_modules

DEVICE_CHOICES = ("auto", "cuda", "standin")
"""``device`` option: where GPU placements run inside a Ray GPU node's worker."""

LOCAL_SYSTEM_CONFIG: dict[str, Any] = {
    "task_events_report_interval_ms": 100,
    "num_workers_soft_limit": 32,
    "idle_worker_killing_time_threshold_ms": 600_000,
    "worker_niceness": 0,
}
"""Ray settings of a local cluster the executor starts: task events reach the state API within
0.1 s (default 1 s), idle workers stay warm between rounds (by default Ray kills idle workers
beyond one per CPU after 1 s, and the next round's tasks would start cold processes), and workers
run at the driver's priority. Ray starts its workers at nice 15 by default, so that its raylet and
GCS come first on a node of its own; on a machine shared with anything else, a nice-15 process
gets about 1/28 of a nice-0 one's share of a busy core, and the workers that import and load the
round's tools took minutes where they take seconds (measured on 2 cores beside 5 CPU burners: the
warm-up of rag_tiny's tools over 300 s instead of 9 s), and their measured times were not the
tools' own."""
INLINE_TOOL_BYTES = 64_000
"""Tools that pickle to at most this many bytes are sent with every task instead of through the object store."""
WARM_HOLD_S = 0.3
"""How long a warm-up task holds its worker, so that the warm-up tasks sent at once land in distinct workers."""
MAX_WARM_PER_NODE = 8
"""At most this many workers per Ray node are warmed before a round."""

SHUTDOWN_TIMEOUT_S = 30.0
"""How long ``close()`` waits for ``ray.shutdown()``. Ray's own teardown waits without a bound: it
closes the driver's GCS subscribers (an RPC to the GCS) and joins the core worker's threads after
telling the raylet it leaves; a local cluster whose GCS or raylet does not answer (stopped, or
starved on a loaded machine) holds it forever. Past this, the executor gives up on Ray's teardown
and stops the local cluster's processes itself (:func:`_stop_watchdog`)."""

CANCEL_GRACE_S = 2.0
"""How long a round's cleanup (after a failure or an interrupt) lets the tasks it would cancel finish
first; only those still pending after it are cancelled. Ray 2.60's driver aborts (``task_manager.cc``
``Check failed: it != submissible_tasks_.end() Tried to complete task that was not pending``, exit
status 1, nothing printed: seen when Ctrl-C met a CPU node finishing) when ``ray.cancel`` lands
between a task's reply and its completion, the race ray-project/ray#54798 fixed for retries only.
A task that finishes within the grace is never cancelled; one still running after it (held, slow,
late) is very unlikely to be finishing at that very moment."""

CLEANUP_WAIT_S = 30.0
"""How long a round's cleanup waits for its cancelled tasks, then for its leases to return (each)."""

CLEANUP_AT_MOST_S = 2 * CANCEL_GRACE_S + 2 * CLEANUP_WAIT_S + 5.0
"""How long a round's cleanup lasts at most (its waits, and a margin for Ray's calls), seconds."""
CLEANUP_TEXT = "stopping the round's Ray tasks and actors"
"""What a round's cleanup does, in the line a Ctrl-C during it prints (:func:`_ctrl_c_deferred`)."""

GCS_TIMEOUT_S = 60.0
"""How long the executor waits for Ray's GCS to list the cluster's nodes (``ray.nodes()`` waits
without a bound while the GCS does not answer): past it, a round is refused as unavailable."""

_ABANDONED: list[Any] = []
"""Watchdogs of local clusters whose teardown was abandoned: held open until this process exits."""

_CONN_LOCK = threading.Lock()
_CONN: dict[str, Any] = {"users": 0, "opened": False, "started": False, "address": None, "watchdog": None,
                         "broken": None}
"""The process's one Ray connection: how many executors use it, whether an executor opened it
(then the last one to close disconnects) and whether it started the cluster (then that stops it);
``broken``: why this process can no longer use Ray (its teardown had to be abandoned)."""


def _ray_tool_modules(tool: Tool) -> set[str]:
    """Modules (outside hetsched and installed packages) that define a tool's class or functions:
    shipped to Ray's workers by value, so a user's tool needs no install on the cluster."""
    objs: list[Any] = [type(tool)]
    objs += [v for v in vars(tool).values() if callable(v) or isinstance(v, Tool)]
    mods: set[str] = set()
    for obj in objs:
        if isinstance(obj, Tool):
            mods |= _ray_tool_modules(obj)
            continue
        name = getattr(obj, "__module__", None) or ""
        module = sys.modules.get(name)
        path = str(getattr(module, "__file__", "") or "")
        if not name or name.startswith("hetsched") or name in ("__main__", "builtins") or "site-packages" in path:
            continue
        mods.add(name)
    return mods


@dataclass(frozen=True)
class _ToolRef:
    """A tool as the workers get it: its cache key and a box holding the tool or its object-store ref."""

    key: str
    box: list[Any]


@dataclass
class _Kept:
    """A resident actor kept across executions: its handle and its threads (``max_concurrency``)."""

    actor: Any
    threads: int


LEASE_RUNTIME_ENV: dict[str, Any] = {"env_vars": {"HETSCHED_RAY_ROLE": "lease"}}
"""The runtime environment of resident tools' leases (merged into the job's): Ray keeps a worker pool per
runtime environment, so leases, which hold a worker for a whole round, get workers of their own (started
once, no torch import) and never take the workers the warm phase prepared for the round's tasks."""
RESIDENT_RUNTIME_ENV: dict[str, Any] = {"env_vars": {"HETSCHED_RAY_ROLE": "resident"}}
"""The same for resident actors: a new one starts its own process instead of taking (and removing from
the pool) an idle worker the warm phase prepared for the round's tasks."""

KEEP_THREADS_EXTRA = 4
"""Threads of a resident actor beyond one per call that can come at once: the round's load, the wait
for it, its lease's wait for the release, and the release (or a liveness check)."""


def _wait_dead(actors: Sequence[Any], timeout_s: float) -> bool:
    """Wait until every actor (killed) is dead: a call on it fails once Ray knows. True when all are."""
    deadline = time.monotonic() + timeout_s
    left = list(actors)
    while left and time.monotonic() < deadline:
        refs = {a.ping.remote(): a for a in left}
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=max(0.1, min(2.0, deadline - time.monotonic())))
        still = []
        for ref in done:
            try:
                ray.get(ref)
                still.append(refs[ref])  # answered: not dead yet
            except Exception:  # RayActorError: gone
                pass
        still += [refs[r] for r in refs if r not in done]
        left = still
        if left:
            time.sleep(0.1)
    return not left


class RayExecutor(ClosingExecutor):
    """Runs rounds of a scenario on a Ray cluster (see the module docstring).

    Args:
        scenario: the scenario; each of its tools must be registered (``hetsched.tools``).
        address: a Ray cluster to connect to (``HOST:PORT``, ``auto``, ``ray://...``); None
            starts a local cluster and stops it on ``close()``.
        size: tool size preset (``tiny``/``full``); default: the cards' ``provenance.preset``,
            else full with ``device=cuda`` and tiny otherwise.
        device: GPU placements on a Ray GPU node: ``auto`` (the GPU Ray assigns where torch sees
            it, else the stand-in device), ``cuda`` (refused where there is none) or ``standin``.
        device_threads: CPU threads of a GPU unit (the stand-in device's compute; CUDA host threads).
        num_cpus, num_gpus, vram_mb: the local cluster's CPUs (default: the scenario's
            ``cpu_cores``, at most the cores available, but at least the widest card's
            ``cpu_threads``), logical GPUs (default 1) and ``vram_mb`` (default: the scenario's
            budget); only without ``address``.
        timeout_s: time limit of every node; default ``timeout_factor`` x its card latency (load
            included for ``gpu_queue``, its cold load when the card has one), at least ``min_timeout_s``.
            Ray does not say when a task starts, so a node is late when it has not finished within the
            time limits of every node that competes with it for the same kind of resource (cpu or gpu)
            after it was ready.
        memory_slack: a GPU unit whose measured memory exceeds its card's ``vram_mb`` by more than
            this share of the budget ends the round as an OOM (Ray admits by the card).
        standin_allowance_mb: added to that limit on the stand-in device, whose meter (the worker
            process's malloc) also counts Ray's own allocations in the process.
        check_memory: watch GPU units' measured memory at all.
        tool_modules: modules to import first (they register the user's tools).
        runtime_env: Ray runtime environment for the job (e.g. ``{"pip": [...]}`` on a remote cluster).
        temp_dir: Ray's temp dir (sessions, logs, sockets) for a local cluster (default: Ray's, /tmp/ray).
        warm: before each round, prepare the round's tools (imports, set-up) and load its cpu tools
            in as many Ray workers per node as the round can use at once, so its tasks find warm
            workers (outside the E2E, like the local executor's warm phase).
        events: read Ray's task events for the trace (False: the workers' own clocks only).
        event_timeout_s: how long to wait for Ray's task events after a round (a failed round waits
            for none of those of nodes whose Ray worker has died: they died with it).
        load_timeout_s: how long ``gpu_now`` actors may take to be placed and to load.
        shutdown_timeout_s: how long ``close()`` waits for Ray's teardown before it stops a local
            cluster's processes by force (:data:`SHUTDOWN_TIMEOUT_S`; :attr:`teardown_note` says so).
    """

    name = "ray"

    def __init__(
        self,
        scenario: Scenario,
        *,
        address: str | None = None,
        size: str | None = None,
        device: str = "auto",
        device_threads: int = 1,
        num_cpus: int | None = None,
        num_gpus: int = 1,
        vram_mb: float | None = None,
        timeout_s: float | None = None,
        timeout_factor: float = 10.0,
        min_timeout_s: float = 30.0,
        memory_slack: float = 0.10,
        standin_allowance_mb: float = 32.0,
        check_memory: bool = True,
        tool_modules: Sequence[str] = (),
        runtime_env: dict[str, Any] | None = None,
        temp_dir: str | None = None,
        warm: bool = True,
        events: bool = True,
        event_timeout_s: float = 15.0,
        load_timeout_s: float = 300.0,
        shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
    ) -> None:
        where = "executor 'ray'"
        device = str(device).strip().lower()
        if device not in DEVICE_CHOICES:
            raise InputError(f"{where}: device {device!r} is not known; accepted: {', '.join(DEVICE_CHOICES)}")
        if timeout_s is not None and timeout_s <= 0:
            raise InputError(f"{where}: timeout_s must be > 0, got {timeout_s}")
        if memory_slack < 0:
            raise InputError(f"{where}: memory_slack must be >= 0, got {memory_slack}")
        if standin_allowance_mb < 0:
            raise InputError(f"{where}: standin_allowance_mb must be >= 0, got {standin_allowance_mb}")
        if shutdown_timeout_s <= 0:
            raise InputError(f"{where}: shutdown_timeout_s must be > 0, got {shutdown_timeout_s}")
        if device_threads < 1:
            raise InputError(f"{where}: device_threads must be >= 1, got {device_threads}")
        if num_cpus is not None and num_cpus < 1:
            raise InputError(f"{where}: num_cpus must be >= 1, got {num_cpus}")
        if num_gpus < 1:
            raise InputError(f"{where}: num_gpus must be >= 1, got {num_gpus}")
        if address is not None and not str(address).strip():
            raise InputError(f"{where}: address is empty; give HOST:PORT of a Ray cluster, or none to start one")
        self.scenario = scenario
        self.address = None if address is None else str(address).strip()
        """The cluster asked for (None: a local one started by this executor)."""
        self.device, self.device_threads = device, device_threads
        self.timeout_s, self.timeout_factor, self.min_timeout_s = timeout_s, timeout_factor, min_timeout_s
        self.memory_slack, self.check_memory = memory_slack, check_memory
        self.standin_allowance_mb, self.warm = standin_allowance_mb, warm
        self.events, self.event_timeout_s, self.load_timeout_s = events, event_timeout_s, load_timeout_s
        import_tool_modules(list(tool_modules))
        self.size = check_size(size) if size is not None else default_size(scenario, device == "cuda")
        """The tools' size preset."""
        self.tools: dict[str, Tool] = scenario_tools(scenario, self.size)
        """The scenario's tools, by name."""
        budget = scenario.machine.vram_budget_mb if vram_mb is None else vram_mb
        if budget <= 0:
            raise InputError(f"{where}: vram_mb must be > 0, got {budget}")
        # a local cluster offers the scenario's cores (at most this machine's), and never fewer logical CPUs
        # than the widest card asks for, so a cpu node of any card can run (oversubscribed if need be)
        widest = max((c.cpu_threads for c in scenario.cards.values()), default=1)
        cpus = num_cpus if num_cpus is not None else max(widest, min(scenario.machine.cpu_cores,
                                                                     len(available_cores())))
        self._local: dict[str, int] = {"num_cpus": cpus, "num_gpus": num_gpus, "vram_mb": node_budget_mb(budget)}
        self._runtime_env = runtime_env
        if temp_dir is not None and self.address is not None:
            raise InputError(f"{where}: temp_dir is for a local cluster; a cluster at an address has its own")
        self._temp_dir = None if temp_dir is None else str(Path(temp_dir).expanduser().resolve())
        self.shutdown_timeout_s = shutdown_timeout_s
        self.teardown_note: str | None = None
        """Set by ``close()`` when Ray's teardown did not finish in time and was abandoned: what
        happened, and whether the local cluster's processes were stopped (the CLI prints it)."""
        self._joined = False
        self._left = False  # this executor no longer counts as a user of the connection
        self._closing = False  # close() has begun: no more rounds
        self._closed = False  # close() has finished
        self._rounds = 0
        self.last_outputs: dict[str, Any] = {}
        """Outputs of the sink nodes of the last round that finished."""
        self.last_release_lag_ms: dict[str, float] = {}
        """Per ``gpu_now`` tool of the last round: how long after its last node ended the executor killed
        its actor (when Ray frees its ``vram_mb``); the model releases at that end exactly."""
        self.phases_s: dict[str, float] = {}
        """Where this executor's wall time went, seconds per phase summed over its executions:
        ``start_s`` (starting or joining the cluster and shipping the tools), then each execution's
        phases (:attr:`Trace.phases_s <hetsched.model.Trace.phases_s>`), and ``close_s``; plus
        ``executions``, how many ran. ``hetsched run --json`` prints it as ``executor_phases_s``."""
        self._start_phases: dict[str, float] = {}  # given to the first execution's trace
        self.current_phase: str | None = None
        """What the execution in progress is doing, in words (:data:`PHASE_TEXT`); None between phases
        (``hetsched run`` shows it in its progress line of a round that runs long)."""
        started_at = time.monotonic()
        self._connect()
        self._task: Any = ray.remote(run_node)
        self._actor: Any = ray.remote(ResidentTool)
        self._hold: Any = ray.remote(ray_remote.hold)
        self._kept: dict[tuple[str, str], _Kept] = {}  # (Ray node, tool) -> its resident actor, kept across rounds
        self.resident_actors_started: dict[str, int] = {}
        """Per ``gpu_now`` tool: how many resident actors (Ray worker processes that import and prepare the
        tool) this executor has started. An actor is kept across executions and reused by every later one
        that makes the tool resident on the same Ray node with as many threads (docs/ray.md)."""
        self._warm: Any = ray.remote(ray_remote.warm)
        self._refs: dict[str, _ToolRef] = {}
        for tname, tool in self.tools.items():
            for mod in _ray_tool_modules(tool):
                ray.cloudpickle.register_pickle_by_value(sys.modules[mod])
            try:
                blob = ray.cloudpickle.dumps(tool)
            except Exception as exc:  # cloudpickle raises many types
                raise InputError(f"tool {tname!r} cannot be sent to Ray's workers ({type(exc).__name__}: {exc})"
                                 ) from None
            key = f"{tname}:{self.size}:{hashlib.sha1(blob).hexdigest()[:16]}"
            # a small tool travels inside each task's arguments (a reference nested in arguments costs Ray
            # a borrower registration per task); a large one once through the object store
            self._refs[tname] = _ToolRef(key, [tool] if len(blob) <= INLINE_TOOL_BYTES else [ray.put(tool)])
        self.hosts: list[RayHost] = []
        """The alive Ray nodes (refreshed every round)."""
        try:
            self.refresh_hosts()
        except RayUnresponsive as exc:
            self.close()
            raise InputError(f"executor 'ray': {exc}") from None
        self._start_phases = {"start_s": time.monotonic() - started_at}
        self.phases_s.update(self._start_phases)

    # ------------------------------------------------------------------ connection
    def _connect(self) -> None:
        with _CONN_LOCK:
            if _CONN["broken"] is not None:
                raise InputError(f"executor 'ray': this process can no longer use Ray: {_CONN['broken']}")
            if ray.is_initialized():
                current = _CONN["address"]
                if self.address is not None and current is not None and self.address != current:
                    raise InputError(f"executor 'ray': this process is already connected to the Ray cluster at "
                                     f"{current}; one process holds one Ray connection, so it cannot also connect "
                                     f"to {self.address}")
                _CONN["users"] += 1
                self._joined = True
                return
            quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING,
                                     "configure_logging": True}
            _driver_messages_to_stderr()
            try:
                if self.address is None:
                    ray.init(address="local", num_cpus=self._local["num_cpus"], num_gpus=self._local["num_gpus"],
                             resources={VRAM_RESOURCE: self._local["vram_mb"]}, include_dashboard=True,
                             runtime_env=self._runtime_env, _system_config=LOCAL_SYSTEM_CONFIG,
                             _temp_dir=self._temp_dir, **quiet)
                    started = True
                else:
                    _use_cluster_token()
                    _driver_settings()
                    ray.init(address=self.address, runtime_env=self._runtime_env, **quiet)
                    started = False
            except (ConnectionError, rex.RayError, ValueError, RuntimeError) as exc:
                with contextlib.suppress(Exception):
                    ray.shutdown()
                where = f"the Ray cluster at {self.address}" if self.address else "a local Ray cluster"
                hint = ("; check the address (ray start --head prints it) or omit `address` to start a local "
                        "cluster" if self.address else "")
                raise InputError(f"executor 'ray': cannot connect to {where}: {_first_line(exc)}{hint}") from None
            _CONN.update(users=1, opened=True, started=started,
                         address=self.address or ray.get_runtime_context().gcs_address,
                         watchdog=_start_watchdog() if started else None)
            self._joined = True

    def close(self) -> None:
        """Kill the kept resident actors and leave the Ray connection; the last executor to leave
        disconnects, and stops the local cluster if an executor started it. Idempotent; a Ctrl-C
        meanwhile is raised once it has finished (bounded: :func:`_ctrl_c_deferred`), and a close cut
        short anyway (an exception) is finished by the next call."""
        self._closing = True  # no more rounds from here
        if self._closed:
            return
        if not self._joined:
            self._closed = True
            return
        started_at = time.monotonic()
        doing = ("killing the resident actors and stopping the local Ray cluster" if self.started_cluster
                 else "killing the resident actors and leaving the Ray cluster")
        try:
            with _ctrl_c_deferred(doing, 2 * self.shutdown_timeout_s + 30.0):
                self.drop_resident_actors()
                self._leave()
                self._closed = True
        finally:
            self.phases_s["close_s"] = self.phases_s.get("close_s", 0.0) + time.monotonic() - started_at

    def kept_actors(self) -> dict[tuple[str, str], Any]:
        """The resident actors kept for later executions, by (Ray node id, tool): Ray actor handles."""
        return {key: k.actor for key, k in self._kept.items()}

    def drop_resident_actors(self) -> None:
        """Kill every resident actor kept for later executions and wait (at most ``shutdown_timeout_s``)
        until Ray reports them dead; the next execution starts new ones. ``close()`` calls it."""
        kept = [k.actor for k in self._kept.values()]
        if not kept or _CONN["broken"] is not None:
            self._kept.clear()
            return

        def kill_and_wait() -> None:
            for actor in kept:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
            _wait_dead(kept, self.shutdown_timeout_s)

        with contextlib.suppress(Exception):  # a cluster that does not answer: its teardown (or the watchdog) ends them
            _within(self.shutdown_timeout_s, kill_and_wait)
        self._kept.clear()  # only now: a call cut short (an exception) leaves them for the next one to kill

    def _leave(self) -> None:
        if self._left:
            return
        self._left = True
        with _CONN_LOCK:
            _CONN["users"] -= 1
            if _CONN["users"] <= 0 and _CONN["opened"]:
                # a cluster ray.init started goes with it; a joined one keeps running
                if _shutdown_within(self.shutdown_timeout_s):
                    _stop_watchdog(_CONN.get("watchdog"))
                else:
                    self.teardown_note = _abandon_shutdown(self.shutdown_timeout_s, bool(_CONN["started"]),
                                                           _CONN["address"], _CONN.get("watchdog"))
                    _CONN["broken"] = self.teardown_note
                _CONN.update(users=0, opened=False, started=False, address=None, watchdog=None)

    @property
    def started_cluster(self) -> bool:
        """True when the Ray cluster in use was started by an executor of this process (and stops with it)."""
        return bool(_CONN["started"])

    def refresh_hosts(self) -> list[RayHost]:
        """The alive Ray nodes and their resources, now (raises :class:`RayUnresponsive` when the GCS
        does not answer within :data:`GCS_TIMEOUT_S`)."""
        try:
            nodes = _within(GCS_TIMEOUT_S, ray.nodes)
        except TimeoutError:
            raise RayUnresponsive(f"Ray's GCS did not list the cluster's nodes within {GCS_TIMEOUT_S:g} s (is its "
                                  "head node stopped or overloaded?)") from None
        self.hosts = sorted((RayHost.from_ray(n) for n in nodes if n.get("Alive")),
                            key=lambda h: (not h.gpu_capable, h.node_id))
        return self.hosts

    def _hosts_or_refusal(self, mapping: Mapping) -> list[RayHost] | Trace:
        """The alive nodes for a round, or the round refused as unavailable when the GCS does not answer."""
        try:
            return self.refresh_hosts()
        except RayUnresponsive as exc:
            return Trace.refused(mapping, Infeasibility(InfeasibleKind.UNAVAILABLE, str(exc)),
                                 vram_budget_mb=sum(h.vram_mb for h in self.hosts if h.gpu_capable),
                                 executor=self.name)

    def describe(self) -> list[str]:
        """What the executor runs on, one line each (for the CLI)."""
        address = _CONN["address"] or ray.get_runtime_context().gcs_address
        where = (f"a local cluster started by hetsched at {address} (stopped when the run ends)"
                 if self.started_cluster else f"the cluster at {address}")
        lines = [f"Ray {ray.__version__}: {where}, {len(self.hosts)} node(s)"]
        for h in self.hosts:
            gpu = f", {h.gpus:g} GPU, {VRAM_RESOURCE} {h.vram_mb:g}" if h.gpus or h.vram_mb else ""
            lines.append(f"  node {h.label}: {h.cpus:g} CPU{gpu}")
        gpu_hosts = [h for h in self.hosts if h.gpu_capable]
        if not gpu_hosts:
            lines.append(f"no node offers a GPU and {VRAM_RESOURCE}: GPU placements are refused")
        else:
            how = {"auto": "CUDA where torch sees the GPU Ray assigns, else a stand-in device (the task's own worker "
                           "process on CPU cores, not a GPU)",
                   "cuda": "CUDA (refused where torch sees no GPU)",
                   "standin": "a stand-in device (the task's own worker process on CPU cores, not a GPU)"}[self.device]
            lines.append(f"GPU placements: {how}; VRAM admission by Ray's {VRAM_RESOURCE} resource per node")
            budget = self.scenario.machine.vram_budget_mb
            if any(abs(h.vram_mb - node_budget_mb(budget)) > 1e-9 for h in gpu_hosts):
                lines.append(f"the scenario plans for a {budget:g} MB budget; the cluster's GPU nodes admit by their "
                             f"own {VRAM_RESOURCE} ({', '.join(f'{h.vram_mb:g}' for h in gpu_hosts)})")
        cores = len(available_cores())
        if self.started_cluster and self._local["num_cpus"] > cores:
            lines.append(f"the local cluster offers {self._local['num_cpus']} logical CPUs on this machine's {cores} "
                         "cores (the widest card's cpu_threads): cpu nodes share cores")
        lines.append(f"tools: size preset {self.size}; gpu_queue admission is Ray's (no FIFO order)")
        return lines

    # ------------------------------------------------------------------ one round
    def timeout_of(self, node: str, placement: Placement) -> float:
        """Time limit of one node, seconds (:func:`~hetsched.exec.toolset.node_timeout_s`)."""
        return node_timeout_s(self.scenario.card_of(node), placement, self.timeout_s, self.timeout_factor,
                              self.min_timeout_s)

    def mem_limit_mb(self, tool: str) -> float | None:
        """Measured memory above which a GPU unit of ``tool`` is over its card (None: not watched)."""
        if not self.check_memory:
            return None
        return self.scenario.cards[tool].vram_mb + self.memory_slack * self.scenario.machine.vram_budget_mb

    def run(self, mapping: Mapping, seed: int | None = 0, inputs: dict[str, Any] | None = None) -> Trace:
        """Execute one round on the cluster; infeasible or failed rounds come back refused, with a typed reason.

        ``inputs`` (a request's, ``hs.Session``): source node -> the value its task receives as its one
        input; the sink nodes' outputs are in :attr:`last_outputs` after a round that ran."""
        self.last_outputs = {}
        if self._closing:
            raise InputError("executor 'ray' is closed")
        sc = self.scenario
        mapping = sc.validate_mapping(mapping)
        clock = _PhaseClock(self._now)
        with clock.phase("hosts_s"):
            hosts = self._hosts_or_refusal(mapping)
        if isinstance(hosts, Trace):
            return self._timed(hosts, clock)
        budget = sum(h.vram_mb for h in hosts if h.gpu_capable)
        static = sc.infeasibility(mapping)
        if static is not None:
            return self._timed(Trace.refused(mapping, static, vram_budget_mb=budget, executor=self.name), clock)
        placed = place(sc, mapping, hosts)
        if isinstance(placed, Infeasibility):
            return self._timed(Trace.refused(mapping, placed, vram_budget_mb=budget, executor=self.name), clock)
        self._rounds += 1
        return self._timed(_Round(self, placed, hosts, inputs, clock=clock).execute(), clock)

    def _now(self, phase: str | None) -> None:
        self.current_phase = phase

    def _timed(self, trace: Trace, clock: _PhaseClock) -> Trace:
        """The trace with its execution's phases (the executor's start on its first), counted in :attr:`phases_s`."""
        phases = {**self._start_phases, **clock.phases_s}
        self._start_phases = {}
        for name, seconds in clock.phases_s.items():
            self.phases_s[name] = self.phases_s.get(name, 0.0) + seconds
        self.phases_s["executions"] = self.phases_s.get("executions", 0) + 1
        return dataclasses.replace(trace, phases_s=phases)

    def run_window(self, mapping: Mapping, *, releases_ms: Sequence[float] | None = None, clients: int | None = None,
                   count: int | None = None, think_ms: float = 0.0, clock: ReleaseClock | None = None,
                   inputs: dict[str, Any] | None = None) -> WindowRun:
        """Run a window of overlapping requests on the cluster under one mapping (:mod:`hetsched.exec.window`).

        Requests are released as in :meth:`LocalExecutor.run_window
        <hetsched.exec.local.LocalExecutor.run_window>`: each request's nodes are submitted at its
        release. Its ``gpu_now`` actors are created and loaded once, before the window, and serve
        every request (calls run concurrently, one actor thread per call that can come at once); its
        ``gpu_queue`` nodes wait in one FIFO queue the driver keeps (submitted when at the head and
        their card fits beside what the driver's accounting holds; Ray's ``vram_mb`` still guards each
        node's budget): :class:`WindowRun` has the driver's records."""
        self.last_outputs = {}
        if self._closing:
            raise InputError("executor 'ray' is closed")
        sc = self.scenario
        mapping = sc.validate_mapping(mapping)
        clock = ReleaseClock.of(clock, releases_ms, clients, count, think_ms)
        nothing: tuple[None, ...] = (None,) * clock.count
        phases = _PhaseClock(self._now)
        with phases.phase("hosts_s"):
            hosts = self._hosts_or_refusal(mapping)
        if isinstance(hosts, Trace):
            return WindowRun(self._timed(hosts, phases), nothing, nothing, budget_mb=hosts.vram_budget_mb)
        budget = sum(h.vram_mb for h in hosts if h.gpu_capable)
        static = sc.infeasibility(mapping)
        if static is not None:
            return WindowRun(self._timed(Trace.refused(mapping, static, vram_budget_mb=budget, executor=self.name),
                                         phases), nothing, nothing, budget_mb=budget)
        wsc = window_scenario(sc, clock.count)
        placed = place(wsc, window_mapping(mapping, clock.count), hosts)
        if isinstance(placed, Infeasibility):
            return WindowRun(self._timed(Trace.refused(mapping, placed, vram_budget_mb=budget, executor=self.name),
                                         phases), nothing, nothing, budget_mb=budget)
        self._rounds += 1
        window = _Window(self, placed, hosts, clock, wsc, inputs, phases=phases)
        trace = self._timed(window.execute(), phases)
        return WindowRun(trace=trace, release_ms=tuple(clock.sent.get(r) for r in range(clock.count)),
                         end_ms=tuple(request_ends(sc, trace.nodes, clock.count)), enqueued=tuple(window.enqueued),
                         admissions=tuple(window.admissions), resident_loads=window.resident_loads, budget_mb=budget)

    def run_workload(self, mapping: Mapping, workload: Workload, seed: int | None = 0) -> Trace:
        """Run ``workload``'s window of requests for real under one mapping (:meth:`run_window`) and
        return the window's ``Trace`` (``load``: its metrics, ``requests``: every request; ``e2e_ms``
        the p95 latency), built as every executor builds it. ``seed`` is unused: times are real.
        A mapping that cannot serve a window (a queued node that does not fit beside the resident
        tools, which serve every request) is refused before anything runs."""
        return run_workload(self, mapping, workload)

DRIVER_SETTINGS = {"RAY_task_events_report_interval_ms": "100"}
"""Ray settings of this driver process when it joins a cluster (``RAY_*`` variables Ray reads when
it connects; a value already set wins): the driver reports its tasks' events (submitted, and so
ready) every 0.1 s instead of every 1 s, so a round's events reach the state API sooner."""


def _driver_settings() -> None:
    for key, value in DRIVER_SETTINGS.items():
        os.environ.setdefault(key, value)


def _driver_messages_to_stderr() -> None:
    """Send what Ray's driver prints about the cluster (the raylet's error messages when a worker,
    actor or node dies, which Ray writes to stdout whatever ``log_to_driver`` says) to stderr, so
    a program's stdout stays its own (``hetsched run --json`` prints one JSON object there)."""
    import ray._private.worker as ray_worker

    original = ray_worker.print_to_stdstream
    if getattr(original, "hetsched_to_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr.hetsched_to_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


WATCHDOG = r"""
import os, signal, sys, time
marker, me = os.environ["HETSCHED_RAY_SESSION"].encode(), os.getpid()
sys.stdin.buffer.read()  # returns when the driver closes its end: it left, or it was killed
def left():
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids
for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
    for pid in left():
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    deadline = time.monotonic() + wait_s
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
"""
"""The watchdog of a local cluster an executor started: it waits until the driver's end of its
stdin closes (the driver stopped the cluster, or was killed, even with SIGKILL), then stops every
process whose command line names the cluster's session (Ray's agents otherwise outlive a killed
driver, adopted by init)."""


def _start_watchdog() -> Any:
    """Start the watchdog of the local cluster just started (None where /proc is missing)."""
    import subprocess

    if not os.path.isdir("/proc"):
        return None
    try:
        session = os.path.basename(ray._private.worker.global_worker.node.get_session_dir_path())
    except Exception:  # no node handle: nothing to watch
        return None
    env = {**os.environ, "HETSCHED_RAY_SESSION": session}
    proc = subprocess.Popen([sys.executable, "-c", WATCHDOG], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True, close_fds=True)
    proc.hetsched_session = session  # type: ignore[attr-defined]
    return proc


def _stop_watchdog(proc: Any) -> None:
    """After a clean shutdown: close the watchdog's stdin (it stops what is left of the local cluster:
    SIGTERM, then SIGKILL) and reap it; when it has not finished within 15 s, kill it and stop what
    is left from here."""
    if proc is None:
        return
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(timeout=15)
        return
    except Exception:  # the watchdog itself is stuck: kill it and sweep from here
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(timeout=5)
    session = getattr(proc, "hetsched_session", "")
    if session:
        _sweep_session(session)


def _session_pids(session: str) -> list[int]:
    """Live processes (zombies aside) whose command line names the local cluster's session."""
    marker, me, found = session.encode(), os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                named = marker in f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except (OSError, IndexError):
            continue
        if named and not zombie:
            found.append(int(entry))
    return found


def _sweep_session(session: str, wait_s: float = 10.0) -> list[int]:
    """SIGKILL every process naming the session (a stopped or stuck one too) until none is left or
    ``wait_s`` has passed; returns those still there."""

    deadline = time.monotonic() + wait_s
    while True:
        left = _session_pids(session)
        if not left or time.monotonic() >= deadline:
            return left
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def teardown_abandoned() -> bool:
    """True once an executor of this process gave up on Ray's teardown (``teardown_note`` says why):
    this process can no longer use Ray, and should exit without waiting on Ray's threads."""
    return _CONN["broken"] is not None


class RayUnresponsive(RuntimeError):
    """A part of the Ray cluster did not answer within the executor's bound."""


def _within(timeout_s: float, fn: Callable[[], Any]) -> Any:
    """``fn()`` (a Ray call that waits without a bound) in a daemon thread: its result or exception,
    or ``TimeoutError`` when it has not returned within ``timeout_s`` (the thread is left to finish
    or to die with the process)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def call() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller as is
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=call, name=f"hetsched-ray-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    if not done.wait(timeout_s):
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _ctrl_c_deferred(doing: str | None = None, at_most_s: float = 0.0) -> contextlib.AbstractContextManager[None]:
    """Run the block to its end even if Ctrl-C arrives meanwhile, then raise it
    (:func:`hetsched.model.interrupts.ctrl_c_deferred`): what a cleanup (a round's, ``close()``'s) or a
    registration must not be cut short by (a second ``KeyboardInterrupt`` inside the cleanup of the first
    would leave the round's tasks and actors running, or an actor made but not yet in the tables the
    cleanup walks). The line a held Ctrl-C prints says what ``kill -9`` leaves of the Ray work."""
    return ctrl_c_deferred(doing, at_most_s, leave_hint=_what_kill_leaves)


def _cancel_after_grace(refs: list[Any], force: bool) -> None:
    """Cancel the tasks of ``refs`` still pending after ``CANCEL_GRACE_S``: those finishing now finish first,
    because ``ray.cancel`` landing as a task finishes aborts Ray's driver (seen for a CPU node and for a lease
    whose actor had just been killed)."""
    if refs:
        with contextlib.suppress(Exception):
            _, refs = ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)
    for ref in refs:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=force)


def _what_kill_leaves() -> str:
    """What stops the Ray work of a driver killed by ``kill -9`` (the line of :func:`_ctrl_c_deferred`)."""
    if _CONN["started"]:
        return "its watchdog stops the local Ray cluster it started"
    return "Ray ends a dead driver's tasks and actors; if any is left, `ray stop` on the cluster's nodes stops all"


def _shutdown_within(timeout_s: float) -> bool:
    """``ray.shutdown()``, bounded; True when it finished within ``timeout_s``."""
    try:
        _within(timeout_s, ray.shutdown)
    except TimeoutError:
        return False
    except Exception as exc:  # Ray raises many types from its teardown; it is over either way
        logging.getLogger(__name__).debug("ray.shutdown() raised %s", _first_line(exc))
    return True


def _abandon_shutdown(timeout_s: float, started: bool, address: str | None, watchdog: Any) -> str:
    """After ``ray.shutdown()`` did not finish: keep Ray's exit hook from running it again (it would
    wait just as long at interpreter exit) and say what happens to the cluster.

    A local cluster is not stopped from here: the stuck teardown is Ray's core worker waiting on its
    raylet, and when that raylet dies the core worker ends this whole process (exit status 1). So the
    watchdog keeps its stdin open (a reference held here) and stops every process of the cluster
    (SIGTERM, then SIGKILL: a stopped or stuck one too) as soon as this process exits."""
    import atexit

    from ray._private import worker as ray_worker

    atexit.unregister(ray_worker.shutdown)
    what = f"Ray's shutdown did not finish within {timeout_s:g} s"
    if not started:
        return f"{what}; the driver left the Ray cluster at {address} without it (the cluster keeps running)"
    if watchdog is None:
        return (f"{what} (a process of the local cluster did not answer); no watchdog could be started here "
                "(no /proc), so its processes may outlive this one")
    _ABANDONED.append(watchdog)
    return (f"{what} (a process of the local cluster did not answer); its processes are stopped by force "
            "(SIGTERM, then SIGKILL) as soon as this process exits")


def _use_cluster_token() -> None:
    """Use the cluster's auth token the way ``ray start`` does (RAY_AUTH_MODE unset and a token in
    RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token: token mode), so connecting to a
    token-protected cluster works like starting a node of it."""
    if os.environ.get("RAY_AUTH_MODE") is not None:
        return
    with contextlib.suppress(ImportError, AttributeError):
        from ray._private.authentication import authentication_token_setup as auth

        auth.maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:400]
    return type(exc).__name__


def _is_oom(exc: BaseException) -> bool:
    name = type(exc).__name__
    return isinstance(exc, MemoryError) or name == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def classify(exc: BaseException, label: str) -> Infeasibility:
    """The typed reason a Ray failure ends the round (``label`` names the node or actor)."""
    if isinstance(exc, rex.OutOfMemoryError):
        return Infeasibility(InfeasibleKind.OOM, f"Ray's memory monitor killed the worker running {label} (the Ray "
                                                 f"node ran out of host memory): {_first_line(exc)}")
    if isinstance(exc, rex.RayTaskError):
        cause = exc.cause
        if isinstance(cause, DeviceUnavailable):
            return Infeasibility(InfeasibleKind.UNAVAILABLE, f"{label}: {cause}")
        if isinstance(cause, BaseException) and _is_oom(cause):
            return Infeasibility(InfeasibleKind.OOM, f"{label} ran out of memory: {type(cause).__name__}: "
                                                     f"{_first_line(cause)}")
        if isinstance(cause, BaseException) and not isinstance(cause, rex.RayError):
            return Infeasibility(InfeasibleKind.TOOL_ERROR, f"{label} raised {type(cause).__name__}: "
                                                            f"{_first_line(cause)}")
        return classify(cause, label) if isinstance(cause, rex.RayError) else Infeasibility(
            InfeasibleKind.TOOL_ERROR, f"{label} failed: {_first_line(exc)}")
    missing = "No module named" in str(exc)
    if missing and isinstance(exc, rex.RaySystemError | rex.RayTaskError):
        return Infeasibility(InfeasibleKind.UNAVAILABLE, f"{label}: a Ray worker cannot import what it needs "
                                                         f"({_first_line(exc)}); install hetsched (this version) and "
                                                         "the tools' libraries on every node, or pass runtime_env")
    if isinstance(exc, rex.NodeDiedError | rex.ObjectLostError | rex.RaySystemError):
        return Infeasibility(InfeasibleKind.UNAVAILABLE, f"{label}: a Ray node or its objects were lost "
                                                         f"({type(exc).__name__}: {_first_line(exc)})")
    if isinstance(exc, rex.RayActorError):
        return Infeasibility(InfeasibleKind.TOOL_ERROR, f"the actor of {label} died ({type(exc).__name__}: "
                                                        f"{_first_line(exc)})")
    if isinstance(exc, rex.WorkerCrashedError):
        return Infeasibility(InfeasibleKind.TOOL_ERROR, f"the Ray worker running {label} died ({_first_line(exc)})")
    return Infeasibility(InfeasibleKind.TOOL_ERROR, f"{label} failed: {type(exc).__name__}: {_first_line(exc)}")


PHASE_TEXT: dict[str, str] = {
    "hosts_s": "listing the Ray cluster's nodes",
    "warm_s": "warming Ray's workers: importing and preparing the round's tools",
    "actors_s": "starting the resident gpu_now actors and loading their tools",
    "run_s": "running the round's nodes",
    "cleanup_s": "cleaning up the round's tasks and actors",
    "events_s": "reading Ray's task events",
}
"""What each phase of an execution does, in words (:attr:`RayExecutor.current_phase`)."""


class _PhaseClock:
    """Wall time per phase of one execution, seconds, in the order the phases ran; ``now`` is told
    the phase that starts (its words) and None when it ends."""

    def __init__(self, now: Callable[[str | None], None] | None = None) -> None:
        self.phases_s: dict[str, float] = {}
        self.now = now

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started_at = time.monotonic()
        if self.now is not None:
            self.now(PHASE_TEXT.get(name, name))
        try:
            yield
        finally:
            self.phases_s[name] = self.phases_s.get(name, 0.0) + time.monotonic() - started_at
            if self.now is not None:
                self.now(None)


class _Round:
    """One execution of a placed mapping: actors, submission, waiting, cleanup, events, trace."""

    def __init__(self, ex: RayExecutor, plan: RayPlan, hosts: list[RayHost],
                 inputs: dict[str, Any] | None = None, scenario: Scenario | None = None,
                 clock: _PhaseClock | None = None) -> None:
        self.ex, self.plan, self.hosts = ex, plan, hosts
        self.phase_clock = clock if clock is not None else _PhaseClock()
        """Where the round's wall time goes, phase by phase."""
        self.given = dict(inputs or {})  # a source's request input
        self.sc = scenario if scenario is not None else ex.scenario
        self.wf = self.sc.workflow
        self.tag = f"hetsched {ex.scenario.name} r{ex._rounds} {uuid.uuid4().hex[:8]}"
        """The name of every Ray task of the round (Ray's dashboard groups them; the events query finds them)."""
        self.order = {n: i for i, n in enumerate(self.wf.topo_order)}
        self.actors: dict[str, Any] = {}
        self.facts = RoundFacts(t0_s=time.time())
        self.out_refs: dict[str, Any] = {}
        self.pending: dict[Any, str] = {}  # meta ref -> node
        self.failure: Infeasibility | None = None
        self.now_left = {t: len(a.nodes) for t, a in plan.actors.items()}
        self.preds_left = {n: len(self.wf.preds(n)) for n in self.wf.node_ids}
        self.ready_at: dict[str, float] = {}
        self.devices: set[str] = set()
        self.extra_ids: list[str] = []
        self.used: dict[str, tuple[tuple[str, str], Any]] = {}  # gpu_now tool -> (its key in the pool, its actor)
        self.leases: dict[str, Any] = {}  # gpu_now tool -> its lease's ref (holds the tool's vram_mb)
        self.interrupted = False  # an exception (Ctrl-C) left the round: nothing of it is kept
        cls_total = {"cpu": 0.0, "gpu": 0.0}
        for n in self.wf.node_ids:
            cls_total["gpu" if plan.mapping[n].on_gpu else "cpu"] += node_timeout_s(
                self.sc.card_of(n), plan.mapping[n], ex.timeout_s, ex.timeout_factor, ex.min_timeout_s)
        self.allowance = {n: cls_total["gpu" if plan.mapping[n].on_gpu else "cpu"] for n in self.wf.node_ids}

    def label(self, node: str) -> str:
        return f"node {node!r} ({self.wf.tool_of[node]}, {self.plan.mapping[node].value})"

    def fail(self, why: Infeasibility) -> None:
        if self.failure is None:
            self.failure = why

    def spec(self, node: str, tool: str, placement: Placement) -> NodeSpec:
        ref = self.ex._refs[tool]
        return NodeSpec(node=node, placement=placement.value, tool_key=ref.key, device=self.ex.device,
                        threads=(self.sc.cards[tool].cpu_threads if placement is Placement.CPU
                                 else self.ex.device_threads),
                        mem_limit_mb=None if placement is Placement.CPU else self.ex.mem_limit_mb(tool),
                        standin_extra_mb=self.ex.standin_allowance_mb)

    def over_card(self, what: str, tool: str, meta: dict[str, Any]) -> None:
        peak, limit = meta.get("peak_mb"), meta.get("limit_mb")
        if peak is None or limit is None or peak <= limit + 1e-9:
            return
        card = self.sc.cards[tool].vram_mb
        self.fail(Infeasibility(InfeasibleKind.OOM, f"{what} measured {peak:.1f} MB on the {meta.get('device')} of "
                                f"Ray node {str(meta.get('host'))[:8]}, over its card's {card:g} MB (limit "
                                f"{limit:.1f} MB with slack): Ray admits by the card, so the node's budget was not "
                                "protected"))

    # -- phases
    def warm_up(self) -> bool:
        """Warm as many workers per Ray node as the round's tasks can use there at once (outside the E2E)."""
        tasks = list(self.plan.tasks.values())
        cpu = [u for u in tasks if u.placement is Placement.CPU]
        queued = [u for u in tasks if u.placement is Placement.GPU_QUEUE]
        cpu_items = {u.tool: WarmItem(self.ex._refs[u.tool].key, self.ex._refs[u.tool].box,
                                      self.sc.cards[u.tool].cpu_threads) for u in cpu}
        gpu_items = {u.tool: WarmItem(self.ex._refs[u.tool].key, self.ex._refs[u.tool].box) for u in queued}
        refs = []

        def send(host: str, items: list[WarmItem], count: int, num_gpus: float) -> None:
            for _ in range(min(count, MAX_WARM_PER_NODE)):
                ref = self.ex._warm.options(num_cpus=0, num_gpus=num_gpus, name=self.tag, max_retries=0,
                                            scheduling_strategy=NodeAffinitySchedulingStrategy(host, soft=False)
                                            ).remote(items, WARM_HOLD_S)
                self.extra_ids.append(ref.task_id().hex())
                refs.append(ref)

        for h in self.hosts:
            runnable = [u for u in cpu if u.options.num_cpus <= h.cpus]
            if runnable:
                send(h.node_id, list(cpu_items.values()), min(len(runnable), max(1, int(h.cpus))), 0.0)
            if h.gpu_capable and queued:
                # no more queued tasks run at once than fit beside the actors pinned here
                room = h.vram_mb - sum(a.options.vram_mb for a in self.plan.actors.values() if a.host == h.node_id)
                at_once, used = 0, 0.0
                for mb in sorted(u.options.vram_mb for u in queued):
                    if used + mb > room + 1e-9:
                        break
                    at_once, used = at_once + 1, used + mb
                # Ray keeps separate worker pools for tasks with and without GPUs: warm GPU workers
                send(h.node_id, list(gpu_items.values()), max(1, at_once), RESOURCE_STEP)
        if not refs:
            return True
        done, late = ray.wait(refs, num_returns=len(refs), timeout=self.ex.load_timeout_s)
        for ref in done:
            try:
                ray.get(ref)
            except Exception as exc:  # the tools' own exception types and Ray's
                self.fail(classify(exc, "preparing the round's tools"))
                return False
        if late:
            self.fail(Infeasibility(InfeasibleKind.TIMEOUT, f"preparing the round's tools in Ray's workers took more "
                                    f"than {self.ex.load_timeout_s:g} s"))
        return self.failure is None

    def start_actors(self) -> bool:
        """Make every ``gpu_now`` tool resident on its Ray node before the round: the actor kept from an
        earlier execution (same node, as many threads) or a new one, and a lease that holds the tool's
        GPU share and ``vram_mb`` from its load until the release."""
        actors = self.resident_actors()
        loads: dict[Any, str] = {}
        for tool, unit in self.plan.actors.items():
            actor = actors[tool]
            self.actors[tool] = actor
            token = f"{self.tag} {tool}"
            with _ctrl_c_deferred():  # a lease made is a lease the cleanup finds
                lease = self.ex._hold.options(
                    **unit.options.as_options(), name=self.tag, max_retries=0, retry_exceptions=False,
                    runtime_env=LEASE_RUNTIME_ENV,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(unit.host, soft=False),
                ).remote(actor, token)
                self.leases[tool] = lease
            self.extra_ids.append(lease.task_id().hex())
            ref = actor.loaded.options(name=self.tag).remote(token)
            self.extra_ids.append(ref.task_id().hex())
            loads[ref] = tool
        if not loads:
            return True
        done, late = ray.wait(list(loads), num_returns=len(loads), timeout=self.ex.load_timeout_s)
        for ref in done:
            tool = loads[ref]
            try:
                meta = ray.get(ref)
            except Exception as exc:  # Ray raises its own and the tool's exception types
                self.fail(classify(exc, f"gpu_now tool {tool!r} (loading)"))
                continue
            self.devices.add(str(meta.get("device")))
            self.over_card(f"gpu_now tool {tool!r} after loading", tool, meta)
        if late:
            names = sorted(loads[r] for r in late)
            self.fail(Infeasibility(InfeasibleKind.TIMEOUT, f"gpu_now actors {names} were not placed and loaded within "
                                    f"{self.ex.load_timeout_s:g} s (is their Ray GPU node busy or gone?)"))
        return self.failure is None

    def resident_actors(self) -> dict[str, Any]:
        """The actor of every ``gpu_now`` tool: kept ones that still answer, new ones for the rest. An
        actor holds no Ray resources of its own (its lease does)."""
        kept, fresh = self.ex._kept, {}
        alive = {h.node_id for h in self.hosts}
        for key in [k for k in kept if k[0] not in alive]:  # its node is gone
            with contextlib.suppress(Exception):
                ray.kill(kept[key].actor, no_restart=True)
            del kept[key]
        chosen: dict[str, Any] = {}
        pings: dict[Any, str] = {}
        for tool, unit in self.plan.actors.items():
            key, threads = (unit.host, tool), self.concurrency(tool, len(unit.nodes)) + KEEP_THREADS_EXTRA
            have = kept.get(key)
            if have is not None and have.threads == threads:
                chosen[tool] = have.actor
                self.used[tool] = (key, have.actor)
                pings[have.actor.ping.remote()] = tool
                continue
            if have is not None:  # another number of threads: replaced (killed, then out of the table)
                with contextlib.suppress(Exception):
                    ray.kill(have.actor, no_restart=True)
                del kept[key]
            fresh[tool] = (key, threads)
        if pings:  # a kept actor that died since (killed from outside, its worker lost) is replaced
            done, _ = ray.wait(list(pings), num_returns=len(pings), timeout=min(GCS_TIMEOUT_S, self.ex.load_timeout_s))
            answered = set()
            for ref in done:
                with contextlib.suppress(Exception):
                    ray.get(ref)
                    answered.add(pings[ref])
            for tool in set(pings.values()) - answered:
                key, actor = self.used[tool]
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
                del self.used[tool]
                kept.pop(key, None)
                fresh[tool] = (key, self.concurrency(tool, len(self.plan.actors[tool].nodes)) + KEEP_THREADS_EXTRA)
        keepable = {tool: self.keepable(key[0]) for tool, (key, _) in fresh.items()}
        for tool, (key, threads) in fresh.items():
            # made and registered at once: a Ctrl-C here is raised once the actor is in the round's table
            # (the cleanup kills it) and, if kept, in the executor's (close() kills it); else a handle kept
            # alive by the interrupt's traceback would keep the actor running, in no table
            with _ctrl_c_deferred():
                actor = self.ex._actor.options(
                    num_cpus=0, num_gpus=0, max_concurrency=threads, max_restarts=0, max_task_retries=0,
                    runtime_env=RESIDENT_RUNTIME_ENV,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(key[0], soft=False),
                ).remote(self.spec("", tool, Placement.GPU_NOW), self.ex._refs[tool].box)
                self.used[tool] = (key, actor)
                if keepable[tool]:
                    kept[key] = _Kept(actor, threads)
            self.ex.resident_actors_started[tool] = self.ex.resident_actors_started.get(tool, 0) + 1
            chosen[tool] = actor
        return chosen

    def keepable(self, node_id: str) -> bool:
        """Whether a resident actor on this Ray node may be kept for later executions: the node has one
        GPU, so every lease there is given the GPU the actor's process is bound to."""
        return any(h.node_id == node_id and h.gpus <= 1 for h in self.hosts)

    def submit(self) -> None:
        self.facts.t0_s = time.time()
        self.submit_nodes(self.wf.topo_order)

    def submit_nodes(self, nodes: Sequence[str]) -> None:
        """Submit nodes (predecessors first) with their predecessors' output refs as arguments."""
        now = time.time()
        for n in nodes:
            tool, p = self.wf.tool_of[n], self.plan.mapping[n]
            args = [self.out_refs[q] for q in self.wf.preds(n)]
            if not args and n in self.given:
                args = [self.given[n]]
            spec = self.spec(n, tool, p)
            name = self.tag
            if p is Placement.GPU_NOW:
                out, meta = self.actors[tool].run.options(num_returns=2, name=name).remote(spec, *args)
            else:
                opts = self.plan.tasks[n].options.as_options()
                out, meta = self.ex._task.options(**opts, num_returns=2, name=name, max_retries=0,
                                                  retry_exceptions=False).remote(spec, self.ex._refs[tool].box, *args)
            self.out_refs[n] = out
            self.pending[meta] = n
            self.facts.task_ids[n] = meta.task_id().hex()
            if not self.wf.preds(n):
                self.ready_at[n] = now

    def on_done(self, node: str, meta: dict[str, Any]) -> None:
        now = time.time()
        self.facts.metas[node] = meta
        tool, p = self.wf.tool_of[node], self.plan.mapping[node]
        if p.on_gpu:
            self.devices.add(str(meta.get("device")))
            self.over_card(self.label(node), tool, meta)
        if p is Placement.GPU_NOW:
            self.now_left[tool] -= 1
            if self.now_left[tool] == 0:
                self.release(tool)
        for s in self.wf.succs(node):
            self.preds_left[s] -= 1
            if self.preds_left[s] == 0:
                self.ready_at[s] = now
        self.node_done(node)

    def node_done(self, node: str) -> None:
        """A node's result arrived (a window releases requests here)."""

    def waiting(self) -> bool:
        """True while a release is still to come (a window's requests not yet sent)."""
        return False

    def release_due(self) -> None:
        """Submit the requests whose release time has come (a window)."""

    def concurrency(self, tool: str, nodes: int) -> int:
        """Threads of a resident tool's actor: one per node that may call it at once."""
        return max(1, nodes)

    def wait_s(self) -> float:
        """How long to wait for results before looking again (a window: at most until the next release), s."""
        return 0.5

    def release(self, tool: str, force: bool = False) -> None:
        """End a resident tool's residency: after its last node, the actor unloads the tool and its
        lease ends (Ray frees its vram_mb once the lease's task has returned); in a cleanup, the actor
        is killed. Its VRAM is recorded as released now, the earliest Ray can have freed it."""
        actor = self.actors.pop(tool, None)
        if actor is None:
            return
        self.facts.actor_release_s[tool] = time.time()
        with contextlib.suppress(Exception):
            if force:
                self.drop(tool)
            else:
                actor.release.remote(f"{self.tag} {tool}")

    def drop(self, tool: str) -> None:
        """Kill a resident tool's actor and keep it no longer."""
        if tool not in self.used:
            return
        key, actor = self.used[tool]
        kept = self.ex._kept.get(key)
        if kept is not None and kept.actor is actor:
            del self.ex._kept[key]
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)

    def late(self) -> tuple[str, float] | None:
        now = time.time()
        for n in self.pending.values():
            t = self.ready_at.get(n)
            if t is not None and now > t + self.allowance[n]:
                return n, self.allowance[n]
        return None

    def wait(self) -> None:
        while (self.pending or self.waiting()) and self.failure is None:
            if not self.pending:
                time.sleep(self.wait_s())  # nothing runs: wait for the next release
                self.release_due()
                continue
            done, rest = ray.wait(list(self.pending), num_returns=1, timeout=self.wait_s())
            if done and rest:
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                done += more
            for ref in sorted(done, key=lambda r: self.order[self.pending[r]]):
                node = self.pending.pop(ref)
                try:
                    meta = ray.get(ref)
                except Exception as exc:  # the tool's own exception types and Ray's
                    self.fail(classify(exc, self.label(node)))
                    break
                self.on_done(node, meta)
            self.release_due()
            late = self.late()
            if late is not None and self.failure is None:
                n, limit = late
                self.fail(Infeasibility(InfeasibleKind.TIMEOUT, f"{self.label(n)} did not finish within {limit:g} s "
                                        "of becoming ready (the time limits of every node competing with it for "
                                        "Ray's resources)"))

    def cleanup(self) -> None:
        """Cancel what still runs or waits, kill every actor, and wait until Ray has let go of them."""
        _cancel_after_grace([self.out_refs[n] for n in self.pending.values()
                             if self.plan.mapping[n] is not Placement.GPU_NOW], force=True)
        for tool in list(self.actors):
            self.release(tool, force=True)
        if self.failure is not None or self.interrupted:
            for tool in self.used:  # a failed round keeps none of its actors, released or not
                self.drop(tool)
            # a lease Ray has not granted yet is never started; a granted one ends as its actor dies, just now
            _cancel_after_grace(list(self.leases.values()), force=False)
        for tool in self.used:  # an actor the next execution cannot keep goes now
            key, actor = self.used[tool]
            if self.ex._kept.get(key) is None or self.ex._kept[key].actor is not actor:
                self.drop(tool)
        if self.pending:
            ray.wait(list(self.pending), num_returns=len(self.pending), timeout=CLEANUP_WAIT_S)
        # every lease has returned (its vram_mb is free) before the next execution: a released tool's at once,
        # a killed actor's as soon as Ray tells the lease (else it is cancelled with its worker)
        leases = list(self.leases.values())
        if leases:
            _, late = ray.wait(leases, num_returns=len(leases), timeout=CLEANUP_WAIT_S)
            for ref in late:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            for ref in leases:
                with contextlib.suppress(Exception):
                    ray.get(ref, timeout=0)
        if self.failure is not None:
            # read every failed or cancelled result once, so Ray does not report it as an unhandled error
            for n, out in self.out_refs.items():
                if n not in self.facts.metas:
                    for ref in [out, *(r for r, m in self.pending.items() if m == n)]:
                        with contextlib.suppress(Exception):
                            ray.get(ref, timeout=0)

    def collect_events(self) -> list[str]:
        """Read Ray's task events of this round into the facts; notes on what could not be read.

        Waits (at most ``event_timeout_s``) until every node that finished has its events. In a failed
        round it stops waiting for the nodes whose Ray worker has died (a crash takes the events it had
        not sent yet with it): once every node still owed events is such a node, it reads once more
        (what a worker sent just before it died) and ends. The events are read every 0.1 s, the list of
        dead workers at most once a second (it lists every worker the cluster has had)."""
        if not self.ex.events:
            return ["Ray's task events were not read (events=false): times come from the workers' own clocks"]
        from ray.util.state import list_tasks

        ids = set(self.facts.task_ids.values())
        wanted = {self.facts.task_ids[n]: n for n in self.facts.metas}
        job = ray.get_runtime_context().get_job_id()
        deadline = time.time() + self.ex.event_timeout_s
        # every task of the round carries the round's name: one query finds them all, however many tasks
        # the job has run (Ray's state API can only filter by equality, and its limit keeps arbitrary ones)
        limit = len(ids) + len(self.extra_ids) + 100

        def read() -> dict[str, str]:
            """Record the events that arrived; the nodes still owed theirs (task id -> node)."""
            rows = list_tasks(address=ray.get_runtime_context().gcs_address,
                              filters=[("job_id", "=", job), ("name", "=", self.tag)], detail=True, limit=limit,
                              timeout=30, raise_on_missing_output=False)
            for row in rows:
                data = asdict(row) if is_dataclass(row) and not isinstance(row, type) else dict(vars(row))
                ev = TaskEvents.from_state(data)
                if ev.task_id in ids:
                    self.facts.events[ev.task_id] = ev
            got = self.facts.events
            return {t: n for t, n in wanted.items()
                    if not (t in got and got[t].terminal and got[t].exec_ms is not None)}

        workers_due = 0.0  # Ray's worker list (every worker of the cluster) is read at most once a second
        while True:
            try:
                owed = read()
                if not owed:
                    return []
                lost: list[str] = []
                if self.failure is not None and time.time() >= workers_due:
                    workers_due = time.time() + 1.0
                    lost = self.died_with_worker(owed)
                if lost and len(lost) == len(owed):
                    owed = read()
                    lost = [n for n in lost if n in owed.values()]
                    if not lost:
                        return []
                    return [f"Ray's task events of nodes {lost} died with the Ray worker that ran them (it exited "
                            "before sending them): the executor did not wait for them"]
            except Exception as exc:  # the state API raises several types when the dashboard is absent
                return [f"Ray's state API is unavailable ({_first_line(exc)}): times come from the workers' own "
                        "clocks"]
            if time.time() > deadline:
                return [f"Ray's task events of nodes {sorted(owed.values(), key=self.order.__getitem__)} were still "
                        f"incomplete after event_timeout_s={self.ex.event_timeout_s:g} s"]
            time.sleep(0.1)

    def died_with_worker(self, owed: dict[str, str]) -> list[str]:
        """The nodes among ``owed`` (task id -> node) whose Ray worker (node and pid, from the worker's
        own meta) Ray lists as dead, in topological order."""
        from ray.util.state import list_workers

        try:
            rows = list_workers(address=ray.get_runtime_context().gcs_address, limit=10_000, timeout=30,
                                raise_on_missing_output=False)
        except Exception:  # unknown: keep waiting for the events
            return []
        dead: set[tuple[str, int]] = set()
        alive: set[tuple[str, int]] = set()
        for row in rows:
            (alive if row.is_alive else dead).add((str(row.node_id), int(row.pid)))
        dead -= alive  # a pid reused on its node by a live worker is not known dead
        out = []
        for n in owed.values():
            meta = self.facts.metas[n]
            if (str(meta.get("host")), int(meta.get("pid") or -1)) in dead:
                out.append(n)
        return sorted(out, key=self.order.__getitem__)

    def notes(self) -> list[str]:
        notes: list[str] = []
        if "standin" in self.devices:
            notes.append("GPU placements ran on a stand-in device (the Ray worker process on CPU cores, not a GPU): "
                         "its times and memory are real measurements of CPU cores and host memory")
        addresses = {h.address for h in self.hosts}
        if len(addresses) > 1:
            notes.append("the Ray nodes are separate machines: ready/admitted times are on the driver's clock, "
                         "start/end on each node's, and Ray does not synchronize them")
        return notes

    def execute(self) -> Trace:
        phase = self.phase_clock.phase
        try:
            ready = True
            if self.ex.warm:
                with phase("warm_s"):
                    ready = self.warm_up()
            if ready:
                with phase("actors_s"):
                    ready = self.start_actors()
            if ready:
                with phase("run_s"):
                    self.submit()
                    self.wait()
        except BaseException:
            # Ctrl-C (or a bug) mid-round: stop everything this round started, then let it propagate; a
            # second Ctrl-C meanwhile waits until that is done
            self.interrupted = True
            with _ctrl_c_deferred(CLEANUP_TEXT, CLEANUP_AT_MOST_S):
                self.cleanup()
            raise
        with phase("cleanup_s"), _ctrl_c_deferred(CLEANUP_TEXT, CLEANUP_AT_MOST_S):
            self.cleanup()
        with phase("events_s"):
            notes = self.notes() + self.collect_events()
        trace = build_trace(self.sc, self.plan, self.hosts, self.facts, self.failure, notes)
        t0_ms = self.facts.t0_s * 1000.0
        self.ex.last_release_lag_ms = {
            tool: self.facts.actor_release_s[tool] * 1000.0 - t0_ms - max(trace.nodes[n].end_ms for n in a.nodes)
            for tool, a in self.plan.actors.items()
            if tool in self.facts.actor_release_s and all(n in trace.nodes for n in a.nodes)}
        if trace.feasible:
            with contextlib.suppress(Exception):  # Ray's errors, and its timeout: the outputs are then unknown
                outs = ray.get([self.out_refs[s] for s in self.wf.sinks], timeout=GCS_TIMEOUT_S)
                self.ex.last_outputs = dict(zip(self.wf.sinks, outs, strict=True))
        return trace


class _Window(_Round):
    """A window of requests (:meth:`RayExecutor.run_window`): one round of the composite workflow whose
    requests' nodes are submitted when the release clock says; resident actors serve every request
    (``max_concurrency``: one thread per call that can come at once).

    Queued nodes keep the model's FIFO here: a ``gpu_queue`` node is submitted only once its inputs
    have ended, it is at the head of the driver's one queue and its card fits beside what the driver's
    accounting holds (resident actors until released, admitted queued tasks until they end); the
    nodes after it are submitted once it is. Ray's ``vram_mb`` still guards every node's budget.
    Without this Ray backfills: under load a large queued node can wait behind a stream of smaller
    ones for as long as requests keep coming (docs/ray.md)."""

    def __init__(self, ex: RayExecutor, plan: RayPlan, hosts: list[RayHost], clock: ReleaseClock,
                 scenario: Scenario, inputs: dict[str, Any] | None = None, phases: _PhaseClock | None = None) -> None:
        self.base = ex.scenario.workflow
        self.clock = clock
        given = {instance_id(n, r): v for r in range(clock.count) for n, v in (inputs or {}).items()}
        super().__init__(ex, plan, hosts, given, scenario, clock=phases)
        self.sinks_left = [len(self.base.sinks)] * clock.count
        self.base_sinks = set(self.base.sinks)
        self.resident_loads: dict[str, int] = {}
        self.budget = sum(h.vram_mb for h in hosts if h.gpu_capable)
        self.held_mb = 0.0  # the driver's accounting: resident actors, then admitted queued tasks
        self.queue: deque[str] = deque()
        self.in_queue: set[str] = set()
        self.submitted: set[str] = set()
        self.done: set[str] = set()
        self.enqueued: list[str] = []
        self.admissions: list[Admission] = []
        self.queue_ready_ms: dict[str, float] = {}  # queued node -> when its inputs had all ended

    def rel_ms(self) -> float:
        return (time.time() - self.facts.t0_s) * 1000.0

    def advance(self, request: int) -> None:
        """Submit the request's nodes whose inputs are submitted (their refs exist); a queued node
        joins the FIFO queue once its inputs have ended."""
        batch: list[str] = []
        for n in self.base.topo_order:
            node = instance_id(n, request)
            if node in self.submitted or node in self.in_queue:
                continue
            preds = self.wf.preds(node)
            if self.plan.mapping[node] is Placement.GPU_QUEUE:
                if all(p in self.done for p in preds):
                    self.queue.append(node)
                    self.in_queue.add(node)
                    self.enqueued.append(node)
                    self.queue_ready_ms[node] = self.rel_ms()
            elif all(p in self.submitted for p in preds):
                batch.append(node)
                self.submitted.add(node)
        if batch:
            self.submit_nodes(batch)

    def pump(self, requests: set[int]) -> None:
        """Advance these requests and admit from the head of the queue while its card fits."""
        todo = set(requests)
        while todo and self.failure is None:
            for r in sorted(todo):
                self.advance(r)
            todo = set()
            while self.queue and self.failure is None:
                head = self.queue[0]
                need = self.sc.card_of(head).vram_mb
                if self.held_mb + need > self.budget + 1e-6:
                    break
                self.queue.popleft()
                self.in_queue.discard(head)
                self.held_mb += need
                self.admissions.append(Admission(self.rel_ms(), head, self.held_mb))
                self.submitted.add(head)
                self.submit_nodes([head])
                todo.add(split_id(head)[1])

    def release(self, tool: str, force: bool = False) -> None:
        held = tool in self.actors
        super().release(tool, force)
        if held and not force:
            self.held_mb -= self.plan.actors[tool].options.vram_mb
            self.pump(set())

    def concurrency(self, tool: str, nodes: int) -> int:
        # at most the requests that can be in flight at once call it together: a closed loop's K
        # clients (the requests that follow none), else every request. A thread per call that can
        # never come would only cost memory: Ray spreads calls over an actor's threads, and each
        # thread's first call grows the math libraries' per-thread caches
        roots = self.clock.count if self.clock.follows is None else sum(1 for f in self.clock.follows if f < 0)
        per_request = sum(1 for n in self.base.node_ids if self.base.tool_of[n] == tool
                          and self.plan.mapping[instance_id(n, 0)] is Placement.GPU_NOW)
        return max(1, min(nodes, roots * per_request))

    def start_actors(self) -> bool:
        ok = super().start_actors()
        self.resident_loads = dict.fromkeys(self.actors, 1)  # one actor per tool, loaded once
        self.held_mb = sum(a.options.vram_mb for a in self.plan.actors.values())
        return ok

    def submit(self) -> None:
        self.facts.t0_s = time.time()
        self.release_due()

    def wait_s(self) -> float:
        t = self.clock.next_ms()
        return 0.5 if t is None else min(0.5, max(0.0, (t - self.rel_ms()) / 1000.0))

    def release_due(self) -> None:
        if self.failure is not None:
            return
        sent, skipped = self.clock.due(self.rel_ms())
        for r in skipped:
            self.leave_out(r)
        if sent:
            self.pump(set(sent))

    def leave_out(self, request: int) -> None:
        """A request not sent: a resident tool whose other nodes have all run goes now."""
        for n in self.base.node_ids:
            node = instance_id(n, request)
            if self.plan.mapping[node] is Placement.GPU_NOW:
                tool = self.wf.tool_of[node]
                self.now_left[tool] -= 1
                if self.now_left[tool] == 0:
                    self.release(tool)

    def node_done(self, node: str) -> None:
        self.done.add(node)
        base, r = split_id(node)
        if self.plan.mapping[node] is Placement.GPU_QUEUE:
            self.held_mb -= self.sc.card_of(node).vram_mb
        if base in self.base_sinks:
            self.sinks_left[r] -= 1
            if self.sinks_left[r] == 0:
                self.clock.completed(r, self.rel_ms())
        self.pump({r})

    def waiting(self) -> bool:
        return self.clock.next_ms() is not None

    def execute(self) -> Trace:
        trace = super().execute()
        # a queued node was ready when its inputs had ended, not when the driver admitted it (Ray saw it then)
        for node, ready in self.queue_ready_ms.items():
            nt = trace.nodes.get(node)
            if nt is not None:
                trace.nodes[node] = dataclasses.replace(nt, ready_ms=max(0.0, min(ready, nt.admitted_ms)))
        return trace

    def wait(self) -> None:
        super().wait()
        if self.failure is None and self.queue:
            head = self.queue[0]
            self.fail(Infeasibility(InfeasibleKind.DEADLOCK, f"{self.label(head)} at the head of the gpu_queue "
                                    f"needs {self.sc.card_of(head).vram_mb:g} MB beside {self.held_mb:g} MB held of "
                                    f"{self.budget:g} MB and nothing running will free more"))
        if self.failure is None and self.clock.pending:
            waiting = sorted(r for r in range(self.clock.count) if r not in self.clock.sent
                             and r not in self.clock.skipped)
            self.fail(Infeasibility(InfeasibleKind.DEADLOCK, f"requests {waiting[:5]} wait for requests that "
                                    "cannot return: nothing runs and nothing more is released"))


__all__ = ["DEVICE_CHOICES", "RayExecutor", "RayUnresponsive", "classify", "teardown_abandoned"]
