"""Chrome trace-event export of executed schedules, for Perfetto or chrome://tracing.

One process per round and device (CPU, GPU), one named thread lane per concurrently running
task (assigned greedily, so the lanes show the parallelism: ``CPU 1``, ``GPU 2``, ``GPU queue 1``),
queue waits and loads as their own slices, and VRAM in use as a counter track against the
budget, one sample per change. Imports only the model.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hetsched.model import Placement, Trace

_US = 1000.0  # trace-event timestamps are microseconds; ours are ms


def lanes(intervals: Sequence[tuple[float, float, str]]) -> dict[str, int]:
    """Greedy interval partitioning (earliest start first, lowest free lane; Kleinberg & Tardos,
    ch. 4.1): overlapping tasks get different lanes, so parallel work shows side by side.

    O(n log n) with two heaps (busy lanes by end time, free lanes by index), so a fan-out of
    10,000 parallel tasks does not cost 10,000 x 10,000 lane checks."""
    busy: list[tuple[float, int]] = []  # (end, lane)
    free: list[int] = []  # lane indices
    n_lanes = 0
    out: dict[str, int] = {}
    for start, end, key in sorted(intervals):
        while busy and busy[0][0] <= start + 1e-9:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, n_lanes = n_lanes, n_lanes + 1
        heapq.heappush(busy, (end, lane))
        out[key] = lane
    return out


def trace_events(traces: Iterable[tuple[str, Trace]]) -> list[dict[str, Any]]:
    """Trace events for labelled traces (label, e.g. ``round 3``, becomes the process name)."""
    events: list[dict[str, Any]] = []
    for index, (label, trace) in enumerate(traces):
        cpu_pid, gpu_pid = 2 * index + 1, 2 * index + 2
        events.append({"ph": "M", "name": "process_name", "pid": cpu_pid, "args": {"name": f"{label} · CPU"}})
        events.append({"ph": "M", "name": "process_name", "pid": gpu_pid, "args": {"name": f"{label} · GPU"}})
        if not trace.feasible:
            events.append(
                {"ph": "i", "name": f"infeasible: {trace.reason}", "pid": gpu_pid, "tid": 0, "ts": 0, "s": "p"}
            )
            continue
        cpu = [(n.start_ms, n.end_ms, n.node) for n in trace.nodes.values() if n.placement is Placement.CPU]
        gpu = [(n.admitted_ms, n.end_ms, n.node) for n in trace.nodes.values() if n.placement.on_gpu]
        cpu_lanes, gpu_lanes = lanes(cpu), lanes(gpu)
        lane_of = {**cpu_lanes, **gpu_lanes}
        queue_lanes = {gpu_lanes[n.node] for n in trace.nodes.values() if n.placement.on_gpu and n.wait_ms > 0}
        named = [(cpu_pid, tid, f"CPU {tid + 1}") for tid in sorted(set(cpu_lanes.values()))]
        named += [(gpu_pid, tid, f"GPU {tid + 1}") for tid in sorted(set(gpu_lanes.values()))]
        named += [(gpu_pid, 100 + tid, f"GPU queue {tid + 1}") for tid in sorted(queue_lanes)]
        for pid, tid, name in named:
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        for n in trace.nodes.values():
            pid = gpu_pid if n.placement.on_gpu else cpu_pid
            tid = lane_of[n.node]
            args = {"tool": n.tool, "placement": n.placement.value, "ready_ms": n.ready_ms, "wait_ms": n.wait_ms}
            if n.wait_ms > 0:
                events.append(
                    {
                        "ph": "X",
                        "name": f"{n.node} waits for VRAM",
                        "cat": "queue",
                        "pid": gpu_pid,
                        "tid": 100 + tid,
                        "ts": n.ready_ms * _US,
                        "dur": n.wait_ms * _US,
                        "args": args,
                    }
                )
            if n.load_ms > 0:
                events.append(
                    {
                        "ph": "X",
                        "name": f"{n.node} load",
                        "cat": "load",
                        "pid": pid,
                        "tid": tid,
                        "ts": n.admitted_ms * _US,
                        "dur": n.load_ms * _US,
                        "args": args,
                    }
                )
            events.append(
                {
                    "ph": "X",
                    "name": f"{n.node} {n.tool}",
                    "cat": n.placement.value,
                    "pid": pid,
                    "tid": tid,
                    "ts": n.start_ms * _US,
                    "dur": n.run_ms * _US,
                    "args": args,
                }
            )
        samples = [(p.t_ms, p.used_mb) for p in trace.vram_timeline]
        if trace.e2e_ms is not None and samples and samples[-1][1] != 0.0 and samples[-1][0] < trace.e2e_ms:
            samples.append((trace.e2e_ms, 0.0))  # the run ends with nothing resident: one sample, not two
        for t_ms, used in samples:
            events.append(
                {
                    "ph": "C",
                    "name": "VRAM (MB)",
                    "pid": gpu_pid,
                    "ts": t_ms * _US,
                    "args": {"used": used, "budget": trace.vram_budget_mb},
                }
            )
    return events


def write_chrome_trace(path: Path | str, traces: Iterable[tuple[str, Trace]]) -> None:
    """Write ``{"traceEvents": [...]}`` to ``path``."""
    payload = {"traceEvents": trace_events(traces), "displayTimeUnit": "ms"}
    Path(path).write_text(json.dumps(payload, indent=1), encoding="utf-8")
