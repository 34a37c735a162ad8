"""Chrome trace-event export of executed schedules, for Perfetto or chrome://tracing.

One process per round and device (CPU, GPU), one thread lane per concurrently running task
(assigned greedily, so the lanes show the parallelism), queue waits and loads as their own
slices, and VRAM in use as a counter track against the budget. Imports only the model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hetsched.model import Placement, Trace

_US = 1000.0  # trace-event timestamps are microseconds; ours are ms


def lanes(intervals: Sequence[tuple[float, float, str]]) -> dict[str, int]:
    """Greedy interval partitioning (earliest start first, first free lane; Kleinberg & Tardos,
    ch. 4.1): overlapping tasks get different lanes, so parallel work shows side by side."""
    lane_end: list[float] = []
    out: dict[str, int] = {}
    for start, end, key in sorted(intervals):
        for i, busy_until in enumerate(lane_end):
            if busy_until <= start + 1e-9:
                lane_end[i] = end
                out[key] = i
                break
        else:
            lane_end.append(end)
            out[key] = len(lane_end) - 1
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
        lane_of = {**lanes(cpu), **lanes(gpu)}
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
        for p in trace.vram_timeline:
            events.append(
                {
                    "ph": "C",
                    "name": "VRAM (MB)",
                    "pid": gpu_pid,
                    "ts": p.t_ms * _US,
                    "args": {"used": p.used_mb, "budget": trace.vram_budget_mb},
                }
            )
        if trace.e2e_ms is not None:
            events.append(
                {
                    "ph": "C",
                    "name": "VRAM (MB)",
                    "pid": gpu_pid,
                    "ts": trace.e2e_ms * _US,
                    "args": {"used": 0.0, "budget": trace.vram_budget_mb},
                }
            )
    return events


def write_chrome_trace(path: Path | str, traces: Iterable[tuple[str, Trace]]) -> None:
    """Write ``{"traceEvents": [...]}`` to ``path``."""
    payload = {"traceEvents": trace_events(traces), "displayTimeUnit": "ms"}
    Path(path).write_text(json.dumps(payload, indent=1), encoding="utf-8")
