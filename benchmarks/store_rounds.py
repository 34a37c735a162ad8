"""Storing 100-node rounds: what recording a round in the run store costs, old code vs new, side by side.

For each policy, runs ``--rounds`` rounds of one generated ``--nodes``-node workflow (three-way,
layered, seed 0) through the loop with a recorder that writes each round into a fresh run
store, and times, per round:

- ``round``: the loop's own work for the round (decision, probes, simulations), recording excluded;
- ``store``: ``RunStore.record_round`` (one transaction: the round row, its trace, its probes
  with their traces, the monitor's observations, the decider transcript);
- ``line``: what the scale/random suites wrote before they used the store: a per-round summary
  (code, feasibility, E2E, the noise-free E2E of its mapping, probes) appended to a JSON-lines file;
- ``read``: reading the rounds back whole (``RunStore.rounds``), and, where the code has it, the
  round summaries alone (``RunStore.outcomes``, which decodes no trace: what the suites read).

With ``--baseline-src BASE/src`` the same worker runs once on that source tree (the old store)
and once on this one, in separate processes, and the table puts them side by side.

Run: python benchmarks/store_rounds.py [--nodes 100] [--rounds 10] [--baseline-src BASE/src] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

POLICIES: dict[str, tuple[str, dict[str, Any]]] = {
    "agentic:rules": ("agentic", {"decider": "rules"}),
    "ucb1": ("ucb1", {}),
    "greedy-mem": ("greedy-mem", {}),
}


def worker(nodes: int, rounds: int) -> list[dict[str, Any]]:
    """Time one tree's store on every policy (runs in the process whose ``hetsched`` is under test)."""
    from hetsched.bench.generate import WorkflowSpec, random_scenario
    from hetsched.loop import LoopConfig, run_rounds
    from hetsched.model import Mode, RoundRecord, RunKey
    from hetsched.policies import make_policy
    from hetsched.sim import Simulator
    from hetsched.store import RunStore

    sc = random_scenario(WorkflowSpec("layered", nodes, Mode.THREE_WAY, 0))
    exact = Simulator(sc, noise=False)
    out = []
    for label, (name, options) in POLICIES.items():
        folder = Path(tempfile.mkdtemp(prefix="store-rounds-"))
        store_s: list[float] = []
        line_s: list[float] = []
        with RunStore(folder / "runs.sqlite") as store, (folder / "runs.jsonl").open("a") as lines:
            run_id = store.create_run(RunKey(scenario=sc, policy=name, options=options, seed=0, rounds=rounds))

            def record(r: RoundRecord) -> None:
                t0 = time.perf_counter()
                store.record_round(run_id, r)  # noqa: B023 (one run per loop pass)
                store_s.append(time.perf_counter() - t0)  # noqa: B023
                t0 = time.perf_counter()
                summary = {"round": r.round, "code": r.mapping.code(), "feasible": r.trace.feasible,
                           "kind": None if r.trace.kind is None else r.trace.kind.value, "e2e_ms": r.trace.e2e_ms,
                           "true_e2e_ms": exact.e2e(r.mapping) if r.trace.feasible else None,
                           "probes": len(r.probes)}
                lines.write(json.dumps(summary) + "\n")
                lines.flush()
                line_s.append(time.perf_counter() - t0)  # noqa: B023

            t0 = time.perf_counter()
            run_rounds(sc, make_policy(name, **options), LoopConfig(rounds=rounds, seed=0), recorder=record)
            total_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            store.rounds(run_id)
            read_s = time.perf_counter() - t0
            outcomes_s = None
            if hasattr(store, "outcomes"):
                t0 = time.perf_counter()
                store.outcomes(run_id)
                outcomes_s = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in folder.glob("runs.sqlite*"))
        out.append({
            "policy": label,
            "round_ms": 1000 * (total_s - sum(store_s) - sum(line_s)) / rounds,
            "store_ms": 1000 * sum(store_s) / rounds,
            "line_ms": 1000 * sum(line_s) / rounds,
            "read_ms": 1000 * read_s / rounds,
            "outcomes_ms": None if outcomes_s is None else 1000 * outcomes_s / rounds,
            "store_kb": size / 1024 / rounds,
        })
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()
    return out


def run_tree(src: Path, nodes: int, rounds: int) -> list[dict[str, Any]]:
    """:func:`worker` in a fresh interpreter importing ``hetsched`` from ``src``."""
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import store_rounds; "
            f"print(json.dumps(store_rounds.worker({nodes}, {rounds})))")
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1, help="repeat and keep each figure's minimum")
    parser.add_argument("--baseline-src", type=Path, help="the old code's src folder (e.g. a git archive of main)")
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1] / "src"
    trees = ([("old", args.baseline_src.resolve())] if args.baseline_src else []) + [("new", here)]
    results: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.repeat):
        for name, src in trees:  # alternate, so load on the machine hits both alike
            got = run_tree(src, args.nodes, args.rounds)
            if name not in results:
                results[name] = got
                continue
            for kept, new in zip(results[name], got, strict=True):
                for k, v in new.items():
                    if isinstance(v, float) and kept[k] is not None:
                        kept[k] = min(kept[k], v)
    print(f"{args.nodes}-node workflow (layered, three-way), {args.rounds} rounds; {platform.node()}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print("| tree | policy | round ms | store ms (share of round) | summary line ms | store KB | "
          "read back whole ms | read summaries ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, rows in results.items():
        for r in rows:
            share = 100 * r["store_ms"] / r["round_ms"]
            print(f"| {name} | {r['policy']} | {fmt(r['round_ms'])} | {fmt(r['store_ms'])} ({share:.0f}%) | "
                  f"{fmt(r['line_ms'])} | {r['store_kb']:.0f} | {fmt(r['read_ms'])} | {fmt(r['outcomes_ms'])} |")


if __name__ == "__main__":
    main()
