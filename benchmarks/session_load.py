"""Throughput and latency of an ``hs.Session`` serving K client threads: overlapping requests vs one at a time.

K threads each send requests to one session in a closed loop (the next when the last returned),
on the bundled tiny real tools (``rag_tiny``: PDF text, OCR, chunk, embed, search, figure
embeddings, rerank, answer; the in-process executor, GPU placements on the stand-in device unless
``--device`` says otherwise). Two sessions side by side, interleaved run by run so they see the same
machine:

- ``one at a time``: ``max_in_flight=1`` (a session's behaviour before overlapping requests: the
  requests queue in arrival order);
- ``overlapping``: the default (requests run at once, sharing the CPU pool, the resident tools and
  the device's FIFO queue).

Per mapping and K: throughput (requests / wall time of the run), p50 and p95 of the latency each
client saw (``submit``'s wall time, waiting included), the ratio overlapping / one at a time. The
mappings are fixed (the policy's decisions are not what is measured): all-CPU, and the one-request
best that can serve overlapping requests (``benchmarks/load_real.py``'s ``deployable``).

    python benchmarks/session_load.py [--clients 1,2,4,8] [--requests 8] [--repeats 2]
                                      [--device standin|auto|cuda] [--device-threads 1] [--out FILE.json]

``--requests``: requests per client per run. Timing on a shared machine is noisy: the load average
is printed before and after; ratios come from runs interleaved on the same machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import hetsched as hs
from hetsched.exec.devices import cpu_model
from hetsched.model import Mapping, Placement, Proposal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_real import deployable

SCENARIO = "rag_tiny"
MODES = (("one at a time", 1), ("overlapping", None))


class Fixed(hs.Policy):
    """Proposes one mapping every time."""

    name = "fixed"

    def __init__(self, mapping: Mapping) -> None:
        super().__init__()
        self.fixed = mapping

    def propose(self, history: Any, probes: Any = (), observations: Any = None) -> Proposal:
        return Proposal(self.fixed, rationale="fixed")


def p(values: list[float], q: float) -> float:
    """Nearest-rank percentile (always one request's latency)."""
    s = sorted(values)
    return s[max(0, math.ceil(q / 100.0 * len(s)) - 1)]


def run(sc: hs.Scenario, mapping: Mapping, clients: int, requests: int, max_in_flight: int | None,
        options: dict[str, Any]) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    with hs.Session(sc, policy=Fixed(mapping), store=False, executor_options=options,
                    max_in_flight=max_in_flight) as s:
        s.submit()  # loads the tools (CPU handles, resident gpu_now tools): not measured

        def client() -> None:
            for _ in range(requests):
                t = time.perf_counter()
                try:
                    s.submit()
                except BaseException as exc:  # reported, the run is marked failed
                    with lock:
                        errors.append(exc)
                    return
                with lock:
                    latencies.append((time.perf_counter() - t) * 1000.0)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        begin = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall_s = time.perf_counter() - begin
        ex = s.executor
        peak = getattr(ex, "vram_peak_mb", 0.0)
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed; first: {errors[0]!r}")
    return {"requests": len(latencies), "wall_s": wall_s, "throughput_per_s": len(latencies) / wall_s,
            "latencies_ms": latencies, "vram_peak_mb": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=8, help="requests per client per run")
    ap.add_argument("--repeats", type=int, default=2, help="runs per mode, interleaved")
    ap.add_argument("--device", default="standin")
    ap.add_argument("--device-threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    sc = hs.load_scenario(SCENARIO)
    options = {"device": args.device, "device_threads": args.device_threads}
    mappings = {"all-CPU": sc.uniform(Placement.CPU), "deployable": deployable(sc)}
    print(f"# session_load: {SCENARIO}, device {args.device} (device_threads {args.device_threads}), "
          f"{args.requests} requests per client per run, {args.repeats} runs per mode")
    print(f"# machine: {platform.node()} {cpu_model()} ({os.cpu_count()} cores), Python {platform.python_version()}; "
          f"load average before {os.getloadavg()[0]:.2f}")
    for name, m in mappings.items():
        print(f"# {name}: {m.to_text() if hasattr(m, 'to_text') else m}")
    rows: list[dict[str, Any]] = []
    print("\n| mapping | K | mode | throughput (req/s) | p50 ms | p95 ms | overlapping / one at a time |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- |")
    for name, mapping in mappings.items():
        for k in clients:
            got: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in MODES}
            for _ in range(args.repeats):
                for label, cap in MODES:
                    got[label].append(run(sc, mapping, k, args.requests, cap, options))
            summary = {}
            for label, _ in MODES:
                lat = [x for r in got[label] for x in r["latencies_ms"]]
                thr = statistics.median(r["throughput_per_s"] for r in got[label])
                summary[label] = {"throughput_per_s": thr, "p50_ms": p(lat, 50), "p95_ms": p(lat, 95),
                                  "requests": len(lat), "vram_peak_mb": max(r["vram_peak_mb"] for r in got[label])}
            one, over = summary["one at a time"], summary["overlapping"]
            ratio = (f"throughput x{over['throughput_per_s'] / one['throughput_per_s']:.2f}, "
                     f"p95 x{over['p95_ms'] / one['p95_ms']:.2f}")
            for label, _ in MODES:
                s = summary[label]
                print(f"| {name} | {k} | {label} | {s['throughput_per_s']:.2f} | {s['p50_ms']:.0f} | "
                      f"{s['p95_ms']:.0f} | {ratio if label == 'overlapping' else ''} |", flush=True)
            rows.append({"mapping": name, "clients": k, **{label: summary[label] for label, _ in MODES}})
    print(f"\n# load average after {os.getloadavg()[0]:.2f}; budget {sc.machine.vram_budget_mb:g} MB, "
          f"peak VRAM held (executor's accounting) {max(r['overlapping']['vram_peak_mb'] for r in rows):.1f} MB")
    if args.out:
        args.out.write_text(json.dumps({"scenario": SCENARIO, "device": args.device, "rows": rows,
                                        "machine": {"cpu": cpu_model(), "cores": os.cpu_count()}}, indent=1))


if __name__ == "__main__":
    main()
