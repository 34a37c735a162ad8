"""Ray rounds on a cluster started the documented way (``ray start --head ...``) against the
cluster the executor starts itself: where the seconds of a round go, and which node settings
bring a ``ray start`` cluster to the auto-started one's speed.

Variants (each a fresh single-node cluster with 1 GPU and ``vram_mb`` = the scenario's budget):

- ``auto``: ``RayExecutor(scenario)`` starts its own local cluster (with its ``LOCAL_SYSTEM_CONFIG``);
- ``ray start``: the README's command as it was, ``ray start --head --num-gpus 1 --resources ...``;
- ``ray start + settings``: the same with the node settings the README now gives
  (``RAY_task_events_report_interval_ms=100 RAY_num_workers_soft_limit=32
  RAY_idle_worker_killing_time_threshold_ms=600000``).

Per round: the whole ``run()`` wall time (what a user waits for) and the trace's E2E (Ray's task
events). Round 0 (cold workers) is reported apart; the rest as median and range.

Run inside a loopback-only network namespace (Ray binds the machine's interface address), with a
token for the clusters (read by Ray when it is imported):
    RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$(python -c 'import uuid; print(uuid.uuid4().hex)') \
      unshare -n sh -c 'ip link set lo up; python benchmarks/ray_cluster_setup.py --rounds 6'
Needs the [ray] extra and the tiny tools (torch).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hetsched.exec.devices import cpu_model
from hetsched.exec.ray import RayExecutor
from hetsched.model import Mapping, Placement, Scenario
from hetsched.model.files import load_scenario
from hetsched.search.reference import reference

SETTINGS = {
    "RAY_task_events_report_interval_ms": "100",
    "RAY_num_workers_soft_limit": "32",
    "RAY_idle_worker_killing_time_threshold_ms": "600000",
}
"""The node settings the README's ``ray start`` command sets."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_head(folder: Path, budget_mb: float, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """``ray start --head`` as the README says (plus a private temp dir and port), blocking in its own process group."""
    port = free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    argv = [ray_bin, "start", "--head", "--port", str(port), "--num-gpus", "1", "--resources",
            json.dumps({"vram_mb": int(budget_mb)}), "--temp-dir", str(folder), "--block",
            "--node-ip-address", "127.0.0.1", "--disable-usage-stats", "--dashboard-port", str(free_port())]
    log = (folder.parent / f"{folder.name}.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.3)
    time.sleep(3)  # the raylet registers after the GCS opens its port
    return proc, f"127.0.0.1:{port}"


def stop(proc: subprocess.Popen[bytes]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def rounds(ex: RayExecutor, mappings: list[Mapping], n: int) -> list[tuple[str, float, float | None]]:
    out = []
    for i in range(n):
        m = mappings[i % len(mappings)]
        t0 = time.monotonic()
        tr = ex.run(m)
        wall = time.monotonic() - t0
        out.append((m.code(), wall, tr.e2e_ms if tr.feasible else None))
        if not tr.feasible:
            print(f"  round {i}: infeasible: {tr.reason}", file=sys.stderr)
    return out


def summary(name: str, data: list[tuple[str, float, float | None]]) -> str:
    warm = [w for _, w, _ in data[1:]]
    e2e = [e for _, _, e in data[1:] if e is not None]
    return (f"| {name} | {data[0][1]:.2f} | {statistics.median(warm):.2f} ({min(warm):.2f}-{max(warm):.2f}) | "
            f"{statistics.median(e2e):.0f} ({min(e2e):.0f}-{max(e2e):.0f}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--scenario", default="rag_tiny")
    ap.add_argument("--with-reference", action="store_true",
                    help="alternate all-CPU rounds with the reference mapping (its gpu_now actors start every round)")
    args = ap.parse_args()
    sc: Scenario = load_scenario(args.scenario)
    ref = reference(sc, "auto") if args.with_reference else None
    mappings = [sc.uniform(Placement.CPU)] + ([ref.mapping] if ref is not None else [])
    if os.environ.get("RAY_AUTH_MODE") != "token" or not os.environ.get("RAY_AUTH_TOKEN"):
        sys.exit("set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN before running (see the docstring)")
    base = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    for k in SETTINGS:
        base.pop(k, None)
    root = Path(tempfile.mkdtemp(prefix="hs-raysetup-"))
    lines = []
    try:
        variants = (("ray start (README as it was)", base), ("ray start + README settings", {**base, **SETTINGS}))
        for name, env in variants:
            folder = root / f"t{len(lines)}"
            folder.mkdir()
            proc, address = start_head(folder, sc.machine.vram_budget_mb, env)
            try:
                with RayExecutor(sc, address=address) as ex:
                    data = rounds(ex, mappings, args.rounds)
            finally:
                stop(proc)
            lines.append(summary(name, data))
            print(lines[-1], flush=True)
        with RayExecutor(sc, temp_dir=str(root / "auto")) as ex:
            data = rounds(ex, mappings, args.rounds)
        lines.append(summary("auto-started by the executor", data))
        print(lines[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.scenario}, mappings alternating {[m.code() for m in mappings]}, {args.rounds} rounds each; "
          f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print("| cluster | round 0 run() s | later rounds run() s, median (range) | E2E ms, median (range) |")
    print("|---|---|---|---|")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
