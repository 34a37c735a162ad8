"""Worker processes: one device each (the CPU pool, a CUDA GPU or the stand-in device), holding a
:class:`~hetsched.tools.runtime.ToolRuntime` and running tool calls concurrently on its threads.

The parent talks to a worker over a pipe with small request messages (load, run, queue_run,
unload, prepare, warm, bench, round_start, round_end, stats, exit); every reply carries the request
id, and the worker's memory watch can send an unsolicited ``oom`` event. Clocks are
``time.monotonic()`` (CLOCK_MONOTONIC, shared by all processes of the machine), so the parent
can place the worker's start and end times on its own time line.

A worker process ignores SIGINT (the parent decides what Ctrl-C means), pins itself to its cores,
limits its math libraries to its thread budget, and exits when the parent's end of the pipe
closes, so it never outlives the executor that started it. Tool outputs travel as pickled
bytes; the parent forwards them between workers without unpickling them.

Imports the tool API and runtime, and the model's errors.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import pickle
import signal
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from hetsched.model import HetschedError, InfeasibleKind, InputError
from hetsched.tools.base import Device, DeviceKind, Tool
from hetsched.tools.runtime import PeakSampler, ToolRuntime, to_host

START_TIMEOUT_S = 120.0
"""How long a worker may take to start (spawn + imports) before it counts as failed."""


class WorkerError(HetschedError):
    """A worker process could not be started, died, or stopped answering; ``kind`` types it for a
    refused round: ``unavailable`` (it could not start), ``tool_error`` (it died), ``timeout`` (it
    did not answer within the time limit, and was killed)."""

    def __init__(self, message: str, kind: InfeasibleKind = InfeasibleKind.TOOL_ERROR) -> None:
        super().__init__(message)
        self.kind = kind


def describe_exit(code: int | None) -> str:
    """How a process ended, in words: ``killed by SIGSEGV (signal 11)`` or ``exit code 3``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            return f"killed by signal {-code}"
        return f"killed by {name} (signal {-code})"
    return f"exit code {code}"


@dataclass
class Reply:
    """A message from a worker: the answer to request ``req_id`` or an unsolicited event."""

    req_id: int | None
    """The request answered (None for events)."""
    ok: bool
    """False when the request failed."""
    data: dict[str, Any] = field(default_factory=dict)
    """The answer's figures (clocks, MB, output bytes...)."""
    kind: str = ""
    """For failures: ``tool_error``, ``oom`` or ``died``; for events: the event (``oom``)."""
    detail: str = ""
    """For failures and events: what happened, in words."""


def dumps(obj: Any) -> bytes:
    """Pickle for the pipe (highest protocol)."""
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def tool_bytes(tool: Tool) -> bytes:
    """A tool pickled for a worker, or InputError saying how to make it picklable."""
    try:
        return dumps(tool)
    except Exception as exc:  # pickling raises many types (PicklingError, AttributeError, TypeError)
        raise InputError(
            f"tool {tool.name!r} cannot be sent to a worker process ({type(exc).__name__}: {exc}); define its class "
            "or functions at the top level of an importable module (no lambdas or local functions)"
        ) from None


# ---------------------------------------------------------------------------- the child process
def _classify(exc: BaseException) -> str:
    text = f"{type(exc).__name__} {exc}".lower()
    if isinstance(exc, MemoryError) or "outofmemoryerror" in text or "out of memory" in text:
        return "oom"
    return "tool_error"


def _describe(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno} in {tb[-1].name})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


class _Child:
    """The worker's side: a reader loop and a thread pool over one ToolRuntime."""

    def __init__(self, conn: Any, device: Device, sample_ms: float) -> None:
        self.conn = conn
        self.runtime = ToolRuntime(device)
        self.sampler = PeakSampler(self.runtime.meter, sample_ms)
        self.sampler.on_over = self._over
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="hetsched-task")
        self.send_lock = threading.Lock()
        self.outputs: dict[str, Any] = {}
        self.readers: dict[str, int] = {}  # node -> successors here still to read its kept output
        self.outputs_lock = threading.Lock()
        self.tools: dict[bytes, Tool] = {}
        self.tools_lock = threading.Lock()
        self.sampler_limit: float | None = None

    def send(self, message: tuple[Any, ...]) -> None:
        data = dumps(message)
        with self.send_lock, contextlib.suppress(OSError):  # the parent is gone: the reader loop exits
            self.conn.send_bytes(data)

    def _over(self, used_mb: float) -> None:
        self.send(("event", None, {"used_mb": used_mb, "limit_mb": self.sampler_limit}, "oom", ""))

    def tool(self, blob: bytes) -> Tool:
        with self.tools_lock:
            tool = self.tools.get(blob)
            if tool is None:
                tool = self.tools[blob] = pickle.loads(blob)
            return tool

    def inputs(self, specs: list[tuple[str, Any]]) -> list[Any]:
        out = []
        for how, value in specs:
            out.append(self.read(value) if how == "ref" else pickle.loads(value))
        return out

    def read(self, node: str) -> Any:
        """A kept output, dropped once its last reader here has it (a window's memory stays bounded)."""
        with self.outputs_lock:
            value = self.outputs[node]
            left = self.readers.get(node, 0) - 1
            if left <= 0:
                self.outputs.pop(node, None)
                self.readers.pop(node, None)
            else:
                self.readers[node] = left
            return value

    def finish(self, node: str, output: Any, keep: int, export: bool) -> bytes | None:
        """Keep ``output`` for ``keep`` successors on this worker (0: none); its bytes when ``export``."""
        if keep:
            with self.outputs_lock:
                self.outputs[node] = output
                self.readers[node] = int(keep)
        return dumps(to_host(output)) if export else None

    # -- commands (each runs on a pool thread; the reply carries the request id)
    def cmd_prepare(self, tools: list[bytes], warm: bool = True) -> dict[str, Any]:
        """Prepare each tool; with ``warm``, also load, run and unload it once, so the process-wide
        first-use costs (library initialization, kernel caches: what a CUDA context and cuBLAS
        handles are on a GPU) are paid here and not inside a round's clocks and memory. Returns
        ``failed``: tool name -> why its preparation failed (a failing warm-up call is not a failure:
        the round that runs the tool reports it)."""
        failed: dict[str, str] = {}
        for blob in tools:
            tool = self.tool(blob)
            try:
                self.runtime.prepare(tool)
            except Exception as exc:  # the tool is broken: its rounds are refused with this reason
                failed[tool.name] = _describe(exc)
                continue
            if warm:
                self.cmd_warm(blob)
        return {"failed": failed}

    def cmd_warm(self, tool: bytes) -> dict[str, Any]:
        """Load, run once and unload a prepared tool (see :meth:`cmd_prepare`); a failing call is
        not reported here: the round that runs the tool reports it."""
        t = self.tool(tool)
        key = f"warm:{t.name}"
        with contextlib.suppress(Exception):
            self.runtime.load(key, t)
            self.runtime.run(key, [])
        self.runtime.unload(key)
        return {}

    def cmd_load(self, key: str, tool: bytes) -> dict[str, Any]:
        loaded = self.runtime.load(key, self.tool(tool))
        return {"load_ms": loaded.load_ms, "mem_mb": loaded.mem_mb, "t_start": loaded.t_start, "t_end": loaded.t_end}

    def cmd_run(self, key: str, node: str, inputs: list[tuple[str, Any]], keep: int, export: bool) -> dict[str, Any]:
        ran = self.runtime.run(key, self.inputs(inputs))
        blob = self.finish(node, ran.output, keep, export)
        return {"start": ran.t_start, "end": ran.t_end, "output": blob}

    def cmd_queue_run(self, key: str, tool: bytes, node: str, inputs: list[tuple[str, Any]], keep: int,
                      export: bool) -> dict[str, Any]:
        values = self.inputs(inputs)
        loaded = self.runtime.load(key, self.tool(tool))
        try:
            ran = self.runtime.run(key, values)
        finally:
            self.runtime.unload(key)
        unloaded = time.monotonic()
        blob = self.finish(node, ran.output, keep, export)
        return {"load_start": loaded.t_start, "load_ms": loaded.load_ms, "start": ran.t_start, "end": ran.t_end,
                "unload_end": unloaded, "output": blob}

    def cmd_unload(self, key: str) -> dict[str, Any]:
        return {"unload_ms": self.runtime.unload(key)}

    def cmd_unload_all(self) -> dict[str, Any]:
        self.runtime.unload_all()
        return {}

    def cmd_round_start(self, limit_mb: float | None, rebase: bool) -> dict[str, Any]:
        self.outputs.clear()
        self.readers.clear()
        baseline = self.runtime.meter.rebase() if rebase else None
        self.runtime.meter.reset_peak()
        self.sampler_limit = limit_mb
        self.sampler.limit_mb = limit_mb
        return {"baseline_mb": baseline}

    def cmd_round_end(self) -> dict[str, Any]:
        self.sampler.limit_mb = None
        self.sampler_limit = None
        self.outputs.clear()
        self.readers.clear()
        return {"peak_mb": self.runtime.meter.peak_mb(), "in_use_mb": self.runtime.meter.in_use_mb()}

    def cmd_stats(self) -> dict[str, Any]:
        m = self.runtime.meter
        return {"in_use_mb": m.in_use_mb(), "peak_mb": m.peak_mb(), "meter": m.kind, "pid": os.getpid(),
                "held": list(self.runtime.keys()), "threads": self.runtime.device.threads}

    def cmd_sampling(self, sample_ms: float) -> dict[str, Any]:
        """Sample memory every ``sample_ms`` from now on (0: stop sampling)."""
        self.sampler.stop()
        self.sampler.sample_s = sample_ms / 1000.0
        self.sampler.start()
        return {}

    def cmd_rebase(self) -> dict[str, Any]:
        return {"baseline_mb": self.runtime.meter.rebase()}

    def cmd_bench(self, key: str, inputs: list[tuple[str, Any]], warmup: int, runs: int) -> dict[str, Any]:
        b = self.runtime.bench(key, self.inputs(inputs), warmup, runs)
        extra = dict(b.extra)
        util = _nvml_util(self.runtime.device)
        if util is not None:
            extra["gpu_util"] = util
        return {"first_ms": b.first_ms, "times_ms": list(b.times_ms), "cpu_s": b.cpu_s, "wall_s": b.wall_s,
                "wait_s": b.wait_s, "waits_ms": list(b.waits_ms), "peak_mb": b.peak_mb, "extra": extra}

    def handle(self, req_id: int, cmd: str, args: dict[str, Any]) -> None:
        try:
            data = getattr(self, f"cmd_{cmd}")(**args)
        except BaseException as exc:  # a tool's failure is data for the parent, never the worker's end
            self.send(("reply", req_id, {}, _classify(exc), _describe(exc)))
        else:
            self.send(("reply", req_id, data, "", ""))

    def loop(self) -> None:
        while True:
            try:
                raw = self.conn.recv_bytes()
            except (EOFError, OSError):
                os._exit(0)  # the parent is gone: do not outlive it, whatever threads still run
            req_id, cmd, args = pickle.loads(raw)
            if cmd == "exit":
                self.sampler.stop()
                self.send(("reply", req_id, {}, "", ""))
                os._exit(0)
            self.pool.submit(self.handle, req_id, cmd, args)


def _nvml_util(device: Device) -> float | None:
    """GPU utilization (0-1) NVML reports for a CUDA device, or None without NVML."""
    if device.kind is not DeviceKind.CUDA:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device.index)
        return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu) / 100.0
    except Exception:  # no pynvml, or NVML unusable: no figure
        return None


def _worker_main(conn: Any, device: Device, cores: tuple[int, ...] | None, sample_ms: float) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if cores:
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, cores)
    try:
        child = _Child(conn, device, sample_ms)
        child.sampler.start()
    except BaseException as exc:
        conn.send_bytes(dumps(("ready", None, {}, "tool_error", _describe(exc))))
        return
    child.send(("ready", None, {"pid": os.getpid(), "meter": child.runtime.meter.kind}, "", ""))
    child.loop()


@contextlib.contextmanager
def _main_without_missing_file() -> Any:
    """Hide ``__main__.__file__`` from ``spawn`` while it is not a file (``python -`` reads ``<stdin>``):
    spawn would try to re-run it in the child and fail. A real script is re-imported as usual, so
    tools defined at its top level reach the workers."""
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or os.path.exists(path) or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
"""Math-library thread limits a worker process starts with (its thread budget)."""


@contextlib.contextmanager
def _thread_env(threads: int) -> Any:
    """The worker's thread budget in the environment it starts with: ``spawn`` re-imports the
    parent's main script in the child before ``_worker_main`` runs, so a script that imports numpy
    or torch at module level would load them with one BLAS thread per machine core on the
    worker's pinned core(s) (4.5x slower matmuls measured) before the budget could be applied."""
    old = {k: os.environ.get(k) for k in THREAD_ENV}
    os.environ.update({k: str(threads) for k in THREAD_ENV})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---------------------------------------------------------------------------- the parent's handle
class Worker:
    """The parent's handle on one worker process (started by :meth:`start`, stopped by :meth:`close`)."""

    def __init__(self, device: Device, cores: tuple[int, ...] | None = None, label: str = "",
                 sample_ms: float = 2.0) -> None:
        self.device = device
        """The device the worker runs tools on."""
        self.cores = cores
        """CPU cores it is pinned to (None: not pinned)."""
        self.label = label or device.label
        """Name for messages (``CPU pool``, ``stand-in device``)."""
        self.sample_ms = sample_ms
        """How often its memory watch samples, ms."""
        self.meter = ""
        """How it measures memory (set when started)."""
        self.inbox: list[Reply] = []
        """Replies received while waiting for another one."""
        self._proc: Any = None
        self._conn: Any = None
        self._ids = itertools.count(1)

    # -- life cycle
    @property
    def started(self) -> bool:
        """True once started (and not closed)."""
        return self._proc is not None

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self._proc is not None and self._proc.is_alive()

    @property
    def pid(self) -> int | None:
        """The process id (None before start)."""
        return None if self._proc is None else int(self._proc.pid)

    @property
    def connection(self) -> Any:
        """The pipe end to wait on (``multiprocessing.connection.wait``)."""
        return self._conn

    def start(self) -> None:
        """Spawn the process and wait until it is ready (WorkerError if it is not within START_TIMEOUT_S)."""
        if self.alive:
            return
        self.close()
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_worker_main, args=(child, self.device, self.cores, self.sample_ms),
                           name=f"hetsched {self.label}", daemon=True)
        with _main_without_missing_file(), _thread_env(self.device.threads):
            proc.start()
        child.close()
        self._proc, self._conn, self.inbox = proc, parent, []
        if not parent.poll(START_TIMEOUT_S):
            self.kill()
            raise WorkerError(f"the {self.label} worker process did not start within {START_TIMEOUT_S:.0f} s",
                              InfeasibleKind.UNAVAILABLE)
        try:
            kind, _, data, err, detail = pickle.loads(parent.recv_bytes())
        except (EOFError, OSError):
            code = self._exit_code()
            self.kill()
            raise WorkerError(f"the {self.label} worker process exited while starting ({describe_exit(code)})",
                              InfeasibleKind.UNAVAILABLE) from None
        if kind != "ready" or err:
            self.kill()
            raise WorkerError(f"the {self.label} worker process failed to start: {detail}", InfeasibleKind.UNAVAILABLE)
        self.meter = str(data.get("meter", ""))

    def _exit_code(self, wait_s: float = 5.0) -> int | None:
        """The exit code of a process whose pipe has closed: it is exiting, so reap it (at most
        ``wait_s``) before reading the code, which is None until then."""
        if self._proc is None:
            return None
        self._proc.join(wait_s)
        return self._proc.exitcode

    def kill(self) -> None:
        """Stop the process now (SIGKILL after a short SIGTERM grace); idempotent."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()
        if proc is not None:
            if proc.is_alive():
                proc.terminate()
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
            proc.join(5.0)
            with contextlib.suppress(ValueError):
                proc.close()

    def close(self, timeout: float = 5.0) -> None:
        """Ask the process to exit, then make sure it has; idempotent."""
        if self._proc is None:
            return
        if self.alive:
            with contextlib.suppress(OSError, EOFError, WorkerError):
                self.call("exit", timeout=timeout)
            if self._proc is not None:  # (a reply of "died" has already reaped it)
                self._proc.join(timeout)
        self.kill()

    # -- messages
    def submit(self, cmd: str, **args: Any) -> int:
        """Send a request; returns its id (the reply comes through :meth:`receive` or :meth:`call`)."""
        if self._conn is None:
            raise WorkerError(f"the {self.label} worker is not running", InfeasibleKind.UNAVAILABLE)
        req_id = next(self._ids)
        try:
            self._conn.send_bytes(dumps((req_id, cmd, args)))
        except (OSError, ValueError) as exc:
            raise WorkerError(f"the {self.label} worker process is gone ({exc})") from None
        return req_id

    def receive(self, timeout: float = 0.0) -> list[Reply]:
        """Replies and events available within ``timeout`` (inbox first); a dead process reads as
        one ``died`` reply."""
        out, self.inbox = self.inbox, []
        if self._conn is None:
            return out
        try:
            wait = timeout
            while self._conn.poll(wait):
                kind, req_id, data, err, detail = pickle.loads(self._conn.recv_bytes())
                if kind == "event":
                    out.append(Reply(None, False, data, err, detail))
                else:
                    out.append(Reply(req_id, not err, data, err, detail))
                wait = 0.0
        except (EOFError, OSError):
            code = self._exit_code()
            out.append(Reply(None, False, {}, "died",
                             f"the {self.label} worker process died ({describe_exit(code)})"))
            self.kill()
        return out

    def call(self, cmd: str, timeout: float | None = None, **args: Any) -> Reply:
        """Send a request and wait for its reply (others received meanwhile stay in the inbox).

        A dead process or a timeout raises WorkerError (the process is killed on timeout)."""
        req_id = self.submit(cmd, **args)
        deadline = None if timeout is None else time.monotonic() + timeout
        kept: list[Reply] = []
        try:
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if left is not None and left == 0.0:
                    self.kill()
                    raise WorkerError(f"the {self.label} worker did not answer {cmd!r} within {timeout:g} s",
                                      InfeasibleKind.TIMEOUT)
                if self._conn is None:
                    raise WorkerError(f"the {self.label} worker is not running", InfeasibleKind.UNAVAILABLE)
                ready = mpc.wait([self._conn], timeout=left if left is not None else 1.0)
                if not ready:
                    continue
                for reply in self.receive():
                    if reply.req_id == req_id:
                        return reply
                    if reply.kind == "died":
                        raise WorkerError(reply.detail)
                    kept.append(reply)
        finally:
            self.inbox = kept + self.inbox
