"""Chrome trace-event export of executed schedules, for Perfetto or chrome://tracing.

One process per round and device (CPU, GPU), and per machine for a multi-machine trace (the Ray
executor's ``Trace.hosts``), one named thread lane per concurrently running task (assigned
greedily, so the lanes show the parallelism: ``CPU 1``, ``GPU 2``, ``GPU queue 1``), queue waits
and loads as their own slices, and VRAM in use as a counter track against the budget, one sample
per change. A window of requests (a workload's round) adds a process with one lane per request,
and its device processes show every request's nodes (``A#12``). Imports only the model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from hetsched.model import Placement, Trace
from hetsched.model.files import write_output

_US = 1000.0  # trace-event timestamps are microseconds; ours are ms


def lanes(intervals: Sequence[tuple[float, float, str]]) -> dict[str, int]:
    """Greedy interval partitioning by first fit (earliest start first, into the lowest lane whose
    last task has ended; Kleinberg & Tardos, ch. 4.1): overlapping tasks get different lanes, so
    parallel work shows side by side.

    The lanes' end times sit in a min-tree (each inner slot the earliest end below it; lanes not
    opened yet count as free), so finding the first free lane costs O(log n) and a fan-out of
    10,000 parallel tasks does not cost 10,000 x 10,000 lane checks."""
    order = sorted(intervals)
    size = 1
    while size < len(order):
        size *= 2
    ends = [-math.inf] * (2 * size)  # ends[size + lane]: when the lane's last task ends
    out: dict[str, int] = {}
    for start, end, key in order:
        free_at = start + 1e-9
        slot = 1
        while slot < size:  # down to the first lane that has ended by now
            slot = 2 * slot if ends[2 * slot] <= free_at else 2 * slot + 1
        out[key] = slot - size
        ends[slot] = end
        while slot > 1:
            slot //= 2
            ends[slot] = min(ends[2 * slot], ends[2 * slot + 1])
    return out


def _host_label(trace: Trace, host: str) -> str:
    """``node 127.0.0.1 (1a2b3c4d)`` for a Ray node of a multi-machine trace."""
    addr = next((h.address for h in trace.hosts if h.host == host), "")
    return f"node {addr} ({host[:8]})" if addr else f"node {host[:8]}"


def trace_events(traces: Iterable[tuple[str, Trace]]) -> list[dict[str, Any]]:
    """Trace events for labelled traces (label, e.g. ``round 3``, becomes the process name).

    A trace from one machine gets a CPU and a GPU process; a multi-machine trace (``Trace.hosts``,
    the Ray executor) gets a CPU and a GPU process per machine, named by its address, each GPU
    process with that machine's VRAM counter against its own budget.
    """
    events: list[dict[str, Any]] = []
    next_pid = 1
    for label, given in traces:
        trace = _every_request(given) if given.requests else given
        hosts = [h.host for h in trace.hosts] or [""]
        for n in trace.nodes.values():
            if n.host not in hosts:
                hosts.append(n.host)
        pids: dict[tuple[str, bool], int] = {}
        for host in hosts:
            where = f" · {_host_label(trace, host)}" if host else ""
            for on_gpu, device in ((False, "CPU"), (True, "GPU")):
                pids[(host, on_gpu)] = next_pid
                events.append({"ph": "M", "name": "process_name", "pid": next_pid,
                               "args": {"name": f"{label}{where} · {device}"}})
                next_pid += 1
        if not trace.feasible:
            events.append({"ph": "i", "name": f"infeasible: {trace.reason}", "pid": pids[(hosts[0], True)], "tid": 0,
                           "ts": 0, "s": "p"})
            if not trace.nodes:
                continue
        lane_of: dict[str, int] = {}
        for (host, on_gpu), pid in pids.items():
            group = [n for n in trace.nodes.values() if n.host == host and n.placement.on_gpu == on_gpu]
            own = lanes([((n.admitted_ms if on_gpu else n.start_ms), n.end_ms, n.node) for n in group])
            lane_of.update(own)
            device = "GPU" if on_gpu else "CPU"
            named = [(tid, f"{device} {tid + 1}") for tid in sorted(set(own.values()))]
            named += [(100 + tid, f"{device} queue {tid + 1}") for tid in sorted({own[n.node] for n in group
                                                                                  if n.wait_ms > 0})]
            for tid, name in named:
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
                events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                               "args": {"sort_index": tid}})
        for n in trace.nodes.values():
            pid = pids[(n.host, n.placement.on_gpu)]
            tid = lane_of[n.node]
            args = {"tool": n.tool, "placement": n.placement.value, "ready_ms": n.ready_ms, "wait_ms": n.wait_ms}
            if n.host:
                args["host"] = n.host
            if n.wait_ms > 0:
                events.append({"ph": "X", "name": f"{n.node} waits for VRAM" if n.placement is Placement.GPU_QUEUE
                               else f"{n.node} waits", "cat": "queue", "pid": pid, "tid": 100 + tid,
                               "ts": n.ready_ms * _US, "dur": n.wait_ms * _US, "args": args})
            if n.load_ms > 0:
                events.append({"ph": "X", "name": f"{n.node} load", "cat": "load", "pid": pid, "tid": tid,
                               "ts": n.admitted_ms * _US, "dur": n.load_ms * _US, "args": args})
            events.append({"ph": "X", "name": f"{n.node} {n.tool}", "cat": n.placement.value, "pid": pid, "tid": tid,
                           "ts": n.start_ms * _US, "dur": n.run_ms * _US, "args": args})
        timelines = [(h.host, h.vram_timeline, h.vram_budget_mb) for h in trace.hosts if h.vram_budget_mb > 0]
        if not trace.hosts:
            timelines = [("", trace.vram_timeline, trace.vram_budget_mb)]
        end = trace.e2e_ms if trace.e2e_ms is not None else max((n.end_ms for n in trace.nodes.values()), default=0.0)
        for host, timeline, budget in timelines:
            samples = [(p.t_ms, p.used_mb) for p in timeline]
            if trace.feasible and samples and samples[-1][1] != 0.0 and samples[-1][0] < end:
                samples.append((end, 0.0))  # the run ends with nothing resident: one sample, not two
            for t_ms, used in samples:
                events.append({"ph": "C", "name": "VRAM (MB)", "pid": pids[(host, True)], "ts": t_ms * _US,
                               "args": {"used": used, "budget": budget}})
        if given.requests:
            events.extend(_request_lanes(label, given, next_pid))
            next_pid += 1
    return events


def _every_request(trace: Trace) -> Trace:
    """A window's trace with every request's nodes (``A#12``: node A of request 12) on the window's
    clock, for the device processes."""
    nodes = {f"{n}#{r.request}": replace(nt, node=f"{n}#{r.request}") for r in trace.requests
             for n, nt in r.nodes.items()}
    return replace(trace, nodes=nodes, e2e_ms=max(r.end_ms for r in trace.requests))


def _request_lanes(label: str, trace: Trace, pid: int) -> list[dict[str, Any]]:
    """One process for a window of requests: a lane per request (``request 12``; its parallel
    branches on ``request 12 · 2``...) with its nodes as slices (ready to end) and a mark where it
    was sent, and counters for the requests in flight and the CPU and GPU utilization over time."""
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": pid,
                                     "args": {"name": f"{label} · requests"}}]
    tid = 0
    for r in trace.requests:
        own = lanes([(nt.ready_ms, nt.end_ms, n) for n, nt in r.nodes.items()])
        width = max(own.values(), default=0) + 1
        for k in range(width):
            name = f"request {r.request}" + (f" · {k + 1}" if k else "")
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid + k, "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid + k,
                           "args": {"sort_index": tid + k}})
        client = {"client": r.client} if r.client >= 0 else {}
        for n, nt in r.nodes.items():
            args = {"request": r.request, **client, "tool": nt.tool, "placement": nt.placement.value,
                    "wait_ms": nt.wait_ms, "load_ms": nt.load_ms}
            events.append({"ph": "X", "name": f"{n} {nt.tool}", "cat": nt.placement.value, "pid": pid,
                           "tid": tid + own[n], "ts": nt.ready_ms * _US, "dur": (nt.end_ms - nt.ready_ms) * _US,
                           "args": args})
        events.append({"ph": "i", "name": f"request {r.request} sent", "pid": pid, "tid": tid,
                       "ts": r.release_ms * _US, "s": "t",
                       "args": {"latency_ms": r.latency_ms, **client}})
        tid += width
    steps = sorted([(r.release_ms, 1) for r in trace.requests] + [(r.end_ms, -1) for r in trace.requests],
                   key=lambda e: (e[0], e[1]))
    flight = 0
    for t_ms, delta in steps:  # requests in flight: exact steps
        flight += delta
        events.append({"ph": "C", "name": "requests in flight", "pid": pid, "ts": t_ms * _US,
                       "args": {"requests": flight}})
    if trace.load is not None:  # device utilization over time: the window's bucket averages
        for s in trace.load.timeline:
            events.append({"ph": "C", "name": "utilization (%)", "pid": pid, "ts": s.t_ms * _US,
                           "args": {"cpu": round(100 * s.cpu_util, 1), "gpu": round(100 * s.gpu_util, 1)}})
    return events


def write_chrome_trace(path: Path | str, traces: Iterable[tuple[str, Trace]]) -> None:
    """Write ``{"traceEvents": [...]}`` to ``path``."""
    payload = {"traceEvents": trace_events(traces), "displayTimeUnit": "ms"}
    write_output(path, json.dumps(payload, indent=1), what="trace")
